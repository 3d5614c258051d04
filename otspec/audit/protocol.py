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

import contextlib
import importlib
import inspect
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

import numpy as np

from ..checks import check_real, integer_array, real_array

__all__ = ["DEFAULT_TIMEOUT_S", "MAX_TIMEOUT_S", "REAL_EXIT", "SamplerError", "SamplerTimeout", "call_sampler", "check_timeout",
           "load_sampler", "no_hard_exit"]

#: Seconds one sampler call may take before the audit gives up on it.
DEFAULT_TIMEOUT_S = 60.0
#: The longest timeout a call may be given (a day); a guard is never switched off by a huge or infinite value.
MAX_TIMEOUT_S = 86_400.0


class SamplerError(ValueError):
    """The audited sampler failed the protocol: it raised, or returned something the protocol does not allow."""


class SamplerTimeout(SamplerError):
    """The audited sampler did not return within the timeout."""


def check_timeout(timeout) -> float | None:
    """``timeout`` as seconds in (0, :data:`MAX_TIMEOUT_S`], or None (no guard: the Python API only); 0, negative,
    NaN and infinite values are refused, since each would switch the guard off or make it fire at once."""
    return None if timeout is None else check_real(timeout, "timeout", low=0.0, high=MAX_TIMEOUT_S, low_open=True)


def _import(module_name: str):
    """(module, None) or (None, the exception its import raised): nothing escapes but an interruption."""
    try:
        return importlib.import_module(module_name), None
    except (KeyboardInterrupt, SamplerTimeout):  # an interruption, or the timeout's signal arriving mid-import
        raise
    except BaseException as exc:  # ImportError, SyntaxError, sys.exit, or anything the module raised while it ran
        return None, exc


