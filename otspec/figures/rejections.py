"""The figure of Yin et al.'s simulation: running mean of N_rej (Algorithm 1) and the batch curve (Algorithm 4).

Spec ``yin_theory.md`` §6, §8–10, on the seeded instance :func:`otspec.theory.rejections.markov_pair`.

Spec: ``docs/yin_theory.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from ..engine.sequence import simulate_batch_rejections, simulate_rejections
from ..theory.rejections import BATCH_MS, batch_curve, expected_rejections, markov_pair
from . import register
from .common import as_sources, axes, describe, table

__all__ = ["rejections_figure_data", "render_rejections"]


def render_rejections(data: dict):
    """Two-panel matplotlib Figure from :func:`rejections_figure_data`."""
    fig, (ax1, ax2) = axes((10, 4), dpi=100, ncols=2)
    run = data["running"]
    ax1.fill_between(run["n"], run["low"], run["high"], alpha=0.3, label="95% CI")
    ax1.plot(run["n"], run["mean"], marker="o", ms=3, label="simulation (Algorithm 1)")
    ax1.axhline(data["formula"], color="k", ls="--", label=f"Theorem 1: {data['formula']:.4f}")
    ax1.set_xlabel("N (runs = 100·N)")
    ax1.set_ylabel("mean number of rejections")
    ax1.set_title(f"(a) E[N_rej], T = {data['instance']['horizon']}")
    ax1.legend()
    b = data["batch"]
    ax2.plot(b["M"], b["expected_rejections"], marker="s", label="recursion (4)-(5)")
    sims = b.get("simulated", [])
    if sims:
        ms = [s["M"] for s in sims]
        vals = [s["value"] for s in sims]
        err = [1.96 * s["stderr"] for s in sims]
        ax2.errorbar(ms, vals, yerr=err, fmt="o", capsize=3, label="simulation (Algorithm 4)")
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("batch size M")
    ax2.set_ylabel("E[N_rej]")
    ax2.set_title("(b) batch speculative decoding")
    ax2.legend()
    fig.tight_layout()
    return fig


def _speedup(data: dict, spec: str) -> str:
    return "unbounded (no rejection)" if data["speedup"] is None else format(data["speedup"], spec)


def _rejections_section(data: dict, png: Path) -> str:
    batch = data["batch"]
    rows = [[m, f"{v:.4f}", "unbounded" if s is None else f"{s:.4f}"] for m, v, s in
            zip(batch["M"], batch["expected_rejections"], batch["speedup"], strict=True)]
    run = data["running"]
    last = {k: (v[-1] if isinstance(v, list) and v else v) for k, v in run.items()}
    return f"""## Expected rejections on a time-varying Markov pair (Yin et al. Theorem 1, batch Algorithm 4)

![rejections]({png.name})

Instance: {data['instance']}. Formula (1): E[N_rej] = {data['formula']:.4f}, speedup T / E[N_rej] =
{_speedup(data, ".4f")}. Running Monte Carlo average, last point: {last}.

{table(["M (parallel drafts)", "E[N_rej], recursion (4)-(5)", "speedup"], rows)}
"""


def _rejections_headline(data: dict) -> str:
    inst, batch = data["instance"], data["batch"]
    return (f"Yin et al.'s Theorem 1 on a time-varying Markov pair (V = {inst['vocab']}, T = {inst['horizon']}): "
            f"E[N_rej] = {data['formula']:.4f} exactly (speedup T / E[N_rej] = {_speedup(data, '.3f')}); "
            f"M = {batch['M'][-1]} parallel drafts (Algorithm 4) lower it to {batch['expected_rejections'][-1]:.3f}.")


@register("rejections", "rejections", render=render_rejections, section=_rejections_section, pair=True,
          headline=_rejections_headline)
def rejections_figure_data(draft=None, target=None, *, scale: float = 1.0, seed: int = 0, max_n: int = 40,
                           Ms: Sequence[int] = BATCH_MS, simulate_max_M: int = 8, horizon: int = 50) -> dict:
    """Data of the paper's simulation figure (spec §8 (a) and §6 (b)) on :func:`markov_pair`, or the user's pair.

    ``draft``/``target`` (sources, or rows for IID sources) replace the seeded instance; the
    horizon is ``horizon``, or the sources' own horizon when shorter.

    Panel (a): running average of N_rej over the first 100·N runs of Algorithm 1, N = 1..N_max
    (N_max = max(4, round(``max_n``·scale))), with 95 % intervals, against eq. (1).
    Panel (b): eq. (5) against M ∈ ``Ms`` with simulated points (max(200, round(2000·scale))
    runs each) for M ≤ ``simulate_max_M``.

    Returns
    -------
    dict
        JSON-ready: ``instance``, ``formula``, ``speedup``, ``running`` (lists ``n``, ``runs``,
        ``mean``, ``low``, ``high``), ``batch`` (:func:`batch_curve` output plus ``simulated``).
    """
    if not scale > 0:
        raise ValueError(f"scale: expected a positive number, got {scale!r}")
    if (draft is None) != (target is None):
        raise ValueError("give both draft and target, or neither")
    if draft is None:
        V, T = 4, 50
        draft, target = markov_pair(V, T, 5)
        instance = {"name": "markov_pair", "vocab": V, "horizon": T, "seed": 5}
    else:
        draft, target = as_sources(draft, target)
        V = draft.vocab_size
        T = min(h for h in (horizon, draft.horizon, target.horizon) if h is not None)
        instance = {"name": "user pair", "vocab": V, "horizon": T, "draft": describe(draft),
                    "target": describe(target)}
    formula = expected_rejections(draft, target, T)
    n_max = max(4, int(round(max_n * scale)))
    sim = simulate_rejections(draft, target, T, 100 * n_max, seed=seed, progress=False)
    running = {"n": [], "runs": [], "mean": [], "low": [], "high": []}
    for n in range(1, n_max + 1):
        est = sim.running_mean(100 * n)
        running["n"].append(n)
        running["runs"].append(100 * n)
        running["mean"].append(est.value)
        running["low"].append(est.low)
        running["high"].append(est.high)
    curve = batch_curve(draft, target, T, Ms)
    sim_runs = max(200, int(round(2000 * scale)))
    simulated = []
    for i, m in enumerate(curve["M"]):
        if m <= simulate_max_M:
            est = simulate_batch_rejections(draft, target, T, m, sim_runs, seed=seed + 1 + i, progress=False).estimate
            simulated.append({"M": m, "runs": sim_runs, **est.as_dict()})
    curve["simulated"] = simulated
    never = "undefined: E[N_rej] = 0 (the draft is the target: no rejection, an unbounded speedup)"
    if not all(math.isfinite(x) for x in curve["speedup"]):  # strict JSON: null with the reason
        curve["speedup"] = [x if math.isfinite(x) else None for x in curve["speedup"]]
        curve["speedup_status"] = never
    return {
        "instance": instance,
        "formula": formula,
        "speedup": T / formula if formula > 0 else None,
        **({} if formula > 0 else {"speedup_status": never}),
        "running": running,
        "batch": curve,
    }
