"""Predictions from a plain-decoding log: the decode engine over each logged path, a paired bootstrap over paths."""

from __future__ import annotations

import numpy as np
import pytest

from otspec.drafts import DraftTree
from otspec.engine import generate
from otspec.engine.predict import (
    ReplayPlan,
    paired_ratio_interval,
    predict_from_log,
    predict_from_pairs,
    predictive_ratio_interval,
)
from otspec.sources import IIDSource, PositionalSource, log_rows, random_markov, source_from_json
from otspec.theory import expected_accepted_token
from otspec.verifiers import BackwardBlockVerify, BlockVerify, KSeq, TokenVerify


def test_compact_paths_replay_the_same_decoding():
    """Relabelling a path to the symbols it uses keeps the inverse-CDF draws: the same seed gives the same run."""
    draft, target = random_markov(300, 1.0, seed=4, sparsity=0.95)
    log = log_rows(draft, target, 3, 8, top_p=0.8, seed=1)
    for i in range(3):
        full, small = log.path_pair(i), log.path_pair(i, compact=True)
        assert small[0].vocab_size < full[0].vocab_size
        for verifier in (TokenVerify(), BlockVerify(), BackwardBlockVerify()):
            a = generate(*full, verifier, 3, 8, n_sequences=16, seed=7, progress=False)
            b = generate(*small, verifier, 3, 8, n_sequences=16, seed=7, progress=False)
            np.testing.assert_array_equal(a.accept_hist, b.accept_hist)


def test_iid_prediction_matches_the_pair_it_was_logged_from():
    """On an IID pair rows do not depend on the context, so the positional replay is the pair itself: the
    prediction agrees with decoding the pair, and with eq. (4) away from the sequence ends."""
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    draft, target = IIDSource(p), IIDSource(q)
    log = log_rows(draft, target, 24, 40, top_p=1.0, seed=2)
    for verifier in (TokenVerify(), BlockVerify()):
        pred = predict_from_log(log, verifier, 3, ReplayPlan(sequences=64, seed=0))
        real = generate(draft, target, verifier, 3, 40, n_sequences=24 * 64, seed=99, progress=False)
        assert pred.low <= pred.block_efficiency <= pred.high
        assert abs(pred.block_efficiency - real.block_efficiency.value) < 4 * real.block_efficiency.stderr + 0.01
    steady = 1 + expected_accepted_token(draft, target, 3)  # tokens per iteration far from the ends
    token = predict_from_log(log, TokenVerify(), 3, ReplayPlan(sequences=64, seed=0))
    assert token.block_efficiency == pytest.approx(steady, rel=0.05)
    out = token.as_dict()
    assert out["paths"] == 24 and "bootstrap" in out["method"]
    assert out["mean_acceptance_length"] >= out["block_efficiency"] - 1e-12  # drafts exclude the undrafted ends


def test_trees_and_carried_state_run_on_a_log():
    draft, target = random_markov(6, 1.0, seed=3)
    log = log_rows(draft, target, 4, 16, top_p=1.0, seed=0)
    v1 = predict_from_log(log, BackwardBlockVerify(), 2, ReplayPlan(sequences=8))
    tree = predict_from_log(log, KSeq(), DraftTree.parse("2x1"), ReplayPlan(sequences=8))
    for pred, depth in ((v1, 2), (tree, 2)):
        assert 1.0 <= pred.low <= pred.block_efficiency <= pred.high <= depth + 1
        assert pred.accept_hist.shape == (depth + 1, depth + 1)


def _positional_pair(agree: float, T: int = 12):
    """A positional (draft, target) pair whose draft puts ``agree`` of its mass on the target's row: overlap ``agree``
    + (1 - agree) / 3 at every position."""
    q = np.full((T, 3), 1 / 3)
    p = agree * q + (1 - agree) * np.eye(3)[0]
    return PositionalSource(p), PositionalSource(q)


