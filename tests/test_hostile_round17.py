"""Round sixteen's leftovers and the public-API sweep (issue 43): one test per class, each able to fail on the old
code."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def test_plot_refuses_scale_for_a_figure_with_nothing_to_simulate(capsys):
    """plot real_models --scale 50 drew the records and said nothing: the records are read, not rerun."""
    from otspec.plot import main
    from tests.cli_refusals import refused

    for name in ("real_models", "spectr_fig4"):
        refused(main, [name, "--scale", "50", "--out", "build/never.png"], capsys, "--scale", repr(name))


def test_grids_are_one_dimensional_and_not_empty():
    """family_curve and batch_curve flattened a 2-D grid and gave empty curves for an empty one; the Pareto grids
    read the text '0.1' and True as numbers."""
    from otspec.solvers import sequence_pareto
    from otspec.sources import bernoulli
    from otspec.theory import batch_curve, family_curve, per_step_curve

    p, q = [0.5, 0.5], [0.75, 0.25]
    for grid in ([[0.0, 0.1], [0.2, 0.3]], [], np.zeros((0,))):
        with pytest.raises(ValueError, match="eps_grid"):
            family_curve(p, q, grid)
    for Ms in ([[1, 2]], []):
        with pytest.raises(ValueError, match="Ms"):
            batch_curve(bernoulli(0.25), bernoulli(0.75), 2, Ms=Ms)
    for call in (sequence_pareto, per_step_curve):
        for grid in (["0.1"], [True], [[0.0, 0.1]], []):
            with pytest.raises(ValueError, match="rejections_grid"):
                call(bernoulli(0.25), bernoulli(0.75), 1, grid)
    assert family_curve(p, q, 0.125)["rejection"] == [0.125]  # a number alone is a grid of one
    assert batch_curve(bernoulli(0.25), bernoulli(0.75), 2, Ms=np.array([1, 2]))["expected_rejections"] == \
        [1.0, 0.828125]


def test_low_level_helpers_check_what_they_are_given():
    """inclusion_iid clipped 1.5 to 1 and gave a traceback on '0.5'; extend_prefixes extended out-of-vocabulary and
    float ids; gather_tokens gave an IndexError on a wrong shape; Draft kept layout 'zz'."""
    from otspec.drafts import Draft, gather_tokens, inclusion_iid
    from otspec.sources.base import extend_prefixes

    for s in (1.5, "0.5", np.nan, -0.1, [0.2, 2.0]):
        with pytest.raises(ValueError, match="s: expected real numbers in"):
            inclusion_iid(s, 2)
    with pytest.raises(ValueError, match="k: expected"):
        inclusion_iid(0.5, 1.5)
    assert inclusion_iid(np.array([0.5, 1.0]), 2).tolist() == [0.75, 1.0]
    for tokens in (np.array([[3]]), np.array([[-1]]), np.array([[0.5]]), np.array([0])):
        with pytest.raises(ValueError, match="tokens"):
            extend_prefixes(tokens, 3)
    assert extend_prefixes(np.array([[1]]), 2).tolist() == [[1, 0], [1, 1]]
    rows = np.full((2, 3, 4), 0.25)
    for tokens in (np.zeros((3, 2), int), np.zeros((2, 4), int), np.zeros(2, int)):
        with pytest.raises(ValueError, match="gather_tokens"):
            gather_tokens(rows, tokens)
    assert gather_tokens(rows, np.zeros((2, 2), int)).shape == (2, 2)
    with pytest.raises(ValueError, match="layout"):
        Draft(np.zeros((1, 1), int), rows[:1, :1], rows[:1, :2], layout="zz")


def test_parse_tree_and_the_exact_route_refuse_what_they_would_misread():
    """parse_tree(3) was read as the k-config '3'; iid_block_optimum ignored a step on the exact route."""
    from otspec.drafts import parse_tree
    from otspec.theory import iid_block_optimum

    for spec in (3, 2.0, None, ["2x1"]):
        with pytest.raises(ValueError, match="tree: expected a spec"):
            parse_tree(spec)
    assert parse_tree("3").num_tokens == 3
    with pytest.raises(ValueError, match="step"):
        iid_block_optimum([0.75, 0.25], [0.25, 0.75], 2, route="exact", step=0.1)
    assert iid_block_optimum([0.75, 0.25], [0.25, 0.75], 2, route="lattice", step=0.01).low <= 1.0 + 1e-12


def test_sources_and_controllers_are_asked_for_instances():
    """GreedySource([...]) and save_source([...], path) gave AttributeError tracebacks, simulate_logged(<Source>) one
    deep in the loop, and the FixedDraftLength class a message about 'ABCMeta.max_length'."""
    from otspec.engine import simulate_logged
    from otspec.engine.controllers import FixedDraftLength
    from otspec.engine.decode import generate
    from otspec.sources import GreedySource, bernoulli, save_source
    from otspec.verifiers import TokenVerify

    for call in (lambda: GreedySource([0.5, 0.5]), lambda: save_source([0.5, 0.5], "build/never.json"),
                 lambda: GreedySource(bernoulli)):
        with pytest.raises(ValueError, match="expected a Source"):
            call()
    with pytest.raises(ValueError, match="log: expected LoggedRows"):
        simulate_logged(bernoulli(0.5), TokenVerify(), 2, 10)
    with pytest.raises(ValueError, match="the class FixedDraftLength"):
        generate(bernoulli(0.5), bernoulli(0.5), TokenVerify(), FixedDraftLength, 10)
    assert GreedySource(bernoulli(0.75)).next_probs([]).tolist() == [[0.0, 1.0]]


def test_an_option_given_twice_is_refused(capsys):
    """calc rejections --T 3 --horizon 4 ran with T = 4, and --T 3 --hor 4 or --seed 1 --seed 2 likewise: argparse
    keeps the last value of a single-valued option without a word, whether aliased, abbreviated or repeated."""
    from otspec.cli import main
    from tests.cli_refusals import refused

    argv = ["calc", "rejections", "--draft", "0.5,0.5", "--target", "0.7,0.3"]
    refused(main, argv + ["--T", "3", "--horizon", "4"], capsys, "given twice (as --T and --horizon)")
    refused(main, argv + ["--T=3", "--horizon=4"], capsys, "given twice")
    refused(main, argv + ["--T", "3", "--T", "3"], capsys, "--T given twice")
    refused(main, ["source", "random", "--vocab", "3", "--seed", "1", "--seed", "2", "--draft-out", "build/a.json",
                   "--target-out", "build/b.json"], capsys, "--seed given twice")
    assert main(argv + ["--horizon", "4"]) == 0
    refused(main, argv + ["--hor", "4"], capsys, "--hor")  # no abbreviations: --draft was read as --draft-out
    refused(main, ["source", "random", "--vocab", "3", "--draft", "0.3,0.7,0", "--target-out", "build/b.json"],
            capsys, "--draft")


# ---- the public-API sweep: every exported callable replayed with one argument made hostile ----------------------


def test_text_and_booleans_are_not_read_as_numbers():
    """np.asarray(x, dtype=float) and float(x) read '0.5' as 0.5 and True as 1.0: block laws, OTM plans, Pareto
    budgets, the uniform ratio, acceptance rows, window overlaps, Markov matrices, a sweep's temperature and the
    registry's filters all took them."""
    from otspec.solvers import min_bias, plan_acceptance, sequence_min_bias, solve_block_lp_laws
    from otspec.sources import MarkovSource, bernoulli
    from otspec.sweep.cells import temper
    from otspec.theory import optimal_resampling, positional_window_values, uniform_alpha
    from otspec.verifiers.registry import registered

    calls = {
        "draft_law": lambda: solve_block_lp_laws(np.array(["0.5", "0.5"]), [0.75, 0.25], 2, 1),
        "plan": lambda: plan_acceptance([[0], [1]], np.array([["0.5", "0"], ["0.25", "0.25"]])),
        "rejection": lambda: min_bias([0.5, 0.5], [0.75, 0.25], "0.1"),
        "rejections": lambda: sequence_min_bias(bernoulli(0.5), bernoulli(0.25), 1, True),
        "r:": lambda: uniform_alpha("2", 2),
        "accept_probs": lambda: optimal_resampling([0.5, 0.5], [0.75, 0.25], np.array([True, False])),
        "overlaps": lambda: positional_window_values(np.array([[True, False]])),
        "transition": lambda: MarkovSource([0.5, 0.5], np.array([["0.5", "0.5"], ["0.5", "0.5"]])),
        "temperature": lambda: temper(bernoulli(0.5), True),
        "lossless": lambda: registered(lossless="False"),
    }
    for needle, call in calls.items():
        with pytest.raises(ValueError, match=needle):
            call()
    assert round(min_bias([0.5, 0.5], [0.75, 0.25], 0.125).value, 9) == 0.125
    assert registered(lossless=False) and all(not c.lossless for c in registered(lossless=False).values())


