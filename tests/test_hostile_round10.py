"""Round ten of hostile inputs (issue 43): one test per class of finding, each able to fail on the old code."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.corpus_files import write_shard

ROOT = Path(__file__).resolve().parent.parent


def _corpus(folder: Path, indices=(0,), **recipe) -> Path:
    folder.mkdir()
    shards = [{"index": i, "file": f"shard-{i:05d}.npz", "tokens": 4} for i in indices]
    (folder / "corpus.json").write_text(json.dumps({"format": "otspec-corpus-1", "vocab_size": 24, "shards": shards,
                                                    "recipe": {"shard_messages": 1, **recipe}}))
    for entry in shards:
        write_shard(folder / entry["file"])
    return folder


def _spec(tmp_path: Path, draft="[0.3, 0.7]") -> Path:
    spec = tmp_path / "s.toml"
    spec.write_text(f'L = [1]\n[[pairs]]\nkind = "iid"\ndraft = {draft}\ntarget = [0.6, 0.4]\n'
                    '[[verifiers]]\nname = "token"\n')
    return spec


def test_the_root_folder_and_folders_through_files_or_unwritable_mounts(tmp_path, capsys):
    """``--out /`` raised StopIteration (no parent of the root exists to look at); ``afile/..`` passed because
    resolving hid the file; /proc and /sys took the check and failed at the end."""
    from otspec.cli import main as cli_main
    from otspec.clitools import check_folder_path

    check_folder_path("/", "--out")  # the root is a folder like any other (StopIteration before)
    afile = tmp_path / "afile"
    afile.write_text("x")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    spec = _spec(tmp_path)
    cases = [(f"{afile}/..", "not a folder"), (str(tmp_path / "dangling" / "x"), "link to nothing")]
    cases += [(p, "cannot write") for p in ("/proc/1/x", "/proc/self") if os.path.isdir("/proc/1")]
    for out, why in cases:
        assert cli_main(["sweep", str(spec), "--out", out]) == 2
        err = capsys.readouterr().err
        assert "--out" in err and why in err and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.glob("*_results"))
    assert cli_main(["sweep", str(spec), "--scheduler", "inproc://x:1"]) == 2  # "not enough values to unpack"
    assert "tcp://" in capsys.readouterr().err


def test_arrays_and_scalars_among_rows_are_numbers_and_booleans_stay_refused():
    """A list of numpy rows, 0-d arrays and torch scalars were refused as 'not only numbers' (a regression of the
    boolean check); booleans in any of those forms are still refused."""
    from otspec.distributions import total_variation, validate_probs
    from otspec.sources import IIDSource

    rows = [np.array([0.25, 0.75]), np.array([0.5, 0.5])]
    np.testing.assert_array_equal(validate_probs(rows, "rows"), np.array(rows))
    np.testing.assert_array_equal(validate_probs((np.float64(0.5), np.array(0.5)), "row"), [0.5, 0.5])
    assert IIDSource([np.array(0.2), np.array(0.8)]).vocab_size == 2
    assert total_variation([np.array(0.2), 0.8], [0.5, np.float32(0.5)]) == pytest.approx(0.3)
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(validate_probs([torch.tensor(0.25), torch.tensor(0.75)], "row"), [0.25, 0.75])
    for bad in ([np.True_, 0.0], [np.array([True, False])], [torch.tensor(True), 0.0]):
        with pytest.raises(ValueError, match="booleans"):
            validate_probs(bad, "row")


def test_npz_members_are_bounded_in_bytes_not_only_entries(tmp_path):
    """A member of two entries of a 1 GiB void dtype passed the entry count and loaded 2 GiB."""
    from llm_bridge.corpus import load_corpus
    from otspec.errors import SizeLimitError

    folder = _corpus(tmp_path / "wide")
    member = tmp_path / "wide.npy"
    with open(member, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "|V1073741824", "fortran_order": False, "shape": (2,)})
    with zipfile.ZipFile(folder / "shard-00000.npz", "w") as z:
        z.write(member, "tokens.npy")
    with pytest.raises(SizeLimitError, match="bytes"):
        load_corpus(folder)


def test_corpus_offsets_sizes_archives_and_folders_that_are_not_one(tmp_path):
    """Unsigned offsets wrapped in the check (np.diff on uint64); max_tokens took -1, 2.5 and True; a zip with an
    unsupported compression gave NotImplementedError; a complex vocabulary size a TypeError; load_corpus(3) and a
    PathLike giving bytes a TypeError naming nothing."""
    from llm_bridge.corpus import load_corpus

    wrap = _corpus(tmp_path / "wrap")
    write_shard(wrap / "shard-00000.npz", offsets=np.array([0, 2**64 - 4, 8], dtype=np.uint64))
    with pytest.raises(ValueError, match="offsets"):
        load_corpus(wrap)
    good = _corpus(tmp_path / "good")
    for size in (-1, 2.5, True):
        with pytest.raises(ValueError, match="max_tokens"):
            load_corpus(good, max_tokens=size)
    assert len(load_corpus(good, max_tokens=1)) == 2
    lzma = _corpus(tmp_path / "lzma")
    arrays = dict(np.load(lzma / "shard-00000.npz"))
    with zipfile.ZipFile(lzma / "shard-00000.npz", "w", compression=zipfile.ZIP_LZMA) as z:
        for key, value in arrays.items():
            with z.open(f"{key}.npy", "w") as fh:
                np.lib.format.write_array(fh, value)
    data = (lzma / "shard-00000.npz").read_bytes()  # method 14 (LZMA) → 99 (AES): a method zipfile lacks
    (lzma / "shard-00000.npz").write_bytes(data.replace(b"\x3f\x00\x02\x00\x0e\x00", b"\x3f\x00\x02\x00\x63\x00"))
    with pytest.raises(ValueError, match="not a corpus shard"):
        load_corpus(lzma)
    complex_vocab = _corpus(tmp_path / "complex")
    write_shard(complex_vocab / "shard-00000.npz", vocab_size=np.array(24 + 1j))
    with pytest.raises(ValueError, match="damaged shard"):
        load_corpus(complex_vocab)

    class BytesPath:
        def __fspath__(self):
            return str(good).encode()

    for folder in (3, BytesPath()):
        with pytest.raises(TypeError, match="load_corpus: folder"):
            load_corpus(folder)


def test_a_corpus_without_a_training_shard_or_with_a_huge_recipe_is_refused_before_any_model(tmp_path, capsys):
    """A corpus whose shards were all held out, or whose recipe named 10^30 messages per shard, failed after the
    target loaded (seconds to minutes of work first)."""
    from llm_bridge.corpus import check_trainable, load_corpus
    from llm_bridge.head_curve import main as curve_main

    held_only = _corpus(tmp_path / "held", indices=(9, 19))
    with pytest.raises(ValueError, match="no training shard"):
        check_trainable(load_corpus(held_only), "c")
    assert curve_main(["--corpus", str(held_only), "--target", "no-such-model", "--out",
                       str(tmp_path / "c.json")]) == 2
    assert "no training shard" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no held-out shard"):
        check_trainable(load_corpus(_corpus(tmp_path / "train", indices=(0, 1))), "c")
    with pytest.raises(ValueError, match="damaged corpus index"):
        load_corpus(_corpus(tmp_path / "huge", shard_messages=10**30))


def test_huge_integers_in_forecasts_curves_and_records_are_refused_by_name(tmp_path):
    """An integer of hundreds of digits raised OverflowError (math.isfinite) instead of naming the field."""
    from llm_bridge.head_curve import FORMAT, read_curve
    from otspec.checks import finite_real
    from otspec.engine.forecast import check_forecast_json
    from otspec.engine.record import RecordError, read_record

    assert not finite_real(10**400) and finite_real(10**300) and not finite_real(True)
    made = {"kind": "forecast", "pair": {"target": "t", "draft": "d", "device": "cpu", "dtype": "float32"},
            "settings": {},
            "forecasts": [{"verifier": "token", "L": 1, "predicted_speedup": 10**400}]}
    with pytest.raises(RecordError, match="predicted_speedup"):
        check_forecast_json(made)
    made["forecasts"][0] = {"verifier": "token", "L": 1, "predicted_speedup_interval": {"low": 1, "high": 10**400}}
    with pytest.raises(RecordError, match="interval"):
        check_forecast_json(made)
    point = {"head": "eagle", "train_tokens_asked": 2, "train_tokens": 2, "acceptance_per_position": [0.4],
             "greedy_agreement_per_position": None, "coverage": 0.9, "trained_parameters": 10, "seconds": 10**400}
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"format": FORMAT, "settings": {}, "points": [point]}))
    with pytest.raises(ValueError, match="point 0 is damaged"):
        read_curve(path)
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="not a JSON head curve"):  # RecursionError before
        read_curve(path)
    record = json.loads((ROOT / "figures" / "llm_eagle.json").read_text())
    run = record["runs"][0]
    huge = {**record, "runs": [{**run, "block_efficiency": {**run["block_efficiency"], "high": 10**400}}]}
    (tmp_path / "llm_huge.json").write_text(json.dumps(huge))
    with pytest.raises(RecordError, match="finite"):
        read_record(tmp_path / "llm_huge.json")


def test_a_records_folder_whose_llm_entries_are_not_records_is_refused(tmp_path, capsys):
    """A folder holding only llm_notes.txt, a folder llm_sub/ or llm_junk.json without a model pair passed as
    holding records, and the figures were drawn empty."""
    from otspec.figures.common import check_records_given
    from otspec.plot import main as plot_main

    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "llm_notes.txt").write_text("notes")
    (junk / "llm_sub").mkdir()
    (junk / "llm_junk.json").write_text('{"hello": 1}')
    with pytest.raises(ValueError, match="holds no real-pair records"):
        check_records_given(junk)
    assert plot_main(["real_models", "--records", str(junk), "--out", str(tmp_path / "r.png")]) == 2
    assert "holds no real-pair records" in capsys.readouterr().err
    (junk / "llm_eagle.json").write_text((ROOT / "figures" / "llm_eagle.json").read_text())
    assert check_records_given(junk) == junk  # one record is enough


def test_paths_whose_fspath_gives_bytes_and_strict_layer_lists(tmp_path):
    """A PathLike returning bytes passed file_problem and failed in pathlib; ``--fuse 1_5`` was read as layer 15."""
    import argparse

    from otspec.clitools import index_list
    from otspec.engine.record import RecordError, read_record

    class BytesPath:
        def __fspath__(self):
            return str(ROOT / "figures" / "llm_eagle.json").encode()

    with pytest.raises(RecordError, match="not a path"):
        read_record(BytesPath())
    assert index_list("3,15") == (3, 15)
    for text in ("1_5", "", "3,", "-1", "٣"):
        with pytest.raises(argparse.ArgumentTypeError):
            index_list(text)


def test_booleans_in_markov_matrices_and_sweep_rows_are_refused_by_name(tmp_path, capsys):
    """Transition matrices of true/false were read as 1/0; a sweep's boolean row failed inside a cell, naming neither
    the spec nor the pair."""
    import otspec
    from otspec.cli import main as cli_main

    with pytest.raises(ValueError, match="transition"):
        otspec.source_from_json({"type": "markov", "initial": [0.5, 0.5], "transition": [[True, False], [False, True]]})
    with pytest.raises(ValueError, match="transition"):
        otspec.MarkovSource([0.5, 0.5], np.eye(2, dtype=bool))
    assert cli_main(["sweep", str(_spec(tmp_path, "[true, false]")), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "pairs[0].draft" in err and "booleans" in err
    assert not (tmp_path / "o").exists()


def ends_with_posix_exit(*args):
    import posix

    posix._exit(0)


def test_an_in_process_audit_refuses_posix_exit_too():
    """``--in-process`` guarded os._exit only: a sampler calling posix._exit(0) ended the audit with status 0 and no
    verdict."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "otspec", "audit", "tests.test_hostile_round10:ends_with_posix_exit",
                           "--samples", "200", "--json", "--in-process"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "called os._exit(0)" in lines[0], proc.stderr
