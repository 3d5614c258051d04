"""Exact optimal-transport solvers — linear programmes, flows and duals only.

* :mod:`~otspec.solvers.block_ot` — block-level couplings of the draft's and target's laws
  (HiGHS LP, cvxpy LP, the exact prefix-tree route);
* :mod:`~otspec.solvers.otm` — multi-draft OTM-k with its plan (LP, max-flow);
* :mod:`~otspec.solvers.otm_dual` — α_k by the min-cut dual over sorted prefixes;
* :mod:`~otspec.solvers.pareto` — the rejection–bias LPs (token and sequence level);
* :mod:`~otspec.solvers.rejections` — the Theorem-2 LP of least rejections;
* :mod:`~otspec.solvers.lp` — the one LP helper (HiGHS / cvxpy).

Nothing here imports :mod:`otspec.verifiers`. For convenience this package also re-exports the
multi-draft closed forms and draft-tuple laws it is checked against (their homes are
:mod:`otspec.theory.multidraft` and :mod:`otspec.drafts`).
"""

from ..drafts import (
    MAX_DRAFT_TUPLES,
    MAX_RACE_CELLS,
    RACE_STEP,
    draft_inclusion_probs,
    draft_tuple_law,
    prob_drafts_within,
    tuple_membership,
)
from ..errors import SizeLimitError, SolveError
from ..theory.multidraft import (
    KSEQ_RESIDUAL_TOL,
    MAX_BRUTEFORCE_VOCAB,
    MAX_LEMMA3_TERMS,
    MAX_MULTIROUND_PATHS,
    RHO_TOL,
    bernoulli_alpha,
    kseq_acceptance,
    kseq_beta,
    kseq_residual,
    kseq_rho_star,
    lemma3_upper_bound,
    multiround_acceptance,
    naive_acceptance,
    uniform_alpha,
)
from ..theory.pareto import family_curve, optimal_resampling, over_acceptance, pareto_front
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
from .otm_dual import otm_min_cut, otm_value, otm_value_bruteforce
from .pareto import (
    ParetoResult,
    ParetoSolveError,
    SequenceParetoResult,
    min_bias,
    sequence_min_bias,
    sequence_pareto,
)
from .rejections import min_rejection_lp

__all__ = [
    "BLOCK_LAW_TOL", "CVXPY_RESIDUAL_TOL", "HIGHS_RESIDUAL_TOL", "KSEQ_RESIDUAL_TOL", "MAX_BRUTEFORCE_VOCAB",
    "MAX_CVXPY_VARIABLES", "MAX_DRAFT_TUPLES", "MAX_FLOW_EDGES", "MAX_LEMMA3_TERMS", "MAX_LP_VARIABLES",
    "MAX_MULTIROUND_PATHS", "MAX_OTM_LP_VARIABLES", "MAX_PLAN_ENTRIES", "MAX_RACE_CELLS", "OTM_RESIDUAL_TOL",
    "RACE_STEP", "RHO_TOL", "BlockOTResult", "BlockOTSolveError", "OTMResult", "OTMSolveError", "ParetoResult",
    "ParetoSolveError", "SequenceParetoResult", "SizeLimitError", "SolveError", "bernoulli_alpha", "block_laws",
    "block_ot_value", "common_prefix_length", "draft_inclusion_probs", "draft_tuple_law", "family_curve",
    "kseq_acceptance", "kseq_beta", "kseq_residual", "kseq_rho_star", "lemma3_upper_bound", "min_bias",
    "min_rejection_lp", "multiround_acceptance", "naive_acceptance", "optimal_resampling", "otm_lp",
    "otm_maxflow", "otm_min_cut", "otm_value", "otm_value_bruteforce", "over_acceptance", "pareto_front",
    "plan_acceptance", "plan_expected_length", "prob_drafts_within", "sequence_min_bias", "sequence_pareto",
    "solve_block_lp", "solve_block_lp_laws", "solve_block_tree", "solve_block_tree_laws", "tuple_membership",
    "uniform_alpha",
]
