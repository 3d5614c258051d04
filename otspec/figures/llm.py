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

import json
import sys
from pathlib import Path

from ..checks import file_problem
from ..clitools import ArgumentParser, one_line, path_argument, writable_folder
from ..engine.forecast import check_forecast_json
from ..engine.record import AdaptiveRecord, RecordError, as_record, check_record_size, read_record
from . import RECORDS_DIR, SCRATCH_DIR, register
from .common import axes, new_figure, records_folder
from .llm_adaptive import adaptive_markdown, render_adaptive_record
from .llm_markdown import misses_markdown, record_markdown
from .llm_predictions import (
    PREDICTION_MIN_PROMPTS,
    PREDICTION_TOLERANCE,
    forecast_markdown,
    prediction_check,
    prediction_check_markdown,
    prediction_check_summary,
)
from .llm_text import (
    nan_for_none,
)

__all__ = ["PREDICTION_MIN_PROMPTS", "PREDICTION_TOLERANCE", "adaptive_markdown", "llm_data", "prediction_check",
           "prediction_check_markdown", "prediction_check_summary", "record_main", "record_markdown",
           "render_adaptive_record", "render_llm", "render_record", "misses_markdown",
           "write_record_files"]


def _yerr(values, intervals) -> list:
    """``yerr`` for ``errorbar``: each value's distance down to its interval's ``low`` and up to its ``high`` (no bar
    where the interval is ``None``, e.g. a speedup without paired rounds)."""
    bounds = [(v, v) if iv is None else (iv.low, iv.high) for v, iv in zip(values, intervals, strict=True)]
    return [[v - lo for v, (lo, _) in zip(values, bounds, strict=True)],
            [hi - v for v, (_, hi) in zip(values, bounds, strict=True)]]


def _whole_ticks(ax, values) -> None:
    """Whole-number ticks on an axis of L, n or positions: at the values drawn (a few of them), else integer ticks;
    one value gets room on both sides (the prediction is drawn just right of its measurement)."""
    from matplotlib.ticker import MaxNLocator

    values = sorted(set(values))
    if not values:
        return
    if len(values) <= 12:
        ax.set_xticks(values)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if len(values) == 1:
        ax.set_xlim(values[0] - 0.6, values[0] + 0.7)


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
    _whole_ticks(ax_depth, range(1, 1 + max((len(r.go_on or []) for r in runs[:6]), default=1)))
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
        # a dash marks each prediction, with its interval, beside the measurement (a record with one L shows it too)
        shifted = [x + 0.12 for x in Ls]
        pbe = nan_for_none(r.predicted_block_efficiency for r in runs)
        ax_be.errorbar(shifted, pbe, yerr=_yerr(pbe, [r.predicted_block_efficiency_interval for r in runs]),
                       fmt="_", ms=14, mew=2, ls="--", color=f"C{c}", alpha=0.8, capsize=2,
                       label=f"{name} predicted [interval]")
        sp = nan_for_none(r.speedup for r in runs)
        ax_sp.errorbar(Ls, sp, yerr=_yerr(sp, [r.speedup_ci for r in runs]), fmt="o", color=f"C{c}",
                       capsize=3, label=f"{name} measured [95 % CI]")
        psp = nan_for_none(r.predicted_speedup for r in runs)
        ax_sp.errorbar(shifted, psp, yerr=_yerr(psp, [r.predicted_speedup_interval for r in runs]), fmt="_", ms=14,
                       mew=2, ls="--", color=f"C{c}", alpha=0.8, capsize=2, label=f"{name} predicted [interval]")
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
    lengths = sorted({r.L for r in record.runs})
    depth = max((len(r.acceptance_per_position or []) for r in record.runs), default=1)
    for ax, values in ((ax_be, lengths), (ax_sp, lengths), (ax_t, [int(k) for k in prof]),
                       (ax_pos, range(1, depth + 1))):
        _whole_ticks(ax, values)
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
        body = _demoted(record_markdown(rec, _title(rec, "")))
        parts += [body, f"![{rec.file}]({Path(rec.file).with_suffix('.png').name})", ""]
    for rec in adaptive:  # SpecDec++ on the pair (python -m llm_bridge.adaptive)
        rule = "the draft's confidence" if rec.confidence_rule else "SpecDec++"
        body = _demoted(adaptive_markdown(rec, _title(rec, f"{rule} on ")))
        parts += [body, f"![{rec.file}]({Path(rec.file).with_suffix('.png').name})", ""]
    return "\n".join(parts)


def _demoted(markdown: str) -> str:
    """A record's summary one heading level down (its title ``##`` becomes ``###`` under the report's section)."""
    return "\n".join("#" + line if line.startswith("#") else line for line in markdown.split("\n"))


def write_record_files(path, out_dir=None) -> list[Path]:
    """Draw the record in ``path`` (a ``.json``): its Markdown summary and plot, beside it or in ``out_dir``; returns
    their paths."""
    path = Path(path)
    record = read_record(path)
    adaptive = isinstance(record, AdaptiveRecord)
    stem = path.with_suffix("") if out_dir is None else Path(out_dir) / path.stem
    stem.parent.mkdir(parents=True, exist_ok=True)
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


def _llm_headline(data: dict) -> str | None:
    """The real pairs in one sentence: the fastest run measured, and how many independent predictions hold."""
    records = [as_record(r) for r in data["records"]]
    runs = [(r.speedup, rec) for rec in records if not rec.unreliable_timing for r in rec.all_runs
            if r.speedup is not None]
    if not runs:
        return None
    speedup, rec = max(runs, key=lambda x: x[0])
    check = prediction_check_summary(prediction_check(records + [as_record(r) for r in data.get("adaptive", [])]))
    return (f"Real pairs ({len(records)} records, CPU and GPU): the fastest run is {speedup:.2f}× plain sampling "
            f"({rec.file}); the predictions that did not see their run hold for {check.be_held} of "
            f"{check.be_counted} block efficiencies and {check.speedup_held} of {check.speedup_counted} speedups.")


