"""Observers of the decode loops: what one iteration looks like from outside, and the ledger's hook.

:func:`otspec.engine.loop.chain_loop` and :func:`~otspec.engine.loop.tree_loop` hand every
iteration to each :class:`Observer` once it is committed: a :class:`ChainStep` or a
:class:`TreeStep` with the drafts, both models' rows and the outcome. Measurement (the ledger,
per-position TV, exact laws on the real rows, OTM-k optima at tree nodes) lives in observers, so
the loops carry no measurement code, and the loops leave their time out of the decoding clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..distributions import to_host
from .ledger import Ledger

__all__ = ["ChainStep", "LedgerObserver", "Observer", "TreeStep", "to_host"]


@dataclass
class ChainStep:
    """One iteration of :func:`chain_loop` as observers see it (n = sequences that verified).

    The arrays are valid during the callback: the loop reuses its buffers (the draft rows), so an
    observer copies what it keeps.

    Attributes
    ----------
    rows : int array (n,)
        The sequences (indices into the batch).
    start : int array (n,)
        Position of the first drafted token, counted from the end of the prompt.
    drafted, accepted, correction : int arrays (n,)
        Drafted tokens g, accepted tokens τ and the emitted token Y.
    tokens : int array (n, L)
        Drafted tokens, padded past ``drafted``.
    draft_rows : array (n, L, V)
        The draft rows the tokens were drawn from.
    target_rows : array (n, L + 1, V)
        The target's rows.
    verified_rows : array (n, L + 1, V) or None
        The rows the verifier verified against when they differ from ``target_rows`` (the v1 block
        verifier's carried residual target).
    """

    rows: np.ndarray
    start: np.ndarray
    drafted: np.ndarray
    tokens: np.ndarray
    draft_rows: Any
    target_rows: Any
    accepted: np.ndarray
    correction: np.ndarray
    verified_rows: Any = None


@dataclass
class TreeStep:
    """One iteration of :func:`tree_loop` as observers see it.

    Attributes
    ----------
    rows : int array (n,)
        The sequences that took part.
    start : int array (n,)
        Position of the first token of the iteration, counted from the end of the prompt.
    depth : int array (n,)
        How deep each trie was drafted.
    emitted : int array (n,)
        Tokens emitted (accepted + 1).
    tries : list of Trie
        Every sequence's trie (index by batch row) with its rows.
    paths : list of lists
        The trie nodes each walk went through, root excluded.
    nodes : int array (n,)
        Trie nodes the target scored.
    draft_calls : int array (n,)
        Draft calls made to grow each trie.
    history : callable
        ``history(b)``: the tokens of sequence b before the iteration (prompt included).
    drafted : int array (n,) or None
        Candidates drawn per sequence, when the loop knows them without the tries (the device walk, whose tries
        are built on first use).
    tokens : int array (n, at least max(emitted)) or None
        The tokens each sequence emitted (its first ``emitted`` columns): numpy, or a tensor where the rows are (an
        observer that reads it pays the copy; the loop makes none for it).
    """

    rows: np.ndarray
    start: np.ndarray
    depth: np.ndarray
    emitted: np.ndarray
    tries: list
    paths: list
    nodes: np.ndarray
    draft_calls: np.ndarray
    history: Any
    drafted: Any = None
    tokens: Any = None


class Observer:
    """Measurement hooks of the loops; they do nothing by default."""

    #: It reads each tree iteration's merged trie (its node counts are the widths of the target calls a model on the
    #: host makes): the tree loop then walks tries on toy sources too (``Session.fixed_shape_trees``), not arrays.
    reads_tries: bool = False

    def on_chain(self, step: ChainStep) -> None:
        """After every chain iteration."""

    def on_tree(self, step: TreeStep) -> None:
        """After every tree iteration."""

    def on_pause(self, seconds: float) -> None:
        """After the loop was suspended for ``seconds`` between two iterations (a caller driving
        :func:`~otspec.engine.loop.chain_steps` or :func:`~otspec.engine.loop.tree_steps` ran other work)."""


class LedgerObserver(Observer):
    """Records every iteration in a :class:`~otspec.engine.ledger.Ledger`; batch row b is sequence ``offset + b``."""

    def __init__(self, ledger: Ledger, offset: int = 0):
        self.ledger, self.offset = ledger, int(offset)

    def on_chain(self, step: ChainStep) -> None:
        self.ledger.record(self.offset + step.rows, step.start, step.drafted, step.accepted, step.accepted + 1,
                           draft_calls=step.drafted, drafted=int(step.drafted.sum()))

    def on_tree(self, step: TreeStep) -> None:
        idx = step.rows
        drafted = (int(np.sum(step.drafted)) if step.drafted is not None
                   else int(sum(step.tries[b].drafted() for b in idx)))
        self.ledger.record(self.offset + idx, step.start, step.depth, np.minimum(step.emitted - 1, step.depth),
                           step.emitted, draft_calls=step.draft_calls, drafted=drafted)
