"""Language-model decoding: nx.generate on cpu:0 (its default, the cache in OpenVINO's state, and the cache fed from
the host, "nx cpu:0 fixed"; fp32, int8 and int4 weights) and on the npu (OpenVINO, emulated on the CPU; fp32, int8 and int4 weights)
against transformers' own ``generate`` on PyTorch, each contender in its own process, at 1 and 2
threads, for prompts of 128 and 1024 tokens.

    .venv/bin/python benchmarks/generate.py                  # SmolLM-135M shape (a few minutes per row)
    .venv/bin/python benchmarks/generate.py --model 0.5b     # a Qwen2-0.5B shape (494M parameters)
    .venv/bin/python benchmarks/generate.py --quick          # a 4-layer model: checks the benchmark runs
    .venv/bin/python benchmarks/generate.py --json out.json
    .venv/bin/python benchmarks/generate.py --peers-python .venv-peers/bin/python   # + the peers

The peers (``--peers-python``: an interpreter with ``benchmarks/requirements-peers.txt``
installed, see benchmarks/generate_peers.py) run in the same interleaved run: OpenVINO GenAI
(exported by optimum-intel: fp32, int8 per channel, int4 group 64, symmetric) and
onnxruntime-genai (its model builder: fp32, int8, int4 block 64, symmetric), each from the same
saved random-weight model, greedy from token ids, prefix caching off, threads pinned.

Models are built from configs (random weights, nothing downloaded): ``135m`` is a Llama shaped
like SmolLM-135M (hidden 576, 30 layers, 9 heads / 3 key-value heads, vocabulary 49,152, tied
embeddings), ``0.5b`` a Qwen2 shaped like Qwen2-0.5B (hidden 896, 24 layers, 14 / 2 heads,
vocabulary 151,936). Batch 1, greedy, no stop token, 128 new tokens per prompt.

Each (contender, threads) runs in a fresh interpreter: the model is built, prepared (for nx: the
step model's export and compilation, ``prepare s``), then each prompt is generated twice, the
second time measured (the first compiles that prompt's shapes). Per prompt:

- ``ttft``: seconds from the call to the first token (the prefill), measured warm;
- ``tok/s``: decode tokens per second, the median step after the first;
- ``peak RSS``: the process's peak resident memory (``ru_maxrss``) over everything it did,
  the transformers model included where it is built (every contender but the "saved" ones);
- ``saved``: ``CausalLM.from_pretrained`` on the saved model folder the peers read; a first process
  (not measured, as the peers' export is not) prepares it and stores the stateful step model, the
  measured one loads that without building the transformers model;
- ``same``: how many of the new tokens equal transformers' fp32 ones (all should in fp32; with
  int8 / int4 weights, ``quantize="int8-weights"`` / ``"int4-weights"``, the token agreement;
  ``a8``: ``"int8-weights-int8-activations"`` / ``"int4-weights-int8-activations"``).

Thread pools are pinned by OMP/OPENBLAS/MKL_NUM_THREADS and ``torch.set_num_threads`` (PyTorch),
and by the compile option ``threads`` (the cpu:0 host runtime, OpenVINO's INFERENCE_NUM_THREADS).
Nothing is asserted: the numbers are for people; docs/generation.md holds the last run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

from neurenix_core.benchkit import THREAD_VARS

CONTENDERS = ("transformers", "nx cpu:0", "nx cpu:0 saved", "nx cpu:0 fixed", "nx cpu:0 int8", "nx cpu:0 saved int8",
              "nx cpu:0 saved int8 a8", "nx cpu:0 fixed int8", "nx cpu:0 int4", "nx cpu:0 saved int4", "nx cpu:0 saved int4 a8",
              "nx cpu:0 fixed int4", "nx npu:0", "nx npu:0 int8", "nx npu:0 int8 a8", "nx npu:0 int4", "nx npu:0 int4 a8")
#: Devices run only when named (--contenders): emulated on the host CPU, for "runs on every device".
EMULATED = ("nx tpu:0", "nx cuda:0", "nx edgetpu:0")
PROMPTS = (128, 1024)
NEW = 128

_CONFIGS: dict[str, dict[str, Any]] = {
    "135m": {"arch": "llama", "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
             "intermediate_size": 1536, "vocab_size": 49152, "max_position_embeddings": 2048, "tie_word_embeddings": True},
    "0.5b": {"arch": "qwen2", "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
             "intermediate_size": 4864, "vocab_size": 151936, "max_position_embeddings": 2048, "tie_word_embeddings": True},
    "quick": {"arch": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
              "intermediate_size": 1024, "vocab_size": 2048, "max_position_embeddings": 2048, "tie_word_embeddings": False},
}


def _model(name: str) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    cfg = dict(_CONFIGS[name])
    arch = cfg.pop("arch")
    torch.manual_seed(0)
    if arch == "qwen2":
        return Qwen2ForCausalLM(Qwen2Config(**cfg)).eval()
    return LlamaForCausalLM(LlamaConfig(**cfg)).eval()


def _prompt(length: int, vocab: int) -> Any:
    import numpy as np

    return np.random.default_rng(length).integers(3, vocab - 1, (1, length))


class _Clock:
    """A transformers streamer that stamps the time of every put (the prompt first, then each
    token): the wall clock, and the process's CPU time beside it."""

    def __init__(self) -> None:
        self.stamps: list[float] = []
        self.cpu: list[float] = []

    def put(self, value: Any) -> None:
        self.stamps.append(time.perf_counter())
        self.cpu.append(time.process_time())

    def end(self) -> None:
        pass


