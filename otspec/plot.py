"""``python -m otspec.plot NAME``: compute a figure's data, write ``NAME.json`` and ``NAME.png``.

Each figure is a data function from :mod:`otspec.experiments` plus a renderer
here. ``python -m otspec.plot all`` writes every figure; ``--out`` chooses the
PNG path (the JSON goes beside it); ``--scale`` shrinks the simulations.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
from pathlib import Path

import numpy as np

from .experiments import EXPERIMENTS
from .rejections import render_rejections
from .solvers.pareto import render_pareto

__all__ = ["FIGURES", "main", "render", "write_figure"]

DEFAULT_DIR = Path("figures")


def _ax():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    return fig, ax


def _finish(fig, ax, xlabel, ylabel, title):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _error_bars(ax, x, s, mean, low, high, color, label):
    mean, low, high = map(np.asarray, (s[mean], s[low], s[high]))
    ax.errorbar(x, mean, yerr=[mean - low, high - mean], fmt="o", ms=3.5, capsize=2.5, color=color, label=label)


def render_token(data: dict):
    fig, ax = _ax()
    x = data["draft_lengths"]
    for k, s in enumerate(data["series"]):
        color = f"C{k}"
        ax.plot(x, s["closed_form"], "-", color=color, label=f"draft Ber({s['draft_p']}): eq. (11a)")
        ax.plot(x, s["exact"], "x", color=color, ms=7, label="exact enumeration" if k == 0 else None)
        _error_bars(ax, x, s, "mc_mean", "mc_low", "mc_high", color, "Monte Carlo, 95% CI" if k == 0 else None)
    return _finish(fig, ax, "draft length L", "E[accepted draft tokens] per iteration", data["title"])


def render_decode(data: dict):
    fig, ax = _ax()
    x = data["draft_lengths"]
    for k, s in enumerate(data["series"]):
        color = f"C{k}"
        ax.plot(x, s["closed_form"], "-", color=color, label=f"draft Ber({s['draft_p']}): E[tau] + 1")
        _error_bars(ax, x, s, "measured", "low", "high", color, "decode loop, 95% CI" if k == 0 else None)
    return _finish(fig, ax, "draft length L", "block efficiency (tokens / target call)", data["title"])


VERIFIER_STYLE = {"token": ("token verification", "o"), "block": ("published block (on-path)", "s"),
                  "block_v1": ("v1 block (backward, optimal)", "^")}


def render_block(data: dict):
    import matplotlib.pyplot as plt

    series = data["series"]
    fig, axes = plt.subplots(1, len(series), figsize=(4.2 * len(series), 4.2), dpi=120, sharey=False)
    x = np.asarray(data["draft_lengths"])
    for ax, s in zip(np.atleast_1d(axes), series, strict=True):
        ax.plot(x, s["token"], "-", color="C0", label="token, eq. (11a)")
        ax.plot(x, s["block_onpath"], "-", color="C1", label="published block, eq. (17)")
        ax.plot(x, s["block_optimal"], "-", color="C2", label="block-OT optimum, eq. (11b)")
        for k, (name, (label, marker)) in enumerate(VERIFIER_STYLE.items()):
            mc = s[f"mc_{name}"]
            mean, low, high = map(np.asarray, (mc["mean"], mc["low"], mc["high"]))
            ax.errorbar(x + 0.12 * (k - 1), mean, yerr=[mean - low, high - mean], fmt=marker, ms=3.5,
                        capsize=2, color=f"C{k}", label=f"{label}: Monte Carlo")
        ax.set_title(f"draft Ber({s['draft_p']}), target Ber({data['target_p']})", fontsize=9)
        ax.set_xlabel("draft length L")
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("E[accepted draft tokens] per iteration")
    np.atleast_1d(axes)[0].legend(fontsize=7)
    fig.suptitle(data["title"], fontsize=10)
    return fig


def render_block_e2e(data: dict):
    import matplotlib.pyplot as plt

    rows = data["rows"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.4), dpi=120, gridspec_kw={"width_ratios": [3, 2]})
    width = 0.26
    for k, (name, (label, _)) in enumerate(VERIFIER_STYLE.items()):
        vals = np.array([r[name]["block_efficiency"] for r in rows])
        low = np.array([r[name]["low"] for r in rows])
        high = np.array([r[name]["high"] for r in rows])
        ax.bar(np.arange(len(rows)) + (k - 1) * width, vals, width, color=f"C{k}", label=label,
               yerr=[vals - low, high - vals], capsize=3)
    ax.set_xticks(np.arange(len(rows)))
    ax.set_xticklabels([r["label"] for r in rows], fontsize=8)
    ax.set_ylim(max(0.0, min(r[n]["low"] for r in rows for n in VERIFIER_STYLE) - 0.5), None)
    ax.set_ylabel("block efficiency (tokens / target call)")
    ax.set_title("long run: decode loop, 95% CI", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7)
    exact_rows = [r for r in rows if r["token"]["exact_accepted_iterations_1_2"] is not None]
    for k, name in enumerate(VERIFIER_STYLE):
        for j, r in enumerate(exact_rows):
            first, second = r[name]["exact_accepted_iterations_1_2"]
            x = j + (k - 1) * width
            ax2.plot([x - 0.08, x + 0.08], [first, second], "-", color=f"C{k}")
            ax2.plot(x - 0.08, first, "o", color=f"C{k}", ms=4)
            ax2.plot(x + 0.08, second, "s", color=f"C{k}", ms=4)
    ax2.set_xticks(np.arange(len(exact_rows)))
    ax2.set_xticklabels([r["label"] for r in exact_rows], fontsize=8)
    ax2.set_ylabel("exact E[accepted]: iteration 1 (o) -> 2 (s)")
    ax2.set_title("first two iterations from an empty context (exact)", fontsize=9)
    ax2.grid(alpha=0.3, axis="y")
    fig.suptitle(data["title"], fontsize=10)
    return fig


CURVE_STYLE = {
    "optimal": ("OTM optimum (i.i.d. drafts)", "-", "C0"),
    "optimal_without_replacement": ("optimum, drafts w/o replacement", ":", "C0"),
    "kseq": ("k-Seq at rho*", "--", "C1"),
    "multiround": ("multi-round (SpecInfer / MCSD)", "-", "C2"),
    "multiround_without_replacement": ("multi-round w/o replacement (MCSD)", ":", "C2"),
    "naive": ("naive (MCNS)", "-", "C7"),
}


def _curves_panel(ax, ks, values: dict, curves):
    for name in curves:
        label, style, color = CURVE_STYLE[name]
        pts = [(k, v) for k, v in zip(ks, values[name], strict=True) if v is not None]  # null: beyond a size limit
        if pts:
            ax.plot(*zip(*pts, strict=True), style, color=color, marker=".", ms=4, label=label)
    ax.set_xlabel("number of drafts k")
    ax.grid(alpha=0.3)


def _series_grid(data: dict, curves, title_of, extra=None):
    import matplotlib.pyplot as plt

    series = data["series"]
    fig, axes = plt.subplots(1, len(series), figsize=(3.4 * len(series), 3.8), dpi=120, sharey=True)
    for ax, s in zip(np.atleast_1d(axes), series, strict=True):
        _curves_panel(ax, data["ks"], s, curves)
        if extra:
            extra(ax, data, s)
        ax.set_title(title_of(s), fontsize=9)
    np.atleast_1d(axes)[0].set_ylabel("acceptance probability")
    np.atleast_1d(axes)[0].legend(fontsize=6.5)
    fig.suptitle(data["title"], fontsize=10)
    return fig


def _lp_marks(ax, data, s):
    ax.plot(data["lp_ks"], s["lp"], "x", color="k", ms=5, label="LP optimum (check)")


def render_fig4(data: dict):
    return _series_grid(data, ("optimal", "optimal_without_replacement", "kseq"),
                        lambda s: f"target Ber({s['target_p']})", _lp_marks)


def render_fig6(data: dict):
    return _series_grid(data, tuple(CURVE_STYLE), lambda s: f"target Ber({s['target_p']})")


def render_fig5(data: dict):
    return _series_grid(data, ("optimal", "kseq", "multiround", "naive"),
                        lambda s: f"target U({s['target_support']}), r = {s['r']:g}")


def render_mcsd_fig3(data: dict):
    fig, ax = _ax()
    _curves_panel(ax, data["ks"], data, tuple(CURVE_STYLE))
    ax.set_ylabel("acceptance probability (stationary average)")
    ax.set_title(data["title"], fontsize=9)
    ax.legend(fontsize=7)
    return fig


def render_trees(data: dict):
    fig, ax = _ax()
    rows = data["rows"]
    vals = np.array([r["block_efficiency"] for r in rows])
    err = [vals - np.array([r["low"] for r in rows]), np.array([r["high"] for r in rows]) - vals]
    ax.barh(np.arange(len(rows)), vals, xerr=err, color=[f"C{i}" for i in range(len(rows))], capsize=3)
    ax.set_yticks(np.arange(len(rows)))
    ax.set_yticklabels([f"{r['label']} ({r['tree_tokens']} draft tok.)" for r in rows], fontsize=7.5)
    ax.invert_yaxis()
    ax.set_xlabel("block efficiency (tokens / target call), 95% CI")
    ax.set_title(data["title"], fontsize=9)
    ax.grid(alpha=0.3, axis="x")
    return fig


#: Figures by name: (data function, renderer, default file stem).
FIGURES = {
    "token": (EXPERIMENTS["token"], render_token, "token_verification"),
    "decode": (EXPERIMENTS["decode"], render_decode, "decode_efficiency"),
    "block": (EXPERIMENTS["block"], render_block, "block_vs_token"),
    "block_e2e": (EXPERIMENTS["block_e2e"], render_block_e2e, "block_end_to_end"),
    "spectr_fig4": (EXPERIMENTS["spectr_fig4"], render_fig4, "spectr_fig4_bernoulli"),
    "spectr_fig5": (EXPERIMENTS["spectr_fig5"], render_fig5, "spectr_fig5_uniform"),
    "spectr_fig6": (EXPERIMENTS["spectr_fig6"], render_fig6, "spectr_fig6_multiround"),
    "mcsd_fig3": (EXPERIMENTS["mcsd_fig3"], render_mcsd_fig3, "mcsd_fig3_markov_acceptance"),
    "trees": (EXPERIMENTS["trees"], render_trees, "multidraft_trees"),
    "rejections": (EXPERIMENTS["rejections"], render_rejections, "rejections"),
    "pareto": (EXPERIMENTS["pareto"], render_pareto, "pareto"),
}


def render(name: str, data: dict):
    """Matplotlib figure for ``name`` from its data dict."""
    return FIGURES[name][1](data)


def write_figure(name: str, out: str | os.PathLike | None = None, scale: float = 1.0,
                 **data_kwargs) -> tuple[Path, Path, dict]:
    """Compute, render and save figure ``name``; returns (png path, json path, data).

    ``data_kwargs`` (e.g. ``draft=``, ``target=`` rows) go to the figure's data function.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; available: {', '.join(sorted(FIGURES))}")
    data_fn, _, stem = FIGURES[name]
    png = Path(out) if out is not None else DEFAULT_DIR / f"{stem}.png"
    if png.suffix.lower() != ".png":
        raise ValueError(f"--out must name a .png file, got {png}")
    png.parent.mkdir(parents=True, exist_ok=True)
    accepted = inspect.signature(data_fn).parameters
    unknown = [key for key in data_kwargs if key not in accepted]
    if unknown:
        raise ValueError(f"figure {name!r} does not take {', '.join('--' + k for k in unknown)}")
    data = {**data_fn(scale=scale, **data_kwargs), "figure": stem}  # the JSON names the figure it sits beside
    fig = render(name, data)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
    js = png.with_suffix(".json")
    js.write_text(json.dumps(data, indent=1) + "\n")
    return png, js, data


