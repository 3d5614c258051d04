"""Typed run rows (otspec.engine.rows): checked field by field, absent fields kept absent, read by attribute only."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from otspec.engine.record import PairRecord, as_record
from otspec.engine.rows import ChainRun, Estimate, PolicyRun, RecordError, TreeRun, run_row

ROOT = Path(__file__).resolve().parent.parent
BE = {"mean": 1.5, "low": 1.4, "high": 1.6}


def test_each_kind_is_chosen_by_its_shape_and_named_by_its_fields():
    assert isinstance(run_row({"verifier": "token", "L": 2, "block_efficiency": BE}), ChainRun)
    assert isinstance(run_row({"verifier": "kseq", "tree": "2x1", "block_efficiency": BE}), TreeRun)
    assert isinstance(run_row({"policy": "fixed", "value": 3, "block_efficiency": BE}), PolicyRun)
    with pytest.raises(RecordError, match=r"row: field 'tree' should be str, got int"):
        run_row({"verifier": "kseq", "tree": 3, "block_efficiency": BE})
    with pytest.raises(RecordError, match=r"row: missing field 'L'"):
        run_row({"verifier": "token", "block_efficiency": BE})
    with pytest.raises(RecordError, match=r"row: missing field 'verifier'"):
        run_row({"verifier": None, "L": 2, "block_efficiency": BE})  # null in a required field: missing
    with pytest.raises(RecordError, match=r"field 'speedup' should be float, got bool"):
        run_row({"verifier": "token", "L": 2, "block_efficiency": BE, "speedup": True})
    with pytest.raises(RecordError, match=r"go_on\[1\]: should be float, got str"):
        run_row({"verifier": "kseq", "tree": "2x1", "block_efficiency": BE, "go_on": [0.5, "x"]})
    with pytest.raises(RecordError, match=r"speedup_ci: missing field 'low'"):
        run_row({"policy": "fixed", "value": 3, "block_efficiency": BE, "speedup_ci": {"high": 1.0}})
    with pytest.raises(RecordError, match="expected an object, got list"):
        run_row([1, 2])


def test_absent_stays_absent_null_stays_null_and_unknown_keys_are_kept():
    row = {"verifier": "token", "L": 2, "block_efficiency": BE, "speedup": None, "future": {"x": [1]}}
    typed = ChainRun.from_json(row)
    assert typed.to_json() == row  # no key added, none dropped
    assert typed.speedup is None and typed.predicted_speedup is None and typed.extra == {"future": {"x": [1]}}
    assert typed.block_efficiency == Estimate(mean=1.5, low=1.4, high=1.6)
    built = ChainRun(verifier="token", L=2, block_efficiency=Estimate(mean=1.5, low=1.4, high=1.6))
    assert built.to_json()["predicted_speedup"] is None  # a row built in code writes every field
    assert ChainRun.from_json(built.to_json()) == built


def test_a_record_takes_rows_already_typed():
    run = ChainRun(verifier="token", L=2, block_efficiency=Estimate(mean=1.5, low=1.4, high=1.6))
    record = PairRecord.from_json({"model_pair": {"target": "t", "draft": "d", "device": "cpu"}, "settings": {},
                                   "runs": [run]})
    assert record.runs[0] is run and record.all_runs == [run]
    assert as_record(json.dumps(record.to_json())) == record
    with pytest.raises(RecordError, match=r"runs\[0\]: expected an object, got TreeRun"):
        PairRecord.from_json({"model_pair": {"target": "t", "draft": "d", "device": "cpu"}, "settings": {},
                              "runs": [TreeRun(verifier="kseq", tree="2x1", block_efficiency=run.block_efficiency)]})


#: Names whose string keys the real-pair renderers may read: the figure's own data dict and a forecast file (not a
#: record: its own JSON kind).
ALLOWED = {"data", "made"}


def string_lookups(source: str) -> list[str]:
    """Every ``x["key"]`` and ``x.get("key")`` in ``source`` whose ``x`` is not one of :data:`ALLOWED`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value,
                                                                                                   str):
            target = node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            target = node.func.value
        else:
            continue
        if not (isinstance(target, ast.Name) and target.id in ALLOWED):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("module", ["llm", "llm_adaptive", "llm_predictions", "llm_text"])
def test_the_renderers_read_rows_and_records_by_attribute(module):
    """No ``x["key"]`` or ``x.get("key")`` on a record, a row or a section in the real-pair renderers: a renamed field
    fails in the typed class, not as a KeyError in a figure."""
    assert string_lookups((ROOT / "otspec" / "figures" / f"{module}.py").read_text()) == []


def test_the_string_lookup_control_catches_reads_by_key():
    assert string_lookups('def f(r, rec, data):\n    return r["speedup"], rec.settings.get("L"), data["records"]\n') == [
        'line 2: r[\'speedup\']', "line 2: rec.settings.get('L')"]
