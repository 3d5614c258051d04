"""The report's prediction check: distinct runs, records left out, circular predictions, both counts in the heading.

Every record here is a small synthetic dict (never a committed file), so each count below is known exactly."""

from __future__ import annotations

import copy
import re

import pytest

from otspec.engine.record import RecordError
from otspec.figures.llm import (
    prediction_check,
    prediction_check_markdown,
    prediction_check_summary,
    record_markdown,
)

PAIR = {"target": "big", "draft": "small", "device": "cpu", "dtype": "float32"}


def settings(**kw):
    return {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "batch_size": 1, "max_new_tokens": 64, "prompts": 32,
            "seed": 0, **kw}


def run(verifier="token", L=2, mean=1.40, pred=1.38, speedup=None, pred_sp=None, sp_interval=None, source=None,
        **kw):
    """A chain run whose block-efficiency prediction holds (+1.4 %, inside) unless told otherwise."""
    r = {"verifier": verifier, "L": L, "block_efficiency": {"mean": mean, "low": max(1.0, mean - 0.05), "high": mean + 0.05},
         "predicted_block_efficiency": pred,
         "predicted_block_efficiency_interval": None if pred is None else {"low": pred - 0.1, "high": pred + 0.1},
         **kw}
    if speedup is not None:
        r["speedup"] = speedup
    if pred_sp is not None:
        r["predicted_speedup"] = pred_sp
        r["predicted_speedup_interval"] = sp_interval or {"low": pred_sp * 0.9, "high": pred_sp * 1.1}
    if source is not None:
        r["speedup_prediction"] = {"source": source}
    return r


def record(file, runs, model_pair=PAIR, **kw):
    return {"file": file, "model_pair": dict(model_pair), "settings": settings(**kw.pop("settings", {})),
            "runs": runs, **kw}


def heading(rows):
    return prediction_check_markdown(rows)[0]


def counts(rows):
    """(block efficiency held, counted, circular; speedup held, counted, circular) from the heading's text."""
    m = re.search(r"block efficiency: (\d+) of (\d+) runs hold \((\d+) circular left out\); "
                  r"speedup: (\d+) of (\d+) hold \((\d+) circular left out\)", heading(rows))
    assert m, heading(rows)
    return tuple(int(x) for x in m.groups())


def test_the_same_decode_in_two_records_counts_once_in_the_first_by_file_name():
    a = record("llm_a.json", [run("token", 2), run("block", 2, mean=1.20)])  # block L = 2 misses (-13 %)
    b = record("llm_b.json", [run("token", 2), run("block", 2, mean=1.20), run("token", 4)])
    c = record("llm_c.json", [run("token", 2)], settings={"temperature": 0.7})  # other settings: its own run
    d = record("llm_d.json", [run("token", 2)], model_pair={**PAIR, "draft": "other"})  # other pair: its own run
    rows = prediction_check([b, c, d, a])  # not in file order: the first by name still counts
    assert [(r.record, r.draft, r.duplicate_of) for r in rows] == [
        ("llm_b.json", "L = 2", "llm_a.json"), ("llm_b.json", "L = 2", "llm_a.json"), ("llm_b.json", "L = 4", None),
        ("llm_c.json", "L = 2", None), ("llm_d.json", "L = 2", None), ("llm_a.json", "L = 2", None),
        ("llm_a.json", "L = 2", None)]
    assert [r.be_counted for r in rows] == [False, False, True, True, True, True, True]
    assert counts(rows)[:2] == (4, 5)
    summary = prediction_check_summary(rows)
    assert summary.duplicates == 2 and summary.merged == {("llm_b.json", "llm_a.json"): 2}
    text = "\n".join(prediction_check_markdown(rows))
    assert "2 re-decodes merged: 2 runs of llm_b.json (as in llm_a.json)" in text
    assert text.count("re-decode of llm_a.json: counted there") == 2
    assert text.count("**no**") == 1 and text.count("(no)") == 1  # the merged miss is shown, not counted


