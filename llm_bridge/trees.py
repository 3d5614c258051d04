"""Multi-draft speculative decoding of real models: k drafts or a token tree per iteration, one target call.

:func:`tree_generate` runs the tree loop of :mod:`otspec.engine.loop` (the one that decodes toy
sources too) over :class:`~llm_bridge.sessions.ModelSession` objects. One iteration for a batch of
prompts (specs ``multi_draft_otm.md`` §7 and ``mcsd.md`` §3; p is the draft, q the target):

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
4. Both sessions commit the emitted tokens: the caches keep the walked path
   (:meth:`~llm_bridge.cache.CachedLM.keep_path`); Y is fed next time.

Measured by an observer (excluded from the timing): per verified node its depth, the exact
probability of going on given its candidates, the verifier's closed-form acceptance averaged over
candidates, the OTM-k optimum α_k on the same rows (:func:`otspec.solvers.otm_value`) and TV; per
iteration E[τ | drafted trie], the exact expectation over the verifier's randomness and the walk
on every row the trie holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from otspec.distributions import total_variation
from otspec.drafts import DraftTree
from otspec.drafts import parse_tree as parse_drafts_tree
from otspec.engine.devicetree import walks_on_device
from otspec.engine.ledger import Ledger
from otspec.engine.loop import tree_steps
from otspec.engine.observers import LedgerObserver, Observer
from otspec.engine.runstate import LoopHooks
from otspec.engine.trie import RULES, Trie
from otspec.errors import SizeLimitError
from otspec.solvers import otm_value
from otspec.verifiers import TREE_VERIFIERS

from .loop import (
    BridgeResult,
    Gathered,
    cache_room,
    chunks,
    finish,
    loop_generator,
    ticks,
    uses_host_rows,
)
from .measure import CallTimer
from .options import DEFAULT_OPTIONS, DecodeOptions
from .sessions import ModelSession, target_hidden

__all__ = ["MAX_CLOSED_FORM_NODES", "TreeResult", "parse_tree", "tree_batches", "tree_generate"]


def parse_tree(spec, replacement: bool = True):
    """A draft tree from ``"4x2x2x1"``, ``"iid:K:L"`` (SpecTr's K drafts of L tokens), ``"eagle2:D:K:M"`` (EAGLE-2's
    confidence-ordered tree: depth D, top-K expansion, M nodes kept) or a tree (:func:`otspec.drafts.parse_tree`)."""
    return parse_drafts_tree(spec, replacement)


@dataclass
class TreeResult(BridgeResult):
    """:class:`~llm_bridge.loop.BridgeResult` of a tree run, with per-depth records of the verified nodes.

    Attributes (lists indexed by depth d = 1..L, one float array each over the nodes verified there)
    ----------
    go_on : P(the walk goes on below the node | its candidates), exact from the verifier's law.
    acceptance : the verifier's closed-form acceptance at the node's (p, q, number of candidates), over the first
        :data:`MAX_CLOSED_FORM_NODES` nodes of the depth.
    optimum : the OTM-k optimum α_k on the same rows and number of candidates (the same nodes).
    candidates : how many candidates the verifier saw at each node.
    target_nodes : tokens scored by each target call (unseen committed tokens + trie nodes).
    tries : (prompt index, committed tokens, trie) of every iteration when run with ``keep_tries``.

    A run made with ``defer_closed_forms`` has ``acceptance`` and ``optimum`` empty until
    :meth:`closed_forms` computes them from the nodes it kept.
    """

    tree: DraftTree | None = None
    rule: str = "match"
    go_on: list = field(default_factory=list)
    acceptance: list = field(default_factory=list)
    optimum: list = field(default_factory=list)
    candidates: list = field(default_factory=list)
    target_nodes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    tries: list = field(default_factory=list)
    pending: object = None

    def closed_forms(self) -> TreeResult:
        """Compute ``acceptance`` and ``optimum`` of a run made with ``defer_closed_forms`` (no-op otherwise)."""
        if self.pending is not None:
            self.acceptance, self.optimum = self.pending.closed_forms()
            self.pending = None
        return self


def tree_generate(pair, prompts, verifier, tree, max_new_tokens: int, options: DecodeOptions = DEFAULT_OPTIONS, *,
                  rule: str = "match", keep_tries: bool = False) -> TreeResult:
    """Generate ``max_new_tokens`` tokens per prompt by multi-draft speculative decoding on ``tree``.

    The tree loop of :mod:`otspec.engine.loop` over the target's and the drafter's sessions.
    ``verifier`` is a multi-draft verifier (``layout == "candidates"``); ``tree`` a
    :class:`~otspec.drafts.DraftTree` or a k-config string (``"4x2x2x1"``, ``"iid:4:3"``, or EAGLE-2's
    confidence-ordered ``"eagle2:D:K:M"`` with the naive verifier); the
    candidates are drawn with or without replacement as the verifier requires. ``record_law``
    also computes E[τ | drafted trie] (a law call per internal trie node; measurement, untimed);
    ``keep_tries`` keeps every drafted trie with its rows (for tests); ``options``
    (:class:`~llm_bridge.options.DecodeOptions`) as for chains, without observers. ``host_rows=False`` (the default
    off the CPU, as for chains:
    :func:`~llm_bridge.loop.uses_host_rows`) keeps the rows on the model's device, where the tree is grown, scored
    and walked with one read back per iteration (:mod:`otspec.engine.devicetree`); a verifier the device walk does not
    serve (``walks_on_device``: a biased or host-only one) walks on the host as with ``host_rows=True``.
    :func:`tree_batches` is the same, one batch at a time.
    """
    return finish(tree_batches(pair, prompts, verifier, tree, max_new_tokens, options, rule=rule,
                               keep_tries=keep_tries))


def tree_batches(pair, prompts, verifier, tree, max_new_tokens: int, options: DecodeOptions = DEFAULT_OPTIONS, *,
                 rule: str = "match", keep_tries: bool = False, defer_closed_forms: bool = False):
    """:func:`tree_generate` as a generator: it yields a :class:`~llm_bridge.loop.Tick` after every iteration and at the
    end of every batch, and returns the :class:`TreeResult` (drive it with :func:`~llm_bridge.loop.finish` or
    :func:`~llm_bridge.loop.interleave`).
    ``defer_closed_forms`` keeps the nodes whose closed-form acceptance and OTM-k optimum the result reports and
    leaves computing them to :meth:`TreeResult.closed_forms` (at V = 49,152 the optimum without replacement takes
    seconds a node: a timed record computes them after its timing window)."""
    if verifier.layout not in ("candidates", "tree"):
        raise ValueError(f"{type(verifier).__name__} verifies {verifier.layout}; a tree needs a multi-draft verifier "
                         f"or a whole-tree one ({', '.join(TREE_VERIFIERS)})")
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if options.observers:
        raise ValueError("the tree loop takes no observers (DecodeOptions.observers): its rows are recorded per trie")
    pair.drafter.check_plan(trees=True)
    tree = parse_tree(tree, verifier.replacement)
    L, N, o = tree.depth, int(max_new_tokens), options
    sampling, cache = o.sampling, o.cache
    host_rows = uses_host_rows(pair) if o.host_rows is None else o.host_rows
    host_rows = host_rows or not walks_on_device(verifier, tree)
    rng = loop_generator(o.seed, None if host_rows else pair.target.device)
    timer = CallTimer(pair.target.device)
    ledger = Ledger(len(prompts), N, L)
    rec = _TreeRecords(L, verifier, tree, rule, o.record_law, keep_tries)
    got = Gathered(len(prompts))
    with tqdm(total=len(prompts) * N, desc=f"{verifier.name} {tree} ({rule})", unit="tok", leave=False,
              disable=None if o.progress is None else not o.progress) as bar:
        for offset, chunk in chunks(prompts, o.batch_size):
            room = cache_room(chunk, N, tree.num_tokens + 2)
            target = ModelSession(pair.target.model, len(chunk), sampling, cache=cache, max_length=room, timer=timer,
                                  hidden=target_hidden(pair.drafter), host_rows=host_rows, name="target")
            draft = pair.drafter.session(len(chunk), sampling, cache=cache, max_length=room, timer=timer,
                                         host_rows=host_rows)
            rec.offset = offset
            watch = LoopHooks(bar=bar, timer=timer, observers=[LedgerObserver(ledger, offset), rec])
            run = yield from ticks(tree_steps(draft, target, verifier, tree, N, rng, rule=rule, prompts=chunk,
                                              hooks=watch),
                                   offset * N, len(prompts) * N)
            del target, draft  # free the batch's caches
            yield got.end_batch(run, offset, len(chunk))
    buf = np.stack(got.tokens)
    tv, go_on, n_cands = rec.columns()
    result = TreeResult(list(buf), ledger.result(buf, o.confidence), timer, got.seconds, tv=tv,
                        expected_accepted=np.asarray(rec.expected, dtype=float), rounds=got.rounds, tree=tree,
                        rule=rule, go_on=go_on, candidates=n_cands, target_nodes=np.asarray(rec.nodes, dtype=np.int64),
                        tries=rec.kept, pending=rec)
    return result if defer_closed_forms else result.closed_forms()


#: The closed-form acceptance and the OTM-k optimum are averaged over at most this many verified nodes per depth
#: (the first ones): at V = 49,152 the OTM-k optimum without replacement (k >= 2) takes about 5 s a node (its
#: Poisson-binomial DP walks the 49,152 sorted prefixes one token at a time), so 64 nodes a depth kept the trees
#: record computing for half an hour after its decoding. These per-depth means are descriptive: the record's
#: predictions come from the independent log.
MAX_CLOSED_FORM_NODES = 16


class _TreeRecords(Observer):
    """Per depth: go-on probability, closed-form acceptance, OTM-k optimum (over the first
    :data:`MAX_CLOSED_FORM_NODES` nodes), TV; per iteration E[τ | trie] (an observer)."""

    def __init__(self, L: int, verifier, tree: DraftTree, rule: str, with_law: bool, keep: bool = False):
        self.verifier, self.tree, self.rule, self.with_law = verifier, tree, rule, with_law
        self.go_on, self.closed, self.tv, self.n_cands = ([[] for _ in range(L)] for _ in range(4))
        self.expected, self.nodes, self.keep, self.kept, self.offset = [], [], keep, [], 0

    def _go_on(self, t: Trie, node: int):
        """(children, probabilities of going on to each) at ``node`` from the verifier's exact law."""
        d = t.depth[node]
        c = t.used(node, self.tree.branching[d], self.rule)
        law = self.verifier.law(c[None], t.p[node][None], t.q[node][None], validate=False)
        mass = np.asarray(law.accepted)[0] + (np.asarray(law.rejected)[0] if self.rule == "match" else 0.0)
        kids = [t.children[node][x] for x in np.unique(c[c >= 0]).tolist()]
        return kids, np.array([mass[t.token[j]] for j in kids]), c

    def _whole_tree(self, t: Trie, depth: int, walked: list) -> None:
        """A whole-tree verifier (traversal, gbv): E[τ | trie] and P(τ > d | τ >= d, trie) from its exact law on the
        trie; TV along the walked path. It has no per-node closed form, so none is kept."""
        if self.with_law and depth > 0 and t.cands:
            law = self.verifier.tree_law(t)
            self.expected.append(float(sum(w * len(path) for path, w, _ in law)))
            beyond = [float(sum(w for path, w, _ in law if len(path) > d)) for d in range(depth)]
            for d in range(depth):  # P(going on past depth d | reaching it)
                reach = 1.0 if d == 0 else beyond[d - 1]
                if reach > 0:
                    self.go_on[d].append(beyond[d] / reach)
        elif self.with_law:
            self.expected.append(0.0)
        for node in [0, *walked]:
            if t.depth[node] < depth and node in t.p:
                self.tv[t.depth[node]].append(float(total_variation(t.p[node], t.q[node])))
                self.n_cands[t.depth[node]].append(int((t.cands[node] >= 0).sum()))

    def on_tree(self, step) -> None:
        self.nodes += (np.asarray(step.nodes) + 1).tolist()  # the last committed token and the trie nodes
        for b, depth in zip(step.rows.tolist(), step.depth.tolist(), strict=True):
            t, found = step.tries[b], {}
            if self.keep:
                self.kept.append((self.offset + b, step.history(b), t))
            if self.verifier.layout == "tree":
                self._whole_tree(t, depth, step.paths[b])
                continue
            verified = [j for j in [0, *step.paths[b]] if t.depth[j] < depth and j in t.cands]  # a chosen tree's
            internal = [j for j in range(len(t.token)) if t.depth[j] < depth and j in t.cands] if self.with_law \
                else verified  # leaves may sit above the deepest level
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
                if len(self.closed[d]) < MAX_CLOSED_FORM_NODES:  # copies: a node's rows are views of its
                    self.closed[d].append((p.copy(), q.copy(), k))  # call's (batch, width, V) rows, 141 MB at 4x2x2x1

    def _closed_form(self, p, q, k) -> float:
        """The verifier's closed-form acceptance, or nan where it has none, it is too large to evaluate, or the candidates
        were chosen (an EAGLE-2 tree: the closed forms are for candidates drawn from p)."""
        if self.tree.deterministic:
            return np.nan
        try:
            return float(self.verifier.expected_acceptance(p, q, k))
        except (NotImplementedError, SizeLimitError):
            return np.nan

    def columns(self):
        return [[np.asarray(v) for v in lists if v] for lists in (self.tv, self.go_on, self.n_cands)]

    def closed_forms(self):
        """Per depth: the closed-form acceptance and the OTM-k optimum of the kept nodes (``(p, q, k)``)."""
        nodes = [c for c in self.closed if c]
        acceptance, optimum = [], []
        with tqdm(total=sum(map(len, nodes)), desc=f"closed forms {self.verifier.name} {self.tree}", unit="node",
                  leave=False) as bar:
            for c in nodes:
                acceptance.append(np.array([self._closed_form(p, q, k) for p, q, k in c]))
                optimum.append(np.array([np.nan if self.tree.deterministic
                                         else otm_value(p, q, k, self.tree.replacement) for p, q, k in c]))
                bar.update(len(c))
        return acceptance, optimum
