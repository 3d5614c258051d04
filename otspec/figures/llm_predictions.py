"""The real-pair records' predictions against their measurements, counted honestly (the report's check).

:func:`prediction_check` lists every run's measured block efficiency and speedup beside its prediction, over distinct
runs (a configuration decoded again in another record counts once), leaving out of the counts records with unreliable
timing or fewer than :data:`PREDICTION_MIN_PROMPTS` prompts and predictions that are circular (a block-efficiency log
on the measured prompts at temperature 0; a speedup from the run's own call times).
:func:`forecast_check` puts a forecast (``python -m llm_bridge.forecast``, made before the record) beside the record
that measured it: the held-out test of the wall-clock model.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.forecast import FORECAST_TOLERANCE, compare_prediction, forecast_check
from ..engine.record import AdaptiveRecord, as_record
from ..engine.rows import Estimate, Interval, PolicyRun, TreeRun
from .llm_text import NO_INTERVAL, fmt, interval_text

__all__ = ["FORECAST_TOLERANCE", "INTERVAL_CONFIDENCE", "PREDICTION_MIN_PROMPTS", "PREDICTION_TOLERANCE",
           "CheckRow", "CheckSummary", "coverage_paragraph", "forecast_check", "forecast_markdown", "prediction_check", "prediction_check_markdown",
           "prediction_check_summary"]


#: A prediction holds when the measurement is within this share of it and inside its interval.
PREDICTION_TOLERANCE = 0.10

#: A record over fewer prompts than this is listed in the check but left out of its counts.
PREDICTION_MIN_PROMPTS = 32

#: The level of the records' prediction intervals (``otspec.engine.predict``'s default, which llm_bridge keeps).
INTERVAL_CONFIDENCE = 0.95


def _hashable(x):
    return tuple(_hashable(v) for v in x) if isinstance(x, (list, tuple)) else x


def _run_config(rec, r):
    """What makes two runs the same decode: the pair, the sampling settings, the prompts and the verifier with its
    L, tree or policy."""
    pair, s = rec.model_pair, rec.settings
    common = (pair.target, pair.draft, pair.device, pair.dtype, s.temperature,
              s.top_k or None,  # top-k 0 and none both sample the whole vocabulary
              None if s.top_p in (None, 1, 1.0) else s.top_p, s.batch_size, s.max_new_tokens,
              s.prompts, s.seed, _hashable(s.prompt_ids))
    if isinstance(r, TreeRun):
        return (*common, r.verifier, "tree", r.tree, r.replacement, r.rule or s.rule)
    if isinstance(r, PolicyRun):
        if r.policy == "fixed":  # fixed K is a token-verification chain of length K
            return (*common, "token", "chain", r.value)
        return (*common, "token", "policy", _policy_label(r), rec.head.rule)
    return (*common, r.verifier, "chain", r.L)


def _policy_label(r) -> str:
    return f"{r.policy} h = {r.value:g}"


def _left_out(rec) -> str | None:
    """Why a whole record stays out of the counts (unreliable timing, too few prompts), or ``None``."""
    reasons = []
    if rec.unreliable_timing:
        reasons.append("unreliable timing")
    prompts = rec.settings.prompts
    if prompts is not None and prompts < PREDICTION_MIN_PROMPTS:
        reasons.append(f"{prompts} prompts (< {PREDICTION_MIN_PROMPTS})")
    return "; ".join(reasons) or None


def _disjoint_prediction_prompts(settings) -> bool:
    """Whether the prediction's log decoded prompts none of which the measured runs decoded."""
    pred, measured = settings.prediction_prompt_ids, settings.prompt_ids
    if not pred or not measured:
        return False
    return not {_hashable(x) for x in pred} & {_hashable(x) for x in measured}


