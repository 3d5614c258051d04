"""Losslessness on a real model pair: the exact first-token law, and a two-sample test against plain sampling.

* :func:`first_token_law` is otspec's exact engine (:mod:`otspec.engine.first_token`) run over the
  two models as sources (:class:`~llm_bridge.sources.ModelSource`): every draft of ``draft_length``
  tokens the drafter can produce from one prompt (the processed rows' supports; top-k / top-p keep
  this small), both models' rows along it, and the verifier's exact law combined into the law of the
  first emitted token. A lossless verifier gives the target's processed next-token row.
* :func:`two_sample_test` runs the speculative loop and plain sampling on ``n`` copies of a prompt
  (one batch each) and compares the joint law of their first tokens with a G-test; a biased
  verifier (e.g. ``DecodingOPT(eps=inf)``, which accepts every draft) is the negative control.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from otspec.engine.first_token import MAX_LAW_PATHS, FirstTokenLaw
from otspec.engine.first_token import first_token_law as engine_first_token_law
from otspec.engine.first_token import root_token_law as engine_root_token_law

from .loop import plain_generate, speculative_generate
from .options import DecodeOptions
from .sampling import DEFAULT_SAMPLING, Sampling
from .sources import ModelSource

__all__ = ["MAX_LAW_PATHS", "TWO_SAMPLE_OPTIONS", "FirstTokenLaw", "first_token_law", "root_token_law", "two_sample_test"]

def first_token_law(pair, prompt, verifier, draft_length: int, *, sampling: Sampling = DEFAULT_SAMPLING,
                    max_paths: int = MAX_LAW_PATHS) -> FirstTokenLaw:
    """Exact law of the first token emitted after ``prompt`` (token ids) by one verification iteration: otspec's
    exact engine (:func:`otspec.engine.first_token.first_token_law`) over both models as sources."""
    draft, target = _draft_source(pair, prompt, sampling), ModelSource(pair.target.model, prompt, sampling)
    return engine_first_token_law(draft, target, verifier, draft_length, max_paths=max_paths)


def _draft_source(pair, prompt, sampling):
    """The drafter's rows after ``prompt`` as a source (the drafter's own exact, cache-free :meth:`source`)."""
    pair.drafter.check_plan(exact=True)
    return pair.drafter.source(pair.target.model, prompt, sampling)


def root_token_law(pair, prompt, verifier, k: int, *, sampling: Sampling = DEFAULT_SAMPLING,
                   max_paths: int = MAX_LAW_PATHS) -> FirstTokenLaw:
    """Exact law of the first token emitted after ``prompt`` by a multi-draft verifier with k candidates at the root
    (:func:`otspec.engine.first_token.root_token_law` over both models as sources)."""
    draft, target = _draft_source(pair, prompt, sampling), ModelSource(pair.target.model, prompt, sampling)
    return engine_root_token_law(draft, target, verifier, k, max_paths=max_paths)


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


#: The two-sample test's decoding: dynamic caches (the law does not depend on them, and a batch of ``n`` compiles no
#: graph), the default sampling, seed 0.
TWO_SAMPLE_OPTIONS = DecodeOptions(cache="dynamic")


def two_sample_test(pair, prompt, verifier, draft_length, options: DecodeOptions = TWO_SAMPLE_OPTIONS, *, n: int = 400,
                    tokens: int = 2, rule: str = "match") -> dict:
    """Do speculative decoding and plain sampling emit the same first ``tokens`` tokens? ``n`` draws each.

    ``draft_length`` is L for a chain verifier, a draft tree (``"2x2"``, a DraftTree) for a multi-draft
    one (run by :func:`llm_bridge.trees.tree_generate` with ``rule``). One G-test per position (the
    law of the t-th token), combined by Bonferroni: ``p_value`` = min(1, tokens × the smallest
    per-position p-value). ``options``: the sampling, seed (plain sampling draws with seed + 1), the KV caches of both
    runs (the law does not depend on them; the default, dynamic, avoids compiling a graph for a batch of ``n``) and
    ``host_rows`` (``False``: the speculative loop with its rows on the model's device, the device tree walk for
    trees). Returns {"p_value", "per_position"}.
    """
    prompts = [list(prompt)] * n
    sampling, seed, cache = options.sampling, options.seed, options.cache
    spec_options = options.but(progress=False, record_law=False, batch_size=None, observers=())
    if verifier.layout in ("candidates", "tree"):
        from .trees import tree_generate

        spec = tree_generate(pair, prompts, verifier, draft_length, tokens, spec_options, rule=rule)
    else:
        spec = speculative_generate(pair, prompts, verifier, draft_length, tokens, spec_options)
    plain = plain_generate(pair.target, prompts, tokens, sampling=sampling, seed=seed + 1, progress=False, cache=cache)
    a, b = np.stack(spec.tokens), np.stack(plain.tokens)
    per = [dict(zip(("p_value", "statistic", "dof", "categories"), _g_test(a[:, t], b[:, t]), strict=True))
           for t in range(tokens)]
    return {"p_value": min(1.0, tokens * min(x["p_value"] for x in per)), "per_position": per}
