"""The cost profile of a real pair, measured apart from the runs whose wall clock it predicts.

A record's measured speedup is plain decoding's time over speculative decoding's for the same tokens. Its
prediction must not see that wall clock, so every cost it uses is measured here, on *other prompts*
(the prediction prompts, disjoint from the measured ones) and in runs that are not the measured runs. After an
untimed warm-up (a fresh process decodes slowly at first), :func:`calibrate` goes through the calibration prompts
a batch at a time, and in each *round* measures, in one window:

* **plain decoding** of the batch at the run's batch size and token count: time per batch step, with every target
  call timed (these continuations are also the plain-decoding log the block-efficiency prediction replays);
* a **zero-acceptance dry run** of every chain configuration: the real loop, drafter, target and verifier at the
  run's batch, from a quarter of the continuation on (:func:`dry_tokens`: half the run's tokens), where a wrapper
  (:class:`ZeroAcceptance`) calls the verifier and then keeps none of the drafts (the target's own draw is
  emitted as the correction, so the text is like plain decoding's), so every iteration drafts its full length (a
  prompt-lookup drafter: what it finds) and the context grows one token per iteration. Each iteration's wall
  clock and its draft, target and verifier time are kept. Tree configurations run the tree loop with their own
  verifier, whole, from the prompt (its acceptance is not used: only what each iteration costs;
  :func:`dry_contexts`).

The loops of a round take turns iteration by iteration, as a record's measured runs do (plain decoding with the tree
dry runs, then the chain dry runs, which start from its continuation, with each other): an iteration costs what the
loop before it left behind, and a dry run that follows its own iterations is cheaper than its run
(:func:`calibration_batches`).

This machine's speed drifts by several per cent over minutes; plain decoding and the dry runs measured round by round
drift together, so their ratio, which the speedup is, holds (the measured runs are interleaved the same way,
:mod:`llm_bridge.timing`). A record goes further: it takes the calibration's rounds (:func:`calibration_batches`) in
turn with its measured runs' batches, so the profile sees the same windows as the runs it predicts (the drift is not the
same for every kind of work: in llm_int8 as first committed, calibrated after its runs, plain decoding ran 4 % slower
per step in the runs' window while the speculative iterations did not, and its v1 speedups came out 12-13 % above their
predictions), still on other prompts and never from the runs' wall clock; :func:`calibrate` measures the same rounds by
themselves where there are no runs (a forecast, which comes before any). A round whose plain decoding ran far slower
than the others (more than :data:`~llm_bridge.profile.ROUND_TOLERANCE`) is set aside with its dry runs
(:meth:`CostProfile.disturbed_rounds`). Then **t_target(n)**: a target call scoring n tokens per sequence, for every
width the runs use (1 … L_max + 1 and each tree's node count), at the run's batch size and halfway through the run's
context (the first batch's prompts plus half of their plain continuation), ``reps`` timed calls per width after one
untimed call; the median, with a bootstrap interval. It gives the shape of the cost in n; the dry runs give its level.
For a draft model, **t_draft(n)** at n = 1, 2 the same way: a draft session that did not feed its last drafted token
(every chain but v1 block verification's, which asks for the row after it) feeds it with the emitted token in its next
first call once a sequence kept its whole draft, and a zero-acceptance dry run never does
(:meth:`CostProfile.whole_draft_ms`).

The profile and the iteration costs it gives are :mod:`llm_bridge.profile`'s (:class:`CostProfile`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from otspec.engine.controllers import as_controller
from otspec.engine.loop import chain_steps
from otspec.engine.runstate import LoopHooks
from otspec.progress import tqdm

from .drafters import ModelDrafter
from .dry_runs import (
    IterationClock,
    ZeroAcceptance,
    config_key,
    dry_contexts,
    dry_run,
    dry_run_steps,
    dry_tokens,
    follows_plain,
    uses_host_rows,
)
from .loop import Tick, cache_room, chunks, default_pairing, finish, one_by_one, relay, turns
from .measure import CallTimer, median_interval
from .options import DecodeOptions
from .profile import CostProfile
from .sessions import ModelSession, target_hidden

__all__ = ["CostProfile", "Rounds", "ZeroAcceptance", "calibrate", "calibration_batches", "config_key", "dry_run",
           "dry_tokens", "median_interval", "profile_from_rounds"]

#: Timed target calls per width (after one untimed call).
PROFILE_REPS = 7
# ------------------------------------------------------------------------------------------------ measuring


def _plain_chunk(pair, chunk, n_tokens, *, sampling, cache, rng, timer, clock):
    """Plain decoding of one batch of prompts (timed by ``timer``, its steps by ``clock``), a generator: it yields after
    every step the share of the batch's tokens generated and returns the continuations."""
    session = ModelSession(pair.target.model, len(chunk), sampling, cache=cache, timer=timer, name="target",
                           max_length=cache_room(chunk, n_tokens, 1))
    clock.start()
    run = yield from relay(chain_steps(None, session, None, None, n_tokens, rng, prompts=chunk,
                                       hooks=LoopHooks(timer=timer, observers=[clock])),
                           lambda emitted: emitted / max(len(chunk) * n_tokens, 1))
    return [np.asarray(t) for t in run.tokens]


