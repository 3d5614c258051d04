"""Monte Carlo at language-model vocabulary sizes: verified blocks per second, rows against row-free.

Usage: python benchmarks/bench_llm_vocab_mc.py [--vocabs 2,1000,32000] [--L 8] [--repeat 3] [--scale 1]
       [--device auto] [--log figures/llm_distilled_rows.npz] [--json]

For each V and verifier (token, block) on an IID Dirichlet(1) pair it times ``simulate`` with
``method="rows"`` (the verifier on (B, L+1, V) rows) and ``method="row_free"``
(:mod:`otspec.engine.rowfree`: guide-table draws and sorted-ratio surplus tables), one process,
and prints blocks/s and the row-free / rows ratio. Goal (issue 13): >= 1e6 verified blocks/s at
V = 32,000, L = 8 on 2 cores (the sweep engine runs one process per core). ``--device`` adds the torch
path of the same samplers (``auto``: CUDA when available) beside numpy, and ``--log`` times
``simulate_logged`` on a logged-rows file (the real pair's rows at V = 49,152, tables per step built
once, blocks at random windows). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform

import numpy as np

from otspec.distributions import resolve_device
from otspec.engine import Backend, simulate, simulate_logged
from otspec.sources import IIDSource, load_logged_rows
from otspec.verifiers import BlockVerify, TokenVerify

GOAL = 1e6


def blocks_per_s(p, q, verifier, L, n, method, repeat, device=None) -> float:
    draft, target = IIDSource(p), IIDSource(q)

    def run(blocks, seed):
        return simulate(draft, target, verifier, L, blocks, seed=seed, progress=False,
                        backend=Backend(method=method, device=device))

    run(max(1, n // 10), 99)  # warm-up
    return n / min(run(n, r).elapsed_s for r in range(repeat))


def logged_blocks_per_s(log, verifier, L, n, repeat, device=None) -> float:
    simulate_logged(log, verifier, L, max(1, n // 10), seed=99, progress=False, backend=Backend(device=device))  # warm-up
    return n / min(simulate_logged(log, verifier, L, n, seed=r, progress=False, backend=Backend(device=device)).elapsed_s
                   for r in range(repeat))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocabs", default="2,1000,32000")
    parser.add_argument("--L", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the number of blocks")
    parser.add_argument("--device", default=None, help="also time the torch path there (auto: CUDA if available)")
    parser.add_argument("--log", default=None, help="also time Monte Carlo on this logged-rows file")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    rng = np.random.default_rng(0)
    rows = []
    for V in (int(v) for v in args.vocabs.split(",")):
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        for verifier in (TokenVerify(), BlockVerify()):
            n_rows = max(100, int(args.scale * min(200_000, 6e7 / V)))
            n_free = max(1_000, int(args.scale * 1_000_000))
            slow = blocks_per_s(p, q, verifier, args.L, n_rows, "rows", args.repeat)
            fast = blocks_per_s(p, q, verifier, args.L, n_free, "row_free", args.repeat)
            row = {"vocab": V, "verifier": verifier.name, "rows_blocks_per_s": slow, "row_free_blocks_per_s": fast,
                   "ratio": fast / slow}
            if device is not None:
                row["torch_device"] = str(device)
                row["torch_blocks_per_s"] = blocks_per_s(p, q, verifier, args.L, n_free, "row_free", args.repeat, device)
            rows.append(row)
    logged = []
    if args.log:
        log = load_logged_rows(args.log)
        for verifier in (TokenVerify(), BlockVerify()):
            n = max(1_000, int(args.scale * 1_000_000))
            row = {"file": args.log, "vocab": log.vocab_size, "steps": log.n_steps, "verifier": verifier.name,
                   "row_free_blocks_per_s": logged_blocks_per_s(log, verifier, args.L, n, args.repeat)}
            if device is not None:
                row["torch_blocks_per_s"] = logged_blocks_per_s(log, verifier, args.L, n, args.repeat, device)
            logged.append(row)
    info = {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__}
    if args.json:
        print(json.dumps({"machine": info, "draft_length": args.L, "goal_blocks_per_s": GOAL, "results": rows,
                          "logged": logged}, indent=2))
        return
    print(f"IID Monte Carlo, L = {args.L}, one process, best of {args.repeat}  ({info})")
    for r in rows:
        print(f"  V = {r['vocab']:>6,}  {r['verifier']:<6} rows {r['rows_blocks_per_s']:>12,.0f} blocks/s   "
              f"row-free {r['row_free_blocks_per_s']:>12,.0f} blocks/s   ratio {r['ratio']:8.1f}   "
              f"vs goal (2 processes) {2 * r['row_free_blocks_per_s'] / GOAL:.2f}"
              + (f"   torch on {r['torch_device']} {r['torch_blocks_per_s']:>12,.0f} blocks/s "
                 f"(ratio to numpy {r['torch_blocks_per_s'] / r['row_free_blocks_per_s']:.2f})" if "torch_device" in r else ""))
    for r in logged:
        print(f"  logged rows {r['file']} (V = {r['vocab']:,}, {r['steps']} steps)  {r['verifier']:<6} row-free "
              f"{r['row_free_blocks_per_s']:>12,.0f} blocks/s"
              + (f"   torch {r['torch_blocks_per_s']:>12,.0f} blocks/s" if "torch_blocks_per_s" in r else ""))


if __name__ == "__main__":
    main()
