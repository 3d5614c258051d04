"""``llm_bridge.adaptive`` records: the discard-rate / verification-rate frontier and the Markdown summary.

A record's threshold rows are SpecDec++'s learned-head rule (lagged and unlagged) or, for a feature-level draft
head, the draft's own confidence (``head["rule"] == "confidence"``); fixed K sits beside them.
"""

from __future__ import annotations

from ..engine.record import as_record
from .common import axes
from .llm_text import code_text, fmt, nan_for_none, peer_text, timing_text

__all__ = ["adaptive_markdown", "render_adaptive_record"]


def _rates(rows) -> tuple[list, list]:
    return nan_for_none(r.verification_rate for r in rows), nan_for_none(r.discard_rate for r in rows)


def render_adaptive_record(record):
    """An ``llm_bridge.adaptive`` record (an :class:`~otspec.engine.record.AdaptiveRecord` or its JSON object): the
    discard-rate / verification-rate frontier, and speedup per policy."""
    record = as_record(record)
    fig, (ax_f, ax_s) = axes((11, 4.4), ncols=2)
    fx, th = record.fixed, record.threshold
    ax_f.plot(*_rates(fx), "s--", color="0.4", ms=4, label="fixed K")
    for r in fx:
        ax_f.annotate(f"K={r.value:g}", (r.verification_rate, r.discard_rate), fontsize=7, xytext=(3, 3),
                      textcoords="offset points")
    un = record.threshold_unlagged or []
    confidence = record.confidence_rule
    lagged = "lagged (Algorithm 1)" if un else "learned head"
    for rows, color, label in ((th, "C1", "draft confidence ∏ max p ≥ h" if confidence else
                                f"SpecDec++ threshold, {lagged}"), (un, "C2", "threshold, unlagged")):
        if not rows:
            continue
        ax_f.plot(*_rates(rows), "o-", color=color, ms=4, label=label)
        for r in rows:
            ax_f.annotate(f"h={r.value:g}", (r.verification_rate, r.discard_rate), fontsize=6,
                          xytext=(3, -8), textcoords="offset points", color=color)
    ax_f.set_xlabel("verification rate N_target / N")
    ax_f.set_ylabel("discard rate N_discarded / N")
    for rows, style, color, label in ((fx, "s--", "0.4", "fixed K"),
                                      (th, "o-", "C1", "confidence h" if confidence else f"threshold h, {lagged}"),
                                      (un, "o-", "C2", "threshold h, unlagged")):
        if rows:
            ax_s.plot(nan_for_none(r.mean_draft_length for r in rows), nan_for_none(r.speedup for r in rows), style, color=color,
                      ms=4, label=label)
    ax_s.axhline(1.0, color="grey", lw=0.8)
    ax_s.set_xlabel("mean draft length per iteration")
    ax_s.set_ylabel("speedup over plain sampling (measured)")
    for ax in (ax_f, ax_s):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    pair = record.model_pair
    rule = "the draft's confidence" if confidence else "learned head"
    fig.suptitle(f"Dynamic draft length on {pair.target} / {pair.draft} ({pair.device}): {rule} vs fixed K",
                 fontsize=10)
    return fig


def _split(part, which: str) -> float:
    value = None if part is None else getattr(part, which)
    return float("nan") if value is None else value


def _weighted_loss_note(hd) -> str:
    note = ""
    if hd.l2 is not None and hd.l2_validation_loss is not None:
        note += f" Ridge penalty l2 = {hd.l2:g}, chosen on held-out training prompts."
    wl, wc = hd.weighted_loss, hd.weighted_loss_constant
    if wl is not None and wc is not None and wl.test is not None and wc.test is not None:
        note += (f" Weighted loss (12) on the test rows, the objective itself: head {wl.test:.4f} against "
                 f"{wc.test:.4f} for the best constant under the same weights.")
    return note


def _head_text(record) -> str:
    hd, s = record.head, record.settings
    if record.confidence_rule:
        return f"Rule: {hd.description}."
    draft = record.model_pair.draft
    # a feature head learns from its own drafting (records before the field: every feature head did)
    default = "on-policy" if draft in ("eagle", "medusa") or draft.startswith("head:") else "mixing"
    if (s.train_data or default) == "on-policy":
        data = ("rows of its own drafting at fixed K" + (f" = {s.train_draft_length}" if s.train_draft_length
                                                         is not None else "") + ", state after each drafted token")
    else:
        data = f"token mixing r = {s.mix}"
    rows = hd.rows
    return (f"Head: linear on the draft's final hidden state ({hd.features} features), weighted loss (12) with "
            f"w_rej = {hd.w_rej}, trained on {rows.train:,} rows from {s.train_prompts} prompts × "
            f"{s.train_tokens} tokens ({data}); held out: {rows.test:,} rows. Binary "
            f"KL(P ‖ P̂): train {_split(hd.binary_kl, 'train'):.4f}, test {_split(hd.binary_kl, 'test'):.4f} "
            f"(the mean label as a constant: {_split(hd.binary_kl_constant, 'test'):.4f}); correlation of P̂ with P on "
            f"the test rows {fmt(None if hd.correlation is None else hd.correlation.test)}."
            + _weighted_loss_note(hd))


