"""One iteration of the tree loop with a drafted tree as fixed-shape arrays, one read back: every row on a device,
or toy sources' rows on the host (numpy; a session with ``fixed_shape_trees``), where it replaces a trie per sequence
by a few array operations per level.

The host walk (:func:`otspec.engine.loop.tree_steps` on a model's numpy rows) merges equal candidates into a trie
(:mod:`otspec.engine.trie`); that needs the drafted tokens on the host, which on a GPU is a wait for the device at
every drafted level. Here a k-config tree (:class:`~otspec.drafts.DraftTree`) is laid out without merging
(:class:`TreeLayout`): level d holds N_d = k_1 ⋯ k_d nodes, node i of level d is child i mod k_d of node ⌊i / k_d⌋ of
level d − 1, and node 0 is the root (the committed tokens). Equal candidates stay separate nodes, with equal rows.
The walk keeps the *set* of nodes that spell the path accepted so far (all spell the same tokens); the candidates it
hands the verifier at a level are the children of every node of the set, −1 in the other slots. A trie gives a node
merged from n equal candidates n·k_{d+1} candidates of its own, drawn as the set's children are, so the verifier sees
the same law of candidates and the walk has the trie's law. Under MCSD's ``"accepted"`` rule the verifier sees the
first k_{d+1} of them (the children of the set's first node), and the walk goes on to every child equal to Y.

Growth draws each level's candidates for all its nodes in one call (:func:`~otspec.drafts.sample_candidates` with
``validate=False``), feeds the level to the drafter (one ``feed_tree`` call with the layout's parents), and the
target scores every node in one call. Sequences cut short (near the end of a run) are fed fewer levels: their
``counts`` are host integers the loop knows. After the walk one small integer tensor comes back: per sequence the
tokens emitted and the walked path (one chain of nodes through the sets, from level 1 down), which the sessions'
commits need on the host (:meth:`~otspec.engine.session.Session.commit` with ``nodes``).

Whole-tree verifiers walk the same layout with their own ``walk_on_device`` (GBV, Traversal). EAGLE-2's confidence
trees (:func:`otspec.engine.deviceconfidence.confidence_iteration`) choose on the device which nodes are fed to the
drafter and which are kept, so their draft and target calls get tree parents as a tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..distributions import host_to_like, namespace, sample_categorical, to_host
from ..drafts import sample_candidates

__all__ = ["DeviceStep", "Drafted", "LazyList", "TreeLayout", "device_iteration", "device_walk", "grow_on_device",
           "score_on_device", "walks_on_device"]


def walks_on_device(verifier, tree) -> bool:
    """Whether the device walk serves ``verifier`` on ``tree``: a k-config (drawn children) and a verifier of
    candidates with a torch path, or a whole-tree verifier with a ``walk_on_device`` (GBV, Traversal); EAGLE-2's
    confidence trees with a verifier lossless for any candidates
    (:func:`~otspec.engine.deviceconfidence.confidence_iteration`)."""
    if tree.deterministic:  # EAGLE-2's chosen trees: a verifier lossless for any candidates (naive)
        return verifier.layout == "candidates" and verifier.any_candidates and getattr(verifier, "device", True)
    if verifier.layout == "tree":
        return hasattr(verifier, "walk_on_device")
    return (verifier.layout == "candidates" and getattr(verifier, "device", True)
            and getattr(verifier, "padded_candidates", True))


class TreeLayout:
    """The nodes of a k-config tree without merging: numbering, levels and parents (host constants).

    Node 0 is the root; the nodes of level d (1..D) are ``offsets[d] .. offsets[d] + sizes[d] − 1``, in the order
    their parents come, a parent's children together.
    """

    def __init__(self, branching):
        self.branching = tuple(int(k) for k in branching)
        self.depth = len(self.branching)
        self.sizes = [1]
        for k in self.branching:
            self.sizes.append(self.sizes[-1] * k)
        self.offsets = [0]
        for d in range(1, self.depth + 1):
            self.offsets.append(self.offsets[-1] + self.sizes[d - 1])
        self.local_parent = [np.zeros(0, dtype=np.int64)] + [np.arange(self.sizes[d]) // self.branching[d - 1]
                                                             for d in range(1, self.depth + 1)]
        self.parent = np.concatenate([[-1]] + [self.offsets[d - 1] + self.local_parent[d]
                                               for d in range(1, self.depth + 1)]).astype(np.int64)
        self.level = np.concatenate([[0]] + [np.full(self.sizes[d], d) for d in range(1, self.depth + 1)]).astype(np.int64)

    def nodes_to(self, depth: int) -> int:
        """Nodes of levels 1..``depth`` (the root not counted)."""
        return self.offsets[depth] + self.sizes[depth] - 1 if depth > 0 else 0

    def fed_parents(self, d: int) -> np.ndarray:
        """(N_d,) parents of level d's nodes in a session's feed numbering (node j is fed as j − 1; the root is −1)."""
        return self.parent[self.offsets[d]:self.offsets[d] + self.sizes[d]] - 1


def grow_on_device(draft, layout: TreeLayout, draw, run, depth: np.ndarray, rng):
    """Draft every sequence's tree to its ``depth`` (host, (B,)) on the rows' device.

    Returns (tokens per level: a list whose entry d (1..max depth) is (B, N_d), −1 where a draw without replacement
    ran out of support; draft rows per level: entry d (0..max depth − 1) is (B, N_d, V), the rows the children of
    level d were drawn from; draft calls per sequence (host))."""
    B, top = run.B, int(depth.max(initial=0))
    calls = np.zeros(B, dtype=np.int64)
    if top == 0:
        return [None], [], calls
    root = run.call("draft", 0, draft.feed, run.tokens((B, 0)), np.zeros(B, dtype=np.int64)).rows[:, 0]
    calls[depth > 0] += 1
    tokens, rows = [None], [root[:, None]]
    for d in range(1, top + 1):
        parents = rows[d - 1]
        V = parents.shape[-1]
        drawn = sample_candidates(parents.reshape(B * layout.sizes[d - 1], V), layout.branching[d - 1], rng, draw,
                                  validate=False)
        tokens.append(drawn.reshape(B, layout.sizes[d]))
        if d == top:
            break
        counts = np.where(depth > d, layout.sizes[d], 0).astype(np.int64)
        fed = namespace(drawn).where(tokens[d] >= 0, tokens[d], 0)  # an absent node is fed token 0: never walked to
        parents_fed = np.broadcast_to(layout.fed_parents(d), (B, layout.sizes[d]))
        rows.append(run.call("draft", layout.sizes[d], draft.feed_tree, fed, parents_fed, counts).rows[:, 1:])
        calls[depth > d] += 1
    return tokens, rows, calls


def score_on_device(target, layout: TreeLayout, tokens, run, depth: np.ndarray):
    """One target call over every drafted node; returns (rows (B, 1 + n, V), root first, node j at column j; features
    likewise or None; nodes scored per sequence (host))."""
    B, top = run.B, len(tokens) - 1
    counts = np.array([layout.nodes_to(int(d)) for d in depth], dtype=np.int64)
    width = layout.nodes_to(top)
    if width == 0:
        fed = run.tokens((B, 0))
    else:
        flat = namespace(tokens[1]).concat(tokens[1:], axis=1)
        fed = namespace(flat).where(flat >= 0, flat, 0)
    parents = np.broadcast_to(layout.parent[1:width + 1] - 1, (B, width))
    scored = run.call("target", width + 1, target.feed_tree, fed, parents, counts)
    return scored.rows, scored.features, counts


class Drafted(NamedTuple):
    """A tree drafted and scored on the device, level by level: the tokens (level 0 the root), the draft rows at
    each level's parents and the target rows of every node (the root first)."""

    tokens: list
    draft_rows: list
    target_rows: object


