"""``python -m llm_bridge.gpu_suite``: every GPU record of the README in one command.

On a CUDA machine it writes, into ``--out-dir`` (``figures/``):

* ``llm_gpu_<family>.json`` — ``llm_bridge.validate`` for each draft family (the distilled draft,
  prompt lookup, the target's first layers; the feature heads ``eagle`` and ``medusa`` when named, the
  EAGLE head on a compiled static cache of its own), token / block / v1 block verification at L = 2, 4, 8
  (heads: 1, 2, 4), compiled static caches, rows kept on the GPU, Hugging Face's assisted generation
  and decode step beside them;
* ``llm_gpu_trees.json`` — the multi-draft verifiers on draft trees (SpecTr's K i.i.d. drafts and
  MCSD's ``4x2x2x1``);
* ``llm_gpu_verifiers.json`` — ``benchmarks/bench_verifiers_torch.py``: every verifier on the GPU
  against one target call (when the benchmarks folder is at hand);
* ``llm_gpu_suite.json`` — what ran, where, how long each step took.

``python -m otspec.plot record figures/llm_gpu_<name>.json`` (or the report) draws the records.
``--smoke --device cpu`` runs the same steps at toy sizes (one prompt, a few tokens, eager static
caches): the test suite does that with tiny models, in well under two minutes.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

from .models import DEFAULT_TARGET, ModelNotFound, VocabularyMismatch, resolve_device
from .validate import FIGURES, output_name, validate

__all__ = ["FAMILIES", "main", "run_suite"]

#: Draft families on a GPU (the int8 draft uses CPU dynamic quantisation, so it is not one of them).
FAMILIES = ("distilled", "ngram", "layers:8")
#: Feature heads: shorter drafts (the shipped Medusa set proposes at most 4 tokens).
HEADS = ("eagle", "medusa", "head:")
#: Drafters whose records have no tree runs: prompt lookup and the feature heads (they draft chains).
CHAIN_ONLY = ("ngram", *HEADS)
BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_verifiers_torch.py"


def _sizes(smoke: bool) -> dict:
    if smoke:
        return {"prompts": 1, "max_new_tokens": 6, "lengths": (2,), "head_lengths": (2,), "lossless_samples": 20,
                "trees": ("2x1",),
                "bench": ["--vocab", "512", "--L", "2", "--batches", "1,4", "--repeat", "1"]}
    return {"prompts": 8, "max_new_tokens": 64, "lengths": (2, 4, 8), "head_lengths": (1, 2, 4),
            "lossless_samples": 200, "trees": ("iid:2:3", "4x2x2x1"), "bench": ["--batches", "1,16,256"]}


def run_suite(*, target: str = DEFAULT_TARGET, families=FAMILIES, device: str = "auto", out_dir=FIGURES,
              smoke: bool = False, cache: str | None = None, hf: bool = True, bench: bool = True,
              log=print) -> dict:
    """Run every step (see the module docstring); returns the summary written as ``llm_gpu_suite.json``."""
    import torch

    device = resolve_device(device)
    if not smoke and not device.startswith("cuda"):
        raise ValueError(f"device={device!r}: the GPU suite needs a CUDA device (use --smoke for a dry run)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = cache or ("compiled" if device.startswith("cuda") else "static")
    size = _sizes(smoke)
    common = {"target": target, "device": device, "cache": cache, "prompts": size["prompts"],
              "max_new_tokens": size["max_new_tokens"], "lossless_samples": size["lossless_samples"], "hf": hf,
              "progress": False}
    steps, t_start = [], time.perf_counter()

    def step(name: str, fn):
        t0 = time.perf_counter()
        log(f"gpu_suite: {name} ...")
        path = fn()
        steps.append({"step": name, "file": None if path is None else path.name,
                      "seconds": round(time.perf_counter() - t0, 2)})
        log(f"gpu_suite: {name} done in {steps[-1]['seconds']:.1f} s" + ("" if path is None else f" -> {path}"))

    for family in families:
        name = f"llm_gpu_{output_name(family)}.json"
        step(f"validate {family}", lambda family=family, name=name: validate(
            draft=family, lengths=size["head_lengths" if str(family).startswith(HEADS) else "lengths"],
            **common).write(out_dir / name))
    model_families = [f for f in families if not str(f).startswith(CHAIN_ONLY)]  # trees need a draft model
    if model_families:
        step(f"trees ({model_families[0]})", lambda: validate(
            draft=model_families[0], verifiers=("token",), lengths=size["lengths"][:1], trees=size["trees"],
            multi_verifiers=("kseq", "multiround"), **common).write(out_dir / "llm_gpu_trees.json"))
    if bench and BENCHMARK.is_file():
        step("bench_verifiers_torch", lambda: _benchmark(device, target, size["bench"], out_dir, smoke))
    summary = {"device": device, "device_name": torch.cuda.get_device_name(0) if device.startswith("cuda") else
               platform.processor() or platform.machine(), "torch": torch.__version__, "cache": cache,
               "smoke": smoke, "target": target, "families": list(families), "steps": steps,
               "seconds": round(time.perf_counter() - t_start, 2)}
    (out_dir / "llm_gpu_suite.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _benchmark(device: str, target: str, extra: list, out_dir: Path, smoke: bool) -> Path:
    """The verifier benchmark in a child process (its own CUDA context), its JSON kept as a record."""
    cmd = [sys.executable, str(BENCHMARK), "--device", device, "--json",
           "--target", "none" if smoke or target != DEFAULT_TARGET else DEFAULT_TARGET, *extra]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{BENCHMARK.name} failed: {done.stderr.strip()[-800:]}")
    path = out_dir / "llm_gpu_verifiers.json"
    path.write_text(done.stdout if done.stdout.endswith("\n") else done.stdout + "\n")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m llm_bridge.gpu_suite", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--target", default=DEFAULT_TARGET, help="target model: smollm2, a folder or a .gguf file")
    ap.add_argument("--families", default=",".join(FAMILIES), help="draft families, comma-separated")
    ap.add_argument("--device", default="auto", help="cuda (auto picks it when visible); cpu only with --smoke")
    ap.add_argument("--out-dir", type=Path, default=FIGURES, help="where the llm_gpu_* files go")
    ap.add_argument("--cache", default=None, choices=("dynamic", "static", "compiled"),
                    help="KV caches (default: compiled on CUDA, static eager otherwise)")
    ap.add_argument("--smoke", action="store_true", help="toy sizes: the same steps in seconds, on any device")
    ap.add_argument("--no-hf", action="store_true", help="skip Hugging Face's assisted generation and decode step")
    ap.add_argument("--no-bench", action="store_true", help="skip the verifier benchmark")
    args = ap.parse_args(argv)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    if not families:
        ap.error("--families: name at least one draft family")
    try:
        summary = run_suite(target=args.target, families=families, device=args.device, out_dir=args.out_dir,
                            smoke=args.smoke, cache=args.cache, hf=not args.no_hf, bench=not args.no_bench,
                            log=lambda line: print(line, file=sys.stderr))
    except (ModelNotFound, FileNotFoundError, VocabularyMismatch, ImportError, ValueError, RuntimeError) as err:
        print(f"python -m llm_bridge.gpu_suite: {err}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
