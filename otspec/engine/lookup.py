"""Sources whose next row is a lookup, and which decode runs the compiled loop serves.

:func:`chain_plan` is the one place that decides whether :func:`otspec.engine.decode.generate` runs the compiled chain
loop of :mod:`otspec.engine.compiled_chain`: ``TokenVerify`` itself, a plain integer L, no observer, numba installed,
and both sources IID rows or order-1 Markov chains (:func:`lookup_table`). This module imports no numba, so a run the
compiled loop does not serve never loads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..jit import available

__all__ = ["LookupTable", "chain_plan", "lookup_table"]


@dataclass(frozen=True)
class LookupTable:
    """A source's next rows as a table: ``initial`` (V,) for the first token; ``stack`` (K, A, V), where the row after
    previous token a at position n >= 1 is ``stack[0 if stationary else n - 1, a if markov else 0]`` (an IID source:
    one row, K = A = 1, never a (V, V) copy); with their cumulative sums for inverse-CDF draws."""

    initial: np.ndarray
    stack: np.ndarray
    stationary: bool
    markov: bool

    @property
    def initial_cdf(self) -> np.ndarray:
        return np.cumsum(self.initial)

    @property
    def stack_cdf(self) -> np.ndarray:
        return np.cumsum(self.stack, axis=-1)


def lookup_table(source) -> LookupTable | None:
    """The :class:`LookupTable` of an IID or order-1 Markov source (its exact class, not a subclass that may
    override its rows), else ``None``."""
    from ..sources.models import IIDSource, MarkovSource

    if type(source) is IIDSource:
        return LookupTable(source.probs, source.probs[None, None, :], True, False)
    if type(source) is MarkovSource:
        stack = source.transition[None] if source.stationary else source.transition
        if stack.shape[0] == 0:  # a time-varying chain of horizon 1: no row after the first is ever read
            stack = np.zeros((1, source.vocab_size, source.vocab_size))
        return LookupTable(source.initial, np.ascontiguousarray(stack), source.stationary, True)
    return None


def chain_plan(draft, target, verifier, controller, observers) -> tuple[LookupTable, LookupTable] | None:
    """The two tables when the compiled loop serves this run (module docstring), else ``None``."""
    from ..verifiers import TokenVerify
    from .controllers import FixedDraftLength

    if observers or type(verifier) is not TokenVerify or not available():
        return None
    if not (isinstance(controller, FixedDraftLength) and controller.fixed_length):
        return None
    tables = lookup_table(draft), lookup_table(target)
    return None if tables[0] is None or tables[1] is None else tables
