"""Every exported callable of otspec, called once as documented and then once per hostile argument (issue 43).

The rounds of hostile inputs kept finding the same kinds of input in functions no earlier round had called: text
read as a number, a boolean as 1, NaN compared as a number, a float id read as its floor. This sweep walks the
whole exported surface instead: :data:`CALLS` holds one valid call of each exported callable (the test asserts
that every exported name is there or in :data:`NOT_SWEPT` with its reason), and each argument in turn is replaced by
values of the wrong kind for what it held. Each must be refused with a ``ValueError`` (a ``SizeLimitError`` is
one) — never taken, never a traceback of another kind. :data:`TAKEN` lists the replacements a callable takes on
purpose, with the reason.
"""

from __future__ import annotations

import importlib
import inspect
import math
import numbers

import numpy as np
import pytest

from otspec.sources import Source

P3, Q3 = [0.5, 0.3, 0.2], [0.2, 0.5, 0.3]
PACKAGES = ("otspec", "otspec.audit", "otspec.drafts", "otspec.engine", "otspec.figures", "otspec.solvers",
            "otspec.sources", "otspec.sweep", "otspec.theory", "otspec.verifiers")


def _calls() -> dict:
    """``name: (callable, kwargs)``: one valid call of each swept callable, on small inputs."""
    import otspec
    from otspec import audit, drafts, engine, solvers, sources, sweep, theory, verifiers

    d, t = sources.bernoulli(0.25), sources.bernoulli(0.75)
    md, mt = sources.random_markov(3, seed=1)
    tok = verifiers.TokenVerify()
    rows2 = np.array([[[0.5, 0.5], [0.25, 0.75]]])
    law_p, law_q = [0.5625, 0.1875, 0.1875, 0.0625], [0.0625, 0.1875, 0.1875, 0.5625]
    return {
        "otspec.overlap": (otspec.overlap, {"draft": P3, "target": Q3}),
        "otspec.total_variation": (otspec.total_variation, {"draft": P3, "target": Q3}),
        "otspec.residual": (otspec.residual, {"minuend": np.array(Q3), "subtrahend": np.array(P3),
                                              "return_mass": True}),
        "otspec.validate_probs": (otspec.validate_probs, {"probs": P3, "tol": 1e-9, "min_ndim": 1}),
        "otspec.drafts.check_draft": (drafts.check_draft, {"tokens": np.array([[0]]), "draft_probs": rows2[:, :1],
                                                           "target_probs": rows2, "validate": True}),
        "otspec.drafts.draft_inclusion_probs": (drafts.draft_inclusion_probs, {"draft": P3, "k": 2,
                                                                               "replacement": False}),
        "otspec.drafts.draft_tuple_law": (drafts.draft_tuple_law, {"draft": P3, "k": 2, "replacement": True,
                                                                   "max_tuples": 100}),
        "otspec.drafts.inclusion_iid": (drafts.inclusion_iid, {"s": 0.25, "k": 2}),
        "otspec.drafts.prob_drafts_within": (drafts.prob_drafts_within, {"draft": P3, "subset": [0, 1], "k": 2,
                                                                         "replacement": False, "method": "race"}),
        "otspec.drafts.sample_candidates": (drafts.sample_candidates, {
            "draft_probs": np.array([P3]), "k": 2, "rng": np.random.default_rng(0), "replacement": True,
            "validate": True}),
        "otspec.drafts.tuple_membership": (drafts.tuple_membership, {"tuples": np.array([[0, 1]]), "vocab_size": 3}),
        "otspec.drafts.ConfidenceTree": (drafts.ConfidenceTree, {"depth": 2, "top_k": 2, "nodes": 3}),
        "otspec.DraftTree": (otspec.DraftTree, {"branching": (2, 1), "replacement": False}),
        "otspec.drafts.parse_tree": (drafts.parse_tree, {"spec": "2x1", "replacement": True}),
        "otspec.drafts.tree_for_vocab": (drafts.tree_for_vocab, {"tree": drafts.parse_tree("5x1", False),
                                                                 "vocab_size": 3}),
        "otspec.engine.coupling_law": (engine.coupling_law, {"draft": d, "target": t, "verifier": tok, "L": 2}),
        "otspec.Backend": (otspec.Backend, {"method": "rows", "batch_size": 64}),
        "otspec.engine.ConfidenceController": (engine.ConfidenceController, {"threshold": 0.5, "max_length": 3}),
        "otspec.engine.FixedDraftLength": (engine.FixedDraftLength, {"length": 2}),
        "otspec.engine.HindsightOracle": (engine.HindsightOracle, {"max_length": 3}),
        "otspec.engine.ThresholdController": (engine.ThresholdController, {"thresholds": [0.5, 0.4],
                                                                           "max_length": 3}),
        "otspec.generate": (otspec.generate, {"draft": d, "target": t, "verifier": tok, "draft_length": 2,
                                              "n_tokens": 8, "n_sequences": 2, "seed": 0, "progress": False}),
        "otspec.evaluate": (otspec.evaluate, {"draft": d, "target": t, "verifier": tok, "draft_length": 2,
                                              "iterations": 1}),
        "otspec.simulate": (otspec.simulate, {"draft": d, "target": t, "verifier": tok, "draft_length": 2,
                                              "n_blocks": 100, "seed": 0, "progress": False, "confidence": 0.9}),
        "otspec.engine.simulate_candidates": (engine.simulate_candidates, {
            "draft_row": P3, "target_row": Q3, "verifier": verifiers.SpecHubVerify(), "k": 2, "n_steps": 100,
            "seed": 0, "progress": False, "confidence": 0.9}),
        "otspec.engine.generate_tree": (engine.generate_tree, {
            "draft": md, "target": mt, "verifier": verifiers.TraversalVerify(), "tree": drafts.parse_tree("2x1", False),
            "n_tokens": 6, "rule": "match", "n_sequences": 1, "seed": 0, "progress": False}),
        "otspec.engine.simulate_tree": (engine.simulate_tree, {
            "draft": md, "target": mt, "verifier": verifiers.OTMVerify(), "tree": "2x1", "n_blocks": 100,
            "rule": "match", "seed": 0, "progress": False, "confidence": 0.9}),
        "otspec.engine.tree_bound": (engine.tree_bound, {"draft": md, "target": mt, "tree": "2x1"}),
        "otspec.engine.tree_law": (engine.tree_law, {"draft": md, "target": mt, "verifier": verifiers.OTMVerify(),
                                                     "tree": drafts.parse_tree("2x1"), "rule": "match"}),
        "otspec.solvers.solve_block_lp": (solvers.solve_block_lp, {"draft": d, "target": t, "draft_length": 2,
                                                                   "method": "highs"}),
        "otspec.solvers.solve_block_lp_laws": (solvers.solve_block_lp_laws, {
            "draft_law": law_p, "target_law": law_q, "vocab_size": 2, "draft_length": 2, "method": "highs"}),
        "otspec.solvers.block_laws": (solvers.block_laws, {"draft": d, "target": t, "draft_length": 2}),
        "otspec.solvers.block_ot_value": (solvers.block_ot_value, {"draft_law": law_p, "target_law": law_q,
                                                                   "vocab_size": 2, "draft_length": 2}),
        "otspec.solvers.common_prefix_length": (solvers.common_prefix_length, {
            "draft_blocks": np.array([0, 1]), "target_blocks": np.array([0, 0]), "vocab_size": 2, "draft_length": 2}),
        "otspec.solvers.plan_expected_length": (solvers.plan_expected_length, {"plan": np.eye(4) / 4,
                                                                               "vocab_size": 2, "draft_length": 2}),
        "otspec.solvers.solve_block_tree": (solvers.solve_block_tree, {"draft": d, "target": t, "draft_length": 2,
                                                                       "return_plan": True}),
        "otspec.solvers.solve_block_tree_laws": (solvers.solve_block_tree_laws, {
            "draft_law": law_p, "target_law": law_q, "vocab_size": 2, "draft_length": 2, "return_plan": False}),
        "otspec.solvers.otm_lp": (solvers.otm_lp, {"draft": P3, "target": Q3, "k": 2, "replacement": True}),
        "otspec.solvers.otm_maxflow": (solvers.otm_maxflow, {"draft": P3, "target": Q3, "k": 2,
                                                             "replacement": False}),
        "otspec.solvers.plan_acceptance": (solvers.plan_acceptance, {"tuples": [[0], [1]],
                                                                     "plan": [[0.5, 0.0], [0.25, 0.25]]}),
        "otspec.solvers.otm_min_cut": (solvers.otm_min_cut, {"draft": P3, "target": Q3, "k": 2,
                                                             "replacement": True}),
        "otspec.solvers.otm_value": (solvers.otm_value, {"draft": P3, "target": Q3, "k": 2, "replacement": False}),
        "otspec.solvers.otm_value_bruteforce": (solvers.otm_value_bruteforce, {"draft": P3, "target": Q3, "k": 2,
                                                                               "replacement": True}),
        "otspec.solvers.structured_value": (solvers.structured_value, {"draft": P3, "target": Q3, "k": 2,
                                                                       "draw": "hub"}),
        "otspec.solvers.sequence_min_bias": (solvers.sequence_min_bias, {"draft": d, "target": t, "horizon": 1,
                                                                         "rejections": 0.1, "method": "highs"}),
        "otspec.solvers.sequence_pareto": (solvers.sequence_pareto, {"draft": d, "target": t, "horizon": 1,
                                                                     "rejections_grid": [0.0, 0.1]}),
        "otspec.solvers.min_bias": (solvers.min_bias, {"draft": P3, "target": Q3, "rejection": 0.1}),
        "otspec.solvers.min_rejection_lp": (solvers.min_rejection_lp, {"draft": d, "target": t, "horizon": 2}),
        "otspec.sources.check_enumeration": (sources.check_enumeration, {"vocab_size": 2, "length": 3}),
        "otspec.sources.extend_prefixes": (sources.extend_prefixes, {"tokens": np.array([[1]]), "vocab_size": 2}),
        "otspec.source_from_json": (otspec.source_from_json, {"obj": {"type": "iid", "probs": [0.5, 0.5]}}),
        "otspec.sources.log_rows": (sources.log_rows, {"draft": d, "target": t, "paths": 2, "length": 3,
                                                       "top_p": 0.9, "seed": 0, "progress": False}),
        "otspec.sources.GreedySource": (sources.GreedySource, {"base": d}),
        "otspec.IIDSource": (otspec.IIDSource, {"probs": P3}),
        "otspec.MarkovSource": (otspec.MarkovSource, {"initial": [0.5, 0.5], "transition": [[0.9, 0.1], [0.2, 0.8]],
                                                      "horizon": 4}),
        "otspec.TableSource": (otspec.TableSource, {"rows": {(): [0.5, 0.5]}, "vocab_size": 2, "horizon": 1}),
        "otspec.bernoulli": (otspec.bernoulli, {"p": 0.25}),
        "otspec.uniform_source": (otspec.uniform_source, {"support": 2, "vocab_size": 3}),
        "otspec.random_iid": (otspec.random_iid, {"vocab": 3, "concentration": 1.0, "seed": 0, "sparsity": 0.2}),
        "otspec.random_markov": (otspec.random_markov, {"vocab": 3, "concentration": 1.0, "horizon": 3, "seed": 0,
                                                        "sparsity": 0.0}),
        "otspec.sweep.temper": (sweep.temper, {"source": d, "T": 0.5}),
        "otspec.sweep.cell_seed": (sweep.cell_seed, {"sweep_seed": 3, "params": {"L": 2}}),
        "otspec.theory.fixed_length_latency": (theory.fixed_length_latency, {
            "draft": P3, "target": Q3, "length": 2, "t_draft": 0.1, "t_target": 1.0}),
        "otspec.theory.optimal_stopping": (theory.optimal_stopping, {
            "draft": P3, "target": Q3, "max_length": 3, "t_draft": 0.1, "t_target": 1.0, "method": "auto",
            "tol": 1e-9}),
        "otspec.theory.bernoulli_expected_accepted_optimal": (theory.bernoulli_expected_accepted_optimal, {
            "draft_p": 0.25, "target_p": 0.75, "draft_length": 2}),
        "otspec.theory.bernoulli_expected_accepted_token": (theory.bernoulli_expected_accepted_token, {
            "draft_p": 0.25, "target_p": 0.75, "draft_length": 2}),
        "otspec.theory.expected_accepted_block": (theory.expected_accepted_block, {"draft": d, "target": t,
                                                                                   "draft_length": 2}),
        "otspec.theory.expected_accepted_optimal": (theory.expected_accepted_optimal, {"draft": d, "target": t,
                                                                                       "draft_length": 2}),
        "otspec.theory.expected_accepted_token": (theory.expected_accepted_token, {"draft": d, "target": t,
                                                                                   "draft_length": 2}),
        "otspec.theory.positional_window_values": (theory.positional_window_values, {"overlaps": [[0.5, 1.0]]}),
        "otspec.theory.tokens_per_iteration": (theory.tokens_per_iteration, {"expected_accepted": 1.5}),
        "otspec.theory.CallCosts": (theory.CallCosts, {"t_draft": 0.1, "t_target": 1.0, "overhead": 0.01}),
        "otspec.theory.predicted_speedup": (theory.predicted_speedup, {"expected_accepted": 1.5, "cost_ratio": 0.1,
                                                                       "draft_length": 2}),
        "otspec.theory.iid_block_values": (theory.iid_block_values, {"draft": P3, "target": Q3, "draft_length": 2,
                                                                     "route": "lattice", "step": 0.01}),
        "otspec.theory.iid_block_optimum": (theory.iid_block_optimum, {"draft": P3, "target": Q3, "draft_length": 2,
                                                                       "route": "exact"}),
        "otspec.theory.iid_block_verification": (theory.iid_block_verification, {
            "draft": P3, "target": Q3, "draft_length": 2, "route": "auto"}),
        "otspec.theory.bernoulli_alpha": (theory.bernoulli_alpha, {"draft_p": 0.25, "target_p": 0.75, "k": 2}),
        "otspec.theory.lemma3_upper_bound": (theory.lemma3_upper_bound, {"draft": P3, "target": Q3, "k": 2,
                                                                         "replacement": True}),
        "otspec.theory.naive_acceptance": (theory.naive_acceptance, {"draft": P3, "target": Q3, "k": 2,
                                                                     "replacement": False}),
        "otspec.theory.uniform_alpha": (theory.uniform_alpha, {"r": 2.0, "k": 2}),
        "otspec.theory.kseq_acceptance": (theory.kseq_acceptance, {"draft": P3, "target": Q3, "k": 2}),
        "otspec.theory.kseq_beta": (theory.kseq_beta, {"draft": P3, "target": Q3, "rho": 1.5}),
        "otspec.theory.kseq_parameters": (theory.kseq_parameters, {
            "draft_probs": np.array([P3]), "target_probs": np.array([Q3]), "k": 2, "check": True, "max_k": 4}),
        "otspec.theory.kseq_residual": (theory.kseq_residual, {"draft": P3, "target": Q3, "k": 2, "rho": 2.0}),
        "otspec.theory.kseq_rho_star": (theory.kseq_rho_star, {"draft": np.array([P3]), "target": np.array([Q3]),
                                                               "k": np.array([2.0]), "tol": 1e-9, "check": True}),
        "otspec.theory.multiround_acceptance": (theory.multiround_acceptance, {"draft": P3, "target": Q3, "k": 2,
                                                                               "replacement": False}),
        "otspec.theory.multiround_rejection": (theory.multiround_rejection, {
            "draft_probs": np.array([P3]), "target_probs": np.array([Q3]), "k": 2, "check": True}),
        "otspec.theory.uniform_multiround_without_replacement": (theory.uniform_multiround_without_replacement, {
            "support": 6, "target_support": 2, "k": 2}),
        "otspec.theory.optimal_resampling": (theory.optimal_resampling, {"draft": P3, "target": Q3,
                                                                         "accept_probs": [0.5, 1.0, 1.0]}),
        "otspec.theory.pareto_front": (theory.pareto_front, {"draft": P3, "target": Q3, "rejection": 0.1}),
        "otspec.theory.per_step_curve": (theory.per_step_curve, {"draft": d, "target": t, "horizon": 1,
                                                                 "rejections_grid": [0.0, 0.1], "rule": "eps"}),
        "otspec.theory.sequence_expected_rejections_sd": (theory.sequence_expected_rejections_sd, {
            "draft": d, "target": t, "horizon": 2}),
        "otspec.theory.sequence_laws": (theory.sequence_laws, {"draft": d, "target": t, "horizon": 2}),
        "otspec.theory.family_curve": (theory.family_curve, {"draft": P3, "target": Q3, "eps_grid": [0.0, 0.1],
                                                             "mode": "uno"}),
        "otspec.theory.over_acceptance": (theory.over_acceptance, {"draft": P3, "target": Q3, "eps": 0.1,
                                                                   "mode": "opt"}),
        "otspec.theory.batch_curve": (theory.batch_curve, {"draft": d, "target": t, "horizon": 2, "Ms": [1, 2]}),
        "otspec.theory.batch_expected_rejections": (theory.batch_expected_rejections, {
            "draft": d, "target": t, "horizon": 2, "M": 2}),
        "otspec.theory.batch_rejections_per_position": (theory.batch_rejections_per_position, {
            "draft": d, "target": t, "horizon": 2, "M": 2}),
        "otspec.theory.expected_rejections": (theory.expected_rejections, {"draft": d, "target": t, "horizon": 2}),
        "otspec.theory.markov_pair": (theory.markov_pair, {"vocab": 3, "horizon": 4, "seed": 1}),
        "otspec.theory.rejections_per_position": (theory.rejections_per_position, {"draft": d, "target": t,
                                                                                   "horizon": 2}),
        "otspec.theory.speedup": (theory.speedup, {"draft": d, "target": t, "horizon": 2}),
        "otspec.verifiers.check_single_draft": (verifiers.check_single_draft, {
            "draft_tokens": np.array([[0]]), "draft_probs": rows2[:, :1], "target_probs": rows2, "validate": True}),
        "otspec.verifiers.BatchVerify": (verifiers.BatchVerify, {"M": 2}),
        "otspec.verifiers.DecodingOPT": (verifiers.DecodingOPT, {"eps": 0.1}),
        "otspec.verifiers.DecodingUNO": (verifiers.DecodingUNO, {"eps": 0.1}),
        "otspec.verifiers.OverAcceptance": (verifiers.OverAcceptance, {"eps": 0.1}),
        "otspec.verifiers.KSeq": (verifiers.KSeq, {"rho": 1.5}),
        "otspec.verifiers.OTMVerify": (verifiers.OTMVerify, {"replacement": False, "max_tuples": 64,
                                                             "cache_size": 8}),
        "otspec.verifiers.registered": (verifiers.registered, {"layouts": ("chain",), "lossless": True,
                                                               "closed_form": False, "fixed_tree": False}),
        "otspec.audit.synthetic_pool": (audit.synthetic_pool, {"n_pairs": 4, "vocab": 3, "draft_length": 2,
                                                               "seed": 0}),
    }


