"""The Markdown summary of a real-pair record (``llm_<name>.md``).

The summary is sectioned so that a reader finds the answer first: a result line, the setup, the timing check and
the baseline, the drafter and the target's call times, the runs (one table, each column explained in a list),
the tree runs, where a predicted speedup misses, and the losslessness check with the settings it ran under (its
own, which differ from the runs': the exact law is enumerated on truncated rows).
"""

from __future__ import annotations

from ..engine.record import as_record
from ..engine.rows import run_row
from .llm_text import NO_INTERVAL, code_text, fmt, interval_text, peer_text, timing_text

__all__ = ["misses_markdown", "record_markdown"]


def record_markdown(record, title: str | None = None) -> str:
    """A Markdown summary in sections: the result, setup, timing and baseline, drafter, runs (a table, its columns
    explained), tree runs, misses, losslessness (``record``: a :class:`~otspec.engine.record.PairRecord` or its JSON
    object)."""
    record = as_record(record)
    pair, s, base = record.model_pair, record.settings, record.baseline
    lines = [f"## {title or 'Real model pair: ' + pair.target + ' / ' + pair.draft}", ""]
    lines += _result_lines(record)
    lines += ["### Setup", "",
              f"- Target `{pair.target}`, draft `{pair.draft}` on {pair.device}"
              f"{' (' + s.accelerator + ')' if s.accelerator else ''} ({pair.dtype}, "
              f"{s.threads} threads, torch {s.torch}, transformers {s.transformers}).",
              f"- {s.prompts} prompts × {s.max_new_tokens} new tokens, temperature {s.temperature}, top-k {s.top_k}, "
              f"top-p {s.top_p}, batch {s.batch_size}, seed {s.seed}.{code_text(s)}", ""]
    if record.unreliable_timing:
        lines += [f"**Unreliable timing: {record.unreliable_timing}.** The tokens/s and speedups below were "
                  "measured on a machine that was not quiet; block efficiencies and predictions do not depend on it.",
                  ""]
    lines += ["### Timing and the baseline", ""]
    lines += [f"- {line}" for line in timing_text(record) if line]
    lines.append(f"- Plain target sampling: **{fmt(base.tokens_per_s, 1)} tokens/s** in the same run.")
    lines += [f"- {line}" for line in peer_text(record)]
    step = record.hf_decode_step
    if step:
        lines.append(f"- Decode step: otspec's plain loop {fmt(base.ms_per_token, 2)} ms per token against "
                     f"{fmt(step.ms_per_token, 2)} ms for Hugging Face's plain `generate` with the same cache kind "
                     f"({step.cache}; prefill excluded from both): ratio **{fmt(step.otspec_step_ratio, 2)}**.")
    prof, drafter = record.profile, record.drafter
    lines += ["", "### Drafter and the target's call times", "",
              f"Drafter: first-position acceptance 1 − TV = {fmt(drafter.acceptance)}, cost ratio "
              f"t_draft / t_target(1) = {fmt(drafter.cost_ratio)} (t_draft = {fmt(prof.t_draft_ms, 1)} ms; "
              f"{_t_target_text(prof)}).", "",
              f"t_target(n) is one target call that scores n tokens for each of the batch's "
              f"{prof.batch_size or s.batch_size} sequences (n = 1 is a plain decoding step), on this run's "
              f"{s.threads} thread{'s' if s.threads != 1 else ''}: it grows with the batch and the context and "
              "shrinks with threads, so it is comparable only between records made alike (the README's batch-1, "
              "2-thread call times are smaller).", ""]
    lines += ["### Runs", "",
              "| verifier | L | block efficiency [95% CI] | predicted [95%] | two-point bound | E[τ+1 given drafts] "
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
    lines += ["", "How to read the columns:", "",
              "- *Block efficiency*: tokens emitted per target call, with its 95 % confidence interval.",
              "- *Predicted*: " + ("; ".join(methods) if methods else "the two-point formulas (older record)") + ".",
              "- *Two-point bound*: the verifier's formula (token eq. (4), block eq. (17), block-OT eq. (8) of "
              "docs/token_and_block_verification.md) on the per-position two-point reduction A = {q ≥ p} of this "
              "run's own rows, an upper bound for the block verifiers.",
              "- *E[τ+1 given drafts]* averages the verifier's exact conditional law on the real rows.",
              "- *Mean acceptance length*: 1 + accepted / drafts, as serving engines report it.",
              "- " + _speedup_prediction_text(record.runs) + _straggling_text(record.runs) + ".",
              "- *Speedup*: the run's tokens/s over plain sampling's, with " + _rounds_text(record.runs) + ".",
              "- *Verifier / target call*: the verifier's own time as a share of one target call."]
    lines += _tree_markdown(record.tree_runs or [])
    lines += misses_markdown(record.all_runs)
    lines += _lossless_lines(record)
    return "\n".join(lines) + "\n"


def _result_lines(record) -> list[str]:
    """The record's answer in one line: its fastest run, measured against predicted, and plain sampling's speed."""
    runs = [r for r in record.all_runs if r.speedup is not None]
    if not runs:
        return []
    best = max(runs, key=lambda r: r.speedup)
    be = best.block_efficiency
    return [f"**Result.** Fastest run: {best.verifier} at {best.config}, {fmt(be.mean)} tokens per target call "
            f"(predicted {fmt(best.predicted_block_efficiency)}) and **{fmt(best.speedup, 2)}×** plain sampling's "
            f"{fmt(record.baseline.tokens_per_s, 1)} tokens/s (predicted {fmt(best.predicted_speedup, 2)}×)"
            + ("; timing unreliable (machine not quiet)" if record.unreliable_timing else "") + ".", ""]


def _lossless_lines(record) -> list[str]:
    """The losslessness check, with the settings it ran under said against the run's own."""
    loss, s = record.lossless, record.settings
    if loss is None:
        return []
    if loss.verifiers is None:
        return ["", "### Losslessness", "", f"Losslessness: {loss.status}"]
    top_k = loss.sampling.top_k if loss.sampling else None
    samples = loss.samples or 0
    lines = ["", "### Losslessness", "",
             f"Losslessness is checked apart from the runs, on the first prompt: the exact law of the first emitted "
             f"token, every draft path of length L = {loss.draft_length} enumerated on rows truncated to their top "
             f"{top_k} tokens (the runs sampled with top-k {s.top_k}, L = {', '.join(str(r.L) for r in record.runs) or '–'}: "
             "enumerating their full rows is out of reach), against the target's row; "
             + (f"a G-test compares {samples} draws per side with plain sampling." if samples else
                "the G-test against plain sampling was not run (0 draws per side; `--lossless-samples N` runs it)."),
             "", "| verifier | max abs(first-token law − target row) | draft paths | G-test p-value |",
             "|---|---|---|---|"]
    for name, v in loss.verifiers.items():
        dev = v.first_token_max_deviation
        lines.append(f"| {name} | {'toy sources (whole tree)' if dev is None else format(dev, '.2e')} | "
                     f"{v.draft_paths if v.draft_paths is not None else '—'} | "
                     f"{'not run' if v.two_sample is None else format(v.two_sample.p_value, '.3g')} |")
    return lines


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
