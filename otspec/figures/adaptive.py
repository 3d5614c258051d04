"""SpecDec++ on a toy pair: how close fixed-length, threshold and learned policies come to the optimum.

Spec ``specdecpp.md``. Exact values: the latency of every fixed draft length, of every threshold
rule and the optimum over all stopping rules (:mod:`otspec.theory.adaptive`). Measured by the
decode loop (the ledger's cost model, with intervals): fixed lengths and the threshold rule with
the true acceptance probabilities (an oracle head) and with a head learned from token-mixing
data, over a grid of thresholds h — latency against K, and the discard-rate vs verification-rate
frontier (the shape of SpecDec++ Figure 3).
"""

from __future__ import annotations

from pathlib import Path

from ..engine import ThresholdController, generate
from ..engine.heads import (
    AcceptanceHead,
    LearnedHeadController,
    binary_kl,
    one_hot_features,
    token_mixing_data,
)
from ..sources import IIDSource, random_iid
from ..theory.adaptive import fixed_length_latency, optimal_stopping, threshold_policy_latency
from ..verifiers import TokenVerify
from . import register
from .common import as_sources, axes, table

__all__ = ["DEFAULT_PAIR", "adaptive_data", "render_adaptive"]

THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def render_adaptive(data: dict):
    fig, (ax1, ax2) = axes((11, 4.4), ncols=2)
    fixed = data["fixed"]
    ks = [int(k) for k in fixed]
    ax1.plot(ks, [fixed[str(k)] for k in ks], "s-", ms=3, color="0.4", label="fixed K (exact)")
    ax1.plot(ks, data["fixed_measured"], "x", color="0.4", ms=5, label="fixed K (decode loop)")
    ax1.axhline(data["optimal"], color="k", lw=1.2, label=f"exact optimum {data['optimal']:.4f}")
    exact = min(data["oracle"], key=lambda r: r["exact_latency"])
    ax1.axhline(exact["exact_latency"], color="C0", ls="-", lw=0.8,
                label=f"best threshold, oracle head (exact, h = {exact['threshold']:g})")
    for key, label, color in (("oracle", "best threshold, oracle head", "C0"),
                              ("learned", "best threshold, learned head", "C1")):
        best = min(data[key], key=lambda r: r["latency"])
        ax1.axhline(best["latency"], color=color, ls=":", lw=1.2,
                    label=f"{label} (decode loop, h = {best['threshold']:g})")
    for key, label, color in (("oracle", "threshold, oracle head (decode loop)", "C0"),
                              ("learned", "threshold, learned head (decode loop)", "C1")):
        rows = data[key]
        ax2.plot([r["verification_rate"] for r in rows], [r["discard_rate"] for r in rows], "o-", ms=3, color=color,
                 label=label)
    ax2.plot(data["fixed_verification_rate"], data["fixed_discard_rate"], "s--", ms=4, color="0.4",
             label="fixed K = 1..K_max (decode loop)")
    for k, x, y in zip(ks, data["fixed_verification_rate"], data["fixed_discard_rate"], strict=True):
        ax2.annotate(str(k), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax1.set_xlabel("draft length K")
    ax1.set_ylabel(f"latency per token (t_target = 1, t_draft = {data['t_draft']})")
    ax2.set_xlabel("verification rate N_target / N")
    ax2.set_ylabel("discard rate N_discarded / N")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(data["title"], fontsize=10)
    return fig


def _adaptive_section(data: dict, png: Path) -> str:
    rows = [[r["threshold"], f"{o['exact_latency']:.4f}", f"{o['latency']:.4f} [{o['latency_low']:.4f}, "
             f"{o['latency_high']:.4f}]", f"{r['latency']:.4f}", f"{o['discard_rate']:.3f}",
             f"{o['verification_rate']:.3f}"] for o, r in zip(data["oracle"], data["learned"], strict=True)]
    best_oracle = min(r["latency"] for r in data["oracle"])
    best_learned = min(r["latency"] for r in data["learned"])
    return f"""## Adaptive draft length (SpecDec++)

![{data['title']}]({png.name})

{data['title']}. Exact (theory.adaptive): the optimum over every stopping rule is {data['optimal']:.4f}
per token against {data['best_fixed']:.4f} for the best fixed length K = {data['best_fixed_length']} and
{data['autoregressive']} for plain decoding; the optimal rule is {'' if data['optimal_is_threshold_policy'] else 'not '}a
threshold on P(some drafted token rejected) at every step. Measured ({data['sequences']} x {data['tokens']} tokens per
point, decode loop): the best threshold reaches {best_oracle:.4f} with the oracle head and {best_learned:.4f} with the
head learned from token-mixing data (binary KL {data['head_kl']:.4f} on its training data). Measured latencies are
finite-sample estimates (their spread at this size is a few thousandths), so a measured point can sit just below
the exact optimum.

{table(["h", "oracle exact", "oracle measured [95% CI]", "learned measured", "discard rate", "verification rate"],
        rows)}
"""


#: The figure's default pair: a seeded IID pair of 8 tokens (the exact optimum over its 8 classes of equal q/p).
DEFAULT_PAIR = {"vocab": 8, "concentration": 1.0, "seed": 3}


def _adaptive_headline(data: dict) -> str:
    gain = 1 - data["optimal"] / data["best_fixed"]
    return (f"SpecDec++ on an IID pair (t_draft = {data['t_draft']} t_target): the optimal stopping rule's latency "
            f"is {data['optimal']:.4f} target calls per token against {data['best_fixed']:.4f} for the best fixed draft length (K = {data['best_fixed_length']}), "
            f"{100 * gain:.1f} % less; plain decoding costs {data['autoregressive']:g}.")


@register("adaptive", "adaptive_frontier", render=render_adaptive, section=_adaptive_section, pair=True,
          headline=_adaptive_headline)
def adaptive_data(draft=None, target=None, *, max_length: int = 14, t_draft: float = 0.1, tokens: int = 1000,
                  sequences: int = 64, scale: float = 1.0) -> dict:
    """Exact and measured latencies of draft-length policies on an IID pair (default :data:`DEFAULT_PAIR`).

    Exact: fixed K = 1..``max_length`` and the optimum over every stopping rule
    (:func:`otspec.theory.adaptive.optimal_stopping`). Measured by the decode loop: fixed K, and the
    threshold rule over h ∈ 0.1..0.9 with the oracle head and with a head learned from
    token-mixing data; each row gives ``threshold``, ``latency``, ``discard_rate``, ``verification_rate``.
    Each run decodes ``sequences`` sequences of ``tokens`` tokens together (64 × 1,000 by default: the loop's
    Python steps are shared by the batch, so many short sequences cost a quarter of 16 × 4,000 for the same
    tokens; an IID pair has no start-up transient to bias short sequences).
    """
    if (draft is None) != (target is None):
        raise ValueError("give both draft and target, or neither")
    draft, target = random_iid(**DEFAULT_PAIR) if draft is None else as_sources(draft, target)
    if not (isinstance(draft, IIDSource) and isinstance(target, IIDSource)):
        raise ValueError("the adaptive figure takes an IID pair (its optimum is computed over classes of equal q/p)")
    p, q, V = draft.probs, target.probs, draft.vocab_size
    n_tok = max(200, int(tokens * scale))
    ks = list(range(1, max_length + 1))
    fixed = {str(k): fixed_length_latency(p, q, k, t_draft) for k in ks}
    best = min(fixed, key=fixed.get)
    opt = optimal_stopping(p, q, max_length, t_draft)
    runs = [generate(draft, target, TokenVerify(), k, n_tok, n_sequences=sequences, seed=k, progress=False).cost(t_draft)
            for k in ks]
    data = token_mixing_data(draft, target, max(200, int(2000 * scale)), 20, seed=0)
    features = one_hot_features(data.previous, data.tokens, V)
    head = AcceptanceHead().fit(features, data.labels)

    def featurize(previous, tokens_):
        return one_hot_features(previous, tokens_, V)

    def measured(controller, h, offset):
        cost = generate(draft, target, TokenVerify(), controller, n_tok, n_sequences=sequences, seed=offset,
                        progress=False).cost(t_draft)
        return {"threshold": h, "latency": cost.latency, "latency_low": cost.latency_interval.low,
                "latency_high": cost.latency_interval.high, "discard_rate": cost.discard_rate,
                "verification_rate": cost.verification_rate, "exact_latency": None}

    oracle = [measured(ThresholdController(h, max_length), h, 100 + i) for i, h in enumerate(THRESHOLDS)]
    for row in oracle:  # the threshold rule with the true acceptance probabilities has an exact latency too
        row["exact_latency"] = threshold_policy_latency(p, q, max_length, t_draft, thresholds=row["threshold"])
    return {
        "title": f"SpecDec++ policies, IID pair (V={V}), K_max = {max_length}, t_draft / t_target = {t_draft}",
        "t_draft": t_draft, "autoregressive": 1.0, "tokens": n_tok, "sequences": sequences,
        "draft": p.tolist(), "target": q.tolist(),
        "fixed": fixed, "best_fixed_length": int(best), "best_fixed": fixed[best],
        "fixed_discard_rate": [c.discard_rate for c in runs],
        "fixed_verification_rate": [c.verification_rate for c in runs],
        "fixed_measured": [c.latency for c in runs],
        "optimal": opt.latency, "optimal_is_threshold_policy": opt.is_threshold_policy,
        "optimal_thresholds": [t["continue_below"] for t in opt.thresholds],
        "oracle": oracle,
        "learned": [measured(LearnedHeadController(head, featurize, h, max_length), h, 200 + i)
                    for i, h in enumerate(THRESHOLDS)],
        "head_kl": binary_kl(data.labels, head.predict(features)),
    }
