"""Round fourteen of hostile inputs (issue 43): one test per class of finding, each able to fail on the old code."""

from __future__ import annotations

import json

import pytest


def test_a_head_curve_is_read_by_the_record_reader(tmp_path):
    """read_curve parsed JSON by itself: a key given twice kept its last value (a point measured once read as another),
    where every record refuses it; now it goes through read_json_file, with the message naming --out and the file."""
    from llm_bridge.head_curve import FORMAT, read_curve

    point = {"head": "eagle", "train_tokens_asked": 2, "train_tokens": 2, "acceptance_per_position": [0.4],
             "greedy_agreement_per_position": None, "coverage": 0.9, "trained_parameters": 10, "seconds": 1.0}
    path = tmp_path / "curve.json"
    text = json.dumps({"format": FORMAT, "settings": {}, "points": [point]})
    path.write_text(text)
    assert read_curve(path)["points"] == [point]
    path.write_text(text.replace('"coverage": 0.9', '"coverage": 0.9, "coverage": 0.1'))
    with pytest.raises(ValueError, match=r"--out .*curve\.json: not a JSON head curve \(.*coverage"):
        read_curve(path)
