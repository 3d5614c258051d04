"""A forecast beside the record that measured it: the held-out test of a real pair's predictions.

``python -m llm_bridge.forecast`` writes a forecast (predicted block efficiency and speedup of configurations, made
from a cost profile and a plain-decoding log on the prediction prompts) before any record measures them;
:func:`forecast_check` compares it with the record made afterwards (a typed record, or its JSON); the report and
the model side both read it. :func:`miss_decomposition` takes a typed run row apart where its speedup misses.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import MAX_DRAFT_LENGTH, finite_real
from .record import PairRecord, as_record, read_json_file
from .rows import Comparison, Interval, JsonObject, RecordError, run_row

__all__ = ["FORECAST_TOLERANCE", "ForecastComparison", "ForecastRow", "MissDecomposition", "check_forecast_json", "compare_prediction", "forecast_check", "miss_decomposition",
           "read_forecast"]

#: A forecast holds when the measurement is within this share of it and inside its prediction interval.
FORECAST_TOLERANCE = 0.10


def compare_prediction(measured: float, predicted: float, interval: Interval | dict | None,
                       tolerance: float = FORECAST_TOLERANCE) -> Comparison:
    """A measurement beside its prediction: ``relative_error`` (measured / predicted − 1), ``within_tolerance``,
    ``inside_interval`` (``None`` without an interval) and ``holds`` (within the tolerance and not outside the
    interval). The one rule of every check: run rows, the report's count and forecasts."""
    error = measured / predicted - 1.0
    if isinstance(interval, Interval):
        low, high = interval.low, interval.high
    else:
        low, high = (interval or {}).get("low"), (interval or {}).get("high")
    inside = None if low is None else bool(low <= measured <= high)
    within = bool(abs(error) <= tolerance)
    return Comparison(relative_error=error, within_tolerance=within, inside_interval=inside,
                      holds=within and inside is not False)


@dataclass(kw_only=True)
class ForecastComparison(Comparison):
    """A forecast value beside the measurement of it: ``measured``, ``predicted``, the forecast's ``interval``."""

    measured: float | None
    predicted: float
    interval: Interval | None = None


@dataclass(kw_only=True)
class ForecastRow(JsonObject):
    """One forecast configuration (``verifier`` with its ``L`` or ``tree``) beside its measurement: block efficiency
    and speedup (``None`` where the forecast predicted none)."""

    verifier: str
    L: int | None = None
    tree: str | None = None
    block_efficiency: ForecastComparison | None = None
    speedup: ForecastComparison | None = None

    @property
    def config(self) -> str:
        return f"{self.verifier} " + (f"L = {self.L}" if self.L is not None else str(self.tree))


def _positive(value) -> bool:
    return finite_real(value) and value > 0


