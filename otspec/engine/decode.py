"""Decode engine: end-to-end speculative generation of toy sources with full accounting.

``generate`` runs B independent sequences through the chain loop of :mod:`otspec.engine.loop`
(each source behind a :class:`~otspec.engine.session.SourceSession`). In each
iteration every unfinished sequence drafts up to L tokens (asking a draft-length
controller after each token whether to draft one more), makes one target call
that scores the drafted prefix, and lets the verifier decide. It counts

* target calls (one per iteration per sequence),
* draft calls (one per drafted token),
* accepted draft tokens, rejections (iterations with τ < drafted length),
  discarded draft tokens (drafted − accepted),

and reports block efficiency = generated tokens / target calls with a batch-means
interval. A sequence never drafts past its last position: with N tokens to
generate and ``pos`` already done, at most N − pos − 1 tokens are drafted, so
every sequence ends with exactly N tokens.
"""

from __future__ import annotations

from ..checks import MAX_DECODE_ENTRIES, MAX_STEP_ENTRIES, check_progress, check_size
from ..errors import SizeLimitError
from ..pairs import check_pair
from ..progress import tqdm
from ..sources import Source
from ..verifiers.base import Verifier
from .arguments import chain_call, rng_of
from .controllers import FixedDraftLength, as_controller
from .ledger import DecodeResult, Ledger, block_efficiency_estimate
from .lookup import chain_plan
from .loop import chain_loop
from .observers import LedgerObserver
from .runstate import LoopHooks
from .session import SourceSession

__all__ = ["DecodeResult", "FixedDraftLength", "block_efficiency_estimate", "generate"]


def check_buffer(n_tokens: int, n_sequences: int) -> None:
    """Refuse a token buffer of more than :data:`~otspec.checks.MAX_DECODE_ENTRIES` entries before allocating it."""
    if n_tokens * n_sequences > MAX_DECODE_ENTRIES:
        raise SizeLimitError(f"decoding {n_sequences:,} sequences x {n_tokens:,} tokens = {n_tokens * n_sequences:,} "
                             f"buffer entries is above MAX_DECODE_ENTRIES = {MAX_DECODE_ENTRIES:,}",
                             size=n_tokens * n_sequences, limit=MAX_DECODE_ENTRIES)


def check_step(n_sequences: int, width: int, vocab_size: int) -> int:
    """Refuse a loop step that scores more than :data:`~otspec.checks.MAX_STEP_ENTRIES` probabilities
    (``n_sequences`` × ``width`` positions × V, each model) before allocating it; returns that count."""
    step = 2 * n_sequences * width * vocab_size
    return _within_step(step, f"one decoding step scores {n_sequences:,} sequences x {width:,} positions x V = "
                              f"{vocab_size:,} for both models = {step:,} probabilities",
                        " (1 GiB): fewer sequences, a shorter draft or a smaller tree")


def check_prefixes(n_sequences: int, nodes: int, length: int) -> int:
    """Refuse a tree step whose nodes' prefixes (``n_sequences`` × ``nodes`` × ``length`` tokens: a toy session
    scores a drafted node from its whole prefix) exceed :data:`~otspec.checks.MAX_STEP_ENTRIES`; returns the count."""
    entries = n_sequences * nodes * length
    return _within_step(entries, f"one tree step reads the prefixes of {n_sequences:,} sequences x {nodes:,} drafted "
                                 f"nodes x {length:,} tokens = {entries:,} entries",
                        ": fewer sequences, a shallower or narrower tree, or fewer tokens")


def _within_step(entries: int, counted: str, advice: str) -> int:
    """``entries``, or a SizeLimitError (``counted``, the limit, then ``advice``) above
    :data:`~otspec.checks.MAX_STEP_ENTRIES`: the one step limit of :func:`check_step` and :func:`check_prefixes`."""
    if entries > MAX_STEP_ENTRIES:
        raise SizeLimitError(f"{counted}, above MAX_STEP_ENTRIES = 2^27{advice}", size=entries, limit=MAX_STEP_ENTRIES)
    return entries


def generate(draft: Source, target: Source, verifier: Verifier, draft_length, n_tokens: int, *,
             n_sequences: int = 1, seed=0, progress: bool | None = None, observers=()) -> DecodeResult:
    """Generate ``n_sequences`` sequences of ``n_tokens`` tokens by speculative decoding.

    Parameters
    ----------
    draft, target : Source
    verifier : Verifier
        A single-draft (chain) verifier; carried state (v1 block verification) goes through
        the protocol's hooks.
    draft_length : int or DraftLengthController
        L, or a controller (:mod:`otspec.engine.controllers`).
    n_tokens : int
        N, tokens generated per sequence (both sources must support N).
    n_sequences : int
        B independent sequences advanced together.
    seed : int or numpy Generator
    progress : bool, optional
        tqdm bar over generated tokens; ``None`` shows it only on a terminal.
    observers : sequence of :class:`~otspec.engine.observers.Observer`
        See every iteration too (after the ledger).

    Intervals are at level 0.95; :meth:`DecodeResult.at_confidence` gives another level without rerunning.
    """
    progress = check_progress(progress)
    draft, target = chain_call("generate", draft, target, verifier, draft_length)
    ctrl = as_controller(draft_length)
    L, N, B = ctrl.max_length, check_size(n_tokens, "n_tokens"), check_size(n_sequences, "n_sequences")
    V = check_pair(draft, target, depth_aware=True)
    check_buffer(N, B)
    target.check_length(N, f"n_tokens = {N:,}")
    draft.check_length(N - 1, f"n_tokens = {N:,}, the last one never drafted")
    ledger = Ledger(B, N, L)
    rng = rng_of(seed)
    tables = chain_plan(draft, target, verifier, ctrl, observers)
    if tables is not None:  # token verification at a fixed L on IID / Markov tables, nobody watching: compiled
        from .compiled_chain import decode_chains

        tokens, rows, starts, drafted, accepted = decode_chains(tables, L, N, B, rng)
        ledger.record(rows, starts, drafted, accepted, accepted + 1, draft_calls=drafted, drafted=int(drafted.sum()))
        return ledger.result(tokens)
    check_step(B, L + 1, V)  # the Python loop scores rows: (B, L + 1, V) a step
    sessions = SourceSession(draft, B, N + 1, max_prefix=N - 2), SourceSession(target, B, N + 1, max_prefix=N - 1)
    with tqdm(total=B * N, unit="tok", unit_scale=True, disable=None if progress is None else not progress,
              leave=False, desc=f"decode ({verifier.name}, L={L})") as bar:
        run = chain_loop(*sessions, verifier, ctrl, N, rng,
                         hooks=LoopHooks(observers=[LedgerObserver(ledger), *observers], bar=bar), batch=B)
    return ledger.result(run.tokens)