def test_a_tree_and_an_adaptive_fixed_length_are_merged_with_their_equals():
    tree = {"verifier": "kseq", "tree": "2x1", "replacement": True, "rule": "match",
            "block_efficiency": {"mean": 1.5, "low": 1.4, "high": 1.6}, "predicted_block_efficiency": 1.48,
            "predicted_block_efficiency_interval": {"low": 1.4, "high": 1.6}}
    a = record("llm_a.json", [run("token", 3)], tree_runs=[tree])
    b = record("llm_b.json", [], tree_runs=[tree, {**tree, "replacement": False}])
    adaptive = record("llm_adaptive_x.json", [], settings={"top_k": None, "top_p": None},
                      fixed=[{"policy": "fixed", "value": 3, **{k: v for k, v in run("token", 3).items()
                                                                if k not in ("verifier", "L")}},
                             {"policy": "fixed", "value": 5, **{k: v for k, v in run("token", 5).items()
                                                                if k not in ("verifier", "L")}}],
                      threshold=[], head={"rule": None})
    rows = prediction_check([a, b, adaptive])
    assert [r.duplicate_of for r in rows] == [None, None, "llm_a.json", None, "llm_a.json", None]
    assert counts(rows)[:2] == (4, 4)


def test_records_without_pair_or_settings_are_refused_by_name():
    """What makes two runs the same decode is in every record (typed: model_pair and settings are required), so a
    record that does not say is refused, naming the field, instead of being counted without its configuration."""
    bare = {"file": "llm_x.json", "runs": [run("token", 2), run("token", 2)]}
    with pytest.raises(RecordError, match="missing field 'model_pair'"):
        prediction_check([bare])
    with pytest.raises(RecordError, match="missing field 'settings'"):
        prediction_check([{**bare, "model_pair": dict(PAIR)}])


def test_unreliable_and_small_records_are_listed_but_left_out_of_both_counts():
    good = record("llm_a.json", [run("token", 2, speedup=1.0, pred_sp=1.02, source="cost_profile")])
    noisy = record("llm_b.json", [run("token", 3, speedup=1.0, pred_sp=1.02, source="cost_profile"),
                                  run("token", 4, mean=1.0, speedup=1.0, pred_sp=1.02, source="cost_profile")],
                   unreliable_timing="plain sampling drifted 12 %")
    small = record("llm_c.json", [run("block", 2, speedup=1.0, pred_sp=1.02, source="cost_profile")],
                   settings={"prompts": 8})
    both = record("llm_d.json", [run("block", 3)], settings={"prompts": 31}, unreliable_timing="drift")
    rows = prediction_check([good, noisy, small, both])
    assert [r.left_out for r in rows] == [None, "unreliable timing", "unreliable timing", "8 prompts (< 32)",
                                             "unreliable timing; 31 prompts (< 32)"]
    assert [(r.be_counted, r.speedup_counted) for r in rows] == [(True, True)] + [(False, False)] * 3 + [
        (False, False)]
    assert counts(rows) == (1, 1, 0, 1, 1, 0)
    lines = prediction_check_markdown(rows)
    table = [line for line in lines if line.startswith("| llm_")]
    assert len(table) == 5 and sum("left out:" in line for line in table) == 4
    text = "\n".join(lines)
    assert "llm_b.json (2 runs: unreliable timing (plain sampling drifted 12 %))" in text
    assert "llm_c.json (1 run: 8 prompts (< 32))" in text and "**no**" not in text
    assert "(no)" in table[2]  # the left-out miss (block efficiency 1.0 against 1.38) is shown, not counted