def test_batches_given_as_arrays_are_checked():
    """kseq_parameters and kseq_rho_star took a batch with a NaN row or k = -1 as valid (rho* = 1, p_acc NaN) and
    multiround_rejection gave a NaN rejection; check=False still skips the read-backs."""
    from otspec.theory import kseq_parameters, kseq_rho_star
    from otspec.theory.multidraft_multiround import multiround_rejection

    bad, ok = np.array([[np.nan, 0.5]]), np.array([[0.5, 0.5]])
    for call in (lambda: kseq_parameters(bad, ok, 2), lambda: kseq_rho_star(bad, ok, np.array([2.0])),
                 lambda: multiround_rejection(bad, ok, 2), lambda: multiround_rejection(ok, ok[:, :1], 2)):
        with pytest.raises(ValueError, match="draft|shape"):
            call()
    for k in (-1, np.array([np.nan]), np.array([True])):
        with pytest.raises(ValueError, match="k"):
            kseq_parameters(ok, np.array([[0.9, 0.1]]), k)
    assert kseq_parameters(ok, np.array([[0.9, 0.1]]), np.array([0.0])).p_acc.tolist() == [0.0]  # no candidate
    assert np.isnan(multiround_rejection(bad, ok, 2, check=False)[0][0])


def test_ids_and_plans_are_checked_before_they_are_used():
    """common_prefix_length, tuple_membership and prob_drafts_within read 0.5 as id 0 and ran past the vocabulary;
    plan_expected_length summed a NaN or negative plan."""
    from otspec.drafts import prob_drafts_within
    from otspec.drafts.laws import tuple_membership
    from otspec.solvers import common_prefix_length, plan_expected_length

    for blocks in (np.array([0.5]), np.array([4]), np.array([-1])):
        with pytest.raises(ValueError, match="draft_blocks"):
            common_prefix_length(blocks, np.array([0]), 2, 2)
    assert common_prefix_length(np.array([0, 1]), np.array([0, 0]), 2, 2).tolist() == [2, 1]
    with pytest.raises(ValueError, match="tuples"):
        tuple_membership(np.array([[0.5]]), 2)
    with pytest.raises(ValueError, match="vocab_size"):
        tuple_membership(np.array([[0]]), "2")
    with pytest.raises(ValueError, match="subset"):
        prob_drafts_within([0.5, 0.5], [0.5], 2)
    for plan in (np.full((4, 4), np.nan), -np.eye(4)):
        with pytest.raises(ValueError, match="plan"):
            plan_expected_length(plan, 2, 2)


