"""``python -m llm_bridge.validate`` on tiny saved models: the JSON contract, the Markdown and the plot."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from llm_bridge import validate as validate_mod
from llm_bridge.measure import predicted_block_efficiency, predicted_speedup, two_point
from llm_bridge.validate_config import ValidateConfig
from otspec.plot import main as plot_main
from tests.llm_tiny import tiny_llama, tiny_tokenizer, torch

REPO = Path(__file__).resolve().parent.parent

RUN_KEYS = {"verifier", "L", "block_efficiency", "predicted_block_efficiency", "acceptance_rate", "tv_per_position",
            "t_draft_ms", "t_target_ms", "tokens_per_s", "baseline_tokens_per_s", "speedup", "predicted_speedup"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    for name, seed, layers in (("target", 0, 2), ("draft", 1, 1)):
        tiny_llama(seed, layers, dtype=torch.float32).save_pretrained(root / name)
        tiny_tokenizer().save_pretrained(root / name)
    return root


def test_cli_writes_the_json_contract(folders, tmp_path, capsys):
    out = tmp_path / "figs"
    code = validate_mod.main(["--target", str(folders / "target"), "--draft", str(folders / "draft"),
                              "--verifiers", "token,block,block_v1", "--L", "2,3", "--prompts", "2",
                              "--max-new-tokens", "10", "--device", "cpu", "--lossless-samples", "40",
                              "--name", "tiny", "--out-dir", str(out), "--json",
                              "--export-synthetic-rates", str(tmp_path / "rates.json")])
    assert code == 0
    record = json.loads((out / "llm_tiny.json").read_text())
    assert json.loads(capsys.readouterr().out) == record
    assert record["model_pair"] == {"target": str(folders / "target"), "draft": str(folders / "draft"),
                                    "device": "cpu", "dtype": "float32"}
    assert [(r["verifier"], r["L"]) for r in record["runs"]] == [(v, L) for v in ("token", "block", "block_v1")
                                                                  for L in (2, 3)]
    for r in record["runs"]:
        assert RUN_KEYS <= set(r)
        be = r["block_efficiency"]
        assert {"mean", "low", "high"} <= set(be) and 1 <= be["mean"] <= r["L"] + 1
        assert be["unit"] == "prompt" and be["prompts"] == 2 and be["low"] <= be["mean"] <= be["high"]
        assert be["mean"] == pytest.approx(r["generated"] / r["iterations"])  # tokens / iterations over prompts
        assert len(r["tv_per_position"]) == r["L"] and all(0 <= x <= 1 for x in r["tv_per_position"])
        assert all(k.isdigit() and v > 0 for k, v in r["t_target_ms"].items())
        assert r["speedup"] == pytest.approx(r["tokens_per_s"] / r["baseline_tokens_per_s"])
        assert 1 <= r["predicted_block_efficiency"] <= r["L"] + 1 and r["predicted_speedup"] > 0
        pi = r["predicted_block_efficiency_interval"]  # from the independent plain-decoding log
        assert pi["low"] <= r["predicted_block_efficiency"] <= pi["high"] and "decode engine" in r["prediction_method"]
        assert r["prediction"]["paths"] == 2 and r["prediction"]["block_efficiency"] == r["predicted_block_efficiency"]
        assert 1 <= r["two_point_upper_bound"] <= r["L"] + 1
        tp = r["two_point_upper_bound_interval"]
        assert tp["low"] <= tp["high"]
        assert sum(r["accepted_length_histogram"]) == r["iterations"]
        # the serving engines' metrics: mean acceptance length = 1 + Σ unconditional rates = 1 + accepted / drafts
        m = r["engine_metrics"]
        assert r["mean_acceptance_length"] == pytest.approx(1 + sum(r["acceptance_per_position_unconditional"]))
        assert r["mean_acceptance_length"] == pytest.approx(1 + m["accepted_tokens"] / m["drafts"])
        assert m["drafts"] + m["draft_length_histogram"][0] == r["iterations"]
        rates = r["acceptance_per_position_unconditional"]
        assert len(rates) == r["L"] and all(b <= a for a, b in zip(rates, rates[1:], strict=False))
        assert r["draft_acceptance_rate"] == pytest.approx(m["accepted_tokens"] / m["drafted_tokens"])
        # a batch of both prompts takes as many target calls as its slower sequence needs iterations
        st = r["batch_straggling"]
        assert st["batch_size"] == 8 and st["predicted_batch"]["batch"] == 2 and st["predicted"] >= 1.0
        assert st["measured"] == pytest.approx(r["target_calls"] / (r["iterations"] / 2))  # one round of 2 prompts
        # the speedup predicted from the cost profile (measured on the prediction prompts) and the replays alone
        sp = r["speedup_prediction"]
        assert sp["source"] == "cost_profile" and sp["profile_config"] == f"{r['verifier']}:L={r['L']}"
        assert r["predicted_speedup"] == sp["speedup"] > 0
        psi = r["predicted_speedup_interval"]
        assert psi["low"] <= r["predicted_speedup"] <= psi["high"]
        assert r["predicted_speedup_ignoring_straggling"] >= r["predicted_speedup"] * (1 - 1e-12)
        assert st["predicted_wall_clock"]["batch_iterations"] >= st["predicted_wall_clock"]["mean_iterations"]
        # the measured speedup: a paired bootstrap over the timing rounds beside their range
        assert r["speedup_range"] == r["speedup_interval"] and "range" in r["speedup_range"]["method"]
        ci = r["speedup_ci"]
        assert ci["rounds"] == 1 and "paired bootstrap" in ci["method"]
        assert "speedup" not in r["time_decomposition_ms"] and r["time_decomposition_ms"]["total_time"] is None
    settings = record["settings"]  # the predictions read other prompts than the measured ones
    assert settings["prompt_ids"] == [0, 1] and settings["prediction_prompt_ids"] == [2, 3]
    profile = record["profile"]
    assert profile["kind"] == "cost_profile" and profile["prompt_ids"] == [2, 3] and profile["batch_size"] == 8
    assert profile["interleaved_with_runs"] is True  # its rounds went in turn with the measured runs
    assert set(profile["t_target_ms"]) == {"1", "2", "3", "4"} and set(profile["configs"]) == {
        f"{v}:L={L}" for v in ("token", "block", "block_v1") for L in (2, 3)}
    assert all(lo["low"] <= profile["t_target_ms"][n] <= lo["high"] for n, lo in profile["t_target_ms_interval"].items())
    assert profile["configs"]["block_v1:L=2"]["extra_calls"] == pytest.approx(1.0)  # it asks for the next row
    assert profile["configs"]["token:L=2"]["extra_calls"] == pytest.approx(0.0)
    timing = record["timing"]  # the baseline measured again after the runs
    assert timing["baseline_before_ms_per_token"] > 0 and "one seed before and after" in timing["method"]
    assert timing["baseline_after_ms_per_token"] > 0 and len(timing["load_average"]) == 2
    assert all(r["own_cpu"] >= 0 for r in timing["load"]) and timing["threads"] >= 1
    assert ("unreliable_timing" in record) == (timing["unreliable_timing"] is not None)
    exported = json.loads((tmp_path / "rates.json").read_text())
    assert exported["format"] == "otspec-synthetic-acceptance/1" and exported["model_pair"] == record["model_pair"]
    measured = [e for e in exported["runs"] if e["source"] == "measured"]
    assert [(e["verifier"], e["L"]) for e in measured] == [(r["verifier"], r["L"]) for r in record["runs"]]
    for e, r in zip(measured, record["runs"], strict=True):
        assert e["acceptance_rates"] == r["acceptance_per_position_unconditional"]
        assert e["mean_acceptance_length"] == pytest.approx(r["mean_acceptance_length"])
    predicted = [e for e in exported["runs"] if e["source"] == "predicted"]
    assert len(predicted) == len(record["runs"]) and all("decode engine" in e["method"] for e in predicted)
    assert set(record["hf_assisted"]) >= {"tokens_per_s", "acceptance_rate"}
    assert record["hf_assisted"]["prompts"] == record["settings"]["hf_prompts"] == 2  # --hf-prompts 8, 2 prompts
    assert record["hf_decode_step"]["cache"] == record["settings"]["cache"]
    laws = record["lossless"]["verifiers"]
    assert all(laws[v]["first_token_max_deviation"] < 1e-6 for v in ("token", "block", "block_v1"))
    assert not (out / "llm_tiny.md").exists()  # the model side writes data; the figures draw it
    assert plot_main(["record", str(out / "llm_tiny.json")]) == 0
    summary = (out / "llm_tiny.md").read_text()
    assert all(f"\n| {v} | {L} | " in summary for v in ("token", "block", "block_v1") for L in (2, 3))
    assert "biased control" in summary
    assert (out / "llm_tiny.png").stat().st_size > 10_000


def test_the_int8_drafter_validates_end_to_end(folders):
    """Every step of a record (warm-up, interleaved runs, log, predictions, exact laws, two-sample test) with the
    int8 drafter, whose quantized head differs from a float model's."""
    record = validate_mod.validate(ValidateConfig(target=str(folders / "target"), draft="int8", verifiers=("token",),
                                                  lengths=(2,), prompts=1, max_new_tokens=6, device="cpu",
                                                  lossless_samples=20, hf=False)).to_json()
    assert record["model_pair"]["draft"] == "int8" and record["runs"][0]["prediction"]["paths"] == 1
    assert record["lossless"]["verifiers"]["token"]["first_token_max_deviation"] < 1e-6


