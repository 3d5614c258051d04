"""Issue 25: work that would run for minutes or allocate gigabytes is refused from arithmetic on the inputs, before
anything is built, and the refusal names the size and the limit. Each case below used to allocate (11.7 GB for the
adaptive policy at V = 1500, 3 GB for the Markov one at V = 500) or run (94 s for the lattice at L = 4096)."""

from __future__ import annotations

import json
import time
import tracemalloc

import numpy as np
import pytest

from otspec.errors import SizeLimitError
from otspec.sources import log_rows, random_iid, random_markov
from otspec.sources.logged import MAX_LOG_ENTRIES
from otspec.theory import iid_block_values
from otspec.theory.adaptive import MAX_ADAPTIVE_ENTRIES, optimal_stopping, threshold_policy_latency
from otspec.theory.adaptive_markov import MAX_MARKOV_ENTRIES, markov_optimal_stopping
from otspec.theory.iid import MAX_LATTICE_WORK


def _refused_quickly(call, match: str, budget_mb: float = 200.0):
    """``call`` raises SizeLimitError matching ``match`` within seconds, having allocated less than ``budget_mb``."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(SizeLimitError, match=match):
            call()
        peak = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - t0 < 5.0
    assert peak < budget_mb, f"{peak:.0f} MB allocated before the refusal"


def test_the_adaptive_optimum_refuses_states_times_classes_before_building_tables():
    d, t = random_iid(1500, 1.0, seed=0)  # C(m + 2, 2) states are under MAX_ADAPTIVE_STATES, x m classes is not
    _refused_quickly(lambda: optimal_stopping(d.probs, t.probs, 2, 0.1, method="induction"), "MAX_ADAPTIVE_ENTRIES")
    _refused_quickly(lambda: threshold_policy_latency(d.probs, t.probs, 2, 0.1), "MAX_ADAPTIVE_ENTRIES")
    assert MAX_ADAPTIVE_ENTRIES == 2**23


def test_the_adaptive_optimum_still_runs_just_under_its_entry_limit():
    d, t = random_iid(100, 1.0, seed=0)  # 49 classes of q/p < 1 plus one: C(53, 3) x 50 entries ~ 1.2e6
    opt = optimal_stopping(d.probs, t.probs, 3, 0.1, method="induction")
    assert 0 < opt.latency < 1.1
    bracket = optimal_stopping(d.probs, t.probs, 3, 0.1, method="bracket")  # where both run they agree
    assert bracket.latency_bounds[0] <= opt.latency <= bracket.latency_bounds[1]
    assert abs(bracket.latency - opt.latency) <= 1e-9


def test_the_markov_adaptive_optimum_refuses_paths_times_tokens():
    d, t = random_markov(500, 1.0, seed=0)  # 250,500 paths (under MAX_MARKOV_PATHS) x 500 tokens
    _refused_quickly(lambda: markov_optimal_stopping(d, t, 1, 0.1), "MAX_MARKOV_ENTRIES")
    assert MAX_MARKOV_ENTRIES == 2**24


def test_the_lattice_bounds_refuse_long_walks_and_admit_the_documented_length():
    d, t = random_iid(2000, 1.0, seed=0)
    _refused_quickly(lambda: iid_block_values(d.probs, t.probs, 4096, route="lattice"), "MAX_LATTICE_WORK")
    _refused_quickly(lambda: iid_block_values(d.probs, t.probs, 700, route="lattice"), "L = 700")
    assert 512 * (1 << 17) < MAX_LATTICE_WORK  # the default lattice admits L = 512


def test_log_rows_refuses_before_sampling_and_streams_in_chunks(monkeypatch):
    d, t = random_iid(32000, 1.0, seed=0)
    _refused_quickly(lambda: log_rows(d, t, 1000, 1000), "MAX_LOG_ENTRIES")
    assert MAX_LOG_ENTRIES == 2**27
    d, t = random_markov(40, 1.0, seed=0)
    whole = log_rows(d, t, 5, 17, max_kept=12, seed=3)
    monkeypatch.setattr("otspec.sources.logged._CHUNK_ENTRIES", 50)  # one path per chunk
    chunked = log_rows(d, t, 5, 17, max_kept=12, seed=3)
    for name in ("path_offsets", "tokens", "row_offsets", "row_tokens", "draft", "target", "draft_tail",
                 "target_tail", "tail_overlap"):
        assert np.array_equal(getattr(whole, name), getattr(chunked, name)), name


def test_calc_block_beyond_the_lattice_limit_keeps_the_token_value_and_says_why(tmp_path, capsys):
    from otspec.cli import main
    from otspec.sources import save_source

    d, t = random_iid(2000, 1.0, seed=0)
    save_source(d, tmp_path / "d.json")
    save_source(t, tmp_path / "t.json")
    assert main(["calc", "block", "--draft-source", str(tmp_path / "d.json"), "--target-source",
                 str(tmp_path / "t.json"), "--L", "700", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    m1 = float(np.minimum(d.probs, t.probs).sum())
    assert out["token"] == pytest.approx(sum(m1**j for j in range(1, 701)), rel=1e-12)  # eq. (4), by hand
    assert out["block_onpath"] is None and "MAX_LATTICE_WORK" in out["block_onpath_status"]