def _cell(value, interval, digits: int = 3) -> str:
    """``value [low, high]`` of a prediction, or ``–`` where there is none."""
    if interval is None or value is None:
        return "–"
    return f"{value:.3f} [{interval.low:.{digits}f}, {interval.high:.{digits}f}]"


def adaptive_markdown(record, title: str | None = None) -> str:
    """The Markdown of an ``llm_bridge.adaptive`` record (typed or its JSON object): the head, one row per policy,
    the best of each kind."""
    record = as_record(record)
    pair, s, base = record.model_pair, record.settings, record.baseline
    un = record.threshold_unlagged or []
    confidence = record.confidence_rule
    what = "Dynamic draft length (the draft's confidence)" if confidence else "SpecDec++"
    lines = [f"## {title or what + ' on the real pair: ' + pair.target + ' / ' + pair.draft}", "",
             _head_text(record), "",
             f"Loop: {s.prompts} prompts × {s.max_new_tokens} tokens, token verification, K_max = "
             f"{s.max_length}; plain sampling {base.tokens_per_s:.1f} tokens/s in the same run"
             + (" (each batch of prompts decoded by plain sampling and every policy in turn: speedup [smallest, "
                "largest] over those timing rounds)." if base.rounds else ".") + code_text(s),
             *peer_text(record), "",
             *([f"**Unreliable timing: {record.unreliable_timing}.** Tokens/s and speedups below were measured "
                "on a machine that was not quiet.", ""] if record.unreliable_timing else []),
             *timing_text(record),
             "| policy | block efficiency [95% CI] | predicted [95%] | mean draft length | discard rate "
             "| verification rate | latency (cost model, ms/token) | tokens/s | speedup | predicted speedup |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    names = {"fixed": "fixed K = {:g}", "threshold": ("confidence h = {:g}" if confidence else "threshold h = {:g}")
             + (" (lagged)" if un else ""),
             "threshold_unlagged": "threshold h = {:g} (unlagged)"}
    for r in record.fixed + record.threshold + un:
        be = r.block_efficiency
        name = names.get(r.policy, r.policy + " {}").format(r.value)
        si = r.speedup_spread
        spread = "" if not si else f" [{si.low:.2f}, {si.high:.2f}]"
        latency = "–" if r.latency_ms is None else f"{r.latency_ms:.2f}"
        lines.append(f"| {name} | {be.mean:.3f} [{be.low:.3f}, {be.high:.3f}] | "
                     f"{_cell(r.predicted_block_efficiency, r.predicted_block_efficiency_interval)} | "
                     f"{fmt(r.mean_draft_length, 2)} | {fmt(r.discard_rate)} | {fmt(r.verification_rate)} | {latency} | "
                     f"{fmt(r.tokens_per_s, 1)} | {fmt(r.speedup)}{spread} | "
                     f"{_cell(r.predicted_speedup, r.predicted_speedup_interval, 2)} |")
    lines.append("")
    if record.fixed:
        best_f = max(record.fixed, key=lambda r: r.tokens_per_s or 0.0)
        for rows, kind in ((record.threshold, "lagged threshold" if un else "confidence" if confidence
                            else "threshold"), (un, "unlagged threshold")):
            if rows:
                best = max(rows, key=lambda r: r.tokens_per_s or 0.0)
                lines.append(f"Best {kind} h = {best.value:g}: {fmt(best.tokens_per_s, 1)} tokens/s against the best "
                             f"fixed K = {best_f.value:g}: {fmt(best_f.tokens_per_s, 1)} tokens/s "
                             f"({_gain(best.tokens_per_s, best_f.tokens_per_s)}).")
    for key, text in ({} if confidence else record.rules or {}).items():  # the confidence rule: stated above
        lines.append(f"*{key}*: {text}.")
    if un:
        lines.append("The lagged rule never stops after one token, so only the unlagged rule is like for like with "
                     "fixed K = 1.")
    methods = sorted({r.prediction_method or "" for r in record.fixed} - {""})
    predicted_rule = any(r.predicted_block_efficiency is not None for r in record.threshold)
    rule_methods = sorted({r.prediction_method or "" for r in record.threshold} - {""} - set(methods))
    if methods:
        rule_name = " and the confidence rule" if confidence else " and the threshold rules"
        note = next((r.speedup_prediction.note for r in record.threshold
                     if r.speedup_prediction and r.speedup_prediction.note), "no prediction")
        lines.append("*Predicted* (fixed K" + (rule_name if predicted_rule else "") + "): "
                     + "; ".join(methods + rule_methods) + (
                         "." if predicted_rule else ". The confidence rule has no prediction here." if confidence else
                         f". The threshold rules: {note}."))
    if any(r.predicted_speedup is not None for r in record.fixed):
        lines.append("*Predicted speedup*: the cost profile (plain decoding, t_target(n) and a zero-acceptance dry run "
                     "of each policy, on the prediction prompts) charged to the prediction's replays, batch by batch; "
                     "*speedup*: measured, with its 95 % confidence interval (paired bootstrap over the timing rounds). "
                     "The cost model's latency counts one sequence's calls, so it is given at batch 1 only.")
    return "\n".join(lines) + "\n"


def _gain(value, reference) -> str:
    if not value or not reference:
        return "–"
    return f"{100 * (value / reference - 1):+.1f} %"
