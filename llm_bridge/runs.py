"""One record entry per run of ``python -m llm_bridge.validate``: what was measured, what was predicted.

* :func:`run_record` (chain runs) and :func:`tree_record` (multi-draft runs): block efficiency over prompts
  (paired bootstrap), the serving engines' metrics, the prediction from a plain-decoding log of other prompts
  (:mod:`otspec.engine.predict`) and the two-point upper bound, call times, the measured speedup with its
  confidence interval (:func:`speedup_fields`) and the speedup predicted from a cost profile measured apart
  (:func:`wall_clock_prediction`);
* the timing protocol (:func:`timed_runs`, :func:`timing_check`, :class:`LoadMeter`) lives in
  :mod:`llm_bridge.timing` and is re-exported here;
* :func:`export_synthetic_rates`: per-position rates for a serving engine's synthetic-acceptance mode.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from otspec.engine.forecast import compare_prediction
from otspec.engine.metrics import SYNTHETIC_FORMAT, engine_metrics, synthetic_rates
from otspec.engine.predict import WallClockCosts, paired_ratio_interval, predict_wall_clock
from otspec.engine.rows import ChainRun, TreeRun
from otspec.verifiers import REGISTRY

from .calibrate import config_key
from .measure import predicted_block_efficiency
from .peer import round_bootstrap_ci
from .timing import (
    MAX_BASELINE_DRIFT,
    MIN_OTHER_LOAD,
    LoadMeter,
    TimedRuns,
    load_average,
    round_entries,
    timed_runs,
    timing_check,
)

__all__ = ["ENGINE_KEYS", "INTERLEAVED_METHOD", "MAX_BASELINE_DRIFT", "MIN_OTHER_LOAD", "STRAGGLING_METHOD",
           "TWO_POINT_METHOD", "LoadMeter", "TimedRuns", "export_synthetic_rates", "interleaved_interval",
           "load_average", "predicted_speedup_fields", "round_entries", "round_speedups", "run_record",
           "speedup_fields", "time_decomposition", "timed_runs", "timing_check", "tree_record",
           "wall_clock_prediction", "with_prediction_check"]

#: The serving-engine metrics every run carries at its top level (all of them under ``engine_metrics``).
ENGINE_KEYS = ("mean_acceptance_length", "acceptance_per_position_unconditional", "draft_acceptance_rate")



def _measured_ms(timer, kind: str) -> float | None:
    """Mean milliseconds per call of ``kind``, or None (JSON null: not measured) where it was never called (a
    whole-tree verifier times no separate verify call)."""
    return timer.mean_ms(kind) if timer.count(kind) else None

def engine_fields(accept_hist) -> dict:
    """A record row's serving-engine metrics: :data:`ENGINE_KEYS` at the top level, all under ``engine_metrics``
    (a tree's depth plays the draft position)."""
    metrics = engine_metrics(accept_hist).as_dict()
    return {**{k: metrics[k] for k in ENGINE_KEYS}, "engine_metrics": metrics}


def _mixed_prediction(pa, qa, weights) -> dict:
    """Tokens per iteration of each formula averaged over the drafted depths g (``weights[g]`` = share of iterations)."""
    out = dict.fromkeys((cls.closed_form.value for cls in REGISTRY.values()), 0.0)
    for g in np.flatnonzero(weights):
        for key, value in predicted_block_efficiency(pa[:g], qa[:g], int(g)).items():
            out[key] += weights[g] * value
    return out


def _bootstrap_prediction(result, weights, key: str, rng, n_boot: int = 200) -> np.ndarray:
    """The two-point value with each position's iterations resampled, p(A) and q(A) of an iteration together."""
    draws = []
    for _ in range(n_boot):
        picks = [rng.integers(0, v.size, v.size) for v in result.p_a]
        pa = [v[i].mean() for v, i in zip(result.p_a, picks, strict=True)]
        qa = [v[i].mean() for v, i in zip(result.q_a, picks, strict=True)]
        draws.append(_mixed_prediction(pa, qa, weights)[key])
    return np.array(draws)


def _call_costs(result) -> tuple[float, float]:
    """(mean ms per draft call (0 if none), the loop's own ms per target call): measurements of the run, reported
    beside it (the prediction never reads them).

    The overhead is the loop's wall-clock minus the time inside the models, spread over the iterations."""
    timer = result.timer
    calls = max(timer.count("target"), 1)
    model_ms = 1e3 * (timer.total("draft") + timer.total("target"))
    return timer.mean_ms("draft") if timer.count("draft") else 0.0, max(1e3 * result.seconds - model_ms, 0.0) / calls


#: Draws of the speedup's prediction interval (prompts and the profile resampled together).
WALL_CLOCK_DRAWS = 2000

#: What the interval adds to :data:`otspec.engine.predict.WALL_CLOCK_METHOD`: the measured run's own timing noise.
RUN_NOISE_METHOD = ("; with the measured run's own timing noise: each draw also averages {rounds} round-by-round "
                    "ratios of a dry run's iteration to plain decoding's step (as many rounds as the run will time), "
                    "drawn from all the profile's dry runs together (CostProfile.round_ratios)")


def wall_clock_prediction(profile, key: str, prediction, *, batch_size: int, units: int, n_tokens: int,
                          seed: int = 0) -> dict:
    """The ``speedup_prediction`` of a run: :func:`otspec.engine.predict.predict_wall_clock` on the prediction's
    replays with the iteration costs of the profile's dry run ``key`` (:class:`~llm_bridge.profile.CostProfile`),
    or ``{"source": None, "note": why}`` where there is nothing to predict from."""
    if profile is None:
        return {"source": None, "note": "no cost profile: the record was made without a calibration"}
    if prediction is None or getattr(prediction, "traces", None) is None:
        return {"source": None, "note": "no replay of the run's draws (no plain-decoding log for this drafter)"}
    if key not in profile.dry:
        return {"source": None, "note": f"the cost profile has no dry run of {key}"}
    costs = profile.config(key)
    plain_f, cost_f = profile.factors(key, WALL_CLOCK_DRAWS, seed)
    rounds = -(-int(units) // int(batch_size))  # the measured run's timing rounds: one per batch of prompts
    run_plain, run_cost = profile.factors(key, WALL_CLOCK_DRAWS, seed + 1, rounds=rounds)
    charged = WallClockCosts(profile.plain_step_ms(), profile.iteration_cost(key, costs), plain_factors=plain_f * run_plain,
                             cost_factors=cost_f * run_cost, after_whole=costs["after_whole"])
    out = predict_wall_clock(prediction.traces, charged, batch=batch_size, units=units, n_tokens=n_tokens,
                             draws=WALL_CLOCK_DRAWS, seed=seed)
    out["method"] += RUN_NOISE_METHOD.format(rounds=rounds)
    return {"source": "cost_profile", "profile_config": key, "costs_ms": costs, "run_rounds": rounds,
            **out}


def speedup_fields(result, baseline: dict, be: dict) -> dict:
    """The measured speedup and its spread: ``speedup``; ``speedup_ci``, a paired bootstrap over the interleaved
    timing rounds (:func:`llm_bridge.peer.round_bootstrap_ci`); ``speedup_range`` (and, under its old name,
    ``speedup_interval``), the smallest and largest round with their median. Without rounds that pair up (a
    baseline not decoded in turn with the run) the block efficiency's interval, scaled, stands in for the range and
    there is no ``speedup_ci``."""
    speedup, spread = _speedup(result, baseline, be)
    ci = None
    plain = baseline.get("rounds") or []
    if plain and len(plain) == len(result.rounds):
        ci = round_bootstrap_ci(result.rounds, plain)
        ci = {k: ci[k] for k in ("low", "high", "median", "rounds", "method")}
    return {"speedup": speedup, "speedup_ci": ci, "speedup_range": spread, "speedup_interval": spread}


def time_decomposition(decode, t_draft: float, t_target: float, batch_size: int) -> dict:
    """SpecDec++'s time decomposition (Lemma 3.1) of a run, in milliseconds. It counts one sequence's calls, so it
    is the run's at batch 1; at a larger batch a call serves several sequences and only the measured call times are
    given (the per-sequence counts would add up to several times the run's wall clock)."""
    if batch_size == 1:
        parts = decode.cost(t_draft, t_target).as_dict()
        parts.pop("speedup", None)  # t_target / latency ignores the widths of the calls and the loop: not a speedup
        return parts
    return {"t_draft": t_draft, "t_target": t_target, "total_time": None,
            "status": f"not given at batch {batch_size}: SpecDec++'s decomposition counts one sequence's draft and "
                      "target calls, and here each call serves the whole batch"}


def _prompt_interval(decode, seed: int) -> dict:
    """Block efficiency with its interval over prompts, the independent unit: generated tokens / iterations, the
    prompts resampled with their tokens and iterations together (paired bootstrap, 95 % percentile)."""
    tokens, iterations = decode.per_sequence
    mean, low, high = paired_ratio_interval(tokens, iterations, seed=seed)
    return {"mean": mean, "low": low, "high": high, "unit": "prompt", "prompts": int(tokens.size)}


#: How ``speedup_interval`` is made when plain sampling and the run decoded each batch in the same window.
INTERLEAVED_METHOD = ("range over interleaved rounds (not a confidence interval; see speedup_ci): plain sampling and "
                      "every run decode the same batch of prompts in the same window, taking turns (iteration by "
                      "iteration or batch by batch: timing.pairing); per round, the run's tokens/s over plain "
                      "sampling's; low/high: the smallest and largest round, median: their median")


def interleaved_interval(ratios) -> dict:
    """``speedup_interval`` from per-round speedups: smallest, largest, median and the rounds."""
    return {"low": float(min(ratios)), "high": float(max(ratios)), "median": float(np.median(ratios)),
            "rounds": [float(x) for x in ratios], "method": INTERLEAVED_METHOD}


def round_speedups(result, baseline: dict) -> list | None:
    """The run's tokens/s over plain sampling's, per interleaved timing round (``baseline["rounds"]``), or ``None``
    when the two were not decoded in turn (their rounds do not pair up)."""
    plain = baseline.get("rounds") or []
    if not plain or len(plain) != len(result.rounds):
        return None
    return [float((g / t) / (r["generated"] / r["seconds"])) for (g, t), r in zip(result.rounds, plain, strict=True)]


def _speedup(result, baseline: dict, be) -> tuple[float, dict]:
    """Measured speedup over plain sampling, and its spread over the interleaved timing rounds (each batch of
    prompts, timed for plain sampling and this run in the same window). Without rounds that pair up (a baseline
    not decoded in turn with the run), the block efficiency's interval, scaled, stands in."""
    speedup = result.tokens_per_s / baseline["tokens_per_s"]
    ratios = round_speedups(result, baseline)
    if ratios is None:
        return speedup, {"low": speedup * be["low"] / be["mean"], "high": speedup * be["high"] / be["mean"],
                         "method": "block efficiency interval, scaled (no interleaved timing rounds)"}
    return speedup, interleaved_interval(ratios)


#: The stand-in prediction where no plain-decoding log exists (a drafter without probability rows).
TWO_POINT_METHOD = ("two-point upper bound: the verifier's closed form on the per-position reduction A = {q >= p} of "
                    "this run's rows (no plain-decoding log: the drafter has no probability rows); interval: paired "
                    "bootstrap over iterations, percentile")


#: How ``batch_straggling`` is made, as records state it.
STRAGGLING_METHOD = ("a batch decodes until its slowest sequence has its tokens, so it takes max over its sequences of "
                     "their iterations in target calls (plain sampling: exactly N for each); factor = calls per batch "
                     "/ mean iterations per sequence. measured: target calls / (iterations / prompts x rounds); "
                     "predicted: the prediction's replays, batches of distinct prompts drawn with one replay each "
                     "(otspec.engine.predict.batch_straggling); predicted_speedup charges every batch iteration (its "
                     "wall-clock prediction draws whole batches)")


def _straggling(result, prediction, batch_size: int, prompts: int, wall: dict | None = None) -> dict:
    """Measured and predicted calls per batch over iterations per sequence (:data:`STRAGGLING_METHOD`); with the
    wall-clock prediction ``wall``, also its batch and sequence iterations (``predicted_wall_clock``)."""
    d, rounds = result.decode, max(len(result.rounds), 1)
    per_sequence = d.iterations / max(prompts, 1)
    measured = result.timer.count("target") / rounds / per_sequence if per_sequence > 0 else None
    predicted = None
    if prediction is not None and getattr(prediction, "replay_iterations", None) is not None:
        predicted = prediction.batch_calls(batch_size)
    out = {"measured": measured, "predicted": None if predicted is None else predicted["factor"],
           "predicted_batch": predicted, "batch_size": int(batch_size), "method": STRAGGLING_METHOD}
    if wall and wall.get("source"):
        out["predicted_wall_clock"] = {"batch_iterations": wall["batch_iterations"],
                                       "mean_iterations": wall["mean_iterations"],
                                       "factor": wall["batch_iterations"] / wall["mean_iterations"]}
    return out


#: A prediction holds when the measurement is within this share of it and inside its prediction interval.
PREDICTION_TOLERANCE = 0.10


def with_prediction_check(row: dict) -> dict:
    """``row`` with ``prediction_check``: for block efficiency and speedup, the measurement over the prediction less
    one (``relative_error``), whether it is within :data:`PREDICTION_TOLERANCE` and inside the prediction interval,
    and ``holds`` (both); ``None`` where nothing was predicted. A record says where its model misses."""
    check = {}
    for what, measured, predicted, interval in (
            ("block_efficiency", row["block_efficiency"]["mean"], row.get("predicted_block_efficiency"),
             row.get("predicted_block_efficiency_interval")),
            ("speedup", row.get("speedup"), row.get("predicted_speedup"), row.get("predicted_speedup_interval"))):
        check[what] = (None if predicted is None or measured is None
                       else compare_prediction(measured, predicted, interval, PREDICTION_TOLERANCE).to_json())
    return {**row, "prediction_check": check}


def predicted_speedup_fields(wall: dict) -> dict:
    """A run's ``predicted_speedup`` (``None`` without a profile-based prediction), its
    ``predicted_speedup_interval``, ``predicted_speedup_ignoring_straggling`` and the whole ``speedup_prediction``
    (``source`` = ``"cost_profile"`` when it was predicted from a cost profile measured apart from the run)."""
    if not wall.get("source"):
        return {"predicted_speedup": None, "predicted_speedup_interval": None,
                "predicted_speedup_ignoring_straggling": None, "speedup_prediction": wall}
    return {"predicted_speedup": wall["speedup"], "predicted_speedup_interval": {"low": wall["low"], "high": wall["high"]},
            "predicted_speedup_ignoring_straggling": wall["ignoring_straggling"], "speedup_prediction": wall}


def run_record(result, verifier_name: str, L: int, baseline: dict, profile, rng, prediction=None,
               batch_size: int = 1, n_tokens: int | None = None) -> ChainRun:
    """One entry of ``runs``, typed (:class:`otspec.engine.rows.ChainRun`): measured quantities, then the theory's predictions: ``prediction`` (a
    :class:`~otspec.engine.predict.LogPrediction` from an independent plain-decoding log) and the two-point bound,
    and the speedup from ``profile`` (a :class:`~llm_bridge.profile.CostProfile` measured apart from the run, or
    ``None``) and the prediction's replays (:func:`wall_clock_prediction`). ``batch_size``: the prompts decoded
    together; ``n_tokens``: tokens per prompt (default: the run's)."""
    d, timer = result.decode, result.timer
    pa = [float(v.mean()) for v in result.p_a]
    qa = [float(v.mean()) for v in result.q_a]
    depths = d.accept_hist.sum(axis=1)  # iterations by drafted depth g (fixed L: L, except at sequence ends)
    weights = depths / depths.sum()
    formulas = _mixed_prediction(pa, qa, weights)
    key = REGISTRY[verifier_name].closed_form  # the verifier names the closed form it attains
    boot = _bootstrap_prediction(result, weights, key, rng)
    t_draft, overhead_ms = _call_costs(result)
    measured = {k: v["mean"] for k, v in timer.by_n_ms("target").items()}
    bound_low, bound_high = (float(x) for x in np.quantile(boot, [0.025, 0.975]))
    if prediction is None:  # no plain-decoding log: the two-point bound stands in
        value, low, high, method, predicted = formulas[key], bound_low, bound_high, TWO_POINT_METHOD, None
    else:
        value, low, high, method = prediction.block_efficiency, prediction.low, prediction.high, prediction.method
        predicted = prediction.as_dict()
    be = d.block_efficiency
    by_prompt = _prompt_interval(d, int(rng.integers(2**31)))
    units = by_prompt["prompts"]
    n_tokens = int(d.generated // max(units, 1)) if n_tokens is None else int(n_tokens)
    wall = wall_clock_prediction(profile, config_key(verifier_name, L), prediction, batch_size=batch_size,
                                 units=units, n_tokens=n_tokens, seed=int(rng.integers(2**31)))
    straggling = _straggling(result, prediction, batch_size, units, wall)
    measured_speedup = speedup_fields(result, baseline, by_prompt)
    engine = engine_fields(d.accept_hist)
    return ChainRun.from_json(with_prediction_check({
        "verifier": verifier_name, "L": L,
        "block_efficiency": by_prompt,
        **be.record_fields("block_efficiency_batch_means"),
        "predicted_block_efficiency": value,
        "predicted_block_efficiency_interval": {"low": low, "high": high},
        "prediction_method": method,
        "prediction": predicted,
        "predicted_acceptance_per_position_unconditional":
            None if predicted is None else predicted["acceptance_per_position_unconditional"],
        "two_point_upper_bound": formulas[key],
        "two_point_upper_bound_interval": {"low": bound_low, "high": bound_high},
        "two_point_upper_bound_by_formula": formulas,
        "expected_block_efficiency_given_drafts": float(1 + result.expected_accepted.mean())
        if result.expected_accepted.size else None,
        "acceptance_rate": d.acceptance_rate,
        "acceptance_per_position": engine["engine_metrics"]["acceptance_per_position_conditional"],
        **engine,
        "tv_per_position": [float(v.mean()) for v in result.tv],
        "two_point_per_position": {"draft": pa, "target": qa},
        "accepted_length_histogram": d.accept_hist.sum(axis=0).tolist(),
        "iterations": d.iterations, "generated": d.generated,
        "draft_calls": timer.count("draft"), "target_calls": timer.count("target"),
        "drafted_length_histogram": depths.tolist(),
        "t_draft_ms": t_draft, "t_target_ms": measured,
        "t_verify_ms": _measured_ms(timer, "verify"), "overhead_ms_per_iteration": overhead_ms,
        "verify_fraction_of_target_call": timer.total("verify") / max(timer.total("target"), 1e-12),
        "draft_seconds": timer.total("draft"), "target_seconds": timer.total("target"), "seconds": result.seconds,
        "time_decomposition_ms": time_decomposition(d, t_draft, timer.mean_ms("target"), batch_size),
        "tokens_per_s": result.tokens_per_s, "baseline_tokens_per_s": baseline["tokens_per_s"],
        **measured_speedup, "timing_rounds": round_entries(result.rounds),
        **predicted_speedup_fields(wall),
        "batch_straggling": straggling,
    }), f"run {verifier_name} L = {L}")


def _chain_of_means(means, weights) -> float:
    """Tokens per iteration 1 + Σ_d Π_{i≤d} a_i for per-depth rates ``means``, averaged over drafted depths g."""
    out = 0.0
    for g in np.flatnonzero(weights):
        out += weights[g] * (1.0 + float(np.sum(np.cumprod(means[:g]))))
    return out


def tree_record(result, verifier_name: str, baseline: dict, prediction=None, batch_size: int = 1, profile=None,
                n_tokens: int | None = None, tree_key: str | None = None) -> TreeRun:
    """One entry of ``tree_runs``, typed (:class:`otspec.engine.rows.TreeRun`): measured, E[τ+1 | trie], the prediction from an independent log (``prediction``)
    and the per-depth product values from this run's own rows; ``batch_size``, ``profile`` and ``n_tokens`` as in
    :func:`run_record`; ``tree_key``: the tree as the profile's dry run names it (default: the run's)."""
    d, timer = result.closed_forms().decode, result.timer  # a run decoded with defer_closed_forms: computed here
    depths = d.accept_hist.sum(axis=1)
    weights = depths / depths.sum()
    per_depth = {key: [float(np.mean(v)) for v in getattr(result, key)] for key in ("go_on", "acceptance", "optimum")}
    per_depth["tv"] = [float(np.mean(v)) for v in result.tv]
    predicted = {key: _chain_of_means(np.array(v + [0.0] * (len(weights) - len(v))), weights) if v else np.nan
                 for key, v in per_depth.items() if key != "tv"}  # a whole-tree verifier has no per-node closed form
    predicted = {k: (v if np.isfinite(v) else None) for k, v in predicted.items()}  # no closed form: None
    per_depth = {k: [x if np.isfinite(x) else None for x in v] for k, v in per_depth.items()}
    t_draft, overhead_ms = _call_costs(result)
    be = d.block_efficiency
    by_prompt = _prompt_interval(d, 0)
    measured_speedup = speedup_fields(result, baseline, by_prompt)
    out = {
        "verifier": verifier_name, "tree": str(result.tree) if result.tree.deterministic
        else "x".join(map(str, result.tree.branching)), "rule": result.rule,
        "replacement": result.tree.replacement, "tree_tokens": result.tree.num_tokens,
        "block_efficiency": by_prompt,
        **be.record_fields("block_efficiency_batch_means"),
        "expected_block_efficiency_given_tree": float(1 + result.expected_accepted.mean())
        if result.expected_accepted.size else None,
        "predicted_block_efficiency": predicted["acceptance"] if prediction is None else prediction.block_efficiency,
        "predicted_block_efficiency_interval": None if prediction is None else {"low": prediction.low,
                                                                                 "high": prediction.high},
        "prediction_method": ("product of this run's per-depth acceptance (no plain-decoding log)" if prediction is None
                              else prediction.method),
        "prediction": None if prediction is None else prediction.as_dict(),
        "per_depth_product_block_efficiency": predicted["acceptance"],
        "go_on_block_efficiency": predicted["go_on"],
        "otm_bound_block_efficiency": predicted["optimum"],
        "go_on": per_depth["go_on"], "acceptance": per_depth["acceptance"], "optimum": per_depth["optimum"],
        "tv": per_depth["tv"], "candidates": [float(np.mean(v)) for v in result.candidates],
        "accepted_length_histogram": d.accept_hist.sum(axis=0).tolist(), "drafted_depth_histogram": depths.tolist(),
        **engine_fields(d.accept_hist),
        "iterations": d.iterations, "generated": d.generated,
        "draft_calls": timer.count("draft"), "target_calls": timer.count("target"),
        "target_nodes_per_call": float(result.target_nodes.mean()) if result.target_nodes.size else 0.0,
        "t_draft_ms": t_draft, "t_target_ms": {k: v["mean"] for k, v in timer.by_n_ms("target").items()},
        "t_target_mean_ms": _measured_ms(timer, "target"), "t_verify_ms": _measured_ms(timer, "verify"),
        "overhead_ms_per_iteration": overhead_ms,
        "verify_fraction_of_target_call": timer.total("verify") / max(timer.total("target"), 1e-12),
        "seconds": result.seconds, "tokens_per_s": result.tokens_per_s,
        "baseline_tokens_per_s": baseline["tokens_per_s"], **measured_speedup,
        "timing_rounds": round_entries(result.rounds),
    }
    units = by_prompt["prompts"]
    n_tokens = int(d.generated // max(units, 1)) if n_tokens is None else int(n_tokens)
    wall = wall_clock_prediction(profile, config_key(verifier_name, tree_key or out["tree"]), prediction,
                                 batch_size=batch_size, units=units, n_tokens=n_tokens)
    out["batch_straggling"] = _straggling(result, prediction, batch_size, units, wall)
    out.update(predicted_speedup_fields(wall))
    return TreeRun.from_json(with_prediction_check(out), f"tree run {verifier_name} {out['tree']}")


def export_synthetic_rates(record: dict, path) -> Path:
    """Write the per-position unconditional acceptance rates of every chain run (measured, and predicted where the
    run carries a prediction of them) in the form of a serving engine's synthetic-acceptance mode (JSON)."""
    entries = []
    for run in record.get("runs", []):
        info = {"verifier": run["verifier"], "L": run["L"]}
        if run.get("mean_acceptance_length") is not None:
            entries.append(synthetic_rates(run["acceptance_per_position_unconditional"], source="measured", **info))
        if run.get("predicted_acceptance_per_position_unconditional") is not None:
            entries.append(synthetic_rates(run["predicted_acceptance_per_position_unconditional"], source="predicted",
                                           method=run.get("prediction_method"), **info))
    out = {"format": SYNTHETIC_FORMAT, "model_pair": record["model_pair"],
           "definition": "acceptance_rates[i-1] = P(the first i drafted tokens are all accepted) (non-increasing); "
                         "mean_acceptance_length = 1 + sum(acceptance_rates) = 1 + accepted / drafts",
           "runs": entries}
    path = Path(path)
    path.write_text(json.dumps(out, indent=1) + "\n")
    return path
