"""Monte Carlo without probability rows: token and block verification at any vocabulary size.

:func:`~otspec.engine.montecarlo.simulate` scores every drafted block with both sources and hands the
verifier (B, L+1, V) rows; at V = 32,000 that is 2 MB per block, and memory traffic caps it near a
thousand blocks per second. When the rows of a block do not depend on the drafted tokens (an IID
pair, or logged rows indexed by position, :mod:`otspec.sources.logged`), what token and published
block verification need from a row pair is small and can be tabulated once per pair:

* draws from p and from q — inverse CDF on the cumulative rows (a binary search per draw; one IID
  pair on numpy uses scipy's ``DiscreteGuideTable``, O(1) expected per draw);
* the likelihood ratio r(x) = q(x)/p(x) at the drafted tokens — one gather;
* the surplus mass M(w) = Σ_x (w q(x) − p(x))_+ at a block weight w ∈ [0, 1], and draws from the
  surplus (w q − p)_+ — both from the tokens sorted by r, descending: the tokens with
  w q(x) > p(x) are the ones with r(x) > 1/w, a prefix of that order, so M(w) = w Q_n − P_n with
  Q, P the cumulative target and draft masses in that order and n the prefix length, and a draw
  from the surplus is a binary search of u·M(w) in the increasing w Q_j − P_j over j < n.

:class:`RowTables` packs these tables for many row pairs ("segments") into flat arrays, numpy or
torch on any device (CUDA included); segment s covers entries ``offsets[s]:offsets[s+1]``, one
entry per token of its support. :class:`RowProfile` is the one-pair numpy case with guide-table
draws. :func:`sample_token` and :func:`sample_block` run one batch of iterations; iteration b reads
segment ``at[b] + i`` at position i (the same pair everywhere when ``at`` is None), in the same law
as ``TokenVerify().sample`` and ``BlockVerify().sample`` on the full rows (the tests check both
against the exact law). Binary searches run a fixed number of halvings, so nothing waits on the
device. :data:`ROW_FREE` maps verifier classes to their samplers.

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import array_api_compat
import numpy as np

from ..distributions import likelihood_ratio, resolve_device, uniform
from ..verifiers.block import BlockVerify, commit_probs, running_weights
from ..verifiers.kernels import first_rejection_sample, last_pass_sample
from ..verifiers.token import TokenVerify

__all__ = ["ROW_FREE", "RowFreeOutcome", "RowProfile", "RowTables", "resolve_device", "row_free_sampler",
           "sample_block", "sample_token"]


@dataclass(frozen=True)
class RowFreeOutcome:
    """τ (accepted drafts), the drafted tokens (B, L) and the extra token Y, per iteration (numpy or torch)."""

    accepted_len: object
    tokens: object
    correction: object


class RowTables:
    """Sampling tables of many (draft, target) row pairs on their own supports, packed flat.

    Parameters
    ----------
    offsets : int array (S+1,)
        Segment s (one row pair) is the entries ``offsets[s]:offsets[s+1]``; none is empty.
    tokens : int array (nnz,)
        The token id of each entry (what the samplers return).
    draft, target : float64 arrays (nnz,)
        p and q on each segment, validated by the caller (non-negative, each segment's p and q
        summing to 1).
    device : None or torch device
        None keeps numpy arrays; a torch device moves the tables there (see :func:`resolve_device`).
    """

    def __init__(self, offsets, tokens, draft, target, *, device=None):
        offsets = np.asarray(offsets, dtype=np.int64)
        p, q = np.asarray(draft, dtype=np.float64), np.asarray(target, dtype=np.float64)
        sizes = np.diff(offsets)
        if sizes.size == 0 or sizes.min() < 1 or offsets[0] != 0 or offsets[-1] != p.size or q.size != p.size:
            raise ValueError("row tables: offsets must start at 0, rise strictly and end at the number of entries")
        ratio = likelihood_ratio(p, q)
        order = np.empty(p.size, dtype=np.int64)
        cum_p, cum_q, scum_p, scum_q = (np.empty(p.size) for _ in range(4))
        last_p, last_q = np.empty(sizes.size, dtype=np.int64), np.empty(sizes.size, dtype=np.int64)
        for s, (a, b) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)):
            o = a + np.argsort(-ratio[a:b], kind="stable")  # descending ratio within the segment
            order[a:b] = o
            cum_p[a:b], cum_q[a:b] = np.cumsum(p[a:b]), np.cumsum(q[a:b])  # segment-local: no cross-talk
            scum_p[a:b], scum_q[a:b] = np.cumsum(p[o]), np.cumsum(q[o])
            last_p[s], last_q[s] = a + np.flatnonzero(p[a:b])[-1], a + np.flatnonzero(q[a:b])[-1]
        tv = np.add.reduceat(np.clip(q - p, 0.0, None), offsets[:-1])
        #: halvings that settle any search over one segment (and one more)
        self.halvings = int(math.ceil(math.log2(int(sizes.max()) + 1))) + 1
        self.n_entries = int(p.size)
        arrays = {"offsets": offsets, "tokens": np.asarray(tokens, dtype=np.int64), "ratio": ratio, "order": order,
                  "neg_sorted": -ratio[order], "cum_p": cum_p, "cum_q": cum_q, "scum_p": scum_p, "scum_q": scum_q,
                  "last_p": last_p, "last_q": last_q, "tv": tv}
        if device is not None:
            import torch

            arrays = {k: torch.as_tensor(v, device=device) for k, v in arrays.items()}
        for key, value in arrays.items():
            setattr(self, key, value)
        self.xp = array_api_compat.array_namespace(self.ratio)

    # ------------------------------------------------------------------ searches
    def _segment(self, seg, shape):
        """(start, end) entry bounds of the segments ``seg`` (None: segment 0 everywhere)."""
        if seg is None:
            seg = self.xp.zeros(shape, dtype=self.xp.int64, device=array_api_compat.device(self.ratio))
        return self.offsets[seg], self.offsets[seg + 1]

    def _search(self, holds, lo, hi):
        """Smallest j in [lo, hi) with ``holds(j)`` (monotone: False then True), else hi; elementwise."""
        xp, top = self.xp, self.n_entries - 1
        for _ in range(self.halvings):
            go = lo < hi
            mid = (lo + hi) // 2
            ok = holds(xp.clip(mid, max=top)) & go
            hi = xp.where(ok, mid, hi)
            lo = xp.where(go & ~ok, mid + 1, lo)
        return lo

    def _draw(self, cum, last, u, seg):
        lo, hi = self._segment(seg, u.shape)
        goal = u * cum[hi - 1]  # cum is segment-local: a segment's total is its last entry
        j = self._search(lambda j: cum[j] > goal, lo, hi)
        # u·total can round up to the total itself: then the last token with mass is the draw
        return self.xp.minimum(j, last[seg] if seg is not None else last[0])

    def draw_draft(self, u, seg=None):
        """Entries drawn from p by inverse CDF at the uniforms ``u`` (segment ``seg``, any shape)."""
        return self._draw(self.cum_p, self.last_p, u, seg)

    def draw_target(self, u, seg=None):
        return self._draw(self.cum_q, self.last_q, u, seg)

    def _prefix(self, w, seg):
        """(start, n, M): n(w) = #{x : r(x) > 1/w} in the segment, a prefix of its order by ratio, and the
        surplus mass M(w) = w Q_n − P_n on it (both 0 where w = 0)."""
        xp = self.xp
        lo, hi = self._segment(seg, w.shape)
        positive = w > 0
        threshold = xp.where(positive, -1.0 / xp.where(positive, w, 1.0), -math.inf)
        n = self._prefix_count(threshold, lo, hi, seg)
        last = xp.clip(lo + n - 1, min=0)
        mass = xp.where(n > 0, xp.clip(w * self.scum_q[last] - self.scum_p[last], min=0.0), 0.0)
        return lo, n, mass

    def _prefix_count(self, threshold, lo, hi, seg):
        return self._search(lambda j: self.neg_sorted[j] >= threshold, lo, hi) - lo

    def surplus_mass(self, w, seg=None):
        """M(w) = Σ_x (w q(x) − p(x))_+ for an array of weights 0 <= w <= 1."""
        return self.xp.where(w >= 1.0, self.total_variation(seg), self._prefix(w, seg)[2])

    def draw_surplus(self, w, u, seg=None):
        """One entry drawn from (w q − p)_+ per weight (w > 0 with positive surplus mass), by binary search."""
        lo, n, mass = self._prefix(w, seg)
        goal = u * mass
        j = self._search(lambda j: w * self.scum_q[j] - self.scum_p[j] > goal, lo, lo + n)
        return self.order[self.xp.minimum(j, lo + self.xp.clip(n - 1, min=0))]

    def total_variation(self, seg=None):
        """TV(p, q) of the segments ``seg`` (None: segment 0)."""
        return self.tv[seg] if seg is not None else self.tv[0]

    def tokens_of(self, entries):
        """The token ids of entries."""
        return self.tokens[entries]


class RowProfile(RowTables):
    """One (draft, target) row pair on numpy: validated float64 rows (V,), entries = token ids.

    Draws from p and q use scipy's guide tables (O(1) expected), the prefix of a weight a
    ``searchsorted`` in C; everything else is :class:`RowTables`.
    """

    def __init__(self, p: np.ndarray, q: np.ndarray):
        p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
        super().__init__([0, p.size], np.arange(p.size), p, q)
        # scipy.stats on first use: it takes about a second to import
        from scipy.stats.sampling import DiscreteGuideTable

        self._guide_p, self._guide_q = DiscreteGuideTable(p), DiscreteGuideTable(q)

    def draw_draft(self, u, seg=None):
        return self._guide_p.ppf(u).astype(np.int64)

    def draw_target(self, u, seg=None):
        return self._guide_q.ppf(u).astype(np.int64)

    def _prefix_count(self, threshold, lo, hi, seg):
        return np.searchsorted(self.neg_sorted, threshold, side="left")

    def surplus_mass(self, w, seg=None):
        out = np.where(w >= 1.0, self.tv[0], 0.0)  # w = 1, the common case, is a constant
        some = np.flatnonzero((w > 0) & (w < 1.0))
        if some.size:
            out[some] = self._prefix(w[some], None)[2]
        return out

    def tokens_of(self, entries):
        return entries


def _columns(at, width, xp, device):
    """Segment of each (iteration, position): ``at[b] + i`` for i < width, or None (one pair)."""
    if at is None:
        return None
    return at[:, None] + xp.arange(width, dtype=at.dtype, device=device)[None, :]


def _pick(seg, rows, cols):
    return None if seg is None else seg[rows, cols]


def sample_token(tables: RowTables, n: int, L: int, rng, at=None) -> RowFreeOutcome:
    """``n`` iterations of token verification (spec eq. (3)); iteration b reads segment ``at[b] + i`` at
    position i (``at``: int array (n,) in the tables' namespace, or None for one pair)."""
    xp, like = tables.xp, tables.ratio
    dev = array_api_compat.device(like)
    seg = _columns(at, L + 1, xp, dev)
    drafts = tables.draw_draft(uniform(rng, (n, L), like), None if seg is None else seg[:, :L])
    tau = first_rejection_sample(xp.clip(tables.ratio[drafts], max=1.0), rng)  # the verifier's own stopping rule
    rows = xp.arange(n, device=dev)
    y = tables.draw_target(uniform(rng, (n,), like), _pick(seg, rows, tau))  # the bonus row (or row τ)
    rejected = xp.nonzero(tau < L)[0]
    at_rej = _pick(seg, rejected, tau[rejected])
    pick = rejected[tables.total_variation(at_rej) > 0] if seg is not None else \
        (rejected if float(tables.total_variation()) > 0 else rejected[:0])
    if pick.shape[0]:
        at_pick = _pick(seg, pick, tau[pick])
        y[pick] = tables.draw_surplus(xp.ones(pick.shape[0], dtype=like.dtype, device=dev),
                                      uniform(rng, (pick.shape[0],), like), at_pick)
    return RowFreeOutcome(tau, tables.tokens_of(drafts), tables.tokens_of(y))


def sample_block(tables: RowTables, n: int, L: int, rng, at=None) -> RowFreeOutcome:
    """``n`` iterations of published block verification (eqs. (13)-(14)); ``at`` as in :func:`sample_token`."""
    xp, like = tables.xp, tables.ratio
    dev = array_api_compat.device(like)
    seg = _columns(at, L + 1, xp, dev)
    drafts = tables.draw_draft(uniform(rng, (n, L), like), None if seg is None else seg[:, :L])
    r = tables.ratio[drafts]
    w = running_weights(xp.where(r > 0, xp.log(xp.where(r > 0, r, 1.0)), -math.inf))  # the verifier's kernels
    mid = w[:, 1:L]
    m = xp.reshape(tables.surplus_mass(xp.reshape(mid, (-1,)),
                                       None if seg is None else xp.reshape(seg[:, 1:L], (-1,))), mid.shape)
    tau = last_pass_sample(commit_probs(w, m), rng)
    rows = xp.arange(n, device=dev)
    y = tables.draw_target(uniform(rng, (n,), like), _pick(seg, rows, tau))
    rej = xp.nonzero(tau < L)[0]
    if rej.shape[0]:
        scale, at_rej = w[rej, tau[rej]], _pick(seg, rej, tau[rej])
        live = tables.surplus_mass(scale, at_rej) > 0  # a surplus of mass 0: the target row, as the verifier does
        pick = rej[live]
        y[pick] = tables.draw_surplus(scale[live], uniform(rng, (pick.shape[0],), like),
                                      None if at_rej is None else at_rej[live])
    return RowFreeOutcome(tau, tables.tokens_of(drafts), tables.tokens_of(y))


ROW_FREE = {TokenVerify: sample_token, BlockVerify: sample_block}


def row_free_sampler(verifier):
    """The row-free sampler of ``verifier`` (exact class match), or None."""
    return ROW_FREE.get(type(verifier))