#: Exported callables the sweep does not call, and why.
NOT_SWEPT = {
    **dict.fromkeys((
        "otspec.audit.AuditReport", "otspec.audit.Failure", "otspec.audit.RowPool", "otspec.engine.ExactResult",
        "otspec.engine.CostModel", "otspec.engine.DecodeResult", "otspec.engine.MonteCarloResult",
        "otspec.engine.Estimate", "otspec.solvers.BlockOTResult", "otspec.solvers.OTMResult",
        "otspec.solvers.SequenceParetoResult", "otspec.solvers.ParetoResult", "otspec.sources.Enumeration",
        "otspec.theory.IIDBlockValue", "otspec.theory.IIDBlockValues", "otspec.theory.AdaptiveOptimum",
        "otspec.theory.KSeqParameters", "otspec.theory.ResamplingResult", "otspec.verifiers.Outcome",
        "otspec.verifiers.MultiDraftOutcome", "otspec.verifiers.VerifierLaw", "otspec.verifiers.MultiDraftLaw",
        "otspec.verifiers.ResidualWindows", "otspec.Draft", "otspec.figures.Figure", "otspec.sweep.SweepSpec"),
        "a result or container the library builds from checked inputs (Draft: check_draft checks one)"),
    **dict.fromkeys((
        "otspec.audit.SamplerError", "otspec.audit.SamplerTimeout", "otspec.SizeLimitError", "otspec.SolveError",
        "otspec.solvers.BlockOTSolveError", "otspec.solvers.OTMSolveError", "otspec.solvers.ParetoSolveError"),
        "an exception class"),
    **dict.fromkeys((
        "otspec.sources.Source", "otspec.verifiers.Verifier", "otspec.verifiers.MultiDraftVerifier",
        "otspec.verifiers.SequentialMultiDraftVerifier"), "an abstract base class"),
    **dict.fromkeys((
        "otspec.TokenVerify", "otspec.verifiers.BlockVerify", "otspec.verifiers.BackwardBlockVerify",
        "otspec.verifiers.GreedyBlockVerify", "otspec.verifiers.GumbelCouplingVerify", "otspec.verifiers.MultiRound",
        "otspec.verifiers.MultiRoundWithoutReplacement", "otspec.verifiers.NaiveMultiCandidate",
        "otspec.verifiers.GreedyDraftVerify", "otspec.verifiers.SpecHubVerify", "otspec.verifiers.TraversalVerify"),
        "a verifier without parameters"),
    **dict.fromkeys(("otspec.drafts.gather_tokens", "otspec.theory.over_acceptance_kernel"),
                    "a per-step kernel of the verifiers, documented to take checked rows (a check would read back "
                    "from the device every step)"),
    **dict.fromkeys((
        "otspec.load_source", "otspec.sources.save_source", "otspec.sources.load_logged_rows",
        "otspec.sources.LoggedRows", "otspec.audit.logged_pool", "otspec.engine.simulate_logged",
        "otspec.sweep.load_spec", "otspec.sweep.run_sweep", "otspec.sweep.gather", "otspec.sweep.write_tables",
        "otspec.sweep.run_cell", "otspec.sweep.run_cells", "otspec.sweep.build_pair", "otspec.sweep.cell_id"),
        "reads or writes files (hostile files: tests/test_hostile_*.py, test_sweep*.py)"),
    **dict.fromkeys(("otspec.audit.audit", "otspec.audit.call_sampler", "otspec.audit.load_sampler"),
                    "runs a user's sampler (hostile options: tests/test_audit_hostile.py)"),
    **dict.fromkeys((
        "otspec.verifiers.register", "otspec.verifiers.unregister", "otspec.verifiers.VerifierView",
        "otspec.verifiers.ClosedForm", "otspec.figures.register"), "registry plumbing (tests/test_*_registry.py)"),
    **dict.fromkeys(("otspec.sources.PositionalSource", "otspec.sources.DepthPositionalSource"),
                    "rows per position as nested lists (tests/test_sources.py)"),
}

