r"""One multi-draft step without probability rows: k-Seq, multi-round (with and without replacement), naive.

:func:`~otspec.engine.montecarlo.simulate_candidates` on rows hands each verifier (B, V) rows; at
V = 32,000 and k = 2 that is about 4 ms per step. On an IID pair the rows never change, and what
each scheme reads from them is a few numbers per candidate, tabulated once (O(V log V) or O(kV)):

* **naive** (MCNS): Y ~ q, accepted iff Y is a candidate — two guide-table draws.
* **k-Seq** at ρ (ρ* by default): candidate i is accepted with min{1, r(x)/ρ}, r = q/p; after k
  rejections Y ~ res_ρ — the acceptance is a gather of r, res_ρ one guide table.
* **multi-round with replacement**: the residual after i rejections is (q − b_i p)_+ / C_i with
  b_0 = 0, C(b) = Σ_x (q(x) − b p(x))_+ and b_{i+1} = b_i + C(b_i) (induction on
  t ← Norm[(t − p)_+]), so round i accepts with min{1, (r(x) − b_{i−1})_+ / C(b_{i−1})}: a function
  of r only. C(b) is a prefix sum of the tokens sorted by r (:class:`RowProfile`).
* **multi-round without replacement**: round i drafts from p on the tokens not drafted yet,
  d_i = p / Z_i. A token never drafted keeps the residual numerator (q − b_i p)_+ with
  b_i = b_{i−1} + S_{i−1}/Z_i; a drafted token's numerator freezes at its value of the round it was
  drafted (d = 0 there afterwards); S_i is the sum of all numerators — C(b_i) corrected on the at
  most k drafted tokens. Round i accepts with min{1, (r(x) − b_{i−1})_+ Z_i / S_{i−1}}; Y after k
  rejections is drawn from the numerators, skipping drafted tokens by an exact search.

* **OTM-k with i.i.d. drafts**: the optimum α_k by selecting one candidate with a score rule whose law is
  tabulated, then single-draft speculative sampling of it (:mod:`otspec.engine.rowfree_otm`). It is an
  optimal coupling, not necessarily the plan :class:`~otspec.verifiers.OTMVerify` solves (optimal plans are
  not unique): the same acceptance and Y ~ q, the joint law of (accepted, Y) may differ. Without replacement
  OTM keeps its plan over the V^k candidate tuples.

Draws without replacement invert the CDF of p restricted to the tokens not drafted yet (no
rejection loop, so no hang when the drafted tokens hold almost all the mass).
"""

from __future__ import annotations

import numpy as np

from ..jit import available
from ..theory.multidraft import kseq_parameters
from ..verifiers.kseq import KSeq
from ..verifiers.multiround import MultiRound, MultiRoundWithoutReplacement
from ..verifiers.naive import NaiveMultiCandidate
from ..verifiers.otm import OTMVerify
from .rowfree import RowProfile

__all__ = ["ROW_FREE_CANDIDATES", "candidate_sampler", "has_row_free_candidates"]


def _guide(row: np.ndarray):
    # scipy.stats on first use: it takes about a second to import
    from scipy.stats.sampling import DiscreteGuideTable

    return DiscreteGuideTable(np.clip(row, 0.0, None) / np.clip(row, 0.0, None).sum())


def _first_hit(hit: np.ndarray) -> np.ndarray:
    """Index of the first True per row, k where none."""
    k = hit.shape[1]
    return np.where(hit.any(axis=1), np.argmax(hit, axis=1), k)