def _pair_rows(args) -> dict:
    """``--draft``/``--target`` as validated rows (both or neither)."""
    if (args.draft is None) != (args.target is None):
        raise ValueError("give both --draft and --target, or neither")
    if args.draft is None:
        return {}
    from .cli import CLIError, parse_probs

    try:
        draft, target = parse_probs(args.draft, "--draft"), parse_probs(args.target, "--target")
    except CLIError as exc:
        raise ValueError(str(exc)) from None
    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"vocabulary mismatch: --draft has {draft.vocab_size} tokens, --target has {target.vocab_size}")
    return {"draft": draft.probs, "target": target.probs}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m otspec.plot", description=__doc__.split("\n\n")[0])
    parser.add_argument("name", choices=sorted(FIGURES) + ["all"], help="figure to draw")
    parser.add_argument("--out", help="PNG path (default figures/<name>.png; JSON beside it)")
    parser.add_argument("--scale", type=float, default=1.0, help="simulation size factor (default 1)")
    parser.add_argument("--draft", metavar="P", help="draft row for figures of one pair (e.g. pareto): 0.5,0.3,0.2")
    parser.add_argument("--target", metavar="Q", help="target row, same vocabulary as --draft")
    args = parser.parse_args(argv)
    names = sorted(FIGURES) if args.name == "all" else [args.name]
    if args.out and len(names) > 1:
        parser.error("--out names one file; draw one figure at a time with it")
    if args.scale <= 0:
        parser.error("--scale must be positive")
    try:
        rows = _pair_rows(args)
        for name in names:
            png, js, _ = write_figure(name, args.out, args.scale, **rows)
            print(f"wrote {png} and {js}")
    except ValueError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
