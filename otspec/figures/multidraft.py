"""Multi-draft figures: SpecTr Figures 4–6, the shape of MCSD Figure 3, tree decoding.

Specs: ``multi_draft_otm.md`` and ``mcsd.md``. Every curve is computed: optima by the fast
min-cut route (checked against the LP where the LP is small), k-Seq at ρ*, multi-round and
naive acceptance by their exact formulas, multi-round without replacement exactly where its
path enumeration fits (and by the closed form 1 − C(N−d_q, k)/C(N, k) on uniform pairs), else
by Monte Carlo with a 95 % interval and the method recorded; block efficiency by the tree
decode loop.

Spec: ``docs/multi_draft_otm.md``, ``docs/mcsd.md``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .. import theory
from ..drafts import DraftTree, sample_candidates
from ..engine.tree import generate_tree
from ..errors import SizeLimitError
from ..solvers import otm_lp, otm_value
from ..sources import IIDSource, MarkovSource, random_markov
from ..verifiers import (
    MULTI_DRAFT_REGISTRY,
    KSeq,
    MultiRound,
    MultiRoundWithoutReplacement,
    NaiveMultiCandidate,
    OTMVerify,
)
from . import register
from .common import as_sources, axes, describe, fmt, style_of, table

#: Acceptance curves drawn for every (draft, target) row pair, with the verifier that draws each.
CURVES = {
    "optimal": OTMVerify(replacement=True),
    "optimal_without_replacement": OTMVerify(replacement=False),
    "kseq": KSeq(),
    "multiround": MultiRound(),
    "multiround_without_replacement": MultiRoundWithoutReplacement(),
    "naive": NaiveMultiCandidate(),
}
#: z of a two-sided 95 % normal interval.
Z95 = 1.959963984540054


def _uniform_pair(p, q):
    """(N, d_q) if p = U(N) and q = U(d_q) on a subset of p's support, else None."""
    sp, sq = p > 0, q > 0
    if not (np.all(sq <= sp) and np.ptp(p[sp]) == 0 and np.ptp(q[sq]) == 0):
        return None
    return int(sp.sum()), int(sq.sum())


def _sampled_acceptance(verifier, draft, target, k: int, n: int, seed: int) -> tuple[float, float]:
    """Monte Carlo acceptance of ``verifier`` and its standard error, from ``n`` candidate tuples."""
    rng = np.random.default_rng(seed)
    rows_p = np.broadcast_to(np.asarray(draft, dtype=np.float64), (n, len(draft)))
    rows_q = np.broadcast_to(np.asarray(target, dtype=np.float64), (n, len(target)))
    cands = sample_candidates(rows_p, k, rng, replacement=verifier.replacement)
    hits = int(np.sum(verifier.sample(cands, rows_p, rows_q, rng, validate=False).accepted))
    mean = hits / n
    return mean, math.sqrt(max(mean * (1 - mean), 0.0) / n)


def acceptance_curves(draft, target, ks, mc_samples: int = 20_000, seed: int = 0) -> dict:
    """Every acceptance probability of :data:`CURVES` for k in ``ks`` (one position).

    All values are exact except multi-round without replacement where neither its closed form
    (uniform pairs) nor its path enumeration (:data:`~otspec.theory.multidraft.MAX_MULTIROUND_PATHS`)
    applies: there it is estimated from ``mc_samples`` candidate tuples, and
    ``methods["multiround_without_replacement"]`` and ``multiround_without_replacement_stderr``
    say so (stderr 0 for exact values).
    """
    p, q = np.asarray(draft, dtype=np.float64), np.asarray(target, dtype=np.float64)
    out = {name: [] for name in CURVES}
    out["rho_star"] = []
    out["multiround_without_replacement_stderr"] = []
    out["methods"] = {"multiround_without_replacement": []}
    uniform = _uniform_pair(p, q)
    for k in ks:
        out["optimal"].append(otm_value(p, q, k))
        out["optimal_without_replacement"].append(otm_value(p, q, k, replacement=False))
        out["kseq"].append(theory.kseq_acceptance(p, q, k))
        out["rho_star"].append(theory.kseq_rho_star(p, q, k))
        out["multiround"].append(theory.multiround_acceptance(p, q, k))
        stderr = 0.0
        if uniform is not None:
            value, method = theory.uniform_multiround_without_replacement(*uniform, k), "closed form"
        else:
            try:
                value, method = theory.multiround_acceptance(p, q, k, replacement=False), "exact"
            except SizeLimitError:
                value, stderr = _sampled_acceptance(CURVES["multiround_without_replacement"], p, q, k, mc_samples,
                                                    1000 * seed + k)
                method = f"monte carlo, {mc_samples} tuples"
        out["methods"]["multiround_without_replacement"].append(method)
        out["multiround_without_replacement"].append(value)
        out["multiround_without_replacement_stderr"].append(stderr)
        out["naive"].append(theory.naive_acceptance(p, q, k))
    return out


