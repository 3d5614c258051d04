"""Round twelve of hostile inputs (issue 43): one test per class of finding, each able to fail on the old code."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.cli_refusals import refused

ROOT = Path(__file__).resolve().parent.parent
SPEC_HEAD = 'L = [1]\nquantities = ["exact"]\n[[verifiers]]\nname = "token"\n[[pairs]]\n'


def _audit_verdict_survives(tmp_path, module: str, statement: str) -> None:
    """An in-process audit of the lossless adapter whose sampler runs ``statement`` on every call prints its verdict
    on stdout with exit 0."""
    (tmp_path / f"{module}.py").write_text(
        "import io, sys\nfrom otspec.audit.adapters import token\n"
        f"def sampler(*a):\n    {statement}\n    return token(*a)\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    got = subprocess.run([sys.executable, "-m", "otspec", "audit", f"{module}:sampler", "--samples", "2000", "--json",
                          "--in-process"], capture_output=True, text=True, env=env, timeout=120)
    assert got.returncode == 0 and json.loads(got.stdout)["verdict"] == "no bias detected", got.stderr


def test_records_too_large_to_be_records_are_refused_unread(tmp_path, monkeypatch):
    """A sparse 12 GB llm_*.json in a records folder was read whole by the record figures and the report."""
    import otspec.engine.record as record
    import otspec.figures.llm as llm
    from otspec.figures.common import check_records_given

    monkeypatch.setattr(record, "MAX_RECORD_BYTES", 1024)  # one bound, read by every reader of records
    (tmp_path / "llm_big.json").write_text(" " * 2048)
    assert check_records_given(tmp_path) == tmp_path  # it counts as a record: its reader names it
    with pytest.raises(record.RecordError, match="MAX_RECORD_BYTES"):
        llm.llm_data(records_dir=tmp_path)


def test_sweep_pairs_are_read_before_the_folder_and_the_cells(tmp_path, monkeypatch, capsys):
    """A json pair whose draft is a number, a list or a boolean gave a TypeError traceback; a spec or a source file of
    gigabytes was read whole; a random_markov horizon of 0 was read as none; a pair that cannot be read left the
    output folder behind."""
    pytest.importorskip("pandas")
    import otspec.sources.io as source_io
    import otspec.sweep.spec as spec_module
    from otspec.cli import main as cli_main
    from otspec.sources import save_source
    from otspec.sources.models import IIDSource

    save_source(IIDSource([0.5, 0.5]), tmp_path / "t.json")
    save_source(IIDSource([0.2, 0.3, 0.5]), tmp_path / "d3.json")
    cases = {"number": ('kind = "json"\ndraft = 3\ntarget = "t.json"\n', "draft source file's name"),
             "list": ('kind = "json"\ndraft = ["t.json"]\ntarget = "t.json"\n', "draft source file's name"),
             "logged": ('kind = "logged"\nfile = 3\n', "logged-rows file's name"),
             "horizon": ('kind = "random_markov"\nvocab = 4\nhorizon = 0\n', "horizon"),
             "mismatch": ('kind = "json"\ndraft = "d3.json"\ntarget = "t.json"\n', "draft has 3 tokens")}
    for name, (pair, needle) in cases.items():
        spec = tmp_path / f"{name}.toml"
        spec.write_text(SPEC_HEAD + pair)
        out = tmp_path / f"out_{name}"
        refused(cli_main, ["sweep", str(spec), "--workers", "1", "--json", "--out", str(out)], capsys, needle)
        assert not out.exists(), name
    monkeypatch.setattr(source_io, "MAX_SOURCE_FILE_BYTES", 10)
    (tmp_path / "ok.toml").write_text(SPEC_HEAD + 'kind = "json"\ndraft = "t.json"\ntarget = "t.json"\n')
    refused(cli_main, ["sweep", str(tmp_path / "ok.toml"), "--workers", "1", "--json"], capsys,
             "MAX_SOURCE_FILE_BYTES")
    monkeypatch.setattr(spec_module, "MAX_SPEC_BYTES", 10)
    refused(cli_main, ["sweep", str(tmp_path / "ok.toml"), "--workers", "1", "--json"], capsys,
             "MAX_SPEC_BYTES")


def test_schedulers_that_cannot_be_a_dask_scheduler_here(tmp_path, monkeypatch, capsys):
    """Ports 0, 99999 and Arabic-Indic digits waited 30 s for a connection; tls:// without settings and ucx://
    without ucx-py gave tracebacks, as did a server of another kind; --cluster local:² gave int()'s message."""
    pytest.importorskip("distributed")
    import distributed

    from otspec.cli import main as cli_main
    from otspec.sweep.run import scheduler_client

    spec = tmp_path / "s.toml"
    spec.write_text(SPEC_HEAD + 'kind = "iid"\ndraft = [0.3, 0.7]\ntarget = [0.6, 0.4]\n')
    for address, needle in (("tcp://localhost:0", "port 1-65535"), ("tcp://localhost:99999", "port 1-65535"),
                            ("tcp://127.0.0.1:٣٣", "port 1-65535"), ("tls://127.0.0.1:8786", "TLS settings")):
        refused(cli_main, ["sweep", str(spec), "--json", "--scheduler", address], capsys, "--scheduler",
                 needle)
    refused(cli_main, ["sweep", str(spec), "--json", "--cluster", "local:²"], capsys, "local:N")

    def broken(*args, **kwargs):  # what Dask's comm layer raised for a server that is no scheduler
        raise TypeError("Can't instantiate abstract class UCXConnector with abstract method connect")

    monkeypatch.setattr(distributed, "Client", broken)
    with pytest.raises(ConnectionError, match="--scheduler tcp://127.0.0.1:1: no Dask scheduler"):
        scheduler_client("tcp://127.0.0.1:1")


