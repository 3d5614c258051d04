"""Monte Carlo without probability rows: token and block verification of an IID pair at any vocabulary.

:func:`~otspec.engine.montecarlo.simulate` scores every drafted block with both sources and hands the
verifier (B, L+1, V) rows; at V = 32,000 that is 2 MB per block, and memory traffic caps it near a
thousand blocks per second. For an IID pair every position has the same two rows, and what token and
published block verification need from them is small:

* draws from p and from q — exact inversion with a guide table (scipy's ``DiscreteGuideTable``,
  O(1) expected per draw), built once;
* the likelihood ratio r(x) = q(x)/p(x) at the drafted tokens — one gather;
* the surplus mass M(w) = Σ_x (w q(x) − p(x))_+ at the running block weight w ∈ [0, 1], and draws
  from the surplus (w q − p)_+ — both from the tokens sorted by r, descending: the tokens with
  w q(x) > p(x) are the ones with r(x) > 1/w, a prefix of that order, so M(w) = w Q_n − P_n with
  Q, P the cumulative target and draft masses in that order and n the prefix length, and a draw
  from the surplus is a binary search of u·M(w) in the increasing w Q_j − P_j over j < n.

:class:`RowProfile` holds these tables (O(V) memory, built once); :func:`sample_token` and
:func:`sample_block` run one batch of iterations with them, in the same law as
``TokenVerify().sample`` and ``BlockVerify().sample`` on the full rows (the tests check both
against the exact law). :data:`ROW_FREE` maps verifier classes to their samplers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats.sampling import DiscreteGuideTable

from ..distributions import likelihood_ratio
from ..verifiers.block import BlockVerify
from ..verifiers.token import TokenVerify

__all__ = ["ROW_FREE", "RowProfile", "RowFreeOutcome", "row_free_sampler", "sample_block", "sample_token"]


@dataclass(frozen=True)
class RowFreeOutcome:
    """τ (accepted drafts), the drafted tokens (B, L) and the extra token Y, per iteration."""

    accepted_len: np.ndarray
    tokens: np.ndarray
    correction: np.ndarray


class RowProfile:
    """Sampling tables of one (draft, target) row pair; ``p`` and ``q`` are validated float64 rows (V,)."""

    def __init__(self, p: np.ndarray, q: np.ndarray):
        self._guide_p, self._guide_q = DiscreteGuideTable(p), DiscreteGuideTable(q)
        self.ratio = likelihood_ratio(p, q)
        self.order = np.argsort(-self.ratio, kind="stable")  # descending ratio
        self.neg_sorted = -self.ratio[self.order]  # ascending: searchsorted finds the prefix r > 1/w
        self.cum_q, self.cum_p = np.cumsum(q[self.order]), np.cumsum(p[self.order])
        self.total_variation = float(np.sum(np.clip(q - p, 0.0, None)))  # M(1), the common case w = 1

    def draw_draft(self, u: np.ndarray) -> np.ndarray:
        """Inverse CDF of p at the uniforms ``u`` (any shape)."""
        return self._guide_p.ppf(u).astype(np.int64)

    def draw_target(self, u: np.ndarray) -> np.ndarray:
        return self._guide_q.ppf(u).astype(np.int64)

    def _prefix(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(n, M): n(w) = #{x : w q(x) > p(x)} = #{x : r(x) > 1/w}, a prefix of the order by ratio, and the
        surplus mass M(w) = w Q_n − P_n on it (both 0 where w = 0)."""
        with np.errstate(divide="ignore"):
            threshold = np.where(w > 0, -1.0 / np.where(w > 0, w, 1.0), -np.inf)
        n = np.where(w > 0, np.searchsorted(self.neg_sorted, threshold, side="left"), 0)
        last = np.maximum(n - 1, 0)
        return n, np.where(n > 0, np.maximum(w * self.cum_q[last] - self.cum_p[last], 0.0), 0.0)

    def surplus_mass(self, w: np.ndarray) -> np.ndarray:
        """M(w) = Σ_x (w q(x) − p(x))_+ for an array of weights w ≥ 0 (w = 1, the common case, is a constant)."""
        out = np.where(w >= 1.0, self.total_variation, 0.0)
        some = np.flatnonzero((w > 0) & (w < 1.0))
        if some.size:
            out[some] = self._prefix(w[some])[1]
        return out

    def draw_surplus(self, w: np.ndarray, u: np.ndarray) -> np.ndarray:
        """One draw from (w q − p)_+ per entry (w > 0 with positive surplus mass), by binary search."""
        n, mass = self._prefix(w)
        goal = u * mass
        lo, hi = np.zeros_like(n), np.maximum(n - 1, 0)  # smallest j in [0, n−1] with w Q_j − P_j > goal
        while np.any(lo < hi):
            mid = (lo + hi) // 2
            above = w * self.cum_q[mid] - self.cum_p[mid] > goal
            hi = np.where(above, mid, hi)
            lo = np.where(above, lo, mid + 1)
        return self.order[lo]


def sample_token(profile: RowProfile, n: int, L: int, rng: np.random.Generator) -> RowFreeOutcome:
    """``n`` iterations of token verification (spec eq. (3)) on the IID pair of ``profile``."""
    tokens = profile.draw_draft(rng.random((n, L)))
    accepted = rng.random((n, L)) < np.minimum(profile.ratio[tokens], 1.0)
    tau = np.where(accepted.all(axis=1), L, np.argmin(accepted, axis=1)) if L else np.zeros(n, dtype=np.int64)
    y = profile.draw_target(rng.random(n))
    rejected = np.flatnonzero(tau < L)
    if rejected.size and profile.total_variation > 0:
        y[rejected] = profile.draw_surplus(np.ones(rejected.size), rng.random(rejected.size))
    return RowFreeOutcome(tau, tokens, y)


def sample_block(profile: RowProfile, n: int, L: int, rng: np.random.Generator) -> RowFreeOutcome:
    """``n`` iterations of published block verification (eqs. (13)-(14)) on the IID pair of ``profile``."""
    tokens = profile.draw_draft(rng.random((n, L)))
    with np.errstate(divide="ignore"):
        log_r = np.log(profile.ratio[tokens])
    log_w = np.zeros((n, L + 1))
    for i in range(L):
        log_w[:, i + 1] = np.minimum(log_w[:, i] + log_r[:, i], 0.0)
    w = np.exp(log_w)
    h = np.ones((n, L + 1))
    if L:
        mid = w[:, 1:L]
        m = profile.surplus_mass(mid.ravel()).reshape(mid.shape)
        den = m + 1.0 - mid
        h[:, 1:L] = np.where(den > 0, m / np.where(den > 0, den, 1.0), 0.0)
        h[:, L] = w[:, L]
    passed = rng.random((n, L + 1)) < h
    tau = np.max(np.where(passed, np.arange(L + 1), 0), axis=1)
    y = profile.draw_target(rng.random(n))
    rows = np.flatnonzero(tau < L)
    if rows.size:
        scale = w[rows, tau[rows]]
        live = profile.surplus_mass(scale) > 0  # a surplus of mass 0: the target row, as the verifier does
        pick = rows[live]
        y[pick] = profile.draw_surplus(scale[live], rng.random(pick.size))
    return RowFreeOutcome(tau, tokens, y)


ROW_FREE = {TokenVerify: sample_token, BlockVerify: sample_block}


def row_free_sampler(verifier):
    """The row-free sampler of ``verifier`` (exact class match), or None."""
    return ROW_FREE.get(type(verifier))
