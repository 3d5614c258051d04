r"""Greedy multi-path block verification (GBV; Thomas & Pal, arXiv 2602.16961): K i.i.d. draft paths, one chosen
by a fixed order, verified by block verification against the law of the chosen path.

The draft samples K paths of length L i.i.d. from p (the tree ``iid:K:L``: K root candidates with replacement,
one child per tree node below). At every node s the tokens are ranked by the ratio q(x|s)/p(x|s), ties broken
by the token id, the same strict order everywhere; paths are compared lexicographically under these orders and
the greatest drafted path is chosen, greedily from the root (at each node the child of highest rank). The
chosen path is the maximum of K i.i.d. draws under a fixed total order, so its law is autoregressive with

.. math::
    p^\Gamma(x|s) = \frac{(A_s + \pi_s F_s(x))^K - (A_s + \pi_s F_s^-(x))^K}{(A_s + \pi_s)^K - A_s^K},

F_s / F_s^- the draft's distribution function at s under the order, with / without x, π_s the draft probability
of reaching s and A_s the draft mass of the paths ranked below s's subtree (π_{s·x} = π_s p(x|s),
A_{s·x} = A_s + π_s F_s^-(x)). With t = A_s/(A_s + π_s), u = t + (1 − t) F_s(x), v = t + (1 − t) F_s^-(x) and
S_K(u, v) = Σ_{i<K} u^i v^{K−1−i}, this is p(x|s) S_K(u, v) / S_K(1, t): no difference of near-equal powers, and
t becomes v/u at the chosen token. The chosen path is then verified by published block verification
(:class:`~otspec.verifiers.BlockVerify`, eqs. (13)-(16)) with p^Γ as the draft: block verification keeps the
target's law for a path drawn from any known law, so GBV is lossless, and with K = 1 it is block verification.

Two details keep it exact: the order that ranks the distribution function and the order that walks the children
must be the same strict order (here one rank array serves both), and p^Γ must replace p everywhere in block
verification (weights, residuals, h_i). Verifying the chosen path against plain p, as a fallback would, loses the
target's law; the tests show their G-test sees it. p^Γ is computed in float64 in the factored form above.

Spec: ``docs/token_and_block_verification.md``, ``docs/mcsd.md``.
"""

from __future__ import annotations

import array_api_compat
import numpy as np

from ..checks import check_size
from ..distributions import namespace, row_pair, sample_categorical
from .base import WholeTreeVerifier
from .block import BlockVerify
from .registry import register

__all__ = ["GreedyBlockVerify", "gbv_law", "gbv_sample", "gbv_walk_on_device", "greedy_path", "ratio_ranks",
           "ratio_ranks_xp", "skewed_row", "skewed_rows_xp"]


def ratio_ranks(p_row: np.ndarray, q_row: np.ndarray) -> np.ndarray:
    """rank[x]: the position of x in the strict order by (q(x)/p(x), x), ascending (p(x) = 0: ratio +inf)."""
    ratio = np.divide(q_row, p_row, out=np.full(p_row.shape, np.inf), where=p_row > 0)
    order = np.lexsort((np.arange(p_row.size), ratio))
    rank = np.empty(p_row.size, dtype=np.int64)
    rank[order] = np.arange(p_row.size)
    return rank