def _compare(measured: float, predicted: float, interval) -> tuple:
    """Relative error, within the tolerance, inside the interval (``None`` without one), holds."""
    c = compare_prediction(measured, predicted, interval, PREDICTION_TOLERANCE)
    return c.relative_error, c.within_tolerance, c.inside_interval, c.holds


def _rows_of(rec) -> list:
    """A record's rows with the verifier and draft each is checked as (an adaptive record's policies are token
    verification: fixed K as L = K, a threshold by its label)."""
    if isinstance(rec, AdaptiveRecord):
        policies = rec.fixed + rec.threshold + (rec.threshold_unlagged or [])
        return [(r, "token", f"L = {r.value:g}" if r.policy == "fixed" else _policy_label(r)) for r in policies]
    return [(r, r.verifier, r.config) for r in rec.all_runs]


@dataclass
class CheckRow:
    """One run in the prediction check: what was measured and predicted, whether it holds, whether it counts.

    ``record`` (its file), ``verifier`` and ``draft`` (``L = 3``, a tree, a policy's label) name it; ``measured``
    (block efficiency with its interval), ``predicted``, ``interval``, ``relative_error``, ``within_tolerance``,
    ``inside_interval`` and ``holds`` (``None`` where nothing is predicted) check the block efficiency, the
    ``speedup_*`` fields the speedup; ``config`` is the decode's configuration, ``duplicate_of`` the record whose run
    of it counts instead, ``left_out`` why the whole record stays out; ``be_counted`` and ``speedup_counted`` say what
    counts and ``note`` why not."""

    record: str
    verifier: str
    draft: str
    measured: Estimate
    predicted: float | None
    method: str
    prediction_prompts: str
    be_circular: bool
    speedup: float | None
    speedup_ci: Interval | None
    predicted_speedup: float | None
    config: tuple
    left_out: str | None
    unreliable_timing: str | None
    interval: Interval | None = None
    relative_error: float | None = None
    within_tolerance: bool | None = None
    inside_interval: bool | None = None
    holds: bool | None = None
    predicted_speedup_interval: Interval | None = None
    speedup_relative_error: float | None = None
    speedup_within_tolerance: bool | None = None
    speedup_inside_interval: bool | None = None
    speedup_holds: bool | None = None
    speedup_source: str | None = None
    speedup_circular: bool | None = None
    speedup_miss_within_noise: bool | None = None
    duplicate_of: str | None = None
    be_counted: bool = False
    speedup_counted: bool = False
    note: str = ""


@dataclass(frozen=True)
class CheckSummary:
    """The counts of the prediction check: held of counted (block efficiency, speedup), circular predictions of
    distinct runs, counted speedup misses within their noise, measurements outside their intervals or beyond the
    tolerance, re-decodes merged (``merged``: (record, first record) → runs) and records left out (``left_out``:
    record → [why, runs])."""

    be_held: int
    be_counted: int
    be_circular: int
    be_same_prompts: int
    speedup_held: int
    speedup_counted: int
    speedup_circular: int
    speedup_misses_within_noise: int
    be_outside: int
    be_beyond_tolerance: int
    speedup_outside: int
    speedup_beyond_tolerance: int
    duplicates: int
    merged: dict
    left_out: dict


