"""Tokens per second of the decode loop on toy sources, and the time of ``python -m otspec.plot adaptive``'s data.

Usage: python benchmarks/bench_toy_decode.py [--tokens 4000] [--repeat 3] [--skip-figure] [--json]

The chain loop (:func:`otspec.engine.generate`) with token verification at L = 4 on an IID pair
(V = 8, the adaptive figure's pair) and a stationary Markov pair (V = 8), at batch 1 and batch 16: the
best of ``--repeat`` runs, by the compiled loop (:mod:`otspec.engine.compiled_chain`, what ``generate`` runs here)
and by the Python loop (the same run watched by an observer, as any run the compiled loop does not serve). Goals (issue 42): >= 50,000 tokens/s at batch 1, and the adaptive figure's
data (:func:`otspec.figures.adaptive.adaptive_data`) in <= 30 s on one core. Run it on a quiet
machine; nothing is asserted, the ratios to the goals are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

from otspec.engine import generate
from otspec.engine.observers import Observer
from otspec.sources import random_iid, random_markov
from otspec.verifiers import TokenVerify

GOAL_TOKENS_PER_S = 50_000
GOAL_FIGURE_S = 30.0


def pairs():
    yield "IID V=8", random_iid(vocab=8, concentration=1.0, seed=3)
    yield "Markov V=8", random_markov(vocab=8, seed=3)


def tokens_per_s(draft, target, batch: int, tokens: int, repeat: int, observers=()) -> float:
    generate(draft, target, TokenVerify(), 4, 200, n_sequences=batch, seed=99, progress=False,
             observers=observers)  # warm-up (and the kernel's compilation)
    best = np.inf
    for r in range(repeat):
        start = time.perf_counter()
        generate(draft, target, TokenVerify(), 4, tokens, n_sequences=batch, seed=r, progress=False,
                 observers=observers)
        best = min(best, time.perf_counter() - start)
    return batch * tokens / best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4000, help="tokens per sequence")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-figure", action="store_true", help="leave out the adaptive figure's data")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    python_tokens = max(200, args.tokens // 10)  # the Python loop is two orders of magnitude slower
    rows = [{"pair": label, "batch": batch, "loop": loop,
             "tokens_per_s": tokens_per_s(*pair, batch, args.tokens if loop == "compiled" else python_tokens,
                                          args.repeat, () if loop == "compiled" else (Observer(),))}
            for label, pair in pairs() for batch in (1, 16) for loop in ("compiled", "python")]
    figure_s = None
    if not args.skip_figure:
        from otspec.figures.adaptive import adaptive_data

        start = time.perf_counter()
        adaptive_data()
        figure_s = time.perf_counter() - start
    info = {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__}
    if args.json:
        print(json.dumps({"machine": info, "results": rows, "adaptive_figure_s": figure_s,
                          "goal_tokens_per_s": GOAL_TOKENS_PER_S, "goal_figure_s": GOAL_FIGURE_S}, indent=2))
        return
    print(f"decode loop on toy sources, token verification, L = 4, best of {args.repeat}  ({info})")
    for r in rows:
        ratio = f"  ratio to goal {r['tokens_per_s'] / GOAL_TOKENS_PER_S:.2f}" if r["batch"] == 1 else ""
        print(f"  {r['pair']:<12} batch {r['batch']:>2}  {r['loop']:<8}  {r['tokens_per_s']:12,.0f} tokens/s{ratio}")
    for (label, batch), (fast, slow) in _pairs_of(rows).items():
        print(f"  {label:<12} batch {batch:>2}  compiled / python: {fast / slow:,.0f}x")
    if figure_s is not None:
        print(f"  adaptive figure data: {figure_s:.1f} s (goal {GOAL_FIGURE_S:.0f} s: ratio {figure_s / GOAL_FIGURE_S:.2f})")


def _pairs_of(rows) -> dict:
    out = {}
    for r in rows:
        out.setdefault((r["pair"], r["batch"]), {})[r["loop"]] = r["tokens_per_s"]
    return {k: (v["compiled"], v["python"]) for k, v in out.items()}


if __name__ == "__main__":
    main()