def device_walk(verifier, layout: TreeLayout, rule: str, drafted: Drafted, depth: np.ndarray, active: np.ndarray,
                rng, run, *, compact: bool = False):
    """Verify down every sequence's tree on the device (module docstring). ``compact``: children of one node are
    distinct (drawn without replacement, greedy or hub drafts), so the set is one node and the verifier gets its k
    children as they were drawn (the structured verifiers read their positions), not the whole level with −1 slots.

    Returns, on the device: the emitted tokens (B, max depth + 1), the tokens emitted per sequence (B,) and its
    deepest walked node (B,) (0: the root), which :func:`device_iteration` reads back in its one transfer."""
    tokens, draft_rows, target_rows = drafted
    xp = namespace(target_rows)
    device = target_rows.device
    B, top = run.B, len(tokens) - 1
    rows = xp.arange(B, device=device)
    going = host_to_like(active & (depth >= 0), target_rows)
    depth_dev = host_to_like(depth, target_rows)
    match = rule == "match"
    out = xp.zeros((B, top + 1), dtype=xp.int64, device=device)
    emitted = xp.zeros(B, dtype=xp.int64, device=device)
    last = xp.zeros(B, dtype=xp.int64, device=device)  # the deepest walked node (0: the root)
    members = xp.ones((B, 1), dtype=xp.bool, device=device)  # the set spelling the path, at the current level
    first = xp.zeros(B, dtype=xp.int64, device=device)  # its first node (an index into the level)
    for d in range(top + 1):
        q = target_rows[rows, layout.offsets[d] + first]
        bonus_draw = sample_categorical(q, rng, check=False)
        if d == top:
            out[:, d] = xp.where(going, bonus_draw, out[:, d])
            emitted = emitted + xp.astype(going, xp.int64)
            break
        bonus = depth_dev == d
        parent = host_to_like(layout.local_parent[d + 1], target_rows)
        under = members[:, parent]  # (B, N_{d+1}): children of the set
        level = tokens[d + 1]
        k = layout.branching[d]
        if compact or not match:  # the first node's children, in drawing order
            slots = first[:, None] * k + xp.arange(k, device=device)[None, :]
            candidates = xp.take_along_axis(level, slots, axis=1)
        else:
            candidates = xp.where(under & (level >= 0), level, xp.full_like(level, -1))
        p = draft_rows[d][rows, first]
        outcome = run.call("verify", layout.branching[d], _verify, verifier, candidates, p, q, rng)
        y = xp.where(bonus, bonus_draw, outcome.token)
        out[:, d] = xp.where(going, y, out[:, d])
        emitted = emitted + xp.astype(going, xp.int64)
        goes_on = outcome.accepted if not match else xp.ones_like(outcome.accepted)
        members = under & (level == y[:, None]) & goes_on[:, None] & (level >= 0)
        going = going & ~bonus & xp.any(members, axis=1)
        first = xp.argmax(xp.astype(members, xp.int8), axis=1)
        last = xp.where(going, layout.offsets[d + 1] + first, last)
    return out, emitted, last


