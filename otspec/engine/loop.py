"""The decode loops: one chain loop and one tree loop, for toy sources and real models alike.

Both drive two :class:`~otspec.engine.session.Session` objects (a drafter's and the target's)
and a verifier, and know nothing of what a session is made of. One iteration of
:func:`chain_loop` for B sequences:

1. the drafter proposes up to L tokens per sequence, a
   :class:`~otspec.engine.controllers.DraftLengthController` deciding after each whether to
   draft one more (a sequence never drafts past its last position);
2. one target call scores the drafted tokens: L + 1 rows per sequence;
3. the verifier decides τ and the next token Y from the rows (carried state, e.g. the v1 block
   verifier's residual windows, goes through the protocol's hooks);
4. both sessions commit the τ accepted tokens and Y.

:func:`tree_loop` drafts a :class:`~otspec.engine.trie.Trie` a level per draft call, scores
every node with one target call, and walks down it with a multi-draft verifier (SpecTr's
``"match"`` rule or MCSD's ``"accepted"``). Randomness comes from one generator in a fixed
order: the draft tokens, then the verifier. With both sessions' rows on a device the same loop runs
there (:mod:`otspec.engine.devicetree`: the tree as fixed-shape tensors, the walk over sets of equal
candidates, one read back per iteration); with numpy rows it walks a trie on the host.

Measurement is done by *observers* (:mod:`otspec.engine.observers`): after every iteration each
gets a ``ChainStep`` or ``TreeStep`` with the drafts, both models' rows and the outcome. The time
they take is left out of :attr:`LoopRun.seconds`, the wall-clock of decoding.

:func:`chain_steps` and :func:`tree_steps` are the same loops as generators that hand control back
after every iteration, so that a caller can take several runs' iterations in turn (real models timed
in the same windows of seconds); the time a loop spends suspended is left out of its clock too, and
observers hear of it (``Observer.on_pause``). :func:`chain_loop` and :func:`tree_loop` run them to
the end.
"""

from __future__ import annotations

import numpy as np

from ..checks import MAX_CANDIDATES
from ..distributions import host_to_like, sample_categorical, to_device, to_host, zeros_of
from ..drafts import DraftTree, sample_candidates, tree_for_vocab
from ..verifiers.base import Outcome
from .confidence import grow_confidence
from .controllers import DraftLengthController, checked_keep
from .deviceconfidence import confidence_iteration
from .devicetree import LazyList, TreeLayout, device_iteration, walks_on_device
from .observers import ChainStep, TreeStep
from .runstate import NO_HOOKS, LoopHooks, LoopRun, RunState
from .session import Session, as_prompts
from .trie import Trie, check_tree_verifier
from .wholetree import walk_whole_trees

__all__ = ["LoopRun", "chain_loop", "chain_steps", "finish", "tree_loop", "tree_steps"]


def _index(rows, idx):
    """``rows[idx]`` for a host index into numpy or torch rows (``rows`` itself when ``idx`` takes every row in order)."""
    if idx.size == rows.shape[0] and (idx.size == 0 or (idx[0] == 0 and idx[-1] == idx.size - 1)):
        return rows  # idx is sorted and distinct (flatnonzero), so this is 0..n-1: no copy
    if isinstance(rows, np.ndarray):
        return rows[idx]
    return rows[to_device(idx, rows.device)]


