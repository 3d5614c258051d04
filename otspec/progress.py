"""The progress bar every long run shows: ``tqdm``'s notebook widget where ipywidgets is installed, else its text
bar. Without ipywidgets, ``tqdm.auto`` (which transformers imports too) warns "IProgress not found" into every
notebook that runs a simulation or loads a model; that one warning is filtered here, where the text bar is chosen."""

from __future__ import annotations

import warnings
from importlib.util import find_spec

if find_spec("ipywidgets") is not None:
    from tqdm.auto import tqdm
else:
    from tqdm import TqdmWarning, tqdm

    warnings.filterwarnings("ignore", message="IProgress not found", category=TqdmWarning)

__all__ = ["tqdm"]
