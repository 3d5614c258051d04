"""The sources themselves: IID rows, Markov chains (stationary or time-varying), prefix tables."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping

import numpy as np

from ..checks import (
    MAX_HORIZON,
    MAX_VOCAB_SIZE,
    NOT_NUMBERS,
    check_size,
    coarsest_eps,
    read_numbers,
    tensors_as_arrays,
)
from ..distributions import eps_tolerance, validate_probs
from .base import Source, as_lengths, as_tokens, check_source

#: An IID source range-checks every token id of prefixes up to this many ids (beyond: each row's last one).
_CHECK_ALL_TOKENS = 65_536

__all__ = ["DepthPositionalSource", "GreedySource", "IIDSource", "MarkovSource", "PositionalSource", "TableSource", "bernoulli",
           "uniform_source"]


def _host_rows(probs, name: str, **kwargs) -> np.ndarray:
    """``probs`` checked (:func:`~otspec.distributions.validate_probs`) as float64 numpy rows: a tensor (one that
    requires grad, bfloat16) read on the host; float16/32 rows renormalised in float64 (their own renormalisation
    leaves sums 1e-8 off, which a saved and reloaded source would not reproduce)."""
    checked = tensors_as_arrays(validate_probs(probs, name, **kwargs))
    rows = np.asarray(checked, dtype=np.float64)
    if np.asarray(checked).dtype != np.float64 and rows.size:
        rows = rows / rows.sum(axis=-1, keepdims=True)
    return rows


class IIDSource(Source):
    """Every token independently drawn from ``probs`` (shape (V,))."""

    context = 0

    def __init__(self, probs):
        self.probs = _host_rows(probs, "probs")
        if self.probs.ndim != 1:
            raise ValueError(f"probs: expected one row of shape (V,), got {self.probs.shape}")
        self.vocab_size = self.probs.shape[0]
        self._cdf = np.cumsum(self.probs)

    def __repr__(self):
        return f"IIDSource(probs={self.probs.tolist()})"

    def _rows(self, tokens, lengths):
        if tokens.size <= _CHECK_ALL_TOKENS:  # the rows read no token; the prefixes' ids are still range-checked
            self._check_tokens(tokens[np.arange(tokens.shape[1]) < lengths[:, None]])  # (a long decode buffer:
        elif lengths.size:  # each row's last token, the one just committed)
            last = tokens[np.arange(tokens.shape[0]), np.maximum(lengths - 1, 0)]
            self._check_tokens(last[lengths > 0])
        return np.broadcast_to(self.probs, (tokens.shape[0], self.vocab_size))

    def _rows_at(self, tokens, lengths, depths):
        if lengths.size * self.vocab_size <= _CHECK_ALL_TOKENS:  # a few rows: one gather beats a broadcast view
            return self.probs[None, :][np.zeros(lengths.shape, dtype=np.intp)]
        return np.broadcast_to(self.probs, (*lengths.shape, self.vocab_size))

    def path_probs(self, tokens, include_next=True):
        tokens = as_tokens(tokens)
        self._check_tokens(tokens)
        return np.broadcast_to(self.probs, (tokens.shape[0], tokens.shape[1] + int(include_next), self.vocab_size))

    def sample(self, n, length, rng):
        n, length = self._sample_args(n, length, rng)
        u = rng.random((n, length)) * self._cdf[-1]
        return np.minimum(np.searchsorted(self._cdf, u, side="right"), self.vocab_size - 1)

    def to_json(self):
        return {"type": "iid", "probs": self.probs.tolist()}


def bernoulli(p: float) -> IIDSource:
    """IID Ber(p) over {0, 1}: P(token = 1) = p."""
    if isinstance(p, NOT_NUMBERS) or not isinstance(p, numbers.Real):  # True, '0.5', 0.5+0j, a timedelta
        raise ValueError(f"bernoulli: p must be a number in [0, 1], got {p!r} ({type(p).__name__})")
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"bernoulli: p must lie in [0, 1], got {p}")
    return IIDSource([1.0 - p, p])


def uniform_source(support: int, vocab_size: int | None = None) -> IIDSource:
    """U(d): uniform on the first ``support`` tokens of a ``vocab_size``-token vocabulary."""
    support = check_size(support, "support", limit=MAX_VOCAB_SIZE, limit_name="MAX_VOCAB_SIZE")
    vocab_size = support if vocab_size is None else check_size(vocab_size, "vocab_size", limit=MAX_VOCAB_SIZE,
                                                               limit_name="MAX_VOCAB_SIZE")
    if not 1 <= support <= vocab_size:
        raise ValueError(f"uniform: need 1 <= support <= vocab_size, got support={support}, vocab_size={vocab_size}")
    probs = np.zeros(vocab_size)
    probs[:support] = 1.0 / support
    return IIDSource(probs)


class MarkovSource(Source):
    """Order-1 Markov chain.

    Parameters
    ----------
    initial : array_like, shape (V,)
        Law of the first token.
    transition : array_like, shape (V, V) or (K, V, V) or a list of K (V, V) matrices
        ``transition[a, b]`` = P(next = b | previous = a). A 2-D matrix gives a
        stationary chain (unbounded horizon); K matrices give a time-varying
        chain whose k-th matrix (0-based) produces token k+2 from token k+1,
        hence horizon K+1.
    horizon : int, optional
        For time-varying chains, the horizon the caller needs; an error is
        raised if fewer than ``horizon − 1`` matrices are given.
    """

    context = 1

    def __init__(self, initial, transition, horizon: int | None = None):
        self.initial = _host_rows(initial, "initial")
        if self.initial.ndim != 1:
            raise ValueError(f"initial: expected shape (V,), got {self.initial.shape}")
        V = self.initial.shape[0]
        eps = coarsest_eps(transition)  # float16 or bfloat16 rows keep their tolerance once read as float64
        expected = f"a ({V}, {V}) matrix or a list of them (rows of equal length, numbers only)"
        _, raw = read_numbers(transition, "transition", expected)  # '0.5', True, complex: refused, not read
        try:
            trans = raw.astype(np.float64)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an integer no float holds
            raise ValueError(f"transition: expected {expected}") from None
        if trans.size == 0 and horizon is not None:  # a time-varying chain of horizon 1 has no matrices
            trans = np.zeros((0, V, V))
        if trans.ndim not in (2, 3) or trans.shape[-2:] != (V, V):
            raise ValueError(
                f"transition: expected a ({V}, {V}) matrix or a list of them to match initial's "
                f"{V} tokens, got shape {trans.shape}"
            )
        self.transition = _host_rows(trans, "transition", tol=eps_tolerance(eps))
        self.vocab_size = V
        self.stationary = trans.ndim == 2
        self._stack = self.transition[None] if self.stationary else self.transition
        self.horizon = None if self.stationary else self.transition.shape[0] + 1
        if horizon is not None:  # an integer >= 1 (a chain draws at least one token), at most what the matrices give
            horizon = check_size(horizon, "horizon")
            if self.horizon is not None and horizon > self.horizon:
                raise ValueError(f"horizon {horizon}: a time-varying chain of horizon {horizon} needs {horizon - 1} "
                                 f"transition matrices, got {self.horizon - 1}")
            self.horizon = horizon  # the chain ends there, stationary or not

    def __repr__(self):
        kind = "stationary" if self.stationary else f"time-varying, horizon {self.horizon}"
        return f"MarkovSource(V={self.vocab_size}, {kind})"

    def matrix(self, step: int) -> np.ndarray:
        """Transition matrix producing token ``step`` (0-based, step >= 1) from token ``step − 1``."""
        return self._stack[0 if self.stationary else step - 1]

    def _rows(self, tokens, lengths):
        B = tokens.shape[0]
        if not self._stack.shape[0]:  # horizon 1, no matrices: only the first token's law (the horizon was checked)
            return np.broadcast_to(self.initial, (B, self.vocab_size))
        prev = tokens[np.arange(B), np.maximum(lengths - 1, 0)] if tokens.shape[1] else np.zeros(B, np.int64)
        which = np.zeros(B, np.int64) if self.stationary else np.maximum(lengths - 1, 0)
        prev = np.where(lengths > 0, prev, 0)
        self._check_tokens(prev)
        rows = self._stack[which, prev]
        return np.where((lengths == 0)[:, None], self.initial, rows)

    def _rows_at(self, tokens, lengths, depths):
        if not self._stack.shape[0]:  # horizon 1, as in _rows
            return np.broadcast_to(self.initial, (*lengths.shape, self.vocab_size))
        before = np.maximum(lengths - 1, 0)
        prev = np.take_along_axis(tokens, before, axis=1) if tokens.shape[1] else np.zeros(lengths.shape, np.int64)
        rows = self._stack[0 if self.stationary else before, prev]
        return np.where((lengths == 0)[..., None], self.initial, rows)

    def path_probs(self, tokens, include_next=True):
        tokens = as_tokens(tokens)
        self._check_tokens(tokens)
        B, T = tokens.shape
        if not include_next:
            tokens, T = tokens[:, : max(T - 1, 0)], T - 1
            if T < 0:
                return np.zeros((B, 0, self.vocab_size))
        self.check_length(T + 1)
        which = np.zeros(T, np.int64) if self.stationary else np.arange(T)
        rows = self._stack[which[None, :], tokens]  # (B, T, V): law of token t+1 given token t
        first = np.broadcast_to(self.initial, (B, 1, self.vocab_size))
        return np.concatenate([first, rows], axis=1)

    def to_json(self):
        out = {"type": "markov", "initial": self.initial.tolist(), "transition": self.transition.tolist()}
        if self.horizon is not None:  # a time-varying chain's (which also says how to read an empty list of
            out["horizon"] = self.horizon  # matrices), or the one a stationary chain was given
        return out


class PositionalSource(Source):
    """Token t (0-based) drawn from ``rows[t]`` whatever came before: independent, not identically distributed.

    ``rows`` has shape (T, V), so the horizon is T. A logged decoding path replays this way
    (:mod:`otspec.sources.logged`). ``proposes`` (bool (T,), optional) marks the positions where a
    draft replayed by this source has a token to propose (a prompt-lookup drafter may have none; its
    row there is not used): the decode loops stop drafting at a position marked ``False``.
    """

    context = 0

    def __init__(self, rows, proposes=None):
        self.rows = _host_rows(rows, "rows", min_ndim=2)
        if self.rows.ndim != 2 or self.rows.shape[0] < 1:
            raise ValueError(f"rows: expected shape (T, V) with T >= 1, got {self.rows.shape}")
        self.horizon, self.vocab_size = self.rows.shape
        self._cdf = np.cumsum(self.rows, axis=1)
        self._proposes = None
        if proposes is not None:
            mask = np.asarray(proposes)
            if mask.dtype != bool or mask.shape != (self.horizon,):
                raise ValueError(f"proposes: expected a bool array of shape ({self.horizon},), got {mask.dtype} "
                                 f"{mask.shape}")
            self._proposes = mask.copy()

    def __repr__(self):
        return f"PositionalSource(T={self.horizon}, V={self.vocab_size})"

    def proposes(self, lengths, depths=None) -> np.ndarray | None:
        if self._proposes is None:
            return None
        return self._proposes[np.clip(np.asarray(lengths, dtype=np.int64), 0, self.horizon - 1)]

    def _rows(self, tokens, lengths):
        return self.rows[lengths]

    def _rows_at(self, tokens, lengths, depths):
        return self.rows[lengths]

    def path_probs(self, tokens, include_next=True):
        tokens = as_tokens(tokens)
        self._check_tokens(tokens)
        T = tokens.shape[1] + int(include_next)
        self.check_length(T)
        return np.broadcast_to(self.rows[:T], (tokens.shape[0], T, self.vocab_size))

    def sample(self, n, length, rng):
        n, length = self._sample_args(n, length, rng)
        self.check_length(length)
        u = rng.random((n, length))
        out = np.empty((n, length), dtype=np.int64)
        for t in range(length):  # one inverse CDF per position, vectorised over the n sequences
            out[:, t] = np.searchsorted(self._cdf[t], u[:, t] * self._cdf[t, -1], side="right")
        return np.minimum(out, self.vocab_size - 1)

    def to_json(self):
        out = {"type": "positional", "rows": self.rows.tolist()}
        if self._proposes is not None:
            out["proposes"] = self._proposes.tolist()
        return out


class DepthPositionalSource(PositionalSource):
    """A draft whose row at position t also depends on its *draft depth*: how many tokens it has drafted
    since the last commit (a feature-level head such as EAGLE's runs on its own predicted features from
    the second drafted token on, so its rows change with the depth).

    ``rows`` has shape (D, T, V): ``rows[d, t]`` is the row at position t as the (d + 1)-th drafted row of a
    block (depth d; depths past D − 1 use the last). As a plain source (``next_probs``) it is depth 0, the
    row after a committed prefix. The decode loops' :class:`~otspec.engine.session.SourceSession` asks
    :meth:`depth_rows` with each row's depth, so the decode engine replays a logged head exactly as it drafts.
    The same holds for a *target* whose row depends on the drafted tokens before it (a prompt-lookup chain
    copies tokens that the target then scores: its row at depth d is the one after the block's d drafted tokens).

    ``proposes`` is bool (T,) (by position) or (D, T) (by depth and position: a prompt-lookup chain that
    started at position t − d has a (d + 1)-th token or not).
    """

    def __init__(self, rows, proposes=None):
        rows = _host_rows(rows, "rows", min_ndim=3)
        if rows.ndim != 3 or rows.shape[0] < 1:
            raise ValueError(f"rows: expected shape (D, T, V) with D >= 1, got {rows.shape}")
        by_depth = None
        if proposes is not None and np.ndim(proposes) == 2:
            by_depth = np.asarray(proposes)
            if by_depth.dtype != bool or by_depth.shape != rows.shape[:2]:
                raise ValueError(f"proposes: expected a bool array of shape {rows.shape[:2]} (depth, position) or "
                                 f"({rows.shape[1]},), got {by_depth.dtype} {by_depth.shape}")
            proposes = by_depth[0]
        super().__init__(rows[0], proposes)
        self.by_depth, self._proposes_by_depth = rows, None if by_depth is None else by_depth.copy()
        self.depth_dependent = bool(np.any(rows != rows[:1])) or (
            by_depth is not None and bool(np.any(by_depth != by_depth[:1])))

    def proposes(self, lengths, depths=None) -> np.ndarray | None:
        if self._proposes_by_depth is None or depths is None:
            return super().proposes(lengths)
        lengths = np.clip(np.asarray(lengths, dtype=np.int64), 0, self.horizon - 1)
        depths = np.clip(np.asarray(depths, dtype=np.int64), 0, self.by_depth.shape[0] - 1)
        return self._proposes_by_depth[depths, lengths]

    def __repr__(self):
        return f"DepthPositionalSource(D={self.by_depth.shape[0]}, T={self.horizon}, V={self.vocab_size})"

    def depth_rows(self, lengths, depths) -> np.ndarray:
        """Rows (n, V) at positions ``lengths`` (prefix lengths) and draft depths ``depths`` (0: after a commit)."""
        lengths, depths = as_lengths(lengths), as_lengths(depths, "depths")
        if (lengths < 0).any() or (lengths >= self.horizon).any():
            raise ValueError(f"depth_rows: positions must lie in [0, {self.horizon}), got {lengths.min()}..{lengths.max()}")
        depths = np.clip(np.asarray(depths, dtype=np.int64), 0, self.by_depth.shape[0] - 1)
        return self.by_depth[depths, lengths]

    def _rows_at(self, tokens, lengths, depths):
        if depths is None:
            return self.rows[lengths]
        return self.by_depth[np.clip(depths, 0, self.by_depth.shape[0] - 1), lengths]

    def to_json(self):
        out = {"type": "depth_positional", "rows": self.by_depth.tolist()}
        if self._proposes is not None:
            out["proposes"] = (self._proposes if self._proposes_by_depth is None else self._proposes_by_depth).tolist()
        return out


class TableSource(Source):
    """Arbitrary prefix → next-token law, from a mapping or a callable.

    Parameters
    ----------
    rows : Mapping[tuple[int, ...], array_like] or Callable[[tuple[int, ...]], array_like]
        Next-token row for each prefix (a tuple of token ids, ``()`` for the
        first token). Mapping rows are validated once; callable rows on use.
    vocab_size : int
    horizon : int
        Longest sequence defined (a mapping must cover every prefix shorter than it
        that can occur).
    """

    def __init__(self, rows: Mapping | Callable, vocab_size: int, horizon: int):
        self.vocab_size = check_size(vocab_size, "vocab_size", limit=MAX_VOCAB_SIZE, limit_name="MAX_VOCAB_SIZE")
        self.horizon = check_size(horizon, "horizon", limit=MAX_HORIZON, limit_name="MAX_HORIZON")
        if callable(rows) and not isinstance(rows, Mapping):
            self._fn = rows
            self._table = None
        elif not isinstance(rows, Mapping):
            raise ValueError(f"rows: expected a mapping from prefixes to probability rows, or a function of the "
                             f"prefix, got {type(rows).__name__}")
        else:
            self._table = {}
            for given, row in rows.items():
                if (not isinstance(given, tuple)
                        or not all(isinstance(k, numbers.Integral) and not isinstance(k, bool | np.bool_)
                                   for k in given)):  # int() would make (0.7,) the row of (0,), silently
                    raise ValueError(f"rows: key {given!r} is not a prefix; expected a tuple of integer token ids "
                                     "(() for the first token)")
                key = tuple(int(k) for k in given)
                if key in self._table:  # (0,) and (np.int64(0),) name one prefix
                    raise ValueError(f"rows: two keys name the prefix {key}")
                if any(not 0 <= k < self.vocab_size for k in key):
                    raise ValueError(f"rows[{key}]: token ids must lie in [0, {self.vocab_size}) (vocab_size)")
                if len(key) >= self.horizon:
                    raise ValueError(f"rows[{key}]: a prefix of {len(key)} tokens is never read by a source of horizon "
                                     f"{self.horizon} (prefixes of at most {self.horizon - 1} tokens)")
                arr = _host_rows(row, f"rows[{key}]")
                if arr.shape != (self.vocab_size,):
                    raise ValueError(f"rows[{key}]: expected shape ({self.vocab_size},), got {arr.shape}")
                self._table[key] = arr
            self._fn = None

    def __repr__(self):
        return f"TableSource(V={self.vocab_size}, horizon={self.horizon})"

    def row(self, prefix: tuple[int, ...]) -> np.ndarray:
        if self._table is not None:
            try:
                return self._table[prefix]
            except KeyError:
                where = f" ({self.origin})" if self.origin else ""
                raise ValueError(f"TableSource{where}: its rows (the 'rows' of a table source) have no row for the prefix "
                                 f"{prefix}, which a draft or continuation reaches; give a row for every prefix of "
                                 f"length < horizon {self.horizon}") from None
        arr = _host_rows(self._fn(prefix), f"row for prefix {prefix}")
        if arr.shape != (self.vocab_size,):
            raise ValueError(f"row for prefix {prefix}: expected shape ({self.vocab_size},), got {arr.shape}")
        return arr

    def _rows(self, tokens, lengths):
        if tokens.shape[0] == 0:
            return np.zeros((0, self.vocab_size))
        return np.stack([self.row(tuple(tokens[b, : lengths[b]].tolist())) for b in range(tokens.shape[0])])

    def to_json(self):
        if self._table is None:
            table = {
                p: self.row(p)
                for t in range(self.horizon)
                for p in map(tuple, self.enumerate(t).tokens.tolist())
            }
        else:
            table = self._table
        return {
            "type": "table",
            "vocab_size": self.vocab_size,
            "horizon": self.horizon,
            "rows": {",".join(map(str, k)): v.tolist() for k, v in table.items()},
        }


class GreedySource(Source):
    """Greedy decoding of another source: each row is one-hot at the base row's most likely token (first on ties)."""

    def __init__(self, base: Source):
        self.base = check_source(base, "base")
        self.vocab_size = base.vocab_size
        self.horizon = base.horizon
        self.context = base.context

    def __repr__(self):
        return f"GreedySource({self.base!r})"

    def _rows(self, tokens, lengths):
        return self._one_hot(self.base._rows(tokens, lengths))

    def _rows_at(self, tokens, lengths, depths):
        return self._one_hot(self.base._rows_at(tokens, lengths, depths))

    @staticmethod
    def _one_hot(rows: np.ndarray) -> np.ndarray:
        out = np.zeros(rows.shape)
        np.put_along_axis(out, np.argmax(rows, axis=-1)[..., None], 1.0, axis=-1)
        return out

    def to_json(self):
        raise ValueError("GreedySource has no JSON form; save its base source instead")

