"""Exact engine: enumerate every draft block and compute the verifier's output law.

For a draft length L, every block x^L with p(x^L) > 0 is enumerated together
with both models' rows along it; the verifier's exact conditional law of
(τ, Y) is combined with p(x^L) into the law of the emitted prefix (X^τ, Y).
To compare with the target, the emitted prefix is continued by the target
model up to L+1 tokens (the validity condition, spec eq. (1)): a lossless
verifier makes this *filled output law* equal to the target's law of the first
L+1 tokens.

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import MAX_DRAFT_LENGTH, MAX_EXACT_ENTRIES, capped_power, check_size, format_count
from ..errors import SizeLimitError
from ..pairs import check_pair
from ..sources import EMPTY_PREFIX, MAX_ENUMERATION, Source, extend_prefixes
from ..verifiers.base import Verifier
from .arguments import chain_call
from .branching import branch_law

__all__ = ["MAX_EXACT_ENTRIES", "ExactResult", "evaluate"]


@dataclass(frozen=True)
class ExactResult:
    """Exact summary of one speculative iteration from an empty context.

    Attributes
    ----------
    draft_length : int
        L.
    accept_dist : ndarray, shape (L+1,)
        P(τ = l) for l = 0..L.
    expected_accepted : float
        E[τ], expected accepted draft tokens per iteration.
    expected_tokens_per_iteration : float
        E[τ] + 1 (accepted tokens plus the correction/bonus token).
    output_law : ndarray, shape (V**(L+1),)
        Law of the emitted prefix continued by the target to L+1 tokens,
        indexed lexicographically (token 0 first; see :attr:`sequences`).
    target_law : ndarray, shape (V**(L+1),)
        The target's law of its first L+1 tokens, same indexing.
    max_deviation : float
        max |output_law − target_law|: 0 (up to rounding) for a lossless verifier.
    """

    draft_length: int
    vocab_size: int
    accept_dist: np.ndarray
    expected_accepted: float
    expected_tokens_per_iteration: float
    output_law: np.ndarray
    target_law: np.ndarray
    max_deviation: float
    iterations: int = 1
    #: P(τ = l) for each iteration, shape (iterations, L+1) (later ones under the carried target).
    accept_dist_per_iteration: np.ndarray | None = None

    @property
    def sequence_length(self) -> int:
        """N = iterations · (L + 1): the length of the sequences :attr:`output_law` is over."""
        return self.iterations * (self.draft_length + 1)

    @property
    def expected_accepted_per_iteration(self) -> np.ndarray:
        """E[τ] of each iteration, shape (iterations,)."""
        dists = self.accept_dist_per_iteration
        dists = self.accept_dist[None] if dists is None else dists
        return dists @ np.arange(self.draft_length + 1)

    @property
    def sequences(self) -> np.ndarray:
        """The V**N sequences indexing :attr:`output_law`, shape (V**N, N)."""
        tokens = EMPTY_PREFIX
        for _ in range(self.sequence_length):
            tokens = extend_prefixes(tokens, self.vocab_size)
        return tokens


def evaluate(draft: Source, target: Source, verifier: Verifier, draft_length: int, *,
             iterations: int = 1) -> ExactResult:
    """Exact output law and accepted length of ``verifier`` for blocks of ``draft_length``.

    Parameters
    ----------
    draft, target : Source
        Draft (p) and target (q) models over the same vocabulary.
    verifier : Verifier
        A single-draft verifier. If it carries a residual target into the next
        iteration (``carries_residual``), the emitted prefix is continued by that
        carried target, as the validity condition (spec eq. (1)) requires.
    draft_length : int
        L >= 1.
    iterations : int
        Consecutive iterations to follow from the empty context (default 1). The
        output law is then over N = iterations · (L + 1) tokens; see
        :mod:`otspec.engine.branching`.

    Raises
    ------
    ValueError
        On a vocabulary mismatch, a horizon shorter than L+1, or a problem
        larger than :data:`~otspec.sources.MAX_ENUMERATION` sequences or
        :data:`MAX_EXACT_ENTRIES` probability entries.
    """
    draft, target = chain_call("evaluate", draft, target, verifier, draft_length)
    L = check_size(draft_length, "draft_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    iterations = check_size(iterations, "iterations")
    V = check_pair(draft, target)
    entries = capped_power(V, L) * (L + 1) * V  # no giant integer for huge V**L
    if entries > MAX_EXACT_ENTRIES:
        raise SizeLimitError(f"exact evaluation needs {V}^{L} drafts x {L + 1} positions x {V} tokens = {format_count(entries)} "
                             f"entries, above MAX_EXACT_ENTRIES = {MAX_EXACT_ENTRIES:,}; use Monte Carlo",
                             size=entries, limit=MAX_EXACT_ENTRIES)
    if iterations > 1 or verifier.carries_residual:
        return _evaluate_branching(draft, target, verifier, L, int(iterations))
    target.check_length(L + 1, f"draft_length {L}, then one token from the target")
    enum = draft.enumerate(L)
    live = enum.probs > 0
    tokens, weights = enum.tokens[live], enum.probs[live]
    law = verifier.law(tokens, draft.path_probs(tokens)[:, :L, :], target.path_probs(tokens))
    accept = np.asarray(law.accept_probs, dtype=np.float64)
    corr = np.asarray(law.correction_probs, dtype=np.float64)

    # emitted[l] over prefixes (x^l, y), flattened lexicographically: mass of "tau = l, output x^l y"
    emitted = []
    for ell in range(L + 1):
        prefix_index = tokens[:, :ell] @ (V ** np.arange(ell - 1, -1, -1)) if ell else np.zeros(len(tokens), int)
        mass = (weights * accept[:, ell])[:, None] * corr[:, ell, :]
        table = np.zeros((V**ell, V))
        for y in range(V):
            table[:, y] = np.bincount(prefix_index, weights=mass[:, y], minlength=V**ell)
        emitted.append(table.reshape(-1))

    # continue every emitted prefix with the target, level by level (no division, no logs)
    prefixes, filled, target_law = EMPTY_PREFIX, np.zeros(1), np.ones(1)
    for level in range(L + 1):
        rows = target.next_probs(prefixes)
        filled = (filled[:, None] * rows).reshape(-1) + emitted[level]
        target_law = (target_law[:, None] * rows).reshape(-1)
        prefixes = extend_prefixes(prefixes, V)

    accept_dist = weights @ accept
    expected = float(accept_dist @ np.arange(L + 1))
    return ExactResult(
        draft_length=L,
        vocab_size=V,
        accept_dist=accept_dist,
        expected_accepted=expected,
        expected_tokens_per_iteration=expected + 1.0,
        output_law=filled,
        target_law=target_law,
        max_deviation=float(np.max(np.abs(filled - target_law))),
    )


def _evaluate_branching(draft, target, verifier, L, iterations) -> ExactResult:
    V = target.vocab_size
    count = capped_power(V, iterations * (L + 1))
    if count > MAX_ENUMERATION:
        raise SizeLimitError(f"the output law over {V}^{iterations * (L + 1)} sequences exceeds MAX_ENUMERATION = "
                             f"{MAX_ENUMERATION:,}; reduce the vocabulary, the draft length or the number of iterations",
                             size=count, limit=MAX_ENUMERATION)
    output, dists, N = branch_law(draft, target, verifier, L, iterations)
    target_law = target.enumerate(N).probs
    expected = float(dists[0] @ np.arange(L + 1))
    return ExactResult(
        draft_length=L,
        vocab_size=V,
        accept_dist=dists[0],
        expected_accepted=expected,
        expected_tokens_per_iteration=expected + 1.0,
        output_law=output,
        target_law=target_law,
        max_deviation=float(np.max(np.abs(output - target_law))),
        iterations=iterations,
        accept_dist_per_iteration=dists,
    )
