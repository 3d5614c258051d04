"""Real model pairs (``llm_bridge`` records): measured against predicted, in one figure and section.

``python -m llm_bridge.validate`` writes ``llm_<name>.json`` (a :class:`~otspec.engine.record.PairRecord`)
and ``python -m llm_bridge.adaptive`` ``llm_adaptive_<name>.json`` (an
:class:`~otspec.engine.record.AdaptiveRecord`); this module reads those records (it never runs a
model), draws every run's measured block efficiency and speedup against the theory's prediction,
writes one report part per record, and draws each record's own plot and summary
(:func:`write_record_files`, ``python -m otspec.plot record FILE``). The records' folder is an
argument: the report reads the folder it writes into.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..engine.record import AdaptiveRecord, RecordError, as_record, read_record
from ..engine.rows import run_row
from . import RECORDS_DIR, register
from .common import axes, new_figure
from .llm_adaptive import adaptive_markdown, render_adaptive_record
from .llm_predictions import (
    PREDICTION_MIN_PROMPTS,
    PREDICTION_TOLERANCE,
    forecast_markdown,
    prediction_check,
    prediction_check_markdown,
    prediction_check_summary,
)
from .llm_text import (
    NO_INTERVAL,
    code_text,
    fmt,
    interval_text,
    nan_for_none,
    peer_text,
    timing_text,
)

__all__ = ["PREDICTION_MIN_PROMPTS", "PREDICTION_TOLERANCE", "adaptive_markdown", "llm_data", "prediction_check",
           "prediction_check_markdown", "prediction_check_summary", "record_main", "record_markdown",
           "render_adaptive_record", "render_llm", "render_record", "write_record_files"]


def record_markdown(record, title: str | None = None) -> str:
    """A Markdown summary: setup, drafter, baseline and peer, one row per run, losslessness (``record``: a
    :class:`~otspec.engine.record.PairRecord` or its JSON object)."""
    record = as_record(record)
    pair, s, base = record.model_pair, record.settings, record.baseline
    lines = [f"## {title or 'Real model pair: ' + pair.target + ' / ' + pair.draft}", "",
             f"Target `{pair.target}`, draft `{pair.draft}` on {pair.device}"
             f"{' (' + s.accelerator + ')' if s.accelerator else ''} ({pair.dtype}, "
             f"{s.threads} threads, torch {s.torch}, transformers {s.transformers}); {s.prompts} prompts "
             f"× {s.max_new_tokens} new tokens, temperature {s.temperature}, top-k {s.top_k}, "
             f"top-p {s.top_p}, batch {s.batch_size}, seed {s.seed}.{code_text(s)}", ""]
    if record.unreliable_timing:
        lines += [f"**Unreliable timing: {record.unreliable_timing}.** The tokens/s and speedups below were "
                  "measured on a machine that was not quiet; block efficiencies and predictions do not depend on it.",
                  ""]
    lines += timing_text(record)
    prof, drafter = record.profile, record.drafter
    lines += [f"Drafter: first-position acceptance 1 − TV = {fmt(drafter.acceptance)}, cost ratio "
              f"t_draft / t_target(1) = {fmt(drafter.cost_ratio)} (t_draft = {fmt(prof.t_draft_ms, 1)} ms; "
              f"{_t_target_text(prof)}).", "",
              f"Plain target sampling: **{fmt(base.tokens_per_s, 1)} tokens/s** in the same run."]
    lines += peer_text(record)
    step = record.hf_decode_step
    if step:
        lines.append(f"Decode step: otspec's plain loop {fmt(base.ms_per_token, 2)} ms per token against "
                     f"{fmt(step.ms_per_token, 2)} ms for Hugging Face's plain `generate` with the same cache kind "
                     f"({step.cache}; prefill excluded from both): ratio **{fmt(step.otspec_step_ratio, 2)}**.")
    lines += ["", "| verifier | L | block efficiency [95% CI] | predicted [95%] | two-point bound | E[τ+1 given drafts] "
              "| mean acceptance length | acceptance rate | tokens/s | speedup [95% CI or round range] "
              "| predicted speedup [interval] | verifier / target call |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in record.runs:
        be, pi, si, psi = (r.block_efficiency, r.predicted_block_efficiency_interval, r.speedup_spread,
                           r.predicted_speedup_interval)
        lines.append(f"| {r.verifier} | {r.L} | {fmt(be.mean)} [{fmt(be.low)}, {fmt(be.high)}] | "
                     f"{fmt(r.predicted_block_efficiency)}{interval_text(pi, 3, NO_INTERVAL)} | "
                     f"{fmt(r.two_point_upper_bound)} | "
                     f"{fmt(r.expected_block_efficiency_given_drafts)} | {fmt(r.mean_acceptance_length)} | "
                     f"{fmt(r.acceptance_rate)} | "
                     f"{fmt(r.tokens_per_s, 1)} | {fmt(r.speedup, 2)}{interval_text(si, 2, NO_INTERVAL)} | "
                     f"{fmt(r.predicted_speedup, 2)}{interval_text(psi, 2, NO_INTERVAL)}"
                     f"{_miss(r)} | {_percent(r.verify_fraction_of_target_call)} |")
    methods = sorted({r.prediction_method or "" for r in record.runs} - {""})
    lines += ["", "Predicted: " + ("; ".join(methods) if methods else "the two-point formulas (older record)") + ". "
              "*Two-point bound*: the verifier's formula (token eq. (4), block eq. (17), block-OT eq. (8)) on the "
              "per-position two-point reduction A = {q ≥ p} of this run's own rows, an upper bound for the block "
              "verifiers. *E[τ+1 given drafts]* averages the verifier's exact conditional law on the real rows. *Mean "
              "acceptance length*: 1 + accepted / drafts, as serving engines report it. " +
              _speedup_prediction_text(record.runs) + _straggling_text(record.runs) +
              ". *Speedup*: the run's tokens/s over plain sampling's, with " + _rounds_text(record.runs) + "."]
    lines += _tree_markdown(record.tree_runs or [])
    lines += misses_markdown(record.all_runs)
    loss = record.lossless
    if loss is not None and loss.verifiers is not None:
        lines += ["", f"Losslessness (top-k {loss.sampling.top_k if loss.sampling else None}, L = {loss.draft_length}, "
                  f"{loss.samples} draws per side):", "",
                  "| verifier | max abs(first-token law − target row) | draft paths | G-test p-value |", "|---|---|---|---|"]
        for name, v in loss.verifiers.items():
            dev = v.first_token_max_deviation
            lines.append(f"| {name} | {'toy sources (whole tree)' if dev is None else format(dev, '.2e')} | "
                         f"{v.draft_paths if v.draft_paths is not None else '—'} | "
                         f"{'not run' if v.two_sample is None else format(v.two_sample.p_value, '.3g')} |")
    elif loss is not None:
        lines += ["", f"Losslessness: {loss.status}"]
    return "\n".join(lines) + "\n"


def _percent(share) -> str:
    return "–" if share is None else f"{100 * share:.1f} %"


def _t_target_text(prof) -> str:
    """The profile's target call times: ``t_target_ms`` (medians) with ``t_target_ms_interval`` and the batch size
    where the record has them (older records: the medians alone)."""
    spread = prof.t_target_ms_interval or {}
    cells = []
    for k, v in prof.t_target_ms.items():
        iv = spread.get(k)
        cells.append(f"n={k}: {v:.1f}" + (f" [{iv.low:.1f}, {iv.high:.1f}]" if iv else ""))
    where = f"at a {prof.context_tokens}-token context"
    if prof.batch_size is not None:
        where += f", batch {prof.batch_size}"
    text = f"t_target(n) in ms{' (median [low, high])' if spread else ''} {where}: {', '.join(cells)}"
    mono = prof.monotone
    if mono is not None and mono.monotone is False and mono.exceptions:
        pairs = ", ".join(f"n = {a} → {b}" for a, b in mono.exceptions)
        tolerance = 0.03 if mono.tolerance is None else mono.tolerance
        text += (f"; not monotone beyond noise at {pairs} (the wider call's median more than "
                 f"{100 * tolerance:.0f} % below the narrower one's interval); the medians are not "
                 "smoothed: the prediction charges each width its own measured time, so an iteration scoring the "
                 "narrower width is charged more)")
    if prof.disturbed_rounds:
        tolerance = 0.25 if prof.round_tolerance is None else prof.round_tolerance
        text += (f"; calibration rounds {', '.join(map(str, prof.disturbed_rounds))} set aside (plain decoding more "
                 f"than {100 * tolerance:.0f} % slower per step than the median round)")
    return text


#: How a tree run's draw shows beside its k-config (i.i.d. drafts show nothing).
_DRAW_SUFFIX = {False: " (w/o repl.)", "greedy": " (greedy drafts)", "hub": " (hub pair)"}


def _tree_markdown(runs: list) -> list:
    if not runs:
        return []
    lines = ["", "Multi-draft and tree runs (one target call scores every node of the drafted trie):", "",
             "| verifier | tree | rule | block efficiency [95% CI] | E[τ+1 given trie] | predicted | OTM-k bound "
             "| go-on per depth | nodes per target call | tokens/s | speedup [rounds] | predicted speedup "
             "| verifier / target call |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        be = r.block_efficiency
        go = ", ".join(fmt(x, 2) for x in r.go_on or [])
        draw = "" if r.tree.startswith("eagle2") else _DRAW_SUFFIX.get(r.replacement, "")
        lines.append(f"| {r.verifier} | {r.tree}{draw} | {r.rule} | "
                     f"{fmt(be.mean)} [{fmt(be.low)}, {fmt(be.high)}] | "
                     f"{fmt(r.expected_block_efficiency_given_tree)} | {fmt(r.predicted_block_efficiency)} | "
                     f"{fmt(r.otm_bound_block_efficiency)} | {go} | {fmt(r.target_nodes_per_call, 1)} | "
                     f"{fmt(r.tokens_per_s, 1)} | {fmt(r.speedup, 2)}{interval_text(r.speedup_spread, 2, NO_INTERVAL)} | "
                     f"{fmt(r.predicted_speedup, 2)}{_miss(r)} | {_percent(r.verify_fraction_of_target_call)} |")
    methods = sorted({r.prediction_method or "" for r in runs} - {""})
    lines += ["", "*Predicted*: " + ("; ".join(methods) if methods else "per-depth product (older record)") + ". "
              "*OTM-k bound*: 1 + Σ_d Π_{i≤d} α_d with α_d the optimal multi-draft acceptance on the measured rows "
              "of the nodes walked at depth d, averaged over drafted depths; *E[τ+1 given trie]*: the "
              "verifier's exact law on every row of the drafted trie. Under the SpecTr rule a residual token that "
              "equals a candidate also goes on, so *go-on* can exceed the acceptance."]
    return lines


def _straggling_text(runs: list) -> str:
    """How the predicted speedups allow for a batch's slowest sequence (records that measured it)."""
    st = [r.batch_straggling for r in runs if r.batch_straggling]
    measured = [x.measured for x in st if x.measured is not None]
    predicted = [x.predicted for x in st if x.predicted is not None]
    if not (measured and predicted):
        return ""
    return (f", per iteration of a batch of {st[0].batch_size}: a batch calls the target until its slowest "
            f"sequence has its tokens, {min(measured):.3f}–{max(measured):.3f} times the mean sequence's iterations "
            f"(predicted from the log's replays: {min(predicted):.3f}–{max(predicted):.3f})")