def test_a_left_out_first_record_does_not_hide_a_counted_re_decode():
    noisy = record("llm_a.json", [run("token", 2)], unreliable_timing="drift")
    good = record("llm_b.json", [run("token", 2)])
    rows = prediction_check([noisy, good])
    assert [(r.duplicate_of, r.be_counted) for r in rows] == [("llm_b.json", False), (None, True)]
    assert counts(rows)[:2] == (1, 1)


def test_temperature_zero_on_the_measured_prompts_is_circular_and_not_counted():
    greedy = record("llm_greedy.json", [run("token", 1, mean=1.3, pred=1.3), run("token", 2, mean=1.4, pred=1.4)],
                    settings={"temperature": 0.0})
    sampled = record("llm_sampled.json", [run("token", 1)])
    independent = record("llm_greedy_split.json", [run("token", 1, mean=1.3, pred=1.25)],
                         settings={"temperature": 0.0, "prompt_ids": list(range(32)), "prediction_prompt_ids": [32, 33]})
    overlapping = record("llm_greedy_overlap.json", [run("token", 3)],
                         settings={"temperature": 0.0, "prompt_ids": list(range(32)), "prediction_prompt_ids": [31, 32]})
    rows = prediction_check([greedy, sampled, independent, overlapping])
    assert [r.be_circular for r in rows] == [True, True, False, False, True]
    assert [r.prediction_prompts for r in rows] == ["same", "same", "same", "disjoint", "same"]
    assert [r.be_counted for r in rows] == [False, False, True, True, False]
    assert counts(rows)[:3] == (2, 2, 3)
    summary = prediction_check_summary(rows)
    assert summary.be_same_prompts == 1  # the sampled record's: counted, its interval lenient
    table = [line for line in prediction_check_markdown(rows) if line.startswith("| llm_")]
    assert sum("block efficiency circular" in line for line in table) == 3
    assert "same prompts (lenient)" in table[2] and "same prompts" not in table[3]


def test_speedups_predicted_from_the_runs_own_call_times_are_circular_and_not_counted():
    old = record("llm_old.json", [run("token", 1, speedup=1.10, pred_sp=1.12),
                                  run("token", 2, speedup=0.90, pred_sp=0.91, source="replay")],
                 settings={"seed": 1})  # another seed: not a re-decode of the new record's runs
    new = record("llm_new.json", [run("token", 1, speedup=1.10, pred_sp=1.12, source="cost_profile"),
                                  run("token", 2, speedup=0.70, pred_sp=0.91, source="cost_profile")])  # -23 %
    rows = prediction_check([old, new])
    assert [r.speedup_circular for r in rows] == [True, True, False, False]
    assert [r.speedup_source for r in rows] == [None, "replay", "cost_profile", "cost_profile"]
    assert [r.speedup_counted for r in rows] == [False, False, True, True]
    assert [r.speedup_holds for r in rows] == [True, True, True, False]
    assert counts(rows)[3:] == (1, 2, 2)
    table = [line for line in prediction_check_markdown(rows) if line.startswith("| llm_")]
    assert [line.count("(yes)") for line in table] == [1, 1, 0, 0]
    assert "speedup circular (own call times)" in table[0] and "circular" not in table[2]


def test_a_speedup_within_tolerance_but_outside_its_interval_does_not_hold():
    r = run("token", 2, speedup=1.05, pred_sp=1.00, sp_interval={"low": 0.97, "high": 1.03}, source="cost_profile",
            speedup_ci={"low": 1.01, "high": 1.09})
    inside = run("token", 3, speedup=1.02, pred_sp=1.00, sp_interval={"low": 0.97, "high": 1.03},
                 source="cost_profile")
    far = run("token", 4, speedup=1.15, pred_sp=1.00, sp_interval={"low": 0.80, "high": 1.20}, source="cost_profile")
    rows = prediction_check([record("llm_a.json", [r, inside, far])])
    assert [(x.speedup_within_tolerance, x.speedup_inside_interval, x.speedup_holds) for x in rows] == [
        (True, False, False), (True, True, True), (False, True, False)]
    assert abs(rows[0].speedup_relative_error - 0.05) < 1e-12
    assert counts(rows) == (3, 3, 0, 1, 3, 0)
    table = [line for line in prediction_check_markdown(rows) if line.startswith("| llm_")]
    assert "| 1.05 [1.01, 1.09] | 1.00 [0.97, 1.03] | +5.0 % | **no** |" in table[0]
    assert "| 1.02 | 1.00 [0.97, 1.03] | +2.0 % | yes |" in table[1]


