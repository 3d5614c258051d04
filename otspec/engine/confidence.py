"""EAGLE-2's confidence-ordered expansion of a draft tree, one drafter call per level.

:class:`~otspec.drafts.ConfidenceTree` says what is grown (Li et al., EAGLE-2, arXiv 2406.16858, §4.1–4.2):

1. **Expand.** The root's children are the ``top_k`` tokens of positive mass in the draft row after
   the committed tokens, each with confidence c = p(token). At each further level the ``top_k`` most
   confident nodes of the deepest level are fed to the drafter (one call, a tree attention mask) and
   each gets its ``top_k`` children, with c = c(parent) · p(child | path).
2. **Rerank.** Of every node drafted, the ``nodes`` most confident are kept (ties: shallower first, then
   drafting order). A child's confidence is at most its parent's, so the kept nodes form a tree.

:func:`grow_confidence` does both for a batch of sequences and returns one
:class:`~otspec.engine.trie.Trie` per sequence: its ``cands`` at a node are the node's kept children
(tokens in decreasing draft probability), ``p`` the draft rows of the nodes that were fed. Nodes
without kept children are leaves at any depth: the walk draws the bonus token there. The drafter is
reached through ``feed``, so the loop (a session's ``feed_tree``) and the exact law (a source's rows)
grow the same trees.
"""

from __future__ import annotations

import numpy as np

from .trie import Trie

__all__ = ["grow_confidence", "grow_on_source", "top_tokens"]


def top_tokens(row: np.ndarray, k: int) -> np.ndarray:
    """The at most ``k`` tokens of positive mass in ``row`` with the largest probabilities (ties: smaller id first)."""
    row = np.asarray(row)
    pos = np.flatnonzero(row > 0)
    if pos.size > k:  # an LLM row: the k-th largest value in linear time, its ties by id
        vals = row[pos]
        kth = np.partition(vals, pos.size - k)[pos.size - k]
        above = pos[vals > kth]
        pos = np.concatenate([above, pos[vals == kth][:k - above.size]])
    return pos[np.argsort(-row[pos], kind="stable")]


class _Nodes:
    """One sequence's drafted nodes in drafting order: token, parent (-1: the root), depth, log-confidence."""

    def __init__(self):
        self.token, self.parent, self.depth, self.score = [], [], [], []
        self.row, self.slot = {}, {}  # node -> draft row (fed nodes); node -> its index among the fed nodes

    def add_children(self, parent: int, row: np.ndarray, k: int, depth: int, base: float) -> list:
        born = []
        for x in top_tokens(row, k).tolist():
            born.append(len(self.token))
            self.token.append(x)
            self.parent.append(parent)
            self.depth.append(depth)
            self.score.append(base + float(np.log(row[x])))
        return born

    def best(self, among: list, k: int) -> list:
        return sorted(among, key=lambda i: (-self.score[i], self.depth[i], i))[:k]

    def trie(self, root_row, nodes: int) -> Trie:
        """The kept nodes (the ``nodes`` most confident) as a trie whose candidates are the kept children."""
        keep = set(self.best(list(range(len(self.token))), nodes))
        t, new = Trie(), {-1: 0}
        t.p[0] = root_row
        kids = {0: []}
        for i in range(len(self.token)):  # parents come before their children
            parent = self.parent[i]
            if i not in keep or parent not in new:
                continue
            j = len(t.token)
            new[i], kids[j] = j, []
            t.token.append(self.token[i])
            t.parent.append(new[parent])
            t.depth.append(self.depth[i])
            t.mult.append(1)
            t.children.append({})
            t.children[new[parent]][self.token[i]] = j
            kids[new[parent]].append(self.token[i])
            if i in self.row:
                t.p[j] = self.row[i]
        for j, tokens in kids.items():
            if tokens:
                t.cands[j] = np.asarray(tokens, dtype=np.int64)
        return t


def grow_confidence(tree, root_rows, feed, limits) -> list:
    """Grow ``tree`` (a :class:`~otspec.drafts.ConfidenceTree`) for B sequences; returns (tries, feed calls per sequence).

    ``root_rows`` (B, V): each sequence's draft row after its committed tokens; ``limits`` (B,): the deepest
    level a sequence may draft (0: none); ``feed(items)`` takes, per sequence, a list of (token, parent) —
    parent: the index of an earlier fed node of that sequence (numbered in feeding order from 0), or -1 for a
    child of the committed tokens — and returns, per sequence, the draft rows after each item's path (n_b, V).
    """
    B = len(root_rows)
    limits = np.asarray(limits, dtype=np.int64)
    seqs = [_Nodes() for _ in range(B)]
    level = [seqs[b].add_children(-1, root_rows[b], tree.top_k, 1, 0.0) if limits[b] >= 1 else [] for b in range(B)]
    fed, calls = np.zeros(B, dtype=np.int64), np.zeros(B, dtype=np.int64)
    for d in range(1, tree.depth):
        chosen = [seqs[b].best(level[b], tree.top_k) if limits[b] > d else [] for b in range(B)]
        if not any(chosen):
            break
        items = []
        for b, nodes in enumerate(chosen):
            s = seqs[b]
            items.append([(s.token[i], s.slot[s.parent[i]] if s.parent[i] >= 0 else -1) for i in nodes])
            for i in nodes:
                s.slot[i] = int(fed[b])
                fed[b] += 1
        rows = feed(items)
        level = [[] for _ in range(B)]
        for b, nodes in enumerate(chosen):
            s = seqs[b]
            calls[b] += bool(nodes)
            for i, row in zip(nodes, rows[b][:len(nodes)], strict=True):
                s.row[i] = row
                level[b] += s.add_children(i, row, tree.top_k, d + 1, s.score[i])
    tries = [seqs[b].trie(root_rows[b], tree.nodes) if limits[b] >= 1 else Trie() for b in range(B)]
    return tries, calls


def grow_on_source(draft, tree):
    """``tree`` grown after the empty context on a draft :class:`~otspec.sources.Source` (its rows after each
    path): the one :class:`~otspec.engine.trie.Trie` the exact laws and optima enumerate."""

    def feed(items):  # (token, parent among the fed nodes) -> the draft row after the node's path
        out = []
        for token, parent in items[0]:
            paths.append((paths[parent] if parent >= 0 else ()) + (token,))
            out.append(draft.row_after(paths[-1]))
        return [np.array(out)]

    paths = []
    draft.check_length(tree.depth)
    (trie,), _ = grow_confidence(tree, draft.row_after(())[None], feed, [tree.depth])
    return trie
