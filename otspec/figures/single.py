"""Single-draft figures: token verification, the decode loop, block vs token verification.

Specs: ``token_and_block_verification.md`` (eqs. (4), (11a), (11b), (17)); the setting of the
Figure 2 of the first version of Sun et al.'s block verification paper (IID Bernoulli pairs, target Ber(0.75)).

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import theory
from ..engine import evaluate, generate, simulate
from ..sources import IIDSource, bernoulli, random_markov
from ..verifiers import REGISTRY, TokenVerify
from . import register
from .common import as_sources, axes, coverage, describe, max_abs_difference, table

#: Default setting of Figure 2 of Sun et al.'s block verification paper (v1): target Ber(0.75).
BERNOULLI_TARGET = 0.75
BERNOULLI_DRAFTS = (0.25, 0.5, 0.9)
#: The single-draft verifiers compared (their labels and styles draw the curves).
#: The verifiers drawn: every lossless chain verifier with a closed form (read from the registry when drawn).
VERIFIERS = REGISTRY


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
    fig, ax = axes()
    x = data["draft_lengths"]
    for k, s in enumerate(data["series"]):
        color = f"C{k}"
        ax.plot(x, s["closed_form"], "-", color=color, label=f"draft Ber({s['draft_p']}): eq. (11a)")
        ax.plot(x, s["exact"], "x", color=color, ms=7, label="exact enumeration" if k == 0 else None)
        _error_bars(ax, x, s, "mc_mean", "mc_low", "mc_high", color, "Monte Carlo, 95% CI" if k == 0 else None)
    return _finish(fig, ax, "draft length L", "E[accepted draft tokens] per iteration", data["title"])


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

{table(["draft p", "L", "closed form", "exact", "Monte Carlo [95% CI]"], rows)}
"""


@register("token", "token_verification", render=render_token, section=_token_section)
def token_verification_data(target_p: float = BERNOULLI_TARGET, draft_ps=BERNOULLI_DRAFTS,
                            max_length: int = 10, blocks: int = 200_000, scale: float = 1.0,
                            seed: int = 0) -> dict:
    """E[τ] of TokenVerify for IID Bernoulli pairs, L = 1..max_length, three ways.

    Closed form eq. (11a), exact enumeration (exact engine) and Monte Carlo with
    95% intervals. Quantity: accepted draft tokens per iteration (E[τ], not +1).
    """
    n = max(1000, int(blocks * scale))
    lengths = list(range(1, max_length + 1))
    series = []
    for k, dp in enumerate(draft_ps):
        draft, target = bernoulli(dp), bernoulli(target_p)
        closed = [theory.bernoulli_expected_accepted_token(dp, target_p, L) for L in lengths]
        exact = [evaluate(draft, target, TokenVerify(), L) for L in lengths]
        mc = [simulate(draft, target, TokenVerify(), L, n, seed=seed + 1000 * k + L, progress=False)
              for L in lengths]
        series.append({
            "draft_p": dp,
            "closed_form": closed,
            "exact": [r.expected_accepted for r in exact],
            "exact_max_deviation_from_target_law": max(r.max_deviation for r in exact),
            "mc_mean": [r.accepted.value for r in mc],
            "mc_low": [r.accepted.low for r in mc],
            "mc_high": [r.accepted.high for r in mc],
        })
    return {
        "figure": "token_verification",
        "title": f"TokenVerify, IID Bernoulli draft vs target Ber({target_p})",
        "quantity": "expected accepted draft tokens per iteration E[tau] (tokens per iteration = E[tau] + 1)",
        "target_p": target_p,
        "draft_lengths": lengths,
        "mc_blocks_per_point": n,
        "seed": seed,
        "series": series,
    }


def render_decode(data: dict):
    fig, ax = axes()
    x = data["draft_lengths"]
    for k, s in enumerate(data["series"]):
        color = f"C{k}"
        ax.plot(x, s["closed_form"], "-", color=color, label=f"draft Ber({s['draft_p']}): E[tau] + 1")
        _error_bars(ax, x, s, "measured", "low", "high", color, "decode loop, 95% CI" if k == 0 else None)
    return _finish(fig, ax, "draft length L", "block efficiency (tokens / target call)", data["title"])


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

