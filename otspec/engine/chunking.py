"""The one chunking policy of every simulator: how many independent trials to vectorise at once."""

from __future__ import annotations

__all__ = ["CHUNK_ENTRIES", "MAX_CHUNK", "chunk_size", "chunks"]

#: Probability entries (trials × positions × vocabulary) a simulator materialises per chunk:
#: 2^23 float64 numbers, 64 MiB, enough to amortise numpy's per-call overhead at small V.
CHUNK_ENTRIES = 2**23
#: Most trials in one chunk, whatever their size.
MAX_CHUNK = 2**20


def chunk_size(entries_per_trial: int, batch_size: int | None = None) -> int:
    """Trials per chunk: ``batch_size`` if given (>= 1), else CHUNK_ENTRIES // entries, in [1, MAX_CHUNK].

    >>> chunk_size(9 * 2), chunk_size(32_000 * 9), chunk_size(10, batch_size=999)
    (466033, 29, 999)
    """
    if batch_size is not None:
        if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"batch_size: expected a positive integer, got {batch_size!r}")
        return int(batch_size)
    return max(1, min(MAX_CHUNK, CHUNK_ENTRIES // max(1, int(entries_per_trial))))


def chunks(n: int, size: int) -> list[tuple[int, int]]:
    """Consecutive ``(start, stop)`` ranges of at most ``size`` covering range(n)."""
    return [(s, min(n, s + size)) for s in range(0, n, size)]