def check_forecast_json(made, source: str = "forecast") -> dict:
    """A forecast's JSON object (``python -m llm_bridge.forecast``'s file) checked field by field before it is
    compared: the pair and settings it forecasts, and each configuration's predictions (positive and finite, or
    ``null``; an interval ``{low, high}`` with low ≤ high). A ``RecordError`` names the first field that is wrong."""
    if not isinstance(made, dict) or made.get("kind") != "forecast":
        raise RecordError(f"{source}: not a forecast (a JSON object with kind 'forecast')")
    pair, settings, rows = made.get("pair"), made.get("settings"), made.get("forecasts")
    if not isinstance(pair, dict) or not all(isinstance(pair.get(k), str) for k in ("target", "draft", "device",
                                                                                     "dtype")):
        raise RecordError(f"{source}: 'pair' must name its 'target', 'draft', 'device' and 'dtype'")
    if not isinstance(settings, dict):
        raise RecordError(f"{source}: 'settings' must be an object")
    for key in ("seed", "batch_size", "max_new_tokens", "top_k"):  # 'false' is no seed; 2.5 no batch
        value = settings.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise RecordError(f"{source}: settings '{key}' must be an integer >= 0, got {value!r}")
    if not isinstance(rows, list):
        raise RecordError(f"{source}: 'forecasts' must be a list of configurations")
    seen = set()
    for i, row in enumerate(rows):
        where = f"{source}: forecasts[{i}]"
        if not isinstance(row, dict) or not isinstance(row.get("verifier"), str):
            raise RecordError(f"{where}: each forecast is an object naming its 'verifier'")
        length, tree = row.get("L"), row.get("tree")
        if (length is None) == (tree is None) or not (
                tree is not None and isinstance(tree, str) or isinstance(length, int) and not isinstance(
                    length, bool) and 1 <= length <= MAX_DRAFT_LENGTH):
            raise RecordError(f"{where}: needs a draft length 'L' (an integer in [1, MAX_DRAFT_LENGTH = "
                              f"{MAX_DRAFT_LENGTH:,}]) or a 'tree' (its spec), not both")
        if (row["verifier"], length, tree) in seen:
            raise RecordError(f"{where}: a second forecast of {row['verifier']} {f'L={length}' if tree is None else tree}")
        seen.add((row["verifier"], length, tree))
        for key in ("predicted_block_efficiency", "predicted_speedup"):
            value, interval = row.get(key), row.get(f"{key}_interval")
            if value is not None and not _positive(value):
                raise RecordError(f"{where}: '{key}' must be a positive finite number or null, got {value!r}")
            if interval is not None and not (isinstance(interval, dict) and all(
                    _positive(interval.get(k)) for k in ("low", "high")) and interval["low"] <= interval["high"]):
                raise RecordError(f"{where}: '{key}_interval' must be {{'low': x, 'high': y}} with 0 < x ≤ y, "
                                  f"or null")
            if value is not None and interval is not None and not (
                    interval["low"] * (1 - 1e-9) <= value <= interval["high"] * (1 + 1e-9)):
                raise RecordError(f"{where}: '{key}' = {value!r} lies outside its own interval "
                                  f"[{interval['low']!r}, {interval['high']!r}]")
    return made


def read_forecast(path) -> dict:
    """The forecast in a JSON file, checked (:func:`check_forecast_json`)."""
    return check_forecast_json(read_json_file(path, "forecast"), str(path))


def forecast_check(forecast_json: dict, record) -> list[ForecastRow]:
    """Each forecast beside the record's measurement of the same configuration: ``measured`` and ``predicted`` block
    efficiency and speedup, relative errors, whether each is within :data:`FORECAST_TOLERANCE` and inside its
    prediction interval (``holds``). ``record``: a :class:`~otspec.engine.record.PairRecord` or its JSON object. The
    record must measure what was forecast: the same pair, prompts, batch, tokens and sampling (a ``ValueError`` names
    the first setting that differs)."""
    forecast_json = check_forecast_json(forecast_json)
    record = as_record(record)
    if not isinstance(record, PairRecord):
        raise RecordError(f"{record.file or 'the record'}: an adaptive-threshold record; a forecast is checked against "
                          "the pair record (python -m llm_bridge.validate) that measured its configurations")
    settings, measured = forecast_json["settings"], record.settings
    for key in ("prompt_ids", "max_new_tokens", "batch_size", "temperature", "top_k", "top_p", "seed"):
        if settings.get(key) != getattr(measured, key):
            raise ValueError(f"the record measured {key} = {getattr(measured, key)!r}, the forecast is for "
                             f"{settings.get(key)!r}")
    if settings.get("cache") is not None and settings["cache"] != getattr(measured, "cache", None):
        raise ValueError(f"the record measured cache = {getattr(measured, 'cache', None)!r}, the forecast is for "
                         f"{settings['cache']!r}")
    for key in ("target", "draft", "device", "dtype"):  # a CPU float32 run does not measure a CUDA forecast
        if forecast_json["pair"][key] != getattr(record.model_pair, key):
            raise ValueError(f"the record's {key} is {getattr(record.model_pair, key)!r}, the forecast's "
                             f"{forecast_json['pair'][key]!r}")
    runs = {r.key: r for r in record.all_runs}
    out = []
    for f in forecast_json["forecasts"]:
        r = runs.get((f["verifier"], f.get("L"), f.get("tree")))
        if r is None:
            continue
        row = {"verifier": f["verifier"], "L": f.get("L"), "tree": f.get("tree")}
        for what, got, pred, interval in (
                ("block_efficiency", r.block_efficiency.mean, f["predicted_block_efficiency"],
                 f["predicted_block_efficiency_interval"]),
                ("speedup", r.speedup, f["predicted_speedup"], f["predicted_speedup_interval"])):
            row[what] = None if pred is None else {"measured": got, "predicted": pred, "interval": interval,
                                                   **compare_prediction(got, pred, interval).to_json()}
        out.append(ForecastRow.from_json(row, f"forecast {row['verifier']}"))
    if not out:  # nothing compared is no agreement: said, not an empty table and exit 0

        def shown(v, L, tree):
            return f"{v} {'tree ' + tree if tree else f'L={L}'}"

        made = sorted({shown(f["verifier"], f.get("L"), f.get("tree")) for f in forecast_json["forecasts"]})
        ran = sorted({shown(*key) for key in runs})
        raise ValueError(f"the record measured none of the forecast's configurations (forecast: {', '.join(made)}; "
                         f"record: {', '.join(ran) or 'no runs'})")
    return out


