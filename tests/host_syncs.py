"""Counting host synchronisations made from otspec's and llm_bridge's own code (not from inside a model): the
device tests' host-read counter and ``benchmarks/bench_host_syncs.py``'s fuller one are this one class.

On a GPU every read of a device tensor on the host, every tensor built from host data, every boolean-mask index and
every ``torch.cuda.synchronize`` waits for the device; on the CPU the same code runs, so the counts hold there too.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from otspec.engine.observers import Observer

ROOT = Path(__file__).resolve().parent.parent
OURS = (str(ROOT / "otspec"), str(ROOT / "llm_bridge"))
READS = ("cpu", "numpy", "item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__array__")
#: What :class:`SyncCounter` can count: host reads (``READS``), tensors built from host data (``torch.as_tensor`` /
#: ``torch.tensor`` of a list or an array), boolean-mask indexing and the :class:`~llm_bridge.measure.CallTimer`'s
#: synchronisation (made on CUDA only; counted wherever it is called).
KINDS = ("reads", "built", "boolean", "synchronize")


class SyncCounter:
    """Patches the host reads, host-built tensors, boolean indexing and the timer's synchronisation (``kinds``: a
    subset of :data:`KINDS`) for the duration of a ``with``; ``seen`` grows by one call site per event made from
    otspec / llm_bridge code."""

    def __init__(self, kinds=KINDS):
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"SyncCounter: unknown kinds {sorted(unknown)}; expected some of {KINDS}")
        self.kinds, self.seen, self._undo = tuple(kinds), [], []

    def _ours(self, depth: int = 2) -> str | None:
        frame = sys._getframe(depth)
        name = frame.f_code.co_filename
        return f"{Path(name).parent.name}/{Path(name).name}:{frame.f_lineno}" if name.startswith(OURS) else None

    def _patch(self, owner, name, make):
        original = getattr(owner, name)
        setattr(owner, name, make(original))
        self._undo.append((owner, name, original))

    def __enter__(self):
        import torch

        from llm_bridge.measure import CallTimer

        def read(kind):
            def make(original):
                def wrapped(t, *a, **k):
                    where = self._ours()
                    if where:
                        self.seen.append(f"{kind} at {where}")
                    return original(t, *a, **k)
                return wrapped
            return make

        if "reads" in self.kinds:
            for name in READS:
                self._patch(torch.Tensor, name, read(name.strip("_")))

        def built(kind):
            def make(original):
                def wrapped(data, *a, **k):
                    where = self._ours()
                    if where and not isinstance(data, torch.Tensor):
                        self.seen.append(f"{kind} from host at {where}")
                    return original(data, *a, **k)
                return wrapped
            return make

        if "built" in self.kinds:
            for name in ("as_tensor", "tensor"):
                self._patch(torch, name, built(name))

        def index(original):
            def wrapped(t, key):
                keys = key if isinstance(key, tuple) else (key,)
                if any(isinstance(x, torch.Tensor) and x.dtype == torch.bool for x in keys):
                    where = self._ours()
                    if where:
                        self.seen.append(f"boolean index at {where}")
                return original(t, key)
            return wrapped

        if "boolean" in self.kinds:
            self._patch(torch.Tensor, "__getitem__", index)

        def sync(original):
            def wrapped(timer):
                where = self._ours()
                self.seen.append(f"synchronize at {where or 'timer'}")
                return original(timer)
            return wrapped

        if "synchronize" in self.kinds:
            self._patch(CallTimer, "_sync", sync)
        return self

    def __exit__(self, *exc):
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)


class IterationMarks(Observer):
    """An observer of the chain and tree loops: how many events ``counter`` had seen when each iteration ended."""

    def __init__(self, counter: SyncCounter):
        self.counter, self.marks = counter, []

    def on_chain(self, step):
        self.marks.append(len(self.counter.seen))

    def on_tree(self, step):
        self.marks.append(len(self.counter.seen))


class HostEvent:
    """A stand-in for ``torch.cuda.Event(enable_timing=True)`` on a machine without CUDA: ``record`` reads the host
    clock, ``elapsed_time`` gives milliseconds as the CUDA event does; ``passed=False`` plays a device that is
    behind (``query`` says the event is not reached yet)."""

    def __init__(self, passed: bool = True):
        self.t, self.passed = None, passed

    def record(self, stream=None):
        self.t = time.perf_counter()

    def elapsed_time(self, end: HostEvent) -> float:
        return 1e3 * (end.t - self.t)

    def query(self) -> bool:
        """Whether the device has passed the event."""
        return self.t is not None and self.passed


def cuda_like_timer(passed: bool = True, **options):
    """A :class:`~llm_bridge.measure.CallTimer` that runs the CUDA path (events, resolved in batches) on the CPU:
    its events read the host clock (``passed``: whether the device is taken to have reached them when asked) and
    its synchronisation does nothing (a :class:`SyncCounter` still counts it)."""
    from llm_bridge.measure import CallTimer

    class CudaLikeTimer(CallTimer):
        def _event(self):
            event = HostEvent(passed)
            event.record()
            return event

        def _synchronize(self):
            return None

    return CudaLikeTimer("cuda", **options)


class OpCounter:
    """Counts the torch operations (ATen calls: on a GPU, kernel launches) made outside the models' forward passes
    while a ``with`` lasts: ``count`` grows by one per operation from otspec / llm_bridge code or anything it calls,
    except inside ``models`` (patched for the duration)."""

    def __init__(self, models=()):
        self.models, self.count, self._inside, self._undo = list(models), 0, 0, []

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if not counter._inside:
                    counter.count += 1
                return func(*args, **(kwargs or {}))

        for model in self.models:
            original = model.forward

            def forward(*a, original=original, **k):
                counter._inside += 1
                try:
                    return original(*a, **k)
                finally:
                    counter._inside -= 1

            model.forward = forward
            self._undo.append((model, original))
        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        for model, original in self._undo:
            model.forward = original


class OpMarks(Observer):
    """An observer of the chain and tree loops: how many operations ``counter`` had counted when each iteration ended."""

    def __init__(self, counter: OpCounter):
        self.counter, self.marks = counter, []

    def on_chain(self, step):
        self.marks.append(self.counter.count)

    def on_tree(self, step):
        self.marks.append(self.counter.count)
