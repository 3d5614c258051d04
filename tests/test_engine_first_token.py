"""The exact first-token law for any pair of sources (the engine the bridge runs over real models)."""

from __future__ import annotations

import numpy as np
import pytest

import otspec
from otspec.engine import evaluate
from otspec.engine.first_token import first_token_law, root_token_law
from otspec.errors import SizeLimitError
from otspec.verifiers import (
    BackwardBlockVerify,
    BlockVerify,
    DecodingOPT,
    KSeq,
    MultiRoundWithoutReplacement,
    TokenVerify,
)


@pytest.mark.parametrize("verifier", [TokenVerify(), BlockVerify(), BackwardBlockVerify(), DecodingOPT(eps=0.3)],
                         ids=["token", "block", "block_v1", "decoding_opt"])
@pytest.mark.parametrize("L", [1, 2, 3])
def test_first_token_law_is_the_marginal_of_the_exact_engine(verifier, L):
    draft, target = otspec.random_markov(vocab=3, concentration=1.0, seed=L, sparsity=0.3)
    law = first_token_law(draft, target, verifier, L)
    full = evaluate(draft, target, verifier, L).output_law.reshape((3,) * (L + 1))
    np.testing.assert_allclose(law.law, full.sum(axis=tuple(range(1, L + 1))), atol=1e-12)
    np.testing.assert_allclose(law.target, target.next_probs([[]])[0], atol=1e-15)
    if verifier.lossless:
        assert law.max_deviation < 1e-12
    else:
        assert law.max_deviation > 1e-3  # the biased control shows


def test_root_law_of_multi_draft_verifiers_and_size_limits():
    draft, target = otspec.random_iid(vocab=4, concentration=1.0, seed=2)
    for verifier in (KSeq(), MultiRoundWithoutReplacement()):
        assert root_token_law(draft, target, verifier, 3).max_deviation < 1e-12
    with pytest.raises(SizeLimitError, match="MAX_LAW_PATHS"):
        first_token_law(draft, target, TokenVerify(), 3, max_paths=10)
    with pytest.raises(ValueError, match="draft_length"):
        first_token_law(draft, target, TokenVerify(), 0)
