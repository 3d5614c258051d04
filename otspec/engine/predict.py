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

Two intervals, both bootstraps over the log's paths (prompts, the independent unit), each path carrying
its tokens and iterations together (paired), reported as percentile intervals:

* ``mean_low`` / ``mean_high`` — the prediction's own uncertainty: paths resampled with replacement, the
  ratio of the sums over all their replays recomputed;
* ``low`` / ``high`` — the *prediction interval* for a measurement: where the block efficiency of one run
  over ``units`` new prompts should fall. A two-level bootstrap: the log's paths resampled (the
  prediction's uncertainty), then ``units`` prompts drawn from that resample, each decoded once (one of
  its replays, chosen at random): prompt-to-prompt spread and decoding randomness, as a run has them.
  This is the interval a measured value is checked against.

One plain path per prompt is itself a draw: a prompt whose logged continuation happens to be easy for the draft
predicts high. With several paths per prompt (``paths_per_prompt``) the prompt stays the unit of both bootstraps and
its paths' replays are pooled, so the prediction averages over continuations too.

A batch of B prompts decoded together needs as many target calls as its *slowest* sequence needs
iterations (plain sampling takes exactly N steps for each): :meth:`LogPrediction.batch_calls` predicts that
straggling from the replays, E[max of B prompts' iterations] / E[their mean], which a speedup predicted from
tokens per iteration must divide by (``llm_bridge`` does).

The replays also keep every iteration's shape (:attr:`LogPrediction.traces`: per prompt, replay and
iteration, the tokens drafted — a tree's nodes —, the draft calls, and whether a chain's whole draft was
accepted), so that a wall clock can be predicted from call costs measured elsewhere: :func:`predict_wall_clock`
draws batches of prompts as a run decodes them, charges each batch iteration at its widest draft (the target call
scores the batch's longest draft or largest trie) and for as long as its slowest sequence needs, and divides plain
decoding's time for the same tokens by it. An iteration after one in which some sequence of the batch kept its
whole draft can cost more (``after_whole``): a draft session that never fed its last drafted token feeds it with
the emitted one in its next first call, which is then two tokens wide for the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_size
from ..drafts import ConfidenceTree, DraftTree
from ..sources import LoggedRows
from .decode import generate
from .metrics import engine_metrics
from .observers import Observer
from .stats import check_confidence
from .tree import generate_tree

__all__ = ["DEFAULT_REPLAYS", "LogPrediction", "ReplayPlan", "WallClockCosts", "batch_straggling", "paired_ratio_interval", "predict_from_log", "predict_from_pairs",
           "predict_wall_clock", "predictive_ratio_interval"]

#: How the prediction was made, as records state it.
METHOD = ("decode engine on the logged rows of an independent plain-decoding run (positional pair per prompt, rows "
          "independent of the drafted tokens); interval: prediction interval for a run over the measured number of "
          "prompts (two-level paired bootstrap over prompts and their replays, percentile)")


@dataclass(frozen=True)
class LogPrediction:
    """A predicted block efficiency and what it rests on (see the module docstring)."""

    block_efficiency: float
    low: float  # prediction interval for a run over ``units`` prompts
    high: float
    tokens: np.ndarray  # per prompt: tokens generated over its replays (of all its paths)
    iterations: np.ndarray  # per prompt: verification iterations
    accept_hist: np.ndarray  # pooled [drafted g, accepted τ]
    sequences: int
    mean_low: float = float("nan")  # the prediction's own (confidence) interval
    mean_high: float = float("nan")
    units: int = 0  # prompts of the run the prediction interval is for
    method: str = METHOD
    replay_iterations: np.ndarray | None = None  # (prompts, paths per prompt x sequences): each replay's iterations
    #: {"width", "calls", "whole"}: int arrays (paths, sequences, iterations), -1 once a replay is done: tokens
    #: drafted (a tree's nodes), draft calls and whether a chain's whole draft (>= 1 token) was accepted (1) or not
    #: (0; a tree: always 0) in every iteration of every replay (:func:`predict_wall_clock` reads them)
    traces: dict | None = None
    #: plain paths logged per prompt: ``tokens`` and ``iterations`` are per prompt, its paths' replays pooled
    paths_per_prompt: int = 1

    def batch_calls(self, batch: int, *, draws: int = 4000, seed: int = 0) -> dict:
        """Iterations a batch of ``batch`` prompts decoded together takes (its slowest sequence's) against the mean
        sequence's: :func:`batch_straggling` on this prediction's replays."""
        if self.replay_iterations is None:
            raise ValueError("batch_calls: this prediction keeps no per-replay iterations")
        return batch_straggling(self.replay_iterations, batch, draws=draws, seed=seed)

    def as_dict(self) -> dict:
        m = engine_metrics(self.accept_hist)
        return {"block_efficiency": self.block_efficiency, "low": self.low, "high": self.high,
                "interval": f"prediction interval for one run over {self.units} prompts",
                "mean_low": self.mean_low, "mean_high": self.mean_high,
                "paths": int(self.tokens.size) * self.paths_per_prompt, "prompts": int(self.tokens.size),
                "paths_per_prompt": self.paths_per_prompt, "sequences_per_path": self.sequences, "units": self.units,
                "mean_acceptance_length": m.mean_acceptance_length,
                "acceptance_per_position_unconditional": m.acceptance_per_position_unconditional,
                "method": self.method}


def batch_straggling(iterations, batch: int, *, draws: int = 4000, seed=0) -> dict:
    """How much longer a batch takes than its mean sequence: ``{"batch", "mean_iterations", "batch_iterations",
    "factor"}`` with ``factor`` = E[max over the batch's sequences of their iterations] / E[their mean] (≥ 1).

    ``iterations`` is (P, S): S replays of each of P prompts; a batch draws ``batch`` distinct prompts (all P
    when fewer) with one replay each, ``draws`` times. A decode loop that keeps calling the target until every
    sequence of its batch has its tokens makes ``batch_iterations`` calls per batch, not ``mean_iterations``."""
    its = np.asarray(iterations, dtype=np.float64)
    if its.ndim != 2 or its.size == 0 or not np.all(np.isfinite(its)) or (its < 0).any():
        raise ValueError(f"iterations: expected a non-empty (prompts, replays) array of finite values >= 0, got "
                         f"shape {its.shape}")
    batch, draws = check_size(batch, "batch"), check_size(draws, "draws")
    rng = np.random.default_rng(seed)
    P, S = its.shape
    b = min(batch, P)
    picks = rng.random((draws, P)).argsort(axis=1)[:, :b]  # distinct prompts per batch
    drawn = its[picks, rng.integers(0, S, size=(draws, b))]
    mean, slowest = float(drawn.mean()), float(drawn.max(axis=1).mean())
    return {"batch": b, "mean_iterations": mean, "batch_iterations": slowest,
            "factor": slowest / mean if mean > 0 else 1.0}


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


def predictive_ratio_interval(tokens, iterations, units: int, *, confidence: float = 0.95, draws: int = 2000,
                              seed=0) -> tuple[float, float]:
    """Percentile interval of the ratio Σ tokens / Σ iterations that one run over ``units`` prompts would measure.

    ``tokens`` and ``iterations`` are (P, S): S replays of each of P logged prompts. Two levels (module
    docstring): the P prompts resampled, then ``units`` prompts drawn from the resample, one replay each."""
    tok, its = np.asarray(tokens, dtype=np.float64), np.asarray(iterations, dtype=np.float64)
    if tok.ndim != 2 or tok.shape != its.shape or tok.size == 0:
        raise ValueError(f"tokens and iterations: expected two non-empty (prompts, replays) arrays of one shape, got "
                         f"shapes {tok.shape} and {its.shape}")
    if not (np.all(np.isfinite(tok)) and np.all(np.isfinite(its))) or (its < 0).any():
        raise ValueError("iterations: expected finite non-negative values")
    units, draws = check_size(units, "units"), check_size(draws, "draws")
    confidence = check_confidence(confidence)
    rng = np.random.default_rng(seed)
    P, S = tok.shape
    outer = rng.integers(0, P, size=(draws, P))
    picks = np.take_along_axis(outer, rng.integers(0, P, size=(draws, units)), axis=1)
    replays = rng.integers(0, S, size=(draws, units))
    den = its[picks, replays].sum(axis=1)
    ratios = tok[picks, replays].sum(axis=1)[den > 0] / den[den > 0]
    if ratios.size == 0:
        raise ValueError("iterations: every resampled run had none")
    alpha = 0.5 * (1.0 - confidence)
    low, high = np.quantile(ratios, [alpha, 1.0 - alpha])
    return float(low), float(high)


@dataclass(frozen=True)
class ReplayPlan:
    """How a prediction replays its paths: each ``sequences`` times (path i with seed ``seed + i``), trees walked
    with ``rule``, intervals at ``confidence`` from ``draws`` bootstrap draws, for a run over ``units`` prompts
    (default: the log's prompts), the paths being ``paths_per_prompt`` plain paths of each prompt, one prompt's after
    another."""

    sequences: int = 32
    seed: int = 0
    rule: str = "match"
    confidence: float = 0.95
    draws: int = 2000
    units: int | None = None
    paths_per_prompt: int = 1

    def __post_init__(self):
        check_size(self.sequences, "sequences")
        check_size(self.paths_per_prompt, "paths_per_prompt")
        check_size(self.draws, "draws")
        if self.units is not None:
            check_size(self.units, "units")
        check_confidence(self.confidence)


#: The replays of a prediction given no plan.
DEFAULT_REPLAYS = ReplayPlan()


def predict_from_log(log: LoggedRows, verifier, draft, plan: ReplayPlan = DEFAULT_REPLAYS, *,
                     tail: str = "overlap") -> LogPrediction:
    """The block efficiency the decode engine gives ``verifier`` on every path of ``log`` (module docstring).

    ``draft`` is a draft length L (a chain verifier) or a :class:`~otspec.drafts.DraftTree` (a multi-draft
    verifier, walked with ``plan.rule``); ``plan`` (:class:`ReplayPlan`): each path replayed ``sequences`` times
    (path i with seed ``seed + i``), ``units`` the number of prompts of the run the prediction interval is for
    (default: the log's prompts), ``paths_per_prompt`` plain paths of each prompt in the log, one prompt's after
    another (:func:`predict_from_pairs`).
    """
    if not isinstance(log, LoggedRows):
        raise ValueError(f"log: expected LoggedRows (otspec.sources.load_logged_rows), got {type(log).__name__}")
    pairs = log.path_pairs(tail)
    return predict_from_pairs(pairs, verifier, draft, plan)


def predict_from_pairs(pairs, verifier, draft, plan: ReplayPlan = DEFAULT_REPLAYS, *,
                       method: str = METHOD) -> LogPrediction:
    """:func:`predict_from_log` on replays given as (draft, target) sources, one pair per plain path, each with a
    finite horizon (the path's logged steps): e.g. :class:`~otspec.sources.PositionalSource` pairs whose draft
    marks where it proposes nothing (a prompt-lookup drafter). Pair i is replayed with seed ``seed + i``;
    ``method`` is the description the prediction carries.

    ``paths_per_prompt`` (G): the pairs are G independent plain paths of each prompt, one prompt's G after another.
    The prompt stays the bootstrap's unit: its paths' replays are pooled (``tokens`` and ``iterations`` per prompt,
    G x ``sequences`` replays each), so more paths take the log's draw of one continuation per prompt out of the
    prediction without narrowing its interval as if they were new prompts. A prompt one of whose paths has fewer than
    two steps is left out whole."""
    sequences, seed, rule, confidence, draws, units = (plan.sequences, plan.seed, plan.rule, plan.confidence,
                                                       plan.draws, plan.units)
    G = plan.paths_per_prompt
    pairs = list(pairs)
    if len(pairs) % G:
        raise ValueError(f"pairs: {len(pairs)} paths do not split into prompts of paths_per_prompt = {G} paths each")
    tree = draft if isinstance(draft, (DraftTree, ConfidenceTree)) else None
    L = tree.depth if tree is not None else _max_length(draft)
    per_path = []  # (tokens (S,), iterations (S,), accept_hist, trace arrays) per pair; None: too short to draft
    for i, (d, t) in enumerate(pairs):
        horizons = [x for x in (d.horizon, t.horizon) if x is not None]
        if not horizons:
            raise ValueError(f"pair {i}: a replay needs a source with a finite horizon (the prompt's steps)")
        steps = min(horizons)
        if steps < 2:  # a one-step path has nothing to draft
            per_path.append(None)
            continue
        trace = IterationTrace(sequences)
        if tree is None:
            res = generate(d, t, verifier, draft, steps, n_sequences=sequences, seed=seed + i, progress=False,
                           observers=[trace])
        else:
            res = generate_tree(d, t, verifier, tree, steps, rule=rule, n_sequences=sequences, seed=seed + i,
                                progress=False, observers=[trace])
        per_tokens, per_iterations = res.per_sequence
        per_path.append((per_tokens, per_iterations, np.asarray(res.accept_hist, dtype=np.int64), trace.arrays()))
    prompts = [per_path[k:k + G] for k in range(0, len(per_path), G)]
    prompts = [group for group in prompts if all(x is not None for x in group)]
    if not prompts:
        raise ValueError("log: no path has the two steps a prediction needs")
    tokens = np.stack([np.concatenate([x[0] for x in group]) for group in prompts])  # (prompts, G x replays)
    iterations = np.stack([np.concatenate([x[1] for x in group]) for group in prompts])
    hist = sum((x[2] for group in prompts for x in group), np.zeros((L + 1, L + 1), dtype=np.int64))
    value, mean_low, mean_high = paired_ratio_interval(tokens.sum(axis=1), iterations.sum(axis=1),
                                                       confidence=confidence, draws=draws, seed=seed)
    units = tokens.shape[0] if units is None else check_size(units, "units")
    low, high = predictive_ratio_interval(tokens, iterations, units, confidence=confidence, draws=draws, seed=seed + 1)
    J = max(x[3][0].shape[1] for group in prompts for x in group)
    stacked = {key: np.stack([np.concatenate([np.pad(x[3][k], ((0, 0), (0, J - x[3][k].shape[1])), constant_values=-1)
                                              for x in group]) for group in prompts])
               for k, key in enumerate(("width", "calls", "whole"))}
    return LogPrediction(value, low, high, tokens=tokens.sum(axis=1), iterations=iterations.sum(axis=1),
                         accept_hist=hist, sequences=sequences, mean_low=mean_low, mean_high=mean_high, units=units,
                         method=method, replay_iterations=iterations, traces=stacked, paths_per_prompt=G)


def _max_length(draft) -> int:
    """L of a draft length or of a controller (its ``max_length``)."""
    if isinstance(draft, (int, np.integer)):
        return check_size(draft, "L", minimum=0)
    L = getattr(draft, "max_length", None)
    if L is None:
        raise ValueError(f"draft: expected a draft length, a controller or a draft tree, got {type(draft).__name__}")
    return int(L)


class IterationTrace(Observer):
    """Every iteration's shape per sequence (an observer of either loop): tokens drafted (chains; a tree's trie
    nodes), draft calls and whether a chain's whole draft of at least one token was accepted; -1 for a sequence
    that is already done. A tree's widths are its merged trie's, what the predicted run (a model on the host) feeds
    the target, so a replay on toy sources walks tries (``reads_tries``)."""

    reads_tries = True

    def __init__(self, batch: int):
        self.batch, self.width, self.calls, self.whole = int(batch), [], [], []

    def _add(self, rows, width, calls, whole) -> None:
        columns = [np.full(self.batch, -1, dtype=np.int64) for _ in range(3)]
        for column, values, kept in zip(columns, (width, calls, whole), (self.width, self.calls, self.whole),
                                        strict=True):
            column[rows] = values
            kept.append(column)

    def on_chain(self, step) -> None:  # a chain's draft calls: one per drafted token (the loop's first feeds the rest)
        drafted = np.asarray(step.drafted)
        self._add(np.asarray(step.rows), drafted, drafted, (drafted > 0) & (np.asarray(step.accepted) == drafted))

    def on_tree(self, step) -> None:
        self._add(np.asarray(step.rows), np.asarray(step.nodes), np.asarray(step.draft_calls), 0)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(width, calls, whole), each (batch, iterations)."""
        if not self.width:
            return tuple(np.zeros((self.batch, 0), dtype=np.int64) for _ in range(3))
        return tuple(np.stack(x, axis=1) for x in (self.width, self.calls, self.whole))


#: How :func:`predict_wall_clock` predicts, as records state it.
WALL_CLOCK_METHOD = ("cost profile measured apart from the run (plain decoding and zero-acceptance dry runs on "
                     "other prompts, target calls timed per width) applied to the prediction's replays: batches of "
                     "prompts drawn as the run decodes them, each batch iteration charged at its widest draft and for "
                     "as long as its slowest sequence needs; speedup = plain decoding's predicted time for the same "
                     "tokens over it; interval: percentile over draws that resample the log's prompts (two levels, "
                     "as the block efficiency's) and the profile's timed calls together")


@dataclass(frozen=True)
class WallClockCosts:
    """What a run's wall clock is charged (:func:`predict_wall_clock`), measured apart from the run.

    Attributes
    ----------
    plain_step : float
        Plain decoding's time per step of a batch.
    iteration_cost : callable
        ``iteration_cost(calls, width)``: time of a batch iteration whose widest draft has ``width`` tokens (a
        tree: nodes) and which makes ``calls`` draft calls (int arrays, any shape).
    plain_factors, cost_factors : arrays (D,), optional
        Relative resamples of the profile (plain step and speculative iteration times; each near 1): draw d of the
        interval scales the times by them. Default: no profile uncertainty.
    after_whole : float
        Extra time of a batch iteration that follows one in which any of the batch's sequences accepted its whole
        draft (traces' ``"whole"``; a sequence's own in ``ignoring_straggling``). Default 0.
    """

    plain_step: float
    iteration_cost: object
    plain_factors: object = None
    cost_factors: object = None
    after_whole: float = 0.0

    def __post_init__(self):
        if not (np.isfinite(self.plain_step) and self.plain_step > 0):
            raise ValueError(f"plain_step: expected a positive time, got {self.plain_step}")
        if not (np.isfinite(self.after_whole) and self.after_whole >= 0):
            raise ValueError(f"after_whole: expected a time >= 0, got {self.after_whole}")


def predict_wall_clock(traces: dict, costs: WallClockCosts, *, batch: int, units: int, n_tokens: int,
                       draws: int = 2000, confidence: float = 0.95, seed=0) -> dict:
    """Predicted speedup of a run from replay traces and call costs (module docstring).

    Parameters
    ----------
    traces : dict
        ``{"width", "calls"}`` and optionally ``"whole"`` (:attr:`LogPrediction.traces`): int arrays (P, S, J), -1
        once a replay is done.
    costs : WallClockCosts
        The plain step, the iteration cost, the profile's resampling factors and the after-whole charge.
    batch : int
        Prompts decoded together; ``units`` prompts in all, in batches of ``batch`` (the last may be short).
    n_tokens : int
        Tokens per prompt (plain decoding takes that many steps per batch).

    Returns
    -------
    dict
        ``speedup`` (expected plain time over expected speculative time), ``low`` / ``high`` (the prediction
        interval for one run over ``units`` prompts), ``ignoring_straggling`` (each sequence charged its own
        iterations at its own width), ``batch_iterations`` (iterations per batch: its slowest sequence's) and
        ``mean_iterations`` (per sequence), ``ms_per_batch`` and ``plain_ms_per_batch`` (predicted times of one
        batch), ``after_whole_ms_per_iteration`` (the ``after_whole`` charges per batch iteration),
        ``plain_ms_per_step``, ``batches``, ``units``, ``batch`` and ``method``.
    """
    width, calls = np.asarray(traces["width"], dtype=np.int64), np.asarray(traces["calls"], dtype=np.int64)
    whole = np.asarray(traces.get("whole", np.zeros_like(width)), dtype=np.int64)
    if width.ndim != 3 or width.shape != calls.shape or width.shape != whole.shape or width.size == 0:
        raise ValueError(f"traces: expected (prompts, replays, iterations) arrays of one shape, got "
                         f"{width.shape}, {calls.shape} and {whole.shape}")
    plain_step, iteration_cost, after_whole = costs.plain_step, costs.iteration_cost, costs.after_whole
    plain_factors, cost_factors = costs.plain_factors, costs.cost_factors
    batch, units, n_tokens = check_size(batch, "batch"), check_size(units, "units"), check_size(n_tokens, "n_tokens")
    draws = check_size(draws, "draws")
    confidence = check_confidence(confidence)
    factors = [np.ones(draws) if f is None else np.asarray(f, dtype=np.float64) for f in (plain_factors, cost_factors)]
    for name, f in zip(("plain_factors", "cost_factors"), factors, strict=True):
        if f.shape != (draws,) or not np.all(np.isfinite(f)) or (f <= 0).any():
            raise ValueError(f"{name}: expected {draws} positive finite factors, got shape {f.shape}")
    rng = np.random.default_rng(seed)
    P, S, _ = width.shape
    nb = -(-units // batch)
    plain = nb * n_tokens * float(plain_step)

    def after(kept, axis):  # whether the iteration before kept a whole draft (any sequence along ``axis``)
        prior = (kept > 0).any(axis=axis) if axis is not None else kept > 0
        return np.concatenate([np.zeros_like(prior[..., :1]), prior[..., :-1]], axis=-1) * float(after_whole)

    def times(paths, replays):  # (D, units) picks -> per draw: batch-iteration time and per-sequence time
        w, c, k = width[paths, replays], calls[paths, replays], whole[paths, replays]  # (D, units, J)
        pad = nb * batch - units
        if pad:
            w, c, k = (np.concatenate([x, np.full((x.shape[0], pad, x.shape[2]), -1)], axis=1) for x in (w, c, k))
        w, c, k = (x.reshape(x.shape[0], nb, batch, -1) for x in (w, c, k))
        wmax, cmax = w.max(axis=2), c.max(axis=2)
        live = wmax >= 0
        extra = np.where(live, after(k, 2), 0.0).sum(axis=(1, 2))
        spec = np.where(live, iteration_cost(np.maximum(cmax, 0), np.maximum(wmax, 0)), 0.0).sum(axis=(1, 2)) + extra
        real = np.maximum((w[..., :1] >= 0).sum(axis=2), 1)  # sequences per batch (the last may be short)
        own = np.where(w >= 0, iteration_cost(np.maximum(c, 0), np.maximum(w, 0)) + after(k, None), 0.0).sum(
            axis=(2, 3)) / real[..., 0]
        return spec, own.sum(axis=1), live.sum(axis=(1, 2)), (w >= 0).sum(axis=(1, 2, 3)), extra

    chunk = max(1, 2_000_000 // max(units * width.shape[2], 1))
    point = [times(rng.integers(0, P, size=(m, units)), rng.integers(0, S, size=(m, units)))
             for m in _chunks(max(draws, 2000), chunk)]
    spec, own, batch_its, seq_its, extra = (np.concatenate([p[k] for p in point]) for k in range(5))
    out = {"speedup": plain / float(spec.mean()), "ignoring_straggling": plain / float(own.mean()),
           "batch_iterations": float(batch_its.mean()) / nb, "mean_iterations": float(seq_its.mean()) / units,
           "plain_ms_per_step": float(plain_step), "ms_per_batch": float(spec.mean()) / nb,
           "plain_ms_per_batch": plain / nb, "batches": nb, "units": units, "batch": batch,
           "after_whole_ms_per_iteration": float(extra.mean()) / max(float(batch_its.mean()), 1e-300)}
    ratios, done = [], 0
    for m in _chunks(draws, chunk):
        outer = rng.integers(0, P, size=(m, P))
        paths = np.take_along_axis(outer, rng.integers(0, P, size=(m, units)), axis=1)
        spec_d = times(paths, rng.integers(0, S, size=(m, units)))[0]
        ratios.append(plain * factors[0][done:done + m] / (spec_d * factors[1][done:done + m]))
        done += m
    alpha = 0.5 * (1.0 - confidence)
    out["low"], out["high"] = (float(x) for x in np.quantile(np.concatenate(ratios), [alpha, 1.0 - alpha]))
    out["method"] = WALL_CLOCK_METHOD
    return out


def _chunks(total: int, size: int):
    """Sizes of consecutive chunks of at most ``size`` that add up to ``total``."""
    while total > 0:
        yield min(size, total)
        total -= size
