"""Dry runs: what one iteration of a speculative configuration costs, measured on the real loop apart from the runs.

:func:`dry_run` runs a chain configuration with every draft rejected (:class:`ZeroAcceptance`) or a tree
configuration as it is, over given contexts, and keeps each iteration's wall clock and its draft, target and
verifier time (:class:`IterationClock`). :mod:`llm_bridge.calibrate` builds the cost profile from them;
``benchmarks/bench_dry_vs_run.py`` sets a dry run beside the run it stands for.
"""

from __future__ import annotations

import time

import numpy as np

from otspec.distributions import sample_categorical
from otspec.drafts import ConfidenceTree, DraftTree
from otspec.engine.controllers import as_controller
from otspec.engine.loop import chain_steps, finish, tree_steps
from otspec.engine.observers import Observer
from otspec.engine.runstate import LoopHooks
from otspec.verifiers.base import Outcome, Verifier

from .loop import cache_room, loop_generator, relay, uses_host_rows
from .measure import CallTimer
from .sessions import ModelSession, target_hidden

__all__ = ["IterationClock", "ZeroAcceptance", "config_key", "dry_contexts", "dry_run", "dry_run_steps", "dry_tokens",
           "follows_plain", "uses_host_rows"]


class ZeroAcceptance(Verifier):
    """A chain verifier that does the wrapped verifier's work and keeps none of the drafts: τ = 0, and Y is the
    target's own draw at the first position, plain decoding's token. Carried state goes through the wrapped
    verifier's hooks, so v1 block verification does its residual work.

    The draw is a timed ``"aside"`` call of ``timer`` (nested in the verifier's call, so not verifier time), which
    the dry run's clock leaves out of its iteration: it is the dry run's own, not the loop's. With the target's
    draws the dry run's text is like plain decoding's, so a prompt-lookup drafter proposes as it would in a run.
    Emitting the first drafted token instead made the text copy itself: on llm_ngram (L = 2) prompt lookup then
    drafted its full length in 116 of 124 dry iterations, while the run mostly drafted nothing."""

    def __init__(self, inner: Verifier, timer=None):
        if inner.layout != "chain":
            raise ValueError(f"ZeroAcceptance wraps chain verifiers; {type(inner).__name__} verifies {inner.layout}")
        self.inner, self.timer = inner, timer
        self.name, self.carries_residual = f"dry:{inner.name}", inner.carries_residual

    def law(self, tokens, draft_probs, target_probs, *, validate: bool = True):
        raise NotImplementedError("a dry run has no law: it only costs what the wrapped verifier costs")

    def sample(self, tokens, draft_probs, target_probs, rng, *, validate: bool = True):
        out = self.inner.sample(tokens, draft_probs, target_probs, rng, validate=validate)
        return self._reject(out, target_probs, rng)

    def sample_ragged(self, tokens, draft_probs, target_probs, lengths, rng, *, validate: bool = True):
        out = self.inner.sample_ragged(tokens, draft_probs, target_probs, lengths, rng, validate=validate)
        return self._reject(out, target_probs, rng)

    def _reject(self, out: Outcome, target_probs, rng) -> Outcome:
        def draw():
            return sample_categorical(target_probs[:, 0], rng, check=False)

        y = draw() if self.timer is None else self.timer.call("aside", 0, draw)
        return Outcome(out.accepted_len * 0, y, out.carry)

    def start_state(self, batch, max_length):
        return self.inner.start_state(batch, max_length)

    def current_targets(self, *args):
        return self.inner.current_targets(*args)

    def advance_state(self, *args):
        return self.inner.advance_state(*args)


class IterationClock(Observer):
    """Per iteration: wall clock since the previous one (less the dry run's own ``"aside"`` draws and the time the loop
    was suspended), and the draft / target / verifier time and draft calls the timer saw in it; ``width``: the widest
    draft (a tree: the most nodes) the target scored."""

    KINDS = ("draft", "target", "verify")

    def __init__(self, timer: CallTimer):
        self.timer, self.rows = timer, []
        self._last = None
        self._away = 0.0  # time the loop spent suspended (its driver ran other runs' iterations)

    def _snapshot(self):
        return (time.perf_counter(), *(self.timer.total(k) for k in self.KINDS), self.timer.count("draft"),
                self.timer.total("aside"), self._away)

    def on_pause(self, seconds: float) -> None:
        self._away += seconds

    def start(self) -> None:
        self._last = None  # the first iteration of a loop also holds its prefill: not kept

    def _add(self, width: int) -> None:
        now = self._snapshot()
        if self._last is not None:
            d = [b - a for a, b in zip(self._last, now, strict=True)]
            self.rows.append({"wall_ms": 1e3 * (d[0] - d[5] - d[6]), "draft_ms": 1e3 * d[1], "target_ms": 1e3 * d[2],
                              "verify_ms": 1e3 * d[3], "calls": int(d[4]), "width": int(width)})
        self._last = now

    def on_chain(self, step) -> None:
        self._add(int(np.max(step.drafted, initial=0)))

    def on_tree(self, step) -> None:
        self._add(int(np.max(step.nodes, initial=0)))

    def columns(self) -> dict:
        return {k: [r[k] for r in self.rows] for k in ("wall_ms", "draft_ms", "target_ms", "verify_ms", "calls",
                                                       "width")}