def prediction_check(records: list) -> list[CheckRow]:
    """Every chain and tree run of ``records`` (typed records read from files, or their JSON objects with ``file``)
    with a prediction: measured block efficiency and speedup against their predictions, each within
    :data:`PREDICTION_TOLERANCE` and inside its interval, and whether the run counts.

    One row per run that predicts its block efficiency or its speedup (an adaptive record's ``fixed`` rows are
    token-verification chains with ``value`` as L). Block-efficiency keys: ``measured`` (``{"mean", "low",
    "high"}``), ``predicted``, ``interval``, ``relative_error``, ``within_tolerance``, ``inside_interval``,
    ``holds`` (``None`` where the run predicts no block efficiency), ``method``, ``prediction_prompts``
    (``"disjoint"``: the prediction's log decoded other prompts; ``"same"``: the measured ones, or the record does
    not say), ``be_circular`` (same prompts at temperature 0: the prediction is the measurement) and
    ``be_counted``. Speedup keys: ``speedup``, ``speedup_ci``, ``predicted_speedup``, ``predicted_speedup_interval``,
    ``speedup_relative_error``, ``speedup_within_tolerance``, ``speedup_inside_interval``, ``speedup_holds``,
    ``speedup_source`` (``speedup_prediction.source``), ``speedup_circular`` (predicted from the measured run's own
    call times: not from a cost profile), ``speedup_miss_within_noise`` (:func:`_miss_within_noise`) and
    ``speedup_counted``. Counting keys: ``config`` (the decode's configuration), ``duplicate_of`` (the record whose
    run of the same configuration counts instead: the first by file name among the records not left out),
    ``left_out`` (why the record stays out of both counts: unreliable timing, fewer than
    :data:`PREDICTION_MIN_PROMPTS` prompts), ``unreliable_timing`` (the record's reason) and ``note``."""
    rows = []
    for rec in map(as_record, records):
        disjoint = _disjoint_prediction_prompts(rec.settings)
        left_out = _left_out(rec)
        for r, verifier, draft in _rows_of(rec):
            pred, pred_sp = r.predicted_block_efficiency, r.predicted_speedup
            if pred is None and pred_sp is None:
                continue
            be = r.block_efficiency
            row = CheckRow(record=rec.file, verifier=verifier, draft=draft, measured=be, predicted=pred,
                           method=r.prediction_method or "", prediction_prompts="disjoint" if disjoint else "same",
                           be_circular=pred is not None and not disjoint and rec.settings.temperature == 0,
                           speedup=r.speedup, speedup_ci=r.speedup_ci, predicted_speedup=pred_sp,
                           config=_run_config(rec, r), left_out=left_out,
                           unreliable_timing=rec.unreliable_timing or None)
            if pred is not None:
                row.interval = r.predicted_block_efficiency_interval
                (row.relative_error, row.within_tolerance, row.inside_interval,
                 row.holds) = _compare(be.mean, pred, row.interval)
            if pred_sp is not None:
                row.speedup_source = r.speedup_prediction.source if r.speedup_prediction else None
                row.speedup_circular = row.speedup_source != "cost_profile"
                row.predicted_speedup_interval = r.predicted_speedup_interval
                if row.speedup is not None:
                    (row.speedup_relative_error, row.speedup_within_tolerance, row.speedup_inside_interval,
                     row.speedup_holds) = _compare(row.speedup, pred_sp, row.predicted_speedup_interval)
            row.speedup_miss_within_noise = _miss_within_noise(row)
            rows.append(row)
    kept = {}  # the same decode in two records counts once: the first by file name among those not left out
    for i in sorted(range(len(rows)), key=lambda i: (rows[i].left_out is not None, rows[i].record, i)):
        row = rows[i]
        first = kept.setdefault(row.config, row)
        if first.record != row.record:
            row.duplicate_of = first.record
    for row in rows:
        counts = row.duplicate_of is None and row.left_out is None
        row.be_counted = counts and row.predicted is not None and not row.be_circular
        row.speedup_counted = (counts and row.speedup_holds is not None and not row.speedup_circular)
        row.note = _row_note(row)
    return rows


def _miss_within_noise(row: CheckRow):
    """For a speedup that misses its prediction: whether the measurement's own confidence interval (``speedup_ci``,
    the paired bootstrap over its timing rounds) reaches a value that would hold, within the tolerance of the
    prediction and inside its interval. ``True``: the timing rounds cannot tell this miss from noise (a noisy machine,
    few rounds); ``False``: the whole interval misses, the model does. ``None`` for a run that holds or has no CI."""
    if row.speedup_holds is not False or not row.speedup_ci or row.speedup_ci.low is None:
        return None
    pred, iv = row.predicted_speedup, row.predicted_speedup_interval
    low = max(row.speedup_ci.low, pred * (1.0 - PREDICTION_TOLERANCE), -float("inf") if iv is None else iv.low)
    high = min(row.speedup_ci.high, pred * (1.0 + PREDICTION_TOLERANCE), float("inf") if iv is None else iv.high)
    return bool(low <= high)


