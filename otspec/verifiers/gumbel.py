r"""Drafter-invariant speculative decoding by the Gumbel / exponential-race coupling (Daliri, Musco & Suresh,
"Coupling without Communication and Drafter-Invariant Speculative Decoding", arXiv 2408.07978).

At every position the draft and the target share one vector of exponential clocks E_z ~ Exp(1): the draft token
is X = argmin_z E_z / p(z) and the target's Y = argmin_z E_z / q(z) (the Gumbel-max trick in exponential form),
so Y ~ q whatever the draft, and the emitted tokens are a function of the shared randomness and the target
alone — the same whichever drafter proposed (drafter invariance). Verification keeps X while X = Y and emits Y
at the first disagreement (or a bonus token from q after L agreements); fresh clocks at every position make
it lossless. Per position

.. math::
    P(X = Y = x) = \Big(\sum_z \max\{p(z)/p(x),\, q(z)/q(x)\}\Big)^{-1}, \qquad
    P(X = x, Y = y) = \int_{p(y)/p(x)}^{q(y)/q(x)} \frac{dr}{c(r)^2} \quad (x \ne y),

c(r) = 1 + r + Σ_{z∉{x,y}} max{p(z)/p(x), r q(z)/q(y)}: with a = E_x, b = E_y = r a, the other clocks must exceed
max{a p(z)/p(x), b q(z)/q(y)}, and ∫ a e^{−a c(r)} da = c(r)^{−2}. c is piecewise linear in r, so the integral is
exact (:func:`gumbel_joint`). P(X ≠ Y) ≤ 2 TV/(1 + TV) (the paper's bound): the coupling gives up some
acceptance against the maximal coupling's 1 − TV in exchange for invariance.

The drafts of the engines are drawn before verification, so :meth:`GumbelCouplingVerify.sample` draws the
clocks given X = x (the winner's time T ~ Exp(1), E_x = p(x) T, E_z = p(z) T + Exp(1) for the others, by the
race's memorylessness): the joint law of (X, Y) is the coupling's.
"""

from __future__ import annotations

import array_api_compat
import numpy as np

from ..checks import MAX_DRAFT_LENGTH, MAX_EXACT_ENTRIES, capped_power, check_size, format_count
from ..distributions import namespace, sample_categorical, to_host, uniform
from ..drafts import gather_tokens
from ..errors import SizeLimitError
from ..pairs import check_pair
from ..sources import IIDSource
from .base import Outcome, Verifier, VerifierLaw
from .registry import register

__all__ = ["MAX_GUMBEL_LAW_VOCAB", "GumbelCouplingVerify", "gumbel_acceptance", "gumbel_joint"]

#: Largest vocabulary whose per-position joint law (V² pair integrals of O(V log V) each) :meth:`law` computes.
MAX_GUMBEL_LAW_VOCAB = 256


def gumbel_acceptance(p, q) -> float:
    """P(X = Y) = Σ_x 1/Σ_z max{p(z)/p(x), q(z)/q(x)} in O(V log V): with ρ = p(x)/q(x), p(x)·Σ_z max{…} =
    Σ_{p(z)/q(z) >= ρ} p(z) + ρ Σ_{p(z)/q(z) < ρ} q(z), read off prefix sums over the tokens sorted by p/q."""
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    both = (p > 0) & (q > 0)
    ratio = np.divide(p, q, out=np.full(p.shape, np.inf), where=q > 0)  # q = 0: the ratio is +inf
    order = np.argsort(ratio, kind="stable")
    r_sorted, p_cum, q_cum = ratio[order], np.cumsum(p[order]), np.cumsum(q[order])
    rho = ratio[both]
    below = np.searchsorted(r_sorted, rho, side="left")  # tokens with p/q < ρ
    q_below = np.where(below > 0, q_cum[np.maximum(below - 1, 0)], 0.0)
    p_below = np.where(below > 0, p_cum[np.maximum(below - 1, 0)], 0.0)
    total = (p_cum[-1] - p_below) + rho * q_below
    return float(np.sum(p[both] / total))


