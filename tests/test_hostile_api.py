"""Issue 25's Python API leftovers: each silent truncation or disabled check is now a clear error."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from otspec.distributions import sample_categorical, validate_probs
from otspec.drafts import sample_candidates
from otspec.engine import generate
from otspec.sources import IIDSource
from otspec.verifiers import TokenVerify


@pytest.mark.parametrize("call,match", [
    (lambda: validate_probs([0.3, 0.3], tol=float("nan")), "tol"),
    (lambda: validate_probs([0.5, 0.5], tol=-1.0), "tol"),
    (lambda: sample_categorical(np.array([[0.5, -0.1, 0.6]]), np.random.default_rng(0)), "entries >= 0"),
    (lambda: sample_categorical(np.array([[0.5, np.nan, 0.5]]), np.random.default_rng(0)), "NaN"),
    (lambda: IIDSource([0.5, 0.5]).next_probs([[0, 5]]), r"\[0, 2\)"),
    (lambda: IIDSource([0.5, 0.5]).next_probs([[-1]]), r"\[0, 2\)"),
    (lambda: IIDSource([0.5, 0.5]).enumerate(2.5), "length"),
    (lambda: sample_candidates(np.array([[0.5, 0.5]]), 2.5, np.random.default_rng(0)), "k"),
])
def test_api_leftovers_refuse_instead_of_truncating(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_an_iid_source_reads_no_token_but_still_decodes_long_buffers():
    """The id check covers the prefixes' tokens only (padding past a row's length is not read), and a decode whose
    buffer is larger than the check's budget checks each row's last token: decoding still works."""
    src = IIDSource([0.5, 0.3, 0.2])
    assert src.next_probs(np.array([[1, -7]]), lengths=np.array([1])).shape == (1, 3)
    run = generate(src, src, TokenVerify(), 2, 3000, n_sequences=32, seed=0, progress=False)
    assert run.generated == 3000 * 32


def test_cvxpy_banners_stay_out_of_the_json_stream():
    pytest.importorskip("cvxpy")
    proc = subprocess.run([sys.executable, "-m", "otspec", "calc", "pareto", "--draft", "0.5,0.3,0.2", "--target",
                           "0.2,0.3,0.5", "--rejection", "0.1", "--method", "cvxpy", "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rejection"] == 0.1


def test_logged_rows_files_refuse_fractional_ids_and_vocabulary(tmp_path):
    """A float vocabulary size or float token ids were truncated silently (issue 25); now the field is named."""
    from otspec.sources import load_logged_rows, log_rows, random_markov

    draft, target = random_markov(5, 1.0, seed=1)
    log_rows(draft, target, 2, 6, seed=0).save(tmp_path / "rows.npz")
    with np.load(tmp_path / "rows.npz") as data:
        arrays = {k: data[k] for k in data.files}
    for field, value, match in (("vocab_size", np.array(5.7), "vocab_size must be one integer"),
                                ("tokens", arrays["tokens"] + 0.5, "tokens holds ids"),
                                ("row_tokens", arrays["row_tokens"].astype(str), "row_tokens must be an array of numbers")):
        bad = dict(arrays, **{field: value})
        np.savez(tmp_path / "bad.npz", **bad)
        with pytest.raises(ValueError, match=match):
            load_logged_rows(tmp_path / "bad.npz")
    np.savez(tmp_path / "whole.npz", **dict(arrays, tokens=arrays["tokens"].astype(float)))  # whole floats: fine
    assert load_logged_rows(tmp_path / "whole.npz").n_steps == 12


def test_stationary_chains_are_not_copied_per_step():
    """Issue 25: calc rejections on a stationary chain built T copies of its matrices (T = 10^6 at V = 50: 20 GB).
    One matrix broadcast over the steps gives the same values, read-only."""
    from otspec.pairs import markov_chains
    from otspec.sources import random_markov
    from otspec.theory import rejections

    d, t = random_markov(6, 1.0, seed=2)
    (_, P), (_, Q) = markov_chains(d, t, 50_000)
    assert P.strides[0] == 0 and Q.strides[0] == 0 and not P.flags.writeable
    long = rejections.rejections_per_position(d, t, 50_000)
    m, out = t.initial.copy(), [float(0.5 * np.abs(d.initial - t.initial).sum())]
    tv = 0.5 * np.abs(d.transition - t.transition).sum(axis=1)
    for _ in range(4):
        out.append(float(m @ tv))
        m = m @ t.transition
    assert np.allclose(long[:5], out, atol=1e-12)