def _row_note(row: CheckRow) -> str:
    """Why a row does not count (a re-decode, a record left out), or what its counted predictions rest on."""
    if row.duplicate_of:
        return f"re-decode of {row.duplicate_of}: counted there"
    if row.left_out:
        return f"left out: {row.left_out}"
    notes = []
    if row.predicted is not None:
        if row.be_circular:
            notes.append("block efficiency circular (same prompts, temperature 0)")
        elif row.prediction_prompts == "same":
            notes.append("same prompts (lenient)")
    if row.speedup_circular:
        notes.append("speedup circular (own call times)")
    if row.speedup_miss_within_noise and row.speedup_counted:
        notes.append("speedup miss within its timing noise (its CI reaches a value that holds)")
    return "; ".join(notes)


def _holds_cell(holds, counted: bool) -> str:
    if holds is None:
        return "—"
    if not counted:  # shown for the record, not counted
        return "(yes)" if holds else "(no)"
    return "yes" if holds else "**no**"


def _noise_paragraph(misses: int, within: int, tol: str) -> str:
    """The prediction table's paragraph on speedup misses within their timing noise (none, one or several)."""
    head = "*Misses and timing noise.* "
    ci = "the measured speedup's 95 % confidence interval (paired bootstrap over the run's timing rounds, in brackets)"
    noise = (f"{ci} reaches a value within {tol} of the prediction and inside its interval, so the rounds cannot tell "
             "the miss from the machine's noise")
    if misses == 0:
        return head + "No counted speedup misses."
    if misses == 1:
        return head + ("The one counted speedup miss is within its measurement's own noise: " + noise if within else
                       f"The one counted speedup miss is not within its measurement's own noise: {ci} misses whole"
                       ) + ". It still counts as a miss."
    return (head + f"Of the {misses} counted speedup misses, {within} {'is' if within == 1 else 'are'} within their "
            f"measurement's own noise: {noise}; the others miss with their whole interval. Both still count as misses.")


def coverage_paragraph(c: CheckSummary, confidence: float = INTERVAL_CONFIDENCE) -> str:
    """The prediction table's paragraph on interval coverage, from :func:`prediction_check_summary`'s counts ``c``:
    how many counted measurements fell outside their prediction intervals beside how many a calibrated interval of
    level ``confidence`` lets fall outside (the expected count and a central binomial 95 % range, runs taken as
    independent), and how many missed the tolerance."""
    from scipy.stats import binom

    miss = 1.0 - confidence
    parts = []
    for what, n, out, beyond in (("block efficiency", c.be_counted, c.be_outside, c.be_beyond_tolerance),
                                 ("speedup", c.speedup_counted, c.speedup_outside,
                                  c.speedup_beyond_tolerance)):
        if not n:
            continue
        low, high = (int(x) for x in binom.interval(0.95, n, miss))
        parts.append(f"{what}, {out} of {n} outside their intervals where {miss * n:.2f} are expected "
                     f"({low}–{high}), {beyond} beyond {100 * PREDICTION_TOLERANCE:.0f} %")
    if not parts:
        return ""
    return (f"*Interval coverage.* Every interval is a {100 * confidence:.0f} % prediction interval, so a calibrated "
            f"one lets about {100 * miss:.0f} % of measurements fall outside: " + "; ".join(parts) + ". The ranges "
            "in parentheses are the central 95 % of a binomial count over independent runs; the runs of one record "
            "share its prompts and its machine's window, so the real spread is wider. A count far above its range "
            "would say the intervals are too narrow; one far below, too wide.")