def _read_back(layout: TreeLayout, emitted, last, top: int, drafted=None):
    """The iteration's one read back: (emitted counts (B,), walked nodes (B, top), −1 past the path, and the drafted
    counts (B,) when given on the device, else None) on the host, from the counts and the deepest walked node."""
    xp = namespace(emitted)
    path = _path_to(layout, last, top, xp)
    columns = [emitted[:, None], path] + ([] if drafted is None else [drafted[:, None]])
    back = to_host(xp.concat(columns, axis=1))
    return back[:, 0], back[:, 1:1 + path.shape[1]], (None if drafted is None else back[:, -1])


def _drafted_on_device(layout: TreeLayout, tokens, depth_dev):
    """Per sequence, the candidates drawn to its depth (B,) on the device: a −1 slot (a draw without replacement
    that ran out of support) was never drafted, and neither were the slots below it (drawn from a row of no node)."""
    xp = namespace(tokens[1])
    device = tokens[1].device
    total = xp.zeros(tokens[1].shape[0], dtype=xp.int64, device=device)
    present = None
    for d in range(1, len(tokens)):
        here = tokens[d] >= 0
        if present is not None:
            here = here & present[:, host_to_like(layout.local_parent[d], here)]
        total = total + xp.where(depth_dev >= d, xp.sum(xp.astype(here, xp.int64), axis=1), xp.zeros_like(total))
        present = here
    return total


