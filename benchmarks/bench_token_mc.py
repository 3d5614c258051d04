"""Verified blocks per second of TokenVerify Monte Carlo (L = 8), V = 2 and V = 1000.

Usage: python benchmarks/bench_token_mc.py [--repeat 3] [--json]

Goal (issue 2): >= 1e6 blocks/s for V = 2 on a 2-core machine. The script prints
the best of ``--repeat`` runs and the ratio to the goal; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform

import numpy as np

from otspec.engine import simulate
from otspec.sources import IIDSource, bernoulli
from otspec.verifiers import TokenVerify

GOAL_V2 = 1e6
L = 8


def cases():
    rng = np.random.default_rng(0)
    yield "V=2 (Ber(0.3) vs Ber(0.25))", bernoulli(0.3), bernoulli(0.25), 4_000_000
    p, q = rng.dirichlet(np.ones(1000)), rng.dirichlet(np.ones(1000))
    yield "V=1000 (Dirichlet(1) pair)", IIDSource(p), IIDSource(q), 200_000


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the number of blocks")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for label, draft, target, n in cases():
        n = max(10_000, int(n * args.scale))
        simulate(draft, target, TokenVerify(), L, min(n, 50_000), seed=99, progress=False)  # warm-up
        best = min(simulate(draft, target, TokenVerify(), L, n, seed=r, progress=False).elapsed_s
                   for r in range(args.repeat))
        rows.append({"case": label, "draft_length": L, "blocks": n, "seconds": best, "blocks_per_s": n / best})
    info = {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__}
    if args.json:
        print(json.dumps({"machine": info, "results": rows, "goal_v2_blocks_per_s": GOAL_V2}, indent=2))
        return
    print(f"TokenVerify Monte Carlo, L = {L}, best of {args.repeat}  ({info})")
    for r in rows:
        print(f"  {r['case']:<30} {r['blocks']:>9} blocks  {r['seconds']:7.3f} s  {r['blocks_per_s']:12,.0f} blocks/s")
    print(f"  V=2 vs goal {GOAL_V2:,.0f} blocks/s: ratio {rows[0]['blocks_per_s'] / GOAL_V2:.2f}")


if __name__ == "__main__":
    main()