def _error_text(error) -> str:
    return "–" if error is None else f"{100 * error:+.1f} %"


def prediction_check_summary(rows: list) -> CheckSummary:
    """The counts of :func:`prediction_check`'s rows: held / counted for block efficiency and speedup, the circular
    predictions of distinct runs not left out, the re-decodes merged and the records left out."""
    distinct = [r for r in rows if r.duplicate_of is None and r.left_out is None]
    be = [r for r in rows if r.be_counted]
    sp = [r for r in rows if r.speedup_counted]
    left_out = {}
    for r in rows:
        if r.left_out:
            why = r.left_out.replace("unreliable timing", f"unreliable timing ({r.unreliable_timing})")
            left_out.setdefault(r.record, [why, 0])[1] += 1
    merged = {}
    for r in rows:
        if r.duplicate_of:
            merged[(r.record, r.duplicate_of)] = merged.get((r.record, r.duplicate_of), 0) + 1
    return CheckSummary(be_held=sum(bool(r.holds) for r in be), be_counted=len(be),
                        be_circular=sum(r.be_circular for r in distinct),
                        be_same_prompts=sum(r.prediction_prompts == "same" for r in be),
                        speedup_held=sum(bool(r.speedup_holds) for r in sp), speedup_counted=len(sp),
                        speedup_circular=sum(bool(r.speedup_circular) for r in distinct),
                        speedup_misses_within_noise=sum(bool(r.speedup_miss_within_noise) for r in sp),
                        be_outside=sum(r.inside_interval is False for r in be),
                        be_beyond_tolerance=sum(r.within_tolerance is False for r in be),
                        speedup_outside=sum(r.speedup_inside_interval is False for r in sp),
                        speedup_beyond_tolerance=sum(r.speedup_within_tolerance is False for r in sp),
                        duplicates=sum(merged.values()), merged=merged, left_out=left_out)


