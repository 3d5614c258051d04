"""Round eight of hostile inputs (issue 43): one test per class of finding, each able to fail on the old code."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

import otspec
from tests.test_hostile_round7 import TOKEN_SAMPLER

ROOT = Path(__file__).resolve().parent.parent


def _cli(args, cwd, timeout=120):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(cwd)])}
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def no_model(monkeypatch):
    """Any model load fails the test: every refusal below comes before one."""
    def load(*_, **__):
        pytest.fail("a model was loaded")

    for where in ("llm_bridge.models.load_model", "llm_bridge.train_head.load_model", "llm_bridge.drafters.load_model"):
        monkeypatch.setattr(where, load)


def test_a_damaged_corpus_is_refused_by_name_before_any_model_loads(tmp_path, no_model):
    from llm_bridge.corpus import CorpusRecipe, build_corpus, load_corpus

    recipe = CorpusRecipe(target="tiny", tokens=10, shard_messages=1, samples=1, greedy=0, length=2)
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "corpus.json")
    with pytest.raises(ValueError, match="not a regular file"):  # used to block forever writing it
        build_corpus(recipe, fifo, progress=False)
    good = {"format": "otspec-corpus-1", "recipe": recipe.identity(), "vocab_size": 24,
            "shards": [{"index": 0, "file": "shard-00000.npz", "tokens": 2}]}
    damaged = [{k: v for k, v in good.items() if k != "recipe"}, {**good, "shards": "abc"},
               {**good, "shards": [{"index": 0, "tokens": 2}]}, {**good, "vocab_size": "x"},
               {**good, "shards": [{"index": 0, "file": "../elsewhere.npz", "tokens": 2}]}]
    for i, index in enumerate(damaged):
        folder = tmp_path / f"d{i}"
        folder.mkdir()
        (folder / "corpus.json").write_text(json.dumps(index))
        for read in (lambda f: build_corpus(recipe, f, progress=False), load_corpus):
            with pytest.raises(ValueError, match="damaged corpus index"):
                read(folder)
    folder = tmp_path / "text"
    folder.mkdir()
    (folder / "corpus.json").write_text("{'not json'")
    with pytest.raises(ValueError, match="corpus.json: not JSON"):
        load_corpus(folder)
    folder = tmp_path / "shards"
    folder.mkdir()
    (folder / "corpus.json").write_text(json.dumps(good))
    with pytest.raises(FileNotFoundError, match="corpus shard"):
        load_corpus(folder)
    (folder / "shard-00000.npz").write_bytes(b"garbage, not a zip")
    with pytest.raises(ValueError, match="not a corpus shard"):
        load_corpus(folder)
    with pytest.raises(ValueError, match="--message-tokens"):  # the target could not finish a message that short
        CorpusRecipe(message_tokens=4)


def test_head_flags_and_folders_are_checked_before_any_model_loads(tmp_path, no_model):
    from llm_bridge.drafters import check_drafter_spec
    from llm_bridge.head_curve import head_recipe
    from llm_bridge.head_curve import main as curve_main
    from llm_bridge.models import ModelNotFound, check_model_spec, layer_count
    from llm_bridge.train_head import HeadRecipe

    with pytest.raises(ValueError, match="--score-fraction"):  # used to train on nothing: loss 0.000
        HeadRecipe(kind="eagle", score_fraction=1e-9)
    with pytest.raises(ValueError, match="distinct"):
        HeadRecipe(kind="eagle", fuse=(4, 4), corpus=tmp_path)
    with pytest.raises(ValueError, match="drafter.json"):
        check_drafter_spec(f"head:{tmp_path}")
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": -3}))
    assert layer_count(str(tmp_path)) is None
    with pytest.raises(ModelNotFound, match="empty name"):
        check_model_spec("")
    for fuse in ("", "foo", "3,x"):  # '' used to train a plain EAGLE head as eagle3
        with pytest.raises(SystemExit):
            curve_main(["--heads", "eagle3", "--fuse", fuse])
    with pytest.raises(ValueError, match="--fuse"):
        head_recipe("eagle3", 2, settings={"fuse": []}, out=tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("x")
    for flags in (["--out", str(afile / "x.json")], ["--heads-dir", str(afile)]):
        assert curve_main(["--heads", "eagle", *flags]) == 2


def test_a_resumed_head_curve_is_checked(tmp_path):
    from llm_bridge.head_curve import FORMAT, read_curve

    point = {"head": "eagle", "train_tokens_asked": 2, "train_tokens": 2, "acceptance_per_position": [0.4, 0.3],
             "greedy_agreement_per_position": [0.5, 0.4], "coverage": 0.9, "trained_parameters": 10, "seconds": 1.0}
    path = tmp_path / "curve.json"
    path.write_text(json.dumps({"format": FORMAT, "settings": {}, "points": [point]}))
    assert read_curve(path)["points"] == [point]
    for bad in ({"acceptance_per_position": [5.0, -1.0]}, {"coverage": 9}, {"head": "eagle9"},
                {"train_tokens": -1}, {"seconds": float("nan")}, {"greedy_agreement_per_position": [True]}):
        path.write_text(json.dumps({"format": FORMAT, "settings": {}, "points": [{**point, **bad}]}))
        with pytest.raises(ValueError, match="point 0 is damaged"):
            read_curve(path)
    path.write_text('{"format": "otspec-head')
    with pytest.raises(ValueError, match="curve.json: not a JSON head curve"):
        read_curve(path)


def test_paths_must_be_paths(tmp_path):
    source = tmp_path / "s.json"
    source.write_text(json.dumps({"type": "iid", "probs": [0.5, 0.5]}))
    fd = os.open(source, os.O_RDONLY)
    try:
        for path in (fd, True, None, 3.0):  # an int was read as a file descriptor, and closed
            with pytest.raises(ValueError, match="not a path"):
                otspec.load_source(path)
        os.fstat(fd)  # still open
    finally:
        os.close(fd)
    with pytest.raises(ValueError, match="empty path"):
        otspec.load_source("")


def test_source_random_makes_its_output_folders(tmp_path):
    out = _cli(["otspec", "source", "random", "--vocab", "3", "--horizon", "4", "--seed", "1", "--draft-out",
                str(tmp_path / "a" / "b" / "d.json"), "--target-out", str(tmp_path / "t" / "t.json")], tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "a" / "b" / "d.json").is_file() and (tmp_path / "t" / "t.json").is_file()


SAMPLER = TOKEN_SAMPLER + textwrap.dedent("""
    import os, sys

    def closes_stdout(*a):
        sys.stdout.close()
        return f(*a)

    def hard_exit(*a):
        os._exit(0)

    def exits_from_a_thread(*a):
        import threading
        threading.Thread(target=lambda: os._exit(0)).start()
        return f(*a)
    """)


def test_the_audit_survives_a_closed_stdout_and_refuses_os_exit_in_process(tmp_path):
    (tmp_path / "samplers.py").write_text(SAMPLER)
    for mode in ([], ["--in-process"]):
        out = _cli(["otspec", "audit", "samplers:closes_stdout", "--samples", "2000", *mode], tmp_path)
        assert "Traceback" not in out.stderr, out.stderr[-500:]
        assert out.returncode in (0, 2)  # the verdict, or one line saying it could not be printed
        for sampler in ("hard_exit", "exits_from_a_thread"):  # the raise cannot reach the main thread from a thread
            out = _cli(["otspec", "audit", f"samplers:{sampler}", "--samples", "2000", *mode], tmp_path)
            assert out.returncode == 2 and "os._exit" in out.stderr and "Traceback" not in out.stderr, (
                mode, sampler, out.returncode, out.stderr[-300:])


def test_numbers_where_numbers_go():
    from otspec.distributions import validate_probs

    assert np.array_equal(validate_probs([Decimal("0.5")] * 2), [0.5, 0.5])  # round 7 refused it
    for rows in ([True, False], np.array([True, False])):
        with pytest.raises(ValueError, match="bool"):
            validate_probs(rows)
    with pytest.raises(ValueError, match="bool"):
        otspec.source_from_json({"type": "iid", "probs": [True, False]})
    torch = pytest.importorskip("torch")
    for tensor, kind in ((torch.ones(2, device="meta") / 2, "meta"), ((torch.ones(2) / 2).to_sparse(), "sparse")):
        for call in (validate_probs, lambda t: otspec.total_variation(t, torch.ones(2) / 2)):
            with pytest.raises(ValueError, match=f"a {kind} tensor"):
                call(tensor)


def test_api_arguments_of_the_wrong_kind_are_value_errors():
    from otspec.engine.runstate import LoopHooks
    from otspec.sources import TableSource
    from otspec.theory.rejections import expected_rejections

    with pytest.raises(ValueError, match="rows: expected a mapping"):
        TableSource(None, 2, 1)
    with pytest.raises(ValueError, match=r"observers\[0\]"):
        LoopHooks(observers=[1])
    with pytest.raises(ValueError, match="draft: expected a Source"):
        expected_rejections(np.array([0.5, 0.5]), otspec.IIDSource([0.5, 0.5]), 5)
    with pytest.raises(ValueError, match="return_mass"):
        otspec.residual([0.5, 0.5], [0.2, 0.8], return_mass="no")
    table = TableSource({(): [0.5, 0.5]}, 2, 2)
    with pytest.raises(ValueError, match="no row for the prefix"):
        table.row((1,))


def test_undefined_intervals_are_null_in_records():
    from otspec.engine.stats import Estimate

    one_batch = Estimate(2.0, math.nan, math.nan, math.nan, 0.95)
    fields = one_batch.record_fields("block_efficiency_batch_means")
    assert fields["block_efficiency_batch_means"] is None and "undefined" in fields[
        "block_efficiency_batch_means_status"]  # a run of one prompt used to be refused after the whole run
    assert Estimate(2.0, 0.1, 1.8, 2.2, 0.95).record_fields("x") == {"x": {"mean": 2.0, "low": 1.8, "high": 2.2}}


def test_damaged_records_that_passed_the_range_checks(tmp_path):
    from otspec.engine.record import RecordError, read_record

    record = json.loads((ROOT / "figures" / "llm_eagle.json").read_text())
    run = record["runs"][1]
    cases = {"two_point": {**record, "runs": [{**run, "two_point_per_position": {"draft": [1.5, 0.1],
                                                                                "target": [0.9, 0.9]}}]},
             "histogram": {**record, "runs": [{**run, "accepted_length_histogram": [0, 0, 0]}]},
             "baseline": {**record, "baseline": None}}
    for name, obj in cases.items():
        path = tmp_path / f"llm_{name}.json"
        path.write_text(json.dumps(obj))
        with pytest.raises(RecordError, match={"two_point": "<= 1", "histogram": "fewer than",
                                               "baseline": "baseline"}[name]):
            read_record(path)
    signed = {**record, "runs": [{**run, "time_decomposition_ms": {**run["time_decomposition_ms"],
                                                                   "verification_time": -12.6}}]}
    path = tmp_path / "llm_signed.json"  # t_target - t_draft per call: a draft slower than its target (layers:30)
    path.write_text(json.dumps(signed))
    assert read_record(path).runs[0].time_decomposition_ms["verification_time"] == -12.6
    big = tmp_path / "llm_big.json"
    big.write_text('{"model_pair": ' + "9" * 5000 + "}")
    with pytest.raises(RecordError, match="llm_big.json"):
        read_record(big)
    folder = tmp_path / "binary"
    folder.mkdir()
    (folder / "llm_x.json").write_bytes(b"\xff\xfe\x00garbage")
    out = _cli(["otspec.plot", "real_models", "--records", str(folder), "--out", str(tmp_path / "x.png")], tmp_path)
    assert out.returncode == 2 and "llm_x.json" in out.stderr and "Traceback" not in out.stderr


def test_messages_name_their_input(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    spec = tmp_path / "s.toml"
    spec.write_text('L = [1]\n[[pairs]]\nkind = "iid"\ndraft = [0.3, 0.7]\ntarget = [0.6, 0.4]\n'
                    '[[verifiers]]\nname = "token"\n')
    cases = [(["calc", "block", "--draft", "0.3,0.7", "--target", "0.5,0.5", "--L", "2", "--cost-ratio", "0.1",
               "--max-length", "5000"], "--max-length"),
             (["sweep", str(spec), "--out", str(afile)], "not a folder"),
             (["sweep", str(spec), "--scheduler", ""], "--scheduler"),
             (["decode", "--draft", "0.3,0.7", "--target", "0.5,0.5", "--L", "2", "--tokens", "50", "--t-draft",
               "1e308", "--t-target", "1e-308"], "overflows"),
             (["decode", "--draft", "0.3,0.7", "--target", "0.5,0.5", "--L", "2", "--tokens", str(2**26),
               "--sequences", "1"], "MAX_DECODE_ENTRIES")]
    for args, needle in cases:
        out = _cli(["otspec", *args], tmp_path)
        assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)
    markov = {"type": "markov", "initial": [1, 0], "transition": [[[0, 1], [1, 0]]] * 3, "horizon": 2}
    with pytest.raises(ValueError, match="does not match its 3 transition matrices"):
        otspec.source_from_json(markov)
    assert otspec.source_from_json({**markov, "horizon": 4}).horizon == 4


def test_the_rejections_figure_of_an_identical_pair_is_drawn(tmp_path):
    from otspec.figures.rejections import rejections_figure_data

    data = rejections_figure_data([0.5, 0.5], [0.5, 0.5], scale=0.01)
    assert data["formula"] == 0.0 and data["speedup"] is None and "no rejection" in data["speedup_status"]
    assert data["batch"]["speedup"][0] is None and "speedup_status" in data["batch"]  # strict JSON, not Infinity


def test_validate_refuses_empty_list_items_before_loading(tmp_path, no_model):
    from llm_bridge.validate import main as validate_main

    assert validate_main(["--no-hf", "--prompts", "1", "--L", "1", "--verifiers", "token", "--trees", "2x1,,",
                          "--out-dir", str(tmp_path)]) == 2
