"""A missed speedup decomposed after the fact (otspec.engine.forecast.miss_decomposition) and shown in summaries."""

from __future__ import annotations

import pytest

from otspec.engine.forecast import miss_decomposition
from otspec.figures.llm import misses_markdown


def run_row(overhead_ms=12.0, iterations=50):
    """A batch-8 run of 4 batches whose profile predicted 48 iterations of 100 ms per batch (20 draft, 60 target,
    2 verifier, 18 overhead) against plain steps of 40 ms; the run measures ``iterations`` per batch."""
    calls = 4 * iterations
    iteration = 20.0 + 60.0 + 2.0 + overhead_ms
    predicted = 64 * 40.0 / (48 * 100.0)
    return {"verifier": "block_v1", "L": 4, "block_efficiency": {"mean": 2.0, "low": 1.9, "high": 2.1},
            "target_calls": calls, "draft_calls": 2 * calls,
            "seconds": calls * iteration / 1e3, "draft_seconds": calls * 20.0 / 1e3, "target_seconds": calls * 60.0 / 1e3,
            # as llm_bridge.runs records it: the wall clock outside the model calls, the verifier's 2 ms included
            "t_draft_ms": 10.0, "t_verify_ms": 2.0, "overhead_ms_per_iteration": 2.0 + overhead_ms,
            "verify_fraction_of_target_call": 2.0 / 60.0,
            "baseline_tokens_per_s": 8 / 0.040, "speedup": 64 * 40.0 / (iterations * iteration),
            "predicted_speedup": predicted,
            "prediction_check": {"speedup": {"holds": False,
                                             "relative_error": 64 * 40.0 / (iterations * iteration) / predicted - 1}},
            "speedup_prediction": {"source": "cost_profile", "batches": 4, "batch": 8, "batch_iterations": 48.0,
                                   "ms_per_batch": 4800.0, "plain_ms_per_step": 40.0,
                                   "costs_ms": {"t_draft": 10.0, "t_verify": 2.0, "overhead": 18.0}}}


def test_the_factors_multiply_to_the_miss_and_the_parts_to_the_iterations_difference():
    row = run_row(overhead_ms=40.0, iterations=50)
    d = miss_decomposition(row)
    assert d.plain_step == pytest.approx(1.0) and d.iterations == pytest.approx(50 / 48)
    assert d.iteration_time == pytest.approx(122.0 / 100.0)
    assert d.plain_step / (d.iterations * d.iteration_time) == pytest.approx(row["speedup"] / row["predicted_speedup"])
    assert next(iter(d.components)) == "overhead"  # the largest part first
    assert d.components["overhead"] == pytest.approx(22.0) and d.components["target"] == pytest.approx(0.0)
    assert d.components["verify"] == pytest.approx(0.0)  # the run's overhead holds its verifier time: not twice
    assert sum(d.components.values()) == pytest.approx(d.iteration_ms_measured - d.iteration_ms_predicted)
    lines = misses_markdown([row, {**row, "prediction_check": {"speedup": {"holds": True, "relative_error": 0.0}}}])
    assert len(lines) == 4 and "block_v1 L = 4" in lines[-1] and "loop overhead +22.0" in lines[-1]


def test_nothing_to_decompose_without_a_cost_profile():
    assert miss_decomposition({**run_row(), "speedup_prediction": {"source": None, "note": "no profile"}}) is None
    assert miss_decomposition({k: v for k, v in run_row().items() if k != "draft_seconds"}) is None
    assert misses_markdown([]) == []