def _curve(pair, contexts, feed_tokens, widths, *, sampling, cache, reps, draft: bool = False):
    """{n: [ms]}: ``reps`` timed target calls (``draft``: calls of the drafter's own session, as the loop makes it)
    scoring n tokens per sequence from ``contexts``, one session per width, the widths taken in turn (rep by rep, so
    the machine's drift moves every width alike), each after one untimed call; every call commits one token, as a
    zero-acceptance iteration does."""
    timer, B = CallTimer(pair.target.device), len(contexts)
    room = cache_room(contexts, reps + 2, max(widths) + 2)
    sessions = {}
    for n in widths:
        sessions[n] = (pair.drafter.session(B, sampling, cache=cache, max_length=room, host_rows=uses_host_rows(pair))
                       if draft else
                       ModelSession(pair.target.model, B, sampling, cache=cache, max_length=room, timer=None,
                                    name="target", hidden=target_hidden(pair.drafter),
                                    host_rows=uses_host_rows(pair)))
        sessions[n].start(contexts)
    ones = np.ones(B, dtype=np.int64)
    for rep in range(reps + 1):
        for n, session in sessions.items():
            toks = feed_tokens[:, (np.arange(max(n - 1, 1)) + rep) % feed_tokens.shape[1]]
            counts = np.full(B, n - 1, dtype=np.int64)
            if rep == 0:
                session.feed(toks[:, :n - 1], counts)
            else:
                timer.call("target", n, session.feed, toks[:, :n - 1], counts)
            session.commit(toks[:, :1], ones)
    return {int(n): [1e3 * x for x in timer.records["target"][int(n)]] for n in widths}


@dataclass
class Rounds:
    """What :func:`calibration_batches` measured: plain decoding's columns (``plain``), every dry run's (``dry``, by
    configuration key), the plain continuations of the calibration prompts (``tokens``) and its wall clock."""

    plain: dict
    dry: dict
    tokens: list
    seconds: float


