"""Multi-draft speculative decoding of real models: k drafts or a token tree per iteration, one target call.

One iteration of :func:`tree_generate` for a batch of prompts (specs ``multi_draft_otm.md`` §7 and
``mcsd.md`` §3; p is the draft, q the target):

1. **Draft a trie.** At a node that n tree nodes reach (equal paths are merged, so the target never
   scores a prefix twice) n·k_d candidates are drawn from p(·|path) — i.i.d. or sequentially
   without replacement, as the verifier requires; the distinct candidate tokens become the node's
   children. One draft call per level scores the new nodes with a tree attention mask
   (:meth:`~llm_bridge.cache.CachedLM.feed_tree`); the leaves are never fed to the draft.
   SpecTr's K i.i.d. drafts are the k-config (K, 1, …, 1); MCSD's trees are e.g. ``4x2x2x1``.
2. **One target call** scores the committed tokens it has not seen and every trie node: the rows
   q(·|path) at the root and below every node.
3. **Walk down.** At the current node otspec's multi-draft verifier (k-Seq, multi-round, OTM, …)
   gets the node's candidates and rows and returns Y ~ q(·|path) and whether it accepted. Rule
   ``"match"`` (SpecTr) goes on to the child spelling Y whether Y was accepted or drawn from the
   residual; ``"accepted"`` (MCSD) goes on only after an acceptance. A node reached by n merged tree
   nodes offers all n·k candidates under "match" and the first k under "accepted" (the subtrees
   are i.i.d., so which one is taken does not change the law). At a leaf a bonus token is drawn
   from the target's row.
4. Both caches keep the walked path (:meth:`~llm_bridge.cache.CachedLM.keep_path`); Y is fed next time.

Measured along the way (excluded from the timing): per verified node its depth, the exact
probability of going on given its candidates, the verifier's closed-form acceptance averaged over
candidates, the OTM-k optimum α_k on the same rows (:func:`otspec.solvers.otm_value`) and TV; per
iteration E[τ | drafted trie], the exact expectation over the verifier's randomness and the walk
on every row the trie holds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from otspec.distributions import sample_categorical, total_variation
from otspec.drafts import DraftTree, sample_candidates
from otspec.engine.ledger import Ledger
from otspec.engine.tree import RULES
from otspec.errors import SizeLimitError
from otspec.solvers import otm_value

from .cache import make_cache
from .loop import BridgeResult, _chunks, _padded, _room, _start, _unseen
from .measure import CallTimer
from .sampling import DEFAULT_SAMPLING, Sampling

__all__ = ["TreeResult", "parse_tree", "tree_generate"]


def parse_tree(spec, replacement: bool = True) -> DraftTree:
    """A :class:`~otspec.drafts.DraftTree` from ``"4x2x2x1"``, ``"iid:K:L"`` (SpecTr's K drafts of L tokens) or a tree."""
    if isinstance(spec, DraftTree):
        return DraftTree(spec.branching, replacement)
    text = str(spec).strip().lower()
    if text.startswith("iid:"):
        parts = text.split(":")
        if len(parts) != 3:
            raise ValueError(f"could not read {spec!r}; expected iid:K:L, e.g. iid:4:3")
        return DraftTree.spectr_iid(int(parts[1]), int(parts[2]), replacement)
    return DraftTree.parse(text, replacement)


@dataclass
class TreeResult(BridgeResult):
    """:class:`~llm_bridge.loop.BridgeResult` of a tree run, with per-depth records of the verified nodes.

    Attributes (lists indexed by depth d = 1..L, one float array each over the nodes verified there)
    ----------
    go_on : P(the walk goes on below the node | its candidates), exact from the verifier's law.
    acceptance : the verifier's closed-form acceptance at the node's (p, q, number of candidates).
    optimum : the OTM-k optimum α_k on the same rows and number of candidates.
    candidates : how many candidates the verifier saw at each node.
    target_nodes : tokens scored by each target call (unseen committed tokens + trie nodes).
    tries : (prompt index, committed tokens, trie) of every iteration when run with ``keep_tries``.
    """

    tree: DraftTree | None = None
    rule: str = "match"
    go_on: list = field(default_factory=list)
    acceptance: list = field(default_factory=list)
    optimum: list = field(default_factory=list)
    candidates: list = field(default_factory=list)
    target_nodes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    tries: list = field(default_factory=list)


class _Trie:
    """One sequence's drafted trie; node 0 is the root (the last committed token)."""

    def __init__(self):
        self.token, self.parent, self.depth, self.mult = [-1], [-1], [0], [1]
        self.children: list[dict] = [{}]
        self.cands: dict = {}  # node -> candidate tokens drawn at it (n·k_d, maybe -1 slots)
        self.p: dict = {}  # node -> draft row
        self.q: np.ndarray | None = None  # (nodes, V) target rows
        self.draft_slot: dict = {}  # node -> index among the draft cache's pending nodes

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

    def path_to(self, node: int) -> list:
        out = []
        while node > 0:
            out.append(node)
            node = self.parent[node]
        return out[::-1]


def tree_generate(pair, prompts, verifier, tree, max_new_tokens: int, *, rule: str = "match",
                  sampling: Sampling = DEFAULT_SAMPLING, seed=0, batch_size: int | None = None,
                  progress: bool | None = None, confidence: float = 0.95, record_law: bool = True,
                  keep_tries: bool = False, cache: str = "auto") -> TreeResult:
    """Generate ``max_new_tokens`` tokens per prompt by multi-draft speculative decoding on ``tree``.

    ``verifier`` is a multi-draft verifier (``layout == "candidates"``); ``tree`` a
    :class:`~otspec.drafts.DraftTree` or a k-config string (``"4x2x2x1"``, ``"iid:4:3"``); the
    candidates are drawn with or without replacement as the verifier requires. ``record_law``
    also computes E[τ | drafted trie] (a law call per internal trie node; measurement, untimed);
    ``keep_tries`` keeps every drafted trie with its rows (for tests); ``cache`` is a kind of
    :func:`~llm_bridge.cache.make_cache`.
    """
    if getattr(verifier, "layout", None) != "candidates":
        raise ValueError(f"{type(verifier).__name__} verifies {getattr(verifier, 'layout', '?')}; a tree needs a "
                         "multi-draft verifier (kseq, multiround, multiround_without_replacement, naive, otm)")
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if getattr(pair.drafter, "deterministic", False) or not hasattr(pair.drafter, "model"):
        raise ValueError(f"the {pair.drafter.name} drafter proposes one token per position; a draft tree needs a "
                         "model draft (distilled, int8, layers:K or a model)")
    tree = parse_tree(tree, bool(getattr(verifier, "replacement", True)))
    L, N = tree.depth, int(max_new_tokens)
    rng, timer = np.random.default_rng(seed), CallTimer(pair.target.device)
    ledger = Ledger(len(prompts), N, L)
    rec = _TreeRecords(L, verifier, tree, rule, record_law, keep_tries)
    out, seconds = [], 0.0
    bar = tqdm(total=len(prompts) * N, desc=f"{verifier.name} {tree} ({rule})", unit="tok", leave=False,
               disable=None if progress is None else not progress)
    for offset, chunk in _chunks(prompts, batch_size):
        t0 = time.perf_counter()
        out += _decode(pair, chunk, offset, verifier, tree, rule, N, sampling, rng, timer, ledger, rec, bar, cache)
        seconds += time.perf_counter() - t0
    bar.close()
    seconds -= sum(timer.total(k) for k in ("records", "target_prefill", "draft_prefill"))
    buf = np.stack(out)
    tv, go_on, acceptance, optimum, n_cands = rec.columns()
    return TreeResult(list(buf), ledger.result(buf, confidence), timer, seconds, tv, [], [],
                      np.asarray(rec.expected, dtype=float), tree, rule, go_on, acceptance, optimum, n_cands,
                      np.asarray(rec.nodes, dtype=np.int64), rec.kept)


def _decode(pair, prompts, offset, verifier, tree, rule, N, sampling, rng, timer, ledger, rec, bar, cache) -> list:
    B, L = len(prompts), tree.depth
    room = _room(prompts, N, tree.num_tokens + 2)
    target = make_cache(pair.target.model, B, kind=cache, max_length=room)
    draft = pair.drafter.session(B, sampling, cache=cache, max_length=room)
    seq, plen = _start(prompts, N, [("target", target), ("draft", draft)], timer)
    length = plen.copy()
    while (length - plen < N).any():
        active = length - plen < N
        depth = np.where(active, np.minimum(L, N - (length - plen) - 1), 0)
        tries, draft_calls = _grow(draft, tree, seq, length, depth, active, rng, timer)
        unseen = length - target.length
        toks, parents, counts = _target_nodes(tries, seq, target.length, length, active)
        logits = timer.call("target", int(counts.max()), target.feed_tree, toks, parents, counts)
        for b in np.flatnonzero(active):
            c = int(unseen[b])
            tries[b].q = sampling.rows(logits[b, c - 1:c - 1 + len(tries[b].token)])  # root, then nodes 1..
        start = length.copy()
        paths, emitted = _walk(verifier, tree, rule, tries, seq, start, depth, active, rng, timer)
        length += emitted
        idx = np.flatnonzero(active)
        tau = emitted[idx] - 1
        ledger.record(offset + idx, start[idx] - plen[idx], depth[idx], tau, emitted[idx], draft_calls=draft_calls[idx],
                      drafted=int(sum(sum(len(c) for c in tries[b].cands.values()) for b in idx)))
        timer.call("records", 1, rec.add, tries, idx, depth, counts, paths, [seq[b, :start[b]] for b in range(B)],
                   offset)
        target.keep_path([list(range(int(unseen[b]))) + [int(unseen[b]) + j - 1 for j in paths[b]] if active[b] else []
                          for b in range(B)])
        draft.keep_path([[tries[b].draft_slot[j] for j in paths[b] if j in tries[b].draft_slot] if active[b] else []
                         for b in range(B)])
        bar.update(int(emitted.sum()))
    return [seq[b, plen[b]:plen[b] + N].copy() for b in range(B)]


def _grow(draft, tree, seq, length, depth, active, rng, timer):
    """Draft every sequence's trie to its depth; returns (tries, draft calls per sequence)."""
    B = len(seq)
    tries = [_Trie() for _ in range(B)]
    calls = np.zeros(B, dtype=np.int64)
    drafting = active & (depth > 0)
    if not drafting.any():
        return tries, calls
    tokens, counts = _unseen(seq, length, draft.length, drafting)
    rows, _, _ = timer.call("draft", int(counts.max()), draft.feed, tokens, counts)
    calls[drafting] += 1
    frontier = [[0] if drafting[b] else [] for b in range(B)]
    for b in np.flatnonzero(drafting):
        tries[b].p[0] = rows[b]
    pending = np.zeros(B, dtype=np.int64)
    for d in range(tree.depth):
        work = [(b, node) for b in range(B) for node in frontier[b]]
        if not work:
            break
        sizes = np.array([tries[b].mult[node] * tree.branching[d] for b, node in work])
        born = [[] for _ in range(B)]
        for size in np.unique(sizes):
            group = [w for w, s in zip(work, sizes, strict=True) if s == size]
            p = np.stack([tries[b].p[node] for b, node in group])
            cands = np.asarray(sample_candidates(p, int(size), rng, replacement=tree.replacement))
            for (b, node), c in zip(group, cands, strict=True):
                born[b] += tries[b].add_candidates(node, c)
        feed = [born[b] if depth[b] > d + 1 else [] for b in range(B)]  # their rows are needed one level down
        n = np.array([len(f) for f in feed], dtype=np.int64)
        if n.max() > 0:
            toks, parents = np.zeros((B, n.max()), dtype=np.int64), np.full((B, n.max()), -1, dtype=np.int64)
            for b in np.flatnonzero(n):
                t = tries[b]
                toks[b, :n[b]] = [t.token[j] for j in feed[b]]
                parents[b, :n[b]] = [-1 if t.parent[j] == 0 else t.draft_slot[t.parent[j]] for j in feed[b]]
                for i, j in enumerate(feed[b]):
                    t.draft_slot[j] = int(pending[b]) + i
            rows = timer.call("draft", int(n.max()), draft.feed_tree, toks, parents, n)
            calls[n > 0] += 1
            pending += n.max()  # pending indices are columns: padding counts
            for b in np.flatnonzero(n):
                for i, j in enumerate(feed[b]):
                    tries[b].p[j] = rows[b, i]
        frontier = feed
    return tries, calls


def _target_nodes(tries, seq, seen, length, active):
    """The target's tree input: each sequence's unseen committed tokens as a chain, then its trie nodes."""
    rows, parents = [], []
    for b, t in enumerate(tries):
        if not active[b]:
            rows.append(seq[b, :0])
            parents.append(np.zeros(0, dtype=np.int64))
            continue
        chain = seq[b, seen[b]:length[b]]
        c = len(chain)
        rows.append(np.concatenate([chain, np.asarray(t.token[1:], dtype=np.int64)]))
        parents.append(np.concatenate([np.arange(c) - 1, [c - 1 if a == 0 else c + a - 1 for a in t.parent[1:]]]))
    toks, counts = _padded(rows)
    par = np.full(toks.shape, -1, dtype=np.int64)
    for b, p in enumerate(parents):
        par[b, :len(p)] = p
    return toks, par, counts


def _walk(verifier, tree, rule, tries, seq, start, depth, active, rng, timer):
    """Verify down each trie; writes the emitted tokens into ``seq``; returns (walked nodes, tokens emitted)."""
    B = len(tries)
    cur = np.zeros(B, dtype=np.int64)
    going, emitted = active.copy(), np.zeros(B, dtype=np.int64)
    paths = [[] for _ in range(B)]
    for d in range(tree.depth + 1):
        bonus = np.flatnonzero(going & (depth == d))
        if bonus.size:  # every level went on (or nothing was drafted): the target's own draw at the node
            y = sample_categorical(np.stack([tries[b].q[cur[b]] for b in bonus]), rng)
            seq[bonus, start[bonus] + d] = y
            emitted[bonus] += 1
            going[bonus] = False
        here = np.flatnonzero(going & (depth > d))
        if here.size == 0:
            break
        used = {b: tries[b].used(cur[b], tree.branching[d], rule) for b in here}
        sizes = np.array([len(used[b]) for b in here])
        for size in np.unique(sizes):
            group = here[sizes == size]
            cands = np.stack([used[b] for b in group])
            p = np.stack([tries[b].p[cur[b]] for b in group])
            q = np.stack([tries[b].q[cur[b]] for b in group])
            out = timer.call("verify", int(size), _sample, verifier, cands, p, q, rng)
            y, accepted = np.asarray(out.token, dtype=np.int64), np.asarray(out.accepted, dtype=bool)
            seq[group, start[group] + d] = y
            emitted[group] += 1
            for b, yb, ok in zip(group, y.tolist(), accepted.tolist(), strict=True):
                child = tries[b].children[cur[b]].get(yb) if (ok or rule == "match") else None
                if child is None:
                    going[b] = False
                else:
                    cur[b] = child
                    paths[b].append(child)
    return paths, emitted


def _sample(verifier, cands, p, q, rng):
    return verifier.sample(cands, p, q, rng, validate=False)


class _TreeRecords:
    """Per depth: go-on probability, closed-form acceptance, OTM-k optimum, TV; per iteration E[τ | trie]."""

    def __init__(self, L: int, verifier, tree: DraftTree, rule: str, with_law: bool, keep: bool = False):
        self.verifier, self.tree, self.rule, self.with_law = verifier, tree, rule, with_law
        self.go_on, self.acceptance, self.optimum, self.tv, self.n_cands = ([[] for _ in range(L)] for _ in range(5))
        self.expected, self.nodes, self.keep, self.kept = [], [], keep, []

    def _go_on(self, t: _Trie, node: int):
        """(children, probabilities of going on to each) at ``node`` from the verifier's exact law."""
        d = t.depth[node]
        c = t.used(node, self.tree.branching[d], self.rule)
        law = self.verifier.law(c[None], t.p[node][None], t.q[node][None], validate=False)
        mass = np.asarray(law.accepted)[0] + (np.asarray(law.rejected)[0] if self.rule == "match" else 0.0)
        kids = [t.children[node][x] for x in np.unique(c[c >= 0]).tolist()]
        return kids, np.array([mass[t.token[j]] for j in kids]), c

    def add(self, tries, idx, depth, counts, paths, committed, offset) -> None:
        self.nodes += np.asarray(counts)[idx].tolist()
        for b in idx:
            t, found = tries[b], {}
            if self.keep:
                self.kept.append((offset + int(b), committed[b].copy(), t))
            verified = [j for j in [0, *paths[b]] if t.depth[j] < depth[b]]
            internal = [j for j in range(len(t.token)) if t.depth[j] < depth[b]] if self.with_law else verified
            for node in internal:
                found[node] = self._go_on(t, node)
            if self.with_law:
                e = np.zeros(len(t.token))  # E[levels gone on below the node | trie]; leaves 0
                for node in reversed(internal):  # children come after their parents
                    kids, probs, _ = found[node]
                    e[node] = float(probs @ (1.0 + e[kids])) if kids else 0.0
                self.expected.append(float(e[0]))
            for node in verified:
                d, (_, probs, c) = t.depth[node], found[node]
                p, q, k = t.p[node], t.q[node], int((c >= 0).sum())
                self.go_on[d].append(float(probs.sum()))
                self.tv[d].append(float(total_variation(p, q)))
                self.n_cands[d].append(k)
                self.optimum[d].append(float(otm_value(p, q, k, self.tree.replacement)))
                self.acceptance[d].append(self._closed_form(p, q, k))

    def _closed_form(self, p, q, k) -> float:
        """The verifier's closed-form acceptance, or nan where it has none or it is too large to evaluate."""
        try:
            return float(self.verifier.expected_acceptance(p, q, k))
        except (NotImplementedError, SizeLimitError):
            return np.nan

    def columns(self):
        return [[np.asarray(v) for v in lists if v] for lists in (self.tv, self.go_on, self.acceptance, self.optimum,
                                                                  self.n_cands)]