def test_sizes_are_refused_before_they_are_allocated():
    """k = 10^15 candidates, a 10^15-token membership matrix or prefix extension, a 10^15-step table source and
    a logged vocabulary of 10^15 ran out of memory or were kept."""
    from otspec.drafts import draft_tuple_law, sample_candidates
    from otspec.drafts.laws import tuple_membership
    from otspec.errors import SizeLimitError
    from otspec.sources import TableSource
    from otspec.sources.base import extend_prefixes

    rng = np.random.default_rng(0)
    for call in (lambda: sample_candidates(np.array([[1.0, 0.0]]), 10**15, rng),
                 lambda: tuple_membership(np.array([[0]]), 10**15),
                 lambda: draft_tuple_law([1.0, 0.0], 10**15),
                 lambda: extend_prefixes(np.zeros((1, 1), int), 10**15),
                 lambda: TableSource({(): [0.5, 0.5]}, 2, 10**15)):
        with pytest.raises(SizeLimitError):
            call()


def test_seeds_flags_and_devices_are_checked_where_they_are_taken():
    """A sweep's seed read '3', True and 2.7 through int(); logged_pool read draft_length '2'; Backend kept the
    device 'zz' until a simulator read it; parse_tree took any replacement for an EAGLE-2 tree; validate_probs
    compared min_ndim=True as a number; log_rows of a text gave an AttributeError."""
    from otspec.audit.rows import synthetic_pool
    from otspec.drafts import parse_tree
    from otspec.engine import Backend
    from otspec.sources import bernoulli, log_rows
    from otspec.sweep.spec import SweepSpec, cell_seed

    calls = {"seed": lambda: cell_seed("3", {}), "seed:": lambda: SweepSpec("s", True, (), {}, []),
             "seed: ": lambda: synthetic_pool(seed=True), "device": lambda: Backend(device="zz"),
             "replacement": lambda: parse_tree("eagle2:2:2:3", "text"),
             "draft: expected a Source": lambda: log_rows("src", bernoulli(0.5), 2, 2)}
    for needle, call in calls.items():
        with pytest.raises(ValueError, match=needle.strip()):
            call()
    from otspec.distributions import validate_probs

    with pytest.raises(ValueError, match="min_ndim"):
        validate_probs([0.5, 0.5], min_ndim=True)
    assert cell_seed(3, {}).entropy[0] == 3


