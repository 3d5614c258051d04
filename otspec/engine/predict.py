"""Predict a verifier's block efficiency on a real pair from a log of plain decoding, without running it there.

A :class:`~otspec.sources.LoggedRows` log holds both models' rows along plain target continuations
of P prompts. Each path replays as a positional pair (row t is (p_t, q_t), whatever was drafted:
:meth:`~otspec.sources.LoggedRows.path_pair`, relabelled to the symbols the path uses), and the
decode engine runs the verifier over it from the path's first step to its last, as the real loop
does along a sequence: block starts follow the verifier's own accepted lengths (a renewal along
the path, not an average over windows), v1 block verification carries its residual target, trees
are drafted and walked. Block efficiency is the engine's: generated tokens / verification
iterations, pooled over paths and ``sequences`` replays of each.

What it assumes: the rows at draft position i are those of the plain continuation at that step,
i.e. they do not depend on the drafted tokens. Position 1 of every block is exact (its context is
target-distributed because decoding is lossless); later positions are approximated.

The interval is a paired bootstrap over the log's paths (prompts, the independent unit): paths are
resampled with replacement, each carrying its tokens and iterations together, and the ratio of the
sums is recomputed; the percentile interval of those ratios is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_size
from ..drafts import DraftTree
from ..sources import LoggedRows
from .decode import generate
from .metrics import engine_metrics
from .stats import check_confidence
from .tree import generate_tree

__all__ = ["LogPrediction", "paired_ratio_interval", "predict_from_log"]

#: How the prediction was made, as records state it.
METHOD = ("decode engine on the logged rows of an independent plain-decoding run (positional pair per prompt, rows "
          "independent of the drafted tokens); interval: paired bootstrap over prompts, percentile")


@dataclass(frozen=True)
class LogPrediction:
    """A predicted block efficiency and what it rests on (see the module docstring)."""

    block_efficiency: float
    low: float
    high: float
    tokens: np.ndarray  # per path: tokens generated over its replays
    iterations: np.ndarray  # per path: verification iterations
    accept_hist: np.ndarray  # pooled [drafted g, accepted τ]
    sequences: int
    method: str = METHOD

    def as_dict(self) -> dict:
        m = engine_metrics(self.accept_hist)
        return {"block_efficiency": self.block_efficiency, "low": self.low, "high": self.high,
                "paths": int(self.tokens.size), "sequences_per_path": self.sequences,
                "mean_acceptance_length": m.mean_acceptance_length,
                "acceptance_per_position_unconditional": m.acceptance_per_position_unconditional,
                "method": self.method}


def paired_ratio_interval(numerators, denominators, *, confidence: float = 0.95, draws: int = 2000,
                          seed=0) -> tuple[float, float, float]:
    """(Σ num / Σ den, low, high): the ratio of sums and its percentile interval from a bootstrap that resamples
    units (index pairs) with replacement, keeping each unit's numerator and denominator together."""
    num, den = np.asarray(numerators, dtype=np.float64), np.asarray(denominators, dtype=np.float64)
    if num.ndim != 1 or num.shape != den.shape or num.size == 0:
        raise ValueError(f"numerators and denominators: expected two non-empty 1-D arrays of one length, got "
                         f"shapes {num.shape} and {den.shape}")
    if not (np.all(np.isfinite(num)) and np.all(np.isfinite(den))) or (den < 0).any() or den.sum() <= 0:
        raise ValueError("denominators: expected finite non-negative values with a positive sum")
    confidence = check_confidence(confidence)
    draws = check_size(draws, "draws")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, num.size, size=(draws, num.size))
    sums = den[idx].sum(axis=1)
    ratios = num[idx].sum(axis=1)[sums > 0] / sums[sums > 0]
    alpha = 0.5 * (1.0 - confidence)
    low, high = np.quantile(ratios, [alpha, 1.0 - alpha])
    return float(num.sum() / den.sum()), float(low), float(high)


def predict_from_log(log: LoggedRows, verifier, draft, *, sequences: int = 32, seed: int = 0, rule: str = "match",
                     tail: str = "overlap", confidence: float = 0.95, draws: int = 2000) -> LogPrediction:
    """The block efficiency the decode engine gives ``verifier`` on every path of ``log`` (module docstring).

    ``draft`` is a draft length L (a chain verifier) or a :class:`~otspec.drafts.DraftTree` (a multi-draft
    verifier, walked with ``rule``); each path is replayed ``sequences`` times (path i with seed ``seed + i``).
    """
    if not isinstance(log, LoggedRows):
        raise ValueError(f"log: expected LoggedRows (otspec.sources.load_logged_rows), got {type(log).__name__}")
    sequences = check_size(sequences, "sequences")
    tree = draft if isinstance(draft, DraftTree) else None
    L = tree.depth if tree is not None else check_size(draft, "L", minimum=0)
    tokens, iterations, hist = [], [], np.zeros((L + 1, L + 1), dtype=np.int64)
    for i in range(log.n_paths):
        steps = int(log.path_offsets[i + 1] - log.path_offsets[i])
        if steps < 2:  # a one-step path has nothing to draft
            continue
        d, t = log.path_pair(i, tail, compact=True)
        if tree is None:
            res = generate(d, t, verifier, L, steps, n_sequences=sequences, seed=seed + i, progress=False)
        else:
            res = generate_tree(d, t, verifier, tree, steps, rule=rule, n_sequences=sequences, seed=seed + i,
                                progress=False)
        tokens.append(res.generated)
        iterations.append(res.iterations)
        hist += np.asarray(res.accept_hist, dtype=np.int64)
    if not tokens:
        raise ValueError("log: no path has the two steps a prediction needs")
    value, low, high = paired_ratio_interval(tokens, iterations, confidence=confidence, draws=draws, seed=seed)
    return LogPrediction(value, low, high, np.asarray(tokens), np.asarray(iterations), hist, sequences)
