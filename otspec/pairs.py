"""A draft/target pair of sources: the one pair check, Markov views and the prefix-tree walk.

Every exact computation over a pair of sources goes through three questions answered here
once: do the two models share a vocabulary and support the length asked for
(:func:`check_pair`); can the pair be handled by matrix recursions because both are IID or
order-1 Markov chains (:func:`markov_chains`); and otherwise, how to visit every prefix of
positive weight level by level without building more than
:data:`~otspec.sources.MAX_ENUMERATION` nodes (:func:`walk_prefix_tree`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from .checks import MAX_HORIZON, check_size
from .errors import HorizonError, SizeLimitError
from .sources import EMPTY_PREFIX, MAX_ENUMERATION, IIDSource, MarkovSource, Source, extend_prefixes
from .sources.base import check_source

__all__ = ["MAX_WALK_ENTRIES", "check_horizon", "check_pair", "check_pair_horizon", "markov_chains",
           "walk_prefix_tree"]

#: Most probability entries (prefixes × vocabulary) one level of :func:`walk_prefix_tree` builds.
MAX_WALK_ENTRIES = 2**25


def check_horizon(horizon, name: str = "horizon") -> int:
    """An integer length >= 1 and <= :data:`~otspec.checks.MAX_HORIZON` (bools, floats such as 2.7 are refused)."""
    return check_size(horizon, name, limit=MAX_HORIZON, limit_name="MAX_HORIZON")


def check_pair_horizon(draft: Source, target: Source, horizon) -> int:
    """T: an integer horizon (:func:`check_horizon`) that both sources of one vocabulary define."""
    T = check_horizon(horizon)
    check_pair(draft, target, T)
    return T


def check_pair(draft: Source, target: Source, length: int | None = None, *, depth_aware: bool = False) -> int:
    """Check that two sources share a vocabulary and define ``length`` tokens; return V.

    Raises ``ValueError`` naming both vocabulary sizes on a mismatch, naming the source and its horizon when
    ``length`` exceeds it, and naming a source whose rows depend on the draft depth
    (:attr:`~otspec.sources.Source.depth_dependent`) unless the caller follows it (``depth_aware``: the decode loops).
    """
    for name, source in (("draft", draft), ("target", target)):
        if not isinstance(source, Source):
            raise ValueError(f"{name}: expected a Source (otspec.IIDSource, otspec.MarkovSource, ...), got "
                             f"{type(source).__name__}; a probability row is otspec.IIDSource(row)")
        check_source(source, name)  # a subclass's vocab_size and horizon
        if source.depth_dependent and not depth_aware:  # its depth-0 rows at every position: a wrong number
            raise ValueError(f"{name}: {source!r} has rows that depend on the draft depth, which this computation "
                             "does not follow (it reads one row per prefix); decode it with otspec.generate, "
                             "otspec.engine.generate_tree or simulate_tree, which do")
    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"vocabulary mismatch: draft has {draft.vocab_size} tokens, target has "
                         f"{target.vocab_size}; both models must share one vocabulary")
    if length is not None:
        for role, src in (("draft", draft), ("target", target)):
            if src.horizon is not None and length > src.horizon:
                raise HorizonError(f"length {length} exceeds the {role} source's horizon {src.horizon} "
                                   f"({src!r} defines sequences of at most {src.horizon} tokens)",
                                   horizon=src.horizon, length=length)
    return int(target.vocab_size)


def _chain(source: Source, T: int):
    V = source.vocab_size
    if isinstance(source, MarkovSource):
        if source.stationary:  # one matrix for every step: a broadcast, not T copies (T = 10^6 at V = 50 is 20 GB)
            return source.initial, np.broadcast_to(source.matrix(1), (max(T - 1, 0), V, V))
        mats = np.stack([source.matrix(k) for k in range(1, T)]) if T > 1 else np.zeros((0, V, V))
        return source.initial, mats
    if isinstance(source, IIDSource):
        return source.probs, np.broadcast_to(source.probs, (max(T - 1, 0), V, V))
    return None


def markov_chains(draft: Source, target: Source, length: int):
    """``((p1, P), (q1, Q))`` for a pair of IID or Markov sources, else ``None``.

    ``p1`` (V,) is the law of the first token; ``P`` (length − 1, V, V) stacks the
    transition matrices, ``P[k]`` producing token k+2 (1-based) from token k+1 — for a
    :class:`~otspec.sources.MarkovSource` that is ``matrix(k + 1)``, for an IID source a
    broadcast of its row (no copy).
    """
    d, t = _chain(draft, length), _chain(target, length)
    return None if d is None or t is None else (d, t)


def walk_prefix_tree(draft: Source, target: Source, length: int, state: tuple, step: Callable,
                     *, what: str = "prefix tree") -> Iterator[tuple[int, tuple]]:
    """Visit the prefix tree of a pair level by level; yield ``(level, children_state)``.

    ``state`` is a tuple of arrays of shape (1,) for the root (the empty prefix). At each
    level n = 0..length−1, ``step(n, prefixes, p_rows, q_rows, *state)`` receives the N current
    prefixes (N, n) and both models' rows (N, V) there, and returns ``(children, keep)``: a tuple of arrays
    broadcastable to (N, V) (the children's state, child (i, x) = prefix i followed by token
    x, lexicographic) and a boolean (N, V) mask of the children to keep (``None``: all).
    The kept children become the next level's prefixes. The prefixes a level would hold and
    the N × V probabilities it would score are checked against
    :data:`~otspec.sources.MAX_ENUMERATION` and :data:`MAX_WALK_ENTRIES` before they are built
    (:class:`~otspec.errors.SizeLimitError`).
    """
    V = check_pair(draft, target, length)
    prefixes = EMPTY_PREFIX
    for n in range(length):
        entries = prefixes.shape[0] * V
        if entries > MAX_WALK_ENTRIES:
            raise SizeLimitError(f"{what}: level {n + 1} of the prefix tree needs {prefixes.shape[0]:,} prefixes x "
                                 f"{V:,} tokens = {entries:,} probabilities, above MAX_WALK_ENTRIES = "
                                 f"{MAX_WALK_ENTRIES:,}; use IID/Markov sources, a shorter length or Monte Carlo",
                                 size=entries, limit=MAX_WALK_ENTRIES)
        p_rows = np.asarray(draft.next_probs(prefixes), dtype=np.float64)
        q_rows = np.asarray(target.next_probs(prefixes), dtype=np.float64)
        children, keep = step(n, prefixes, p_rows, q_rows, *state)
        flat = [np.broadcast_to(c, p_rows.shape).reshape(-1) for c in children]
        if n == length - 1:
            yield n, tuple(flat)
            return
        count = prefixes.shape[0] * V if keep is None else int(np.count_nonzero(keep))
        if count > MAX_ENUMERATION:
            raise SizeLimitError(f"{what}: {count:,} prefixes of length {n + 1} exceed MAX_ENUMERATION = "
                                 f"{MAX_ENUMERATION:,}; use IID/Markov sources, a shorter length or Monte Carlo",
                                 size=count, limit=MAX_ENUMERATION)
        prefixes = extend_prefixes(prefixes, V)
        if keep is not None:
            keep = np.asarray(keep).reshape(-1)
            prefixes, flat = prefixes[keep], [f[keep] for f in flat]
        state = tuple(flat)
        yield n, state
