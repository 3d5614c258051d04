"""otspec.sources: IID / Markov / table sources, enumeration, sampling, JSON, generators."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from scipy import stats
from strategies import markov_pairs, table_pairs

from otspec.distributions import total_variation
from otspec.sources import (
    MAX_ENUMERATION,
    IIDSource,
    MarkovSource,
    TableSource,
    bernoulli,
    load_source,
    random_iid,
    random_markov,
    save_source,
    source_from_json,
    uniform_source,
)


@given(markov_pairs(max_vocab=4, max_length=4))
def test_enumeration_consistent_with_log_probs_and_rows(pair):
    src, _, L = pair
    enum = src.enumerate(L)
    assert enum.tokens.shape == (src.vocab_size**L, L)
    assert abs(enum.probs.sum() - 1) < 1e-12
    with np.errstate(divide="ignore"):
        assert np.allclose(np.exp(src.log_prob(enum.tokens)), enum.probs, atol=1e-15)
    # path rows agree with next_probs at every prefix length
    rows = src.path_probs(enum.tokens)
    for t in range(L + 1):
        assert np.array_equal(rows[:, t], src.next_probs(enum.tokens, np.full(len(enum.tokens), t)))


@given(table_pairs())
def test_table_source_generic_paths(pair):
    src, _, L = pair
    enum = src.enumerate(L + 1)
    assert abs(enum.probs.sum() - 1) < 1e-12
    tp = src.token_probs(enum.tokens)
    assert np.allclose(tp.prod(axis=1), enum.probs)


def test_markov_ragged_lengths_match_individual_prefixes():
    _, src = random_markov(3, 1.0, horizon=6, seed=0)
    buf = np.array([[0, 1, 2, 0, 0], [2, 2, 1, 1, 0]])
    rows = src.next_probs(buf, np.array([0, 3]))
    assert np.array_equal(rows[0], src.initial)
    # 4th token (1-based) comes from matrix i = 2 (0-based: "token i+2 from token i+1"), previous token 1
    assert np.array_equal(rows[1], src.transition[2][1])


def test_sampling_matches_enumerated_law():
    src, _ = random_markov(3, 1.0, horizon=4, seed=5, sparsity=0.2)
    n = 300_000
    seqs = src.sample(n, 3, np.random.default_rng(9))
    enum = src.enumerate(3)
    idx = seqs @ np.array([9, 3, 1])
    counts = np.bincount(idx, minlength=27)
    assert counts[enum.probs == 0].sum() == 0
    live = enum.probs > 0
    assert stats.chisquare(counts[live], n * enum.probs[live]).pvalue > 1e-4


def test_iid_fast_sampler_matches_law():
    src = IIDSource([0.1, 0.0, 0.6, 0.3])
    draws = src.sample(100_000, 4, np.random.default_rng(0)).ravel()
    counts = np.bincount(draws, minlength=4)
    assert counts[1] == 0
    assert stats.chisquare(counts[[0, 2, 3]], 400_000 * np.array([0.1, 0.6, 0.3])).pvalue > 1e-4


def test_bernoulli_and_uniform():
    assert np.allclose(bernoulli(0.3).probs, [0.7, 0.3])
    assert np.allclose(uniform_source(2, 4).probs, [0.5, 0.5, 0, 0])
    with pytest.raises(ValueError, match="p must lie in"):
        bernoulli(1.5)
    with pytest.raises(ValueError, match="support <= vocab_size"):
        uniform_source(5, 4)


def test_time_varying_horizon_errors():
    init = [0.5, 0.5]
    mats = [[[0.9, 0.1], [0.2, 0.8]]] * 2  # two matrices: horizon 3
    src = MarkovSource(init, mats)
    assert src.horizon == 3
    src.enumerate(3)
    with pytest.raises(ValueError, match="at most 3 tokens"):
        src.enumerate(4)
    with pytest.raises(ValueError, match="horizon 5 needs 4 transition matrices, got 2"):
        MarkovSource(init, mats, horizon=5)


def test_markov_shape_errors():
    with pytest.raises(ValueError, match="transition: expected a \\(2, 2\\) matrix"):
        MarkovSource([0.5, 0.5], np.eye(3))
    with pytest.raises(ValueError, match="transition: row"):
        MarkovSource([0.5, 0.5], [[0.5, 0.4], [0.5, 0.5]])


def test_enumeration_limit():
    src = IIDSource(np.ones(4) / 4)
    big = int(np.ceil(np.log(MAX_ENUMERATION + 1) / np.log(4)))
    with pytest.raises(ValueError, match="exceeds the limit"):
        src.enumerate(big)


def test_token_range_checked():
    src, _ = random_markov(3, seed=0)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 3\)"):
        src.next_probs([[0, 5]])
    with pytest.raises(ValueError, match=r"ids must lie in"):
        src.log_prob([[0, -1]])


def test_table_missing_prefix():
    src = TableSource({(): [0.5, 0.5]}, 2, 2)
    with pytest.raises(ValueError, match=r"no row for the prefix \(1,\)"):
        src.next_probs([[1]])


@pytest.mark.parametrize("make", [
    lambda: IIDSource([0.2, 0.8]),
    lambda: random_markov(3, seed=1)[0],
    lambda: random_markov(3, horizon=4, seed=1)[1],
    lambda: TableSource({(): [0.5, 0.5], (0,): [0.1, 0.9], (1,): [1.0, 0.0]}, 2, 2),
])
def test_json_round_trip(make, tmp_path):
    src = make()
    path = tmp_path / "s.json"
    save_source(src, path)
    back = load_source(path)
    n = min(3, src.horizon or 3)
    assert np.allclose(back.enumerate(n).probs, src.enumerate(n).probs, atol=1e-15)
    assert json.loads(path.read_text())["type"] in {"iid", "markov", "table"}


def test_json_spec_examples():
    assert np.allclose(source_from_json({"type": "iid", "probs": [0.3, 0.7]}).probs, [0.3, 0.7])
    m = source_from_json({"type": "markov", "initial": [1, 0], "transition": [[[0, 1], [1, 0]]]})
    assert m.horizon == 2 and np.array_equal(m.enumerate(2).probs, [0, 1, 0, 0])
    with pytest.raises(ValueError, match="unknown type 'gauss'"):
        source_from_json({"type": "gauss"})
    with pytest.raises(ValueError, match="missing key 'probs'"):
        source_from_json({"type": "iid"})
    with pytest.raises(ValueError, match="horizon"):
        source_from_json({"type": "markov", "initial": [1, 0], "transition": [[[0, 1], [1, 0]]], "horizon": 4})
    with pytest.raises(ValueError, match="source file .JSON. not found: no file"):
        load_source("/nonexistent/source.json")


def test_random_pairs_distance_knob_and_sparsity():
    def mean_tv(c):
        d, t = random_markov(6, c, seed=3)
        return float(np.mean(total_variation(d.transition, t.transition)))

    tvs = [mean_tv(c) for c in (0.0, 10.0, 1000.0)]
    assert tvs[0] > tvs[1] > tvs[2] and tvs[2] < 0.05
    d, t = random_markov(5, 1.0, seed=2, sparsity=0.5)
    assert (d.transition == 0).any() and (t.transition == 0).any()
    assert (t.transition.max(axis=-1) > 0).all()
    di, ti = random_iid(4, 2.0, seed=0)
    assert di.vocab_size == ti.vocab_size == 4
    assert random_markov(3, seed=4)[0].to_json() == random_markov(3, seed=4)[0].to_json()


def _rows_at_sources():
    from otspec.sources import DepthPositionalSource, GreedySource, PositionalSource

    rng = np.random.default_rng(5)
    V, T = 3, 6
    markov = MarkovSource(rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V), size=V))
    varying = MarkovSource(rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V), size=(T, V)))
    table = TableSource(lambda prefix: np.roll([0.5, 0.3, 0.2], len(prefix) + sum(prefix)), V, T + 1)
    return [IIDSource(rng.dirichlet(np.ones(V))), markov, varying, PositionalSource(rng.dirichlet(np.ones(V), size=T)),
            DepthPositionalSource(rng.dirichlet(np.ones(V), size=(3, T))), table, GreedySource(varying)]


@pytest.mark.parametrize("source", _rows_at_sources(), ids=lambda s: type(s).__name__)
def test_rows_at_several_lengths_are_the_rows_one_length_at_a_time(source):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, source.vocab_size, size=(4, 5))
    lengths = rng.integers(0, 6, size=(4, 3))
    expected = np.stack([source.next_probs(tokens, lengths[:, j]) for j in range(3)], axis=1)
    np.testing.assert_array_equal(source.rows_at(tokens, lengths), expected)
    np.testing.assert_array_equal(source.rows_at(tokens, lengths[:, :0]), expected[:, :0])
    if hasattr(source, "depth_rows"):  # rows by draft depth: the depths asked for, each row its own
        depths = rng.integers(0, 5, size=(4, 3))
        at_depth = np.stack([source.depth_rows(lengths[:, j], depths[:, j]) for j in range(3)], axis=1)
        np.testing.assert_array_equal(source.rows_at(tokens, lengths, depths), at_depth)


def test_rows_at_refuses_what_next_probs_refuses():
    source = random_markov(vocab=3, seed=0)[0]
    tokens = np.zeros((2, 4), dtype=np.int64)
    with pytest.raises(ValueError, match=r"lengths: expected shape \(2, J\)"):
        source.rows_at(tokens, np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, 4\]"):
        source.rows_at(tokens, np.full((2, 1), 5))
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 3\)"):
        source.rows_at(tokens + np.array([[0, 0, 0, 0], [0, 7, 0, 0]]), np.full((2, 1), 3))
    with pytest.raises(ValueError, match="horizon"):
        MarkovSource([0.5, 0.5], [[[0.5, 0.5], [0.5, 0.5]]]).rows_at(tokens, np.full((2, 1), 3))
