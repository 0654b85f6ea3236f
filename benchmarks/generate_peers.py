"""Peer runtimes for the language-model benchmark (benchmarks/generate.py): OpenVINO GenAI and
onnxruntime-genai, each fed the same random-weight model, exported by that runtime's own tool.

The peers live in their own environment (their transformers pin differs from the project's), see
benchmarks/requirements-peers.txt; nothing here imports them at module level, so the module
imports without them. Run with ``python -P`` (benchmarks/openvino.py would shadow OpenVINO):

    .venv-peers/bin/python -P benchmarks/generate_peers.py                      # 135M, prompt 128, 32 new, 1 thread
    .venv-peers/bin/python -P benchmarks/generate_peers.py --model 0.5b --prompts 128 1024 --threads 2

A child builds the model (``_model`` of generate.py), saves it with a word-level tokenizer,
exports every (peer, weights) into a cache (``--cache``; an export of the same model is reused)
and takes transformers' greedy tokens as the reference; then each (peer, weights) is timed, one
at a time, in a fresh child that loads only that peer, each prompt generated twice and the
second measured, as generate.py does. ``ttft`` is the call to the first token, ``tok/s`` one over
the median step after it, ``peak RSS`` the child's ``ru_maxrss`` (the parent stays small, so the
child's count starts near zero), ``same`` the tokens equal to transformers' fp32 ones.

Exports (what ``export`` runs):

- openvino-genai: ``optimum-cli export openvino --task text-generation-with-past`` with
  ``--weight-format fp32`` (no compression), ``int8 --sym`` (per-channel symmetric) or
  ``int4 --sym --group-size 64 --ratio 1.0`` (NNCF keeps the embedding / head int8 by default);
- onnxruntime-genai: ``python -m onnxruntime_genai.models.builder -e cpu -p fp32|int8|int4``
  (int8 / int4: symmetric MatMulNBits, block 64, the builder's CPU default accuracy_level 4).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

PEERS: tuple[str, ...] = ("openvino-genai", "onnxruntime-genai")
WEIGHTS: dict[str, tuple[str, ...]] = {
    "openvino-genai": ("fp32", "int8", "int4"),
    "onnxruntime-genai": ("fp32", "int8", "int4"),
}
#: optimum-cli's weight options per precision (fp32: optimum's default int8 compression is off).
OV_WEIGHT_OPTIONS: dict[str, tuple[str, ...]] = {
    "fp32": ("--weight-format", "fp32"),
    "int8": ("--weight-format", "int8", "--sym"),
    "int4": ("--weight-format", "int4", "--sym", "--group-size", "64", "--ratio", "1.0"),
}
#: the model builder's options per precision.
ORT_WEIGHT_OPTIONS: dict[str, tuple[str, ...]] = {
    "fp32": ("-p", "fp32"),
    "int8": ("-p", "int8", "--extra_options", "block_size=64", "is_symmetric=true"),
    "int4": ("-p", "int4", "--extra_options", "block_size=64", "is_symmetric=true"),
}
HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = Path(os.environ.get("NEURENIX_PEERS_CACHE", Path.home() / ".cache" / "neurenix-peers"))
Run = Callable[[np.ndarray, int], tuple[float, list[float], list[int], list[float]]]


def load_generate() -> ModuleType:
    """benchmarks/generate.py as a module (``_model``, ``_prompt``, ``_torch_run``): imported by path
    because benchmarks/ is not a package, with the repository root on sys.path for its
    ``neurenix_core.benchkit`` import (this environment does not install the project)."""
    root = str(HERE.parent)
    if root not in sys.path:
        sys.path.append(root)
    spec = importlib.util.spec_from_file_location("neurenix_bench_generate", HERE / "generate.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {HERE / 'generate.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def save_local(model: Any, directory: str | os.PathLike[str]) -> Path:
    """Save a transformers causal LM with a tokenizer, the layout both exporters read.

    Nothing can be downloaded, so the tokenizer is made here: a word-level vocabulary of the
    config's ``vocab_size`` tokens ``t0`` .. ``tN`` (``t0`` unknown, ``t1`` / ``t2`` the config's
    bos / eos ids when they are in range). The benchmark feeds token ids, never text; the
    tokenizer only has to satisfy the exporters (OpenVINO's converts it to openvino_tokenizer.xml).
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    vocab = {f"t{i}": i for i in range(model.config.vocab_size)}
    word_level = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    specials: dict[str, str] = {"unk_token": "t0"}
    for name in ("bos", "eos"):
        token_id = getattr(model.config, f"{name}_token_id", None)
        if isinstance(token_id, int) and 0 <= token_id < model.config.vocab_size:
            specials[f"{name}_token"] = f"t{token_id}"
    PreTrainedTokenizerFast(tokenizer_object=word_level, **specials).save_pretrained(out)
    return out


def _fingerprint(model_dir: Path) -> str:
    """The model directory's content (config and weights, hashed): a cached export of a different
    model saved under the same name is redone, not reused."""
    digest = hashlib.sha256((model_dir / "config.json").read_bytes())
    for path in sorted(model_dir.glob("*.safetensors")):
        digest.update(path.name.encode())
        with path.open("rb") as f:
            while chunk := f.read(1 << 24):
                digest.update(chunk)
    return digest.hexdigest()


def _check(peer: str, weights: str) -> None:
    if peer not in WEIGHTS:
        raise ValueError(f"unknown peer {peer!r}; the peers are {', '.join(PEERS)}")
    if weights not in WEIGHTS[peer]:
        raise ValueError(f"{peer} is not offered with {weights!r} weights here; it has {', '.join(WEIGHTS[peer])}")


def _export_command(peer: str, weights: str, model_dir: Path, target: Path, scratch: Path) -> list[str]:
    # -P: the current folder is not put on sys.path (a benchmarks/openvino.py there would shadow OpenVINO)
    if peer == "openvino-genai":
        return [sys.executable, "-P", "-m", "optimum.commands.optimum_cli", "export", "openvino", "--model", str(model_dir),
                "--task", "text-generation-with-past", *OV_WEIGHT_OPTIONS[weights], str(target)]
    return [sys.executable, "-P", "-m", "onnxruntime_genai.models.builder", "-i", str(model_dir), "-o", str(target),
            "-e", "cpu", "-c", str(scratch), *ORT_WEIGHT_OPTIONS[weights]]


def export(peer: str, weights: str, model_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> Path:
    """Export a saved model (``save_local``) for a peer at a weight precision, once.

    The result is ``out_dir/<peer>/<model dir name>-<weights>``; a finished export (its marker
    file records the source's fingerprint) is returned as is, so only the first call pays for the
    exporter. The exporter runs in a child process of this interpreter, offline, its output
    kept in the exception when it fails.
    """
    _check(peer, weights)
    source = Path(model_dir).resolve()
    target = Path(out_dir).resolve() / peer / f"{source.name}-{weights}"
    marker = target / ".neurenix-export.json"
    fingerprint = _fingerprint(source)
    if marker.is_file() and json.loads(marker.read_text()).get("source") == fingerprint:
        return target
    partial = target.with_name(target.name + ".partial")
    scratch = target.with_name(target.name + ".scratch")
    for path in (partial, scratch):
        shutil.rmtree(path, ignore_errors=True)
    command = _export_command(peer, weights, source, partial, scratch)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{peer} {weights} export failed ({' '.join(command)}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    record = {"source": fingerprint, "command": command[1:], "seconds": time.perf_counter() - start}
    marker.write_text(json.dumps(record, indent=1))
    return target


def _openvino_run(exported_dir: Path, threads: int) -> Run:
    import openvino as ov
    import openvino_genai as ov_genai

    scheduler = ov_genai.SchedulerConfig()
    # GenAI's CPU default (the paged-attention backend) turns prefix caching on: a repeated prompt
    # would skip its prefill. Keep the default's unlimited batch so a long prompt is one prefill.
    scheduler.enable_prefix_caching = False
    scheduler.max_num_batched_tokens = 2**63 - 1
    pipe = ov_genai.LLMPipeline(str(exported_dir), "CPU", scheduler_config=scheduler, INFERENCE_PRECISION_HINT="f32",
                                INFERENCE_NUM_THREADS=threads, KV_CACHE_PRECISION="f32")

    class Clock(ov_genai.StreamerBase):
        """Stamps every token as the pipeline streams it."""

        def __init__(self) -> None:
            super().__init__()
            self.stamps: list[float] = []
            self.cpu: list[float] = []
            self.tokens: list[int] = []

        def write(self, token: int | list[int]) -> Any:
            now, cpu = time.perf_counter(), time.process_time()
            for t in (token if isinstance(token, list) else [token]):
                self.stamps.append(now)
                self.cpu.append(cpu)
                self.tokens.append(int(t))
            return ov_genai.StreamingStatus.RUNNING

        def end(self) -> None:
            pass

    def run(ids: np.ndarray, new: int) -> tuple[float, list[float], list[int], list[float]]:
        config = ov_genai.GenerationConfig()
        config.do_sample = False
        config.max_new_tokens = new
        config.min_new_tokens = new
        config.ignore_eos = True
        inputs = ov_genai.TokenizedInputs(ov.Tensor(np.ascontiguousarray(ids, dtype=np.int64)),
                                          ov.Tensor(np.ones(ids.shape, dtype=np.int64)))
        clock = Clock()
        start = time.perf_counter()
        result = pipe.generate(inputs, config, clock)
        tokens = [int(t) for t in result.tokens[0]]
        if tokens != clock.tokens or len(tokens) != new:
            raise RuntimeError(f"openvino-genai: {len(tokens)} tokens returned, {len(clock.tokens)} streamed, {new} asked")
        return start, clock.stamps, tokens, clock.cpu

    return run


def _onnxruntime_run(exported_dir: Path, threads: int) -> Run:
    import onnxruntime_genai as og

    config = og.Config(str(exported_dir))
    # the thread pool is the decoder session's; genai_config.json on disk is left as exported
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": threads,
                                                                         "inter_op_num_threads": 1}}}}))
    model = og.Model(config)

    def run(ids: np.ndarray, new: int) -> tuple[float, list[float], list[int], list[float]]:
        length = ids.shape[1] + new
        params = og.GeneratorParams(model)
        # min_length: the eos logit is masked until then, as transformers' min_new_tokens does
        params.set_search_options(do_sample=False, max_length=length, min_length=length, batch_size=1)
        generator = og.Generator(model, params)
        stamps: list[float] = []
        cpu: list[float] = []
        tokens: list[int] = []
        start = time.perf_counter()
        generator.append_tokens(np.ascontiguousarray(ids, dtype=np.int32))  # the prefill
        for _ in range(new):
            if generator.is_done():
                raise RuntimeError(f"onnxruntime-genai stopped after {len(tokens)} of {new} tokens")
            generator.generate_next_token()
            stamps.append(time.perf_counter())
            cpu.append(time.process_time())
            tokens.append(int(generator.get_next_tokens()[0]))
        return start, stamps, tokens, cpu

    return run


