"""Verifiers: one protocol (exact ``law`` + batched ``sample``, carried-state hooks) for every scheme.

Chain layout (one draft of L tokens): :class:`TokenVerify`, :class:`BlockVerify`,
:class:`BackwardBlockVerify`, :class:`GumbelCouplingVerify` (drafter-invariant), and the biased :class:`DecodingOPT` / :class:`DecodingUNO`.
Candidates layout (k drafts at one position): :class:`KSeq`, :class:`MultiRound`,
:class:`MultiRoundWithoutReplacement`, :class:`NaiveMultiCandidate`, :class:`OTMVerify`,
:class:`GreedyDraftVerify` (Hu et al.'s greedy drafts), :class:`SpecHubVerify` (SpecHub's hub pair),
:class:`BatchVerify`. Whole-tree layout (a drafted tree verified at once): :class:`TraversalVerify`, :class:`GreedyBlockVerify`.
"""

from .base import CANDIDATES, CHAIN, Outcome, Verifier, VerifierLaw, check_single_draft
from .batch import BatchVerify
from .biased import DecodingOPT, DecodingUNO, OverAcceptance
from .block import BackwardBlockVerify, BlockVerify
from .candidates import MultiDraftVerifier, SequentialMultiDraftVerifier
from .carry import ResidualWindows
from .gbv import GreedyBlockVerify
from .gumbel import GumbelCouplingVerify
from .kseq import KSeq
from .multiround import MultiRound, MultiRoundWithoutReplacement
from .naive import NaiveMultiCandidate
from .otm import OTMVerify
from .structured import GreedyDraftVerify, SpecHubVerify
from .token import TokenVerify
from .traversal import TraversalVerify

#: Lossless single-draft verifiers by short name (the CLI's ``--verifier`` choices).
REGISTRY = {cls.name: cls for cls in (TokenVerify, BlockVerify, BackwardBlockVerify)}
#: Every lossless chain verifier by short name: REGISTRY (the ones with a closed form the real-pair records
#: predict) and the drafter-invariant Gumbel coupling (exact law at small V; sampler and IID value at any V).
CHAIN_VERIFIERS = {**REGISTRY, GumbelCouplingVerify.name: GumbelCouplingVerify}
#: Multi-draft verifiers by short name.
MULTI_DRAFT_REGISTRY = {
    cls.name: cls for cls in (KSeq, MultiRound, MultiRoundWithoutReplacement, NaiveMultiCandidate, OTMVerify,
                              GreedyDraftVerify, SpecHubVerify)
}
#: Whole-tree verifiers by short name (the tree loop hands them every drafted node's rows at once).
WHOLE_TREE_REGISTRY = {cls.name: cls for cls in (TraversalVerify, GreedyBlockVerify)}
#: Every verifier class by short name.
VERIFIERS = {**CHAIN_VERIFIERS, **MULTI_DRAFT_REGISTRY,
             **{cls.name: cls for cls in (DecodingOPT, DecodingUNO, BatchVerify)}}

#: Aliases of the unified law and outcome types under their multi-draft names (constructors).
MultiDraftLaw = VerifierLaw.from_masses
MultiDraftOutcome = Outcome.from_candidates

__all__ = ["CANDIDATES", "CHAIN", "CHAIN_VERIFIERS", "GumbelCouplingVerify", "MULTI_DRAFT_REGISTRY", "REGISTRY", "VERIFIERS", "BackwardBlockVerify",
           "BatchVerify", "BlockVerify", "DecodingOPT", "DecodingUNO", "GreedyBlockVerify", "GreedyDraftVerify", "KSeq", "MultiDraftLaw",
           "MultiDraftOutcome", "MultiDraftVerifier", "MultiRound", "MultiRoundWithoutReplacement",
           "NaiveMultiCandidate", "OTMVerify", "Outcome", "OverAcceptance", "ResidualWindows",
           "SequentialMultiDraftVerifier", "SpecHubVerify", "TokenVerify", "TraversalVerify", "Verifier", "VerifierLaw",
           "WHOLE_TREE_REGISTRY", "check_single_draft"]