def test_paths_through_links_to_nothing_too_long_or_checked_after_a_model(tmp_path, capsys):
    """A file was written through a link to nothing (made where it points); a path past PATH_MAX gave a 4 kB
    message; gpu_suite --out-dir gave tracebacks for files, links and /dev/null; validate --log-rows through a file
    or a loop was checked after the target loaded."""
    from llm_bridge.gpu_suite import main as gpu_main
    from llm_bridge.validate_config import ValidateConfig
    from otspec.cli import main as cli_main
    from otspec.clitools import writable_file

    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    for path in (tmp_path / "link", tmp_path / "link" / "x.json"):
        with pytest.raises(ValueError, match="link to nothing"):
            writable_file(path, "--out", make_folder=True)
    assert not (tmp_path / "nowhere").exists()
    deep = "d/" * 2100 + "x.json"
    refused(cli_main, ["source", "random", "--vocab", "3", "--draft-out", deep, "--target-out",
                               str(tmp_path / "t.json")], capsys, "--draft-out", "system's limit")
    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "afile", tmp_path / "afile" / "x", tmp_path / "link", Path("/dev/null")):
        refused(gpu_main, ["--smoke", "--device", "cpu", "--out-dir", str(out)], capsys, "--out-dir")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for rows in (tmp_path / "afile" / "..", tmp_path / "loop" / "x"):
        with pytest.raises(ValueError, match="--log-rows"):
            ValidateConfig(draft="ngram", log_rows=rows)


def test_llm_bridge_integers_and_lists_are_checked_before_any_model(tmp_path, capsys, monkeypatch):
    """llm_bridge read --steps 1_0 as 10 and --L ٣ as 3 (int()), dropped the empty item of --prompts a,,b, took
    --layers 999 and empty --thresholds / --fixed to the model load, and train_head made --out before refusing."""
    import llm_bridge.distill as distill
    import llm_bridge.train_head as train_head
    from llm_bridge.adaptive import FrontierPlan
    from llm_bridge.forecast import main as forecast_main
    from llm_bridge.validate import main as validate_main

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(train_head, "load_model", no_model)
    monkeypatch.setattr(distill, "load_model", no_model)
    out = tmp_path / "head"
    refused(train_head.main, ["--kind", "eagle", "--steps", "1_0", "--out", str(out)], capsys, "--steps")
    refused(train_head.main, ["--kind", "eagle", "--steps", "0", "--out", str(out)], capsys, "--steps")
    refused(train_head.main, ["--kind", "eagle", "--out", str(out), "--prompts",
                                      "head_prompts.txt,,distill_prompts.txt"], capsys, "--prompts", "empty item")
    assert not out.exists()
    refused(forecast_main, ["--draft", "ngram", "--out-dir", str(tmp_path), "--L", "٣"], capsys, "--L")
    refused(validate_main, ["--draft", "ngram", "--out-dir", str(tmp_path), "--L", "1_6"], capsys, "--L")
    refused(distill.main, ["--out", str(tmp_path / "d"), "--layers", "999"], capsys, "--layers", "30 layers")
    for empty in ({"thresholds": ()}, {"fixed": ()}):
        with pytest.raises(ValueError, match="empty"):
            FrontierPlan(**empty)


