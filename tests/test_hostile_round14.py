"""Round fourteen of hostile inputs (issue 43): one test per class of finding, each able to fail on the old code."""

from __future__ import annotations

import json

import pytest


def test_a_head_curve_is_read_by_the_record_reader(tmp_path):
    """read_curve parsed JSON by itself: a key given twice kept its last value (a point measured once read as another),
    where every record refuses it; now it goes through read_json_file, with the message naming --out and the file."""
    from llm_bridge.head_curve import FORMAT, read_curve

    point = {"head": "eagle", "train_tokens_asked": 2, "train_tokens": 2, "acceptance_per_position": [0.4],
             "greedy_agreement_per_position": None, "coverage": 0.9, "trained_parameters": 10, "seconds": 1.0}
    path = tmp_path / "curve.json"
    text = json.dumps({"format": FORMAT, "settings": {}, "points": [point]})
    path.write_text(text)
    assert read_curve(path)["points"] == [point]
    path.write_text(text.replace('"coverage": 0.9', '"coverage": 0.9, "coverage": 0.1'))
    with pytest.raises(ValueError, match=r"--out .*curve\.json: not a JSON head curve \(.*coverage"):
        read_curve(path)


def test_float16_and_bfloat16_markov_rows_keep_their_tolerance():
    """A float16 or bfloat16 transition matrix (or a list of float16 rows) was read as float64 before its check and
    refused at float64's 1e-6, although its rows are within float16's 7.8e-3 as IIDSource accepts them."""
    import numpy as np
    import torch

    from otspec import MarkovSource
    from otspec.distributions import validate_probs

    half = np.array([[0.3, 0.7], [0.1, 0.9]], dtype=np.float16)  # row 0 sums to 1.000244 in float16
    for transition in (half, list(half), torch.tensor([[0.3, 0.7], [0.1, 0.9]], dtype=torch.bfloat16)):
        chain = MarkovSource([0.5, 0.5], transition)
        assert np.allclose(chain.transition.sum(-1), 1.0, atol=1e-12)
        assert np.allclose(chain.transition, [[0.3, 0.7], [0.1, 0.9]], atol=2e-3)
    assert np.allclose(validate_probs(list(half)).sum(-1), 1.0)
    with pytest.raises(ValueError, match="transition: row"):  # float64 rows keep float64's tolerance
        MarkovSource([0.5, 0.5], [[0.3, 0.7001], [0.1, 0.9]])
    with pytest.raises(ValueError, match="transition: row"):  # and a float16 row far off is still refused
        MarkovSource([0.5, 0.5], np.array([[0.3, 0.8], [0.1, 0.9]], dtype=np.float16))


def test_table_source_keys_are_tuples_of_integer_ids():
    """int() truncated a key: {(0,): a, (0.7,): b} silently read b as the row after token 0; text, booleans and a
    bare integer key were accepted or raised TypeError."""
    from otspec import TableSource

    good = {(): [0.5, 0.5], (0,): [0.9, 0.1], (1,): [0.5, 0.5]}
    assert TableSource(good, 2, 2).next_probs([[0]]).tolist() == [[0.9, 0.1]]
    for key in ((0.7,), ("0",), (True,), 0, "0"):
        rows = {(): [0.5, 0.5], key: [0.1, 0.9]}  # alone: (True,) would replace (1,) in a dict holding both
        with pytest.raises(ValueError, match=r"rows: key .* is not a prefix"):
            TableSource(rows, 2, 2)