def test_a_run_with_only_a_speedup_prediction_gets_a_row():
    r = run("token", 2, pred=None, speedup=1.0, pred_sp=1.01, source="cost_profile")
    rows = prediction_check([record("llm_a.json", [r])])
    assert len(rows) == 1 and rows[0].predicted is None and rows[0].holds is None
    assert not rows[0].be_counted and rows[0].speedup_counted
    assert counts(rows) == (0, 0, 0, 1, 1, 0)


def test_the_heading_counts_everything_at_once():
    runs = [run("token", 1, speedup=1.0, pred_sp=1.0, source="cost_profile"),          # both hold
            run("token", 2, mean=1.0, speedup=1.0, pred_sp=1.5, source="cost_profile"),  # both miss
            run("token", 3, speedup=1.0, pred_sp=1.0),                                  # speedup circular
            run("block", 1, speedup=1.0, pred_sp=1.0, source="cost_profile")]           # both hold
    first = record("llm_a.json", runs)
    again = record("llm_b.json", copy.deepcopy(runs))                                   # all four merged
    greedy = record("llm_c.json", [run("token", 1, speedup=1.0, pred_sp=1.0)], settings={"temperature": 0})
    small = record("llm_d.json", [run("token", 1, speedup=1.0, pred_sp=1.0, source="cost_profile")],
                   settings={"prompts": 16})
    rows = prediction_check([first, again, greedy, small])
    assert counts(rows) == (3, 4, 1, 2, 3, 2)
    assert heading(rows) == ("### Predictions against measurements, distinct runs — block efficiency: 3 of 4 runs "
                             "hold (1 circular left out); speedup: 2 of 3 hold (2 circular left out)")
    assert prediction_check_summary(rows).duplicates == 4


def test_record_markdown_prints_the_target_call_interval_and_batch_size_where_the_record_has_them():
    be = {"mean": 1.4, "low": 1.3, "high": 1.5}
    base_run = {"verifier": "token", "L": 2, "block_efficiency": be, "predicted_block_efficiency": 1.4,
                "predicted_block_efficiency_interval": {"low": 1.3, "high": 1.5},
                "speedup_interval": {"low": 0.9, "high": 1.1},
                "predicted_speedup_interval": {"low": 0.9, "high": 1.1}, "expected_block_efficiency_given_drafts": 1.4,
                "acceptance_rate": 0.2, "tokens_per_s": 10.0, "speedup": 1.0, "predicted_speedup": 1.0,
                "verify_fraction_of_target_call": 0.01}
    rec = {"model_pair": {**PAIR}, "runs": [base_run],
           "settings": {**settings(), "threads": 4, "torch": "2", "transformers": "4"},
           "baseline": {"tokens_per_s": 10.0}, "drafter": {"acceptance": 0.3, "cost_ratio": 0.2},
           "profile": {"context_tokens": 70, "t_draft_ms": 2.0, "t_target_ms": {"1": 10.0, "3": 12.5}}}
    old = record_markdown(rec)
    assert "t_target(n) in ms at a 70-token context: n=1: 10.0, n=3: 12.5)." in old and "batch" not in old.split(
        "Drafter:")[1].split("\n")[0]
    rec["profile"].update(t_target_ms_interval={"1": {"low": 9.5, "high": 10.75}, "3": {"low": 12.0, "high": 13.0}},
                          batch_size=8)
    new = record_markdown(rec)
    assert ("t_target(n) in ms (median [low, high]) at a 70-token context, batch 8: n=1: 10.0 [9.5, 10.8], "
            "n=3: 12.5 [12.0, 13.0])." in new)
    assert " on cpu (float32, 4 threads" in new  # a CPU record names no card
    assert "not monotone" not in new
    # a curve that falls beyond noise says where, and that each width is charged its own time
    rec["profile"].update(t_target_ms={"1": 10.0, "3": 12.5, "4": 11.0},
                          monotone={"monotone": False, "exceptions": [[3, 4]], "tolerance": 0.03})
    flat = record_markdown(rec).split("Drafter:")[1].split("\n")[0]
    assert "n=4: 11.0; not monotone beyond noise at n = 3 → 4 (the wider call's median more than 3 % below" in flat
    assert "charges each width its own measured time" in flat
    rec["settings"]["accelerator"] = "NVIDIA H200"  # a GPU record names its card
    assert " on cpu (NVIDIA H200) (float32, 4 threads" in record_markdown(rec)


