"""The audit with no options: seconds against the 2-minute goal, for otspec's samplers and Hugging Face's.

Usage: python benchmarks/bench_audit.py [--samples 200000] [--samplers token,block,gumbel,hf] [--json]

Runs ``otspec.audit.audit`` on the default synthetic rows (V = 64, L = 2) and prints each sampler's wall time
(the audit's own work and the sampler's calls together), its ratio to the goal of 120 s, and the throughput.
Hugging Face's ``_speculative_sampling`` takes one sequence per call, so its audit is dominated by the sampler.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

from otspec.audit import DEFAULT_SAMPLES, audit
from otspec.audit.adapters import block, gumbel, hf_speculative_sampling, token

GOAL_S = 120.0
SAMPLERS = {"token": token, "block": block, "gumbel": gumbel, "hf": hf_speculative_sampling}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=DEFAULT_SAMPLES)
    ap.add_argument("--samplers", default="token,block,gumbel,hf")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    results = []
    for name in [s.strip() for s in args.samplers.split(",") if s.strip()]:
        t0 = time.perf_counter()
        report = audit(SAMPLERS[name], samples=args.samples, progress=False)
        seconds = time.perf_counter() - t0
        results.append({"sampler": name, "samples": args.samples, "seconds": seconds, "ratio_to_goal": seconds / GOAL_S,
                        "samples_per_s": args.samples / seconds, "verdict": report.verdict})
    out = {"goal_s": GOAL_S, "cpus": os.cpu_count(), "machine": platform.machine(), "results": results}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for r in results:
            print(f"{r['sampler']:8s} {r['samples']:>9,} samples  {r['seconds']:7.1f} s  {r['ratio_to_goal']:.2f} of the "
                  f"{GOAL_S:.0f} s goal  ({r['samples_per_s']:,.0f} samples/s)  {r['verdict']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
