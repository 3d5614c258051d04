"""Multi-draft OTM-k solve times: the sorted-prefix value, the HiGHS LP by size, max-flow, no replacement.

Usage: python benchmarks/bench_otm.py [--scale 1] [--repeat 3] [--json]

Goal: ``otm_value`` (i.i.d. drafts) for V = 32,000 and k = 8 in <= 20 ms. The script
also times the LP route (3) for growing V^(k+1) up to ``MAX_OTM_LP_VARIABLES`` (and
the max-flow route on the same instances), and the without-replacement value
(exponential-race quadrature) for a moderate and a full vocabulary. Rows are
Dirichlet(1) draws. It prints times and the ratio to the goal; it asserts nothing.
``--scale`` < 1 shrinks every case (smoke runs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time

import numpy as np
import scipy

from otspec.solvers import MAX_OTM_LP_VARIABLES, otm_lp, otm_maxflow, otm_value

GOAL_V, GOAL_K, GOAL_S = 32_000, 8, 0.020
LP_CASES = [(4, 3), (8, 3), (12, 3), (6, 5), (16, 3), (20, 3), (12, 4)]  # V^(k+1): 256 ... 248,832
WOR_CASES = [(2_000, 8), (32_000, 8)]


def best_time(fn, repeat):
    best, out = math.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def rows(V, seed, concentration=1.0):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(V, concentration)), rng.dirichlet(np.full(V, concentration))


def run_fast(scale, repeat):
    V = max(100, int(GOAL_V * scale))
    out = []
    for conc in (1.0, 0.1):
        p, q = rows(V, seed=1, concentration=conc)
        otm_value(p, q, GOAL_K)  # warm-up (imports, caches)
        seconds, value = best_time(lambda p=p, q=q: otm_value(p, q, GOAL_K), max(repeat, 3))
        out.append({"vocab_size": V, "k": GOAL_K, "dirichlet": conc, "seconds": seconds, "value": value,
                    "goal_s_over_time": GOAL_S / seconds})
    return out


def run_lp(scale, repeat):
    rows_out, skipped = [], []
    cap = max(256, MAX_OTM_LP_VARIABLES * scale)
    for V, k in LP_CASES:
        n = V ** (k + 1)
        if n > MAX_OTM_LP_VARIABLES:
            skipped.append({"vocab_size": V, "k": k, "variables": n})
            continue
        if n > cap:
            continue
        p, q = rows(V, seed=n)
        lp_s, lp = best_time(lambda p=p, q=q, k=k: otm_lp(p, q, k), repeat)
        mf_s, mf = best_time(lambda p=p, q=q, k=k: otm_maxflow(p, q, k), repeat)
        rows_out.append({"vocab_size": V, "k": k, "variables": n, "lp_seconds": lp_s, "maxflow_seconds": mf_s,
                         "maxflow_edges": mf.n_variables, "value": lp.value,
                         "abs_diff_lp_maxflow": abs(lp.value - mf.value),
                         "abs_diff_lp_sorted_prefix": abs(lp.value - otm_value(p, q, k))})
    return rows_out, skipped


def run_wor(scale, repeat):
    out = []
    for V, k in WOR_CASES:
        V = max(20, int(V * scale))
        p, q = rows(V, seed=V)
        seconds, value = best_time(lambda p=p, q=q, k=k: otm_value(p, q, k, replacement=False), repeat)
        out.append({"vocab_size": V, "k": k, "seconds": seconds, "value": value,
                    "value_with_replacement": otm_value(p, q, k)})
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="shrink every case (< 1 for smoke runs)")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    fast = run_fast(args.scale, args.repeat)
    lp, skipped = run_lp(args.scale, args.repeat)
    wor = run_wor(args.scale, max(1, min(args.repeat, 2)))
    largest = max(lp, key=lambda r: r["variables"], default=None)
    info = {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__}
    out = {"machine": info, "scale": args.scale, "goal": {"vocab_size": GOAL_V, "k": GOAL_K, "seconds": GOAL_S},
           "fast_route": fast, "max_otm_lp_variables": MAX_OTM_LP_VARIABLES, "lp": lp,
           "lp_skipped_over_limit": skipped, "lp_largest_solved": largest, "without_replacement": wor,
           # > 1 means faster than the goal
           "ratio_goal_over_time": fast[0]["goal_s_over_time"]}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"OTM-k, scale {args.scale}, best of {args.repeat}  ({info})")
    print("otm_value (sorted prefixes, i.i.d. drafts):")
    for r in fast:
        print(f"  V={r['vocab_size']:,} k={r['k']} Dirichlet({r['dirichlet']:g})  {r['seconds'] * 1e3:7.2f} ms  "
              f"alpha = {r['value']:.6f}  goal {GOAL_S * 1e3:g} ms / time = {r['goal_s_over_time']:.1f}x")
    print(f"LP route (MAX_OTM_LP_VARIABLES = {MAX_OTM_LP_VARIABLES:,}) and max-flow route:")
    for r in lp:
        print(f"  V={r['vocab_size']:<3} k={r['k']}  {r['variables']:>9,} vars  LP {r['lp_seconds']:7.3f} s  "
              f"max-flow {r['maxflow_seconds']:6.3f} s  alpha = {r['value']:.6f}  "
              f"|LP - flow| = {r['abs_diff_lp_maxflow']:.1e}  |LP - sorted| = {r['abs_diff_lp_sorted_prefix']:.1e}")
    for r in skipped:
        print(f"  V={r['vocab_size']:<3} k={r['k']}  {r['variables']:>9,} vars  skipped: above MAX_OTM_LP_VARIABLES")
    if largest:
        print(f"  largest LP solved: V^(k+1) = {largest['variables']:,} ({largest['lp_seconds']:.2f} s)")
    print("otm_value without replacement (exponential-race quadrature):")
    for r in wor:
        print(f"  V={r['vocab_size']:,} k={r['k']}  {r['seconds']:7.3f} s  alpha = {r['value']:.6f} "
              f"(with replacement {r['value_with_replacement']:.6f})")


if __name__ == "__main__":
    main()