class _Sorted:
    """The tokens by descending r = q/p with cumulative q and p: C(b) and draws from (q − b p)_+, b per sample."""

    def __init__(self, prof: RowProfile):
        self.prof = prof
        self.rank = np.empty(prof.order.size, dtype=np.int64)
        self.rank[prof.order] = np.arange(prof.order.size)

    def count(self, b):
        """n(b) = #{x : r(x) > b}: a prefix of the order."""
        return np.searchsorted(self.prof.neg_sorted, -np.asarray(b, dtype=np.float64), side="left")

    def mass(self, b):
        """C(b) = Σ_x (q(x) − b p(x))_+ (b ≥ 0)."""
        n = self.count(b)
        last = np.clip(n - 1, 0, None)
        return np.where(n > 0, np.clip(self.prof.scum_q[last] - b * self.prof.scum_p[last], 0.0, None), 0.0)

    def cumulative(self, j, b):
        """Σ over the first j + 1 sorted tokens of (q − b p) (positive terms only where j < n(b))."""
        return self.prof.scum_q[j] - b * self.prof.scum_p[j]


def _skip_search(cum, weight_at, goal, drafted, n, hi):
    """Smallest position j < n with cum(j) − Σ_{d drafted, pos(d) ≤ j} w(d) > goal, elementwise.

    ``cum(j)`` (vectorised over rows) rises with j; ``weight_at`` is (B, m) — each drafted token's
    position in the order (``drafted``, -1 = none) and weight. A fixed point of "search past the
    drafted mass below" converges in at most m + 1 rounds; the answer is never a drafted token.
    """
    rows = np.arange(goal.size)
    extra = np.zeros(goal.size)
    j = np.zeros(goal.size, dtype=np.int64)
    for _ in range(drafted.shape[1] + 1):
        lo, top = np.zeros(goal.size, dtype=np.int64), n.copy()
        want = goal + extra
        for _ in range(int(hi).bit_length() + 1):  # binary search of cum(j) > want on [0, n)
            go = lo < top
            mid = (lo + top) // 2
            ok = (cum(np.clip(mid, 0, hi - 1), rows) > want) & go
            top = np.where(ok, mid, top)
            lo = np.where(go & ~ok, mid + 1, lo)
        j = np.minimum(lo, np.clip(n - 1, 0, None))
        new = np.where((drafted >= 0) & (drafted <= j[:, None]), weight_at, 0.0).sum(axis=1)
        if np.array_equal(new, extra):
            break
        extra = new
    return j


def _naive(prof, p, q, k, replacement):
    guide_q = _guide(q)
    draw = _draft_iid if replacement else _draft_without

    def sample(b, rng):
        cand = draw(prof, p, k, b, rng)
        y = guide_q.ppf(rng.random(b)).astype(np.int64)
        return (cand == y[:, None]).any(axis=1).astype(np.int64), y
    return sample


def _draft_iid(prof, p, k, b, rng):
    return prof.draw_draft(rng.random((b, k)))


def _draft_without(prof, p, k, b, rng):
    """k sequential draws from p without replacement (-1 once the support is exhausted), by exact inversion."""
    cum = np.cumsum(p)
    cand = np.full((b, k), -1, dtype=np.int64)
    taken = np.zeros(b)
    for i in range(min(k, int(np.count_nonzero(p)))):
        cand[:, i] = _draw_skipping(p, cum, cand[:, :i], np.clip(1.0 - taken, 0.0, None), rng)
        taken = taken + p[cand[:, i]]
    return cand


def _draw_skipping(p, cum, drafted, mass, rng):
    """One draw per row from p on the tokens not in ``drafted`` (-1 = none) of mass ``mass``, by exact inversion."""
    n = drafted.shape[0]
    weights = np.where(drafted >= 0, p[np.clip(drafted, 0, None)], 0.0)
    x = _skip_search(lambda j, rows: cum[j], weights, rng.random(n) * mass, drafted, np.full(n, p.size), p.size)
    return np.where(p[x] > 0, x, _last_live(p, drafted, x))


def _last_live(p, drafted, x):
    """A token of positive mass not drafted yet, for the rare draw that rounding put on a zero-mass token."""
    live = np.flatnonzero(p > 0)
    out = x.copy()
    for row in np.flatnonzero(p[x] <= 0):
        out[row] = live[~np.isin(live, drafted[row])][-1]
    return out


