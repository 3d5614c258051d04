"""The public row functions of the package (``otspec.total_variation``, ``otspec.overlap``, ``otspec.residual``):
those of :mod:`otspec.distributions` with their rows checked first, as every public function checks its inputs. The
unchecked ones stay the hot paths' (a verifier's scaled residual ``w · q − p`` is not a probability row)."""

from __future__ import annotations

import array_api_compat

from .checks import check_flag
from .distributions import check_same_vocab, overlap, residual, total_variation, validate_probs

__all__ = ["checked_overlap", "checked_residual", "checked_total_variation"]


def _checked_pair(draft, target, names=("draft", "target")):
    """Two probability rows (or batches) of one kind, checked as :func:`validate_probs` checks them."""
    if array_api_compat.is_torch_array(draft) != array_api_compat.is_torch_array(target):
        raise ValueError(f"{names[0]} and {names[1]}: one is a torch tensor and the other is not; give both as numpy "
                         "arrays (or lists) or both as tensors")
    draft, target = validate_probs(draft, names[0]), validate_probs(target, names[1])
    check_same_vocab(draft, target)
    return draft, target


def checked_total_variation(draft, target):
    """:func:`total_variation` of two probability rows (numpy, torch or lists), checked first (``otspec.total_variation``)."""
    return total_variation(*_checked_pair(draft, target))


def checked_overlap(draft, target):
    """:func:`overlap` of two probability rows (numpy, torch or lists), checked first (``otspec.overlap``)."""
    return overlap(*_checked_pair(draft, target))


def checked_residual(minuend, subtrahend, *, return_mass: bool = False):
    """:func:`residual` of two probability rows (numpy, torch or lists), checked first (``otspec.residual``;
    ``residual(target, draft)`` is speculative sampling's residual)."""
    return residual(*_checked_pair(minuend, subtrahend, ("minuend", "subtrahend")),
                    return_mass=check_flag(return_mass, "return_mass"))
