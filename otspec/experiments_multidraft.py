"""Data functions for the multi-draft figures (SpecTr Figures 4-6, MCSD Figure 3, tree decoding).

Spec: ``multi_draft_otm.md`` and ``mcsd.md``. Every curve is computed: optima by
the fast min-cut route (checked against the LP where the LP is small), k-Seq at
ρ*, multi-round and naive acceptance by their exact formulas, block efficiency
by the tree decode loop.
"""

from __future__ import annotations

import numpy as np

from .drafts import DraftTree
from .engine.tree import generate_tree
from .solvers import otm
from .sources import random_markov

__all__ = ["acceptance_curves", "spectr_bernoulli_data", "spectr_uniform_data", "markov_acceptance_data",
           "tree_efficiency_data"]

#: Acceptance curves drawn for every (draft, target) row pair.
CURVES = ("optimal", "optimal_without_replacement", "kseq", "multiround", "multiround_without_replacement",
          "naive")


def _within_limits(fn, *args, **kwargs):
    """An exactly enumerated value, or None (JSON null) where the size exceeds the function's stated limit."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        if "MAX_" not in str(exc):
            raise
        return None


def _sampled_acceptance(verifier, draft, target, k: int, n: int, seed: int) -> float:
    """Monte Carlo acceptance of ``verifier`` with ``n`` candidate tuples (drawn in its own mode)."""
    from .verifiers.multi import sample_candidates

    rng = np.random.default_rng(seed)
    rows_p = np.broadcast_to(np.asarray(draft, dtype=np.float64), (n, len(draft)))
    rows_q = np.broadcast_to(np.asarray(target, dtype=np.float64), (n, len(target)))
    cands = sample_candidates(rows_p, k, rng, replacement=verifier.replacement)
    return float(np.mean(verifier.sample(cands, rows_p, rows_q, rng, validate=False).accepted))


def acceptance_curves(draft, target, ks, mc_samples: int = 20_000) -> dict:
    """Every acceptance probability of ``CURVES`` for k in ``ks`` (one position).

    All values are exact except multi-round without replacement beyond its
    enumeration limit, which is estimated with ``mc_samples`` sampled tuples
    (``methods`` records which).
    """
    from .verifiers.multi import MultiRoundWithoutReplacement

    out = {name: [] for name in CURVES}
    out["rho_star"] = []
    out["methods"] = {"multiround_without_replacement": []}
    for k in ks:
        out["optimal"].append(otm.otm_value(draft, target, k))
        out["optimal_without_replacement"].append(otm.otm_value(draft, target, k, replacement=False))
        out["kseq"].append(otm.kseq_acceptance(draft, target, k))
        out["rho_star"].append(otm.kseq_rho_star(draft, target, k))
        out["multiround"].append(otm.multiround_acceptance(draft, target, k))
        value, method = _within_limits(otm.multiround_acceptance, draft, target, k, replacement=False), "exact"
        if value is None:
            value = _sampled_acceptance(MultiRoundWithoutReplacement(), draft, target, k, mc_samples, seed=k)
            method = f"monte carlo, {mc_samples} tuples"
        out["methods"]["multiround_without_replacement"].append(method)
        out["multiround_without_replacement"].append(value)
        out["naive"].append(otm.naive_acceptance(draft, target, k))
    return out


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
                 "closed_form": [otm.bernoulli_alpha(draft_p, b, k) for k in ks],
                 "lp": [otm.otm_lp(p, q, k).value for k in ks if k <= 8]}
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
                       "closed_form": [otm.uniform_alpha(r, k) for k in ks]})
    return {
        "figure": "spectr_uniform",
        "title": f"Multi-draft acceptance, draft U({support}) vs target U(d_q)",
        "quantity": "acceptance probability at one position",
        "support": support,
        "ks": ks,
        "series": series,
    }


def _stationary(matrix: np.ndarray) -> np.ndarray:
    vals, vecs = np.linalg.eig(matrix.T)
    v = np.real(vecs[:, np.argmin(np.abs(vals - 1.0))])
    return np.abs(v) / np.abs(v).sum()


def markov_acceptance_data(vocab: int = 30, concentration: float = 2.0, seed: int = 3, max_k: int = 8,
                           scale: float = 1.0) -> dict:
    """Acceptance against k on a Markov pair (the shape of MCSD Figure 3).

    Each curve averages the per-context acceptance over the previous token,
    weighted by the target chain's stationary law.
    """
    draft, target = random_markov(vocab, concentration, seed=seed)
    weights = _stationary(target.transition)
    ks = list(range(1, max_k + 1))
    mc = max(2000, int(20_000 * scale))
    per_state = [acceptance_curves(draft.transition[a], target.transition[a], ks, mc_samples=mc)
                 for a in range(vocab)]
    curves = {name: (weights @ np.array([s[name] for s in per_state])).tolist() for name in CURVES}
    return {
        "figure": "markov_acceptance",
        "title": f"Acceptance vs k, random Markov pair (V={vocab}, concentration={concentration}, seed={seed})",
        "quantity": "stationary-weighted acceptance probability at one position",
        "vocab_size": vocab,
        "ks": ks,
        **curves,
    }


#: (label, tree config, replacement, verifier name, rule)
TREE_SETUPS = (
    ("SD 1x1x1x1", "1x1x1x1", True, "multiround", "accepted"),
    ("SpecTr 4 i.i.d., k-Seq", "4x1x1x1", True, "kseq", "match"),
    ("SpecTr 4 i.i.d., multi-round", "4x1x1x1", True, "multiround", "match"),
    ("MCSD 4x2x2x1 with repl.", "4x2x2x1", True, "multiround", "accepted"),
    ("MCSD 4x2x2x1 w/o repl.", "4x2x2x1", False, "multiround_without_replacement", "accepted"),
    ("MCSD 4x2x2x1 naive", "4x2x2x1", True, "naive", "accepted"),
)


def tree_efficiency_data(vocab: int = 30, concentration: float = 2.0, seed: int = 3, tokens: int = 2000,
                         sequences: int = 32, scale: float = 1.0) -> dict:
    """Block efficiency of multi-draft trees on a Markov pair (decode loop, 95% intervals)."""
    from .verifiers.multi import MULTI_DRAFT_REGISTRY as MULTI

    n_tok = max(100, int(tokens * scale))
    draft, target = random_markov(vocab, concentration, seed=seed)
    rows = []
    for j, (label, config, replacement, name, rule) in enumerate(TREE_SETUPS):
        tree = DraftTree.parse(config, replacement)
        res = generate_tree(draft, target, MULTI[name](), tree, n_tok, rule=rule, n_sequences=sequences,
                            seed=seed + j, progress=False)
        rows.append({"label": label, "config": config, "replacement": replacement, "verifier": name,
                     "rule": rule, "tree_tokens": tree.num_tokens,
                     "block_efficiency": res.block_efficiency.value, "low": res.block_efficiency.low,
                     "high": res.block_efficiency.high, "target_calls": res.target_calls})
    return {
        "figure": "tree_efficiency",
        "title": f"Multi-draft trees, random Markov pair (V={vocab}, concentration={concentration})",
        "quantity": "block efficiency = generated tokens / target calls",
        "tokens_per_sequence": n_tok,
        "sequences": sequences,
        "rows": rows,
    }
