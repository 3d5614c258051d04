"""Hypothesis strategies generating sources, and independent reference computations.

Rows mix exact zeros with continuous weights, so unbiasedness is tested where it
is most fragile (tokens the target forbids, tokens the draft never proposes).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from otspec.sources import MarkovSource, TableSource

weights = st.one_of(st.just(0.0), st.floats(min_value=1e-3, max_value=1.0))


@st.composite
def prob_rows(draw, vocab: int, allow_zeros: bool = True):
    w = draw(st.lists(weights if allow_zeros else st.floats(1e-3, 1.0), min_size=vocab, max_size=vocab)
             .filter(lambda w: sum(w) > 0))
    w = np.asarray(w, dtype=np.float64)
    return w / w.sum()


@st.composite
def row_instances(draw, max_vocab: int = 4, max_k: int = 3):
    """(p, q, k): one draft row and one target row (V <= max_vocab, exact zeros), k <= max_k drafts."""
    vocab = draw(st.integers(1, max_vocab))
    return draw(prob_rows(vocab)), draw(prob_rows(vocab)), draw(st.integers(1, max_k))


#: multi_draft_otm.md §6 table, draft Ber(0.25), target Ber(q1):
#: (q1, k, OTM optimum (14), k-Seq p_acc, multi-round, naive), 4 decimals as printed in the spec.
SPECTR_BERNOULLI_TABLE = [
    (0.1, 2, 1.0000, 0.9731, 0.9625, 0.8875),
    (0.5, 1, 0.7500, 0.7500, 0.7500, 0.5000),
    (0.5, 2, 0.9375, 0.8476, 0.8125, 0.6875),
    (0.5, 4, 1.0000, 0.9502, 0.8945, 0.8398),
    (0.75, 2, 0.6875, 0.6483, 0.6250, 0.5625),
    (0.75, 4, 0.9336, 0.8299, 0.7891, 0.7617),
    (0.75, 6, 1.0000, 0.9198, 0.8813, 0.8665),
    (1.0, 2, 0.4375, 0.4375, 0.4375, 0.4375),
    (1.0, 4, 0.6836, 0.6836, 0.6836, 0.6836),
]


@st.composite
def markov_chain(draw, vocab: int, horizon: int | None):
    initial = draw(prob_rows(vocab))
    if horizon is None:
        trans = np.stack([draw(prob_rows(vocab)) for _ in range(vocab)])
    else:
        trans = np.stack([np.stack([draw(prob_rows(vocab)) for _ in range(vocab)]) for _ in range(horizon - 1)])
        trans = trans.reshape(horizon - 1, vocab, vocab)
    return MarkovSource(initial, trans)


@st.composite
def markov_pairs(draw, max_vocab: int = 4, max_length: int = 4, iterations: int = 1):
    """(draft, target, L): vocab <= max_vocab, L <= max_length, stationary or time-varying.

    Time-varying chains get the horizon ``iterations * (L + 1)`` that an exact
    evaluation of that many iterations needs.
    """
    vocab = draw(st.integers(1, max_vocab))
    length = draw(st.integers(1, max_length))
    horizon = None if draw(st.booleans()) else iterations * (length + 1)
    return draw(markov_chain(vocab, horizon)), draw(markov_chain(vocab, horizon)), length


@st.composite
def table_pairs(draw, max_vocab: int = 3, max_length: int = 3):
    """(draft, target, L) with a different row for every prefix (context-dependent models)."""
    vocab = draw(st.integers(2, max_vocab))
    length = draw(st.integers(1, max_length))

    def table():
        rows, level = {}, [()]
        for _ in range(length + 1):
            nxt = []
            for prefix in level:
                rows[prefix] = draw(prob_rows(vocab))
                nxt += [prefix + (t,) for t in range(vocab)]
            level = nxt
        return TableSource(rows, vocab, length + 1)

    return table(), table(), length


def brute_force_token_value(draft, target, length: int) -> float:
    """Spec eq. (4) by plain recursion over prefixes (independent of otspec.theory)."""
    total = 0.0

    def walk(prefix, mass):
        nonlocal total
        if len(prefix) == length:
            return
        p = draft.next_probs(np.array([prefix], dtype=np.int64).reshape(1, len(prefix)))[0]
        q = target.next_probs(np.array([prefix], dtype=np.int64).reshape(1, len(prefix)))[0]
        for x in range(len(p)):
            m = mass * min(p[x], q[x])
            if m > 0:
                total += m
                walk(prefix + [x], m)

    walk([], 1.0)
    return total


def g_test(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """G statistic and degrees of freedom of ``counts`` (K,) against cell probabilities (K,).

    Cells of probability 0 are excluded (callers assert their counts are 0).
    """
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    live = probs > 0
    expected = counts.sum() * probs[live] / probs[live].sum()
    obs = counts[live]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(obs > 0, obs * np.log(obs / expected), 0.0)
    return float(2.0 * terms.sum()), int(live.sum() - 1)


def pearson_noncentrality(n: int, null: np.ndarray, alt: np.ndarray) -> float:
    """λ = n Σ (alt − null)² / null over the null's support (power of chi-square-type tests)."""
    live = null > 0
    return float(n * np.sum((alt[live] - null[live]) ** 2 / null[live]))


def _prefix_rows(source, prefix):
    arr = np.array([prefix], dtype=np.int64).reshape(1, len(prefix))
    return source.next_probs(arr)[0]


def brute_force_optimum(draft, target, length: int) -> float:
    """Spec eq. (8): sum over prefixes of min of joint probabilities, by itertools."""
    import itertools

    total = 0.0
    for ell in range(1, length + 1):
        for prefix in itertools.product(range(draft.vocab_size), repeat=ell):
            pj = qj = 1.0
            for i, x in enumerate(prefix):
                pj *= _prefix_rows(draft, list(prefix[:i]))[x]
                qj *= _prefix_rows(target, list(prefix[:i]))[x]
            total += min(pj, qj)
    return total


def brute_force_block_value(draft, target, length: int) -> float:
    """Spec eq. (17): W_l = min{p(x^l), q(x_l|x^{l-1}) W_{l-1}}, summed over prefixes, by recursion."""
    total = 0.0

    def walk(prefix, pj, w):
        nonlocal total
        if len(prefix) == length:
            return
        p, q = _prefix_rows(draft, prefix), _prefix_rows(target, prefix)
        for x in range(len(p)):
            child_p = pj * p[x]
            child_w = min(child_p, q[x] * w)
            if child_w > 0:
                total += child_w
                walk(prefix + [x], child_p, child_w)

    walk([], 1.0, 1.0)
    return total


def full_depth_tokens(result, depth: int, confidence: float = 0.95):
    """E[tokens per iteration] over a decode run's full-depth iterations (``accept_hist[depth]``), with a normal
    interval: an :class:`~otspec.engine.stats.Estimate`.

    On an IID pair every iteration that drafts its whole tree is an independent draw of the exact one-iteration
    law; the run's block efficiency also averages the short last iterations of each sequence (cut at N − pos − 1),
    an end effect of order depth / N that only long sequences make small. Counting the full-depth iterations alone
    has no end effect, so short sequences in a wide batch (a few loop steps) test the same law as long ones."""
    from otspec.engine.stats import mean_estimate

    row = np.asarray(result.accept_hist)[depth]
    tokens = np.arange(row.size) + 1.0
    n = int(row.sum())
    return mean_estimate(float(row @ tokens), float(row @ tokens**2), n, confidence)
