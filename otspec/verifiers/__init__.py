"""Verifiers: one protocol (exact ``law`` + batched ``sample``, carried-state hooks) for every scheme.

Chain layout (one draft of L tokens): :class:`TokenVerify`, :class:`BlockVerify`,
:class:`BackwardBlockVerify`, :class:`GumbelCouplingVerify` (drafter-invariant), and the biased :class:`DecodingOPT` / :class:`DecodingUNO`.
Candidates layout (k drafts at one position): :class:`KSeq`, :class:`MultiRound`,
:class:`MultiRoundWithoutReplacement`, :class:`NaiveMultiCandidate`, :class:`OTMVerify`,
:class:`GreedyDraftVerify` (Hu et al.'s greedy drafts), :class:`SpecHubVerify` (SpecHub's hub pair),
:class:`BatchVerify`. Whole-tree layout (a drafted tree verified at once): :class:`TraversalVerify`, :class:`GreedyBlockVerify`.
"""

# The import order is the registration order, which lists and figures keep (``# isort: split`` holds it).
from .base import CANDIDATES, CHAIN, Outcome, Verifier, VerifierLaw, check_single_draft
from .registry import TREE, ClosedForm, VerifierView, register, registered, unregister

# isort: split
from .token import TokenVerify

# isort: split
from .block import BackwardBlockVerify, BlockVerify
from .gumbel import GumbelCouplingVerify
from .kseq import KSeq
from .multiround import MultiRound, MultiRoundWithoutReplacement
from .naive import NaiveMultiCandidate
from .otm import OTMVerify
from .structured import GreedyDraftVerify, SpecHubVerify

# isort: split
from .biased import DecodingOPT, DecodingUNO, OverAcceptance
from .candidates import MultiDraftVerifier, SequentialMultiDraftVerifier
from .carry import ResidualWindows

# isort: split
from .batch import BatchVerify
from .traversal import TraversalVerify

# isort: split
from .gbv import GreedyBlockVerify

#: Lossless chain verifiers with a closed form (the real-pair records predict them; ``--verifiers`` of validate).
REGISTRY = VerifierView("lossless chain verifiers with a closed form", layouts=(CHAIN,), lossless=True,
                        closed_form=True)
#: Every lossless chain verifier by short name (the CLI's ``--verifier`` choices): REGISTRY and the
#: drafter-invariant Gumbel coupling (exact law at small V; sampler and IID value at any V).
CHAIN_VERIFIERS = VerifierView("lossless chain verifiers", layouts=(CHAIN,), lossless=True)
#: Multi-draft verifiers by short name (k candidates at a position, on a tree of the caller's choosing).
MULTI_DRAFT_REGISTRY = VerifierView("multi-draft verifiers", layouts=(CANDIDATES,), lossless=True, fixed_tree=False)
#: Whole-tree verifiers by short name (the tree loop hands them every drafted node's rows at once).
WHOLE_TREE_REGISTRY = VerifierView("whole-tree verifiers", layouts=(TREE,))
#: Every verifier of a tree of the caller's choosing: multi-draft (level by level) and whole-tree.
TREE_VERIFIERS = VerifierView("tree verifiers", layouts=(CANDIDATES, TREE), lossless=True, fixed_tree=False)
#: Every registered verifier class by short name.
VERIFIERS = VerifierView("every verifier")

#: Aliases of the unified law and outcome types under their multi-draft names (constructors).
MultiDraftLaw = VerifierLaw.from_masses
MultiDraftOutcome = Outcome.from_candidates

__all__ = ["CANDIDATES", "CHAIN", "CHAIN_VERIFIERS", "TREE", "TREE_VERIFIERS", "ClosedForm", "VerifierView", "register",
           "registered", "unregister", "GumbelCouplingVerify", "MULTI_DRAFT_REGISTRY", "REGISTRY", "VERIFIERS", "BackwardBlockVerify",
           "BatchVerify", "BlockVerify", "DecodingOPT", "DecodingUNO", "GreedyBlockVerify", "GreedyDraftVerify", "KSeq", "MultiDraftLaw",
           "MultiDraftOutcome", "MultiDraftVerifier", "MultiRound", "MultiRoundWithoutReplacement",
           "NaiveMultiCandidate", "OTMVerify", "Outcome", "OverAcceptance", "ResidualWindows",
           "SequentialMultiDraftVerifier", "SpecHubVerify", "TokenVerify", "TraversalVerify", "Verifier", "VerifierLaw",
           "WHOLE_TREE_REGISTRY", "check_single_draft"]