def test_paths_of_one_prompt_are_pooled():
    """Several plain paths per prompt: the same replays as one path per pair (pair i keeps seed + i), pooled per
    prompt, so the prompt stays the bootstrap's unit."""
    draft, target = random_markov(5, 1.0, seed=8)
    log = log_rows(draft, target, 6, 12, top_p=1.0, seed=3)
    flat = predict_from_log(log, TokenVerify(), 2, ReplayPlan(sequences=8, seed=5))
    pooled = predict_from_log(log, TokenVerify(), 2, ReplayPlan(sequences=8, seed=5, paths_per_prompt=2))
    assert pooled.block_efficiency == flat.block_efficiency and pooled.units == 3 and flat.units == 6
    np.testing.assert_array_equal(pooled.tokens, flat.tokens.reshape(3, 2).sum(axis=1))
    np.testing.assert_array_equal(pooled.replay_iterations, flat.replay_iterations.reshape(3, 16))
    np.testing.assert_array_equal(pooled.accept_hist, flat.accept_hist)
    J = flat.traces["width"].shape[2]
    np.testing.assert_array_equal(pooled.traces["width"], flat.traces["width"].reshape(3, 16, J))
    out = pooled.as_dict()
    assert (out["paths"], out["prompts"], out["paths_per_prompt"], out["sequences_per_path"]) == (6, 3, 2, 8)
    # copies of one path per prompt are not new prompts: pooled, the prediction's own interval stays as wide as the
    # prompts' spread says; counted as prompts, it narrows by about the square root of the copies
    pairs = [_positional_pair(a) for a in (0.05, 0.3, 0.6, 0.95) for _ in range(4)]
    wide = predict_from_pairs(pairs, TokenVerify(), 3, ReplayPlan(sequences=16, seed=1, paths_per_prompt=4))
    narrow = predict_from_pairs(pairs, TokenVerify(), 3, ReplayPlan(sequences=16, seed=1))
    assert wide.mean_high - wide.mean_low > 1.5 * (narrow.mean_high - narrow.mean_low)
    assert wide.high - wide.low > 1.5 * (narrow.high - narrow.low)
    # a prompt one of whose paths is too short to draft is left out whole
    short = [_positional_pair(0.5), _positional_pair(0.5, T=1), _positional_pair(0.9), _positional_pair(0.9)]
    kept = predict_from_pairs(short, TokenVerify(), 2, ReplayPlan(sequences=4, paths_per_prompt=2))
    alone = predict_from_pairs(short[2:], TokenVerify(), 2, ReplayPlan(sequences=4, seed=2))
    assert kept.tokens.shape == (1,) and kept.replay_iterations.shape == (1, 8)
    np.testing.assert_array_equal(kept.replay_iterations[0], alone.replay_iterations.ravel())
    with pytest.raises(ValueError, match="do not split into prompts of paths_per_prompt = 4"):
        predict_from_pairs(pairs[:6], TokenVerify(), 2, ReplayPlan(paths_per_prompt=4))
    with pytest.raises(ValueError, match="paths_per_prompt"):
        predict_from_pairs(pairs, TokenVerify(), 2, ReplayPlan(paths_per_prompt=0))


def test_paired_ratio_interval():
    # every unit has ratio 2: the bootstrap cannot move it
    assert paired_ratio_interval([2, 4, 6], [1, 2, 3]) == pytest.approx((2.0, 2.0, 2.0))
    value, low, high = paired_ratio_interval([1, 9, 5, 5], [1, 3, 5, 2], draws=4000, seed=1)
    assert value == pytest.approx(20 / 11) and low < value < high
    # pairing matters: an independent resampling of numerators and denominators is wider here
    num, den = np.arange(1.0, 41.0), np.arange(1.0, 41.0) * 1.5
    _, lo, hi = paired_ratio_interval(num, den, seed=3)
    assert hi - lo < 1e-12
    with pytest.raises(ValueError, match="one length"):
        paired_ratio_interval([1, 2], [1])
    with pytest.raises(ValueError, match="positive sum"):
        paired_ratio_interval([1, 2], [0, 0])
    with pytest.raises(ValueError, match="LoggedRows"):
        predict_from_log(None, TokenVerify(), 2)