def test_bad_arguments_are_clear(folders):
    with pytest.raises(SystemExit):
        validate_mod.main(["--L", "2,x"])
    with pytest.raises(ValueError, match="verifiers \\['kseq'\\]"):
        ValidateConfig(target=str(folders / "target"), draft=str(folders / "draft"), verifiers=("kseq",))


def test_predictions_from_two_point_pairs():
    # identical rows: every draft token is accepted, L + 1 tokens per iteration, whatever the verifier
    assert predicted_block_efficiency([0.3] * 3, [0.3] * 3, 3) == {"token": 4.0, "block": 4.0, "optimal": 4.0}
    # the token formula is sum_l prod (1 - TV_i) with TV_i = q_i(A) - p_i(A)
    got = predicted_block_efficiency([0.2, 0.1], [0.5, 0.7], 2)
    assert got["token"] == pytest.approx(1 + 0.7 + 0.7 * 0.4)
    assert got["token"] <= got["block"] <= got["optimal"] + 1e-12
    pa, qa = two_point(np.array([[0.5, 0.3, 0.2]]), np.array([[0.2, 0.3, 0.5]]))
    assert (pa[0], qa[0]) == pytest.approx((0.5, 0.8))  # A = {x : q >= p} = {1, 2}
    # cost model: 3 tokens per iteration, 10 ms plain per token, 2 draft calls of 2 ms + a 12 ms target call
    assert predicted_speedup(3.0, 10.0, 2, 2.0, 12.0) == pytest.approx(30 / 16)