def prediction_check_markdown(rows: list) -> list:
    """Markdown lines of :func:`prediction_check`'s rows: how many distinct runs hold (block efficiency, speedup),
    what was merged or left out and why, then one table row per run (those not counted marked)."""
    if not rows:
        return []
    c = prediction_check_summary(rows)
    tol, coverage = f"{100 * PREDICTION_TOLERANCE:.0f} %", coverage_paragraph(c)
    lines = [f"### Predictions against measurements, distinct runs — block efficiency: {c.be_held} of "
             f"{c.be_counted} runs hold ({c.be_circular} circular left out); speedup: {c.speedup_held} of "
             f"{c.speedup_counted} hold ({c.speedup_circular} circular left out)", "",
             f"A prediction holds when the measurement is within {tol} of it and inside its interval (for a "
             "prediction from a plain-decoding log: where one run over the measured number of prompts should "
             "fall). Each run counts once: the same decode (pair, sampling settings, prompts, seed, verifier and L "
             "or tree) in two records is one run, counted in the first record by file name."]
    if c.merged:
        lines[-1] += (f" {c.duplicates} re-decode{'s' if c.duplicates != 1 else ''} merged: "
                      + "; ".join(f"{n} run{'s' if n != 1 else ''} of {dup} (as in {first})"
                                  for (dup, first), n in c.merged.items()) + ".")
    if c.left_out:
        lines[-1] += (" Left out of both counts (listed below, marked): "
                      + "; ".join(f"{name} ({n} run{'s' if n != 1 else ''}: {why})"
                                  for name, (why, n) in c.left_out.items())
                      + f" — a record whose timing check failed measured its speedups on a machine that was not "
                      f"quiet, and one over fewer than {PREDICTION_MIN_PROMPTS} prompts is too small a sample to "
                      "test a prediction with.")
    lines += ["", "*Circular predictions are not counted.* A block-efficiency prediction is independent when its "
              "plain-decoding log decoded prompts disjoint from the measured runs' (`settings.prediction_prompt_ids`"
              " against `settings.prompt_ids`); older records do not say, and their log decoded the measured prompts "
              "themselves: at temperature 0 the prediction then equals the measurement by construction "
              f"({c.be_circular} run{'s' if c.be_circular != 1 else ''} left out), and at a higher temperature "
              f"it shares the measurement's prompts, so its interval, sized for an independent run, is lenient "
              f"({c.be_same_prompts} of the {c.be_counted} counted runs: *same prompts*). A speedup prediction "
              "is independent when it comes from a cost profile measured apart from the runs "
              "(`speedup_prediction.source` = `cost_profile`); older records predicted the speedup from the "
              f"measured run's own call times ({c.speedup_circular} run"
              f"{'s' if c.speedup_circular != 1 else ''}, left out of the speedup count). In parentheses: the "
              "result of a prediction that is not counted.", "",
              _noise_paragraph(c.speedup_counted - c.speedup_held, c.speedup_misses_within_noise, tol), "",
              *([coverage, ""] if coverage else []),
              "| record | verifier | draft | block efficiency [95% CI] | predicted [interval] | error | holds "
              "| speedup [CI] | predicted [interval] | error | holds | note |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        be = r.measured
        if r.predicted is None:
            be_cells = "– | – | —"
        else:
            be_cells = (f"{fmt(r.predicted)}{interval_text(r.interval, 3)} | "
                        f"{_error_text(r.relative_error)} | {_holds_cell(r.holds, r.be_counted)}")
        speedup = f"{fmt(r.speedup, 2)}{interval_text(r.speedup_ci, 2)}"
        if r.predicted_speedup is None:
            sp_cells = f"{speedup} | – | – | —"
        else:
            sp_cells = (f"{speedup} | {fmt(r.predicted_speedup, 2)}"
                        f"{interval_text(r.predicted_speedup_interval, 2)} | "
                        f"{_error_text(r.speedup_relative_error)} | "
                        f"{_holds_cell(r.speedup_holds, r.speedup_counted)}")
        lines.append(f"| {r.record} | {r.verifier} | {r.draft} | {fmt(be.mean)} [{fmt(be.low)}, "
                     f"{fmt(be.high)}] | {be_cells} | {sp_cells} | {r.note} |")
    return lines + [""]


def forecast_markdown(pairs: list) -> list:
    """The report's held-out section: for each (forecast file name, forecast, record or ``None``), every forecast
    configuration beside its measurement (``forecast_check``); a forecast whose record is not there yet says so."""
    if not pairs:
        return []
    lines = ["### Held-out test: forecasts made before the measurement", "",
             "Each forecast (`python -m llm_bridge.forecast`) predicted a configuration from the cost profile and the "
             "plain-decoding log on the prediction prompts alone, and was written down before the record that measures "
             f"it was made. It holds when the measurement is within {100 * FORECAST_TOLERANCE:.0f} % of it and inside "
             "its prediction interval.", "",
             "| forecast | record | configuration | block efficiency: measured / forecast [interval] | holds "
             "| speedup: measured / forecast [interval] | holds |", "|---|---|---|---|---|---|---|"]
    for name, made, record in pairs:
        if record is None:
            lines.append(f"| {name} | {made['record']} (not measured yet) | | | | | |")
            continue
        for row in forecast_check(made, record):
            cells = []
            for c in (row.block_efficiency, row.speedup):
                if c is None:
                    cells += ["–", "–"]
                    continue
                cells += [f"{fmt(c.measured, 3)} / {fmt(c.predicted, 3)}{interval_text(c.interval, 3, NO_INTERVAL)} "
                          f"({100 * c.relative_error:+.1f} %)", "yes" if c.holds else "**no**"]
            lines.append(f"| {name} | {made['record']} | {row.config} | " + " | ".join(cells) + " |")
    return lines + [""]
