"""``python -m otspec.report``: regenerate every figure and ``figures/REPORT.md``.

Everything in the report is computed by this run from embedded defaults; the
text only frames the numbers. ``--scale`` shrinks the simulations (tests use it).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

from . import __version__
from .experiments import coverage, max_abs_difference
from .plot import FIGURES, write_figure

__all__ = ["build_report", "main"]


def _table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _token_section(data: dict, png: Path) -> str:
    s0 = data["series"]
    pick = [L for L in (1, 2, 4, 8, 10) if L in data["draft_lengths"]]
    rows = []
    for s in s0:
        for L in pick:
            i = data["draft_lengths"].index(L)
            rows.append([s["draft_p"], L, f"{s['closed_form'][i]:.4f}", f"{s['exact'][i]:.4f}",
                         f"{s['mc_mean'][i]:.4f} [{s['mc_low'][i]:.4f}, {s['mc_high'][i]:.4f}]"])
    hits, total = coverage(s0, "mc_mean", "mc_low", "mc_high", "closed_form")
    dev = max(s["exact_max_deviation_from_target_law"] for s in s0)
    return f"""## TokenVerify on IID Bernoulli pairs

![{data['title']}]({png.name})

{data['title']}. Quantity: {data['quantity']}.

* closed form eq. (11a) vs exact enumeration: max |difference| = {max_abs_difference(s0, 'closed_form', 'exact'):.2e}
* exact output law vs target law (all L, all drafts): max |difference| = {dev:.2e}
* Monte Carlo ({data['mc_blocks_per_point']} blocks per point): {hits}/{total} 95% intervals contain the closed form

{_table(["draft p", "L", "closed form", "exact", "Monte Carlo [95% CI]"], rows)}
"""


def _decode_section(data: dict, png: Path) -> str:
    s0 = data["series"]
    rows = []
    for s in s0:
        for i, L in enumerate(data["draft_lengths"]):
            if L in (1, 2, 4, 8):
                rows.append([s["draft_p"], L, f"{s['closed_form'][i]:.4f}",
                             f"{s['measured'][i]:.4f} [{s['low'][i]:.4f}, {s['high'][i]:.4f}]",
                             s["target_calls"][i], s["draft_calls"][i]])
    hits, total = coverage(s0, "measured", "low", "high", "closed_form")
    return f"""## Decode loop: long-run block efficiency

![{data['title']}]({png.name})

{data['title']}; {data['sequences']} sequences of {data['tokens_per_sequence']} tokens per point.
Quantity: {data['quantity']}. {hits}/{total} 95% intervals contain the closed form.
(Sequences never draft past their last token, which lowers efficiency by O(L/N).)

{_table(["draft p", "L", "closed form", "measured [95% CI]", "target calls", "draft calls"], rows)}
"""


def _block_section(data: dict, png: Path) -> str:
    rows = []
    for s in data["series"]:
        for L in (2, 4, 8, 10):
            if L not in data["draft_lengths"]:
                continue
            i = data["draft_lengths"].index(L)
            mc = s["mc_block_v1"]
            rows.append([s["draft_p"], L, f"{s['token'][i]:.4f}", f"{s['block_onpath'][i]:.4f}",
                         f"{s['block_optimal'][i]:.4f}", f"{mc['mean'][i]:.4f} [{mc['low'][i]:.4f}, {mc['high'][i]:.4f}]"])
    cover = {}
    for name, key in (("token", "token"), ("block", "block_onpath"), ("block_v1", "block_optimal")):
        hits = total = 0
        for s in data["series"]:
            mc = s[f"mc_{name}"]
            for lo, hi, truth in zip(mc["low"], mc["high"], s[key], strict=True):
                hits, total = hits + int(lo <= truth <= hi), total + 1
        cover[name] = f"{hits}/{total}"
    ordered = all(a <= b + 1e-12 <= c + 2e-12 for s in data["series"]
                  for a, b, c in zip(s["token"], s["block_onpath"], s["block_optimal"], strict=True))
    return f"""## Block verification vs token verification (the seed's Figure 2 setting)

![{data['title']}]({png.name})

{data['title']}. Quantity: {data['quantity']}. {data['figure2_note']}

* Monte Carlo ({data['mc_blocks_per_point']} blocks per point) 95% intervals containing the closed form:
  token {cover['token']}, published block vs eq. (17) {cover['block']}, v1 block vs eq. (11b) {cover['block_v1']}
* ordering token <= published <= optimum (eq. (18)) holds at every point: {ordered}