def _curves_panel(ax, ks, values: dict, curves):
    for name in curves:
        pts = [(k, v) for k, v in zip(ks, values[name], strict=True) if v is not None]  # null: beyond a size limit
        if pts:
            ax.plot(*zip(*pts, strict=True), **style_of(CURVES[name], marker=".", ms=4))
        err = values.get(f"{name}_stderr")
        if err and any(err):  # Monte Carlo points: 95 % intervals
            ks_mc = [k for k, e in zip(ks, err, strict=True) if e]
            vals = [v for v, e in zip(values[name], err, strict=True) if e]
            ax.errorbar(ks_mc, vals, yerr=[Z95 * e for e in err if e], fmt="none", capsize=2,
                        color=CURVES[name].style["color"])
    ax.set_xlabel("number of drafts k")
    ax.grid(alpha=0.3)


def _series_grid(data: dict, curves, title_of, extra=None):
    series = data["series"]
    fig, panels = axes((3.4 * len(series), 3.8), ncols=len(series), sharey=True, squeeze=False)
    panels = panels[0]
    for ax, s in zip(panels, series, strict=True):
        _curves_panel(ax, data["ks"], s, curves)
        if extra:
            extra(ax, data, s)
        ax.set_title(title_of(s), fontsize=9)
    panels[0].set_ylabel("acceptance probability")
    panels[0].legend(fontsize=6.5)
    fig.suptitle(data["title"], fontsize=10)
    return fig


def _lp_marks(ax, data, s):
    ax.plot(data["lp_ks"], s["lp"], "x", color="k", ms=5, label="LP optimum (check)")


def render_fig4(data: dict):
    return _series_grid(data, ("optimal", "optimal_without_replacement", "kseq"),
                        lambda s: f"target Ber({s['target_p']})", _lp_marks)


def render_fig6(data: dict):
    return _series_grid(data, tuple(CURVES), lambda s: f"target Ber({s['target_p']})")


def render_fig5(data: dict):
    return _series_grid(data, ("optimal", "kseq", "multiround", "naive"),
                        lambda s: f"target U({s['target_support']}), r = {s['r']:g}")


def _cell(values: dict, name: str, i: int) -> str:
    """A table cell: exact values as numbers, Monte Carlo estimates with their 95 % interval and "(MC)"."""
    err = values.get(f"{name}_stderr")
    if err and err[i]:
        v = values[name][i]
        return f"{v:.4f} [{v - Z95 * err[i]:.4f}, {v + Z95 * err[i]:.4f}] (MC)"
    return fmt(values[name][i])


_MC_NOTE = ("Every value is exact (closed form, LP/flow/min-cut or exact recursion) except entries marked (MC): "
            "Monte Carlo estimates with their 95 % interval, used where an exact route is beyond its size limit.")


def _multidraft_section(data: dict, png: Path) -> str:
    names = ("optimal", "optimal_without_replacement", "kseq", "multiround", "multiround_without_replacement",
             "naive")
    rows, key = [], ("target_p" if "target_p" in data["series"][0] else "target_support")
    for s in data["series"]:
        for i, k in enumerate(data["ks"]):
            if k in (1, 2, 4, 6, 10):
                rows.append([s[key], k] + [_cell(s, n, i) for n in names])
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

Quantity: {data['quantity']}. {'; '.join(checks)}. {_MC_NOTE}

{table([key, "k", *names], rows)}
"""


FIG6_NOTE = ("SpecTr Figure 6 setting: the Bernoulli pairs above with every verifier, multi-round (SpecInfer / "
             "MCSD) with and without replacement and the naive scheme included; numbers in the table above.")


def _figure_only(data: dict, png: Path, note: str) -> str:
    return f"""## {data['title']} — all verifiers

![{data['title']}]({png.name})

