r"""The SpecDec++ optimum of an IID pair at any vocabulary size: one threshold, a certified bracket.

Spec ``specdecpp.md`` §2–4 (p is the draft, q the target), in the notation of
:mod:`otspec.theory.adaptive`: a(x) = min{1, q(x)/p(x)}, β = Σ_x p(x) a(x), Π_j = a(X_1)⋯a(X_j),
latency λ = E[C]/E[R] with C = t_draft·K + t_target and R = τ + 1.

**The optimal rule is myopic** [D; tested against the backward induction and against enumeration].
Let D_j be the event "draft token j+1" (a function of X_1..X_j, j = 1..K−1). Since X_{j+1} is drawn
after the decision, E[Π_{j+1} 1_{D_j}] = β E[Π_j 1_{D_j}], so for a trial ratio λ

    E[C − λR] = t_target + t_draft − λ(1 + β) + Σ_{j=1}^{K−1} E[1_{D_j} (t_draft − λβ Π_j)].

The only constraint on the D_j is nesting (D_j ⊆ D_{j−1}); the pointwise minimiser of every term,
D_j = {λβ Π_j > t_draft}, is nested already because Π_j never increases. So at every λ the best rule
drafts another token iff Π_j > c(λ) = t_draft / (λβ): one threshold for every step (Theorem 4.3 of
the paper allows one per step; for an IID pair they coincide). The optimum λ* is the root of

    D(λ) = t_target + t_draft − λ(1 + β) − Σ_{j=1}^{K−1} E[(λβ Π_j − t_draft)^+],

which needs only the "call values" E[(Π_j − c)^+] at thresholds c ≥ c_min = t_draft / (λ_1 β),
λ_1 = (t_draft + t_target)/(1 + β) being the latency of drafting one token (so λ* ≤ λ_1).

**Bracket** (:func:`bracket_latency`). On the lattice r^{-k}, k = 0..N, with r^{-N} = c_min:

* *upper call values, so a lower latency*: spread each a(x) onto its two neighbouring lattice points
  keeping its mean. E[(yA − c)^+] is convex in A, so by induction over j the spread products have
  larger call values at every c; products of lattice points stay on the lattice, so the law of the
  j-fold product is a j-fold convolution (an FFT walk, :func:`otspec.theory.lattice.lattice_walk`);
* *lower call values, so a higher latency*: Jensen on the partition of drafted j-tuples by the sum k
  of their lattice cells. The conditional mean of Π_j on the group k is M_j[k] / W_j[k], W_j and M_j
  the j-fold convolutions of the cell masses Σ p and moments Σ p·a; merging the groups of one k over
  the steps is a coarser partition of the same sum, so it still bounds.

Mass below c_min never counts (a product below it stays below every threshold evaluated), so the
walks drop it. Each bounding D is a minimum over subsets of atoms of A_S − λB_S, whose root is a
minimum ratio found by Dinkelbach's method in finitely many steps. The gap shrinks as (log r)^2: the
lattice is refined until it is at most ``tol``·λ_1, and the FFT rounding bound of the walks widens
both ends.

E[K] and E[R] of the optimal rule are bracketed by pathwise rounding (each a(x) rounded up / down to
the lattice bounds Π_j from above / below) at the ends of the threshold's interval. They are known to
first order in log r only, and are not unique when Π_j has an atom exactly at the threshold.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from ..checks import check_real, check_size
from .lattice import lattice_walk

__all__ = ["DEFAULT_TOL", "MAX_BRACKET_POINTS", "MAX_BRACKET_WORK", "START_POINTS", "LatencyBracket",
           "bracket_latency"]

#: Default target width of the latency bracket, relative to the latency of drafting one token. The lattice is
#: refined until its own gap is half of it; the FFT rounding allowance (about 1e-11 per step at 2^16 points)
#: makes up the rest.
DEFAULT_TOL = 1e-9
#: Lattice points of the first pass; each refinement multiplies them by at least 2.
START_POINTS = 1 << 12
#: Most lattice points of one pass (three FFT walks of about twice this length per step).
MAX_BRACKET_POINTS = 1 << 20
#: Most lattice points × steps of one pass: at K = 8 the lattice may reach MAX_BRACKET_POINTS (about 1.5 s on one
#: core); at MAX_DRAFT_LENGTH it stays near 16,000 points.
MAX_BRACKET_WORK = 1 << 26
_EPS = float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class LatencyBracket:
    """Certified bounds on the optimal latency of an IID pair and on its rule (see the module docstring).

    ``latency``: (low, high) with low ≤ λ* ≤ high; ``threshold``: bounds on the threshold c* = t_draft/(λ*β) on
    Π_j (draft another iff Π_j > c*); ``drafted`` and ``tokens``: bounds on E[K] and E[R] of the optimal rules;
    ``points``: lattice points of the last pass; ``iterations``: its Dinkelbach steps (both bounds).
    """

    latency: tuple[float, float]
    threshold: tuple[float, float]
    drafted: tuple[float, float]
    tokens: tuple[float, float]
    points: int
    iterations: int

    @property
    def gap(self) -> float:
        return self.latency[1] - self.latency[0]


def _min_ratio(mass, moment, beta, t_draft, t_target, start):
    """Dinkelbach: min over subsets S of atoms of (t_target + t_draft(1 + mass_S)) / (1 + β(1 + moment_S))."""
    lam, chosen, steps = start, None, 0
    while True:
        steps += 1
        take = lam * beta * moment > t_draft * mass
        if chosen is not None and np.array_equal(take, chosen) or steps > 500:
            return lam, steps
        chosen = take
        lam = (t_target + t_draft * (1.0 + math.fsum(mass[take]))) / (1.0 + beta * (1.0 + math.fsum(moment[take])))


def _walks(p, a, K, log_floor, N, stop_mass):
    """One lattice pass: the step-summed laws of the three walks (spread, cell mass, cell moment) and of the
    rounded-down walk, indexed by k (value r^-k), with the l1 rounding bounds of each."""
    h = -log_floor / N
    keep = a >= math.exp(log_floor)
    pk, ak = p[keep], a[keep]
    k = np.clip(np.floor(-np.log(ak) / h), 0, N).astype(np.int64)
    upper, lower = np.exp(-h * k), np.exp(-h * (k + 1))
    theta = np.clip((ak - lower) / (upper - lower) + 4 * _EPS, 0.0, 1.0)  # rounded up: the spread's mean is >= a
    size = N + 2
    kernels = (np.bincount(k, pk * theta, size) + np.bincount(k + 1, pk * (1.0 - theta), size),
               np.bincount(k, pk, size), np.bincount(k, pk * ak, size))
    walks = [lattice_walk(x[::-1], -(N + 1), K - 1, -N, 0, "drop", "drop") for x in kernels]
    spread, mass, moment, down = (np.zeros(N + 1) for _ in range(4))
    errors = np.zeros(3)
    for j, steps in enumerate(zip(*walks, strict=True), start=1):
        laws = []
        for i, (law, off, _, err) in enumerate(steps):
            law = np.maximum(law, 0.0)  # the exact laws are >= 0: clipping only shrinks the rounding error
            laws.append((law, off))
            errors[i] += err
        for agg, (law, off) in zip((spread, mass, moment), laws, strict=True):
            agg[-off - law.size + 1:-off + 1] += law[::-1]
        law, off = laws[1]
        shifted = np.zeros(N + 1)
        shifted[-off - law.size + 1:-off + 1] = law[::-1]
        down[j:] += shifted[:N + 1 - j]  # each of the j factors rounded down one lattice step
        rest = (K - 1 - j) * max(float(laws[0][0].sum()), float(laws[1][0].sum()))
        if rest <= stop_mass:  # later steps weigh at most this: an atom at Π = 1 keeps the upper bounds valid
            spread[0] += rest
            mass[0] += rest
            break
    return h, spread, mass, moment, down, errors


def _pass(p, a, beta, K, t_draft, t_target, lam1, log_floor, N, tol):
    h, spread, mass, moment, down, errors = _walks(p, a, K, log_floor, N, 1e-3 * tol)
    errors = [float(e) for e in errors]
    values = np.exp(-h * np.arange(N + 1))
    low, it_low = _min_ratio(spread, spread * values, beta, t_draft, t_target, lam1)
    high, it_high = _min_ratio(mass, moment, beta, t_draft, t_target, lam1)
    lattice_gap = high - low
    # FFT rounding: an l1 error e in a law moves the call sum by at most λβe (Π <= 1), the root by that / (1 + β)
    slack = 64 * _EPS * K * lam1
    low = max(0.0, float(low) - (lam1 * beta * errors[0]) / (1 + beta) - slack)
    high = min(lam1, float(high) + (lam1 * beta * errors[2] + t_draft * errors[1]) / (1 + beta) + slack)
    c_low, c_high = t_draft / (high * beta), t_draft / (low * beta)
    up_set, down_set = values >= c_low * (1 - 4 * _EPS), values > c_high * (1 + 4 * _EPS)
    e = errors[1]  # the rounded-up and rounded-down walks are both the cell-mass walk
    drafted = (max(1.0, 1.0 + math.fsum(down[down_set]) - e), 1.0 + math.fsum(mass[up_set]) + e)
    tokens = (max(1.0 + beta, 1.0 + beta * (1.0 + math.fsum((down * values)[down_set]) - e)),
              1.0 + beta * (1.0 + math.fsum((mass * values)[up_set]) + e))
    return LatencyBracket((low, high), (c_low, c_high), drafted, tokens, N, it_low + it_high), lattice_gap


def _exact(lam, threshold, drafted, tokens) -> LatencyBracket:
    return LatencyBracket((lam, lam), threshold, drafted, tokens, 0, 0)


def bracket_latency(p, a, K: int, t_draft: float, t_target: float, tol: float = DEFAULT_TOL) -> LatencyBracket:
    """Bounds on the optimal SpecDec++ latency of an IID pair, within ``tol``·λ_1 of each other when the lattice
    allows it (:data:`MAX_BRACKET_POINTS`, :data:`MAX_BRACKET_WORK`; a wider bracket is returned with a warning).

    ``p`` and ``a`` are the draft probabilities and acceptance probabilities min{1, q/p} on the draft's support
    (validated by the caller), ``K`` >= 1 the most drafted tokens, t_draft >= 0, t_target > 0.
    """
    K = check_size(K, "K")
    t_draft, t_target = check_real(t_draft, "t_draft", low=0.0), check_real(t_target, "t_target", low=0.0, low_open=True)
    p, a = np.asarray(p, dtype=np.float64), np.asarray(a, dtype=np.float64)
    beta = float(np.dot(p, a))
    lam1 = (t_draft + t_target) / (1.0 + beta)
    if beta <= 0.0 or K == 1:  # no draft is ever accepted, or one is all there is: draft one token
        most = float(K) if t_draft == 0.0 and beta <= 0.0 else 1.0
        return _exact(lam1, (math.inf, math.inf), (1.0, most), (1.0 + beta, 1.0 + beta))
    if t_draft == 0.0:  # drafting is free: draft all K unless every draft is already lost (Π = 0)
        tokens = 1.0 + sum(beta**ell for ell in range(1, K + 1))
        live = float(p[a > 0].sum())
        return _exact(t_target / tokens, (0.0, 0.0), (1.0 + sum(live**j for j in range(1, K)), float(K)),
                      (tokens, tokens))
    c_min = t_draft / (lam1 * beta)
    tie = abs(c_min - 1.0) <= 8 * _EPS  # at 1 up to rounding (t_draft = λ_1 β rounded): no lattice fits below it
    if c_min >= 1.0 or tie:  # the threshold is above every Π_j < 1: drafting one token is optimal
        sure = float(p[a >= 1.0].sum())
        most = 1.0 + sum(sure**j for j in range(1, K)) if tie else 1.0
        return _exact(lam1, (c_min, c_min), (1.0, most), (1.0 + beta, 1.0 + beta + beta * (most - 1.0)))
    log_floor = math.log(c_min)
    cap = max(START_POINTS, min(MAX_BRACKET_POINTS, MAX_BRACKET_WORK // (K - 1)))
    N, target = min(START_POINTS, cap), tol * lam1
    while True:  # refine while the lattice's own gap (not the rounding allowance, which grows with N) is large
        out, lattice_gap = _pass(p, a, beta, K, t_draft, t_target, lam1, log_floor, N, tol)
        if lattice_gap <= 0.5 * target or out.gap - lattice_gap > target or N >= cap:
            break
        grow = max(2, math.ceil(1.2 * math.sqrt(lattice_gap / (0.5 * target))))
        N = min(cap, 1 << (N * grow - 1).bit_length())
    if out.gap > target:
        warnings.warn(f"SpecDec++ optimum: the latency bracket is {out.gap:.3g} wide at the largest lattice "
                      f"({N:,} points, K = {K}), above tol * latency = {target:.3g}", RuntimeWarning, stacklevel=3)
    return out