def _pair(p, q, x: int, y: int) -> float:
    """P(X = x, Y = y) for x ≠ y: ∫ dr / c(r)² over (p(y)/p(x), q(y)/q(x)), c piecewise linear (module docstring)."""
    lo = p[y] / p[x]
    hi = np.inf if q[x] == 0 else q[y] / q[x]
    if q[y] == 0 or lo >= hi:
        return 0.0
    rest = np.ones(p.size, dtype=bool)
    rest[[x, y]] = False
    pz, qz = p[rest] / p[x], q[rest] / q[y]  # max{pz, r qz}: constant pz below r = pz/qz, linear above
    brk = np.divide(pz, qz, out=np.full(pz.shape, np.inf), where=qz > 0)
    order = np.argsort(brk)
    brk, pz, qz = brk[order], pz[order], qz[order]
    alpha = 1.0 + pz.sum() - np.concatenate([[0.0], np.cumsum(pz)])  # α, β on the segments between breakpoints
    beta = 1.0 + np.concatenate([[0.0], np.cumsum(qz)])
    edges = np.concatenate([[0.0], brk, [np.inf]])
    a, b = np.maximum(edges[:-1], lo), np.minimum(edges[1:], hi)
    live = b > a
    a, b, alpha, beta = a[live], b[live], alpha[live], beta[live]
    upper = np.where(np.isinf(b), 0.0, 1.0 / (alpha + beta * np.where(np.isinf(b), 0.0, b)))
    return float(np.sum((1.0 / (alpha + beta * a) - upper) / beta))


def gumbel_joint(p, q) -> np.ndarray:
    """The coupling's joint law P(X = x, Y = y), shape (V, V) (V <= :data:`MAX_GUMBEL_LAW_VOCAB`)."""
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    V = p.size
    if V > MAX_GUMBEL_LAW_VOCAB:
        raise SizeLimitError(f"the Gumbel coupling's exact law over V = {V:,} tokens takes V² pair integrals "
                             f"(limit MAX_GUMBEL_LAW_VOCAB = {MAX_GUMBEL_LAW_VOCAB}); its sampler and "
                             "gumbel_acceptance run at any V", size=V, limit=MAX_GUMBEL_LAW_VOCAB)
    out = np.zeros((V, V))
    for x in np.flatnonzero(p > 0):
        if q[x] > 0:
            ratio = np.maximum(p / p[x], q / q[x])
            out[x, x] = 1.0 / ratio.sum()
        for y in np.flatnonzero(q > 0):
            if y != x:
                out[x, y] = _pair(p, q, x, y)
    return out