def test_a_forecast_is_checked_against_the_record_made_after_it():
    from otspec.engine.forecast import forecast_check
    from otspec.figures.llm_predictions import forecast_markdown

    made = {"kind": "forecast", "record": "llm_later.json", "pair": {**PAIR},
            "settings": settings(prompt_ids=list(range(32))),
            "forecasts": [{"verifier": "token", "L": 4, "predicted_block_efficiency": 1.5,
                           "predicted_block_efficiency_interval": {"low": 1.4, "high": 1.6}, "predicted_speedup": 1.1,
                           "predicted_speedup_interval": {"low": 1.0, "high": 1.2}}]}
    later = record("llm_later.json", [run("token", 4, mean=1.45, speedup=0.95), run("token", 2, speedup=1.0)],
                   settings={"prompt_ids": list(range(32))})
    (row,) = forecast_check(made, later)
    assert row.block_efficiency.holds and row.block_efficiency.relative_error == 1.45 / 1.5 - 1
    # 0.95 is within 14 % of 1.1 and below its interval: it does not hold
    assert not row.speedup.within_tolerance and row.speedup.inside_interval is False
    assert not row.speedup.holds
    lines = forecast_markdown([("llm_forecast_later.json", made, later), ("llm_forecast_next.json", made, None)])
    assert any("| token L = 4 |" in ln and "yes" in ln and "**no**" in ln for ln in lines)
    assert any("not measured yet" in ln for ln in lines)
    other = copy.deepcopy(later)
    other["settings"]["batch_size"] = 8
    try:
        forecast_check(made, other)
    except ValueError as err:
        assert "batch_size" in str(err)
    else:
        raise AssertionError("a record of other settings was compared with the forecast")


