"""The exact law of the first emitted token, for any pair of sources — toy or a real model's.

:func:`otspec.engine.evaluate` enumerates whole blocks over V^(L+1) sequences, which only toy
vocabularies allow. The first emitted token needs much less: every draft path of positive draft
probability (the rows' supports: top-k / top-p rows keep them small), both models' rows along it,
and the verifier's exact law (τ, Y) on those rows. The first token is X_1 when τ ≥ 1 and the
correction Y when τ = 0, so

    P(first = y) = Σ_x p(x) [ P(τ ≥ 1 | x) 1{x_1 = y} + P(τ = 0 | x) P(Y = y | τ = 0, x) ],

which a lossless verifier makes equal to the target's first row q(·). ``llm_bridge.lossless`` runs
this engine over real models (``llm_bridge.sources.ModelSource``); a multi-draft verifier's root
law is :func:`root_token_law` (the first token is decided at the root alone).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..drafts import draft_tuple_law
from ..errors import SizeLimitError
from ..pairs import check_pair
from ..sources import Source

__all__ = ["MAX_LAW_PATHS", "FirstTokenLaw", "first_token_law", "root_token_law"]

#: Most draft paths :func:`first_token_law` enumerates (each costs a row of both models).
MAX_LAW_PATHS = 4096


@dataclass(frozen=True)
class FirstTokenLaw:
    """``law`` (V,) of the first emitted token, the target's row ``target`` (V,), and the paths enumerated."""

    law: np.ndarray
    target: np.ndarray
    paths: int

    @property
    def max_deviation(self) -> float:
        return float(np.max(np.abs(self.law - self.target)))


def _rows(source: Source, prefixes: list) -> np.ndarray:
    """Rows of ``source`` after each prefix (a list of equal-length token tuples)."""
    tokens = np.array(prefixes, dtype=np.int64).reshape(len(prefixes), len(prefixes[0]) if prefixes else 0)
    return np.asarray(source.next_probs(tokens), dtype=np.float64)


def first_token_law(draft: Source, target: Source, verifier, draft_length: int, *,
                    max_paths: int = MAX_LAW_PATHS) -> FirstTokenLaw:
    """Exact law of the first token one iteration of a chain ``verifier`` emits (module docstring).

    Draft paths are grown a level at a time over the supports of the draft rows; more than
    ``max_paths`` paths at a level is a :class:`~otspec.errors.SizeLimitError`, raised before the
    rows of that level are asked for.
    """
    check_pair(draft, target)
    L = int(draft_length)
    if L < 1:
        raise ValueError(f"draft_length: expected an integer >= 1, got {draft_length!r}")
    target.check_length(L + 1)
    prefixes, weights = [()], np.ones(1)
    p_levels, q_levels, parents = [], [], []
    for level in range(L + 1):
        q_levels.append(_rows(target, prefixes))
        if level == L:
            break
        p = _rows(draft, prefixes)
        support = p > 0
        count = int(support.sum())
        if count > max_paths:
            raise SizeLimitError(f"{count:,} draft paths of length {level + 1} exceed MAX_LAW_PATHS = {max_paths:,}; "
                                 "shrink the rows' supports (top_k / top_p)", size=count, limit=max_paths)
        parent, token = np.nonzero(support)
        p_levels.append(p)
        parents.append(parent)
        weights = weights[parent] * p[parent, token]
        prefixes = [prefixes[a] + (int(x),) for a, x in zip(parent, token, strict=True)]
    n, V = len(prefixes), q_levels[0].shape[1]
    tokens = np.array(prefixes, dtype=np.int64).reshape(n, L)
    p_rows, q_rows = np.zeros((n, L, V)), np.zeros((n, L + 1, V))
    node = np.arange(n)
    q_rows[:, L] = q_levels[L][node]
    for level in range(L - 1, -1, -1):  # rows along every full path: walk back through the parents
        node = parents[level][node]
        p_rows[:, level], q_rows[:, level] = p_levels[level][node], q_levels[level][node]
    law = verifier.law(tokens, p_rows, q_rows)
    accept = np.asarray(law.accept_probs)
    first = weights @ (accept[:, 0, None] * np.asarray(law.correction_probs)[:, 0])
    np.add.at(first, tokens[:, 0], weights * accept[:, 1:].sum(axis=1))
    return FirstTokenLaw(first, q_levels[0][0], n)


def root_token_law(draft: Source, target: Source, verifier, k: int, *, max_paths: int = MAX_LAW_PATHS) -> FirstTokenLaw:
    """Exact law of the first token a multi-draft ``verifier`` with k candidates at the root emits.

    Σ over every candidate tuple the draft row can produce (drawn as the verifier requires) of the
    tuple's probability times the verifier's law of Y; lossless means the target's first row.
    """
    check_pair(draft, target)
    p, q = _rows(draft, [()])[0], _rows(target, [()])[0]
    tuples, probs = draft_tuple_law(p, int(k), verifier.replacement, max_tuples=max_paths)
    law = verifier.law(tuples, np.broadcast_to(p, (len(tuples), p.size)), np.broadcast_to(q, (len(tuples), q.size)))
    return FirstTokenLaw(probs @ (np.asarray(law.accepted) + np.asarray(law.rejected)), q, len(tuples))
