r"""What a drafter produces: the :class:`Draft` concept and the law of drafted tuples.

Spec: ``docs/multi_draft_otm.md`` §1–3, §7; ``docs/mcsd.md`` §3.
Convention: **p is the draft distribution, q the target**.

* :class:`Draft` — drafted tokens with both models' probability rows at every drafted node,
  in one of two layouts: a single draft *chain* of L tokens (ordinary speculative decoding,
  the k = 1 case) or k *candidates* at one position (multi-draft). :func:`check_draft` is the
  one input check every verifier runs.
* :func:`draft_tuple_law` — the exact law P_D of k candidates drawn i.i.d. from p (with
  replacement) or sequentially without replacement; :func:`sample_candidates` draws them.
* :func:`draft_inclusion_probs` and :func:`prob_drafts_within` — P_D(y ∈ S(X)) and
  P_D(S(X) ⊆ A) for the candidate set S(X), without enumerating tuples (the exponential race
  of eq. (7) without replacement).
* :class:`DraftTree` — k-configs such as MCSD's ``4x2x2x1`` and SpecTr's K i.i.d. drafts;
  :class:`ConfidenceTree` — EAGLE-2's confidence-ordered dynamic trees; :func:`parse_tree` reads either;
  :func:`tree_for_vocab` caps a tree drawn without replacement at the vocabulary.

Tuples without replacement
--------------------------
When p has s < k tokens of positive mass, drawing without replacement stops once the support
is exhausted: the tuple lists the whole support and is padded with ``-1`` on the right, so
tuples are always int arrays of shape (M, k) holding token ids or -1.
"""

from .draft import CANDIDATES, CHAIN, Draft, check_draft, gather_tokens
from .laws import (
    MAX_DRAFT_TUPLES,
    MAX_RACE_CELLS,
    RACE_STEP,
    draft_inclusion_probs,
    draft_tuple_law,
    inclusion_iid,
    prob_drafts_within,
    sample_candidates,
    tuple_membership,
)
from .tree import ConfidenceTree, DraftTree, parse_tree, tree_for_vocab

__all__ = [
    "CANDIDATES",
    "CHAIN",
    "ConfidenceTree",
    "MAX_DRAFT_TUPLES",
    "MAX_RACE_CELLS",
    "RACE_STEP",
    "Draft",
    "DraftTree",
    "check_draft",
    "draft_inclusion_probs",
    "draft_tuple_law",
    "gather_tokens",
    "inclusion_iid",
    "parse_tree",
    "tree_for_vocab",
    "prob_drafts_within",
    "sample_candidates",
    "tuple_membership",
]
