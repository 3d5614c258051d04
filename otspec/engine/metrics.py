"""Acceptance metrics as serving engines report them, beside otspec's own, from one accept histogram.

A run's outcome is the histogram ``H[g, τ]``: iterations that drafted g tokens and accepted τ of
them (the ledger's ``accept_hist``). A *draft* is an iteration with g ≥ 1 (one verification of
drafted tokens); iterations that drafted nothing (a sequence's last position) are not drafts.

* **mean acceptance length** = 1 + accepted / drafts (vLLM, SGLang: tokens emitted per
  verification, the bonus or correction token included). On fixed-length runs it is otspec's
  block efficiency E[τ + 1] restricted to drafts.
* **per-position acceptance, unconditional** (the engines' rate): a_i = P(the first i drafts are
  all accepted) = #(drafts with τ ≥ i) / drafts, i = 1..L. It is non-increasing in i, and
  Σ_i a_i = E[τ], so mean acceptance length = 1 + Σ_i a_i.
* **per-position acceptance, conditional** (otspec's record, ``acceptance_per_position``):
  c_i = P(draft i accepted | it was drafted and drafts 1..i−1 were accepted)
  = #(τ ≥ i) / #(g ≥ i and τ ≥ i − 1).
* **conversion**: with a fixed draft length (every draft g = L), a_i = c_1 c_2 ⋯ c_i and
  c_i = a_i / a_{i−1} (:func:`unconditional_from_conditional`, :func:`conditional_from_unconditional`);
  with variable draft lengths a draft shorter than i counts as "not accepted at i" in a_i but does
  not enter c_i, so only the histogram converts one into the other.
* **draft acceptance rate** = accepted / drafted tokens (vLLM's ``draft_acceptance_rate``).
* **draft-length histogram**: iterations by drafted length g = 0..L.

:func:`synthetic_rates` writes the per-position rates in the form the engines' synthetic-acceptance
modes take: a list of non-increasing rates per position and the mean acceptance length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "SYNTHETIC_FORMAT",
    "EngineMetrics",
    "conditional_from_unconditional",
    "engine_metrics",
    "synthetic_rates",
    "unconditional_from_conditional",
]

#: The ``format`` of :func:`synthetic_rates` files.
SYNTHETIC_FORMAT = "otspec-synthetic-acceptance/1"


@dataclass(frozen=True)
class EngineMetrics:
    """The serving-engine metrics of one run (module docstring); ``None`` where a run had no draft."""

    drafts: int
    drafted_tokens: int
    accepted_tokens: int
    mean_acceptance_length: float | None
    acceptance_per_position_unconditional: list
    acceptance_per_position_conditional: list
    draft_acceptance_rate: float | None
    draft_length_histogram: list

    def as_dict(self) -> dict:
        return {"drafts": self.drafts, "drafted_tokens": self.drafted_tokens, "accepted_tokens": self.accepted_tokens,
                "mean_acceptance_length": self.mean_acceptance_length,
                "acceptance_per_position_unconditional": self.acceptance_per_position_unconditional,
                "acceptance_per_position_conditional": self.acceptance_per_position_conditional,
                "draft_acceptance_rate": self.draft_acceptance_rate,
                "draft_length_histogram": self.draft_length_histogram}


def _histogram(accept_hist) -> np.ndarray:
    hist = np.asarray(accept_hist)
    if hist.ndim != 2 or hist.shape[0] != hist.shape[1] or hist.shape[0] < 1:
        raise ValueError(f"accept_hist: expected a square (L + 1, L + 1) array of counts [drafted g, accepted τ], "
                         f"got shape {hist.shape}")
    if not np.all(np.isfinite(hist)) or (hist < 0).any() or (hist != np.round(hist)).any():
        raise ValueError("accept_hist: expected non-negative integer counts")
    if np.triu(hist, k=1).any():
        raise ValueError("accept_hist: an iteration cannot accept more tokens than it drafted (entries above the "
                         "diagonal must be 0)")
    return hist.astype(np.int64)


def engine_metrics(accept_hist) -> EngineMetrics:
    """The metrics of the module docstring from ``accept_hist[g, τ]`` (iterations that drafted g, accepted τ)."""
    hist = _histogram(accept_hist)
    L = hist.shape[0] - 1
    g, tau = np.indices(hist.shape)
    drafted = hist[1:]  # iterations with g >= 1: the drafts
    drafts = int(drafted.sum())
    accepted = int((hist * tau).sum())
    drafted_tokens = int((hist * g).sum())
    at_least = [int(hist[:, i:].sum()) for i in range(1, L + 1)]  # drafts with τ >= i
    conditional = []
    for i in range(1, L + 1):
        reached = int(hist[i:, i - 1:].sum())  # drafted >= i tokens and accepted >= i - 1
        conditional.append(at_least[i - 1] / reached if reached else None)
    return EngineMetrics(
        drafts=drafts, drafted_tokens=drafted_tokens, accepted_tokens=accepted,
        mean_acceptance_length=1.0 + accepted / drafts if drafts else None,
        acceptance_per_position_unconditional=[a / drafts for a in at_least] if drafts else [None] * L,
        acceptance_per_position_conditional=conditional,
        draft_acceptance_rate=accepted / drafted_tokens if drafted_tokens else None,
        draft_length_histogram=hist.sum(axis=1).tolist())


def unconditional_from_conditional(conditional) -> list:
    """a_i = c_1 ⋯ c_i: the engines' rates from otspec's conditional ones, for a fixed draft length."""
    c = np.asarray(conditional, dtype=np.float64)
    if c.ndim != 1 or not np.all((c >= 0) & (c <= 1)):
        raise ValueError("conditional: expected a list of probabilities in [0, 1]")
    return np.cumprod(c).tolist()


def conditional_from_unconditional(unconditional) -> list:
    """c_i = a_i / a_{i−1} (a_0 = 1; ``None`` where a_{i−1} = 0), for a fixed draft length."""
    a = np.asarray(unconditional, dtype=np.float64)
    if a.ndim != 1 or not np.all((a >= 0) & (a <= 1)) or (np.diff(a) > 1e-12).any():
        raise ValueError("unconditional: expected a non-increasing list of probabilities in [0, 1]")
    prev = np.concatenate([[1.0], a[:-1]])
    return [float(x / p) if p > 0 else None for x, p in zip(a, prev, strict=True)]


def synthetic_rates(unconditional, *, source: str, **info) -> dict:
    """A synthetic-acceptance entry: non-increasing per-position rates and the mean acceptance length 1 + Σ a_i.

    ``source`` says where the rates come from (``"measured"``, ``"predicted"``); ``info`` is copied in
    (the verifier, L, the pair)."""
    a = [float(x) for x in unconditional]
    if any(not 0.0 <= x <= 1.0 for x in a) or any(y > x + 1e-12 for x, y in zip(a, a[1:], strict=False)):
        raise ValueError("unconditional: synthetic rates must be non-increasing probabilities in [0, 1]")
    return {**info, "source": source, "acceptance_rates": a, "mean_acceptance_length": 1.0 + sum(a)}
