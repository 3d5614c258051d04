r"""The exact optimum over a draft tree: the most any lossless verifier can accept from one drafted tree.

One iteration drafts a random tree T (a k-config :class:`~otspec.drafts.DraftTree`: a node spelled by n
tree nodes draws n·k_d candidates from p(·|path), i.i.d. or without replacement, exactly as
:func:`otspec.engine.tree.tree_law` and the decode loops draw them) and emits the target's tokens
Y_1, Y_2, …; it accepts τ(T, Y) tokens, the length of the longest prefix of Y (at most L) that is a
path of T. A lossless verifier is a coupling π of T ~ P_T and Y^L ~ Q (the target's law of L tokens):
given T it draws Y^L from π(·|T), emits Y_1 … Y_{τ+1} and leaves the rest to the target. τ is decided by
Y_1 … Y_{τ+1}, so discarding the later tokens keeps the target's law, and every lossless verifier of
one iteration is such a coupling. The optimum is the transport problem

.. math::
    \max_{\pi \ge 0} \sum_{T, y} \pi(T, y)\, \tau(T, y) \quad \text{s.t.} \quad
    \sum_y \pi(T, y) = P_T(T), \quad \sum_T \pi(T, y) = Q(y),

solved exactly as an LP (HiGHS) over the distinct drafted trees (path sets) and the V^L target blocks.
It may read target rows off the tree, as block-level OT does for chains: for a chain (k = 1 at every
depth) it is eq. (8) of the block spec, Σ_ℓ Σ_{x^ℓ} min{p(x^ℓ), q(x^ℓ)} (tested), above what any
verifier reading only the drafted paths' rows reaches. ``per_level`` holds each depth's own optimum
max_π P(Y^ℓ is a path of T); their sum bounds the whole-tree optimum from above and is reached only
when one coupling serves every depth at once (for chains it does; for trees the LP says when).
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..checks import capped_power, check_size
from ..drafts import DraftTree, draft_tuple_law
from ..errors import SizeLimitError, SolveError
from ..pairs import check_pair
from ..sources import Source
from .block_ot import MAX_LP_VARIABLES
from .lp import solve_lp

__all__ = ["MAX_TREE_DRAWS", "TreeOptimum", "coupling_optimum", "drafted_tree_law", "tree_optimum"]

#: Most raw draws V**(drafted tokens) the enumeration of drafted trees accepts (checked before enumerating).
MAX_TREE_DRAWS = 200_000


@dataclass(frozen=True)
class TreeOptimum:
    """The largest expected accepted length of a lossless verifier on a draft tree (module docstring).

    Attributes
    ----------
    value : float
        max_π E_π[τ(T, Y)], the whole tree at once.
    per_level : ndarray, shape (L,)
        max_π P(Y^ℓ is a path of T) for ℓ = 1..L, each depth on its own.
    per_level_sum : float
        Σ_ℓ per_level[ℓ], an upper bound on ``value``.
    trees : int
        Distinct drafted trees (path sets) of positive probability.
    n_variables : int
        Coupling variables of the LP (trees × V**L).
    """

    value: float
    per_level: np.ndarray
    per_level_sum: float
    trees: int
    n_variables: int


def drafted_tree_law(draft: Source, tree: DraftTree) -> tuple[list, np.ndarray]:
    """Every drafted tree as its set of paths (tuples of tokens, root excluded) with its probability P_T."""
    if not isinstance(tree, DraftTree):
        raise ValueError(f"drafted_tree_law enumerates the draws of a k-config DraftTree, got {tree!r}")
    V, L = draft.vocab_size, tree.depth
    draft.check_length(L)
    draws = capped_power(V, tree.num_tokens)
    if draws > MAX_TREE_DRAWS:
        raise SizeLimitError(f"the {tree} tree over V = {V} has up to V**{tree.num_tokens} = {draws:,} drafts "
                             f"(limit MAX_TREE_DRAWS = {MAX_TREE_DRAWS:,}): use a smaller tree or vocabulary")
    law = defaultdict(float)

    def grow(d: int, frontier: dict, paths: tuple, mass: float) -> None:
        if d == L or not frontier:
            law[frozenset(paths)] += mass
            return
        nodes = list(frontier.items())
        tuples = [draft_tuple_law(draft.row_after(path), n * tree.branching[d], tree.replacement) for path, n in nodes]
        for pick in itertools.product(*(range(len(probs)) for _, probs in tuples)):
            m = mass * float(np.prod([tuples[i][1][j] for i, j in enumerate(pick)]))
            if m == 0.0:
                continue
            below = Counter()
            for (path, _), (cands, _), j in zip(nodes, tuples, pick, strict=True):
                below.update(path + (int(x),) for x in cands[j] if x >= 0)
            grow(d + 1, dict(below), paths + tuple(below), m)

    grow(0, {(): 1}, (), 1.0)
    trees = list(law)
    return trees, np.array([law[t] for t in trees])


def _membership(trees: list, V: int, L: int) -> list:
    """Per depth ℓ, a (trees, V**ℓ) boolean array: is block prefix x^ℓ (lexicographic index) a path of the tree."""
    out = [np.zeros((len(trees), V ** (ell + 1)), dtype=bool) for ell in range(L)]
    for i, paths in enumerate(trees):
        for path in paths:
            out[len(path) - 1][i, int(np.ravel_multi_index(path, (V,) * len(path)))] = True
    return out


def tree_optimum(draft: Source, target: Source, tree: DraftTree) -> TreeOptimum:
    """The exact optimum of one iteration on ``tree`` (module docstring): HiGHS on the coupling LP, the whole
    tree at once and each depth on its own. Sizes are refused before anything is enumerated."""
    check_pair(draft, target)
    if not isinstance(tree, DraftTree):
        raise ValueError(f"tree_optimum takes a k-config DraftTree, got {tree!r} (a chosen tree: coupling_optimum)")
    target.check_length(tree.depth)
    return coupling_optimum(*drafted_tree_law(draft, tree), target, tree.depth)


def coupling_optimum(trees: list, p_tree, target: Source, depth: int) -> TreeOptimum:
    """:func:`tree_optimum` from a law of drafted trees (path sets ``trees`` with probabilities ``p_tree``, e.g. the
    one tree of probability 1 that an EAGLE-2 :class:`~otspec.drafts.ConfidenceTree` grows, where every coupling is
    the product and the optimum Σ_ℓ Q(Y^ℓ is a path) is what the naive verifier reaches)."""
    V, L = target.vocab_size, check_size(depth, "depth")
    blocks = capped_power(V, L)
    p_tree = np.asarray(p_tree, dtype=float)
    if p_tree.shape != (len(trees),) or (p_tree < 0).any() or abs(p_tree.sum() - 1) > 1e-9:
        raise ValueError(f"p_tree: expected {len(trees)} probabilities summing to 1")
    n_var = len(trees) * blocks
    if n_var > MAX_LP_VARIABLES:
        raise SizeLimitError(f"the coupling LP over V = {V} has {len(trees):,} drafted trees x "
                             f"{blocks:,} target blocks = {n_var:,} variables (limit {MAX_LP_VARIABLES:,})")
    q = target.enumerate(L).probs
    member = _membership(trees, V, L)
    ys = np.arange(blocks)
    hit = [member[ell][:, ys // V ** (L - 1 - ell)] for ell in range(L)]  # (trees, blocks): Y^ℓ is a path of T
    n_t = len(trees)
    A_eq = sp.vstack([sp.kron(sp.eye(n_t), np.ones((1, blocks))), sp.kron(np.ones((1, n_t)), sp.eye(blocks))]).tocsc()
    b_eq = np.concatenate([p_tree, q])

    def best(gain: np.ndarray) -> float:
        x, *_ = solve_lp(-gain.ravel().astype(float), A_eq=A_eq, b_eq=b_eq, what="tree coupling LP",
                         error=SolveError)
        return float(gain.ravel() @ x)

    value = best(sum(h.astype(float) for h in hit))
    per_level = np.array([best(h.astype(float)) for h in hit])
    return TreeOptimum(value, per_level, float(per_level.sum()), n_t, n_var)