def test_cli_bad_input_exits_2_with_a_message(folders, capsys):
    assert validate_mod.main(["--target", "/nonexistent/model", "--no-hf"]) == 2
    assert "/nonexistent/model" in capsys.readouterr().err
    common = ["--target", str(folders / "target"), "--draft", str(folders / "draft"), "--device", "cpu"]
    assert validate_mod.main([*common, "--prompts", "0"]) == 2
    assert "prompts" in capsys.readouterr().err
    assert validate_mod.main([*common, "--prompts", "99"]) == 2
    assert "the prompt file holds 96" in capsys.readouterr().err
    assert validate_mod.main([*common, "--prompts", "40", "--prediction-prompts", "57"]) == 2  # 97 > 96
    assert "must differ from the measured ones" in capsys.readouterr().err
    assert validate_mod.main([*common, "--L", "0"]) == 2
    assert "L" in capsys.readouterr().err
    assert validate_mod.main([*common, "--prediction-sequences", "0"]) == 2  # refused before any decoding
    assert "--prediction-sequences" in capsys.readouterr().err  # the flag, not the parameter
    with pytest.raises(SystemExit):  # checked before anything runs
        validate_mod.main([*common, "--export-synthetic-rates", "/nonexistent/folder/rates.json"])
    assert "its folder does not exist" in capsys.readouterr().err
    # issue 25: refused before any model is loaded (a missing target shows the models were never touched)
    early = ["--target", "/nonexistent/model", "--no-hf"]
    for args, match in ((["--L", ""], "nothing to run"), (["--batch-size", "0"], "--batch-size"),
                        (["--device", "warp-drive"], "device"), (["--dtype", "float8"], "dtype"),
                        (["--verifiers", "", "--L", "2"], "verifiers")):
        assert validate_mod.main([*early, *args]) == 2
        err = capsys.readouterr().err
        assert match in err and "/nonexistent/model" not in err, (args, err)


TREE_KEYS = {"verifier", "tree", "rule", "block_efficiency", "expected_block_efficiency_given_tree",
             "predicted_block_efficiency", "otm_bound_block_efficiency", "go_on", "acceptance", "optimum", "tv",
             "target_nodes_per_call", "tokens_per_s", "speedup", "predicted_speedup"}