def _rounds_text(runs: list) -> str:
    """How the speedup's spread was measured, from the runs' ``speedup_ci`` or ``speedup_interval``."""
    counts = {len(r.speedup_interval.rounds or []) if r.speedup_interval else 0 for r in runs}
    if counts and 0 not in counts:
        what = ("its 95 % confidence interval (a paired bootstrap over" if all(r.speedup_ci for r in runs)
                else "the smallest and largest ratio over")
        return (f"{what} {max(counts)} timing rounds (each batch of prompts decoded by plain sampling and every run in "
                "turn, in the same window)" + (")" if what.startswith("its") else ""))
    return "the block efficiency's interval, scaled (an older record without interleaved timing rounds)"


def _speedup_prediction_text(runs: list) -> str:
    """How the predicted speedups were made: from a cost profile measured apart, or (older records) from the run's
    own call times."""
    sources = {r.speedup_prediction.source if r.speedup_prediction else None for r in runs}
    if sources == {"cost_profile"}:
        return ("Predicted speedup: the cost profile (plain decoding, t_target(n) and a zero-acceptance dry run of each "
                "configuration, all on the prediction prompts) charged to the prediction's replays, batch by batch")
    return ("Predicted speedup (older record, circular): the cost model with this run's own t_draft, t_target(L+1) "
            "and loop overhead")


