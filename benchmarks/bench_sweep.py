"""Sweep throughput: cells per second on 1, 2 and 4 workers of the local pool (and a Dask LocalCluster).

Usage: python benchmarks/bench_sweep.py [--cells 48] [--blocks 200000] [--workers 1,2,4] [--dask] [--json]

Each cell is a Monte Carlo estimate (row-free, V = 1,000, L = 4) plus the exact value of one
random IID pair; the same spec runs into a fresh folder per worker count. Prints cells/s and the
ratio to one worker (on a 2-core machine, 2 workers should approach 2x and 4 cannot beat it).
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from otspec.sweep import run_sweep

SPEC = """
name = "bench"
seed = 0
quantities = ["exact", "monte_carlo"]
L = [4]
blocks = {blocks}

[[pairs]]
kind = "random_iid"
vocab = 1000
concentration = {concentrations}

[[verifiers]]
name = "token"
[[verifiers]]
name = "block"
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=48, help="cells in the grid (even)")
    parser.add_argument("--blocks", type=int, default=200_000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--dask", action="store_true", help="also time a Dask LocalCluster of each size")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    concentrations = [float(i) for i in range(max(1, args.cells // 2))]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "bench.toml"
        spec.write_text(SPEC.format(blocks=args.blocks, concentrations=concentrations))
        engines = [("pool", int(w)) for w in args.workers.split(",")]
        engines += [("dask", int(w)) for w in args.workers.split(",")] if args.dask else []
        for engine, n in engines:
            out = Path(tmp) / f"{engine}{n}"
            t0 = time.perf_counter()
            if engine == "pool":
                res = run_sweep(spec, out, workers=n, progress=False)
            else:
                res = run_sweep(spec, out, cluster=f"local:{n}", progress=False)
            seconds = time.perf_counter() - t0
            rows.append({"engine": engine, "workers": n, "cells": res["cells"], "seconds": seconds,
                         "cells_per_s": res["cells"] / seconds})
    base = {r["engine"]: r["cells_per_s"] for r in rows if r["workers"] == rows[0]["workers"]}
    for r in rows:
        r["ratio_to_first"] = r["cells_per_s"] / base[r["engine"]]
    info = {"cpus": os.cpu_count(), "python": platform.python_version()}
    if args.json:
        print(json.dumps({"machine": info, "blocks_per_cell": args.blocks, "results": rows}, indent=2))
        return
    print(f"sweep throughput, {rows[0]['cells']} cells of {args.blocks:,} Monte Carlo blocks ({info})")
    for r in rows:
        print(f"  {r['engine']:<5} {r['workers']} worker(s)  {r['seconds']:7.2f} s  {r['cells_per_s']:7.2f} cells/s  "
              f"ratio to {rows[0]['workers']} worker(s) {r['ratio_to_first']:.2f}")


if __name__ == "__main__":
    main()
