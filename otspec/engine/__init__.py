"""Engines: exact enumeration, batched Monte Carlo, end-to-end decoding."""

from .decode import DecodeResult, FixedDraftLength, generate
from .exact import ExactResult, evaluate
from .montecarlo import MonteCarloResult, simulate
from .stats import Estimate

__all__ = [
           "DecodeResult",
           "Estimate",
           "ExactResult",
           "FixedDraftLength",
           "MonteCarloResult",
           "evaluate",
           "generate",
           "simulate",
]
