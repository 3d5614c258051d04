"""Hostile inputs, fourth round (issue 43): tree sizes before work, training and validation arguments refused before a
model loads, damaged records, and the two regressions (calc block's optional column, duck-typed controllers)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otspec import IIDSource, bernoulli, generate
from otspec.audit.protocol import MAX_TIMEOUT_S, check_timeout
from otspec.checks import MAX_DRAFT_LENGTH, MAX_TREE_TOKENS
from otspec.cli import main as cli_main
from otspec.drafts import ConfidenceTree, DraftTree, parse_tree
from otspec.engine import simulate_tree, tree_law
from otspec.errors import SizeLimitError
from otspec.plot import main as plot_main
from otspec.theory import over_acceptance_kernel, uniform_multiround_without_replacement
from otspec.verifiers import KSeq, MultiRoundWithoutReplacement, SpecHubVerify, TokenVerify

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("spec,match", [("eagle2:1000:1000:1000000", "MAX_TREE_TOKENS"),
                                        ("eagle2:40:300:60", "MAX_TREE_TOKENS"),
                                        ("1000x1000x1000", "MAX_TREE_TOKENS"), ("iid:70000:1", "MAX_TREE_TOKENS"),
                                        ("x".join(["1"] * 5000), "MAX_DRAFT_LENGTH"),
                                        ("eagle2:5000:1:1", "MAX_DRAFT_LENGTH")])
def test_tree_sizes_are_refused_when_the_tree_is_made(spec, match, capsys):
    t0 = time.perf_counter()
    with pytest.raises(SizeLimitError, match=match):
        parse_tree(spec)
    status = cli_main(["calc", "tree", "--draft", "0.5,0.5", "--target", "0.3,0.7", "--tree", spec])
    err = capsys.readouterr().err
    assert status == 2 and match in err and len(err.strip().splitlines()) == 1
    assert time.perf_counter() - t0 < 5


def test_tree_work_is_refused_from_the_sizes_before_any_row_is_built():
    wide = IIDSource(np.full(3_000_000, 1 / 3_000_000))
    t0 = time.perf_counter()
    with pytest.raises(SizeLimitError, match="MAX_ROW_WORK"):
        simulate_tree(wide, wide, KSeq(), DraftTree((2, 1)), 100_000, progress=False)
    with pytest.raises(SizeLimitError, match="MAX_STEP_ENTRIES"):
        from otspec.engine import generate_tree
        generate_tree(wide, wide, KSeq(), DraftTree((2, 1)), 10, n_sequences=64, progress=False)
    assert time.perf_counter() - t0 < 5
    d, t = IIDSource([0.5, 0.3, 0.2]), IIDSource([0.2, 0.3, 0.5])
    wider = DraftTree((5, 1), replacement=False)  # 5 distinct children of 3 tokens: at most 3 + 3 drafted a tree
    assert tree_law(d, t, MultiRoundWithoutReplacement(), wider).max_deviation < 1e-12
    from otspec.engine import generate_tree
    res = generate_tree(d, t, MultiRoundWithoutReplacement(), wider, 200, n_sequences=8, seed=1, progress=False)
    assert res.accepted + res.discarded <= 6 * res.iterations  # the never-drafted slots are not counted
    with pytest.raises(ValueError, match="at most 2 candidates"):
        SpecHubVerify().law(np.array([[0, 1, 2]]), np.array([[0.5, 0.3, 0.2]]), np.array([[0.2, 0.3, 0.5]]))


def test_a_sweep_with_a_tree_thousands_of_levels_deep_is_refused_before_any_cell(tmp_path, capsys):
    spec = tmp_path / "deep.toml"
    spec.write_text('name = "deep"\nquantities = ["exact"]\nL = [2]\ntrees = ["' + "x".join(["1"] * 5000)
                    + '"]\n[[pairs]]\nkind = "iid"\ndraft = [0.5, 0.5]\ntarget = [0.3, 0.7]\n[[verifiers]]\nname = "kseq"\n')
    t0 = time.perf_counter()
    status = cli_main(["sweep", str(spec), "--out", str(tmp_path / "out")])
    assert status == 2 and "MAX_DRAFT_LENGTH" in capsys.readouterr().err and time.perf_counter() - t0 < 10


def test_validation_arguments_are_refused_before_a_model_loads(tmp_path, capsys):
    from llm_bridge.validate import main as validate_main
    from llm_bridge.validate_config import ValidateConfig

    base = ["--target", str(tmp_path / "no-such-model"), "--out-dir", str(tmp_path)]
    for args, match in ((["--name", "../escape"], "--name"), (["--name", "a/b"], "--name"),
                        (["--dtype", "int8"], "dtype"), (["--trees", "200x200"], "MAX_CALL_POSITIONS"),
                        (["--export-synthetic-rates", str(tmp_path)], "--export-synthetic-rates"),
                        (["--out-dir", str(tmp_path / "f.txt" / "x")], "--out-dir")):
        (tmp_path / "f.txt").write_text("a file, not a folder")
        argv = [*base, *args] if args[0] != "--out-dir" else ["--target", str(tmp_path / "no-such-model"), *args]
        try:
            status = validate_main(argv)
        except SystemExit as stop:  # argparse's error: exit status 2
            status = stop.code
        err = capsys.readouterr().err
        assert status == 2 and match in err and "no-such-model" not in err, (args, err)
    assert not (tmp_path.parent / "llm_escape.json").exists()
    from llm_bridge import distill, train_head

    blocked = tmp_path / "f.txt" / "weights"  # under a file: cannot be made
    for main, args in ((train_head.main, ["--kind", "eagle", "--vocab", "-5"]), (train_head.main, ["--kind", "eagle",
                       "--feature-weight", "nan"]), (train_head.main, ["--kind", "eagle", "--out", str(blocked)]),
                       (distill.main, ["--out", str(blocked)])):
        t0 = time.perf_counter()
        assert main([*args, "--target", str(tmp_path / "no-such-model"), "--steps", "1"]) == 2
        err = capsys.readouterr().err
        assert "no-such-model" not in err and time.perf_counter() - t0 < 5, err  # refused before any model
    with pytest.raises(ValueError, match="tree_pairs: an empty list"):
        ValidateConfig(tree_pairs=[])


def test_damaged_records_are_refused_by_the_plot_command(tmp_path, capsys):
    record = json.loads((ROOT / "figures" / "llm_otm.json").read_text())
    record["runs"][0]["L"] = -1
    (tmp_path / "neg.json").write_text(json.dumps(record))
    record["runs"], record["tree_runs"] = [], []
    (tmp_path / "empty.json").write_text(json.dumps(record))
    for name, match in (("neg.json", "'L' should be a draft length in [1, 4096]"), ("empty.json", "'runs' is empty")):
        status = plot_main(["record", str(tmp_path / name)])
        err = capsys.readouterr().err
        assert status == 2 and match in err and not (tmp_path / name).with_suffix(".png").exists(), err


def test_the_two_regressions_stay_fixed(tmp_path, capsys):
    """calc block on a source whose horizon covers L but not L + 1 reports every column but gumbel's, which says
    why; a controller written to the protocol without subclassing is taken, and decodes as its subclass twin."""
    assert cli_main(["source", "random", "--vocab", "3", "--horizon", "2", "--seed", "1", "--draft-out",
                     str(tmp_path / "d.json"), "--target-out", str(tmp_path / "t.json")]) == 0
    capsys.readouterr()
    status = cli_main(["calc", "block", "--draft-source", str(tmp_path / "d.json"), "--target-source",
                       str(tmp_path / "t.json"), "--L", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and out["gumbel"] is None and "needs longer sequences" in out["gumbel_status"]
    assert out["token"] > 0 and out["block_optimal"] >= out["block_onpath"] - 1e-12 and out["lp_status"] == "optimal"

    class Halves:  # the protocol, no base class
        max_length = 3

        def keep_drafting(self, step, draft_rows, **_):
            return np.asarray(draft_rows).max(axis=-1) > 0.5

    from otspec.engine.controllers import DraftLengthController

    class HalvesSub(DraftLengthController):
        max_length = 3

        def keep_drafting(self, step, draft_rows, **_):
            return np.asarray(draft_rows).max(axis=-1) > 0.5

    d, t = bernoulli(0.3), bernoulli(0.6)
    a = generate(d, t, TokenVerify(), Halves(), 400, n_sequences=4, seed=3, progress=False)
    b = generate(d, t, TokenVerify(), HalvesSub(), 400, n_sequences=4, seed=3, progress=False)
    assert np.array_equal(a.tokens, b.tokens) and a.iterations == b.iterations
    for bad in ("4", 2.5, object()):
        with pytest.raises(ValueError, match="draft_length: expected an integer >= 1 or a draft-length controller"):
            generate(d, t, TokenVerify(), bad, 10, progress=False)


def test_closed_forms_refuse_what_they_cannot_mean():
    with pytest.raises(ValueError, match="k <= N"):
        uniform_multiround_without_replacement(2, 1, 3)
    assert uniform_multiround_without_replacement(2, 1, 2) == 1.0
    with pytest.raises(ValueError, match="mode"):
        over_acceptance_kernel(np.array([0.5, 0.5]), np.array([0.3, 0.7]), 0.1, mode="best")
    with pytest.raises(ValueError, match="top_k"):
        ConfidenceTree(2, 5000, 4)


# ------------------------------------------------------------------------------------------- hypothesis, large spaces
SPECS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
WIDTHS = st.one_of(st.integers(1, 8), st.integers(1, 10**6))


@SPECS
@given(st.one_of(st.lists(WIDTHS, min_size=1, max_size=12).map(lambda ks: "x".join(map(str, ks))),
                 st.integers(1, 10_000).map(lambda n: "x".join(["1"] * n)),
                 st.tuples(st.integers(1, 10**7), st.integers(1, 10**5), st.integers(1, 10**7)).map(
                     lambda t: f"eagle2:{t[0]}:{t[1]}:{t[2]}"),
                 st.tuples(st.integers(1, 10**6), st.integers(1, 10**4)).map(lambda t: f"iid:{t[0]}:{t[1]}")))
def test_any_tree_spec_is_made_within_its_limits_or_refused_at_once(spec):
    t0 = time.perf_counter()
    try:
        tree = parse_tree(spec)
    except SizeLimitError as err:
        assert "MAX_TREE_TOKENS" in str(err) or "MAX_DRAFT_LENGTH" in str(err) or "MAX_CANDIDATES" in str(err)
    else:
        assert tree.num_tokens <= MAX_TREE_TOKENS and tree.depth <= MAX_DRAFT_LENGTH
    assert time.perf_counter() - t0 < 1.0


@SPECS
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**9, 10**9), st.booleans(),
                 st.text(max_size=3)))
def test_any_timeout_is_taken_in_range_or_refused(value):
    try:
        out = check_timeout(value)
    except ValueError as err:
        assert "timeout" in str(err)
    else:
        assert isinstance(out, float) and 0 < out <= MAX_TIMEOUT_S and not isinstance(value, bool | str)


def test_fifth_round_deep_trees_and_tiny_levels_are_refused_at_once():
    """A deep tree's prefixes count (simulate_tree once allocated 10 GiB for iid:2:1000 at V = 3; the sweep's
    estimate missed them too), and a level so small its critical values overflow is refused instead of searched
    for forever (the audit's power search hung at --alpha 1e-20)."""
    import time

    from otspec.audit import audit
    from otspec.audit.core import MIN_ALPHA
    from otspec.audit.pit import samples_needed
    from otspec.engine import generate_tree, simulate_tree
    from otspec.errors import SizeLimitError
    from otspec.verifiers import KSeq

    p, q = [0.2, 0.3, 0.5], [0.5, 0.3, 0.2]
    start = time.perf_counter()
    with pytest.raises(SizeLimitError, match="MAX_ROW_WORK"):
        simulate_tree(p, q, KSeq(), "iid:2:1000", 2000, progress=False)
    with pytest.raises(SizeLimitError, match="prefixes"):
        generate_tree(p, q, KSeq(), "iid:2:1000", 20_000, n_sequences=64)
    assert time.perf_counter() - start < 5
    for alpha in (1e-20, 0.0, MIN_ALPHA / 2):
        with pytest.raises(ValueError, match="alpha"):
            audit("otspec.audit.adapters:token", samples=100, alpha=alpha)
    assert samples_needed(1e-3, alpha=1e-300) == float("inf")  # ends


@pytest.mark.parametrize("spec,replacement,says", [
    ("2_0x1", True, "could not read a k-config"), ("\uff12x1", True, "could not read a k-config"),
    ("2 x1", True, "could not read a k-config"), ("2x1", "no", "replacement: expected"),
    ("4x1", "hub", "k <= 2"), ("eagle2:3:2:4_0", True, "could not read a confidence tree")])
def test_fifth_round_tree_specs_are_read_strictly(spec, replacement, says):
    from otspec.drafts import parse_tree

    with pytest.raises(ValueError, match=says):
        parse_tree(spec, replacement=replacement)


@pytest.mark.parametrize("seed", [1.5, "a", -1, True])
def test_fifth_round_seeds_are_named(seed):
    from otspec.engine import simulate, simulate_tree
    from otspec.verifiers import KSeq, TokenVerify

    with pytest.raises(ValueError, match="seed: expected an integer >= 0"):
        simulate([0.5, 0.5], [0.3, 0.7], TokenVerify(), 2, 100, seed=seed)
    with pytest.raises(ValueError, match="seed: expected an integer >= 0"):
        simulate_tree([0.5, 0.5], [0.3, 0.7], KSeq(), "2x1", 100, seed=seed)


def test_fifth_round_damaged_records_are_one_line(tmp_path, capsys):
    from otspec.plot import main as plot_main

    figures = Path(__file__).resolve().parent.parent / "figures"
    record = json.loads((figures / "llm_default.json").read_text())
    bad = tmp_path / "llm_bad.json"
    bad.write_text(json.dumps({**record, "baseline": None}))
    binary = tmp_path / "llm_binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    for path in (bad, binary):
        assert plot_main(["record", str(path)]) == 2
        err = capsys.readouterr().err
        assert str(path) in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag,value", [("steps", 10**13), ("batch", 10**8), ("vocab", 10**8), ("unroll", 10**5),
                                        ("samples", 10**10), ("length", 10**8), ("medusa_heads", 10**5)])