def _controller_inputs(ctrl: DraftLengthController, draft, target, run, tokens, i, idx, x, features) -> dict:
    """What the controller reads besides the draft rows (see :mod:`otspec.engine.controllers`).

    Only controllers that declare a need get anything (a learned head: its features or the token ids;
    the simulated oracles: the target's rows too); a fixed draft length reads nothing."""
    if not (ctrl.needs_context or ctrl.needs_target or ctrl.needs_lookahead):
        return {}
    out = {"which": idx, "features": features}
    tokens = to_host(tokens)
    end = run.plen[idx] + run.done[idx]
    before = to_host(_index(run.seq, idx))[np.arange(idx.size), np.maximum(end - 1, 0)]
    out["tokens"] = tokens[idx, i]
    out["previous"] = tokens[idx, i - 1] if i > 0 else np.where(end > 0, before, -1)
    if ctrl.needs_target or ctrl.needs_lookahead:
        counts = np.zeros(run.B, dtype=np.int64)
        counts[idx] = i
        if ctrl.needs_target:
            out["target_rows"] = target.lookahead(tokens[:, :i], counts).rows[idx, i]
        if ctrl.needs_lookahead:
            ahead = counts.copy()
            ahead[idx] += 1
            out["next_rows"] = lambda: (draft.lookahead(tokens[:, :i + 1], ahead).rows[idx, i + 1],
                                        target.lookahead(tokens[:, :i + 1], ahead).rows[idx, i + 1])
    return out


def _draft_chain(draft: Session, target: Session, ctrl: DraftLengthController, run: RunState, limit, rng):
    """Draft up to ``limit`` (B,) tokens per sequence; returns (drafted (B,), tokens (B, L), draft rows (B, L, V)).

    Every step draws a token for every sequence (one uniform each, no host index), and keeps those
    of the sequences still drafting; the rest is padding past their drafted length."""
    B, L = run.B, ctrl.max_length
    if ctrl.fixed_length and draft.drafts_chains and run.call.timer is None:  # the same draws in one session call
        # (a timed run keeps a call per drafted token: the timer charges each draft call)
        return run.call("draft", L, draft.draft_chain, limit, L, rng)
    drafted, tokens, draft_rows = np.zeros(B, dtype=np.int64), run.tokens((B, L)), None
    ctrl.start(B)
    drafting = limit > 0
    if not drafting.any():
        return drafted, tokens, draft_rows
    scores, at = run.call("draft", 0, draft.feed, run.tokens((B, 0)), np.zeros(B, dtype=np.int64)), 0
    # an unlagged head reads the draft's state at the drafted token itself: feed each token before asking
    early = ctrl.reads_drafted_state and scores.features is not None
    for i in range(L):
        if scores.usable is not None:
            drafting &= to_host(scores.usable[:, at]).astype(bool)
        idx = np.flatnonzero(drafting)
        if idx.size == 0:
            break
        rows = scores.rows[:, at]
        if draft_rows is None:
            draft_rows = run.draft_buffer(rows, L)
        tokens[:, i] = sample_categorical(rows, rng, check=False)
        draft_rows[:, i] = rows
        drafted[idx] += 1
        if early:  # the call that gives p_{i+2} also gives e_{i+1}, the state at token i + 1 (1-based)
            scores, at = run.call("draft", 1, draft.feed, tokens[:, i:i + 1], drafting.astype(np.int64)), 1
        features = None if scores.features is None else to_host(_index(scores.features[:, at], idx))
        keep = ctrl.keep_drafting(i + 1, _index(rows, idx), **_controller_inputs(ctrl, draft, target, run, tokens, i,
                                                                                 idx, None, features))
        drafting[idx] = checked_keep(ctrl, keep, len(idx)) & (drafted[idx] < limit[idx])
        if not drafting.any():
            break
        if not early:
            scores, at = run.call("draft", 1, draft.feed, tokens[:, i:i + 1], drafting.astype(np.int64)), 1
    return drafted, tokens, draft_rows


