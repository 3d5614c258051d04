"""Draft trees: k-configs such as MCSD's ``4x2x2x1`` and SpecTr's K i.i.d. drafts (MCSD spec §3, SpecTr App. D),
and EAGLE-2's confidence-ordered dynamic trees.

Spec: ``docs/mcsd.md``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

from ..checks import MAX_CANDIDATES, MAX_DRAFT_LENGTH, MAX_TREE_TOKENS, check_size
from ..errors import SizeLimitError
from .laws import draw_name

__all__ = ["ConfidenceTree", "DraftTree", "parse_tree", "tree_for_vocab"]


@dataclass(frozen=True)
class DraftTree:
    """A k-config draft tree.

    Attributes
    ----------
    branching : tuple of int
        (k_1, ..., k_L), each >= 1.
    replacement : bool or str
        Children of one node are i.i.d. (True), drawn without replacement (False), or by a structured draw:
        Hu et al.'s greedy drafts ("greedy") or SpecHub's hub pair ("hub", k <= 2); see
        :data:`otspec.drafts.laws.DRAWS`.
    """

    branching: tuple[int, ...]
    replacement: bool = True
    deterministic = False  # children are drawn (a ConfidenceTree chooses them)

    def __post_init__(self):
        branching = tuple(self.branching)
        if not branching or any(isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1 for k in branching):
            raise ValueError(f"a draft tree needs depth >= 1 and every k_i >= 1 (an integer), got {self.branching}")
        branching = tuple(int(k) for k in branching)
        check_size(len(branching), "depth", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
        _check_tree_tokens(_drafted(branching), f"the k-config {'x'.join(map(str, branching[:8]))}"
                           + ("x..." if len(branching) > 8 else ""))
        object.__setattr__(self, "branching", branching)
        draw = draw_name(self.replacement)  # True / False stay booleans, "greedy" / "hub" strings
        if draw != "without":  # drawn without replacement, a node's children stop at V: tree_for_vocab checks them
            _check_widths(branching)
        object.__setattr__(self, "replacement", {"iid": True, "without": False}.get(draw, draw))
        if draw == "hub" and max(branching) > 2:
            raise ValueError(f"SpecHub's hub draw is defined for k <= 2 children, got {self.branching}")

    @classmethod
    def parse(cls, text: str, replacement: bool = True) -> DraftTree:
        """``"4x2x2x1"`` → DraftTree((4, 2, 2, 1)): ASCII digits and ``x`` only (``int`` would also read ``"2_0"``,
        ``" 2"`` or other scripts' digits); what the constructor refuses (the draw, a size) is said as it says it."""
        parts = str(text).lower().split("x")
        if not all(part.isascii() and part.isdigit() for part in parts):
            raise ValueError(f"could not read a k-config from {text!r}; expected positive integers joined by x, e.g. "
                             "4x2x2x1")
        return cls(tuple(int(part) for part in parts), replacement)

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
        return _drafted(self.branching)  # exact: a tree is made only within MAX_TREE_TOKENS

    def __str__(self) -> str:
        suffix = {"iid": "", "without": " (without replacement)", "greedy": " (greedy drafts)", "hub": " (hub drafts)"}
        return "x".join(map(str, self.branching)) + suffix[self.draw]

    @property
    def draw(self) -> str:
        """How children are drawn: "iid", "without", "greedy" or "hub"."""
        return draw_name(self.replacement)


@dataclass(frozen=True)
class ConfidenceTree:
    """EAGLE-2's confidence-ordered dynamic draft tree (Li et al., EMNLP 2024, arXiv 2406.16858, §4).

    Children are *chosen*, not drawn: a node's candidates are the ``top_k`` tokens of its draft row
    p(·|path) of positive mass, and a node's confidence is the product of the draft probabilities along
    its path. Expansion: at each of ``depth`` levels the ``top_k`` most confident nodes of the level are
    fed to the drafter (one call per level) and get their ``top_k`` children; reranking: the ``nodes``
    most confident of all drafted nodes are kept (ties: shallower first, then drafting order; a parent's
    confidence is at least its child's, so the kept set is a tree) and scored by one target call.

    The candidates are deterministic given the rows, so only a verifier that is lossless for any
    candidate set keeps the target's law: ``naive`` (Y ~ q(·|path); the walk goes on to the child
    spelling Y), which is also the largest acceptance any lossless verifier reaches at fixed
    candidates C, q(C). The trees are built by :func:`otspec.engine.confidence.grow_confidence`.
    """

    depth: int
    top_k: int
    nodes: int
    replacement = False  # the candidates of a node are distinct tokens
    deterministic = True  # chosen from the rows: no draw

    def __post_init__(self):
        for name, limit, limit_name in (("depth", MAX_DRAFT_LENGTH, "MAX_DRAFT_LENGTH"),
                                        ("top_k", MAX_CANDIDATES, "MAX_CANDIDATES"),
                                        ("nodes", MAX_TREE_TOKENS, "MAX_TREE_TOKENS")):
            object.__setattr__(self, name, check_size(getattr(self, name), name, limit=limit, limit_name=limit_name))
        _check_tree_tokens(self.top_k + (self.depth - 1) * self.top_k**2, f"eagle2:{self.depth}:{self.top_k}:"
                           f"{self.nodes} (top_k + (depth - 1) top_k^2 drafted)")

    @classmethod
    def parse(cls, text: str) -> ConfidenceTree:
        """``"eagle2:D:K:M"`` → ConfidenceTree(depth=D, top_k=K, nodes=M)."""
        parts = str(text).strip().lower().split(":")
        if len(parts) != 4 or parts[0] != "eagle2":
            raise ValueError(f"could not read a confidence tree from {text!r}; expected eagle2:DEPTH:TOP_K:NODES, "
                             "e.g. eagle2:4:4:16")
        if not all(x.isascii() and x.isdigit() for x in parts[1:]):
            raise ValueError(f"could not read a confidence tree from {text!r}: DEPTH, TOP_K and NODES are integers "
                             "(e.g. eagle2:4:4:16)")
        return cls(*(int(x) for x in parts[1:]))

    @property
    def branching(self) -> tuple[int, ...]:
        """At most ``top_k`` children per node at every depth (what a k-config reader sees)."""
        return (self.top_k,) * self.depth

    @property
    def num_tokens(self) -> int:
        """Draft tokens scored by the target call: at most ``nodes``."""
        return self.nodes

    def __str__(self) -> str:
        return f"eagle2:{self.depth}:{self.top_k}:{self.nodes}"


def _drafted(branching) -> int:
    """Σ_i ∏_{j<=i} k_j, stopping once past :data:`MAX_TREE_TOKENS` (no giant integer for a deep wide config)."""
    total, width = 0, 1
    for k in branching:
        width *= k
        total += width
        if total > MAX_TREE_TOKENS:
            return total
    return total


def _check_widths(branching, drawn: bool = True) -> None:
    """One node's children are one draw of k candidates: each k_i at most :data:`MAX_CANDIDATES`."""
    if max(branching) > MAX_CANDIDATES:
        i = max(range(len(branching)), key=branching.__getitem__)
        hint = (" (drawn without replacement a node's children stop at the vocabulary: parse_tree(spec, "
                "replacement=False) caps them there)") if drawn else ""
        raise SizeLimitError(f"the k-config's k_{i + 1} = {branching[i]:,} children of one node is above "
                             f"MAX_CANDIDATES = {MAX_CANDIDATES:,}{hint}", size=branching[i], limit=MAX_CANDIDATES)


def tree_for_vocab(tree, vocab_size: int):
    """The tree that ``tree``'s draws make over ``vocab_size`` tokens: drawn without replacement, a node drafts at
    most V children (the draw stops when the tokens run out), so each k_i is capped at V, the same law; then each
    k_i must be within :data:`MAX_CANDIDATES` (a :class:`~otspec.errors.SizeLimitError` before any draw)."""
    if not isinstance(tree, DraftTree | ConfidenceTree):
        raise ValueError(f"tree: expected a DraftTree or ConfidenceTree (parse_tree reads a spec), got {tree!r:.60}")
    vocab_size = check_size(vocab_size, "vocab_size")
    if tree.deterministic or tree.draw != "without":
        return tree
    capped = tuple(min(k, vocab_size) for k in tree.branching)
    _check_widths(capped, drawn=False)
    return tree if capped == tree.branching else dataclasses.replace(tree, branching=capped)


def _check_tree_tokens(n: int, what: str) -> None:
    if n > MAX_TREE_TOKENS:
        raise SizeLimitError(f"{what} drafts more than {MAX_TREE_TOKENS:,} tokens "
                             f"(limit MAX_TREE_TOKENS = 2^16: every loop scores a tree's nodes in one call)",
                             size=n, limit=MAX_TREE_TOKENS)


def parse_tree(spec, replacement: bool = True):
    """A draft tree from a spec: ``"4x2x2x1"`` (k-config), ``"iid:K:L"`` (SpecTr's K i.i.d. drafts of L tokens),
    ``"eagle2:D:K:M"`` (:class:`ConfidenceTree`), or a tree (a :class:`DraftTree` gets ``replacement``)."""
    draw_name(replacement)  # checked for every spec: an EAGLE-2 tree, which reads none, took 'text' without a word
    if isinstance(spec, ConfidenceTree):
        return spec
    if isinstance(spec, DraftTree):
        return DraftTree(spec.branching, replacement)
    if not isinstance(spec, str):  # 3 was read as the k-config "3"
        raise ValueError(f"tree: expected a spec such as '4x2x1', 'iid:4:3' or 'eagle2:4:8:16', or a DraftTree, got "
                         f"{spec!r} ({type(spec).__name__})")
    text = spec.strip().lower()
    if text.startswith("eagle2"):
        return ConfidenceTree.parse(text)
    if text.startswith("iid:"):
        parts = text.split(":")
        if len(parts) != 3 or not all(x.isascii() and x.isdigit() for x in parts[1:]):  # as k-configs: no 2_0, +2, ٢
            raise ValueError(f"could not read {spec!r}; expected iid:K:L with K and L written in digits 0-9, e.g. "
                             "iid:4:3")
        try:
            return DraftTree.spectr_iid(int(parts[1]), int(parts[2]), replacement)
        except SizeLimitError:  # a tree too large: said as such
            raise
        except ValueError as err:  # K or L of 0: said with the reason (0 is an integer)
            raise ValueError(f"could not read {spec!r}; expected iid:K:L with K >= 1 drafts of L >= 1 tokens, e.g. "
                             f"iid:4:3 ({err})") from None
    return DraftTree.parse(text, replacement)
