"""The Source protocol: a next-token law for every prefix, and everything derived from it."""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from ..checks import (
    MAX_DECODE_ENTRIES,
    MAX_STEP_ENTRIES,
    capped_power,
    check_size,
    check_token_ids,
    format_count,
    integer_array,
    tensors_as_arrays,
)
from ..distributions import sample_categorical, validate_probs
from ..errors import HorizonError, SizeLimitError

__all__ = ["EMPTY_PREFIX", "MAX_ENUMERATION", "Enumeration", "Source", "check_enumeration", "check_source",
           "extend_prefixes"]

#: Largest number of sequences :meth:`Source.enumerate` will build.
MAX_ENUMERATION = 2**21


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


def check_enumeration(vocab_size: int, length: int) -> int:
    """V**length, the sequences an exact enumeration of ``length`` tokens visits; a :class:`SizeLimitError` beyond
    :data:`MAX_ENUMERATION` (checked before anything is enumerated)."""
    vocab_size, length = check_size(vocab_size, "vocab_size"), check_size(length, "length", minimum=0)
    count = capped_power(vocab_size, length)
    if count > MAX_ENUMERATION:
        raise SizeLimitError(f"enumerating {vocab_size}^{length} = {format_count(count)} sequences exceeds the limit "
                             f"MAX_ENUMERATION = {MAX_ENUMERATION:,}; use Monte Carlo or a shorter length",
                             size=count, limit=MAX_ENUMERATION)
    return count


def extend_prefixes(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """Every prefix of ``tokens`` (N, t) extended by every token: (N*V, t+1), lexicographic.

    ``tokens`` holds integer ids in [0, ``vocab_size``); anything else is a ``ValueError``.
    """
    vocab_size = check_size(vocab_size, "vocab_size")
    tokens = integer_array(tokens, "tokens", "a (N, t) array of token ids", ndim=2)
    check_token_ids(tokens, vocab_size)
    n = tokens.shape[0]
    if n * vocab_size * (tokens.shape[1] + 1) > MAX_STEP_ENTRIES:  # refused before np.repeat allocates it
        raise SizeLimitError(f"extending {n:,} prefixes by V = {vocab_size:,} tokens is "
                             f"{n * vocab_size * (tokens.shape[1] + 1):,} ids, above MAX_STEP_ENTRIES = "
                             f"{MAX_STEP_ENTRIES:,}", size=n * vocab_size, limit=MAX_STEP_ENTRIES)
    last = np.tile(np.arange(vocab_size, dtype=np.int64), n)[:, None]
    return np.concatenate([np.repeat(tokens, vocab_size, axis=0), last], axis=1)


def as_lengths(lengths, name: str = "lengths") -> np.ndarray:
    """Prefix lengths (or depths) as int64: 1.5 is refused, not read as 1."""
    return integer_array(lengths, name, "prefix lengths")


def as_tokens(tokens) -> np.ndarray:
    arr = integer_array(tokens, "tokens", "token ids")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"tokens: expected shape (batch, length), got {arr.shape}")
    return arr


def check_source(source, name: str) -> Source:
    """``source`` if it is a :class:`Source` instance, else a ``ValueError`` naming ``name`` and what was given."""
    if not isinstance(source, Source):
        what = f"the class {source.__name__}" if isinstance(source, type) else type(source).__name__
        raise ValueError(f"{name}: expected a Source (otspec.IIDSource, otspec.MarkovSource, ...), got {what}")
    V, H = getattr(source, "vocab_size", None), getattr(source, "horizon", None)  # a subclass sets them
    if isinstance(V, bool) or not isinstance(V, numbers.Integral) or V < 1:
        raise ValueError(f"{name}: {type(source).__name__}.vocab_size is {V!r}; a Source sets vocab_size, an integer "
                         ">= 1")
    if H is not None and (isinstance(H, bool) or not isinstance(H, numbers.Integral) or H < 1):
        raise ValueError(f"{name}: {type(source).__name__}.horizon is {H!r}; a Source's horizon is None (unbounded) "
                         "or an integer >= 1")
    return source