def _torch_run(model: Any, ids: Any, new: int) -> tuple[float, list[float], list[int], list[float]]:
    import torch

    clock = _Clock()
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(torch.from_numpy(ids), attention_mask=torch.ones(ids.shape, dtype=torch.int64), do_sample=False,
                             max_new_tokens=new, min_new_tokens=new, streamer=clock, pad_token_id=0)
    stamps = clock.stamps[1:]  # the first put is the prompt
    return start, stamps, out[0, ids.shape[1]:].tolist(), clock.cpu[1:]


def _nx_run(lm: Any, ids: Any, new: int) -> tuple[float, list[float], list[int], list[float]]:
    start = time.perf_counter()
    stamps, tokens, cpu = [], [], []
    for tok in lm.generate(ids, max_new_tokens=new, eos_token_id=[], stream=True, progress=False):
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
        tokens.append(int(tok[0]))
    return start, stamps, tokens, cpu


def saved_folder(model_name: str) -> str:
    """The model saved as the peers read it (generate_peers.save_local), saved here if not yet:
    "nx cpu:0 saved" contenders load it with CausalLM.from_pretrained."""
    peers = _peers_module()
    folder = peers.DEFAULT_CACHE / "models" / model_name
    if not (folder / "config.json").is_file():
        peers.save_local(_model(model_name), folder)
    return str(folder)


def measure(contender: str, model_name: str, threads: int, prompts: tuple[int, ...], new: int) -> dict[str, Any]:
    """One contender in this process: prepare, then each prompt twice (the second measured).
    A "saved" contender is prepared from the saved model folder, not from a model built here."""
    saved = "saved" in contender.split()
    if not saved:  # a saved contender never imports torch where the stored step model serves it
        import torch

        torch.set_num_threads(threads)
    model = None if saved else _model(model_name)
    vocab = int(_CONFIGS[model_name]["vocab_size"])
    start = time.perf_counter()
    if model is not None and contender == "transformers":
        def run(ids: Any) -> tuple[float, list[float], list[int], list[float]]:
            return _torch_run(model, ids, new)
        config: dict[str, Any] = {"torch.get_num_threads": torch.get_num_threads()}
    else:
        import neurenix_core as nx

        _, device, *rest = contender.split()
        quantize = next((f"{word}-weights" for word in rest if word in ("int8", "int4")), None)
        if quantize is not None and "a8" in rest:  # "nx cpu:0 saved int4 a8": int8 activations at run time too
            quantize += "-int8-activations"
        # "nx cpu:0 fixed": the cache fed from the host (cpu:0's default keeps it in OpenVINO's state)
        cache = next((word for word in rest if word in ("fixed", "state")), None)
        # "nx cpu:0 openvino": every step on that runtime
        runtime = next(({"runtime": word} for word in rest if word not in ("int8", "int4", "a8", "fixed", "state", "saved")), {})
        kwargs: dict[str, Any] = {"cache": cache, "precision": "fp32", "quantize": quantize, "options": {"threads": threads, **runtime}}
        if model is None:  # "nx cpu:0 saved": CausalLM.from_pretrained (a stored step model where one is kept)
            lm = nx.generation.CausalLM.from_pretrained(saved_folder(model_name), device, **kwargs)
        else:
            lm = nx.generation.CausalLM(model, device, **kwargs)

        def run(ids: Any) -> tuple[float, list[float], list[int], list[float]]:
            return _nx_run(lm, ids, new)
        config = {"device": device, "cache": lm.cache, "quantize": quantize}
    prepare = time.perf_counter() - start
    out: dict[str, Any] = {"contender": contender, "model": model_name, "threads": threads, "prepare_s": prepare, "prompts": {}}
    for length in prompts:
        ids = _prompt(length, vocab)
        run(ids)  # compiles this prompt's shapes (nx), warms the allocator (both)
        t0, stamps, tokens, cpu = run(ids)
        out["prompts"][str(length)] = step_times(t0, stamps, tokens, cpu)
    if contender != "transformers":
        config["compilations"] = lm.compilations
        config["summary"] = " | ".join(part.split("; not used")[0][-300:] for part in lm.summary.split("\n"))
        config["torch imported"] = "torch" in sys.modules
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["config"] = {**config, **{v: os.environ.get(v) for v in THREAD_VARS}}
    return out