def _verify(verifier, candidates, draft_rows, target_rows, rng):
    return verifier.sample(candidates, draft_rows, target_rows, rng, validate=False)


def _path_to(layout: TreeLayout, last, top: int, xp):
    """(B, top): the nodes from level 1 down to ``last`` (its ancestors, then itself), −1 past it."""
    device = last.device
    parent = host_to_like(np.maximum(layout.parent, 0), last)
    level = host_to_like(layout.level, last)
    path = xp.full((last.shape[0], max(top, 0)), -1, dtype=xp.int64, device=device)
    cur = last
    ids = xp.arange(max(top, 0), device=device)[None, :]
    for _ in range(top):
        at = level[cur]  # 0 at the root: nothing more to write
        path = xp.where((ids == (at - 1)[:, None]) & (at > 0)[:, None], cur[:, None], path)
        cur = parent[cur]
    return path


def device_iteration(draft, target, verifier, tree, layout: TreeLayout, rule: str, run, depth, active, rng):
    """Grow, score and walk every sequence's tree on the device (module docstring); returns a :class:`DeviceStep`."""
    tokens, draft_rows, calls = grow_on_device(draft, layout, tree.replacement, run, depth, rng)
    target_rows, features, nodes = score_on_device(target, layout, tokens, run, depth)
    if verifier.layout == "tree":  # a whole-tree verifier's own walk on the layout
        out, emitted, last = run.call("verify", layout.depth, verifier.walk_on_device, layout, tokens, draft_rows,
                                      target_rows, host_to_like(depth, target_rows), rng)
    else:
        out, emitted, last = device_walk(verifier, layout, rule, Drafted(tokens, draft_rows, target_rows), depth,
                                         active, rng, run, compact=tree.draw != "iid")
    full = tree.draw == "iid"  # every slot drawn: the drafted counts are the layout's; else counted in the read back
    counted = None if full or len(tokens) < 2 else _drafted_on_device(layout, tokens, host_to_like(depth, target_rows))
    emitted, path, drafted = _read_back(layout, emitted, last, len(tokens) - 1, counted)
    return DeviceStep(layout, tokens, draft_rows, target_rows, features=features, out=out, emitted=emitted,
                      path=path, calls=calls, nodes=nodes, depth=depth, counted=drafted)


