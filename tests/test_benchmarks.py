"""The benchmark scripts keep running (tiny sizes; speed is reported by the scripts, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def test_token_mc_benchmark_runs():
    proc = subprocess.run([sys.executable, str(BENCH / "bench_token_mc.py"), "--scale", "0.001", "--repeat", "1",
                           "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [r["blocks_per_s"] > 0 for r in out["results"]] == [True, True]