def _miss(r) -> str:
    """`` (miss: ±x %)`` after a predicted speedup that its measurement does not meet (``prediction_check``)."""
    c = r.prediction_check.speedup if r.prediction_check else None
    return "" if not c or c.holds else f" (**miss**: {100 * c.relative_error:+.1f} %)"


#: How each part of an iteration is named in a miss's decomposition.
_PARTS = {"overhead": "loop overhead", "draft": "draft calls", "verify": "verifier call", "target": "target calls"}


def misses_markdown(runs: list) -> list:
    """Each speedup the cost profile misses, decomposed after the fact (:func:`otspec.engine.forecast.miss_decomposition`):
    measured over predicted plain step, batch iterations and time per iteration, and the iteration's time difference by
    part (ms per iteration, measured − profile). ``runs``: typed rows or their JSON objects."""
    from otspec.engine.forecast import miss_decomposition

    out = []
    for r in map(run_row, runs):
        d = miss_decomposition(r) if _miss(r) else None
        if d is None:
            continue
        parts = ", ".join(f"{_PARTS[k]} {v:+.1f}" for k, v in d.components.items())
        out.append(f"- {r.verifier} {r.config}: {_miss(r).strip()[1:-1]}; plain step ×{d.plain_step:.3f}, batch "
                   f"iterations ×{d.iterations:.3f}, time per iteration ×{d.iteration_time:.3f} "
                   f"({d.iteration_ms_measured:.1f} against {d.iteration_ms_predicted:.1f} ms: {parts} ms)")
    if out:
        out = ["", "Where the predicted speedup misses (measured over predicted; the speedup's ratio is plain step / "
               "(iterations × time per iteration); the parts are measured − profile, ms per iteration, a diagnosis "
               "after the fact that no prediction reads):", "", *out]
    return out