def test_markov_pair_and_log_rows_check_their_arguments():
    """markov_pair read vocab with int() (2.7 → 2, '3' → 3, True → 1), allocated 6.7 GB at vocab 2000 and raised
    numpy's errors on 0, negative or float seeds; log_rows's seed error did not name the seed."""
    from otspec.errors import SizeLimitError
    from otspec.sources import IIDSource, log_rows
    from otspec.theory import markov_pair

    draft, target = markov_pair(vocab=3, horizon=5)
    assert draft.vocab_size == 3 and target.horizon == 5
    for vocab in (2.7, "3", True, 0, -2):
        with pytest.raises(ValueError, match="vocab"):
            markov_pair(vocab=vocab)
    with pytest.raises(SizeLimitError, match="MAX_RANDOM_ENTRIES"):
        markov_pair(vocab=2000, horizon=50)  # counted before the generator draws 400 million entries
    for seed in (1.5, -1, "5"):
        with pytest.raises(ValueError, match="seed"):
            markov_pair(seed=seed)
    with pytest.raises(ValueError, match="seed"):
        log_rows(IIDSource([0.3, 0.7]), IIDSource([0.6, 0.4]), 2, 2, seed=-1)


def test_every_draft_length_is_checked_before_the_first_row_runs(monkeypatch, capsys):
    """simulate --L 2,4097 ran the whole L = 2 Monte Carlo (38 s at 10^9 blocks) before refusing 4097."""
    import otspec.calculators
    import otspec.cli
    from otspec.cli import main
    from tests.cli_refusals import refused

    def ran(*args, **kwargs):
        raise AssertionError("a row ran before the lengths were checked")

    monkeypatch.setattr(otspec.cli, "simulate", ran)
    monkeypatch.setattr(otspec.cli, "generate", ran)
    monkeypatch.setattr(otspec.calculators, "_block_one", ran)
    pair = ["--draft", "0.3,0.7", "--target", "0.75,0.25"]
    refused(main, ["simulate", *pair, "--L", "2,4097", "--blocks", "1000"], capsys, "--L", "MAX_DRAFT_LENGTH")
    refused(main, ["decode", *pair, "--L", "2,4097", "--tokens", "10"], capsys, "--L", "MAX_DRAFT_LENGTH")
    refused(main, ["calc", "block", *pair, "--L", "2,4097"], capsys, "--L", "MAX_DRAFT_LENGTH")


def test_simulate_and_decode_say_when_a_wide_tree_is_capped(capsys):
    """A 5x1 tree drawn without replacement from 2 tokens reported the 2x1 tree's numbers under its own name with no
    word; calc tree said so, simulate and decode did not."""
    from otspec.cli import main

    pair = ["--draft", "0.3,0.7", "--target", "0.75,0.25", "--verifier", "traversal", "--json"]
    for command in (["simulate", *pair, "--tree", "5x1", "--blocks", "2000"],
                    ["decode", *pair, "--tree", "5x1", "--tokens", "50"]):
        assert main(command) == 0
        out = json.loads(capsys.readouterr().out)
        assert "a node drafts at most 2 children" in out["note"], out
    assert main(["simulate", *pair, "--tree", "2x1", "--blocks", "2000"]) == 0
    assert "note" not in json.loads(capsys.readouterr().out)


def test_a_tiny_temperature_gives_the_arg_max_row(tmp_path):
    """logits / 1e-320 overflowed and the row turned NaN (a sweep at temperature 1e-310 was refused naming probs)."""
    import numpy as np
    import torch

    from otspec.distributions import temperature_rows
    from otspec.sweep import run_sweep

    for logits in (np.array([1.0, 2.0, -np.inf]), np.array([1.0, 2.0, -np.inf], dtype=np.float32),
                   torch.tensor([1.0, 2.0, -float("inf")])):
        for T in (1e-320, 1e-30):
            assert np.asarray(temperature_rows(logits, T)).tolist() == [0.0, 1.0, 0.0]
    assert np.allclose(temperature_rows(np.array([1.0, 3.0, 3.0]), 1e-320), [0.0, 0.5, 0.5])  # the limit shares ties
    assert np.allclose(temperature_rows(np.array([0.0, np.log(3.0)]), 1.0), [0.25, 0.75])
    spec = tmp_path / "spec.toml"
    spec.write_text('seed = 1\nL = [1]\nquantities = ["exact"]\ntemperature = [1e-310]\n[[verifiers]]\nname = "token"\n'
                    '[[pairs]]\nkind = "iid"\ndraft = [0.3, 0.7]\ntarget = [0.6, 0.4]\n')
    run_sweep(spec, tmp_path / "out", workers=1, progress=False)
    import pandas as pd

    row = pd.read_parquet(tmp_path / "out" / "results.parquet").iloc[0]
    assert abs(row["exact_accepted"]) < 1e-12  # arg-max rows on different tokens: nothing is accepted