def skewed_row(p_row: np.ndarray, rank: np.ndarray, t: float, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p^Γ(·|s), u, v) at a node with ``t`` = A_s / (A_s + π_s), for the maximum of ``k`` i.i.d. paths."""
    order = np.argsort(rank)
    F = np.empty_like(p_row)
    F[order] = np.cumsum(p_row[order])
    F = np.minimum(F, 1.0)
    u, v = t + (1.0 - t) * F, t + (1.0 - t) * (F - p_row)
    powers = np.arange(k)
    s_uv = (u[:, None] ** powers * v[:, None] ** (k - 1 - powers)).sum(axis=1)
    row = p_row * s_uv / float(np.sum(t ** (k - 1 - powers)))
    return row / row.sum(), u, v


def greedy_path(tree) -> tuple[list, np.ndarray, np.ndarray]:
    """The chosen path of a drafted trie of K i.i.d. paths (``tree.cands[0]`` holds the K root draws): (its nodes,
    root excluded; p^Γ rows at the root and the path's inner nodes, (D, V); the target's rows at the root and every
    path node, (D + 1, V))."""
    k = len(tree.cands[0])
    node, t, nodes, skewed, target = 0, 0.0, [], [], [np.asarray(tree.q[0], dtype=float)]
    while tree.children[node]:
        p_row, q_row = np.asarray(tree.p[node], dtype=float), np.asarray(tree.q[node], dtype=float)
        rank = ratio_ranks(p_row, q_row)
        row, u, v = skewed_row(p_row, rank, t, k)
        child = max(tree.children[node].items(), key=lambda item: rank[item[0]])[1]
        x = tree.token[child]
        t = float(v[x] / u[x])
        nodes.append(child)
        skewed.append(row)
        target.append(np.asarray(tree.q[child], dtype=float))
        node = child
    return nodes, np.array(skewed), np.array(target)


def gbv_law(tree) -> list:
    """Every outcome of GBV on a drafted trie (:func:`greedy_path`): (accepted path (tuple of tokens), its
    probability, the row the next token is drawn from), from block verification's exact law on the chosen path."""
    nodes, skewed, target = greedy_path(tree)
    tokens = np.array([[tree.token[j] for j in nodes]], dtype=np.int64)
    law = BlockVerify().law(tokens, skewed[None], target[None])
    accept, rows = np.asarray(law.accept_probs)[0], np.asarray(law.correction_probs)[0]
    return [(tuple(tokens[0, :tau].tolist()), float(accept[tau]), rows[tau]) for tau in range(len(nodes) + 1)]


def gbv_sample(tree, rng) -> tuple[list, int]:
    """One run of GBV on a drafted trie with ``rng``: (the accepted nodes, root excluded; the next token)."""
    nodes, skewed, target = greedy_path(tree)
    tokens = np.array([[tree.token[j] for j in nodes]], dtype=np.int64)
    out = BlockVerify().sample(tokens, skewed[None], target[None], rng, validate=False)  # rows built valid here
    tau = int(np.asarray(out.accepted_len)[0])
    return nodes[:tau], int(np.asarray(out.token)[0])


@register
class GreedyBlockVerify(WholeTreeVerifier):
    """GBV as a whole-tree verifier of the tree loop (``layout == "tree"``) on K i.i.d. draft paths: the trees
    ``iid:K:L`` (``K x 1 x ... x 1`` with replacement)."""

    name = "gbv"
    label = "greedy multi-path block (Thomas & Pal)"
    style = {"color": "C6"}
    replacement = True

    def check_tree(self, tree) -> None:
        """Refuse a tree that is not K i.i.d. paths (the law p^Γ is that of the best of K i.i.d. paths)."""
        branching = getattr(tree, "branching", None)
        if tree.deterministic or branching is None or any(k != 1 for k in branching[1:]) or (
                branching[0] > 1 and tree.draw != "iid"):
            raise ValueError(f"GreedyBlockVerify verifies K i.i.d. draft paths (iid:K:L, Kx1x...x1 with "
                             f"replacement), got {tree}")

    def expected_acceptance(self, draft, target, k: int) -> float:
        """One position, k i.i.d. candidates (the tree iid:k:1): the chosen token has law p^Γ = F^k − (F^-)^k and
        is token-verified against it, so P(accept) = Σ_x min{q(x), p^Γ(x)}."""
        p, q = row_pair(draft, target)
        row, _, _ = skewed_row(p, ratio_ranks(p, q), 0.0, check_size(k, "k"))
        return float(np.minimum(q, row).sum())

    def tree_law(self, tree) -> list:
        return gbv_law(tree)

    def sample_tree(self, tree, rng) -> tuple[list, int]:
        return gbv_sample(tree, rng)

    def walk_on_device(self, layout, tokens, draft_rows, target_rows, depth, rng):
        """The tree loop's device walk (:func:`gbv_walk_on_device`)."""
        return gbv_walk_on_device(layout, tokens, draft_rows, target_rows, depth, rng)


def ratio_ranks_xp(p_rows, q_rows):
    """:func:`ratio_ranks` of every row at once, in the rows' namespace (torch on its device too): (B, V) ranks by
    (q(x)/p(x), x), ascending (a stable sort keeps equal ratios in id order)."""
    xp = namespace(p_rows, q_rows)
    positive = p_rows > 0
    ratio = xp.where(positive, q_rows / xp.where(positive, p_rows, xp.ones_like(p_rows)), xp.full_like(p_rows, np.inf))
    order = xp.argsort(ratio, axis=-1, stable=True)
    ids = xp.broadcast_to(xp.arange(p_rows.shape[-1], device=array_api_compat.device(p_rows))[None, :], order.shape)
    rank = xp.zeros_like(order)
    if isinstance(rank, np.ndarray):
        np.put_along_axis(rank, order, ids, axis=-1)
        return rank
    return rank.scatter(-1, order, ids)