def load_sampler(spec: str, timeout: float | None = None) -> Callable:
    """The callable named by ``"module:function"`` (``"package.module:object.attribute"`` works too). A module that
    cannot be imported for any reason (missing, a syntax error, an exception while it runs, an import that takes
    longer than ``timeout`` seconds when one is given) is a ``ValueError`` naming the module and the reason."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise ValueError(f"sampler {spec!r}: expected module:function, e.g. otspec.audit.adapters:token")
    module_name, attr = spec.split(":")
    try:
        obj, exc = _import(module_name) if timeout is None else _run_with_timeout(_import, (module_name,), timeout)
    except SamplerTimeout:
        raise ValueError(f"sampler {spec!r}: importing module {module_name!r} took longer than the timeout "
                         f"({timeout:g} s)") from None
    if isinstance(exc, SystemExit):
        how = exc.call if isinstance(exc, _HardExit) else f"sys.exit({exc.code!r})"
        raise ValueError(f"sampler {spec!r}: importing module {module_name!r} called {how}")
    if exc is not None:
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        raise ValueError(f"sampler {spec!r}: cannot import module {module_name!r}: {exception_text(exc, where)}")
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


#: Whether a sampler that disabled both of the audit's interrupts may end the process (exit status 2, one line on
#: stderr) once its call is twice overdue: the command line sets it; in a user's own process the audit never exits.
#: ``report``, when set (the audit's child process), takes the line instead of stderr.
HARD_EXIT = {"allowed": False, "report": None}
#: In the audit's child process, ``DEADLINE["write"](t, timeout)`` tells the parent the time by which the running
#: sampler call must return (``None``: no call is running), so that the parent ends a child whose sampler holds the
#: interpreter (a native loop) and lets no signal or thread of its own run.
DEADLINE = {"write": None}


class _Watchdog:
    """The second guard of a call on the main thread: if the call has not returned ``grace`` seconds after its timer
    should have fired (the sampler cancelled or replaced the SIGALRM handler), SIGINT goes to the main thread, where
    the audit's own handler turns it into a :class:`SamplerTimeout`; if the sampler replaced that one too, the
    process ends when :data:`HARD_EXIT` allows it."""

    def __init__(self, timeout: float):
        self.fired, self.timeout = False, timeout
        grace = max(1.0, 0.1 * timeout)
        main = threading.main_thread().ident
        self._timers = [threading.Timer(timeout + grace, self._interrupt, (main,)),
                        threading.Timer(timeout + 3 * grace, self._exit)]
        for t in self._timers:
            t.daemon = True
            t.start()
        # the SIGINT it sends is caught by the audit's own handler (installed for the call), not the process's

    def _interrupt(self, main: int) -> None:
        self.fired = True
        signal.pthread_kill(main, signal.SIGINT)

    def _exit(self) -> None:
        if HARD_EXIT["allowed"]:
            message = f"{_timeout_message(self.timeout)}; the sampler disabled the audit's interrupts"
            if HARD_EXIT["report"] is not None:  # the audit's child process: its parent prints the line
                HARD_EXIT["report"](message)
            else:
                print(f"otspec audit: {message}", file=sys.stderr, flush=True)
            REAL_EXIT(2)

    def cancel(self) -> None:
        for t in self._timers:
            t.cancel()


def _run_with_timeout(fn: Callable, args: tuple, timeout: float | None):
    """``fn(*args)``, a SamplerTimeout when it does not return within ``timeout`` seconds, a SamplerError when it
    raises. On the main thread of a POSIX process a timer signal interrupts it (the sampler runs where it would in
    the user's program: torch and friends can stall when called from a helper thread inside a notebook kernel), with
    a watchdog thread behind it in case the sampler switches that timer off (:class:`_Watchdog`); elsewhere it runs
    in a daemon thread that is abandoned on timeout."""
    timeout = check_timeout(timeout)
    if timeout is None:
        return _call(fn, args)
    if DEADLINE["write"] is not None:
        DEADLINE["write"](time.time() + timeout, timeout)
        try:
            return _guarded(fn, args, timeout)
        finally:
            DEADLINE["write"](None)
    return _guarded(fn, args, timeout)


def _guarded(fn: Callable, args: tuple, timeout: float):
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        state = {"done": False, "watchdog": None}

        def expire(signum, frame):
            if not state["done"]:  # a timer that fires while the call is being put away is not the call's
                raise SamplerTimeout(_timeout_message(timeout))

        def interrupted(signum, frame):  # the watchdog's SIGINT, or the user's Ctrl-C (the handler before ours)
            if state["watchdog"] is not None and state["watchdog"].fired:
                if state["done"]:
                    return
                raise SamplerTimeout(_timeout_message(timeout) + "; the sampler disabled the audit's timer")
            if callable(previous_int):
                return previous_int(signum, frame)
            raise KeyboardInterrupt

        previous, previous_int = signal.getsignal(signal.SIGALRM), signal.getsignal(signal.SIGINT)
        try:  # every step inside: a timer that fires at once (timeout=1e-9) still reaches the finally
            signal.signal(signal.SIGALRM, expire)
            signal.signal(signal.SIGINT, interrupted)
            state["watchdog"] = _Watchdog(timeout)
            signal.setitimer(signal.ITIMER_REAL, float(timeout))
            return _call(fn, args)
        finally:
            state["done"] = True  # first: a signal from here on is ignored, not raised in the caller's code later
            signal.setitimer(signal.ITIMER_REAL, 0.0)
            if state["watchdog"] is not None:
                state["watchdog"].cancel()
            signal.signal(signal.SIGALRM, previous)
            signal.signal(signal.SIGINT, previous_int)
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


#: ``os._exit`` as the audit found it: while an audit runs in-process (:func:`no_hard_exit`) a sampler's ``os._exit``
#: raises instead, and the audit's own last resort calls this one.
REAL_EXIT = os._exit


class _HardExit(SystemExit):
    """A sampler's call that would end or replace the audit's process (``os._exit``, an ``exec``, a fatal signal to
    itself) while the audit runs in-process: raised, not obeyed; ``call`` says what was called."""

    def __init__(self, call: str):
        super().__init__(call)
        self.call = call


#: The calls refused in other threads than the main one (which the raise there cannot reach).
_THREAD_EXITS: list = []


def _refuse(call: str):
    if threading.current_thread() is not threading.main_thread():
        _THREAD_EXITS.append(call)  # the next call (or the audit's end) reports it
        raise SystemExit(call)  # ends that thread quietly (threading ignores exactly SystemExit)
    raise _HardExit(call)


#: The audit's own process while :func:`no_hard_exit` guards it: a process the sampler forks gets the real calls (a
#: forked worker's ``os._exit`` is how it ends; refused there, it would run on as a copy of the audit).
_AUDITOR = {"pid": None, "raise": None}


def _forked() -> bool:
    return _AUDITOR["pid"] is not None and os.getpid() != _AUDITOR["pid"]


def _refused_exit(code=0):
    if _forked():
        REAL_EXIT(code)
    _refuse(f"os._exit({code!r})")


def _refused_exec(path, *args):
    if _forked():
        return REAL_CALLS["execve" if len(args) == 2 else "execv"](path, *args)
    _refuse(f"os.exec*({path!r}, ...)")


def _refused_abort():
    if _forked():
        REAL_CALLS["abort"]()
    _refuse("os.abort()")


def _refused_kill(pid, sig):
    if not _forked() and sig != 0 and pid in (0, -1, os.getpid(), -os.getpgrp()):  # itself, its group, every
        _refuse(f"os.kill({pid!r}, {sig!r}) on its own process")                    # process it may signal
    return REAL_CALLS["kill"](pid, sig)


def _refused_killpg(group, sig):
    if not _forked() and sig != 0 and group in (0, os.getpgrp()):
        _refuse(f"os.killpg({group!r}, {sig!r}) on its own process group")
    return REAL_CALLS["killpg"](group, sig)


def _refused_raise(sig):
    if _forked():
        return _AUDITOR["raise"](sig)
    _refuse(f"signal.raise_signal({sig!r})")


#: The process-ending calls as the audit found them (restored when an in-process audit ends).
REAL_CALLS = {"execv": os.execv, "execve": os.execve, "abort": os.abort, "kill": os.kill, "killpg": os.killpg}
_GUARDS = {"execv": _refused_exec, "execve": _refused_exec, "abort": _refused_abort, "kill": _refused_kill,
           "killpg": _refused_killpg}


def _thread_exit_error() -> SamplerError | None:
    if not _THREAD_EXITS:
        return None
    call = _THREAD_EXITS[0]
    _THREAD_EXITS.clear()
    return SamplerError(f"the sampler called {call} from a thread; the protocol needs it to return "
                        "(accepted, next_token)")


@contextlib.contextmanager
def no_hard_exit():
    """While inside, ``os._exit``, the ``exec`` family, ``os.abort`` and fatal signals a sampler sends its own
    process raise in this process, so a sampler that calls them is the sampler's error (exit 2) and never ends an
    in-process audit with status 0 and no verdict (a crash in native code still ends it: the child audit survives
    that)."""
    import posix  # os._exit is posix._exit: a sampler may call either
    import signal

    os._exit = posix._exit = _refused_exit
    for name, guard in _GUARDS.items():
        setattr(os, name, guard)
        setattr(posix, name, guard)
    raise_signal, signal.raise_signal = signal.raise_signal, _refused_raise
    _AUDITOR.update({"pid": os.getpid(), "raise": raise_signal})
    _THREAD_EXITS.clear()
    try:
        yield
        late = _thread_exit_error()  # a thread that exited after the last call
        if late is not None:
            raise late
    finally:
        os._exit = posix._exit = REAL_EXIT
        for name, real in REAL_CALLS.items():
            setattr(os, name, real)
            setattr(posix, name, real)
        signal.raise_signal = raise_signal
        _AUDITOR["pid"] = None


def _call(fn: Callable, args: tuple):
    value = _returned(fn, args)
    error = _thread_exit_error()  # an os._exit a thread of the sampler called during the call
    if error is not None:
        raise error
    return value


def _returned(fn: Callable, args: tuple):
    try:
        return fn(*args)
    except SamplerTimeout:
        raise
    except _HardExit as exc:
        raise SamplerError(f"the sampler called {exc.call}; the protocol needs it to return "
                           "(accepted, next_token)") from None
    except SystemExit as exc:  # the audit must end with a verdict, not with the sampler's exit status
        raise SamplerError(f"the sampler called sys.exit({exc.code!r}); the protocol needs it to return "
                           "(accepted, next_token)") from None
    except KeyboardInterrupt:  # Ctrl-C stays an interruption
        raise
    except BaseException as exc:  # any exception, BaseException subclasses included, is the sampler's error
        raise SamplerError(f"the sampler raised {exception_text(exc)}") from exc


def _as_int_vector(value, name: str, B: int, low: int, high: int) -> np.ndarray:
    try:
        if hasattr(value, "detach"):  # a torch tensor
            value = value.detach().cpu().numpy()
        masked = isinstance(value, np.ma.MaskedArray) and bool(np.ma.getmask(value).any())
        arr = np.asarray(value)
    except Exception as exc:  # an object whose conversion raises (a meta tensor, a broken __array__)
        raise SamplerError(f"the sampler returned {name} as a {type(value).__name__} that cannot be read as an array "
                           f"({exception_text(exc)})") from None
    if masked:  # np.asarray reads the numbers under the mask
        raise SamplerError(f"the sampler returned {name} as a masked array with masked entries; the protocol "
                           "needs every entry (a plain array)")
    if arr.shape != (B,):
        raise SamplerError(f"the sampler returned {name} of shape {arr.shape}; the protocol needs ({B},)")
    if arr.dtype.kind not in "iu":  # floats (even whole ones) and booleans are not token ids or counts
        raise SamplerError(f"the sampler returned {name} of dtype {arr.dtype}; the protocol needs integers "
                           "(e.g. .astype(np.int64))")
    arr = arr.astype(np.int64)
    bad = (arr < low) | (arr > high)
    if bad.any():
        raise SamplerError(f"the sampler returned {name} = {int(arr[bad][0])} at row {int(np.flatnonzero(bad)[0])}; "
                           f"the protocol needs values in [{low}, {high}]")
    return arr


def call_sampler(sampler: Callable, draft_tokens: np.ndarray, draft_probs: np.ndarray, target_probs: np.ndarray,
                 rng, timeout: float | None = DEFAULT_TIMEOUT_S) -> tuple[np.ndarray, np.ndarray]:
    """One protocol call, its output checked: (accepted (B,) in [0, L], next_token (B,) in [0, V)). The inputs are
    what the audit hands a sampler: int (B, L) drafts and float (B, L, V) / (B, L + 1, V) rows (lists are read)."""
    draft_tokens = integer_array(draft_tokens, "draft_tokens", "drafted token ids, shape (B, L)", ndim=2)
    draft_probs, target_probs = (real_array(x, name) for x, name in ((draft_probs, "draft_probs"),
                                                                      (target_probs, "target_probs")))
    B, L = draft_tokens.shape
    if draft_probs.ndim != 3 or target_probs.shape != (B, L + 1, draft_probs.shape[-1]) or \
            draft_probs.shape[:2] != (B, L):
        raise ValueError(f"draft_probs, target_probs: expected shapes (B, L, V) and (B, L + 1, V) with (B, L) = "
                         f"{(B, L)}, got {draft_probs.shape} and {target_probs.shape}")
    V = draft_probs.shape[-1]
    out = _run_with_timeout(sampler, (draft_tokens.copy(), draft_probs.copy(), target_probs.copy(), rng), timeout)
    if inspect.iscoroutine(out) or inspect.isgenerator(out):
        out.close()  # never run: closed here rather than warned about when collected
    try:
        pair = tuple(out) if isinstance(out, tuple | list) else None
    except Exception as exc:  # a sequence subclass that lies about its length or items
        raise SamplerError(f"the sampler returned a {type(out).__name__} that cannot be read as a pair "
                           f"({exception_text(exc)})") from None
    if pair is None or len(pair) != 2:
        raise SamplerError(f"the sampler returned {type(out).__name__}; the protocol needs a pair "
                           "(accepted, next_token)")
    accepted = _as_int_vector(pair[0], "accepted", B, 0, L)
    token = _as_int_vector(pair[1], "next_token", B, 0, V - 1)
    return accepted, token


def exception_text(exc: BaseException, where: str = "", limit: int = 300) -> str:
    """``TypeName<where>: first line of the message`` of an exception, at most ``limit`` characters of it; an
    exception whose ``str`` itself raises is named by its type."""
    try:
        text = str(exc)
    except Exception:
        text = "(its message cannot be printed)"
    lines = text.strip().splitlines()
    first = lines[0] if lines else ""
    if len(lines) > 1:
        first += " …"
    if len(first) > limit:
        first = first[:limit] + " …"
    return f"{type(exc).__name__}{where}: {first}" if first else f"{type(exc).__name__}{where}"
