"""Speculative decoding of real language models with otspec's verifiers, and plain sampling.

Both run the chain loop of :mod:`otspec.engine.loop` — the same loop that decodes toy sources —
over :class:`~llm_bridge.sessions.ModelSession` objects (KV caches with rollback). One iteration
of :func:`speculative_generate` for a batch of prompts:

1. the drafter proposes up to L tokens per sequence (a controller may stop earlier; the draft's
   session first feeds what it has not seen yet: the last correction, maybe the last accepted
   draft token);
2. one target call scores the last emitted token and the drafted tokens: L + 1 rows;
3. otspec's verifier — the same object the exact and Monte Carlo engines use — decides τ and the
   next token Y from the processed rows (its carried state, e.g. BackwardBlockVerify's residual
   windows, goes through the protocol's hooks);
4. both sessions commit the τ accepted tokens and Y: the caches keep the accepted drafts; Y is
   fed next time.

Randomness comes from one ``numpy.random.Generator``: the draft tokens, then the verifier, in a
fixed order, so a run is reproducible from its seed. What the papers report is recorded by
observers off the decoding clock: the ledger of :mod:`otspec.engine.ledger` (block efficiency with
its interval, accepted-length histogram, calls) and per-position TV and two-point pairs along the
drafted paths; every call's wall-clock goes to a :class:`~llm_bridge.measure.CallTimer`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from otspec.distributions import total_variation
from otspec.engine.controllers import as_controller
from otspec.engine.ledger import DecodeResult, Ledger
from otspec.engine.loop import chain_steps, finish
from otspec.engine.observers import LedgerObserver, Observer, to_host
from otspec.engine.runstate import LoopHooks
from otspec.progress import tqdm
from otspec.verifiers.base import Verifier

from .measure import CallTimer, two_point
from .options import DEFAULT_OPTIONS, DecodeOptions
from .sampling import DEFAULT_SAMPLING, Sampling
from .sessions import ModelSession, target_hidden

__all__ = ["PAIRINGS", "BridgeResult", "Gathered", "Tick", "check_pairing", "default_pairing", "finish", "interleave",
           "loop_generator", "one_by_one", "plain_batches", "plain_generate", "relay", "speculative_batches",
           "speculative_generate", "ticks", "turns", "uses_host_rows"]


@dataclass
class BridgeResult:
    """What a run produced and measured.

    Attributes
    ----------
    tokens : list of int arrays
        The generated continuation of each prompt.
    decode : DecodeResult or None
        The ledger (block efficiency, histogram, calls); ``None`` for plain sampling.
    timer : CallTimer
        Wall-clock of every draft / target / verifier call.
    seconds : float
        Wall-clock of the decode loop (prefill and the measurements of ``tv``, ``p_a``, ``q_a`` and
        ``expected_accepted`` excluded).
    tv, p_a, q_a : lists of float arrays, one per draft position
        TV(p_i, q_i) and the two-point pair at draft position i of every iteration that drafted it.
    expected_accepted : float array
        E[τ | draft] of every iteration (0 where nothing was drafted), from the verifier's exact law
        on the real rows.
    rounds : list of (generated tokens, seconds)
        One entry per batch of prompts, in order: what :func:`interleave` compares round by round.
    """

    tokens: list
    decode: DecodeResult | None
    timer: CallTimer
    seconds: float
    tv: list = field(default_factory=list)
    p_a: list = field(default_factory=list)
    q_a: list = field(default_factory=list)
    expected_accepted: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rounds: list = field(default_factory=list)

    @property
    def generated(self) -> int:
        return int(sum(len(t) for t in self.tokens))

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.seconds


def cache_room(prompts, n_new: int, width: int) -> int:
    """Slots a static cache needs: the longest prompt, the new tokens, and the widest call, with a margin."""
    return max(len(p) for p in prompts) + int(n_new) + int(width) + 2


def chunks(prompts, batch_size):
    """``(offset, prompts)`` batches of at most ``batch_size`` prompts (default: all at once)."""
    size = len(prompts) if batch_size is None else max(1, int(batch_size))
    return [(i, prompts[i:i + size]) for i in range(0, len(prompts), size)]


def uses_host_rows(pair) -> bool:
    """Whether a chain run of ``pair`` keeps its rows on the host by default: on a CPU, or with a deterministic
    drafter (prompt lookup drafts on the host)."""
    return str(pair.target.device) == "cpu" or pair.drafter.deterministic


def loop_generator(seed, device):
    """The loop's random generator: numpy for host rows (``device`` None), a seeded ``torch.Generator`` on
    ``device`` otherwise."""
    if device is None:
        return np.random.default_rng(seed)
    import torch

    return torch.Generator(device=device).manual_seed(int(seed))


def _bar(total: int, desc: str, progress):
    return tqdm(total=total, desc=desc, unit="tok", leave=False, disable=None if progress is None else not progress)


def plain_generate(target, prompts, max_new_tokens: int, *, sampling: Sampling = DEFAULT_SAMPLING, seed=0,
                   batch_size: int | None = None, progress: bool | None = None, cache: str = "auto") -> BridgeResult:
    """Sample ``max_new_tokens`` tokens per prompt from the target alone (the baseline), one call per token.

    The chain loop of :mod:`otspec.engine.loop` with no drafter. Prompts go through in batches of
    ``batch_size`` (default: all at once); ``cache`` is a kind of :func:`~llm_bridge.cache.make_cache`
    (``auto``: compiled static caches on CUDA, dynamic on CPU)."""
    return finish(plain_batches(target, prompts, max_new_tokens, sampling=sampling, seed=seed, batch_size=batch_size,
                                progress=progress, cache=cache))


def plain_batches(target, prompts, max_new_tokens: int, *, sampling: Sampling = DEFAULT_SAMPLING, seed=0,
                  batch_size: int | None = None, progress: bool | None = None, cache: str = "auto"):
    """:func:`plain_generate` as a generator: it yields a :class:`Tick` after every iteration and at the end of every
    batch, and returns the :class:`BridgeResult` (drive it with :func:`finish` or :func:`interleave`)."""
    rng, timer, got = np.random.default_rng(seed), CallTimer(target.device), Gathered(len(prompts))
    total = len(prompts) * max_new_tokens
    with _bar(total, "plain sampling", progress) as bar:
        for offset, chunk in chunks(prompts, batch_size):
            session = ModelSession(target.model, len(chunk), sampling, cache=cache, timer=timer, name="target",
                                   max_length=cache_room(chunk, max_new_tokens, 1))
            run = yield from ticks(chain_steps(None, session, None, None, max_new_tokens, rng, prompts=chunk,
                                               hooks=LoopHooks(bar=bar, timer=timer)), offset * max_new_tokens, total)
            del session  # free the batch's cache
            yield got.end_batch(run, offset, len(chunk))
    return BridgeResult(got.tokens, None, timer, got.seconds, rounds=got.rounds)


@dataclass(frozen=True)
class Tick:
    """What a ``*_batches`` generator yields: ``done``, the share of its run's work done so far (0 to 1), and
    ``round_end``, whether a batch of prompts (a timing round) has just ended."""

    done: float
    round_end: bool = False


@dataclass
class Gathered:
    """What a ``*_batches`` generator gathers over its batches of ``prompts`` prompts (:func:`chunks`): every sequence's
    tokens, the decoding seconds, and one timing round (generated tokens, seconds) per batch."""

    prompts: int
    tokens: list = field(default_factory=list)
    seconds: float = 0.0
    rounds: list = field(default_factory=list)

    def end_batch(self, run, offset: int, size: int) -> Tick:
        """Add the :class:`~otspec.engine.loop.LoopRun` of the ``size`` prompts from ``offset``; returns the round-end
        :class:`Tick` for the generator to yield."""
        self.tokens += list(run.tokens)
        self.seconds += run.seconds
        self.rounds.append((int(sum(len(t) for t in run.tokens)), run.seconds))
        return Tick((offset + size) / self.prompts, round_end=True)


def relay(steps, at):
    """Drive generator ``steps`` inside another generator (``yield from relay(...)``), yielding ``at(x)`` for every
    ``x`` it yields; returns what ``steps`` returns."""
    while True:
        try:
            x = next(steps)
        except StopIteration as stop:
            return stop.value
        yield at(x)


def ticks(steps, before: int, total: int):
    """Drive a loop's step generator (:func:`otspec.engine.loop.chain_steps` or ``tree_steps``) inside a ``*_batches``
    generator: a :class:`Tick` after every iteration, at (``before`` + the tokens it has generated) / ``total``.
    Returns the loop's :class:`~otspec.engine.loop.LoopRun`."""
    return relay(steps, lambda emitted: Tick((before + emitted) / total))


