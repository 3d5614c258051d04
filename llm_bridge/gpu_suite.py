"""``python -m llm_bridge.gpu_suite``: every GPU record of the README in one command.

On a CUDA machine it writes, into ``--out-dir`` (``build/records``; ``make gpu``: ``figures/``), with compiled static caches, rows kept on the GPU
(every iteration reads back once: the accepted lengths, or a tree's emitted counts and walked nodes), 32 prompts and
the prediction prompts after them, the timing guard of :func:`llm_bridge.runs.timed_runs`, the cost profile
(:func:`llm_bridge.calibrate.calibrate`) and Hugging Face's assisted generation (compiled static cache) as the peer,
interleaved with the runs:

* ``llm_gpu_<family>.json`` — ``llm_bridge.validate`` for each draft family (default: the distilled draft and the
  EAGLE head), token / block / v1 block verification at L = 1, 2, 3, 4;
* ``llm_gpu_multidraft.json`` — k-Seq and the OTM optimum on K i.i.d. drafts (``2x1``, ``3x1``; rows truncated to
  the top 8 tokens, which OTM's plan needs) with the first model family;
* ``llm_gpu_trees.json`` — trees on the device walk: k-Seq on ``iid:2:3``, Traversal on ``2x2x1`` (drawn without
  replacement) and EAGLE-2's confidence tree ``eagle2:3:2:6`` with the naive verifier;
* ``llm_gpu_verifiers.json`` — ``benchmarks/bench_verifiers_torch.py``: every verifier on the GPU against one target
  call (when the benchmarks folder is at hand);
* ``llm_gpu_suite.json`` — what ran, where, how long each step took, and whether the whole fitted ``--budget``.

The sizes are chosen to fit one call of 8 minutes on an H100 (compilation included): 32 prompts of 32 new tokens
in batches of 8. ``python -m otspec.plot record figures/llm_gpu_<name>.json`` (or the report) draws the records.
``--smoke --device cpu`` runs the same steps at toy sizes (one prompt, a few tokens, eager static caches): the test
suite does that with tiny models.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from pathlib import Path

from otspec.clitools import (
    ArgumentParser,
    HelpFormatter,
    one_line,
    path_argument,
    real,
    writable_folder,
)

from .drafters import DRAFTERS, check_drafter_spec, drafter_names
from .models import (
    DEFAULT_TARGET,
    ModelNotFound,
    VocabularyMismatch,
    check_model_spec,
    resolve_device,
)
from .validate import RECORDS_OUT, output_name, validate
from .validate_config import ValidateConfig

__all__ = ["FAMILIES", "MULTI_DRAFT", "TREE_PAIRS", "main", "run_suite"]

#: Draft families on a GPU: the distilled draft and the EAGLE head (the int8 draft uses CPU dynamic quantisation).
FAMILIES = ("distilled", "eagle")
#: Feature heads draft chains only.
HEADS = ("eagle", "medusa", "head:")
#: Drafters whose records have no tree runs: prompt lookup and the feature heads.
CHAIN_ONLY = ("ngram", *HEADS)
#: The multi-draft step: verifiers and K i.i.d. drafts (rows truncated to the top 8 tokens for OTM's plan).
MULTI_DRAFT = {"multi_verifiers": ("kseq", "otm"), "trees": ("2x1", "3x1"), "top_k": 8}
#: The tree step: each verifier on a tree it is lossless for.
TREE_PAIRS = (("kseq", "iid:2:3"), ("traversal", "2x2x1"), ("naive", "eagle2:3:2:6"))
#: Seconds one suite call may take on an H100 (compilation included).
BUDGET_SECONDS = 480
#: The longest budget taken (a week).
MAX_BUDGET_SECONDS = 7 * 86_400
BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_verifiers_torch.py"


def _sizes(smoke: bool) -> dict:
    if smoke:
        return {"prompts": 1, "max_new_tokens": 6, "lengths": (1, 2), "lossless_samples": 20,
                "multi_trees": ("2x1",), "tree_pairs": (("kseq", "2x1"), ("traversal", "2x1"), ("naive", "eagle2:2:2:3")),
                "bench": ["--vocab", "512", "--L", "2", "--batches", "1,4", "--repeat", "1"]}
    return {"prompts": 32, "max_new_tokens": 32, "lengths": (1, 2, 3, 4), "lossless_samples": 100,
            "multi_trees": MULTI_DRAFT["trees"], "tree_pairs": TREE_PAIRS, "bench": ["--batches", "1,16,256"]}


def run_suite(*, target: str = DEFAULT_TARGET, families=FAMILIES, device: str = "auto", out_dir=RECORDS_OUT,
              smoke: bool = False, cache: str | None = None, hf: bool = True, bench: bool = True,
              budget: float = BUDGET_SECONDS, log=print) -> dict:
    """Run every step (see the module docstring); returns the summary written as ``llm_gpu_suite.json``."""
    import torch

    device = resolve_device(device)
    if not smoke and not device.startswith("cuda"):
        raise ValueError(f"device={device!r}: the GPU suite needs a CUDA device (use --smoke for a dry run)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = cache or ("compiled" if device.startswith("cuda") else "static")
    size = _sizes(smoke)
    common = ValidateConfig(target=target, device=device, cache=cache, prompts=size["prompts"],
                            max_new_tokens=size["max_new_tokens"], hf=hf, progress=False, batch_size=8)
    steps, t_start = [], time.perf_counter()

    def step(name: str, fn):
        t0 = time.perf_counter()
        log(f"gpu_suite: {name} ... ({t0 - t_start:.0f} s of {budget:.0f} used)")
        path = fn()
        steps.append({"step": name, "file": None if path is None else path.name,
                      "seconds": round(time.perf_counter() - t0, 2)})
        log(f"gpu_suite: {name} done in {steps[-1]['seconds']:.1f} s" + ("" if path is None else f" -> {path}"))

    for family in families:  # the chains: every single-draft verifier at L = 1..4
        name = f"llm_gpu_{output_name(family)}.json"
        step(f"validate {family}", lambda family=family, name=name: validate(common.but(
            draft=family, lengths=size["lengths"], lossless_samples=size["lossless_samples"],
            lossless_verifiers=("block_v1",))).write(out_dir / name))
    model_families = [f for f in families if not str(f).startswith(CHAIN_ONLY)]  # trees need a draft model
    if model_families:
        family = model_families[0]
        step(f"multi-draft ({family})", lambda: validate(common.but(
            draft=family, verifiers=("token",), lengths=size["lengths"][:1], trees=size["multi_trees"],
            multi_verifiers=MULTI_DRAFT["multi_verifiers"], top_k=MULTI_DRAFT["top_k"], lossless_samples=0,
        )).write(out_dir / "llm_gpu_multidraft.json"))
        step(f"trees ({family})", lambda: validate(common.but(
            draft=family, verifiers=("token",), lengths=size["lengths"][:1], tree_pairs=size["tree_pairs"],
            lossless_samples=0)).write(out_dir / "llm_gpu_trees.json"))
    if bench and BENCHMARK.is_file():
        step("bench_verifiers_torch", lambda: _benchmark(device, target, size["bench"], out_dir, smoke))
    seconds = round(time.perf_counter() - t_start, 2)
    summary = {"device": device, "device_name": torch.cuda.get_device_name(0) if device.startswith("cuda") else
               platform.processor() or platform.machine(), "torch": torch.__version__, "cache": cache,
               "smoke": smoke, "target": target, "families": list(families), "steps": steps,
               "seconds": seconds, "budget_seconds": budget, "within_budget": seconds <= budget}
    if seconds > budget:
        log(f"gpu_suite: {seconds:.0f} s, over the budget of {budget:.0f} s")
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
    ap = ArgumentParser(prog="python -m llm_bridge.gpu_suite", description=__doc__.split("\n\n")[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("--target", default=DEFAULT_TARGET, help="target model: smollm2, a folder or a .gguf file")
    ap.add_argument("--families", default=",".join(FAMILIES), help="draft families, comma-separated")
    ap.add_argument("--device", default="auto", help="cuda (auto picks it when visible); cpu only with --smoke")
    ap.add_argument("--out-dir", type=path_argument, default=RECORDS_OUT,
                    help="where the llm_gpu_* files go (make gpu: the committed figures/)")
    ap.add_argument("--cache", default=None, choices=("dynamic", "static", "compiled"),
                    help="KV caches (default: compiled on CUDA, static eager otherwise)")
    ap.add_argument("--smoke", action="store_true", help="toy sizes: the same steps in seconds, on any device")
    ap.add_argument("--no-hf", action="store_true", help="skip Hugging Face's assisted generation and decode step")
    ap.add_argument("--no-bench", action="store_true", help="skip the verifier benchmark")
    ap.add_argument("--budget", type=real, default=BUDGET_SECONDS,
                    help="seconds the whole suite may take (the summary says whether it fitted)")
    args = ap.parse_args(argv)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    if not families:
        ap.error("--families: name at least one draft family")
    if len(set(families)) < len(families):
        ap.error(f"--families {args.families}: a family named twice")
    for family in families:  # a typo is named here, before the device or any model
        try:
            if family.partition(":")[0] in DRAFTERS:
                check_drafter_spec(family, args.target)
            else:
                check_model_spec(family, "draft family")
        except (ModelNotFound, ValueError) as err:
            ap.error(f"--families {family}: {one_line(err)} (the registered drafters: {drafter_names()})")
    if not 0 < args.budget <= MAX_BUDGET_SECONDS:  # a week: a longer one is a typo (1e308 was printed in full)
        ap.error(f"--budget: expected a positive number of seconds, at most a week ({MAX_BUDGET_SECONDS:,}), got "
                 f"{args.budget:g}")
    try:
        writable_folder(args.out_dir, "--out-dir")  # before any model loads: a file, a device, /proc, a loop
        summary = run_suite(target=args.target, families=families, device=args.device, out_dir=args.out_dir,
                            smoke=args.smoke, cache=args.cache, hf=not args.no_hf, bench=not args.no_bench,
                            budget=args.budget, log=lambda line: print(line, file=sys.stderr))
    except (ModelNotFound, FileNotFoundError, VocabularyMismatch, ImportError, ValueError, RuntimeError) as err:
        print(f"python -m llm_bridge.gpu_suite: {one_line(err)}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
