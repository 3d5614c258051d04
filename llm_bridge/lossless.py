"""Losslessness on a real model pair: the exact first-token law, and a two-sample test against plain sampling.

* :func:`first_token_law` enumerates every draft of ``draft_length`` tokens the drafter can produce
  from one prompt (the processed rows' supports; top-k / top-p keep this small), scores every
  prefix with both models, and combines the verifier's exact law (``verifier.law`` on the real
  rows) into the law of the first emitted token: x_1 when τ ≥ 1, the correction drawn at position 0
  when τ = 0. A lossless verifier gives the target's processed next-token row.
* :func:`two_sample_test` runs the speculative loop and plain sampling on ``n`` copies of a prompt
  (one batch each) and compares the joint law of their first tokens with a G-test; a biased
  verifier (e.g. ``DecodingOPT(eps=inf)``, which accepts every draft) is the negative control.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from otspec.errors import SizeLimitError

from .loop import plain_generate, speculative_generate
from .sampling import DEFAULT_SAMPLING, Sampling

__all__ = ["MAX_LAW_PATHS", "FirstTokenLaw", "first_token_law", "root_token_law", "two_sample_test"]

#: Most draft paths :func:`first_token_law` enumerates (each needs a forward pass of both models).
MAX_LAW_PATHS = 4096


@dataclass(frozen=True)
class FirstTokenLaw:
    """``law`` (V,) of the first emitted token, the target's row ``target`` (V,), and ``max_deviation``."""

    law: np.ndarray
    target: np.ndarray
    paths: int

    @property
    def max_deviation(self) -> float:
        return float(np.max(np.abs(self.law - self.target)))


def _last_rows(model, prompt, prefixes, sampling, chunk: int = 64) -> np.ndarray:
    """Processed next-token rows of ``model`` after prompt + each prefix (no cache; full forward passes)."""
    import torch

    device = next(model.parameters()).device
    rows = []
    with torch.no_grad():
        for i in range(0, len(prefixes), chunk):
            ids = torch.as_tensor([list(prompt) + list(p) for p in prefixes[i:i + chunk]], device=device)
            rows.append(sampling.rows(model(input_ids=ids).logits[:, -1]))
    return np.concatenate(rows)


def first_token_law(pair, prompt, verifier, draft_length: int, *, sampling: Sampling = DEFAULT_SAMPLING,
                    max_paths: int = MAX_LAW_PATHS) -> FirstTokenLaw:
    """Exact law of the first token emitted after ``prompt`` (token ids) by one verification iteration."""
    if pair.drafter.deterministic:
        raise ValueError("first_token_law enumerates a model drafter's draws; the n-gram drafter has none")
    draft_model, target_model = pair.drafter.model, pair.target.model
    prefixes, weights = [()], np.ones(1)
    p_levels, q_levels, parents = [], [], []
    for level in range(draft_length + 1):
        q_levels.append(_last_rows(target_model, prompt, prefixes, sampling))
        if level == draft_length:
            break
        p = _last_rows(draft_model, prompt, prefixes, sampling)
        support = p > 0
        count = int(support.sum())
        if count > max_paths:
            raise SizeLimitError(f"{count:,} draft paths of length {level + 1} exceed MAX_LAW_PATHS = {max_paths:,}; "
                                 "use top_k or top_p to shrink the rows' supports", size=count, limit=max_paths)
        parent, token = np.nonzero(support)
        p_levels.append(p)
        parents.append(parent)
        weights = weights[parent] * p[parent, token]
        prefixes = [prefixes[a] + (int(x),) for a, x in zip(parent, token, strict=True)]
    # rows along every full path: walk back through the parents
    n, L = len(prefixes), draft_length
    tokens = np.array(prefixes, dtype=np.int64).reshape(n, L)
    V = q_levels[0].shape[1]
    p_rows, q_rows = np.zeros((n, L, V)), np.zeros((n, L + 1, V))
    node = np.arange(n)
    q_rows[:, L] = q_levels[L][node]
    for level in range(L - 1, -1, -1):
        node = parents[level][node]
        p_rows[:, level], q_rows[:, level] = p_levels[level][node], q_levels[level][node]
    law = verifier.law(tokens, p_rows, q_rows)
    accept = np.asarray(law.accept_probs)
    first = weights @ (accept[:, 0, None] * np.asarray(law.correction_probs)[:, 0])
    np.add.at(first, tokens[:, 0], weights * accept[:, 1:].sum(axis=1))
    return FirstTokenLaw(first, q_levels[0][0], n)


