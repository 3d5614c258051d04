"""Exact optimal-transport solvers — linear programmes, flows and duals only.

* :mod:`~otspec.solvers.block_ot` — block-level couplings of the draft's and target's laws
  (HiGHS LP, cvxpy LP; re-exports :mod:`~otspec.solvers.block_prefix`, the block laws, β and the
  value (8), and :mod:`~otspec.solvers.block_tree`, the exact prefix-tree route);
* :mod:`~otspec.solvers.otm` — multi-draft OTM-k with its plan (LP, max-flow);
* :mod:`~otspec.solvers.otm_dual` — α_k by the min-cut dual over sorted prefixes;
* :mod:`~otspec.solvers.pareto` — the rejection–bias LPs (sequence level; the token level in
  :mod:`~otspec.solvers.pareto_token`, re-exported);
* :mod:`~otspec.solvers.rejections` — the Theorem-2 LP of least rejections;
* :mod:`~otspec.solvers.lp` — the one LP helper (HiGHS / cvxpy).

Nothing here imports :mod:`otspec.verifiers`. The multi-draft closed forms, draft-tuple laws and
Pareto curves this package once re-exported live in :mod:`otspec.theory` and :mod:`otspec.drafts`;
their old names here still work and warn with ``DeprecationWarning``.
"""

import importlib
import warnings

from ..errors import SizeLimitError, SolveError
from .block_ot import (
    BLOCK_LAW_TOL,
    CVXPY_RESIDUAL_TOL,
    HIGHS_RESIDUAL_TOL,
    MAX_CVXPY_VARIABLES,
    MAX_LP_VARIABLES,
    BlockOTResult,
    BlockOTSolveError,
    block_laws,
    block_ot_value,
    common_prefix_length,
    plan_expected_length,
    solve_block_lp,
    solve_block_lp_laws,
    solve_block_tree,
    solve_block_tree_laws,
)
from .otm import (
    MAX_FLOW_EDGES,
    MAX_OTM_LP_VARIABLES,
    MAX_PLAN_ENTRIES,
    OTM_RESIDUAL_TOL,
    OTMResult,
    OTMSolveError,
    otm_lp,
    otm_maxflow,
    plan_acceptance,
)
from .otm_dual import otm_min_cut, otm_value, otm_value_bruteforce, structured_value
from .pareto import (
    ParetoResult,
    ParetoSolveError,
    SequenceParetoResult,
    min_bias,
    sequence_min_bias,
    sequence_pareto,
)
from .rejections import min_rejection_lp

#: Names this package re-exported before they found their homes (name -> home module).
MOVED_NAMES = {
    "MAX_DRAFT_TUPLES": "otspec.drafts",
    "MAX_RACE_CELLS": "otspec.drafts",
    "RACE_STEP": "otspec.drafts",
    "draft_inclusion_probs": "otspec.drafts",
    "draft_tuple_law": "otspec.drafts",
    "prob_drafts_within": "otspec.drafts",
    "tuple_membership": "otspec.drafts",
    "KSEQ_RESIDUAL_TOL": "otspec.theory.multidraft",
    "MAX_BRUTEFORCE_VOCAB": "otspec.theory.multidraft",
    "MAX_LEMMA3_TERMS": "otspec.theory.multidraft",
    "MAX_MULTIROUND_PATHS": "otspec.theory.multidraft",
    "RHO_TOL": "otspec.theory.multidraft",
    "bernoulli_alpha": "otspec.theory.multidraft",
    "kseq_acceptance": "otspec.theory.multidraft",
    "kseq_beta": "otspec.theory.multidraft",
    "kseq_residual": "otspec.theory.multidraft",
    "kseq_rho_star": "otspec.theory.multidraft",
    "lemma3_upper_bound": "otspec.theory.multidraft",
    "multiround_acceptance": "otspec.theory.multidraft",
    "naive_acceptance": "otspec.theory.multidraft",
    "uniform_alpha": "otspec.theory.multidraft",
    "family_curve": "otspec.theory.pareto",
    "optimal_resampling": "otspec.theory.pareto",
    "over_acceptance": "otspec.theory.pareto",
    "pareto_front": "otspec.theory.pareto",
}


def __getattr__(name: str):
    if name in MOVED_NAMES:
        warnings.warn(f"otspec.solvers.{name} is deprecated: import it from {MOVED_NAMES[name]}", DeprecationWarning,
                      stacklevel=2)
        return getattr(importlib.import_module(MOVED_NAMES[name]), name)
    raise AttributeError(f"module 'otspec.solvers' has no attribute {name!r}")


__all__ = [
    "BLOCK_LAW_TOL", "BlockOTResult", "BlockOTSolveError", "CVXPY_RESIDUAL_TOL", "HIGHS_RESIDUAL_TOL",
    "MAX_CVXPY_VARIABLES", "MAX_FLOW_EDGES", "MAX_LP_VARIABLES", "MAX_OTM_LP_VARIABLES", "MAX_PLAN_ENTRIES",
    "OTMResult", "OTMSolveError", "OTM_RESIDUAL_TOL", "ParetoResult", "ParetoSolveError",
    "SequenceParetoResult", "SizeLimitError", "SolveError", "block_laws", "block_ot_value",
    "common_prefix_length", "min_bias", "min_rejection_lp", "otm_lp", "otm_maxflow", "otm_min_cut",
    "otm_value", "otm_value_bruteforce", "structured_value", "plan_acceptance", "plan_expected_length", "sequence_min_bias",
    "sequence_pareto", "solve_block_lp", "solve_block_lp_laws", "solve_block_tree", "solve_block_tree_laws",
]