@register
class GumbelCouplingVerify(Verifier):
    """Drafter-invariant verification by the exponential-race coupling (module docstring); lossless."""

    name = "gumbel"
    label = "Gumbel coupling (drafter-invariant)"
    style = {"marker": "x", "color": "C4"}

    def expected_accepted(self, draft, target, length):
        """IID pairs: Σ_{l<=L} α^l with α = :func:`gumbel_acceptance`. Other sources by enumerating the draft's
        paths x^L: E[τ] = Σ P(x^L) Σ_{l<=L} ∏_{i<=l} k_i(x^i), k_i = :meth:`keep_probs` (fresh clocks at every
        position, so given the path the keeps are independent); refused (``SizeLimitError``) where the exact
        engine refuses."""
        L = check_size(length, "length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
        if isinstance(draft, IIDSource) and isinstance(target, IIDSource):
            a = gumbel_acceptance(draft.probs, target.probs)
            return float(sum(a**ell for ell in range(1, L + 1)))
        V = check_pair(draft, target)
        entries = capped_power(V, L) * (L + 1) * V
        if entries > MAX_EXACT_ENTRIES:
            raise SizeLimitError(f"exact evaluation needs {V}^{L} drafts x {L + 1} positions x {V} tokens = "
                                 f"{format_count(entries)} entries, above MAX_EXACT_ENTRIES = {MAX_EXACT_ENTRIES:,}; "
                                 "use Monte Carlo", size=entries, limit=MAX_EXACT_ENTRIES)
        target.check_length(L + 1)
        enum = draft.enumerate(L)
        live = enum.probs > 0
        tokens, weights = enum.tokens[live], enum.probs[live]
        keep = self.keep_probs(tokens, draft.path_probs(tokens)[:, :L, :], target.path_probs(tokens))
        return float(np.sum(weights * np.cumprod(keep, axis=1).sum(axis=1)))

    @staticmethod
    def keep_probs(draft_tokens, draft_probs, target_probs) -> np.ndarray:
        """P(Y_i = x_i | X_i = x_i) = 1 / (p(x_i) Σ_z max{p(z)/p(x_i), q(z)/q(x_i)}) per position, (B, L), at any V."""
        x = np.asarray(draft_tokens, dtype=np.int64)[..., None]
        P, Q = np.asarray(draft_probs, dtype=float), np.asarray(target_probs, dtype=float)[:, :x.shape[1]]
        px, qx = np.take_along_axis(P, x, axis=-1), np.take_along_axis(Q, x, axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            total = np.maximum(P, Q * px / np.where(qx > 0, qx, 1.0)).sum(axis=-1)
        return np.where(qx[..., 0] > 0, 1.0 / total, 0.0)

    def expected_given_drafts(self, draft_tokens, draft_probs, target_probs) -> np.ndarray:
        """E[τ | drafts] (B,), from :meth:`keep_probs` (no pair integrals)."""
        return np.cumprod(self.keep_probs(draft_tokens, draft_probs, target_probs), axis=1).sum(axis=1)

    def law(self, draft_tokens, draft_probs, target_probs, *, validate=True, lengths=None):
        d = self.check(draft_tokens, draft_probs, target_probs, validate=validate, lengths=lengths)
        x = np.asarray(to_host(d.tokens), dtype=np.int64)
        P, Q = np.asarray(to_host(d.draft_probs), dtype=float), np.asarray(to_host(d.target_probs), dtype=float)
        B, L = x.shape
        g = np.full(B, L, dtype=np.int64) if d.lengths is None else to_host(d.lengths).astype(np.int64)
        keep = np.zeros((B, L))
        rows = np.array(Q, copy=True)  # past a row's length: valid rows of probability 0; at it: the bonus row
        for b in range(B):
            for i in range(int(g[b])):
                joint = gumbel_joint(P[b, i], Q[b, i])[x[b, i]] / P[b, i, x[b, i]]  # law of Y given X = x
                keep[b, i] = joint[x[b, i]]
                miss = joint.copy()
                miss[x[b, i]] = 0.0
                rows[b, i] = miss / miss.sum() if miss.sum() > 0 else Q[b, i]
        reach = np.concatenate([np.ones((B, 1)), np.cumprod(keep, axis=1)], axis=1)  # P(τ >= i)
        stop = np.concatenate([1.0 - keep, np.ones((B, 1))], axis=1)
        stop[np.arange(B), g] = 1.0  # a row stops at its own length at the latest
        accept = np.where(np.arange(L + 1)[None, :] <= g[:, None], reach * stop, 0.0)  # P(τ = i)
        xp = namespace(d.target_probs)
        if isinstance(d.target_probs, np.ndarray):
            return VerifierLaw(accept, rows)
        return VerifierLaw(*(xp.asarray(a, dtype=d.target_probs.dtype, device=array_api_compat.device(d.target_probs))
                             for a in (accept, rows)))

    ragged = True

    def sample(self, draft_tokens, draft_probs, target_probs, rng, *, validate=True, lengths=None):
        """One outcome per draft, on numpy (a numpy ``Generator``) or torch (a ``torch.Generator``, any device);
        ``lengths`` (B,) makes the batch ragged (:meth:`Verifier.sample_ragged`): row b compares its first
        ``lengths[b]`` positions and draws its bonus token from ``target_probs[b, lengths[b]]``."""
        d = self.check(draft_tokens, draft_probs, target_probs, validate=validate, lengths=lengths)
        xp = namespace(d.draft_probs, d.target_probs)
        x, P, Q = d.tokens, d.draft_probs, d.target_probs
        if isinstance(P, np.ndarray):
            x, P, Q = np.asarray(x, dtype=np.int64), np.asarray(P, dtype=float), np.asarray(Q, dtype=float)
        B, L, V = P.shape
        device = array_api_compat.device(P)
        rows = xp.arange(B, device=device)
        g = xp.full((B,), L, dtype=xp.int64, device=device) if d.lengths is None else xp.astype(d.lengths, xp.int64)
        T = _exponential(rng, (B, L, 1), P)
        losers = _exponential(rng, (B, L, V), P)  # the losers' clocks given the draft's winner X = x
        px = gather_tokens(P, x)[..., None]
        winner = xp.arange(V, device=device)[None, None, :] == x[..., None]
        clocks = xp.where(winner, px * T, P * T + losers)
        q = Q[:, :L]
        y = xp.argmin(xp.where(q > 0, clocks / xp.where(q > 0, q, xp.ones_like(q)), xp.inf), axis=-1)
        drafted = xp.arange(L, device=device)[None, :] < g[:, None]
        miss = (y != x) & drafted
        tau = xp.where(xp.any(miss, axis=1), xp.argmax(xp.astype(miss, xp.int8), axis=1), g)
        bonus = xp.astype(sample_categorical(Q[rows, g], rng, check=validate), xp.int64)
        if L == 0:
            return Outcome(tau, bonus)
        at = xp.clip(tau, max=L - 1)
        return Outcome(tau, xp.where(tau < g, y[rows, at], bonus))


def _exponential(rng, shape, like):
    """Exp(1) draws of ``shape`` in the namespace of ``like``: a numpy ``Generator``'s own, else −log(1 − U)."""
    if isinstance(like, np.ndarray):
        return rng.exponential(size=shape)
    xp = namespace(like)
    return -xp.log1p(-uniform(rng, shape, like))
