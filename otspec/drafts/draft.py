"""The :class:`Draft` dataclass and the one input check of every verifier (:func:`check_draft`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import array_api_compat
import numpy as np

from ..checks import check_flag
from ..distributions import check_same_vocab, first_index, host_to_like, namespace, validate_probs

__all__ = ["CANDIDATES", "CHAIN", "Draft", "check_draft", "gather_tokens"]

#: Layout of a single draft chain of L tokens.
CHAIN = "chain"
#: Layout of k candidate tokens at one position.
CANDIDATES = "candidates"


@dataclass(frozen=True)
class Draft:
    """Drafted tokens and both models' probability rows (numpy arrays or torch tensors).

    ``layout="chain"`` — one draft of L tokens (the single-draft case, k = 1)::

        tokens        int   (B, L)       X_1..X_L
        draft_probs   float (B, L, V)    row i = p(·|X^i),  i = 0..L−1
        target_probs  float (B, L+1, V)  row i = q(·|X^i),  i = 0..L

    ``layout="candidates"`` — k candidate tokens drafted at one position (multi-draft)::

        tokens        int   (B, k)       X_1..X_k in sampling order; -1 = no candidate
        draft_probs   float (B, V)       p at the node
        target_probs  float (B, V)       q at the node

    A -1 candidate is what :func:`sample_candidates` writes once sampling without
    replacement has exhausted the draft support; it also lets rows with different
    numbers of candidates share a batch. Rows may already be processed by temperature,
    top-k or top-p: verifiers only see probabilities.
    """

    tokens: Any
    draft_probs: Any
    target_probs: Any
    layout: str = CHAIN
    #: Chains only: per-row draft lengths (B,) of a ragged batch (row b drafted ``lengths[b]`` <= L
    #: tokens; the rest is padding), or ``None`` when every row drafted L.
    lengths: Any = None

    def __post_init__(self):
        if self.layout not in (CHAIN, CANDIDATES):  # 'zz' was kept, and each verifier read it as a chain
            raise ValueError(f"layout: expected {CHAIN!r} or {CANDIDATES!r}, got {self.layout!r}")

    @property
    def batch(self) -> int:
        """B, the number of independent drafts."""
        return int(self.tokens.shape[0])

    @property
    def length(self) -> int:
        """L (chain) or k (candidates): the tokens drafted per row."""
        return int(self.tokens.shape[1])

    @property
    def vocab_size(self) -> int:
        return int(self.draft_probs.shape[-1])


def gather_tokens(rows, tokens):
    """``rows[b, i, tokens[b, i]]`` for rows (B, L', V) with L' >= L and tokens (B, L) → (B, L)."""
    if len(rows.shape) != 3 or len(tokens.shape) != 2 or tokens.shape[0] != rows.shape[0] or \
            tokens.shape[1] > rows.shape[1]:
        raise ValueError(f"gather_tokens: expected rows (B, L', V) and tokens (B, L) with L <= L', got rows "
                         f"{tuple(rows.shape)} and tokens {tuple(tokens.shape)}")
    xp = namespace(rows)
    L = tokens.shape[-1]
    return xp.take_along_axis(rows[:, :L, :], tokens[..., None], axis=-1)[..., 0]


def gather_candidates(rows, candidates):
    """``rows[b, candidates[b, i]]``, shape (B, k); 0 where the candidate is -1."""
    xp = namespace(rows)
    valid = candidates >= 0
    safe = xp.astype(xp.where(valid, candidates, xp.zeros_like(candidates)), xp.int64)
    vals = xp.take_along_axis(rows, safe, axis=-1)
    return xp.where(valid, vals, xp.zeros_like(vals))


def check_draft(tokens, draft_probs, target_probs, layout: str = CHAIN, *, validate: bool = True,
                distinct: bool = False, lengths=None) -> Draft:
    """Validate a verifier's inputs and return them as a :class:`Draft` (rows renormalised).

    Raises ``ValueError`` naming the offending argument for: tokens of the wrong rank or not
    integer; probability rows of the wrong shape for the layout, with different vocabularies,
    NaN/inf, negative entries or sums away from 1; token ids out of range ([0, V) for a
    chain, [-1, V) for candidates); a drafted token with zero draft probability; and, with
    ``distinct=True``, a candidate repeated in a row (verifiers for draws without
    replacement). With ``validate=False`` the inputs are wrapped unchecked.

    ``lengths`` (B,) makes a chain batch ragged: row b drafted ``lengths[b]`` tokens in [0, L];
    padded positions are not checked for positive draft probability (their rows must still be
    probability rows when validating; the decode loops pass zeros unvalidated).
    """
    if layout not in (CHAIN, CANDIDATES):
        raise ValueError(f"layout: expected {CHAIN!r} or {CANDIDATES!r}, got {layout!r}")
    if not array_api_compat.is_array_api_obj(tokens):
        tokens = np.asarray(tokens)
    if lengths is not None and layout != CHAIN:
        raise ValueError("lengths: only a chain batch can be ragged")
    if lengths is not None:
        lengths = host_to_like(lengths, draft_probs)
    validate, distinct = check_flag(validate, "validate"), check_flag(distinct, "distinct")  # 'no' is true
    if not validate:
        return Draft(tokens, draft_probs, target_probs, layout, lengths)
    kinds = {name: "torch" if array_api_compat.is_torch_array(x) else "numpy"
             for name, x in (("tokens", tokens), ("draft_probs", draft_probs), ("target_probs", target_probs))
             if array_api_compat.is_array_api_obj(x)}
    if len(set(kinds.values())) > 1:
        raise ValueError("draft_probs, target_probs and tokens mix numpy arrays and torch tensors "
                         f"({', '.join(f'{k}: {v}' for k, v in kinds.items())}); pass one kind")
    chain = layout == CHAIN
    what = "draft_tokens" if chain else "candidates"
    if getattr(tokens, "ndim", None) != 2:
        raise ValueError(f"{what}: expected shape (batch, {'L' if chain else 'k'}), got {tuple(tokens.shape)}")
    B, n = tokens.shape
    rank = 3 if chain else 2
    draft_probs = validate_probs(draft_probs, "draft_probs", min_ndim=rank)
    target_probs = validate_probs(target_probs, "target_probs", min_ndim=rank)
    V = check_same_vocab(draft_probs, target_probs, "draft_probs", "target_probs")
    if chain:
        if tuple(draft_probs.shape) != (B, n, V):
            raise ValueError(f"draft_probs: expected shape (batch, L, V) = {(B, n, V)}, got {tuple(draft_probs.shape)}")
        if tuple(target_probs.shape) != (B, n + 1, V):
            raise ValueError(f"target_probs: expected shape (batch, L+1, V) = {(B, n + 1, V)} (one row per prefix "
                             f"X^0..X^L), got {tuple(target_probs.shape)}")
    else:
        for name, rows in (("draft_probs", draft_probs), ("target_probs", target_probs)):
            if tuple(rows.shape) != (B, V):
                raise ValueError(f"{name}: expected shape (batch, V) = {(B, V)}, got {tuple(rows.shape)}")
    xp = namespace(draft_probs)
    if not xp.isdtype(tokens.dtype, "integral"):
        raise ValueError(f"{what}: expected integer token ids, got dtype {tokens.dtype}")
    low = 0 if chain else -1
    if lengths is not None:
        lengths = _check_lengths(lengths, B, n, xp, tokens)
    if n and (bool(xp.any(tokens < low)) or bool(xp.any(tokens >= V))):
        raise ValueError(f"{what}: ids must lie in [{low}, {V})" + ("" if chain else " (-1 = no candidate)"))
    if n:
        p_x = gather_tokens(draft_probs, tokens) if chain else gather_candidates(draft_probs, tokens)
        zero = (p_x <= 0) if chain else (tokens >= 0) & (p_x <= 0)
        if lengths is not None:
            zero = zero & (xp.arange(n, device=array_api_compat.device(tokens))[None, :] < lengths[:, None])
        if bool(xp.any(zero)):
            b, i = first_index(zero)
            where = f"(batch {b}, position {i})" if chain else f"(row {b}, position {i})"
            kind = "drafted token" if chain else "candidate"
            raise ValueError(f"draft_probs gives probability 0 to {kind} {int(tokens[b, i])} {where}; "
                             f"a {kind} must have positive draft probability")
    if distinct:
        _check_no_repeats(tokens)
    return Draft(tokens, draft_probs, target_probs, layout, lengths)


def _check_lengths(lengths, batch: int, L: int, xp, like):
    """Per-row draft lengths as an integer array of ``like``'s kind, each in [0, L]."""
    if tuple(lengths.shape) != (batch,) or not xp.isdtype(lengths.dtype, "integral"):
        raise ValueError(f"lengths: expected integer draft lengths of shape (batch,) = ({batch},), got "
                         f"shape {tuple(lengths.shape)} and dtype {lengths.dtype}")
    if bool(xp.any(lengths < 0)) or bool(xp.any(lengths > L)):
        raise ValueError(f"lengths: every draft length must lie in [0, L] = [0, {L}]")
    return lengths


def _check_no_repeats(candidates):
    xp = namespace(candidates)
    k = candidates.shape[1]
    for i in range(k):
        for j in range(i + 1, k):
            rep = (candidates[:, i] == candidates[:, j]) & (candidates[:, i] >= 0)
            if bool(xp.any(rep)):
                (b,) = first_index(rep)
                raise ValueError(f"candidates: token {int(candidates[b, i])} repeated in row {b} (positions {i} "
                                 f"and {j}); this verifier needs candidates drawn without replacement")


