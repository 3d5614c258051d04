"""The files ``llm_bridge.validate`` writes: JSON record, Markdown summary, plot (drawn by :mod:`otspec.figures.llm`)."""

from __future__ import annotations

import json
from pathlib import Path

from otspec.figures.llm import record_markdown, render_record

__all__ = ["write_outputs"]


def write_outputs(record: dict, out_dir, stem: str) -> list[Path]:
    """``out_dir/stem.json``, ``.md`` and ``.png``; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.json", out_dir / f"{stem}.md", out_dir / f"{stem}.png"]
    paths[0].write_text(json.dumps(record, indent=1) + "\n")
    paths[1].write_text(record_markdown(record))
    render_record(record).savefig(paths[2])
    return paths