#: (callable, argument, replacement) that a callable takes on purpose, and why.
TAKEN = {
    **{(f"otspec.{fn}", arg, "an extra axis"): "rows lie along the last axis; leading axes are a batch"
       for fn, arg in (("overlap", "draft"), ("overlap", "target"), ("total_variation", "draft"),
                       ("total_variation", "target"), ("residual", "minuend"), ("validate_probs", "probs"))},
    **{(f"otspec.{fn}", arg, "inf"): "documented: an infinite budget or epsilon accepts every draft"
       for fn, arg in (("solvers.sequence_min_bias", "rejections"), ("theory.over_acceptance", "eps"),
                       ("verifiers.DecodingOPT", "eps"), ("verifiers.DecodingUNO", "eps"),
                       ("verifiers.OverAcceptance", "eps"))},
}


def _exported() -> set[str]:
    names = set()
    for package in PACKAGES:
        module = importlib.import_module(package)
        for attr in getattr(module, "__all__", []):
            obj = getattr(module, attr, None)
            if callable(obj) and not inspect.ismodule(obj) and getattr(obj, "__module__", "").startswith("otspec"):
                names.add(f"{package}.{attr}")
    return names


def _same_object_names() -> dict:
    """Exported name → the names it is exported under (one object, several packages)."""
    groups = {}
    for name in _exported():
        package, attr = name.rsplit(".", 1)
        groups.setdefault(id(getattr(importlib.import_module(package), attr)), set()).add(name)
    return {name: group for group in groups.values() for name in group}