{note}
"""


@register("spectr_fig4", "spectr_fig4_bernoulli", render=render_fig4, section=_multidraft_section, scaled=False)
def spectr_bernoulli_data(draft_p: float = 0.25, target_ps=(0.1, 0.5, 0.75, 1.0), max_k: int = 10,
                          scale: float = 1.0) -> dict:
    """SpecTr Figures 4 and 6: draft Ber(0.25), targets Ber(b), acceptance against k.

    Adds the closed form (14), the LP optimum (k <= 8) as a check, the
    without-replacement optimum and MCSD's multi-round without replacement.
    """
    ks = list(range(1, max_k + 1))
    series = []
    for b in target_ps:
        p, q = np.array([1 - draft_p, draft_p]), np.array([1 - b, b])
        entry = {"target_p": b, **acceptance_curves(p, q, ks),
                 "closed_form": [theory.bernoulli_alpha(draft_p, b, k) for k in ks],
                 "lp": [otm_lp(p, q, k).value for k in ks if k <= 8]}
        series.append(entry)
    return {
        "figure": "spectr_bernoulli",
        "title": f"Multi-draft acceptance, draft Ber({draft_p}) vs target Ber(b)",
        "quantity": "acceptance probability at one position (P(output is one of the k drafts))",
        "draft_p": draft_p,
        "ks": ks,
        "lp_ks": [k for k in ks if k <= 8],
        "series": series,
    }


register("spectr_fig6", "spectr_fig6_multiround", render=render_fig6,
         section=lambda d, p: _figure_only(d, p, FIG6_NOTE), scaled=False)(spectr_bernoulli_data)


@register("spectr_fig5", "spectr_fig5_uniform", render=render_fig5, section=_multidraft_section)
def spectr_uniform_data(support: int = 120, target_supports=(12, 24, 40, 60, 120), max_k: int = 10,
                        scale: float = 1.0) -> dict:
    """SpecTr Figure 5: draft U(120) vs targets U(d_q); closed form (15) 1 − (1 − 1/r)^k, r = d/d_q."""
    ks = list(range(1, max_k + 1))
    mc = max(2000, int(20_000 * scale))
    series = []
    for dq in target_supports:
        p = np.full(support, 1.0 / support)
        q = np.zeros(support)
        q[:dq] = 1.0 / dq
        r = support / dq
        series.append({"target_support": dq, "r": r, **acceptance_curves(p, q, ks, mc_samples=mc),
                       "closed_form": [theory.uniform_alpha(r, k) for k in ks]})
    return {
        "figure": "spectr_uniform",
        "title": f"Multi-draft acceptance, draft U({support}) vs target U(d_q)",
        "quantity": "acceptance probability at one position",
        "support": support,
        "ks": ks,
        "series": series,
    }


def render_mcsd_fig3(data: dict):
    fig, ax = axes()
    _curves_panel(ax, data["ks"], data, tuple(CURVES))
    ax.set_ylabel("acceptance probability (stationary average)")
    ax.set_title(data["title"], fontsize=9)
    ax.legend(fontsize=7)
    return fig


def _markov_accept_section(data: dict, png: Path) -> str:
    names = ("optimal", "optimal_without_replacement", "kseq", "multiround", "multiround_without_replacement",
             "naive")
    rows = [[k] + [_cell(data, n, i) for n in names] for i, k in enumerate(data["ks"])]
    return f"""## {data['title']}

![{data['title']}]({png.name})

Quantity: {data['quantity']} (the shape of MCSD Figure 3). {_MC_NOTE}

{table(["k", *names], rows)}
"""


def _stationary(matrix: np.ndarray) -> np.ndarray:
    vals, vecs = np.linalg.eig(matrix.T)
    v = np.real(vecs[:, np.argmin(np.abs(vals - 1.0))])
    return np.abs(v) / np.abs(v).sum()


def _contexts(draft, target):
    """(weights, draft rows, target rows) of the one-position contexts of an IID or stationary Markov pair."""
    draft, target = as_sources(draft, target)
    if isinstance(draft, IIDSource) and isinstance(target, IIDSource):
        return np.ones(1), draft.probs[None], target.probs[None]
    if all(isinstance(s, MarkovSource | IIDSource) for s in (draft, target)) and \
            all(getattr(s, "stationary", True) for s in (draft, target)):
        P, Q = (s.matrix(1) if isinstance(s, MarkovSource) else np.broadcast_to(s.probs, (s.vocab_size,) * 2)
                for s in (draft, target))
        return _stationary(Q), P, Q
    raise ValueError("mcsd_fig3 averages one-position acceptance over contexts: it needs IID or stationary Markov "
                     f"sources, got {describe(draft)} and {describe(target)}")


@register("mcsd_fig3", "mcsd_fig3_markov_acceptance", render=render_mcsd_fig3, section=_markov_accept_section,
          pair=True)
def markov_acceptance_data(draft=None, target=None, *, vocab: int = 30, concentration: float = 2.0, seed: int = 3,
                           max_k: int = 8, scale: float = 1.0) -> dict:
    """Acceptance against k on a Markov pair (the shape of MCSD Figure 3), default or the user's.

    Each curve averages the per-context acceptance over the previous token, weighted by the
    target chain's stationary law. ``draft``/``target``: IID or stationary Markov sources (or
    rows, for IID) instead of ``random_markov(vocab, concentration, seed=seed)``.
    """
    if (draft is None) != (target is None):
        raise ValueError("give both draft and target, or neither")
    pair = random_markov(vocab, concentration, seed=seed) if draft is None else (draft, target)
    weights, P, Q = _contexts(*pair)
    vocab = P.shape[1]
    ks = list(range(1, max_k + 1))
    mc = max(2000, int(20_000 * scale))
    per_state = [acceptance_curves(P[a], Q[a], ks, mc_samples=mc, seed=a) for a in range(len(weights))]
    curves = {name: (weights @ np.array([s[name] for s in per_state])).tolist() for name in CURVES}
    # independent per-state estimates: the weighted mean's variance is Σ w_a² se_a²
    se = np.array([s["multiround_without_replacement_stderr"] for s in per_state])
    curves["multiround_without_replacement_stderr"] = np.sqrt((weights[:, None] ** 2 * se**2).sum(axis=0)).tolist()
    curves["methods"] = {"multiround_without_replacement": sorted({m for s in per_state
                                                                   for m in s["methods"]["multiround_without_replacement"]})}
    return {
        "figure": "markov_acceptance",
        "title": (f"Acceptance vs k, random Markov pair (V={vocab}, concentration={concentration}, seed={seed})"
                  if draft is None else f"Acceptance vs k, user pair (V={vocab})"),
        "quantity": "stationary-weighted acceptance probability at one position",
        "vocab_size": vocab,
        "ks": ks,
        **curves,
    }


def render_trees(data: dict):
    fig, ax = axes()
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


def _trees_section(data: dict, png: Path) -> str:
    rows = [[r["label"], r["config"], "with" if r["replacement"] else "without", r["verifier"], r["rule"],
             r["tree_tokens"], f"{r['block_efficiency']:.4f} [{r['low']:.4f}, {r['high']:.4f}]"] for r in data["rows"]]
    return f"""## {data['title']}

