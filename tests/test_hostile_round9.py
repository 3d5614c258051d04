"""Round nine of hostile inputs (issue 43): one test per class of finding, each able to fail on the old code."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

import otspec
from tests.corpus_files import write_shard

ROOT = Path(__file__).resolve().parent.parent


def _corpus(folder: Path, shards=None, **recipe) -> Path:
    folder.mkdir()
    entries = [{"index": 0, "file": "shard-00000.npz", "tokens": 4}] if shards is None else shards
    (folder / "corpus.json").write_text(json.dumps({"format": "otspec-corpus-1", "vocab_size": 24, "shards": entries,
                                                    "recipe": {"shard_messages": 1, **recipe}}))
    return folder


def test_damaged_corpus_shards_and_indexes_are_refused(tmp_path):
    from llm_bridge.corpus import load_corpus
    from otspec.errors import SizeLimitError

    good = _corpus(tmp_path / "good")
    write_shard(good / "shard-00000.npz")
    assert len(load_corpus(good)) == 2
    damaged = {"float_tokens": {"tokens": np.array([1, 2, 3, 4.7, 1, 2, 5, 6])},
               "bool_tokens": {"tokens": np.ones(8, dtype=bool)},
               "float_prompts": {"prompt_lengths": np.array([2.5, 2.0])},
               "nan_temperature": {"temperature": np.array([np.nan, 0.0])},
               "negative_message": {"message": np.array([-1, 0])}}
    for name, changes in damaged.items():  # used to be trained on: 4.7 read as 4, NaN temperatures kept
        folder = _corpus(tmp_path / name)
        write_shard(folder / "shard-00000.npz", **changes)
        with pytest.raises(ValueError, match="damaged shard"):
            load_corpus(folder)
    twice = [{"index": 0, "file": "shard-00000.npz", "tokens": 4}] * 2
    for folder in (_corpus(tmp_path / "twice", twice), _corpus(tmp_path / "no_messages", shard_messages=None),
                   _corpus(tmp_path / "huge", [{"index": 10**30, "file": "a.npz", "tokens": 4}])):
        with pytest.raises(ValueError, match="damaged corpus index"):
            load_corpus(folder)
    deep = tmp_path / "deep"
    deep.mkdir()
    (deep / "corpus.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="not JSON"):
        load_corpus(deep)
    empty = _corpus(tmp_path / "empty")
    (empty / "shard-00000.npz").write_bytes(b"")
    with pytest.raises(ValueError, match="not a corpus shard"):
        load_corpus(empty)
    bomb = _corpus(tmp_path / "bomb")
    header_bomb = bomb / "big.npy"  # a member whose header declares 2^40 tokens: 2 TB if loaded
    with open(header_bomb, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<u2", "fortran_order": False, "shape": (2**40,)})
    with zipfile.ZipFile(bomb / "shard-00000.npz", "w") as z:
        z.write(header_bomb, "tokens.npy")
    with pytest.raises(SizeLimitError, match="MAX_SHARD_ENTRIES"):
        load_corpus(bomb)


def test_paths_that_are_not_paths_and_symlink_loops(tmp_path):
    from otspec.clitools import writable_file
    from otspec.engine.record import RecordError, read_record

    class NoPath:
        def __fspath__(self):
            return 3

    for path in (NoPath(), 3):
        with pytest.raises(ValueError, match="not a path"):
            otspec.load_source(path)
        with pytest.raises(RecordError, match="not a path"):
            read_record(path)
    os.symlink(tmp_path / "b.png", tmp_path / "a.png")
    os.symlink(tmp_path / "a.png", tmp_path / "b.png")
    with pytest.raises(ValueError, match="cannot be resolved|loop of links"):  # RuntimeError: Symlink loop
        writable_file(tmp_path / "a.png", "--out")


def test_a_boolean_among_numbers_is_refused():
    from otspec.distributions import validate_probs

    for row in ([1.0, False], [[0.5, 0.5], [True, 0.0]]):
        with pytest.raises(ValueError, match="booleans"):
            validate_probs(row)
    with pytest.raises(ValueError, match="booleans"):
        otspec.source_from_json({"type": "iid", "probs": [1.0, False]})


def test_records_with_huge_numbers_no_baseline_rate_or_no_verification(tmp_path):
    from otspec.engine.record import RecordError, read_record

    record = json.loads((ROOT / "figures" / "llm_eagle.json").read_text())
    run = record["runs"][0]
    cases = {"huge": ({**record, "runs": [{**run, "speedup": 10**400}]}, "digits"),
             "rate": ({**record, "baseline": {**record["baseline"], "tokens_per_s": 0.0}}, "tokens_per_s should be > 0"),
             "hist": ({**record, "runs": [{**run, "iterations": None, "accepted_length_histogram": [0, 0]}]},
                      "fewer than")}
    for name, (obj, match) in cases.items():
        path = tmp_path / f"llm_{name}.json"
        path.write_text(json.dumps(obj))
        with pytest.raises(RecordError, match=match):
            read_record(path)


def test_a_head_curve_point_with_boolean_seconds_is_damaged(tmp_path):
    from llm_bridge.head_curve import FORMAT, read_curve

    point = {"head": "eagle", "train_tokens_asked": 2, "train_tokens": 2, "acceptance_per_position": [0.4],
             "greedy_agreement_per_position": None, "coverage": 0.9, "trained_parameters": 10, "seconds": True}
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"format": FORMAT, "settings": {}, "points": [point]}))
    with pytest.raises(ValueError, match="point 0 is damaged"):
        read_curve(str(path))  # a str path too (it raised AttributeError)


def test_empty_cluster_and_name_flags_and_nested_tensors(tmp_path, capsys):
    from llm_bridge.forecast import main as forecast_main
    from otspec.cli import main as cli_main
    from otspec.distributions import validate_probs

    spec = tmp_path / "s.toml"
    spec.write_text('L = [1]\n[[pairs]]\nkind = "iid"\ndraft = [0.3, 0.7]\ntarget = [0.6, 0.4]\n'
                    '[[verifiers]]\nname = "token"\n')
    assert cli_main(["sweep", str(spec), "--cluster", " "]) == 2  # it used to run the local pool
    assert "--cluster" in capsys.readouterr().err
    assert forecast_main(["--name", "", "--out-dir", str(tmp_path)]) == 2
    assert "--name" in capsys.readouterr().err
    torch = pytest.importorskip("torch")
    with pytest.warns(UserWarning):  # torch calls its nested tensors a prototype
        rows = torch.nested.nested_tensor([torch.ones(2) / 2, torch.ones(3) / 3])
    with pytest.raises(ValueError, match="nested tensor"):  # it raised torch's RuntimeError: Internal error
        validate_probs(rows)


def test_sweep_results_folders_and_scheduler_addresses_are_checked_by_name(tmp_path, capsys):
    import re

    from otspec.cli import SCHEDULER_ADDRESS
    from otspec.cli import main as cli_main

    spec = tmp_path / "s.toml"
    spec.write_text('L = [1]\n[[pairs]]\nkind = "iid"\ndraft = [0.3, 0.7]\ntarget = [0.6, 0.4]\n'
                    '[[verifiers]]\nname = "token"\n')
    afile = tmp_path / "afile"
    afile.write_text("x")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    for out, why in ((afile, "not a folder"), (afile / "below", "is not a folder"),
                     (tmp_path / "dangling", "link to nothing"), (tmp_path / ("x" * 300), "255 bytes")):
        assert cli_main(["sweep", str(spec), "--out", str(out)]) == 2  # bare OS errors before
        err = capsys.readouterr().err
        assert "--out" in err and why in err and len(err.strip().splitlines()) == 1, err
    assert cli_main(["sweep", str(spec), "--scheduler", ":"]) == 2
    assert "host:port" in capsys.readouterr().err
    assert all(re.fullmatch(SCHEDULER_ADDRESS, a) for a in ("tcp://127.0.0.1:8786", "localhost:8786",
                                                            "tls://[::1]:8786"))  # real addresses still pass


def test_record_figures_and_the_report_refuse_a_folder_without_records(tmp_path, capsys):
    """Round nine's leftover: ``plot real_models --records EMPTY`` drew an empty figure and exited 0 (so did the two
    logged-rows figures and ``report``); every record figure and the report now refuse such a folder by name."""
    from otspec.plot import main as plot_main
    from otspec.report import main as report_main

    empty = tmp_path / "empty"
    empty.mkdir()
    for name in ("real_models", "trees_logged", "logged_rows", "all"):
        assert plot_main([name, "--records", str(empty)] + (["--out", str(tmp_path / f"{name}.png")]
                                                             if name != "all" else [])) == 2
        assert "holds no real-pair records" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.png"))
    with pytest.raises(SystemExit) as exit_:
        report_main(["--records", str(empty), "--out-dir", str(tmp_path / "report")])
    assert exit_.value.code == 2 and "holds no real-pair records" in capsys.readouterr().err
    # a folder holding only a record but no logged rows: the logged-rows figure is refused by name, not drawn empty
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "llm_default.json").write_text((ROOT / "figures" / "llm_default.json").read_text())
    assert plot_main(["trees_logged", "--records", str(tmp_path / "one"), "--out", str(tmp_path / "t.png")]) == 2
    assert "holds nothing it reads" in capsys.readouterr().err


def test_forecast_check_reads_both_files_with_their_checks(tmp_path, capsys):
    """``forecast --check FOLDER`` read nothing and named no flag; a damaged forecast gave a KeyError. Both files are
    now read with the record checks, and the forecast field by field."""
    from llm_bridge.forecast import main as forecast_main
    from otspec.engine.forecast import check_forecast_json, read_forecast
    from otspec.engine.record import RecordError

    made = json.loads((ROOT / "figures" / "llm_forecast_eagle_heldout.json").read_text())
    args = ["--draft", "eagle", "--name", "eagle_heldout", "--out-dir", str(ROOT / "figures")]
    assert forecast_main(args + ["--check", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert forecast_main(args + ["--check", str(ROOT / "figures" / "llm_adaptive_eagle.json")]) == 2
    assert "adaptive-threshold record" in capsys.readouterr().err
    for damage, field in ((lambda m: m.pop("forecasts"), "'forecasts'"),
                          (lambda m: m["forecasts"][0].update(predicted_speedup=float("nan")), "predicted_speedup"),
                          (lambda m: m["forecasts"][0].update(predicted_block_efficiency=True),
                           "predicted_block_efficiency"),
                          (lambda m: m["forecasts"][0].update(L=None), "'L'"),
                          (lambda m: m["forecasts"][0].update(predicted_speedup_interval={"low": 2, "high": 1}),
                           "interval"),
                          (lambda m: m["pair"].pop("draft"), "'pair'")):
        bad = json.loads(json.dumps(made))
        damage(bad)
        with pytest.raises(RecordError, match=field):
            check_forecast_json(bad)
        (tmp_path / "llm_forecast_bad.json").write_text(json.dumps(bad))
        with pytest.raises(RecordError, match=field):
            read_forecast(tmp_path / "llm_forecast_bad.json")
    assert read_forecast(ROOT / "figures" / "llm_forecast_eagle_heldout.json")["record"] == "llm_eagle_heldout.json"


def test_a_horizon_one_chain_without_matrices_and_a_table_missing_a_row(tmp_path, capsys):
    """A Markov chain of horizon 1 (no matrices) raised IndexError on its first row; a table source's missing row
    named neither the file nor the source."""
    from otspec.cli import main as cli_main
    from otspec.sources import MarkovSource, load_source

    chain = MarkovSource([0.25, 0.75], [], horizon=1)
    assert np.allclose(chain.next_probs([[]]), [[0.25, 0.75]])
    assert np.allclose(chain.rows_at([[0]], [[0]]), [[[0.25, 0.75]]])
    with pytest.raises(ValueError, match="horizon"):
        chain.next_probs([[0]])
    chain_file = tmp_path / "chain.json"
    chain_file.write_text(json.dumps({"type": "markov", "initial": [0.5, 0.5], "transition": [], "horizon": 1}))
    pair = ["--draft-source", str(chain_file), "--target-source", str(chain_file)]
    assert cli_main(["calc", "block", *pair, "--L", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["token"] == out["block_optimal"] == 1.0 and out["gumbel"] is None  # identical pair: the draft is kept
    assert cli_main(["calc", "block", *pair, "--L", "2", "--json"]) == 2
    assert "horizon 1" in capsys.readouterr().err
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"type": "table", "vocab_size": 2, "horizon": 2,
                                 "rows": {"": [0.5, 0.5], "0": [0.9, 0.1]}}))
    source = load_source(table)
    assert np.allclose(source.next_probs([[0]]), [[0.9, 0.1]])
    with pytest.raises(ValueError, match=f"source file {table}.*no row for the prefix \\(1,\\)"):
        source.next_probs([[1]])