def hostile(value) -> dict:
    """Replacements of the wrong kind for ``value``, by what it is."""
    if isinstance(value, bool | np.bool_):
        return {"text 'False'": "False", "the number 2": 2}
    if isinstance(value, numbers.Integral):
        return {"True": True, "2.5": 2.5, "text '2'": "2", "NaN": math.nan, "-1": -1}
    if isinstance(value, numbers.Real):
        return {"NaN": math.nan, "text '0.5'": "0.5", "True": True, "-0.5": -0.5, "inf": math.inf}
    if isinstance(value, str):
        return {"an unknown name": "zz-unknown", "the number 3": 3}
    if isinstance(value, Source):  # where a row may stand for its IID source, a row of text or booleans is refused
        V = value.vocab_size
        return {"a text": "source", "a row of text": [str(1 / V)] * V, "a row of booleans": [True] + [False] * (V - 1)}
    if hasattr(value, "verify") or hasattr(value, "law"):
        return {"a verifier's name": "token"}
    if isinstance(value, list | tuple | np.ndarray) and len(value) and not isinstance(np.asarray(value).flat[0], str):
        arr = np.asarray(value)
        if arr.dtype.kind == "f":
            nan = arr.copy()
            nan.flat[0] = np.nan
            negative = arr.copy()
            negative.flat[0] = -0.25
            return {"a NaN entry": nan, "text entries": arr.astype(str), "booleans": arr > 0,
                    "a negative entry": negative, "an extra axis": arr[None, None],
                    "text in a list": arr.astype(str).tolist(), "booleans in a list": (arr > 0).tolist()}
        if arr.dtype.kind in "iu":
            far = arr.copy()
            far.flat[0] = 10**6
            return {"float ids": arr + 0.5, "text entries": arr.astype(str), "an id past every vocabulary": far}
    return {}


