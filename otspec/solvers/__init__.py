"""Exact optimal-transport solvers: block-level couplings of the draft's and target's laws."""

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

__all__ = [
    "BLOCK_LAW_TOL",
    "CVXPY_RESIDUAL_TOL",
    "HIGHS_RESIDUAL_TOL",
    "MAX_CVXPY_VARIABLES",
    "MAX_LP_VARIABLES",
    "BlockOTResult",
    "BlockOTSolveError",
    "block_laws",
    "block_ot_value",
    "common_prefix_length",
    "plan_expected_length",
    "solve_block_lp",
    "solve_block_lp_laws",
    "solve_block_tree",
    "solve_block_tree_laws",
]