def test_fifth_round_head_recipes_have_upper_bounds(flag, value):
    """Checked in the recipe, before any model loads (each used to load the target, then run for hours or fail
    with a traceback)."""
    from llm_bridge.train_head import HeadRecipe

    with pytest.raises(ValueError, match="--" + flag.replace("_", "-")):
        HeadRecipe(**{flag: value})
    HeadRecipe()  # the defaults hold


@pytest.mark.parametrize("spec,says", [("ngram:0", "ngram:N: expected an integer >= 1"),
                                       ("layers:-1", "layers:K: expected an integer >= 1"),
                                       ("head:/nonexistent/head", "no such folder"),
                                       ("distilled:3", "takes no argument"), ("layers", "give layers:ARGUMENT")])
def test_fifth_round_drafter_specs_are_checked_before_any_model_loads(spec, says):
    from llm_bridge.validate_config import ValidateConfig

    with pytest.raises(ValueError, match=says):
        ValidateConfig(target="/nonexistent/model", draft=spec)  # the target is never touched


def test_fifth_round_records_with_nan_or_absurd_values_are_refused(tmp_path, capsys):
    """A NaN block efficiency was drawn as '–', L = 10^12 listed as a draft length: both are refused naming the field."""
    from otspec.plot import main as plot_main

    figures = Path(__file__).resolve().parent.parent / "figures"
    record = json.loads((figures / "llm_default.json").read_text())
    for change, says in ((lambda r: r["runs"][0]["block_efficiency"].update(mean=float("nan")), "finite numbers"),
                         (lambda r: r["runs"][0].update(L=10**12), "draft length in"),
                         (lambda r: r["runs"][0]["block_efficiency"].update(low=9.0), "is above high")):
        damaged = json.loads(json.dumps(record))
        change(damaged)
        path = tmp_path / "llm_damaged.json"
        path.write_text(json.dumps(damaged))
        assert plot_main(["record", str(path)]) == 2
        assert says in capsys.readouterr().err



