"""Expected rejections of speculative decoding (Yin, Chen, Huang, Wang, NeurIPS 2024).

Spec: ``shared/reference/yin_theory.md`` (§1–6, §9, §10). Convention: **p is the draft,
q the target**. Positions are 1-based in the spec (x_1..x_T); here token n (1-based) is
column n−1 of a token array, and the spec's fixed prompt x_0 is absorbed into the sources:
p_1 = ``draft.initial`` (the law of the first token), q_1 = ``target.initial``.

Contents
--------
* Theorem 1, eq. (1): :func:`expected_rejections`, :func:`rejections_per_position`,
  :func:`speedup` — exact, by the forward recursion over the target's marginals for IID /
  Markov sources (O(T V²)), by prefix enumeration otherwise.
* Algorithm 1 with full lookahead (Remark 1), Monte Carlo: :func:`simulate_rejections`.
* The rejection-based family of §5: :class:`RejectionTemplate`, evaluated exactly by
  :func:`template_law` (output law over V^T and E[N_rej]); Theorem 2 / eq. (3) as a linear
  programme: :func:`min_rejection_lp`.
* Batch speculative decoding, Algorithm 4 (§6, a reconstruction): recursion (4)–(5) in
  :func:`batch_expected_rejections` / :func:`batch_curve`, the exact law of the algorithm in
  :func:`batch_law`, Monte Carlo in :func:`simulate_batch_rejections`.
* The seeded instance of §10: :func:`markov_pair`; figure data and rendering:
  :func:`rejections_figure_data`, :func:`render_rejections`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from .distributions import residual, sample_categorical, total_variation
from .engine.stats import Estimate, mean_estimate
from .sources import (
    EMPTY_PREFIX,
    MAX_ENUMERATION,
    IIDSource,
    MarkovSource,
    Source,
    extend_prefixes,
)
from .verifiers.multi import MultiRound, candidate_tuple_law, sample_candidates

__all__ = [
    "BATCH_MS",
    "MAX_LP_VARIABLES",
    "RejectionSimulation",
    "RejectionTemplate",
    "TemplateLaw",
    "batch_curve",
    "batch_expected_rejections",
    "batch_law",
    "batch_rejections_per_position",
    "expected_rejections",
    "markov_pair",
    "min_rejection_lp",
    "rejections_figure_data",
    "rejections_per_position",
    "render_rejections",
    "simulate_batch_rejections",
    "simulate_rejections",
    "speedup",
    "template_law",
]

#: Batch sizes of the figure's batch curve (spec §6).
BATCH_MS = (1, 2, 4, 8, 16, 32, 1000)
#: Largest number of LP variables :func:`min_rejection_lp` builds.
MAX_LP_VARIABLES = 200_000
#: Largest V**M candidate tuples enumerated per prefix by :func:`batch_law`.
MAX_BATCH_TUPLES = 100_000
#: Sequences × vocabulary entries materialised per simulation chunk.
CHUNK_ENTRIES = 2**22


# ============================================================================ validation
def _check_horizon(horizon) -> int:
    if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
        raise ValueError(f"horizon: expected an integer T >= 1, got {horizon!r}")
    return int(horizon)


def _check_pair(draft: Source, target: Source, horizon) -> int:
    """Vocabulary agreement and horizon within both sources; returns T."""
    T = _check_horizon(horizon)
    if draft.vocab_size != target.vocab_size:
        raise ValueError(
            f"vocabulary mismatch: draft has {draft.vocab_size} tokens, target has "
            f"{target.vocab_size}; both models must share one vocabulary"
        )
    for name, src in (("draft", draft), ("target", target)):
        if src.horizon is not None and T > src.horizon:
            raise ValueError(
                f"horizon T={T} exceeds the {name} source's horizon {src.horizon} "
                f"({src!r} defines sequences of at most {src.horizon} tokens)"
            )
    return T


def _check_M(M) -> int:
    if isinstance(M, bool) or not isinstance(M, (int, np.integer)) or M < 1:
        raise ValueError(f"M: expected an integer batch size >= 1 (number of draft responses), got {M!r}")
    return int(M)


def _check_runs(runs) -> int:
    if isinstance(runs, bool) or not isinstance(runs, (int, np.integer)) or runs < 2:
        raise ValueError(f"runs: expected an integer >= 2 (a confidence interval needs two runs), got {runs!r}")
    return int(runs)


def _chain(source: Source, T: int):
    """(initial (V,), matrices (T−1, V, V)) for IID/Markov sources, else None.

    ``matrices[k]`` produces token k+2 (1-based) from token k+1, i.e. it is
    ``source.matrix(k + 1)`` for a MarkovSource.
    """
    V = source.vocab_size
    if isinstance(source, MarkovSource):
        mats = np.stack([source.matrix(k) for k in range(1, T)]) if T > 1 else np.zeros((0, V, V))
        return source.initial, mats
    if isinstance(source, IIDSource):
        return source.probs, np.broadcast_to(source.probs, (max(T - 1, 0), V, V))
    return None


def _chains(draft, target, T):
    d, t = _chain(draft, T), _chain(target, T)
    if d is None or t is None:
        return None
    return d, t


def _level_rows(T: int, V: int, what: str):
    """Check that enumerating prefixes up to length T−1 (and V**T outputs) is within limits."""
    count = V ** T
    if count > MAX_ENUMERATION:
        raise ValueError(
            f"{what}: enumerating {V}^{T} = {count} sequences exceeds MAX_ENUMERATION = "
            f"{MAX_ENUMERATION}; use IID/Markov sources (exact recursion) or Monte Carlo"
        )


# ============================================================================ Theorem 1
def rejections_per_position(draft: Source, target: Source, horizon: int) -> np.ndarray:
    """Per-position terms of Theorem 1, eq. (1): E_{x_{1:n−1} ~ q}[TV(p_n, q_n)(·|x_{1:n−1})].

    The prefix is drawn from the **target** q (each position is verified exactly once and,
    by unbiasedness (2), the realised prefix is q-distributed).

    Parameters
    ----------
    draft, target : Source
        p and q over one vocabulary.
    horizon : int
        T, the response length (at most the sources' horizon).

    Returns
    -------
    ndarray, shape (T,)
        Entry n−1 is the rejection probability at position n; the sum is E[N_rej].

    Notes
    -----
    IID and Markov sources use the forward recursion of spec §4 (m_n = m_{n−1} Q_n, O(T V²)).
    Other sources enumerate prefixes of positive target probability level by level; a
    ``ValueError`` is raised if a level would exceed :data:`otspec.sources.MAX_ENUMERATION`.

    Raises
    ------
    ValueError
        Vocabulary mismatch, T < 1, or T beyond either source's horizon.
    """
    T = _check_pair(draft, target, horizon)
    chains = _chains(draft, target, T)
    out = np.zeros(T)
    if chains is not None:
        (p1, P), (q1, Q) = chains
        out[0] = total_variation(p1, q1)
        m = q1.copy()
        for k in range(T - 1):  # position k+2 from token k+1
            out[k + 1] = m @ total_variation(P[k], Q[k])
            m = m @ Q[k]
        return out
    tokens, mass = EMPTY_PREFIX, np.ones(1)
    V = target.vocab_size
    for n in range(T):
        p, q = draft.next_probs(tokens), target.next_probs(tokens)
        out[n] = mass @ total_variation(p, q)
        if n == T - 1:
            break
        child = (mass[:, None] * q).reshape(-1)
        keep = child > 0
        if int(keep.sum()) > MAX_ENUMERATION:
            raise ValueError(
                f"rejections_per_position: {int(keep.sum())} prefixes of length {n + 1} exceed "
                f"MAX_ENUMERATION = {MAX_ENUMERATION}; use a Markov source or Monte Carlo"
            )
        tokens, mass = extend_prefixes(tokens, V)[keep], child[keep]
    return out


def expected_rejections(draft: Source, target: Source, horizon: int) -> float:
    """E[N_rej] of speculative decoding with full lookahead — Theorem 1, eq. (1).

    E[N_rej] = Σ_{n=1}^{T} E_{x_{1:n−1} ~ q}[TV(p_n, q_n)(·|x_{1:n−1})]; see
    :func:`rejections_per_position` for the parameters, method and errors.

    Examples
    --------
    The crisp example of spec §4 gives 0.8 + 0.1·1 = 0.9.
    """
    return float(rejections_per_position(draft, target, horizon).sum())


def speedup(draft: Source, target: Source, horizon: int) -> float:
    """Acceleration rate T / E[N_rej] of spec §2 (``inf`` when E[N_rej] = 0), with (1)."""
    T = _check_horizon(horizon)
    e = expected_rejections(draft, target, T)
    return math.inf if e == 0 else T / e


# ============================================================================ seeded instance
def markov_pair(vocab: int = 4, horizon: int = 50, seed: int = 5) -> tuple[MarkovSource, MarkovSource]:
    """The seeded time-varying instance of spec §10 as (draft, target) MarkovSources.

    Spec §10 draws ``p = dirichlet(ones(V), size=(T+1, V))`` then ``q`` likewise from
    ``default_rng(seed)``, with ``p[n][prev] = p_n(·|x_{n−1} = prev)`` for n = 1..T and
    prompt x_0 = 0. Mapping onto :class:`~otspec.sources.MarkovSource`:

    * ``initial = p[1][0]`` — the law of x_1 given x_0 = 0 (rows ``p[1][1:]`` and ``p[0]``
      are drawn, to keep the generator's stream, but never used);
    * ``transition = [p[2], ..., p[T]]`` — T−1 matrices; ``matrix(k)`` (0-based token k from
      token k−1) is ``p[k+1]``, i.e. x_{k+1} from x_k in the spec's 1-based indexing.

    With the defaults eq. (1) gives E[N_rej] = 20.8204 (spec §9 item 2).
    """
    V, T = int(vocab), _check_horizon(horizon)
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(V), size=(T + 1, V))
    q = rng.dirichlet(np.ones(V), size=(T + 1, V))
    return MarkovSource(p[1][0], p[2:T + 1]), MarkovSource(q[1][0], q[2:T + 1])


# ============================================================================ Algorithm 1 (MC)
@dataclass(frozen=True)
class RejectionSimulation:
    """Monte Carlo result of Algorithm 1 (or Algorithm 4 when ``M`` > 1).

    Attributes
    ----------
    estimate : Estimate
        Mean of N_rej over the runs with a normal-approximation interval.
    per_position : ndarray, shape (T,)
        Fraction of runs that rejected at position n (n = 1..T).
    counts : ndarray, shape (runs,)
        N_rej of every run, in run order (for running averages).
    sequences : ndarray (runs, T) or None
        The generated x_{1:T}, if requested.
    horizon, runs, M : int
    """

    estimate: Estimate
    per_position: np.ndarray
    counts: np.ndarray
    sequences: np.ndarray | None
    horizon: int
    runs: int
    M: int = 1

    def running_mean(self, n_runs: int, confidence: float | None = None) -> Estimate:
        """Mean of N_rej over the first ``n_runs`` runs with an interval."""
        c = self.counts[: int(n_runs)].astype(np.float64)
        conf = self.estimate.confidence if confidence is None else confidence
        return mean_estimate(float(c.sum()), float((c * c).sum()), c.size, conf)


def _chunks(runs, batch_size, V, T):
    if batch_size is None:
        batch_size = max(1, CHUNK_ENTRIES // max(1, V * max(T, 1)))
    batch_size = int(batch_size)
    if batch_size < 1:
        raise ValueError(f"batch_size: expected a positive integer, got {batch_size}")
    return [(s, min(runs, s + batch_size)) for s in range(0, runs, batch_size)]


def _sd_step(p, q, rng):
    """One full-lookahead SD verification per row: (token (B,), rejected (B,) bool)."""
    B = p.shape[0]
    idx = np.arange(B)
    draft = sample_categorical(p, rng)
    u = rng.random(B)
    accept = u * p[idx, draft] < q[idx, draft]  # u < q/p, p(draft) > 0
    corr = sample_categorical(residual(q, p), rng)
    return np.where(accept, draft, corr), ~accept


def _simulate(draft, target, T, runs, seed, batch_size, progress, M, return_sequences, confidence):
    rng = np.random.default_rng(seed)
    V = target.vocab_size
    counts = np.zeros(runs, dtype=np.int64)
    per_pos = np.zeros(T)
    seqs = np.zeros((runs, T), dtype=np.int64) if return_sequences else None
    verifier = MultiRound()
    for lo, hi in tqdm(_chunks(runs, batch_size, V, T), disable=None if progress is None else not progress,
                       desc="rejections"):
        B = hi - lo
        x = np.zeros((B, T), dtype=np.int64)
        start = np.ones(B, dtype=bool)  # Algorithm 4: first position of a round
        nrej = np.zeros(B, dtype=np.int64)
        for n in range(T):
            p = np.asarray(draft.next_probs(x[:, :n]), dtype=np.float64)
            q = np.asarray(target.next_probs(x[:, :n]), dtype=np.float64)
            tok, rej = _sd_step(p, q, rng)
            if M > 1 and start.any():
                s = np.flatnonzero(start)
                cands = sample_candidates(p[s], M, rng)
                out = verifier.sample(cands, p[s], q[s], rng, validate=False)
                tok[s] = out.token
                rej[s] = ~out.accepted
            x[:, n] = tok
            nrej += rej
            per_pos[n] += rej.sum()
            start = rej  # a rejection ends the round; an acceptance follows the response
        counts[lo:hi] = nrej
        if seqs is not None:
            seqs[lo:hi] = x
    c = counts.astype(np.float64)
    est = mean_estimate(float(c.sum()), float((c * c).sum()), runs, confidence)
    return RejectionSimulation(est, per_pos / runs, counts, seqs, T, runs, M)


def simulate_rejections(draft: Source, target: Source, horizon: int, runs: int, *, seed=0,
                        batch_size: int | None = None, progress: bool | None = None,
                        return_sequences: bool = False, confidence: float = 0.95) -> RejectionSimulation:
    """Monte Carlo of Algorithm 1 with full lookahead (Remark 1); checks eq. (1) and (2).

    Every position n = 1..T is verified exactly once: x̃_n ~ p_n(·|x_{1:n−1}) (the actual
    prefix — with full lookahead the draft after an acceptance continues the accepted prefix,
    after a rejection it restarts from it), accepted with probability min{1, q_n/p_n}(x̃_n),
    otherwise x_n ~ Norm[(q_n − p_n)_+] and N_rej += 1. Vectorised over runs; the only Python
    loop is over the T positions (and chunks of ``batch_size`` runs).

    Parameters
    ----------
    draft, target : Source
    horizon : int
        T.
    runs : int
        Number of independent generations (>= 2).
    seed : int or Generator
    batch_size : int, optional
        Runs per vectorised chunk (default from :data:`CHUNK_ENTRIES`).
    progress : bool, optional
        tqdm progress bar over chunks (``None``: only on a terminal).
    return_sequences : bool
        Keep the generated x_{1:T} (for law checks).
    confidence : float
        Level of the interval on E[N_rej].

    Returns
    -------
    RejectionSimulation

    Raises
    ------
    ValueError
        Vocabulary mismatch, bad horizon, runs < 2, bad batch_size.
    """
    T = _check_pair(draft, target, horizon)
    return _simulate(draft, target, T, _check_runs(runs), seed, batch_size, progress, 1,
                     return_sequences, confidence)


# ============================================================================ §5 template family
def _sd_accept(n, prefixes, tokens, p, q):
    B = tokens.shape[0]
    px, qx = p[np.arange(B), tokens], q[np.arange(B), tokens]
    return np.where(px > 0, np.minimum(1.0, qx / np.where(px > 0, px, 1.0)), 0.0)


def _sd_resample(n, prefixes, p, q):
    return residual(q, p)


@dataclass(frozen=True)
class RejectionTemplate:
    """A member of the rejection-based family F of spec §5.

    At step n with accepted prefix x_{1:n−1}: draft x̃_n ~ p_n, accept with probability
    b_n(x̃_n|x_{1:n−1}), otherwise (a rejection) x_n ~ P_n(·|x_{1:n−1}).

    Parameters
    ----------
    accept : callable ``(n, prefixes, tokens, p, q) -> b``
        n is the 1-based position, ``prefixes`` int (B, n−1), ``tokens`` int (B,) the drafted
        tokens, ``p``/``q`` the (B, V) draft/target rows at the prefixes; returns b_n in [0, 1]
        of shape (B,). (The rows are passed so that a template — SD included — is not bound to
        one instance; the brief's ``accept(n, prefix_batch, token)`` plus the two rows.)
    resample : callable ``(n, prefixes, p, q) -> P``
        Resampling rows P_n, shape (B, V); only read where the rejection probability is > 0.
    name : str
    """

    accept: Callable
    resample: Callable
    name: str = "template"

    @classmethod
    def speculative(cls) -> RejectionTemplate:
        """SD: b_n = min{1, q_n/p_n}, P_n = Norm[(q_n − p_n)_+] (spec §5)."""
        return cls(_sd_accept, _sd_resample, "speculative")


@dataclass(frozen=True)
class TemplateLaw:
    """Exact law of a rejection-based algorithm over V^T (from :func:`template_law` / :func:`batch_law`).

    Attributes
    ----------
    tokens : ndarray (V**T, T)
        All sequences, lexicographic.
    probs : ndarray (V**T,)
        The algorithm's output law.
    target_probs : ndarray (V**T,)
        q(x_{1:T}).
    per_position : ndarray (T,)
        P(rejection at position n).
    """

    tokens: np.ndarray
    probs: np.ndarray
    target_probs: np.ndarray
    per_position: np.ndarray

    @property
    def expected_rejections(self) -> float:
        return float(self.per_position.sum())

    @property
    def max_deviation(self) -> float:
        """max_x |P^A(x) − q(x)| (0 for an unbiased algorithm, eq. (2))."""
        return float(np.abs(self.probs - self.target_probs).max())


def template_law(draft: Source, target: Source, template: RejectionTemplate, horizon: int,
                 *, atol: float = 1e-12) -> TemplateLaw:
    """Exact output law over V^T and E[N_rej] of a template member (spec §5, eqs. (2)–(3)).

    Given the accepted prefix the step-n kernel is
    K_n(x) = p_n(x) b_n(x) + r_n P_n(x) with r_n = 1 − Σ_x p_n(x) b_n(x) the rejection
    probability, so P^A(x_{1:T}) = ∏_n K_n and E[N_rej] = Σ_n E_{x_{1:n−1} ~ P^A}[r_n].

    Raises
    ------
    ValueError
        Bad instance/horizon, V**T above MAX_ENUMERATION, b outside [0, 1] (beyond ``atol``)
        or resampling rows that are not distributions where r_n > 0.
    """
    T = _check_pair(draft, target, horizon)
    V = target.vocab_size
    _level_rows(T, V, "template_law")
    tokens, mass = EMPTY_PREFIX, np.ones(1)
    per_pos = np.zeros(T)
    for n in range(1, T + 1):
        p = np.asarray(draft.next_probs(tokens), dtype=np.float64)
        q = np.asarray(target.next_probs(tokens), dtype=np.float64)
        N = tokens.shape[0]
        rep = np.repeat(tokens, V, axis=0)
        tok = np.tile(np.arange(V), N)
        b = np.asarray(template.accept(n, rep, tok, np.repeat(p, V, axis=0), np.repeat(q, V, axis=0)),
                       dtype=np.float64).reshape(N, V)
        if (b < -atol).any() or (b > 1 + atol).any() or not np.isfinite(b).all():
            raise ValueError(f"{template.name}: acceptance probabilities b_{n} must lie in [0, 1]; "
                             f"got range [{b.min()}, {b.max()}]")
        a = p * np.clip(b, 0.0, 1.0)
        r = np.clip(1.0 - a.sum(1), 0.0, None)
        P = np.asarray(template.resample(n, tokens, p, q), dtype=np.float64).reshape(N, V)
        live = r > atol
        if live.any():
            Pl = P[live]
            if (Pl < -atol).any() or (np.abs(Pl.sum(1) - 1.0) > 1e-9).any():
                raise ValueError(f"{template.name}: resampling rows P_{n} must be probability rows "
                                 "where the rejection probability is positive")
        K = a + r[:, None] * np.where(live[:, None], P, 0.0)
        per_pos[n - 1] = mass @ r
        mass = (mass[:, None] * K).reshape(-1)
        tokens = extend_prefixes(tokens, V)
    return TemplateLaw(tokens, mass, target.enumerate(T).probs, per_pos)


# ============================================================================ Theorem 2 LP
def min_rejection_lp(draft: Source, target: Source, horizon: int) -> tuple[float, str]:
    """Minimum E[N_rej] over *unbiased* members of the family F, as a linear programme (eq. (3)).

    Derivation. A member's output law is ∏_n K_n(x_n|x_{1:n−1}) with the step kernel
    K_n = p_n b_n + r_n P_n (see :func:`template_law`). Unbiasedness ∏_n K_n = q on V^T implies,
    by marginalising the last positions and dividing, K_n(·|x_{1:n−1}) = q_n(·|x_{1:n−1}) at
    every prefix with q(x_{1:n−1}) > 0; in particular the law of the prefix at step n is q, so
    E[N_rej] = Σ_n Σ_{x_{1:n−1}} q(x_{1:n−1}) r_n(x_{1:n−1}). Variables, per position n, prefix
    x_{1:n−1} and token x, in *joint* mass (weighted by the prefix's probability q(x_{1:n−1})
    under the algorithm):

    * A_n(x_{1:n−1}, x) = q(x_{1:n−1}) p_n(x) b_n(x) — accepted mass, 0 ≤ A ≤ q(x_{1:n−1}) p_n(x);
    * R_n(x_{1:n−1}, x) = q(x_{1:n−1}) r_n P_n(x) ≥ 0 — resampled mass;
    * unbiasedness: A_n + R_n = q(x_{1:n}) for every x (this forces Σ_x R_n = q(prefix)·r_n and
      A ≤ q(x_{1:n}); any feasible (A, R) defines b = A/(q(prefix) p) and P = R/ΣR);
    * objective: minimise Σ_n Σ R_n = E[N_rej].

    Every feasible point is a member, so the optimum is the family's minimum; it is
    Σ_n E_{x_{1:n−1}~q}[1 − Σ_x min(p_n, q_n)] = Σ_n E[TV(p_n, q_n)], eq. (3), attained by SD.
    Solved with scipy ``linprog`` (HiGHS dual simplex, presolve off). Prefixes of target
    probability 0 are included (their variables are forced to 0).

    Returns
    -------
    (value, status) : (float, str)
        The optimal E[N_rej] and the solver's message.

    Raises
    ------
    ValueError
        Bad instance/horizon, or more than :data:`MAX_LP_VARIABLES` variables.
    RuntimeError
        If the solver does not report an optimum.
    """
    from scipy import sparse
    from scipy.optimize import linprog

    T = _check_pair(draft, target, horizon)
    V = target.vocab_size
    n_prefix = sum(V ** k for k in range(T))
    nvar = 2 * n_prefix * V
    if nvar > MAX_LP_VARIABLES:
        raise ValueError(f"min_rejection_lp: {nvar} variables exceed MAX_LP_VARIABLES = {MAX_LP_VARIABLES}; "
                         "the LP is meant for small chains (e.g. V <= 3, T <= 3)")
    ub_a, rhs = [], []
    tokens, qmass = EMPTY_PREFIX, np.ones(1)
    for _ in range(T):
        p = np.asarray(draft.next_probs(tokens), dtype=np.float64)
        q = np.asarray(target.next_probs(tokens), dtype=np.float64)
        ub_a.append((qmass[:, None] * p).reshape(-1))
        child = (qmass[:, None] * q).reshape(-1)
        rhs.append(child)
        tokens, qmass = extend_prefixes(tokens, V), child
    ub_a, rhs = np.concatenate(ub_a), np.concatenate(rhs)
    k = rhs.size  # variables: A (k) then R (k)
    eye = sparse.identity(k, format="csr")
    res = linprog(np.concatenate([np.zeros(k), np.ones(k)]), A_eq=sparse.hstack([eye, eye]).tocsr(), b_eq=rhs,
                  bounds=list(zip(np.zeros(2 * k), np.concatenate([ub_a, np.full(k, np.inf)]), strict=True)),
                  method="highs-ds", options={"presolve": False, "primal_feasibility_tolerance": 1e-10,
                                              "dual_feasibility_tolerance": 1e-10})
    if res.status != 0:
        raise RuntimeError(f"min_rejection_lp: linear programme failed: {res.message}")
    return float(res.fun), str(res.message)


# ============================================================================ Algorithm 4
def _start_rejection(p, q, M):
    """Multi-round rejection at a round's first position, row-wise.

    Returns (Π_{m=1}^{M} TVᵐ (B,), q^M (B, V)) with q⁰ = q, q^m = Norm[(q^{m−1} − p)_+].
    """
    t = q
    rej = np.ones(p.shape[0])
    for _ in range(M):
        t, mass = residual(t, p, return_mass=True)
        rej = rej * mass
        if not (mass > 0).any():
            break
    return rej, t


def batch_rejections_per_position(draft: Source, target: Source, horizon: int, M: int) -> np.ndarray:
    """Per-position terms Σ_{x_{1:n}} f(x_{1:n}) of recursion (4)–(5) for Algorithm 4 (batch SD).

    f(x_{1:n}) = P(x_{1:n} generated and token n produced by a rejection), f(∅) = 1:
    f(x_{1:n}) = f(x_{1:n−1}) Π_m TVᵐ_n q^M_n(x_n) + [q(x_{1:n−1}) − f(x_{1:n−1})] (q_n − p_n)_+(x_n).
    For IID/Markov sources f is indexed by the last token (the recursion's coefficients depend
    on the prefix only through it); other sources enumerate prefixes (V**T ≤ MAX_ENUMERATION).

    Raises
    ------
    ValueError
        Bad instance/horizon, or M not an integer >= 1.
    """
    T = _check_pair(draft, target, horizon)
    M = _check_M(M)
    out = np.zeros(T)
    chains = _chains(draft, target, T)
    if chains is not None:
        (p1, Pm), (q1, Qm) = chains
        f, qm = np.ones(1), np.ones(1)  # the single state "prompt" before position 1
        for n in range(T):
            P = p1[None] if n == 0 else Pm[n - 1]
            Q = q1[None] if n == 0 else Qm[n - 1]
            rej, qM = _start_rejection(P, Q, M)
            newf = (f * rej) @ qM + (qm - f) @ np.clip(Q - P, 0.0, None)
            out[n] = newf.sum()
            f, qm = newf, qm @ Q
        return out
    V = target.vocab_size
    _level_rows(T, V, "batch_rejections_per_position")
    tokens, f, qm = EMPTY_PREFIX, np.ones(1), np.ones(1)
    for n in range(T):
        P = np.asarray(draft.next_probs(tokens), dtype=np.float64)
        Q = np.asarray(target.next_probs(tokens), dtype=np.float64)
        rej, qM = _start_rejection(P, Q, M)
        newf = (f * rej)[:, None] * qM + (qm - f)[:, None] * np.clip(Q - P, 0.0, None)
        out[n] = newf.sum()
        f, qm = newf.reshape(-1), (qm[:, None] * Q).reshape(-1)
        tokens = extend_prefixes(tokens, V)
    return out


def batch_expected_rejections(draft: Source, target: Source, horizon: int, M: int) -> float:
    """E[N_rej^{(M)}] of batch SD (Algorithm 4), eq. (5) with recursion (4).

    M = 1 equals eq. (1); the value decreases in M. See :func:`batch_rejections_per_position`.
    On :func:`markov_pair` (V=4, T=50): 20.820 (M=1), 18.968 (2), 17.567 (4), 16.554 (8),
    14.492 (1000) — spec §6.
    """
    return float(batch_rejections_per_position(draft, target, horizon, M).sum())


def batch_curve(draft: Source, target: Source, horizon: int, Ms: Sequence[int] = BATCH_MS) -> dict:
    """E[N_rej] and T/E[N_rej] against the batch size M (eq. (5)), JSON-ready.

    Returns ``{"M": [...], "expected_rejections": [...], "speedup": [...], "horizon": T}``.
    """
    T = _check_pair(draft, target, horizon)
    Ms = [_check_M(m) for m in Ms]
    vals = [batch_expected_rejections(draft, target, T, m) for m in Ms]
    return {"M": Ms, "expected_rejections": vals,
            "speedup": [T / v if v > 0 else math.inf for v in vals], "horizon": T}


def batch_law(draft: Source, target: Source, horizon: int, M: int) -> TemplateLaw:
    """Exact output law and rejections of Algorithm 4 by enumeration (spec §6, Theorem 3(i)).

    The algorithm's state after x_{1:n−1} is (prefix, round-start flag). At a round start the
    M first tokens are i.i.d. from p_n (independent responses given the same prefix); their
    tuple law is enumerated (:func:`~otspec.verifiers.multi.candidate_tuple_law`) and the exact
    per-tuple law of :class:`~otspec.verifiers.multi.MultiRound` is averaged over it. Inside a
    followed response the step is plain SD: accepted mass min(p_n, q_n), rejected mass
    (q_n − p_n)_+. A rejection starts the next round. This does *not* use recursion (4), so it
    checks both unbiasedness (2) and eq. (5). Small instances only: V**T ≤ MAX_ENUMERATION and
    V**M ≤ :data:`MAX_BATCH_TUPLES`.
    """
    T = _check_pair(draft, target, horizon)
    M = _check_M(M)
    V = target.vocab_size
    _level_rows(T, V, "batch_law")
    if V ** M > MAX_BATCH_TUPLES:
        raise ValueError(f"batch_law: {V}^{M} candidate tuples exceed MAX_BATCH_TUPLES = {MAX_BATCH_TUPLES}")
    verifier = MultiRound()
    tokens = EMPTY_PREFIX
    g_start, g_follow = np.ones(1), np.zeros(1)
    per_pos = np.zeros(T)
    for n in range(T):
        P = np.asarray(draft.next_probs(tokens), dtype=np.float64)
        Q = np.asarray(target.next_probs(tokens), dtype=np.float64)
        N = tokens.shape[0]
        acc_s, rej_s = np.zeros((N, V)), np.zeros((N, V))
        for i in range(N):
            tup, w = candidate_tuple_law(P[i], M, replacement=True)
            law = verifier.law(tup, np.repeat(P[i][None], len(w), 0), np.repeat(Q[i][None], len(w), 0))
            acc_s[i], rej_s[i] = w @ law.accepted, w @ law.rejected
        acc_f, rej_f = np.minimum(P, Q), np.clip(Q - P, 0.0, None)
        new_start = g_start[:, None] * rej_s + g_follow[:, None] * rej_f
        new_follow = g_start[:, None] * acc_s + g_follow[:, None] * acc_f
        per_pos[n] = new_start.sum()
        g_start, g_follow = new_start.reshape(-1), new_follow.reshape(-1)
        tokens = extend_prefixes(tokens, V)
    return TemplateLaw(tokens, g_start + g_follow, target.enumerate(T).probs, per_pos)


def simulate_batch_rejections(draft: Source, target: Source, horizon: int, M: int, runs: int, *, seed=0,
                              batch_size: int | None = None, progress: bool | None = None,
                              return_sequences: bool = False, confidence: float = 0.95) -> RejectionSimulation:
    """Monte Carlo of batch SD, Algorithm 4 (spec §6), vectorised over runs.

    At a round's first position the M responses' first tokens are drawn i.i.d. from
    p_n(·|x_{1:n−1}) and verified by multi-round rejection sampling
    (:class:`~otspec.verifiers.multi.MultiRound`); if all M are rejected, x_n ~ q^M_n and
    N_rej += 1 (the next position starts a new round). Once a response is accepted it is
    followed with the plain SD check until a rejection. The followed response's later tokens
    are drawn lazily from p_n(·|actual prefix): it was drafted from p given its own tokens,
    which coincide with the accepted prefix, so the law is the same as drafting to the end.
    The other responses' later tokens never influence the output and are not drawn.
    M = 1 is Algorithm 1. Checks eqs. (4)–(5).

    Parameters and returns as in :func:`simulate_rejections`, plus ``M`` (>= 1).
    """
    T = _check_pair(draft, target, horizon)
    return _simulate(draft, target, T, _check_runs(runs), seed, batch_size, progress, _check_M(M),
                     return_sequences, confidence)


# ============================================================================ figure
def rejections_figure_data(scale: float = 1.0, *, seed: int = 0, max_n: int = 40,
                           Ms: Sequence[int] = BATCH_MS, simulate_max_M: int = 8) -> dict:
    """Data of the paper's simulation figure (spec §8 (a) and §6 (b)) on :func:`markov_pair`.

    Panel (a): running average of N_rej over the first 100·N runs of Algorithm 1, N = 1..N_max
    (N_max = max(4, round(``max_n``·scale))), with 95 % intervals, against eq. (1).
    Panel (b): eq. (5) against M ∈ ``Ms`` with simulated points (max(200, round(2000·scale))
    runs each) for M ≤ ``simulate_max_M``.

    Returns
    -------
    dict
        JSON-ready: ``instance``, ``formula``, ``speedup``, ``running`` (lists ``n``, ``runs``,
        ``mean``, ``low``, ``high``), ``batch`` (:func:`batch_curve` output plus ``simulated``).
    """
    if not scale > 0:
        raise ValueError(f"scale: expected a positive number, got {scale!r}")
    V, T = 4, 50
    draft, target = markov_pair(V, T, 5)
    formula = expected_rejections(draft, target, T)
    n_max = max(4, int(round(max_n * scale)))
    sim = simulate_rejections(draft, target, T, 100 * n_max, seed=seed, progress=False)
    running = {"n": [], "runs": [], "mean": [], "low": [], "high": []}
    for n in range(1, n_max + 1):
        est = sim.running_mean(100 * n)
        running["n"].append(n)
        running["runs"].append(100 * n)
        running["mean"].append(est.value)
        running["low"].append(est.low)
        running["high"].append(est.high)
    curve = batch_curve(draft, target, T, Ms)
    sim_runs = max(200, int(round(2000 * scale)))
    simulated = []
    for i, m in enumerate(curve["M"]):
        if m <= simulate_max_M:
            est = simulate_batch_rejections(draft, target, T, m, sim_runs, seed=seed + 1 + i, progress=False).estimate
            simulated.append({"M": m, "runs": sim_runs, **est.as_dict()})
    curve["simulated"] = simulated
    return {
        "instance": {"name": "markov_pair", "vocab": V, "horizon": T, "seed": 5},
        "formula": formula,
        "speedup": T / formula,
        "running": running,
        "batch": curve,
    }


def render_rejections(data: dict):
    """Two-panel matplotlib Figure from :func:`rejections_figure_data`."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    run = data["running"]
    ax1.fill_between(run["n"], run["low"], run["high"], alpha=0.3, label="95% CI")
    ax1.plot(run["n"], run["mean"], marker="o", ms=3, label="simulation (Algorithm 1)")
    ax1.axhline(data["formula"], color="k", ls="--", label=f"Theorem 1: {data['formula']:.4f}")
    ax1.set_xlabel("N (runs = 100·N)")
    ax1.set_ylabel("mean number of rejections")
    ax1.set_title(f"(a) E[N_rej], T = {data['instance']['horizon']}")
    ax1.legend()
    b = data["batch"]
    ax2.plot(b["M"], b["expected_rejections"], marker="s", label="recursion (4)-(5)")
    sims = b.get("simulated", [])
    if sims:
        ms = [s["M"] for s in sims]
        vals = [s["value"] for s in sims]
        err = [1.96 * s["stderr"] for s in sims]
        ax2.errorbar(ms, vals, yerr=err, fmt="o", capsize=3, label="simulation (Algorithm 4)")
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("batch size M")
    ax2.set_ylabel("E[N_rej]")
    ax2.set_title("(b) batch speculative decoding")
    ax2.legend()
    fig.tight_layout()
    return fig
