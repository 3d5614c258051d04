"""Engines: exact enumeration, batched Monte Carlo, end-to-end decoding (chains and trees), whole-response simulators."""

from .branching import coupling_law
from .chunking import Backend
from .controllers import (
    ConfidenceController,
    FixedDraftLength,
    HindsightOracle,
    ThresholdController,
)
from .decode import generate
from .exact import ExactResult, evaluate
from .ledger import CostModel, DecodeResult
from .montecarlo import MonteCarloResult, simulate, simulate_candidates, simulate_logged
from .stats import Estimate
from .tree import generate_tree, simulate_tree, tree_bound, tree_law

__all__ = [
    "Backend",
    "CostModel",
    "DecodeResult",
    "Estimate",
    "ExactResult",
    "FixedDraftLength",
    "HindsightOracle",
    "MonteCarloResult",
    "ConfidenceController",
    "ThresholdController",
    "coupling_law",
    "evaluate",
    "generate",
    "generate_tree",
    "simulate",
    "simulate_candidates",
    "simulate_logged",
    "simulate_tree",
    "tree_bound",
    "tree_law",
]