class Source(ABC):
    """Base class: a next-token law for every prefix.

    Subclasses implement :meth:`next_probs` (and may override the derived
    methods with faster vectorised versions).
    """

    vocab_size: int
    #: Longest sequence the source defines (``None``: unbounded).
    horizon: int | None = None
    #: How many of a prefix's last tokens the rows read (its length aside): 0 for IID or positional rows, 1 for an
    #: order-1 Markov chain, ``None`` (the default) for the whole prefix. Engines use it to copy less.
    context: int | None = None
    #: Where the source was read from (:func:`~otspec.sources.load_source` sets the file), for errors that only use
    #: can find, such as a table's missing row.
    origin: str | None = None
    #: Whether its rows depend on the draft depth as well as the prefix (a
    #: :class:`~otspec.sources.DepthPositionalSource` whose depths differ): only the decode loops follow that
    #: (``generate``, ``generate_tree``, ``simulate_tree``); every other computation refuses such a source
    #: (:func:`otspec.pairs.check_pair`) rather than read its depth-0 rows at every position.
    depth_dependent: bool = False

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
        tokens = as_tokens(tokens)
        if lengths is None:
            lengths = np.full(tokens.shape[0], tokens.shape[1], dtype=np.int64)
        else:
            lengths = as_lengths(lengths)
            if lengths.shape != (tokens.shape[0],):
                raise ValueError(f"lengths: expected shape ({tokens.shape[0]},), got {lengths.shape}")
            if lengths.size and (lengths.min() < 0 or lengths.max() > tokens.shape[1]):
                raise ValueError(f"lengths must lie in [0, {tokens.shape[1]}]")
        if lengths.size:
            self.check_length(int(lengths.max()) + 1)
        # subclasses range-check only the tokens they read, so a long decode buffer costs nothing
        return self._checked_rows(self._rows(tokens, lengths), (tokens.shape[0],))

    def _checked_rows(self, rows, batch: tuple):
        """``rows`` as they came from a subclass's ``_rows``: otspec's and llm_bridge's sources make valid rows (a
        model's rows stay on their device, unread); a user's subclass has them checked (shape, NaN, negative, sums),
        since every engine reads them as laws."""
        if type(self).__module__.split(".")[0] in ("otspec", "llm_bridge"):
            return rows
        what = f"{type(self).__name__}._rows"
        checked = validate_probs(rows, what)
        if tuple(checked.shape) != (*batch, self.vocab_size):
            raise ValueError(f"{what}: expected rows of shape {(*batch, self.vocab_size)}, got {tuple(checked.shape)}")
        if isinstance(rows, np.ndarray) and rows.dtype == np.float64:
            return rows
        return np.asarray(tensors_as_arrays(checked), dtype=np.float64)  # lists, tensors, integers: the engines' kind

    def rows_at(self, tokens, lengths, depths=None, *, check: bool = True) -> np.ndarray:
        """Next-token laws at several prefix lengths of each sequence, in one call.

        Parameters
        ----------
        tokens : int array, shape (B, T)
        lengths : int array, shape (B, J)
            ``out[b, j]`` conditions on ``tokens[b, :lengths[b, j]]``.
        depths : int array, shape (B, J), optional
            Tokens drafted since the last commit at each of those prefixes (0: none); only a source whose rows
            depend on the draft depth reads them (:class:`~otspec.sources.DepthPositionalSource`).
        check : bool
            Range-check ``lengths``, the horizon and the token ids the rows read (default); ``False`` for a caller
            that has (a decode session checks the token ids it writes and the lengths it asks for).

        Returns
        -------
        ndarray, shape (B, J, V)
            May be a read-only broadcast view; copy before writing to it.
        """
        tokens = as_tokens(tokens)
        lengths = as_lengths(lengths) if check else np.asarray(lengths, dtype=np.int64)
        if check:
            if lengths.ndim != 2 or lengths.shape[0] != tokens.shape[0]:
                raise ValueError(f"lengths: expected shape ({tokens.shape[0]}, J), got {lengths.shape}")
            if lengths.size and (lengths.min() < 0 or lengths.max() > tokens.shape[1]):
                raise ValueError(f"lengths must lie in [0, {tokens.shape[1]}]")
            if lengths.size:
                self.check_length(int(lengths.max()) + 1)
                longest = lengths.max(axis=1)
                width = int(longest.max())
                self._check_tokens(tokens[:, :width][np.arange(width) < longest[:, None]])
        return self._checked_rows(self._rows_at(tokens, lengths, depths), tuple(lengths.shape))

    def _rows_at(self, tokens: np.ndarray, lengths: np.ndarray, depths) -> np.ndarray:
        """:meth:`rows_at` for checked inputs; by default one :meth:`_rows` call per column (sources whose rows
        are a lookup override it with one gather)."""
        if lengths.shape[1] == 0:
            return np.zeros((tokens.shape[0], 0, self.vocab_size))
        return np.stack([self._rows(tokens, lengths[:, j]) for j in range(lengths.shape[1])], axis=1)

    def row_after(self, path) -> np.ndarray:
        """The next-token law after one token path (a tuple or sequence of ids), shape (V,)."""
        path = as_tokens(path)  # a float id (1.7) is refused, not read as 1
        if path.shape[0] != 1:
            raise ValueError(f"path: expected one token path, got shape {path.shape}")
        return self.next_probs(path)[0]

    def proposes(self, lengths, depths=None) -> np.ndarray | None:
        """Whether a draft on this source proposes a token after prefixes of these ``lengths`` (int array), as a
        bool array of their shape; ``None`` (the default): everywhere. A drafter that sometimes has nothing to
        propose (prompt lookup) is replayed by a source that says where; the decode loops stop drafting there.
        ``depths`` (optional, same shape): tokens drafted since the last commit, for a source that depends on it."""
        return None

    def check_length(self, length: int, why: str | None = None) -> None:
        """Raise :class:`~otspec.errors.HorizonError` (a ``ValueError``) if sequences of ``length`` tokens exceed
        the horizon; ``why`` says what asks for that length (``"draft length 8 + 1"``), in the message."""
        if self.horizon is not None and length > self.horizon:
            raise HorizonError(
                f"{type(self).__name__} supports sequences of at most {self.horizon} tokens "
                f"(its horizon); asked for {length}" + (f" ({why})" if why else ""), horizon=self.horizon,
                length=length)

    def _check_tokens(self, tokens: np.ndarray) -> None:
        check_token_ids(tokens, self.vocab_size)

    # -------------------------------------------------------------- derived
    def path_probs(self, tokens, include_next: bool = True) -> np.ndarray:
        """Rows at every prefix of each sequence: shape (B, T+1, V), or (B, T, V).

        ``out[b, t]`` is the law of token t (0-based) given ``tokens[b, :t]``;
        this is what one parallel scoring call of a language model returns.
        ``include_next=False`` omits the row after the full sequence (so a
        sequence as long as the horizon can be scored).
        """
        tokens = as_tokens(tokens)
        B, T = tokens.shape
        if T == 0 and not include_next:
            return np.zeros((B, 0, self.vocab_size))
        return np.stack([self.next_probs(tokens, np.full(B, t)) for t in range(T + int(include_next))], axis=1)

    def token_probs(self, tokens) -> np.ndarray:
        """Conditional probability of each token given its prefix: shape (B, T)."""
        tokens = as_tokens(tokens)
        self._check_tokens(tokens)
        rows = self.path_probs(tokens, include_next=False)
        return np.take_along_axis(rows, tokens[..., None], axis=-1)[..., 0]

    def prefix_log_probs(self, tokens) -> np.ndarray:
        """log P(x_1..x_t) for t = 0..T: shape (B, T+1), first column 0, ``-inf`` for impossible prefixes."""
        tokens = as_tokens(tokens)
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
        length = check_size(length, "length", minimum=0)
        check_enumeration(self.vocab_size, length)
        self.check_length(length)
        V = self.vocab_size
        tokens = EMPTY_PREFIX
        probs = np.ones(1)
        for _ in range(length):
            rows = self.next_probs(tokens)
            probs = (probs[:, None] * rows).reshape(-1)
            tokens = extend_prefixes(tokens, V)
        return Enumeration(tokens, probs)

    @staticmethod
    def _sample_args(n, length, rng) -> tuple[int, int]:
        """``n`` and ``length`` as sizes within :data:`~otspec.checks.MAX_DECODE_ENTRIES` tokens, ``rng`` a numpy
        Generator: checked before the (n, length) array exists."""
        n, length = check_size(n, "n", minimum=0), check_size(length, "length", minimum=0)
        if n * length > MAX_DECODE_ENTRIES:
            raise SizeLimitError(f"sample: {n:,} sequences of {length:,} tokens are {n * length:,} tokens, above "
                                 f"MAX_DECODE_ENTRIES = {MAX_DECODE_ENTRIES:,}", size=n * length,
                                 limit=MAX_DECODE_ENTRIES)
        if not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng: expected a numpy Generator (numpy.random.default_rng(seed)), got "
                             f"{type(rng).__name__}")
        return n, length

    def sample(self, n: int, length: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` independent sequences of ``length`` tokens: int array (n, length)."""
        n, length = self._sample_args(n, length, rng)
        self.check_length(length)
        out = np.zeros((n, length), dtype=np.int64)
        for t in range(length):
            out[:, t] = sample_categorical(self.next_probs(out[:, :t]), rng)
        return out

    # ------------------------------------------------------------------ json
    @abstractmethod
    def to_json(self) -> dict:
        """JSON-serialisable description readable by :func:`source_from_json`."""