def root_token_law(pair, prompt, verifier, k: int, *, sampling: Sampling = DEFAULT_SAMPLING,
                   max_paths: int = MAX_LAW_PATHS) -> FirstTokenLaw:
    """Exact law of the first token emitted after ``prompt`` by a multi-draft verifier with k candidates at the root.

    In a tree iteration the first token is decided at the root alone, so its law is
    Σ_x P_D(x^k) · P(Y = · | x^k) over every candidate tuple the draft row can produce
    (:func:`otspec.drafts.draft_tuple_law`, drawn as the verifier requires). Lossless: the target's row.
    """
    from otspec.drafts import draft_tuple_law

    if pair.drafter.deterministic:
        raise ValueError("root_token_law enumerates a model drafter's draws; the n-gram drafter has none")
    p = _last_rows(pair.drafter.model, prompt, [()], sampling)[0]
    q = _last_rows(pair.target.model, prompt, [()], sampling)[0]
    tuples, probs = draft_tuple_law(p, int(k), bool(getattr(verifier, "replacement", True)), max_tuples=max_paths)
    law = verifier.law(tuples, np.broadcast_to(p, (len(tuples), p.size)), np.broadcast_to(q, (len(tuples), q.size)))
    return FirstTokenLaw(probs @ (np.asarray(law.accepted) + np.asarray(law.rejected)), q, len(tuples))


def _g_test(a: np.ndarray, b: np.ndarray) -> tuple[float, float, int, int]:
    """G-test that samples ``a`` and ``b`` (token ids) share one law; categories with < 10 draws in all are pooled."""
    values, code = np.unique(np.concatenate([a, b]), return_inverse=True)
    table = np.stack([np.bincount(code[:a.size], minlength=values.size),
                      np.bincount(code[a.size:], minlength=values.size)])
    rare = table.sum(axis=0) < 10  # fewer than 5 expected in each sample
    if rare.any():
        table = np.concatenate([table[:, ~rare], table[:, rare].sum(axis=1, keepdims=True)], axis=1)
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2:
        return 1.0, 0.0, 0, int(table.shape[1])
    stat, p_value, dof, _ = stats.chi2_contingency(table, lambda_="log-likelihood")
    return float(p_value), float(stat), int(dof), int(table.shape[1])


def two_sample_test(pair, prompt, verifier, draft_length, *, n: int = 400, tokens: int = 2,
                    sampling: Sampling = DEFAULT_SAMPLING, seed: int = 0, rule: str = "match",
                    cache: str = "dynamic") -> dict:
    """Do speculative decoding and plain sampling emit the same first ``tokens`` tokens? ``n`` draws each.

    ``draft_length`` is L for a chain verifier, a draft tree (``"2x2"``, a DraftTree) for a multi-draft
    one (run by :func:`llm_bridge.trees.tree_generate` with ``rule``). One G-test per position (the
    law of the t-th token), combined by Bonferroni: ``p_value`` = min(1, tokens × the smallest
    per-position p-value). ``cache``: the KV caches of both runs (the law does not depend on them;
    the default avoids compiling a graph for a batch of ``n``). Returns {"p_value", "per_position"}.
    """
    prompts = [list(prompt)] * n
    if verifier.layout == "candidates":
        from .trees import tree_generate

        spec = tree_generate(pair, prompts, verifier, draft_length, tokens, rule=rule, sampling=sampling, seed=seed,
                             progress=False, record_law=False, cache=cache)
    else:
        spec = speculative_generate(pair, prompts, verifier, draft_length, tokens, sampling=sampling, seed=seed,
                                    progress=False, record_law=False, cache=cache)
    plain = plain_generate(pair.target, prompts, tokens, sampling=sampling, seed=seed + 1, progress=False, cache=cache)
    a, b = np.stack(spec.tokens), np.stack(plain.tokens)
    per = [dict(zip(("p_value", "statistic", "dof", "categories"), _g_test(a[:, t], b[:, t]), strict=True))
           for t in range(tokens)]
    return {"p_value": min(1.0, tokens * min(x["p_value"] for x in per)), "per_position": per}
