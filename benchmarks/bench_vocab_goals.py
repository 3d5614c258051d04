"""Every quantity at language-model vocabulary sizes against its goal: one core, printed as ratios.

Usage: python benchmarks/bench_vocab_goals.py [--repeat 3] [--scale 1] [--json] [--write FILE] [--readme README.md]

Each row times one figure on an IID Dirichlet(1) pair (seed 0), best of ``--repeat`` after a warm-up
(numba compiles once), and divides it by its goal (issue 26): ratio >= 1 meets it.

* Monte Carlo, compiled kernels (``simulate(method="compiled")``), L = 8: token >= 10^7 and block
  >= 3·10^6 verified blocks/s at V = 32,000 and at V = 2; the numpy row-free path beside it;
* one multi-draft step, row-free (``simulate_candidates``; multi-round without replacement compiled): k-Seq (k = 2),
  multi-round without replacement (k = 8) and OTM with i.i.d. drafts (k = 8, tables included) at V = 32,000,
  10^6 steps within 5 s (a sweep cell of "a few seconds");
* the OTM-k optimum without replacement at V = 32,000, k = 8 within 20 ms;
* the exact SpecDec++ policy at V = 32,000, L = 8 within 1 s: the certified bracket (width <= 1e-9) at draft costs
  c = 0.1 and 0.01 of a target call (refused by a size limit: ratio 0).

``--write`` saves the rows as JSON; ``--readme`` rewrites the table between the markers
``<!-- bench:vocab-goals -->`` and ``<!-- /bench:vocab-goals -->`` of that file from them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import time
from pathlib import Path

import numpy as np

from otspec.engine import Backend, simulate, simulate_candidates
from otspec.errors import SizeLimitError
from otspec.solvers import otm_value
from otspec.sources import IIDSource
from otspec.theory.adaptive import optimal_stopping
from otspec.verifiers import MULTI_DRAFT_REGISTRY, BlockVerify, TokenVerify

MARK = "<!-- bench:vocab-goals -->", "<!-- /bench:vocab-goals -->"


def best(fn, repeat: int) -> float:
    fn()  # warm-up: compiles, fills caches
    return min(_timed(fn) for _ in range(repeat))


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def pair(V: int):
    rng = np.random.default_rng(0)
    return rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))


def rows(repeat: int, scale: float) -> list[dict]:
    out = []
    for V in (32000, 2):
        p, q = pair(V)
        d, t = IIDSource(p), IIDSource(q)
        for verifier, goal in ((TokenVerify(), 1e7), (BlockVerify(), 3e6)):
            for method in ("compiled", "row_free"):
                n = int(scale * (4_000_000 if method == "compiled" else 1_000_000))
                secs = best(lambda d=d, t=t, v=verifier, n=n, m=method: simulate(d, t, v, 8, n, seed=1,
                                                                                 progress=False,
                                                                                 backend=Backend(method=m)), repeat)
                out.append({"figure": f"{verifier.name} Monte Carlo, {method}", "vocab": V, "value": n / secs,
                            "unit": "blocks/s", "goal": goal, "ratio": n / secs / goal})
    p, q = pair(32000)
    for name, k in (("kseq", 2), ("multiround_without_replacement", 8), ("otm", 8)):
        verifier = MULTI_DRAFT_REGISTRY[name]()
        n = int(scale * 1_000_000)
        secs = best(lambda v=verifier, k=k, n=n: simulate_candidates(p, q, v, k, n, seed=1, progress=False), repeat)
        out.append({"figure": f"{name} step (k = {k}), 10^6 steps", "vocab": 32000, "value": secs, "unit": "s",
                    "goal": 5.0, "ratio": 5.0 / secs})
    secs = best(lambda: otm_value(p, q, 8, replacement=False), repeat)
    out.append({"figure": "OTM-8 optimum without replacement", "vocab": 32000, "value": secs, "unit": "s",
                "goal": 0.02, "ratio": 0.02 / secs})
    for c in (0.1, 0.01):
        figure = f"exact SpecDec++ policy, L = 8, c = {c}"
        try:
            secs = best(lambda c=c: optimal_stopping(p, q, 8, c), repeat)
            width = float(np.subtract(*optimal_stopping(p, q, 8, c).latency_bounds[::-1]))
            out.append({"figure": figure, "vocab": 32000, "value": secs, "unit": "s", "goal": 1.0, "ratio": 1.0 / secs,
                        "note": f"bracket width {width:.1e}"})
        except SizeLimitError as err:
            out.append({"figure": figure, "vocab": 32000, "value": None, "unit": "s", "goal": 1.0, "ratio": 0.0,
                        "note": f"refused: {err}"})
    return out


def table(results: list[dict], machine: str) -> str:
    lines = [f"Measured by `python benchmarks/bench_vocab_goals.py --readme README.md` on {machine}; ratio >= 1 "
             "meets the goal.", "", "| figure | V | measured | goal | ratio |", "|---|---|---|---|---|"]
    for r in results:
        value = "refused" if r["value"] is None else (f"{r['value']:.3g} {r['unit']}" if r["unit"] == "blocks/s"
                                                      else f"{r['value'] * 1e3:.0f} ms")
        goal = f"{r['goal']:.3g} {r['unit']}" if r["unit"] == "blocks/s" else f"{r['goal'] * 1e3:.0f} ms"
        lines.append(f"| {r['figure']} | {r['vocab']:,} | {value} | {goal} | {r['ratio']:.2f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the number of blocks and steps")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--write", default=None, help="save the rows (JSON) here")
    parser.add_argument("--readme", default=None, help="rewrite the marked table of this file")
    args = parser.parse_args(argv)
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, one process"
    results = rows(args.repeat, args.scale)
    if args.write:
        Path(args.write).write_text(json.dumps({"machine": machine, "results": results}, indent=2) + "\n")
    if args.readme:
        path = Path(args.readme)
        text = path.read_text()
        block = f"{MARK[0]}\n{table(results, machine)}\n{MARK[1]}"
        new, n = re.subn(re.escape(MARK[0]) + r".*?" + re.escape(MARK[1]), lambda _: block, text, flags=re.S)
        if n != 1:
            raise SystemExit(f"{path}: expected one {MARK[0]} ... {MARK[1]} block")
        path.write_text(new)
    if args.json:
        print(json.dumps({"machine": machine, "results": results}, indent=2))
        return
    print(f"goals of issue 26 ({machine})")
    for r in results:
        shown = "refused" if r["value"] is None else f"{r['value']:.4g} {r['unit']}"
        print(f"  {r['figure']:<48} V={r['vocab']:>6,}  {shown:>18}  goal {r['goal']:.3g}  ratio {r['ratio']:.2f}")


if __name__ == "__main__":
    main()
