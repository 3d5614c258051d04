"""Timings of model calls and the theory's predictions next to what a run measured.

* :class:`CallTimer` — wall-clock of every draft, target and verifier call, keyed by the number of
  tokens a target call scores (t_target(n)); on CUDA by events, read once per batch of calls.
* :func:`predicted_block_efficiency` — the block efficiency the token and block formulas predict
  from per-position draft/target rows, through each position's *two-point reduction*: with
  A_i = {x : q_i(x) ≥ p_i(x)} the pair (p_i(A_i), q_i(A_i)) is a Bernoulli pair with the same TV,
  so the token formula E[tokens] = Σ_{l=0}^{L} ∏_{i≤l} (1 − TV_i) (eq. (4) for independent
  positions) is kept exactly; the block verifiers' values are those of the time-varying Bernoulli
  pair built from the averaged reductions (exact on it: eqs. (17) and (8) by the prefix-tree walk).
* :func:`predicted_speedup` — the cost model: tokens per iteration × (plain time per token) /
  (draft calls × t_draft + t_target(drafted + 1) + verifier overhead).
* :func:`median_interval` — the median of repeated timed calls with its bootstrap interval.

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np

from otspec.theory.cost import CallCosts

__all__ = ["CallTimer", "median_interval", "predicted_block_efficiency", "predicted_speedup", "two_point"]


class CallTimer:
    """Collects (kind, n, seconds) for every timed call; ``n`` is the number of tokens fed per sequence.

    On the CPU a call is timed by the host clock. On CUDA it is timed by a pair of CUDA events recorded
    on the stream around it, and nothing waits for the device while the loop runs: once ``resolve_every``
    calls are waiting, those the device has passed are read without waiting (a decode loop reads its
    accepted lengths back every iteration, so it has passed them all), and only a backlog of twice that
    many, or reading the records (:attr:`records`, :meth:`resolve`), waits for it
    (``torch.cuda.synchronize``). A call's time is then the device's time between its two
    events: its kernels' time when the GPU is the bottleneck, the host's time to launch them when the
    host is. ``resolutions`` counts the synchronisations made so far.
    """

    def __init__(self, device: str = "cpu", *, resolve_every: int = 256):
        if int(resolve_every) < 1:
            raise ValueError(f"resolve_every must be >= 1, got {resolve_every}")
        self.cuda = str(device).startswith("cuda")
        self.resolve_every = int(resolve_every)
        self.resolutions = 0
        self._records: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        self._inner = [0.0]  # host clock: time spent in timed calls nested inside the running one
        self._open: list[list] = []  # events: the calls running now, outermost first
        self._waiting: list[list] = []  # events: finished outermost calls not read yet

    @property
    def records(self) -> dict[str, dict[int, list[float]]]:
        """{kind: {n: [seconds, ...]}}, every call so far (reading it resolves the waiting events)."""
        self.resolve()
        return self._records

    def _sync(self):
        if self.cuda:
            self._synchronize()

    def _synchronize(self):
        import torch

        torch.cuda.synchronize()

    def _event(self):
        """A CUDA event with timing, recorded on the current stream now."""
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def call(self, kind: str, n: int, fn, *args):
        """Run ``fn(*args)`` and record its time under ``kind`` and ``n``, less any timed call nested in it
        (a draft call a verifier asks for is a draft call, not verifier time)."""
        if self.cuda:
            return self._call_events(kind, n, fn, *args)
        self._inner.append(0.0)
        t0 = time.perf_counter()
        try:
            out = fn(*args)
        finally:
            elapsed = time.perf_counter() - t0
            inner = self._inner.pop()
            self._inner[-1] += elapsed
        self._records[kind][int(n)].append(elapsed - inner)
        return out

    def _call_events(self, kind, n, fn, *args):
        entry = [kind, int(n), self._event(), None, []]  # kind, n, start, end, nested calls
        (self._open[-1][4] if self._open else self._waiting).append(entry)
        self._open.append(entry)
        try:
            return fn(*args)
        finally:
            entry[3] = self._event()
            self._open.pop()
            if not self._open and len(self._waiting) >= self.resolve_every:
                self._collect()

    def _collect(self) -> None:
        """Read the finished calls the device has already passed (``Event.query``: no wait); a loop that reads
        something back every iteration has passed them all. Only when twice ``resolve_every`` calls are still
        waiting does it wait for the device (:meth:`resolve`)."""
        ready = 0
        for entry in self._waiting:  # one stream: events complete in the order they were recorded
            if entry[3] is None or not entry[3].query():
                break
            ready += 1
        self._read(self._waiting[:ready])
        self._waiting = self._waiting[ready:]
        if len(self._waiting) >= 2 * self.resolve_every:
            self.resolve()

    def resolve(self) -> None:
        """Read every finished call's events into the records (one synchronisation; nothing to do on the CPU or when
        no call is waiting). Calls still running stay waiting."""
        done = [e for e in self._waiting if e[3] is not None]  # an outermost call still running has no end yet
        if not done:
            return
        self._sync()
        self.resolutions += 1
        self._read(done)
        self._waiting = [e for e in self._waiting if e[3] is None]

    def _read(self, entries) -> None:
        def seconds(entry) -> float:
            total = entry[2].elapsed_time(entry[3]) / 1e3
            nested = 0.0
            for child in entry[4]:
                nested += seconds(child)
            self._records[entry[0]][entry[1]].append(total - nested)
            return total

        for entry in entries:
            seconds(entry)

    def count(self, kind: str) -> int:
        return sum(len(v) for v in self.records[kind].values())

    def total(self, kind: str) -> float:
        return float(sum(sum(v) for v in self.records[kind].values()))

    def mean_ms(self, kind: str) -> float:
        """Mean milliseconds per call of ``kind`` over every n (nan when never called)."""
        n = self.count(kind)
        return 1e3 * self.total(kind) / n if n else float("nan")

    def by_n_ms(self, kind: str) -> dict[str, dict]:
        """{n: {"mean", "median", "calls"}} in milliseconds (JSON keys are strings)."""
        return {str(n): {"mean": 1e3 * float(np.mean(v)), "median": 1e3 * float(np.median(v)), "calls": len(v)}
                for n, v in sorted(self.records[kind].items())}


def two_point(draft_rows, target_rows) -> tuple[np.ndarray, np.ndarray]:
    """(p(A), q(A)) with A = {x : q(x) ≥ p(x)} per row: the Bernoulli pair with the same TV."""
    p, q = np.asarray(draft_rows, np.float64), np.asarray(target_rows, np.float64)
    above = q >= p
    return (p * above).sum(axis=-1), (q * above).sum(axis=-1)


def _bernoulli_chain(probs):
    """A time-varying Markov source on {0, 1} whose step-i rows are all Bernoulli(probs[i])."""
    from otspec.sources import MarkovSource

    probs = np.clip(np.asarray(probs, np.float64), 0.0, 1.0)
    rows = np.stack([1.0 - probs, probs], axis=-1)  # (L, 2)
    mats = np.repeat(rows[1:, None, :], 2, axis=1)  # (L-1, 2, 2): the row ignores the previous token
    return MarkovSource(rows[0], mats, horizon=len(rows))


def predicted_block_efficiency(p_a, q_a, length: int) -> dict:
    """Tokens per iteration predicted for drafts of ``length`` from per-position two-point pairs.

    ``p_a``, ``q_a`` (length,) are the mean p_i(A_i), q_i(A_i) at draft positions 1..length. Returns
    {"token", "block", "optimal"}: TokenVerify's eq. (4), the published BlockVerify's eq. (17) and
    the block-OT optimum (8) (attained by BackwardBlockVerify) on that pair, each + 1 (the
    corrected or bonus token).
    """
    from otspec.verifiers import REGISTRY

    p_a, q_a = np.asarray(p_a, np.float64)[:length], np.asarray(q_a, np.float64)[:length]
    if length == 0:
        return {cls.closed_form.value: 1.0 for cls in REGISTRY.values()}
    # one extra (unused) step so the sources cover the bonus position
    draft, target = _bernoulli_chain(np.append(p_a, p_a[-1])), _bernoulli_chain(np.append(q_a, q_a[-1]))
    return {cls.closed_form.value: 1.0 + cls().expected_accepted(draft, target, length) for cls in REGISTRY.values()}


def predicted_speedup(tokens_per_iteration: float, plain_ms_per_token: float, draft_calls: float,
                      t_draft_ms: float, t_target_ms: float, overhead_ms: float = 0.0) -> float:
    """Speedup over plain sampling predicted by the cost model (all times in milliseconds, per iteration):
    :class:`otspec.theory.CallCosts` with the measured call times."""
    costs = CallCosts(t_draft_ms, t_target_ms, overhead_ms)
    return costs.speedup(tokens_per_iteration, draft_calls, plain_per_token=plain_ms_per_token)


def median_interval(samples, *, confidence: float = 0.95, draws: int = 2000, seed: int = 0) -> dict:
    """``{"median", "low", "high", "n"}``: the median of ``samples`` and its percentile bootstrap interval."""
    x = np.asarray(samples, dtype=np.float64)
    if x.ndim != 1 or x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"samples: expected a non-empty 1-D array of finite times, got shape {x.shape}")
    rng = np.random.default_rng(seed)
    meds = np.median(x[rng.integers(0, x.size, size=(draws, x.size))], axis=1)
    alpha = 0.5 * (1.0 - confidence)
    low, high = np.quantile(meds, [alpha, 1.0 - alpha])
    return {"median": float(np.median(x)), "low": float(low), "high": float(high), "n": int(x.size)}
