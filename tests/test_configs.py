"""Configuration objects of llm_bridge: every option checked when the object is made, before any model loads."""

from __future__ import annotations

import dataclasses
import math

import pytest

from llm_bridge.options import DEFAULT_OPTIONS, DecodeOptions
from llm_bridge.sampling import Sampling
from llm_bridge.train_head import HeadRecipe
from llm_bridge.validate_config import ValidateConfig


@pytest.mark.parametrize(("changes", "message"), [
    ({"batch_size": 0}, "batch_size should be None or >= 1"),
    ({"batch_size": -5}, "batch_size should be None or >= 1"),
    ({"confidence": 1.0}, r"confidence should be in \(0, 1\)"),
    ({"sampling": 1.0}, "sampling should be a Sampling"),
])
def test_decode_options_refuse_by_name(changes, message):
    with pytest.raises((ValueError, TypeError), match=message):
        DEFAULT_OPTIONS.but(**changes)


def test_decode_options_are_frozen_and_changed_by_copy():
    options = DecodeOptions(sampling=Sampling(0.5), seed=3, observers=[1])
    assert options.observers == (1,) and options.but(seed=4).seed == 4 and options.seed == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.seed = 5
    with pytest.raises(ValueError, match="no options"):
        options.but(sed=4)  # a misspelt option is not silently ignored


@pytest.mark.parametrize(("changes", "message"), [
    ({"prompts": 0}, "prompts: expected an integer >= 1"),
    ({"lengths": (2, 0)}, "L: expected an integer >= 1"),
    ({"verifiers": ("nope",)}, r"verifiers \['nope'\]"),
    ({"lossless_verifiers": ("kseq",)}, r"lossless verifiers \['kseq'\]"),
    ({"cache": "fast"}, "cache: expected one of"),
    ({"trees": ("2x1",), "multi_verifiers": ("nope",)}, r"multi-draft verifiers \['nope'\]"),
    ({"trees": ("eagle2:2:2:3",)}, "choose their candidates"),
    ({"lossless_samples": -1}, "lossless_samples: expected >= 0"),
    ({"prompts": 90}, "the prompt file holds"),
    ({"prediction_paths": 0}, "prediction_paths"),
    ({"log_rows": "/no/such/folder/rows.npz"}, "its folder does not exist"),
    ({"verifiers": (), "trees": ()}, "nothing to run"),
])
def test_validate_config_refuses_before_any_model_loads(changes, message):
    """The target named here does not exist: every refusal comes from the options themselves."""
    with pytest.raises(ValueError, match=message):
        ValidateConfig(target="/no/such/model", **changes)


def test_validate_config_derives_what_runs():
    config = ValidateConfig(trees=("iid:2:3", "2x1"))
    assert config.run_trees == ("2x1x1", "2x1") and config.run_multi_verifiers == ("kseq", "multiround")
    assert config.tree_configs == [("kseq", "2x1x1"), ("kseq", "2x1"), ("multiround", "2x1x1"), ("multiround", "2x1")]
    assert ValidateConfig().run_trees == () and ValidateConfig().run_multi_verifiers == ()  # no trees: no tree verifier
    pairs = config.but(tree_pairs=[("kseq", "2x1"), ("traversal", "3x1")])
    assert pairs.run_multi_verifiers == ("kseq", "traversal") and pairs.tree_configs == [("kseq", "2x1"),
                                                                                          ("traversal", "3x1")]
    assert config.prediction_count == 32 and config.but(prompts=8).prediction_count == 8  # as many, unless given


@pytest.mark.parametrize(("changes", "message"), [
    ({"vocab": -5}, "--vocab: expected an integer >= 0"),
    ({"feature_weight": math.nan}, "--feature-weight"),
    ({"lr": 0.0}, "--lr"),
    ({"kind": "hydra"}, "--kind: expected one of"),
    ({"steps": 0}, "--steps: expected an integer >= 1"),
    ({"medusa_heads": 0}, "--medusa-heads"),
    ({"seed": -1}, "--seed"),
])
def test_a_head_recipe_refuses_before_training(changes, message):
    with pytest.raises(ValueError, match=message):
        HeadRecipe(**changes)


@pytest.mark.parametrize(("changes", "message"), [
    ({"thresholds": (0.5, 1.5)}, "--thresholds"),
    ({"thresholds": (math.nan,)}, "--thresholds"),
    ({"fixed": (1, 0)}, "--fixed: expected an integer >= 1"),
    ({"max_length": 0}, "--max-length"),
    ({"rule": "oracle"}, "rule: expected one of"),
    ({"prediction_paths": 0}, "--prediction-paths"),
])
def test_a_frontier_plan_refuses_by_flag(changes, message):
    from llm_bridge.adaptive import FrontierPlan

    with pytest.raises(ValueError, match=message):
        FrontierPlan(**changes)


@pytest.mark.parametrize(("changes", "message"), [
    ({"layers": 0}, "--layers"),
    ({"lr": -1e-3}, "--lr"),
    ({"seed": -2}, "--seed"),
    ({"steps": 2.5}, "--steps"),
])
def test_a_distill_recipe_refuses_before_the_target_loads(changes, message):
    from llm_bridge.distill import DistillRecipe

    with pytest.raises(ValueError, match=message):
        DistillRecipe(target="/no/such/model", **changes)