def test_a_miss_whose_own_confidence_interval_reaches_a_holding_value_is_told_apart_but_still_counted():
    # +12 % but its rounds' CI [1.05, 1.19] reaches 1.05, within 10 % of 1.00 and inside [0.90, 1.08]: noise
    noisy = run("token", 1, speedup=1.12, pred_sp=1.00, sp_interval={"low": 0.90, "high": 1.08},
                source="cost_profile", speedup_ci={"low": 1.05, "high": 1.19})
    # +12 % with a tight CI [1.11, 1.13]: every value in it misses
    firm = run("token", 2, speedup=1.12, pred_sp=1.00, sp_interval={"low": 0.90, "high": 1.08},
               source="cost_profile", speedup_ci={"low": 1.11, "high": 1.13})
    # inside the tolerance band but outside the interval, its CI [1.06, 1.09] clear of the interval's 1.05
    outside = run("token", 3, speedup=1.07, pred_sp=1.00, sp_interval={"low": 0.95, "high": 1.05},
                  source="cost_profile", speedup_ci={"low": 1.06, "high": 1.09})
    held = run("token", 4, speedup=1.02, pred_sp=1.00, source="cost_profile", speedup_ci={"low": 0.9, "high": 1.2})
    no_ci = run("token", 5, speedup=1.30, pred_sp=1.00, source="cost_profile")
    rows = prediction_check([record("llm_a.json", [noisy, firm, outside, held, no_ci])])
    assert [r.speedup_miss_within_noise for r in rows] == [True, False, False, None, None]
    assert counts(rows) == (5, 5, 0, 1, 5, 0)  # the verdicts are unchanged
    assert prediction_check_summary(rows).speedup_misses_within_noise == 1
    lines = prediction_check_markdown(rows)
    assert any(line.startswith("*Misses and timing noise.* Of the 4 counted speedup misses, 1 is within")
               for line in lines)
    table = [line for line in lines if line.startswith("| llm_")]
    assert ["within its timing noise" in line for line in table] == [True, False, False, False, False]
    # no miss, or one: the paragraph says so in words
    for subset, start in [([held], "*Misses and timing noise.* No counted speedup misses."),
                          ([noisy, held], "*Misses and timing noise.* The one counted speedup miss is within its"),
                          ([firm], "*Misses and timing noise.* The one counted speedup miss is not within its")]:
        assert any(line.startswith(start) for line in prediction_check_markdown(prediction_check(
            [record("llm_a.json", subset)])))


def test_the_interval_coverage_paragraph_counts_measurements_outside_against_a_calibrated_intervals_share():
    # the five speedups of the noise test: +12 % (outside [0.90, 1.08]), +12 % (outside), +7 % (outside [0.95, 1.05]
    # but within 10 %), +2 % (inside [0.90, 1.10]), +30 % (outside); every block efficiency +1.4 %, inside
    runs = [run("token", 1, speedup=1.12, pred_sp=1.00, sp_interval={"low": 0.90, "high": 1.08}, source="cost_profile"),
            run("token", 2, speedup=1.12, pred_sp=1.00, sp_interval={"low": 0.90, "high": 1.08}, source="cost_profile"),
            run("token", 3, speedup=1.07, pred_sp=1.00, sp_interval={"low": 0.95, "high": 1.05}, source="cost_profile"),
            run("token", 4, speedup=1.02, pred_sp=1.00, source="cost_profile"),
            run("token", 5, speedup=1.30, pred_sp=1.00, source="cost_profile")]
    rows = prediction_check([record("llm_a.json", runs)])
    summary = prediction_check_summary(rows)
    assert (summary.be_outside, summary.be_beyond_tolerance) == (0, 0)
    assert (summary.speedup_outside, summary.speedup_beyond_tolerance) == (4, 3)
    # 5 runs at 5 %: expected 0.25; P(X = 0) = 0.95^5 = 0.774 > 0.025 and P(X <= 1) = 0.774 + 5 (0.05) 0.95^4 = 0.977
    # >= 0.975, so the central 95 % range is 0-1
    line = next(x for x in prediction_check_markdown(rows) if x.startswith("*Interval coverage.*"))
    assert "95 % prediction interval" in line
    assert "block efficiency, 0 of 5 outside their intervals where 0.25 are expected (0–1), 0 beyond 10 %" in line
    assert "speedup, 4 of 5 outside their intervals where 0.25 are expected (0–1), 3 beyond 10 %" in line
    # 40 runs: expected 2; P(X <= 4) = 0.952 < 0.975 <= P(X <= 5) = 0.986, so 0-5
    many = [run("token", L, speedup=1.0, pred_sp=1.0, source="cost_profile") for L in range(1, 41)]
    line = next(x for x in prediction_check_markdown(prediction_check([record("llm_a.json", many)]))
                if x.startswith("*Interval coverage.*"))
    assert "speedup, 0 of 40 outside their intervals where 2.00 are expected (0–5), 0 beyond 10 %" in line