def _verify_chain(verifier, state, draft, run, idx, drafted, tokens, draft_rows, target_rows, rng):
    """τ (host) and Y (where the rows are) of sequences ``idx`` in one ragged verifier call, and the rows verified
    against when the verifier carries a residual target (``None`` otherwise: the target's rows)."""
    lengths = drafted[idx]
    width = int(lengths.max(initial=0))
    toks = _index(tokens, idx)[:, :width]
    q_rows = _index(target_rows, idx)[:, :width + 1]
    p_rows = _index(draft_rows, idx)[:, :width] if width else zeros_of(q_rows, (idx.size, 0, q_rows.shape[-1]))
    start = run.done[idx]
    verified, scratch = None, None

    def next_draft_row():  # the draft's row after each row's drafted tokens (v1 block verification asks for it)
        step, counts = run.tokens((run.B, 1)), np.zeros(run.B, dtype=np.int64)
        some = idx[lengths > 0]
        step[run.like(some), 0] = tokens[run.like(some), run.like(drafted[some] - 1)]
        counts[some] = 1
        rows = run.call("draft", 1, draft.feed, step, counts).rows  # row 0: after the end, where nothing was drafted
        return _index(_where_rows(counts > 0, rows[:, 1], rows[:, 0]), idx)

    q_used = q_rows
    if verifier is not None:
        q_used, scratch = verifier.current_targets(state, idx, toks, p_rows, q_rows, start, lengths, next_draft_row)
        verified = q_used if verifier.carries_residual else None
    if width == 0:  # nothing drafted (the last position, or no draft on offer): the target's own draw
        out = Outcome(host_to_like(np.zeros(idx.size, dtype=np.int64), q_used),
                      sample_categorical(q_used[:, 0], rng, check=False))
    else:
        out = run.call("verify", width, _sample, verifier, toks, p_rows, q_used, host_to_like(lengths, q_used), rng)
    if verifier is not None:
        verifier.advance_state(state, idx, scratch, out, start, lengths)
    if width == 0:
        return np.zeros(idx.size, dtype=np.int64), out.correction, verified
    return to_host(out.accepted_len), out.correction, verified  # the iteration's one read-back: τ


def _where_rows(mask: np.ndarray, rows, other):
    """Row b of ``rows`` where ``mask[b]``, else of ``other`` (numpy or torch rows, host mask)."""
    if isinstance(rows, np.ndarray):
        return np.where(mask[:, None], rows, other)
    import torch

    return torch.where(to_device(mask, rows.device)[:, None], rows, other)


def _sample(verifier, tokens, draft_rows, target_rows, lengths, rng):
    return verifier.sample_ragged(tokens, draft_rows, target_rows, lengths, rng, validate=False)


def _sample_candidates(verifier, candidates, draft_rows, target_rows, rng):
    return verifier.sample(candidates, draft_rows, target_rows, rng, validate=False)