def test_fifth_round_trees_wider_than_the_vocabulary_say_so():
    """5x1 without replacement at V = 3 drafts at most 3 children (a draw without replacement stops when the tokens
    run out, as top-k rows make it stop on real models): calc tree says so beside the values instead of printing
    3x1's numbers under 5x1's name without a word."""
    from otspec.cli import main

    args = ["calc", "tree", "--draft", "0.2,0.3,0.5", "--target", "0.5,0.3,0.2", "--without-replacement", "--json"]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*args, "--tree", "5x1"]) == 0
    wide = json.loads(out.getvalue())
    assert "at most 3 children" in wide["note"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*args, "--tree", "3x1"]) == 0
    narrow = json.loads(out.getvalue())
    assert "note" not in narrow and narrow["optimum"] == wide["optimum"]


def test_a_sweep_without_its_extras_is_refused_before_any_cell(tmp_path, monkeypatch, capsys):
    """Without pandas / pyarrow the sweep ran every cell and then ended in a traceback; now one line names what is
    missing and how to install it, before any work."""
    import otspec.sweep.run as run_mod
    from otspec.cli import main

    monkeypatch.setattr(run_mod, "missing_extras", lambda dask=False: ["pandas", "pyarrow"])
    spec = tmp_path / "grid.toml"
    spec.write_text('name = "x"\nL = [2]\nquantities = ["exact"]\n[[pairs]]\nkind = "iid"\n')
    assert main(["sweep", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "needs pandas, pyarrow" in err and "make demo installs them" in err
    assert not (tmp_path / "grid_results").exists()
