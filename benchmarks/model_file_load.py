"""nx.nn.load of a BERT-tiny-sized model file (hidden 128, 2 layers, vocab 30522: 4.4 M float32
parameters, ~17 MB): load time and peak RSS, this core's reader (memory-mapped) against the reader
of an earlier commit (the whole file read, then each tensor copied).

    NEURENIX_EMULATE=cuda,tpu,npu,edgetpu .venv/bin/python benchmarks/model_file_load.py --base b004682

Building the model needs torch and transformers (the parent only); each measurement is a fresh
interpreter that imports neurenix_core, creates the CPU backend (one tensor) and then times
``load_model`` alone. Peak RSS is the child's VmHWM after loading (reset through
/proc/self/clear_refs just before) minus its RSS before; RssAnon and RssFile are what loading added
to each (/proc/self/status): pages of the mapping are RssFile, which the kernel can drop and read
again and which processes mapping the same file share. The readers alternate, so load on the machine hits both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import gc, json, sys, time
import numpy as np
import neurenix_core as nx
reader, path = sys.argv[1:3]
nx.asarray(np.zeros(4, np.float32))  # the CPU backend: created once per process, not part of loading
if reader == "base":
    sys.path.insert(0, sys.argv[3])
    from old_model_file import load_model
    kwargs = {}
else:
    from neurenix_core.graph.models.model_file import load_model
    kwargs = {"writable": reader == "writable"}
def status():
    return {k: int(v.split()[0]) / 1024 for k, v in (line.split(":", 1) for line in open("/proc/self/status"))
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile")}
gc.collect()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM (the peak RSS) to the current RSS: the peak below is the load's
before = status()
t = time.perf_counter()
model = load_model(path, **kwargs)
seconds = time.perf_counter() - t
after = status()
print(json.dumps({"seconds": seconds, "peak_mb": after["VmHWM"] - before["VmRSS"], "RssAnon": after["RssAnon"] - before["RssAnon"],
                  "RssFile": after["RssFile"] - before["RssFile"]}))
"""


def _bert_tiny(path: Path) -> None:
    import torch
    from transformers import BertConfig, BertModel

    import neurenix_core as nx

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
                        max_position_embeddings=512)
    ids = {"input_ids": torch.randint(0, 30522, (1, 16)), "attention_mask": torch.ones(1, 16, dtype=torch.int64)}
    nx.nn.save(nx.nn.from_torch(BertModel(config).eval(), ids), path)


def _old_reader(rev: str, folder: Path) -> None:
    """The model-file reader of ``rev`` as a module of its own (it imported ``tensor_file`` from the core)."""
    for name in ("model_file", "tensor_file"):
        text = subprocess.run(["git", "show", f"{rev}:neurenix_core/nn/{name}.py"], cwd=ROOT, check=True, capture_output=True,
                              text=True).stdout
        (folder / f"old_{name}.py").write_text(text.replace("from neurenix_core.nn import tensor_file", "import old_tensor_file as tensor_file"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="b004682", help="the commit whose reader is the baseline (before the memory-mapped reader)")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "bert_tiny.nxm"
        _bert_tiny(path)
        _old_reader(args.base, folder)
        runs: dict[str, list[dict[str, float]]] = {"base": [], "mapped": [], "writable": []}
        for _ in range(args.repeat):
            for reader, rows in runs.items():
                out = subprocess.run([sys.executable, "-c", _CHILD, reader, str(path), str(folder)], check=True, capture_output=True,
                                     text=True).stdout
                rows.append(json.loads(out.strip().splitlines()[-1]))
        print(f"{path.stat().st_size / 1e6:.1f} MB file, median (min) of {args.repeat} fresh processes each")
        print(f"{'reader':<10} {'load ms':>16} {'peak RSS +MB':>13} {'+RssAnon MB':>11} {'+RssFile MB':>11}")
        for reader, rows in runs.items():
            ms = [r["seconds"] * 1000 for r in rows]
            med = {k: statistics.median(r[k] for r in rows) for k in ("peak_mb", "RssAnon", "RssFile")}
            print(f"{reader:<10} {statistics.median(ms):>8.1f} ({min(ms):5.1f}) {med['peak_mb']:>13.1f} {med['RssAnon']:>11.1f} "
                  f"{med['RssFile']:>11.1f}")


if __name__ == "__main__":
    main()