def _sequential(prof, k, accept_of, residual):
    """Schemes that test k i.i.d. candidates in order and return the first accepted one (else Y from ``residual``):
    ``accept_of(cand)`` gives each candidate's acceptance probability, (b, k)."""
    guide_res = _guide(residual)

    def sample(b, rng):
        cand = prof.draw_draft(rng.random((b, k)))
        first = _first_hit(rng.random((b, k)) < accept_of(cand))
        y_res = guide_res.ppf(rng.random(b)).astype(np.int64)
        hit = first < k
        return hit.astype(np.int64), np.where(hit, cand[np.arange(b), np.minimum(first, k - 1)], y_res)
    return sample


def _kseq(prof, p, q, k, rho):
    par = kseq_parameters(p[None, :], q[None, :], np.array([float(k)]), rho)
    accept = np.minimum(1.0, prof.ratio / float(par.rho[0]))
    return _sequential(prof, k, lambda cand: accept[cand], np.asarray(par.residual)[0])


def _multiround(prof, p, q, k):
    srt = _Sorted(prof)
    b_seq, c_seq = [0.0], []
    for _ in range(k):  # b_{i+1} = b_i + C(b_i); a round after a residual of mass 0 is never reached
        c = float(srt.mass(np.array([b_seq[-1]]))[0])
        c_seq.append(c)
        b_seq.append(b_seq[-1] + c)
    bs, cs = np.array(b_seq[:k]), np.array(c_seq)
    final = np.clip(q - b_seq[k] * p, 0.0, None)

    def accept_of(cand):
        return np.where(cs > 0, np.clip((prof.ratio[cand] - bs) / np.where(cs > 0, cs, 1.0), 0.0, 1.0), 1.0)
    return _sequential(prof, k, accept_of, final if final.sum() > 0 else q)


def _multiround_without(prof, p, q, k):
    srt = _Sorted(prof)
    support = int(np.count_nonzero(p))
    cum = np.cumsum(p)

    def sample(n, rng):
        bb, S, Z = np.zeros(n), np.ones(n), np.ones(n)
        drafted = np.full((n, k), -1, dtype=np.int64)  # the rejected candidates' token ids
        frozen = np.zeros((n, k))  # and their residual numerators, frozen when drafted
        done = np.zeros(n, dtype=bool)
        y = np.full(n, -1, dtype=np.int64)
        for i in range(min(k, support)):
            x = _draw_skipping(p, cum, drafted[:, :i], np.clip(Z, 0.0, None), rng)
            a = _acceptance_without(prof.ratio[x], bb, Z, S)
            hit = ~done & (rng.random(n) < a)
            y = np.where(hit, x, y)
            go = ~done & ~hit  # rejected now: the residual moves on (rows accepted earlier keep their state)
            done |= hit
            bb = np.where(go, bb + S / np.where(Z > 0, Z, 1.0), bb)
            drafted[:, i] = np.where(go, x, -1)
            frozen[:, i] = np.where(go, np.clip(q[x] - bb * p[x], 0.0, None), 0.0)
            Z = np.where(go, Z - p[x], Z)
            S = np.where(go, _total(srt, bb, drafted[:, :i + 1], frozen[:, :i + 1], p, q), S)
        rest = np.flatnonzero(~done)
        if rest.size:
            y[rest] = _draw_residual(srt, rng, bb[rest], drafted[rest], frozen[rest], p, q)
        return done.astype(np.int64), y
    return sample


def _acceptance_without(r, bb, Z, S):
    """min{1, t(x)/d(x)} of a round without replacement: t(x) = (q(x) − b p(x))_+ / S, d(x) = p(x) / Z."""
    return np.where(S > 0, np.clip((r - bb) * Z / np.where(S > 0, S, 1.0), 0.0, 1.0), 1.0)


def _undrafted(srt, bb, drafted, p, q):
    """Σ over the tokens not drafted of (q − b p)_+: C(b) less the drafted tokens' own terms."""
    ids = np.clip(drafted, 0, None)
    own = np.where(drafted >= 0, np.clip(q[ids] - bb[:, None] * p[ids], 0.0, None), 0.0).sum(axis=1)
    return np.clip(srt.mass(bb) - own, 0.0, None)


