"""Monte Carlo engine: many independent speculative iterations, batched.

Each trial drafts a block of L tokens from the draft source (empty context),
scores it with both sources and runs the verifier's batched ``sample``. Trials
are processed in vectorised chunks; the only Python loop is over chunks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from ..checks import MAX_DRAFT_LENGTH, MAX_SIMULATION_BLOCKS, check_size
from ..pairs import check_pair
from ..sources import IIDSource, Source
from ..verifiers.base import Verifier
from .chunking import chunk_size
from .rowfree import RowProfile, row_free_sampler
from .stats import Estimate, check_confidence, mean_estimate, proportion_intervals

__all__ = ["MONTE_CARLO_METHODS", "MonteCarloResult", "default_batch_size", "simulate"]

MONTE_CARLO_METHODS = ("auto", "rows", "row_free")


@dataclass(frozen=True)
class MonteCarloResult:
    """Estimates from :func:`simulate`.

    Attributes
    ----------
    draft_length, n_blocks : int
    accepted : Estimate
        E[τ] (accepted draft tokens per iteration).
    tokens_per_iteration : Estimate
        E[τ] + 1.
    accept_counts : ndarray, shape (L+1,)
        Number of trials with τ = l.
    accept_dist, accept_dist_ci : ndarray, shapes (L+1,) and (L+1, 2)
        Empirical P(τ = l) with Wilson intervals.
    first_token_counts : ndarray, shape (V,)
        Counts of the first emitted token (X_1 if τ >= 1 else Y); for a
        lossless verifier its law is the target's first-token row.
    elapsed_s : float
        Wall-clock seconds spent (informational; benchmarks report speed).
    """

    draft_length: int
    n_blocks: int
    accepted: Estimate
    tokens_per_iteration: Estimate
    accept_counts: np.ndarray
    accept_dist: np.ndarray
    accept_dist_ci: np.ndarray
    first_token_counts: np.ndarray
    elapsed_s: float


def default_batch_size(vocab_size: int, draft_length: int) -> int:
    """Trials per chunk: :func:`~otspec.engine.chunking.chunk_size` of (L + 1)·V rows' entries per trial."""
    return chunk_size((draft_length + 1) * vocab_size)


def simulate(draft: Source, target: Source, verifier: Verifier, draft_length: int, n_blocks: int, *,
             seed=0, batch_size: int | None = None, progress: bool | None = None,
             confidence: float = 0.95, method: str = "auto") -> MonteCarloResult:
    """Simulate ``n_blocks`` independent iterations of ``verifier``.

    Parameters
    ----------
    draft, target : Source
    verifier : Verifier
    draft_length : int
    n_blocks : int
    seed : int or numpy Generator
        Fixes every random draw (drafts and verification).
    batch_size : int, optional
        Trials per vectorised chunk (default: :func:`default_batch_size`).
    progress : bool, optional
        Show a tqdm bar over chunks; ``None`` shows it only on a terminal.
    confidence : float
        Level of the reported intervals.
    method : {"auto", "rows", "row_free"}
        ``rows`` scores every block with both sources and runs ``verifier.sample`` on the rows;
        ``row_free`` (IID pairs with token or published block verification) samples the same law
        from precomputed tables without materialising rows (:mod:`otspec.engine.rowfree`), so its cost
        does not grow with V; ``auto`` picks ``row_free`` where it applies.
    """
    L = check_size(draft_length, "draft_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    n_blocks = check_size(n_blocks, "n_blocks", limit=MAX_SIMULATION_BLOCKS, limit_name="MAX_SIMULATION_BLOCKS")
    confidence = check_confidence(confidence)
    V = check_pair(draft, target)
    target.check_length(L + 1)
    if method not in MONTE_CARLO_METHODS:
        raise ValueError(f"method: expected one of {MONTE_CARLO_METHODS}, got {method!r}")
    fast = row_free_sampler(verifier) if isinstance(draft, IIDSource) and isinstance(target, IIDSource) else None
    if method == "row_free" and fast is None:
        raise ValueError(f"method='row_free' needs an IID draft and target and a verifier among token, block; got "
                         f"{type(draft).__name__}, {type(target).__name__} and {verifier.name!r}")
    if method == "rows":
        fast = None
    profile = RowProfile(draft.probs, target.probs) if fast is not None else None
    rng = np.random.default_rng(seed)
    batch = chunk_size((L + 1) * V if fast is None else 4 * (L + 1), batch_size)
    counts = np.zeros(L + 1, dtype=np.int64)
    first = np.zeros(V, dtype=np.int64)
    start = time.perf_counter()
    # tqdm's disable=None hides the bar when stderr is not a terminal
    disable = None if progress is None else not progress
    with tqdm(total=n_blocks, unit="block", unit_scale=True, disable=disable,
              desc=f"monte carlo ({verifier.name}, L={L})", leave=False) as bar:
        done = 0
        while done < n_blocks:
            b = min(batch, n_blocks - done)
            if fast is not None:
                out = fast(profile, b, L, rng)
                tokens = out.tokens
            else:
                tokens = draft.sample(b, L, rng)
                out = verifier.sample(tokens, draft.path_probs(tokens)[:, :L, :], target.path_probs(tokens), rng,
                                      validate=False)
            tau = np.asarray(out.accepted_len)
            counts += np.bincount(tau, minlength=L + 1)
            first += np.bincount(np.where(tau >= 1, tokens[:, 0], np.asarray(out.correction)), minlength=V)
            done += b
            bar.update(b)
    elapsed = time.perf_counter() - start
    ells = np.arange(L + 1)
    acc = mean_estimate(float(counts @ ells), float(counts @ ells**2), n_blocks, confidence)
    tpi = Estimate(acc.value + 1, acc.stderr, acc.low + 1, acc.high + 1, confidence)
    return MonteCarloResult(
        draft_length=L,
        n_blocks=n_blocks,
        accepted=acc,
        tokens_per_iteration=tpi,
        accept_counts=counts,
        accept_dist=counts / n_blocks,
        accept_dist_ci=proportion_intervals(counts, n_blocks, confidence),
        first_token_counts=first,
        elapsed_s=elapsed,
    )