def prepare(peer: str, weights: str, exported_dir: str | os.PathLike[str], threads: int) -> Run:
    """Load an export (``export``) into its runtime on the CPU with ``threads`` compute threads.

    Returns ``run(ids, new)``: greedy decoding of exactly ``new`` tokens after the (1, T) int64
    prompt ``ids`` (eos ignored), as ``(start, stamps, tokens, cpu)`` in the form of generate.py's
    ``_torch_run``: ``stamps[i]`` is the ``perf_counter`` time token ``i`` became known, ``cpu[i]``
    the process's ``process_time`` then.
    """
    _check(peer, weights)
    if threads < 1:
        raise ValueError(f"threads must be at least 1, not {threads}")
    path = Path(exported_dir)
    if peer == "openvino-genai":
        return _openvino_run(path, threads)
    return _onnxruntime_run(path, threads)


def measure(peer: str, weights: str, exported_dir: str, threads: int, prompts: list[int], vocab: int, new: int) -> dict[str, Any]:
    """One peer in this process: load, then each prompt twice (the second measured), as generate.py.

    ``cpu/wall`` is the process's CPU time over the wall time of the measured runs: about 1.0 at
    one thread tells that the peer's thread setting took.
    """
    generate = load_generate()
    start = time.perf_counter()
    run = prepare(peer, weights, exported_dir, threads)
    out: dict[str, Any] = {"contender": f"{peer} {weights}", "threads": threads, "prepare_s": time.perf_counter() - start,
                           "prompts": {}}
    busy = wall = 0.0
    for length in prompts:
        ids = generate._prompt(length, vocab)
        run(ids, new)
        before = resource.getrusage(resource.RUSAGE_SELF)
        t0, stamps, tokens, cpu = run(ids, new)
        wall += time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_SELF)
        busy += after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        out["prompts"][str(length)] = generate.step_times(t0, stamps, tokens, cpu)
    out["cpu_per_wall"] = busy / wall
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def build(model_name: str, pairs: list[str], cache: str, prompts: list[int], new: int, threads: int) -> dict[str, Any]:
    """The heavy half, in a child of its own: build the model (generate.py's ``_model``), save it,
    export every pair, and take transformers' greedy tokens (``_torch_run``) as the reference."""
    import torch

    generate = load_generate()
    torch.set_num_threads(threads)
    model = generate._model(model_name)
    model_dir = save_local(model, Path(cache) / "models" / model_name)
    vocab = model.config.vocab_size
    reference = {str(p): generate._torch_run(model, generate._prompt(p, vocab), new)[2] for p in prompts}
    exported = {}
    for pair in pairs:
        peer, weights = pair.split()
        exported[pair] = str(export(peer, weights, model_dir, cache))
    return {"vocab": vocab, "reference": reference, "exported": exported}


