"""Autoregressive sources over a finite vocabulary.

A *source* answers one question for a batch: given token prefixes, what is the
law of the next token? Everything else (joint probabilities, enumeration,
sampling) is derived from that.

Prefixes are passed as a padded integer buffer ``tokens`` of shape (B, T) plus
``lengths`` of shape (B,): row ``b`` conditions on ``tokens[b, :lengths[b]]``.
The padding convention lets the decode engine keep sequences of different
lengths in one array; when ``lengths`` is omitted every row uses all T tokens.

Sources in this module
----------------------
* :class:`IIDSource` — every token drawn from one row (Bernoulli, uniform U(d), any vector).
* :class:`MarkovSource` — order-1 chains, stationary (one matrix) or time-varying
  (one matrix per step, hence a finite horizon).
* :class:`TableSource` — arbitrary prefix → row tables or callables (finite horizon).

JSON format (read by :func:`source_from_json`, written by ``Source.to_json``)::

    {"type": "iid", "probs": [0.3, 0.7]}
    {"type": "bernoulli", "p": 0.7}                       # P(token 1) = p
    {"type": "uniform", "support": 4, "vocab_size": 6}    # U(4) inside 6 tokens
    {"type": "markov", "initial": [...], "transition": [[...], ...]}
    {"type": "markov", "initial": [...], "transition": [M1, M2, ...], "horizon": T}
    {"type": "table", "vocab_size": 2, "horizon": 2,
     "rows": {"": [0.5, 0.5], "0": [0.9, 0.1], "1": [0.2, 0.8]}}

``transition[a][b]`` is P(next = b | previous = a). For a time-varying chain the
i-th matrix (0-based) gives token i+2 from token i+1, so a horizon-T chain needs
T−1 matrices.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from .distributions import sample_categorical, validate_probs
from .errors import SizeLimitError

#: Largest number of sequences :meth:`Source.enumerate` will build.
MAX_ENUMERATION = 2**21

__all__ = [
    "EMPTY_PREFIX",
    "MAX_ENUMERATION",
    "Enumeration",
    "IIDSource",
    "MarkovSource",
    "Source",
    "TableSource",
    "bernoulli",
    "extend_prefixes",
    "load_source",
    "random_iid",
    "random_markov",
    "save_source",
    "source_from_json",
    "uniform_source",
]


@dataclass(frozen=True)
class Enumeration:
    """All sequences of one length with their exact probabilities.

    Attributes
    ----------
    tokens : ndarray, shape (V**L, L)
        Sequences in lexicographic order (token 0 first).
    probs : ndarray, shape (V**L,)
        Joint probabilities, each a product of L conditionals (not exp of a sum).
    """

    tokens: np.ndarray
    probs: np.ndarray


#: The batch holding one empty prefix, shape (1, 0).
EMPTY_PREFIX = np.zeros((1, 0), dtype=np.int64)


def extend_prefixes(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """Every prefix of ``tokens`` (N, t) extended by every token: (N*V, t+1), lexicographic."""
    n = tokens.shape[0]
    last = np.tile(np.arange(vocab_size, dtype=np.int64), n)[:, None]
    return np.concatenate([np.repeat(tokens, vocab_size, axis=0), last], axis=1)


def _as_tokens(tokens) -> np.ndarray:
    arr = np.asarray(tokens)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"tokens: expected shape (batch, length), got {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"tokens: expected integer token ids, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


class Source(ABC):
    """Base class: a next-token law for every prefix.

    Subclasses implement :meth:`next_probs` (and may override the derived
    methods with faster vectorised versions).
    """

    vocab_size: int
    #: Longest sequence the source defines (``None``: unbounded).
    horizon: int | None = None

    # ----------------------------------------------------------------- core
    @abstractmethod
    def _rows(self, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Rows (B, V) for already-checked inputs."""

    def next_probs(self, tokens, lengths=None) -> np.ndarray:
        """Next-token law after each prefix.

        Parameters
        ----------
        tokens : int array, shape (B, T)
        lengths : int array, shape (B,), optional
            Row ``b`` conditions on ``tokens[b, :lengths[b]]``; default T for all.

        Returns
        -------
        ndarray, shape (B, V)
            May be a read-only broadcast view; copy before writing to it.
        """
        tokens = _as_tokens(tokens)
        if lengths is None:
            lengths = np.full(tokens.shape[0], tokens.shape[1], dtype=np.int64)
        else:
            lengths = np.asarray(lengths, dtype=np.int64)
            if lengths.shape != (tokens.shape[0],):
                raise ValueError(f"lengths: expected shape ({tokens.shape[0]},), got {lengths.shape}")
            if lengths.size and (lengths.min() < 0 or lengths.max() > tokens.shape[1]):
                raise ValueError(f"lengths must lie in [0, {tokens.shape[1]}]")
        if lengths.size:
            self.check_length(int(lengths.max()) + 1)
        # subclasses range-check only the tokens they read, so a long decode buffer costs nothing
        return self._rows(tokens, lengths)

    def check_length(self, length: int) -> None:
        """Raise ``ValueError`` if sequences of ``length`` tokens exceed the horizon."""
        if self.horizon is not None and length > self.horizon:
            raise ValueError(
                f"{type(self).__name__} supports sequences of at most {self.horizon} tokens "
                f"(its horizon); asked for {length}"
            )

    def _check_tokens(self, tokens: np.ndarray) -> None:
        if tokens.size and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(f"tokens: ids must lie in [0, {self.vocab_size}); got range "
                             f"[{tokens.min()}, {tokens.max()}]")

    # -------------------------------------------------------------- derived
    def path_probs(self, tokens, include_next: bool = True) -> np.ndarray:
        """Rows at every prefix of each sequence: shape (B, T+1, V), or (B, T, V).

        ``out[b, t]`` is the law of token t (0-based) given ``tokens[b, :t]``;
        this is what one parallel scoring call of a language model returns.
        ``include_next=False`` omits the row after the full sequence (so a
        sequence as long as the horizon can be scored).
        """
        tokens = _as_tokens(tokens)
        B, T = tokens.shape
        if T == 0 and not include_next:
            return np.zeros((B, 0, self.vocab_size))
        return np.stack([self.next_probs(tokens, np.full(B, t)) for t in range(T + int(include_next))], axis=1)

    def token_probs(self, tokens) -> np.ndarray:
        """Conditional probability of each token given its prefix: shape (B, T)."""
        tokens = _as_tokens(tokens)
        self._check_tokens(tokens)
        rows = self.path_probs(tokens, include_next=False)
        return np.take_along_axis(rows, tokens[..., None], axis=-1)[..., 0]

    def prefix_log_probs(self, tokens) -> np.ndarray:
        """log P(x_1..x_t) for t = 0..T: shape (B, T+1), first column 0, ``-inf`` for impossible prefixes."""
        tokens = _as_tokens(tokens)
        with np.errstate(divide="ignore"):
            logs = np.log(self.token_probs(tokens))
        out = np.zeros((tokens.shape[0], tokens.shape[1] + 1))
        np.cumsum(logs, axis=1, out=out[:, 1:])
        return out

    def log_prob(self, tokens) -> np.ndarray:
        """Joint log probability of each full sequence: shape (B,)."""
        return self.prefix_log_probs(tokens)[:, -1]

    def enumerate(self, length: int) -> Enumeration:
        """All V**length sequences with exact joint probabilities.

        Built level by level (one :meth:`next_probs` call per level), so each
        probability is a product of conditionals.

        Raises
        ------
        ValueError
            If ``V**length`` exceeds :data:`MAX_ENUMERATION` or the horizon.
        """
        length = int(length)
        if length < 0:
            raise ValueError(f"length must be >= 0, got {length}")
        count = self.vocab_size**length
        if count > MAX_ENUMERATION:
            raise SizeLimitError(f"enumerating {self.vocab_size}^{length} = {count:,} sequences exceeds the limit "
                                 f"MAX_ENUMERATION = {MAX_ENUMERATION:,}; use Monte Carlo or a shorter length",
                                 size=count, limit=MAX_ENUMERATION)
        self.check_length(length)
        V = self.vocab_size
        tokens = EMPTY_PREFIX
        probs = np.ones(1)
        for _ in range(length):
            rows = self.next_probs(tokens)
            probs = (probs[:, None] * rows).reshape(-1)
            tokens = extend_prefixes(tokens, V)
        return Enumeration(tokens, probs)

    def sample(self, n: int, length: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` independent sequences of ``length`` tokens: int array (n, length)."""
        self.check_length(length)
        out = np.zeros((n, length), dtype=np.int64)
        for t in range(length):
            out[:, t] = sample_categorical(self.next_probs(out[:, :t]), rng)
        return out

    # ------------------------------------------------------------------ json
    @abstractmethod
    def to_json(self) -> dict:
        """JSON-serialisable description readable by :func:`source_from_json`."""


class IIDSource(Source):
    """Every token independently drawn from ``probs`` (shape (V,))."""

    def __init__(self, probs):
        self.probs = np.asarray(validate_probs(probs, "probs"), dtype=np.float64)
        if self.probs.ndim != 1:
            raise ValueError(f"probs: expected one row of shape (V,), got {self.probs.shape}")
        self.vocab_size = self.probs.shape[0]
        self._cdf = np.cumsum(self.probs)

    def __repr__(self):
        return f"IIDSource(probs={self.probs.tolist()})"

    def _rows(self, tokens, lengths):
        return np.broadcast_to(self.probs, (tokens.shape[0], self.vocab_size))

    def path_probs(self, tokens, include_next=True):
        tokens = _as_tokens(tokens)
        self._check_tokens(tokens)
        return np.broadcast_to(self.probs, (tokens.shape[0], tokens.shape[1] + int(include_next), self.vocab_size))

    def sample(self, n, length, rng):
        u = rng.random((n, length)) * self._cdf[-1]
        return np.minimum(np.searchsorted(self._cdf, u, side="right"), self.vocab_size - 1)

    def to_json(self):
        return {"type": "iid", "probs": self.probs.tolist()}


def bernoulli(p: float) -> IIDSource:
    """IID Ber(p) over {0, 1}: P(token = 1) = p."""
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"bernoulli: p must lie in [0, 1], got {p}")
    return IIDSource([1.0 - p, p])


def uniform_source(support: int, vocab_size: int | None = None) -> IIDSource:
    """U(d): uniform on the first ``support`` tokens of a ``vocab_size``-token vocabulary."""
    vocab_size = support if vocab_size is None else vocab_size
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

    def __init__(self, initial, transition, horizon: int | None = None):
        self.initial = np.asarray(validate_probs(initial, "initial"), dtype=np.float64)
        if self.initial.ndim != 1:
            raise ValueError(f"initial: expected shape (V,), got {self.initial.shape}")
        V = self.initial.shape[0]
        trans = np.asarray(transition, dtype=np.float64)
        if trans.ndim not in (2, 3) or trans.shape[-2:] != (V, V):
            raise ValueError(
                f"transition: expected a ({V}, {V}) matrix or a list of them to match initial's "
                f"{V} tokens, got shape {trans.shape}"
            )
        self.transition = np.asarray(validate_probs(trans, "transition"), dtype=np.float64)
        self.vocab_size = V
        self.stationary = trans.ndim == 2
        self._stack = self.transition[None] if self.stationary else self.transition
        self.horizon = None if self.stationary else self.transition.shape[0] + 1
        if horizon is not None:
            self.check_length(int(horizon))

    def __repr__(self):
        kind = "stationary" if self.stationary else f"time-varying, horizon {self.horizon}"
        return f"MarkovSource(V={self.vocab_size}, {kind})"

    def matrix(self, step: int) -> np.ndarray:
        """Transition matrix producing token ``step`` (0-based, step >= 1) from token ``step − 1``."""
        return self._stack[0 if self.stationary else step - 1]

    def _rows(self, tokens, lengths):
        B = tokens.shape[0]
        prev = tokens[np.arange(B), np.maximum(lengths - 1, 0)] if tokens.shape[1] else np.zeros(B, np.int64)
        which = np.zeros(B, np.int64) if self.stationary else np.maximum(lengths - 1, 0)
        prev = np.where(lengths > 0, prev, 0)
        self._check_tokens(prev)
        rows = self._stack[which, prev]
        return np.where((lengths == 0)[:, None], self.initial, rows)

    def path_probs(self, tokens, include_next=True):
        tokens = _as_tokens(tokens)
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
        return {"type": "markov", "initial": self.initial.tolist(), "transition": self.transition.tolist()}


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
        self.vocab_size = int(vocab_size)
        self.horizon = int(horizon)
        if callable(rows) and not isinstance(rows, Mapping):
            self._fn = rows
            self._table = None
        else:
            self._table = {}
            for key, row in rows.items():
                key = tuple(int(k) for k in key)
                arr = np.asarray(validate_probs(row, f"rows[{key}]"), dtype=np.float64)
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
                raise ValueError(f"TableSource has no row for prefix {prefix}") from None
        arr = np.asarray(validate_probs(self._fn(prefix), f"row for prefix {prefix}"), dtype=np.float64)
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


# ---------------------------------------------------------------- generators
def _random_rows(rng, shape, vocab, sparsity):
    rows = rng.dirichlet(np.ones(vocab), size=shape)
    return _sparsify(rng, rows, sparsity)


def _sparsify(rng, rows, sparsity):
    if sparsity <= 0:
        return rows
    keep = rng.random(rows.shape) >= sparsity
    # each row keeps its largest entry, so no row becomes all-zero
    keep |= rows == rows.max(axis=-1, keepdims=True)
    rows = np.where(keep, rows, 0.0)
    return rows / rows.sum(axis=-1, keepdims=True)


def _near(rng, target_rows, concentration, sparsity):
    """Draft rows ~ Dirichlet(concentration * target_row + 1): 0 = independent, ∞ = equal."""
    alpha = concentration * target_rows + 1.0
    gam = rng.gamma(alpha)
    return _sparsify(rng, gam / gam.sum(axis=-1, keepdims=True), sparsity)


def random_markov(vocab: int, concentration: float = 1.0, horizon: int | None = None,
                  seed=None, sparsity: float = 0.0) -> tuple[MarkovSource, MarkovSource]:
    """A random (draft, target) pair of Markov chains with a tunable distance.

    Target rows are Dirichlet(1). Each draft row is Dirichlet(c·q_row + 1) with
    ``c = concentration``: c = 0 gives an independent draft, and the draft
    approaches the target as c grows (per-row TV shrinks like 1/√c).

    Parameters
    ----------
    vocab : int
    concentration : float, >= 0
    horizon : int, optional
        ``None`` for stationary chains, T for time-varying chains (T−1 matrices).
    seed : int or numpy Generator
    sparsity : float in [0, 1)
        Probability that an entry is set to exactly 0 (independently in draft
        and target; each row keeps its largest entry).
    """
    if vocab < 1 or concentration < 0 or not 0 <= sparsity < 1:
        raise ValueError("random_markov: need vocab >= 1, concentration >= 0, 0 <= sparsity < 1")
    rng = np.random.default_rng(seed)
    shape = (vocab,) if horizon is None else (max(int(horizon) - 1, 0), vocab)
    t_init = _random_rows(rng, (), vocab, sparsity)
    t_trans = _random_rows(rng, shape, vocab, sparsity)
    d_init = _near(rng, t_init, concentration, sparsity)
    d_trans = _near(rng, t_trans, concentration, sparsity)
    if horizon is not None and horizon <= 1:
        t_trans = np.zeros((0, vocab, vocab))
        d_trans = np.zeros((0, vocab, vocab))
    return MarkovSource(d_init, d_trans), MarkovSource(t_init, t_trans)


def random_iid(vocab: int, concentration: float = 1.0, seed=None, sparsity: float = 0.0):
    """A random (draft, target) pair of IID sources; see :func:`random_markov`."""
    rng = np.random.default_rng(seed)
    target = _random_rows(rng, (), vocab, sparsity)
    return IIDSource(_near(rng, target, concentration, sparsity)), IIDSource(target)


# ---------------------------------------------------------------------- json
def source_from_json(obj) -> Source:
    """Build a source from a JSON object (dict) — see the module docstring."""
    if not isinstance(obj, Mapping) or "type" not in obj:
        raise ValueError("source JSON: expected an object with a 'type' key "
                         "('iid', 'bernoulli', 'uniform', 'markov' or 'table')")
    kind = obj["type"]
    try:
        if kind == "iid":
            return IIDSource(obj["probs"])
        if kind == "bernoulli":
            return bernoulli(obj["p"])
        if kind == "uniform":
            return uniform_source(int(obj["support"]), obj.get("vocab_size"))
        if kind == "markov":
            return MarkovSource(obj["initial"], obj["transition"], horizon=obj.get("horizon"))
        if kind == "table":
            rows = {tuple(int(t) for t in k.split(",") if t != ""): v for k, v in obj["rows"].items()}
            return TableSource(rows, int(obj["vocab_size"]), int(obj["horizon"]))
    except KeyError as exc:
        raise ValueError(f"source JSON of type {kind!r}: missing key {exc.args[0]!r}") from None
    raise ValueError(f"source JSON: unknown type {kind!r}; expected 'iid', 'bernoulli', 'uniform', 'markov' or 'table'")


def load_source(path: str | os.PathLike) -> Source:
    """Read a JSON source file (see :func:`source_from_json`)."""
    try:
        with open(path) as fh:
            obj = json.load(fh)
    except FileNotFoundError:
        raise ValueError(f"source file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"source file {path} is not valid JSON: {exc}") from None
    return source_from_json(obj)


def save_source(source: Source, path: str | os.PathLike) -> None:
    """Write ``source.to_json()`` to ``path``."""
    with open(path, "w") as fh:
        json.dump(source.to_json(), fh, indent=1)
