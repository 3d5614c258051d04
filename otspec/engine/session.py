"""The session protocol: what a drafter or a target offers the decode loops.

A *session* is one model's view of B sequences being generated. The loops of
:mod:`otspec.engine.loop` talk to every model — a toy :class:`~otspec.sources.Source` or a
language model with a KV cache (``llm_bridge.sessions``) — through four calls:

* :meth:`Session.start` — the prompts (possibly empty);
* :meth:`Session.feed` — append speculative tokens to each sequence and return the probability
  rows after the current end and after each new token;
* :meth:`Session.feed_tree` — the same for a tree of speculative tokens (each node sees its
  ancestors only), grown a level per call or scored whole;
* :meth:`Session.commit` — the tokens the loop decided to keep (accepted drafts and the
  correction or bonus token). The session keeps whatever it already scored that spells a prefix
  of them, throws the other speculative tokens away, and remembers the rest as not seen yet.

"What a session has not seen yet" is the session's own business: a cache feeds the committed
tokens it lacks at the start of its next call, a source needs nothing. Rows come back on the
session's own device and in its own array namespace (numpy for sources; numpy or torch for
models), optionally with features (a model's last hidden states) aligned with them. Shapes::

    feed(tokens (B, m), counts (B,))                 -> Scores.rows (B, m + 1, V)
    feed_tree(tokens (B, m), parents (B, m), counts) -> Scores.rows (B, m + 1, V)
    commit(tokens (B, m), counts (B,))

Row 0 is the row after each sequence's current end (committed prefix and any speculative tokens
fed before), row j the row after its j-th new token; rows past ``counts[b]`` are valid
probability rows of no meaning. Token ids may be numpy arrays or, for a session whose rows live on
a device (``rows_device``), tensors on that device; counts are always host integers; a tree's
parents are host integers, or a tensor on the device for a session that grows trees there (a tree
shaped on the device: EAGLE-2's choice of nodes), whose commit then takes ``nodes``. Tree nodes are numbered in the order they are fed across
:meth:`Session.feed_tree` calls since the last commit; a parent of -1 is the current end.

*Target features.* A drafter that reads the target's hidden states (an EAGLE- or Medusa-style
head) has a session with ``reads_target_features = True``. The loops then hand it the target's
features as a keyword of two calls: ``start(prompts, features=...)`` with, per sequence, the
features of its prompt (array (n_b - 1, H): feature j is the target's state after prompt token j,
the one whose row gives prompt token j + 1), and ``commit(tokens, counts, features=...)`` with
(B, m, H) features aligned with the committed tokens (feature j is the state whose row the j-th
committed token was drawn or verified against: the target call's feature row j). Such a drafter
needs a target session that returns features (``Scores.features``) and ``prompt_features``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, NamedTuple

import numpy as np

from ..checks import check_token_ids
from ..distributions import sample_categorical
from ..sources import Source

__all__ = ["Drafter", "Scores", "Session", "SourceSession", "as_prompts"]


class Scores(NamedTuple):
    """What a session returns for one call.

    Attributes
    ----------
    rows : array (B, m + 1, V)
        Next-token probability rows (numpy or torch, on the session's device).
    features : array (B, m + 1, H) or None
        Features aligned with ``rows`` (a model's last hidden states), when the session has them.
    usable : bool array (B, m + 1) or None
        False where the session has no draft to offer (an n-gram lookup without a match);
        ``None`` means usable everywhere.
    """

    rows: Any
    features: Any = None
    usable: Any = None


def as_prompts(prompts, batch: int | None = None) -> list[np.ndarray]:
    """Prompts as a list of 1-D int64 arrays; ``None`` is ``batch`` empty prompts."""
    if prompts is None:
        return [np.zeros(0, dtype=np.int64) for _ in range(int(batch))]
    return [np.asarray(p, dtype=np.int64).reshape(-1) for p in prompts]


class Session(ABC):
    """One model's state over B sequences; see the module docstring for the protocol.

    Attributes
    ----------
    vocab_size : int
    batch : int
    """

    vocab_size: int
    batch: int
    #: The session takes the target's features as a keyword of start and commit (module docstring).
    reads_target_features: bool = False
    #: Where the rows live: ``None`` for numpy on the host, else the torch device of the rows (the
    #: loop then keeps its tokens there too and reads back only the accepted lengths).
    rows_device: Any = None
    #: It drafts a whole chain of a fixed length in one call (:meth:`draft_chain`).
    drafts_chains: bool = False
    #: Its rows are a lookup, so a tree fed as fixed-shape levels (equal candidates as separate nodes) costs it no
    #: more than a merged trie: on numpy rows the tree loop then walks arrays (:mod:`otspec.engine.devicetree`) rather
    #: than one trie per sequence. Rows on a device are always walked so (merging would read tokens back).
    fixed_shape_trees: bool = False
    #: A target session that returns features: per sequence, its prompt's features after :meth:`start` (module
    #: docstring, *Target features*); ``None`` otherwise.
    prompt_features: Any = None

    @abstractmethod
    def start(self, prompts: list[np.ndarray]) -> None:
        """Begin B sequences with these prompts (1-D int arrays, possibly empty)."""

    @abstractmethod
    def feed(self, tokens, counts) -> Scores:
        """Append ``tokens[b, :counts[b]]`` to sequence b (speculatively); rows (B, m + 1, V)."""

    @abstractmethod
    def feed_tree(self, tokens, parents, counts) -> Scores:
        """Score ``counts[b]`` tree nodes of sequence b (``parents`` as in the module docstring)."""

    @abstractmethod
    def commit(self, tokens, counts) -> None:
        """Make ``tokens[b, :counts[b]]`` part of sequence b; drop speculative tokens that do not spell them.

        A session whose rows live on a device and that grows trees (``feed_tree``) also takes ``nodes=``: per
        sequence, the fed tree nodes (in feed order) that spell its committed tokens from the root, so that it
        need not compare tokens on the host (the device tree walk of :mod:`otspec.engine.devicetree` passes it)."""

    def draft_chain(self, limit: np.ndarray, length: int, rng):
        """Draft ``limit[b]`` tokens after each sequence's end by sampling its own rows, in one call: what the
        chain loop does with a fixed draft length (one uniform per sequence and step, every sequence drawing
        while any drafts; a sequence stops early where its rows propose nothing), for a session whose rows are a
        lookup (``drafts_chains``). Returns (drafted (B,), tokens (B, length), rows (B, length, V) or ``None``
        where nothing was drafted); the tokens are fed as the loop feeds them (all but each chain's last)."""
        raise NotImplementedError(f"{type(self).__name__} drafts a token per call")

    def lookahead(self, tokens, counts) -> Scores:
        """Rows after the committed prefix followed by ``tokens[b, :j]``, j = 0..m, without changing the session.

        Only sessions that can afford it (toy sources) offer this; simulated oracles
        (:class:`~otspec.engine.controllers.ThresholdController`, the hindsight oracle) need it.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot look ahead: an oracle controller reads rows a "
                                  "real system does not have while drafting")


class Drafter(ABC):
    """What a drafter offers a loop: a session over a batch of sequences, and what it can do, declared.

    The class attributes are its capabilities; the loops and the tools read them instead of probing:

    * ``deterministic`` — it proposes one token per position (prompt lookup: a one-hot row), so it has no draws
      for an exact law to enumerate and cannot draw a tree's i.i.d. candidates;
    * ``reads_target_features`` — its sessions read the target's features (:attr:`Session.reads_target_features`):
      the loop's target session must then return them;
    * ``drafts_trees`` — its sessions grow draft trees (:meth:`Session.feed_tree`);
    * ``max_draft_length`` — the longest chain it proposes in one iteration (``None``: any);
    * ``has_hidden_states`` — its sessions can return their own states for a learned draft-length head
      (``session(hidden=True)``).

    :meth:`check_plan` refuses, before any model runs, what the declarations rule out; :meth:`source` gives its
    rows after a prompt as an exact, cache-free :class:`~otspec.sources.Source` (exact laws and predictions read it).
    """

    name: str = "drafter"
    deterministic: bool = False
    reads_target_features: bool = False
    drafts_trees: bool = True
    max_draft_length: int | None = None
    has_hidden_states: bool = True

    @abstractmethod
    def session(self, batch: int, sampling=None, *, hidden: bool = False, cache: str = "auto",
                max_length: int | None = None, timer=None, host_rows: bool = True) -> Session:
        """A :class:`Session` over ``batch`` sequences.

        Parameters
        ----------
        batch : int
        sampling : object, optional
            How rows are made from logits (temperature, top-k, top-p); ``None``: the drafter's default.
        hidden : bool
            Also return the session's own states (a learned draft-length head reads them).
        cache : str
            The kind of KV cache (a model's sessions; others ignore it).
        max_length : int, optional
            Longest sequence the session holds (a static cache's size).
        timer : object, optional
            Times the session's own calls.
        host_rows : bool
            Hand the loop numpy rows (``True``) or keep them as tensors on the model's device.
        """

    def check_plan(self, *, lengths=(), trees: bool = False, hidden: bool = False, exact: bool = False) -> None:
        """Refuse what the declarations rule out, before any model runs: chains longer than ``max_draft_length``,
        ``trees`` from a drafter that does not grow them, ``hidden`` states it does not have, an ``exact`` law of a
        deterministic drafter's draws."""
        longest = max((int(L) for L in lengths), default=0)
        if self.max_draft_length is not None and longest > self.max_draft_length:
            raise ValueError(f"draft length {longest}: the {self.name} drafter proposes at most "
                             f"{self.max_draft_length} tokens")
        if trees and self.deterministic:
            raise ValueError(f"the {self.name} drafter proposes one token per position; a draft tree needs drawn "
                             "candidates (a model draft: distilled, int8, layers:K or a model)")
        if trees and not self.drafts_trees:
            raise ValueError(f"the {self.name} drafter can only draft chains; a draft tree needs a drafter that grows "
                             "trees (a draft model or the EAGLE head)")
        if hidden and not self.has_hidden_states:
            raise ValueError(f"the {self.name} drafter has no states of its own for a learned draft-length head")
        if exact and self.deterministic:
            raise ValueError(f"the {self.name} drafter draws nothing: there is no law of its draws to enumerate")

    def source(self, target_model, prompt, sampling=None):
        """Its rows after ``prompt`` (token ids) as an exact, cache-free :class:`~otspec.sources.Source` (the draft
        side of exact laws and predictions); ``target_model`` for a drafter that reads the target's features."""
        raise NotImplementedError(f"the {self.name} drafter has no exact source of its rows")

    def replays(self, pair, prompts, continuations, longest: int, **options):
        """What the predictions replay for this drafter along plain-decoding paths (``llm_bridge.replays``: a draft
        model's logged rows, a head's rows by draft depth, prompt lookup's chains)."""
        raise NotImplementedError(f"the {self.name} drafter has no replays for predictions")

    def capabilities(self) -> dict:
        """Its declared capabilities, by name (what records and error messages report)."""
        return {key: getattr(self, key) for key in ("deterministic", "reads_target_features", "drafts_trees",
                                                      "max_draft_length", "has_hidden_states")}


def _positions(counts: np.ndarray, m: int) -> np.ndarray:
    """(B, m + 1) offsets j, capped at each row's count (rows past the count repeat the last real one)."""
    return np.minimum(np.arange(m + 1)[None, :], counts[:, None])


class SourceSession(Session):
    """A :class:`Session` over any :class:`~otspec.sources.Source` (stateless, numpy).

    It keeps one token buffer: each sequence's committed tokens, then its speculative chain;
    tree nodes are kept as (token, parent) lists until :meth:`commit`.

    Parameters
    ----------
    source : Source
    batch : int
    capacity : int
        Longest sequence (prompt + generated + speculative tokens) the buffer holds.
    max_prefix : int, optional
        Longest prefix whose row is ever needed; rows of no meaning (finished sequences, padding)
        are taken at most this far, so a source with a horizon is never asked past it.
    """

    drafts_chains = True
    fixed_shape_trees = True

    def __init__(self, source: Source, batch: int, capacity: int, max_prefix: int | None = None):
        self.source, self.vocab_size, self.batch = source, source.vocab_size, int(batch)
        self.max_prefix = int(capacity) if max_prefix is None else max(int(max_prefix), 0)
        self.buf = np.zeros((self.batch, int(capacity)), dtype=np.int64)
        self.committed = np.zeros(self.batch, dtype=np.int64)
        self.end = np.zeros(self.batch, dtype=np.int64)
        # the tree nodes fed since the last commit, per sequence: token, parent (-1: the end) and depth below the end
        self._pending = np.zeros(self.batch, dtype=np.int64)
        self._token = self._parent = self._depth = np.zeros((self.batch, 0), dtype=np.int64)

    def start(self, prompts) -> None:
        for b, p in enumerate(as_prompts(prompts)):
            check_token_ids(p, self.vocab_size)
            self.buf[b, :p.size] = p
            self.committed[b] = self.end[b] = p.size
        self._pending = np.zeros(self.batch, dtype=np.int64)

    def _rows_at(self, buf: np.ndarray, lengths: np.ndarray, depths: np.ndarray) -> np.ndarray:
        """Rows (B, J, V) after ``buf[b, :lengths[b, j]]`` at draft depths ``depths`` (tokens since the last commit),
        in one :meth:`~otspec.sources.Source.rows_at` call; rows of no meaning are taken at most ``max_prefix`` in."""
        lengths = np.minimum(lengths, self.max_prefix)
        if self.source.horizon is not None and lengths.size:
            self.source.check_length(int(lengths.max()) + 1)
        return self.source.rows_at(buf, lengths, depths, check=False)

    def _write(self, at: np.ndarray, tokens, counts) -> tuple[np.ndarray, np.ndarray]:
        tokens, counts = np.asarray(tokens, dtype=np.int64), np.asarray(counts, dtype=np.int64)
        if tokens.shape[1] == 0:
            return tokens, counts
        rows, cols = np.nonzero(np.arange(tokens.shape[1])[None, :] < counts[:, None])
        written = tokens[rows, cols]
        check_token_ids(written, self.vocab_size)
        self.buf[rows, at[rows] + cols] = written
        return tokens, counts

    def feed(self, tokens, counts) -> Scores:
        if self._pending.any():
            raise RuntimeError("feed: tree nodes are pending; commit first")
        tokens, counts = self._write(self.end, tokens, counts)
        lengths = self.end[:, None] + _positions(counts, tokens.shape[1])
        depths = lengths - self.committed[:, None]
        rows = self._rows_at(self.buf, lengths, depths)
        self.end = self.end + counts
        return Scores(rows, None, self.source.proposes(np.minimum(lengths, self.max_prefix), depths))

    def draft_chain(self, limit: np.ndarray, length: int, rng):
        B, V = self.batch, self.vocab_size
        drafted, tokens, rows = np.zeros(B, dtype=np.int64), np.zeros((B, length), dtype=np.int64), None
        drafting = limit > 0
        for i in range(length):
            end = np.minimum(self.end, self.max_prefix)[:, None]
            depths = (self.end - self.committed)[:, None]
            usable = self.source.proposes(end, depths)
            if usable is not None:
                drafting &= usable[:, 0]
            if not drafting.any():
                break
            row = self._rows_at(self.buf, self.end[:, None], depths)[:, 0]
            if rows is None:
                rows = np.zeros((B, length, V))
            tokens[:, i] = sample_categorical(row, rng, check=False)
            rows[:, i] = row
            drafted += drafting
            drafting &= drafted < limit
            fed = np.flatnonzero(drafting)
            self.buf[fed, self.end[fed]] = tokens[fed, i]
            self.end[fed] += 1
        return drafted, tokens, rows

    def lookahead(self, tokens, counts) -> Scores:
        tokens, counts = np.asarray(tokens, dtype=np.int64), np.asarray(counts, dtype=np.int64)
        width = tokens.shape[1]
        lengths = self.committed[:, None] + _positions(counts, width)
        if self.source.context == 0:  # rows that read no token (IID, positional): nothing to write, only to check
            check_token_ids(tokens[np.arange(width)[None, :] < counts[:, None]], self.vocab_size)
            return Scores(self._rows_at(self.buf, lengths, lengths - self.committed[:, None]))
        cols = np.minimum(self.committed[:, None] + np.arange(width)[None, :], self.buf.shape[1] - 1)
        saved = np.take_along_axis(self.buf, cols, axis=1)  # only the slots the lookahead writes over
        self._write(self.committed, tokens, counts)
        try:
            return Scores(self._rows_at(self.buf, lengths, lengths - self.committed[:, None]))
        finally:
            np.put_along_axis(self.buf, cols, saved, axis=1)

    def feed_tree(self, tokens, parents, counts) -> Scores:
        tokens, parents = np.asarray(tokens, dtype=np.int64), np.asarray(parents, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        B, m = tokens.shape
        valid = np.arange(m)[None, :] < counts[:, None]
        check_token_ids(tokens[valid], self.vocab_size)
        rows = np.empty((B, m + 1, self.vocab_size))
        rows[:, 0] = self._rows_at(self.buf, self.end[:, None], (self.end - self.committed)[:, None])[:, 0]
        rows[:, 1:] = rows[:, :1]  # padding rows: the root's row
        if not valid.any():
            return Scores(rows)
        seen = self._pending[:, None] + np.arange(m)[None, :]  # nodes fed before each new one
        bad = valid & ((parents < -1) | (parents >= seen))
        if bad.any():
            b, j = (int(x[0]) for x in np.nonzero(bad))
            raise ValueError(f"feed_tree: parent {int(parents[b, j])} of row {b} is not a node fed before it")
        self._grow_nodes(int((self._pending + counts).max()))
        lanes = np.arange(B)
        for j in range(m):  # a node's parent comes before it: its depth is known when it is written
            live = valid[:, j]
            slot, par = self._pending + j, parents[:, j]
            self._token[lanes[live], slot[live]] = tokens[live, j]
            self._parent[lanes[live], slot[live]] = par[live]
            self._depth[lanes[live], slot[live]] = np.where(par >= 0, self._depth[lanes, np.maximum(par, 0)], 0)[live] + 1
        owner_b, owner_j = np.nonzero(valid)
        node = self._pending[owner_b] + owner_j
        self._pending = self._pending + counts
        size = self._depth[owner_b, node]  # each new node's path below the end: its depth
        n, depth = node.size, int(size.max())
        end = self.end[owner_b]
        buf = np.zeros((n, int(end.max()) + depth), dtype=np.int64)
        ctx = self.source.context  # copy only the prefix tokens the rows read
        if ctx is None:
            width = int(end.max())
            buf[:, :width] = self.buf[owner_b, :width]  # past a row's end: overwritten by its path or unread
        elif ctx > 0:
            cols = end[:, None] - ctx + np.arange(ctx)[None, :]
            keep = cols >= 0
            r = np.broadcast_to(np.arange(n)[:, None], cols.shape)[keep]
            buf[r, cols[keep]] = self.buf[owner_b[r], cols[keep]]
        if ctx != 0:  # the path's tokens, from the node up: the last min(ctx, depth) of them are read
            steps = depth if ctx is None else min(depth, ctx)
            cur, row = node.copy(), np.arange(n)
            for k in range(steps):
                here = cur >= 0
                buf[row[here], end[here] + size[here] - 1 - k] = self._token[owner_b[here], cur[here]]
                cur = np.where(here, self._parent[owner_b, np.maximum(cur, 0)], -1)
        rows[owner_b, owner_j + 1] = self._rows_at(buf, (end + size)[:, None],
                                                   (end - self.committed[owner_b] + size)[:, None])[:, 0]
        return Scores(rows)

    def _grow_nodes(self, needed: int) -> None:
        """Room for ``needed`` pending nodes a sequence (their token, parent and depth below the end)."""
        if needed > self._token.shape[1]:
            width = max(needed, 2 * self._token.shape[1], 8)
            for name in ("_token", "_parent", "_depth"):
                old = getattr(self, name)
                grown = np.zeros((self.batch, width), dtype=np.int64)
                grown[:, :old.shape[1]] = old
                setattr(self, name, grown)

    def commit(self, tokens, counts, *, nodes=None) -> None:
        """``nodes`` (the device tree walk's fed nodes on the committed path) is not needed: the pending nodes are
        matched by their tokens on the host."""
        tokens, counts = self._write(self.committed, tokens, counts)
        self.committed = self.committed + counts
        self.end = self.committed.copy()
        self._pending = np.zeros(self.batch, dtype=np.int64)
