"""Simulators and exact laws of whole responses: Algorithms 1 and 4 of Yin et al. (2024).

Spec ``yin_theory.md`` §3–6. Convention: **p is the draft, q the target**. The closed forms
these check are in :mod:`otspec.theory.rejections` (eq. (1), recursion (4)–(5)).

* :func:`simulate_rejections` — Monte Carlo of Algorithm 1 with full lookahead (Remark 1);
* :func:`simulate_batch_rejections` — Monte Carlo of batch speculative decoding, Algorithm 4;
* :class:`RejectionTemplate`, :func:`template_law` — the rejection-based family F of §5,
  evaluated exactly over V^T (output law and E[N_rej]);
* :func:`batch_law` — the exact law of Algorithm 4 by enumeration (independent of (4)).

Both simulators are vectorised over runs in chunks of :func:`otspec.engine.chunking.chunk_size`;
the only Python loops are over chunks and the T positions.

Spec: ``docs/yin_theory.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..checks import MAX_SIMULATION_BLOCKS, capped_power, check_progress, check_size, format_count
from ..distributions import residual, sample_categorical
from ..drafts import draft_tuple_law, sample_candidates
from ..errors import SizeLimitError
from ..pairs import check_pair_horizon, walk_prefix_tree
from ..progress import tqdm
from ..sources import MAX_ENUMERATION, Source
from ..theory.rejections import check_batch_size
from ..verifiers.multiround import MultiRound
from ..verifiers.token import TokenVerify
from .chunking import chunk_size, chunks
from .stats import Estimate, mean_estimate

__all__ = [
    "MAX_BATCH_TUPLES",
    "RejectionSimulation",
    "RejectionTemplate",
    "TemplateLaw",
    "batch_law",
    "simulate_batch_rejections",
    "simulate_rejections",
    "template_law",
]

#: Largest V**M candidate tuples enumerated per prefix by :func:`batch_law`.
MAX_BATCH_TUPLES = 100_000


def _check_runs(runs) -> int:
    return check_size(runs, "runs", minimum=2, limit=MAX_SIMULATION_BLOCKS, limit_name="MAX_SIMULATION_BLOCKS",
                      what="an integer number of runs (a confidence interval needs two)")


def _check_enumerable(T: int, V: int, what: str) -> None:
    """Refuse enumerating V**T sequences beyond MAX_ENUMERATION (before anything is built)."""
    count = capped_power(V, T)
    if count > MAX_ENUMERATION:
        raise SizeLimitError(f"{what}: enumerating {V}^{T} = {format_count(count)} sequences exceeds MAX_ENUMERATION = "
                             f"{MAX_ENUMERATION:,}; use IID/Markov sources (exact recursion) or Monte Carlo",
                             size=count, limit=MAX_ENUMERATION)


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


_TOKEN = TokenVerify()


def _sd_step(p, q, rng):
    """One full-lookahead SD verification per row by :class:`~otspec.verifiers.TokenVerify` on one drafted token:
    (token (B,), rejected (B,) bool). The step keeps the draft when it is accepted; the verifier's bonus
    token (row 1, here q again) belongs to the next position and is not used."""
    draft = sample_categorical(p, rng)
    out = _TOKEN.sample(draft[:, None], p[:, None], np.stack([q, q], axis=1), rng, validate=False)
    accept = np.asarray(out.accepted_len) == 1
    return np.where(accept, draft, np.asarray(out.correction)), ~accept


def _simulate(draft, target, T, runs, seed, batch_size, progress, M, return_sequences, confidence):
    rng = np.random.default_rng(seed)
    V = target.vocab_size
    counts = np.zeros(runs, dtype=np.int64)
    per_pos = np.zeros(T)
    seqs = np.zeros((runs, T), dtype=np.int64) if return_sequences else None
    verifier = MultiRound()
    for lo, hi in tqdm(chunks(runs, chunk_size(V * T, batch_size)), disable=None if progress is None else not progress,
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
        Runs per vectorised chunk (default :func:`~otspec.engine.chunking.chunk_size`).
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
    progress = check_progress(progress)
    T = check_pair_horizon(draft, target, horizon)
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
    T = check_pair_horizon(draft, target, horizon)
    V = target.vocab_size
    _check_enumerable(T, V, "template_law")
    per_pos = np.zeros(T)

    def step(level, tokens, p, q, mass):
        n, N = level + 1, tokens.shape[0]
        b = np.asarray(template.accept(n, np.repeat(tokens, V, axis=0), np.tile(np.arange(V), N),
                                       np.repeat(p, V, axis=0), np.repeat(q, V, axis=0)), dtype=np.float64)
        b = b.reshape(N, V)
        if (b < -atol).any() or (b > 1 + atol).any() or not np.isfinite(b).all():
            raise ValueError(f"{template.name}: acceptance probabilities b_{n} must lie in [0, 1]; "
                             f"got range [{b.min()}, {b.max()}]")
        a = p * np.clip(b, 0.0, 1.0)
        r = np.clip(1.0 - a.sum(1), 0.0, None)
        P = np.asarray(template.resample(n, tokens, p, q), dtype=np.float64).reshape(N, V)
        live = r > atol
        if live.any() and ((P[live] < -atol).any() or (np.abs(P[live].sum(1) - 1.0) > 1e-9).any()):
            raise ValueError(f"{template.name}: resampling rows P_{n} must be probability rows "
                             "where the rejection probability is positive")
        per_pos[level] = mass @ r
        return (mass[:, None] * (a + r[:, None] * np.where(live[:, None], P, 0.0)),), None

    *_, (_, (mass,)) = walk_prefix_tree(draft, target, T, (np.ones(1),), step, what="template_law")
    enum = target.enumerate(T)
    return TemplateLaw(enum.tokens, mass, enum.probs, per_pos)


# ============================================================================ Theorem 2 LP


# ============================================================================ Algorithm 4
def batch_law(draft: Source, target: Source, horizon: int, M: int) -> TemplateLaw:
    """Exact output law and rejections of Algorithm 4 by enumeration (spec §6, Theorem 3(i)).

    The algorithm's state after x_{1:n−1} is (prefix, round-start flag). At a round start the
    M first tokens are i.i.d. from p_n (independent responses given the same prefix); their
    tuple law is enumerated (:func:`~otspec.drafts.draft_tuple_law`) and the exact
    per-tuple law of :class:`~otspec.verifiers.multiround.MultiRound` is averaged over it. Inside a
    followed response the step is plain SD: accepted mass min(p_n, q_n), rejected mass
    (q_n − p_n)_+. A rejection starts the next round. This does *not* use recursion (4), so it
    checks both unbiasedness (2) and eq. (5). Small instances only: V**T ≤ MAX_ENUMERATION and
    V**M ≤ :data:`MAX_BATCH_TUPLES`.
    """
    T = check_pair_horizon(draft, target, horizon)
    M = check_batch_size(M)
    V = target.vocab_size
    _check_enumerable(T, V, "batch_law")
    if capped_power(V, M) > MAX_BATCH_TUPLES:
        raise SizeLimitError(f"batch_law: {V}^{M} candidate tuples exceed MAX_BATCH_TUPLES = {MAX_BATCH_TUPLES:,}",
                             size=capped_power(V, M), limit=MAX_BATCH_TUPLES)
    verifier = MultiRound()
    per_pos = np.zeros(T)

    def step(n, tokens, P, Q, g_start, g_follow):
        acc_s, rej_s = np.zeros_like(P), np.zeros_like(P)
        for i in range(P.shape[0]):  # a round's start: the exact multi-round law averaged over the M-tuples
            tup, w = draft_tuple_law(P[i], M, replacement=True)
            law = verifier.law(tup, np.repeat(P[i][None], len(w), 0), np.repeat(Q[i][None], len(w), 0))
            acc_s[i], rej_s[i] = w @ law.accepted, w @ law.rejected
        acc_f, rej_f = np.minimum(P, Q), np.clip(Q - P, 0.0, None)  # inside a followed response: plain SD
        new_start = g_start[:, None] * rej_s + g_follow[:, None] * rej_f
        per_pos[n] = new_start.sum()
        return (new_start, g_start[:, None] * acc_s + g_follow[:, None] * acc_f), None

    *_, (_, (g_start, g_follow)) = walk_prefix_tree(draft, target, T, (np.ones(1), np.zeros(1)), step,
                                                    what="batch_law")
    enum = target.enumerate(T)
    return TemplateLaw(enum.tokens, g_start + g_follow, enum.probs, per_pos)


def simulate_batch_rejections(draft: Source, target: Source, horizon: int, M: int, runs: int, *, seed=0,
                              batch_size: int | None = None, progress: bool | None = None,
                              return_sequences: bool = False, confidence: float = 0.95) -> RejectionSimulation:
    """Monte Carlo of batch SD, Algorithm 4 (spec §6), vectorised over runs.

    At a round's first position the M responses' first tokens are drawn i.i.d. from
    p_n(·|x_{1:n−1}) and verified by multi-round rejection sampling
    (:class:`~otspec.verifiers.multiround.MultiRound`); if all M are rejected, x_n ~ q^M_n and
    N_rej += 1 (the next position starts a new round). Once a response is accepted it is
    followed with the plain SD check until a rejection. The followed response's later tokens
    are drawn lazily from p_n(·|actual prefix): it was drafted from p given its own tokens,
    which coincide with the accepted prefix, so the law is the same as drafting to the end.
    The other responses' later tokens never influence the output and are not drawn.
    M = 1 is Algorithm 1. Checks eqs. (4)–(5).

    Parameters and returns as in :func:`simulate_rejections`, plus ``M`` (>= 1).
    """
    progress = check_progress(progress)
    T = check_pair_horizon(draft, target, horizon)
    return _simulate(draft, target, T, _check_runs(runs), seed, batch_size, progress, check_batch_size(M),
                     return_sequences, confidence)


# ============================================================================ figure
