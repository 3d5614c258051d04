"""Seeded random draft/target pairs with a distance knob."""

from __future__ import annotations

import numpy as np

from ..checks import MAX_HORIZON, MAX_VOCAB_SIZE, check_real, check_seed, check_size
from ..errors import SizeLimitError
from .models import IIDSource, MarkovSource

__all__ = ["MAX_RANDOM_ENTRIES", "random_iid", "random_markov"]

#: Most transition entries (matrices × V × V) :func:`random_markov` draws per model: 2^24, 128 MiB of
#: float64 (a stationary chain of V = 4,096; writing it as JSON takes about half a minute).
MAX_RANDOM_ENTRIES = 2**24


def _random_rows(rng, shape, vocab, sparsity):
    rows = rng.dirichlet(np.ones(vocab), size=shape)
    return _sparsify(rng, rows, sparsity)


def _sparsify(rng, rows, sparsity):
    if sparsity <= 0:
        return rows
    keep = rng.random(rows.shape) >= sparsity
    # each row keeps its largest entry, so no row becomes all-zero
    keep |= rows == rows.max(axis=-1, keepdims=True)
    rows = np.where(keep, rows, 0.0)
    return rows / rows.sum(axis=-1, keepdims=True)


def _near(rng, target_rows, concentration, sparsity):
    """Draft rows ~ Dirichlet(concentration * target_row + 1): 0 = independent, ∞ = equal."""
    alpha = concentration * target_rows + 1.0
    gam = rng.gamma(alpha)
    return _sparsify(rng, gam / gam.sum(axis=-1, keepdims=True), sparsity)


def random_markov(vocab: int, concentration: float = 1.0, horizon: int | None = None,
                  seed=None, sparsity: float = 0.0) -> tuple[MarkovSource, MarkovSource]:
    """A random (draft, target) pair of Markov chains with a tunable distance.

    Target rows are Dirichlet(1). Each draft row is Dirichlet(c·q_row + 1) with
    ``c = concentration``: c = 0 gives an independent draft, and the draft
    approaches the target as c grows (per-row TV shrinks like 1/√c).

    Parameters
    ----------
    vocab : int
    concentration : float, >= 0
    horizon : int, optional
        ``None`` for stationary chains, T for time-varying chains (T−1 matrices).
    seed : int or numpy Generator
    sparsity : float in [0, 1)
        Probability that an entry is set to exactly 0 (independently in draft
        and target; each row keeps its largest entry).
    """
    vocab, concentration, sparsity = _check_random_pair(vocab, concentration, sparsity)
    if horizon is not None:
        horizon = check_size(horizon, "horizon", limit=MAX_HORIZON, limit_name="MAX_HORIZON")
    matrices = 1 if horizon is None else max(horizon - 1, 1)
    if matrices * vocab * vocab > MAX_RANDOM_ENTRIES:
        raise SizeLimitError(f"random_markov: {matrices:,} transition matrices of {vocab:,} x {vocab:,} = "
                             f"{matrices * vocab * vocab:,} entries per model, above MAX_RANDOM_ENTRIES = "
                             f"{MAX_RANDOM_ENTRIES:,}", size=matrices * vocab * vocab, limit=MAX_RANDOM_ENTRIES)
    rng = np.random.default_rng(check_seed(seed))
    shape = (vocab,) if horizon is None else (max(int(horizon) - 1, 0), vocab)
    t_init = _random_rows(rng, (), vocab, sparsity)
    t_trans = _random_rows(rng, shape, vocab, sparsity)
    d_init = _near(rng, t_init, concentration, sparsity)
    d_trans = _near(rng, t_trans, concentration, sparsity)
    if horizon is not None and horizon <= 1:
        t_trans = np.zeros((0, vocab, vocab))
        d_trans = np.zeros((0, vocab, vocab))
    return MarkovSource(d_init, d_trans), MarkovSource(t_init, t_trans)


def _check_random_pair(vocab, concentration, sparsity):

    sparsity = check_real(sparsity, "sparsity", low=0.0, high=1.0)
    if sparsity >= 1:
        raise ValueError(f"sparsity: expected a probability in [0, 1) (1 would zero every entry), got {sparsity!r}")
    vocab = check_size(vocab, "vocab", limit=MAX_VOCAB_SIZE, limit_name="MAX_VOCAB_SIZE")  # before any row exists
    return vocab, check_real(concentration, "concentration", low=0.0), sparsity


def random_iid(vocab: int, concentration: float = 1.0, seed=None, sparsity: float = 0.0):
    """A random (draft, target) pair of IID sources; see :func:`random_markov`."""
    vocab, concentration, sparsity = _check_random_pair(vocab, concentration, sparsity)
    rng = np.random.default_rng(check_seed(seed))
    target = _random_rows(rng, (), vocab, sparsity)
    return IIDSource(_near(rng, target, concentration, sparsity)), IIDSource(target)