def dry_run(pair, verifier, draft, contexts, n_tokens, *, sampling, cache, seed, rule="match") -> dict:
    """One zero-acceptance dry run (chains) or tree run of ``verifier`` on ``draft`` (L, a draft-length controller or
    a tree): per-iteration columns of :class:`IterationClock` (the first iteration, which holds the prefill, left
    out). :func:`dry_run_steps` run to its end."""
    return finish(dry_run_steps(pair, verifier, draft, contexts, n_tokens, sampling=sampling, cache=cache, seed=seed,
                                rule=rule))


def dry_run_steps(pair, verifier, draft, contexts, n_tokens, *, sampling, cache, seed, rule="match"):
    """:func:`dry_run` as a generator: it yields after every iteration the share of the dry run's tokens generated
    (the time it spends suspended is left out of its columns) and returns the columns."""
    timer, B = CallTimer(pair.target.device), len(contexts)
    tree = isinstance(draft, (DraftTree, ConfidenceTree))
    ctrl = None if tree else as_controller(draft)
    width = (draft.num_tokens if tree else ctrl.max_length) + 2
    room = cache_room(contexts, n_tokens, width)
    host = True if tree else uses_host_rows(pair)
    target = ModelSession(pair.target.model, B, sampling, cache=cache, max_length=room, timer=timer, name="target",
                          hidden=target_hidden(pair.drafter), host_rows=host)
    session = pair.drafter.session(B, sampling, cache=cache, max_length=room, timer=timer,
                                   **({} if tree else {"host_rows": host, "hidden": ctrl.needs_context}))
    clock = IterationClock(timer)
    trace = _TreeCalls() if tree else None
    if tree:
        steps = tree_steps(session, target, verifier, draft, n_tokens, np.random.default_rng(seed),
                           hooks=LoopHooks(timer=timer, observers=[clock, trace]), rule=rule, prompts=contexts)
    else:
        steps = chain_steps(session, target, ZeroAcceptance(verifier, timer), ctrl, n_tokens,
                            loop_generator(seed, None if host else pair.target.device),
                            hooks=LoopHooks(timer=timer, observers=[clock]), prompts=contexts)
    yield from relay(steps, lambda emitted: emitted / max(B * n_tokens, 1))
    out = {"kind": "tree" if tree else "chain", **clock.columns()}
    if tree:
        out["trace_calls"] = trace.calls[1:]
    return out


class _TreeCalls(Observer):
    """The most draft calls a sequence's trie took, per tree iteration (what the prediction's traces count)."""

    def __init__(self):
        self.calls = []

    def on_tree(self, step) -> None:
        self.calls.append(int(np.max(step.draft_calls, initial=0)))


def dry_tokens(n_tokens: int, draft) -> int:
    """Tokens a dry run decodes per round. A chain's: half the run's (from a quarter of its continuation on, so the
    dry run's context spans the run's middle half), and enough for its longest drafts to recur. A tree's: the whole
    run's, from the prompt (:func:`dry_contexts`).

    Half and not less: the KV cache carries the slots that verification rolled back until enough pile up to
    compact them, so a target call late in a run scores against more slots than its context. On llm_distilled
    (batch 8, L = 2), a dry run of an eighth of the run's tokens found target calls 10 % cheaper than one of half,
    whose calls cost what the run's own did (116-120 ms against 120-123 ms for 3 tokens), and every speedup came
    out over-predicted.

    A tree's dry run is a real run (its acceptances are the verifier's), so it can be the whole run: at batch 8 the
    sequences of a tree run drift apart as they accept different lengths, and a batch's cache is as wide as its
    furthest sequence. Half a run from a quarter on did not see that: on llm_trees the run's target calls at the
    full 44-node width of the 4x2x2x1 tree cost 7-11 % more than its dry run's (877-901 against 812-823 ms), and
    those speedups came out 11-13 % over-predicted; on the same prompts a run held 139-143 KV slots when it
    committed a path against its half-length dry run's 122 (benchmarks/bench_dry_vs_run.py)."""
    if isinstance(draft, (DraftTree, ConfidenceTree)):
        return int(n_tokens)
    return max(n_tokens // 2, as_controller(draft).max_length * 2 + 4)


def follows_plain(draft) -> bool:
    """Whether a calibration round's dry run of ``draft`` starts from plain decoding's continuation (a chain's) rather
    than from the prompts (a tree's): :func:`dry_contexts`."""
    return not isinstance(draft, (DraftTree, ConfidenceTree))


def dry_contexts(draft, prompts, continuations, n_tokens: int) -> tuple[list, int]:
    """Where a calibration round's dry run of ``draft`` starts, and the tokens it decodes (:func:`dry_tokens`): a
    chain's from a quarter of each prompt's plain ``continuations`` on, a tree's from the prompts themselves
    (``continuations`` may then be ``None``: :func:`follows_plain`)."""
    if not follows_plain(draft):
        return [np.asarray(p, dtype=np.int64) for p in prompts], dry_tokens(n_tokens, draft)
    return ([np.concatenate([np.asarray(p, dtype=np.int64), t[:n_tokens // 4]])
             for p, t in zip(prompts, continuations, strict=True)], dry_tokens(n_tokens, draft))


def config_key(verifier_name: str, draft) -> str:
    """A dry run's key: ``token:L=4`` for a chain, ``kseq:2x2x1`` for a tree, ``token:<label>`` for a controller
    given by its label (a string)."""
    return f"{verifier_name}:L={int(draft)}" if isinstance(draft, (int, np.integer)) else f"{verifier_name}:{draft}"