# ---- round 17: fresh inputs after the sweep --------------------------------------------------------------------


def test_engines_that_do_not_follow_draft_depth_refuse_a_depth_dependent_source():
    """evaluate, simulate, tree_law and the theory read a DepthPositionalSource's depth-0 rows at every position:
    0.7701 where the truth (and generate, simulate_tree) is 0.51 + 0.51 * 0.02 = 0.5202."""
    from otspec import TokenVerify, evaluate, simulate
    from otspec.engine import coupling_law, simulate_tree, tree_law
    from otspec.sources import DepthPositionalSource, PositionalSource
    from otspec.theory import expected_accepted_token
    from otspec.verifiers import OTMVerify

    rows = np.array([[[0.5, 0.5]] * 3, [[0.99, 0.01]] * 3])
    draft, target = DepthPositionalSource(rows), PositionalSource(np.tile([0.01, 0.99], (3, 1)))
    for call in (lambda: evaluate(draft, target, TokenVerify(), 2), lambda: simulate(draft, target, TokenVerify(), 2, 10),
                 lambda: tree_law(draft, target, OTMVerify(), "1x1"), lambda: coupling_law(draft, target, TokenVerify(), 2),
                 lambda: expected_accepted_token(draft, target, 2)):
        with pytest.raises(ValueError, match="depend on the draft depth"):
            call()
    est = simulate_tree(draft, target, OTMVerify(), "1x1", 20000, seed=0).accepted
    assert est.low < 0.5202 < est.high
    flat = DepthPositionalSource(rows[:1])  # one depth: a positional source, taken everywhere
    assert not flat.depth_dependent and evaluate(flat, target, TokenVerify(), 2).expected_accepted == pytest.approx(
        0.51 + 0.51**2)


def test_float_ids_and_lengths_are_not_truncated():
    """row_after([1.7]) read token 1, next_probs(lengths=[1.5]) length 1, depth_rows([1.5], [0]) position 1."""
    from otspec.sources import DepthPositionalSource, MarkovSource

    chain = MarkovSource([0.5, 0.5], [[0.9, 0.1], [0.2, 0.8]])
    for call in (lambda: chain.row_after([1.7]), lambda: chain.next_probs([[0, 1]], lengths=[1.5]),
                 lambda: DepthPositionalSource(np.full((2, 2, 2), 0.5)).depth_rows([1.5], [0])):
        with pytest.raises(ValueError, match="tokens|lengths"):
            call()
    assert chain.row_after([1]).tolist() == [0.2, 0.8] and chain.row_after(()).tolist() == [0.5, 0.5]


def test_branches_are_counted_before_they_are_copied(monkeypatch):
    """coupling_law at V = 2, L = 12 ran 29 s and 5.4 GB, evaluate(L = 9, iterations = 2) 24 s and 7.9 GB, before the
    branch limit refused them: the rows were copied (taken, joined) first and counted after. With the limit set low,
    no copy above it is made now."""
    from otspec import IIDSource, TokenVerify, evaluate
    from otspec.engine import branching
    from otspec.errors import SizeLimitError

    largest, take, concat = [0], branching._Branches.take, branching._Branches.concat

    def taken(self, rows):
        largest[0] = max(largest[0], len(rows))
        return take(self, rows)

    def joined(parts):
        largest[0] = max(largest[0], sum(len(p.mass) for p in parts))
        return concat(parts)

    monkeypatch.setattr(branching._Branches, "take", taken)
    monkeypatch.setattr(branching._Branches, "concat", staticmethod(joined))
    monkeypatch.setattr(branching, "MAX_BRANCH_ROWS", 500)
    d, t = IIDSource([0.3, 0.7]), IIDSource([0.6, 0.4])
    for call in (lambda: evaluate(d, t, TokenVerify(), 4, iterations=2), lambda: branching.coupling_law(d, t, TokenVerify(), 5)):
        largest[0] = 0
        with pytest.raises(SizeLimitError, match="MAX_BRANCH_ROWS"):
            call()
        assert 0 < largest[0] <= 500