def step_times(start: float, stamps: list[float], tokens: list[int], cpu: list[float]) -> dict[str, Any]:
    """A measured run's record: time to first token, decode tokens per second (one over the median
    step), and the median step's CPU time in ms (the process's, every thread: at one thread the
    work per token, which a busy machine delays but does not change)."""
    import numpy as np

    return {"ttft_s": stamps[0] - start, "tok_s": 1.0 / float(np.median(np.diff(stamps))), "tokens": tokens,
            "cpu_ms": 1e3 * float(np.median(np.diff(cpu)))}


def _child(contender: str, model: str, threads: int, prompts: tuple[int, ...], new: int) -> dict[str, Any]:
    env = {**os.environ, **{v: str(threads) for v in THREAD_VARS}, "JAX_PLATFORMS": "cpu"}
    device = contender.split()[1] if contender.startswith("nx ") else "cpu:0"
    if not device.startswith("cpu"):
        # The device's own runtime on the host CPU stands in for it (OpenVINO's CPU device for the
        # NPU, XLA:CPU for the TPU, PyTorch's CPU for cuda, LiteRT for the Edge TPU)
        env["NEURENIX_EMULATE"] = device.split(":")[0]
    # -P: the script's folder is not put on sys.path (benchmarks/openvino.py would shadow OpenVINO)
    cmd = [sys.executable, "-P", __file__, "--child", json.dumps([contender, model, threads, list(prompts), new])]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=7200)
    if proc.returncode != 0:
        return {"contender": contender, "model": model, "threads": threads, "failed": proc.stderr[-2000:]}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _peer_contenders() -> tuple[str, ...]:
    peers = _peers_module()
    return tuple(f"{p} {w}" for p in peers.PEERS for w in peers.WEIGHTS[p])


def _peers_module() -> Any:
    from neurenix_core import benchkit

    return benchkit.load_script(os.path.join(os.path.dirname(__file__), "generate_peers.py"), "generate_peers")


def _peers_child(python: str, mode: str, payload: list[Any], threads: int) -> dict[str, Any]:
    """generate_peers.py's ``--build`` / ``--measure`` in the peers' interpreter."""
    env = {**os.environ, **{v: str(threads) for v in THREAD_VARS}}
    script = os.path.join(os.path.dirname(__file__), "generate_peers.py")
    proc = subprocess.run([python, "-P", script, mode, json.dumps(payload)], capture_output=True, text=True, env=env, check=False, timeout=7200)
    if proc.returncode != 0:
        return {"failed": proc.stderr[-2000:]}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _run_peer(python: str, pair: str, built: dict[str, Any], model: str, threads: int, prompts: tuple[int, ...], new: int) -> dict[str, Any]:
    if "failed" in built:
        return {"contender": pair, "model": model, "threads": threads, "failed": built["failed"]}
    peer, weights = pair.split()
    out = _peers_child(python, "--measure", [peer, weights, built["exported"][pair], threads, list(prompts), built["vocab"], new], threads)
    return {"contender": pair, "model": model, "threads": threads, **out}


