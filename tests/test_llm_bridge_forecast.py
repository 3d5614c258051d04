"""``python -m llm_bridge.forecast``: the held-out test's tools on tiny saved models."""

from __future__ import annotations

import json

import pytest

from llm_bridge import validate as validate_mod
from tests.test_llm_bridge_validate import folders  # noqa: F401 (the saved tiny pair, a fixture)


def test_a_forecast_is_made_before_the_record_and_checked_against_it(folders, tmp_path):  # noqa: F811
    """The held-out test's tools: ``llm_bridge.forecast`` predicts from the profile and the log on the prediction
    prompts alone, writes it down, and ``--check`` puts it beside the record measured afterwards."""
    from llm_bridge import forecast as forecast_mod

    out = tmp_path / "figs"
    out.mkdir()
    common = ["--target", str(folders / "target"), "--draft", str(folders / "draft"), "--device", "cpu",
              "--verifiers", "token", "--L", "2", "--prompts", "2", "--max-new-tokens", "8", "--name", "held",
              "--out-dir", str(out), "--batch-size", "2"]
    assert forecast_mod.main(common) == 0
    made = json.loads((out / "llm_forecast_held.json").read_text())
    assert made["kind"] == "forecast" and made["record"] == "llm_held.json"
    assert made["settings"]["prompt_ids"] == [0, 1] and made["settings"]["prediction_prompt_ids"] == [2, 3]
    (row,) = made["forecasts"]
    assert row["speedup_prediction"]["source"] == "cost_profile" and row["predicted_speedup"] > 0
    assert row["predicted_block_efficiency_interval"]["low"] <= row["predicted_block_efficiency"] <= 3
    assert "model_pair" not in made  # not a record: the report's record reader skips it
    assert validate_mod.main([*common[:-2], "--batch-size", "2", "--no-hf", "--lossless-samples", "0"]) == 0
    record = json.loads((out / "llm_held.json").read_text())
    (check,) = forecast_mod.check_forecast(made, record)
    assert check.block_efficiency.measured == record["runs"][0]["block_efficiency"]["mean"]
    assert check.speedup.predicted == row["predicted_speedup"]
    assert check.speedup.holds == (check.speedup.within_tolerance
                                         and check.speedup.inside_interval is not False)
    record["settings"]["batch_size"] = 8
    with pytest.raises(ValueError, match="batch_size"):
        forecast_mod.check_forecast(made, record)
    assert forecast_mod.main([*common, "--check", str(out / "llm_held.json")]) == 0
