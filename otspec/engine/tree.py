"""Sequence-level multi-draft decoding: SpecTr Algorithm 3 and MCSD trees.

One iteration follows a path down a :class:`~otspec.drafts.DraftTree`. At the
current node set (a prefix y^d and n tree nodes that all spell it) the
candidates are the children of those nodes — n·k_{d+1} tokens drawn from the
draft given y^d — and a token-level multi-draft verifier (``otspec.verifiers.multi``)
returns Y ~ q(·|y^d) and whether it accepted a candidate. Two continuation rules:

* ``"match"`` — SpecTr's DraftSelection (spec multi_draft_otm.md §7.2): continue
  with every candidate node whose token equals Y, whether Y was accepted or
  drawn from the residual; stop if none does;
* ``"accepted"`` — MCSD (mcsd.md §3, line 9): continue with the accepted
  candidate only; a residual token ends the iteration.

Both are lossless for any lossless token-level verifier, because the subtree
below a candidate is drawn independently of the selection at its level. If
every level continues, a bonus token is drawn from q at the leaf. The exact law
(:func:`tree_law`) follows only the walked path; the decode loop drafts the whole
trie first, as a real system does — the output law is the same.

Spec: ``docs/multi_draft_otm.md``, ``docs/mcsd.md``.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from ..checks import MAX_ROW_WORK, MAX_SIMULATION_BLOCKS, capped_power, check_progress, check_size
from ..distributions import to_host
from ..drafts import MAX_DRAFT_TUPLES, DraftTree, draft_tuple_law, tree_for_vocab
from ..errors import SizeLimitError
from ..pairs import check_pair
from ..progress import tqdm
from ..solvers.tree_ot import TreeOptimum, coupling_optimum, tree_optimum
from ..sources import IIDSource, Source, check_enumeration, extend_prefixes
from .arguments import as_sources, as_tree, rng_of
from .chunking import DEFAULT_BACKEND, Backend, check_backend, chunk_size
from .confidence import grow_on_source
from .decode import check_buffer, check_prefixes, check_step
from .ledger import DecodeResult, Ledger
from .loop import tree_loop, tree_steps
from .montecarlo import MonteCarloResult, run_chunks
from .observers import LedgerObserver, Observer
from .runstate import LoopHooks
from .session import SourceSession
from .trie import RULES, Trie, check_tree_verifier

__all__ = ["RULES", "TreeExactResult", "generate_tree", "simulate_tree", "tree_bound", "tree_law"]

def _check(draft: Source, target: Source, verifier, tree: DraftTree, rule: str, *, depth_aware: bool = False):
    """The tree functions' entry check (:mod:`otspec.engine.arguments`); returns (draft, target, tree) as sources and a
    tree (``depth_aware``: the loops, which follow a draft's rows by depth)."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    draft, target = as_sources(draft, target)
    check_pair(draft, target, depth_aware=depth_aware)
    tree = tree_for_vocab(as_tree(tree), target.vocab_size)
    check_tree_verifier(verifier, tree)
    _check_plan_size(verifier, tree, draft, target)
    return draft, target, tree


def _check_plan_size(verifier, tree, draft, target) -> None:
    """A verifier whose plan enumerates candidate tuples (OTM: support**k of them) on an i.i.d. pair, where the
    rows' joint support is the same at every node: refused before the run, not at its first node."""
    limit = getattr(verifier, "max_tuples", None)
    if limit is None or tree.deterministic or not isinstance(draft, IIDSource) or not isinstance(target, IIDSource):
        return
    support, k = int(((draft.probs > 0) | (target.probs > 0)).sum()), max(tree.branching)
    if capped_power(support, k) > limit:
        raise SizeLimitError(f"{type(verifier).__name__} on the tree {tree}: its plan at a node of k = {k} candidates "
                             f"enumerates support**k = {support}**{k} tuples (the rows' joint support), above its "
                             f"max_tuples = {limit:,}; a narrower tree", size=capped_power(support, k), limit=limit)


@dataclass(frozen=True)
class TreeExactResult:
    """Exact law of one tree iteration from an empty context.

    Attributes
    ----------
    output_law, target_law : ndarray, shape (V**(L+1),)
        Emitted tokens continued by the target to L+1 tokens, and the target's law.
    max_deviation : float
    expected_tokens_per_iteration : float
        E[emitted tokens] (accepted + the final corrected or bonus token).
    continue_probs : ndarray, shape (L,)
        P(the iteration continues past depth d), d = 1..L.
    """

    tree: DraftTree
    rule: str
    output_law: np.ndarray
    target_law: np.ndarray
    max_deviation: float
    expected_tokens_per_iteration: float
    continue_probs: np.ndarray

    @property
    def expected_accepted(self) -> float:
        return self.expected_tokens_per_iteration - 1.0


def tree_law(draft: Source, target: Source, verifier, tree: DraftTree, rule: str = "match") -> TreeExactResult:
    """Exact output law of one multi-draft iteration on ``tree`` (small V and trees only).

    Enumerates, node set by node set along the followed path, every candidate
    tuple with its exact probability and the verifier's exact law. For an EAGLE-2
    :class:`~otspec.drafts.ConfidenceTree` the tree is grown once from the draft's rows
    (:func:`~otspec.engine.confidence.grow_confidence`) and its chosen candidates have probability 1.
    """
    draft, target, tree = _check(draft, target, verifier, tree, rule)
    L, V = tree.depth, target.vocab_size
    target.check_length(L + 1, f"the tree {tree} drafts {L} tokens, then one from the target")
    check_enumeration(V, L + 1)  # the output law is over V**(L+1) blocks: refused before the walk is enumerated
    if verifier.layout == "tree":
        return _whole_tree_law(draft, target, verifier, tree)
    chosen = _chosen_tree(draft, tree) if tree.deterministic else None
    emitted = defaultdict(float)
    continue_mass = np.zeros(L)
    level = {((), 1): 1.0}  # (prefix, node count) -> probability
    for d in range(L):
        nxt = defaultdict(float)
        for (prefix, nodes), mass in level.items():
            p_row, q_row = draft.row_after(prefix), target.row_after(prefix)
            if chosen is None:
                tuples, probs = draft_tuple_law(p_row, nodes * tree.branching[d], tree.replacement)
            elif chosen.get(prefix) is None:  # a leaf above the deepest level: the bonus token from q
                for y in range(V):
                    emitted[prefix + (y,)] += mass * q_row[y]
                continue
            else:
                tuples, probs = chosen[prefix][None], np.ones(1)
            law = verifier.law(tuples, np.broadcast_to(p_row, (len(tuples), V)), np.broadcast_to(q_row, (len(tuples), V)))
            acc = mass * probs[:, None] * np.asarray(law.accepted)
            rej = mass * probs[:, None] * np.asarray(law.rejected)
            count = (tuples[:, :, None] == np.arange(V)).sum(axis=1)  # (M, V): candidates equal to y
            if rule == "match":
                go, stop = np.where(count > 0, acc + rej, 0.0), np.where(count > 0, 0.0, acc + rej)
            else:
                go, stop, count = acc, rej, np.ones_like(count)
            for y in range(V):
                emitted[prefix + (y,)] += stop[:, y].sum()
                for c in np.unique(count[go[:, y] > 0, y]):
                    nxt[(prefix + (y,), int(c))] += go[count[:, y] == c, y].sum()
        level = {key: m for key, m in nxt.items() if m > 0}
        continue_mass[d] = sum(level.values())
    for (prefix, _), mass in level.items():  # every level continued: bonus token from q at the leaf
        for y, qy in enumerate(target.row_after(prefix)):
            emitted[prefix + (y,)] += mass * qy
    output = _fill(target, emitted, L + 1)
    target_law = target.enumerate(L + 1).probs
    expected = sum(len(k) * m for k, m in emitted.items())
    return TreeExactResult(tree, rule, output, target_law, float(np.max(np.abs(output - target_law))),
                           float(expected), continue_mass)


def _whole_tree_law(draft: Source, target: Source, verifier, tree: DraftTree) -> TreeExactResult:
    """:func:`tree_law` of a whole-tree verifier: every drafted tree (children in drawing order) with its
    probability, and the verifier's exact law on it (``verifier.tree_law``)."""
    L = tree.depth
    check_size(capped_power(target.vocab_size, tree.num_tokens), "drafted trees (V ** drafted tokens)",
               limit=MAX_DRAFT_TUPLES, limit_name="MAX_DRAFT_TUPLES")
    emitted, continue_mass = defaultdict(float), np.zeros(L)

    def grow(trie, frontier, d, mass):
        if d == L or not frontier:
            for path, w, bonus in verifier.tree_law(trie):
                for y in np.flatnonzero(bonus * w > 0):
                    emitted[path + (int(y),)] += mass * w * bonus[y]
                for depth in range(len(path)):
                    continue_mass[depth] += mass * w
            return
        tuples = [draft_tuple_law(trie.p[j], trie.mult[j] * tree.branching[d], tree.replacement) for j in frontier]
        for pick in itertools.product(*(range(len(probs)) for _, probs in tuples)):
            grown, below = trie.copy(), []
            for j, (cands, _), k in zip(frontier, tuples, pick, strict=True):
                below += grown.add_candidates(j, cands[k])
            for j in below:
                path = tuple(grown.token[i] for i in grown.path_to(j))
                grown.p[j], grown.q = draft.row_after(path), np.vstack([grown.q, target.row_after(path)])
            grow(grown, below, d + 1, mass * float(np.prod([tuples[i][1][k] for i, k in enumerate(pick)])))

    root = Trie()
    root.p[0], root.q = draft.row_after(()), target.row_after(())[None]
    grow(root, [0], 0, 1.0)
    output = _fill(target, emitted, L + 1)
    target_law = target.enumerate(L + 1).probs
    expected = sum(len(k) * m for k, m in emitted.items())
    return TreeExactResult(tree, "traversal", output, target_law, float(np.max(np.abs(output - target_law))),
                           float(expected), continue_mass)


def _chosen_tree(draft: Source, tree) -> dict:
    """A confidence tree grown from the empty context on the draft source: path (tuple) -> its node's candidates."""
    trie = grow_on_source(draft, tree)
    return {tuple(trie.token[j] for j in trie.path_to(node)): c for node, c in trie.cands.items()}


def _fill(target: Source, emitted: dict, length: int) -> np.ndarray:
    """Continue every emitted prefix with the target to ``length`` tokens; law over Ω^length."""
    V = target.vocab_size
    out = np.zeros(V**length)
    by_len = defaultdict(list)
    for prefix, mass in emitted.items():
        if mass > 0:
            by_len[len(prefix)].append((prefix, mass))
    for m, items in by_len.items():
        tokens = np.array([p for p, _ in items], dtype=np.int64).reshape(len(items), m)
        mass = np.array([w for _, w in items])
        for _ in range(length - m):
            rows = target.next_probs(tokens)
            mass = (mass[:, None] * rows).reshape(-1)
            tokens = extend_prefixes(tokens, V)
        np.add.at(out, tokens @ (V ** np.arange(length - 1, -1, -1)), mass)
    return out


def generate_tree(draft: Source, target: Source, verifier, tree: DraftTree, n_tokens: int, *,
                  rule: str = "match", n_sequences: int = 1, seed=0, progress: bool | None = None,
                  observers=()) -> DecodeResult:
    """End-to-end multi-draft decoding on ``tree``; counts as in :func:`otspec.engine.decode.generate`.

    Runs the tree loop of :mod:`otspec.engine.loop` over two
    :class:`~otspec.engine.session.SourceSession` objects. ``draft_calls`` counts draft forward
    passes (one per tree depth drafted, batched over the depth's nodes); ``discarded`` counts
    drafted tree tokens that were not accepted. A sequence never drafts past its last token (the
    tree is cut at depth N − pos − 1). ``accept_hist[g, t]``: iterations with tree depth g that
    accepted t. ``observers`` see every iteration too (after the ledger). Intervals at level 0.95
    (:meth:`~otspec.engine.ledger.DecodeResult.at_confidence` for another).
    """
    progress = check_progress(progress)
    draft, target, tree = _check(draft, target, verifier, tree, rule, depth_aware=True)
    L, N, B = tree.depth, check_size(n_tokens, "n_tokens"), check_size(n_sequences, "n_sequences")
    check_buffer(N, B)
    check_step(B, tree.num_tokens + 1, target.vocab_size)
    check_prefixes(B, tree.num_tokens, N + 1)
    target.check_length(N, f"n_tokens = {N:,}")
    ledger = Ledger(B, N, L)
    sessions = (SourceSession(draft, B, N + 1, max_prefix=N - 2), SourceSession(target, B, N + 1, max_prefix=N - 1))
    with tqdm(total=B * N, unit="tok", unit_scale=True, disable=None if progress is None else not progress,
              leave=False, desc=f"tree decode ({verifier.name}, {tree})") as bar:
        run = tree_loop(*sessions, verifier, tree, N, rng_of(seed),
                        hooks=LoopHooks(observers=[LedgerObserver(ledger), *observers], bar=bar), rule=rule, batch=B)
    return ledger.result(run.tokens)


def simulate_tree(draft: Source, target: Source, verifier, tree, n_blocks: int, *, rule: str = "match", seed=0,
                  progress: bool | None = None, confidence: float = 0.95,
                  backend: Backend = DEFAULT_BACKEND) -> MonteCarloResult:
    """Monte Carlo of one tree iteration from the empty context: ``n_blocks`` trees drafted and verified.

    Each trial runs the first iteration of the tree loop (:func:`~otspec.engine.loop.tree_steps`), which is
    exactly one iteration on the whole tree; ``accepted`` estimates E[accepted tree tokens], the quantity
    of :func:`tree_law` and of :func:`tree_bound`, and ``first_token_counts`` counts the first emitted
    token (a lossless verifier draws it from the target's first row). Works for every tree verifier
    (multi-draft and whole-tree) and for EAGLE-2 trees. ``backend``: only ``method="auto"`` or ``"rows"`` on numpy
    (the tree loop scores rows); ``backend.batch_size`` trials per chunk.
    """
    progress = check_progress(progress)
    draft, target, tree = _check(draft, target, verifier, tree, rule, depth_aware=True)
    n_blocks = check_size(n_blocks, "n_blocks", limit=MAX_SIMULATION_BLOCKS, limit_name="MAX_SIMULATION_BLOCKS")
    L, V = tree.depth, target.vocab_size
    target.check_length(L + 1, f"the tree {tree} drafts {L} tokens, then one from the target")
    check_backend(backend, "simulate_tree", ("auto", "rows"))
    # one trial's rows and its nodes' prefixes fit; every trial scores as many
    per_trial = check_step(1, tree.num_tokens + 1, V) + check_prefixes(1, tree.num_tokens, L + 2)
    if n_blocks * per_trial > MAX_ROW_WORK:
        raise SizeLimitError(f"simulating {n_blocks:,} trees of {tree.num_tokens:,} tokens at V = {V:,} touches about "
                             f"{n_blocks * per_trial:,} row entries, above MAX_ROW_WORK = {MAX_ROW_WORK:,} (15 s to 2 "
                             f"minutes of a core): fewer blocks (at most {max(1, MAX_ROW_WORK // per_trial):,} here)",
                             size=n_blocks * per_trial, limit=MAX_ROW_WORK)
    rng = rng_of(seed)
    batch = chunk_size(per_trial, backend.batch_size)

    def draw(b):
        first = _FirstIteration(b)
        sessions = (SourceSession(draft, b, L + 2, max_prefix=L - 1), SourceSession(target, b, L + 2, max_prefix=L))
        steps = tree_steps(*sessions, verifier, tree, L + 1, rng, hooks=LoopHooks(observers=[first]), rule=rule,
                           batch=b)
        next(steps)  # the first iteration, every sequence's whole tree: the trial (the later ones would only finish
        steps.close()  # its L + 1 tokens, a tree per level left after an early rejection: cubic in the depth)
        return first.accepted, first.token

    return run_chunks(draw, L, V, n_blocks, batch, confidence, progress, f"monte carlo ({verifier.name}, {tree})")


class _FirstIteration(Observer):
    """The accepted tokens of each sequence's first tree iteration (the later ones finish its N tokens)."""

    def __init__(self, n: int):
        self.accepted = np.full(n, -1, dtype=np.int64)
        self.token = np.full(n, -1, dtype=np.int64)  # the first emitted token

    def on_tree(self, step) -> None:
        at = step.start == 0
        self.accepted[step.rows[at]] = step.emitted[at] - 1
        self.token[step.rows[at]] = to_host(step.tokens)[at, 0]


def tree_bound(draft: Source, target: Source, tree) -> TreeOptimum:
    """The largest E[accepted tokens] of any lossless verifier on ``tree`` from the empty context
    (:func:`~otspec.solvers.tree_ot.tree_optimum`); an EAGLE-2 tree is grown once from the draft's rows and
    its one chosen tree coupled with the target (:func:`~otspec.solvers.tree_ot.coupling_optimum`)."""
    draft, target = as_sources(draft, target)
    tree = as_tree(tree)
    check_pair(draft, target)
    if not tree.deterministic:
        return tree_optimum(draft, target, tree)
    trie = grow_on_source(draft, tree)
    paths = frozenset(tuple(trie.token[j] for j in trie.path_to(n)) for n in range(1, len(trie)))
    return coupling_optimum([paths], [1.0], target, tree.depth)
