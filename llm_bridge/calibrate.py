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

This machine's speed drifts by several per cent over minutes; plain decoding and the dry runs measured round by
round drift together, so their ratio, which the speedup is, holds (the measured runs are interleaved the same way,
:mod:`llm_bridge.timing`). A record goes further: it takes the calibration's rounds (:func:`calibration_batches`) in
turn with its measured runs' batches, so the profile sees the same windows as the runs it predicts (the drift is not
the same for every kind of work: in llm_int8 as first committed, calibrated after its runs, plain decoding ran 4 %
slower per step in the runs' window while the speculative iterations did not, and its v1 speedups came out 12-13 %
above their predictions), still on other prompts and never from the runs' wall clock; :func:`calibrate` measures the
same rounds by themselves where there are no runs (a forecast, which comes before any). A round whose plain decoding
ran far slower than the others (more than :data:`ROUND_TOLERANCE`) is set aside with its dry runs
(:meth:`CostProfile.disturbed_rounds`). Then **t_target(n)**: a target call scoring n tokens per sequence, for every
width the runs use (1 … L_max + 1 and each tree's node count), at the run's batch size and halfway through the run's
context (the first batch's prompts plus half of their plain continuation), ``reps`` timed calls per width after one
untimed call; the median, with a bootstrap interval. It gives the shape of the cost in n; the dry runs give its
level. For a draft model,
**t_draft(n)** at n = 1, 2 the same way: a draft session that did not feed its last drafted token (every chain but
v1 block verification's, which asks for the row after it) feeds it with the emitted token in its next first call
once a sequence kept its whole draft, and a zero-acceptance dry run never does (:meth:`CostProfile.whole_draft_ms`).

From a dry run, :meth:`CostProfile.iteration_cost` builds the cost of an iteration that makes k draft calls and
scores a widest draft of w tokens (a tree: w nodes):

    (k + extra) · t_draft + scale · t_target(w + 1) + t_verify + overhead_base + overhead_per_token · w
    [+ t_draft(2) - t_draft(1) after an iteration in which some sequence of the batch kept its whole draft],

with t_draft the mean draft call, ``extra`` the draft calls beyond one per drafted token (v1 block verification asks for
the row after the draft), ``scale`` the dry run's target calls over the same widths' calls in isolation (a target call
after draft calls costs more than one after another: caches) — these two over every dry run that drafts the same way
(:meth:`CostProfile.same_draft`: token, block and v1 block verification at one L make the same model calls), so that one
configuration's timing noise does not move its prediction alone — t_verify the mean verifier call and the overhead the
rest of the iteration's wall clock (the loop's own work): plain decoding's own work per step where nothing is drafted,
growing linearly with the drafted tokens to the dry run's mean (v1 block verification's residual rows are most of it,
and they scale with the draft: a prompt-lookup run, which mostly drafts nothing, spent a third of its dry run's overhead
per iteration at L = 8, charged a constant). With its own draft and target calls it would reproduce the dry run's mean
iteration by construction. Pooled, it moves by that run's model-call noise: in the five batch-8 records of 2026-11-28/29
the same model calls cost up to 6 % more or less per iteration from one verifier's dry run to another's in the same
rounds (llm_int8 token L=4 against block L=4: 365 against 345 ms predicted per iteration for the same calls), and the
predictions made from each run's own costs missed by up to 11-12 %. Other widths (a draft cut short at the end of a
sequence, a prompt-lookup draft of any length, a trie of any size) move along the measured t_target(n).
:func:`otspec.engine.predict.predict_wall_clock` then charges these costs to the prediction's replays.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from otspec.engine.controllers import as_controller
from otspec.engine.loop import chain_steps

from .drafters import ModelDrafter
from .dry_runs import (
    IterationClock,
    ZeroAcceptance,
    config_key,
    dry_contexts,
    dry_run,
    dry_run_steps,
    dry_tokens,
    uses_host_rows,
)
from .loop import Tick, cache_room, chunks, finish, relay
from .measure import CallTimer, median_interval
from .sessions import ModelSession

__all__ = ["CostProfile", "Rounds", "ZeroAcceptance", "calibrate", "calibration_batches", "config_key", "dry_run",
           "dry_tokens", "median_interval", "profile_from_rounds"]