{table(["draft p", "L", "closed form", "measured [95% CI]", "target calls", "draft calls"], rows)}
"""


@register("decode", "decode_efficiency", render=render_decode, section=_decode_section)
def decode_efficiency_data(target_p: float = BERNOULLI_TARGET, draft_ps=BERNOULLI_DRAFTS,
                           max_length: int = 8, tokens: int = 4000, sequences: int = 32,
                           scale: float = 1.0, seed: int = 0) -> dict:
    """Long-run block efficiency of the decode loop vs the closed form E[τ] + 1 (IID pairs)."""
    n_tok = max(200, int(tokens * scale))
    lengths = list(range(1, max_length + 1))
    series = []
    for k, dp in enumerate(draft_ps):
        draft, target = bernoulli(dp), bernoulli(target_p)
        runs = [generate(draft, target, TokenVerify(), L, n_tok, n_sequences=sequences,
                         seed=seed + 1000 * k + L, progress=False) for L in lengths]
        series.append({
            "draft_p": dp,
            "closed_form": [theory.tokens_per_iteration(theory.bernoulli_expected_accepted_token(dp, target_p, L))
                            for L in lengths],
            "measured": [r.block_efficiency.value for r in runs],
            "low": [r.block_efficiency.low for r in runs],
            "high": [r.block_efficiency.high for r in runs],
            "target_calls": [r.target_calls for r in runs],
            "draft_calls": [r.draft_calls for r in runs],
        })
    return {
        "figure": "decode_efficiency",
        "title": f"Decode loop, TokenVerify, IID Bernoulli draft vs target Ber({target_p})",
        "quantity": "block efficiency = generated tokens / target calls (closed form: E[tau] + 1)",
        "target_p": target_p,
        "draft_lengths": lengths,
        "tokens_per_sequence": n_tok,
        "sequences": sequences,
        "seed": seed,
        "series": series,
    }


def render_block(data: dict):
    series = data["series"]
    fig, panels = axes((4.2 * len(series), 4.2), ncols=len(series), sharey=False, squeeze=False)
    panels = panels[0]
    x = np.asarray(data["draft_lengths"])
    for ax, s in zip(panels, series, strict=True):
        ax.plot(x, s["token"], "-", color="C0", label="token, eq. (11a)")
        ax.plot(x, s["block_onpath"], "-", color="C1", label="published block, eq. (17)")
        ax.plot(x, s["block_optimal"], "-", color="C2", label="block-OT optimum, eq. (11b)")
        for k, cls in enumerate(VERIFIERS.values()):
            mc = s[f"mc_{cls.name}"]
            mean, low, high = map(np.asarray, (mc["mean"], mc["low"], mc["high"]))
            ax.errorbar(x + 0.12 * (k - 1), mean, yerr=[mean - low, high - mean], fmt=cls.style["marker"], ms=3.5,
                        capsize=2, color=cls.style["color"], label=f"{cls.label}: Monte Carlo")
        ax.set_title(f"draft Ber({s['draft_p']}), target Ber({data['target_p']})", fontsize=9)
        ax.set_xlabel("draft length L")
        ax.grid(alpha=0.3)
    panels[0].set_ylabel("E[accepted draft tokens] per iteration")
    panels[0].legend(fontsize=7)
    fig.suptitle(data["title"], fontsize=10)
    return fig


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
    return f"""## Block verification vs token verification (Figure 2 of Sun et al., v1)

![{data['title']}]({png.name})

{data['title']}. Quantity: {data['quantity']}. {data['figure2_note']}

* Monte Carlo ({data['mc_blocks_per_point']} blocks per point) 95% intervals containing the closed form:
  token {cover['token']}, published block vs eq. (17) {cover['block']}, v1 block vs eq. (11b) {cover['block_v1']}
* ordering token <= published <= optimum (eq. (18)) holds at every point: {ordered}

