"""The sampler protocol the audit drives, loading a sampler by ``module:function``, and calling it safely.

A chain sampler is any callable

    sampler(draft_tokens, draft_probs, target_probs, rng) -> (accepted, next_token)

with ``draft_tokens`` int64 (B, L) drawn by the audit from ``draft_probs`` float64 (B, L, V) (the rows the
drafts were drawn from), ``target_probs`` float64 (B, L + 1, V) (the target's rows after every drafted prefix)
and ``rng`` a :class:`numpy.random.Generator`; it returns ``accepted`` (B,) integers in [0, L] (drafts kept) and
``next_token`` (B,) integers in [0, V) (the correction after a rejection, or the bonus token). A sampler that
raises, returns the wrong shapes, tokens outside the vocabulary or non-integers, or does not return within the
timeout is reported with a clear :class:`SamplerError`, never a traceback from deep inside the audit or a hang.
"""

from __future__ import annotations

import importlib
import signal
import threading
from collections.abc import Callable

import numpy as np

__all__ = ["DEFAULT_TIMEOUT_S", "SamplerError", "SamplerTimeout", "call_sampler", "load_sampler"]

#: Seconds one sampler call may take before the audit gives up on it.
DEFAULT_TIMEOUT_S = 60.0


class SamplerError(ValueError):
    """The audited sampler failed the protocol: it raised, or returned something the protocol does not allow."""


class SamplerTimeout(SamplerError):
    """The audited sampler did not return within the timeout."""


def load_sampler(spec: str) -> Callable:
    """The callable named by ``"module:function"`` (``"package.module:object.attribute"`` works too)."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise ValueError(f"sampler {spec!r}: expected module:function, e.g. otspec.audit.adapters:token")
    module_name, attr = spec.split(":")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"sampler {spec!r}: cannot import module {module_name!r}: {exc}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"sampler {spec!r}: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"sampler {spec!r}: {attr!r} is not callable")
    return obj


def _timeout_message(timeout: float) -> str:
    return (f"the sampler did not return within {timeout:g} s (a hang, or a batch too large for it: lower --samples or "
            "raise --timeout)")


def _run_with_timeout(fn: Callable, args: tuple, timeout: float | None):
    """``fn(*args)``, a SamplerTimeout when it does not return within ``timeout`` seconds, a SamplerError when it
    raises. On the main thread of a POSIX process a timer signal interrupts it (the sampler runs where it would in
    the user's program: torch and friends can stall when called from a helper thread inside a notebook kernel);
    elsewhere it runs in a daemon thread that is abandoned on timeout."""
    if timeout is None:
        return _call(fn, args)
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        def expire(signum, frame):
            raise SamplerTimeout(_timeout_message(timeout))

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, float(timeout))
        try:
            return _call(fn, args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
            signal.signal(signal.SIGALRM, previous)
    box: dict = {}

    def target():
        try:
            box["value"] = _call(fn, args)
        except BaseException as exc:  # reported to the caller below
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True, name="otspec-audit-sampler")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise SamplerTimeout(_timeout_message(timeout))
    if "error" in box:
        raise box["error"]
    return box["value"]


def _call(fn: Callable, args: tuple):
    try:
        return fn(*args)
    except SamplerTimeout:
        raise
    except Exception as exc:
        raise SamplerError(f"the sampler raised {type(exc).__name__}: {exc}") from exc


def _as_int_vector(value, name: str, B: int, low: int, high: int) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    if arr.shape != (B,):
        raise SamplerError(f"the sampler returned {name} of shape {arr.shape}; the protocol needs ({B},)")
    if arr.dtype.kind not in "iub":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise SamplerError(f"the sampler returned {name} of dtype {arr.dtype}; the protocol needs integers")
    arr = arr.astype(np.int64)
    bad = (arr < low) | (arr > high)
    if bad.any():
        raise SamplerError(f"the sampler returned {name} = {int(arr[bad][0])} at row {int(np.flatnonzero(bad)[0])}; "
                           f"the protocol needs values in [{low}, {high}]")
    return arr


def call_sampler(sampler: Callable, draft_tokens: np.ndarray, draft_probs: np.ndarray, target_probs: np.ndarray,
                 rng, timeout: float | None = DEFAULT_TIMEOUT_S) -> tuple[np.ndarray, np.ndarray]:
    """One protocol call, its output checked: (accepted (B,) in [0, L], next_token (B,) in [0, V))."""
    B, L = draft_tokens.shape
    V = draft_probs.shape[-1]
    out = _run_with_timeout(sampler, (draft_tokens.copy(), draft_probs.copy(), target_probs.copy(), rng), timeout)
    if not isinstance(out, tuple | list) or len(out) != 2:
        raise SamplerError(f"the sampler returned {type(out).__name__}; the protocol needs a pair "
                           "(accepted, next_token)")
    accepted = _as_int_vector(out[0], "accepted", B, 0, L)
    token = _as_int_vector(out[1], "next_token", B, 0, V - 1)
    return accepted, token
