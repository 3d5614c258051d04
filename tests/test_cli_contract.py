"""What a new user hit on the command line: help, pipes, several lengths, refusals with reasons, cost model."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np
import pytest

from otspec import pairs
from otspec.cli import build_parser, main


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "otspec", *args], capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def _parsers(parser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_flag_has_help_and_shows_its_default():
    for parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction | argparse._HelpAction) or not action.option_strings:
                continue
            assert action.help, f"{parser.prog} {action.option_strings} has no help text"
        text = parser.format_help()  # a default that says something is shown; None and a flag's False are not
        if any(a.option_strings and a.default not in (None, False, argparse.SUPPRESS)
               and not isinstance(a, argparse._HelpAction) for a in parser._actions):
            assert "(default:" in text, parser.prog
        assert "(default: None)" not in text and "(default: False)" not in text, parser.prog


def test_json_into_a_closed_pipe_exits_quietly():
    proc = subprocess.run(f"{sys.executable} -m otspec calc block --draft 0.3 --target 0.75 --L 4 --json | head -1",
                          shell=True, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "{" and proc.stderr == ""
    big = f"{sys.executable} -m otspec decode --draft 0.3 --target 0.75 --L 1,2,3,4,5,6 --tokens 50 --json | head -2"
    proc = subprocess.run(f"set -o pipefail; {big}", shell=True, executable="/bin/bash", capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == ""


def test_simulate_and_decode_take_several_lengths(capsys):
    assert main(["simulate", "--draft", "0.3", "--target", "0.6", "--L", "2,4", "--blocks", "2000", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["draft_length"] for r in rows] == [2, 4]
    for r in rows:  # acceptance rate = accepted / drafted = E[tau] / L
        assert r["acceptance_rate"] == pytest.approx(r["accepted"]["value"] / r["draft_length"])
    assert main(["decode", "--draft", "0.3", "--target", "0.6", "--L", "1,3", "--tokens", "200", "--sequences",
                 "2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["draft_length"] for r in rows] == [1, 3] and all(r["generated"] == 400 for r in rows)
    for r in rows:
        assert r["acceptance_rate"] == pytest.approx(r["accepted"] / (r["accepted"] + r["discarded"]))
    assert main(["decode", "--draft", "0.3", "--target", "0.6", "--L", "3", "--tokens", "50", "--json"]) == 0
    assert isinstance(json.loads(capsys.readouterr().out), dict)  # one length: one object, as before


BAD = [
    (["simulate", "--draft", "0.3", "--target", "0.6", "--L", "2,,4"], "positive integers"),
    (["simulate", "--draft", "0.3", "--target", "0.6", "--L", "0"], "positive integer"),
    (["decode", "--draft", "0.3", "--target", "0.6,0.2,0.2", "--L", "2"], "vocabulary mismatch"),
    (["calc", "block", "--draft", "nan", "--target", "0.5", "--L", "2"], "could not read probabilities"),
    (["calc", "block", "--draft", "0.5", "--target", "0.5", "--L", "2", "--cost-ratio", "-1"], ">= 0"),
    (["calc", "otm", "--draft", "0.5", "--target", "0.5", "--k", "x"], "positive integer"),
    (["calc", "pareto", "--draft", "0.5", "--target", "0.5", "--rejection", "x"], "[0, 1]"),
    (["calc", "rejections", "--draft", "0.5", "--target", "0.5", "--T", "2", "--M", "0"], "positive integer"),
    (["calc", "block", "--draft-source", "/", "--target", "0.5", "--L", "2"], "error"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_input_is_a_message_and_status_2_never_a_traceback(args, message):
    rc, out, err = run(*args)
    assert rc == 2 and message in err and "Traceback" not in err and out == ""


def test_same_output_file_for_both_sources_is_refused(tmp_path):
    path = tmp_path / "x.json"
    rc, _, err = run("source", "random", "--vocab", "3", "--draft-out", str(path), "--target-out", str(path))
    assert rc == 2 and "same file" in err and not path.exists()


def test_one_position_calculators_refuse_context_dependent_sources(tmp_path):
    for name, arg in (("d", {"type": "markov", "initial": [0.5, 0.5], "transition": [[0.9, 0.1], [0.2, 0.8]]}),
                      ("t", {"type": "iid", "probs": [0.3, 0.7]})):
        (tmp_path / f"{name}.json").write_text(json.dumps(arg))
    files = ["--draft-source", str(tmp_path / "d.json"), "--target-source", str(tmp_path / "t.json")]
    for extra in (["otm", "--k", "2"], ["pareto", "--rejection", "0.1"]):
        rc, out, err = run("calc", extra[0], *files, *extra[1:])
        assert rc == 2 and "IID rows" in err and out == ""
    # IID source files are fine and equal the inline rows
    (tmp_path / "d.json").write_text(json.dumps({"type": "iid", "probs": [0.6, 0.4]}))
    rc, out, _ = run("calc", "otm", *files, "--k", "2", "--json")
    rc2, out2, _ = run("calc", "otm", "--draft", "0.6,0.4", "--target", "0.3,0.7", "--k", "2", "--json")
    assert rc == rc2 == 0 and json.loads(out) == json.loads(out2)


def test_values_beyond_a_limit_are_null_with_the_reason(monkeypatch, capsys):
    monkeypatch.setattr(pairs, "MAX_WALK_ENTRIES", 10)
    table = ["--draft", "0.2,0.3,0.5", "--target", "0.5,0.3,0.2"]
    # an IID pair of 3 tokens: the on-path value walks the prefix tree (3 x 3 > 10 entries at level 2)
    assert main(["calc", "block", *table, "--L", "3", "--lp-max-variables", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("block_onpath", "lp"):
        if out[key] is None:
            assert out[f"{key}_status"].startswith("not")
    assert out["lp"] is None and "3^6 = 729 variables" in out["lp_status"]
    assert out["token"] is not None
    assert all(v is not None or f"{k}_status" in out for k, v in out.items() if not k.endswith("_status"))


def test_cost_ratio_speedup_and_best_length(capsys):
    c = 0.2
    assert main(["calc", "block", "--draft", "0.3", "--target", "0.75", "--L", "3", "--cost-ratio", str(c),
                 "--max-length", "10", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    overlap = 1 - 0.45
    token = {L: sum(overlap**i for i in range(1, L + 1)) for L in range(1, 11)}  # eq. (11a)
    speed = {L: (token[L] + 1) / (1 + c * L) for L in token}
    assert out["speedup"]["token"] == pytest.approx(speed[3], abs=1e-12)
    assert out["speedup"]["block_optimal"] == pytest.approx((out["block_optimal"] + 1) / (1 + 3 * c), abs=1e-12)
    best = max(speed, key=speed.get)
    assert out["best_length"] == best and out["best_speedup"] == pytest.approx(speed[best], abs=1e-12)
    assert out["acceptance_rate"]["token"] == pytest.approx(token[3] / 3, abs=1e-12)


@pytest.mark.parametrize(("V", "L"), [(1000, 3), (32_000, 4), (50_000, 16)])
def test_calc_block_on_a_large_iid_pair_needs_no_enumeration(tmp_path, capsys, V, L):
    """Once killed for memory (V = 32,000, L = 4) or a MemoryError (V = 1,000, L = 3)."""
    rng = np.random.default_rng(V + L)
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    for name, row in (("d", p), ("t", q)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"type": "iid", "probs": row.tolist()}))
    assert main(["calc", "block", "--draft-source", str(tmp_path / "d.json"), "--target-source",
                 str(tmp_path / "t.json"), "--L", str(L), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    overlap = np.minimum(p / p.sum(), q / q.sum()).sum()
    assert out["token"] == pytest.approx(sum(overlap**i for i in range(1, L + 1)), rel=1e-12)
    for key in ("block_onpath", "block_optimal"):
        low, high = out[f"{key}_bounds"]
        assert low <= out[key] <= high and high - low < 1e-6 and "certified bounds" in out[f"{key}_method"]
    assert out["token"] <= out["block_onpath_bounds"][1] and out["block_onpath_bounds"][0] <= out["block_optimal_bounds"][1]
    assert out["lp"] is None and "exceed --lp-max-variables" in out["lp_status"]


def test_decode_reports_the_time_decomposition(capsys):
    assert main(["decode", "--draft", "0.3", "--target", "0.6", "--L", "3", "--tokens", "300", "--sequences", "4",
                 "--t-draft", "0.25", "--t-target", "2", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    cost = row["cost"]
    assert cost["total_time"] == pytest.approx(0.25 * row["draft_calls"] + 2 * row["target_calls"])
    assert cost["total_time"] == pytest.approx(cost["oracle_time"] + cost["discard_time"] + cost["verification_time"])
    assert cost["latency"] == pytest.approx(cost["total_time"] / row["generated"])
    rc, _, err = run("decode", "--draft", "0.3", "--target", "0.6", "--L", "3", "--t-draft", "nan")
    assert rc == 2 and "--t-draft" in err


def test_calc_adaptive_contract(capsys, tmp_path):
    assert main(["calc", "adaptive", "--draft", "0.3,0.7", "--target", "0.6,0.4", "--t-draft", "0.1",
                 "--t-target", "1", "--max-length", "6", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"autoregressive", "fixed", "best_fixed_length", "best_fixed", "optimal", "optimal_thresholds"} <= out.keys()
    beta = 0.7  # Σ min(p, q)
    fixed = {k: (0.1 * k + 1) / (1 + sum(beta**i for i in range(1, k + 1))) for k in range(1, 7)}
    assert out["autoregressive"] == 1.0 and list(out["fixed"]) == [str(k) for k in range(1, 7)]
    for k, v in fixed.items():
        assert out["fixed"][str(k)] == pytest.approx(v, rel=1e-12)
    assert out["best_fixed_length"] == min(fixed, key=fixed.get)
    assert out["optimal"] <= out["best_fixed"] + 1e-12 and len(out["optimal_thresholds"]) == 5
    (tmp_path / "m.json").write_text(json.dumps({"type": "markov", "initial": [0.5, 0.5],
                                                 "transition": [[0.9, 0.1], [0.2, 0.8]]}))
    rc, out, err = run("calc", "adaptive", "--draft-source", str(tmp_path / "m.json"), "--target", "0.5,0.5",
                       "--t-draft", "0.1", "--max-length", "3", "--json")
    markov = json.loads(out)
    assert rc == 0 and markov["optimal"] <= markov["best_fixed"] + 1e-12
    if markov["optimal_is_threshold_policy"]:  # one threshold per step 1..K-1, whatever the drafted context
        assert len(markov["optimal_thresholds"]) == 2 and len(markov["optimal_threshold_intervals"]) == 2
    else:
        assert markov["optimal_thresholds"] is None and markov["optimal_counterexample"]
    (tmp_path / "tv.json").write_text(json.dumps({"type": "markov", "initial": [0.5, 0.5], "horizon": 3,
                                                  "transition": [[[0.9, 0.1], [0.2, 0.8]]] * 2}))
    rc, _, err = run("calc", "adaptive", "--draft-source", str(tmp_path / "tv.json"), "--target", "0.5,0.5",
                     "--t-draft", "0.1", "--max-length", "3")
    assert rc == 2 and "stationary" in err


def test_calc_adaptive_at_llm_vocabulary_reports_its_bracket(capsys, tmp_path):
    from otspec.sources import random_iid, save_source

    d, t = random_iid(32000, 1.0, seed=4)
    save_source(d, tmp_path / "d.json")
    save_source(t, tmp_path / "t.json")
    assert main(["calc", "adaptive", "--draft-source", str(tmp_path / "d.json"), "--target-source",
                 str(tmp_path / "t.json"), "--t-draft", "0.05", "--max-length", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    low, high = out["optimal_latency_bounds"]
    assert out["optimal_method"] == "bracket" and low <= out["optimal"] <= high <= low + 1e-9
    assert high <= out["best_fixed"] and len(set(out["optimal_thresholds"])) == 1
    drafted = out["optimal_expected_drafted_bounds"]
    assert 1 < drafted[0] <= out["optimal_expected_drafted"] <= drafted[1] < 8


def test_calc_and_simulate_speak_one_vocabulary(capsys):
    """calc block names each column's simulate --verifier, and simulate prints the exact value beside its estimate
    and says what accept_dist is (issue 45's ninth point)."""
    from otspec.verifiers import CHAIN_VERIFIERS

    assert main(["calc", "block", "--draft", "0.3", "--target", "0.75", "--L", "4", "--json"]) == 0
    calc = json.loads(capsys.readouterr().out)
    assert calc["simulate_verifier"]["block_onpath"] == "block" and calc["simulate_verifier"]["block_optimal"] == "block_v1"
    assert set(calc["simulate_verifier"].values()) <= set(CHAIN_VERIFIERS)
    for key, name in calc["simulate_verifier"].items():
        if name == "gumbel":
            continue
        assert main(["simulate", "--draft", "0.3", "--target", "0.75", "--L", "4", "--blocks", "20000",
                     "--verifier", name, "--json"]) == 0
        row = json.loads(capsys.readouterr().out)
        assert row["exact_accepted"] == pytest.approx(calc[key], abs=1e-12)
        assert row["accepted"]["low"] - 0.02 <= row["exact_accepted"] <= row["accepted"]["high"] + 0.02
        assert "0, 1, ..., 4 drafts" in row["accept_dist_note"]