def finish(steps):
    """Run a generator (:func:`chain_steps`, :func:`tree_steps`, or one built on them) to its end; what it returns."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


def chain_loop(draft: Session | None, target: Session, verifier, controller: DraftLengthController, n_tokens: int,
               rng, *, prompts=None, batch: int | None = None, hooks: LoopHooks = NO_HOOKS) -> LoopRun:
    """Generate ``n_tokens`` tokens per sequence by speculative decoding of chains (module docstring):
    :func:`chain_steps` run to its end; the arguments are its."""
    return finish(chain_steps(draft, target, verifier, controller, n_tokens, rng, prompts=prompts, batch=batch,
                              hooks=hooks))


def chain_steps(draft: Session | None, target: Session, verifier, controller: DraftLengthController, n_tokens: int,
                rng, *, prompts=None, batch: int | None = None, hooks: LoopHooks = NO_HOOKS):
    """The chain loop as a generator: it yields after every iteration (the tokens generated so far over all sequences)
    and returns the :class:`LoopRun`; the time it spends suspended is not decoding time (module docstring).

    Parameters
    ----------
    draft : Session or None
        The drafter's session; ``None`` (with no verifier and no controller) is plain sampling.
    target : Session
    verifier : chain Verifier or None
    controller : DraftLengthController or None
    n_tokens : int
        N, tokens generated per sequence.
    rng : numpy Generator (numpy rows) or torch Generator (torch rows)
    prompts : list of 1-D int arrays, optional
        Default: ``batch`` empty prompts (toy sources).
    hooks : LoopHooks
        What watches the loop: observers, a progress bar (advanced by the tokens emitted), a timer (times the
        verifier, ``"verify"``, and the draft calls, ``"draft"``).
    """
    prompts = as_prompts(prompts, batch)
    if (draft is None) != (controller is None):
        raise ValueError("chain_loop: give both a drafter and a controller, or neither (plain sampling)")
    run = RunState((draft, target), prompts, n_tokens, hooks, target.rows_device)
    L = 0 if controller is None else controller.max_length
    state = None if verifier is None else verifier.start_state(run.B, L)
    while (run.done < run.N).any():
        active = run.done < run.N
        limit = np.where(active, np.minimum(L, run.N - run.done - 1), 0)
        if draft is None:
            drafted, tokens, draft_rows = np.zeros(run.B, dtype=np.int64), run.tokens((run.B, 0)), None
        else:
            drafted, tokens, draft_rows = _draft_chain(draft, target, controller, run, limit, rng)
        width = int(drafted.max())
        scored = run.call("target", width + 1, target.feed, tokens[:, :width], drafted)
        target_rows = scored.rows
        if draft is not None and draft.reads_target_features and scored.features is None:
            raise ValueError(f"{type(draft).__name__} reads the target's features; {type(target).__name__} returned none")
        idx = np.flatnonzero(active)
        accepted, correction, verified = _verify_chain(verifier, state, draft, run, idx, drafted, tokens, draft_rows,
                                                       target_rows, rng)
        start = run.done[idx].copy()
        emitted = run.tokens((idx.size, width + 1))  # the accepted drafts, then Y
        emitted[:, :width] = _index(tokens, idx)[:, :width]
        emitted[run.like(np.arange(idx.size)), run.like(accepted)] = correction
        run.emit(idx, emitted, accepted + 1, (draft, target), scored.features)
        if run.observers:
            run.notify("on_chain", ChainStep(idx, start, drafted[idx], _index(tokens, idx),
                                             None if draft_rows is None else _index(draft_rows, idx),
                                             _index(target_rows, idx), accepted, correction, verified))
        yield from run.pause()
    return run.result()


# ---------------------------------------------------------------------------------------------- trees


def _grow(draft: Session, tree: DraftTree, run: RunState, depth, rng):
    """Draft every sequence's trie to its depth; returns (tries, draft calls per sequence)."""
    B = run.B
    tries = [Trie() for _ in range(B)]
    calls = np.zeros(B, dtype=np.int64)
    drafting = depth > 0
    if not drafting.any():
        return tries, calls
    scores = run.call("draft", 0, draft.feed, np.zeros((B, 0), dtype=np.int64), np.zeros(B, dtype=np.int64))
    calls[drafting] += 1
    root = to_host(scores.rows[:, 0])
    frontier = [[0] if drafting[b] else [] for b in range(B)]
    for b in np.flatnonzero(drafting):
        tries[b].p[0] = root[b]
    fed = np.zeros(B, dtype=np.int64)  # nodes fed to the draft session since the last commit
    for d in range(tree.depth):
        work = [(b, node) for b in range(B) for node in frontier[b]]
        if not work:
            break
        sizes = np.array([tries[b].mult[node] * tree.branching[d] for b, node in work])
        born = [[] for _ in range(B)]
        for size in np.unique(sizes):
            group = [w for w, s in zip(work, sizes, strict=True) if s == size]
            p = np.stack([tries[b].p[node] for b, node in group])
            cands = _draw_children(p, int(size), rng, tree)
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
                    t.draft_slot[j] = int(fed[b]) + i
            rows = to_host(run.call("draft", int(n.max()), draft.feed_tree, toks, parents, n).rows)
            calls[n > 0] += 1
            fed += n
            for b in np.flatnonzero(n):
                for i, j in enumerate(feed[b]):
                    tries[b].p[j] = rows[b, i + 1]
        frontier = feed
    return tries, calls


