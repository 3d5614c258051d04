"""The timing protocol every real-pair record follows, and its load protection.

* :func:`timed_runs`: an untimed warm-up, plain sampling before, plain sampling and every run taking turns
  (iteration by iteration or batch by batch: each batch a timing round measured in one window), plain sampling
  after, the check;
* :func:`timing_check` and :class:`LoadMeter`: plain sampling before and after must agree, and other work must leave
  this process its cores.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

from tqdm.auto import tqdm

from otspec.checks import check_size
from otspec.clitools import integer

from .loop import (
    PAIRINGS,
    check_pairing,
    default_pairing,
    interleave,
    plain_batches,
    plain_generate,
)
from .options import DecodeOptions

__all__ = ["MAX_BASELINE_DRIFT", "MIN_OTHER_LOAD", "PAIRING_METHODS", "ROUND_ORDER", "LoadMeter", "TimedRuns", "TimingPlan",
           "add_timing_arguments", "default_pairing", "load_average", "settle", "timed_runs", "timing_check",
           "torch_threads"]

#: A record's timing is unreliable when plain sampling's time per token drifts by more than this between the start
#: and the end of its runs, or when other work takes more of the machine than this process leaves free.
MAX_BASELINE_DRIFT = 0.10
#: The least load average of other work counted as contention (one core): the load average less this process's own
#: CPU use is an estimate, off by a few tenths on a quiet machine.
MIN_OTHER_LOAD = 1.0

#: How the drift is measured, as records state it.
TIMING_METHOD = ("plain sampling with one seed before and after the measured runs (the same tokens, so the same work), "
                 "ms per token compared")

_START = (time.monotonic(), time.process_time())  # this process, when llm_bridge was imported


class LoadMeter:
    """The load other work puts on the machine: the 1-minute load average less this process's own CPU use (CPU
    seconds per second) over about the last minute. ``sample()`` notes the process's CPU time (call it now and then,
    e.g. once per timing round); ``read()`` returns ``{"load_average", "own_cpu", "other_load"}``."""

    WINDOW = 60.0

    def __init__(self):
        self.samples = [_START]

    def sample(self) -> None:
        self.samples.append((time.monotonic(), time.process_time()))

    def read(self) -> dict:
        load, now = load_average(), (time.monotonic(), time.process_time())
        older = [x for x in self.samples if now[0] - x[0] >= self.WINDOW]
        ref = older[-1] if older else self.samples[0]
        own = (now[1] - ref[1]) / max(now[0] - ref[0], 1e-9)
        self.samples.append(now)
        return {"load_average": load, "own_cpu": own, "other_load": None if load is None else max(load - own, 0.0)}


def timing_check(before_ms: float, after_ms: float, readings, cpus: int, threads: int = 1, rounds=()) -> dict:
    """The ``timing`` object of a record: plain sampling's ms per token before and after the measured runs, their
    drift, the load readings (:meth:`LoadMeter.read`, at the start and the end; ``rounds``: after every timing
    round, as ``load_rounds``) and ``unreliable_timing`` (``None``, or the reason: a drift above
    :data:`MAX_BASELINE_DRIFT`, or other work above the cores this process's ``threads`` leave free, and at least
    :data:`MIN_OTHER_LOAD`, in any reading)."""
    drift = abs(after_ms / before_ms - 1.0) if before_ms > 0 else float("inf")
    reasons = []
    if drift > MAX_BASELINE_DRIFT:
        reasons.append(f"plain sampling drifted {100 * drift:.1f} % between the start and the end of the runs "
                       f"({before_ms:.2f} -> {after_ms:.2f} ms per token; limit {100 * MAX_BASELINE_DRIFT:.0f} %)")
    free = max(cpus - threads, MIN_OTHER_LOAD)
    rounds = list(rounds)
    others = [r["other_load"] for r in list(readings) + rounds if r is not None and r.get("other_load") is not None]
    if others and max(others) > free:
        reasons.append(f"other work kept the machine busy: load average {max(others):.2f} beyond this process's own, "
                       f"on {cpus} cores of which this run's {threads} threads leave {free:g} free")
    return {"method": TIMING_METHOD, "baseline_before_ms_per_token": before_ms, "baseline_after_ms_per_token": after_ms,
            "baseline_drift": drift, "load": list(readings),
            "load_average": [None if r is None else r.get("load_average") for r in readings], "load_rounds": rounds,
            "cpus": cpus,
            "threads": threads, "unreliable_timing": "; ".join(reasons) or None}


@dataclass
class TimedRuns:
    """What :func:`timed_runs` measured: plain sampling interleaved with the runs (``plain``, its ``baseline``
    entry), every run's result in order, the plain run after them (same seed as the one before: an independent
    plain-decoding log for the predictions), the record's ``timing`` object and what the ``beside`` generator
    returned (``None`` without one)."""

    plain: object
    baseline: dict
    results: list
    after: object
    timing: dict
    beside: object = None


#: Warm-up passes (one batch of plain sampling each) run until two in a row agree within this (ms per token)...
SETTLE_TOLERANCE = 0.05
#: ...or at most this many, after the caller's own warm-up.
MAX_SETTLE_PASSES = 8


def settle(target, prompts, max_new_tokens: int, *, sampling, cache: str, tolerance: float = SETTLE_TOLERANCE,
           max_passes: int = MAX_SETTLE_PASSES) -> dict:
    """Untimed warm-up that ends when the machine has settled: plain sampling of ``prompts`` (one batch) again and
    again until two passes in a row agree within ``tolerance`` in ms per token (at least two passes, at most
    ``max_passes``). Returns ``{"ms_per_token": [...], "settled": bool}`` for the record."""
    times = []
    for _ in range(max_passes):
        r = plain_generate(target, prompts, max_new_tokens, sampling=sampling, seed=0, progress=False, cache=cache)
        times.append(1e3 * r.seconds / r.generated)
        if len(times) >= 2 and abs(times[-1] / times[-2] - 1.0) <= tolerance:
            return {"ms_per_token": times, "settled": True, "tolerance": tolerance}
    return {"ms_per_token": times, "settled": False, "tolerance": tolerance}


def phase_log(label: str, progress: bool | None = None):
    """A callable ``phase(what)`` that writes ``"<label>: <what> at <t> s"`` (seconds since this call) to stderr: one
    line per phase of a long record, so that its log says how far it has got even where no progress bar is drawn (a
    log file). ``progress=False`` silences it."""
    start = time.perf_counter()

    def phase(what: str) -> None:
        if progress is not False:
            print(f"{label}: {what} at {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return phase


#: How :func:`interleave` orders each timing round with ``pairing="batches"`` (records before this entry ran every
#: round in one fixed order: plain sampling, the runs as listed, then the calibration rounds).
ROUND_ORDER = "rotating: round r starts with run r mod n (plain sampling is run 0), then wraps"

#: How :func:`interleave` paired the runs, as a record states it (``timing["pairing"]``; records before this entry
#: paired whole batches).
PAIRING_METHODS = {
    "steps": "iteration by iteration: the run with the smallest share of its work done goes next, so that every run's "
             "batch of prompts (a timing round) spans the same window, down to a few iterations; a loop's time while "
             "suspended is not counted",
    "batches": "batch by batch: a whole batch of prompts of each run in turn, the order rotating (round_order)",
}


def add_timing_arguments(ap) -> None:
    """The timing protocol's options of every record's command line (``validate``, ``adaptive``): ``--timing-attempts``
    and ``--pairing``, as :func:`timed_runs` takes them."""
    ap.add_argument("--timing-attempts", type=integer, default=1, metavar="N",
                    help="measure the timed runs again, whole, up to N times in all while the timing check finds them "
                         "unreliable (baseline drift or load); every attempt is listed in the record's timing")
    ap.add_argument("--pairing", choices=PAIRINGS, default=None, help="how the timed runs take turns: steps "
                    "(iteration by iteration; the default on the CPU) or batches (a batch of prompts each; on CUDA)")


#: glibc's ``mallopt`` parameters (``malloc.h``) and the values :func:`keep_freed_memory` sets: arrays up to 32 MiB
#: (glibc's largest mmap threshold) come from the heap, and the heap is not handed back to the system (2 GiB - 1)
MALLOPT = {"mmap_threshold": (-3, 32 * 2**20), "trim_threshold": (-1, 2**31 - 1)}


def keep_freed_memory() -> dict:
    """Have the C allocator keep the memory the process frees (glibc: ``mallopt``), so that a loop's own work costs the
    same whatever ran between its iterations; returns what was done (a record's ``timing["allocator"]``).

    By default glibc maps a large array afresh and hands it back when freed, with a threshold that moves with what
    the process freed last, so an array's pages may be faulted in again at every use. When runs take turns iteration
    by iteration, what the other runs allocated in between decides which: on llm_default's pair at batch 8 (8 prompts,
    token and block_v1 verification at L = 4, taking turns), keeping freed memory cut the page faults of the record by
    62 %, block_v1's verifier call from 24.5 to 12.4 ms and its loop work outside the calls from 23 to 21 ms, with plain
    sampling unchanged (9.34 against 9.32 ms per token). A single decoding process reaches the same steady state by
    itself: its arrays recur, so glibc's moving threshold soon serves them from the heap. Elsewhere (no glibc) nothing
    is changed."""
    import ctypes
    import ctypes.util
    import platform

    if platform.libc_ver()[0] != "glibc":
        return {"kept": False, "note": "not glibc: the allocator is left as it is"}
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError) as err:
        return {"kept": False, "note": f"mallopt unavailable: {err}"}
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = {name: bool(mallopt(param, value)) for name, (param, value) in MALLOPT.items()}
    return {"kept": all(done.values()), "allocator": "glibc mallopt",
            **{name: value for name, (_, value) in MALLOPT.items()}, "accepted": done}


@dataclass(frozen=True)
class TimingPlan:
    """How a record's runs are timed (:func:`timed_runs`): up to ``attempts`` measurements while the timing check
    fails, the runs taking turns by ``pairing`` (``steps`` or ``batches``; default :func:`default_pairing`), the
    check's plain runs with ``check_seed`` (default: the decoding seed + 1), ``desc`` naming the phase lines."""

    attempts: int = 1
    pairing: str | None = None
    check_seed: int | None = None
    desc: str = "interleaved runs"

    def __post_init__(self):
        check_size(self.attempts, "attempts")


