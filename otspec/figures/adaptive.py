"""SpecDec++ on a toy Markov pair: how close fixed-length, threshold and learned policies come to the optimum.

Spec ``specdecpp.md``. Exact values: the latency of every fixed draft length and the optimum over
all stopping rules (:mod:`otspec.theory.adaptive_markov`). Measured by the decode loop (with the
cost model of the ledger): the threshold rule with the true acceptance probabilities (an oracle
head) and with a head learned from token-mixing data, over a grid of thresholds h — latency, and
the discard-rate vs verification-rate frontier (the shape of SpecDec++ Figure 3).
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
from ..sources import random_markov
from ..theory.adaptive_markov import markov_optimal_stopping, markov_policy_latency
from ..verifiers import TokenVerify
from . import register
from .common import axes, table

__all__ = ["adaptive_data", "render_adaptive"]

THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def render_adaptive(data: dict):
    fig, (ax1, ax2) = axes((11, 4.4), ncols=2)
    fixed = data["fixed"]
    ks = [int(k) for k in fixed]
    ax1.axhline(data["optimal"], color="k", lw=1.2, label=f"exact optimum {data['optimal']:.4f}")
    ax1.axhline(data["best_fixed"], color="0.5", ls="--", lw=1,
                label=f"best fixed K = {data['best_fixed_length']}: {data['best_fixed']:.4f}")
    for key, label, color in (("oracle", "threshold, oracle head", "C0"), ("learned", "threshold, learned head", "C1")):
        rows = data[key]
        ax1.plot([r["threshold"] for r in rows], [r["latency"] for r in rows], "o-", ms=3, color=color, label=label)
        ax2.plot([r["verification_rate"] for r in rows], [r["discard_rate"] for r in rows], "o-", ms=3, color=color,
                 label=label)
    ax2.plot(data["fixed_verification_rate"], data["fixed_discard_rate"], "s--", ms=4, color="0.4",
             label="fixed K = 1..K_max")
    for k, x, y in zip(ks, data["fixed_verification_rate"], data["fixed_discard_rate"], strict=True):
        ax2.annotate(str(k), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax1.set_xlabel("threshold h on P(some drafted token rejected)")
    ax1.set_ylabel(f"latency per token (t_target = 1, t_draft = {data['t_draft']})")
    ax2.set_xlabel("verification rate N_target / N")
    ax2.set_ylabel("discard rate N_discarded / N")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(data["title"], fontsize=10)
    return fig


def _adaptive_section(data: dict, png: Path) -> str:
    rows = [[r["threshold"], f"{o['latency']:.4f}", f"{r['latency']:.4f}", f"{o['discard_rate']:.3f}",
             f"{o['verification_rate']:.3f}"] for o, r in zip(data["oracle"], data["learned"], strict=True)]
    best_oracle = min(r["latency"] for r in data["oracle"])
    best_learned = min(r["latency"] for r in data["learned"])
    return f"""## Adaptive draft length (SpecDec++) on a Markov pair

![{data['title']}]({png.name})

{data['title']}. Exact (theory.adaptive_markov): the optimum over every stopping rule is {data['optimal']:.4f}
per token against {data['best_fixed']:.4f} for the best fixed length K = {data['best_fixed_length']} and
{data['autoregressive']} for plain decoding; the optimal rule is {'' if data['optimal_is_threshold_policy'] else 'not '}a
threshold on P(some drafted token rejected) at every step. Measured ({data['sequences']} x {data['tokens']} tokens per
point, decode loop): the best threshold reaches {best_oracle:.4f} with the oracle head and {best_learned:.4f} with the
head learned from token-mixing data (binary KL {data['head_kl']:.4f} on its training data). Measured latencies are
finite-sample estimates (their spread at this size is a few thousandths), so a measured point can sit just below
the exact optimum.

{table(["h", "oracle latency", "learned latency", "oracle discard rate", "oracle verification rate"], rows)}
"""


@register("adaptive", "adaptive_draft_length", render=render_adaptive, section=_adaptive_section)
def adaptive_data(vocab: int = 3, concentration: float = 1.0, seed: int = 2, max_length: int = 8,
                  t_draft: float = 0.1, tokens: int = 4000, sequences: int = 16, scale: float = 1.0) -> dict:
    """Exact and measured latencies of adaptive draft-length policies on ``random_markov(vocab, concentration, seed)``."""
    draft, target = random_markov(vocab, concentration, seed=seed)
    n_tok = max(200, int(tokens * scale))
    fixed = {str(k): markov_policy_latency(draft, target, k, t_draft) for k in range(1, max_length + 1)}
    best = min(fixed, key=fixed.get)
    opt = markov_optimal_stopping(draft, target, max_length, t_draft)
    runs = [generate(draft, target, TokenVerify(), k, n_tok, n_sequences=sequences, seed=seed + k, progress=False)
            for k in range(1, max_length + 1)]
    data = token_mixing_data(draft, target, max(200, int(2000 * scale)), 20, seed=seed)
    features = one_hot_features(data.previous, data.tokens, vocab)
    head = AcceptanceHead().fit(features, data.labels)

    def featurize(previous, tokens_):
        return one_hot_features(previous, tokens_, vocab)

    def measured(controller, h, offset):
        res = generate(draft, target, TokenVerify(), controller, n_tok, n_sequences=sequences, seed=seed + offset,
                       progress=False)
        cost = res.cost(t_draft)
        return {"threshold": h, "latency": cost.latency, "discard_rate": cost.discard_rate,
                "verification_rate": cost.verification_rate}

    return {
        "title": f"SpecDec++ policies, random Markov pair (V={vocab}, concentration={concentration}, seed={seed}), "
                 f"K_max = {max_length}",
        "t_draft": t_draft, "autoregressive": 1.0, "tokens": n_tok, "sequences": sequences,
        "fixed": fixed, "best_fixed_length": int(best), "best_fixed": fixed[best],
        "fixed_discard_rate": [r.cost(t_draft).discard_rate for r in runs],
        "fixed_verification_rate": [r.cost(t_draft).verification_rate for r in runs],
        "fixed_measured": [r.cost(t_draft).latency for r in runs],
        "optimal": opt.latency, "optimal_is_threshold_policy": opt.is_threshold_policy,
        "oracle": [measured(ThresholdController(h, max_length), h, 100 + i) for i, h in enumerate(THRESHOLDS)],
        "learned": [measured(LearnedHeadController(head, featurize, h, max_length), h, 200 + i)
                    for i, h in enumerate(THRESHOLDS)],
        "head_kl": binary_kl(data.labels, head.predict(features)),
    }
