"""The one ledger of the decode loops: counts, timings and the block-efficiency interval.

:func:`otspec.engine.decode.generate` (single draft chains) and
:func:`otspec.engine.tree.generate_tree` (multi-draft trees) record every iteration here and
return the same :class:`DecodeResult`.

Spec: ``docs/specdecpp.md``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from ..theory.cost import CallCosts
from .stats import Estimate, check_confidence, ratio_estimate

__all__ = ["MIN_CI_UNITS", "CostModel", "DecodeResult", "Ledger", "block_efficiency_estimate"]

#: Independent units used for the block-efficiency interval (sequences, or segments of them).
MIN_CI_UNITS = 32


@dataclass(frozen=True)
class CostModel:
    """Wall-clock accounting of a decode run for per-call costs t_draft, t_target (SpecDec++ §3.2), from the
    one cost model :class:`otspec.theory.CallCosts`.

    With N generated tokens, N_draft draft calls, N_target target calls and N_discarded drafted
    tokens thrown away (``specdecpp.md`` eqs. (1)–(4)):

    * ``total_time`` = t_draft·N_draft + t_target·N_target (1);
    * for single-draft chains N_draft + N_target = N + N_discarded (2), so
      ``total_time`` = ``oracle_time`` + ``discard_time`` + ``verification_time`` with
      T_0 = t_draft·N, t_draft·N_discarded and (t_target − t_draft)·N_target (Lemma 3.1, (3));
      ``decomposition_holds`` says whether (2) holds for this run (multi-draft trees draft
      several tokens per pass, so it does not there);
    * ``latency`` = total_time / N (eq. 5.1), ``discard_rate`` = N_discarded / N,
      ``verification_rate`` = N_target / N; ``speedup`` over plain decoding = t_target / latency.
    """

    t_draft: float
    t_target: float
    total_time: float
    oracle_time: float
    discard_time: float
    verification_time: float
    decomposition_holds: bool
    latency: float
    discard_rate: float
    verification_rate: float
    speedup: float
    latency_interval: Estimate | None = None

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "latency_interval"}
        if self.latency_interval is not None:
            out["latency_interval"] = self.latency_interval.as_dict()
        return out


@dataclass(frozen=True)
class DecodeResult:
    """Counts and rates of a decode loop (totals over all sequences).

    Attributes
    ----------
    tokens : ndarray, shape (B, N)
        The generated sequences.
    iterations, target_calls : int
        Verification iterations; each scores its drafts with one target call.
    draft_calls : int
        Draft forward passes (chains: one per drafted token; trees: one per depth, batched).
    accepted, rejected, discarded, generated : int
        Accepted draft tokens; iterations that stopped before their drafted depth; drafted
        tokens not accepted; emitted tokens.
    block_efficiency : Estimate
        Generated tokens per target call, with a batch-means interval at level 0.95
        (:meth:`at_confidence` gives it at another level).
    accept_hist : ndarray, shape (L+1, L+1)
        ``accept_hist[g, t]``: iterations that drafted depth g and accepted t.
    elapsed_s : float
    """

    tokens: np.ndarray
    iterations: int
    target_calls: int
    draft_calls: int
    accepted: int
    rejected: int
    discarded: int
    generated: int
    block_efficiency: Estimate
    accept_hist: np.ndarray
    elapsed_s: float
    #: Per-iteration records (unit id, emitted tokens, draft calls) for intervals on derived ratios.
    trace: tuple | None = field(default=None, repr=False, compare=False)
    #: Per sequence: (tokens generated (B,), verification iterations (B,)) — the units of a prompt-level interval.
    per_sequence: tuple | None = field(default=None, repr=False, compare=False)

    def cost(self, t_draft: float, t_target: float = 1.0, confidence: float = 0.95) -> CostModel:
        """The :class:`CostModel` of this run for a draft call costing ``t_draft`` and a target call ``t_target``.

        The unit is the user's (default: one target call = 1).
        """
        from ..checks import check_real

        t_draft = check_real(t_draft, "t_draft", low=0.0)
        t_target = check_real(t_target, "t_target", low=0.0, low_open=True)
        if not math.isfinite(t_draft / t_target) or t_draft * max(self.draft_calls, 1) > 1e300 or (
                t_target * max(self.target_calls, 1) > 1e300):
            raise ValueError(f"t_draft {t_draft!r}, t_target {t_target!r}: their ratio or the run's total time "
                             "overflows a float; give both in one sensible unit (milliseconds, or t_target = 1)")
        N = self.generated
        parts = CallCosts(t_draft, t_target).decomposition(N, self.draft_calls, self.target_calls, self.discarded)
        total = parts["total_time"]
        latency = total / N
        interval = None
        if self.trace is not None:  # batch means over the same units as the block-efficiency interval
            unit, n_units, emitted, calls = self.trace
            time_u = np.bincount(unit, weights=t_draft * calls + t_target, minlength=n_units)
            gen_u = np.bincount(unit, weights=emitted, minlength=n_units)
            used = gen_u > 0
            interval = ratio_estimate(time_u[used], gen_u[used], confidence)
        return CostModel(t_draft, t_target, total, oracle_time=parts["oracle_time"], discard_time=parts["discard_time"],
                         verification_time=parts["verification_time"], decomposition_holds=parts["holds"],
                         latency=latency, discard_rate=self.discarded / N, verification_rate=self.target_calls / N,
                         speedup=t_target / latency if latency > 0 else math.inf, latency_interval=interval)

    def at_confidence(self, confidence: float) -> DecodeResult:
        """This result with its block-efficiency interval at level ``confidence`` (the same units; nothing reruns).

        >>> from otspec import IIDSource, TokenVerify, generate
        >>> res = generate(IIDSource([.6, .4]), IIDSource([.5, .5]), TokenVerify(), 2, 200, n_sequences=2, seed=0)
        >>> wide = res.at_confidence(0.99).block_efficiency
        >>> wide.value == res.block_efficiency.value and wide.low < res.block_efficiency.low, wide.confidence
        (True, 0.99)
        """
        unit, n_units, emitted, _ = self.trace
        return replace(self, block_efficiency=_unit_ratio(unit, n_units, emitted, check_confidence(confidence)))

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted tokens, as serving engines report it (``nan`` when nothing was drafted)."""
        drafted = self.accepted + self.discarded
        return self.accepted / drafted if drafted else float("nan")

    def summary(self) -> dict:
        """JSON-friendly counts (without the token array)."""
        return {
            "sequences": int(self.tokens.shape[0]),
            "tokens_per_sequence": int(self.tokens.shape[1]),
            "iterations": self.iterations,
            "target_calls": self.target_calls,
            "draft_calls": self.draft_calls,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "discarded": self.discarded,
            "generated": self.generated,
            "acceptance_rate": None if self.accepted + self.discarded == 0 else self.acceptance_rate,
            **({"acceptance_rate_status": "undefined: no token was drafted (every sequence was one token long)"}
               if self.accepted + self.discarded == 0 else {}),
            "block_efficiency": self.block_efficiency.as_dict(),
        }