{table(["draft p", "L", "token (11a)", "published (17)", "optimum (11b)", "v1 Monte Carlo [95% CI]"], rows)}
"""


def _block_headline(data: dict) -> str:
    """The largest gain of published and of v1 block verification over token verification in the figure."""
    best = {}
    for key in ("block_onpath", "block_optimal"):
        best[key] = max(((b + 1) / (t + 1) - 1, s["draft_p"], L) for s in data["series"]
                        for L, t, b in zip(data["draft_lengths"], s["token"], s[key], strict=True))
    (gain, p, L), (v1_gain, v1_p, v1_L) = best["block_onpath"], best["block_optimal"]
    return (f"Block verification emits up to {100 * gain:.1f} % more tokens per iteration than token verification on "
            f"IID pairs with target Ber({data['target_p']}) (draft Ber({p}), L = {L}); the one-iteration block optimum "
            f"(v1's backward verifier) up to {100 * v1_gain:.1f} % more (Ber({v1_p}), L = {v1_L}).")


@register("block", "block_vs_token", render=render_block, section=_block_section, headline=_block_headline)
def block_vs_token_data(target_p: float = BERNOULLI_TARGET, draft_ps=BERNOULLI_DRAFTS, max_length: int = 10,
                        blocks: int = 50_000, scale: float = 1.0, seed: int = 0) -> dict:
    """The setting of Figure 2 of Sun et al.'s block verification paper (v1): IID Ber(p) drafts vs target Ber(0.75), L = 1..10.

    Closed forms for token verification (eq. (11a)), the block-OT optimum
    (eq. (11b), attained by v1 Algorithm 3) and the published algorithm (eq. (17),
    exact over the prefix tree), plus Monte Carlo estimates of all three
    verifiers with 95% intervals. Quantity: E[τ]; see ``theory.FIGURE2_QUANTITY``.
    """
    n = max(1000, int(blocks * scale))
    lengths = list(range(1, max_length + 1))
    series = []
    for k, dp in enumerate(draft_ps):
        draft, target = bernoulli(dp), bernoulli(target_p)
        entry = {
            "draft_p": dp,
            "token": [theory.bernoulli_expected_accepted_token(dp, target_p, L) for L in lengths],
            "block_onpath": [theory.expected_accepted_block(draft, target, L) for L in lengths],
            "block_optimal": [theory.bernoulli_expected_accepted_optimal(dp, target_p, L) for L in lengths],
        }
        for j, cls in enumerate(VERIFIERS.values()):
            runs = [simulate(draft, target, cls(), L, n, seed=seed + 10_000 * k + 100 * j + L, progress=False)
                    for L in lengths]
            entry[f"mc_{cls.name}"] = {"mean": [r.accepted.value for r in runs],
                                       "low": [r.accepted.low for r in runs],
                                       "high": [r.accepted.high for r in runs]}
        series.append(entry)
    return {
        "figure": "block_vs_token",
        "title": f"Token vs block verification, IID Ber(p) drafts vs target Ber({target_p})",
        "quantity": "expected accepted draft tokens per iteration E[tau] (tokens per iteration = E[tau] + 1)",
        "figure2_note": theory.FIGURE2_QUANTITY,
        "target_p": target_p,
        "draft_lengths": lengths,
        "mc_blocks_per_point": n,
        "mc_verifiers": {"token": "TokenVerify", "block": "published BlockVerify (on-path)",
                         "block_v1": "v1 Algorithm 3 (backward, carries residual)"},
        "seed": seed,
        "series": series,
    }


def render_block_e2e(data: dict):
    rows = data["rows"]
    fig, (ax, ax2) = axes((11, 4.4), ncols=2, gridspec_kw={"width_ratios": [3, 2]})
    width = 0.26
    names = list(VERIFIERS)
    for k, cls in enumerate(VERIFIERS.values()):
        vals = np.array([r[cls.name]["block_efficiency"] for r in rows])
        low = np.array([r[cls.name]["low"] for r in rows])
        high = np.array([r[cls.name]["high"] for r in rows])
        ax.bar(np.arange(len(rows)) + (k - 1) * width, vals, width, color=cls.style["color"], label=cls.label,
               yerr=[vals - low, high - vals], capsize=3)
    ax.set_xticks(np.arange(len(rows)))
    ax.set_xticklabels([r["label"] for r in rows], fontsize=8)
    ax.set_ylim(max(0.0, min(r[n]["low"] for r in rows for n in names) - 0.5), None)
    ax.set_ylabel("block efficiency (tokens / target call)")
    ax.set_title("long run: decode loop, 95% CI", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7)
    exact_rows = [r for r in rows if r["token"]["exact_accepted_iterations_1_2"] is not None]
    for k, cls in enumerate(VERIFIERS.values()):
        color = cls.style["color"]
        for j, r in enumerate(exact_rows):
            first, second = r[cls.name]["exact_accepted_iterations_1_2"]
            x = j + (k - 1) * width
            ax2.plot([x - 0.08, x + 0.08], [first, second], "-", color=color)
            ax2.plot(x - 0.08, first, "o", color=color, ms=4)
            ax2.plot(x + 0.08, second, "s", color=color, ms=4)
    ax2.set_xticks(np.arange(len(exact_rows)))
    ax2.set_xticklabels([r["label"] for r in exact_rows], fontsize=8)
    ax2.set_ylabel("exact E[accepted]: iteration 1 (o) -> 2 (s)")
    ax2.set_title("first two iterations from an empty context (exact)", fontsize=9)
    ax2.grid(alpha=0.3, axis="y")
    fig.suptitle(data["title"], fontsize=10)
    return fig


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

{table(["pair", "token", "published block", "v1 block", "exact E[tau], it. 1 -> 2 (token / published / v1)"], rows)}
"""