def _grow_by_confidence(draft: Session, tree, run: RunState, depth):
    """Draft every sequence's confidence-ordered tree (:func:`~otspec.engine.confidence.grow_confidence`)."""
    B = run.B
    if not (depth > 0).any():
        return [Trie() for _ in range(B)], np.zeros(B, dtype=np.int64)
    root = to_host(run.call("draft", 0, draft.feed, np.zeros((B, 0), dtype=np.int64), np.zeros(B, dtype=np.int64)).rows)

    def feed(items):
        n = np.array([len(x) for x in items], dtype=np.int64)
        toks, parents = np.zeros((B, n.max()), dtype=np.int64), np.full((B, n.max()), -1, dtype=np.int64)
        for b in np.flatnonzero(n):
            toks[b, :n[b]], parents[b, :n[b]] = np.asarray(items[b], dtype=np.int64).T
        rows = to_host(run.call("draft", int(n.max()), draft.feed_tree, toks, parents, n).rows)
        return [rows[b, 1:1 + n[b]] for b in range(B)]

    tries, calls = grow_confidence(tree, root[:, 0], feed, depth)
    return tries, calls + (depth > 0)


def _score_tries(target: Session, tries, run: RunState, active):
    """One target call over every trie (node j's parent j' < j); fills each trie's rows ``q`` (root first).
    Returns (nodes scored per sequence, the target's features at the root and every node, or None)."""
    n = np.array([len(t) - 1 if active[b] else 0 for b, t in enumerate(tries)], dtype=np.int64)
    width = max(int(n.max()), 0)
    toks, parents = np.zeros((run.B, width), dtype=np.int64), np.full((run.B, width), -1, dtype=np.int64)
    for b in np.flatnonzero(n):
        t = tries[b]
        toks[b, :n[b]] = t.token[1:]
        parents[b, :n[b]] = np.asarray(t.parent[1:]) - 1  # trie node j is fed as node j - 1; the root is -1
    scored = run.call("target", width + 1, target.feed_tree, toks, parents, n)
    rows = to_host(scored.rows)
    for b in np.flatnonzero(active):
        tries[b].q = rows[b, :len(tries[b])]
    return n, scored.features


def _walk(verifier, tree: DraftTree, rule: str, tries, depth, active, rng, run: RunState):
    """Verify down each trie; returns (emitted tokens (B, L + 1), counts (B,), walked nodes)."""
    B = run.B
    cur = np.zeros(B, dtype=np.int64)
    going, emitted = active.copy(), np.zeros(B, dtype=np.int64)
    out_tokens = np.zeros((B, tree.depth + 1), dtype=np.int64)
    paths = [[] for _ in range(B)]
    for d in range(tree.depth + 1):
        leaf = np.zeros(B, dtype=bool)  # a chosen tree's nodes may be leaves above its deepest level
        if tree.deterministic:
            leaf[going] = [tries[b].cands.get(int(cur[b])) is None for b in np.flatnonzero(going)]
        bonus = np.flatnonzero(going & ((depth == d) | leaf))
        if bonus.size:  # every level went on (or nothing was drafted): the target's own draw at the node
            out_tokens[bonus, d] = sample_categorical(np.stack([tries[b].q[cur[b]] for b in bonus]), rng)
            emitted[bonus] += 1
            going[bonus] = False
        here = np.flatnonzero(going & (depth > d) & ~leaf)
        if here.size == 0:
            break
        used = {b: tries[b].used(cur[b], tree.branching[d], rule) for b in here}
        sizes = np.array([len(used[b]) for b in here])
        for size in np.unique(sizes):
            group = here[sizes == size]
            cands = np.stack([used[b] for b in group])
            p = np.stack([tries[b].p[cur[b]] for b in group])
            q = np.stack([tries[b].q[cur[b]] for b in group])
            out = run.call("verify", int(size), _sample_candidates, verifier, cands, p, q, rng)
            y, accepted = np.asarray(out.token, dtype=np.int64), np.asarray(out.accepted, dtype=bool)
            out_tokens[group, d] = y
            emitted[group] += 1
            for b, yb, ok in zip(group, y.tolist(), accepted.tolist(), strict=True):
                child = tries[b].next_node(cur[b], yb, ok, rule)
                if child is None:
                    going[b] = False
                else:
                    cur[b] = child
                    paths[b].append(child)
    return out_tokens, emitted, paths


