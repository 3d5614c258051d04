r"""Traversal Verification (Weng et al., NeurIPS 2025, arXiv 2505.12398): a drafted tree verified from the leaves up.

A node Y carries a weight a(Y) (the probability mass of accepting the path to Y, as in block verification's
w_i), a target row M_b(·|Y) (at first q(·|Y)) and the law M_s(·|Y) its next child was drawn from (at first
p(·|Y); siblings are drawn without replacement, so after a rejection the rejected token leaves M_s). A
child X of Y weighs a(X) = min{1, a(Y) M_b(X|Y) / M_s(X|Y)} (eq. (13) of block verification, path by path).

The traversal takes the first leaf in post-order (the first drawn child at every level, deepest first) and
accepts the path to it with probability a(leaf); the bonus token is then drawn from M_b(·|leaf). Otherwise
the leaf is deleted, and its parent Y, with m = Σ_x (a(Y) M_b(x|Y) − M_s(x|Y))_+, becomes

.. math::
    a(Y) \leftarrow \frac{m}{1 - a(Y) + m}, \qquad
    M_b(\cdot|Y) \leftarrow \frac{(a(Y) M_b(\cdot|Y) - M_s(\cdot|Y))_+}{m}, \qquad
    M_s(\cdot|Y) \leftarrow M_s(\cdot|Y) \text{ without the rejected token, renormalised},

and the next leaf is taken. The root starts at a = 1 and stays there, so it is accepted once its children
are all deleted (no drafted token kept; the bonus token from its residual). On a chain this is the published
block verification (h_i = m_i / (m_i + 1 − w_i), eq. (14b)); the update above is derived so that, whatever the
law of the next sibling, the mass of every next token x at Y stays a(Y) M_b(x|Y) (so the output law is the
target's; tested exactly on every drafted tree of small sources). The paper's own text was not at hand: where
its notation differs, this docstring is the definition that the tests check.

:func:`traversal_law` is the exact law of one verification of a given tree: the traversal's decisions come in
a fixed order, so the probability of each accepted path is a product of the rejections before it.

Spec: ``docs/token_and_block_verification.md``, ``docs/mcsd.md``.
"""

from __future__ import annotations

import array_api_compat
import numpy as np

from ..distributions import namespace, sample_categorical, uniform
from .base import WholeTreeVerifier
from .registry import register

__all__ = ["OrderedTree", "TraversalVerify", "traversal_law", "traversal_sample", "traversal_walk_on_device"]


class OrderedTree:
    """A drafted tree with its rows: node 0 the root (the committed tokens); ``children[j]`` in drawing order.

    ``p[j]`` / ``q[j]``: the draft's and the target's rows after the path to node j (``p`` needed at nodes with
    children: it is the law their children were drawn from).
    """

    def __init__(self, q_root, p_root=None):
        self.token, self.parent, self.children = [-1], [-1], [[]]
        self.q, self.p = [np.asarray(q_root, dtype=float)], [None if p_root is None else np.asarray(p_root, float)]

    def add(self, parent: int, token: int, q_row, p_row=None) -> int:
        j = len(self.token)
        self.token.append(int(token))
        self.parent.append(int(parent))
        self.children.append([])
        self.children[parent].append(j)
        self.q.append(np.asarray(q_row, dtype=float))
        self.p.append(None if p_row is None else np.asarray(p_row, dtype=float))
        return j

    def path(self, j: int) -> tuple:
        out = []
        while j > 0:
            out.append(self.token[j])
            j = self.parent[j]
        return tuple(out[::-1])


def _traverse(tree: OrderedTree, decide):
    """The traversal (module docstring); ``decide(reach, accept)`` says whether the current leaf is accepted given
    the probability ``reach`` of getting to it and its acceptance ``accept`` (the law records both branches)."""
    weight, mb, ms = {0: 1.0}, {}, {}
    alive = [list(c.values()) if isinstance(c, dict) else list(c) for c in tree.children]  # a trie's: token -> node
    reach = 1.0
    while True:
        node = 0
        while alive[node]:  # descend along first children, weighing each node once on first visit
            child = alive[node][0]
            if child not in weight:
                x = tree.token[child]
                rows = mb.setdefault(node, tree.q[node].copy()), ms.setdefault(node, tree.p[node].copy())
                weight[child] = min(1.0, weight[node] * rows[0][x] / rows[1][x]) if rows[1][x] > 0 else 0.0
            node = child
        accept = weight[node]
        if decide(node, reach, accept, mb.get(node, tree.q[node])) or node == 0:
            return
        reach *= 1.0 - accept
        if reach <= 0.0:
            return
        parent, x = tree.parent[node], tree.token[node]
        a, b, s = weight[parent], mb[parent], ms[parent]
        r = np.maximum(a * b - s, 0.0)
        m = float(r.sum())
        weight[parent] = m / (1.0 - a + m) if 1.0 - a + m > 0 else 0.0
        if m > 0:
            mb[parent] = r / m
        s = s.copy()
        s[x] = 0.0
        ms[parent] = s / s.sum() if s.sum() > 0 else s
        alive[parent].remove(node)


