"""A forecast beside the record that measured it: the held-out test of a real pair's predictions.

``python -m llm_bridge.forecast`` writes a forecast (predicted block efficiency and speedup of configurations, made
from a cost profile and a plain-decoding log on the prediction prompts) before any record measures them;
:func:`forecast_check` compares it with the record made afterwards. Plain JSON in, plain rows out: the report and
the model side both read it.
"""

from __future__ import annotations

__all__ = ["FORECAST_TOLERANCE", "compare_prediction", "forecast_check", "miss_decomposition"]

#: A forecast holds when the measurement is within this share of it and inside its prediction interval.
FORECAST_TOLERANCE = 0.10


def compare_prediction(measured: float, predicted: float, interval: dict | None,
                       tolerance: float = FORECAST_TOLERANCE) -> dict:
    """A measurement beside its prediction: ``relative_error`` (measured / predicted − 1), ``within_tolerance``,
    ``inside_interval`` (``None`` without an interval) and ``holds`` (within the tolerance and not outside the
    interval). The one rule of every check: run rows, the report's count and forecasts."""
    error = measured / predicted - 1.0
    inside = None if not interval or "low" not in interval else bool(interval["low"] <= measured <= interval["high"])
    within = bool(abs(error) <= tolerance)
    return {"relative_error": error, "within_tolerance": within, "inside_interval": inside,
            "holds": within and inside is not False}


def _config(run: dict) -> tuple:
    return run["verifier"], run.get("L"), run.get("tree")


def forecast_check(forecast_json: dict, record_json: dict) -> list[dict]:
    """Each forecast beside the record's measurement of the same configuration: ``measured`` and ``predicted`` block
    efficiency and speedup, relative errors, whether each is within :data:`FORECAST_TOLERANCE` and inside its
    prediction interval (``holds``). The record must measure what was forecast: the same pair, prompts, batch, tokens
    and sampling (a ``ValueError`` names the first setting that differs)."""
    settings, measured = forecast_json["settings"], record_json["settings"]
    for key in ("prompt_ids", "max_new_tokens", "batch_size", "temperature", "top_k", "top_p", "seed"):
        if settings.get(key) != measured.get(key):
            raise ValueError(f"the record measured {key} = {measured.get(key)!r}, the forecast is for "
                             f"{settings.get(key)!r}")
    for key in ("target", "draft"):
        if forecast_json["pair"][key] != record_json["model_pair"][key]:
            raise ValueError(f"the record's {key} is {record_json['model_pair'][key]!r}, the forecast's "
                             f"{forecast_json['pair'][key]!r}")
    runs = {_config(r): r for r in list(record_json.get("runs") or []) + list(record_json.get("tree_runs") or [])}
    out = []
    for f in forecast_json["forecasts"]:
        r = runs.get(_config(f))
        if r is None:
            continue
        row = {"verifier": f["verifier"], "L": f.get("L"), "tree": f.get("tree")}
        for what, got, pred, interval in (
                ("block_efficiency", r["block_efficiency"]["mean"], f["predicted_block_efficiency"],
                 f["predicted_block_efficiency_interval"]),
                ("speedup", r["speedup"], f["predicted_speedup"], f["predicted_speedup_interval"])):
            if pred is None:
                row[what] = None
                continue
            row[what] = {"measured": got, "predicted": pred, "interval": interval,
                         **compare_prediction(got, pred, interval)}
        out.append(row)
    return out


def miss_decomposition(run: dict) -> dict | None:
    """Where a run's measured speedup parts from its cost-profile prediction, after the fact (a diagnosis: no
    prediction reads it). ``None`` where the run lacks what it needs (an older record, a prediction of another source).

    Per batch, speedup = plain decoding's time for the tokens / (batch iterations × time per iteration), so the ratio
    measured / predicted is ``plain_step`` / (``iterations`` × ``iteration_time``), each a measured / predicted
    factor; ``components`` splits the iteration's time difference (ms, measured − profile) into the loop's overhead
    (outside the model and verifier calls, as the profile's), the draft calls (the run's per iteration against the
    profile's unit cost × the run's calls per iteration, plus the charges for wider first calls after a whole draft
    kept), the verifier call and the target calls (the rest), largest first."""
    sp = run.get("speedup_prediction") or {}
    c = sp.get("costs_ms")
    need = ("seconds", "target_calls", "draft_calls", "draft_seconds", "target_seconds", "baseline_tokens_per_s",
            "t_draft_ms", "t_verify_ms", "overhead_ms_per_iteration")
    if sp.get("source") != "cost_profile" or not c or any(run.get(k) is None for k in need) or not run["target_calls"]:
        return None
    calls, batches = run["target_calls"], sp["batches"]
    iter_ms_p = sp["ms_per_batch"] / sp["batch_iterations"]
    iter_ms_m = 1e3 * run["seconds"] / calls
    per_call = run["draft_calls"] / calls
    draft_p = c["t_draft"] * per_call + sp.get("after_whole_ms_per_iteration", 0.0)  # wider first calls included
    draft = run["t_draft_ms"] * per_call - draft_p
    # the run's overhead_ms_per_iteration is its wall clock outside the model calls, the verifier's included; the
    # profile's overhead leaves the verifier out (its own t_verify), so the run's verifier time comes off first
    share = run.get("verify_fraction_of_target_call")
    verify_m = run["t_verify_ms"] if share is None else share * 1e3 * run["target_seconds"] / calls
    verify = verify_m - c["t_verify"]
    overhead = run["overhead_ms_per_iteration"] - verify_m - c["overhead"]
    target_p = iter_ms_p - draft_p - c["t_verify"] - c["overhead"]
    target = 1e3 * run["target_seconds"] / calls - target_p
    parts = {"overhead": overhead, "draft": draft, "verify": verify, "target": target}
    return {"plain_step": 1e3 * sp["batch"] / run["baseline_tokens_per_s"] / sp["plain_ms_per_step"],
            "iterations": calls / batches / sp["batch_iterations"],
            "iteration_time": iter_ms_m / iter_ms_p, "iteration_ms": {"measured": iter_ms_m, "predicted": iter_ms_p},
            "components": dict(sorted(parts.items(), key=lambda kv: -abs(kv[1])))}
