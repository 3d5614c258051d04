"""A real pair's record read by a person (issue 45 item 7): the summary in sections with the answer first, the
terminal table ``validate`` prints, the losslessness check's own settings said against the runs', and plots with
whole-number axes and every prediction drawn with its interval."""

from __future__ import annotations

import json

import matplotlib
import numpy as np

matplotlib.use("Agg")

from otspec.engine.record import results_table  # noqa: E402
from otspec.figures import RECORDS_DIR  # noqa: E402
from otspec.figures import llm as llm_figures  # noqa: E402
from otspec.figures.llm_markdown import record_markdown  # noqa: E402

DEFAULT = json.loads((RECORDS_DIR / "llm_default.json").read_text())


def test_the_summary_opens_with_the_fastest_run_and_is_sectioned():
    md = record_markdown(DEFAULT)
    fastest = max(DEFAULT["runs"], key=lambda r: r["speedup"])
    first = md.split("\n")[2]
    assert first.startswith("**Result.** Fastest run: ") and f"{fastest['speedup']:.2f}×" in first
    assert f"L = {fastest['L']}" in first and f"{fastest['predicted_speedup']:.2f}×" in first
    heads = [line for line in md.split("\n") if line.startswith("### ")]
    assert heads == ["### Setup", "### Timing and the baseline", "### Drafter and the target's call times",
                     "### Runs", "### Losslessness"]
    runs = md.split("### Runs")[1].split("How to read")[0]
    assert runs.count("\n| token | ") == sum(r["verifier"] == "token" for r in DEFAULT["runs"])
    assert "How to read the columns:" in md and "t_target(n) is one target call that scores n tokens for each of the " \
        f"batch's {DEFAULT['profile']['batch_size']} sequences" in md


def test_the_losslessness_section_says_its_own_settings_against_the_runs():
    md = record_markdown(DEFAULT).split("### Losslessness")[1]
    loss, s = DEFAULT["lossless"], DEFAULT["settings"]
    assert loss["sampling"]["top_k"] != s["top_k"]  # the check's rows are truncated; the runs' are not
    assert f"truncated to their top {loss['sampling']['top_k']} tokens (the runs sampled with top-k {s['top_k']}" in md
    assert f"length L = {loss['draft_length']}" in md
    assert loss["samples"] == 0 and "G-test against plain sampling was not run" in md


def test_the_terminal_table_has_a_row_per_run_and_the_baseline():
    table = results_table(DEFAULT).split("\n")
    assert table[0].split()[:2] == ["verifier", "draft"] and set(table[1]) <= {"-", " "}
    rows = table[2:2 + len(DEFAULT["runs"])]
    for row, run in zip(rows, DEFAULT["runs"], strict=True):
        cells = row.split()
        assert cells[:2] == [run["verifier"], f"L={run['L']}"]
        assert f"{run['block_efficiency']['mean']:.3f}" in row and f"{run['speedup']:.2f}" in row
    assert table[2 + len(DEFAULT["runs"])] == f"plain sampling: {DEFAULT['baseline']['tokens_per_s']:.1f} tokens/s"


def test_the_plot_has_whole_number_axes_and_draws_a_single_prediction_with_its_interval():
    import matplotlib.pyplot as plt

    one = {**DEFAULT, "runs": [DEFAULT["runs"][0]], "tree_runs": None}
    fig = llm_figures.render_record(one)
    ax_be, ax_sp, ax_t, ax_pos = fig.axes[:4]
    fig.canvas.draw()
    for ax in (ax_be, ax_sp, ax_t, ax_pos):
        lo, hi = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert ticks and all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)
    run = one["runs"][0]
    for ax, value, iv in ((ax_be, run["predicted_block_efficiency"], run["predicted_block_efficiency_interval"]),
                          (ax_sp, run["predicted_speedup"], run["predicted_speedup_interval"])):
        dashes = [line for line in ax.get_lines() if line.get_marker() == "_"]
        assert any(np.isclose(line.get_ydata()[0], value) for line in dashes)  # the prediction, drawn at one L
        bars = [seg for c in ax.collections for seg in c.get_segments()]
        assert any(np.allclose([seg[0][1], seg[1][1]], [iv["low"], iv["high"]]) for seg in bars)  # its interval
    plt.close(fig)


def test_plot_record_draws_a_committed_record_into_the_scratch_folder(tmp_path, monkeypatch):
    committed = tmp_path / "figures"
    committed.mkdir()
    (committed / "llm_default.json").write_text(json.dumps(DEFAULT))
    monkeypatch.setattr(llm_figures, "RECORDS_DIR", committed)
    monkeypatch.chdir(tmp_path)
    assert llm_figures.record_main([str(committed / "llm_default.json")]) == 0
    assert sorted(p.name for p in committed.iterdir()) == ["llm_default.json"]  # the committed folder untouched
    assert (tmp_path / "build" / "figures" / "llm_default.md").is_file()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "llm_x.json").write_text(json.dumps(DEFAULT))  # a user's own record: drawn beside it
    assert llm_figures.record_main([str(mine / "llm_x.json")]) == 0 and (mine / "llm_x.png").is_file()
    assert llm_figures.record_main([str(mine / "llm_x.json"), "--out-dir", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "llm_x.md").is_file()