#: How :func:`interleave` pairs the runs: ``steps``, iteration by iteration, each run kept at the same share of its
#: work; ``batches``, a whole batch of prompts of each run in turn.
PAIRINGS = ("steps", "batches")


def check_pairing(pairing: str) -> str:
    """``pairing`` if it is one of :data:`PAIRINGS`; ``ValueError`` otherwise."""
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    return pairing


def default_pairing(target) -> str:
    """``steps`` on the CPU; ``batches`` on a device that queues its work (CUDA), where a suspended loop's work may
    still be running when another run starts."""
    return "batches" if str(getattr(target, "device", "cpu")).startswith("cuda") else "steps"


def _checked(i: int, tick):
    if not isinstance(tick, Tick):
        raise TypeError(f"interleave: run {i} yielded {tick!r}; a *_batches generator yields Tick objects")
    return tick


def turns(runs):
    """Drive ``runs`` (``*_batches`` generators) one iteration at a time, always of the run that has done the smallest
    share of its work (of those at the same share, one still inside its batch first, then the first listed), yielding
    ``(i, tick)`` after every iteration of run i; returns the runs' results in order. :func:`interleave`'s ``"steps"``
    pairing, and what a generator that holds several loops (the calibration's rounds) drives them with, so that each
    of its loops keeps the company the measured loops keep."""
    runs, results = list(runs), {}
    done, at_end = [0.0] * len(runs), [False] * len(runs)
    while len(results) < len(runs):
        i = min((j for j in range(len(runs)) if j not in results), key=lambda j: (done[j], at_end[j], j))
        try:
            tick = _checked(i, next(runs[i]))
        except StopIteration as stop:
            results[i] = stop.value
            continue
        done[i], at_end[i] = tick.done, tick.round_end
        yield i, tick
    return [results[i] for i in range(len(runs))]


