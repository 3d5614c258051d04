"""The bookkeeping of a pending draft tree in a KV cache (:mod:`llm_bridge.cache`): which pending nodes each new
node sees (its ancestors and itself), at which depth, and whether a kept path is a chain of the tree. On the host
(numpy parents) or, for a tree whose shape was chosen on the device, with the parents as a tensor."""

from __future__ import annotations

import numpy as np

from otspec.distributions import on_device, to_device

__all__ = ["check_path", "grow_tree", "grow_tree_on_device", "slot_lookup"]


def slot_lookup(slots, parents, base, device):
    """(B, m) on ``device``: for each node, the slot of its parent node (``parents`` a tensor of indices into each
    row's ``slots`` list, looked up on the device from a host table) or ``base[b]`` where the parent is -1."""
    import torch

    table = np.full((len(slots), max(max((len(x) for x in slots), default=0), 1)), -1, dtype=np.int64)
    for b, x in enumerate(slots):
        table[b, :len(x)] = x
    table, parents = to_device(table, device), parents.to(device).long()
    base = on_device(np.broadcast_to(np.asarray(base, dtype=np.int64), (len(slots),)), device)
    return torch.where(parents >= 0, torch.gather(table, 1, parents.clamp(0, table.shape[1] - 1)), base[:, None])


def grow_tree(below, depth, real, parents, counts):
    """Pending-tree bookkeeping: add m nodes (their ``parents`` index pending nodes, -1 = the sequence's last token).

    Returns (ancestor matrix (B, M+m, M+m) — [b, j, i]: node i is node j or an ancestor —, depths, real).
    """
    B, M = below.shape[0], below.shape[1]
    m = parents.shape[1]
    real = np.concatenate([real, np.arange(m)[None, :] < np.asarray(counts)[:, None]], axis=1)
    grown = np.zeros((B, M + m, M + m), dtype=bool)
    grown[:, :M, :M] = below
    depth = np.concatenate([depth, np.zeros((B, m), dtype=np.int64)], axis=1)
    for j in range(M, M + m):
        grown[:, j, j] = True
        parent = parents[:, j - M]
        has = real[:, j] & (parent >= 0)
        if (has & (parent >= j)).any():
            raise ValueError("feed_tree: list every node after its parent (parents[b, j] < the node's index)")
        rows = np.flatnonzero(has)
        grown[rows, j] |= grown[rows, parent[rows]]
        depth[rows, j] = depth[rows, parent[rows]] + 1
    return grown, depth, real


def grow_tree_on_device(below, depth, real, parents, counts):
    """:func:`grow_tree` with ``parents`` a tensor (chosen on the device, e.g. by confidence): the ancestor matrix and
    depths are built there by gathers, nothing read back; ``real`` (which nodes are real: from the host ``counts``)
    stays on the host. The order check of :func:`grow_tree` is left out (it would read the parents back)."""
    import torch

    device = parents.device
    B, M, m = below.shape[0], below.shape[1], parents.shape[1]
    real = np.concatenate([real, np.arange(m)[None, :] < np.asarray(counts)[:, None]], axis=1)
    grown = torch.zeros((B, M + m, M + m), dtype=torch.bool, device=device)
    grown[:, :M, :M] = on_device(below, device)
    depth = torch.cat([on_device(depth, device), torch.zeros((B, m), dtype=torch.int64, device=device)], dim=1)
    rows = torch.arange(B, device=device)
    real_dev = on_device(real, device)
    for j in range(M, M + m):
        parent = parents[:, j - M].long()
        has = real_dev[:, j] & (parent >= 0)
        at = parent.clamp(min=0)
        grown[:, j] = torch.where(has[:, None], grown[rows, at], grown[:, j])
        grown[:, j, j] = True
        depth[:, j] = torch.where(has, depth[rows, at] + 1, depth[:, j])
    return grown, depth, real


def check_path(below, b: int, path) -> list:
    """``path`` as ints, checked against the tree: its nodes exist and (a tree on the host) form a root-first chain.
    A tree grown on the device comes from a walk that gives chains; checking one would read the tree back."""
    path = [int(j) for j in path]
    m = below.shape[1]
    if any(not 0 <= j < m for j in path):
        raise ValueError(f"keep_path: node indices of row {b} must lie in [0, {m})")
    if path and isinstance(below, np.ndarray) and set(np.flatnonzero(below[b, path[-1]]).tolist()) != set(path):
        raise ValueError(f"keep_path: nodes {path} of row {b} are not a root-first chain of the tree")
    return path
