"""Every "too large to enumerate or solve" refusal is a SizeLimitError, raised before allocating; solver failures are SolveErrors."""

from __future__ import annotations

import numpy as np
import pytest

from otspec import errors, solvers, theory
from otspec.drafts import draft_inclusion_probs, draft_tuple_law
from otspec.engine import evaluate
from otspec.engine.sequence import RejectionTemplate, batch_law, template_law
from otspec.errors import SizeLimitError, SolveError, highs_options
from otspec.solvers.block_ot import BlockOTSolveError
from otspec.solvers.otm import OTMSolveError
from otspec.solvers.pareto import ParetoSolveError
from otspec.sources import IIDSource, random_markov
from otspec.verifiers import OTMVerify, TokenVerify

ROW20 = np.full(20, 0.05)
BIG = IIDSource(ROW20)
MARKOV = random_markov(40, 1.0, seed=0)

REFUSALS = {
    "enumerate": lambda: BIG.enumerate(8),
    "exact engine": lambda: evaluate(BIG, BIG, TokenVerify(), 6),
    "draft tuple law": lambda: draft_tuple_law(ROW20, 6),
    "inclusion race": lambda: draft_inclusion_probs(np.full(40_000, 1 / 40_000), 4, replacement=False),
    "OTM LP": lambda: solvers.otm_lp(ROW20, ROW20, 5),
    "OTM max-flow": lambda: solvers.otm_maxflow(ROW20, ROW20, 6),
    "OTM brute force": lambda: solvers.otm_value_bruteforce(ROW20, ROW20, 2),
    "Lemma 3": lambda: theory.lemma3_upper_bound(ROW20, ROW20, 2),
    "multi-round paths": lambda: theory.multiround_acceptance(ROW20, ROW20, 6, replacement=False),
    "block LP": lambda: solvers.solve_block_lp(BIG, BIG, 3),
    "on-path prefix walk": lambda: theory.expected_accepted_block(*MARKOV, 5),
    "Theorem-2 LP": lambda: solvers.min_rejection_lp(BIG, BIG, 5),
    "sequence LP": lambda: solvers.sequence_min_bias(BIG, BIG, 4, 0.5),
    "template law": lambda: template_law(BIG, BIG, RejectionTemplate.speculative(), 6),
    "batch law": lambda: batch_law(IIDSource([0.5, 0.5]), IIDSource([0.5, 0.5]), 2, 20),
    "OTM verifier": lambda: OTMVerify().law(np.zeros((1, 6), dtype=np.int64), ROW20[None, :5] * 4, ROW20[None, :5] * 4),
    "IID ratio classes": lambda: theory.iid_block_values(ROW20 * np.linspace(0.5, 1.5, 20) / (ROW20 * np.linspace(
        0.5, 1.5, 20)).sum(), ROW20, 30, route="exact"),
}


@pytest.mark.parametrize("call", REFUSALS.values(), ids=REFUSALS.keys())
def test_size_refusals_are_size_limit_errors(call):
    with pytest.raises(SizeLimitError) as info:
        call()
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert any(ch.isdigit() for ch in message) and ("MAX_" in message or "max_" in message or "limit" in message)


def test_solver_errors_share_one_base():
    for cls in (BlockOTSolveError, OTMSolveError, ParetoSolveError):
        assert issubclass(cls, SolveError) and issubclass(cls, RuntimeError)
    with pytest.raises(SolveError, match="HiGHS failed"):
        solvers.otm_lp([0.2, 0.3, 0.5], [0.6, 0.3, 0.1], 3, solver_options={"maxiter": 1})
    assert highs_options()["presolve"] is False and highs_options(presolve="off")["presolve"] == "off"
    assert errors.SizeLimitError("x", size=3, limit=2).size == 3
