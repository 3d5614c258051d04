"""Every closed form of otspec, one module per family, each function citing its equation.

* :mod:`~otspec.theory.blocks` — single-draft verification: eqs. (4), (8), (10)–(11), (17)
  of ``token_and_block_verification.md``;
* :mod:`~otspec.theory.iid` — the same three values for IID pairs at LLM vocabulary sizes,
  exactly over classes of equal q/p or with certified bounds;
* :mod:`~otspec.theory.multidraft` — SpecTr eqs. (8)–(10), (12), (14)–(15), multi-round and
  naive acceptance (``multi_draft_otm.md`` §4–8); it re-exports k-Seq from
  :mod:`~otspec.theory.multidraft_kseq` and multi-round rejection from
  :mod:`~otspec.theory.multidraft_multiround`;
* :mod:`~otspec.theory.rejections` — Yin et al. Theorem 1, eq. (1), and the batch recursion
  (4)–(5) (``yin_theory.md``);
* :mod:`~otspec.theory.pareto` — Yin et al. Theorems 4–5, eqs. (6)–(9) (the over-acceptance
  family (9) in :mod:`~otspec.theory.pareto_family`, re-exported);
* :mod:`~otspec.theory.adaptive` — SpecDec++: fixed-length latency and the exact optimal
  draft-length policy of an IID pair (``specdecpp.md`` §2–4).

Everything is re-exported here: ``otspec.theory.expected_accepted_token(...)``.

Spec: ``docs/token_and_block_verification.md``, ``docs/multi_draft_otm.md``, ``docs/yin_theory.md``, ``docs/specdecpp.md``.
"""

from .adaptive import AdaptiveOptimum, fixed_length_latency, optimal_stopping
from .blocks import (
    FIGURE2_QUANTITY,
    bernoulli_expected_accepted_optimal,
    bernoulli_expected_accepted_token,
    expected_accepted_block,
    expected_accepted_optimal,
    expected_accepted_token,
    positional_window_values,
    predicted_speedup,
    tokens_per_iteration,
)
from .cost import CallCosts
from .iid import (
    IIDBlockValue,
    IIDBlockValues,
    iid_block_optimum,
    iid_block_values,
    iid_block_verification,
)
from .multidraft import (
    KSEQ_RESIDUAL_TOL,
    RHO_TOL,
    KSeqParameters,
    bernoulli_alpha,
    kseq_acceptance,
    kseq_beta,
    kseq_parameters,
    kseq_residual,
    kseq_rho_star,
    lemma3_upper_bound,
    multiround_acceptance,
    multiround_rejection,
    naive_acceptance,
    uniform_alpha,
    uniform_multiround_without_replacement,
)
from .pareto import (
    ResamplingResult,
    family_curve,
    optimal_resampling,
    over_acceptance,
    over_acceptance_kernel,
    pareto_front,
    per_step_curve,
    sequence_expected_rejections_sd,
    sequence_laws,
)
from .rejections import (
    BATCH_MS,
    batch_curve,
    batch_expected_rejections,
    batch_rejections_per_position,
    expected_rejections,
    markov_pair,
    rejections_per_position,
    speedup,
)

__all__ = [
    "AdaptiveOptimum", "fixed_length_latency", "optimal_stopping",
    "BATCH_MS", "FIGURE2_QUANTITY", "IIDBlockValue", "IIDBlockValues", "iid_block_optimum", "iid_block_values",
    "iid_block_verification", "KSEQ_RESIDUAL_TOL", "RHO_TOL", "KSeqParameters", "ResamplingResult",
    "batch_curve", "batch_expected_rejections", "batch_rejections_per_position",
    "bernoulli_alpha", "bernoulli_expected_accepted_optimal", "bernoulli_expected_accepted_token",
    "expected_accepted_block", "expected_accepted_optimal", "expected_accepted_token", "expected_rejections",
    "family_curve", "kseq_acceptance", "kseq_beta", "kseq_parameters", "kseq_residual", "kseq_rho_star",
    "lemma3_upper_bound", "markov_pair", "multiround_acceptance", "multiround_rejection", "naive_acceptance",
    "optimal_resampling", "over_acceptance", "over_acceptance_kernel", "pareto_front", "per_step_curve",
    "positional_window_values", "predicted_speedup", "CallCosts",
    "rejections_per_position", "sequence_expected_rejections_sd", "sequence_laws", "speedup",
    "tokens_per_iteration", "uniform_alpha", "uniform_multiround_without_replacement",
]
