"""The drafted trie of one tree iteration, and how a walk goes down it.

A :class:`~otspec.drafts.DraftTree` (``4x2x2x1``, SpecTr's K i.i.d. drafts, …) says how many
candidates each tree node draws. Equal candidate tokens at a node are merged into one trie child
with a multiplicity, so the target never scores a prefix twice; a child reached by n merged tree
nodes draws n·k_{d+1} candidates in its turn (the subtrees below equal candidates are i.i.d., so
merging changes no law). Node 0 is the root: the sequence's last committed token.
"""

from __future__ import annotations

import numpy as np

from ..drafts.laws import draw_name
from .arguments import check_verifier

__all__ = ["RULES", "Trie", "check_tree_verifier"]

#: Continuation rules: SpecTr ("match") and MCSD ("accepted").
RULES = ("match", "accepted")


def check_tree_verifier(verifier, tree) -> None:
    """Refuse a verifier that would not keep the target's law on ``tree``'s draws (a clear ``ValueError``)."""
    check_verifier(verifier)
    if verifier.layout == "tree":  # a whole-tree verifier says which drafted trees it keeps exact
        verifier.check_tree(tree)
        return
    if verifier.layout != "candidates":
        raise ValueError(f"{type(verifier).__name__} verifies a chain; a tree needs a multi-draft verifier (KSeq, "
                         "MultiRound, NaiveMultiCandidate, OTMVerify, ...) or a whole-tree one (TraversalVerify, "
                         "GreedyBlockVerify); a chain of L tokens goes to evaluate, simulate or generate with "
                         "draft_length=L")
    if tree.deterministic:
        if not verifier.any_candidates:
            raise ValueError(f"{type(verifier).__name__} assumes candidates drawn from the draft row; the {tree} tree "
                             "chooses them (top-k), which only a verifier lossless for any candidates keeps exact "
                             "(naive)")
        return
    if not verifier.any_draw_mode and draw_name(verifier.replacement) != tree.draw:
        words = {"iid": "with replacement", "without": "without replacement", "greedy": "as greedy drafts",
                 "hub": "as SpecHub's hub pair"}
        raise ValueError(f"{type(verifier).__name__} is lossless for candidates drawn "
                         f"{words[draw_name(verifier.replacement)]}, but the tree draws children {words[tree.draw]}")


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
        new, kids, mult, token = [], self.children[node], self.mult, self.token  # (a hot loop: names bound once)
        for x in cands.tolist():
            if x < 0:  # no candidate here (a draw without replacement ran out of support)
                continue
            child = kids.get(x)
            if child is None:
                child = len(token)
                token.append(x)
                self.parent.append(node)
                self.depth.append(self.depth[node] + 1)
                mult.append(0)
                self.children.append({})
                kids[x] = child
                new.append(child)
            mult[child] += 1
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

    def copy(self) -> Trie:
        """A trie to grow further without changing this one (rows are shared: they are never written)."""
        out = Trie()
        out.token, out.parent, out.depth, out.mult = list(self.token), list(self.parent), list(self.depth), list(self.mult)
        out.children = [dict(c) for c in self.children]
        out.cands, out.p, out.q, out.draft_slot = dict(self.cands), dict(self.p), self.q, dict(self.draft_slot)
        return out

    def path_to(self, node: int) -> list:
        """Nodes from below the root down to ``node``, root first (the root itself excluded)."""
        out = []
        while node > 0:
            out.append(node)
            node = self.parent[node]
        return out[::-1]

    def drafted(self) -> int:
        """Candidates drawn in all (the tree's drafted tokens): a draw without replacement that ran out of support
        (a k-config wider than a row's support, or than the vocabulary) leaves −1 slots, which were never drafted."""
        return int(sum(int((c >= 0).sum()) for c in self.cands.values()))