def _python(mode: str, payload: list[Any], threads: int) -> dict[str, Any]:
    """Run ``build`` or ``measure`` in a fresh interpreter. This parent stays small (no torch, no
    peer): a child's ``ru_maxrss`` starts from its parent's resident size at the exec."""
    from neurenix_core.benchkit import THREAD_VARS

    env = {**os.environ, **{v: str(threads) for v in THREAD_VARS}}
    # -P: the script's folder is not put on sys.path (benchmarks/openvino.py would shadow OpenVINO)
    cmd = [sys.executable, "-P", __file__, mode, json.dumps(payload)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=7200)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} {payload[:2]} failed:\n{proc.stderr[-4000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["135m", "0.5b", "quick"], default="135m")
    parser.add_argument("--prompts", type=int, nargs="+", default=[128])
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--peers", nargs="+", default=[f"{p} {w}" for p in PEERS for w in WEIGHTS[p]],
                        help='"peer weights" pairs (default: all)')
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"saved models and exports (default {DEFAULT_CACHE})")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--build", help=argparse.SUPPRESS)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.build or args.measure:
        out = build(*json.loads(args.build)) if args.build else measure(*json.loads(args.measure))
        print(json.dumps(out))
        return 0
    for pair in args.peers:
        _check(*pair.split())
    load_generate()  # the repository root on sys.path, for benchkit
    built = _python("--build", [args.model, args.peers, str(args.cache), args.prompts, args.new, args.threads], args.threads)
    results = []
    for pair in args.peers:  # one at a time, each in its own process
        peer, weights = pair.split()
        payload = [peer, weights, built["exported"][pair], args.threads, args.prompts, built["vocab"], args.new]
        try:
            result = _python("--measure", payload, args.threads)
        except RuntimeError as exc:
            result = {"contender": pair, "threads": args.threads, "failed": str(exc)}
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "prompts"})[:500], file=sys.stderr)
    cols = " | ".join(f"ttft s @{p} | tok/s @{p} | same @{p}" for p in args.prompts)
    lines = [f"| contender | thr | prepare s | peak RSS MB | cpu/wall | {cols} |"]
    lines.append("|" + "---|" * (lines[0].count("|") - 1))
    for r in results:
        if "failed" in r:
            lines.append(f"| {r['contender']} | {r['threads']} | failed: {r['failed'].strip().splitlines()[-1][:120]} |")
            continue
        cells = []
        for p in args.prompts:
            got = r["prompts"][str(p)]
            same = sum(a == b for a, b in zip(got["tokens"], built["reference"][str(p)], strict=True))
            cells.append(f"{got['ttft_s']:.3f} | {got['tok_s']:.1f} | {same}/{len(got['tokens'])}")
        lines.append(f"| {r['contender']} | {r['threads']} | {r['prepare_s']:.1f} | {r['peak_rss_mb']:.0f} | {r['cpu_per_wall']:.2f} | "
                     + " | ".join(cells) + " |")
    print(f"model {args.model}, {args.new} new tokens, greedy; same: tokens equal to transformers' fp32 ones")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, **built, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