def test_over_acceptance_reads_eps_as_a_number():
    """over_acceptance read eps '0.1' with float() (DecodingOPT refused it); ε = ∞ (accept every draft) stays
    allowed, as both document."""
    from otspec.theory import family_curve, over_acceptance

    assert over_acceptance([0.5, 0.5], [0.75, 0.25], float("inf"))["rejection"] == 0.0
    for eps in ("0.1", True, float("nan"), -1.0):
        with pytest.raises(ValueError, match="eps"):
            over_acceptance([0.5, 0.5], [0.75, 0.25], eps)
    with pytest.raises(ValueError, match="eps"):
        family_curve([0.5, 0.5], [0.75, 0.25], ["0.1"])


def test_real_flags_are_read_in_ascii_without_underscores(capsys):
    """float() reads '0_1' as 1.0 and '٠.٣' as 0.3: --cost-ratio 0_1 ran with c = 1 and a row '0.2_5,0.75' as 0.25;
    integer flags refused both already."""
    from llm_bridge.train_head import main as train_main
    from otspec.cli import main
    from tests.cli_refusals import refused

    pair = ["--draft", "0.3,0.7", "--target", "0.75,0.25"]
    refused(main, ["calc", "block", *pair, "--L", "2", "--cost-ratio", "0_1"], capsys, "--cost-ratio", "0_1")
    refused(main, ["decode", *pair, "--L", "2", "--tokens", "10", "--t-draft", "0_1"], capsys, "--t-draft")
    refused(main, ["calc", "block", "--draft", "0.2_5,0.75", "--target", "0.75,0.25", "--L", "2"], capsys, "--draft")
    refused(main, ["calc", "block", "--draft", "\u0660.3,0.7", "--target", "0.75,0.25", "--L", "2"], capsys, "--draft")
    refused(train_main, ["--kind", "eagle", "--lr", "1_0"], capsys, "--lr")
    assert main(["calc", "block", *pair, "--L", "2", "--cost-ratio", "1e-1", "--json"]) == 0
    assert main(["calc", "block", "--draft", "1/4,3/4", "--target", "0.75,0.25", "--L", "2", "--json"]) == 0


def test_progress_is_none_true_or_false():
    """progress='False' drew a bar (a non-empty text is true); 2 and 'no' were accepted."""
    from otspec import IIDSource, TokenVerify, generate, simulate
    from otspec.sources import log_rows

    draft, target = IIDSource([0.3, 0.7]), IIDSource([0.75, 0.25])
    for bad in ("False", 2, "no"):
        with pytest.raises(ValueError, match="progress"):
            simulate(draft, target, TokenVerify(), 2, 100, progress=bad)
        with pytest.raises(ValueError, match="progress"):
            generate(draft, target, TokenVerify(), 2, 10, progress=bad)
        with pytest.raises(ValueError, match="progress"):
            log_rows(draft, target, 2, 2, progress=bad)
    assert simulate(draft, target, TokenVerify(), 2, 100, progress=False).accepted.value >= 0