def table(results: list[dict[str, Any]], prompts: tuple[int, ...]) -> str:
    ref = {(r["model"], r["threads"]): r for r in results if r["contender"] == "transformers" and "failed" not in r}
    head = ("| model | contender | thr | prepare s | peak RSS MB | "
            + " | ".join(f"ttft s @{p} | tok/s @{p} | CPU ms/tok @{p} | same @{p}" for p in prompts) + f" | tok/s @{prompts[-1]} / @{prompts[0]} |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        if "failed" in r:
            lines.append(f"| {r['model']} | {r['contender']} | {r['threads']} | failed: {r['failed'].strip().splitlines()[-1][:120]} |")
            continue
        base = ref.get((r["model"], r["threads"]))
        cells = []
        for p in prompts:
            got = r["prompts"][str(p)]
            same = "" if base is None else sum(a == b for a, b in zip(got["tokens"], base["prompts"][str(p)]["tokens"], strict=True))
            cpu = f"{got['cpu_ms']:.1f}" if "cpu_ms" in got else "-"
            cells.append(f"{got['ttft_s']:.2f} | {got['tok_s']:.1f} | {cpu} | {same}/{len(got['tokens'])}")
        flat = r["prompts"][str(prompts[-1])]["tok_s"] / r["prompts"][str(prompts[0])]["tok_s"]
        lines.append(f"| {r['model']} | {r['contender']} | {r['threads']} | {r['prepare_s']:.1f} | {r['peak_rss_mb']:.0f} | "
                     + " | ".join(cells) + f" | {flat:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["135m", "0.5b"], default="135m")
    parser.add_argument("--quick", action="store_true", help="a 4-layer model, prompts of 8 and 64, 16 new tokens")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default: 1 2)")
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS + EMULATED)
    parser.add_argument("--prompts", type=int, nargs="+", default=list(PROMPTS))
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--peers-python", metavar="PYTHON", default=os.environ.get("NEURENIX_PEERS_PYTHON"),
                        help="an interpreter with benchmarks/requirements-peers.txt: adds OpenVINO GenAI and onnxruntime-genai")
    parser.add_argument("--peers", nargs="+", metavar="PEER", help='"peer weights" pairs (default: every one)')
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        contender, model, threads, prompts, new = json.loads(args.child)
        print(json.dumps(measure(contender, model, threads, tuple(prompts), new)))
        return 0
    from neurenix_core.benchkit import machine, write_json

    model, prompts, new = ("quick", (8, 64), 16) if args.quick else (args.model, tuple(args.prompts), NEW)
    peers = (args.peers or list(_peer_contenders())) if args.peers_python else []
    built: dict[str, Any] = {}
    if peers:  # the model saved and exported once per precision (cached across runs)
        print(f"exporting {model} for {', '.join(peers)} ...", file=sys.stderr, flush=True)
        cache = str(_peers_module().DEFAULT_CACHE)
        built = _peers_child(args.peers_python, "--build", [model, peers, cache, list(prompts), new, 1], 1)
    results = []
    for threads in args.threads:
        for contender in [*args.contenders, *peers]:  # transformers first: the others' tokens are compared with its own
            print(f"running {contender} ({model}, {threads} thread(s)) ...", file=sys.stderr, flush=True)
            if contender in peers:
                results.append(_run_peer(args.peers_python, contender, built, model, threads, prompts, new))
            elif "saved" in contender.split():
                # A first process prepares from the folder and stores the step model (as the peers'
                # export runs before them); the measured one loads it.
                first = _child(contender, model, threads, (), new)
                results.append({**_child(contender, model, threads, prompts, new), "first_prepare_s": first.get("prepare_s")})
            else:
                results.append(_child(contender, model, threads, prompts, new))
    m = machine()
    print(f"generate: CPU {m['cpu']} ({m['cpus']} CPUs available, 1-min load {m['load_1min']}); {model}, batch 1, greedy, "
          f"{new} new tokens" + (" -- quick run" if args.quick else ""))
    print(table(results, prompts))
    print("configurations (read back):")
    for r in results:
        first = f" (the first process prepared it in {r['first_prepare_s']:.1f} s)" if r.get("first_prepare_s") is not None else ""
        print(f"  {r['model']} {r['contender']} {r['threads']} thr{first}: {r.get('config')}")
    if args.json:
        write_json(args.json, "generate", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
