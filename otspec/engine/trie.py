"""The drafted trie of one tree iteration, and how a walk goes down it.

A :class:`~otspec.drafts.DraftTree` (``4x2x2x1``, SpecTr's K i.i.d. drafts, …) says how many
candidates each tree node draws. Equal candidate tokens at a node are merged into one trie child
with a multiplicity, so the target never scores a prefix twice; a child reached by n merged tree
nodes draws n·k_{d+1} candidates in its turn (the subtrees below equal candidates are i.i.d., so
merging changes no law). Node 0 is the root: the sequence's last committed token.
"""

from __future__ import annotations

import numpy as np

__all__ = ["RULES", "Trie"]

#: Continuation rules: SpecTr ("match") and MCSD ("accepted").
RULES = ("match", "accepted")


class Trie:
    """One sequence's drafted trie, with the draft's and the target's rows at its nodes."""

    def __init__(self):
        self.token, self.parent, self.depth, self.mult = [-1], [-1], [0], [1]
        self.children: list[dict] = [{}]
        self.cands: dict = {}  # node -> candidate tokens drawn at it (n·k_d)
        self.p: dict = {}  # node -> draft row
        self.q = None  # (nodes, V) target rows, root first
        self.draft_slot: dict = {}  # node -> its index among the nodes fed to the draft session

    def __len__(self) -> int:
        return len(self.token)

    def add_candidates(self, node: int, cands: np.ndarray) -> list:
        """Record the candidates drawn at ``node``; new distinct tokens become children (returned)."""
        self.cands[node] = cands
        new = []
        for x in cands[cands >= 0].tolist():
            child = self.children[node].get(x)
            if child is None:
                child = len(self.token)
                self.token.append(x)
                self.parent.append(node)
                self.depth.append(self.depth[node] + 1)
                self.mult.append(0)
                self.children.append({})
                self.children[node][x] = child
                new.append(child)
            self.mult[child] += 1
        return new

    def used(self, node: int, k: int, rule: str) -> np.ndarray:
        """The candidates the verifier sees at ``node``: all under "match", the first k under "accepted"."""
        c = self.cands[node]
        return c if rule == "match" else c[:k]

    def next_node(self, node: int, token: int, accepted: bool, rule: str) -> int | None:
        """Where a walk goes after emitting ``token`` at ``node`` (``None``: the iteration ends)."""
        if not (accepted or rule == "match"):
            return None
        return self.children[node].get(int(token))

    def path_to(self, node: int) -> list:
        """Nodes from below the root down to ``node``, root first (the root itself excluded)."""
        out = []
        while node > 0:
            out.append(node)
            node = self.parent[node]
        return out[::-1]

    def drafted(self) -> int:
        """Candidates drawn in all (the tree's drafted tokens)."""
        return int(sum(len(c) for c in self.cands.values()))
