"""Whole-tree verification in the tree loop: a verifier with ``layout == "tree"`` (Traversal Verification) reads
every drafted node's rows at once, instead of a multi-draft verifier walking level by level."""

from __future__ import annotations

import numpy as np

__all__ = ["walk_whole_trees"]


def walk_whole_trees(verifier, tries, depth, active, rng, width: int):
    """Each active sequence's trie verified whole (``verifier.sample_tree``); returns (emitted tokens (B, width + 1),
    counts (B,), walked nodes per sequence) as the level-by-level walk does."""
    B = len(tries)
    out_tokens = np.zeros((B, width + 1), dtype=np.int64)
    emitted = np.zeros(B, dtype=np.int64)
    paths = [[] for _ in range(B)]
    for b in np.flatnonzero(active):
        t = tries[b]
        if depth[b] == 0 or not t.cands:  # nothing drafted: the target's own draw
            out_tokens[b, 0], emitted[b] = int(rng.choice(t.q.shape[1], p=t.q[0])), 1
            continue
        nodes, bonus = verifier.sample_tree(t, rng)
        out_tokens[b, :len(nodes)] = [t.token[j] for j in nodes]
        out_tokens[b, len(nodes)] = bonus
        emitted[b], paths[b] = len(nodes) + 1, list(nodes)
    return out_tokens, emitted, paths
