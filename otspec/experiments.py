"""Figure data functions by name (the data half of :data:`otspec.figures.FIGURES`)."""

from .figures import FIGURES
from .figures.common import coverage, max_abs_difference

#: Figures by name: data function (each figure's renderer and report section are in the registry).
EXPERIMENTS = {name: figure.data for name, figure in FIGURES.items()}

__all__ = ["EXPERIMENTS", "coverage", "max_abs_difference"]
