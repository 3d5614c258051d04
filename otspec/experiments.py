"""Figure data functions by name (the data half of :data:`otspec.figures.FIGURES`), under an old import path.

Deprecated: read :data:`otspec.figures.FIGURES` (each figure's ``data``) and
:mod:`otspec.figures.common` instead.
"""

import warnings

from .figures import FIGURES
from .figures.common import coverage, max_abs_difference

warnings.warn("otspec.experiments is deprecated: use otspec.figures.FIGURES[name].data and otspec.figures.common",
              DeprecationWarning, stacklevel=2)


#: Figures by name: data function (each figure's renderer and report section are in the registry).
EXPERIMENTS = {name: figure.data for name, figure in FIGURES.items()}

__all__ = ["EXPERIMENTS", "coverage", "max_abs_difference"]
