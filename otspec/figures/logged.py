"""Logged rows of a real pair (``figures/llm_<name>_rows.npz``): exact token values, certified block ranges,
row-free Monte Carlo, and the same pair's measured block efficiency beside them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..engine import simulate_logged
from ..engine.record import read_json_file
from ..sources import load_logged_rows
from ..theory import positional_window_values
from ..verifiers import REGISTRY
from . import RECORDS_DIR, register
from .common import axes, records_folder, table

__all__ = ["logged_data", "render_logged"]

LENGTHS = (1, 2, 3, 4, 6, 8)


def _verifiers() -> list:
    """The verifiers simulated on logged rows: every closed-form chain verifier whose correction stays in its
    iteration (the row-free sampler of logged rows has no next iteration to carry a residual into)."""
    return [cls() for cls in REGISTRY.values() if not cls.carries_residual]


def _measured(folder: Path, stem: str) -> dict:
    """Measured block efficiency by (verifier, L) of the validate record the log came with, if any."""
    path = folder / f"{stem.removesuffix('_rows')}.json"
    if not path.is_file():
        return {}
    record = read_json_file(path)
    runs = record.get("runs", []) if isinstance(record, dict) else []
    return {f"{r['verifier']}:{r['L']}": r["block_efficiency"] for r in runs if isinstance(r, dict)
            and {"verifier", "L", "block_efficiency"} <= r.keys()}


def _one_log(path: Path, blocks: int) -> dict:
    log = load_logged_rows(path)
    out = {"file": path.name, "summary": {k: v for k, v in log.summary().items() if k != "meta"}, "meta": log.meta,
           "acceptance_per_step": log.overlaps().tolist(), "measured": _measured(path.parent, path.stem),
           "draft_lengths": [L for L in LENGTHS if int(np.diff(log.path_offsets).max()) > L]}
    for tail in ("overlap", "renormalise"):
        alpha, series = log.overlaps(tail), {"token": [], "high": []}
        span = max(out["draft_lengths"]) + 1  # one set of block starts for every L: the values compare across L
        for L in out["draft_lengths"]:
            W = log.windows(L, span)
            token, high = positional_window_values(alpha[W[:, None] + np.arange(L)])
            series["token"].append(token)
            series["high"].append(high)
            for k, verifier in enumerate(_verifiers()):
                res = simulate_logged(log, verifier, L, blocks, tail=tail, span=span, seed=1000 * L + k,
                                      progress=False)
                series.setdefault(f"mc_{verifier.name}", {"mean": [], "low": [], "high": []})
                for key, value in (("mean", res.accepted.value), ("low", res.accepted.low), ("high", res.accepted.high)):
                    series[f"mc_{verifier.name}"][key].append(value)
        out[tail] = series
    return out


def render_logged(data: dict):
    logs = data["logs"]
    fig, panels = axes((10, 4.2 * max(len(logs), 1)), nrows=max(len(logs), 1), ncols=2, squeeze=False)
    for row, log in zip(panels, logs, strict=False):
        ax, hist = row
        x = np.asarray(log["draft_lengths"])
        for tail, ls in (("overlap", "-"), ("renormalise", "--")):
            s = log[tail]
            ax.plot(x, s["token"], ls, color="C0", label=f"token, exact ({tail} tail)")
            ax.fill_between(x, s["token"], s["high"], color="C1", alpha=0.08 if tail == "overlap" else 0.0)
            ax.plot(x, s["high"], ls, color="C2", lw=0.8, label=f"upper bound on any verifier ({tail})")
            for k, v in enumerate(_verifiers()):
                mc = s[f"mc_{v.name}"]
                mean, lo, hi = map(np.asarray, (mc["mean"], mc["low"], mc["high"]))
                ax.errorbar(x + 0.1 * (k - 0.5) + (0.05 if tail == "renormalise" else 0.0), mean,
                            yerr=[mean - lo, hi - mean], fmt=v.style["marker"], ms=3.5, capsize=2,
                            color=v.style["color"], mfc=None if tail == "overlap" else "none",
                            label=f"{v.label}: Monte Carlo ({tail})")
        ax.set_xlabel("draft length L")
        ax.set_ylabel("E[accepted draft tokens] per iteration")
        ax.set_title(f"{log['file']}: {log['meta'].get('target', '?')} / {log['meta'].get('draft', '?')}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
        hist.hist(log["acceptance_per_step"], bins=25, color="C0", alpha=0.7)
        hist.set_xlabel("1 − TV(p_t, q_t) at a logged step (full rows)")
        hist.set_ylabel("steps")
        hist.grid(alpha=0.3)
    fig.suptitle("Logged rows of a real pair, replayed by position", fontsize=10)
    return fig


def _logged_section(data: dict, png: Path) -> str:
    if not data["logs"]:
        return (f"## Logged rows of a real pair\n\n![logged rows]({png.name})\n\nNo `llm_*_rows.npz` log in "
                "this folder yet: run `python -m llm_bridge.validate --log-rows FILE`.\n")
    parts = ["## Logged rows of a real pair", "", f"![logged rows]({png.name})", "",
             "`python -m llm_bridge.validate --log-rows` records both models' processed rows along the plain "
             "continuations, top-p truncated with the tail masses and their overlap kept "
             "(`otspec.sources.logged`). otspec replays them by position: a block starting at step t drafts from "
             "rows t, t+1, …, whatever it drafted; every L uses the same block starts (those with 9 steps ahead). On that source token verification has an exact value, and with "
             "the `overlap` tail its per-step acceptance is the full rows' 1 − TV. Block verification lies between "
             "that value and Σ_l min_{i≤l}(1 − TV_i), and its Monte Carlo runs row-free. The last column is the "
             "block efficiency − 1 that the same pair measured while decoding, when its record is present.", ""]
    for log in data["logs"]:
        s, meas = log["overlap"], log["measured"]
        rows, hits, total = [], 0, 0
        for i, L in enumerate(log["draft_lengths"]):
            tok, blk = s["mc_token"], s["mc_block"]
            hits, total = hits + int(tok["low"][i] <= s["token"][i] <= tok["high"][i]), total + 1
            m = [meas[f"{v}:{L}"]["mean"] - 1.0 for v in ("token", "block") if f"{v}:{L}" in meas]
            rows.append([L, f"{s['token'][i]:.4f}", f"{tok['mean'][i]:.4f} [{tok['low'][i]:.4f}, {tok['high'][i]:.4f}]",
                         f"{blk['mean'][i]:.4f} [{blk['low'][i]:.4f}, {blk['high'][i]:.4f}]",
                         f"[{s['token'][i]:.4f}, {s['high'][i]:.4f}]", f"{log['renormalise']['token'][i]:.4f}",
                         ", ".join(f"{x:.3f}" for x in m) or "–"])
        summ = log["summary"]
        parts += [f"### {log['file']}", "",
                  f"{summ['paths']} paths, {summ['steps']} steps, V = {summ['vocab_size']:,}; kept tokens per step "
                  f"{summ['kept_mean']:.0f} on average (at most {summ['kept_max']}), tail mass draft "
                  f"{summ['draft_tail_mean']:.3f} / target {summ['target_tail_mean']:.3f}; mean acceptance 1 − TV "
                  f"{summ['overlap_mean']:.4f}. Token Monte Carlo intervals containing the exact value: {hits}/{total}.",
                  "", table(["L", "token exact", "token Monte Carlo [95%]", "block Monte Carlo [95%]",
                             "block certified range", "token, top-p rows", "measured (token, block)"], rows), ""]
    return "\n".join(parts)


@register("logged_rows", "logged_rows", render=render_logged, section=_logged_section, reads_records=True)
def logged_data(scale: float = 1.0, records_dir: str | Path = RECORDS_DIR) -> dict:
    """Every ``llm_*_rows.npz`` log in ``records_dir``, evaluated at L in :data:`LENGTHS` (``scale`` sets the
    Monte Carlo blocks: 200,000 at 1)."""
    folder = records_folder(records_dir)
    blocks = max(2_000, int(200_000 * scale))
    return {"blocks": blocks, "logs": [_one_log(path, blocks) for path in sorted(folder.glob("llm_*_rows.npz"))]}