#: Timed target calls per width (after one untimed call).
PROFILE_REPS = 7
#: A calibration round whose plain decoding ran more than this share slower per step than the median round (of at
#: least three) is set aside, its plain steps and its dry runs alike (:meth:`CostProfile.disturbed_rounds`).
ROUND_TOLERANCE = 0.25
#: A target call at width n + 1 counts as cheaper than at n (non-monotone) only when its median is below n's
#: interval by more than this share of n's median (timing noise of a quiet machine).
MONOTONE_TOLERANCE = 0.03


@dataclass
class CostProfile:
    """Call costs of a pair at one batch size, measured apart from the runs (module docstring).

    Attributes
    ----------
    batch_size, max_new_tokens : int
        The runs' batch and tokens per prompt.
    prompt_ids : list of int
        The calibration prompts (lines of the prompt file, 0-based, comments skipped).
    context_tokens : float
        Mean context length per sequence at the timed t_target calls.
    t_target : dict
        {n: [ms, ...]}: timed target calls scoring n tokens per sequence.
    t_draft : dict
        {n: [ms, ...]}: timed draft-model calls feeding n tokens per sequence (n = 1, 2; empty for a head or
        prompt lookup).
    plain : dict
        Plain decoding of the calibration prompts: ``step_ms`` (each step's wall clock, first steps of a batch
        excluded), ``target_ms`` (its target calls), ``steps``, ``seconds``.
    dry : dict
        {configuration key: per-iteration columns ``wall_ms``, ``draft_ms``, ``target_ms``, ``verify_ms``,
        ``calls``, ``width`` and ``kind`` (chain or tree)}.
    device, cache : str
    threads : int
    seconds : float
        Wall clock of the whole calibration.
    interleaved : bool
        Whether the calibration rounds went in turn with the measured runs' batches (``interleaved_with_runs``),
        so that the profile saw the machine in the same windows as the runs it predicts.
    """

    batch_size: int
    max_new_tokens: int
    prompt_ids: list
    context_tokens: float
    t_target: dict
    plain: dict
    dry: dict = field(default_factory=dict)
    device: str = "cpu"
    cache: str = "dynamic"
    threads: int = 1
    seconds: float = 0.0
    t_draft: dict = field(default_factory=dict)
    interleaved: bool = False

    # --------------------------------------------------------------------------------------- derived quantities
    def widths(self) -> np.ndarray:
        return np.array(sorted(int(n) for n in self.t_target), dtype=np.int64)

    def target_curve(self) -> dict:
        """{n: median_interval of t_target(n)}."""
        return {int(n): median_interval(v, seed=int(n)) for n, v in sorted(self.t_target.items(), key=lambda x: int(x[0]))}

    def t_target_ms(self, n):
        """Median t_target(n) at any width (arrays too): linear between measured widths, linear beyond the last two."""
        ns = self.widths()
        meds = np.array([np.median(self.t_target[k] if k in self.t_target else self.t_target[str(k)])
                         for k in ns.tolist()])
        n = np.asarray(n, dtype=np.float64)
        out = np.interp(n, ns, meds)
        if ns.size >= 2:
            slope = (meds[-1] - meds[-2]) / (ns[-1] - ns[-2])
            out = np.where(n > ns[-1], meds[-1] + slope * (n - ns[-1]), out)
        return out

    def disturbed_rounds(self) -> list[int]:
        """The calibration rounds set aside: those whose plain decoding ran more than :data:`ROUND_TOLERANCE` slower
        per step than the median round (with at least three rounds). The rounds decode different prompts, so their
        steps differ by several per cent; a round far beyond that met a disturbance that the dry runs beside it need
        not share. In the llm_ngram record of 2026-11-27 one round's plain steps took 98 ms against 67-70 ms in the
        other three, while its dry runs did not slow down, and the mean plain step moved every prediction of the
        record up by 8 %. Nothing of the measured runs enters this choice."""
        if "round" not in self.plain:
            return []
        step, rounds = np.asarray(self.plain["step_ms"], dtype=np.float64), np.asarray(self.plain["round"])
        ids = np.unique(rounds)
        if ids.size < 3:
            return []
        means = np.array([step[rounds == k].mean() for k in ids])
        return [int(k) for k, m in zip(ids, means, strict=True) if m > (1.0 + ROUND_TOLERANCE) * np.median(means)]

    def _kept(self, columns: dict) -> np.ndarray:
        """Which rows of ``columns`` (plain decoding's or a dry run's) belong to rounds that are not set aside."""
        n = len(columns["step_ms"] if "step_ms" in columns else columns["wall_ms"])
        bad = self.disturbed_rounds()
        if not bad or "round" not in columns:
            return np.ones(n, dtype=bool)
        return ~np.isin(np.asarray(columns["round"]), bad)

    def plain_step_ms(self) -> float:
        """Plain decoding's mean wall clock per batch step (rounds set aside excluded)."""
        return float(np.mean(np.asarray(self.plain["step_ms"], dtype=np.float64)[self._kept(self.plain)]))

    def whole_draft_ms(self, extra_calls: float, kind: str = "chain") -> float:
        """What a batch iteration costs more after one in which a sequence kept its whole draft: t_draft(2) -
        t_draft(1) (medians, at least 0) for a chain whose draft session leaves its last drafted token unfed (no
        extra draft call per iteration), else 0 (a tree's dry run is the tree loop itself; a head or prompt lookup
        has no curve)."""
        if kind != "chain" or extra_calls >= 0.5 or not {1, 2} <= {int(n) for n in self.t_draft}:
            return 0.0
        med = {int(n): float(np.median(v)) for n, v in self.t_draft.items()}
        return max(med[2] - med[1], 0.0)

    def config(self, key: str) -> dict:
        """The iteration cost parameters of a dry-run configuration: ``t_draft``, ``extra_calls``, ``scale``,
        ``t_verify``, ``overhead`` (ms), ``after_whole`` (:meth:`whole_draft_ms`) and ``iteration_ms`` (the dry
        run's mean iteration)."""
        if key not in self.dry:
            raise KeyError(f"no dry run for {key!r} in this profile (it has {sorted(self.dry)})")
        d = self._dry_columns(key)
        width, calls = d["width"], d["calls"]
        drafted = width if self.dry[key].get("kind", "chain") == "chain" else (
            np.asarray(self.dry[key]["trace_calls"], dtype=np.float64)[self._kept(self.dry[key])]
            if "trace_calls" in self.dry[key] else calls)
        verified = width > 0
        overhead = float(np.mean(d["wall_ms"] - d["draft_ms"] - d["target_ms"] - d["verify_ms"]))
        base = min(self.plain_overhead_ms(), overhead)
        extra = float(np.mean(calls[verified] - drafted[verified])) if verified.any() else 0.0
        own, pool = self._model_costs([key]), self.same_draft(key)
        shared = self._model_costs(pool)
        return {"t_draft": shared["t_draft"], "extra_calls": extra,
                "after_whole": self.whole_draft_ms(extra, self.dry[key].get("kind", "chain")),
                "scale": shared["scale"], "pooled_over": pool, "own_t_draft": own["t_draft"],
                "own_scale": own["scale"],
                "t_verify": float(d["verify_ms"][verified].mean()) if verified.any() else 0.0,
                "overhead": overhead, "overhead_base": base,
                "overhead_per_token": (overhead - base) / float(width.mean()) if width.mean() > 0 else 0.0,
                "iteration_ms": float(d["wall_ms"].mean()), "iterations": int(width.size)}

    def same_draft(self, key: str) -> list[str]:
        """The dry runs that draft as ``key`` does: the same kind (chain or tree) and the same draft (the key after
        its verifier: ``L=4``, ``2x2x1``, a controller's label), ``key`` among them. They make the same draft and
        target calls and differ only in the verifier (and v1 block verification's extra draft call per iteration),
        so :meth:`config` takes the draft call's cost and the target calls' scale from all of them together."""
        kind, draft = self.dry[key].get("kind", "chain"), key.split(":", 1)[-1]
        return sorted(k for k, v in self.dry.items() if v.get("kind", "chain") == kind and k.split(":", 1)[-1] == draft)

    def _dry_columns(self, key: str) -> dict:
        """A dry run's numeric columns, rounds set aside excluded."""
        keep = self._kept(self.dry[key])
        return {k: np.asarray(v, dtype=np.float64)[keep] for k, v in self.dry[key].items()
                if k not in ("kind", "round", "trace_calls")}

    def _model_costs(self, keys) -> dict:
        """``t_draft`` (draft time per draft call) and ``scale`` (target time over the same widths' calls timed in
        isolation) over the iterations of the dry runs ``keys`` together."""
        cols = [self._dry_columns(k) for k in keys]
        calls = sum(float(c["calls"].sum()) for c in cols)
        draft = sum(float(c["draft_ms"].sum()) for c in cols)
        target = sum(float(c["target_ms"].sum()) for c in cols)
        isolated = sum(float(self.t_target_ms(c["width"] + 1).sum()) for c in cols)
        return {"t_draft": draft / calls if calls > 0 else 0.0, "scale": target / isolated}

    def plain_overhead_ms(self) -> float:
        """Plain decoding's own work per step (its wall clock outside the target call), 0 where not recorded."""
        if "target_ms" not in self.plain:
            return 0.0
        gap = np.asarray(self.plain["step_ms"], dtype=np.float64) - np.asarray(self.plain["target_ms"], dtype=np.float64)
        return max(float(gap[self._kept(self.plain)].mean()), 0.0)

    def iteration_cost(self, key: str):
        """``cost(calls, width)`` in ms for :func:`otspec.engine.predict.predict_wall_clock` (module docstring)."""
        c = self.config(key)

        def cost(calls, width):
            calls, width = np.asarray(calls, dtype=np.float64), np.asarray(width, dtype=np.float64)
            drafted = width > 0
            return ((calls + c["extra_calls"] * drafted) * c["t_draft"] + c["scale"] * self.t_target_ms(width + 1)
                    + c["t_verify"] * drafted + c["overhead_base"] + c["overhead_per_token"] * width)

        return cost

    def factors(self, key: str, draws: int, seed: int = 0, rounds: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Relative bootstrap resamples (plain step, dry-run iteration) of the profile's means, ``draws`` each. The
        calibration's rounds (plain decoding and every dry run of one batch, in one window) are resampled together,
        so a stretch where the machine ran slower moves both; without rounds, the timed steps and iterations are
        resampled on their own.

        ``rounds``: how many rounds each draw takes (default: as many as the profile kept, the uncertainty of its
        means). With the number of timing rounds of a run still to be measured, the draws are the spread of that
        run's own means: its timing noise, as the calibration saw the machine's round-to-round noise. A profile
        without rounds has no such spread to give, so its factors are then all 1."""
        rng = np.random.default_rng(seed)
        plain = np.asarray(self.plain["step_ms"], dtype=np.float64)
        wall = np.asarray(self.dry[key]["wall_ms"], dtype=np.float64)
        if "round" not in self.plain or "round" not in self.dry[key]:
            if rounds is not None:
                return np.ones(draws), np.ones(draws)
            return tuple(x[rng.integers(0, x.size, size=(draws, x.size))].mean(axis=1) / x.mean() for x in (plain, wall))
        ids = np.setdiff1d(np.union1d(self.plain["round"], self.dry[key]["round"]), self.disturbed_rounds()).astype(
            np.int64)
        size = ids.size if rounds is None else int(rounds)
        if size < 1:
            raise ValueError(f"rounds: expected a positive number of rounds, got {rounds}")
        pick = ids[rng.integers(0, ids.size, size=(draws, size))]
        out = []
        for x, of in ((plain, self.plain["round"]), (wall, self.dry[key]["round"])):
            of = np.asarray(of, dtype=np.int64)  # the round of each step / iteration
            ref = x[np.isin(of, ids)].mean()  # the mean the profile uses: rounds set aside excluded
            total = np.bincount(of, weights=x, minlength=ids.max() + 1)[pick].sum(axis=1)
            count = np.bincount(of, minlength=ids.max() + 1)[pick].sum(axis=1)
            out.append(np.where(count > 0, total / np.maximum(count, 1), ref) / ref)
        return out[0], out[1]

    def monotone(self) -> dict:
        """Whether t_target(n) grows with n up to noise: ``{"monotone", "exceptions"}`` (pairs n, n + 1 whose
        medians fall by more than the noise: :data:`MONOTONE_TOLERANCE` below n's interval)."""
        curve = self.target_curve()
        ns = sorted(curve)
        bad = [[a, b] for a, b in zip(ns, ns[1:], strict=False)
               if curve[b]["median"] < curve[a]["low"] - MONOTONE_TOLERANCE * curve[a]["median"]]
        return {"monotone": not bad, "exceptions": bad, "tolerance": MONOTONE_TOLERANCE}

    # --------------------------------------------------------------------------------------------- JSON
    def to_json(self) -> dict:
        """The record's ``profile``: the raw samples (``samples``) and their summaries — ``t_target_ms`` {n: median},
        ``t_target_ms_interval`` {n: {low, high}}, ``t_draft_ms`` (per configuration and the chain runs' mean),
        ``plain_ms_per_step``, ``configs`` (:meth:`config` per dry run) and ``monotone``."""
        curve = self.target_curve()
        configs = {k: self.config(k) for k in self.dry}
        chain_drafts = [c["t_draft"] for k, c in configs.items() if self.dry[k].get("kind") == "chain" and c["t_draft"]]
        return {"kind": "cost_profile", "batch_size": self.batch_size, "max_new_tokens": self.max_new_tokens,
                "prompt_ids": list(self.prompt_ids), "context_tokens": self.context_tokens,
                "device": self.device, "cache": self.cache, "threads": self.threads, "seconds": self.seconds,
                "t_target_ms": {str(n): c["median"] for n, c in curve.items()},
                "t_target_ms_interval": {str(n): {"low": c["low"], "high": c["high"], "reps": c["n"]}
                                         for n, c in curve.items()},
                "t_draft_ms": float(np.mean(chain_drafts)) if chain_drafts else 0.0,
                "t_draft_width_ms": {str(n): float(np.median(v)) for n, v in sorted(self.t_draft.items())},
                "plain_ms_per_step": self.plain_step_ms(), "configs": configs, "monotone": self.monotone(),
                "disturbed_rounds": self.disturbed_rounds(), "round_tolerance": ROUND_TOLERANCE,
                "interleaved_with_runs": self.interleaved,
                "samples": {"t_target": {str(n): list(map(float, v)) for n, v in self.t_target.items()},
                            "t_draft": {str(n): list(map(float, v)) for n, v in self.t_draft.items()},
                            "plain": self.plain, "dry": self.dry}}

    @classmethod
    def from_json(cls, data: dict) -> CostProfile:
        if not isinstance(data, dict) or data.get("kind") != "cost_profile":
            raise ValueError("profile: expected a cost profile's JSON (kind = cost_profile), e.g. a record's 'profile'")
        s = data["samples"]
        return cls(int(data["batch_size"]), int(data["max_new_tokens"]), list(data["prompt_ids"]),
                   float(data["context_tokens"]), {int(n): list(v) for n, v in s["t_target"].items()}, dict(s["plain"]),
                   dict(s["dry"]), data.get("device", "cpu"), data.get("cache", "dynamic"), int(data.get("threads", 1)),
                   float(data.get("seconds", 0.0)), {int(n): list(v) for n, v in s.get("t_draft", {}).items()},
                   bool(data.get("interleaved_with_runs", False)))


# ------------------------------------------------------------------------------------------------ measuring


def _plain_chunk(pair, chunk, n_tokens, *, sampling, cache, rng, timer, clock):
    """Plain decoding of one batch of prompts (timed by ``timer``, its steps by ``clock``), a generator: it yields after
    every step the share of the batch's tokens generated and returns the continuations."""
    session = ModelSession(pair.target.model, len(chunk), sampling, cache=cache, timer=timer, name="target",
                           max_length=cache_room(chunk, n_tokens, 1))
    clock.start()
    run = yield from relay(chain_steps(None, session, None, None, n_tokens, rng, prompts=chunk, timer=timer,
                                       observers=[clock]), lambda emitted: emitted / max(len(chunk) * n_tokens, 1))
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
                                    name="target", hidden=pair.drafter.reads_target_features,
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


def calibration_batches(pair, prompts, max_new_tokens: int, *, chains=(), trees=(), sampling, batch_size: int,
                        cache: str, seed: int = 0, rule: str = "match", progress=None):
    """The calibration's rounds as a ``*_batches`` generator: per batch of ``prompts`` (the calibration prompts), plain
    decoding and then every dry run, in one window, yielding a :class:`~llm_bridge.loop.Tick` after every iteration
    (a round's plain decoding and dry runs count as equal shares of it) and at the end of each round, so that
    :func:`llm_bridge.loop.interleave` can take the rounds in turn with the measured runs (the profile is then
    measured in the same windows as the runs it predicts, never from them; a loop's time while suspended is left out
    of its columns). Returns a :class:`Rounds` for
    :func:`profile_from_rounds`. ``chains`` / ``trees``: as :func:`calibrate` takes them."""
    t0, N, configs = time.perf_counter(), int(max_new_tokens), [*chains, *trees]
    timer, rng, tokens = CallTimer(pair.target.device), np.random.default_rng(seed), []
    clock = IterationClock(timer)
    dry = {key: {} for key, _, _ in configs}
    rounds = []  # the round of every plain step
    batches = chunks(prompts, batch_size)
    bar = tqdm(total=len(batches) * (1 + len(configs)), desc="cost profile", unit="run", leave=False,
               disable=None if progress is None else not progress)
    units = 1 + len(configs)  # per round: plain decoding, then every dry run

    def share(k, unit, inner) -> Tick:  # the share of the calibration done, as a Tick (a round's units count alike)
        return Tick((k + (unit + inner) / units) / len(batches))

    with bar:
        for k, (_, chunk) in enumerate(batches):  # each round: plain decoding, then every dry run, in one window
            done = len(clock.rows)
            tokens += yield from relay(_plain_chunk(pair, chunk, N, sampling=sampling, cache=cache, rng=rng,
                                                    timer=timer, clock=clock), lambda x, k=k: share(k, 0, x))
            rounds += [k] * (len(clock.rows) - done)
            bar.update()
            for unit, (key, verifier, draft) in enumerate(configs, 1):
                contexts, n_dry = dry_contexts(draft, chunk, tokens[-len(chunk):], N)
                cols = yield from relay(dry_run_steps(pair, verifier, draft, contexts, n_dry, sampling=sampling,
                                                      cache=cache, seed=seed + k, rule=rule),
                                        lambda x, k=k, unit=unit: share(k, unit, x))
                for name, values in cols.items():
                    if name == "kind":
                        dry[key]["kind"] = values
                    else:
                        dry[key].setdefault(name, []).extend(values)
                dry[key].setdefault("round", []).extend([k] * len(cols["wall_ms"]))
                bar.update()
            yield Tick((k + 1) / len(batches), round_end=True)
    steps = clock.columns()
    plain = {"step_ms": steps["wall_ms"], "target_ms": steps["target_ms"], "round": rounds, "steps": len(rounds),
             "seconds": float(sum(steps["wall_ms"]) / 1e3)}
    return Rounds(plain, dry, tokens, time.perf_counter() - t0)


def profile_from_rounds(pair, prompts, max_new_tokens: int, rounds: Rounds, *, chains=(), trees=(), sampling,
                        batch_size: int, cache: str, prompt_ids=(), reps: int = PROFILE_REPS,
                        interleaved: bool = False) -> CostProfile:
    """The cost profile from calibration ``rounds`` (:func:`calibration_batches` on the same ``prompts``, ``chains``
    and ``trees``): t_target(n) per width and, for a draft model, t_draft at widths 1 and 2 are timed now
    (:func:`_curve`; their shape is what the profile reads from them, the rounds give the level). ``interleaved``:
    whether the rounds went in turn with the measured runs (stated in the profile)."""
    import torch

    t0, N = time.perf_counter(), int(max_new_tokens)
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
                       curve, rounds.plain, rounds.dry, str(pair.target.device), cache, int(torch.get_num_threads()),
                       rounds.seconds + time.perf_counter() - t0, drafts, bool(interleaved))


def calibrate(pair, prompts, max_new_tokens: int, *, chains=(), trees=(), sampling, batch_size: int, cache: str,
              seed: int = 0, prompt_ids=(), reps: int = PROFILE_REPS, rule: str = "match", progress=None,
              rounds: Rounds | None = None) -> tuple[CostProfile, list]:
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
        settle(pair.target, prompts[:batch_size], max_new_tokens, sampling=sampling, cache=cache)
        rounds = finish(calibration_batches(pair, prompts, max_new_tokens, chains=chains, trees=trees,
                                            sampling=sampling, batch_size=batch_size, cache=cache, seed=seed,
                                            rule=rule, progress=progress))
    profile = profile_from_rounds(pair, prompts, max_new_tokens, rounds, chains=chains, trees=trees, sampling=sampling,
                                  batch_size=batch_size, cache=cache, prompt_ids=prompt_ids, reps=reps,
                                  interleaved=interleaved)
    return profile, rounds.tokens
