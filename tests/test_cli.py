"""``python -m otspec``: the public command-line contract."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from scipy import stats

from otspec.cli import main
from otspec.distributions import total_variation
from otspec.sources import random_markov, save_source


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "otspec", *args], capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def test_help():
    rc, out, _ = run("--help")
    assert rc == 0 and "calc" in out


def test_calc_block_token_key_matches_bernoulli_closed_form():
    rc, out, err = run("calc", "block", "--draft", "0.3,0.7", "--target", "0.75,0.25", "--L", "4", "--json")
    assert rc == 0, err
    result = json.loads(out)
    tv = 0.45  # |0.3 - 0.75|
    assert result["token"] == pytest.approx(sum((1 - tv) ** ell for ell in range(1, 5)), abs=1e-12)
    assert result["token_tokens_per_iteration"] == pytest.approx(result["token"] + 1)
    assert result["draft_length"] == 4


def test_calc_block_takes_several_lengths():
    rc, out, err = run("calc", "block", "--draft", "0.3,0.7", "--target", "0.75,0.25", "--L", "4,8,2", "--json")
    assert rc == 0, err
    rows = json.loads(out)
    assert [r["draft_length"] for r in rows] == [4, 8, 2]
    assert all(r["token"] == pytest.approx(sum(0.55**ell for ell in range(1, r["draft_length"] + 1)), abs=1e-12)
               for r in rows)
    rc, _, err = run("calc", "block", "--draft", "0.3", "--target", "0.75", "--L", "4,x")
    assert rc == 2 and "--L" in err


def test_calc_block_with_source_files(tmp_path, capsys):
    d, t = random_markov(3, 1.0, horizon=5, seed=2)
    save_source(d, tmp_path / "d.json")
    save_source(t, tmp_path / "t.json")
    assert main(["calc", "block", "--draft-source", str(tmp_path / "d.json"),
                 "--target-source", str(tmp_path / "t.json"), "--L", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # L = 1 check by hand: 1 - TV of the first rows
    assert main(["calc", "block", "--draft-source", str(tmp_path / "d.json"),
                 "--target-source", str(tmp_path / "t.json"), "--L", "1", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["token"] == pytest.approx(1 - float(total_variation(d.initial, t.initial)), abs=1e-12)
    assert result["token"] > one["token"]


def test_calc_block_binary_example_all_keys(capsys):
    # spec §7: 10/9, 11/9, 12/9 accepted tokens per iteration; the LP agrees with eq. (8)
    assert main(["calc", "block", "--draft", "2/3,1/3", "--target", "1/3,2/3", "--L", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["token"] == pytest.approx(10 / 9, abs=1e-12)
    assert out["block_onpath"] == pytest.approx(11 / 9, abs=1e-12)
    assert out["block_optimal"] == pytest.approx(12 / 9, abs=1e-12)
    assert out["lp"] == pytest.approx(12 / 9, abs=1e-8) and out["lp_status"] == "optimal"


def test_calc_block_lp_skipped_above_limit(capsys):
    assert main(["calc", "block", "--draft", "0.3", "--target", "0.75", "--L", "12", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["lp"] is None and "exceed" in out["lp_status"]
    assert out["block_optimal"] == pytest.approx(
        sum(1 - 0.5 * sum(abs(stats.binom.pmf(k, i, 0.3) - stats.binom.pmf(k, i, 0.75)) for k in range(i + 1))
            for i in range(1, 13)), abs=1e-12)


def test_bernoulli_shorthand(capsys):
    assert main(["calc", "block", "--draft", "0.7", "--target", "0.25", "--L", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["token"] == pytest.approx(0.55 + 0.55**2)


@pytest.mark.parametrize("args, message", [
    (["calc", "block", "--draft", "0.3,0.7", "--target", "0.5,0.6", "--L", "2"], "--target: row"),
    (["calc", "block", "--draft", "0.3,0.7", "--target", "a,b", "--L", "2"], "could not read probabilities"),
    (["calc", "block", "--draft", "0.3,0.7", "--target", "0.2,0.3,0.5", "--L", "2"], "vocabulary mismatch"),
    (["calc", "block", "--draft", "0.3,0.7", "--L", "2"], "exactly one of --target and --target-source"),
    (["calc", "block", "--draft", "0.3,0.7", "--target-source", "/no/such.json", "--L", "2"], "not found"),
])
def test_bad_arguments_exit_nonzero_with_message(args, message):
    rc, out, err = run(*args)
    assert rc == 2 and message in err and out == ""


def test_bad_L_is_an_argparse_error():
    rc, _, err = run("calc", "block", "--draft", "0.5", "--target", "0.5", "--L", "0")
    assert rc == 2 and "positive integer" in err


def test_source_random_writes_files_the_calculator_reads(tmp_path):
    rc, _, err = run("source", "random", "--vocab", "3", "--horizon", "6", "--seed", "1",
                     "--draft-out", str(tmp_path / "d.json"), "--target-out", str(tmp_path / "t.json"), "--json")
    assert rc == 0, err
    rc, _, err = run("calc", "block", "--draft-source", str(tmp_path / "d.json"),
                     "--target-source", str(tmp_path / "t.json"), "--L", "7")
    assert rc == 2 and "--L 7 needs sequences of 7 tokens, past the horizon 6" in err


def test_simulate_and_decode_json(capsys):
    assert main(["simulate", "--draft", "0.3", "--target", "0.6", "--L", "3", "--blocks", "20000", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["accepted"]["low"] <= 0.7 + 0.7**2 + 0.7**3 <= sim["accepted"]["high"]
    assert main(["decode", "--draft", "0.3", "--target", "0.6", "--L", "3", "--tokens", "300",
                 "--sequences", "4", "--json"]) == 0
    dec = json.loads(capsys.readouterr().out)
    assert dec["generated"] == 1200 and dec["target_calls"] == dec["iterations"]


def test_calc_otm_matches_spec_table(capsys):
    # multi_draft_otm.md §6 table, draft Ber(0.25), target Ber(0.75), k = 4
    assert main(["calc", "otm", "--draft", "0.25", "--target", "0.75", "--k", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    keys = {"optimal", "optimal_without_replacement", "kseq", "rho_star", "upper_bound", "multiround",
            "multiround_without_replacement", "naive"}
    assert keys <= out.keys()
    assert out["optimal"] == pytest.approx(0.93359375, abs=1e-12)
    assert out["upper_bound"] == pytest.approx(out["optimal"], abs=1e-12)  # Lemma 3 bound is tight
    assert round(out["kseq"], 4) == 0.8299 and round(out["multiround"], 4) == 0.7891
    assert round(out["naive"], 4) == 0.7617
    assert out["optimal_without_replacement"] >= out["optimal"]
    assert 1.0 <= out["rho_star"] <= 4.0


def test_calc_otm_uniform_closed_form(capsys):
    # p = U(6), q = U(2): r = 3, k = 3 -> 19/27 and rho* = 57/27 (spec §6, §10)
    assert main(["calc", "otm", "--draft", ",".join(["1/6"] * 6), "--target", "1/2,1/2,0,0,0,0", "--k", "3",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["optimal"] == pytest.approx(19 / 27, abs=1e-12)
    assert out["kseq"] == pytest.approx(19 / 27, abs=1e-9)
    assert out["rho_star"] == pytest.approx(57 / 27, abs=1e-9)


def test_calc_otm_errors():
    rc, _, err = run("calc", "otm", "--draft", "0.3", "--target", "0.2,0.3,0.5", "--k", "2")
    assert rc == 2 and "vocabulary mismatch" in err
    rc, _, err = run("calc", "otm", "--draft", "0.3", "--target", "0.5", "--k", "0")
    assert rc == 2 and "positive integer" in err


def test_calc_rejections_crisp_example(tmp_path, capsys):
    # yin_theory.md §4: T = 2, E[N_rej] = 0.9 exactly
    draft = {"type": "markov", "initial": [0.9, 0.1], "transition": [[[1, 0], [0.5, 0.5]]]}
    target = {"type": "markov", "initial": [0.1, 0.9], "transition": [[[0, 1], [0.5, 0.5]]]}
    (tmp_path / "d.json").write_text(json.dumps(draft))
    (tmp_path / "t.json").write_text(json.dumps(target))
    assert main(["calc", "rejections", "--draft-source", str(tmp_path / "d.json"), "--target-source",
                 str(tmp_path / "t.json"), "--T", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["expected_rejections"] == pytest.approx(0.9, abs=1e-12) and out["horizon"] == 2
    assert out["speedup"] == pytest.approx(2 / 0.9)
    rc, _, err = run("calc", "rejections", "--draft-source", str(tmp_path / "d.json"), "--target-source",
                     str(tmp_path / "t.json"), "--T", "3")
    assert rc == 2 and "horizon" in err


def test_calc_pareto_worked_example(capsys):
    # yin_theory.md §7: p = (0.5, 0.3, 0.2), q = (0.2, 0.3, 0.5), TV = 0.3
    for r, bias in ((0.0, 0.3), (0.1, 0.2), (0.3, 0.0), (0.5, 0.0)):
        assert main(["calc", "pareto", "--draft", "0.5,0.3,0.2", "--target", "0.2,0.3,0.5", "--rejection", str(r),
                     "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["tv"] == pytest.approx(0.3) and out["min_bias"] == pytest.approx(bias, abs=1e-12)
        assert out["lp"] == pytest.approx(bias, abs=1e-9)
    rc, _, err = run("calc", "pareto", "--draft", "0.5,0.5", "--target", "0.2,0.8", "--rejection", "1.5")
    assert rc == 2 and "[0, 1]" in err


def test_plot_pareto_contract(tmp_path):
    out = tmp_path / "p" / "front.png"
    proc = subprocess.run([sys.executable, "-m", "otspec.plot", "pareto", "--draft", "0.6,0.4", "--target",
                           "0.3,0.7", "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert str(out) in proc.stdout and out.exists()
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["figure"] == "pareto" and data["token"]["tv"] == pytest.approx(0.3)
    for bad in (["--draft", "0.6,0.4"], ["--draft", "0.6,0.4", "--target", "0.2,0.3,0.5"],
                ["--draft", "0.6,-0.4", "--target", "0.3,0.7"]):
        proc = subprocess.run([sys.executable, "-m", "otspec.plot", "pareto", *bad, "--out", str(out)],
                              capture_output=True, text=True)
        assert proc.returncode == 2 and "error" in proc.stderr


def test_source_logged_writes_a_log_that_simulate_reads(tmp_path, capsys):
    d, t = random_markov(6, 1.0, seed=4)
    save_source(d, tmp_path / "d.json")
    save_source(t, tmp_path / "t.json")
    assert main(["source", "logged", "--draft-source", str(tmp_path / "d.json"), "--target-source",
                 str(tmp_path / "t.json"), "--paths", "3", "--length", "8", "--top-p", "0.9",
                 "--out", str(tmp_path / "rows"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["steps"] == 24 and info["paths"] == 3 and (tmp_path / "rows").is_file()  # the name as given
    from otspec.sources import load_logged_rows
    from otspec.theory import positional_window_values

    log = load_logged_rows(tmp_path / "rows")
    W = log.windows(2)
    token, _ = positional_window_values(log.overlaps()[W[:, None] + [0, 1]])
    for device in ([], ["--device", "cpu"]) if importlib.util.find_spec("torch") else ([],):
        assert main(["simulate", "--logged", str(tmp_path / "rows"), "--L", "2", "--blocks", "100000", "--json",
                     *device]) == 0
        sim = json.loads(capsys.readouterr().out)
        assert sim["accepted"]["low"] <= token <= sim["accepted"]["high"]
    rc, _, err = run("simulate", "--logged", str(tmp_path / "rows"), "--draft", "0.5", "--L", "2")
    assert rc == 2 and "alone" in err
    rc, _, err = run("simulate", "--logged", str(tmp_path / "missing.npz"), "--L", "2")
    assert rc == 2 and "no file" in err
    rc, _, err = run("simulate", "--draft", "0.5", "--target", "0.2", "--L", "2", "--device", "warp-drive")
    assert rc == 2 and "device" in err


def test_calc_tree_optimum_and_verifiers(capsys):
    """calc tree: every applicable verifier at or below the exact tree optimum, the others said why; EAGLE-2's
    chosen tree by hand (top-2 expansion of p = (.5, .3, .2), 3 nodes kept: 0, 1, 00) gives q0 + q1 + q0 q0."""
    row = ["--draft", "0.5,0.3,0.2", "--target", "0.2,0.3,0.5", "--json"]
    for tree, extra in (("2x1", []), ("2x1", ["--without-replacement"]), ("1x1x1", [])):
        assert main(["calc", "tree", "--tree", tree, *extra, *row]) == 0
        out = json.loads(capsys.readouterr().out)
        values = {k: v for k, v in out["verifiers"].items() if not k.endswith("_status") and v is not None}
        assert len(values) >= 2 and all(v <= out["optimum"]["value"] + 1e-8 for v in values.values())
        assert all(out["verifiers"][f"{k}_status"].startswith("not applicable") for k, v in out["verifiers"].items()
                   if v is None)
    assert main(["calc", "tree", "--tree", "eagle2:2:2:3", *row]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verifiers"]["naive"] == pytest.approx(0.2 + 0.3 + 0.2 * 0.2, abs=1e-12)
    assert out["optimum"]["value"] == pytest.approx(0.54, abs=1e-8)
    assert main(["calc", "tree", "--tree", "2xx1", *row]) == 2
    assert "k-config" in capsys.readouterr().err


def test_calc_tree_refuses_sizes_before_enumerating(capsys):
    """A 15-token chain or a 40-level EAGLE-2 tree over V = 3: every exact value is refused up front with its limit
    (V**(L+1) blocks), not enumerated for minutes or allocated until numpy gives up."""
    import time

    row = ["--draft", "0.5,0.3,0.2", "--target", "0.2,0.3,0.5", "--json"]
    for tree in ("x".join(["1"] * 15), "eagle2:40:3:10"):
        t0 = time.perf_counter()
        assert main(["calc", "tree", "--tree", tree, *row]) == 0
        out = json.loads(capsys.readouterr().out)
        assert time.perf_counter() - t0 < 20
        assert out["optimum"] is None and "limit" in out["optimum_status"]
        assert all(v is None for k, v in out["verifiers"].items() if not k.endswith("_status"))
        assert any("MAX_ENUMERATION" in v for k, v in out["verifiers"].items() if k.endswith("_status"))


def test_simulate_and_decode_take_a_tree(capsys):
    """simulate/decode --tree: any multi-draft or whole-tree verifier on a draft tree; the Monte Carlo interval
    holds calc tree's exact value; chain verifiers with --tree, tree verifiers without it, --L with --tree and a
    verifier that cannot verify the tree's draw exit 2 with a message."""
    row = ["--draft", "0.5,0.3,0.2", "--target", "0.2,0.3,0.5", "--json"]
    assert main(["calc", "tree", "--tree", "2x1", "--without-replacement", *row]) == 0
    exact = json.loads(capsys.readouterr().out)["verifiers"]["traversal"]
    assert main(["simulate", "--verifier", "traversal", "--tree", "2x1", "--without-replacement", "--blocks",
                 "20000", "--seed", "1", *row]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["accepted"]["low"] <= exact <= sim["accepted"]["high"] and sim["draft_length"] == 2
    assert main(["decode", "--verifier", "kseq", "--tree", "2x2", "--tokens", "40", "--sequences", "2", *row]) == 0
    dec = json.loads(capsys.readouterr().out)
    assert dec["tree"] == "2x2" and dec["generated"] == 80
    assert main(["simulate", "--verifier", "spechub", "--tree", "2x2", "--blocks", "2000", *row]) == 0  # its own draw
    assert json.loads(capsys.readouterr().out)["tree"] == "2x2 (hub drafts)"
    for args, match in ((["--verifier", "token", "--tree", "2x1"], "one chain"), (["--verifier", "kseq"], "--tree"),
                        (["--verifier", "traversal", "--tree", "2x1", "--draw", "iid"], "without replacement"),
                        (["--verifier", "kseq", "--tree", "2x1", "--L", "2"], "--L"), ([], "--L")):
        assert main(["simulate", *args, "--blocks", "10", *row]) == 2
        assert match in capsys.readouterr().err
