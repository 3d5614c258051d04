"""Logged rows (otspec.sources.logged): truncation, the file, the positional source, and its checks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from otspec.sources import (
    LoggedRows,
    PositionalSource,
    load_logged_rows,
    log_rows,
    random_markov,
    source_from_json,
)
from otspec.sources.logged import FORMAT, truncate_rows


@pytest.fixture(scope="module")
def markov_log():
    d, t = random_markov(40, 1.0, seed=0)
    return d, t, log_rows(d, t, 5, 12, top_p=0.9, seed=1)


def full_rows(d, t, log, path):
    a, b = log.path_offsets[path], log.path_offsets[path + 1]
    tokens = log.tokens[a:b][None, :]
    return d.path_probs(tokens, include_next=False)[0], t.path_probs(tokens, include_next=False)[0]


def test_truncation_keeps_each_rows_top_p_set_and_records_the_tail(markov_log):
    d, t, log = markov_log
    for path in range(log.n_paths):
        P, Q = full_rows(d, t, log, path)
        a = log.path_offsets[path]
        for i in range(P.shape[0]):
            lo, hi = log.row_offsets[a + i], log.row_offsets[a + i + 1]
            ids = log.row_tokens[lo:hi]
            np.testing.assert_allclose(log.draft[lo:hi], P[i, ids], rtol=0, atol=1e-15)
            np.testing.assert_allclose(log.target[lo:hi], Q[i, ids], rtol=0, atol=1e-15)
            out = np.setdiff1d(np.arange(40), ids)
            assert abs(log.draft_tail[a + i] - P[i, out].sum()) <= 1e-15
            assert abs(log.tail_overlap[a + i] - np.minimum(P[i, out], Q[i, out]).sum()) <= 1e-15
            for row in (P[i], Q[i]):  # the kept set holds each row's smallest top-0.9 set
                top = np.sort(row)[::-1]
                need = int(np.searchsorted(np.cumsum(top), 0.9 * row.sum())) + 1
                assert row[ids].sum() >= top[:need].sum() - 1e-15 >= 0.9 - 1e-12
    # the tokens of the log follow the target: they are the paths log_rows sampled
    assert log.tokens.shape == (60,) and log.n_paths == 5


def test_overlap_tail_gives_the_full_rows_total_variation_and_renormalise_the_top_p_rows(markov_log):
    d, t, log = markov_log
    P, Q = full_rows(d, t, log, 2)
    a, b = log.path_offsets[2], log.path_offsets[3]
    np.testing.assert_allclose(log.overlaps("overlap")[a:b], np.minimum(P, Q).sum(axis=1), rtol=0, atol=1e-14)
    offsets, ids, p, q = log.segments("renormalise")
    assert ids.max() < 40 and log.vocab("renormalise") == 40 and log.vocab("overlap") == 43
    np.testing.assert_allclose(np.add.reduceat(p, offsets[:-1]), 1.0, rtol=0, atol=1e-14)
    step = a + 3
    kept = ids[offsets[step]:offsets[step + 1]]
    np.testing.assert_allclose(q[offsets[step]:offsets[step + 1]], Q[3, kept] / Q[3, kept].sum(), rtol=0, atol=1e-15)
    dp, tp = log.path_pair(2)  # the positional replay of path 2
    assert isinstance(dp, PositionalSource) and dp.rows.shape == (12, 43)
    np.testing.assert_allclose(tp.rows.sum(axis=1), 1.0, atol=1e-14)
    np.testing.assert_allclose(np.minimum(dp.rows, tp.rows).sum(axis=1), np.minimum(P, Q).sum(axis=1), atol=1e-14)


def test_max_kept_caps_each_rows_share_of_the_support():
    rng = np.random.default_rng(0)
    P, Q = rng.dirichlet(np.ones(200), size=6), rng.dirichlet(np.ones(200), size=6)
    arrays = truncate_rows(P, Q, top_p=0.99, max_kept=5)
    assert np.diff(arrays["row_offsets"]).max() <= 10
    np.testing.assert_allclose(np.add.reduceat(arrays["target"], arrays["row_offsets"][:-1]) + arrays["target_tail"],
                               1.0, atol=1e-14)


def test_the_file_round_trips_and_windows_stay_inside_paths(tmp_path, markov_log):
    *_, log = markov_log
    log.save(tmp_path / "rows.npz")
    back = load_logged_rows(tmp_path / "rows.npz")
    for name in ("path_offsets", "tokens", "row_offsets", "row_tokens", "draft", "target", "draft_tail",
                 "target_tail", "tail_overlap"):
        np.testing.assert_array_equal(getattr(back, name), getattr(log, name))
    assert back.meta["top_p"] == 0.9 and back.summary()["paths"] == 5
    w = back.windows(4)
    assert w.size == 5 * (12 - 4)
    path_of = np.searchsorted(back.path_offsets, w, side="right")
    assert np.all(np.searchsorted(back.path_offsets, w + 4, side="right") == path_of)
    with pytest.raises(ValueError, match="no path has the 13 steps"):
        back.windows(12)
    np.testing.assert_array_equal(back.windows(1, span=5), w)  # a common span: the same starts for every L
    with pytest.raises(ValueError, match="at least 5 steps"):
        back.windows(4, span=3)


def _arrays(log):
    return {k: np.array(getattr(log, k)) for k in ("path_offsets", "tokens", "row_offsets", "row_tokens", "draft",
                                                   "target", "draft_tail", "target_tail", "tail_overlap")}


@pytest.mark.parametrize("edit, message", [
    (lambda a: a["draft"].__setitem__(0, np.nan), "NaN"),
    (lambda a: a["draft"].__setitem__(0, a["draft"][0] + 0.01), "sums to"),
    (lambda a: a["target"].__setitem__(1, -0.1), "non-negative|sums to"),
    (lambda a: a["row_tokens"].__setitem__(0, 10_000), r"\[0, 40\)"),
    (lambda a: a["row_tokens"].__setitem__(1, a["row_tokens"][0]), "increase"),
    (lambda a: a["tail_overlap"].__setitem__(0, 1.0), "tail_overlap"),
    (lambda a: a.__setitem__("path_offsets", np.array([0, 0, 60])), "path_offsets"),
    (lambda a: a.__setitem__("draft_tail", a["draft_tail"][:-1]), "one value per step"),
])
def test_bad_logs_are_refused_with_the_problem_named(markov_log, edit, message):
    *_, log = markov_log
    arrays = _arrays(log)
    edit(arrays)
    with pytest.raises(ValueError, match=message):
        LoggedRows(vocab_size=40, **arrays)


def test_bad_files_are_refused(tmp_path, markov_log):
    *_, log = markov_log
    with pytest.raises(FileNotFoundError, match="no file"):
        load_logged_rows(tmp_path / "missing.npz")
    (tmp_path / "text.npz").write_text("not an archive")
    with pytest.raises(ValueError, match="not a numpy .npz"):
        load_logged_rows(tmp_path / "text.npz")
    np.savez(tmp_path / "other.npz", format=np.array("something/2"))
    with pytest.raises(ValueError, match="not an otspec logged-rows file"):
        load_logged_rows(tmp_path / "other.npz")
    arrays = _arrays(log)
    del arrays["tail_overlap"]
    np.savez(tmp_path / "short.npz", format=np.array(FORMAT), meta=np.array(json.dumps({})), vocab_size=np.array(40),
             **arrays)
    with pytest.raises(ValueError, match="lacks the arrays"):
        load_logged_rows(tmp_path / "short.npz")
    with pytest.raises(ValueError, match="tail"):
        log.segments("merge")
    with pytest.raises(ValueError, match="top_p"):
        truncate_rows(np.ones((1, 3)) / 3, np.ones((1, 3)) / 3, top_p=0.0)
    with pytest.raises(ValueError, match="one shape"):
        truncate_rows(np.ones((1, 3)) / 3, np.ones((1, 4)) / 4)


def test_positional_source_reads_row_t_at_step_t_whatever_came_before():
    rows = np.array([[0.2, 0.8, 0.0], [0.5, 0.25, 0.25], [0.0, 0.0, 1.0]])
    s = PositionalSource(rows)
    assert s.horizon == 3
    np.testing.assert_array_equal(s.next_probs([[0, 1], [1, 0]]), rows[[2, 2]])
    e = s.enumerate(3)
    np.testing.assert_allclose(e.probs, np.einsum("a,b,c->abc", *rows).ravel(), rtol=0, atol=1e-15)
    draws = s.sample(200_000, 3, np.random.default_rng(0))
    for t in range(3):
        np.testing.assert_allclose(np.bincount(draws[:, t], minlength=3) / 200_000, rows[t], atol=5e-3)
    assert source_from_json(s.to_json()).rows.tolist() == rows.tolist()
    with pytest.raises(ValueError, match="horizon"):
        s.sample(1, 4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="rows"):
        PositionalSource([[0.5, 0.6]])
