"""The state both decode loops share (:mod:`otspec.engine.loop`): the committed tokens, progress, observers and the
clock, and what a loop returns."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..distributions import to_device, to_host, zeros_of

__all__ = ["NO_HOOKS", "CallTiming", "LoopHooks", "LoopRun", "RunState", "start_sessions"]


@dataclass
class LoopRun:
    """What a loop produced: each sequence's new tokens (B, N) and the seconds spent decoding (observers excluded)."""

    tokens: np.ndarray
    seconds: float


class CallTiming:
    """A timer with ``call(kind, n, fn, *args)`` (e.g. ``llm_bridge``'s CallTimer), or none."""

    def __init__(self, timer):
        self.timer = timer

    def __call__(self, kind: str, n: int, fn, *args):
        return fn(*args) if self.timer is None else self.timer.call(kind, n, fn, *args)


@dataclass(frozen=True)
class LoopHooks:
    """What watches a loop without steering it: ``observers`` (:class:`~otspec.engine.observers.Observer`, see every
    iteration), a progress ``bar`` (tqdm-like: advanced by the tokens emitted) and a ``timer`` (an object with
    ``call(kind, n, fn, *args)``: times the target, draft and verifier calls)."""

    observers: tuple = ()
    bar: object = None
    timer: object = None

    def __post_init__(self):
        object.__setattr__(self, "observers", tuple(self.observers))
        for i, observer in enumerate(self.observers):  # refused now, not as an AttributeError mid-run
            missing = [m for m in ("on_chain", "on_tree", "on_pause") if not callable(getattr(observer, m, None))]
            if missing:
                raise ValueError(f"observers[{i}]: expected an otspec.engine.observers.Observer (on_chain, on_tree, "
                                 f"on_pause), got {type(observer).__name__} without {', '.join(missing)}")


#: A loop watched by nothing.
NO_HOOKS = LoopHooks()


class RunState:
    """State shared by both loops: the committed tokens, progress, observers and the clock.

    Tokens live where the target's rows live (``Session.rows_device``): numpy on the host, or a
    torch tensor on the device, so committing them reads nothing back from the device.
    """

    def __init__(self, sessions, prompts, n_tokens: int, hooks: LoopHooks = NO_HOOKS, device=None):
        self.prompts, self.device = prompts, device
        self.B, self.N = len(prompts), int(n_tokens)
        self.plen = np.array([p.size for p in prompts], dtype=np.int64)
        seq = np.zeros((self.B, int(self.plen.max(initial=0)) + self.N), dtype=np.int64)
        for b, p in enumerate(prompts):
            seq[b, :p.size] = p
        self.seq = self.like(seq)
        self.done = np.zeros(self.B, dtype=np.int64)  # tokens generated per sequence
        self.observers, self.bar, self.call = list(hooks.observers), hooks.bar, CallTiming(hooks.timer)
        start_sessions(sessions, prompts)
        self.watching = 0.0
        self._draft_rows = None  # the draft rows' buffer, reused across iterations
        self.t0 = time.perf_counter()

    def like(self, values):
        """Host values (token ids, an index) where the run keeps its tokens (a GPU copy that does not wait for the
        device: :func:`~otspec.distributions.to_device`)."""
        if self.device is None or not isinstance(values, np.ndarray):
            return values
        return to_device(values, self.device)

    def tokens(self, shape):
        """Zero token ids of ``shape`` where the run keeps its tokens."""
        return self.like(np.zeros(shape, dtype=np.int64))

    def draft_buffer(self, rows, L: int):
        """A (B, L, V) buffer for the draft rows like ``rows`` (B, V), allocated once per run: rows past a
        sequence's drafted length hold whatever an earlier iteration left there (ragged padding)."""
        buf = self._draft_rows
        if buf is None or buf.shape != (self.B, L, rows.shape[-1]) or buf.dtype != rows.dtype \
                or getattr(buf, "device", None) != getattr(rows, "device", None):
            buf = self._draft_rows = zeros_of(rows, (self.B, L, rows.shape[-1]))
        return buf

    def pause(self):
        """Hand control back to whoever drives the loop (a generator step: ``yield from run.pause()``), yielding the
        tokens generated so far over all sequences; the time until the loop is resumed is left out of the clock and
        told to every observer (``on_pause``)."""
        t = time.perf_counter()
        yield int(self.done.sum())
        away = time.perf_counter() - t
        self.watching += away
        for observer in self.observers:
            observer.on_pause(away)

    def notify(self, method: str, step) -> None:
        t = time.perf_counter()
        for observer in self.observers:
            getattr(observer, method)(step)
        self.watching += time.perf_counter() - t

    def emit(self, rows, tokens, counts, sessions, features=None, nodes=None) -> None:
        """Append ``tokens[i, :counts[i]]`` to sequences ``rows`` and commit them to every session; a session that
        reads the target's features gets ``features`` (B, m, H), aligned with the committed tokens of every sequence.
        ``nodes`` (one entry per session, each a list over the batch): the fed tree nodes that spell the committed
        tokens, handed to each session's commit (the device tree walk knows them; comparing tokens would read back)."""
        tokens = self.like(tokens)
        at = self.plen[rows] + self.done[rows]
        r, c = np.nonzero(np.arange(tokens.shape[1])[None, :] < counts[:, None])
        self.seq[self.like(rows[r]), self.like(at[r] + c)] = tokens[self.like(r), self.like(c)]
        self.done[rows] += counts
        full_tokens = self.tokens((self.B, tokens.shape[1]))
        full_counts = np.zeros(self.B, dtype=np.int64)
        full_tokens[self.like(rows)], full_counts[rows] = tokens, counts
        for i, session in enumerate(sessions):
            extra = {} if nodes is None else {"nodes": nodes[i]}
            if session is not None and session.reads_target_features:
                session.commit(full_tokens, full_counts, features=features, **extra)
            elif session is not None:
                session.commit(full_tokens, full_counts, **extra)
        if self.bar is not None:
            self.bar.update(int(counts.sum()))

    def result(self) -> LoopRun:
        seconds = time.perf_counter() - self.t0 - self.watching
        seq = to_host(self.seq)
        return LoopRun(np.stack([seq[b, self.plen[b]:self.plen[b] + self.N] for b in range(self.B)])
                       if self.B else np.zeros((0, self.N), dtype=np.int64), seconds)


def start_sessions(sessions, prompts) -> None:
    """Start the target (the last session) first: a drafter that reads its features gets the prompt's."""
    *drafts, target = sessions
    target.start(prompts)
    for session in drafts:
        if session is None:
            continue
        if session.reads_target_features:
            features = target.prompt_features
            if features is None:
                raise ValueError(f"{type(session).__name__} reads the target's features, and the target session "
                                 f"{type(target).__name__} gives none (a model session built with hidden=True does)")
            session.start(prompts, features=features)
        else:
            session.start(prompts)
