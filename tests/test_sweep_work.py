"""The sweep's per-cell work estimate (issue 25): counted from the cell's sizes, a cell quantity over MAX_CELL_WORK is
left empty with a note in milliseconds instead of running for minutes, and the sweep reports its estimate first."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from otspec.sources import random_iid, save_source
from otspec.sweep import run_cell, run_sweep
from otspec.sweep.work import MAX_CELL_WORK, cell_work, spec_work

BASE = {"params": {}, "temperature": 1.0, "cost_ratio": 0.0, "blocks": 1000, "tokens": 50, "sequences": 4,
        "confidence": 0.95}


def _cell(pair, verifier, L=None, k=None, tree=None, **over):
    return {**BASE, "pair": pair, "verifier": verifier, "L": L, "k": k, **({"tree": tree} if tree else {}), **over}


IID = {"kind": "random_iid", "vocab": 500, "concentration": 1.0, "sparsity": 0.0, "pair_seed": 0}
MARKOV = {**IID, "kind": "random_markov"}
LOG = {"kind": "logged", "file": "rows.npz", "tail": "overlap"}


@pytest.mark.parametrize("cell,quantity,vocab,iid,entries", [
    (_cell(IID, "token", L=4), "monte_carlo", 500, True, 1000 * 5),  # row-free: V does not enter
    (_cell(IID, "block", L=4), "monte_carlo", 500, True, 1000 * 5),
    (_cell(IID, "block_v1", L=4), "monte_carlo", 500, True, 1000 * 5 * 500),  # no row-free sampler
    (_cell(MARKOV, "block", L=4), "monte_carlo", 500, False, 1000 * 5 * 500),
    (_cell(IID, "kseq", k=3), "monte_carlo", 500, True, 1000 * 3),  # row-free candidates
    (_cell(MARKOV, "kseq", k=3), "monte_carlo", 500, False, 1000 * 3 * 500),
    (_cell(IID, "greedy", k=3), "monte_carlo", 500, True, 1000 * 3 * 500),  # structured draws: rows
    (_cell(IID, "otm", tree="2x2"), "monte_carlo", 500, True, 1000 * 6 * (500 + 4)),  # 2 + 4 drafts: rows, prefixes
    (_cell(IID, "otm", k=3), "monte_carlo", 500, True, 1000 * 3),  # i.i.d. drafts: the score sampler
    (_cell(IID, "otm", k=3, params={"replacement": False}), "monte_carlo", 500, True, 1000 * 3 * 500),  # the plan
    (_cell(IID, "token", L=4), "decode", 500, True, 4 * 50 * 5 * 500),
    (_cell(IID, "traversal", tree="3x1"), "decode", 500, True, 4 * 50 * 6 * 500),
    (_cell(LOG, "block", L=2), "monte_carlo", None, False, 1000 * 3),  # logged rows: row-free
])
def test_cell_work_counts_the_row_entries_each_sampler_touches(cell, quantity, vocab, iid, entries):
    assert cell_work(cell, quantity, vocab, iid)[0] == entries


@pytest.mark.parametrize("cell,quantity,vocab", [
    (_cell(IID, "token", L=4), "exact", 500),  # bounded by its solver's own limits
    (_cell(IID, "token", L=4), "adaptive", 500),
    (_cell(IID, "kseq", k=2), "decode", 500),  # not applicable
    (_cell(LOG, "token", L=2), "decode", None),
    (_cell({"kind": "json", "draft": "d.json", "target": "t.json"}, "block", L=2), "monte_carlo", None),  # V unknown
])
def test_cell_work_leaves_solver_bounded_and_unknown_sizes_to_the_run(cell, quantity, vocab):
    assert cell_work(cell, quantity, vocab, False) is None


def test_an_oversized_cell_quantity_becomes_a_note_in_milliseconds_and_the_rest_runs():
    big = {**IID, "vocab": 32000}
    heavy = _cell(big, "greedy", k=2, blocks=100_000)  # 6.4e9 entries: minutes of rowed candidates
    assert cell_work(heavy, "monte_carlo", 32000, True)[0] > MAX_CELL_WORK
    t0 = time.perf_counter()
    row = run_cell(heavy, 0, ["exact", "monte_carlo"])
    assert time.perf_counter() - t0 < 10
    assert "MAX_CELL_WORK" in row["monte_carlo_note"] and "blocks 100,000 x k = 2 x V = 32,000" in row["monte_carlo_note"]
    assert "mc_accepted" not in row and 0 < row["exact_acceptance"] <= 1  # the cheap quantity still ran
    light = run_cell(_cell(IID, "kseq", k=2), 0, ["monte_carlo"])
    assert "monte_carlo_note" not in light and 0 < light["mc_accepted"] < 1


def test_source_files_are_estimated_once_their_vocabulary_is_read(tmp_path):
    d, t = random_iid(40000, 1.0, seed=0)
    save_source(d, tmp_path / "d.json")
    save_source(t, tmp_path / "t.json")
    pair = {"kind": "json", "draft": "d.json", "target": "t.json"}
    row = run_cell(_cell(pair, "block_v1", L=4, blocks=20_000), 0, ["monte_carlo"], base=tmp_path)
    assert "MAX_CELL_WORK" in row["monte_carlo_note"] and "V = 40,000" in row["monte_carlo_note"]


def test_the_sweep_reports_its_estimate_before_running(tmp_path):
    spec = tmp_path / "g.toml"
    spec.write_text('name = "g"\nquantities = ["monte_carlo"]\nk = [2]\nL = [2]\nblocks = 100000\n'
                    '[[pairs]]\nkind = "random_iid"\nvocab = [50, 32000]\n'
                    '[[verifiers]]\nname = "token"\n[[verifiers]]\nname = "greedy"\n')
    proc = subprocess.run([sys.executable, "-m", "otspec", "sweep", str(spec), "--workers", "1"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "1 cell quantities exceed MAX_CELL_WORK" in proc.stderr and "greedy k=2 monte_carlo" in proc.stderr
    summary = run_sweep(spec, tmp_path / "again", workers=1, progress=False)["estimate"]
    # token cells run row-free (2 x 100,000 x 3) and the greedy drafts at V = 50 draw 100,000 x 2 x 50 rows
    assert summary["estimated_entries"] == 2 * 100_000 * 3 + 100_000 * 2 * 50
    assert summary["over_limit"] == 1
    assert spec_work([], ["monte_carlo"])["heaviest"] is None
    assert len((tmp_path / "again" / "results.csv").read_text().strip().splitlines()) == 1 + 4  # header + 4 cells


def test_cells_that_differ_only_in_their_cost_ratio_are_computed_once_and_equal_separate_runs():
    from otspec.sweep import run_cells

    quantities = ["exact", "optimum", "monte_carlo", "decode", "adaptive"]
    for shape in ({"verifier": "token", "L": 3}, {"verifier": "kseq", "k": 2}, {"verifier": "otm", "tree": "2x1"}):
        group = [_cell(IID, shape["verifier"], L=shape.get("L"), k=shape.get("k"), tree=shape.get("tree"),
                       cost_ratio=c, blocks=300, tokens=20, sequences=2) for c in (0.0, 0.05, 0.3)]
        together = run_cells(group, 5, quantities)
        alone = [run_cell(cell, 5, quantities) for cell in group]
        for a, b in zip(together, alone, strict=True):
            a, b = ({k: v for k, v in r.items() if not k.endswith(("_seconds", "_per_s"))} for r in (a, b))  # timings
            assert a.keys() == b.keys()
            for key in a:  # the draws are shared (the seed ignores the ratio); the speedups are recomputed
                assert a[key] == b[key] or (a[key] != a[key] and b[key] != b[key]), (shape, key, a[key], b[key])
        if shape["verifier"] != "otm":  # the tree's exact law is refused at V = 500 (a note): no speedup column
            assert together[0]["exact_speedup"] > together[2]["exact_speedup"]  # drafting for free (c = 0) is fastest
        assert together[0]["cell"] != together[1]["cell"]


def test_an_otm_cell_at_llm_vocabulary_runs_row_free_within_seconds():
    big = {**IID, "vocab": 32000}
    t0 = time.perf_counter()
    row = run_cell(_cell(big, "otm", k=4, blocks=1_000_000), 0, ["monte_carlo", "exact"])
    assert time.perf_counter() - t0 < 30.0 and "monte_carlo_note" not in row
    assert abs(row["mc_accepted"] - row["exact_acceptance"]) < 4 * row["mc_stderr"]  # α_4, the min cut


def test_an_adaptive_cell_at_llm_vocabulary_gives_the_bracketed_optimum():
    big = {**IID, "vocab": 32000}
    t0 = time.perf_counter()
    row = run_cell(_cell(big, "token", L=8, cost_ratio=0.1), 0, ["adaptive"])
    assert time.perf_counter() - t0 < 10.0 and "adaptive_note" not in row
    assert row["adaptive_latency_low"] <= row["adaptive_latency"] <= row["adaptive_latency_high"]
    assert row["adaptive_latency_high"] - row["adaptive_latency_low"] <= 1e-9
    assert row["adaptive_latency_high"] <= row["adaptive_best_fixed_latency"] <= row["adaptive_fixed_latency"]