def test_cli_tree_runs(folders, tmp_path):
    out = tmp_path / "figs"
    code = validate_mod.main(["--target", str(folders / "target"), "--draft", str(folders / "draft"),
                              "--verifiers", "token", "--L", "2", "--trees", "iid:2:2,2x2",
                              "--multi-verifiers", "kseq,multiround_without_replacement", "--rule", "accepted",
                              "--prompts", "2", "--batch-size", "1", "--max-new-tokens", "10", "--device", "cpu",
                              "--lossless-samples", "40", "--no-hf", "--name", "trees", "--out-dir", str(out)])
    assert code == 0
    record = json.loads((out / "llm_trees.json").read_text())
    runs = record["tree_runs"]
    assert [(r["verifier"], r["tree"], r["replacement"]) for r in runs] == [
        ("kseq", "2x1", True), ("kseq", "2x2", True), ("multiround_without_replacement", "2x1", False),
        ("multiround_without_replacement", "2x2", False)]
    for r in runs:
        assert TREE_KEYS <= set(r) and r["rule"] == "accepted"
        assert 1 <= r["block_efficiency"]["mean"] <= 3 and len(r["go_on"]) == 2
        assert all(a <= o + 1e-9 for a, o in zip(r["acceptance"], r["optimum"], strict=True))
        assert r["per_depth_product_block_efficiency"] <= r["otm_bound_block_efficiency"] + 1e-9
        pi = r["predicted_block_efficiency_interval"]  # from the independent plain-decoding log
        assert pi["low"] <= r["predicted_block_efficiency"] <= pi["high"] and "decode engine" in r["prediction_method"]
        assert r["target_nodes_per_call"] >= 1 and r["predicted_speedup"] > 0
        assert r["mean_acceptance_length"] == pytest.approx(1 + sum(r["acceptance_per_position_unconditional"]))
    plain = [x["generated"] / x["seconds"] for x in record["baseline"]["rounds"]]
    assert len(plain) == 2 and sum(x["generated"] for x in record["baseline"]["rounds"]) == 20
    for r in runs + record["runs"]:  # one timing round per batch: plain sampling and the run in turn
        ratios = [x["generated"] / x["seconds"] / b for x, b in zip(r["timing_rounds"], plain, strict=True)]
        si = r["speedup_interval"]
        assert si["rounds"] == pytest.approx(ratios) and "interleaved" in si["method"]
        assert si["low"] == pytest.approx(min(ratios)) and si["high"] == pytest.approx(max(ratios))
        assert si["low"] <= si["median"] <= si["high"]
    laws = record["lossless"]["verifiers"]
    assert laws["kseq (tree 2x1)"]["first_token_max_deviation"] < 1e-6
    assert laws["multiround_without_replacement (tree 2x1)"]["first_token_max_deviation"] < 1e-6
    assert plot_main(["record", str(out / "llm_trees.json")]) == 0
    summary = (out / "llm_trees.md").read_text()
    assert "| kseq | 2x2 | accepted |" in summary and "w/o repl." in summary
    assert (out / "llm_trees.png").stat().st_size > 10_000
    assert validate_mod.main(["--target", str(folders / "target"), "--draft", str(folders / "draft"),
                              "--trees", "2x1", "--multi-verifiers", "token", "--prompts", "1", "--no-hf"]) == 2