def test_errors_that_name_their_input(tmp_path, capsys):
    """A table source's rows given as a list, bracket_latency's K as 4.0, a cost mapping without the scored size,
    and a sweep pair naming a folder gave AttributeError text, TypeError, KeyError and 'no such file'."""
    from otspec.sources import source_from_json
    from otspec.theory import CallCosts
    from otspec.theory.adaptive_bracket import bracket_latency

    with pytest.raises(ValueError, match="field 'rows' is a list"):
        source_from_json({"type": "table", "vocab_size": 2, "horizon": 1, "rows": [[0.5, 0.5]]})
    with pytest.raises(ValueError, match="K"):
        bracket_latency([0.3, 0.7], [0.6, 0.4], 4.0, 0.1, 1.0)
    with pytest.raises(ValueError, match="t_target"):
        CallCosts(0.1, t_target={1: 1.0}).target(3)
    assert CallCosts(0.1, t_target={"3": 2.0}).target(3) == 2.0
    (tmp_path / "adir").mkdir()
    spec = tmp_path / "spec.toml"
    spec.write_text('L = [1]\nquantities = ["exact"]\n[[verifiers]]\nname = "token"\n[[pairs]]\nkind = "json"\n'
                    'draft = "adir"\ntarget = "adir"\n')
    from otspec.cli import main
    from tests.cli_refusals import refused

    refused(main, ["sweep", str(spec), "--workers", "1", "--out", str(tmp_path / "res")], capsys, "is a folder")


def test_damaged_record_values_beyond_their_bounds_are_refused():
    """A mean accepted length of 7 at L = 2, a prediction of 10 tokens per call, a first-position acceptance of 2, a
    histogram given as text and a lossless verdict 'yes' were drawn or passed as given."""
    import copy
    from pathlib import Path

    from otspec.engine.record import RecordError, as_record

    record = json.loads((Path(__file__).resolve().parent.parent / "figures" / "llm_default.json").read_text())
    as_record(copy.deepcopy(record))
    run = next(i for i, r in enumerate(record["runs"]) if r.get("L") == 2)

    def damaged(edit):
        bad = copy.deepcopy(record)
        edit(bad)
        return bad

    cases = [(lambda r: r["runs"][run].__setitem__("mean_acceptance_length", 7.0), "above L \\+ 1 = 3"),
             (lambda r: r["runs"][run]["prediction"].__setitem__("block_efficiency", 10.0), "above L \\+ 1 = 3"),
             (lambda r: r["drafter"].__setitem__("acceptance", 2.0), "should be <= 1"),
             (lambda r: r["runs"][run].setdefault("engine_metrics", {}).__setitem__("draft_length_histogram", "abc"),
              "list of counts"),
             (lambda r: r["lossless"]["verifiers"]["token"].__setitem__("lossless", "yes"), "true, false or null")]
    for edit, needle in cases:
        with pytest.raises(RecordError, match=needle):
            as_record(damaged(edit))


def test_an_empty_tree_list_and_a_column_named_twice_are_refused(tmp_path, capsys):
    """A sweep spec with trees = [] ran (L = [] was refused); a results CSV with two columns of one name was drawn
    from one of them (pandas renamed the other 'exact_accepted.1')."""
    from otspec.figures.sweep import main as sweep_plot
    from otspec.sweep import load_spec
    from tests.cli_refusals import refused

    spec = tmp_path / "spec.toml"
    body = 'L = [1]\nquantities = ["exact"]\n[[verifiers]]\nname = "token"\n[[pairs]]\nkind = "iid"\n' \
           'draft = [0.3, 0.7]\ntarget = [0.6, 0.4]\n'
    spec.write_text("trees = []\n" + body)
    with pytest.raises(ValueError, match="trees: expected at least one tree"):
        load_spec(spec)
    spec.write_text(body)
    assert load_spec(spec)  # without the key: chain cells only, as before
    (tmp_path / "twice.csv").write_text("L,exact_accepted,exact_accepted\n1,0.5,0.9\n2,0.6,0.8\n")
    refused(sweep_plot, [str(tmp_path / "twice.csv"), "--x", "L", "--y", "exact_accepted", "--out",
                         str(tmp_path / "x.png")], capsys, "'exact_accepted' named twice")