def test_flags_that_would_be_ignored_and_counts_past_any_training(tmp_path, capsys):
    """simulate --tail without --logged was ignored; a head curve's point trained on 10^400 tokens was read."""
    from llm_bridge.head_curve import FORMAT, read_curve
    from otspec.cli import main as cli_main

    refused(cli_main, ["simulate", "--draft", "0.3", "--target", "0.75", "--L", "2", "--tail", "renormalise",
                               "--blocks", "100", "--json"], capsys, "--tail", "--logged")
    point = {"head": "eagle", "train_tokens_asked": 2, "train_tokens": 10**400, "acceptance_per_position": [0.4],
             "greedy_agreement_per_position": None, "coverage": 0.9, "trained_parameters": 10, "seconds": 1.0}
    (tmp_path / "c.json").write_text(json.dumps({"format": FORMAT, "settings": {}, "points": [point]}))
    with pytest.raises(ValueError, match="POINT_LIMITS"):
        read_curve(tmp_path / "c.json")


def test_a_forecast_checked_against_a_record_of_other_configurations():
    """forecast --check against a record that measured none of the forecast's configurations printed nothing and
    exited 0."""
    from otspec.engine.forecast import forecast_check, read_forecast
    from otspec.engine.record import read_record

    made = read_forecast(ROOT / "figures" / "llm_forecast_eagle_heldout.json")
    record = read_record(ROOT / "figures" / "llm_eagle_heldout.json").to_json()
    assert forecast_check(made, record)  # the committed pair agrees on something
    for f in made["forecasts"]:  # the same forecast, made for draft lengths the record did not run
        f["L"] += 1
    with pytest.raises(ValueError, match="measured none of the forecast's configurations"):
        forecast_check(made, record)


def test_sweep_tables_that_are_empty_or_hold_numbers_beyond_floats(tmp_path, capsys):
    """plot sweep drew a 400-digit integer as inf without a word; an empty CSV was refused with pandas' words
    only; a header without rows was 'no row left after --where' with no --where given."""
    pytest.importorskip("pandas")
    from otspec.figures.sweep import main as sweep_plot

    tables = {"huge.csv": ("L,exact_accepted\n1," + "9" * 400 + "\n2,0.5\n", "infinite or beyond the float range"),
              "empty.csv": ("", "empty.csv"), "header.csv": ("L,exact_accepted\n", "holds no rows")}
    for name, (text, needle) in tables.items():
        (tmp_path / name).write_text(text)
        refused(sweep_plot, [str(tmp_path / name), "--x", "L", "--y", "exact_accepted", "--out",
                                     str(tmp_path / "x.png")], capsys, needle)


def test_sources_from_grad_tensors_huge_integers_and_deep_json():
    """IIDSource and MarkovSource of tensors requiring grad raised torch's RuntimeError; a Markov matrix holding
    10^400 an OverflowError; a 50,000-deep list in a source JSON a RecursionError; a record file holding a JSON
    string was parsed twice; a record nested 900 deep was read and broke the report's writer."""
    torch = pytest.importorskip("torch")
    import otspec

    grad = torch.tensor([0.25, 0.75], requires_grad=True)
    np.testing.assert_allclose(otspec.IIDSource(grad).probs, [0.25, 0.75])
    chain = otspec.MarkovSource(grad, torch.tensor([[0.5, 0.5], [0.1, 0.9]], requires_grad=True))
    np.testing.assert_allclose(chain.transition, [[0.5, 0.5], [0.1, 0.9]])
    with pytest.raises(ValueError, match="transition"):
        otspec.MarkovSource([0.5, 0.5], [[10**400, 0], [0, 1]])
    deep = 0.5
    for _ in range(50_000):
        deep = [deep]
    with pytest.raises(ValueError, match="probs"):
        otspec.source_from_json({"type": "iid", "probs": deep})