def test_log_rows_writes_the_real_pairs_rows_along_the_plain_continuations(folders, tmp_path, capsys):
    import numpy as np

    from llm_bridge.models import load_model
    from llm_bridge.sampling import Sampling
    from otspec.engine import simulate_logged
    from otspec.sources import load_logged_rows
    from otspec.theory import positional_window_values
    from otspec.verifiers import TokenVerify

    out, rows = tmp_path / "figs", tmp_path / "rows.npz"
    code = validate_mod.main(["--target", str(folders / "target"), "--draft", str(folders / "draft"),
                              "--verifiers", "token", "--L", "2", "--prompts", "2", "--max-new-tokens", "12",
                              "--device", "cpu", "--lossless-samples", "20", "--no-hf", "--temperature", "1.5",
                              "--name", "logged", "--out-dir", str(out), "--log-rows", str(rows), "--log-top-p", "0.9"])
    assert code == 0
    record = json.loads((out / "llm_logged.json").read_text())
    log = load_logged_rows(rows)
    assert record["logged_rows"]["steps"] == log.n_steps == 24 and log.n_paths == 2
    assert log.meta["sampling"]["temperature"] == 1.5 and log.meta["top_p"] == 0.9
    # every kept entry is the model's processed row at that prefix, and the tail is what was left out
    from llm_bridge.prompts import DATA_DIR, encode_prompts, read_prompts

    target, draft = load_model(str(folders / "target"), device="cpu"), load_model(str(folders / "draft"), device="cpu")
    # the log is made on the prediction prompts, the two after the measured ones
    assert record["settings"]["prediction_prompt_ids"] == [2, 3] and log.meta["prompt_ids"] == [2, 3]
    texts = read_prompts(DATA_DIR / "validate_prompts.txt")
    prompt = encode_prompts(target.tokenizer, texts[2:4])[1]
    steps = range(log.path_offsets[1], log.path_offsets[2])
    ids = torch.as_tensor([list(prompt) + log.tokens[steps.start:steps.stop].tolist()])
    sampling = Sampling(1.5)
    # the draft's rows as the loop's draft session computes them: both prompts in one batch, a token per call
    from llm_bridge.drafters import ModelDrafter
    from llm_bridge.logrows import draft_rows_incremental

    prompts = encode_prompts(target.tokenizer, texts[2:4])
    conts = [log.tokens[log.path_offsets[i]:log.path_offsets[i + 1]] for i in range(2)]
    incremental = list(draft_rows_incremental(ModelDrafter(draft), prompts, conts, sampling, batch_size=8))[1]
    for model, kept, tail in ((draft, log.draft, log.draft_tail), (target, log.target, log.target_tail)):
        with torch.no_grad():
            full = sampling.rows(model.model(input_ids=ids).logits[0, len(prompt) - 1:-1])
        if model is draft:  # one token per call and one full pass agree to float32 rounding for this float model
            np.testing.assert_allclose(incremental, full, rtol=0, atol=1e-5)
            full = incremental
        for i, s in enumerate(steps):
            a, b = log.row_offsets[s], log.row_offsets[s + 1]
            np.testing.assert_allclose(kept[a:b], full[i, log.row_tokens[a:b]], rtol=0, atol=1e-12)
            assert abs(tail[s] - (1 - full[i, log.row_tokens[a:b]].sum())) <= 1e-12
    assert log.meta["draft_rows"].startswith("incremental")
    # and otspec runs on it: Monte Carlo around the exact token value over its windows
    W = log.windows(2)
    token, _ = positional_window_values(log.overlaps()[W[:, None] + np.arange(2)])
    res = simulate_logged(log, TokenVerify(), 2, 100_000, seed=0, progress=False)
    assert res.accepted.low <= token <= res.accepted.high
    assert validate_mod.main(["--target", str(folders / "target"), "--draft", "ngram", "--prompts", "1", "--no-hf",
                              "--L", "2", "--max-new-tokens", "4", "--device", "cpu", "--out-dir", str(out),
                              "--log-rows", str(tmp_path / "ngram.npz")]) == 2
    assert "needs a model drafter" in capsys.readouterr().err
    assert validate_mod.main(["--target", str(folders / "target"), "--draft", str(folders / "draft"),
                              "--log-rows", str(tmp_path / "no" / "such" / "dir.npz")]) == 2
    assert "folder does not exist" in capsys.readouterr().err


def test_ngram_runs_are_predicted_from_their_chains_along_a_plain_run(folders, tmp_path):
    out = tmp_path / "figs"
    assert validate_mod.main(["--target", str(folders / "target"), "--draft", "ngram", "--prompts", "2", "--no-hf",
                              "--L", "2", "--max-new-tokens", "12", "--device", "cpu", "--out-dir", str(out),
                              "--name", "ng"]) == 0
    run, = json.loads((out / "llm_ng.json").read_text())["runs"][:1]
    assert "n-gram drafter's own chain" in run["prediction_method"] and run["prediction"]["paths"] == 2
    assert run["predicted_block_efficiency_interval"]["low"] <= run["predicted_block_efficiency"]


