"""Every verifier of k candidates against the optimum of its draw, on the real pair's logged rows, step by step.

At each logged step t (``figures/llm_*_rows.npz``: both models' top-p rows along the plain continuations, the
truncated tails kept as one symbol) k candidates are drawn as a verifier needs: i.i.d. (k-Seq, multi-round,
naive, the OTM plan, greedy multi-path block verification at one level), without replacement (multi-round
without replacement, which is Traversal Verification on one level, tested), Hu et al.'s greedy drafts or
SpecHub's hub pair. Each verifier's exact acceptance (its closed form; Monte Carlo where the closed form's
enumeration is refused) is set beside the optimum of its own draw (:func:`otspec.solvers.otm_value`: the
min-cut dual for i.i.d. and without replacement, :func:`~otspec.solvers.otm_dual.structured_value` for the
structured draws), and both are averaged over the steps. The optima of the three draws side by side are Hu et
al.'s comparison on a real pair.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..engine import simulate_candidates
from ..errors import SizeLimitError
from ..solvers.otm_dual import otm_value
from ..sources import load_logged_rows
from ..verifiers import MULTI_DRAFT_REGISTRY, WHOLE_TREE_REGISTRY
from . import RECORDS_DIR, register
from .common import axes, fmt, records_folder, table

__all__ = ["OPTIMUM_OF_DRAW", "step_verifiers", "trees_logged_data"]

KS = (2, 3, 4)
#: The optimum each verifier is compared with, by the draw it is exact for (its ``replacement``).
OPTIMUM_OF_DRAW = {True: "iid", False: "without", "greedy": "greedy", "hub": "greedy"}
DRAWS = {"iid": True, "without": False, "greedy": "greedy"}
DRAW_LABELS = {"iid": "optimum, i.i.d. drafts", "without": "optimum, without replacement",
               "greedy": "optimum, greedy drafts (Hu et al.)"}
#: Trials per step when a closed form is refused (Monte Carlo, pooled over the steps).
MC_PER_STEP = 400


def step_verifiers() -> dict:
    """The verifiers of one step by name (read from the registry): every multi-draft verifier, and greedy multi-path
    block verification at one level."""
    return {**MULTI_DRAFT_REGISTRY, "gbv": WHOLE_TREE_REGISTRY["gbv"]}


def _one_log(path: Path, max_steps: int) -> dict:
    log = load_logged_rows(path)
    steps = np.unique(np.linspace(0, log.n_steps - 1, min(max_steps, log.n_steps)).astype(int))
    rows = [log.step_rows(int(t))[1:] for t in steps]
    out = {"file": path.name, "meta": log.meta, "steps": len(steps), "vocab": log.vocab(),
           "kept_mean": float(np.mean([p.size for p, _ in rows])), "ks": list(KS), "optimum": {}, "verifiers": {}}
    for draw, replacement in DRAWS.items():
        out["optimum"][draw] = [float(np.mean([otm_value(p, q, k, replacement) for p, q in rows])) for k in KS]
    for name, cls in step_verifiers().items():
        values, methods = [], []
        for k in KS:
            if name == "spechub" and k > 2:
                values.append(None)
                methods.append("not defined (k <= 2)")
                continue
            try:
                values.append(float(np.mean([cls().expected_acceptance(p, q, k) for p, q in rows])))
                methods.append("exact")
            except SizeLimitError:  # a closed form that enumerates draft paths: Monte Carlo at every step
                hits = [simulate_candidates(p, q, cls(), k, MC_PER_STEP, seed=1000 * k + i, progress=False)
                        .accepted.value for i, (p, q) in enumerate(rows)]
                values.append(float(np.mean(hits)))
                methods.append(f"Monte Carlo ({MC_PER_STEP} per step)")
        out["verifiers"][name] = {"values": values, "methods": methods, "draw": OPTIMUM_OF_DRAW[cls.replacement]}
    return out


def render_trees_logged(data: dict):
    logs = data["logs"]
    fig, panels = axes((11, 4.0 * max(len(logs), 1)), nrows=max(len(logs), 1), ncols=2, squeeze=False)
    for (ax, gap_ax), log in zip(panels, logs, strict=False):
        ks = np.asarray(log["ks"])
        for i, (draw, label) in enumerate(DRAW_LABELS.items()):
            ax.plot(ks, log["optimum"][draw], "k" + ["-", "--", ":"][i], lw=1.5, label=label)
        for c, (name, v) in enumerate(log["verifiers"].items()):
            vals = np.array([np.nan if x is None else x for x in v["values"]])
            opt = np.asarray(log["optimum"][v["draw"]])
            ax.plot(ks, vals, "o-", ms=3, color=f"C{c}", label=step_verifiers()[name].label)
            gap_ax.plot(ks, vals - opt, "o-", ms=3, color=f"C{c}", label=name)
        ax.set_title(f"{log['file']}: {log['steps']} steps", fontsize=9)
        ax.set_xlabel("k candidates")
        ax.set_ylabel("P(accept), mean over steps")
        gap_ax.axhline(0.0, color="k", lw=0.8)
        gap_ax.set_xlabel("k candidates")
        gap_ax.set_ylabel("verifier − optimum of its draw")
        for a in (ax, gap_ax):
            a.set_xticks(ks)
            a.grid(alpha=0.3)
            a.legend(fontsize=6)
    fig.suptitle("One step of k candidates on the real pair's logged rows", fontsize=10)
    return fig


def _section(data: dict, png: Path) -> str:
    title = "Tree verifiers on the real pair's logged rows"
    if not data["logs"]:
        return f"## {title}\n\n![{title}]({png.name})\n\nNo `llm_*_rows.npz` log in this folder yet.\n"
    parts = [f"## {title}", "", f"![{title}]({png.name})", "",
             "At each logged step, k candidates drawn as each verifier needs; its exact acceptance (Monte Carlo where "
             "the closed form is refused) against the optimum of its own draw, averaged over the steps. Multi-round "
             "without replacement is also Traversal Verification on one level; `gbv` is greedy multi-path block "
             "verification at one level; SpecHub's pair is the greedy draw at k = 2.", ""]
    for log in data["logs"]:
        rows = []
        for name, v in log["verifiers"].items():
            for i, k in enumerate(log["ks"]):
                if v["values"][i] is None:
                    continue
                opt = log["optimum"][v["draw"]][i]
                rows.append([name, k, fmt(v["values"][i]), f"{fmt(opt)} ({v['draw']})",
                             f"{100 * (v['values'][i] / opt - 1):+.1f} %", v["methods"][i]])
        hu = ", ".join(f"k = {k}: i.i.d. {fmt(log['optimum']['iid'][i])}, without replacement "
                       f"{fmt(log['optimum']['without'][i])}, greedy {fmt(log['optimum']['greedy'][i])}"
                       for i, k in enumerate(log["ks"]))
        parts += [f"### {log['file']}", "",
                  f"{log['steps']} steps, {log['kept_mean']:.0f} kept tokens per step on average. Optima by draw "
                  f"(Hu et al.'s comparison): {hu}.", "",
                  table(["verifier", "k", "P(accept)", "optimum of its draw", "gap", "method"], rows), ""]
    return "\n".join(parts)


@register("trees_logged", "trees_logged", render=render_trees_logged, section=_section, reads_records=True)
def trees_logged_data(scale: float = 1.0, records_dir: str | Path = RECORDS_DIR) -> dict:
    """Every ``llm_*_rows.npz`` log in ``records_dir`` at k in :data:`KS` (``scale`` sets the steps: 128 at 1)."""
    folder = records_folder(records_dir)
    steps = max(8, int(128 * scale))
    return {"logs": [_one_log(path, steps) for path in sorted(folder.glob("llm_*_rows.npz"))]}
