"""Verifiers: one protocol (exact ``law`` + batched ``sample``) for every scheme."""

from .base import Outcome, Verifier, VerifierLaw, check_single_draft
from .block import BackwardBlockVerify, BlockVerify
from .carry import ResidualWindows
from .multi import (
    MULTI_DRAFT_REGISTRY,
    KSeq,
    MultiDraftVerifier,
    MultiRound,
    MultiRoundWithoutReplacement,
    NaiveMultiCandidate,
    OTMVerify,
)
from .token import TokenVerify

#: Verifiers by their short name (used by the CLI and reports).
REGISTRY = {cls.name: cls for cls in (TokenVerify, BlockVerify, BackwardBlockVerify)}

__all__ = ["Outcome", "Verifier", "VerifierLaw", "check_single_draft", "TokenVerify", "BlockVerify",
           "BackwardBlockVerify", "ResidualWindows", "REGISTRY", "MULTI_DRAFT_REGISTRY", "MultiDraftVerifier",
           "KSeq", "MultiRound", "MultiRoundWithoutReplacement", "NaiveMultiCandidate", "OTMVerify"]