def _nodes_to(tree, node: int) -> list:
    """The nodes from below the root down to ``node`` (trees here are a few levels deep)."""
    return [] if node <= 0 else [*_nodes_to(tree, tree.parent[node]), node]


def traversal_law(tree) -> list:
    """Every outcome of Traversal Verification on ``tree`` (an :class:`OrderedTree`, or a trie of the tree loop: any
    object with ``token``, ``parent``, ``children`` in drawing order, rows ``p`` and ``q``): a list of (accepted path
    (tuple of tokens), its probability, the row the bonus token is drawn from). Probabilities sum to 1."""
    outcomes = []

    def record(node, reach, accept, bonus):
        outcomes.append((tuple(tree.token[j] for j in _nodes_to(tree, node)), reach * accept, bonus))
        return False  # follow the rejection branch too: its mass is the rest

    _traverse(tree, record)
    return outcomes


def traversal_sample(tree, rng) -> tuple[list, int]:
    """One run of Traversal Verification on ``tree`` (as in :func:`traversal_law`) with ``rng`` (a numpy Generator):
    (the accepted path's nodes, root excluded; the bonus token)."""
    out = []

    def draw(node, reach, accept, bonus):
        if rng.random() < accept or node == 0:
            out.append((_nodes_to(tree, node), int(rng.choice(bonus.size, p=bonus / bonus.sum()))))
            return True
        return False

    _traverse(tree, draw)
    return out[0]


@register
class TraversalVerify(WholeTreeVerifier):
    """Traversal Verification as a whole-tree verifier of the tree loop (``layout == "tree"``): it reads every
    drafted node's rows at once and returns the accepted path and the bonus token. Children must be drawn without
    replacement (chains included), in drawing order."""

    name = "traversal"
    label = "traversal (Weng et al.)"
    style = {"color": "C5"}
    replacement = False

    def check_tree(self, tree) -> None:
        """Refuse a tree whose children are not drawn without replacement (chains are drawn either way)."""
        if tree.deterministic or (tree.draw != "without" and max(tree.branching) > 1):
            raise ValueError(f"{type(self).__name__} verifies trees whose children are drawn without replacement "
                             f"(or chains), got {tree}; draw them so: parse_tree(spec, replacement=False) or "
                             "DraftTree.parse(spec, replacement=False)")

    def tree_law(self, tree) -> list:
        return traversal_law(tree)

    def sample_tree(self, tree, rng) -> tuple[list, int]:
        return traversal_sample(tree, rng)

    def walk_on_device(self, layout, tokens, draft_rows, target_rows, depth, rng):
        """The tree loop's device walk (:func:`traversal_walk_on_device`)."""
        return traversal_walk_on_device(layout, tokens, draft_rows, target_rows, depth, rng)