def _units(rows, starts, n_sequences: int, n_tokens: int):
    """Unit id of every iteration: each sequence split into contiguous segments (>= MIN_CI_UNITS units in all)."""
    segments = max(1, -(-MIN_CI_UNITS // n_sequences))
    return rows * segments + np.minimum(starts * segments // n_tokens, segments - 1), n_sequences * segments


def block_efficiency_estimate(rows, starts, emitted, n_sequences: int, n_tokens: int,
                              confidence: float = 0.95) -> Estimate:
    """Generated tokens per target call with a batch-means interval.

    ``rows``, ``starts``, ``emitted`` are per-iteration records (lists of arrays): the
    sequence, the position the iteration started at, and the tokens it emitted (each
    iteration is one target call). Each sequence is split into contiguous segments by start
    position so there are at least :data:`MIN_CI_UNITS` units for the interval.
    """
    rows, starts, emitted = (np.concatenate(x) for x in (rows, starts, emitted))
    return _unit_ratio(*_units(rows, starts, n_sequences, n_tokens), emitted, confidence)


def _unit_ratio(unit, n_units: int, emitted, confidence: float) -> Estimate:
    """Emitted tokens per iteration (one target call each) by batch means over ``unit``."""
    gen_u = np.bincount(unit, weights=emitted, minlength=n_units)
    calls_u = np.bincount(unit, minlength=n_units)
    used = calls_u > 0
    return ratio_estimate(gen_u[used], calls_u[used], confidence, floor=1.0)  # each iteration emits >= 1 token


class Ledger:
    """Per-iteration records of a decode loop over ``n_sequences`` × ``n_tokens`` with depth <= ``max_depth``."""

    def __init__(self, n_sequences: int, n_tokens: int, max_depth: int):
        self.B, self.N = int(n_sequences), int(n_tokens)
        self.hist = np.zeros((max_depth + 1, max_depth + 1), dtype=np.int64)
        self.draft_calls = self.drafted = 0
        self._rows, self._starts, self._emitted, self._draft_calls = [], [], [], []
        self._t0 = time.perf_counter()

    def record(self, rows, starts, depth, accepted, emitted, *, draft_calls, drafted: int) -> None:
        """One target call per row of ``rows`` (n,): started at ``starts``, drafted ``depth`` deep,
        accepted ``accepted`` and emitted ``emitted`` tokens after ``draft_calls`` draft passes (per
        row, or one number for all); ``drafted`` draft tokens in all."""
        np.add.at(self.hist, (np.broadcast_to(depth, np.shape(rows)), accepted), 1)
        calls = np.broadcast_to(np.asarray(draft_calls, dtype=np.float64), np.shape(rows))
        self.draft_calls += int(calls.sum())
        self.drafted += int(drafted)
        self._rows.append(np.asarray(rows))
        self._starts.append(np.asarray(starts))
        self._emitted.append(np.asarray(emitted))
        self._draft_calls.append(calls)

    def result(self, tokens: np.ndarray, confidence: float = 0.95) -> DecodeResult:
        """The :class:`DecodeResult` of everything recorded."""
        emitted, rows = np.concatenate(self._emitted), np.concatenate(self._rows)
        unit, n_units = _units(rows, np.concatenate(self._starts), self.B, self.N)
        ells = np.arange(self.hist.shape[0])
        accepted = int(self.hist.sum(axis=0) @ ells)
        return DecodeResult(
            tokens=tokens,
            iterations=int(emitted.size),
            target_calls=int(emitted.size),
            draft_calls=self.draft_calls,
            accepted=accepted,
            rejected=int(sum(self.hist[g, :g].sum() for g in range(1, self.hist.shape[0]))),
            discarded=self.drafted - accepted,
            generated=int(emitted.sum()),
            block_efficiency=_unit_ratio(unit, n_units, emitted, confidence),
            accept_hist=self.hist,
            elapsed_s=time.perf_counter() - self._t0,
            trace=(unit, n_units, emitted, np.concatenate(self._draft_calls)),
            per_sequence=(np.bincount(rows, weights=emitted, minlength=self.B).astype(np.int64),
                          np.bincount(rows, minlength=self.B)),
        )
