"""Markdown and plots of a ``llm_bridge.validate`` record (used by the command, the report and the notebook)."""

from __future__ import annotations

import json
import math
from pathlib import Path

__all__ = ["markdown", "render", "write_outputs"]


def _f(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def markdown(record: dict, title: str | None = None) -> str:
    """A Markdown summary: setup, drafter, baseline and peer, one row per run, losslessness."""
    pair, s, base = record["model_pair"], record["settings"], record["baseline"]
    lines = [f"## {title or 'Real model pair: ' + pair['target'] + ' / ' + pair['draft']}", "",
             f"Target `{pair['target']}`, draft `{pair['draft']}` on {pair['device']} ({pair['dtype']}, "
             f"{s['threads']} threads, torch {s['torch']}, transformers {s['transformers']}); {s['prompts']} prompts "
             f"× {s['max_new_tokens']} new tokens, temperature {s['temperature']}, top-k {s['top_k']}, "
             f"top-p {s['top_p']}, batch {s['batch_size']}, seed {s['seed']}.", ""]
    prof, drafter = record["profile"], record["drafter"]
    t_target = ", ".join(f"n={k}: {v:.1f}" for k, v in prof["t_target_ms"].items())
    lines += [f"Drafter: first-position acceptance 1 − TV = {_f(drafter['acceptance'])}, cost ratio "
              f"t_draft / t_target(1) = {_f(drafter['cost_ratio'])} (t_draft = {_f(prof['t_draft_ms'], 1)} ms; "
              f"t_target(n) in ms at a {prof['context_tokens']}-token context: {t_target}).", "",
              f"Plain target sampling: **{_f(base['tokens_per_s'], 1)} tokens/s** in the same run."]
    hf = record.get("hf_assisted")
    if hf:
        lines.append(f"Hugging Face assisted generation ({hf['mode']}): **{_f(hf['tokens_per_s'], 1)} tokens/s** "
                     f"(speedup {_f(hf['speedup'], 2)}), acceptance rate {_f(hf['acceptance_rate'])}.")
    lines += ["", "| verifier | L | block efficiency [95% CI] | predicted | E[τ+1 given drafts] | acceptance rate "
              "| tokens/s | speedup [CI] | predicted speedup [range] | verifier / target call |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in record["runs"]:
        be, pi, si, psi = (r["block_efficiency"], r["predicted_block_efficiency_interval"], r["speedup_interval"],
                           r["predicted_speedup_interval"])
        lines.append(f"| {r['verifier']} | {r['L']} | {_f(be['mean'])} [{_f(be['low'])}, {_f(be['high'])}] | "
                     f"{_f(r['predicted_block_efficiency'])} [{_f(pi['low'])}, {_f(pi['high'])}] | "
                     f"{_f(r['expected_block_efficiency_given_drafts'])} | {_f(r['acceptance_rate'])} | "
                     f"{_f(r['tokens_per_s'], 1)} | {_f(r['speedup'], 2)} [{_f(si['low'], 2)}, {_f(si['high'], 2)}] | "
                     f"{_f(r['predicted_speedup'], 2)} [{_f(psi['low'], 2)}, {_f(psi['high'], 2)}] | "
                     f"{100 * r['verify_fraction_of_target_call']:.1f} % |")
    lines += ["", "Predicted block efficiency: the token (eq. (4)), block (eq. (17)) or block-OT (eq. (8)) formula on "
              "the per-position two-point reduction of the measured rows (same TV per position); range from "
              "resampling iterations. *E[τ+1 given drafts]* averages the verifier's exact conditional law on the real "
              "rows. Predicted speedup: the cost model with the measured t_draft, t_target(L+1) and loop overhead."]
    loss = record.get("lossless", {})
    if "verifiers" in loss:
        lines += ["", f"Losslessness (top-k {loss['sampling']['top_k']}, L = {loss['draft_length']}, "
                  f"{loss['samples']} draws per side):", "",
                  "| verifier | max abs(first-token law − target row) | draft paths | G-test p-value |", "|---|---|---|---|"]
        for name, v in loss["verifiers"].items():
            lines.append(f"| {name} | {v['first_token_max_deviation']:.2e} | {v['draft_paths']} | "
                         f"{v['two_sample']['p_value']:.3g} |")
    elif loss:
        lines += ["", f"Losslessness: {loss.get('status')}"]
    return "\n".join(lines) + "\n"


def render(record: dict):
    """A 2 × 2 figure: block efficiency and speedup (measured vs predicted) against L, t_target(n), acceptance per position."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 8), layout="constrained")
    ax_be, ax_sp, ax_t, ax_pos = fig.subplots(2, 2).ravel()
    names = sorted({r["verifier"] for r in record["runs"]}, key=[r["verifier"] for r in record["runs"]].index)
    for c, name in enumerate(names):
        runs = [r for r in record["runs"] if r["verifier"] == name]
        Ls = [r["L"] for r in runs]
        be = [r["block_efficiency"] for r in runs]
        ax_be.errorbar(Ls, [b["mean"] for b in be], yerr=[[b["mean"] - b["low"] for b in be],
                                                          [b["high"] - b["mean"] for b in be]],
                       fmt="o", color=f"C{c}", capsize=3, label=f"{name} measured")
        ax_be.plot(Ls, [r["predicted_block_efficiency"] for r in runs], "--", color=f"C{c}", label=f"{name} predicted")
        ax_sp.plot(Ls, [r["speedup"] for r in runs], "o", color=f"C{c}", label=f"{name} measured")
        ax_sp.plot(Ls, [r["predicted_speedup"] for r in runs], "--", color=f"C{c}", label=f"{name} predicted")
        last = runs[-1]
        pos = [x for x in last["acceptance_per_position"]]
        ax_pos.plot(range(1, len(pos) + 1), pos, "o-", color=f"C{c}", label=f"{name}, L={last['L']}: accepted")
    if record["runs"]:
        tv = record["runs"][-1]["tv_per_position"]
        ax_pos.plot(range(1, len(tv) + 1), [1 - x for x in tv], "k:", label="1 − TV(draft, target)")
    ax_sp.axhline(1.0, color="grey", lw=0.8)
    hf = record.get("hf_assisted")
    if hf:
        ax_sp.axhline(hf["speedup"], color="C7", ls="-.", label="HF assisted")
    prof = record["profile"]["t_target_ms"]
    ax_t.plot([int(k) for k in prof], list(prof.values()), "o-", label="t_target(n)")
    ax_t.axhline(record["profile"]["t_draft_ms"], color="C1", ls="--", label="t_draft (one token)")
    for ax, title, xl in ((ax_be, "block efficiency (tokens per target call)", "draft length L"),
                          (ax_sp, "speedup over plain sampling", "draft length L"),
                          (ax_t, "time per call (ms)", "tokens scored per target call n"),
                          (ax_pos, "acceptance per draft position", "position in the draft")):
        ax.set_title(title)
        ax.set_xlabel(xl)
        ax.legend(fontsize=7)
    pair = record["model_pair"]
    fig.suptitle(f"{pair['target']} / {pair['draft']} on {pair['device']}")
    return fig


def write_outputs(record: dict, out_dir, stem: str) -> list[Path]:
    """``out_dir/stem.json``, ``.md`` and ``.png``; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.json", out_dir / f"{stem}.md", out_dir / f"{stem}.png"]
    paths[0].write_text(json.dumps(record, indent=1) + "\n")
    paths[1].write_text(markdown(record))
    render(record).savefig(paths[2], dpi=110)
    return paths
