r"""Exact block OT by greedy matching on the prefix tree: an optimal plan for millions of blocks.

Spec ``token_and_block_verification.md`` §4–5. The block transport cost L − β(x^L, y^L) is a tree
metric on the prefix tree, so matching draft mass with target mass as deep in the tree as it can go
is optimal; it attains eq. (8), Σ_{ℓ=1..L} Σ_{x^ℓ} min(p(x^ℓ), q(x^ℓ)), in O(N L) work with an
O(N)-entry sparse plan (N = V**L). Re-exported by :mod:`otspec.solvers.block_ot`, whose
linear programmes solve the same problem for small N.

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..checks import check_flag
from ..sources import Source
from .block_prefix import BlockOTResult, block_laws, prefix_tree_value, validated_block_laws

__all__ = ["solve_block_tree", "solve_block_tree_laws"]


def _run_cumsum(node: np.ndarray, mass: np.ndarray, n_nodes: int):
    """Within runs of equal (sorted) ``node``: exclusive and inclusive cumulative sums, and run totals."""
    if node.size == 0:
        return np.zeros(0), np.zeros(0), np.zeros(n_nodes)
    cs = np.cumsum(mass)
    start = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
    run_len = np.diff(np.r_[start, node.size])
    base = np.where(start > 0, cs[start - 1], 0.0)
    end = cs - np.repeat(base, run_len)  # monotone within a run (cs is, the shift is constant)
    begin = np.empty_like(end)
    begin[1:] = end[:-1]
    begin[start] = 0.0
    total = np.zeros(n_nodes)
    last = start + run_len - 1
    total[node[last]] = end[last]  # exactly the last inclusive sum, so capping at min(D, T) is exact
    return begin, end, total


def _match_level(d_node, d_mass, t_node, t_mass, n_nodes):
    """North-west-corner matching inside every node of one level at once.

    Returns (draft item idx, target item idx, mass) of the matched pieces and
    the remaining draft and target masses (0 for items fully used).
    """
    d_begin, d_end, D = _run_cumsum(d_node, d_mass, n_nodes)
    t_begin, t_end, T = _run_cumsum(t_node, t_mass, n_nodes)
    M = np.minimum(D, T)  # mass matched in each node
    hi = np.cumsum(M)  # node k occupies [lo[k], hi[k]] = [hi[k-1], hi[k]] on one global axis,
    lo = np.r_[0.0, hi[:-1]]  # so the positions below are sorted across nodes as well as inside them

    def lay_out(node, mass, begin, end):
        m = M[node]
        on = np.flatnonzero(begin < m)  # items with some mass inside their node's matched amount
        full = end[on] >= m[on]  # the node's last matched item ends exactly at hi[node]
        pos = np.where(full, hi[node[on]], np.minimum(lo[node[on]] + end[on], hi[node[on]]))
        # used up if it ends inside the matched amount, else it keeps what lies beyond m
        remaining = np.where(end <= m, 0.0, mass - np.maximum(m - begin, 0.0))
        return on, pos, remaining

    d_on, d_pos, d_rem = lay_out(d_node, d_mass, d_begin, d_end)
    t_on, t_pos, t_rem = lay_out(t_node, t_mass, t_begin, t_end)
    if d_on.size == 0 or t_on.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), d_rem, t_rem
    # both sides tile [0, hi[-1]] in node order; cut at every end of either side
    cuts = np.sort(np.concatenate([d_pos, t_pos]), kind="stable")
    pieces = np.diff(cuts, prepend=0.0)
    keep = pieces > 0
    cuts = cuts[keep]
    i = np.minimum(np.searchsorted(d_pos, cuts, side="left"), d_pos.size - 1)
    j = np.minimum(np.searchsorted(t_pos, cuts, side="left"), t_pos.size - 1)
    return d_on[i], t_on[j], pieces[keep], d_rem, t_rem


def solve_block_tree_laws(draft_law, target_law, vocab_size: int, draft_length: int,
                          *, return_plan: bool = True) -> BlockOTResult:
    r"""Exact block OT by greedy matching on the prefix tree: an optimal plan of (6)–(7) of [1] and its value (8).

    The value is max_π E_π[β] = Σ_{ℓ=1..L} Σ_{x^ℓ} min(p(x^ℓ), q(x^ℓ)) (Theorem 1 of [1]). The cost L − β(x, y) is a tree metric: on the prefix tree (root = empty
    prefix, node x^ℓ at depth ℓ, leaves = blocks) it is half the path length
    between two leaves, L − depth of their deepest common ancestor. The greedy
    bottom-up matching is optimal:

    1. at every leaf match min(p, q) with itself (β = L); pass the draft
       surplus (p − q)_+ and the target surplus (q − p)_+ up;
    2. at a node x^ℓ (ℓ = L−1, …, 0) match as much of the draft mass passed up
       by its children as possible with their target mass (β = ℓ: the pieces
       come from different children, since each child passes up one side only),
       and pass the rest (again one-sided) up.

    *Why it attains eq. (8).* By induction from the leaves, the mass matched
    inside the subtree of x^ℓ is min(p(x^ℓ), q(x^ℓ)) and the rest leaves it
    one-sided: with children c, Σ_c min(p_c, q_c) + min(Σ_c (p_c − q_c)_+,
    Σ_c (q_c − p_c)_+) = min(Σ_c p_c, Σ_c q_c). Pairs matched inside that subtree
    are exactly those with X^ℓ = Y^ℓ = x^ℓ, so P(β ≥ ℓ) = Σ_{x^ℓ} min(p(x^ℓ), q(x^ℓ))
    and E[β] = Σ_{ℓ≥1} P(β ≥ ℓ) is eq. (8). *Why nothing does better.* For any
    coupling P(X^ℓ = Y^ℓ = x^ℓ) ≤ min(p(x^ℓ), q(x^ℓ)), so every term P(β ≥ ℓ)
    is bounded by the same sum (v1 Lemma 1); greedy meets all L bounds at once.
    At the root all mass is matched (the totals agree), so π is a coupling.

    Implementation: the value is eq. (8) from prefix laws (V children summed
    per level). The plan is built level by level in one numpy pass per level:
    inside every node the leftover draft and target pieces are matched
    north-west-corner style, by laying all nodes' matched amounts end to end on
    one axis and cutting it at every cumulative end of either side; pieces
    partially used keep their remainder, and node ids are divided by V.

    Parameters
    ----------
    draft_law, target_law : array_like, shape (V**L,)
        p and q, lexicographic; finite, non-negative, each summing to 1 within
        :data:`~otspec.solvers.block_prefix.BLOCK_LAW_TOL` (q is rescaled to p's total).
    vocab_size, draft_length : int
        V and L.
    return_plan : bool, default True
        Build the plan (O(V^L L log V^L) time) or only the value (O(V^L)).

    Returns
    -------
    BlockOTResult
        ``plan``: a sparse (V**L, V**L) matrix with at most 2·V**L non-zeros (one diagonal entry
        per block, and each off-diagonal piece ends by using up a leftover), or None when
        ``return_plan`` is False; marginals hold up to a few ulps of 1, and E_plan[β] = ``value``
        to the same accuracy. ``n_variables`` counts the Σ_ℓ V**ℓ prefix-tree nodes.

    Raises
    ------
    ValueError
        On invalid laws or sizes (see :func:`~otspec.solvers.block_prefix.validated_block_laws`).

    References
    ----------
    .. [1] Z. Sun, J. H. Ro, A. Beirami, A. T. Suresh, "Optimal Block-Level Draft Verification for
       Accelerating Speculative Decoding", arXiv:2403.10444v1, 2024.

    Examples
    --------
    L = 1, p = (0.5, 0.5), q = (0.75, 0.25): the leaves keep min(p, q) = (0.5, 0.25) and the
    root sends the draft surplus 0.25 of token 1 to the target surplus of token 0.

    >>> res = solve_block_tree_laws([0.5, 0.5], [0.75, 0.25], 2, 1)
    >>> res.value  # 1 - TV(p, q)
    0.75
    >>> res.plan.toarray().tolist()
    [[0.5, 0.0], [0.25, 0.25]]
    """
    p, q, V, L, n = validated_block_laws(draft_law, target_law, vocab_size, draft_length)
    return_plan = check_flag(return_plan, "return_plan")  # 'False' drew the plan
    value = prefix_tree_value(p, q, V, L)
    n_nodes = sum(V**ell for ell in range(1, L + 1))
    message = "greedy matching on the prefix tree (exact for the tree metric L - beta)"
    if not return_plan:
        return BlockOTResult(value, None, "optimal", message, "tree", n_nodes)
    diag = np.minimum(p, q)
    leaves = np.flatnonzero(diag > 0)
    rows, cols, data = [leaves], [leaves], [diag[leaves]]
    d_leaf = np.flatnonzero(p > q)
    t_leaf = np.flatnonzero(q > p)
    d_mass, t_mass = (p - q)[d_leaf], (q - p)[t_leaf]
    d_node, t_node = d_leaf.copy(), t_leaf.copy()
    for depth in range(L - 1, -1, -1):
        if d_leaf.size == 0 or t_leaf.size == 0:
            break  # one side is empty: the other holds only rounding residue
        d_node //= V
        t_node //= V
        i, j, mass, d_mass, t_mass = _match_level(d_node, d_mass, t_node, t_mass, V**depth)
        rows.append(d_leaf[i])
        cols.append(t_leaf[j])
        data.append(mass)
        d_keep, t_keep = np.flatnonzero(d_mass > 0), np.flatnonzero(t_mass > 0)
        d_leaf, d_node, d_mass = d_leaf[d_keep], d_node[d_keep], d_mass[d_keep]
        t_leaf, t_node, t_mass = t_leaf[t_keep], t_node[t_keep], t_mass[t_keep]
    plan = sp.coo_array((np.concatenate(data), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n))
    return BlockOTResult(value, plan, "optimal", message, "tree", n_nodes)


def solve_block_tree(draft: Source, target: Source, draft_length: int, *, return_plan: bool = True) -> BlockOTResult:
    """Exact block OT of two sources by greedy matching on the prefix tree (:func:`solve_block_tree_laws`).

    The marginals are the laws of the first L tokens (:func:`block_laws`), so V**L is at most
    :data:`~otspec.sources.MAX_ENUMERATION`; the value is eq. (8) (Theorem 1, eq. (6) of [1]),
    Σ_{ℓ=1..L} Σ_{x^ℓ} min(p(x^ℓ), q(x^ℓ)).

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    draft_length : int
        L >= 1, within both horizons.
    return_plan : bool, default True
        Build the sparse plan, shape (V**L, V**L), or only the value.

    Returns
    -------
    BlockOTResult
        ``value``, ``plan`` (None without ``return_plan``), ``method`` = "tree".

    Raises
    ------
    ValueError
        On a vocabulary mismatch, an invalid length, or V**L above the enumeration limit.

    References
    ----------
    .. [1] Z. Sun, J. H. Ro, A. Beirami, A. T. Suresh, "Optimal Block-Level Draft Verification for
       Accelerating Speculative Decoding", arXiv:2403.10444v1, 2024.

    Examples
    --------
    >>> from otspec.sources import bernoulli
    >>> res = solve_block_tree(bernoulli(0.25), bernoulli(0.75), 2, return_plan=False)
    >>> res.value, res.plan  # (1 - 0.5) + (1 - TV(Bin(2, 0.25), Bin(2, 0.75))) = 0.5 + 0.5
    (1.0, None)
    """
    check_flag(return_plan, "return_plan")
    p, q = block_laws(draft, target, draft_length)
    return solve_block_tree_laws(p, q, draft.vocab_size, draft_length, return_plan=return_plan)
