"""Figures and the report: written by code, data beside every PNG."""

from __future__ import annotations

import json
import subprocess
import sys

from otspec import theory
from otspec.plot import FIGURES


def check_small_report(tmp_path):
    """What a report at a small scale must hold. The README's ``python -m otspec.report`` line writes one at
    ``--scale 0.02`` in tests/test_readme.py::test_shell_examples_run, which calls this on it (the same run, not a
    second one: it takes most of a minute)."""
    report = tmp_path / "REPORT.md"
    text = report.read_text()
    for stem in (figure.stem for figure in FIGURES.values()):
        png, js = tmp_path / f"{stem}.png", tmp_path / f"{stem}.json"
        assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
        data = json.loads(js.read_text())
        assert data["figure"] == stem
        assert f"({stem}.png)" in text
    header = text.split("\n## ")[0]  # says which sections this run computed and which read committed records
    computed, recorded = header.split("Computed by this run")[1].split("Read from committed records")
    assert {f.stem for f in FIGURES.values() if f.reads_records} == {"real_models", "logged_rows", "trees_logged"}
    for figure in FIGURES.values():
        assert f"`{figure.stem}`" in (recorded if figure.reads_records else computed)
    token = json.loads((tmp_path / "token_verification.json").read_text())
    for s in token["series"]:
        for L, closed, exact in zip(token["draft_lengths"], s["closed_form"], s["exact"], strict=True):
            assert abs(closed - theory.bernoulli_expected_accepted_token(s["draft_p"], token["target_p"], L)) < 1e-12
            assert abs(exact - closed) < 1e-12