def one_by_one(runs):
    """:func:`turns`' interface, each run whole in turn (where loops may not be suspended mid-batch: a device that
    queues its work, :func:`default_pairing`)."""
    results = []
    for i, run in enumerate(runs):
        results.append((yield from relay(run, lambda tick, i=i: (i, _checked(i, tick)))))
    return results


def interleave(runs, on_round=None, pairing: str = "steps") -> list:
    """Drive several ``*_batches`` generators in turn, so that plain and speculative decoding are timed in the same
    windows (ABAB…), whatever the machine does meanwhile; returns their results, in order. Each generator keeps its
    own random state, so the order changes no token. ``on_round(i)`` is called whenever run i ends a batch of prompts
    (a timing round).

    ``pairing="steps"``: one iteration at a time, always of the run that has done the smallest share of its work (of
    those at the same share, one still inside its batch first): the runs advance together, and every run's batch spans
    the same window, down to a few iterations, instead of one window per run (runs whose batches are the same shares
    of their work, as runs over the same prompts are, end a batch each before any starts its next). A loop's time
    while suspended is not counted (:func:`otspec.engine.loop.chain_steps`).

    ``pairing="batches"``: a whole batch of each run in turn (batch 1 of every run, then batch 2, …), the order rotating
    by one run per round (round r starts with run r mod n, then wraps: a cyclic Latin square), so that whatever favours
    a place in the round falls on every run in turn. On a device that queues its work (CUDA), a suspended loop's work
    may still be running when another starts, so only whole batches are paired there."""
    check_pairing(pairing)
    if pairing == "steps":
        def noted(step) -> None:
            if step[1].round_end and on_round is not None:
                on_round(step[0])
        return finish(relay(turns(runs), noted))
    runs, results = list(runs), {}
    at_end = [False] * len(runs)

    def advance(i) -> None:
        try:
            tick = next(runs[i])
        except StopIteration as stop:
            results[i] = stop.value
            return
        at_end[i] = _checked(i, tick).round_end
        if tick.round_end and on_round is not None:
            on_round(i)

    turn = 0
    while len(results) < len(runs):
        first = turn % len(runs)
        for i in [*range(first, len(runs)), *range(first)]:
            at_end[i] = False
            while i not in results and not at_end[i]:
                advance(i)
        turn += 1
    return [results[i] for i in range(len(runs))]


class _Records(Observer):
    """Per draft position: TV and two-point pairs; per iteration: E[τ | draft] from the verifier's law (an observer)."""

    def __init__(self, L: int, verifier, with_law: bool):
        self.tv, self.p_a, self.q_a = ([[] for _ in range(L)] for _ in range(3))
        self.law, self.verifier, self.with_law = [], verifier, with_law

    def on_chain(self, step) -> None:
        drafted = np.asarray(step.drafted)
        for i in range(int(drafted.max(initial=0))):
            sel = drafted > i
            p_rows, q_rows = to_host(step.draft_rows[sel, i]), to_host(step.target_rows[sel, i])
            self.tv[i].append(total_variation(p_rows, q_rows))
            pa, qa = two_point(p_rows, q_rows)
            self.p_a[i].append(pa)
            self.q_a[i].append(qa)
        if not self.with_law:
            return
        if drafted.max(initial=0) == 0:  # nothing drafted: τ = 0 for sure
            self.law.append(np.zeros(drafted.size))
            return
        width = int(drafted.max())
        law = self.verifier.law_ragged(step.tokens[:, :width], step.draft_rows[:, :width],
                                       step.target_rows[:, :width + 1], drafted, validate=False)
        self.law.append(to_host(law.expected_accepted))

    def columns(self):
        cat = [[np.concatenate(v) for v in lists if v] for lists in (self.tv, self.p_a, self.q_a)]
        return (*cat, np.concatenate(self.law) if self.law else np.zeros(0))


