"""The rejection–bias figure: the token-level front with Decoding-OPT/-UNO, and the exact sequence-level front.

Spec ``yin_theory.md`` §7 (Theorems 4–5); the sequence-level LP is not in the paper
(:func:`otspec.solvers.pareto.sequence_min_bias`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..distributions import row_pair, total_variation
from ..errors import SizeLimitError
from ..solvers.pareto import MAX_SEQUENCE_LP_VARIABLES, min_bias, sequence_pareto
from ..sources import MarkovSource, random_markov
from ..theory.pareto import family_curve, sequence_expected_rejections_sd
from ..verifiers import DecodingOPT, DecodingUNO
from . import register
from .common import as_sources, axes

__all__ = ["DEFAULT_DRAFT", "DEFAULT_TARGET", "default_sequence_pair", "pareto_figure_data", "render_pareto"]

#: The worked example of §7: draft p and target q (TV = 0.3).
DEFAULT_DRAFT = (0.5, 0.3, 0.2)
DEFAULT_TARGET = (0.2, 0.3, 0.5)


def default_sequence_pair(seed: int = 7) -> tuple[MarkovSource, MarkovSource]:
    """The sequence panel's default pair: ``random_markov(3, 1.0, horizon=3, seed=seed)``."""
    return random_markov(3, 1.0, horizon=3, seed=seed)