def _arguments(fn, kwargs: dict) -> dict:
    """The call's arguments and the callable's other parameters at their defaults (None and objects left out)."""
    out = dict(kwargs)
    for param in inspect.signature(fn).parameters.values():
        default = param.default
        if param.name not in out and isinstance(default, bool | numbers.Real | str) and param.name != "name":
            out[param.name] = default
    return out


def _cases():
    calls = _calls()
    for name, (fn, kwargs) in calls.items():
        for arg, value in _arguments(fn, kwargs).items():
            for what, bad in hostile(value).items():
                yield pytest.param(name, arg, what, bad, id=f"{name.removeprefix('otspec.')}-{arg}-{what}")


def test_every_exported_callable_is_swept_or_excused():
    """A new exported function or class joins :func:`_calls` (or NOT_SWEPT with its reason)."""
    aliases = _same_object_names()
    covered = set(_calls()) | set(NOT_SWEPT)
    missing = sorted(name for name in _exported() if not (aliases[name] & covered))
    assert not missing, f"add a valid call of each to _calls() in this file, or a reason to NOT_SWEPT: {missing}"
    assert not set(_calls()) & set(NOT_SWEPT)


@pytest.mark.parametrize("name", sorted(_calls()))
def test_each_documented_call_runs(name):
    """The table's calls are valid: without this, a refusal below could be a refusal of the valid arguments."""
    fn, kwargs = _calls()[name]
    fn(**kwargs)


