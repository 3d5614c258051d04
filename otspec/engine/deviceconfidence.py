"""EAGLE-2's confidence-ordered trees on the device: one iteration of the tree loop with rows there.

:func:`confidence_iteration` grows :class:`~otspec.drafts.ConfidenceTree` as
:func:`otspec.engine.confidence.grow_confidence` does on the host (Li et al., EAGLE-2, arXiv 2406.16858, §4.1-4.2),
with every choice made on the device: the top-k expansion, the nodes fed to the drafter at each level and the rerank
to the most confident nodes. The parents of a draft call and of the target call are then known on the device only,
so the sessions get them as a tensor (their caches build the tree mask there). The walk (a verifier lossless for any
candidates: naive) goes down the kept nodes; one read back per iteration carries the emitted counts and the walked
nodes in the target's and the drafter's feed numbering. :class:`ConfidenceStep` has the interface of
:class:`~otspec.engine.devicetree.DeviceStep` for the loop and its observers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..distributions import host_to_like, namespace, sample_categorical, to_host
from .devicetree import LazyList

__all__ = ["ConfidenceStep", "confidence_iteration"]

class _Drafted(NamedTuple):
    """The drafting half of an iteration: per level (tokens, confidences, parents), the drafter's rows of the fed
    nodes and which nodes of each level were fed, and the draft calls per sequence."""

    levels: list
    fed_rows: list
    fed_local: list
    calls: np.ndarray


def _top_children(rows, k: int):
    """(tokens, probabilities) of the ``k`` largest entries of each row (..., V), largest first, equal ones by id."""
    xp = namespace(rows)
    order = xp.argsort(-rows, axis=-1, stable=True)[..., :k]
    return order, xp.take_along_axis(rows, order, axis=-1)


def confidence_iteration(draft, target, verifier, tree, run, depth, active, rng):
    """EAGLE-2's confidence-ordered tree (:class:`~otspec.drafts.ConfidenceTree`) grown, reranked, scored and walked
    on the device, as :func:`otspec.engine.confidence.grow_confidence` does on the host.

    Every level drafts top_k children for each of the top_k most confident nodes of the level before (K at level 1,
    K² below; a node of no draft mass, or below a sequence's depth, has confidence −inf); the nodes fed to the
    drafter at a level are chosen on the device, so its ``feed_tree`` gets its parents as a tensor. The ``nodes``
    most confident drafted nodes are kept (equal confidence: drafting order, which puts parents first), scored by
    one target call (parents again a tensor) and walked by the verifier (naive: Y ~ q at the node, on to the kept
    child spelling Y). One read back: the emitted counts and the walked nodes, in the target's and the drafter's feed
    numbering. Returns a :class:`ConfidenceStep`."""
    B, K = run.B, tree.top_k
    top = int(depth.max(initial=0))
    calls = np.zeros(B, dtype=np.int64)
    if top == 0:
        return _confidence_root_only(target, verifier, run, active, rng, calls)
    root = run.call("draft", 0, draft.feed, run.tokens((B, 0)), np.zeros(B, dtype=np.int64)).rows[:, 0]
    depth_dev = host_to_like(depth, root)
    xp = namespace(root)
    calls[depth > 0] += 1
    tok, prob = _top_children(root, K)
    score = xp.where((prob > 0) & (depth_dev >= 1)[:, None], xp.log(xp.where(prob > 0, prob, xp.ones_like(prob))),
                     xp.full_like(prob, -np.inf))
    levels = [(tok, score, xp.full_like(tok, -1))]  # per level: tokens, confidences, parent (index in the level above)
    fed_rows, fed_local = [root[:, None]], []  # draft rows of the fed nodes; which nodes of each level were fed
    for d in range(1, top):
        tok, score, _ = levels[-1]
        counts = np.where(depth > d, K, 0).astype(np.int64)  # some sequence goes deeper: d < top
        chosen = xp.argsort(-score, axis=-1, stable=True)[:, :K]  # the K most confident of the level (then by order)
        fed_local.append(chosen)
        fed_tokens = xp.clip(xp.take_along_axis(tok, chosen, axis=1), min=0)
        parents = (xp.full_like(chosen, -1) if d == 1 else (d - 2) * K + chosen // K)  # feed slots of their parents
        rows = run.call("draft", K, draft.feed_tree, fed_tokens, parents, counts).rows[:, 1:]
        calls[depth > d] += 1
        fed_rows.append(rows)
        kids, p = _top_children(rows, K)  # (B, K, K)
        base = xp.take_along_axis(score, chosen, axis=1)[:, :, None]
        ok = (p > 0) & (base > -np.inf) & (depth_dev > d)[:, None, None]
        child_score = xp.where(ok, base + xp.log(xp.where(p > 0, p, xp.ones_like(p))), xp.full_like(p, -np.inf))
        parent_of = xp.broadcast_to(chosen[:, :, None], kids.shape)
        levels.append((kids.reshape(B, K * K), child_score.reshape(B, K * K), parent_of.reshape(B, K * K)))
    return _confidence_walk(target, verifier, tree, run, depth, active, rng,
                            _Drafted(levels, fed_rows, fed_local, calls))


def _confidence_root_only(target, verifier, run, active, rng, calls):
    B = run.B
    scored = run.call("target", 1, target.feed_tree, run.tokens((B, 0)), np.zeros((B, 0), dtype=np.int64),
                      np.zeros(B, dtype=np.int64))
    y = sample_categorical(scored.rows[:, 0], rng, check=False)
    emitted = np.where(active, 1, 0).astype(np.int64)
    return ConfidenceStep(None, y[:, None], emitted, walked_nodes=np.zeros((B, 0), np.int64),
                          draft_walked=np.zeros((B, 0), np.int64), calls=calls, nodes=np.zeros(B, dtype=np.int64),
                          scored=scored, drafted_nodes=None, fed_rows=None, fed_local=None)


def _confidence_walk(target, verifier, tree, run, depth, active, rng, drafted: _Drafted):
    levels, fed_rows, fed_local, calls = drafted
    B, K, M = run.B, tree.top_k, tree.nodes
    xp = namespace(levels[0][1])
    device = levels[0][1].device
    rows = xp.arange(B, device=device)
    # every drafted node, level after level in drafting order: token, confidence, parent (flat index, -1 the root)
    offsets = np.cumsum([0] + [lv[0].shape[1] for lv in levels])
    tok = xp.concat([lv[0] for lv in levels], axis=1)
    score = xp.concat([lv[1] for lv in levels], axis=1)
    parent = xp.concat([xp.where(lv[2] >= 0, lv[2] + int(offsets[d - 1]) if d else lv[2], lv[2])
                        for d, lv in enumerate(levels)], axis=1)
    n = tok.shape[1]
    keep = min(M, n)
    order = xp.argsort(-score, axis=-1, stable=True)[:, :keep]  # the most confident (ties: drafting order)
    kept = xp.sort(order, axis=-1)  # in drafting order: parents before children
    valid = xp.take_along_axis(score, kept, axis=1) > -np.inf
    position = xp.full((B, n), -1, dtype=xp.int64, device=device)  # a drafted node's place among the kept ones
    position[rows[:, None], kept] = xp.broadcast_to(xp.arange(keep, device=device)[None, :], kept.shape)
    kept_tok = xp.take_along_axis(tok, kept, axis=1)
    kept_parent_flat = xp.take_along_axis(parent, kept, axis=1)
    kept_parent = xp.where(kept_parent_flat >= 0, position[rows[:, None], xp.clip(kept_parent_flat, min=0)],
                           xp.full_like(kept_parent_flat, -1))
    counts = np.where(active & (depth > 0), keep, 0).astype(np.int64)
    scored = run.call("target", keep + 1, target.feed_tree, xp.where(valid, kept_tok, xp.zeros_like(kept_tok)),
                      xp.where(valid, kept_parent, xp.full_like(kept_parent, -1)), counts)
    q = scored.rows  # (B, keep + 1, V): the root, then the kept nodes
    # the drafter's feed slot of every drafted node (-1: never fed), for its commit
    slot = xp.full((B, n), -1, dtype=xp.int64, device=device)
    for d, chosen in enumerate(fed_local):
        slot[rows[:, None], int(offsets[d]) + chosen] = d * K + xp.broadcast_to(
            xp.arange(chosen.shape[1], device=device)[None, :], chosen.shape)
    going = host_to_like(active, tok)
    cur = xp.full((B,), -1, dtype=xp.int64, device=device)  # a kept position, -1 the root
    out = xp.zeros((B, len(levels) + 1), dtype=xp.int64, device=device)
    emitted = xp.zeros(B, dtype=xp.int64, device=device)
    walked = xp.full((B, len(levels)), -1, dtype=xp.int64, device=device)
    for d in range(len(levels) + 1):
        q_here = q[rows, cur + 1]
        candidates = xp.where((kept_parent == cur[:, None]) & valid, kept_tok, xp.full_like(kept_tok, -1))
        outcome = run.call("verify", K, _verify, verifier, candidates, q_here, rng)
        out[:, d] = xp.where(going, outcome.token, out[:, d])
        emitted = emitted + xp.astype(going, xp.int64)
        match = (candidates == outcome.token[:, None]) & outcome.accepted[:, None]
        going = going & xp.any(match, axis=1)
        if d == len(levels):
            break
        nxt = xp.argmax(xp.astype(match, xp.int8), axis=1)
        cur = xp.where(going, nxt, cur)
        walked[:, d] = xp.where(going, nxt, walked[:, d])
    draft_walked = xp.where(walked >= 0, slot[rows[:, None], xp.take_along_axis(kept, xp.clip(walked, min=0), axis=1)],
                            xp.full_like(walked, -1))
    back = to_host(xp.concat([emitted[:, None], walked, draft_walked], axis=1))  # the one read back
    D = len(levels)
    return ConfidenceStep(tree, out, back[:, 0], walked_nodes=back[:, 1:1 + D], draft_walked=back[:, 1 + D:],
                          calls=calls, nodes=counts, scored=scored,
                          drafted_nodes=(tok, score, parent, kept, valid, kept_tok, kept_parent), fed_rows=fed_rows,
                          fed_local=fed_local)


@dataclass(eq=False)
class ConfidenceStep:
    """What one device iteration of a confidence tree left (the interface of :class:`DeviceStep`): ``scored`` is the
    target's scoring (its rows and features), ``drafted_nodes`` the levels as drafted (tokens, scores, parents and
    what was kept)."""

    tree: object
    out: object
    emitted: np.ndarray
    walked_nodes: np.ndarray
    draft_walked: np.ndarray
    calls: np.ndarray
    nodes: np.ndarray
    scored: object
    drafted_nodes: object
    fed_rows: object
    fed_local: object
    _tries: dict = field(default_factory=dict, repr=False)

    @property
    def features(self):
        return self.scored.features

    @property
    def target_rows(self):
        return self.scored.rows

    def walked(self, b: int) -> list:
        """Sequence b's walked nodes as columns of the target's rows (kept position + 1)."""
        return [int(j) + 1 for j in self.walked_nodes[b] if j >= 0]

    def target_nodes(self, b: int, depth: int) -> list:
        """Sequence b's walked nodes in the target's feed numbering (kept positions)."""
        return [int(j) for j in self.walked_nodes[b] if j >= 0]

    def draft_nodes(self, b: int, depth: int) -> list:
        """The walked nodes the drafter was fed, in its feed numbering (a prefix of the path, above ``depth``)."""
        out = []
        for j in self.draft_walked[b][:max(depth - 1, 0)]:
            if j < 0:
                break
            out.append(int(j))
        return out

    def drafted(self) -> np.ndarray:
        return np.asarray(self.nodes, dtype=np.int64)

    def trie(self, b: int):
        if b not in self._tries:
            self._tries[b] = _confidence_trie(self, b)
        return self._tries[b]

    def tries(self):
        return LazyList(len(self.emitted), lambda b: self.trie(b))

    def paths(self):
        return LazyList(len(self.emitted), lambda b: [j for j in self.walked(b)])


def _confidence_trie(step: ConfidenceStep, b: int):
    """Sequence b's kept nodes as the host walk's trie: node j + 1 is kept position j, its candidates the kept
    children (drafting order), ``p`` the draft rows of the fed nodes, ``q`` the target's rows."""
    from .trie import Trie

    t = Trie()
    if step.drafted_nodes is None:
        t.q = to_host(step.target_rows[b, :1])
        return t
    kept, valid, kept_tok, kept_parent = (to_host(x[b]) for x in step.drafted_nodes[3:])
    t.p[0] = to_host(step.fed_rows[0][b, 0])
    fed, K = {}, step.tree.top_k
    for d, chosen in enumerate(step.fed_local):  # the nodes chosen at level d + 1 and fed (flat drafted indices)
        if d + 1 < len(step.fed_rows):
            rows = to_host(step.fed_rows[d + 1][b])
            start = 0 if d == 0 else K + (d - 1) * K ** 2
            for r, local in enumerate(to_host(chosen[b]).tolist()):
                fed[start + local] = rows[r]
    kids = {0: []}
    for j in range(len(kept)):
        if not valid[j]:
            continue
        node = len(t.token)
        par = 0 if kept_parent[j] < 0 else int(kept_parent[j]) + 1
        t.token.append(int(kept_tok[j]))
        t.parent.append(par)
        t.depth.append(t.depth[par] + 1)
        t.mult.append(1)
        t.children.append({})
        t.children[par][int(kept_tok[j])] = node
        kids.setdefault(par, []).append(int(kept_tok[j]))
        kids[node] = []
        if int(kept[j]) in fed:
            t.p[node] = fed[int(kept[j])]
    for j, tokens in kids.items():
        if tokens:
            t.cands[j] = np.asarray(tokens, dtype=np.int64)
    t.q = to_host(step.target_rows[b, :len(t.token)])
    return t


def _verify(verifier, candidates, target_rows, rng):
    """The verifier at a node; a verifier lossless for any candidates reads the target's row only (the draft rows
    given are the target's)."""
    return verifier.sample(candidates, target_rows, target_rows, rng, validate=False)