def test_command_lines_refuse_flags_a_run_would_ignore(capsys):
    """validate --temperature 0 --top-p 0.5 (greedy reads neither), forecast --check --temperature 0.5 against a
    forecast made at 1.0, adaptive's training flags with a saved head or the confidence rule, head_curve --fuse for
    heads that fuse nothing, and plot sweep --z without --heatmap all ran, each flag ignored."""
    from llm_bridge import adaptive, forecast, head_curve, validate
    from otspec.figures.sweep import main as sweep_plot
    from tests.cli_refusals import refused

    for flag in (["--top-p", "0.5"], ["--top-k", "5"]):
        refused(validate.main, ["--temperature", "0", *flag, "--out-dir", "build/never"], capsys, flag[0], "greedy")
    refused(forecast.main, ["--check", "figures/llm_eagle_heldout.json", "--out-dir", "figures", "--name",
                            "eagle_heldout", "--temperature", "0.5"], capsys, "--temperature 0.5", "made with")
    for argv, flag in ((["--head", "llm_bridge/weights/distilled/head.json", "--save-head", "build/h.json"],
                        "--save-head"), (["--rule", "confidence", "--head", "build/h.json"], "--head"),
                       (["--draft", "eagle", "--mix", "0.5"], "--mix"),
                       (["--rule", "specdecpp", "--train-draft-length", "4"], "--train-draft-length")):
        refused(adaptive.main, [*argv, "--out-dir", "build/never"], capsys, flag, "ignore")
    refused(head_curve.main, ["--heads", "eagle", "--fuse", "4,15", "--out", "build/never.json"], capsys, "--fuse")
    table = Path("build/round17_results.csv")
    table.parent.mkdir(exist_ok=True)
    table.write_text("L,verifier,exact_accepted,exact_low\n1,token,0.5,0.4\n2,token,0.7,0.6\n")
    refused(sweep_plot, [str(table), "--x", "L", "--y", "exact_accepted", "--z", "exact_low"], capsys, "--z",
            "--heatmap")
    refused(sweep_plot, [str(table), "--x", "L", "--y", "verifier", "--heatmap", "--z", "exact_accepted", "--hue",
                         "verifier"], capsys, "--hue")


def test_checks_that_came_late_come_first(tmp_path, capsys):
    """validate --trees 3x1 --multi-verifiers spechub reached the model load; decode with --t-draft 1e308 ran the
    whole decode before its cost overflowed; a sweep read a pipe where a finished cell goes (a hang), and found a
    folder there or at results.parquet only after every cell ran."""
    import os

    from llm_bridge import validate
    from otspec.cli import main
    from tests.cli_refusals import refused

    refused(validate.main, ["--trees", "3x1", "--multi-verifiers", "spechub", "--out-dir", "build/never"], capsys,
            "SpecHub")
    refused(main, ["decode", "--draft", "0.3", "--target", "0.75", "--L", "4", "--tokens", "1000", "--t-draft", "1e308",
                   "--t-target", "1e308"], capsys, "--t-draft", "overflows")
    spec = tmp_path / "s.toml"
    spec.write_text('name = "s"\nquantities = ["exact"]\nL = [1]\n[[pairs]]\nkind = "random_iid"\nvocab = 3\n'
                    '[[verifiers]]\nname = "token"\n')
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--workers", "1", "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    (cell,) = (out / "cells").iterdir()
    cell.unlink()
    os.mkfifo(cell)
    refused(main, ["sweep", str(spec), "--workers", "1", "--out", str(out)], capsys, cell.name, "not a regular file")
    cell.unlink()
    (out / "results.parquet").unlink()
    (out / "results.parquet").mkdir()
    refused(main, ["sweep", str(spec), "--workers", "1", "--out", str(out)], capsys, "results.parquet", "folder")


def test_records_with_zero_sizes_are_refused():
    """plot record drew settings.max_new_tokens = 0 ("32 prompts x 0 new tokens"), batch_size 0, lengths [0] or
    ['2', '4'], and a run that generated 0 tokens in 1,581 iterations."""
    import json

    from otspec.engine.record import RecordError, as_record

    good = json.loads(Path("figures/llm_default.json").read_text())
    as_record(good)
    for edit, field in ((lambda r: r["settings"].update(max_new_tokens=0), "max_new_tokens"),
                        (lambda r: r["settings"].update(batch_size=0), "batch_size"),
                        (lambda r: r["settings"].update(lengths=[0]), "lengths"),
                        (lambda r: r["settings"].update(lengths=["2", "4"]), "lengths"),
                        (lambda r: r["runs"][0].update(generated=0), "generated")):
        record = json.loads(json.dumps(good))
        edit(record)
        with pytest.raises(RecordError, match=field):
            as_record(record)
