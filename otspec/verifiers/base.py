"""The verifier protocol shared by every verification scheme.

A verifier looks at one drafted block and both models' probability rows along
it, and decides how many draft tokens to accept (``accepted_len``, τ) and which
extra token to emit (``correction``, Y: a corrected token when τ < L, a bonus
token when τ = L). It has two faces:

* :meth:`Verifier.law` — the exact conditional law of the outcome given the
  draft (used by the exact engine and by the unbiasedness tests);
* :meth:`Verifier.sample` — one batched random outcome per draft, vectorised
  over the batch, with an explicit random generator (used by Monte Carlo, the
  decode loop and ``llm_bridge``).

Both accept numpy arrays and torch tensors (on any device); results come back
in the same namespace.

Shapes for a single-draft verifier (B drafts of length L over V tokens)::

    draft_tokens  int   (B, L)       X_1..X_L
    draft_probs   float (B, L, V)    row i = p(. | X^i),  i = 0..L-1
    target_probs  float (B, L+1, V)  row i = q(. | X^i),  i = 0..L

Rows may already be processed by temperature / top-k / top-p: the verifier
only sees probabilities.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import array_api_compat

from ..distributions import check_same_vocab, first_index, namespace, validate_probs

__all__ = ["Outcome", "Verifier", "VerifierLaw", "check_single_draft", "gather_tokens"]


@dataclass
class VerifierLaw:
    """Exact conditional law of a verifier's outcome given each draft.

    Attributes
    ----------
    accept_probs : array, shape (B, L+1)
        ``accept_probs[b, l]`` = P(τ = l | draft b).
    correction_probs : array, shape (B, L+1, V)
        ``correction_probs[b, l]`` = law of the extra token Y given τ = l
        (rows for events of probability 0 are arbitrary valid rows).
    carry : Any
        State the verifier hands to the next iteration (``None`` when the next
        iteration uses the ordinary target, as for TokenVerify).
    """

    accept_probs: Any
    correction_probs: Any
    carry: Any = None

    @property
    def expected_accepted(self):
        """E[τ | draft], shape (B,)."""
        xp = namespace(self.accept_probs)
        L = self.accept_probs.shape[-1] - 1
        ells = xp.arange(L + 1, dtype=self.accept_probs.dtype, device=array_api_compat.device(self.accept_probs))
        return xp.sum(self.accept_probs * ells, axis=-1)


@dataclass
class Outcome:
    """One sampled verification outcome per draft.

    Attributes
    ----------
    accepted_len : int array, shape (B,)
        τ: the first τ draft tokens are kept.
    correction : int array, shape (B,)
        Y: the token emitted after the accepted prefix.
    carry : Any
        Per-draft state for the next iteration (``None`` for stateless verifiers).
    """

    accepted_len: Any
    correction: Any
    carry: Any = None


class Verifier(ABC):
    """Base class of single-draft verifiers; see the module docstring for shapes."""

    #: Short identifier used in reports and the CLI.
    name: str = "verifier"
    #: Whether every emitted token is exactly target-distributed.
    lossless: bool = True
    #: Whether the outcome carries a residual target into the next iteration (v1 block verification).
    carries_residual: bool = False

    @abstractmethod
    def law(self, draft_tokens, draft_probs, target_probs, *, validate: bool = True) -> VerifierLaw:
        """Exact law of (τ, Y) given each draft."""

    @abstractmethod
    def sample(self, draft_tokens, draft_probs, target_probs, rng, *, validate: bool = True) -> Outcome:
        """One outcome per draft; ``rng`` is a numpy ``Generator`` or a ``torch.Generator``."""

    def __repr__(self):
        return f"{type(self).__name__}()"


def gather_tokens(rows, tokens):
    """``rows[b, i, tokens[b, i]]`` for rows (B, L', V) with L' >= L and tokens (B, L) → (B, L)."""
    xp = namespace(rows)
    L = tokens.shape[-1]
    return xp.take_along_axis(rows[:, :L, :], tokens[..., None], axis=-1)[..., 0]


def check_single_draft(draft_tokens, draft_probs, target_probs, *, validate: bool = True):
    """Validate single-draft verifier inputs and return them (rows renormalised).

    Raises ``ValueError`` with the offending argument for: wrong ranks or
    shapes, vocabulary mismatch, invalid probability rows, token ids out of
    range, or a drafted token with zero draft probability.
    """
    if not validate:
        return draft_tokens, draft_probs, target_probs
    if getattr(draft_tokens, "ndim", None) != 2:
        raise ValueError(f"draft_tokens: expected shape (batch, L), got {tuple(getattr(draft_tokens, 'shape', ()))}")
    B, L = draft_tokens.shape
    draft_probs = validate_probs(draft_probs, "draft_probs", min_ndim=3)
    target_probs = validate_probs(target_probs, "target_probs", min_ndim=3)
    V = check_same_vocab(draft_probs, target_probs, "draft_probs", "target_probs")
    if tuple(draft_probs.shape) != (B, L, V):
        raise ValueError(f"draft_probs: expected shape (batch, L, V) = {(B, L, V)}, got {tuple(draft_probs.shape)}")
    if tuple(target_probs.shape) != (B, L + 1, V):
        raise ValueError(
            f"target_probs: expected shape (batch, L+1, V) = {(B, L + 1, V)} (one row per prefix "
            f"X^0..X^L), got {tuple(target_probs.shape)}"
        )
    xp = namespace(draft_probs)
    if not xp.isdtype(draft_tokens.dtype, "integral"):
        raise ValueError(f"draft_tokens: expected integer token ids, got dtype {draft_tokens.dtype}")
    if L and (bool(xp.any(draft_tokens < 0)) or bool(xp.any(draft_tokens >= V))):
        raise ValueError(f"draft_tokens: ids must lie in [0, {V})")
    if L:
        p_x = gather_tokens(draft_probs, draft_tokens)
        zero = p_x <= 0
        if bool(xp.any(zero)):
            b, i = first_index(zero)
            raise ValueError(
                f"draft_probs gives probability 0 to drafted token {int(draft_tokens[b, i])} "
                f"(batch {b}, position {i}); a drafted token must have positive draft probability"
            )
    return draft_tokens, draft_probs, target_probs

