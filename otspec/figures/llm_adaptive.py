"""``llm_bridge.adaptive`` records: the discard-rate / verification-rate frontier and the Markdown summary.

A record's threshold rows are SpecDec++'s learned-head rule (lagged and unlagged) or, for a feature-level draft
head, the draft's own confidence (``head["rule"] == "confidence"``); fixed K sits beside them.
"""

from __future__ import annotations

from .common import axes
from .llm_text import code_text, fmt, peer_text, timing_text

__all__ = ["adaptive_markdown", "render_adaptive_record"]


def render_adaptive_record(record: dict):
    """An ``llm_bridge.adaptive`` record: the discard-rate / verification-rate frontier, and speedup per policy."""
    fig, (ax_f, ax_s) = axes((11, 4.4), ncols=2)
    fx, th = record["fixed"], record["threshold"]
    ax_f.plot([r["verification_rate"] for r in fx], [r["discard_rate"] for r in fx], "s--", color="0.4", ms=4,
              label="fixed K")
    for r in fx:
        ax_f.annotate(f"K={r['value']}", (r["verification_rate"], r["discard_rate"]), fontsize=7, xytext=(3, 3),
                      textcoords="offset points")
    un = record.get("threshold_unlagged") or []
    confidence = _confidence_rule(record)
    lagged = "lagged (Algorithm 1)" if un else "learned head"
    for rows, color, label in ((th, "C1", "draft confidence ∏ max p ≥ h" if confidence else
                                f"SpecDec++ threshold, {lagged}"), (un, "C2", "threshold, unlagged")):
        if not rows:
            continue
        ax_f.plot([r["verification_rate"] for r in rows], [r["discard_rate"] for r in rows], "o-", color=color, ms=4,
                  label=label)
        for r in rows:
            ax_f.annotate(f"h={r['value']:g}", (r["verification_rate"], r["discard_rate"]), fontsize=6,
                          xytext=(3, -8), textcoords="offset points", color=color)
    ax_f.set_xlabel("verification rate N_target / N")
    ax_f.set_ylabel("discard rate N_discarded / N")
    for rows, style, color, label in ((fx, "s--", "0.4", "fixed K"),
                                      (th, "o-", "C1", "confidence h" if confidence else f"threshold h, {lagged}"),
                                      (un, "o-", "C2", "threshold h, unlagged")):
        if rows:
            ax_s.plot([r["mean_draft_length"] for r in rows], [r["speedup"] for r in rows], style, color=color, ms=4,
                      label=label)
    ax_s.axhline(1.0, color="grey", lw=0.8)
    ax_s.set_xlabel("mean draft length per iteration")
    ax_s.set_ylabel("speedup over plain sampling (measured)")
    for ax in (ax_f, ax_s):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    pair = record["model_pair"]
    rule = "the draft's confidence" if confidence else "learned head"
    fig.suptitle(f"Dynamic draft length on {pair['target']} / {pair['draft']} ({pair['device']}): {rule} vs fixed K",
                 fontsize=10)
    return fig


def _weighted_loss_note(hd: dict) -> str:
    wl, wc = hd.get("weighted_loss", {}), hd.get("weighted_loss_constant", {})
    note = ""
    if "l2" in hd and "l2_validation_loss" in hd:
        note += f" Ridge penalty l2 = {hd['l2']:g}, chosen on held-out training prompts."
    if "test" in wl and "test" in wc:
        note += (f" Weighted loss (12) on the test rows, the objective itself: head {wl['test']:.4f} against "
                 f"{wc['test']:.4f} for the best constant under the same weights.")
    return note


def _confidence_rule(record: dict) -> bool:
    """Whether an adaptive record's threshold rows are the draft-confidence rule (no learned head)."""
    return (record.get("head") or {}).get("rule") == "confidence"


def _head_text(record: dict) -> str:
    hd, s = record["head"], record["settings"]
    if _confidence_rule(record):
        return f"Rule: {hd['description']}."
    kl = hd.get("binary_kl", {})
    const = hd.get("binary_kl_constant", {})
    draft = str(record["model_pair"].get("draft", ""))
    # a feature head learns from its own drafting (records before the field: every feature head did)
    if s.get("train_data", "on-policy" if draft in ("eagle", "medusa") or draft.startswith("head:") else "mixing") \
            == "on-policy":
        data = ("rows of its own drafting at fixed K" + (f" = {s['train_draft_length']}" if "train_draft_length" in s
                                                         else "") + ", state after each drafted token")
    else:
        data = f"token mixing r = {s['mix']}"
    return (f"Head: linear on the draft's final hidden state ({hd['features']} features), weighted loss (12) with "
             f"w_rej = {hd['w_rej']}, trained on {hd['rows']['train']:,} rows from {s['train_prompts']} prompts × "
             f"{s['train_tokens']} tokens ({data}); held out: {hd['rows']['test']:,} rows. Binary "
             f"KL(P ‖ P̂): train {kl.get('train', float('nan')):.4f}, test {kl.get('test', float('nan')):.4f} "
             f"(the mean label as a constant: {const.get('test', float('nan')):.4f}); correlation of P̂ with P on the "
             f"test rows {fmt(hd.get('correlation', {}).get('test'))}." + _weighted_loss_note(hd))


