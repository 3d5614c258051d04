"""The command line's audit runs in a child process, so that no sampler can end it without a verdict.

A sampler that ends its own process — ``os._exit(0)``, a signal, a crash in native code — ends whatever process
it runs in, before any ``finally`` or exit handler; run in the command's own process it would leave exit status 0
(or 1) behind, which a script reads as a verdict. ``python -m otspec audit`` therefore runs the audit in a child
(``python -m otspec.audit.isolate``, handed the parsed arguments in a file), which writes its outcome — the report, an error
line, or an interruption — to a file the parent named; the parent prints it as the command always did. A child
that ends without writing one is reported by the parent: exit status 2 and one line saying how the child ended.
The parent also ends a child that outlives its own audit (a thread or exit handler the sampler left behind) a few
seconds after its outcome is written, and one whose sampler call runs past ``--timeout`` while holding the
interpreter so that no timer of the child's own can fire (the child tells the parent each call's deadline).
``--in-process`` (and ``otspec.cli.main(argv)`` called from Python) run the audit in the calling process.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..clitools import CLIError

__all__ = ["OUTCOME_ENV", "hard_exit", "run_isolated"]

#: The environment variable that names the child's outcome file.
OUTCOME_ENV = "OTSPEC_AUDIT_OUTCOME"


def _ended(status: int) -> str:
    if status < 0:
        try:
            return f"killed by signal {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"


def run_isolated(args) -> dict:
    """Run the audit the parsed command line ``args`` asks for in a child process and return its result dict (what ``_run`` returns in
    process); the child's error is raised here as a ``ValueError`` with the same message, as is a KeyboardInterrupt
    the sampler raised (a Ctrl-C interrupts this process too, and ends it as one), and a child that ended without an
    outcome as a :class:`CLIError`."""
    with tempfile.TemporaryDirectory(prefix="otspec-audit-") as tmp:
        path = Path(tmp) / "outcome.pickle"
        (Path(tmp) / "args.pickle").write_bytes(pickle.dumps(args))
        paths = [p for p in sys.path if p] + os.environ.get("PYTHONPATH", "").split(os.pathsep)
        env = {**os.environ, OUTCOME_ENV: str(path), "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        sys.stdout.flush()
        sys.stderr.flush()
        # the child's own stdout is the parent's stderr: the sampler's prints never mix with the verdict or --json
        proc = subprocess.Popen([sys.executable, "-m", "otspec.audit.isolate"], env=env,
                                stdout=sys.stderr.fileno() if _has_fileno(sys.stderr) else None)
        try:
            with _terminated_as_error():
                overdue = _supervise(proc, path, Path(tmp) / "deadline")
        finally:  # interrupted (a Ctrl-C, or a SIGINT the sampler sent this process): the child ends with it
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        outcome = pickle.loads(path.read_bytes()) if path.is_file() and path.stat().st_size else None
    if outcome is None and overdue is not None:
        raise CLIError(f"the sampler did not return within --timeout ({overdue:g} s) and held the audit's process "
                       "so that it could not stop the call; the audit ended it")
    if outcome is None:
        if sys.stderr.isatty():
            print(file=sys.stderr)  # end the progress bar the child left mid-line
        raise CLIError(f"the audited sampler ended the audit's process ({_ended(proc.returncode)}) before a verdict: "
                       "a sampler must return (accepted, next_token), not end its process")
    kind, value = outcome
    if kind == "interrupted":  # this process was not interrupted (a Ctrl-C reaches both): the sampler raised it
        raise ValueError("the sampler raised KeyboardInterrupt (or its process alone was sent SIGINT); the protocol "
                         "needs it to return (accepted, next_token)")
    if kind == "error":
        raise ValueError(value)
    return value


#: Seconds a child may run on after writing its outcome, and past a sampler call's deadline, before it is killed.
GRACE_S = 5.0


def _supervise(proc, outcome: Path, deadline: Path) -> float | None:
    """Wait for the child; kill it when it outlives its outcome or a sampler call's deadline by :data:`GRACE_S`.
    Returns the overdue call's timeout (seconds) when that is why it was killed, else None."""
    done_at = None
    while True:
        try:
            proc.wait(timeout=0.2)
            return None
        except subprocess.TimeoutExpired:
            pass
        now = time.time()
        if outcome.is_file():
            done_at = done_at or now
            if now - done_at > GRACE_S:
                proc.kill()
                proc.wait()
                return None
            continue
        try:
            due, timeout = (float(x) for x in deadline.read_text().split())
        except (OSError, ValueError):  # no call running, or the file mid-write
            continue
        if now > due + max(GRACE_S, 0.5 * timeout):
            proc.kill()
            proc.wait()
            return timeout


class _Terminated(Exception):
    pass


@contextlib.contextmanager
def _terminated_as_error():
    """While the child runs, a SIGTERM to this process (from the sampler, or anyone) ends the audit with one line,
    exit status 2, and the child ended, rather than silently with status 143."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except _Terminated:
        raise CLIError("the audit's process was sent SIGTERM (by the sampler or another process) before a verdict; "
                       "the audit ended") from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def _has_fileno(stream) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # a test's captured stream, a closed one
        return False
    return True


def _write(path: Path, outcome: tuple) -> None:
    tmp = path.with_suffix(".partial")
    tmp.write_bytes(pickle.dumps(outcome))
    tmp.replace(path)  # whole or absent: a child killed mid-write leaves no outcome


def _deadline_writer(path: Path):
    def write(due, timeout=None):
        if due is None:
            path.unlink(missing_ok=True)
            return
        tmp = path.with_suffix(".partial")
        tmp.write_text(f"{due!r} {timeout!r}")
        tmp.replace(path)

    return write


def _child() -> int:
    from ..errors import SolveError
    from .protocol import DEADLINE, HARD_EXIT

    path = Path(os.environ[OUTCOME_ENV])
    HARD_EXIT["report"] = lambda message: _write(path, ("error", message))
    DEADLINE["write"] = _deadline_writer(path.parent / "deadline")
    args = pickle.loads((path.parent / "args.pickle").read_bytes())
    try:
        outcome = ("result", args.run(args))  # the command's own entry: in this child it runs in process
    except OSError as exc:  # the --out folder was checked first: a stream the sampler closed is the usual cause
        outcome = ("error", f"{exc}; the audit's process lost a file it writes to while the sampler ran (a sampler "
                            "must not close or redirect the process's standard streams)"
                   if exc.errno == errno.EBADF else str(exc))
    except (CLIError, ValueError, SolveError) as exc:
        outcome = ("error", str(exc))
    except KeyboardInterrupt:
        outcome = ("interrupted", None)
    try:
        _write(path, outcome)
    except OSError:  # the parent is gone with its folder (it was interrupted and ended this process): no one to tell
        return 1
    return 0


def hard_exit(code) -> None:
    """Flush what is still open and end the process without an interpreter shutdown: a thread or exit handler the
    sampler left cannot keep it alive, and a stream the sampler closed is skipped."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (ValueError, OSError, AttributeError):  # closed, broken, or replaced by the sampler
            pass
    os._exit(code if isinstance(code, int) and not isinstance(code, bool) else 1)


if __name__ == "__main__":
    if OUTCOME_ENV not in os.environ:
        sys.exit("otspec.audit.isolate is the audit's child process: run `python -m otspec audit` instead")
    hard_exit(_child())
