"""The progress bar every long run shows: ``tqdm``'s notebook widget where ipywidgets is installed, else its text
bar (``tqdm.auto`` without ipywidgets warns "IProgress not found" into every notebook that runs a simulation)."""

from __future__ import annotations

from importlib.util import find_spec

if find_spec("ipywidgets") is not None:
    from tqdm.auto import tqdm
else:
    from tqdm import tqdm

__all__ = ["tqdm"]