def test_flags_a_run_would_ignore_are_refused_before_a_model_loads(capsys, monkeypatch):
    """train_head --kind medusa --unroll 3 and validate --log-top-p 0.5 without --log-rows (or --rule without --trees)
    went on to fetch the target with the flag ignored."""
    import llm_bridge.forecast
    import llm_bridge.train_head
    import llm_bridge.validate
    from llm_bridge.forecast import main as forecast_main
    from llm_bridge.train_head import main as train_main
    from llm_bridge.validate import main as validate_main
    from tests.cli_refusals import refused

    def fetched(*args, **kwargs):
        raise AssertionError("a model was loaded before the flags were checked")

    monkeypatch.setattr(llm_bridge.train_head, "load_model", fetched)
    monkeypatch.setattr(llm_bridge.validate, "validate", fetched)
    monkeypatch.setattr(llm_bridge.forecast, "load_pair", fetched)
    for argv, flag in ((["--kind", "medusa", "--unroll", "3"], "--unroll"),
                       (["--kind", "medusa", "--feature-weight", "2"], "--feature-weight"),
                       (["--kind", "eagle", "--medusa-heads", "3"], "--medusa-heads"),
                       (["--kind", "eagle", "--corpus", "default", "--samples", "3"], "--samples"),
                       (["--kind", "eagle", "--heldout-sequences", "9"], "--heldout-sequences")):
        refused(train_main, argv, capsys, flag, "ignore")
    for argv, flag in ((["--log-top-p", "0.5"], "--log-top-p"), (["--log-max-kept", "9"], "--log-max-kept"),
                       (["--rule", "accepted"], "--rule"), (["--multi-verifiers", "kseq"], "--multi-verifiers")):
        refused(validate_main, argv, capsys, flag, "ignore")
    refused(forecast_main, ["--rule", "accepted"], capsys, "--rule", "ignore")


def test_a_protocol_controller_answers_with_booleans():
    """keep_drafting's answer was cast with bool(): None stopped drafting, NaN or 0.5 kept it going; a flag 'no' was
    read as True and a start that is not callable was skipped."""
    import numpy as np

    from otspec import IIDSource, TokenVerify, generate
    from otspec.engine.controllers import as_controller

    class Protocol:
        max_length = 3

        def __init__(self, answer):
            self.answer = answer

        def keep_drafting(self, step, draft_rows, **_):
            return self.answer(len(draft_rows))

    draft, target = IIDSource([0.3, 0.7]), IIDSource([0.75, 0.25])
    for answer in (lambda m: None, lambda m: np.full(m, 0.5), lambda m: np.full(m, np.nan), lambda m: [True] * (m + 1)):
        with pytest.raises(ValueError, match="keep_drafting: expected"):
            generate(draft, target, TokenVerify(), Protocol(answer), 20, seed=0)
    for good in (lambda m: np.ones(m, dtype=bool), lambda m: True, lambda m: [False] * m):
        assert generate(draft, target, TokenVerify(), Protocol(good), 20, seed=0).tokens.shape[-1] >= 20
    flagged = Protocol(lambda m: np.ones(m, dtype=bool))
    flagged.needs_target = "no"
    with pytest.raises(ValueError, match="needs_target"):
        as_controller(flagged)
    started = Protocol(lambda m: np.ones(m, dtype=bool))
    started.start = 5
    with pytest.raises(ValueError, match="start"):
        as_controller(started)


def test_one_drafted_tree_has_its_optimum_in_closed_form():
    """An EAGLE-2 tree of 910 tokens at V = 3 sent calc tree into two minutes of HiGHS for a value every verifier
    LP has in closed form when one tree is drafted for sure: Σ_ℓ Q(Y^ℓ is a path). The closed form is checked
    against the verifier LP and the coupling LP (still solved when two trees are drafted)."""
    import numpy as np

    from otspec.solvers.tree_ot import coupling_optimum, verifier_optimum
    from otspec.sources import random_markov

    _, target = random_markov(vocab=3, concentration=1.0, seed=4)
    paths = frozenset({(0,), (1,), (0, 2), (0, 0), (0, 2, 1), (1, 1), (1, 1, 0)})
    closed = coupling_optimum([paths], [1.0], target, 3)
    assert closed.value == pytest.approx(verifier_optimum([paths], [1.0], target, 3)[0], abs=1e-9)
    assert closed.coupling == pytest.approx(closed.value) and closed.per_level_sum == pytest.approx(closed.value)
    other = frozenset({(2,), (2, 2)})
    two = coupling_optimum([paths, other], [1.0 - 1e-12, 1e-12], target, 3)  # the LPs, at almost the same law
    assert two.value == pytest.approx(closed.value, abs=1e-9) and two.coupling == pytest.approx(closed.coupling,
                                                                                                  abs=1e-9)
    assert np.allclose(two.per_level, closed.per_level, atol=1e-9)


