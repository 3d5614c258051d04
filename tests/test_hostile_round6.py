"""Hostile inputs, sixth round (issue 43): samplers that return objects which cannot be read, command lines that
answer in one line, rows given as tensors, in float16, complex or with entries far above 1."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from otspec.audit import SamplerError, audit
from otspec.audit.protocol import exception_text
from otspec.cli import main as cli_main
from otspec.engine import evaluate
from otspec.verifiers import TokenVerify

P, Q = [0.6, 0.3, 0.1], [0.2, 0.5, 0.3]


class _LyingPair(tuple):
    def __iter__(self):
        raise RuntimeError("no items after all")


class _BadArray:
    def __array__(self, *args, **kwargs):
        raise RuntimeError("__array__ exploded")


class _BadMessage(Exception):
    def __str__(self):
        raise RuntimeError("cannot print me")


async def _never_awaited():
    return None


def meta_tensors(draft_tokens, draft_probs, target_probs, rng):
    B = draft_tokens.shape[0]
    return torch.empty(B, dtype=torch.int64, device="meta"), torch.empty(B, dtype=torch.int64, device="meta")


def lying_pair(*args):
    return _LyingPair((1, 2))


def broken_array(draft_tokens, *args):
    return _BadArray(), np.zeros(draft_tokens.shape[0], dtype=np.int64)


def unprintable_error(*args):
    raise _BadMessage()


def multiline_error(*args):
    raise ValueError("line one\nline two\n" + "x" * 5000)


def coroutine(*args):
    return _never_awaited()


@pytest.mark.parametrize("sampler,match", [
    (meta_tensors, "accepted as a Tensor that cannot be read as an array (NotImplementedError"),
    (lying_pair, "_LyingPair that cannot be read as a pair (RuntimeError: no items after all)"),
    (broken_array, "accepted as a _BadArray that cannot be read as an array (RuntimeError: __array__ exploded)"),
    (unprintable_error, "the sampler raised _BadMessage: (its message cannot be printed)"),
    (multiline_error, "the sampler raised ValueError: line one …"),
    (coroutine, "the sampler returned coroutine; the protocol needs a pair")])
def test_a_sampler_output_that_cannot_be_read_is_one_clear_error(sampler, match, recwarn):
    with pytest.raises(SamplerError) as caught:
        audit(sampler, samples=200, progress=False)
    message = str(caught.value)
    assert match in message and "\n" not in message and len(message) < 500
    assert not [w for w in recwarn if "never awaited" in str(w.message)]  # the coroutine was closed, not leaked


def test_exception_text_is_one_bounded_line():
    assert exception_text(ValueError("a\nb")) == "ValueError: a …"
    assert exception_text(KeyError()) == "KeyError"
    assert len(exception_text(ValueError("y" * 10_000))) < 320


@pytest.mark.parametrize("argv", [["audit", "x:y", "--samples", "0"], ["calc", "block", "--draft", "0.5,0.5"],
                                  ["simulate", "--draft", "0.5", "--target", "0.5", "--L", "2", "--blocks", "nan"],
                                  ["bogus"]])
def test_every_argument_error_is_one_line_with_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1 and "--help lists the options" in err


def test_entries_far_above_one_are_refused_before_a_sum_overflows(capsys, recwarn):
    assert cli_main(["calc", "block", "--draft", "1e308,1e308", "--target", "0.2,0.3,0.5", "--L", "2"]) == 2
    assert "probability 1e+308 at index (0,) is above 1" in capsys.readouterr().err
    assert not [w for w in recwarn if "overflow" in str(w.message)]


def test_rows_as_tensors_and_in_half_precision_are_read_in_their_own_dtype():
    exact = evaluate(P, Q, TokenVerify(), 2).expected_accepted
    assert evaluate(torch.tensor(P, dtype=torch.float64), Q, TokenVerify(), 2).expected_accepted == pytest.approx(exact,
                                                                                                                  abs=1e-15)
    half = np.array(P, dtype=np.float16)  # within float16's tolerance, not float64's: the law of the rounded row
    rounded = half.astype(np.float64) / half.astype(np.float64).sum()
    a = float(np.minimum(rounded, Q).sum())
    assert evaluate(torch.tensor(P, dtype=torch.float16), Q, TokenVerify(), 2).expected_accepted == \
        pytest.approx(a + a * a, abs=1e-12)
    assert evaluate(half, Q, TokenVerify(), 2).expected_accepted == pytest.approx(a + a * a, abs=1e-12)
    with pytest.raises(ValueError, match="draft: expected real probabilities, got dtype complex128"):
        evaluate(np.array(P, dtype=complex), Q, TokenVerify(), 2)
    with pytest.raises(ValueError, match=r"draft: expected a Source or one probability row \(shape \(V,\)\)"):
        evaluate(torch.tensor([P]), Q, TokenVerify(), 2)



@pytest.mark.parametrize("obj,match", [
    ({"type": "iid", "probs": [0.5, 0.5], "horizn": 3}, r"unknown key\(s\) 'horizn'; it reads probs"),
    ({"type": "iid", "probs": ["0.5", "0.5"]}, "field 'probs': expected numbers, got the text '0.5'"),
    ({"type": "uniform", "support": 2, "vocab_size": 10**12}, "above MAX_VOCAB_SIZE"),
    ({"type": "markov", "initial": [0.5, 0.5], "transition": [[[0.9, 0.1], [0.2, 0.8]]], "horizon": 0},
     "horizon: expected an integer >= 1, got 0"),
    ({"type": "table", "vocab_size": 2, "horizon": 2, "rows": {"": [0.5, 0.5], "7": [0.5, 0.5]}},
     r"rows\[\(7,\)\]: token ids must lie in \[0, 2\)"),
    ({"type": "table", "vocab_size": 2, "horizon": 1, "rows": {"": [0.5, 0.5], "0": [0.5, 0.5]}},
     "is never read by a source of horizon 1")])
def test_a_source_file_says_what_is_wrong_with_it(obj, match):
    from otspec.sources import source_from_json

    with pytest.raises(ValueError, match=match):
        source_from_json(obj)


def test_every_source_written_is_read_back_under_the_strict_keys(tmp_path):
    from otspec.sources import (
        IIDSource,
        MarkovSource,
        TableSource,
        bernoulli,
        load_source,
        save_source,
        uniform_source,
    )

    for source in (IIDSource(P), bernoulli(0.3), uniform_source(2, 4), MarkovSource([0.5, 0.5], [[0.9, 0.1], [0.2, 0.8]]),
                   TableSource({(): [0.5, 0.5], (0,): [0.9, 0.1], (1,): [0.2, 0.8]}, 2, 2)):
        save_source(source, tmp_path / "s.json")
        again = load_source(tmp_path / "s.json")
        empty = np.zeros((1, 0), np.int64)
        assert np.allclose(again.next_probs(empty), source.next_probs(empty), rtol=0, atol=1e-15)


def test_a_device_or_a_huge_file_is_not_read_as_a_source(capsys):
    assert cli_main(["calc", "block", "--draft-source", "/dev/zero", "--target", "0.5,0.5", "--L", "1"]) == 2
    assert "/dev/zero is not a regular file" in capsys.readouterr().err


@pytest.mark.parametrize("row", ["0.5,,0.5", "0.5,0.5,", ",0.5,0.5"])
def test_an_empty_entry_in_a_probability_list_is_refused(row, capsys):
    assert cli_main(["calc", "block", "--draft", row, "--target", "0.5,0.5", "--L", "1"]) == 2
    assert "an empty entry" in capsys.readouterr().err


def test_decode_checks_the_target_cost_without_a_draft_cost(capsys):
    assert cli_main(["decode", "--draft", "0.5,0.5", "--target", "0.5,0.5", "--L", "2", "--t-target", "nan"]) == 2
    assert "--t-target" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["sweep", "spec.toml", "--out", ""], ["audit", "x:y", "--out", " "]])
def test_an_empty_output_path_is_refused_before_anything_runs(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(argv)
    assert exit_.value.code == 2 and "expected a path, got an empty one" in capsys.readouterr().err


@pytest.mark.parametrize("flag", [["--workers", "100000"], ["--cluster", "local:100000"]])
def test_a_sweep_never_starts_more_processes_than_its_limit(flag, tmp_path, capsys):
    from otspec.sweep.run import MAX_LOCAL_WORKERS

    spec = tmp_path / "s.toml"
    spec.write_text('name = "s"\nquantities = ["exact"]\nL = [2]\n[[pairs]]\nkind = "random_iid"\nvocab = [3]\n'
                    'concentration = [1.0]\n[[verifiers]]\nname = "token"\n')
    assert cli_main(["sweep", str(spec), "--out", str(tmp_path / "out"), *flag]) == 2
    err = capsys.readouterr().err
    assert f"above MAX_LOCAL_WORKERS = {MAX_LOCAL_WORKERS}" in err and not (tmp_path / "out").exists()


def _record_with(**run_fields):
    import json

    from otspec.figures import RECORDS_DIR
    record = json.loads((RECORDS_DIR / "llm_default.json").read_text())
    record["runs"] = [{**record["runs"][0], **run_fields}]
    return record


@pytest.mark.parametrize("fields,match", [
    ({"acceptance_per_position": [2.0, 0.1]}, r"'acceptance_per_position'\[0\] should be in \[0, 1\], got 2.0"),
    ({"acceptance_rate": -0.5}, r"'acceptance_rate' should be in \[0, 1\], got -0.5"),
    ({"accepted_length_histogram": [-5, 1, 1]}, r"'accepted_length_histogram'\[0\] should be >= 0"),
    ({"speedup": float("nan")}, "'speedup' should be a finite number or null, got nan"),
    ({"t_target_ms": {"abc": 1.0}}, "keyed by tokens scored per call"),
    ({"t_target_ms": {"1": -1.0}}, r"'t_target_ms'\['1'\] should be a time > 0 ms"),
    ({"tv_per_position": []}, "one entry per drafted position"),
    ({"tv_per_position": [float("nan"), 0.1]}, "'tv_per_position'\\[0\\] should be a finite number or null")])
def test_a_damaged_record_is_refused_naming_the_field(fields, match):
    from otspec.engine.record import RecordError, as_record

    with pytest.raises(RecordError, match=match):
        as_record(_record_with(**fields))


def test_every_committed_record_passes_the_range_checks():
    from otspec.engine.record import read_record
    from otspec.figures import RECORDS_DIR

    records = [p for p in sorted(RECORDS_DIR.glob("llm_*.json")) if not p.name.startswith("llm_forecast_")]
    assert len(records) >= 12 and all(read_record(p) is not None for p in records)


def test_a_deep_record_and_a_missing_records_folder_are_one_line(tmp_path, capsys):
    from otspec.plot import main as plot_main

    deep = tmp_path / "llm_deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert plot_main(["record", str(deep), "--out-dir", str(tmp_path)]) == 2
    assert "nests JSON too deeply" in capsys.readouterr().err
    assert plot_main(["real_models", "--records", str(tmp_path / "nope"), "--out", str(tmp_path / "x.png")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_validation_options_are_refused_before_a_model_loads(tmp_path, capsys):
    from llm_bridge import adaptive, validate
    from llm_bridge.validate_config import MAX_NEW_TOKENS

    assert validate.main(["--max-new-tokens", str(10**9)]) == 2
    assert f"above MAX_NEW_TOKENS = {MAX_NEW_TOKENS:,}" in capsys.readouterr().err
    assert validate.main(["--multi-verifiers", "bogus"]) == 2  # without --trees it was ignored
    assert "--multi-verifiers: read only with --trees" in capsys.readouterr().err  # round 14: refused, not read
    not_a_head = tmp_path / "source.json"
    not_a_head.write_text('{"type": "iid", "probs": [0.5, 0.5]}')
    assert adaptive.main(["--head", str(not_a_head), "--fixed", "1", "--thresholds", "0.5"]) == 2
    assert "not an acceptance head" in capsys.readouterr().err


def test_forecast_and_adaptive_read_their_lists_and_counts_strictly(capsys):
    from llm_bridge import adaptive, forecast

    assert forecast.main(["--L", "2,,4", "--draft", "ngram"]) == 2
    assert "--L '2,,4': expected comma-separated integers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        adaptive.main(["--train-prompts", "0"])  # 0 meant every prompt of the file
    assert "--train-prompts: expected a positive integer" in capsys.readouterr().err
    assert adaptive.main(["--train-prompts", "100000", "--fixed", "1", "--thresholds", "0.5"]) == 2
    assert "the training prompt file holds" in capsys.readouterr().err


@pytest.mark.parametrize("flag,match", [(["--max-length", "5000"], "above MAX_DRAFT_LENGTH"),
                                        (["--draft", "eagle", "--rule", "specdecpp", "--train-draft-length",
                                          "5000"], "above MAX_DRAFT_LENGTH"),  # a feature draft's training flag
                                        (["--train-tokens", "100000000"], "above MAX_NEW_TOKENS"),
                                        (["--save-head", "/etc/passwd/x.json"], "--save-head")])
def test_adaptive_sizes_and_paths_are_refused_before_a_model_loads(flag, match, capsys):
    from llm_bridge import adaptive

    assert adaptive.main(["--fixed", "1,2", "--thresholds", "0.5", *flag]) == 2
    assert match in capsys.readouterr().err


def test_audit_seeds_and_sample_counts_are_taken_as_given():
    from otspec.audit.adapters import token
    from otspec.testing import assert_lossless

    with pytest.raises(ValueError, match="seed"):
        audit(token, samples=200, seed=True, progress=False)
    with pytest.raises(ValueError, match="samples"):
        assert_lossless(token, samples=0)  # 0 meant the default 200,000
    with pytest.raises(ValueError, match="draws"):
        assert_lossless(token, exact=True, samples=0)


@pytest.mark.parametrize("spec", ["iid:2_0:1", "iid: 2:2", "iid:+2:2", "iid:\u0662:2"])
def test_iid_trees_are_written_in_ascii_digits_as_k_configs_are(spec):
    from otspec.drafts import parse_tree

    with pytest.raises(ValueError, match="digits 0-9"):
        parse_tree(spec)


@pytest.mark.parametrize("flag", [["--draw", "without"], ["--without-replacement"]])
def test_a_draw_asked_of_an_eagle2_tree_is_refused_not_ignored(flag, capsys):
    assert cli_main(["calc", "tree", "--draft", "0.5,0.3,0.2", "--target", "0.2,0.3,0.5", "--tree", "eagle2:2:2:3",
                     *flag]) == 2
    assert "drawn by the draft's confidence" in capsys.readouterr().err


def test_sweep_specs_that_cannot_be_read_are_one_line_naming_the_file(tmp_path, capsys):
    binary = tmp_path / "b.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    assert cli_main(["sweep", str(binary), "--out", str(tmp_path / "o")]) == 2
    assert f"sweep spec {binary}: not UTF-8 text" in capsys.readouterr().err
    tagged = tmp_path / "t.yaml"
    tagged.write_text("name: !!python/object/apply:os.system ['true']\n")
    assert cli_main(["sweep", str(tagged), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "(line 1, column 7)" in err


@pytest.mark.parametrize("fields,match", [
    ({"block_efficiency": {"mean": -1.0, "low": 1.0, "high": 1.1}}, "lies outside its interval"),
    ({"speedup_ci": {"low": 3.0, "high": 0.1}}, "low 3.0 is above high 0.1")])
def test_an_estimate_outside_its_interval_is_refused(fields, match):
    from otspec.engine.record import RecordError, as_record

    with pytest.raises(RecordError, match=match):
        as_record(_record_with(**fields))


def test_plot_checks_where_it_writes_before_it_computes(tmp_path, capsys):
    from otspec.figures import RECORDS_DIR
    from otspec.plot import main as plot_main

    a_file = tmp_path / "afile"
    a_file.write_text("")
    assert plot_main(["record", str(RECORDS_DIR / "llm_default.json"), "--out-dir", str(a_file)]) == 2
    assert "--out-dir" in capsys.readouterr().err
    assert plot_main(["pareto", "--out", str(a_file / "x.png")]) == 2
    assert "--out" in capsys.readouterr().err
    empty = tmp_path / "records"
    empty.mkdir()
    (empty / "llm_x.json").write_text("")
    assert plot_main(["real_models", "--records", str(empty), "--out", str(tmp_path / "x.png")]) == 2
    assert "llm_x.json: not JSON" in capsys.readouterr().err


@pytest.mark.parametrize("fields,match", [({"verifier": "nonexistent"}, "should name a chain verifier")])
def test_a_record_names_only_verifiers_and_trees_that_exist(fields, match):
    from otspec.engine.record import RecordError, as_record

    with pytest.raises(RecordError, match=match):
        as_record(_record_with(**fields))
    import json

    from otspec.figures import RECORDS_DIR
    record = json.loads((RECORDS_DIR / "llm_trees.json").read_text())
    record["tree_runs"][0]["tree"] = "x2"
    with pytest.raises(RecordError, match="field 'tree' is not a tree spec"):
        as_record(record)


def test_a_short_decode_never_reports_block_efficiency_below_one():
    from otspec.engine import generate

    result = generate(P, Q, TokenVerify(), 2, n_tokens=4, n_sequences=1)  # two iterations: a wide t-interval
    be = result.block_efficiency
    assert be.low >= 1.0 and be.low <= be.value <= be.high