@register("real_models", "real_models", render=render_llm, section=_llm_section, files=_records_files,
          reads_records=True, headline=_llm_headline, scaled=False)
def llm_data(scale: float = 1.0, records_dir: str | Path = RECORDS_DIR) -> dict:
    """Every record ``llm_*.json`` in ``records_dir`` (``scale`` is unused: nothing is rerun), typed
    (:class:`~otspec.engine.record.PairRecord` under ``records``, :class:`~otspec.engine.record.AdaptiveRecord`
    under ``adaptive``), and every forecast ``llm_forecast_*.json`` with the record it names (``None`` until it is
    measured); other ``llm_*`` data files there (a benchmark's output, the GPU suite's summary) hold no
    ``model_pair`` and are skipped."""
    records, adaptive, forecasts = [], [], []
    folder, here = records_folder(records_dir), Path.cwd().resolve()
    if folder.is_absolute() and folder.resolve().is_relative_to(here):
        folder = folder.resolve().relative_to(here)  # the same paths in the figure's JSON on any machine
    for path in sorted(folder.glob("llm_*.json")):
        problem = file_problem(path)
        if problem:  # a pipe named like a record would block the read forever
            raise RecordError(f"{path}: {problem}; a file named llm_*.json in the records folder must be a record or "
                              "another JSON data file")
        check_record_size(path)  # a sparse or runaway file is refused unread
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            raise RecordError(f"{path}: not UTF-8 text: a file named llm_*.json in the records folder must be a "
                              "record or another JSON data file") from None
        if path.name.startswith("llm_forecast_") and '"kind": "forecast"' in text:
            try:
                made = check_forecast_json(json.loads(text), str(path))
            except (ValueError, RecursionError) as err:  # damaged JSON, or a field that is wrong
                raise RecordError(f"{path}: not a forecast ({err})" if not isinstance(err, RecordError) else str(err)
                                  ) from None
            if not isinstance(made.get("record"), str) or Path(made["record"]).name != made["record"]:
                raise RecordError(f"{path}: a forecast must name the record it forecasts ('record': a file name in "
                                  "the same folder)")
            measured = folder / made["record"]
            forecasts.append((path.name, made, read_record(measured) if measured.is_file() else None))
            continue
        if '"model_pair"' not in text:  # another data file (a benchmark's output): not a record, said why
            try:
                data = json.loads(text)
            except (ValueError, RecursionError):  # damaged, or an integer of thousands of digits
                raise RecordError(f"{path}: not JSON (empty or damaged): a file named llm_*.json in the records "
                                  "folder must be a record or another JSON data file") from None
            if isinstance(data, dict) and {"runs", "tree_runs", "threshold"} & set(data):
                raise RecordError(f"{path}: a record without its 'model_pair' (damaged?)")
            continue
        record = read_record(path)
        (adaptive if isinstance(record, AdaptiveRecord) else records).append(record)
    return {"records": records, "adaptive": adaptive, "forecasts": forecasts}


def _scratch_for_committed(path: Path) -> Path | None:
    """Where ``plot record`` draws ``path`` by default: beside it (None), or the scratch folder for a record that lies
    in the committed records' folder."""
    try:
        committed = path.resolve().parent == Path(RECORDS_DIR).resolve()
    except OSError:
        committed = False
    return Path(SCRATCH_DIR) if committed else None


def record_main(argv=None) -> int:
    """``python -m otspec.plot record FILE [FILE ...]``: each record's plot and summary beside it, or in ``--out-dir``;
    a committed record (in :data:`~otspec.figures.RECORDS_DIR`) is drawn into :data:`~otspec.figures.SCRATCH_DIR`
    unless ``--out-dir`` says otherwise, so that the checkout is never rewritten."""
    parser = ArgumentParser(prog="python -m otspec.plot record",
                                     description="Draw a real pair's record (llm_bridge.validate / adaptive): its "
                                                 "Markdown summary and plot, written beside the JSON (a committed "
                                                 f"record in figures/: into {SCRATCH_DIR}).")
    parser.add_argument("files", nargs="+", type=path_argument, help="record files (llm_<name>.json)")
    parser.add_argument("--out-dir", type=path_argument, default=None,
                        help=f"write the summaries and plots here (default: beside each record; {SCRATCH_DIR} for the "
                             "committed records)")
    args = parser.parse_args(argv)
    if args.out_dir is not None:
        try:
            writable_folder(args.out_dir, "--out-dir")
        except ValueError as err:
            print(f"{parser.prog}: error: {one_line(err)}", file=sys.stderr)
            return 2
    for path in args.files:
        try:
            out_dir = args.out_dir if args.out_dir is not None else _scratch_for_committed(path)
            print("wrote " + ", ".join(str(p) for p in write_record_files(path, out_dir)))
        except (RecordError, OSError) as err:
            print(f"{parser.prog}: error: {one_line(err)}", file=sys.stderr)
            return 2
        except UnicodeDecodeError:
            print(f"{parser.prog}: error: {path}: not a JSON record (not UTF-8 text)", file=sys.stderr)
            return 2
        except (ValueError, TypeError, KeyError, AttributeError, IndexError) as err:  # a field the checks let through
            print(f"{parser.prog}: error: {path}: a damaged record that cannot be drawn ({type(err).__name__}: "
                  f"{err})", file=sys.stderr)
            return 2
    return 0