def traversal_walk_on_device(layout, tokens, draft_rows, target_rows, depth, rng):
    """Traversal Verification on the device walk's layout of a tree drawn without replacement
    (:mod:`otspec.engine.devicetree`; children of one node are distinct, so the layout is the trie). Every sequence
    runs the traversal of the module docstring at once: a step descends along first live children (weighing a node
    on its first visit), accepts the leaf with probability a(leaf) or deletes it and updates its parent; a sequence
    that has accepted keeps its outcome. A tree of n nodes needs at most n + 1 steps. ``depth`` (B,) on the device
    cuts each sequence's tree. Returns (emitted tokens (B, D + 1), emitted counts (B,), the accepted leaf (B,))."""
    xp = namespace(target_rows)
    device = array_api_compat.device(target_rows)
    B, top = target_rows.shape[0], len(tokens) - 1
    rows = xp.arange(B, device=device)
    if top == 0:
        y = sample_categorical(target_rows[:, 0], rng, check=False)
        return y[:, None], xp.ones_like(y), xp.zeros_like(y)
    n = layout.nodes_to(top) + 1  # the root and every drafted node
    inner = layout.nodes_to(top - 1) + 1  # nodes with children in the layout
    level_of = xp.asarray(layout.level[:n], device=device)
    token = xp.concat([xp.full((B, 1), -1, dtype=xp.int64, device=device), *tokens[1:]], axis=1)
    alive = (token >= 0) & (level_of[None, :] <= depth[:, None])
    alive[:, 0] = True
    mb = xp.asarray(target_rows[:, :inner], copy=True)  # M_b at every inner node: the target rows at first
    ms = xp.concat(draft_rows[:top], axis=1)[:, :inner]  # M_s: the draft rows the children were drawn from
    ms = xp.asarray(ms, copy=True)
    weight = xp.zeros((B, n), dtype=target_rows.dtype, device=device)
    weight[:, 0] = 1.0
    seen = xp.zeros((B, n), dtype=xp.bool, device=device)
    seen[:, 0] = True
    done = xp.zeros(B, dtype=xp.bool, device=device)
    leaf_at = xp.zeros(B, dtype=xp.int64, device=device)
    bonus = xp.zeros(B, dtype=xp.int64, device=device)
    for _ in range(n):
        cur = xp.zeros(B, dtype=xp.int64, device=device)
        for d in range(top):  # descend along first live children
            k = layout.branching[d]
            local = xp.clip(cur - layout.offsets[d], min=0, max=layout.sizes[d] - 1)  # rows stopped higher: masked
            slots = layout.offsets[d + 1] + local[:, None] * k + xp.arange(k, device=device)[None, :]
            live = xp.take_along_axis(alive, slots, axis=1) & (level_of[cur] == d)[:, None]
            has = xp.any(live, axis=1)
            child = xp.take_along_axis(slots, xp.argmax(xp.astype(live, xp.int8), axis=1)[:, None], axis=1)[:, 0]
            child = xp.where(has, child, cur)
            x = xp.clip(token[rows, child], min=0)
            inner_cur = xp.clip(cur, max=inner - 1)
            m_b, m_s = mb[rows, inner_cur, x], ms[rows, inner_cur, x]
            w = xp.where(m_s > 0, xp.minimum(weight[rows, cur] * m_b / xp.where(m_s > 0, m_s, xp.ones_like(m_s)), 1.0),
                         xp.zeros_like(m_s))
            first = has & ~seen[rows, child] & ~done
            weight[rows, child] = xp.where(first, w, weight[rows, child])
            seen[rows, child] = seen[rows, child] | first
            cur = child
        accept = weight[rows, cur]
        take = ~done & ((uniform(rng, (B,), target_rows) < accept) | (cur == 0))
        row = xp.where((cur < inner)[:, None], mb[rows, xp.clip(cur, max=inner - 1)], target_rows[rows, cur])
        draw = xp.astype(sample_categorical(row, rng, check=False), xp.int64)
        bonus = xp.where(take, draw, bonus)
        leaf_at = xp.where(take, cur, leaf_at)
        reject = ~done & ~take
        done = done | take
        # a rejected leaf: its parent's weight and rows move to the residual, the leaf's token leaves M_s
        parent = xp.asarray(layout.parent[:n], device=device)[cur]
        parent = xp.where(reject, parent, xp.zeros_like(parent))
        a, b, s = weight[rows, parent], mb[rows, parent], ms[rows, parent]
        r = xp.clip(a[:, None] * b - s, min=0.0)
        m = xp.sum(r, axis=-1)
        den = 1.0 - a + m
        new_w = xp.where(den > 0, m / xp.where(den > 0, den, xp.ones_like(den)), xp.zeros_like(den))
        new_b = xp.where((m > 0)[:, None], r / xp.where(m > 0, m, xp.ones_like(m))[:, None], b)
        x = xp.clip(token[rows, cur], min=0)
        s = xp.where(xp.arange(s.shape[-1], device=device)[None, :] == x[:, None], xp.zeros_like(s), s)
        s_mass = xp.sum(s, axis=-1, keepdims=True)
        new_s = xp.where(s_mass > 0, s / xp.where(s_mass > 0, s_mass, xp.ones_like(s_mass)), s)
        weight[rows, parent] = xp.where(reject, new_w, a)
        mb[rows, parent] = xp.where(reject[:, None], new_b, b)
        ms[rows, parent] = xp.where(reject[:, None], new_s, ms[rows, parent])
        alive[rows, cur] = alive[rows, cur] & ~reject
    # the accepted path: the leaf's ancestors below the root, then the bonus token
    path = xp.full((B, top), -1, dtype=xp.int64, device=device)
    parent_of = xp.asarray(np.maximum(layout.parent[:n], 0), device=device)
    ids = xp.arange(top, device=device)[None, :]
    node = leaf_at
    for _ in range(top):
        at = level_of[node]
        path = xp.where((ids == (at - 1)[:, None]) & (at > 0)[:, None], token[rows, node][:, None], path)
        node = parent_of[node]
    length = level_of[leaf_at]
    out = xp.concat([xp.where(path >= 0, path, xp.zeros_like(path)), xp.zeros_like(path[:, :1])], axis=1)
    out = xp.where(xp.arange(top + 1, device=device)[None, :] == length[:, None], bonus[:, None], out)
    return out, length + 1, leaf_at
