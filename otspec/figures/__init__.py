"""Every figure of otspec in one registry: name → data function, renderer, report section.

A figure is a :class:`Figure`: ``data(scale=..., **pair)`` computes a JSON-ready dict (every
number by code: closed forms from :mod:`otspec.theory`, exact values from the engines,
estimates with their intervals), ``render(data)`` draws a :class:`matplotlib.figure.Figure`
(no pyplot state, no backend switch), and ``section(data, png)`` writes its part of
``REPORT.md``. ``python -m otspec.plot`` and ``python -m otspec.report`` iterate this
registry; a new figure is one :func:`register` call in one of the modules below (or a new
module added to ``_MODULES``). Curve names and styles come from the verifier classes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FIGURES", "RECORDS_DIR", "SCRATCH_DIR", "Figure", "register"]

#: The committed records of real-model runs (``figures/`` of a checkout), which the record figures read unless told
#: another folder; figures are written to :data:`SCRATCH_DIR` unless told (``make figures`` remakes ``figures/``).
RECORDS_DIR = Path(__file__).resolve().parents[2] / "figures"
#: Where ``python -m otspec.plot`` and ``python -m otspec.report`` write by default (relative to the working folder).
SCRATCH_DIR = Path("build") / "figures"


@dataclass(frozen=True)
class Figure:
    """One figure: its CLI name, file stem, data function, renderer and report section.

    ``pair`` says whether ``data`` accepts a user's ``draft=``/``target=`` probability rows
    (figures of one draft/target pair); ``files(data, out_dir)``, when set, writes the figure's own
    further files (the real-pair records' plots and summaries) and returns their paths;
    ``reads_records`` marks figures built from committed files of real-model runs (read from the
    records folder, not rerun) rather than computed from scratch; ``headline(data)``, when set, gives the
    figure's answer in one sentence for the summary atop the report (computed from the data, never typed in);
    ``scaled`` is False for figures with nothing to simulate (exact numbers or committed records), whose ``data``
    takes ``scale`` only to share the registry's signature.
    """

    name: str
    stem: str
    data: Callable[..., dict]
    render: Callable
    section: Callable
    pair: bool = False
    files: Callable | None = None
    reads_records: bool = False
    headline: Callable | None = None
    scaled: bool = True


#: Figures by name, in report order.
FIGURES: dict[str, Figure] = {}


def register(name: str, stem: str, *, render: Callable, section: Callable, pair: bool = False,
             files: Callable | None = None, reads_records: bool = False, headline: Callable | None = None,
             scaled: bool = True):
    """Decorator registering a data function as figure ``name`` (file ``figures/<stem>.png``)."""

    def wrap(data: Callable) -> Callable:
        if name in FIGURES:
            raise ValueError(f"figure {name!r} is registered twice")
        FIGURES[name] = Figure(name, stem, data, render, section, pair, files, reads_records, headline, scaled)
        return data

    return wrap


_MODULES = ("single", "multidraft", "trees_optimum", "trees_logged", "rejections", "pareto", "adaptive", "llm", "logged")
for _module in _MODULES:
    importlib.import_module(f"{__name__}.{_module}")
