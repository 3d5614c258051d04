"""Token-level multi-draft verifiers: k candidate tokens drafted at one position.

Specs: ``shared/reference/multi_draft_otm.md`` §2 (OTM-k), §4 (k-Seq), §8 (multi-round
rejection sampling and the naive MCNS scheme); ``shared/reference/mcsd.md`` §4 (MCSS
Algorithms 1–2). Convention: **p is the draft distribution, q the target** (MCSD swaps the
letters; everything here is translated).

Protocol
--------
One position, B independent rows. Inputs::

    candidates    int   (B, k)   the drafted tokens X_1..X_k in sampling order; -1 = no candidate
    draft_probs   float (B, V)   p at this node
    target_probs  float (B, V)   q at this node

A candidate of ``-1`` is skipped by every verifier. It is what :func:`sample_candidates`
writes once sampling without replacement has exhausted the draft support; it also lets rows
with different numbers of candidates share one batch (k-Seq then uses the row's own count of
real candidates as its k).

* :meth:`MultiDraftVerifier.law` returns the exact conditional law of the output token Y given
  the candidates, split by whether a candidate was accepted (:class:`MultiDraftLaw`);
* :meth:`MultiDraftVerifier.sample` draws one outcome per row, vectorised over the batch
  (:class:`MultiDraftOutcome`).

Each verifier is lossless — Y is exactly q-distributed once the candidates are averaged over —
provided the candidates are drawn as its :attr:`~MultiDraftVerifier.replacement` attribute says:
i.i.d. from p (``True``) or sequentially without replacement from p (``False``).
:func:`sample_candidates` draws them either way and :func:`candidate_tuple_law` enumerates the
law of the tuple for exact tests.

"Accepted" means the verifier returned one of the candidates by its acceptance rule. For the
sequential verifiers (k-Seq, multi-round) a token drawn from the residual after all candidates
were rejected counts as *rejected* even when it happens to equal a candidate; for the naive
scheme and OTM, accepted ⇔ Y ∈ S(candidates).

numpy and torch inputs are supported through :mod:`array_api_compat` (results come back in
the input's namespace and device), except :class:`OTMVerify`, which solves a linear programme
per distinct (p, q) row pair and is numpy-only.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import array_api_compat
import numpy as np

from ..distributions import (
    check_same_vocab,
    first_index,
    namespace,
    residual,
    sample_categorical,
    uniform,
    validate_probs,
)

__all__ = [
    "MultiDraftLaw",
    "MultiDraftOutcome",
    "MultiDraftVerifier",
    "SequentialMultiDraftVerifier",
    "KSeq",
    "KSeqParameters",
    "MultiRound",
    "MultiRoundWithoutReplacement",
    "NaiveMultiCandidate",
    "OTMVerify",
    "MULTI_DRAFT_REGISTRY",
    "check_multi_draft",
    "candidate_tuple_law",
    "sample_candidates",
    "kseq_parameters",
    "kseq_rho_star",
]

#: Tolerance of the k-Seq residual check: entries of (9)'s numerator above ``-tol`` are clipped
#: to 0, below it the call raises. Widened to ``64 * eps`` for dtypes narrower than float64.
RESIDUAL_TOL = 1e-12
#: Bisection accuracy of ρ* (spec eq. (10)).
RHO_TOL = 1e-12
#: Default bound on V**k for :class:`OTMVerify` (the LP has V**(k+1) variables).
OTM_MAX_TUPLES = 4096


# ---------------------------------------------------------------------------- results
@dataclass
class MultiDraftLaw:
    """Exact conditional law of a multi-draft verifier's output given the candidates.

    Attributes
    ----------
    accepted : array, shape (B, V)
        ``accepted[b, y]`` = P(Y = y and a candidate was accepted | candidates of row b).
    rejected : array, shape (B, V)
        ``rejected[b, y]`` = P(Y = y and no candidate was accepted | candidates of row b)
        (Y then comes from the verifier's residual).
    """

    accepted: Any
    rejected: Any

    @property
    def output(self):
        """Law of Y given the candidates, shape (B, V)."""
        return self.accepted + self.rejected

    @property
    def acceptance(self):
        """P(a candidate is accepted | candidates), shape (B,)."""
        return namespace(self.accepted).sum(self.accepted, axis=-1)


@dataclass
class MultiDraftOutcome:
    """One sampled verification outcome per row.

    Attributes
    ----------
    token : int array, shape (B,)
        The emitted token Y.
    accepted : bool array, shape (B,)
        Whether Y is an accepted candidate.
    index : int array, shape (B,)
        Position in ``candidates`` of the accepted candidate (``candidates[b, index[b]] ==
        token[b]``), or -1 when no candidate was accepted.
    """

    token: Any
    accepted: Any
    index: Any


# ------------------------------------------------------------------------ validation
def _device(x):
    return array_api_compat.device(x)


def _gather(rows, candidates):
    """``rows[b, candidates[b, i]]``, shape (B, k); 0 where the candidate is -1."""
    xp = namespace(rows)
    valid = candidates >= 0
    safe = xp.astype(xp.where(valid, candidates, xp.zeros_like(candidates)), xp.int64)
    vals = xp.take_along_axis(rows, safe, axis=-1)
    return xp.where(valid, vals, xp.zeros_like(vals))


def _one_hot(tokens, V, like):
    """(B, V) rows of ``like``'s dtype with a 1 at each token (all zero for -1)."""
    xp = namespace(like)
    ids = xp.arange(V, device=_device(like))
    return xp.astype(tokens[:, None] == ids, like.dtype)


def check_multi_draft(candidates, draft_probs, target_probs, *, validate: bool = True):
    """Validate multi-draft verifier inputs and return them (rows renormalised).

    Raises ``ValueError`` naming the offending argument for: ``candidates`` not of shape
    (B, k) or not integer; probability rows of the wrong shape (each must be (B, V)), with
    different vocabularies, NaN/inf, negative entries or sums away from 1; candidate ids
    outside [-1, V); a candidate with zero draft probability (the message names the row and
    the position). With ``validate=False`` the inputs are returned unchanged.
    """
    if not array_api_compat.is_array_api_obj(candidates):
        candidates = np.asarray(candidates)
    if not validate:
        return candidates, draft_probs, target_probs
    if getattr(candidates, "ndim", None) != 2:
        raise ValueError(f"candidates: expected shape (batch, k), got {tuple(getattr(candidates, 'shape', ()))}")
    B, k = candidates.shape
    draft_probs = validate_probs(draft_probs, "draft_probs", min_ndim=2)
    target_probs = validate_probs(target_probs, "target_probs", min_ndim=2)
    V = check_same_vocab(draft_probs, target_probs, "draft_probs", "target_probs")
    for name, rows in (("draft_probs", draft_probs), ("target_probs", target_probs)):
        if tuple(rows.shape) != (B, V):
            raise ValueError(f"{name}: expected shape (batch, V) = {(B, V)}, got {tuple(rows.shape)}")
    xp = namespace(draft_probs)
    if not xp.isdtype(candidates.dtype, "integral"):
        raise ValueError(f"candidates: expected integer token ids, got dtype {candidates.dtype}")
    if k and (bool(xp.any(candidates < -1)) or bool(xp.any(candidates >= V))):
        raise ValueError(f"candidates: ids must lie in [-1, {V}) (-1 = no candidate)")
    if k:
        zero = (candidates >= 0) & (_gather(draft_probs, candidates) <= 0)
        if bool(xp.any(zero)):
            b, i = first_index(zero)
            raise ValueError(
                f"draft_probs gives probability 0 to candidate {int(candidates[b, i])} "
                f"(row {b}, position {i}); a candidate must have positive draft probability"
            )
    return candidates, draft_probs, target_probs


def _check_no_repeats(candidates, what: str):
    xp = namespace(candidates)
    k = candidates.shape[1]
    for i in range(k):
        for j in range(i + 1, k):
            rep = (candidates[:, i] == candidates[:, j]) & (candidates[:, i] >= 0)
            if bool(xp.any(rep)):
                (b,) = first_index(rep)
                raise ValueError(
                    f"candidates: token {int(candidates[b, i])} repeated in row {b} (positions {i} and {j}); "
                    f"{what} needs candidates drawn without replacement"
                )


# --------------------------------------------------------------------- draft tuples
def sample_candidates(draft_probs, k: int, rng, replacement: bool = True):
    """Draw k candidates per row of ``draft_probs`` (B, V) → int (B, k).

    ``replacement=True``: i.i.d. from p. ``replacement=False``: sequentially without
    replacement (candidate i from p restricted to the tokens not drawn yet, renormalised;
    MCSD eq. (1)); once the draft support is exhausted the remaining slots are -1.
    ``rng`` is a numpy ``Generator`` or a ``torch.Generator``.
    """
    k = int(k)
    if k < 0:
        raise ValueError(f"k: expected a non-negative number of candidates, got {k}")
    p = validate_probs(draft_probs, "draft_probs", min_ndim=2)
    if p.ndim != 2:
        raise ValueError(f"draft_probs: expected shape (batch, V), got {tuple(p.shape)}")
    xp = namespace(p)
    B, V = p.shape
    if k == 0:
        return xp.zeros((B, 0), dtype=xp.int64, device=_device(p))
    if replacement:
        u = uniform(rng, (B, k), p)
        return xp.astype(sample_categorical(xp.broadcast_to(p[:, None, :], (B, k, V)), rng, u), xp.int64)
    drafted = xp.zeros((B, V), dtype=p.dtype, device=_device(p))
    out = []
    for _ in range(k):
        w = p * (1.0 - drafted)
        x = xp.astype(sample_categorical(w, rng), xp.int64)
        x = xp.where(xp.sum(w, axis=-1) > 0, x, xp.full_like(x, -1))
        drafted = drafted + _one_hot(x, V, p)
        out.append(x)
    return xp.stack(out, axis=1)


def candidate_tuple_law(draft_probs_row, k: int, replacement: bool = True, *, max_tuples: int = 10**6):
    """All candidate tuples of positive probability and their probabilities (numpy).

    Returns ``(tuples, probs)``: int64 (M, k) in lexicographic order over the draft support,
    and float64 (M,) summing to 1. With replacement P(x^k) = ∏ p(x_i); without replacement
    P(x^k) = ∏ p(x_i) / p(Ω ∖ {x_1..x_{i-1}}), padded with -1 once the support is exhausted
    (so every tuple has length k).
    """
    from ..solvers.otm import draft_tuple_law  # the one exact enumerator of draft tuples

    p = np.asarray(validate_probs(np.asarray(draft_probs_row, dtype=np.float64), "draft_probs_row"))
    if p.ndim != 1:
        raise ValueError(f"draft_probs_row: expected one row of shape (V,), got {p.shape}")
    k, s = int(k), int(np.count_nonzero(p))
    count = s**k if replacement else math.perm(s, min(k, s))
    if count > max_tuples:
        raise ValueError(f"candidate_tuple_law: {count} tuples exceed max_tuples={max_tuples}")
    return draft_tuple_law(p, k, replacement)


# ---------------------------------------------------------------------- base classes
class MultiDraftVerifier(ABC):
    """Base class of token-level multi-draft verifiers; see the module docstring for shapes."""

    #: Short identifier used in reports and the CLI.
    name: str = "multi"
    #: How the candidates must be drawn for the verifier to be lossless: i.i.d. from p (True) or
    #: sequentially without replacement (False); see :func:`sample_candidates`.
    replacement: bool = True
    #: Whether the output token is exactly target-distributed (for that draft mode).
    lossless: bool = True

    @abstractmethod
    def law(self, candidates, draft_probs, target_probs, *, validate: bool = True) -> MultiDraftLaw:
        """Exact law of (Y, accepted) given each row's candidates."""

    @abstractmethod
    def sample(self, candidates, draft_probs, target_probs, rng, *, validate: bool = True) -> MultiDraftOutcome:
        """One outcome per row; ``rng`` is a numpy ``Generator`` or a ``torch.Generator``."""

    def __repr__(self):
        return f"{type(self).__name__}()"


class SequentialMultiDraftVerifier(MultiDraftVerifier):
    """Verifiers that test candidates in order and return the first accepted one.

    Subclasses supply :meth:`acceptance_plan`: the probability a_i of accepting candidate i
    given that candidates 1..i-1 were rejected (0 for a -1 slot), and the residual row that Y
    is drawn from when every candidate is rejected. Then (spec eq. (9b))::

        P(return candidate i | x^k) = a_i ∏_{j<i} (1 − a_j),   P(all rejected | x^k) = ∏_j (1 − a_j)
    """

    @abstractmethod
    def acceptance_plan(self, candidates, draft_probs, target_probs):
        """(a, residual): acceptance probabilities (B, k) and the residual rows (B, V)."""

    def _checked(self, candidates, draft_probs, target_probs, validate):
        return check_multi_draft(candidates, draft_probs, target_probs, validate=validate)

    def law(self, candidates, draft_probs, target_probs, *, validate=True):
        candidates, p, q = self._checked(candidates, draft_probs, target_probs, validate)
        xp = namespace(p, q)
        a, res = self.acceptance_plan(candidates, p, q)
        B, V = p.shape
        survive = xp.ones((B,), dtype=p.dtype, device=_device(p))
        accepted = xp.zeros_like(p)
        for i in range(candidates.shape[1]):
            accepted = accepted + (survive * a[:, i])[:, None] * _one_hot(candidates[:, i], V, p)
            survive = survive * (1.0 - a[:, i])
        return MultiDraftLaw(accepted, survive[:, None] * res)

    def sample(self, candidates, draft_probs, target_probs, rng, *, validate=True):
        candidates, p, q = self._checked(candidates, draft_probs, target_probs, validate)
        xp = namespace(p, q)
        a, res = self.acceptance_plan(candidates, p, q)
        B, k = candidates.shape
        y_res = xp.astype(sample_categorical(res, rng), xp.int64)
        if k == 0:
            return MultiDraftOutcome(y_res, xp.zeros((B,), dtype=xp.bool, device=_device(p)), xp.full_like(y_res, -1))
        hit = uniform(rng, (B, k), p) < a  # a = 0 on -1 slots, so they never hit
        stop = xp.concat([hit, xp.ones((B, 1), dtype=xp.bool, device=_device(p))], axis=-1)
        first = xp.astype(xp.argmax(xp.astype(stop, xp.int8), axis=-1), xp.int64)  # k if none
        accepted = first < k
        chosen = xp.take_along_axis(xp.astype(candidates, xp.int64), xp.clip(first, max=k - 1)[:, None], axis=-1)[:, 0]
        return MultiDraftOutcome(
            xp.where(accepted, chosen, y_res), accepted, xp.where(accepted, first, xp.full_like(first, -1))
        )


# ----------------------------------------------------------------------------- k-Seq
@dataclass
class KSeqParameters:
    """Per-row k-Seq quantities (spec eqs. (8)–(10)), each of shape (B,) except ``residual`` (B, V)."""

    rho: Any
    beta: Any
    p_acc: Any
    residual: Any


def _as_row_vector(k, like):
    xp = namespace(like)
    if array_api_compat.is_array_api_obj(k):
        return xp.astype(xp.asarray(k, device=_device(like)), like.dtype)
    return xp.full((like.shape[0],), float(k), dtype=like.dtype, device=_device(like))


def _kseq_f(p, q, k, rho):
    """f(ρ) = 1 − (1 − β(ρ))^k − ρ β(ρ) (eq. (10)) and β(ρ), row-wise."""
    xp = namespace(p, q)
    beta = xp.sum(xp.minimum(p, q / rho[:, None]), axis=-1)
    return 1.0 - (1.0 - beta) ** k - rho * beta, beta


def kseq_rho_star(draft_probs, target_probs, k, *, tol: float = RHO_TOL):
    """ρ* per row: the root of eq. (10) on [1, min(k, max_x q(x)/p(x))] by bisection, shape (B,).

    ``draft_probs`` and ``target_probs`` are (B, V) probability rows (not re-validated); ``k``
    is an int or a (B,) array of candidate counts. The returned value is the upper end of the
    final bracket, so f(ρ) ≤ 0 and the residual (9) is non-negative. Rows with f(1) ≤ 0 —
    k ≤ 1, TV(p, q) = 0 or disjoint supports (β ≡ 0) — get ρ = 1.
    """
    p, q = draft_probs, target_probs
    xp = namespace(p, q)
    k = _as_row_vector(k, p)
    inf = xp.full_like(p, math.inf)
    ratio = xp.where(p > 0, q / xp.where(p > 0, p, xp.ones_like(p)), xp.where(q > 0, inf, xp.zeros_like(p)))
    ones = xp.ones_like(k)
    lo = ones
    hi = xp.maximum(xp.minimum(k, xp.max(ratio, axis=-1)), ones)  # f(hi) <= 0 (SpecTr Lemma 4)
    width = float(xp.max(hi - lo)) if hi.shape[0] else 0.0
    steps = math.ceil(math.log2(width / tol)) if width > tol else 0
    for _ in range(steps):  # a row stops once its own bracket is below tol: batch-independent
        mid = 0.5 * (lo + hi)
        live = (hi - lo) > tol
        down = _kseq_f(p, q, k, mid)[0] <= 0
        hi = xp.where(live & down, mid, hi)
        lo = xp.where(live & ~down, mid, lo)
    at_one = (_kseq_f(p, q, k, ones)[0] <= 0) | (k <= 1)
    return xp.where(at_one, ones, hi)


def kseq_parameters(draft_probs, target_probs, k, rho=None) -> KSeqParameters:
    """ρ, β(ρ), p_acc(ρ) = 1 − (1 − β)^k and the residual res_ρ (eq. (9)) for each row.

    ``rho`` defaults to :func:`kseq_rho_star`; a float or a (B,) array may be given instead.
    Raises ``ValueError`` if the residual numerator q − min(p, q/ρ)·p_acc/β has an entry below
    −1e-12 (ρ < ρ*: k-Seq would not be a valid transport plan); entries above are clipped to 0
    and the residual is renormalised. Where every candidate is surely accepted (p_acc = 1) or
    β = 0 the residual is q.
    """
    p, q = draft_probs, target_probs
    xp = namespace(p, q)
    k = _as_row_vector(k, p)
    if rho is None:
        rho = kseq_rho_star(p, q, k)
    else:
        rho = _as_row_vector(rho, p)
    beta = xp.sum(xp.minimum(p, q / rho[:, None]), axis=-1)
    p_acc = 1.0 - (1.0 - beta) ** k
    scale = xp.where(beta > 0, p_acc / xp.where(beta > 0, beta, xp.ones_like(beta)), xp.zeros_like(beta))
    num = q - xp.minimum(p, q / rho[:, None]) * scale[:, None]
    tol = max(RESIDUAL_TOL, 64.0 * float(xp.finfo(p.dtype).eps))
    neg = num < -tol
    if bool(xp.any(neg)):
        b, x = first_index(neg)
        raise ValueError(
            f"k-Seq residual is negative ({float(num[b, x]):.3g} at row {b}, token {x}) for rho = "
            f"{float(rho[b]):.6g}: rho must be at least rho* (eq. (10)) for k-Seq to be lossless"
        )
    num = xp.clip(num, min=0.0)
    mass = xp.sum(num, axis=-1, keepdims=True)
    res = xp.where(mass > 0, num / xp.where(mass > 0, mass, xp.ones_like(mass)), q)
    return KSeqParameters(rho, beta, p_acc, res)


class KSeq(SequentialMultiDraftVerifier):
    """k-Seq (SpecTr Algorithm 2, spec §4): sequential selection with division factor ρ.

    Candidate X_i is accepted with probability a(X_i) = min{1, q(X_i) / (ρ p(X_i))}; the first
    accepted one is returned; if all k are rejected Y ~ res_ρ (eq. (9)). ρ defaults to ρ*
    (eq. (10)) computed per row. Lossless for candidates drawn i.i.d. from p; k is the row's
    number of real (non -1) candidates.

    Parameters
    ----------
    rho : float, optional
        Fixed division factor ρ ≥ 1 instead of ρ*. A ρ below ρ* makes the residual negative
        and the call raises ``ValueError``.
    """

    name = "kseq"
    replacement = True

    def __init__(self, rho: float | None = None):
        if rho is not None and not (float(rho) >= 1.0 and math.isfinite(float(rho))):
            raise ValueError(f"rho: expected a finite division factor >= 1, got {rho!r}")
        self.rho = None if rho is None else float(rho)

    def parameters(self, candidates, draft_probs, target_probs) -> KSeqParameters:
        """:func:`kseq_parameters` with k = each row's number of real candidates."""
        xp = namespace(draft_probs, target_probs)
        k = xp.sum(xp.astype(candidates >= 0, draft_probs.dtype), axis=-1)
        return kseq_parameters(draft_probs, target_probs, k, self.rho)

    def acceptance_plan(self, candidates, draft_probs, target_probs):
        xp = namespace(draft_probs, target_probs)
        par = self.parameters(candidates, draft_probs, target_probs)
        p_x = _gather(draft_probs, candidates)
        q_x = _gather(target_probs, candidates)
        ok = (candidates >= 0) & (p_x > 0)
        ratio = q_x / (par.rho[:, None] * xp.where(ok, p_x, xp.ones_like(p_x)))
        return xp.where(ok, xp.minimum(ratio, 1.0), xp.zeros_like(p_x)), par.residual

    def __repr__(self):
        return "KSeq()" if self.rho is None else f"KSeq(rho={self.rho!r})"


# ----------------------------------------------------------------------- multi-round
class MultiRound(SequentialMultiDraftVerifier):
    """Multi-round rejection sampling with replacement (SpecInfer; MCSD Algorithm 1; spec §8).

    t ← q; for each candidate X_i: accept with probability min{1, t(X_i)/p(X_i)}, else
    t ← Norm[(t − p)_+]; after k rejections Y ~ t. Lossless for i.i.d. candidates.
    """

    name = "multiround"
    replacement = True

    def acceptance_plan(self, candidates, draft_probs, target_probs):
        xp = namespace(draft_probs, target_probs)
        p = draft_probs
        t = target_probs
        a = []
        for i in range(candidates.shape[1]):
            c = candidates[:, i : i + 1]
            valid = c[:, 0] >= 0
            p_x = _gather(p, c)[:, 0]
            t_x = _gather(t, c)[:, 0]
            ok = valid & (p_x > 0)
            a.append(xp.where(ok, xp.minimum(t_x / xp.where(ok, p_x, xp.ones_like(p_x)), 1.0), xp.zeros_like(p_x)))
            t = xp.where(valid[:, None], residual(t, p), t)
        return _stack_columns(a, p), t


class MultiRoundWithoutReplacement(SequentialMultiDraftVerifier):
    """Multi-round rejection sampling without replacement (MCSD Algorithm 2; spec §8).

    t ← q, d ← p; for each candidate X_i: accept with probability min{1, t(X_i)/d(X_i)}, else
    t ← Norm[(t − d)_+] and d ← p restricted to the tokens not yet drafted, renormalised; after
    k rejections Y ~ t. Lossless for candidates drawn sequentially without replacement (-1
    slots after the support is exhausted are skipped). With ``validate=True`` a repeated
    candidate is an error.
    """

    name = "multiround_without_replacement"
    replacement = False

    def _checked(self, candidates, draft_probs, target_probs, validate):
        out = check_multi_draft(candidates, draft_probs, target_probs, validate=validate)
        if validate:
            _check_no_repeats(out[0], type(self).__name__)
        return out

    def acceptance_plan(self, candidates, draft_probs, target_probs):
        xp = namespace(draft_probs, target_probs)
        p = draft_probs
        V = p.shape[1]
        t, d = target_probs, p
        drafted = xp.zeros_like(p)
        a = []
        for i in range(candidates.shape[1]):
            c = candidates[:, i : i + 1]
            valid = c[:, 0] >= 0
            d_x = _gather(d, c)[:, 0]
            t_x = _gather(t, c)[:, 0]
            ok = valid & (d_x > 0)
            a.append(xp.where(ok, xp.minimum(t_x / xp.where(ok, d_x, xp.ones_like(d_x)), 1.0), xp.zeros_like(d_x)))
            t = xp.where(valid[:, None], residual(t, d), t)
            drafted = xp.clip(drafted + _one_hot(c[:, 0], V, p), max=1.0)
            left = p * (1.0 - drafted)  # recomputed from p each round: no accumulated rounding
            mass = xp.sum(left, axis=-1, keepdims=True)
            d = xp.where(mass > 0, left / xp.where(mass > 0, mass, xp.ones_like(mass)), xp.zeros_like(p))
        return _stack_columns(a, p), t


def _stack_columns(cols, like):
    xp = namespace(like)
    if not cols:
        return xp.zeros((like.shape[0], 0), dtype=like.dtype, device=_device(like))
    return xp.stack(cols, axis=1)


# ----------------------------------------------------------------------------- naive
class NaiveMultiCandidate(MultiDraftVerifier):
    """Naive multi-candidate sampling, MCNS (MCSD §4.3; spec §8).

    Y ~ q independently of the candidates; accepted iff Y ∈ S(candidates), otherwise Y is
    emitted as the correction. Y is exactly q-distributed whatever the law of the candidates,
    so it is lossless for i.i.d. and without-replacement drafts alike (``replacement = True``
    is only the default pairing). Acceptance Σ_y q(y)·1{y ∈ S}.
    """

    name = "naive"
    replacement = True

    def law(self, candidates, draft_probs, target_probs, *, validate=True):
        candidates, _, q = check_multi_draft(candidates, draft_probs, target_probs, validate=validate)
        member = _membership(candidates, q)
        return MultiDraftLaw(q * member, q * (1.0 - member))

    def sample(self, candidates, draft_probs, target_probs, rng, *, validate=True):
        candidates, _, q = check_multi_draft(candidates, draft_probs, target_probs, validate=validate)
        y = namespace(q).astype(sample_categorical(q, rng), namespace(q).int64)
        return _membership_outcome(candidates, y)


def _membership(candidates, like):
    """1{y ∈ S(candidates)} as (B, V) rows of ``like``'s dtype."""
    xp = namespace(like)
    member = xp.zeros_like(like)
    for i in range(candidates.shape[1]):
        member = xp.maximum(member, _one_hot(candidates[:, i], like.shape[-1], like))
    return member


def _membership_outcome(candidates, y):
    """Outcome for "accepted iff Y ∈ S": index = first position holding Y."""
    xp = namespace(y)
    B, k = candidates.shape
    if k == 0:
        return MultiDraftOutcome(y, xp.zeros((B,), dtype=xp.bool, device=_device(y)), xp.full_like(y, -1))
    match = xp.astype(candidates, xp.int64) == y[:, None]
    accepted = xp.any(match, axis=-1)
    first = xp.astype(xp.argmax(xp.astype(match, xp.int8), axis=-1), xp.int64)
    return MultiDraftOutcome(y, accepted, xp.where(accepted, first, xp.full_like(first, -1)))


# ------------------------------------------------------------------------------- OTM
def _encode(tuples, V):
    """Integer code of each row of an int (M, k) array with entries in [-1, V)."""
    weights = (V + 1) ** np.arange(tuples.shape[1], dtype=np.int64)
    return (tuples.astype(np.int64) + 1) @ weights


def _otm_lp(tuples, probs, target):
    """Optimal plan of the membership-cost transport (spec eq. (3)) over the given tuples.

    Solved in its max-flow form (spec §3), which has the same optimum and is smaller and
    better conditioned: tuples are merged by their candidate set S (tuples with equal S are
    interchangeable), and an LP (HiGHS dual simplex, presolve off — spec §2 implementation
    note — with feasibility tolerances 1e-10) maximises the accepted flow Σ f(S, y) over
    y ∈ S subject to Σ_y f(S, ·) ≤ P_D(S) and Σ_S f(·, y) ≤ q(y). The flow is clipped back
    inside those bounds (the solver may overshoot by its tolerance, which matters for tuple
    masses below it) and the unaccepted mass is coupled independently,
    π_rest(S, y) = r(S)·c(y)/Σc, so both marginals hold to rounding whatever the solver's
    tolerance. Returns the (M, V) plan over the input tuples.
    """
    from scipy import sparse
    from scipy.optimize import linprog

    V = target.shape[0]
    member = (tuples[:, :, None] == np.arange(V)).any(axis=1)  # (M, V)
    sets, inverse = np.unique(member, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    mass = np.bincount(inverse, weights=probs, minlength=len(sets))
    g_idx, y_idx = np.nonzero(sets)  # one flow variable per (set, token in the set)
    n = g_idx.size
    flow = np.zeros((len(sets), V))
    if n:
        cols = np.arange(n)
        a_ub = sparse.vstack([sparse.csr_matrix((np.ones(n), (g_idx, cols)), shape=(len(sets), n)),
                              sparse.csr_matrix((np.ones(n), (y_idx, cols)), shape=(V, n))]).tocsr()
        res = linprog(-np.ones(n), A_ub=a_ub, b_ub=np.concatenate([mass, target]), bounds=(0, None),
                      method="highs-ds", options={"presolve": False, "primal_feasibility_tolerance": 1e-10,
                                                  "dual_feasibility_tolerance": 1e-10})
        if res.status != 0:
            raise RuntimeError(f"OTM linear programme failed: {res.message}")
        flow[g_idx, y_idx] = np.clip(res.x, 0.0, None)
    # back inside the bounds: rows first, then columns (which only lowers row sums further)
    rows = flow.sum(1)
    flow *= np.where(rows > mass, mass / np.where(rows > 0, rows, 1.0), 1.0)[:, None]
    cols = flow.sum(0)
    flow *= np.where(cols > target, target / np.where(cols > 0, cols, 1.0), 1.0)[None, :]
    r = np.clip(mass - flow.sum(1), 0.0, None)
    c = np.clip(target - flow.sum(0), 0.0, None)
    plan_sets = flow + (np.outer(r, c) / c.sum() if c.sum() > 0 else 0.0)
    # split each set's row among its tuples in proportion to their probabilities
    share = probs / np.where(mass[inverse] > 0, mass[inverse], 1.0)
    return plan_sets[inverse] * share[:, None]


class OTMVerify(MultiDraftVerifier):
    """The optimal multi-draft coupling OTM-k (SpecTr §5; spec §2): Y ~ π(x^k, ·)/P_D(x^k).

    For each distinct (p, q) row pair the optimal plan π between the candidate-tuple law P_D
    (i.i.d. or without replacement, per ``replacement``) and q is solved as a linear programme
    (eq. (3); cached by the rows' bytes); Y is drawn from the plan's row of the given tuple and
    accepted iff Y ∈ S(x^k). Its expected acceptance is the optimum α_k. numpy-only, for small
    problems: V**k may not exceed ``max_tuples``.

    Parameters
    ----------
    replacement : bool
        Draft mode the plan is built for (the candidates must be drawn that way).
    max_tuples : int
        Largest V**k accepted (the LP has V**(k+1) variables).
    """

    name = "otm"

    def __init__(self, replacement: bool = True, max_tuples: int = OTM_MAX_TUPLES, cache_size: int = 1024):
        self.replacement = bool(replacement)
        self.max_tuples = int(max_tuples)
        self.cache_size = int(cache_size)
        self._cache: dict = {}

    def __repr__(self):
        return f"OTMVerify(replacement={self.replacement})"

    def plan(self, draft_row, target_row, k: int):
        """(tuples (M, k), plan (M, V)): the optimal plan for one (p, q) pair, rows = tuples.

        ``tuples`` are those of positive probability (:func:`candidate_tuple_law`); the row
        sums of ``plan`` are their probabilities and its column sums are q.
        """
        p = np.ascontiguousarray(draft_row, dtype=np.float64)
        q = np.ascontiguousarray(target_row, dtype=np.float64)
        key = (p.tobytes(), q.tobytes(), int(k))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        V = p.shape[0]
        if V ** int(k) > self.max_tuples:
            raise ValueError(
                f"OTMVerify: V**k = {V}**{k} = {V ** int(k)} candidate tuples exceeds max_tuples={self.max_tuples}; "
                "the OTM linear programme is only practical for small vocabularies and k"
            )
        tuples, probs = candidate_tuple_law(p, k, self.replacement)
        out = (tuples, _otm_lp(tuples, probs, q))
        if len(self._cache) >= self.cache_size:
            self._cache.pop(next(iter(self._cache)))
        self._cache[key] = out
        return out

    def _kernel(self, candidates, draft_probs, target_probs, validate):
        for arr in (candidates, draft_probs, target_probs):
            if array_api_compat.is_array_api_obj(arr) and not array_api_compat.is_numpy_array(arr):
                raise TypeError(f"OTMVerify is numpy-only (it solves a linear programme per row pair); got {type(arr)}")
        candidates, p, q = check_multi_draft(candidates, draft_probs, target_probs, validate=validate)
        candidates, p, q = np.asarray(candidates), np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
        B, k = candidates.shape
        V = p.shape[1]
        kernel = np.zeros((B, V))
        if B == 0:
            return candidates, kernel
        pairs, inverse = np.unique(np.concatenate([p, q], axis=1), axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        for g, pair in enumerate(pairs):  # one LP per distinct (p, q) pair
            rows = np.flatnonzero(inverse == g)
            tuples, plan = self.plan(pair[:V], pair[V:], k)
            codes = _encode(tuples, V)
            order = np.argsort(codes)
            want = _encode(candidates[rows], V)
            pos = np.minimum(np.searchsorted(codes[order], want), len(codes) - 1)
            found = codes[order][pos] == want
            if not found.all():
                b = int(rows[np.flatnonzero(~found)[0]])
                mode = "with" if self.replacement else "without"
                raise ValueError(
                    f"candidates: row {b} {candidates[b].tolist()} has probability 0 under sampling {mode} "
                    f"replacement from draft_probs; OTMVerify(replacement={self.replacement}) needs candidates drawn that way"
                )
            sel = plan[order[pos]]
            kernel[rows] = sel / sel.sum(axis=1, keepdims=True)
        return candidates, kernel

    def law(self, candidates, draft_probs, target_probs, *, validate=True):
        candidates, kernel = self._kernel(candidates, draft_probs, target_probs, validate)
        member = _membership(candidates, kernel)
        return MultiDraftLaw(kernel * member, kernel * (1.0 - member))

    def sample(self, candidates, draft_probs, target_probs, rng, *, validate=True):
        candidates, kernel = self._kernel(candidates, draft_probs, target_probs, validate)
        return _membership_outcome(candidates, sample_categorical(kernel, rng).astype(np.int64))


#: Multi-draft verifiers by their short name.
MULTI_DRAFT_REGISTRY = {
    cls.name: cls for cls in (KSeq, MultiRound, MultiRoundWithoutReplacement, NaiveMultiCandidate, OTMVerify)
}