def test_timing_check_marks_a_loaded_machine():
    def reading(load, own):
        return {"load_average": load, "own_cpu": own, "other_load": max(load - own, 0.0)}

    # a quiet 2-core machine running this 2-thread process alone: the load is its own
    quiet = validate_mod.timing_check(10.0, 10.5, [reading(0.3, 0.1), reading(2.06, 1.71)], 2, 2)
    assert quiet["unreliable_timing"] is None and quiet["baseline_drift"] == pytest.approx(0.05)
    assert quiet["load_average"] == [0.3, 2.06] and quiet["threads"] == 2
    drifted = validate_mod.timing_check(10.0, 12.0, [reading(0.3, 0.0), None], 2, 2)
    assert "drifted 20.0 %" in drifted["unreliable_timing"]
    # issue 21's busy make demo run: another job's load on top of this one's
    loaded = validate_mod.timing_check(49.0, 1198.0, [reading(3.5, 1.0), reading(4.1, 0.9)], 2, 2)
    assert "drifted" in loaded["unreliable_timing"] and "load average 3.20 beyond this process's own" in \
        loaded["unreliable_timing"]
    # another record decoding beside this one for a while, quiet at the start and the end: a round's reading names it
    mid = validate_mod.timing_check(10.0, 10.2, [reading(0.5, 0.2), reading(1.9, 1.8)], 2, 2,
                                    [reading(2.0, 1.9), reading(3.9, 1.0), reading(2.1, 1.9)])
    assert "load average 2.90 beyond this process's own" in mid["unreliable_timing"] and len(mid["load_rounds"]) == 3
    # one thread on 16 cores leaves 15 free: a few other jobs are not contention
    assert validate_mod.timing_check(10.0, 10.0, [reading(6.0, 1.0)], 16, 1)["unreliable_timing"] is None
    from llm_bridge.runs import LoadMeter

    meter = LoadMeter()
    t0 = time.process_time()
    while time.process_time() - t0 < 0.3:  # burn CPU: the meter counts it as this process's own
        pass
    r = meter.read()
    assert r["own_cpu"] > 0 and (r["load_average"] is None or r["other_load"] == max(r["load_average"] -
                                                                                     r["own_cpu"], 0.0))
    from otspec.figures.llm import record_markdown

    record = json.loads((REPO / "figures" / "llm_default.json").read_text())
    record["unreliable_timing"] = loaded["unreliable_timing"]
    assert "**Unreliable timing: plain sampling drifted" in record_markdown(record)


def test_validation_prompts_are_many_and_disjoint_from_training():
    from llm_bridge.prompts import DATA_DIR, read_prompts

    validation = read_prompts(DATA_DIR / "validate_prompts.txt")  # 32 measured and 32 prediction prompts at least
    training = read_prompts(DATA_DIR / "distill_prompts.txt") + read_prompts(DATA_DIR / "head_prompts.txt")
    assert len(validation) >= 64 and len(set(validation)) == len(validation) and not set(validation) & set(training)


def test_lossless_checks_can_be_narrowed(folders, tmp_path, capsys):
    """make demo's short validation: the exact first-token law of chosen verifiers, no two-sample test."""
    out = tmp_path / "figs"
    common = ["--target", str(folders / "target"), "--draft", str(folders / "draft"), "--device", "cpu", "--no-hf",
              "--verifiers", "token", "--L", "2", "--prompts", "2", "--max-new-tokens", "6", "--out-dir", str(out)]
    assert validate_mod.main([*common, "--lossless-samples", "0", "--lossless-verifiers", "block", "--name", "n"]) == 0
    table = capsys.readouterr().out  # the result table, printed without --json
    assert table.startswith("verifier") and "\ntoken     L=2" in table and "plain sampling:" in table
    checks = json.loads((out / "llm_n.json").read_text())["lossless"]["verifiers"]
    assert set(checks) == {"block", "decoding_opt_eps_inf (biased control)"}
    assert checks["block"]["first_token_max_deviation"] < 1e-6 and checks["block"]["two_sample"] is None
    assert plot_main(["record", str(out / "llm_n.json")]) == 0 and "not run" in (out / "llm_n.md").read_text()
    capsys.readouterr()
    assert validate_mod.main([*common, "--lossless-verifiers", "kseq"]) == 2
    assert "lossless verifiers ['kseq']" in capsys.readouterr().err


