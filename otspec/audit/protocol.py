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


def _run_with_timeout(fn: Callable, args: tuple, timeout: float | None):
    """``fn(*args)`` in a daemon thread; SamplerTimeout when it does not return within ``timeout`` seconds."""
    if timeout is None:
        return fn(*args)
    box: dict = {}

    def target():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # reported to the caller below
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True, name="otspec-audit-sampler")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise SamplerTimeout(f"the sampler did not return within {timeout:g} s (a hang, or a batch too large for "
                             "it: lower --samples or raise --timeout)")
    if "error" in box:
        exc = box["error"]
        raise SamplerError(f"the sampler raised {type(exc).__name__}: {exc}") from exc
    return box["value"]


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
