"""Typed records of real-pair runs: every committed record round-trips, bad ones are named field by field."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from otspec.engine.record import (
    AdaptiveRecord,
    PairRecord,
    RecordError,
    Settings,
    code_version,
    read_record,
)
from otspec.figures.llm import llm_data
from otspec.figures.llm_text import code_text
from otspec.plot import main as plot_main

FIGURES = Path(__file__).resolve().parent.parent / "figures"
RECORDS = sorted(p for p in FIGURES.glob("llm_*.json") if not p.name.startswith("llm_forecast_"))  # forecasts: no record


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_committed_records_round_trip(path):
    record = read_record(path)
    assert record.to_json() == json.loads(path.read_text())
    assert isinstance(record, AdaptiveRecord if "adaptive" in path.stem else PairRecord)
    again = type(record).from_json(json.dumps(record.to_json()))
    assert again == record


def _pair() -> dict:
    return json.loads((FIGURES / "llm_default.json").read_text())


@pytest.mark.parametrize(("edit", "message"), [
    (lambda r: r.pop("runs"), "missing field 'runs'"),
    (lambda r: r["model_pair"].pop("device"), "model_pair: missing field 'device'"),
    (lambda r: r.update(settings=[1]), "field 'settings' should be dict, got list"),
    (lambda r: r["runs"][1].update(L=2.5), r"runs\[1\]: field 'L' should be int, got float"),
    (lambda r: r["runs"][0]["block_efficiency"].pop("low"), r"runs\[0\]: block_efficiency: missing field 'low'"),
    (lambda r: r["runs"].append("token"), r"runs\[\d+\]: expected an object, got str"),
])
def test_bad_records_name_the_field(edit, message):
    record = _pair()
    edit(record)
    with pytest.raises(RecordError, match=message):
        PairRecord.from_json(record)


def test_unknown_keys_are_kept_and_files_are_checked(tmp_path):
    record = {**_pair(), "future_field": {"x": 1}}
    known = PairRecord.from_json(_pair()).extra  # the committed record's own extras (timing, ...)
    assert "future_field" not in known
    assert PairRecord.from_json(record).extra == {**known, "future_field": {"x": 1}}
    assert PairRecord.from_json(record).to_json() == record
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(RecordError, match="not JSON"):
        read_record(tmp_path / "bad.json")
    with pytest.raises(RecordError, match="no such record file"):
        read_record(tmp_path / "missing.json")
    with pytest.raises(RecordError, match="expected a JSON object"):
        PairRecord.from_json("[1, 2]")


def test_the_registry_draws_records_from_the_folder_it_is_given(tmp_path, capsys):
    shutil.copy(FIGURES / "llm_default.json", tmp_path / "llm_default.json")
    data = llm_data(records_dir=tmp_path)
    assert [r.file for r in data["records"]] == ["llm_default.json"] and data["adaptive"] == []
    (tmp_path / "empty").mkdir()
    assert llm_data(records_dir=tmp_path / "empty") == {"records": [], "adaptive": [], "forecasts": []}
    assert plot_main(["record", str(tmp_path / "llm_default.json")]) == 0
    assert (tmp_path / "llm_default.png").stat().st_size > 10_000
    assert "| token | 2 |" in (tmp_path / "llm_default.md").read_text()
    (tmp_path / "llm_broken.json").write_text(json.dumps({"runs": []}))
    assert plot_main(["record", str(tmp_path / "llm_broken.json")]) == 2
    assert "missing field 'model_pair'" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_code_version_names_the_commit_and_uncommitted_code(tmp_path):
    assert code_version(tmp_path) is None  # not a checkout

    def run(*args) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    run("init", "-q")
    (tmp_path / "otspec").mkdir()
    (tmp_path / "figures").mkdir()
    (tmp_path / "otspec" / "a.py").write_text("x = 1\n")
    (tmp_path / "figures" / "r.json").write_text("{}\n")
    run("add", ".")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = run("rev-parse", "HEAD")
    assert code_version(tmp_path) == {"commit": head, "modified": False}
    assert code_version(tmp_path / "otspec") is None  # a folder inside a checkout (an installed copy) names nothing
    (tmp_path / "figures" / "r.json").write_text("{\"new\": 1}\n")  # data, not code
    assert code_version(tmp_path) == {"commit": head, "modified": False}
    (tmp_path / "otspec" / "b.py").write_text("y = 2\n")  # a new module: not the commit's code
    assert code_version(tmp_path) == {"commit": head, "modified": True}
    (tmp_path / "otspec" / "b.py").unlink()
    (tmp_path / "otspec" / "a.py").write_text("x = 2\n")
    assert code_version(tmp_path) == {"commit": head, "modified": True}
    assert code_text(Settings.from_json({"code": {"commit": head, "modified": True}})) == (
        f" Made from commit {head[:7]} with uncommitted changes.")
    assert code_text(Settings.from_json({"code": {"commit": head, "modified": False}})) == f" Made from commit {head[:7]}."
    assert code_text(Settings.from_json({})) == ""
