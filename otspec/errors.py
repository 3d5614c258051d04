"""Errors and solver settings shared by every module.

* :class:`SizeLimitError` — a problem is too large to enumerate or solve within a stated
  limit. It is raised *before* anything of that size is allocated, and it is a
  ``ValueError`` (the input is what is wrong), so callers that want "a value or nothing"
  catch this class, never a message text.
* :class:`HorizonError` — sequences longer than a source's horizon were asked for.
* :class:`SolveError` — a solver failed, or returned a solution that misses its constraints.
  Each solver family keeps a named subclass (``BlockOTSolveError``, ``OTMSolveError``,
  ``ParetoSolveError``) for callers that catch one family.
* :func:`highs_options` — the one set of HiGHS settings every linear programme uses.
"""

from __future__ import annotations

__all__ = ["HorizonError", "SizeLimitError", "SolveError", "highs_options"]


class SizeLimitError(ValueError):
    """A size is beyond a stated limit; nothing of that size was allocated.

    Parameters
    ----------
    message : str
        Names the size, the limit (with its constant's name) and what to do instead.
    size, limit : int, optional
        The offending size and the limit, for callers that report them.
    """

    def __init__(self, message: str, *, size: int | None = None, limit: int | None = None):
        super().__init__(message)
        self.size = size
        self.limit = limit


class HorizonError(ValueError):
    """A computation needs longer sequences than a source's horizon supports (a ``ValueError``: the input is what
    is wrong). Callers that report one optional value among others (``calc block``'s columns) catch this class.
    ``horizon`` and ``length`` (the sequence length asked for) are set where known."""

    def __init__(self, message: str, *, horizon: int | None = None, length: int | None = None):
        super().__init__(message)
        self.horizon, self.length = horizon, length


class SolveError(RuntimeError):
    """A solver reported no optimum, or its solution violates the constraints."""


def highs_options(**overrides) -> dict:
    """HiGHS options for ``scipy.optimize.linprog(method="highs-ds")``.

    Presolve is off: it declares feasible transport problems with masses near 1e-10
    infeasible (spec ``multi_draft_otm.md`` §2, implementation note). Feasibility
    tolerances are 1e-10 instead of the default 1e-7, which lets optimal values drift in
    the seventh digit. ``overrides`` replace or add options.

    >>> highs_options()["presolve"]
    False
    """
    return {"presolve": False, "primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10,
            **overrides}