def tree_loop(draft: Session, target: Session, verifier, tree: DraftTree, n_tokens: int, rng, *,
              rule: str = "match", prompts=None, batch: int | None = None, hooks: LoopHooks = NO_HOOKS) -> LoopRun:
    """Generate ``n_tokens`` tokens per sequence by multi-draft speculative decoding on ``tree``: :func:`tree_steps` run
    to its end; the arguments are its."""
    return finish(tree_steps(draft, target, verifier, tree, n_tokens, rng, rule=rule, prompts=prompts, batch=batch,
                             hooks=hooks))


def _draw_children(p, size: int, rng, tree: DraftTree):
    """``size`` candidates per row of ``p``. A trie node where m identical drafts merged draws m·k i.i.d.
    children, which can pass MAX_CANDIDATES although the tree's widths do not (its size bounds them): those
    are drawn in blocks of at most MAX_CANDIDATES, independent draws whose concatenation has the same law."""
    if size <= MAX_CANDIDATES or tree.draw != "iid":
        return np.asarray(sample_candidates(p, size, rng, replacement=tree.replacement))
    blocks = [np.asarray(sample_candidates(p, min(MAX_CANDIDATES, size - at), rng, replacement=tree.replacement))
              for at in range(0, size, MAX_CANDIDATES)]
    return np.concatenate(blocks, axis=1)


def tree_steps(draft: Session, target: Session, verifier, tree: DraftTree, n_tokens: int, rng, *,
               rule: str = "match", prompts=None, batch: int | None = None, hooks: LoopHooks = NO_HOOKS):
    """The tree loop as a generator (yields after every iteration, as :func:`chain_steps` does; returns the
    :class:`LoopRun`): generate ``n_tokens`` tokens per sequence by multi-draft speculative decoding on ``tree``.

    ``verifier`` is a multi-draft verifier (``layout == "candidates"``) lossless for the tree's
    draw (with or without replacement); ``tree`` a :class:`~otspec.drafts.DraftTree` or an EAGLE-2
    :class:`~otspec.drafts.ConfidenceTree` (chosen candidates: the naive verifier); other arguments as in
    :func:`chain_loop`. A sequence's trie is cut at depth N − generated − 1, so every sequence ends with
    exactly N tokens.
    """
    prompts = as_prompts(prompts, batch)
    tree = tree_for_vocab(tree, target.vocab_size)
    check_tree_verifier(verifier, tree)
    if _walks_arrays(draft, target, verifier, tree, hooks, len(prompts)):
        return (yield from _array_tree_steps(draft, target, verifier, tree, n_tokens, rng, rule, prompts, hooks))
    run = RunState((draft, target), prompts, n_tokens, hooks)  # numpy rows: the trie on the host
    while (run.done < run.N).any():
        active = run.done < run.N
        depth = np.where(active, np.minimum(tree.depth, run.N - run.done - 1), 0)
        tries, calls = (_grow_by_confidence(draft, tree, run, depth) if tree.deterministic
                        else _grow(draft, tree, run, depth, rng))
        nodes, features = _score_tries(target, tries, run, active)
        out_tokens, emitted, paths = (walk_whole_trees(verifier, tries, depth, active, rng, tree.depth)
                                      if verifier.layout == "tree" else
                                      _walk(verifier, tree, rule, tries, depth, active, rng, run))
        idx = np.flatnonzero(active)
        start = run.done[idx].copy()
        before = run.plen + run.done
        if draft.reads_target_features:
            features = _features_along(draft, target, features, idx, paths, tree.depth + 1)
        run.emit(idx, out_tokens[idx], emitted[idx], (draft, target), features)
        if run.observers:
            run.notify("on_tree", TreeStep(idx, start, depth[idx], emitted[idx], tries, paths, nodes[idx], calls[idx],
                                           lambda b, before=before: run.seq[b, :before[b]].copy(),
                                           tokens=out_tokens[idx]))
        yield from run.pause()
    return run.result()


