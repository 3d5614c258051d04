"""Expected rejections of speculative decoding (Yin et al. 2024) under one historical import path.

The pieces live where they belong: the closed forms (Theorem 1, eq. (1); batch recursion
(4)–(5)) in :mod:`otspec.theory.rejections`, the Algorithm 1 / Algorithm 4 simulators and the
exact laws by enumeration in :mod:`otspec.engine.sequence`, the Theorem-2 LP in
:mod:`otspec.solvers.rejections`, the figure in :mod:`otspec.figures.rejections`. This module
re-exports them, and warns: import from those homes instead.

Spec: ``docs/yin_theory.md``.
"""

import warnings

from .engine.sequence import (
    MAX_BATCH_TUPLES,
    RejectionSimulation,
    RejectionTemplate,
    TemplateLaw,
    batch_law,
    simulate_batch_rejections,
    simulate_rejections,
    template_law,
)
from .solvers.rejections import MAX_LP_VARIABLES, min_rejection_lp
from .theory.rejections import (
    BATCH_MS,
    batch_curve,
    batch_expected_rejections,
    batch_rejections_per_position,
    expected_rejections,
    markov_pair,
    rejections_per_position,
    speedup,
)

warnings.warn("otspec.rejections is deprecated: import from otspec.theory.rejections, otspec.engine.sequence and "
              "otspec.solvers.rejections", DeprecationWarning, stacklevel=2)

__all__ = [
    "BATCH_MS", "MAX_BATCH_TUPLES", "MAX_LP_VARIABLES", "RejectionSimulation", "RejectionTemplate", "TemplateLaw",
    "batch_curve", "batch_expected_rejections", "batch_law", "batch_rejections_per_position",
    "expected_rejections", "markov_pair", "min_rejection_lp", "rejections_per_position",
    "simulate_batch_rejections", "simulate_rejections", "speedup", "template_law",
]