def test_plot_cli_out_and_errors(tmp_path):
    out = tmp_path / "x" / "token.png"
    proc = subprocess.run([sys.executable, "-m", "otspec.plot", "token", "--out", str(out), "--scale", "0.01"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert out.exists() and out.with_suffix(".json").exists()
    assert str(out) in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "otspec.plot", "nosuch"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "otspec.plot", "token", "--out", str(tmp_path / "a.pdf")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and ".png" in bad.stderr


def _plot(argv, capsys) -> tuple[int, str, str]:
    """``python -m otspec.plot ARGV`` through its ``main`` in this process (test_plot_cli_out_and_errors runs the
    module itself): (exit status, stdout, stderr)."""
    from otspec.plot import main

    try:
        status = main(argv)
    except SystemExit as stop:  # argparse
        status = stop.code
    out = capsys.readouterr()
    return status, out.out, out.err


def test_pair_figures_draw_the_users_pair(tmp_path, capsys):
    """`plot pareto --draft/--target` used to draw the built-in pair in its sequence panel."""
    out = tmp_path / "p.png"
    status, _, err = _plot(["pareto", "--draft", "0.6,0.4", "--target", "0.3,0.7", "--out", str(out), "--scale",
                            "0.05"], capsys)
    assert status == 0, err
    seq = json.loads(out.with_suffix(".json").read_text())["sequence"]
    assert seq["draft"] == {"type": "iid", "probs": [0.6, 0.4]} and seq["target"]["probs"] == [0.3, 0.7]
    for src, role in ((tmp_path / "d.json", "draft"), (tmp_path / "t.json", "target")):
        probs = [0.6, 0.3, 0.1] if role == "draft" else [0.2, 0.3, 0.5]
        src.write_text(json.dumps({"type": "markov", "initial": probs, "transition": [probs, probs[::-1], probs]}))
    for name in ("mcsd_fig3", "trees", "rejections", "block_e2e"):
        status, _, err = _plot([name, "--draft-source", str(tmp_path / "d.json"), "--target-source",
                                str(tmp_path / "t.json"), "--out", str(tmp_path / f"{name}.png"), "--scale", "0.02"],
                               capsys)
        assert status == 0, (name, err)
        data = json.loads((tmp_path / f"{name}.json").read_text())
        assert "user pair" in json.dumps(data), name
    status, _, err = _plot(["token", "--draft", "0.5", "--target", "0.5"], capsys)
    assert status == 2 and "take no pair" in err
    status, help_text, _ = _plot(["--help"], capsys)
    assert status == 0 and "--draft-source" in help_text and "pareto" in help_text and "(default:" in help_text


def test_report_reads_the_records_it_is_told(tmp_path):
    """The record figures read the committed records by default and another folder when told (``--records``):
    copied records are drawn from there, each with its own plot and summary beside the figure."""
    import shutil
    from pathlib import Path

    figures = Path(__file__).resolve().parent.parent / "figures"
    shutil.copy(figures / "llm_default.json", tmp_path / "llm_default.json")
    shutil.copy(figures / "llm_default_rows.npz", tmp_path / "llm_default_rows.npz")
    from otspec.plot import write_figure

    out = tmp_path / "out"
    _, _, data = write_figure("real_models", out / "real_models.png", records_dir=tmp_path)
    assert [r.file for r in data["records"]] == ["llm_default.json"]
    assert (out / "llm_default.png").stat().st_size > 10_000 and (out / "llm_default.md").exists()
    _, _, logged = write_figure("logged_rows", out / "logged_rows.png", scale=0.02, records_dir=tmp_path)
    assert [log["file"] for log in logged["logs"]] == ["llm_default_rows.npz"]
    from otspec.figures import RECORDS_DIR

    assert RECORDS_DIR == figures  # the default: the committed records, whatever the output folder
    _, _, committed = write_figure("real_models", out / "committed.png")
    read = {r.file for r in committed["records"] + committed["adaptive"]}
    assert read and read <= {p.name for p in figures.glob("llm_*.json")}
    assert {"llm_default.json", "llm_adaptive_eagle.json"} <= read
    assert not (figures / "committed.png").exists()  # nothing written beside the committed records


def test_prediction_check_flags_runs_that_miss():
    from otspec.figures.llm import prediction_check, prediction_check_markdown

    def run(mean, pred, low, high, **kw):
        return {"verifier": "block", "L": 4, "block_efficiency": {"mean": mean, "low": mean - 0.05, "high": mean + 0.05},
                "predicted_block_efficiency": pred, "predicted_block_efficiency_interval": {"low": low, "high": high},
                **kw}

    record = {"file": "llm_x.json", "model_pair": {"target": "big", "draft": "small", "device": "cpu"}, "settings": {},
              "runs": [run(1.40, 1.35, 1.30, 1.45),  # holds: +3.7 %, inside
                       run(1.40, 1.20, 1.10, 1.45),  # inside but +16.7 %
                       run(1.40, 1.38, 1.30, 1.39)],  # +1.4 % but outside
              "tree_runs": [{"verifier": "kseq", "tree": "2x1", "block_efficiency": {"mean": 1.3, "low": 1.2,
                                                                                      "high": 1.4},
                             "predicted_block_efficiency": None}]}  # no prediction: left out
    rows = prediction_check([record])
    assert [(r.within_tolerance, r.inside_interval) for r in rows] == [(True, True), (False, True),
                                                                             (True, False)]
    assert abs(rows[1].relative_error - (1.40 / 1.20 - 1)) < 1e-12
    table = "\n".join(prediction_check_markdown(rows))
    assert "1 of 3 runs hold" in table and table.count("**no**") == 2


def test_prediction_check_reads_the_fixed_lengths_of_a_specdecpp_record():
    """An adaptive record's fixed-K runs are token-verification chain runs: predicted ones are checked (K as L),
    threshold rules (no prediction) are not."""
    from otspec.figures.llm import prediction_check

    be = {"mean": 1.5, "low": 1.4, "high": 1.6}
    record = {"file": "llm_adaptive_x.json", "model_pair": {"target": "big", "draft": "small", "device": "cpu"},
              "settings": {}, "head": {},
              "fixed": [{"policy": "fixed", "value": 3, "block_efficiency": be, "predicted_block_efficiency": 1.45,
                         "predicted_block_efficiency_interval": {"low": 1.3, "high": 1.6}},
                        {"policy": "fixed", "value": 4, "block_efficiency": be}],
              "threshold": [{"policy": "threshold", "value": 0.5, "block_efficiency": be}]}
    rows = prediction_check([record])
    assert [(r.verifier, r.draft, r.within_tolerance, r.inside_interval) for r in rows] == [
        ("token", "L = 3", True, True)]


def test_the_report_opens_with_a_summary_and_its_contents():
    """The committed report starts with a one-screen summary (each figure's answer computed from its data, linked to
    its section; the exactness and coverage over every section) and a contents list of every section (it was 976
    lines with neither)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "figures" / "REPORT.md").read_text()
    top, rest = text.split("## Contents", 1)
    header, summary = top.split("## Summary", 1)
    titles = [line[3:] for line in rest.splitlines() if line.startswith("## ")]
    listed = [line for line in rest.split("\n## ", 1)[0].splitlines() if line.startswith("- [")]
    assert len(header.splitlines()) < 15 and len(listed) == len(titles) >= 10
    assert all(f"[{t}]" in line for t, line in zip(titles, listed, strict=True))
    bullets = [line for line in summary.splitlines() if line.startswith("- ")]
    assert 6 <= len(bullets) <= 12  # one screen
    anchors = {line.split("](", 1)[1].rstrip(")") for line in listed}
    assert all(link in anchors for line in bullets for link in re.findall(r"\[more\]\((#[^)]+)\)", line))
    exact = re.search(r"agree to at most ([0-9.e-]+)\.", summary)
    assert exact and float(exact.group(1)) < 1e-12
    # the headline's numbers are the section's: E[N_rej] of Yin et al.'s Theorem 1
    formula = re.search(r"Formula \(1\): E\[N_rej\] = ([0-9.]+)", rest).group(1)
    assert f"E[N_rej] = {formula} exactly" in summary
