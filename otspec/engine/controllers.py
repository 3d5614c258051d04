"""Draft-length controllers: how many tokens each iteration of the decode loop drafts.

The decode loops (:mod:`otspec.engine.loop`) ask a controller after every drafted token whether to
draft one more (up to ``max_length``). Every controller is a :class:`DraftLengthController`:

* ``max_length`` — the cap K;
* ``start(n)`` — called at the start of an iteration with ``n`` sequences (default: nothing);
* ``keep_drafting(step, draft_rows)`` — after the ``step``-th drafted token (1-based), with the
  draft rows (m, V) that produced the tokens of the m sequences still drafting; returns a bool
  array (m,). A controller that sets ``needs_target = True`` is called as
  ``keep_drafting(step, draft_rows, which=..., tokens=..., target_rows=...)`` with their indices
  among the iteration's ``n`` sequences, the drafted tokens (m,) and the target's rows (m, V) at
  the same prefixes — an *oracle* head: a real system does not have them while drafting, a
  simulation does. A controller with ``needs_context = True`` gets ``which``, ``tokens`` and
  ``previous`` (the token before each drafted one, -1 at a sequence start) — what a learned head
  on draft-side features sees (:class:`otspec.engine.heads.LearnedHeadController`). With
  ``needs_lookahead = True`` it also gets ``next_rows()``, which returns the draft's and the
  target's rows (m, V) one position further (after the drafted token): a hindsight oracle.

:class:`FixedDraftLength` always drafts K; :class:`ConfidenceController` stops once the draft's own
confidence (the product of its rows' largest probabilities, EAGLE-2's proxy for acceptance) falls below
a threshold, reading nothing a real system lacks; :class:`ThresholdController` is SpecDec++'s stopping
rule with the true acceptance probabilities (``specdecpp.md`` §4–6): stop once
P(some drafted token is rejected) = 1 − ∏ min{1, q(X_i)/p(X_i)} reaches the step's threshold.
The optimal thresholds of an IID pair are :func:`otspec.theory.adaptive.optimal_stopping`'s.

Spec: ``docs/specdecpp.md``.
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence

import numpy as np

from ..checks import MAX_DRAFT_LENGTH, check_flag, check_real, check_size
from ..distributions import to_host

__all__ = ["ConfidenceController", "DraftLengthController", "FixedDraftLength", "HindsightOracle", "ProtocolController", "checked_keep",
           "ThresholdController", "as_controller"]


class DraftLengthController(ABC):
    """The controller protocol: ``max_length``, ``start``, ``keep_drafting`` and what it reads.

    The three flags say which inputs beyond the draft rows a loop must hand over (see the module
    docstring); a real model's loop refuses ``needs_target`` and ``needs_lookahead`` (oracles).
    """

    max_length: int
    needs_target: bool = False
    needs_context: bool = False
    needs_lookahead: bool = False
    #: It reads the draft's state at the drafted token itself (an unlagged learned head): the loop feeds each drafted
    #: token before asking it.
    reads_drafted_state: bool = False
    #: It keeps drafting until ``max_length`` (or the sequence's last position) whatever it sees: a loop may then
    #: draft a whole chain in one session call (:meth:`~otspec.engine.session.Session.draft_chain`).
    fixed_length: bool = False

    def start(self, n: int) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """A new iteration begins for ``n`` sequences."""

    @abstractmethod
    def keep_drafting(self, step: int, draft_rows, *, which=None, tokens=None, previous=None, features=None,
                      target_rows=None, next_rows=None):
        """Bool array (m,): whether each of the m sequences still drafting drafts one more token."""

    @property
    def oracle(self) -> bool:
        """Whether it reads rows a real system does not have while drafting."""
        return self.needs_target or self.needs_lookahead


def as_controller(draft_length) -> DraftLengthController:
    """A controller, or :class:`FixedDraftLength` for an integer L. An object that follows the protocol without
    subclassing :class:`DraftLengthController` (``max_length`` and ``keep_drafting``; ``start`` and the flags
    optional) is taken as it is (:class:`ProtocolController`)."""
    if isinstance(draft_length, DraftLengthController):
        return draft_length
    if isinstance(draft_length, type):  # the class itself read its keep_drafting as a function: "ABCMeta.max_length"
        raise ValueError(f"draft_length: expected an integer >= 1 or a controller instance, got the class "
                         f"{draft_length.__name__} (call it, e.g. {draft_length.__name__}(...))")
    if callable(getattr(draft_length, "keep_drafting", None)):
        return ProtocolController(draft_length)
    if isinstance(draft_length, bool) or not isinstance(draft_length, numbers.Integral):
        raise ValueError(f"draft_length: expected an integer >= 1 or a draft-length controller (max_length and "
                         f"keep_drafting, e.g. a DraftLengthController), got {draft_length!r} "
                         f"({type(draft_length).__name__})")
    return FixedDraftLength(draft_length)


def checked_keep(ctrl, keep, m: int) -> np.ndarray:
    """What ``ctrl.keep_drafting`` returned, as the (m,) booleans the protocol asks for (one True or False for all is
    taken too); anything else (None, 0.5, NaN, another length) is a ``ValueError`` naming the controller, never cast."""
    arr = np.asarray(keep)
    if arr.dtype != np.bool_ or arr.shape not in ((m,), ()):
        raise ValueError(f"{ctrl!r}.keep_drafting: expected {m} booleans (one per sequence still drafting), got "
                         f"{str(keep)[:60]} (dtype {arr.dtype}, shape {arr.shape})")
    return np.broadcast_to(arr, (m,))


class ProtocolController(DraftLengthController):
    """A controller written to the protocol without subclassing :class:`DraftLengthController`: its
    ``keep_drafting``, ``start`` (if any), ``max_length`` and flags (each False unless it sets them)."""

    def __init__(self, inner):
        self.inner = inner
        self.max_length = check_size(getattr(inner, "max_length", None), f"{type(inner).__name__}.max_length",
                                     limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
        for flag in ("needs_target", "needs_context", "needs_lookahead", "reads_drafted_state"):  # 'no' is not False
            setattr(self, flag, check_flag(getattr(inner, flag, False), f"{type(inner).__name__}.{flag}"))
        if getattr(inner, "start", None) is not None and not callable(inner.start):
            raise ValueError(f"{type(inner).__name__}.start: expected a method start(n) or none, got {inner.start!r}")

    def start(self, n: int) -> None:
        start = getattr(self.inner, "start", None)
        if start is not None:
            start(n)

    def keep_drafting(self, step: int, draft_rows, **inputs) -> np.ndarray:
        return self.inner.keep_drafting(step, draft_rows, **inputs)

    def __repr__(self):
        return f"ProtocolController({self.inner!r})"


class FixedDraftLength(DraftLengthController):
    """Draft-length controller that always drafts ``length`` tokens."""

    @property
    def fixed_length(self) -> bool:
        """True, unless a subclass decides in its own ``keep_drafting``."""
        return type(self).keep_drafting is FixedDraftLength.keep_drafting

    def __init__(self, length: int):
        self.max_length = check_size(length, "draft_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")

    def keep_drafting(self, step: int, draft_rows, **_) -> np.ndarray:
        return np.full(draft_rows.shape[0], step < self.max_length)

    def __repr__(self):
        return f"FixedDraftLength({self.max_length})"


class ConfidenceController(DraftLengthController):
    """Draft another token while the draft's confidence ∏_{j ≤ i} max_x p_j(x) stays at least ``threshold``.

    EAGLE-2 orders draft-tree expansion by this product, a proxy for the probability that the path is
    accepted; for a chain it becomes a stopping rule. It reads the draft's own rows (a real system has
    them), so it runs in the real loop and in the decode engine alike, and exactness is untouched.
    """

    needs_context = True  # for ``which``: the product is kept per sequence

    def __init__(self, threshold: float, max_length: int):
        self.max_length = check_size(max_length, "max_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
        self.threshold = check_real(threshold, "threshold", low=0.0, high=1.0)
        self._confidence = np.ones(0)

    def start(self, n: int) -> None:
        self._confidence = np.ones(n)

    def keep_drafting(self, step, draft_rows, *, which=None, **_):
        top = draft_rows.max(-1)
        top = np.asarray(to_host(getattr(top, "values", top)), dtype=np.float64)
        which = np.arange(top.size) if which is None else which
        self._confidence[which] *= top
        if step >= self.max_length:
            return np.zeros(top.size, dtype=bool)
        return self._confidence[which] >= self.threshold

    def __repr__(self):
        return f"ConfidenceController(threshold={self.threshold}, max_length={self.max_length})"


class ThresholdController(DraftLengthController):
    """Draft another token iff P(some drafted token is rejected) < h_step (oracle acceptance probabilities).

    Parameters
    ----------
    thresholds : float or sequence of (float or None)
        h_j for steps j = 1..K−1 (one value for every step); ``None`` means always stop there.
    max_length : int
        K.
    """

    needs_target = True

    def __init__(self, thresholds: float | Sequence[float | None], max_length: int):
        self.max_length = check_size(max_length, "max_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
        if isinstance(thresholds, np.ndarray) and thresholds.ndim == 0:  # a 0-d array is its one value
            thresholds = thresholds.item()
        if isinstance(thresholds, numbers.Real) and not isinstance(thresholds, bool):  # numpy scalars too
            thresholds = [thresholds] * (self.max_length - 1)
        if isinstance(thresholds, set | frozenset | dict | str | bytes) or not isinstance(thresholds, Iterable):
            raise ValueError(f"thresholds: expected a number or a sequence with one per step (in order), got "
                             f"{type(thresholds).__name__}")
        self.thresholds = [None if h is None else check_real(h, "thresholds", low=0.0, high=1.0)
                           for h in thresholds]
        if len(self.thresholds) != self.max_length - 1:  # more would be dropped without a word
            raise ValueError(f"thresholds: expected one per step 1..{self.max_length - 1} (max_length - 1 = "
                             f"{self.max_length - 1}), got {len(self.thresholds)}")
        self._all_accepted = np.ones(0)

    def start(self, n: int) -> None:
        self._all_accepted = np.ones(n)  # Π_j = P(all drafted tokens so far accepted | drafts), per sequence

    def keep_drafting(self, step, draft_rows, *, which=None, tokens=None, target_rows=None, **_):
        if tokens is None or target_rows is None:
            raise ValueError("ThresholdController needs the drafted tokens and the target rows (an oracle head)")
        rows = np.arange(len(tokens))
        p_x, q_x = draft_rows[rows, tokens], target_rows[rows, tokens]
        which = rows if which is None else which
        self._all_accepted[which] *= np.minimum(1.0, q_x / p_x)  # drafted tokens have p > 0
        if step >= self.max_length or self.thresholds[step - 1] is None:
            return np.zeros(len(tokens), dtype=bool)
        return (1.0 - self._all_accepted[which]) < self.thresholds[step - 1]

    def __repr__(self):
        return f"ThresholdController(max_length={self.max_length})"


class HindsightOracle(DraftLengthController):
    """SpecDec++'s greedy oracle (Theorem 4.1): stop drafting right before the first token the target will reject.

    For greedy draft and target (:class:`otspec.sources.GreedySource`), after each drafted token
    it looks one position ahead and stops iff the draft's next greedy token differs from the
    target's. Every drafted token past the first of an iteration is then accepted, and each target
    call produces the target's token at a mismatch position (eq. (5): no discarded drafts beyond an
    iteration's unavoidable first one, N_target = number of mismatches + the last call).
    """

    needs_lookahead = True

    def __init__(self, max_length: int):
        self.max_length = check_size(max_length, "max_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")

    def keep_drafting(self, step, draft_rows, *, next_rows=None, **_):
        if next_rows is None:
            raise ValueError("HindsightOracle needs the next position's rows (needs_lookahead)")
        p_next, q_next = next_rows()
        return (np.argmax(p_next, axis=1) == np.argmax(q_next, axis=1)) & (step < self.max_length)