def _yerr(values, intervals) -> list:
    """``yerr`` for ``errorbar``: each value's distance down to its interval's ``low`` and up to its ``high`` (no bar
    where the interval is ``None``, e.g. a speedup without paired rounds)."""
    bounds = [(v, v) if iv is None else (iv.low, iv.high) for v, iv in zip(values, intervals, strict=True)]
    return [[v - lo for v, (lo, _) in zip(values, bounds, strict=True)],
            [hi - v for v, (_, hi) in zip(values, bounds, strict=True)]]


def _render_trees(fig, runs: list) -> None:
    """Two panels: measured vs predicted tokens per target call per tree run; go-on / acceptance / optimum per depth."""
    ax_be, ax_depth = fig.subplots(1, 2)
    labels = [f"{r.verifier}\n{r.tree}" for r in runs]
    x = range(len(runs))
    be = [r.block_efficiency for r in runs]
    ax_be.errorbar(x, [b.mean for b in be], yerr=_yerr([b.mean for b in be], be),
                   fmt="o", color="C0", capsize=3, label="measured")
    ax_be.plot(x, nan_for_none(r.expected_block_efficiency_given_tree for r in runs), "x", color="C3", label="E[τ+1 | trie]")
    ax_be.plot(x, nan_for_none(r.predicted_block_efficiency for r in runs), "_", ms=14, mew=2, color="C1", label="predicted")
    ax_be.plot(x, nan_for_none(r.otm_bound_block_efficiency for r in runs), "v", color="C2", label="OTM-k bound")
    ax_be.set_xticks(list(x), labels, fontsize=7, rotation=20)
    ax_be.set_title("multi-draft: tokens per target call")
    for c, r in enumerate(runs[:6]):
        go = r.go_on or []
        ax_depth.plot(range(1, len(go) + 1), nan_for_none(go), "o-", color=f"C{c}", label=f"{r.verifier} {r.tree}: go on")
        if r.optimum:  # a whole-tree verifier has no per-node OTM-k value
            ax_depth.plot(range(1, len(r.optimum) + 1), nan_for_none(r.optimum), "v:", color=f"C{c}")
    ax_depth.set_title("per depth: go-on (solid), OTM-k optimum (dotted)")
    ax_depth.set_xlabel("tree depth")
    for ax in (ax_be, ax_depth):
        ax.legend(fontsize=7)


