"""Round eleven of hostile inputs (issue 43): one test per class of finding, each able to fail on the old code."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.corpus_files import write_shard

ROOT = Path(__file__).resolve().parent.parent


def _corpus(folder: Path, tokens: int = 4) -> Path:
    folder.mkdir()
    (folder / "corpus.json").write_text(json.dumps({"format": "otspec-corpus-1", "vocab_size": 24, "recipe": {
        "shard_messages": 1}, "shards": [{"index": 0, "file": "shard-00000.npz", "tokens": tokens}]}))
    write_shard(folder / "shard-00000.npz")
    return folder


def test_a_key_given_twice_in_a_record_is_refused(tmp_path):
    """A record with a key given twice was read with the last value, silently."""
    from otspec.engine.record import RecordError, read_record

    text = (ROOT / "figures" / "llm_eagle.json").read_text()
    doubled = text.replace('"model_pair": {', '"model_pair": {"target": "other", ', 1)
    (tmp_path / "llm_twice.json").write_text(doubled)
    with pytest.raises(RecordError, match="appears twice"):
        read_record(tmp_path / "llm_twice.json")


def test_lists_of_bfloat16_or_grad_tensors_are_rows():
    """A list of bfloat16 scalars or of tensors requiring grad was refused (no numpy view)."""
    torch = pytest.importorskip("torch")
    from otspec.distributions import validate_probs

    halves = [torch.tensor(0.25, dtype=torch.bfloat16), torch.tensor(0.75, dtype=torch.bfloat16)]
    np.testing.assert_allclose(validate_probs(halves, "row"), [0.25, 0.75])
    rows = [torch.tensor([0.25, 0.75], requires_grad=True), torch.tensor([0.5, 0.5])]
    np.testing.assert_allclose(validate_probs(rows, "rows"), [[0.25, 0.75], [0.5, 0.5]])
    with pytest.raises(ValueError, match="booleans"):
        validate_probs([torch.tensor(True), torch.tensor(0.0)], "row")


def test_float16_logged_masses_are_read_within_their_precision(tmp_path):
    """Logged rows stored in float16 were refused: their rows sum to 1 within float16's eps, not 1e-6."""
    import otspec
    from otspec.sources.logged import load_logged_rows, log_rows

    draft, target = otspec.IIDSource([0.3, 0.3, 0.4]), otspec.IIDSource([0.2, 0.5, 0.3])
    log = log_rows(draft, target, 2, 4, seed=0)
    log.save(tmp_path / "rows.npz")
    arrays = dict(np.load(tmp_path / "rows.npz"))
    arrays["draft"] = (arrays["draft"] / 3 * 3.0002).astype(np.float16)  # a sum 2e-4 off 1
    np.savez(tmp_path / "half.npz", **arrays)
    back = load_logged_rows(tmp_path / "half.npz")
    totals = np.add.reduceat(back.draft, back.row_offsets[:-1]) + back.draft_tail
    np.testing.assert_allclose(totals, 1.0, atol=1e-12)  # renormalised, as accepted rows are


def test_source_fields_numpy_integers_huge_integers_and_complex_matrices():
    """numpy integers in a source's fields were refused; a 401-digit horizon was accepted; a complex transition
    matrix lost its imaginary part with a warning."""
    import otspec

    assert otspec.source_from_json({"type": "uniform", "support": np.int64(2), "vocab_size": np.int32(4)}
                                   ).vocab_size == 4
    with pytest.raises(ValueError, match="too large"):
        otspec.source_from_json({"type": "table", "vocab_size": 2, "horizon": 10**400, "rows": {"": [0.5, 0.5]}})
    with pytest.raises(ValueError, match="transition"):
        otspec.MarkovSource([0.5, 0.5], np.array([[0.5 + 1j, 0.5 - 1j], [0.5, 0.5]]))


def test_blank_paths_devices_and_underscored_integers_on_the_command_line(tmp_path, capsys):
    """``--draft-out '   '`` wrote a file named by spaces; ``source logged --out /dev/null`` wrote to the device;
    ``--L 1_6`` was read as 16."""
    from otspec.cli import main as cli_main
    from otspec.clitools import check_folder_path

    assert cli_main(["source", "random", "--vocab", "3", "--draft-out", "   ", "--target-out",
                     str(tmp_path / "t.json")]) == 2
    assert "--draft-out" in capsys.readouterr().err and not (tmp_path / "t.json").exists()
    with pytest.raises(ValueError, match="expected a path"):
        check_folder_path("", "--out")
    assert cli_main(["source", "logged", "--draft", "0.3,0.7", "--target", "0.5,0.5", "--paths", "2", "--length",
                     "4", "--out", os.devnull]) == 2
    assert "not a regular file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["calc", "block", "--draft", "0.3", "--target", "0.75", "--L", "1_6"])
    assert "no underscores" in capsys.readouterr().err


