"""``python -m otspec.plot NAME``: compute a figure's data, write ``NAME.json`` and ``NAME.png``.

Each figure is a data function from :mod:`otspec.experiments` plus a renderer
here. ``python -m otspec.plot all`` writes every figure; ``--out`` chooses the
PNG path (the JSON goes beside it); ``--scale`` shrinks the simulations.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .experiments import EXPERIMENTS

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
    import numpy as np

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


#: Figures by name: (data function, renderer, default file stem).
FIGURES = {
    "token": (EXPERIMENTS["token"], render_token, "token_verification"),
    "decode": (EXPERIMENTS["decode"], render_decode, "decode_efficiency"),
}


def render(name: str, data: dict):
    """Matplotlib figure for ``name`` from its data dict."""
    return FIGURES[name][1](data)


def write_figure(name: str, out: str | os.PathLike | None = None, scale: float = 1.0) -> tuple[Path, Path, dict]:
    """Compute, render and save figure ``name``; returns (png path, json path, data)."""
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
    data = data_fn(scale=scale)
    fig = render(name, data)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
    js = png.with_suffix(".json")
    js.write_text(json.dumps(data, indent=1) + "\n")
    return png, js, data


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m otspec.plot", description=__doc__.split("\n\n")[0])
    parser.add_argument("name", choices=sorted(FIGURES) + ["all"], help="figure to draw")
    parser.add_argument("--out", help="PNG path (default figures/<name>.png; JSON beside it)")
    parser.add_argument("--scale", type=float, default=1.0, help="simulation size factor (default 1)")
    args = parser.parse_args(argv)
    names = sorted(FIGURES) if args.name == "all" else [args.name]
    if args.out and len(names) > 1:
        parser.error("--out names one file; draw one figure at a time with it")
    try:
        for name in names:
            png, js, _ = write_figure(name, args.out, args.scale)
            print(f"wrote {png} and {js}")
    except ValueError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