def calibration_batches(pair, prompts, max_new_tokens: int, options: DecodeOptions, *, chains=(), trees=(),
                        rule: str = "match"):
    """The calibration's rounds as a ``*_batches`` generator: per batch of ``prompts`` (the calibration prompts), plain
    decoding and every dry run, in one window, yielding a :class:`~llm_bridge.loop.Tick` after every iteration
    (a round's plain decoding and dry runs count as equal shares of it) and at the end of each round, so that
    :func:`llm_bridge.loop.interleave` can take the rounds in turn with the measured runs (the profile is then
    measured in the same windows as the runs it predicts, never from them; a loop's time while suspended is left out
    of its columns). Returns a :class:`Rounds` for :func:`profile_from_rounds`. ``chains`` / ``trees``: as
    :func:`calibrate` takes them; ``options``: sampling, batch size, cache kind, seed and progress bar.

    Within a round the loops take turns iteration by iteration (:func:`llm_bridge.loop.turns`), in the order the
    measured runs take theirs (plain decoding, then the configurations as listed), so that every dry run's iteration
    follows another loop's, as every measured run's does: a loop that follows its own iterations finds the memory as
    it left it, and on llm_trees (batch 8, 4x2x2x1) multi-round verification without replacement took 1.20 s a step
    alone against 1.49 s taking turns with the k-Seq and multi-round runs on the same tree (1.15 against 1.34 s with
    the allocator's thresholds fixed), which a dry run that went after its own iterations did not see. The dry runs
    that start from the prompts (trees) take turns with plain decoding; those that start from plain decoding's
    continuation (chains, :func:`dry_contexts`) take turns with each other once it has ended. On a device that queues
    its work (CUDA: :func:`llm_bridge.loop.default_pairing`) they run one after another, as before."""
    t0, N, configs = time.perf_counter(), int(max_new_tokens), [*chains, *trees]
    sampling, cache, seed, progress = options.sampling, options.cache, options.seed, options.progress
    batch_size = options.batch_size or max(len(prompts), 1)
    timer, rng, tokens = CallTimer(pair.target.device), np.random.default_rng(seed), []
    clock = IterationClock(timer)
    dry = {key: {} for key, _, _ in configs}
    rounds = []  # the round of every plain step
    batches = chunks(prompts, batch_size)
    bar = tqdm(total=len(batches) * (1 + len(configs)), desc="cost profile", unit="run", leave=False,
               disable=None if progress is None else not progress)
    units = 1 + len(configs)  # per round: plain decoding and every dry run
    free = [c for c in configs if not follows_plain(c[2])]  # dry runs that start from the prompts
    after = [c for c in configs if follows_plain(c[2])]  # and from plain decoding's continuation
    together = turns if default_pairing(pair.target) == "steps" else one_by_one

    def dry_loop(k, chunk, continuations, key, verifier, draft):
        contexts, n_dry = dry_contexts(draft, chunk, continuations, N)
        return relay(dry_run_steps(pair, verifier, draft, contexts, n_dry, sampling=sampling, cache=cache,
                                   seed=seed + k, rule=rule), Tick)

    def keep(k, key, cols) -> None:
        for name, values in cols.items():
            if name == "kind":
                dry[key]["kind"] = values
            else:
                dry[key].setdefault(name, []).extend(values)
        dry[key].setdefault("round", []).extend([k] * len(cols["wall_ms"]))

    with bar:
        for k, (_, chunk) in enumerate(batches):  # each round: plain decoding and every dry run, in one window
            done, shares = len(clock.rows), np.zeros(units)

            def share(offset, k=k, shares=shares):  # the share of the calibration done, as a Tick
                def at(step) -> Tick:
                    shares[offset + step[0]] = step[1].done
                    return Tick((k + shares.sum() / units) / len(batches))
                return at

            plain = relay(_plain_chunk(pair, chunk, N, sampling=sampling, cache=cache, rng=rng, timer=timer,
                                       clock=clock), Tick)
            first = yield from relay(together([plain, *(dry_loop(k, chunk, None, *c) for c in free)]), share(0))
            tokens += first[0]
            rounds += [k] * (len(clock.rows) - done)
            for (key, _, _), cols in zip(free, first[1:], strict=True):
                keep(k, key, cols)
            bar.update(len(first))
            continuations = tokens[-len(chunk):]
            later = yield from relay(together([dry_loop(k, chunk, continuations, *c) for c in after]),
                                     share(len(first)))
            for (key, _, _), cols in zip(after, later, strict=True):
                keep(k, key, cols)
            bar.update(len(later))
            yield Tick((k + 1) / len(batches), round_end=True)
    steps = clock.columns()
    plain = {"step_ms": steps["wall_ms"], "target_ms": steps["target_ms"], "round": rounds, "steps": len(rounds),
             "seconds": float(sum(steps["wall_ms"]) / 1e3)}
    return Rounds(plain, dry, tokens, time.perf_counter() - t0)