@dataclass(frozen=True)
class MissDecomposition:
    """A missed speedup taken apart: measured / predicted ``plain_step``, batch ``iterations`` and
    ``iteration_time`` (their product's inverse is the speedup's ratio), the iteration's ms measured and predicted,
    and ``components``: the iteration's time difference by part (ms, measured − profile), largest first."""

    plain_step: float
    iterations: float
    iteration_time: float
    iteration_ms_measured: float
    iteration_ms_predicted: float
    components: dict


def miss_decomposition(run) -> MissDecomposition | None:
    """Where a run's measured speedup parts from its cost-profile prediction, after the fact (a diagnosis: no
    prediction reads it). ``run``: a typed chain or tree row (or its JSON object). ``None`` where the run lacks what
    it needs (an older record, a prediction of another source, a tree run without its split of seconds).

    Per batch, speedup = plain decoding's time for the tokens / (batch iterations × time per iteration), so the ratio
    measured / predicted is ``plain_step`` / (``iterations`` × ``iteration_time``), each a measured / predicted
    factor; ``components`` splits the iteration's time difference (ms, measured − profile) into the loop's overhead
    (outside the model and verifier calls, as the profile's), the draft calls (the run's per iteration against the
    profile's unit cost × the run's calls per iteration, plus the charges for wider first calls after a whole draft
    kept), the verifier call and the target calls (the rest), largest first."""
    run = run_row(run)
    sp = run.speedup_prediction
    c = sp.costs_ms if sp else None
    need = (run.seconds, run.target_calls, run.draft_calls, run.draft_seconds, run.target_seconds,
            run.baseline_tokens_per_s, run.t_draft_ms, run.t_verify_ms, run.overhead_ms_per_iteration)
    if sp is None or sp.source != "cost_profile" or not c or any(x is None for x in need) or not run.target_calls:
        return None
    calls, batches = run.target_calls, sp.batches
    iter_ms_p = sp.ms_per_batch / sp.batch_iterations
    iter_ms_m = 1e3 * run.seconds / calls
    per_call = run.draft_calls / calls
    draft_p = c["t_draft"] * per_call + (sp.after_whole_ms_per_iteration or 0.0)  # wider first calls included
    draft = run.t_draft_ms * per_call - draft_p
    # the run's overhead_ms_per_iteration is its wall clock outside the model calls, the verifier's included; the
    # profile's overhead leaves the verifier out (its own t_verify), so the run's verifier time comes off first
    share = run.verify_fraction_of_target_call
    verify_m = run.t_verify_ms if share is None else share * 1e3 * run.target_seconds / calls
    verify = verify_m - c["t_verify"]
    overhead = run.overhead_ms_per_iteration - verify_m - c["overhead"]
    target_p = iter_ms_p - draft_p - c["t_verify"] - c["overhead"]
    target = 1e3 * run.target_seconds / calls - target_p
    parts = {"overhead": overhead, "draft": draft, "verify": verify, "target": target}
    return MissDecomposition(plain_step=1e3 * sp.batch / run.baseline_tokens_per_s / sp.plain_ms_per_step,
                             iterations=calls / batches / sp.batch_iterations, iteration_time=iter_ms_m / iter_ms_p,
                             iteration_ms_measured=iter_ms_m, iteration_ms_predicted=iter_ms_p,
                             components=dict(sorted(parts.items(), key=lambda kv: -abs(kv[1]))))
