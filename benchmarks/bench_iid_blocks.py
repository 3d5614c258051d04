"""IID-pair expected accepted lengths without enumeration: time and certified gap by V and L.

Usage: python benchmarks/bench_iid_blocks.py [--repeat 3] [--json]

Rows: "dirichlet" (p, q independent Dirichlet(1)) and "close" (q Dirichlet(1),
p = normalised q * exp(0.1 N(0, 1))). Each case times iid_block_values (token, block
verification (17) and optimum (8) together, default route and step) and prints the gap
high - low of both bounded values. Goal: V = 50,000, L = 16 well under 1 s on 2 cores, with
gaps below 1e-6. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

from otspec.theory.iid import LATTICE_POINTS, iid_block_values

VOCABS = (1_000, 32_000, 50_000)
LENGTHS = (4, 16)


def rows(kind: str, V: int, seed: int):
    rng = np.random.default_rng(seed)
    q = rng.dirichlet(np.ones(V))
    p = rng.dirichlet(np.ones(V)) if kind == "dirichlet" else q * np.exp(0.1 * rng.standard_normal(V))
    return p / p.sum(), q


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = []
    for kind in ("dirichlet", "close"):
        for V in VOCABS:
            p, q = rows(kind, V, seed=V)
            for L in LENGTHS:
                best = float("inf")
                for _ in range(max(1, args.repeat)):
                    start = time.perf_counter()
                    v = iid_block_values(p, q, L)
                    best = min(best, time.perf_counter() - start)
                results.append({"rows": kind, "vocab_size": V, "draft_length": L, "seconds": best,
                                "token": v.token.value, "verification": v.verification.value,
                                "verification_gap": v.verification.gap, "optimum": v.optimum.value,
                                "optimum_gap": v.optimum.gap, "method": v.optimum.method})
    info = {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
            "lattice_points": LATTICE_POINTS}
    if args.json:
        print(json.dumps({"machine": info, "results": results}, indent=2))
        return
    print(f"IID block values, best of {args.repeat}  ({info})")
    for r in results:
        print(f"  {r['rows']:<9} V={r['vocab_size']:<6} L={r['draft_length']:<3} {r['seconds']:7.3f} s"
              f"  token {r['token']:.6f}  BV {r['verification']:.8f} (gap {r['verification_gap']:.1e})"
              f"  opt {r['optimum']:.8f} (gap {r['optimum_gap']:.1e})  [{r['method']}]")


if __name__ == "__main__":
    main()
