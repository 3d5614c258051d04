"""Token-level multi-draft verifiers under their historical import path.

The verifiers live one per module (:mod:`~otspec.verifiers.kseq`,
:mod:`~otspec.verifiers.multiround`, :mod:`~otspec.verifiers.naive`,
:mod:`~otspec.verifiers.otm`) on the one protocol of :mod:`otspec.verifiers.base`; the draft
tuple law and candidate sampling are in :mod:`otspec.drafts`, the k-Seq closed forms in
:mod:`otspec.theory.multidraft`. This module re-exports them, and warns: import from those homes instead.
"""

import warnings

from ..drafts import check_draft, draft_tuple_law, sample_candidates
from ..theory.multidraft import RHO_TOL, KSeqParameters, kseq_parameters, kseq_rho_star
from . import MULTI_DRAFT_REGISTRY, MultiDraftLaw, MultiDraftOutcome
from .candidates import MultiDraftVerifier, SequentialMultiDraftVerifier
from .kseq import KSeq
from .multiround import MultiRound, MultiRoundWithoutReplacement
from .naive import NaiveMultiCandidate
from .otm import OTM_MAX_TUPLES, OTMVerify

warnings.warn("otspec.verifiers.multi is deprecated: import the verifiers from otspec.verifiers, candidate laws and "
              "sampling from otspec.drafts, k-Seq closed forms from otspec.theory.multidraft", DeprecationWarning,
              stacklevel=2)


#: The law of the candidate tuple (:func:`otspec.drafts.draft_tuple_law`).
candidate_tuple_law = draft_tuple_law


def check_multi_draft(candidates, draft_probs, target_probs, *, validate: bool = True):
    """``(candidates, draft_probs, target_probs)`` validated for the candidates layout."""
    d = check_draft(candidates, draft_probs, target_probs, "candidates", validate=validate)
    return d.tokens, d.draft_probs, d.target_probs


__all__ = ["MULTI_DRAFT_REGISTRY", "OTM_MAX_TUPLES", "RHO_TOL", "KSeq", "KSeqParameters", "MultiDraftLaw",
           "MultiDraftOutcome", "MultiDraftVerifier", "MultiRound", "MultiRoundWithoutReplacement",
           "NaiveMultiCandidate", "OTMVerify", "SequentialMultiDraftVerifier", "candidate_tuple_law",
           "check_multi_draft", "kseq_parameters", "kseq_rho_star", "sample_candidates"]