def render_pareto(data: dict):
    """Two-panel matplotlib Figure from :func:`pareto_figure_data`'s dict."""
    fig, (ax1, ax2) = axes((11, 4.5), ncols=2)
    tok = data["token"]
    r, front = np.asarray(tok["front"]["rejection"]), np.asarray(tok["front"]["bias"])
    ax1.fill_between(r, 0.0, front, color="0.85", label="unattainable")
    ax1.plot(r, front, "k-", lw=1.5, label="front max(0, TV - r)")
    for key, cls in (("uno", DecodingUNO), ("opt", DecodingOPT)):
        ax1.plot(tok[key]["rejection"], tok[key]["bias"], "-", ms=3, label=cls.label, **cls.style)
    ax1.plot(tok["lp"]["rejection"], tok["lp"]["bias"], "x", color="k", ms=7, label="LP optimum")
    ax1.set_xlim(0, max(1.5 * tok["tv"], 0.05))
    ax1.set_xlabel("rejection probability r")
    ax1.set_ylabel("bias TV(P_A, q)")
    ax1.set_title(f"token level: p = {np.round(tok['draft'], 3).tolist()}, q = {np.round(tok['target'], 3).tolist()}",
                  fontsize=9)
    seq = data["sequence"]
    R = np.asarray(seq["rejections"])
    lower = np.asarray(seq["lower_bound"])
    ax2.fill_between(R, 0.0, np.asarray(seq["lp_bias"]), color="0.85", label="unattainable")
    ax2.plot(R, seq["lp_bias"], "k-", lw=1.5, label="LP front (exact)")
    ax2.plot(R, seq["straight_line"], "--", color="C1", label="straight line (0, TV_seq)-(E_SD, 0)")
    ax2.plot(R, seq["per_step"], ":", color="C2", label="per-step token fronts")
    ax2.plot(R, lower, "-.", color="0.5", lw=1, label="max(0, TV_seq - R)")
    ax2.set_xlabel("expected rejections E[N_rej] (budget R)")
    ax2.set_ylabel("sequence bias TV(P_A, q)")
    ax2.set_title(f"sequence level: V = {seq['vocab']}, T = {seq['horizon']}, "
                  f"max dev. from line {seq['max_deviation_from_line']:.3g}", fontsize=9)
    for ax in (ax1, ax2):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(data.get("title", ""), fontsize=10)
    return fig


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
{seq['max_deviation_from_line']:.4f} below the straight line (at E[N_rej] = {seq['max_deviation_at']:.3f}, the true
maximum between grid points) from (0, TV_seq) to (E_SD[N_rej], 0), which is
only what mixing SD with plain drafting achieves.
"""


def _sequence_horizon(draft, target, longest: int = 3) -> int:
    """The longest T <= ``longest`` (and the horizons) whose sequence LP fits its variable limit."""
    horizons = [h for h in (draft.horizon, target.horizon) if h is not None]
    V = draft.vocab_size
    for T in range(min([longest, *horizons]), 0, -1):
        if 2 * sum(V**n for n in range(1, T + 1)) + V**T <= MAX_SEQUENCE_LP_VARIABLES:
            return T
    raise SizeLimitError(f"the sequence-level LP does not fit MAX_SEQUENCE_LP_VARIABLES = "
                         f"{MAX_SEQUENCE_LP_VARIABLES:,} even at T = 1 for a vocabulary of {V} tokens",
                         size=3 * V, limit=MAX_SEQUENCE_LP_VARIABLES)


@register("pareto", "pareto", render=render_pareto, section=_pareto_section, pair=True)
def pareto_figure_data(draft=None, target=None, *, scale: float = 1.0) -> dict:
    """JSON-ready data of the two-panel Pareto figure, for the default pair or the user's.

    Panel 1 (token level; default the §7 worked example p = (0.5, 0.3, 0.2),
    q = (0.2, 0.3, 0.5)): the front max{0, TV − r} for r ∈ [0, 1], the unattainable region
    below it, Decoding-UNO and Decoding-OPT over an ε grid, and LP optima (:func:`min_bias`)
    at several r. Panel 2: :func:`sequence_pareto` for the same pair — given rows become IID
    sources, given sources are used as they are (their first-token rows feed panel 1) — or, by
    default, for :func:`default_sequence_pair`; T = 3, or the longest T <= 3 whose LP fits its
    limit. ``scale`` multiplies the grid sizes.
    """
    if not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale: expected a positive number, got {scale!r}")
    if (draft is None) != (target is None):
        raise ValueError("give both draft and target, or neither")
    if draft is None:
        p, q = row_pair(DEFAULT_DRAFT, DEFAULT_TARGET)
        seq_draft, seq_target = default_sequence_pair()
    else:
        seq_draft, seq_target = as_sources(draft, target)
        p, q = row_pair(seq_draft.next_probs([[]])[0], seq_target.next_probs([[]])[0])
    T = _sequence_horizon(seq_draft, seq_target)
    tv = float(total_variation(p, q))
    n_front = max(11, int(101 * scale))
    r_grid = np.union1d(np.linspace(0.0, 1.0, n_front), [tv])  # the front's kink at r = TV is a grid point
    eps_max = max(float(np.max(np.maximum(p - q, 0.0))), 1e-12)
    eps_grid = np.linspace(0.0, eps_max, max(6, int(41 * scale)))
    lp_r = np.linspace(0.0, min(1.0, 1.5 * tv) if tv > 0 else 1.0, max(4, int(9 * scale)))
    lp_points = [min_bias(p, q, r) for r in lp_r]
    e_sd = sequence_expected_rejections_sd(seq_draft, seq_target, T)
    seq_grid = np.linspace(0.0, 1.2 * e_sd, max(6, int(25 * scale)))
    return {
        "title": "Rejections vs distribution bias (Yin et al. 2024, Theorems 4-5)",
        "token": {
            "draft": p.tolist(), "target": q.tolist(), "tv": tv,
            "front": {"rejection": r_grid.tolist(), "bias": np.maximum(0.0, tv - r_grid).tolist()},
            "unattainable": (f"bias < max(0, TV - r) = max(0, {tv:.4g} - r): the region strictly below the line "
                             f"from (0, {tv:.4g}) to ({tv:.4g}, 0) (Theorem 5)"),
            "opt": family_curve(p, q, eps_grid, "opt"),
            "uno": family_curve(p, q, eps_grid, "uno"),
            "lp": {"rejection": lp_r.tolist(), "bias": [res.value for res in lp_points]},
        },
        "sequence": {"draft": seq_draft.to_json(), "target": seq_target.to_json(),
                     **sequence_pareto(seq_draft, seq_target, T, seq_grid)},
    }