def test_unreliable_timing_is_measured_again_and_every_attempt_is_listed(folders, tmp_path, monkeypatch):
    from llm_bridge import timing as runs_mod  # the timing protocol

    args = ["--target", str(folders / "target"), "--draft", str(folders / "draft"), "--verifiers", "token",
            "--L", "2", "--prompts", "2", "--max-new-tokens", "6", "--device", "cpu", "--lossless-samples", "0",
            "--no-hf", "--out-dir", str(tmp_path)]
    # a rule no timing passes: every attempt is measured, listed and failed, and the record says so
    monkeypatch.setattr(runs_mod, "MAX_BASELINE_DRIFT", -1.0)
    assert validate_mod.main(args + ["--name", "never", "--timing-attempts", "3"]) == 0
    record = json.loads((tmp_path / "llm_never.json").read_text())
    attempts = record["timing"]["attempts"]
    assert len(attempts) == 3 and all("drifted" in a["unreliable_timing"] for a in attempts)
    assert record["unreliable_timing"] == attempts[-1]["unreliable_timing"]
    # the first attempt fails, the second passes: the record keeps the second and lists both
    verdicts = iter([True, False])
    real_check = runs_mod.timing_check

    def check(*a, **k):
        out = real_check(*a, **k)
        return {**out, "unreliable_timing": "the first attempt fails" if next(verdicts) else None}

    monkeypatch.setattr(runs_mod, "MAX_BASELINE_DRIFT", 0.10)
    monkeypatch.setattr(runs_mod, "timing_check", check)
    assert validate_mod.main(args + ["--name", "second", "--timing-attempts", "3"]) == 0
    record = json.loads((tmp_path / "llm_second.json").read_text())
    assert [a["unreliable_timing"] for a in record["timing"]["attempts"]] == ["the first attempt fails", None]
    assert "unreliable_timing" not in record and record["timing"]["unreliable_timing"] is None
    settling = record["timing"]["settling"]
    assert 2 <= len(settling["ms_per_token"]) <= runs_mod.MAX_SETTLE_PASSES


def test_settling_stops_when_two_passes_agree(monkeypatch):
    from llm_bridge import timing as runs_mod  # the timing protocol

    speeds = iter([17.0, 13.0, 11.0, 10.6, 10.5, 10.5])  # ms per token: a fresh process speeding up

    class Pass:
        def __init__(self):
            self.seconds, self.generated = next(speeds) * 64 / 1e3, 64

    monkeypatch.setattr(runs_mod, "plain_generate", lambda *a, **k: Pass())
    out = runs_mod.settle(None, [[1]], 64, sampling=None, cache="dynamic")
    assert out["settled"] and out["ms_per_token"] == pytest.approx([17.0, 13.0, 11.0, 10.6])  # 10.6 / 11.0: 3.6 %
    speeds = iter([10.0, 20.0] * 10)  # never settles: bounded, and says so
    out = runs_mod.settle(None, [[1]], 64, sampling=None, cache="dynamic", max_passes=5)
    assert not out["settled"] and len(out["ms_per_token"]) == 5