@pytest.mark.parametrize(("name", "arg", "what", "bad"), list(_cases()))
def test_a_hostile_argument_is_refused(name, arg, what, bad):
    """One argument of a valid call replaced by a value of the wrong kind: a ValueError naming the argument."""
    if (name, arg, what) in TAKEN:
        pytest.skip(TAKEN[name, arg, what])
    fn, kwargs = _calls()[name]
    with pytest.raises(ValueError):
        fn(**{**kwargs, arg: bad})


def equivalent(value) -> dict:
    """Other spellings of ``value`` that mean the same: numpy scalars for Python numbers, tuples and arrays for
    lists (what a careful user of numpy passes without a second thought)."""
    if isinstance(value, bool):
        return {"numpy bool": np.bool_(value)}
    if isinstance(value, int):
        return {"numpy int64": np.int64(value), "numpy int32": np.int32(value)}
    if isinstance(value, float):
        return {"numpy float64": np.float64(value), "numpy float32": np.float32(value)}
    if isinstance(value, list) and value and all(isinstance(x, numbers.Real) for x in value):
        return {"a tuple": tuple(value), "an array": np.asarray(value)}
    return {}


def _same(a, b) -> bool:
    """Results equal to float32 rounding (numbers, arrays and the numbers inside tuples, lists and dicts)."""
    if isinstance(a, numbers.Real | np.ndarray) and not isinstance(a, bool):
        return np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-5, atol=1e-7,
                           equal_nan=True)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
        return all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return True  # objects: that the call ran is what is checked


def _variants():
    for name, (_, kwargs) in _calls().items():
        for arg, value in kwargs.items():
            for what, other in equivalent(value).items():
                yield pytest.param(name, arg, what, other, id=f"{name.removeprefix('otspec.')}-{arg}-{what}")


@pytest.mark.parametrize(("name", "arg", "what", "other"), list(_variants()))
def test_an_equivalent_argument_is_taken(name, arg, what, other):
    """The same value spelled as a numpy scalar, a tuple or an array: taken, with the same result (nothing valid
    refused by the checks above)."""
    fn, kwargs = _calls()[name]
    fresh = _calls()[name][1]  # its own generator, where the call draws
    assert _same(fn(**kwargs), fn(**{**fresh, arg: other}))
