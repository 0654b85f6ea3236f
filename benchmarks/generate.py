"""Time per generated token with the key/value cache: nx.generate on cpu:0 (dynamic and
fixed-capacity caches) against transformers' own ``generate`` on PyTorch CPU, in the same run,
at positions 16, 64 and 256, pinned to 1 and to 2 threads.

    .venv/bin/python benchmarks/generate.py            # full run (a few minutes)
    .venv/bin/python benchmarks/generate.py --quick    # smoke run
    .venv/bin/python benchmarks/generate.py --json out.json

Models: small GPT-2 and Llama configs built from configs (random weights, nothing downloaded;
4 layers, width 256, vocabulary 2048, 512 positions). A prompt of 8 tokens, then greedy decoding
of 256 tokens with no stop token; the time of each step is read as the tokens come out (nx's
``stream=True``, a transformers streamer), and the time per token at position p is the median of
the steps p-4 .. p+4, best over rounds. Rounds are interleaved (nx dynamic, nx fixed, torch, in a
shuffled order per round) so load on the shared machine hits every contender alike. Each thread
count runs in its own interpreter: BLAS pools (NumPy's, which cpu:0 uses, and PyTorch's) are sized
at import from OMP/OPENBLAS/MKL_NUM_THREADS, and torch.set_num_threads is set too; both are read
back and printed. The goal is a flat cost per token (position 256 <= 1.5x position 16); nothing
is asserted: the numbers are for people.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from neurenix_core.benchkit import THREAD_VARS as _THREAD_VARS
from neurenix_core.benchkit import run_child

POSITIONS = (16, 64, 256)
PROMPT = 8
NEW = 256

_SMALL = {"vocab_size": 2048, "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "intermediate_size": 1024,
          "max_position_embeddings": 512}


def _model(name: str) -> Any:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if name == "gpt2":
        return GPT2LMHeadModel(GPT2Config(vocab_size=2048, n_embd=256, n_layer=4, n_head=8, n_positions=512)).eval()
    return LlamaForCausalLM(LlamaConfig(num_key_value_heads=4, **_SMALL)).eval()


class _Clock:
    """A transformers streamer that stamps the time of every put (the prompt first, then each token)."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def put(self, value: Any) -> None:
        self.stamps.append(time.perf_counter())

    def end(self) -> None:
        pass


def _per_token(start: float, stamps: list[float]) -> list[float]:
    """Seconds per step: step i produced the token at position PROMPT + i."""
    from itertools import pairwise

    return [b - a for a, b in pairwise([start, *stamps])]


def _at(steps: list[float], position: int) -> float:
    import numpy as np

    i = position - PROMPT
    return float(np.median(steps[max(1, i - 4):i + 5]))  # step 0 is the prefill


def measure(threads: int, quick: bool) -> list[dict[str, Any]]:
    import numpy as np
    import torch

    import neurenix_core as nx
    from neurenix_core.benchkit import schedule

    torch.set_num_threads(threads)
    new = 60 if quick else NEW
    positions = tuple(p for p in POSITIONS if p - PROMPT + 5 <= new)
    rows = []
    for name in ("gpt2", "llama"):
        model = _model(name)
        ids = np.random.default_rng(0).integers(3, 2000, (1, PROMPT))
        lms = {kind: nx.generation.CausalLM(model, "cpu:0", cache=kind) for kind in ("dynamic", "fixed")}

        def run_nx(kind: str, lms: dict[str, Any] = lms, ids: Any = ids) -> tuple[list[float], Any]:
            start = time.perf_counter()
            stamps, toks = [], []
            for tok in lms[kind].generate(ids, max_new_tokens=new, eos_token_id=[], stream=True, progress=False):
                stamps.append(time.perf_counter())
                toks.append(int(tok[0]))
            return _per_token(start, stamps), toks

        def run_torch(model: Any = model, ids: Any = ids) -> tuple[list[float], Any]:
            clock = _Clock()
            start = time.perf_counter()
            with torch.no_grad():
                out = model.generate(torch.from_numpy(ids), attention_mask=torch.ones(1, PROMPT, dtype=torch.int64), do_sample=False,
                                     max_new_tokens=new, min_new_tokens=new, streamer=clock, pad_token_id=0)
            return _per_token(start, clock.stamps[1:]), out[0, PROMPT:].tolist()

        fns = {"nx_dynamic": lambda: run_nx("dynamic"), "nx_fixed": lambda: run_nx("fixed"), "torch": run_torch}
        best: dict[str, dict[int, float]] = {k: {p: float("inf") for p in positions} for k in fns}
        tokens: dict[str, Any] = {}
        for order in schedule(list(fns), 2 if quick else 3):
            for key in order:
                steps, tokens[key] = fns[key]()
                for p in positions:
                    best[key][p] = min(best[key][p], _at(steps, p))
        same = tokens["nx_dynamic"] == tokens["torch"] == tokens["nx_fixed"]
        for key in fns:
            rows.append({"model": name, "threads": threads, "runtime": key, "same_tokens": same,
                         **{f"tok_s@{p}": 1.0 / best[key][p] for p in positions},
                         "flat_ratio": best[key][positions[-1]] / best[key][positions[0]],
                         "config": {"torch.get_num_threads": torch.get_num_threads(),
                                    **{v: os.environ.get(v) for v in _THREAD_VARS},
                                    "compilations": lms[key[3:]].compilations if key.startswith("nx") else None}})
    return rows


def _child(threads: int, quick: bool) -> list[dict[str, Any]]:
    return run_child(__file__, threads, quick, env={"NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "1"}, timeout=3600)


def table(rows: list[dict[str, Any]]) -> str:
    cols = [k for k in rows[0] if k.startswith("tok_s@")]
    head = f"{'model':<7}{'thr':>4}  {'runtime':<11}" + "".join(f"{c.replace('tok_s@', 'tok/s @'):>12}" for c in cols) + f"{'p' + cols[-1][6:] + '/p' + cols[0][6:]:>10}  same tokens"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['model']:<7}{r['threads']:>4}  {r['runtime']:<11}" + "".join(f"{r[c]:>12.1f}" for c in cols)
                     + f"{r['flat_ratio']:>10.2f}  {r['same_tokens']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="60 tokens, 2 rounds: checks that the benchmark runs")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default: 1 2)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.quick)))
        return 0
    from neurenix_core.benchkit import machine, write_json

    rows: list[dict[str, Any]] = []
    for threads in args.threads:
        rows.extend(_child(threads, args.quick))
    m = machine()
    print(f"generate: CPU {m['cpu']} ({m['cpus']} CPUs available, 1-min load {m['load_1min']})" + (" -- quick run" if args.quick else ""))
    print(table(rows))
    print("configurations (read back):")
    for r in rows:
        print(f"  {r['model']} {r['runtime']}: {r['config']}")
    if args.json:
        write_json(args.json, "generate", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
