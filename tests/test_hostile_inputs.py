"""Hostile inputs: a clear error naming the culprit, never a traceback, a silent wrong number or a hang.

Three parts: a table of named command-line probes (exit status 2, no traceback, the culprit named on
the last line), strict JSON from every subcommand, and the Python API — a table of named probes plus
hypothesis strategies that generate bad probability rows and bad sizes for every public entry point.
Sizes are refused before any work starts, so none of these can hang.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import otspec
from otspec import engine, solvers, theory
from otspec.distributions import sample_categorical, total_variation, validate_probs
from otspec.drafts import DraftTree, draft_tuple_law, sample_candidates
from otspec.engine.stats import mean_estimate
from otspec.errors import SizeLimitError
from otspec.sources import IIDSource, random_markov
from otspec.verifiers import KSeq, MultiRound, TokenVerify

ROW = [0.2, 0.3, 0.5]


def run(*args, cwd=None):
    proc = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    bad = {
        "p_null": '{"type": "bernoulli", "p": null}',
        "probs_dict": '{"type": "iid", "probs": {"a": 1}}',
        "vocab_str": '{"type": "uniform", "support": 2, "vocab_size": "x"}',
        "ragged": '{"type": "markov", "initial": [0.5, 0.5], "transition": [[0.5, 0.5], [1.0]]}',
        "badkey": '{"type": "table", "vocab_size": 2, "horizon": 1, "rows": {"a": [0.5, 0.5]}}',
        "notype": '{"probs": [0.5, 0.5]}',
        "deep": "[" * 100_000 + "]" * 100_000,
        "ok": '{"type": "iid", "probs": [0.5, 0.5]}',
        "markov": '{"type": "markov", "initial": [0.5, 0.5], "transition": [[0.9, 0.1], [0.2, 0.8]]}',
    }
    for name, text in bad.items():
        (d / f"{name}.json").write_text(text)
    (d / "binary.json").write_bytes(b"\x89PNG\x00\xff\xfe")
    return d


PAIR = ["--draft", "0.3,0.7", "--target", "0.6,0.4"]
# (name, arguments after "python -m", the culprit the message must name)
CLI = [
    ("overflowing row", ["otspec", "calc", "block", "--draft", "1e400,1", "--target", "0.5", "--L", "2"], "--draft"),
    ("negative row", ["otspec", "calc", "block", "--draft", "-0.1,1.1", "--target", "0.5", "--L", "2"], "--draft"),
    ("Bernoulli p > 1", ["otspec", "calc", "block", "--draft", "1.5", "--target", "0.5", "--L", "2"], "--draft"),
    ("NaN row", ["otspec", "calc", "block", "--draft", "nan,0.5", "--target", "0.5,0.5", "--L", "2"], "nan"),
    ("unnormalised row", ["otspec", "calc", "block", "--draft", "0.3,0.3", "--target", "0.5,0.5", "--L", "2"],
     "--draft"),
    ("vocabulary mismatch", ["otspec", "calc", "otm", "--draft", "0.3,0.7", "--target", "0.2,0.3,0.5", "--k", "2"],
     "vocabulary"),
    ("huge L", ["otspec", "calc", "block", *PAIR, "--L", "100000"], "--L"),
    ("non-integer L", ["otspec", "simulate", *PAIR, "--L", "2.7"], "--L"),
    ("huge blocks", ["otspec", "simulate", *PAIR, "--L", "2", "--blocks", "1000000000000"], "n_blocks"),
    ("blocks as float", ["otspec", "simulate", *PAIR, "--L", "2", "--blocks", "1e12"], "--blocks"),
    ("huge tokens", ["otspec", "decode", *PAIR, "--L", "2", "--tokens", "100000000000"], "MAX_DECODE_ENTRIES"),
    ("negative seed", ["otspec", "decode", *PAIR, "--L", "2", "--seed", "-1"], "--seed"),
    ("huge k", ["otspec", "calc", "otm", *PAIR, "--k", "x"], "--k"),
    ("huge M", ["otspec", "calc", "rejections", *PAIR, "--T", "4", "--M", "1000000000"], "M ="),
    ("huge T", ["otspec", "calc", "rejections", *PAIR, "--T", "100000000000"], "horizon"),
    ("rejection > 1", ["otspec", "calc", "pareto", *PAIR, "--rejection", "1.5"], "--rejection"),
    ("huge vocab", ["otspec", "source", "random", "--vocab", "100000", "--draft-out", "a.json", "--target-out",
                    "b.json"], "MAX_RANDOM_ENTRIES"),
    ("nan concentration", ["otspec", "source", "random", "--vocab", "3", "--concentration", "nan", "--draft-out",
                           "a.json", "--target-out", "b.json"], "concentration"),
    ("sparsity 1", ["otspec", "source", "random", "--vocab", "3", "--sparsity", "1", "--draft-out", "a.json",
                    "--target-out", "b.json"], "sparsity"),
    ("same output file", ["otspec", "source", "random", "--vocab", "3", "--draft-out", "a.json", "--target-out",
                          "a.json"], "same file"),
    ("unwritable output", ["otspec", "source", "random", "--vocab", "3", "--draft-out", "/proc/nonexistent/a.json",
                           "--target-out", "b.json"], "--draft-out"),
    ("plot scale huge", ["otspec.plot", "pareto", "--scale", "1e9", "--out", "x.png"], "scale"),
    ("plot scale nan", ["otspec.plot", "token", "--scale", "nan", "--out", "x.png"], "scale"),
    ("plot pair on a family figure", ["otspec.plot", "token", *PAIR], "take no pair"),
]
FILE_CASES = [("p_null", "'p'"), ("probs_dict", "probs"), ("vocab_str", "'vocab_size'"), ("ragged", "transition"),
              ("badkey", "row key"), ("notype", "'type'"), ("deep", "too deeply"), ("binary", "UTF-8"),
              ("missing", "not found"), ("", "directory")]


@pytest.mark.parametrize(("name", "args", "culprit"), CLI, ids=[c[0] for c in CLI])
def test_cli_probe(name, args, culprit, tmp_path):
    rc, out, err = run(*args, cwd=tmp_path)
    assert rc == 2 and "Traceback" not in err and out == "", (name, err)
    assert culprit in err.strip().splitlines()[-1], (name, err)


@pytest.mark.parametrize(("stem", "culprit"), FILE_CASES, ids=[c[0] or "directory" for c in FILE_CASES])
def test_cli_probe_source_files(stem, culprit, files):
    path = files / f"{stem}.json" if stem else files
    rc, _, err = run("otspec", "calc", "block", "--draft-source", str(path), "--target-source",
                     str(files / "ok.json"), "--L", "2")
    line = err.strip().splitlines()[-1]
    assert rc == 2 and "Traceback" not in err and culprit in line and str(path) in line, err


def _strict(text):
    def refuse(constant):
        raise AssertionError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("args", [
    ["calc", "block", "--draft", "0.3", "--target", "0.3", "--L", "3", "--cost-ratio", "0.1"],
    ["calc", "otm", "--draft", "0.3", "--target", "0.3", "--k", "3"],
    ["calc", "rejections", "--draft", "0.3", "--target", "0.3", "--T", "8", "--M", "2"],
    ["calc", "pareto", "--draft", "0.3", "--target", "0.3", "--rejection", "0"],
    ["simulate", "--draft", "0.3", "--target", "0.6", "--L", "2", "--blocks", "1"],
    ["decode", "--draft", "0.3", "--target", "0.6", "--L", "1,2", "--tokens", "1", "--sequences", "1"],
    ["source", "random", "--vocab", "2", "--draft-out", "d.json", "--target-out", "t.json"],
], ids=["block", "otm", "rejections", "pareto", "simulate", "decode", "source"])
def test_json_is_strict_and_nulls_have_reasons(args, tmp_path):
    rc, out, err = run("otspec", *args, "--json", cwd=tmp_path)
    assert rc == 0, err
    data = _strict(out)
    for row in data if isinstance(data, list) else [data]:
        for key, value in row.items():
            if value is None and key not in ("horizon",):
                assert f"{key}_status" in row, (key, row)
            if isinstance(value, dict) and value.get("stderr", 0) is None:
                assert "interval_status" in value


# ----------------------------------------------------------------------------- Python API
SOURCE = IIDSource(ROW)
API = [
    ("float16 zero row, otm", lambda: solvers.otm_value(np.zeros(5000, np.float16), np.full(5000, 2e-4), 4), "draft"),
    ("float16 unnormalised", lambda: validate_probs(np.full(5000, 1e-4, np.float16), "target"), "target"),
    ("k-Seq rho below rho*", lambda: theory.kseq_acceptance([0.75, 0.25], [0.25, 0.75], 2, rho=1.0), "rho"),
    ("evaluate iterations=0", lambda: engine.evaluate(SOURCE, SOURCE, TokenVerify(), 2, iterations=0), "iterations"),
    ("negative L", lambda: theory.expected_accepted_token(SOURCE, SOURCE, -3), "draft_length"),
    ("non-integer L", lambda: theory.expected_accepted_optimal(SOURCE, SOURCE, 2.7), "draft_length"),
    ("negative horizon", lambda: random_markov(3, horizon=-5), "horizon"),
    ("TV vocab", lambda: total_variation([1.0], [0.5, 0.5]), "vocabulary"),
    ("zero row sampled", lambda: sample_categorical(np.zeros((1, 3)), np.random.default_rng(0)), "probs"),
    ("rng None", lambda: TokenVerify().sample(np.array([[0]]), np.array([[ROW]]), np.array([[ROW, ROW]]), None),
     "rng"),
    ("confidence 1.5", lambda: mean_estimate(1.0, 1.0, 10, confidence=1.5), "confidence"),
    ("simulate blocks 1e12", lambda: engine.simulate(SOURCE, SOURCE, TokenVerify(), 2, 10**12), "n_blocks"),
    ("decode tokens float", lambda: engine.generate(SOURCE, SOURCE, TokenVerify(), 2, 10.5), "n_tokens"),
    ("tuple law huge k", lambda: draft_tuple_law(ROW, 10**9), "MAX_DRAFT_TUPLES"),
    ("multi-round huge k", lambda: theory.multiround_acceptance(ROW, ROW, 10**9), "k"),
    ("batch huge M", lambda: theory.batch_expected_rejections(SOURCE, SOURCE, 4, 10**9), "M"),
    ("min_bias huge V", lambda: solvers.min_bias(np.full(10**5, 1e-5), np.full(10**5, 1e-5), 0.1),
     "MAX_TOKEN_LP_VOCAB"),
    ("candidates k negative", lambda: sample_candidates(np.array([ROW]), -1, np.random.default_rng(0)), "k"),
    ("tree k_i = 0", lambda: DraftTree((2, 0)), "k_i"),
    ("tree k_i float", lambda: DraftTree.spectr_iid(2.5, 3), "num_drafts"),
    ("Bernoulli closed form p > 1", lambda: theory.bernoulli_expected_accepted_token(1.5, 0.5, 2), "draft_p"),
    ("uniform source float support", lambda: otspec.uniform_source(2.5, 4), "support"),
    ("verifier list rows", lambda: KSeq().law([[0, 1]], [ROW], [[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]]), "target_probs"),
    ("mixed numpy and torch", lambda: _mixed(), "draft_probs"),
    ("eps negative", lambda: theory.over_acceptance(ROW, ROW, -1.0), "eps"),
    # counts like 3**(2 * 10**9) are capped, not built: refused at once with a readable number
    ("evaluate huge iterations", lambda: engine.evaluate(SOURCE, SOURCE, TokenVerify(), 2, iterations=10**9),
     "MAX_ENUMERATION"),
    ("enumerate huge length", lambda: SOURCE.enumerate(10**9), "at least 9,223,372,036,854,775,808"),
]


def _mixed():
    torch = pytest.importorskip("torch")
    return MultiRound().law(np.array([[0]]), torch.tensor([ROW], dtype=torch.float64), np.array([ROW]))


@pytest.mark.parametrize(("name", "call", "culprit"), API, ids=[c[0] for c in API])
def test_api_probe(name, call, culprit):
    with pytest.raises(ValueError) as info:
        call()
    assert culprit in str(info.value), (name, str(info.value))


# --------------------------------------------------------------------- hypothesis: bad rows
@st.composite
def bad_rows(draw):
    """A row of length V that is not a probability row, and how it is broken."""
    V = draw(st.integers(2, 6))
    row = np.full(V, 1.0 / V)
    kind = draw(st.sampled_from(["nan", "inf", "negative", "unnormalised", "zero", "float16", "shape"]))
    i = draw(st.integers(0, V - 1))
    if kind == "nan":
        row[i] = np.nan
    elif kind == "inf":
        row[i] = np.inf
    elif kind == "negative":
        row[i] = -draw(st.floats(1e-3, 1.0))
    elif kind == "unnormalised":
        row = row * draw(st.sampled_from([0.5, 0.9, 1.1, 2.0, 100.0]))
    elif kind == "zero":
        row = np.zeros(V)
    elif kind == "float16":
        row = (row * 1.05).astype(np.float16)
    else:
        row = np.full((2, 2, V), 1.0 / V)[None]
    return row


ROW_FUNCTIONS = {
    "otm_value": lambda d, t: solvers.otm_value(d, t, 2),
    "kseq_acceptance": lambda d, t: theory.kseq_acceptance(d, t, 2),
    "multiround_acceptance": lambda d, t: theory.multiround_acceptance(d, t, 2),
    "naive_acceptance": lambda d, t: theory.naive_acceptance(d, t, 2),
    "pareto_front": lambda d, t: theory.pareto_front(d, t, 0.1),
    "over_acceptance": lambda d, t: theory.over_acceptance(d, t, 0.1),
    "min_bias": lambda d, t: solvers.min_bias(d, t, 0.1),
    "iid_block_values": lambda d, t: theory.iid_block_values(d, t, 2),
    "IIDSource": lambda d, t: otspec.theory.expected_accepted_token(IIDSource(d), IIDSource(t), 2),
}


@settings(max_examples=60, deadline=None)
@given(bad_rows(), st.sampled_from(sorted(ROW_FUNCTIONS)), st.booleans())
def test_bad_rows_are_refused_by_every_row_function(row, name, as_target):
    V = row.shape[-1]
    good = np.full(V, 1.0 / V)
    draft, target = (good, row) if as_target else (row, good)
    with pytest.raises(ValueError) as info:
        ROW_FUNCTIONS[name](draft, target)
    message = str(info.value)
    assert any(word in message for word in ("draft", "target", "probs", "row")), message


SIZE_FUNCTIONS = {
    "expected_accepted_token": lambda n: theory.expected_accepted_token(SOURCE, SOURCE, n),
    "evaluate": lambda n: engine.evaluate(SOURCE, SOURCE, TokenVerify(), n),
    "simulate": lambda n: engine.simulate(SOURCE, SOURCE, TokenVerify(), 2, n),
    "generate": lambda n: engine.generate(SOURCE, SOURCE, TokenVerify(), 2, n),
    "expected_rejections": lambda n: theory.expected_rejections(SOURCE, SOURCE, n),
    "kseq_acceptance": lambda n: theory.kseq_acceptance(ROW, ROW, n),
    "random_markov": lambda n: random_markov(n),
    "solve_block_tree": lambda n: solvers.solve_block_tree(SOURCE, SOURCE, n),
}


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(sorted(SIZE_FUNCTIONS)),
       st.one_of(st.integers(max_value=0), st.integers(min_value=10**13, max_value=10**30),
                 st.floats(allow_nan=True).filter(lambda x: not float(x).is_integer() if np.isfinite(x) else True),
                 st.booleans(), st.text(max_size=3), st.none()))
def test_bad_sizes_are_refused_before_any_work(name, size):
    # a huge k is a legitimate k-Seq question (closed form, no work grows with k)
    assume(not (name == "kseq_acceptance" and isinstance(size, int) and not isinstance(size, bool) and size > 0))
    with pytest.raises((ValueError, SizeLimitError)):
        SIZE_FUNCTIONS[name](size)


# ------------------------------------------------------- odd but valid inputs get the right answer
def _horizon_one_round_trip(tmp_path):
    draft, _ = random_markov(3, horizon=1, seed=0)
    otspec.sources.save_source(draft, tmp_path / "d.json")
    loaded = otspec.load_source(tmp_path / "d.json")
    return loaded.horizon, loaded.initial.tolist() == draft.initial.tolist()


def _float16_torch_source():
    torch = pytest.importorskip("torch")
    half = IIDSource(torch.tensor(ROW, dtype=torch.float16))  # upcast and renormalised, then numpy float64
    return float(engine.evaluate(half, half, TokenVerify(), 2).max_deviation) < 1e-12 and half.probs.dtype == np.float64


CORRECT = [
    ("plain lists to a chain verifier", lambda _: TokenVerify().law([[0]], [[ROW]], [[ROW, ROW]]).accept_probs.tolist(),
     [[0.0, 1.0]]),  # q = p: the drafted token is accepted with probability 1
    ("plain lists to k-Seq", lambda _: KSeq().law([[0, 1]], [ROW], [ROW]).acceptance.tolist(), [1.0]),
    ("float16 torch source", lambda _: _float16_torch_source(), True),
    ("horizon-1 chain round-trips", _horizon_one_round_trip, (1, True)),
    ("float16 softmax row of 49,152 tokens", lambda _: float(validate_probs(
        (np.ones(49_152) / 49_152).astype(np.float16), "target").sum()), pytest.approx(1.0, abs=1e-6)),
    ("huge k for the OTM optimum", lambda _: solvers.otm_value([0.3, 0.7], [0.6, 0.4], 10**9), 1.0),
]


@pytest.mark.parametrize(("name", "call", "expected"), CORRECT, ids=[c[0] for c in CORRECT])
def test_odd_valid_inputs(name, call, expected, tmp_path):
    assert call(tmp_path) == expected


CHAIN_VERIFIERS = [TokenVerify(), otspec.verifiers.BlockVerify(), otspec.verifiers.BackwardBlockVerify(),
                   otspec.verifiers.DecodingOPT(0.1)]
CANDIDATE_VERIFIERS = [KSeq(), MultiRound(), otspec.verifiers.MultiRoundWithoutReplacement(),
                       otspec.verifiers.NaiveMultiCandidate(), otspec.verifiers.OTMVerify()]


@settings(max_examples=60, deadline=None)
@given(bad_rows(), st.integers(0, len(CHAIN_VERIFIERS) + len(CANDIDATE_VERIFIERS) - 1), st.booleans(), st.booleans())
def test_bad_rows_are_refused_by_every_verifier(row, which, as_target, sample):
    V = row.shape[-1]
    good = np.full(V, 1.0 / V)
    if row.ndim != 1:  # a wrong shape: hand the verifier rows of the wrong rank
        draft, target = (good[None], row) if as_target else (row, good[None])
    else:
        draft, target = (good, row) if as_target else (row, good)
    if which < len(CHAIN_VERIFIERS):  # one draft of one token: rows (1, 1, V) and (1, 2, V)
        verifier = CHAIN_VERIFIERS[which]
        tokens = np.zeros((1, 1), dtype=np.int64)
        d = draft[None, None] if draft.ndim == 1 else draft
        t = np.stack([target, good])[None] if target.ndim == 1 else target
    else:  # two candidates at one position: rows (1, V)
        verifier = CANDIDATE_VERIFIERS[which - len(CHAIN_VERIFIERS)]
        tokens = np.array([[0, 1]])
        d, t = (x[None] if x.ndim == 1 else x for x in (draft, target))
    with pytest.raises(ValueError) as info:
        if sample:
            verifier.sample(tokens, d, t, np.random.default_rng(0))
        else:
            verifier.law(tokens, d, t)
    assert any(word in str(info.value) for word in ("draft_probs", "target_probs", "probability 0")), str(info.value)