def test_a_tree_monte_carlo_trial_is_one_iteration_and_a_capped_tree_is_computed_capped(monkeypatch):
    """simulate_tree finished every trial's L + 1 tokens with more trees after an early rejection (iid:64:1000 on a
    2-token pair ran past a minute); calc tree computed a 4096x1 tree drawn without replacement from 3 tokens for
    30 s although its values are those of 3x1. The compiled decode's corrections were two passes over V each (16 M
    tokens: minutes); they are now a lookup, the draws unchanged."""
    import numpy as np

    import otspec.engine.tree
    from otspec import IIDSource, TokenVerify, generate
    from otspec.cli import main
    from otspec.engine import simulate_tree, tree_law
    from otspec.engine.compiled_chain import residual_tables
    from otspec.engine.lookup import lookup_table
    from otspec.engine.session import SourceSession
    from otspec.sources import MarkovSource
    from otspec.verifiers import KSeq

    draft = MarkovSource([0.5, 0.5], [[0.9, 0.1], [0.2, 0.8]])
    target = MarkovSource([0.5, 0.5], [[0.2, 0.8], [0.9, 0.1]])  # rejections early and often
    exact = tree_law(draft, target, KSeq(), "iid:3:3", "match").expected_accepted
    mc = simulate_tree(draft, target, KSeq(), "iid:3:3", 40_000, seed=3, progress=False)
    assert abs(mc.accepted.value - exact) < 5 * mc.accepted.stderr + 1e-12
    assert np.allclose(mc.first_token_counts / mc.first_token_counts.sum(), [0.5, 0.5], atol=0.02)
    calls = []
    real_feed_tree = SourceSession.feed_tree
    monkeypatch.setattr(SourceSession, "feed_tree", lambda self, *a: calls.append(1) or real_feed_tree(self, *a))
    simulate_tree(draft, target, KSeq(), "iid:4:12", 8, seed=0, progress=False)  # one chunk of 8 trials
    assert len(calls) <= 2 * 12  # the draft's levels and the target's scoring of one tree, not a tree per level left
    monkeypatch.setattr(SourceSession, "feed_tree", real_feed_tree)
    seen = []
    real_law = otspec.engine.tree.tree_law
    monkeypatch.setattr(otspec.engine.tree, "tree_law", lambda d, t, v, tree, rule: seen.append(tree.branching) or
                        real_law(d, t, v, tree, rule))
    assert main(["calc", "tree", "--draft", "0.5,0.3,0.2", "--target", "0.2,0.3,0.5", "--tree", "4096x1",
                 "--without-replacement", "--json"]) == 0
    assert seen and set(seen) == {(3, 1)}
    for pair in ((IIDSource([0.5, 0.5, 0.0]), IIDSource([0.2, 0.3, 0.5])), (draft, target)):
        assert residual_tables(*map(lookup_table, pair)) is not None
    small = generate(IIDSource([0.7, 0.2, 0.1]), IIDSource([0.1, 0.2, 0.7]), TokenVerify(), 2, 2, n_sequences=40_000,
                     seed=1, progress=False)
    assert np.allclose(np.bincount(small.tokens[:, 0], minlength=3) / 40_000, [0.1, 0.2, 0.7], atol=0.01)