def skewed_rows_xp(p_rows, rank, t, k: int):
    """:func:`skewed_row` of every row at once (numpy or torch): (p^Γ rows (B, V), u, v) for ``t`` (B,)."""
    xp = namespace(p_rows)
    order = xp.argsort(rank, axis=-1)
    cum = xp.cumulative_sum(xp.take_along_axis(p_rows, order, axis=-1), axis=-1)
    F = xp.zeros_like(p_rows)
    if isinstance(F, np.ndarray):
        np.put_along_axis(F, order, cum, axis=-1)
    else:
        F = F.scatter(-1, order, cum)
    F = xp.clip(F, max=1.0)
    t = t[:, None]
    u, v = t + (1.0 - t) * F, t + (1.0 - t) * (F - p_rows)
    s_uv = xp.zeros_like(p_rows)
    norm = xp.zeros_like(t[:, 0])
    for i in range(k):
        s_uv = s_uv + u**i * v**(k - 1 - i)
        norm = norm + t[:, 0]**(k - 1 - i)
    row = p_rows * s_uv / norm[:, None]
    return row / xp.sum(row, axis=-1, keepdims=True), u, v


def gbv_walk_on_device(layout, tokens, draft_rows, target_rows, depth, rng):
    """GBV on the device walk's layout of ``iid:K:L`` (:mod:`otspec.engine.devicetree`): K chains of nodes, path i
    the nodes ``offsets[d] + i``. The greedy choice keeps the set of paths that spell the chosen prefix (the trie's
    merged node) and picks, among their next tokens, the one of highest rank at the node; the chosen path is then
    verified by block verification against p^Γ in one ragged call (``depth`` (B,) on the device: each row's length).
    Returns (emitted tokens (B, D + 1), emitted counts (B,), the deepest walked node (B,)), on the device."""
    xp = namespace(target_rows)
    device = array_api_compat.device(target_rows)
    B, top = target_rows.shape[0], len(tokens) - 1
    k = layout.branching[0]
    rows = xp.arange(B, device=device)
    paths = xp.ones((B, k), dtype=xp.bool, device=device)
    t = xp.zeros(B, dtype=target_rows.dtype, device=device)
    first = xp.zeros(B, dtype=xp.int64, device=device)
    chosen, skewed, verified = [], [], [target_rows[:, 0]]
    for d in range(top):
        p_row = draft_rows[d][rows, 0 if d == 0 else first]
        q_row = target_rows[rows, layout.offsets[d] + first] if d else target_rows[:, 0]
        rank = ratio_ranks_xp(p_row, q_row)
        row, u, v = skewed_rows_xp(p_row, rank, t, k)
        level = tokens[d + 1]
        score = xp.where(paths & (level >= 0), xp.take_along_axis(rank, xp.clip(level, min=0), axis=-1),
                         xp.full_like(level, -1))
        pick = xp.argmax(score, axis=-1)
        x = level[rows, pick]
        paths = paths & (level == x[:, None])
        first = xp.argmax(xp.astype(paths, xp.int8), axis=-1)
        u_x = u[rows, x]
        t = xp.where(u_x > 0, v[rows, x] / xp.where(u_x > 0, u_x, xp.ones_like(u_x)), xp.zeros_like(u_x))
        chosen.append(x)
        skewed.append(row)
        verified.append(target_rows[rows, layout.offsets[d + 1] + first])
    if top == 0:
        y = sample_categorical(target_rows[:, 0], rng, check=False)
        return y[:, None], xp.ones_like(y), xp.zeros_like(y)
    out = BlockVerify().sample(xp.stack(chosen, axis=1), xp.stack(skewed, axis=1), xp.stack(verified, axis=1), rng,
                               validate=False, lengths=depth)
    tau, y = out.accepted_len, out.correction
    drafted = xp.stack(chosen, axis=1)
    ids = xp.arange(top + 1, device=device)[None, :]
    emitted = xp.where(ids < tau[:, None], xp.concat([drafted, xp.zeros_like(drafted[:, :1])], axis=1),
                       xp.where(ids == tau[:, None], y[:, None], xp.zeros_like(ids)))
    offsets = xp.asarray(layout.offsets, device=device)
    last = xp.where(tau > 0, offsets[xp.clip(tau, min=0)] + first, xp.zeros_like(tau))
    return emitted, tau + 1, last