def test_decode_results_keep_per_sequence_totals():
    """Each sequence's tokens and iterations (the units of a prompt-level interval) add up to the run's totals."""
    draft, target = random_markov(5, 1.0, seed=1)
    res = generate(draft, target, BlockVerify(), 3, 30, n_sequences=7, seed=0, progress=False)
    tokens, iterations = res.per_sequence
    assert tokens.shape == iterations.shape == (7,)
    assert (tokens == 30).all() and iterations.sum() == res.iterations and (iterations >= 30 / 4).all()
    value, low, high = paired_ratio_interval(tokens, iterations)
    assert value == pytest.approx(res.block_efficiency.value) and low <= value <= high


def test_prediction_interval_covers_independent_runs():
    """The prediction interval is for a measurement: runs of `units` fresh sequences, decoded with other seeds,
    fall inside it about 95 % of the time; the prediction's own interval is much narrower and would not hold them."""
    draft, target = random_markov(4, 1.0, seed=11)
    log = log_rows(draft, target, 48, 24, top_p=1.0, seed=5)
    pred = predict_from_log(log, BlockVerify(), 3, ReplayPlan(sequences=16, seed=0, units=8))
    assert pred.low < pred.mean_low <= pred.block_efficiency <= pred.mean_high < pred.high
    assert pred.as_dict()["units"] == 8 and "8 prompts" in pred.as_dict()["interval"]
    runs = np.array([generate(draft, target, BlockVerify(), 3, 24, n_sequences=8, seed=1000 + s,
                              progress=False).block_efficiency.value for s in range(200)])
    inside = np.mean((runs >= pred.low) & (runs <= pred.high))
    assert 0.88 <= inside <= 0.995, inside
    assert np.mean((runs >= pred.mean_low) & (runs <= pred.mean_high)) < 0.8


def test_predictive_ratio_interval_edges():
    same = np.full((5, 3), 4.0), np.full((5, 3), 2.0)  # every replay has ratio 2
    assert predictive_ratio_interval(*same, 7) == pytest.approx((2.0, 2.0))
    with pytest.raises(ValueError, match="one shape"):
        predictive_ratio_interval(np.ones((2, 3)), np.ones((2, 2)), 4)
    with pytest.raises(ValueError, match="non-negative"):
        predictive_ratio_interval(np.ones((2, 2)), -np.ones((2, 2)), 4)
    with pytest.raises(ValueError, match="units"):
        predictive_ratio_interval(np.ones((2, 2)), np.ones((2, 2)), 0)


def _gapped_pair(T: int, seed: int):
    """A positional target on 5 symbols and a one-hot draft that proposes nothing at about a third of the steps."""
    rng = np.random.default_rng(seed)
    q = rng.dirichlet(np.ones(5) * 0.4, size=T)
    x = rng.integers(0, 5, size=T)
    proposes = rng.random(T) > 0.35
    return q, x, proposes


def test_a_draft_that_proposes_nothing_stops_drafting_there():
    q, x, proposes = _gapped_pair(40, 0)
    draft = PositionalSource(np.eye(5)[x], proposes=proposes)
    assert source_from_json(draft.to_json()).proposes(np.arange(40)).tolist() == proposes.tolist()
    for verifier in (TokenVerify(), BlockVerify()):
        out = generate(draft, PositionalSource(q), verifier, 4, 40, n_sequences=64, seed=3, progress=False)
        hist = np.asarray(out.accept_hist)  # [drafted g, accepted τ]
        assert hist[0].sum() > 0 and hist[1:].sum() > 0
    # a draft the target always accepts, proposing at even steps only: one drafted token + the bonus per iteration
    sure = PositionalSource(np.eye(5)[x], proposes=np.arange(40) % 2 == 0)
    for verifier in (TokenVerify(), BlockVerify(), BackwardBlockVerify()):
        out = generate(sure, PositionalSource(np.eye(5)[x]), verifier, 4, 40, n_sequences=4, seed=1, progress=False)
        assert out.block_efficiency.value == 2.0  # 5 if the gaps were ignored
    # where nothing is ever proposed, every iteration drafts nothing: one token per target call
    none = PositionalSource(np.eye(5)[x], proposes=np.zeros(40, dtype=bool))
    out = generate(none, PositionalSource(q), BlockVerify(), 4, 40, n_sequences=8, seed=3, progress=False)
    assert out.block_efficiency.value == 1.0 and np.asarray(out.accept_hist)[1:].sum() == 0
    with pytest.raises(ValueError, match="proposes"):
        PositionalSource(np.eye(5)[x], proposes=np.ones(39, dtype=bool))


