r"""The exact optimum over a draft tree: the most any lossless verifier can accept from one drafted tree.

One iteration drafts a random tree T (a k-config :class:`~otspec.drafts.DraftTree`: a node spelled by n
tree nodes draws n·k_d candidates from p(·|path), i.i.d. or without replacement, exactly as
:func:`otspec.engine.tree.tree_law` and the decode loops draw them). A verifier of one iteration is any
randomised rule that, given T and every row it likes (the rows are functions of the prefixes), emits a node
n of T (the accepted path, the root included) and one more token y: a conditional law x(n, y | T). It is
lossless when the emitted tokens n·y, continued by the target to L + 1 tokens, follow the target's law —
the next iteration starts afresh from the plain target, so this is exactly the condition that the whole
decode keeps the target's law. The optimum is the linear programme

.. math::
    \max_{x \ge 0} \sum_{T, n, y} x(T, n, y)\, |n| \quad \text{s.t.} \quad
    \sum_{n, y} x(T, n, y) = P_T(T), \qquad
    \sum_{T} \sum_{m=0}^{L} [z^m \in T]\, x(T, z^m, z_{m+1})\, q(z_{m+2} \dots z_{L+1} \mid z^{m+1}) = q(z)
    \ \ \forall z \in \Omega^{L+1},

solved exactly by HiGHS (:func:`verifier_optimum`; its value is :attr:`TreeOptimum.value`). On a chain it
equals published block verification's E[τ] (eq. (17)) to 1e-15 on random sources (tested): block
verification is the best of all one-iteration verifiers, off-path rows included, as Thomas & Pal (arXiv
2602.16961, Thms 3.3-3.4) and Weng et al. (Traversal Verification, arXiv 2505.12398) state.

:func:`coupling_optimum` solves the transport problem that couples T with a target block Y^L ~ Q and
counts the longest prefix of Y that is a path of T. Every lossless verifier induces such a coupling, so it
is an upper bound (:attr:`TreeOptimum.coupling`); it is not reached by one iteration in general, because
which prefix is emitted may depend, through T, on the target tokens after it, and those are discarded. On
a chain it is the block-OT optimum eq. (8) of the block spec, Σ_ℓ Σ_{x^ℓ} min{p(x^ℓ), q(x^ℓ)} (tested), which
the v1 backward block verifier reaches only by carrying a residual target into the next iteration.
``per_level`` holds each depth's coupling optimum max_π P(Y^ℓ is a path of T); their sum bounds the
coupling from above.

Spec: ``docs/token_and_block_verification.md``, ``docs/mcsd.md``.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..checks import capped_power, check_size, format_count
from ..drafts import DraftTree, draft_tuple_law
from ..errors import SizeLimitError, SolveError
from ..pairs import check_pair
from ..sources import Source, extend_prefixes
from .block_ot import MAX_LP_VARIABLES
from .lp import solve_lp

__all__ = ["MAX_LP_NONZEROS", "MAX_TREE_DRAWS", "TreeOptimum", "coupling_optimum", "drafted_tree_law",
           "tree_optimum", "verifier_optimum"]

#: Most raw draws V**(drafted tokens) the enumeration of drafted trees accepts (checked before enumerating).
MAX_TREE_DRAWS = 200_000
#: Most nonzero coefficients of the verifier LP (each emitted prefix w meets the V**(L+1-|w|) blocks extending it).
MAX_LP_NONZEROS = 5_000_000


@dataclass(frozen=True)
class TreeOptimum:
    """The largest expected accepted length of a lossless verifier on a draft tree (module docstring).

    Attributes
    ----------
    value : float
        The exact optimum of one-iteration lossless verifiers (the verifier LP), the whole tree at once.
    coupling : float
        The transport bound max_π E_π[τ(T, Y)] (≥ ``value``; reached with a carried residual, not in one iteration).
    per_level : ndarray, shape (L,)
        max_π P(Y^ℓ is a path of T) for ℓ = 1..L, each depth on its own.
    per_level_sum : float
        Σ_ℓ per_level[ℓ], an upper bound on ``coupling``.
    trees : int
        Distinct drafted trees (path sets) of positive probability.
    n_variables : int
        Variables of the verifier LP (trees × emitted prefixes n·y).
    """

    value: float
    coupling: float
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
        raise SizeLimitError(f"the {tree} tree over V = {V} has up to V**{tree.num_tokens} = {format_count(draws)} "
                             f"drafts (limit MAX_TREE_DRAWS = {MAX_TREE_DRAWS:,}): use a smaller tree or vocabulary")
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
    """The exact optimum of one iteration on ``tree`` (module docstring): HiGHS on the verifier LP, and on the
    coupling LP (the whole tree at once, and each depth on its own). Sizes are refused before anything is
    enumerated."""
    check_pair(draft, target)
    if not isinstance(tree, DraftTree):
        raise ValueError(f"tree_optimum takes a k-config DraftTree, got {tree!r} (a chosen tree: coupling_optimum)")
    target.check_length(tree.depth + 1)
    return coupling_optimum(*drafted_tree_law(draft, tree), target, tree.depth)


def _lp_sizes(trees: list, V: int, L: int) -> tuple[int, int]:
    """(variables, nonzeros) of the verifier LP, counted before anything is built."""
    nodes = Counter()
    for paths in trees:
        nodes[0] += 1
        nodes.update(len(path) for path in paths)
    return (sum(nodes.values()) * V, sum(count * V * capped_power(V, L - m) for m, count in nodes.items()))


def _continuations(target: Source, L: int) -> list:
    """suffix[k][z] = q(z_{k+1} … z_{L+1} | z^k) for every block z of Ω^{L+1} (lexicographic), k = 0..L+1."""
    V = target.vocab_size
    steps, prefixes = [], np.zeros((1, 0), dtype=np.int64)
    for _ in range(L + 1):  # the rows after every prefix of length j: (V**j, V)
        steps.append(target.next_probs(prefixes))
        prefixes = extend_prefixes(prefixes, V)
    z = np.arange(V ** (L + 1))
    suffix = [np.ones(z.size)]
    for k in range(L, -1, -1):  # token k+1 given the prefix z^k
        suffix.append(suffix[-1] * steps[k][z // V ** (L + 1 - k), (z // V ** (L - k)) % V])
    return suffix[::-1]


def verifier_optimum(trees: list, p_tree, target: Source, depth: int) -> tuple[float, int]:
    """The exact optimum of one-iteration lossless verifiers (the module docstring's LP) on drafted trees (path sets
    ``trees``, probabilities ``p_tree``); returns (value, variables). Sizes are refused before the LP is built."""
    V, L = target.vocab_size, check_size(depth, "depth")
    p_tree = np.asarray(p_tree, dtype=float)
    n_var, nonzeros = _lp_sizes(trees, V, L)
    if n_var > MAX_LP_VARIABLES or nonzeros > MAX_LP_NONZEROS:
        raise SizeLimitError(f"the verifier LP over V = {V}, depth {L} has {n_var:,} variables and {nonzeros:,} "
                             f"nonzeros (limits MAX_LP_VARIABLES = {MAX_LP_VARIABLES:,}, MAX_LP_NONZEROS = "
                             f"{MAX_LP_NONZEROS:,})")
    suffix = _continuations(target, L)
    rows, vals, cols, gain, owner = [], [], [], [], []
    for i, paths in enumerate(trees):
        for node in [(), *paths]:
            m, span = len(node), V ** (L - len(node))
            base = int(np.ravel_multi_index(node, (V,) * m)) if m else 0
            for y in range(V):  # the emitted prefix w = node·y meets every block that extends it
                blocks = np.arange((base * V + y) * span, (base * V + y + 1) * span)
                rows.append(blocks)
                vals.append(suffix[m + 1][blocks])
                cols.append(np.full(span, len(gain)))
                gain.append(m)
                owner.append(i)
    n = len(gain)
    emit = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(V ** (L + 1), n))
    draw = sp.csc_matrix((np.ones(n), (np.array(owner), np.arange(n))), shape=(len(trees), n))
    gain = np.array(gain, dtype=float)
    x, *_ = solve_lp(-gain, A_eq=sp.vstack([emit, draw]).tocsc(),
                     b_eq=np.concatenate([target.enumerate(L + 1).probs, p_tree]), what="tree verifier LP",
                     error=SolveError)
    return float(gain @ x), n


def coupling_optimum(trees: list, p_tree, target: Source, depth: int) -> TreeOptimum:
    """:func:`tree_optimum` from a law of drafted trees (path sets ``trees`` with probabilities ``p_tree``, e.g. the
    one tree of probability 1 that an EAGLE-2 :class:`~otspec.drafts.ConfidenceTree` grows, where every coupling is
    the product and the optimum Σ_ℓ Q(Y^ℓ is a path) is what the naive verifier reaches): the verifier LP's value
    and the coupling bounds."""
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
    if n_t == 1:  # one tree drafted for sure: the output Y ~ q meets it along its longest path prefix, whatever the
        # verifier, and the naive one accepts exactly that; every LP here has that value (a 3^10-block LP of an
        # EAGLE-2 tree ran for two minutes to find it)
        per_level = np.array([float(q @ h[0]) for h in hit])
        total = float(per_level.sum())
        return TreeOptimum(total, total, per_level, total, 1, _lp_sizes(trees, V, L)[0])
    value, n_verifier = verifier_optimum(trees, p_tree, target, L)
    A_eq = sp.vstack([sp.kron(sp.eye(n_t), np.ones((1, blocks))), sp.kron(np.ones((1, n_t)), sp.eye(blocks))]).tocsc()
    b_eq = np.concatenate([p_tree, q])

    def best(gain: np.ndarray) -> float:
        x, *_ = solve_lp(-gain.ravel().astype(float), A_eq=A_eq, b_eq=b_eq, what="tree coupling LP",
                         error=SolveError)
        return float(gain.ravel() @ x)

    coupling = best(sum(h.astype(float) for h in hit))
    per_level = np.array([best(h.astype(float)) for h in hit])
    return TreeOptimum(value, coupling, per_level, float(per_level.sum()), n_t, n_verifier)
