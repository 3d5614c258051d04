"""Verifiers: one protocol (exact ``law`` + batched ``sample``, carried-state hooks) for every scheme.

Chain layout (one draft of L tokens): :class:`TokenVerify`, :class:`BlockVerify`,
:class:`BackwardBlockVerify`, and the biased :class:`DecodingOPT` / :class:`DecodingUNO`.
Candidates layout (k drafts at one position): :class:`KSeq`, :class:`MultiRound`,
:class:`MultiRoundWithoutReplacement`, :class:`NaiveMultiCandidate`, :class:`OTMVerify`,
:class:`BatchVerify`.
"""

from .base import CANDIDATES, CHAIN, Outcome, Verifier, VerifierLaw, check_single_draft
from .batch import BatchVerify
from .biased import DecodingOPT, DecodingUNO, OverAcceptance
from .block import BackwardBlockVerify, BlockVerify
from .candidates import MultiDraftVerifier, SequentialMultiDraftVerifier
from .carry import ResidualWindows
from .kseq import KSeq
from .multiround import MultiRound, MultiRoundWithoutReplacement
from .naive import NaiveMultiCandidate
from .otm import OTMVerify
from .token import TokenVerify

#: Lossless single-draft verifiers by short name (the CLI's ``--verifier`` choices).
REGISTRY = {cls.name: cls for cls in (TokenVerify, BlockVerify, BackwardBlockVerify)}
#: Multi-draft verifiers by short name.
MULTI_DRAFT_REGISTRY = {
    cls.name: cls for cls in (KSeq, MultiRound, MultiRoundWithoutReplacement, NaiveMultiCandidate, OTMVerify)
}
#: Every verifier class by short name.
VERIFIERS = {**REGISTRY, **MULTI_DRAFT_REGISTRY,
             **{cls.name: cls for cls in (DecodingOPT, DecodingUNO, BatchVerify)}}

#: Aliases of the unified law and outcome types under their multi-draft names (constructors).
MultiDraftLaw = VerifierLaw.from_masses
MultiDraftOutcome = Outcome.from_candidates

__all__ = ["CANDIDATES", "CHAIN", "MULTI_DRAFT_REGISTRY", "REGISTRY", "VERIFIERS", "BackwardBlockVerify",
           "BatchVerify", "BlockVerify", "DecodingOPT", "DecodingUNO", "KSeq", "MultiDraftLaw",
           "MultiDraftOutcome", "MultiDraftVerifier", "MultiRound", "MultiRoundWithoutReplacement",
           "NaiveMultiCandidate", "OTMVerify", "Outcome", "OverAcceptance", "ResidualWindows",
           "SequentialMultiDraftVerifier", "TokenVerify", "Verifier", "VerifierLaw", "check_single_draft"]
