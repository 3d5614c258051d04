"""The audit's report card: Markdown and JSON beside one figure (observed vs expected first-token mass by PIT bin,
and the power curve)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

__all__ = ["exact_markdown", "render_card", "write_card", "write_exact_card"]


def _fmt_p(p: float) -> str:
    return "< 1e-300" if p == 0 else f"{p:.3g}"


def markdown(report) -> str:
    r = report if isinstance(report, dict) else report.as_dict()
    t, b, pw, acc = r["tests"], r["bias"], r["power"], r["acceptance"]
    need = dict(zip(pw["deltas"], pw["samples_for_power_0.99"], strict=True))
    lines = [f"# Audit of `{r['sampler']}`: **{r['verdict']}**", "",
             f"p-value {_fmt_p(r['p_value'])} (level {r['alpha']:g}, Bonferroni over every test) from {r['samples']:,} "
             f"samples on {r['rows']}, drafts of {r['draft_length']} tokens, in {r['seconds']:.1f} s. Failed tests: "
             f"{', '.join(r.get('failed_tests', [])) or 'none'}.", "",
             "| test | statistic | p-value |", "|---|---|---|",
             f"| first token, PIT bins (G) | {t['first_token']['g_statistic']:.1f} | {_fmt_p(t['first_token']['g_p_value'])} |",
             f"| first token, PIT (KS) | {t['first_token']['ks_statistic']:.4f} | {_fmt_p(t['first_token']['ks_p_value'])} |",
             f"| all positions, PIT bins (G) | {t['all_positions']['g_statistic']:.1f} | "
             f"{_fmt_p(t['all_positions']['g_p_value'])} |",
             f"| all positions, PIT (KS) | {t['all_positions']['ks_statistic']:.4f} | "
             f"{_fmt_p(t['all_positions']['ks_p_value'])} |",
             f"| first token per row pair (pooled X², z) | {t['per_row_pair']['z']:.2f} | "
             f"{_fmt_p(t['per_row_pair']['p_value'])} |"]
    if "p_value" in acc:
        lines.append(f"| mean accepted vs {acc['verifier']}'s exact value (z) | {acc['z']:.2f} | {_fmt_p(acc['p_value'])} |")
    if "joint_with_verifier" in t:
        j = t["joint_with_verifier"]
        lines.append(f"| (accepted, token) vs {acc['verifier']}'s exact law, PIT (G / KS) | {j['g_statistic']:.1f} / "
                     f"{j['ks_statistic']:.4f} | {_fmt_p(j['g_p_value'])} / {_fmt_p(j['ks_p_value'])} |")
    fb = b["first_token"]
    lines += ["", f"Estimated bias of the first emitted token (total variation over the PIT bins): {fb['binned_tv']:.4f} "
              f"[{fb['low']:.4f}, {fb['high']:.4f}] ({fb['confidence']:.0%}, simultaneous over the bins; bias-corrected point; raw "
              f"{fb['binned_tv_raw']:.4f}, which an unbiased sampler keeps below {fb['null_level']:.4f} at this size, "
              "99 %).",
              f"Mean accepted drafts {acc['mean_accepted']:.4f}"
              + (f" (its verifier's exact value on the same drafts: {acc['expected_accepted']:.4f})" if "p_value" in acc
                 else "") + ".", "",
              f"Power of the binned test against a sampler that mixes draft mass into the emitted token ({pw['bias_model']}; "
              f"mean TV(p, q) of the first rows {pw['mean_tv_first_row']:.3f}):", "",
              "| TV bias δ | power at this n | samples for power 0.99 |", "|---|---|---|"]
    for d, pwr in zip(pw["deltas"], pw["power_at_n"], strict=True):
        lines.append(f"| {d:g} | {pwr:.3f} | {need[d]:,.0f} |")
    lines += ["", "A bias whose direction changes from row to row is seen by the per-row-pair test; the power above is the "
              "pooled test's against bias toward the draft."]
    return "\n".join(lines) + "\n"


def render_card(report):
    """The figure: observed vs expected first-token mass by PIT bin (with the draft-mixture direction), power curve."""
    from ..figures.common import axes

    r = report if isinstance(report, dict) else report.as_dict()
    fig, (left, right) = axes((11, 4.0), ncols=2)
    bins = r["bins"]
    centres = 0.5 * (np.array(bins["edges"][:-1]) + np.array(bins["edges"][1:]))
    width = 1.0 / len(centres)
    left.bar(centres, bins["first_token_observed"], width=width * 0.9, color="C0", alpha=0.7, label="observed")
    left.step(np.array(bins["edges"]), np.r_[bins["expected"], bins["expected"][-1]], where="post", color="k",
              label="target (uniform)")
    left.step(np.array(bins["edges"]), np.r_[bins["draft_mixture"], bins["draft_mixture"][-1]], where="post",
              color="C3", ls=":", label="if emitted from the draft row")
    left.set_xlabel("randomised PIT of the first emitted token (tokens ordered by q/p)")
    left.set_ylabel("fraction of samples")
    left.set_title(f"{r['sampler']}: {r['verdict']} (p = {_fmt_p(r['p_value'])})", fontsize=9)
    left.legend(fontsize=7)
    pw = r["power"]
    right.loglog(pw["deltas"], pw["samples_for_power_0.99"], "o-", color="C2", label="samples for power 0.99")
    right.axhline(r["samples"], color="k", ls="--", lw=0.8, label=f"this audit: {r['samples']:,}")
    right.set_xlabel("TV bias δ of the emitted token (toward the draft)")
    right.set_ylabel("samples")
    right.set_title("power curve of the binned test", fontsize=9)
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.grid(alpha=0.3)
    return fig


def write_card(report, out_dir, stem: str = "audit") -> dict:
    """``stem``.md, ``stem``.json and ``stem``.png in ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    r = report if isinstance(report, dict) else report.as_dict()
    paths = {"markdown": out / f"{stem}.md", "json": out / f"{stem}.json", "figure": out / f"{stem}.png"}
    paths["json"].write_text(json.dumps(r, indent=2) + "\n")
    paths["markdown"].write_text(markdown(r).replace("\n\n", f"\n\n![audit]({stem}.png)\n\n", 1))
    fig = render_card(r)
    fig.savefig(paths["figure"], dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return {k: str(v) for k, v in paths.items()}


def exact_markdown(report: dict) -> str:
    """The exact audit's report (:func:`otspec.audit.exact.exact_audit`) as Markdown."""
    law, acc = report["output_law"], report["acceptance"]
    lines = [f"# Exact audit of `{report['sampler']}`: **{report['verdict']}**", "",
             f"p-value {_fmt_p(report['p_value'])} (level {report['alpha']:g}, Bonferroni over the tests; failed: "
             f"{', '.join(report['failed_tests']) or 'none'}). Every drafted block of {report['pairs']} synthetic row "
             f"pairs at V = {report['vocab']}, L = {report['draft_length']} enumerated; the sampler's law per block "
             f"measured on {report['draws_per_block']:,} stratified draws.", "",
             "| output law vs the target's | value |", "|---|---|",
             f"| largest deviation of a cell | {law['max_deviation']:.3g} |", f"| total variation | {law['tv']:.3g} |",
             f"| largest \\|z\\| | {law['max_abs_z']:.2f} |"]
    if "p_value" in acc:
        lines += ["", f"Mean accepted {acc['mean_accepted']:.4f} against {acc['verifier']} verification's exact "
                  f"{acc['exact']:.4f} (z = {acc['z']:.2f}, p = {_fmt_p(acc['p_value'])})."]
    return "\n".join(lines) + "\n"


def write_exact_card(report: dict, out_dir, stem: str = "audit") -> dict:
    """``stem``.md and ``stem``.json of an exact audit in ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out / f"{stem}.md", "json": out / f"{stem}.json"}
    paths["json"].write_text(json.dumps(report, indent=2) + "\n")
    paths["markdown"].write_text(exact_markdown(report))
    return {k: str(v) for k, v in paths.items()}