def speculative_generate(pair, prompts, verifier: Verifier, draft_length, max_new_tokens: int,
                         options: DecodeOptions = DEFAULT_OPTIONS) -> BridgeResult:
    """Generate ``max_new_tokens`` tokens for each prompt (token id lists) by speculative decoding.

    The chain loop of :mod:`otspec.engine.loop` over the target's and the drafter's sessions.
    ``draft_length`` is L or a controller from :mod:`otspec.engine.controllers` /
    :mod:`otspec.engine.heads`; a learned head gets the draft's last hidden states as ``features``.
    Controllers that need the target's rows while drafting (oracles) are refused: a real system
    does not have them. ``options`` (:class:`~llm_bridge.options.DecodeOptions`): sampling, seed, batches
    (``batch_size``), E[τ | draft] from the verifier's exact law (``record_law``), the cache kind, rows on the
    host or the model's device (``host_rows``: on the device they are drawn with a ``torch.Generator`` seeded
    from ``seed`` and the loop reads back only the accepted lengths) and ``observers``
    (:class:`otspec.engine.observers.Observer`) that see every iteration of every batch too.
    :func:`speculative_batches` is the same, one batch at a time.
    """
    return finish(speculative_batches(pair, prompts, verifier, draft_length, max_new_tokens, options))


def speculative_batches(pair, prompts, verifier: Verifier, draft_length, max_new_tokens: int,
                        options: DecodeOptions = DEFAULT_OPTIONS):
    """:func:`speculative_generate` as a generator: it yields a :class:`Tick` after every iteration and at the end of
    every batch, and returns the :class:`BridgeResult` (drive it with :func:`finish` or :func:`interleave`). The checks
    run before the first batch, when the generator is first advanced."""
    ctrl = as_controller(draft_length)
    if ctrl.oracle:
        raise ValueError(f"{ctrl!r} is an oracle (it reads the target's rows while drafting); the real loop can run "
                         "FixedDraftLength or a LearnedHeadController on the draft's hidden states")
    if verifier.layout != "chain":
        raise ValueError(f"{type(verifier).__name__} verifies {verifier.layout}; this loop drafts chains")
    if ctrl.reads_drafted_state and verifier.carries_residual:
        raise ValueError(f"{type(verifier).__name__} asks for the draft's row after the drafted tokens, which an "
                         "unlagged head has already fed; use a lagged head (lagged=True) or another verifier")
    L, N, o = ctrl.max_length, int(max_new_tokens), options
    sampling, cache = o.sampling, o.cache
    host_rows = uses_host_rows(pair) if o.host_rows is None else o.host_rows
    rng, timer = loop_generator(o.seed, None if host_rows else pair.target.device), CallTimer(pair.target.device)
    ledger, records, got = Ledger(len(prompts), N, L), _Records(L, verifier, o.record_law), Gathered(len(prompts))
    with _bar(len(prompts) * N, f"{verifier.name} L={L}", o.progress) as bar:
        for offset, chunk in chunks(prompts, o.batch_size):
            room = cache_room(chunk, N, L + 2)
            target = ModelSession(pair.target.model, len(chunk), sampling, cache=cache, max_length=room, timer=timer,
                                  name="target", host_rows=host_rows,
                                  hidden=target_hidden(pair.drafter))
            draft = pair.drafter.session(len(chunk), sampling, hidden=ctrl.needs_context, cache=cache,
                                         max_length=room, timer=timer, host_rows=host_rows)
            watch = LoopHooks(bar=bar, timer=timer, observers=[LedgerObserver(ledger, offset), records, *o.observers])
            run = yield from ticks(chain_steps(draft, target, verifier, ctrl, N, rng, prompts=chunk, hooks=watch),
                                   offset * N, len(prompts) * N)
            del target, draft  # free the batch's caches
            yield got.end_batch(run, offset, len(chunk))
    buf = np.stack(got.tokens)
    return BridgeResult(list(buf), ledger.result(buf, o.confidence), timer, got.seconds, *records.columns(),
                        rounds=got.rounds)