def test_records_that_are_a_string_or_nested_too_deep(tmp_path):
    from otspec.engine.record import RecordError, read_record

    (tmp_path / "llm_s.json").write_text('"hello"')
    with pytest.raises(RecordError, match="expected a JSON object"):
        read_record(tmp_path / "llm_s.json")
    record = json.loads((ROOT / "figures" / "llm_eagle.json").read_text())
    nested = 1
    for _ in range(200):
        nested = {"x": nested}
    record["zzz_deep"] = nested
    (tmp_path / "llm_d.json").write_text(json.dumps(record))
    with pytest.raises(RecordError, match="MAX_JSON_DEPTH"):
        read_record(tmp_path / "llm_d.json")


def test_the_report_names_a_damaged_log_before_its_figures(tmp_path, capsys):
    """A records folder with a damaged llm_*_rows.npz gave a traceback after a minute of figures."""
    from otspec.report import main as report_main

    records = tmp_path / "records"
    records.mkdir()
    shutil.copy(ROOT / "figures" / "llm_eagle.json", records)
    (records / "llm_x_rows.npz").write_bytes(b"not a zip")
    refused(report_main, ["--records", str(records), "--out-dir", str(tmp_path / "rep"), "--scale", "0.01"],
             capsys, "llm_x_rows.npz")
    assert not list((tmp_path / "rep").glob("*.png"))


def test_sweep_tables_under_undecodable_folder_names(tmp_path):
    """pyarrow could not write results.parquet under a folder name holding undecodable bytes (a regression)."""
    pytest.importorskip("pandas")
    from otspec.sweep.run import write_tables

    out = Path(os.fsdecode(bytes(tmp_path) + b"/\xff\xfe-name"))
    out.mkdir()
    paths = write_tables([{"L": 1, "exact_accepted": 0.5}], out)
    assert all(Path(p).is_file() for p in paths.values())


def test_in_process_audits_refuse_what_would_end_or_replace_the_process(tmp_path):
    """In-process, a sampler's os.kill of its own process, exec or abort ended the command without a verdict; a
    masked array's hidden numbers were read as its output; stdout set to None swallowed the verdict."""
    from otspec.audit import protocol
    from otspec.audit.protocol import SamplerError, call_sampler

    delivered = []
    previous = signal.signal(signal.SIGUSR1, lambda *a: delivered.append(1))
    rows, target = np.full((1, 1, 2), 0.5), np.full((1, 2, 2), 0.5)  # (B, L, V) and (B, L + 1, V)
    try:
        def kills_itself(*args):
            os.kill(os.getpid(), signal.SIGUSR1)
            return np.zeros(1, dtype=int), np.zeros(1, dtype=int)

        with protocol.no_hard_exit():
            assert os.execv is not protocol.REAL_CALLS["execv"] and os.abort is not protocol.REAL_CALLS["abort"]
            with pytest.raises(SamplerError, match="on its own process"):
                call_sampler(kills_itself, np.zeros((1, 1), dtype=int), rows, target, np.random.default_rng(0),
                             timeout=None)
        assert not delivered and os.execv is protocol.REAL_CALLS["execv"]
    finally:
        signal.signal(signal.SIGUSR1, previous)

    def masked(*args):
        return np.ma.array([0], mask=True), np.ma.array([0], mask=True)

    with pytest.raises(SamplerError, match="masked"):
        call_sampler(masked, np.zeros((1, 1), dtype=int), rows, target, np.random.default_rng(0), timeout=None)
    _audit_verdict_survives(tmp_path, "quiet", "sys.stdout = None")


