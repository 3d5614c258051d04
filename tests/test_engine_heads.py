"""SpecDec++'s acceptance head: the weighted loss, the data construction, the fitted head and its controller."""

from __future__ import annotations

import numpy as np
import pytest

from otspec.engine import ThresholdController, generate
from otspec.engine.heads import (
    AcceptanceHead,
    LearnedHeadController,
    binary_kl,
    one_hot_features,
    token_mixing_data,
    weighted_bce,
)
from otspec.sources import random_markov
from otspec.verifiers import TokenVerify

PAIR = random_markov(3, 1.0, seed=2)


def oracle_table(draft, target):
    P, Q = draft.matrix(1), target.matrix(1)
    return np.minimum(1.0, Q / P)  # acceptance of drafted y after token a (every entry of p > 0 here)


def head_table(head, V):
    return np.stack([head.predict(one_hot_features(np.full(V, a), np.arange(V), V)) for a in range(V)])


def test_losses_by_hand():
    assert weighted_bce([1.0], [0.5]) == pytest.approx(np.log(2))
    assert weighted_bce([0.0], [0.5], w_rej=3.0) == pytest.approx(3 * np.log(2))
    assert binary_kl([0.3], [0.3]) == pytest.approx(0.0, abs=1e-15)
    assert binary_kl([1.0], [0.5]) == pytest.approx(np.log(2))


@pytest.fixture(scope="module")
def data():
    return token_mixing_data(*PAIR, 1500, 20, seed=0)


def test_mixed_data_labels_are_the_true_acceptance(data):
    table = oracle_table(*PAIR)
    later = data.previous >= 0
    np.testing.assert_allclose(data.labels[later], table[data.previous[later], data.tokens[later]], atol=1e-15)
    assert 0.75 < data.labels.size / (1500 * 20) < 0.95  # about 85 % of positions come from the draft


@pytest.mark.parametrize("w_rej", [1.0, 3.0])
def test_head_recovers_the_weighted_optimum(data, w_rej):
    """For one-hot features the weighted loss is minimised cell by cell at P / (P + w_rej (1 − P))."""
    head = AcceptanceHead(w_rej=w_rej, l2=1e-6).fit(one_hot_features(data.previous, data.tokens, 3), data.labels)
    P = oracle_table(*PAIR)
    expected = P / (P + w_rej * (1 - P))
    np.testing.assert_allclose(head_table(head, 3), expected, atol=0.02)
    if w_rej == 1.0:
        assert binary_kl(data.labels, head.predict(one_hot_features(data.previous, data.tokens, 3))) < 0.01


def test_learned_controller_matches_the_oracle_controller(data):
    head = AcceptanceHead().fit(one_hot_features(data.previous, data.tokens, 3), data.labels)

    def featurize(previous, tokens):
        return one_hot_features(previous, tokens, 3)

    for h in (0.3, 0.7):
        learned = generate(*PAIR, TokenVerify(), LearnedHeadController(head, featurize, h, 6), 4000, n_sequences=8,
                           seed=1, progress=False)
        oracle = generate(*PAIR, TokenVerify(), ThresholdController(h, 6), 4000, n_sequences=8, seed=1,
                          progress=False)
        assert learned.generated == 32_000
        assert learned.cost(0.1).latency == pytest.approx(oracle.cost(0.1).latency, rel=0.03)


def test_errors():
    with pytest.raises(ValueError, match="call fit"):
        AcceptanceHead().predict(np.zeros((1, 2)))
    with pytest.raises(ValueError, match="features"):
        AcceptanceHead().fit(np.zeros((3, 2)), np.zeros(2))
    with pytest.raises(ValueError, match="labels"):
        AcceptanceHead().fit(np.zeros((2, 2)), np.array([0.5, 1.5]))
    with pytest.raises(ValueError, match="w_rej"):
        AcceptanceHead(w_rej=-1.0)
    with pytest.raises(ValueError, match="mix"):
        token_mixing_data(*PAIR, 10, 5, mix=1.5)


def test_controller_takes_features_directly(data):
    """The interface llm_bridge feeds: feature rows (e.g. hidden states) instead of tokens."""
    head = AcceptanceHead().fit(one_hot_features(data.previous, data.tokens, 3), data.labels)
    ctrl = LearnedHeadController(head, None, 0.5, 4)
    ctrl.start(2)
    feats = one_hot_features(np.array([0, 1]), np.array([1, 1]), 3)
    keep = ctrl.keep_drafting(1, np.zeros((2, 3)), which=np.arange(2), features=feats)
    expected = 1 - head.predict(feats) < 0.5
    assert keep.tolist() == expected.tolist()


def test_confidence_controller_stops_on_the_drafts_own_confidence():
    """Draft rows with largest probability 0.5: the product is 0.5 after one token and 0.25 after two, so a
    threshold of 0.3 drafts exactly two tokens wherever the sequence has room, and the run stays exact."""
    from otspec.engine import ConfidenceController
    from otspec.sources import IIDSource

    draft, target = IIDSource([0.5, 0.3, 0.2]), IIDSource([0.2, 0.3, 0.5])
    res = generate(draft, target, TokenVerify(), ConfidenceController(0.3, 5), 12, n_sequences=64, seed=1,
                   progress=False)
    drafted = res.accept_hist.sum(axis=1)
    assert drafted[3:].sum() == 0 and drafted[2] > 4 * (drafted[0] + drafted[1])  # g < 2: only where room ends
    assert generate(draft, target, TokenVerify(), ConfidenceController(0.0, 4), 12, n_sequences=8, seed=1,
                    progress=False).accept_hist.sum(axis=1)[4] > 0  # threshold 0: the cap
    ctrl = ConfidenceController(0.6, 3)
    ctrl.start(2)
    assert ctrl.keep_drafting(1, np.array([[0.7, 0.3], [0.5, 0.5]]), which=np.array([0, 1])).tolist() == [True, False]
    with pytest.raises(ValueError, match="threshold"):
        ConfidenceController(1.5, 3)