def _total(srt, bb, drafted, frozen, p, q):
    """S: every residual numerator summed — the undrafted tokens' (q − b p)_+ and the drafted tokens' frozen ones."""
    return _undrafted(srt, bb, drafted, p, q) + frozen.sum(axis=1)


def _draw_residual(srt, rng, bb, drafted, frozen, p, q):
    """Y from the residual numerators: an undrafted token ∝ (q − b p)_+, or a drafted one ∝ its frozen value."""
    free = _undrafted(srt, bb, drafted, p, q)
    total = free + frozen.sum(axis=1)
    goal = rng.random(bb.size) * total
    out = np.empty(bb.size, dtype=np.int64)
    atoms = goal >= free  # the goal falls among the drafted tokens' frozen masses
    if atoms.any():
        cum = np.cumsum(frozen[atoms], axis=1)
        pick = np.minimum((cum <= (goal[atoms] - free[atoms])[:, None]).sum(axis=1), frozen.shape[1] - 1)
        pick = np.where(frozen[atoms][np.arange(pick.size), pick] > 0, pick, np.argmax(frozen[atoms] > 0, axis=1))
        out[atoms] = drafted[atoms][np.arange(pick.size), pick]
    some = np.flatnonzero(~atoms)
    if some.size:
        b = bb[some]
        positions = np.where(drafted[some] >= 0, srt.rank[np.clip(drafted[some], 0, None)], -1)
        ids = np.clip(drafted[some], 0, None)
        weights = np.where(drafted[some] >= 0, np.clip(q[ids] - b[:, None] * p[ids], 0.0, None), 0.0)
        j = _skip_search(lambda j, rows: srt.cumulative(j, b[rows]), weights, goal[some], positions, srt.count(b),
                         p.size)
        out[some] = srt.prof.order[j]
    return out


def _without_replacement(prof, p, q, k):
    """Multi-round without replacement: the compiled kernel (:mod:`otspec.engine.compiled_multi`) where numba is
    installed, else the numpy recursion above (the same law; the tests check both)."""
    if not available():
        return _multiround_without(prof, p, q, k)
    from .compiled_multi import multiround_without_sampler  # loads numba: only where it runs

    return multiround_without_sampler(prof, p, q, k)


def _otm(prof, p, q, k):
    from .rowfree_otm import otm_step_sampler  # loads numba: only where it runs

    return otm_step_sampler(prof, p, q, k)


#: The verifiers with a row-free sampler, and how each is built from (profile, p, q, k, verifier); OTM only with
#: i.i.d. drafts (:func:`has_row_free_candidates`).
ROW_FREE_CANDIDATES = {
    NaiveMultiCandidate: lambda prof, p, q, k, v: _naive(prof, p, q, k, v.replacement),
    KSeq: lambda prof, p, q, k, v: _kseq(prof, p, q, k, v.rho),
    MultiRound: lambda prof, p, q, k, v: _multiround(prof, p, q, k),
    MultiRoundWithoutReplacement: lambda prof, p, q, k, v: _without_replacement(prof, p, q, k),
    OTMVerify: lambda prof, p, q, k, v: _otm(prof, p, q, k),
}


def has_row_free_candidates(verifier) -> bool:
    """Whether :func:`candidate_sampler` has a row-free sampler for ``verifier``."""
    return type(verifier) in ROW_FREE_CANDIDATES and (not isinstance(verifier, OTMVerify) or verifier.replacement)


def candidate_sampler(verifier, p: np.ndarray, q: np.ndarray, k: int):
    """``sample(b, rng) -> (accepted (b,), Y (b,))`` drawing b steps of ``verifier`` with k candidates from the
    validated rows p, q (drawn as the verifier requires), or None where no row-free sampler exists."""
    if not has_row_free_candidates(verifier):
        return None
    return ROW_FREE_CANDIDATES[type(verifier)](RowProfile(p, q), p, q, k, verifier)
