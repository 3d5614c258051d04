"""Data functions behind every figure: each returns a JSON-ready dict.

A figure is a data function (here) plus a renderer (:mod:`otspec.plot`); the
data is written next to the PNG so numbers can be checked without reading
pixels. Every number is computed: closed forms by :mod:`otspec.theory`, exact
values by :mod:`otspec.engine.exact`, estimates by the simulation engines.

Sizes scale with ``scale`` (1.0 = the report's defaults; tests use less).
"""

from __future__ import annotations

import numpy as np

from . import theory
from .engine import evaluate, generate, simulate
from .sources import IIDSource, bernoulli, random_markov
from .verifiers import BackwardBlockVerify, BlockVerify, TokenVerify

__all__ = ["EXPERIMENTS", "block_end_to_end_data", "block_vs_token_data", "decode_efficiency_data",
           "token_verification_data"]

#: Default setting of the block-verification seed's Figure 2: target Ber(0.75).
BERNOULLI_TARGET = 0.75
BERNOULLI_DRAFTS = (0.25, 0.5, 0.9)


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


VERIFIERS = (TokenVerify, BlockVerify, BackwardBlockVerify)


def block_vs_token_data(target_p: float = BERNOULLI_TARGET, draft_ps=BERNOULLI_DRAFTS, max_length: int = 10,
                        blocks: int = 50_000, scale: float = 1.0, seed: int = 0) -> dict:
    """The block-verification seed's Figure 2 setting: IID Ber(p) drafts vs target Ber(0.75), L = 1..10.

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
        for j, cls in enumerate(VERIFIERS):
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


def _end_to_end_pairs():
    yield ("binary example", "IID draft (2/3, 1/3) vs target (1/3, 2/3)",
           IIDSource([2 / 3, 1 / 3]), IIDSource([1 / 3, 2 / 3]))
    for vocab, conc, seed in ((2, 1.0, 0), (3, 2.0, 1), (4, 5.0, 2)):
        d, t = random_markov(vocab, conc, seed=seed)
        yield (f"Markov V={vocab}, c={conc:g}", f"random_markov(vocab={vocab}, concentration={conc}, seed={seed})",
               d, t)


def block_end_to_end_data(draft_length: int = 4, tokens: int = 4000, sequences: int = 32, scale: float = 1.0,
                          seed: int = 0) -> dict:
    """Long-run block efficiency of token, published block and v1 block verification.

    For each pair the decode loop generates ``sequences`` x ``tokens`` tokens per
    verifier (v1 with its carried residual target), and the exact engine gives
    E[τ] of the first two iterations from an empty context, which explains the
    outcome: v1 maximises the first iteration, and the carried residual target
    lowers the next one.
    """
    n_tok = max(200, int(tokens * scale))
    L = draft_length
    rows = []
    for k, (short, label, draft, target) in enumerate(_end_to_end_pairs()):
        entry = {"pair": label, "label": short, "vocab_size": target.vocab_size}
        for j, cls in enumerate(VERIFIERS):
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


from .experiments_multidraft import (  # noqa: E402  (after the single-draft functions it builds on)
    markov_acceptance_data,
    spectr_bernoulli_data,
    spectr_uniform_data,
    tree_efficiency_data,
)
from .rejections import rejections_figure_data  # noqa: E402
from .solvers.pareto import pareto_figure_data  # noqa: E402

#: Figures by name: data function. Renderers are registered in :mod:`otspec.plot`.
EXPERIMENTS = {
    "token": token_verification_data,
    "decode": decode_efficiency_data,
    "block": block_vs_token_data,
    "block_e2e": block_end_to_end_data,
    "spectr_fig4": spectr_bernoulli_data,
    "spectr_fig5": spectr_uniform_data,
    "spectr_fig6": spectr_bernoulli_data,
    "mcsd_fig3": markov_acceptance_data,
    "trees": tree_efficiency_data,
    "rejections": rejections_figure_data,
    "pareto": pareto_figure_data,
}


def coverage(series_list, value_key: str, low_key: str, high_key: str, truth_key: str) -> tuple[int, int]:
    """How many intervals contain the reference value: (hits, total)."""
    hits = total = 0
    for s in series_list:
        for lo, hi, truth in zip(s[low_key], s[high_key], s[truth_key], strict=True):
            hits += int(lo <= truth <= hi)
            total += 1
    return hits, total


def max_abs_difference(series_list, a: str, b: str) -> float:
    return float(max(np.max(np.abs(np.subtract(s[a], s[b]))) for s in series_list))