def profile_from_rounds(pair, prompts, max_new_tokens: int, rounds: Rounds, options: DecodeOptions, *, chains=(),
                        trees=(), prompt_ids=(), reps: int = PROFILE_REPS, interleaved: bool = False) -> CostProfile:
    """The cost profile from calibration ``rounds`` (:func:`calibration_batches` on the same ``prompts``, ``chains``
    and ``trees``): t_target(n) per width and, for a draft model, t_draft at widths 1 and 2 are timed now
    (:func:`_curve`; their shape is what the profile reads from them, the rounds give the level). ``interleaved``:
    whether the rounds went in turn with the measured runs (stated in the profile); ``options``: the sampling, batch
    size and cache kind the rounds were decoded with."""
    import torch

    t0, N = time.perf_counter(), int(max_new_tokens)
    sampling, cache, batch_size = options.sampling, options.cache, options.batch_size or max(len(prompts), 1)
    tokens = rounds.tokens
    B = min(int(batch_size), len(prompts))
    half = [np.concatenate([np.asarray(p, dtype=np.int64), t[:N // 2]]) for p, t in zip(prompts[:B], tokens[:B],
                                                                                           strict=True)]
    feed = np.stack([t[N // 2:] if N >= 4 else t for t in tokens[:B]])
    widths = sorted({1, *range(2, 1 + max((as_controller(d).max_length + 1 for _, _, d in chains), default=1)),
                     *(t.num_tokens + 1 for _, _, t in trees)})
    curve = _curve(pair, half, feed, widths, sampling=sampling, cache=cache, reps=reps)
    drafts = {} if not chains or not isinstance(pair.drafter, ModelDrafter) else _curve(  # its first call's width
        pair, half, feed, [1, 2], sampling=sampling, cache=cache, reps=reps, draft=True)
    return CostProfile(int(batch_size), N, [int(i) for i in prompt_ids], float(np.mean([c.size for c in half])),
                       t_target=curve, plain=rounds.plain, dry=rounds.dry, device=str(pair.target.device), cache=cache,
                       threads=int(torch.get_num_threads()), seconds=rounds.seconds + time.perf_counter() - t0,
                       t_draft=drafts, interleaved=bool(interleaved))


def calibrate(pair, prompts, max_new_tokens: int, options: DecodeOptions, *, chains=(), trees=(), prompt_ids=(),
              reps: int = PROFILE_REPS, rule: str = "match", rounds: Rounds | None = None) -> tuple[CostProfile, list]:
    """The cost profile on ``prompts`` (the calibration prompts; never the measured ones): :func:`calibration_batches`
    round after round, after an untimed warm-up, then :func:`profile_from_rounds`. ``rounds``: the rounds already
    measured in turn with a record's runs (``llm_bridge.timing.timed_runs(beside=calibration_batches(...))``, with the
    same prompts, configurations and seed); then only the curves are timed now, and the profile says
    ``interleaved_with_runs``.

    ``chains``: (key, verifier, L or a draft-length controller) for every chain configuration; ``trees``: (key,
    verifier, tree); keys name the dry runs (:func:`config_key`). Returns the profile and the plain continuations of
    ``prompts`` (the plain-decoding log's paths)."""
    from .timing import settle

    interleaved = rounds is not None
    if not interleaved:  # after an untimed warm-up: a fresh process decodes slowly at first
        batch_size = options.batch_size or max(len(prompts), 1)
        settle(pair.target, prompts[:batch_size], max_new_tokens, sampling=options.sampling, cache=options.cache)
        rounds = finish(calibration_batches(pair, prompts, max_new_tokens, options, chains=chains, trees=trees,
                                            rule=rule))
    profile = profile_from_rounds(pair, prompts, max_new_tokens, rounds, options, chains=chains, trees=trees,
                                  prompt_ids=prompt_ids, reps=reps, interleaved=interleaved)
    return profile, rounds.tokens