def test_a_sweep_figure_makes_its_folder(tmp_path, capsys):
    """``plot sweep --out new/folder/x.png`` failed with [Errno 2] after reading the table."""
    from otspec.cli import main as cli_main
    from otspec.figures.sweep import main as sweep_plot

    spec = tmp_path / "s.toml"
    spec.write_text('L = [1, 2]\n[[pairs]]\nkind = "iid"\ndraft = [0.3, 0.7]\ntarget = [0.6, 0.4]\n'
                    '[[verifiers]]\nname = "token"\n')
    pytest.importorskip("pandas")
    assert cli_main(["sweep", str(spec), "--workers", "1", "--out", str(tmp_path / "res"), "--json"]) == 0
    capsys.readouterr()
    table = next((tmp_path / "res").glob("results.*"))
    out = tmp_path / "new" / "folder" / "x.png"
    assert sweep_plot([str(table), "--x", "L", "--y", "exact_accepted", "--out", str(out)]) == 0
    assert out.is_file()


def test_forecasts_curves_and_corpora_that_lie_about_themselves(tmp_path):
    """A forecast of L = 10^400 passed; head_curve wrote over a JSON file of another kind and kept points trained on
    0 tokens; a corpus index's token count disagreeing with its shard was trusted; a 12 GB sparse index, a damaged
    deflate stream and deep logged-rows metadata gave tracebacks or were read whole."""
    from llm_bridge.corpus import load_corpus
    from llm_bridge.head_curve import FORMAT, read_curve
    from otspec.engine.forecast import check_forecast_json
    from otspec.engine.record import RecordError

    made = {"kind": "forecast", "pair": {"target": "t", "draft": "d", "device": "cpu", "dtype": "float32"},
            "settings": {},
            "forecasts": [{"verifier": "token", "L": 10**400}]}
    with pytest.raises(RecordError, match="MAX_DRAFT_LENGTH"):
        check_forecast_json(made)
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    with pytest.raises(ValueError, match="not a head curve"):
        read_curve(other)
    point = {"head": "eagle", "train_tokens_asked": 2, "train_tokens": 0, "acceptance_per_position": [0.4],
             "greedy_agreement_per_position": None, "coverage": 0.9, "trained_parameters": 10, "seconds": 1.0}
    other.write_text(json.dumps({"format": FORMAT, "settings": {}, "points": [point]}))
    with pytest.raises(ValueError, match="point 0 is damaged"):
        read_curve(other)
    assert len(load_corpus(_corpus(tmp_path / "good"))) == 2
    with pytest.raises(ValueError, match="corpus.json says 5"):
        load_corpus(_corpus(tmp_path / "lies", tokens=5))
    sparse = _corpus(tmp_path / "sparse")
    with open(sparse / "corpus.json", "r+b") as fh:
        fh.truncate(2**34)  # 16 GiB of holes: nothing is written to disk
    with pytest.raises(ValueError, match="MAX_INDEX_BYTES"):
        load_corpus(sparse)
    broken = _corpus(tmp_path / "broken")
    data = bytearray((broken / "shard-00000.npz").read_bytes())
    start = data.index(b"tokens.npy") + len(b"tokens.npy")
    data[start:start + 40] = b"\xff" * 40  # the deflate stream of one member, damaged
    (broken / "shard-00000.npz").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="not a corpus shard"):
        load_corpus(broken)


def test_logged_rows_with_deeply_nested_metadata_are_refused_by_name(tmp_path):
    import otspec
    from otspec.sources.logged import load_logged_rows, log_rows

    log = log_rows(otspec.IIDSource([0.5, 0.5]), otspec.IIDSource([0.25, 0.75]), 2, 3, seed=0)
    log.save(tmp_path / "rows.npz")
    arrays = dict(np.load(tmp_path / "rows.npz"))
    arrays["meta"] = np.array("[" * 100_000 + "]" * 100_000)
    np.savez(tmp_path / "deep.npz", **arrays)
    with pytest.raises(ValueError, match="meta is not JSON"):  # RecursionError before
        load_logged_rows(tmp_path / "deep.npz")