def _end_to_end_pairs():
    yield ("binary example", "IID draft (2/3, 1/3) vs target (1/3, 2/3)",
           IIDSource([2 / 3, 1 / 3]), IIDSource([1 / 3, 2 / 3]))
    for vocab, conc, seed in ((2, 1.0, 0), (3, 2.0, 1), (4, 5.0, 2)):
        d, t = random_markov(vocab, conc, seed=seed)
        yield (f"Markov V={vocab}, c={conc:g}", f"random_markov(vocab={vocab}, concentration={conc}, seed={seed})",
               d, t)


def _block_e2e_headline(data: dict) -> str:
    """How often v1's per-iteration optimum loses to published block verification over a whole decode."""
    rows = data["rows"]
    worse = [r for r in rows if r["block_v1"]["block_efficiency"] < r["block"]["block_efficiency"]]
    gap = max(1 - r["block_v1"]["block_efficiency"] / r["block"]["block_efficiency"] for r in rows)
    return (f"End to end (L = {data['draft_length']}), v1's per-iteration optimum does not survive: its block "
            f"efficiency is below published block verification's on {len(worse)} of {len(rows)} pairs (by up to "
            f"{100 * gap:.1f} %), because the residual target it carries makes the next iteration accept less.")


@register("block_e2e", "block_end_to_end", render=render_block_e2e, section=_block_e2e_section, pair=True,
          headline=_block_e2e_headline)
def block_end_to_end_data(draft=None, target=None, *, draft_length: int = 4, tokens: int = 4000, sequences: int = 32,
                          scale: float = 1.0, seed: int = 0) -> dict:
    """Long-run block efficiency of token, published block and v1 block verification.

    For each pair the decode loop generates ``sequences`` x ``tokens`` tokens per
    verifier (v1 with its carried residual target), and the exact engine gives
    E[τ] of the first two iterations from an empty context, which explains the
    outcome: v1 maximises the first iteration, and the carried residual target
    lowers the next one. ``draft``/``target`` (sources, or rows for IID sources) replace the
    built-in pairs by the user's.
    """
    if (draft is None) != (target is None):
        raise ValueError("give both draft and target, or neither")
    n_tok = max(200, int(tokens * scale))
    L = draft_length
    rows = []
    if draft is None:
        pairs = list(_end_to_end_pairs())
    else:
        draft, target = as_sources(draft, target)
        pairs = [("user pair", f"draft {describe(draft)} vs target {describe(target)}", draft, target)]
    for k, (short, label, draft, target) in enumerate(pairs):
        entry = {"pair": label, "label": short, "vocab_size": target.vocab_size}
        for j, cls in enumerate(VERIFIERS.values()):
            run = generate(draft, target, cls(), L, n_tok, n_sequences=sequences, seed=seed + 100 * k + j,
                           progress=False)
            exact = evaluate(draft, target, cls(), L, iterations=2) if target.vocab_size <= 3 else None
            entry[cls.name] = {
                "block_efficiency": run.block_efficiency.value,
                "low": run.block_efficiency.low,
                "high": run.block_efficiency.high,
                "generated_tokens": run.generated,
                "target_calls": run.target_calls,
                "exact_accepted_iterations_1_2": None if exact is None
                else exact.expected_accepted_per_iteration.tolist(),
            }
        rows.append(entry)
    return {
        "figure": "block_end_to_end",
        "title": f"End-to-end block efficiency, L = {L} (decode loop, {sequences} x {n_tok} tokens per bar)",
        "quantity": "block efficiency = generated tokens / target calls; exact E[tau] of iterations 1 and 2",
        "draft_length": L,
        "tokens_per_sequence": n_tok,
        "sequences": sequences,
        "seed": seed,
        "rows": rows,
    }