@dataclass(eq=False)
class DeviceStep:
    """What one device iteration left: the drafted tensors, the outcome (tokens on the device; emitted counts and
    walked nodes on the host) and, for observers, the trie view of the host walk (:meth:`tries`, :meth:`paths`),
    built on first use (it reads the rows back, in the observers' time)."""

    layout: TreeLayout
    tokens: object
    draft_rows: object
    target_rows: object
    features: object
    out: object
    emitted: np.ndarray
    path: np.ndarray
    calls: np.ndarray
    nodes: np.ndarray
    depth: np.ndarray
    #: Candidates drawn per sequence, read back with the outcome for draws that may leave −1 slots (without
    #: replacement); None when every slot to a sequence's depth holds a drawn token (i.i.d. draws).
    counted: np.ndarray | None = None
    _tries: dict = field(default_factory=dict, repr=False)

    def walked(self, b: int) -> list:
        """Sequence b's walked nodes (the layout's numbering), level 1 first."""
        return [int(j) for j in self.path[b] if j >= 0]

    def session_nodes(self, b: int, fed_depth: int) -> list:
        """Sequence b's walked nodes in a session's feed numbering (node j is fed as j − 1), those of levels up to
        ``fed_depth`` (the levels that session was fed)."""
        return [j - 1 for j in self.walked(b) if self.layout.level[j] <= fed_depth]

    def target_nodes(self, b: int, depth: int) -> list:
        """Sequence b's walked nodes in the target's feed numbering (it scored every level)."""
        return self.session_nodes(b, depth)

    def draft_nodes(self, b: int, depth: int) -> list:
        """Sequence b's walked nodes in the drafter's feed numbering (it was fed the levels above the deepest)."""
        return self.session_nodes(b, depth - 1)

    def drafted(self) -> np.ndarray:
        """Candidates drawn per sequence (host): every slot of the layout to the sequence's depth, but for a draw
        without replacement that ran out of support (−1 slots, never drafted): counted in the read back."""
        if self.counted is None:
            return np.array([self.layout.nodes_to(int(d)) for d in self.depth], dtype=np.int64)
        return np.asarray(self.counted, dtype=np.int64)

    def trie(self, b: int):
        """Sequence b's tree as the host walk's trie (equal candidates merged) and the map from the layout's nodes to
        its nodes."""
        if b not in self._tries:
            self._tries[b] = _merged_trie(self, b)
        return self._tries[b]

    def tries(self):
        return LazyList(len(self.depth), lambda b: self.trie(b)[0])

    def paths(self):
        return LazyList(len(self.depth), lambda b: [self.trie(b)[1][j] for j in self.walked(b)])


class LazyList:
    """A read-only list whose entry b is ``make(b)``, made when first read."""

    def __init__(self, n: int, make):
        self.n, self.make, self.cache = n, make, {}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, b):
        b = int(b)
        if b not in self.cache:
            self.cache[b] = self.make(b)
        return self.cache[b]

    def __iter__(self):
        return (self[b] for b in range(self.n))


def _merged_trie(step: DeviceStep, b: int):
    """The trie of the host walk (:class:`~otspec.engine.trie.Trie`) for sequence b of a device step: the candidates
    of the nodes that spell one path are pooled at one trie node, in the layout's order."""
    from .trie import Trie

    layout, depth = step.layout, int(step.depth[b])
    t, node_of = Trie(), {0: 0}
    q = to_host(step.target_rows[b])
    if depth == 0:
        t.q = q[:1]
        return t, node_of
    t.p[0] = to_host(step.draft_rows[0][b, 0])
    q_rows = {0: q[0]}
    for d in range(1, depth + 1):
        level = to_host(step.tokens[d][b])
        rows = to_host(step.draft_rows[d][b]) if d < len(step.draft_rows) else None
        pooled: dict = {}  # trie node -> its candidates, from every layout node it stands for
        for i, parent in enumerate(layout.parent[layout.offsets[d]:layout.offsets[d] + layout.sizes[d]].tolist()):
            if parent in node_of:  # below a −1 slot: drawn from a row of no node, never drafted
                pooled.setdefault(node_of[parent], []).append(int(level[i]))
        for node, cands in pooled.items():
            t.add_candidates(node, np.asarray(cands, dtype=np.int64))
        for i, parent in enumerate(layout.parent[layout.offsets[d]:layout.offsets[d] + layout.sizes[d]].tolist()):
            x = int(level[i])
            if x < 0 or parent not in node_of:
                continue
            child = t.children[node_of[parent]][x]
            node_of[layout.offsets[d] + i] = child
            q_rows.setdefault(child, q[layout.offsets[d] + i])
            if rows is not None and child not in t.p:
                t.p[child] = rows[i]
    t.q = np.stack([q_rows[j] for j in range(len(t))])
    return t, node_of
