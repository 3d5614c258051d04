"""Helpers shared by the figure modules: matplotlib figures without pyplot, tables, checks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

__all__ = ["as_sources", "records_folder", "axes", "coverage", "describe", "fmt", "max_abs_difference", "new_figure", "style_of",
           "table"]


def as_sources(draft, target):
    """A user's pair as (draft, target) sources: probability rows become IID sources; checked for one vocabulary."""
    from ..pairs import check_pair
    from ..sources import IIDSource, Source

    pair = tuple(x if isinstance(x, Source) else IIDSource(x) for x in (draft, target))
    check_pair(*pair)
    return pair


def describe(source) -> str:
    """A short label of a source for titles and JSON."""
    return repr(source) if len(repr(source)) <= 120 else f"{type(source).__name__}(V={source.vocab_size})"


def new_figure(figsize=(7, 4.5), dpi=120):
    """A :class:`matplotlib.figure.Figure` that belongs to no pyplot state and switches no backend."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, dpi=dpi)


def axes(figsize=(7, 4.5), dpi=120, **subplots):
    """(figure, axes) from :func:`new_figure`."""
    fig = new_figure(figsize, dpi)
    return fig, fig.subplots(**subplots)


def style_of(verifier, **extra) -> dict:
    """Matplotlib keyword arguments for a verifier's curve: its ``label`` and ``style``."""
    return {"label": verifier.label, **verifier.style, **extra}


def table(header, rows) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(x, digits: int = 4) -> str:
    """A number for a report table ('-' for None)."""
    return "-" if x is None else f"{x:.{digits}f}"


def coverage(series_list, value_key: str, low_key: str, high_key: str, truth_key: str) -> tuple[int, int]:
    """How many intervals contain the reference value: (hits, total)."""
    hits = total = 0
    for s in series_list:
        for lo, hi, truth in zip(s[low_key], s[high_key], s[truth_key], strict=True):
            hits += int(lo <= truth <= hi)
            total += 1
    return hits, total


def max_abs_difference(series_list, a: str, b: str) -> float:
    """max |s[a] − s[b]| over every series."""
    return float(max(np.max(np.abs(np.subtract(s[a], s[b]))) for s in series_list))


def records_folder(records_dir) -> Path:
    """The folder of real-pair records a figure reads: it must exist (a mistyped ``--records`` drew an empty figure
    without a word)."""
    folder = Path(records_dir)
    if not folder.is_dir():
        raise ValueError(f"records folder {folder}: {'not a folder' if folder.exists() else 'does not exist'}")
    return folder


def check_records_given(records_dir, flag: str = "--records") -> Path:
    """A records folder the user named: it exists and holds at least one real-pair file (``llm_*.json`` naming a
    model pair or a forecast, ``llm_*_rows.npz``; a damaged one counts, its reader names it), else the record
    figures and sections would be drawn empty without a word."""
    from ..checks import file_problem
    from ..engine.record import MAX_RECORD_BYTES

    try:
        folder = records_folder(records_dir)
    except ValueError as exc:
        raise ValueError(f"{flag} {records_dir}: {str(exc).split(': ', 1)[-1]}") from None

    def holds_record(path: Path) -> bool:  # what the readers take up: they name a damaged one, a pipe, a device
        if path.is_dir() or not path.name.endswith((".json", "_rows.npz")):
            return False
        if path.name.endswith("_rows.npz") or file_problem(path):
            return True
        try:
            if path.stat().st_size > MAX_RECORD_BYTES:  # a sparse or runaway file: its reader refuses it unread
                return True
            data = path.read_bytes()
            if b'"model_pair"' in data or b'"kind": "forecast"' in data:
                return True
            json.loads(data)
        except (OSError, ValueError, RecursionError):  # damaged: the reader says so by name
            return True
        return False  # another JSON data file (a benchmark's output), no record

    if not any(holds_record(p) for p in folder.glob("llm_*")):
        raise ValueError(f"{flag} {records_dir}: holds no real-pair records (llm_*.json with a model pair, "
                         "llm_*_rows.npz)")
    return folder