def render_record(record):
    """A 2 × 2 figure: block efficiency and speedup (measured vs predicted) against L, t_target(n), acceptance per
    position (``record``: a :class:`~otspec.engine.record.PairRecord` or its JSON object)."""
    record = as_record(record)
    trees = record.tree_runs or []
    fig = new_figure((11, 11.5 if trees else 8), 110)
    fig.set_layout_engine("constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[2, 1]) if trees else (fig, None)
    ax_be, ax_sp, ax_t, ax_pos = top.subplots(2, 2).ravel()
    if trees:
        _render_trees(bottom, trees)
    names = list(dict.fromkeys(r.verifier for r in record.runs))
    for c, name in enumerate(names):
        runs = [r for r in record.runs if r.verifier == name]
        Ls = [r.L for r in runs]
        be = [r.block_efficiency for r in runs]
        ax_be.errorbar(Ls, [b.mean for b in be], yerr=_yerr([b.mean for b in be], be),
                       fmt="o", color=f"C{c}", capsize=3, label=f"{name} measured")
        # a dash marks each prediction, so that a record with one L still shows it
        ax_be.plot(Ls, nan_for_none(r.predicted_block_efficiency for r in runs), "_--", ms=14, mew=2, color=f"C{c}",
                   label=f"{name} predicted")
        sp = nan_for_none(r.speedup for r in runs)
        ax_sp.errorbar(Ls, sp, yerr=_yerr(sp, [r.speedup_ci for r in runs]), fmt="o", color=f"C{c}",
                       capsize=3, label=f"{name} measured [95 % CI]")
        ax_sp.plot(Ls, nan_for_none(r.predicted_speedup for r in runs), "_--", ms=14, mew=2, color=f"C{c}",
                   label=f"{name} predicted")
        last = runs[-1]
        pos = last.acceptance_per_position or []
        ax_pos.plot(range(1, len(pos) + 1), nan_for_none(pos), "o-", color=f"C{c}", label=f"{name}, L={last.L}: accepted")
    if record.runs and record.runs[-1].tv_per_position:
        tv = record.runs[-1].tv_per_position
        ax_pos.plot(range(1, len(tv) + 1), [float("nan") if x is None else 1 - x for x in tv], "k:",
                    label="1 − TV(draft, target)")
    ax_sp.axhline(1.0, color="grey", lw=0.8)
    if record.hf_assisted:
        ax_sp.axhline(record.hf_assisted.speedup, color="C7", ls="-.", label="HF assisted")
    prof = record.profile.t_target_ms
    ax_t.plot([int(k) for k in prof], list(prof.values()), "o-", label="t_target(n)")
    ax_t.axhline(record.profile.t_draft_ms, color="C1", ls="--", label="t_draft (one token)")
    for ax, title, xl in ((ax_be, "block efficiency (tokens per target call)", "draft length L"),
                          (ax_sp, "speedup over plain sampling" + (" (UNRELIABLE TIMING: machine not quiet)"
                                                                    if record.unreliable_timing else ""),
                           "draft length L"),
                          (ax_t, "time per call (ms)", "tokens scored per target call n"),
                          (ax_pos, "acceptance per draft position", "position in the draft")):
        ax.set_title(title)
        ax.set_xlabel(xl)
        ax.legend(fontsize=7)
    pair = record.model_pair
    fig.suptitle(f"{pair.target} / {pair.draft} on {pair.device}")
    return fig


def _label(rec) -> str:
    return rec.file.removesuffix(".json")


def render_llm(data: dict):
    """Measured against predicted block efficiency and speedup for every run of every record."""
    fig, (ax_be, ax_sp) = axes((11, 4.6), ncols=2)
    markers = "osD^vP*X"
    for i, rec in enumerate(map(as_record, data["records"])):
        label = f"{_label(rec)}: {rec.model_pair.draft} ({rec.model_pair.device})"
        runs, marker = rec.runs, markers[i % len(markers)]
        be = [r.block_efficiency for r in runs]
        ax_be.errorbar(nan_for_none(r.predicted_block_efficiency for r in runs), [b.mean for b in be],
                       yerr=_yerr([b.mean for b in be], be), fmt=marker, color=f"C{i}", ms=4, capsize=2, label=label)
        unreliable = bool(rec.unreliable_timing)  # drawn hollow and named: not a measurement to trust
        ax_sp.plot(nan_for_none(r.predicted_speedup for r in runs), nan_for_none(r.speedup for r in runs), marker,
                   color=f"C{i}", ms=4, mfc="none" if unreliable else None,
                   label=label + (" [unreliable timing]" if unreliable else ""))
        trees = rec.tree_runs or []
        if trees:
            ax_be.plot(nan_for_none(r.predicted_block_efficiency for r in trees), [r.block_efficiency.mean for r in trees],
                       marker, mfc="none", color=f"C{i}", ms=6, label=f"{label}: trees")
            ax_sp.plot(nan_for_none(r.predicted_speedup for r in trees), nan_for_none(r.speedup for r in trees),
                       marker, mfc="none", color=f"C{i}", ms=6)
        if rec.hf_assisted:
            ax_sp.axhline(rec.hf_assisted.speedup, color=f"C{i}", ls=":", lw=1, label=f"HF assisted, {_label(rec)}")
    for ax, what in ((ax_be, "block efficiency"), (ax_sp, "speedup over plain sampling")):
        lo, hi = ax.get_xlim()
        lo, hi = min(lo, ax.get_ylim()[0]), max(hi, ax.get_ylim()[1])
        ax.plot([lo, hi], [lo, hi], color="0.5", lw=0.8, label="measured = predicted")
        ax.set_xlabel(f"predicted {what}")
        ax.set_ylabel(f"measured {what}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Real model pairs: measurement against the theory's prediction", fontsize=10)
    return fig


def _title(rec, what: str) -> str:
    pair = rec.model_pair
    return f"{rec.file}: {what}{pair.target} / {pair.draft} on {pair.device}"


def _llm_section(data: dict, png: Path) -> str:
    records, adaptive = [as_record(r) for r in data["records"]], [as_record(r) for r in data.get("adaptive", [])]
    if not records:
        return (f"## Real model pairs\n\n![measured against predicted]({png.name})\n\nNo `llm_*.json` record in "
                "this folder yet: run `python -m llm_bridge.validate`.\n")
    parts = ["## Real model pairs", "", f"![measured against predicted]({png.name})", "",
             "Each record below was measured by `python -m llm_bridge.validate` (its JSON, Markdown and plot sit "
             "beside this report as `llm_<name>.*`); the figure above puts every run's measurement next to the "
             "theory's prediction (block efficiency from a plain-decoding log of the pair, speedup from it and call "
             "times; the check below says which predictions are independent of the measurement).", "",
             *prediction_check_markdown(prediction_check(records + adaptive)),
             *forecast_markdown(data.get("forecasts", []))]
    for rec in records:
        body = record_markdown(rec, _title(rec, "")).replace("\n## ", "\n### ")
        parts += ["#" + body, f"![{rec.file}]({Path(rec.file).with_suffix('.png').name})", ""]
    for rec in adaptive:  # SpecDec++ on the pair (python -m llm_bridge.adaptive)
        rule = "the draft's confidence" if rec.confidence_rule else "SpecDec++"
        body = adaptive_markdown(rec, _title(rec, f"{rule} on "))
        parts += ["#" + body, f"![{rec.file}]({Path(rec.file).with_suffix('.png').name})", ""]
    return "\n".join(parts)


def write_record_files(path, out_dir=None) -> list[Path]:
    """Draw the record in ``path`` (a ``.json``): its Markdown summary and plot, beside it or in ``out_dir``; returns
    their paths."""
    path = Path(path)
    record = read_record(path)
    adaptive = isinstance(record, AdaptiveRecord)
    stem = path.with_suffix("") if out_dir is None else Path(out_dir) / path.stem
    md, png = stem.with_suffix(".md"), stem.with_suffix(".png")
    md.write_text(adaptive_markdown(record) if adaptive else record_markdown(record))
    figure = render_adaptive_record(record) if adaptive else render_record(record)
    figure.savefig(png)
    import matplotlib.pyplot as plt

    plt.close(figure)
    return [md, png]


def _records_files(data: dict, out_dir: Path) -> list[Path]:
    """The report's hook: every record it read gets its plot and summary in the report's folder (the records' own
    folder is not written: the committed records stay as they are unless the report is written there)."""
    return [p for rec in data["records"] + data.get("adaptive", [])
            for p in write_record_files(as_record(rec).path, out_dir)]


@register("real_models", "real_models", render=render_llm, section=_llm_section, files=_records_files,
          reads_records=True)
def llm_data(scale: float = 1.0, records_dir: str | Path = RECORDS_DIR) -> dict:
    """Every record ``llm_*.json`` in ``records_dir`` (``scale`` is unused: nothing is rerun), typed
    (:class:`~otspec.engine.record.PairRecord` under ``records``, :class:`~otspec.engine.record.AdaptiveRecord`
    under ``adaptive``), and every forecast ``llm_forecast_*.json`` with the record it names (``None`` until it is
    measured); other ``llm_*`` data files there (a benchmark's output, the GPU suite's summary) hold no
    ``model_pair`` and are skipped."""
    records, adaptive, forecasts = [], [], []
    folder, here = Path(records_dir), Path.cwd().resolve()
    if folder.is_absolute() and folder.resolve().is_relative_to(here):
        folder = folder.resolve().relative_to(here)  # the same paths in the figure's JSON on any machine
    for path in sorted(folder.glob("llm_*.json")):
        text = path.read_text()
        if path.name.startswith("llm_forecast_") and '"kind": "forecast"' in text:
            made = json.loads(text)
            measured = folder / made["record"]
            forecasts.append((path.name, made, read_record(measured) if measured.is_file() else None))
            continue
        if '"model_pair"' not in text:
            continue
        record = read_record(path)
        (adaptive if isinstance(record, AdaptiveRecord) else records).append(record)
    return {"records": records, "adaptive": adaptive, "forecasts": forecasts}


def record_main(argv=None) -> int:
    """``python -m otspec.plot record FILE [FILE ...]``: each record's plot and summary beside it."""
    parser = argparse.ArgumentParser(prog="python -m otspec.plot record",
                                     description="Draw a real pair's record (llm_bridge.validate / adaptive): its "
                                                 "Markdown summary and plot, written beside the JSON.")
    parser.add_argument("files", nargs="+", type=Path, help="record files (llm_<name>.json)")
    args = parser.parse_args(argv)
    for path in args.files:
        try:
            print("wrote " + ", ".join(str(p) for p in write_record_files(path)))
        except (RecordError, OSError) as err:
            print(f"{parser.prog}: error: {err}", file=sys.stderr)
            return 2
        except UnicodeDecodeError:
            print(f"{parser.prog}: error: {path}: not a JSON record (not UTF-8 text)", file=sys.stderr)
            return 2
        except (ValueError, TypeError, KeyError, AttributeError, IndexError) as err:  # a field the checks let through
            print(f"{parser.prog}: error: {path}: a damaged record that cannot be drawn ({type(err).__name__}: "
                  f"{err})", file=sys.stderr)
            return 2
    return 0