def test_saving_to_a_device_or_a_folder_isrefused():
    """LoggedRows.save('/dev/null') and save_source to a device reported success with nothing kept."""
    import otspec
    from otspec.sources import save_source
    from otspec.sources.logged import log_rows

    log = log_rows(otspec.IIDSource([0.3, 0.7]), otspec.IIDSource([0.5, 0.5]), 2, 3, seed=0)
    with pytest.raises(ValueError, match="not a regular file"):
        log.save("/dev/null")
    with pytest.raises(ValueError, match="not a regular file"):
        save_source(otspec.IIDSource([0.5, 0.5]), "/dev/null")


def test_an_error_naming_a_path_with_a_newline_is_one_line(capsys):
    from otspec.cli import main as cli_main

    refused(cli_main, ["calc", "block", "--draft-source", "no\nsuch.json", "--target-source", "t.json",
                               "--L", "2"], capsys, "no\\nsuch.json")


def test_a_finished_head_with_damaged_numbers_never_becomes_a_curve_point(tmp_path):
    """A drafter.json of the curve's recipe holding acceptance 1.5, a missing field or a sparse gigabyte became a
    point, a traceback or a MemoryError (round 12, second pass)."""
    from llm_bridge.head_checkpoint import recipe_key
    from llm_bridge.head_curve import finished_head
    from llm_bridge.train_head import HeadRecipe

    recipe = HeadRecipe(kind="eagle", target="tiny", steps=2, progress=False, out=tmp_path / "eagle_10")
    good = {"recipe_fields": json.loads(recipe_key(recipe)), "recipe": {"train_tokens": 10}, "trained_parameters": 5,
            "seconds": 1.0, "heldout": {"acceptance_per_position": [0.4], "coverage": 0.9}}
    recipe.out.mkdir()
    path = recipe.out / "drafter.json"
    path.write_text(json.dumps(good))
    assert finished_head(recipe, "eagle", 10)["acceptance_per_position"] == [0.4]
    for damaged in ({**good, "heldout": {"acceptance_per_position": [1.5], "coverage": 0.9}},
                    {**good, "heldout": {}}, {**good, "seconds": "12.5"}, {**good, "recipe": {"train_tokens": -5}},
                    {**good, "heldout": {"acceptance_per_position": [], "coverage": 0.9}}):
        path.write_text(json.dumps(damaged))
        with pytest.raises(ValueError, match="drafter.json"):
            finished_head(recipe, "eagle", 10)
    path.write_text(json.dumps({**good, "recipe_fields": {}}))  # another recipe's head: trained again
    assert finished_head(recipe, "eagle", 10) is None
    with open(path, "r+b") as fh:
        fh.truncate(2**30)  # a sparse gigabyte: refused by its size, unread
    with pytest.raises(ValueError, match="MAX_RECORD_BYTES"):
        finished_head(recipe, "eagle", 10)


def test_checkpoints_run_no_code_and_damaged_ones_are_named(tmp_path):
    """checkpoint.pt was unpickled with code allowed (a payload made a folder); a step of True resumed at step 1; a
    folder named checkpoint.pt failed after the model loaded."""
    torch = pytest.importorskip("torch")
    from llm_bridge.head_checkpoint import CHECKPOINT, check_checkpoint_files, load_checkpoint

    head = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(head.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    rng = np.random.default_rng(0)

    class Payload:
        def __reduce__(self):
            return (os.mkdir, (str(tmp_path / "PWNED"),))

    torch.save({"key": "k", "step": 1, "x": Payload()}, tmp_path / CHECKPOINT)
    assert load_checkpoint(tmp_path, key="k", head=head, opt=opt, sched=sched, rng=rng, steps=10) == (0, [], 0.0)
    assert not (tmp_path / "PWNED").exists() and (tmp_path / (CHECKPOINT + ".stale")).is_file()
    state = {"key": "k", "step": True, "log": [], "seconds": 1.0, "weights": {}, "optimizer": {}, "schedule": {},
             "numpy_rng": {}, "torch_rng": torch.get_rng_state()}
    torch.save(state, tmp_path / CHECKPOINT)
    assert load_checkpoint(tmp_path, key="k", head=head, opt=opt, sched=sched, rng=rng, steps=10)[0] == 0
    torch.save({**state, "step": 2}, tmp_path / CHECKPOINT)  # this recipe's, its weights missing
    with pytest.raises(ValueError, match="cannot be resumed"):
        load_checkpoint(tmp_path, key="k", head=head, opt=opt, sched=sched, rng=rng, steps=10)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / CHECKPOINT).mkdir()
    with pytest.raises(ValueError, match="checkpoint.pt"):
        check_checkpoint_files(tmp_path / "out")