def timed_runs(target, prompts, runs, max_new_tokens: int, options: DecodeOptions, plan: TimingPlan = TimingPlan(), *,
               warm_up=None, beside=None) -> TimedRuns:
    """The timing protocol of every record (``validate``, ``adaptive``), decoding with ``options``' sampling, seed,
    batch size (default: all prompts), cache kind and progress, timed as ``plan`` says.

    0. :func:`keep_freed_memory` (``timing["allocator"]``), so that no run's cost depends on what the others freed;
    1. ``warm_up()`` (untimed; default: one batch of plain sampling): a fresh process's first decoding is slow,
       17.3 against 10.5 ms per token for the same plain run later in one record; then :func:`settle`, plain
       passes over the first batch until two in a row agree within 5 % (the record's ``timing["settling"]``);
    2. plain sampling with ``check_seed`` (default ``seed + 1``), the timing check's first half;
    3. plain sampling (``seed``) and every run in turn (ABAB…; :func:`interleave`): each batch of prompts is a timing
       round measured for all in one window; with ``pairing`` ``"steps"`` (the default on the CPU,
       :func:`default_pairing`) the runs take turns iteration by iteration, each kept at the same share of its work,
       and with ``"batches"`` a whole batch at a time, the order rotating by one run per round
       (``timing["pairing"]``, ``timing["round_order"]``); ``runs`` are callables that take the common keyword
       arguments and return a ``*_batches`` generator;
    4. plain sampling with ``check_seed`` again: the same tokens, so the same work; only the machine can make its
       time differ from step 2's (:func:`timing_check`, with the load other work put on the machine).

    ``beside``: a callable that returns one more ``*_batches`` generator (no arguments) taken in turn with the runs in
    step 3 but not timed as one, e.g. the cost profile's calibration rounds
    (:func:`llm_bridge.calibrate.calibration_batches`), so that what predicts the runs is measured in the same windows
    as they are; its result is :attr:`TimedRuns.beside` (the kept attempt's).

    With ``attempts`` > 1, steps 2-4 are measured again, whole, while the check finds the timing unreliable: the
    record keeps the first attempt that passes (or the last), and ``timing["attempts"]`` lists every attempt's
    baselines, drift and verdict, the discarded ones included. The rule is not loosened: the kept timing passed it
    by itself, in one window."""
    sampling, seed, cache, progress = options.sampling, options.seed, options.cache, options.progress
    batch_size = options.batch_size or max(len(prompts), 1)
    attempts, desc, check_seed = plan.attempts, plan.desc, plan.check_seed
    pairing = check_pairing(default_pairing(target) if plan.pairing is None else plan.pairing)  # before any decoding
    allocator = keep_freed_memory()
    meter, phase = LoadMeter(), phase_log(desc, progress)
    load_start = meter.read()
    check_seed = seed + 1 if check_seed is None else check_seed
    if warm_up is None:
        plain_generate(target, prompts[:batch_size], max_new_tokens, sampling=sampling, progress=False, cache=cache)
    else:
        warm_up()
    settling = settle(target, prompts[:batch_size], max_new_tokens, sampling=sampling, cache=cache)
    phase(f"warmed up, settled after {len(settling['ms_per_token'])} plain passes")
    plain_kwargs = {"sampling": sampling, "batch_size": batch_size, "cache": cache}
    common = {**plain_kwargs, "seed": seed, "progress": False}
    rounds, history = -(-len(prompts) // batch_size), []
    for attempt in range(attempts):
        before = plain_generate(target, prompts, max_new_tokens, seed=check_seed, progress=progress, **plain_kwargs)
        batches = [plain_batches(target, prompts, max_new_tokens, **common)] + [run(**common) for run in runs]
        if beside is not None:
            batches.append(beside())
        label = desc if attempts == 1 else f"{desc} (attempt {attempt + 1} of {attempts})"
        with tqdm(total=rounds * len(batches), desc=label, unit="batch", leave=False,
                  disable=None if progress is None else not progress) as bar:
            # the load after every run's batch: other work that comes and goes mid-record is caught
            readings, width = [], len(batches)

            def on_round(_, bar=bar, readings=readings, attempt=attempt, width=width):
                bar.update()
                readings.append(meter.read())
                if bar.disable and len(readings) % width == 0:  # no bar drawn (a log file): a line per round
                    phase(f"attempt {attempt + 1} of {attempts}, round {len(readings) // width} of {rounds} done")
            plain, *results = interleave(batches, on_round=on_round, pairing=pairing)
        aside = results.pop() if beside is not None else None
        after = plain_generate(target, prompts, max_new_tokens, seed=check_seed, progress=progress, **plain_kwargs)
        timing = timing_check(1e3 * before.seconds / before.generated, 1e3 * after.seconds / after.generated,
                              [load_start, meter.read()], os.cpu_count() or 1, torch_threads(), readings)
        phase(f"timing attempt {attempt + 1} of {attempts}: plain sampling drifted "
              f"{100 * timing['baseline_drift']:.1f} %, {timing['unreliable_timing'] or 'reliable'}")
        history.append({k: timing[k] for k in ("baseline_before_ms_per_token", "baseline_after_ms_per_token",
                                               "baseline_drift", "unreliable_timing")})
        if not timing["unreliable_timing"] or attempt + 1 == attempts:
            break
        plain = results = aside = before = after = None  # a discarded attempt's results are not held through the next
        load_start = meter.read()
    timing["settling"] = settling
    timing["attempts"] = history
    timing["pairing"] = pairing
    timing["allocator"] = allocator
    timing["pairing_method"] = PAIRING_METHODS[pairing]
    if pairing == "batches":
        timing["round_order"] = ROUND_ORDER
    baseline = {"tokens_per_s": plain.tokens_per_s, "ms_per_token": 1e3 * plain.seconds / plain.generated,
                "ms_per_step": 1e3 * plain.seconds / max(plain.timer.count("target"), 1),
                "t_target_ms": plain.timer.mean_ms("target"), "generated": plain.generated,
                "rounds": round_entries(plain.rounds)}
    return TimedRuns(plain, baseline, results, after, timing, aside)


def torch_threads() -> int:
    """The threads torch computes with in this process."""
    import torch

    return int(torch.get_num_threads())


def load_average():
    """The 1-minute load average (``None`` where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def round_entries(rounds) -> list:
    """Timing rounds (one (generated, seconds) per batch of prompts) as record entries."""
    return [{"generated": g, "seconds": t} for g, t in rounds]