{_table(["draft p", "L", "token (11a)", "published (17)", "optimum (11b)", "v1 Monte Carlo [95% CI]"], rows)}
"""


def _block_e2e_section(data: dict, png: Path) -> str:
    rows = []
    for r in data["rows"]:
        cells = [r["pair"]]
        for name in ("token", "block", "block_v1"):
            e = r[name]
            cells.append(f"{e['block_efficiency']:.4f} [{e['low']:.4f}, {e['high']:.4f}]")
        it = [r[n]["exact_accepted_iterations_1_2"] for n in ("token", "block", "block_v1")]
        cells.append(" / ".join("-" if x is None else f"{x[0]:.3f} -> {x[1]:.3f}" for x in it))
        rows.append(cells)
    return f"""## End to end: does the v1 per-iteration optimum survive?

![{data['title']}]({png.name})

{data['title']}. Quantity: {data['quantity']}. The v1 algorithm (with its carried residual target)
maximises the accepted length of one iteration, but the residual target it hands to the next
iteration is concentrated where the target exceeds the draft, so the next iteration accepts less:
the last column shows exact E[accepted] of iterations 1 and 2 (token / published / v1).

{_table(["pair", "token", "published block", "v1 block", "exact E[tau], it. 1 -> 2 (token / published / v1)"], rows)}
"""


def _fmt(x):
    return "-" if x is None else f"{x:.4f}"


def _multidraft_section(data: dict, png: Path) -> str:
    names = ("optimal", "optimal_without_replacement", "kseq", "multiround", "multiround_without_replacement",
             "naive")
    rows, key = [], ("target_p" if "target_p" in data["series"][0] else "target_support")
    for s in data["series"]:
        for i, k in enumerate(data["ks"]):
            if k in (1, 2, 4, 6, 10):
                rows.append([s[key], k] + [_fmt(s[n][i]) for n in names])
    checks = []
    if "lp" in data["series"][0]:
        gap = max(abs(a - b) for s in data["series"] for a, b in zip(s["lp"], s["optimal"], strict=False))
        closed = max(abs(a - b) for s in data["series"] for a, b in zip(s["closed_form"], s["optimal"], strict=True))
        checks.append(f"max |LP − fast route| = {gap:.1e}; max |eq. (14) − fast route| = {closed:.1e}")
    else:
        closed = max(abs(a - b) for s in data["series"] for a, b in zip(s["closed_form"], s["optimal"], strict=True))
        kseq = max(abs(a - b) for s in data["series"] for a, b in zip(s["closed_form"], s["kseq"], strict=True))
        checks.append(f"max |eq. (15) − fast route| = {closed:.1e}; max |eq. (15) − k-Seq| = {kseq:.1e} (k-Seq optimal)")
    return f"""## {data['title']}

![{data['title']}]({png.name})

Quantity: {data['quantity']}. {'; '.join(checks)}.

{_table([key, "k", *names], rows)}
"""


FIG6_NOTE = ("SpecTr Figure 6 setting: the Bernoulli pairs above with every verifier, multi-round (SpecInfer / "
             "MCSD) with and without replacement and the naive scheme included; numbers in the table above.")


def _figure_only(data: dict, png: Path, note: str) -> str:
    return f"""## {data['title']} — all verifiers

![{data['title']}]({png.name})

{note}
"""


def _markov_accept_section(data: dict, png: Path) -> str:
    names = ("optimal", "optimal_without_replacement", "kseq", "multiround", "multiround_without_replacement",
             "naive")
    rows = [[k] + [_fmt(data[n][i]) for n in names] for i, k in enumerate(data["ks"])]
    return f"""## {data['title']}

![{data['title']}]({png.name})

Quantity: {data['quantity']} (the shape of MCSD Figure 3).

{_table(["k", *names], rows)}
"""


def _trees_section(data: dict, png: Path) -> str:
    rows = [[r["label"], r["config"], "with" if r["replacement"] else "without", r["verifier"], r["rule"],
             r["tree_tokens"], f"{r['block_efficiency']:.4f} [{r['low']:.4f}, {r['high']:.4f}]"] for r in data["rows"]]
    return f"""## {data['title']}

![{data['title']}]({png.name})

{data['sequences']} sequences x {data['tokens_per_sequence']} tokens per setup. Quantity: {data['quantity']}.
Rule "match" continues with every candidate equal to the emitted token (SpecTr Algorithm 3); "accepted"
only after an accepted candidate (MCSD).