def test_forecasts_of_another_device_or_damaged_predictions():
    """forecast --check held a CUDA forecast against a CPU record; a prediction outside its own interval, two
    forecasts of one configuration and a seed of false were read."""
    from otspec.engine.forecast import check_forecast_json, forecast_check, read_forecast
    from otspec.engine.record import RecordError, read_record

    made = read_forecast(ROOT / "figures" / "llm_forecast_eagle_heldout.json")
    record = read_record(ROOT / "figures" / "llm_eagle_heldout.json").to_json()
    for key, value in (("device", "cuda"), ("dtype", "float16")):
        with pytest.raises(ValueError, match=key):
            forecast_check({**made, "pair": {**made["pair"], key: value}}, record)
    with pytest.raises(ValueError, match="cache"):
        forecast_check({**made, "settings": {**made["settings"], "cache": "static"}}, record)
    row = made["forecasts"][0]
    for bad, needle in (({**made, "forecasts": [{**row, "predicted_speedup": 9.0}]}, "outside its own interval"),
                        ({**made, "forecasts": [row, row]}, "a second forecast"),
                        ({**made, "settings": {**made["settings"], "seed": False}}, "seed")):
        with pytest.raises(RecordError, match=needle):
            check_forecast_json(bad)


def test_plots_of_infinities_huge_axes_and_thousands_of_lines(tmp_path, capsys):
    pytest.importorskip("pandas")
    from otspec.figures.sweep import main as sweep_plot

    tables = {"inf.csv": ("L,exact_accepted\n1,inf\n2,inf\n", [], "infinite"),
              "x.csv": ("L,exact_accepted\n" + "9" * 400 + ",0.5\n2,0.4\n", [], "beyond the float range"),
              "hues.csv": ("L,h,exact_accepted\n" + "".join(f"1,{i},0.5\n" for i in range(100)), ["--hue", "h"],
                           "MAX_HUE_LINES")}
    for name, (text, extra, needle) in tables.items():
        (tmp_path / name).write_text(text)
        argv = [str(tmp_path / name), "--x", "L", "--y", "exact_accepted", "--out", str(tmp_path / "x.png")]
        refused(sweep_plot, argv + extra, capsys, needle)


def test_long_names_odd_scheduler_hosts_replaced_streams_and_folders_made_late(tmp_path, capsys):
    """A file name past 255 bytes gave [Errno 36] without the flag; tcp://[127.0.0.1]:1 and hosts with zero-width
    spaces passed; an in-process sampler replacing sys.stdout swallowed the verdict; validate's --out-dir was made
    before the model loaded."""
    from llm_bridge.validate import output_path
    from otspec.cli import SCHEDULER_ADDRESS
    from otspec.clitools import writable_file

    with pytest.raises(ValueError, match="--out .*255 bytes"):
        writable_file(tmp_path / ("x" * 300), "--out")
    import re

    for address in ("tcp://[127.0.0.1]:1", "tcp://loc\u200bal:1", "tcp://localhost:01", "tcp://[...]:1"):
        assert not re.fullmatch(SCHEDULER_ADDRESS, address), address
    assert re.fullmatch(SCHEDULER_ADDRESS, "tcp://[::1]:8786") and re.fullmatch(SCHEDULER_ADDRESS, "10.0.0.5:8786")
    assert output_path(tmp_path / "later", None, "ngram").parent == tmp_path / "later"
    assert not (tmp_path / "later").exists()
    _audit_verdict_survives(tmp_path, "swap", "sys.stdout = io.StringIO()")
