"""numba, when installed: ``njit`` compiles a kernel (cached on disk), else leaves the Python function as it is.

Modules of kernels are imported only where a kernel runs, so ``import otspec`` does not load numba.
"""

from __future__ import annotations

import importlib.util

__all__ = ["available", "njit"]


def available() -> bool:
    """Whether kernels can be compiled (numba is installed)."""
    return importlib.util.find_spec("numba") is not None


def njit(fn):
    """``fn`` compiled in nopython mode (cached, GIL released), or ``fn`` itself without numba."""
    if not available():  # pragma: no cover - numba is a dependency
        return fn
    import numba

    return numba.njit(cache=True, nogil=True)(fn)
