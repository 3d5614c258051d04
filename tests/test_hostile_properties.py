"""Issue 25, item 4: hypothesis writes hostile sweep specs, logged-rows files, source files and results tables (random
types, nesting, sizes at and past each limit, damaged fields) and every command answers with exit 0 and a result, or
exit 2 and a message — never a traceback (an exception escaping ``main``), a hang (a time bound per example) or a
silently truncated value (a fractional size is never accepted as a smaller whole one)."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import time

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, assume, currently_in_test_context, event, given, settings
from hypothesis import strategies as st

from otspec.checks import MAX_CANDIDATES, MAX_DRAFT_LENGTH
from otspec.cli import main as cli_main
from otspec.figures.sweep import main as plot_sweep_main
from otspec.sources import log_rows, random_markov
from otspec.sources.random import MAX_RANDOM_ENTRIES
from otspec.sweep.spec import MAX_CELLS

SECONDS = 60.0  # per example: generous for a loaded 2-core machine; a hang runs for minutes
FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))

# Values a careless or hostile user puts where a number, a list or a name belongs: wrong types, fractions,
# negative and zero sizes, NaN and infinities, sizes just past a limit, nesting, empty containers.
SIZES = st.sampled_from([0, -1, 1, 2, 3, 2.5, 1e300, 10**30, 2**63, MAX_DRAFT_LENGTH + 1, MAX_CANDIDATES + 1,
                         MAX_CELLS + 1, MAX_RANDOM_ENTRIES + 1, 4097])
HOSTILE = st.one_of(
    SIZES, st.none(), st.booleans(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
    st.lists(SIZES, max_size=3), st.lists(st.lists(st.integers(-2, 3), max_size=2), max_size=2),
    st.dictionaries(st.text(max_size=3), SIZES, max_size=2), st.just([]), st.just({}),
    st.sampled_from(["token", "kseq", "otm", "traversal", "random_markov", "logged", "json", "2x1", "iid:2:2",
                     "x", "exact", "monte_carlo", "decode", "adaptive", "overlap"]))

BASE_SPEC = {"name": "hostile", "quantities": ["exact", "optimum", "monte_carlo", "decode"], "L": [2], "k": [2],
             "blocks": 200, "tokens": 8, "sequences": 2,
             "pairs": [{"kind": "random_iid", "vocab": 4, "concentration": 1.0}],
             "verifiers": [{"name": "token"}, {"name": "kseq"}]}
TOP_KEYS = ["name", "seed", "quantities", "L", "k", "trees", "temperature", "cost_ratio", "blocks", "tokens",
            "sequences", "confidence", "device", "pairs", "verifiers", "bogus"]
PAIR_KEYS = ["kind", "vocab", "concentration", "sparsity", "pair_seed", "horizon", "draft", "target", "file", "tail",
             "span", "label"]
# Values each key legitimately takes, so that a share of the generated specs is valid and runs to a result.
BENIGN = {"name": ["x"], "seed": [0, 7], "quantities": [["exact"], ["monte_carlo", "adaptive"]], "L": [1, [1, 3]],
          "k": [[2, 3]], "trees": [["2x1"], ["iid:2:2"]], "temperature": [[0.5, 1.0]], "cost_ratio": [[0.0, 0.2]],
          "blocks": [50], "tokens": [4], "sequences": [1], "confidence": [0.9], "device": ["numpy"],
          "kind": ["random_markov", "random_iid"], "vocab": [3, [2, 5]], "concentration": [[0.0, 2.0]],
          "sparsity": [0.3], "pair_seed": [4], "horizon": [3], "tail": ["overlap"], "span": [4], "label": ["a"],
          "rho": [[1.5, 2.0]], "replacement": [False],
          # source files (a 3-token target is paired with them)
          "probs": [[0.2, 0.3, 0.5]], "p": [0.3], "vocab_size": [3], "initial": [[0.5, 0.25, 0.25]],
          "transition": [[[0.5, 0.25, 0.25]] * 3]}


def _values(key: str):
    """Half the time a hostile value, half a legitimate one (``one_of`` would pick among HOSTILE's many branches)."""
    return st.booleans().flatmap(lambda hostile: HOSTILE if hostile or key not in BENIGN
                                 else st.sampled_from(BENIGN[key]))


def _edits(where: str, keys: list[str]):
    return st.sampled_from(keys).flatmap(lambda key: st.tuples(st.just(where), st.just(key), _values(key)))


EDITS = st.lists(st.one_of(_edits("top", TOP_KEYS), _edits("pair", PAIR_KEYS),
                           _edits("verifier", ["name", "rho", "k", "replacement"])), min_size=1, max_size=3)


def _run(main, argv) -> tuple[int, str]:
    """(exit status, stderr) of an in-process ``main``: an exception other than argparse's SystemExit escapes and
    fails the test (a traceback for the user), as does running past :data:`SECONDS`."""
    err = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse's own refusal of a flag
            status = exc.code
    assert time.perf_counter() - t0 < SECONDS, f"{argv} ran {time.perf_counter() - t0:.0f} s"
    assert status in (0, 2), (status, err.getvalue()[-2000:])
    if currently_in_test_context():
        event(f"exit {status}")  # --hypothesis-show-statistics: how many examples ran, how many were refused
    if status == 2:
        assert "error" in err.getvalue(), err.getvalue()
    return status, err.getvalue()


def _edit(spec: dict, edits) -> dict:
    spec = copy.deepcopy(spec)
    for where, key, value in edits:
        target = {"top": spec, "pair": spec["pairs"][0] if isinstance(spec.get("pairs"), list) and spec["pairs"]
                  and isinstance(spec["pairs"][0], dict) else {},
                  "verifier": spec["verifiers"][0] if isinstance(spec.get("verifiers"), list) and spec["verifiers"]
                  and isinstance(spec["verifiers"][0], dict) else {}}[where]
        target[key] = value
    return spec


@FAST
@given(edits=EDITS)
def test_hostile_sweep_specs_give_a_result_or_exit_2(tmp_path_factory, edits):
    folder = tmp_path_factory.mktemp("spec")
    spec = _edit(BASE_SPEC, edits)
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    status, _ = _run(cli_main, ["sweep", str(path), "--workers", "1", "--json", "--out", str(folder / "out")])
    if status == 0:  # it ran: every cell has a row, and no size was silently rounded
        rows = pd.read_csv(folder / "out" / "results.csv")
        assert len(rows) >= 1
        for key in ("L", "k"):
            values = [v for v in np.ravel([spec.get(key, [])]) if isinstance(v, float) and not float(v).is_integer()]
            assert not values, f"{key} = {values} accepted"


@FAST
@given(text=st.text(max_size=200), suffix=st.sampled_from([".toml", ".yaml"]))
def test_any_text_as_a_sweep_spec_gives_exit_2_or_runs(tmp_path_factory, text, suffix):
    folder = tmp_path_factory.mktemp("text")
    path = folder / f"spec{suffix}"
    path.write_text(text)
    _run(cli_main, ["sweep", str(path), "--workers", "1", "--json", "--out", str(folder / "out")])


_LOG = log_rows(*random_markov(6, 1.0, seed=0), 3, 9, max_kept=4, seed=0)
_FIELDS = ["path_offsets", "tokens", "row_offsets", "row_tokens", "draft", "target", "draft_tail", "target_tail",
           "tail_overlap"]


def _damage(value: np.ndarray, how: str):
    try:
        return _damaged(value, how)
    except (ValueError, IndexError, TypeError):  # this damage does not apply to this field (a 0-d string, say)
        assume(False)


def _damaged(value: np.ndarray, how: str):
    return {"fraction": lambda v: v.astype(np.float64) + 0.5, "bool": lambda v: v.astype(bool),
            "text": lambda v: v.astype(str), "2d": lambda v: np.atleast_2d(v).repeat(2, axis=0),
            "empty": lambda v: v[:0], "negative": lambda v: -np.abs(v) - 1, "nan": lambda v: v * np.nan,
            "huge": lambda v: np.full(v.shape, 2**62), "short": lambda v: v[:-1], "scalar": lambda v: np.array(3),
            "object": lambda v: np.array([{"a": 1}] * max(v.size, 1), dtype=object)}[how](value)


@FAST
@given(field=st.sampled_from(_FIELDS + ["vocab_size", "format", "meta"]),
       how=st.sampled_from(["fraction", "bool", "text", "2d", "empty", "negative", "nan", "huge", "short", "scalar",
                            "object", "drop"]),
       verifier=st.sampled_from(["token", "block"]))
def test_damaged_logged_rows_files_are_refused_naming_the_problem(tmp_path_factory, field, how, verifier):
    arrays = {name: getattr(_LOG, name) for name in _FIELDS}
    arrays.update(format=np.array("otspec-logged-rows/1"), meta=np.array(json.dumps(_LOG.meta)),
                  vocab_size=np.array(_LOG.vocab_size))
    if how == "drop":
        del arrays[field]
    else:
        arrays[field] = _damage(np.asarray(arrays[field]), how)
    path = tmp_path_factory.mktemp("log") / "rows.npz"
    with open(path, "wb") as fh:
        np.savez(fh, **arrays, allow_pickle=True) if how == "object" else np.savez(fh, **arrays)
    status, err = _run(cli_main, ["simulate", "--logged", str(path), "--L", "2", "--verifier", verifier, "--blocks",
                                  "500", "--json"])
    if how in ("fraction", "bool", "nan", "object", "text", "drop", "2d", "short", "scalar") and field in _FIELDS:
        assert status == 2, f"{field} damaged by {how} was accepted"
        # the message names the field, or says the file is no archive of plain arrays (pickled objects), or names the
        # other array of a pair that no longer matches (offsets against entries, a row against its tail)
        assert any(s in err for s in (field, "archive", "offsets", "one value per", "row of step")), err


@FAST
@given(data=st.binary(max_size=300))
def test_any_bytes_as_a_logged_rows_file_give_exit_2(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bytes") / "rows.npz"
    path.write_bytes(data)
    status, _ = _run(cli_main, ["simulate", "--logged", str(path), "--L", "2", "--blocks", "100", "--json"])
    assert status == 2


SOURCE_TYPES = st.sampled_from(["iid", "bernoulli", "uniform", "markov", "positional", "table", "nonsense", 3, None])


@FAST
@given(kind=SOURCE_TYPES, fields=st.lists(
    _edits("source", ["probs", "p", "vocab_size", "initial", "transition", "rows", "horizon", "table", "default"]),
    max_size=3))
def test_hostile_source_files_give_a_result_or_exit_2(tmp_path_factory, kind, fields):
    folder = tmp_path_factory.mktemp("src")
    (folder / "d.json").write_text(json.dumps({"type": kind, **{key: value for _, key, value in fields}}))
    (folder / "t.json").write_text(json.dumps({"type": "iid", "probs": [0.5, 0.25, 0.25]}))
    _run(cli_main, ["calc", "block", "--draft-source", str(folder / "d.json"), "--target-source",
                    str(folder / "t.json"), "--L", "2", "--json"])


COLUMNS = ["L", "exact_accepted", "verifier", "concentration", "vocab", "exact_accepted_note"]


@FAST
@given(columns=st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=5, unique=True),
       values=st.lists(st.one_of(st.integers(-3, 8), st.floats(allow_nan=True, allow_infinity=True),
                                 st.text(max_size=4), st.none()), min_size=0, max_size=6),
       heatmap=st.booleans())
def test_hostile_results_tables_plot_or_exit_2(tmp_path_factory, columns, values, heatmap):
    folder = tmp_path_factory.mktemp("plot")
    frame = pd.DataFrame({c: pd.Series(values[i::len(columns)] if values else [], dtype=object)
                          for i, c in enumerate(columns)})
    frame.to_csv(folder / "results.csv", index=False)
    argv = [str(folder / "results.csv"), "--x", "L", "--y", "concentration" if heatmap else "exact_accepted",
            "--out", str(folder / "f.png")]
    _run(plot_sweep_main, argv + (["--heatmap", "--z", "exact_accepted"] if heatmap else []))


@pytest.mark.parametrize("value", [2.5, "2", True, -1, 0])
def test_fractional_or_mistyped_sizes_in_a_spec_are_refused_not_rounded(tmp_path, value):
    spec = _edit(BASE_SPEC, [("top", "L", [value])])
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    status, err = _run(cli_main, ["sweep", str(path), "--workers", "1", "--json", "--out", str(tmp_path / "out")])
    assert status == 2 and "L" in err
