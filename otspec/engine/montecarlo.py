"""Monte Carlo engine: many independent speculative iterations, batched.

Each trial drafts a block of L tokens from the draft source (empty context),
scores it with both sources and runs the verifier's batched ``sample``. Trials
are processed in vectorised chunks; the only Python loop is over chunks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..checks import (
    MAX_CANDIDATES,
    MAX_DRAFT_LENGTH,
    MAX_SIMULATION_BLOCKS,
    check_progress,
    check_size,
)
from ..distributions import resolve_device, row_pair, to_host
from ..drafts import sample_candidates
from ..jit import available as compiled_available
from ..pairs import check_pair
from ..progress import tqdm
from ..sources import IIDSource, LoggedRows, Source
from ..verifiers.base import Verifier
from ..verifiers.candidates import MultiDraftVerifier
from ..verifiers.token import TokenVerify
from .arguments import chain_call, rng_of
from .chunking import DEFAULT_BACKEND, MONTE_CARLO_METHODS, Backend, check_backend, chunk_size
from .rowfree import ROW_FREE, RowProfile, RowTables, row_free_sampler
from .rowfree_multi import candidate_sampler
from .stats import Estimate, check_confidence, mean_estimate, proportion_intervals

__all__ = ["MONTE_CARLO_METHODS", "Backend", "MonteCarloResult", "default_batch_size", "simulate", "simulate_candidates",
           "simulate_logged"]

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


def _torch_generator(seed, device):
    """A torch generator on ``device`` seeded from ``seed`` (an int or a numpy Generator)."""
    import torch

    return torch.Generator(device=device).manual_seed(int(rng_of(seed).integers(2**62)))


def run_chunks(draw, L: int, V: int, n_blocks: int, batch: int, confidence: float, progress, desc: str) -> MonteCarloResult:
    """Call ``draw(b) -> (τ, first emitted token)`` on chunks of at most ``batch`` trials; tally the result."""
    def step(b, counts, first):
        tau, head = draw(b)
        counts += np.bincount(to_host(tau), minlength=L + 1)
        first += np.bincount(to_host(head), minlength=V)

    return _tally_chunks(step, L, V, n_blocks, batch, confidence, progress, desc)


def run_compiled(fill, L: int, V: int, n_blocks: int, batch: int, confidence: float, progress, desc: str,
                 rng) -> MonteCarloResult:
    """Call ``fill(b, seed, tau_counts, first_counts)`` (a compiled kernel adding b trials to the histograms of τ and
    of the first emitted token) on chunks, each seeded from ``rng``; tally as :func:`run_chunks`."""
    return _tally_chunks(lambda b, counts, first: fill(b, int(rng.integers(0, 2**32)), counts, first), L, V, n_blocks,
                         batch, confidence, progress, desc)


def _tally_chunks(step, L: int, V: int, n_blocks: int, batch: int, confidence: float, progress,
                  desc: str) -> MonteCarloResult:
    """``step(b, tau_counts, first_counts)`` adds b trials to the histograms, on chunks of at most ``batch``."""
    counts = np.zeros(L + 1, dtype=np.int64)
    first = np.zeros(V, dtype=np.int64)
    start = time.perf_counter()
    # tqdm's disable=None hides the bar when stderr is not a terminal
    disable = None if progress is None else not progress
    with tqdm(total=n_blocks, unit="block", unit_scale=True, disable=disable, desc=desc, leave=False) as bar:
        done = 0
        while done < n_blocks:
            b = min(batch, n_blocks - done)
            step(b, counts, first)
            done += b
            bar.update(b)
    return _result(counts, first, n_blocks, time.perf_counter() - start, confidence)


def _result(counts, first, n_blocks: int, elapsed: float, confidence: float) -> MonteCarloResult:
    L = counts.size - 1
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


def _first_emitted(tau, tokens, correction, xp=np):
    """X_1 where τ >= 1, else Y: the first token an iteration emits."""
    return correction if tokens.shape[1] == 0 else xp.where(tau >= 1, tokens[:, 0], correction)


def simulate(draft: Source, target: Source, verifier: Verifier, draft_length: int, n_blocks: int, *,
             seed=0, progress: bool | None = None, confidence: float = 0.95,
             backend: Backend = DEFAULT_BACKEND) -> MonteCarloResult:
    """Simulate ``n_blocks`` independent iterations of ``verifier``.

    Parameters
    ----------
    draft, target : Source
    verifier : Verifier
    draft_length : int
    n_blocks : int
    seed : int or numpy Generator
        Fixes every random draw (drafts and verification).
    progress : bool, optional
        Show a tqdm bar over chunks; ``None`` shows it only on a terminal.
    confidence : float
        Level of the reported intervals.
    backend : Backend
        How the trials are drawn; none of it changes the law. ``backend.method``: ``rows`` scores every block
        with both sources and runs ``verifier.sample`` on the rows;
        ``row_free`` (IID pairs with token or published block verification) samples the same law
        from precomputed tables without materialising rows (:mod:`otspec.engine.rowfree`), so its cost
        does not grow with V; ``compiled`` runs the same algorithm one block at a time in a numba kernel
        that leaves undrawn what the outcome does not read (:mod:`otspec.engine.compiled`); ``auto`` picks
        ``compiled`` (numpy, numba installed), else ``row_free``, where they apply. ``backend.device``: row-free
        sampling on torch. ``backend.batch_size``: trials per vectorised chunk (default :func:`default_batch_size`).
    """
    progress = check_progress(progress)
    draft, target = chain_call("simulate", draft, target, verifier, draft_length)
    L = check_size(draft_length, "draft_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    n_blocks = check_size(n_blocks, "n_blocks", limit=MAX_SIMULATION_BLOCKS, limit_name="MAX_SIMULATION_BLOCKS")
    confidence = check_confidence(confidence)
    V = check_pair(draft, target)
    target.check_length(L + 1, f"draft_length {L}, then one token from the target")
    method, batch_size = check_backend(backend, "simulate", devices=True).method, backend.batch_size
    fast = row_free_sampler(verifier) if isinstance(draft, IIDSource) and isinstance(target, IIDSource) else None
    if method == "row_free" and fast is None:
        raise ValueError(f"method='row_free' needs an IID draft and target and a verifier among token, block; got "
                         f"{type(draft).__name__}, {type(target).__name__} and {verifier.name!r}")
    if method == "rows":
        fast = None
    device = resolve_device(backend.device)
    if device is not None and fast is None:
        raise ValueError(f"device={device!s}: only row-free sampling runs on torch (IID pairs, token or block)")
    desc = f"monte carlo ({verifier.name}, L={L})"
    if method == "compiled" and (fast is None or device is not None or not compiled_available()):
        raise ValueError("method='compiled' needs numba, numpy (no device) and an IID pair with token or block "
                         "verification")
    if fast is not None and device is None and method in ("auto", "compiled") and compiled_available():
        from . import compiled  # loads numba: only where a kernel runs

        p, q = draft.probs, target.probs
        fill = (compiled.token_counts(p, q, L) if fast is ROW_FREE[TokenVerify] else
                compiled.block_counts(RowProfile(p, q), p, q, L))
        return run_compiled(fill, L, V, n_blocks, batch_size or 1 << 20, confidence, progress, desc,
                            rng_of(seed))
    if fast is not None:
        if device is None:
            tables, rng = RowProfile(draft.probs, target.probs), rng_of(seed)
        else:
            tables = RowTables([0, V], np.arange(V), draft.probs, target.probs, device=device)
            rng = _torch_generator(seed, device)

        def draw(b):
            out = fast(tables, b, L, rng)
            return out.accepted_len, _first_emitted(out.accepted_len, out.tokens, out.correction, tables.xp)

        return run_chunks(draw, L, V, n_blocks, chunk_size(4 * (L + 1), batch_size), confidence, progress, desc)
    rng = rng_of(seed)

    def draw_rows(b):
        tokens = draft.sample(b, L, rng)
        out = verifier.sample(tokens, draft.path_probs(tokens)[:, :L, :], target.path_probs(tokens), rng,
                              validate=False)
        tau = np.asarray(out.accepted_len)
        return tau, _first_emitted(tau, tokens, np.asarray(out.correction))

    return run_chunks(draw_rows, L, V, n_blocks, chunk_size((L + 1) * V, batch_size), confidence, progress, desc)


def simulate_candidates(draft_row, target_row, verifier, k: int, n_steps: int, *, seed=0,
                        progress: bool | None = None, confidence: float = 0.95,
                        backend: Backend = DEFAULT_BACKEND) -> MonteCarloResult:
    """Monte Carlo of one multi-draft step: k candidates drawn from the draft row as ``verifier`` requires
    (i.i.d., or without replacement), verified against the target row. ``accepted`` estimates
    P(a candidate is accepted) (τ ∈ {0, 1}); ``first_token_counts`` counts the emitted token Y, which a
    lossless verifier draws from the target row.

    ``backend.method``: ``rows`` hands the verifier (B, V) rows; ``row_free`` (naive, k-Seq, multi-round with and
    without replacement, OTM with i.i.d. drafts) samples the same law from tables built once
    (:mod:`otspec.engine.rowfree_multi`; OTM: an optimal coupling, the same acceptance and Y ~ q), at a cost
    per step that does not grow with V; ``auto`` picks ``row_free`` where it applies."""
    progress = check_progress(progress)
    if not isinstance(verifier, MultiDraftVerifier):  # a name or a class had no .name: an AttributeError
        raise ValueError(f"simulate_candidates: expected a multi-draft verifier, got "
                         f"{getattr(verifier, 'name', None) or verifier!r}")
    k = check_size(k, "k", limit=MAX_CANDIDATES, limit_name="MAX_CANDIDATES")
    n_steps = check_size(n_steps, "n_steps", limit=MAX_SIMULATION_BLOCKS, limit_name="MAX_SIMULATION_BLOCKS")
    confidence = check_confidence(confidence)
    method = check_backend(backend, "simulate_candidates", ("auto", "rows", "row_free")).method
    batch_size = backend.batch_size
    p, q = row_pair(draft_row, target_row)
    rng, V = rng_of(seed), p.size
    fast = None if method == "rows" else candidate_sampler(verifier, p, q, k)
    if method == "row_free" and fast is None:
        raise ValueError(f"method='row_free': no row-free sampler for {verifier.name!r} (naive, kseq, multiround, "
                         "multiround_without_replacement and otm with i.i.d. drafts have one)")
    desc = f"monte carlo ({verifier.name}, k={k})"
    if fast is not None:
        return run_chunks(lambda b: fast(b, rng), 1, V, n_steps, chunk_size(8 * k, batch_size), confidence, progress,
                          desc)
    replacement = verifier.replacement

    def draw(b):
        P, Q = np.broadcast_to(p, (b, V)), np.broadcast_to(q, (b, V))
        out = verifier.sample(sample_candidates(P, k, rng, replacement=replacement), P, Q, rng, validate=False)
        return np.asarray(out.accepted_len), np.asarray(out.token)

    return run_chunks(draw, 1, V, n_steps, chunk_size((k + 2) * V, batch_size), confidence, progress, desc)


def simulate_logged(log: LoggedRows, verifier: Verifier, draft_length: int, n_blocks: int, *, tail: str = "overlap",
                    span: int | None = None, seed=0, progress: bool | None = None, confidence: float = 0.95,
                    backend: Backend = DEFAULT_BACKEND) -> MonteCarloResult:
    """Monte Carlo on logged rows: each iteration starts at a window of L+1 consecutive steps of one path,
    drawn uniformly among all windows of the log (:meth:`~otspec.sources.LoggedRows.windows`; ``span`` as
    there), and verifies a block drafted from the rows there — E[τ] averaged over the windows.

    Row-free (token and published block verification): the sampling tables of every step's row pair are
    built once (:class:`~otspec.engine.rowfree.RowTables`), numpy or torch on ``backend.device`` as in
    :func:`simulate` (``backend.method``: ``auto`` or ``row_free``, the only one it offers).
    ``first_token_counts`` cover the log's V' symbols (:meth:`~otspec.sources.LoggedRows.vocab`).
    """
    if not isinstance(log, LoggedRows):  # a Source has no windows: an AttributeError deep in the loop
        raise ValueError(f"log: expected LoggedRows (otspec.sources.load_logged_rows), got {type(log).__name__}; "
                         "a Source goes to simulate")
    progress = check_progress(progress)
    L = check_size(draft_length, "draft_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    n_blocks = check_size(n_blocks, "n_blocks", limit=MAX_SIMULATION_BLOCKS, limit_name="MAX_SIMULATION_BLOCKS")
    confidence = check_confidence(confidence)
    check_backend(backend, "simulate_logged", ("auto", "row_free"), devices=True)
    batch_size = backend.batch_size
    fast = row_free_sampler(verifier)
    if fast is None:
        raise ValueError(f"Monte Carlo on logged rows samples token and block verification row-free; got "
                         f"{verifier.name!r}")
    windows = log.windows(L, span)
    device = resolve_device(backend.device)
    tables = RowTables(*log.segments(tail), device=device)
    if device is None:
        rng, starts = rng_of(seed), windows

        def pick(b):
            return starts[rng.integers(0, starts.size, b)]
    else:
        import torch

        rng, starts = _torch_generator(seed, device), torch.as_tensor(windows, device=device)

        def pick(b):
            return starts[torch.randint(0, starts.shape[0], (b,), generator=rng, device=device)]

    def draw(b):
        out = fast(tables, b, L, rng, at=pick(b))
        return out.accepted_len, _first_emitted(out.accepted_len, out.tokens, out.correction, tables.xp)

    return run_chunks(draw, L, log.vocab(tail), n_blocks, chunk_size(4 * (L + 1), batch_size), confidence, progress,
                f"monte carlo on logged rows ({verifier.name}, L={L})")