![{data['title']}]({png.name})

{data['sequences']} sequences x {data['tokens_per_sequence']} tokens per setup. Quantity: {data['quantity']}.
Rule "match" continues with every candidate equal to the emitted token (SpecTr Algorithm 3); "accepted"
only after an accepted candidate (MCSD).

{table(["setup", "k-config", "replacement", "verifier", "rule", "draft tokens", "block efficiency [95% CI]"], rows)}
"""


#: (label, tree config, replacement, verifier name, rule)
TREE_SETUPS = (
    ("SD 1x1x1x1", "1x1x1x1", True, "multiround", "accepted"),
    ("SpecTr 4 i.i.d., k-Seq", "4x1x1x1", True, "kseq", "match"),
    ("SpecTr 4 i.i.d., multi-round", "4x1x1x1", True, "multiround", "match"),
    ("MCSD 4x2x2x1 with repl.", "4x2x2x1", True, "multiround", "accepted"),
    ("MCSD 4x2x2x1 w/o repl.", "4x2x2x1", False, "multiround_without_replacement", "accepted"),
    ("MCSD 4x2x2x1 naive", "4x2x2x1", True, "naive", "accepted"),
)


@register("trees", "multidraft_trees", render=render_trees, section=_trees_section, pair=True)
def tree_efficiency_data(draft=None, target=None, *, vocab: int = 30, concentration: float = 2.0, seed: int = 3,
                         tokens: int = 2000, sequences: int = 32, scale: float = 1.0) -> dict:
    """Block efficiency of multi-draft trees on a Markov pair, default or the user's (decode loop, 95% intervals)."""
    if (draft is None) != (target is None):
        raise ValueError("give both draft and target, or neither")
    n_tok = max(100, int(tokens * scale))
    if draft is None:
        draft, target = random_markov(vocab, concentration, seed=seed)
        title = f"Multi-draft trees, random Markov pair (V={vocab}, concentration={concentration})"
    else:
        draft, target = as_sources(draft, target)
        title = f"Multi-draft trees, user pair (V={draft.vocab_size})"
    rows = []
    for j, (label, config, replacement, name, rule) in enumerate(TREE_SETUPS):
        tree = DraftTree.parse(config, replacement)
        res = generate_tree(draft, target, MULTI_DRAFT_REGISTRY[name](), tree, n_tok, rule=rule, n_sequences=sequences,
                            seed=seed + j, progress=False)
        rows.append({"label": label, "config": config, "replacement": replacement, "verifier": name,
                     "rule": rule, "tree_tokens": tree.num_tokens,
                     "block_efficiency": res.block_efficiency.value, "low": res.block_efficiency.low,
                     "high": res.block_efficiency.high, "target_calls": res.target_calls})
    return {
        "figure": "tree_efficiency",
        "title": title,
        "quantity": "block efficiency = generated tokens / target calls",
        "tokens_per_sequence": n_tok,
        "sequences": sequences,
        "rows": rows,
    }