def _features_along(draft, target, features, idx, paths, width: int):
    """The target's features before each emitted token of sequences ``idx``: at the root, then along ``paths[b]``
    (columns of the target's rows), (B, width, H), for a drafter that reads them."""
    if features is None:
        raise ValueError(f"{type(draft).__name__} reads the target's features; {type(target).__name__} returned none")
    at = np.zeros((features.shape[0], width), dtype=np.int64)
    for b in idx:
        at[b, 1:1 + len(paths[b])] = paths[b]
    return features[host_to_like(np.arange(features.shape[0])[:, None], features), host_to_like(at, features)]


#: Toy sources walk fixed-shape arrays from this many sequences on: below it one trie per sequence costs less than the
#: arrays' fixed work per level (a Markov pair, V = 30, tokens/s on arrays against tries: Traversal 2x2 470 / 1,120
#: at batch 1, 10,500 / 10,700 at batch 32; k-Seq 4x2x2x1 380 / 480 and 6,100 / 3,500; EAGLE-2 eagle2:4:4:16
#: 390 / 490 and 12,100 / 3,100).
FIXED_SHAPE_MIN_BATCH = 16


def _walks_arrays(draft, target, verifier, tree, hooks: LoopHooks = NO_HOOKS,
                  batch: int = FIXED_SHAPE_MIN_BATCH) -> bool:
    """Whether the tree loop runs the fixed-shape walk of :mod:`otspec.engine.devicetree` (every sequence's tree as
    arrays, no trie, one read back): the walk serves ``verifier`` on ``tree``
    (:func:`~otspec.engine.devicetree.walks_on_device`) and both sessions keep their rows on a device, or both are
    lookups on the host (``Session.fixed_shape_trees``: toy sources, where a level fed unmerged costs nothing more),
    ``batch`` at least :data:`FIXED_SHAPE_MIN_BATCH` and no observer reads the merged tries (``Observer.reads_tries``).
    Otherwise the host walk over tries, one per sequence (a model on the host feeds each merged node once)."""
    sessions = (draft, target)
    lookups = (all(s.rows_device is None and s.fixed_shape_trees for s in sessions) and batch >= FIXED_SHAPE_MIN_BATCH
               and not any(getattr(o, "reads_tries", False) for o in hooks.observers))
    return (all(s.rows_device is not None for s in sessions) or lookups) and walks_on_device(verifier, tree)


def _array_tree_steps(draft, target, verifier, tree, n_tokens, rng, rule, prompts, hooks):
    """:func:`tree_steps` on fixed-shape arrays, on the rows' device or numpy (:func:`_walks_arrays`): one read back
    per iteration (the emitted counts and the walked nodes)."""
    run = RunState((draft, target), prompts, n_tokens, hooks, target.rows_device)
    layout = None if tree.deterministic else TreeLayout(tree.branching)
    while (run.done < run.N).any():
        active = run.done < run.N
        depth = np.where(active, np.minimum(tree.depth, run.N - run.done - 1), 0)
        step = (confidence_iteration(draft, target, verifier, tree, run, depth, active, rng) if layout is None else
                device_iteration(draft, target, verifier, tree, layout, rule, run, depth, active, rng))
        idx = np.flatnonzero(active)
        start = run.done[idx].copy()
        before = run.plen + run.done
        features = step.features
        if draft.reads_target_features:
            features = _features_along(draft, target, features, idx, {b: step.walked(b) for b in idx},
                                       step.out.shape[1])
        nodes = tuple(LazyList(run.B, lambda b, f=f, depth=depth: f(b, int(depth[b])))  # model sessions read them
                      for f in (step.draft_nodes, step.target_nodes))
        out = step.out[run.like(idx)]
        run.emit(idx, out, step.emitted[idx], (draft, target), features, nodes=nodes)
        if run.observers:
            run.notify("on_tree", TreeStep(idx, start, depth[idx], step.emitted[idx], step.tries(), step.paths(),
                                           step.nodes[idx], step.calls[idx],
                                           lambda b, before=before: to_host(run.seq[b, :before[b]]).copy(),
                                           drafted=step.drafted()[idx], tokens=out))  # where the rows are: no read
        yield from run.pause()
    return run.result()
