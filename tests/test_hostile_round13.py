"""Round thirteen of hostile inputs (issue 43): one test per class of finding, each able to fail on the old code."""

from __future__ import annotations

import pytest

from tests.cli_refusals import refused


def test_sweep_tables_with_long_rows_list_cells_or_no_x(tmp_path, capsys):
    """A CSV row longer than its header was drawn from shifted columns (pandas made the first field an index); a
    Parquet column of lists was drawn as the labels '[1]', '[2]'; an x column empty in every row gave a message about
    rows sharing an x."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    from otspec.figures.sweep import main as sweep_plot

    (tmp_path / "ragged.csv").write_text("L,exact_accepted\n1,0.5,9,9\n2,0.6\n")
    (tmp_path / "no_x.csv").write_text("L,exact_accepted\nnan,0.5\nnan,0.6\n")
    pd.DataFrame({"L": [[1], [2]], "exact_accepted": [0.5, 0.6]}).to_parquet(tmp_path / "list_x.parquet")
    pd.DataFrame({"L": [1, 2], "exact_accepted": [{"a": 0.5}, {"a": 0.6}]}).to_parquet(tmp_path / "dict_y.parquet")
    for name, needle in (("ragged.csv", "more fields than the header"), ("no_x.csv", "'L' is empty in every row"),
                         ("list_x.parquet", "ndarray cell"), ("dict_y.parquet", "dict cell")):
        argv = [str(tmp_path / name), "--x", "L", "--y", "exact_accepted", "--out", str(tmp_path / "x.png")]
        refused(sweep_plot, argv, capsys, needle)
        assert not (tmp_path / "x.png").exists()
    # the same tables, well formed, still draw; a short row is a missing value, as CSV readers agree
    (tmp_path / "short.csv").write_text("L,exact_accepted\n1,0.5\n2\n3,0.7\n")
    pd.DataFrame({"L": ["a", "b"], "exact_accepted": [0.5, 0.6]}).to_parquet(tmp_path / "text_x.parquet")
    for name in ("short.csv", "text_x.parquet"):
        assert sweep_plot([str(tmp_path / name), "--x", "L", "--y", "exact_accepted", "--out",
                           str(tmp_path / f"{name}.png")]) == 0
        assert (tmp_path / f"{name}.png").stat().st_size > 0


def test_a_runaway_head_curve_is_refused_by_the_record_bound(tmp_path):
    """read_curve had its own literal bound; a curve file past MAX_RECORD_BYTES is now refused unread by the same
    check as every record, naming the constant."""
    from llm_bridge.head_curve import read_curve
    from otspec.engine.record import MAX_RECORD_BYTES

    path = tmp_path / "curve.json"
    with open(path, "wb") as fh:  # sparse: no disk is used
        fh.truncate(MAX_RECORD_BYTES + 1)
    with pytest.raises(ValueError, match="MAX_RECORD_BYTES"):
        read_curve(path)