{_table(["setup", "k-config", "replacement", "verifier", "rule", "draft tokens", "block efficiency [95% CI]"], rows)}
"""


def _rejections_section(data: dict, png: Path) -> str:
    batch = data["batch"]
    rows = [[m, f"{v:.4f}", f"{s:.4f}"] for m, v, s in
            zip(batch["M"], batch["expected_rejections"], batch["speedup"], strict=True)]
    run = data["running"]
    last = {k: (v[-1] if isinstance(v, list) and v else v) for k, v in run.items()}
    return f"""## Expected rejections on a time-varying Markov pair (Yin et al. Theorem 1, batch Algorithm 4)

![rejections]({png.name})

Instance: {data['instance']}. Formula (1): E[N_rej] = {data['formula']:.4f}, speedup T / E[N_rej] =
{data['speedup']:.4f}. Running Monte Carlo average, last point: {last}.

{_table(["M (parallel drafts)", "E[N_rej], recursion (4)-(5)", "speedup"], rows)}
"""


def _pareto_section(data: dict, png: Path) -> str:
    tok, seq = data["token"], data["sequence"]
    opt_gap = max(abs(b - f) for b, f in zip(tok["opt"]["bias"], tok["opt"]["front"], strict=True))
    uno_gaps = [b - f for b, f in zip(tok["uno"]["bias"], tok["uno"]["front"], strict=True)]
    lp_gap = max(abs(b - max(0.0, tok["tv"] - r)) for r, b in zip(tok["lp"]["rejection"], tok["lp"]["bias"],
                                                                 strict=True))
    return f"""## Rejections vs distribution bias (Yin et al. Theorems 4-5) and the sequence-level front

![pareto]({png.name})

Token level, p = {tok['draft']}, q = {tok['target']}, TV = {tok['tv']:.4f}. The LP optimum equals the front
max(0, TV − r) to {lp_gap:.1e}; Decoding-OPT (b_eps with the optimal resampling, here the standard residual)
lies on the front to {opt_gap:.1e}; Decoding-UNO (resample from q) is never below it (smallest gap
{min(uno_gaps):.1e}) and up to {max(uno_gaps):.4f} above it.
Unattainable: {tok['unattainable']}.

Sequence level (exact flow LP over prefix-dependent rejection-based verifiers, V = {seq['vocab']},
T = {seq['horizon']}): TV of the sequence laws {seq['tv_seq']:.4f}, SD's expected rejections
{seq['sd_rejections']:.4f} (least rejections of any unbiased verifier: {seq['min_rejections_unbiased']:.4f}).
The exact front is **{'linear' if seq['is_linear'] else 'not linear'}**: it lies up to
{seq['deviation_from_line']:.4f} below the straight line from (0, TV_seq) to (E_SD[N_rej], 0), which is
only what mixing SD with plain drafting achieves.
"""


SECTIONS = {"token": _token_section, "decode": _decode_section, "block": _block_section,
            "block_e2e": _block_e2e_section, "spectr_fig4": _multidraft_section,
            "spectr_fig5": _multidraft_section, "spectr_fig6": lambda d, p: _figure_only(d, p, FIG6_NOTE),
            "mcsd_fig3": _markov_accept_section, "trees": _trees_section, "rejections": _rejections_section,
            "pareto": _pareto_section}


def build_report(out_dir: str | Path = "figures", scale: float = 1.0) -> Path:
    """Write every figure (PNG + JSON) and ``REPORT.md`` into ``out_dir``; return the report path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    parts = []
    for name in FIGURES:  # registry order: the report reads top to bottom
        stem = FIGURES[name][2]
        png, _, data = write_figure(name, out_dir / f"{stem}.png", scale)
        print(f"wrote {png}", flush=True)
        parts.append(SECTIONS[name](data, png))
    elapsed = time.perf_counter() - start
    header = f"""# otspec report

Generated by `python -m otspec.report` (otspec {__version__}, Python {platform.python_version()},
numpy {np.__version__}, scale {scale}) in {elapsed:.0f} s. Every number below is computed by this
run; each figure's data is in the JSON file beside its PNG.
"""
    path = out_dir / "REPORT.md"
    path.write_text(header + "\n" + "\n".join(parts))
    print(f"wrote {path}")
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m otspec.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default="figures")
    parser.add_argument("--scale", type=float, default=1.0, help="simulation size factor")
    args = parser.parse_args(argv)
    if args.scale <= 0:
        parser.error("--scale must be positive")
    build_report(args.out_dir, args.scale)
    return 0


if __name__ == "__main__":
    sys.exit(main())
