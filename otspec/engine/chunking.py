"""The one chunking policy of every simulator: how many independent trials to vectorise at once."""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import check_size
from ..namespaces import resolve_device

__all__ = ["CHUNK_ENTRIES", "DEFAULT_BACKEND", "MAX_CHUNK", "MONTE_CARLO_METHODS", "Backend", "check_backend",
           "chunk_size", "chunks"]

#: How a simulator may draw its trials (:class:`Backend`): ``rows`` materialises both sources' rows and runs
#: the verifier's ``sample``; ``row_free`` samples the same law from tables built once; ``compiled`` runs
#: the same algorithm in a numba kernel; ``auto`` picks the fastest that applies.
MONTE_CARLO_METHODS = ("auto", "rows", "row_free", "compiled")

#: Probability entries (trials × positions × vocabulary) a simulator materialises per chunk:
#: 2^23 float64 numbers, 64 MiB, enough to amortise numpy's per-call overhead at small V.
CHUNK_ENTRIES = 2**23
#: Most trials in one chunk, whatever their size.
MAX_CHUNK = 2**20


@dataclass(frozen=True)
class Backend:
    """How a Monte Carlo simulator draws its trials; nothing here changes the law it samples.

    Parameters
    ----------
    method : {"auto", "rows", "row_free", "compiled"}
        See :data:`MONTE_CARLO_METHODS`; each simulator says which it offers and refuses the others
        (:func:`check_backend`).
    device : None, "auto" or a torch device
        Row-free sampling only: None runs numpy; otherwise torch on that device ("auto": CUDA when
        available, else the CPU).
    batch_size : int, optional
        Trials per vectorised chunk (default: :func:`chunk_size` of the trial's size), at most :data:`MAX_CHUNK`.

    >>> Backend(method="rows", batch_size=4096)
    Backend(method='rows', device=None, batch_size=4096)
    >>> Backend(batch_size=0)
    Traceback (most recent call last):
    ...
    ValueError: batch_size: expected an integer >= 1, got 0
    """

    method: str = "auto"
    device: object = None
    batch_size: int | None = None

    def __post_init__(self):
        if self.method not in MONTE_CARLO_METHODS:
            raise ValueError(f"method: expected one of {MONTE_CARLO_METHODS}, got {self.method!r}")
        if self.device is not None:  # 'zz' was kept until a simulator read it
            resolve_device(self.device)
        if self.batch_size is not None:
            object.__setattr__(self, "batch_size", check_size(self.batch_size, "batch_size", limit=MAX_CHUNK,
                                                              limit_name="MAX_CHUNK (2**20)"))


#: The default of every simulator: ``method="auto"`` on numpy, chunks sized by :func:`chunk_size`.
DEFAULT_BACKEND = Backend()


def check_backend(backend, what: str, methods: tuple[str, ...] = MONTE_CARLO_METHODS, *,
                  devices: bool = False) -> Backend:
    """``backend`` if it is a :class:`Backend` that simulator ``what`` serves: its method among ``methods`` and,
    unless ``devices``, no torch device (a ``ValueError`` naming what ``what`` offers otherwise)."""
    if not isinstance(backend, Backend):
        raise ValueError(f"{what}: backend: expected an otspec Backend(method, device, batch_size), got {backend!r}")
    if backend.method not in methods:
        raise ValueError(f"{what}: method {backend.method!r} is not offered; expected one of {methods}")
    if backend.device is not None and not devices:
        raise ValueError(f"{what} runs on numpy; backend.device must be None, got {backend.device!r}")
    return backend


def chunk_size(entries_per_trial: int, batch_size: int | None = None) -> int:
    """Trials per chunk: ``batch_size`` if given (>= 1), else CHUNK_ENTRIES // entries, in [1, MAX_CHUNK].

    >>> chunk_size(9 * 2), chunk_size(32_000 * 9), chunk_size(10, batch_size=999)
    (466033, 29, 999)
    """
    if batch_size is not None:
        return check_size(batch_size, "batch_size", limit=MAX_CHUNK, limit_name="MAX_CHUNK (2**20)")
    return max(1, min(MAX_CHUNK, CHUNK_ENTRIES // max(1, int(entries_per_trial))))


def chunks(n: int, size: int) -> list[tuple[int, int]]:
    """Consecutive ``(start, stop)`` ranges of at most ``size`` covering range(n)."""
    return [(s, min(n, s + size)) for s in range(0, n, size)]
