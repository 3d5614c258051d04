"""Round sixteen of hostile inputs (issue 43): one test per class of finding, each able to fail on the old code."""

from __future__ import annotations

import numpy as np
import pytest


def test_the_text_false_is_not_a_draw_without_replacement():
    """OTMVerify(replacement='False') became True (bool of a text), and draft_inclusion_probs / prob_drafts_within
    gave the with-replacement answer; max_tuples 0, a negative cache and a 10^12-tuple law were accepted or allocated
    before refusing."""
    from otspec.drafts import draft_inclusion_probs, draft_tuple_law, prob_drafts_within
    from otspec.errors import SizeLimitError
    from otspec.verifiers import OTMVerify

    for call in (lambda: OTMVerify(replacement="False"), lambda: draft_inclusion_probs([0.5, 0.5], 2, "False"),
                 lambda: prob_drafts_within([0.5, 0.5], [0], 2, replacement="False")):
        with pytest.raises(ValueError, match="replacement: expected True or False"):
            call()
    for kwargs in ({"max_tuples": 0}, {"cache_size": -1}):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            OTMVerify(**kwargs)
    with pytest.raises(SizeLimitError, match="MAX_DRAFT_TUPLES"):
        draft_tuple_law([0.5, 0.5], 2, max_tuples=10**12)
    assert draft_inclusion_probs([0.5, 0.5], 2, False).tolist() == [1.0, 1.0]
    assert OTMVerify(replacement=False).replacement is False


def test_kseq_parameters_reads_lists_and_checks_its_options():
    """List rows (which the contract allows) raised TypeError; check='no', max_k=-1 and k='2' were accepted."""
    from otspec.theory import kseq_parameters

    assert kseq_parameters([[0.25] * 4], [[0.5, 0.5, 0.0, 0.0]], 2).p_acc[0] == pytest.approx(0.75)
    rows = np.array([[0.5, 0.5]])
    for kwargs, needle in (({"k": "2"}, "k, rho"), ({"k": 2, "check": "no"}, "check"), ({"k": 2, "max_k": -1},
                                                                                         "max_k")):
        with pytest.raises(ValueError, match=needle):
            kseq_parameters(rows, rows, **kwargs)
    with pytest.raises(ValueError, match="NaN"):
        kseq_parameters([[np.nan, 1.0]], [[0.5, 0.5]], 2)


def test_coupling_law_checks_its_length_and_size_first():
    """coupling_law ran L = 40 past a minute and L = 16 to 3.8 GB (a dense V^L x V^L plan), and L = 0, True or 2.5
    reached numpy's errors."""
    from otspec import IIDSource, TokenVerify
    from otspec.engine.branching import coupling_law
    from otspec.errors import SizeLimitError

    draft, target = IIDSource([0.3, 0.7]), IIDSource([0.6, 0.4])
    plan = coupling_law(draft, target, TokenVerify(), 2)
    assert plan.shape == (4, 4) and plan.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(plan.sum(axis=0), np.outer([0.6, 0.4], [0.6, 0.4]).ravel(), atol=1e-12)
    for L in (16, 40):
        with pytest.raises(SizeLimitError, match="MAX_COUPLING_ENTRIES"):
            coupling_law(draft, target, TokenVerify(), L)
    for L in (0, True, 2.5):
        with pytest.raises(ValueError, match="L: expected an integer"):
            coupling_law(draft, target, TokenVerify(), L)


def test_a_sweep_refuses_sparsity_one_at_load_and_enumeration_sizes_are_integers(tmp_path):
    """sparsity = [1.0] (every entry zero) was refused only when its cell ran, after progress bars; check_enumeration
    read 2.0 tokens as 2 and returned 8.0."""
    from otspec.sources import check_enumeration
    from otspec.sweep import load_spec

    spec = tmp_path / "s.toml"
    spec.write_text('L = [1]\nquantities = ["exact"]\n[[verifiers]]\nname = "token"\n[[pairs]]\nkind = "random_iid"\n'
                    'vocab = 4\nsparsity = [1.0]\n')
    with pytest.raises(ValueError, match=r"sparsity: expected a number in \[0, 1\)"):
        load_spec(spec)
    assert check_enumeration(2, 3) == 8
    with pytest.raises(ValueError, match="vocab_size"):
        check_enumeration(2.0, 3)


def test_a_record_with_top_p_past_one_text_metrics_or_no_prompts_is_refused():
    """plot real_models drew a record with settings.top_p = 2.0 (its summary said "top-p 2.0"), an engine metric
    given as text ('1558') and a block efficiency over 0 prompts."""
    import copy
    import json
    from pathlib import Path

    from otspec.engine.record import RecordError, as_record

    record = json.loads((Path(__file__).resolve().parent.parent / "figures" / "llm_default.json").read_text())
    as_record(copy.deepcopy(record))
    for edit, needle in ((lambda r: r["settings"].__setitem__("top_p", 2.0), "top_p should be <= 1"),
                         (lambda r: r["runs"][0].setdefault("engine_metrics", {}).__setitem__("drafts", "1558"),
                          "engine_metrics.drafts should be a number"),
                         (lambda r: r["runs"][0]["block_efficiency"].__setitem__("prompts", 0), "prompts >= 1")):
        bad = copy.deepcopy(record)
        edit(bad)
        with pytest.raises(RecordError, match=needle):
            as_record(bad)


def test_flags_and_thresholds_are_what_they_say():
    """sample_candidates and check_draft read validate='no' and distinct='no' as true; ThresholdController dropped
    thresholds past max_length − 1 without a word."""
    from otspec.drafts import check_draft, sample_candidates
    from otspec.engine.controllers import ThresholdController

    rows = np.array([[0.5, 0.5]])
    with pytest.raises(ValueError, match="validate"):
        sample_candidates(rows, 2, np.random.default_rng(0), validate="no")
    for kwargs in ({"validate": "no"}, {"distinct": "no"}):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            check_draft(np.array([[0]]), rows, np.array([[[0.5, 0.5], [0.5, 0.5]]]), **kwargs)
    with pytest.raises(ValueError, match="thresholds: expected one per step"):
        ThresholdController([0.5, 0.5, 0.5], 3)
    assert ThresholdController([0.5, 0.4], 3).thresholds == [0.5, 0.4]


def test_plot_refuses_records_for_a_figure_that_reads_none(capsys):
    """plot pareto --records FOLDER drew the toy figure and said nothing about the folder."""
    from otspec.plot import main
    from tests.cli_refusals import refused

    refused(main, ["pareto", "--records", "figures", "--out", "build/never.png"], capsys, "--records", "'pareto'")