@pytest.mark.parametrize("verifier", [TokenVerify(), BlockVerify(), BackwardBlockVerify()],
                         ids=["token", "block", "block_v1"])
def test_a_one_hot_draft_lumps_to_two_symbols(verifier):
    """A one-hot draft enters every verifier's law only through q(proposal): the rows lumped to {proposal, rest}
    give the same block efficiency as the full rows (the prompt-lookup replay of llm_bridge rests on this)."""
    full, lumped = [], []
    for i in range(6):
        q, x, proposes = _gapped_pair(30, 10 + i)
        qx = q[np.arange(30), x]
        full.append((PositionalSource(np.eye(5)[x], proposes=proposes), PositionalSource(q)))
        lumped.append((PositionalSource(np.tile([1.0, 0.0], (30, 1)), proposes=proposes),
                       PositionalSource(np.stack([qx, 1 - qx], axis=1))))
    a = predict_from_pairs(full, verifier, 4, ReplayPlan(sequences=400, seed=0))
    b = predict_from_pairs(lumped, verifier, 4, ReplayPlan(sequences=400, seed=50))
    assert abs(a.block_efficiency - b.block_efficiency) < 0.02
    assert a.mean_low - 0.01 <= b.block_efficiency <= a.mean_high + 0.01


def test_batch_straggling_by_hand():
    """Two prompts needing 1 and 2 iterations: a batch of both takes 2 calls against a mean of 1.5 (factor 4/3);
    a batch of one takes its own; equal prompts do not straggle."""
    from otspec.engine.predict import batch_straggling

    two = batch_straggling(np.array([[1.0], [2.0]]), 2, draws=50)
    assert (two["batch_iterations"], two["mean_iterations"], two["factor"]) == (2.0, 1.5, pytest.approx(4 / 3))
    assert batch_straggling(np.array([[1.0], [2.0]]), 1, draws=4000, seed=3)["factor"] == 1.0
    assert batch_straggling(np.full((5, 3), 7.0), 4)["factor"] == 1.0
    assert batch_straggling(np.array([[1.0], [2.0]]), 8)["batch"] == 2  # a batch holds at most every prompt
    with pytest.raises(ValueError, match="prompts, replays"):
        batch_straggling(np.array([1.0, np.nan]), 2)


def test_predicted_straggling_matches_batches_decoded_together():
    """A batch of B sequences decoded together needs max_b iterations_b target calls: the prediction from a log
    (its replays) gives the mean of that maximum that batches of the logged pair show, and the factor exceeds 1."""
    p, q = np.array([0.6, 0.3, 0.1]), np.array([0.2, 0.3, 0.5])
    draft, target = IIDSource(p), IIDSource(q)
    log = log_rows(draft, target, 48, 32, top_p=1.0, seed=5)
    pred = predict_from_log(log, TokenVerify(), 3, ReplayPlan(sequences=32, seed=0))
    B = 8
    predicted = pred.batch_calls(B, draws=8000, seed=1)
    real = generate(draft, target, TokenVerify(), 3, 32, n_sequences=B * 500, seed=11, progress=False)
    its = np.asarray(real.per_sequence[1], dtype=float).reshape(500, B)
    slowest = its.max(axis=1)
    assert predicted["factor"] > 1.05
    assert abs(predicted["batch_iterations"] - slowest.mean()) < 4 * slowest.std() / np.sqrt(500) + 0.1
    assert abs(predicted["mean_iterations"] - its.mean()) < 0.2