def test_a_feature_head_validates_end_to_end(folders, tmp_path, capsys):
    """A record with an EAGLE head (``head:FOLDER``): predictions replay the head's rows by draft depth, the exact
    laws hold, the Hugging Face peer is skipped with its reason where no draft model fits the target."""
    from llm_bridge.heads import EagleHead, save_head
    from llm_bridge.models import load_model

    target = load_model(str(folders / "target"), device="cpu")
    torch.manual_seed(0)
    head = EagleHead(target.model, np.arange(3, 20))
    with torch.no_grad():
        for p in head.parameters():
            if p.requires_grad:
                p.add_(0.2 * torch.randn_like(p))
    save_head(head, tmp_path / "eagle", {"target": "tiny"})
    record = validate_mod.validate(ValidateConfig(
        target=str(folders / "target"), draft=f"head:{tmp_path / 'eagle'}", verifiers=("token", "block_v1"),
        lengths=(2,), prompts=2, max_new_tokens=8, device="cpu", lossless_samples=0, prediction_paths=2)).to_json()
    assert record["settings"]["prediction_paths"] == 2
    for r in record["runs"]:  # two plain paths of each prediction prompt, pooled per prompt
        assert "draft depth" in r["prediction_method"] and r["prediction"]["paths"] == 4
        assert r["prediction"]["prompts"] == 2 and r["prediction"]["paths_per_prompt"] == 2
        assert 1 <= r["predicted_block_efficiency"] <= 3
    # Hugging Face takes no head: the peer is its fastest draft for the target (the tiny target has no distilled one)
    peer = record["hf_assisted"]
    assert peer["choice"]["chosen"] in ("ngram", "int8") and peer["choice"]["candidates"]["distilled"]["skipped"]
    assert peer["prompts"] == 2 and len(peer["rounds"]) == len(record["baseline"]["rounds"])
    assert peer["speedup_ci"]["low"] <= peer["speedup_ci"]["high"] and "speedup_vs_baseline" in peer
    laws = record["lossless"]["verifiers"]
    assert all(v["first_token_max_deviation"] < 1e-6 for v in laws.values() if v["lossless"])
    assert laws["decoding_opt_eps_inf (biased control)"]["first_token_max_deviation"] > 1e-3
    code = validate_mod.main(["--target", str(folders / "target"), "--draft", f"head:{tmp_path / 'missing'}",
                              "--device", "cpu", "--prompts", "1"])
    assert code == 2 and "train_head" in capsys.readouterr().err  # a missing head: a clear message, no traceback
    with pytest.raises(ValueError, match="prediction_paths"):  # refused when the options are made: no model loads
        ValidateConfig(target=str(folders / "missing"), prediction_paths=0, device="cpu")
    with pytest.raises(ValueError, match="choose their candidates"):
        ValidateConfig(target=str(folders / "target"), draft=f"head:{tmp_path / 'eagle'}", verifiers=(),
                       trees=("eagle2:2:2:3",), multi_verifiers=("kseq",), prompts=1, device="cpu")
    out = tmp_path / "figs"  # EAGLE-2's confidence-ordered tree drafted by the head, beside its chain
    assert validate_mod.main(["--target", str(folders / "target"), "--draft", f"head:{tmp_path / 'eagle'}",
                              "--verifiers", "token", "--L", "2", "--trees", "eagle2:2:2:3", "--multi-verifiers",
                              "naive", "--prompts", "2", "--batch-size", "1", "--max-new-tokens", "8", "--device",
                              "cpu", "--lossless-samples", "30", "--name", "tree_head", "--out-dir", str(out)]) == 0
    record = json.loads((out / "llm_tree_head.json").read_text())
    (run,) = record["tree_runs"]
    assert run["tree"] == "eagle2:2:2:3" and run["verifier"] == "naive" and 1 <= run["block_efficiency"]["mean"] <= 3
    assert "draft depth" in run["prediction_method"] and 1 <= run["predicted_block_efficiency"] <= 3
    assert record["lossless"]["verifiers"]["naive (tree 2x1)"]["first_token_max_deviation"] < 1e-6
    assert plot_main(["record", str(out / "llm_tree_head.json")]) == 0
    assert "eagle2:2:2:3" in (out / "llm_tree_head.md").read_text()


def test_cli_tree_runs_with_whole_tree_and_structured_verifiers(folders, tmp_path):
    """validate --trees with Traversal Verification, GBV, Hu et al.'s greedy drafts and SpecHub: each tree drawn as
    its verifier needs, E[τ | trie] from the whole-tree law, the two-sample test at the root (whole-tree verifiers'
    exact law is the toy sources' test), and the summary names each draw."""
    out = tmp_path / "figs"
    code = validate_mod.main(["--target", str(folders / "target"), "--draft", str(folders / "draft"),
                              "--verifiers", "token", "--L", "2", "--trees", "iid:2:2",
                              "--multi-verifiers", "traversal,gbv,greedy,spechub",
                              "--prompts", "2", "--batch-size", "1", "--max-new-tokens", "8", "--device", "cpu",
                              "--lossless-samples", "40", "--no-hf", "--name", "whole", "--out-dir", str(out)])
    assert code == 0
    record = json.loads((out / "llm_whole.json").read_text())
    runs = {r["verifier"]: r for r in record["tree_runs"]}
    assert [runs[v]["replacement"] for v in ("traversal", "gbv", "greedy", "spechub")] == [False, True, "greedy", "hub"]
    for r in runs.values():
        assert TREE_KEYS <= set(r) and 1 <= r["block_efficiency"]["mean"] <= 3
        assert 1 <= r["expected_block_efficiency_given_tree"] <= 3 and all(0 <= g <= 1 for g in r["go_on"])
    assert runs["traversal"]["acceptance"] == [] and runs["traversal"]["per_depth_product_block_efficiency"] is None
    laws = record["lossless"]["verifiers"]
    assert laws["traversal (tree 2x1)"]["first_token_max_deviation"] is None
    assert laws["traversal (tree 2x1)"]["two_sample"]["p_value"] > 1e-4
    assert laws["greedy (tree 2x1)"]["first_token_max_deviation"] < 1e-6
    assert laws["spechub (tree 2x1)"]["first_token_max_deviation"] < 1e-6
    assert plot_main(["record", str(out / "llm_whole.json")]) == 0
    summary = (out / "llm_whole.md").read_text()
    assert "| gbv | 2x1 |" in summary and "(greedy drafts)" in summary and "(hub pair)" in summary
    assert "toy sources (whole tree)" in summary
