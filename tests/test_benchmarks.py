"""The benchmark scripts keep running (tiny sizes; speed is reported by the scripts, not asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def test_token_mc_benchmark_runs():
    proc = subprocess.run([sys.executable, str(BENCH / "bench_token_mc.py"), "--scale", "0.001", "--repeat", "1",
                           "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [r["blocks_per_s"] > 0 for r in out["results"]] == [True, True]


def test_torch_verifier_benchmark_runs():
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, str(BENCH / "bench_verifiers_torch.py"), "--vocab", "50", "--L", "3",
                           "--batches", "1,2", "--target", "none", "--repeat", "1", "--device", "cpu", "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    names = ("token", "block", "block_v1", "kseq k=4", "multiround k=4")
    assert [(r["verifier"], r["batch"]) for r in out["results"]] == [(v, b) for b in (1, 2) for v in names]
    assert all(r["verifications_per_s"] > 0 and r["fraction_of_target_call"] is None for r in out["results"])


def test_llm_vocabulary_monte_carlo_benchmark_runs():
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, str(BENCH / "bench_llm_vocab_mc.py"), "--vocabs", "2,300", "--L", "3",
                           "--scale", "0.001", "--repeat", "1", "--device", "cpu", "--log",
                           str(BENCH.parent / "figures" / "llm_distilled_rows.npz"), "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [(r["vocab"], r["verifier"]) for r in out["results"]] == [(2, "token"), (2, "block"), (300, "token"),
                                                                     (300, "block")]
    assert all(r["rows_blocks_per_s"] > 0 and r["row_free_blocks_per_s"] > 0 for r in out["results"])
    assert all(r["torch_blocks_per_s"] > 0 for r in out["results"] + out["logged"])
    assert [r["verifier"] for r in out["logged"]] == ["token", "block"]


def test_sweep_throughput_benchmark_runs():
    pytest = __import__("pytest")
    pytest.importorskip("pandas")
    proc = subprocess.run([sys.executable, str(BENCH / "bench_sweep.py"), "--cells", "4", "--blocks", "2000",
                           "--workers", "1,2", "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [(r["engine"], r["workers"], r["cells"]) for r in out["results"]] == [("pool", 1, 4), ("pool", 2, 4)]
    assert out["results"][0]["ratio_to_first"] == 1.0 and all(r["cells_per_s"] > 0 for r in out["results"])


def test_loop_overhead_benchmark_runs():
    proc = subprocess.run([sys.executable, str(BENCH / "bench_loop_overhead.py"), "--target", "tiny", "--prompts", "2",
                           "--tokens", "10", "--repeat", "1", "--batch", "1,2", "--json"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert [(r["batch"], r["verifier"]) for r in out["results"]] == [(1, "token"), (1, "block"), (2, "token"),
                                                                     (2, "block")]
    assert all(r["fraction_of_target_call"] > 0 for r in out["results"])
    # per batch iteration: a batch of 2 calls the target at most as often as its 2 sequences iterate
    assert all(r["batch_iterations"] <= r["iterations"] for r in out["results"])
    assert all(r["iteration_ms"] >= r["target_ms"] + r["draft_ms"] for r in out["results"])


def test_audit_benchmark_runs():
    proc = subprocess.run([sys.executable, str(BENCH / "bench_audit.py"), "--samples", "500", "--samplers",
                           "token,gumbel", "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [r["sampler"] for r in out["results"]] == ["token", "gumbel"] and out["goal_s"] == 120.0


def test_vocabulary_goals_benchmark_runs_and_writes_the_readme_table(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("before\n<!-- bench:vocab-goals -->\nold\n<!-- /bench:vocab-goals -->\nafter\n")
    proc = subprocess.run([sys.executable, str(BENCH / "bench_vocab_goals.py"), "--scale", "0.001", "--repeat", "1",
                           "--json", "--write", str(tmp_path / "goals.json"), "--readme", str(readme)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(BENCH.parent)})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert len(out["results"]) == 14 and all(r["ratio"] >= 0 for r in out["results"])
    assert json.loads((tmp_path / "goals.json").read_text())["results"] == out["results"]
    text = readme.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "old" not in text
    assert text.count("| ") >= 14 and "OTM-8 optimum without replacement" in text and "SpecDec++ policy" in text


def test_the_readme_goal_table_is_the_committed_measurement():
    """The README's table is written by the benchmark from figures/bench_vocab_goals.json, never typed in."""
    sys.path.insert(0, str(BENCH))
    try:
        from bench_vocab_goals import MARK, table
    finally:
        sys.path.pop(0)
    root = BENCH.parent
    saved = json.loads((root / "figures" / "bench_vocab_goals.json").read_text())
    text = (root / "README.md").read_text()
    block = text[text.index(MARK[0]) + len(MARK[0]):text.index(MARK[1])].strip()
    assert block == table(saved["results"], saved["machine"])


def test_host_sync_benchmark_runs_and_counts_per_iteration():
    pytest.importorskip("torch")
    out_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_host_syncs_{os.getpid()}.json"
    proc = subprocess.run([sys.executable, str(BENCH / "bench_host_syncs.py"), "--tokens", "12", "--L", "2",
                           "--tree", "2x1", "--iid-tree", "iid:2:2", "--json", str(out_file)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(out_file.read_text())
    out_file.unlink()
    assert {"chain token L = 2", "chain block L = 2", "tree kseq 2x1"} <= set(out)
    assert any(label.startswith("tree gbv ") for label in out)  # on 2x1 (two i.i.d. paths) or the i.i.d. tree
    token = out["chain token L = 2"]
    # the accepted lengths, read once per iteration (the timer's events are read in batches of 256 calls)
    assert token["iterations"] >= 2 and token["max"] == 1
    assert all(site.startswith("numpy at otspec/distributions.py") for site, _ in token["sites"])  # to_host
