"""Draft trees: k-configs such as MCSD's ``4x2x2x1`` and SpecTr's K i.i.d. drafts (MCSD spec §3, SpecTr App. D)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from ..checks import check_size

__all__ = ["DraftTree"]


@dataclass(frozen=True)
class DraftTree:
    """A k-config draft tree.

    Attributes
    ----------
    branching : tuple of int
        (k_1, ..., k_L), each >= 1.
    replacement : bool
        Children of one node are i.i.d. (True) or drawn without replacement (False).
    """

    branching: tuple[int, ...]
    replacement: bool = True

    def __post_init__(self):
        branching = tuple(self.branching)
        if not branching or any(isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1 for k in branching):
            raise ValueError(f"a draft tree needs depth >= 1 and every k_i >= 1 (an integer), got {self.branching}")
        branching = tuple(int(k) for k in branching)
        object.__setattr__(self, "branching", branching)

    @classmethod
    def parse(cls, text: str, replacement: bool = True) -> DraftTree:
        """``"4x2x2x1"`` → DraftTree((4, 2, 2, 1))."""
        try:
            return cls(tuple(int(part) for part in str(text).lower().split("x")), replacement)
        except ValueError:
            raise ValueError(f"could not read a k-config from {text!r}; expected e.g. 4x2x2x1") from None

    @classmethod
    def spectr_iid(cls, num_drafts: int, length: int, replacement: bool = True) -> DraftTree:
        """SpecTr's K i.i.d. draft sequences of length L: config (K, 1, ..., 1)."""
        return cls((check_size(num_drafts, "num_drafts"),) + (1,) * (check_size(length, "length") - 1), replacement)

    @classmethod
    def chain(cls, length: int) -> DraftTree:
        """A single draft of L tokens (ordinary speculative decoding)."""
        return cls((1,) * check_size(length, "length"))

    @property
    def depth(self) -> int:
        """L, the number of draft positions."""
        return len(self.branching)

    @property
    def leaves(self) -> int:
        """K = ∏ k_i, the number of candidate sequences."""
        return math.prod(self.branching)

    @property
    def num_tokens(self) -> int:
        """N_tree = Σ_i ∏_{j<=i} k_j, draft tokens in the tree (scored by one target call)."""
        total, width = 0, 1
        for k in self.branching:
            width *= k
            total += width
        return total

    def __str__(self) -> str:
        return "x".join(map(str, self.branching)) + ("" if self.replacement else " (without replacement)")
