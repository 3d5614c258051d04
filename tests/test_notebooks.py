"""Every notebook in notebooks/ runs headlessly (small sizes through OTSPEC_NB_SCALE)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
#: Size knob handed to the notebooks in the test suite (1 = full size).
NB_SCALE = os.environ.get("OTSPEC_NB_SCALE", "0.02")


def test_notebooks_exist():
    assert NOTEBOOKS, "notebooks/ holds no notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, monkeypatch):
    monkeypatch.setenv("OTSPEC_NB_SCALE", NB_SCALE)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    import sys

    sys.path.insert(0, str(path.parent))  # notebooks/execute.py: how make demo runs them (kernels over local sockets)
    try:
        from execute import execute
    finally:
        sys.path.remove(str(path.parent))
    nb = execute(path, NB_SCALE, timeout=600)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    # no noise in the outputs: a warning printed by a library (tqdm's "IProgress not found") is silenced at source
    noise = [o.text[:120] for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
             if o.output_type == "stream" and o.name == "stderr" and "Warning" in o.text]
    assert noise == []
    # every figure a cell renders is shown (a renderer must not switch the kernel away from inline)
    for cell in nb.cells:
        if cell.cell_type == "code" and "render(" in cell.source:
            shown = [o for o in cell.outputs if "image/png" in o.get("data", {})]
            assert len(shown) >= cell.source.count("render("), cell.source[:80]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_committed_notebooks_hold_their_outputs(path):
    """Notebooks are committed executed (``make demo`` regenerates them): every code cell has run."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.get("execution_count") for c in code)
    assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs)
    assert not any(o.output_type == "stream" and o.name == "stderr" and "Warning" in o.text for c in code
                   for o in c.outputs)