def adaptive_markdown(record: dict, title: str | None = None) -> str:
    """The Markdown of an ``llm_bridge.adaptive`` record: the head, one row per policy, the best of each kind."""
    pair, s = record["model_pair"], record["settings"]
    un = record.get("threshold_unlagged") or []
    confidence = _confidence_rule(record)
    what = "Dynamic draft length (the draft's confidence)" if confidence else "SpecDec++"
    lines = [f"## {title or what + ' on the real pair: ' + pair['target'] + ' / ' + pair['draft']}", "",
             _head_text(record), "",
             f"Loop: {s['prompts']} prompts × {s['max_new_tokens']} tokens, token verification, K_max = "
             f"{s['max_length']}; plain sampling {record['baseline']['tokens_per_s']:.1f} tokens/s in the same run"
             + (" (each batch of prompts decoded by plain sampling and every policy in turn: speedup [smallest, "
                "largest] over those timing rounds)." if record["baseline"].get("rounds") else ".") + code_text(s),
             *peer_text(record), "",
             *([f"**Unreliable timing: {record['unreliable_timing']}.** Tokens/s and speedups below were measured "
                "on a machine that was not quiet.", ""] if record.get("unreliable_timing") else []),
             *timing_text(record),
             "| policy | block efficiency [95% CI] | predicted [95%] | mean draft length | discard rate "
             "| verification rate | latency (cost model, ms/token) | tokens/s | speedup | predicted speedup |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    names = {"fixed": "fixed K = {:d}", "threshold": ("confidence h = {:g}" if confidence else "threshold h = {:g}")
             + (" (lagged)" if un else ""),
             "threshold_unlagged": "threshold h = {:g} (unlagged)"}
    for r in record["fixed"] + record["threshold"] + un:
        be = r["block_efficiency"]
        name = names.get(r["policy"], r["policy"] + " {}").format(r["value"])
        si = r.get("speedup_ci") or r.get("speedup_interval")
        spread = "" if not si else f" [{si['low']:.2f}, {si['high']:.2f}]"
        pi = r.get("predicted_block_efficiency_interval")
        pred = "–" if not pi else f"{r['predicted_block_efficiency']:.3f} [{pi['low']:.3f}, {pi['high']:.3f}]"
        psi = r.get("predicted_speedup_interval")
        pred_sp = "–" if not psi else f"{r['predicted_speedup']:.3f} [{psi['low']:.2f}, {psi['high']:.2f}]"
        latency = "–" if r.get("latency_ms") is None else f"{r['latency_ms']:.2f}"
        lines.append(f"| {name} | {be['mean']:.3f} [{be['low']:.3f}, {be['high']:.3f}] | {pred} | "
                     f"{r['mean_draft_length']:.2f} "
                     f"| {r['discard_rate']:.3f} | {r['verification_rate']:.3f} | {latency} | "
                     f"{r['tokens_per_s']:.1f} | {r['speedup']:.3f}{spread} | {pred_sp} |")
    best_f = max(record["fixed"], key=lambda r: r["tokens_per_s"])
    lines.append("")
    for rows, kind in ((record["threshold"], "lagged threshold" if un else "confidence" if confidence else "threshold"),
                       (un, "unlagged threshold")):
        if rows:
            best = max(rows, key=lambda r: r["tokens_per_s"])
            lines.append(f"Best {kind} h = {best['value']:g}: {best['tokens_per_s']:.1f} tokens/s against the best "
                         f"fixed K = {best_f['value']}: {best_f['tokens_per_s']:.1f} tokens/s "
                         f"({100 * (best['tokens_per_s'] / best_f['tokens_per_s'] - 1):+.1f} %).")
    for key, text in ({} if confidence else record.get("rules") or {}).items():  # the confidence rule: stated above
        lines.append(f"*{key}*: {text}.")
    if un:
        lines.append("The lagged rule never stops after one token, so only the unlagged rule is like for like with "
                     "fixed K = 1.")
    methods = sorted({r.get("prediction_method") or "" for r in record["fixed"]} - {""})
    predicted_rule = any(r.get("predicted_block_efficiency") is not None for r in record["threshold"])
    rule_methods = sorted({r.get("prediction_method") or "" for r in record["threshold"]} - {""} - set(methods))
    if methods:
        rule_name = " and the confidence rule" if confidence else " and the threshold rules"
        lines.append("*Predicted* (fixed K" + (rule_name if predicted_rule else "") + "): "
                     + "; ".join(methods + rule_methods) + (
                         "." if predicted_rule else ". The confidence rule has no prediction here." if confidence else
                         ". The threshold rules: " + next((r["speedup_prediction"]["note"] for r in record["threshold"]
                                                           if (r.get("speedup_prediction") or {}).get("note")),
                                                          "no prediction") + "."))
    if any(r.get("predicted_speedup") is not None for r in record["fixed"]):
        lines.append("*Predicted speedup*: the cost profile (plain decoding, t_target(n) and a zero-acceptance dry run "
                     "of each policy, on the prediction prompts) charged to the prediction's replays, batch by batch; "
                     "*speedup*: measured, with its 95 % confidence interval (paired bootstrap over the timing rounds). "
                     "The cost model's latency counts one sequence's calls, so it is given at batch 1 only.")
    return "\n".join(lines) + "\n"
