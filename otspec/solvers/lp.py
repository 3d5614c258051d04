"""One way to solve a linear programme: HiGHS through scipy, or the same LP through cvxpy.

Every LP in :mod:`otspec.solvers` is solved here, with :func:`~otspec.errors.highs_options`
(presolve off, feasibility tolerances 1e-10). Failures raise the caller's subclass of
:class:`~otspec.errors.SolveError`; a cvxpy status of ``optimal_inaccurate`` is accepted and
reported, and every caller re-checks the constraints of what it gets back.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass

import numpy as np

from ..errors import SolveError, highs_options

__all__ = ["HIGHS", "LPBackend", "check_method", "cvxpy_settings", "solve_lp"]


def check_method(method: str) -> str:
    """``"highs"`` or ``"cvxpy"``, else ``ValueError``."""
    if method not in ("highs", "cvxpy"):
        raise ValueError(f"method: expected 'highs' or 'cvxpy', got {method!r}")
    return method


def cvxpy_settings(solver: str | None) -> tuple[str | None, dict]:
    """(solver, options) for ``Problem.solve``: HIGHS if installed (presolve off, tolerances 1e-10),
    else CLARABEL, else cvxpy's own choice."""
    import cvxpy as cp  # lazily: cvxpy takes a second to import

    if solver is None:
        installed = cp.installed_solvers()
        solver = next((s for s in ("HIGHS", "CLARABEL") if s in installed), None)
    return solver, (highs_options(presolve="off") if solver == "HIGHS" else {})


@dataclass(frozen=True)
class LPBackend:
    """Which solver runs an LP: ``method`` ``"highs"`` (scipy's HiGHS dual simplex) or ``"cvxpy"`` with ``solver`` (a
    cvxpy solver name; default: the first installed of :func:`cvxpy_settings`), ``options`` overriding the solver's
    settings."""

    method: str = "highs"
    solver: str | None = None
    options: dict | None = None


#: HiGHS with its default settings.
HIGHS = LPBackend()


def solve_lp(c, *, A_ub=None, b_ub=None, A_eq=None, b_eq=None, bounds=(0, None), backend: LPBackend = HIGHS,
             what: str = "LP", error: type[SolveError] = SolveError) -> tuple[np.ndarray, str, str, str]:
    """Minimise c·x over {A_ub x ≤ b_ub, A_eq x = b_eq, bounds}; returns (x, status, message, label).

    ``bounds`` is one (low, high) pair for every variable or a list of pairs (``None`` = no
    bound). ``backend`` (:class:`LPBackend`) chooses the solver and its options. Raises ``error`` (naming ``what``)
    when the solver reports no optimum.
    """
    c = np.asarray(c, dtype=np.float64)
    method, solver, options = backend.method, backend.solver, backend.options
    if check_method(method) == "highs":
        # here, not at import: scipy.optimize takes a third of a second to import
        from scipy.optimize import linprog

        res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=bounds, method="highs-ds",
                      options=highs_options(**(options or {})))
        if res.status != 0 or res.x is None:
            raise error(f"HiGHS failed on the {what} ({c.size:,} variables): status {res.status}: {res.message}")
        return np.asarray(res.x), "optimal", str(res.message), "highs"
    import cvxpy as cp

    solver, settings = cvxpy_settings(solver)
    pairs = [bounds] * c.size if isinstance(bounds, tuple) else list(bounds)
    lo = np.array([-np.inf if b[0] is None else b[0] for b in pairs], dtype=np.float64)
    hi = np.array([np.inf if b[1] is None else b[1] for b in pairs], dtype=np.float64)
    x = cp.Variable(c.size)
    cons = []
    if np.isfinite(lo).any():
        cons.append(x[np.flatnonzero(np.isfinite(lo))] >= lo[np.isfinite(lo)])
    if np.isfinite(hi).any():
        cons.append(x[np.flatnonzero(np.isfinite(hi))] <= hi[np.isfinite(hi)])
    if A_eq is not None:
        cons.append(A_eq @ x == b_eq)
    if A_ub is not None:
        cons.append(A_ub @ x <= b_ub)
    problem = cp.Problem(cp.Minimize(c @ x), cons)
    try:
        with _stdout_to_stderr():  # a solver's banner must not land in a JSON stream on stdout
            problem.solve(solver=solver, **{"verbose": False, **settings, **(options or {})})
    except cp.error.SolverError as exc:
        raise error(f"cvxpy solver {solver} failed on the {what}: {exc}") from exc
    label = f"cvxpy:{problem.solver_stats.solver_name}"
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or x.value is None:
        raise error(f"{label} did not solve the {what}: status {problem.status!r}")
    return np.asarray(x.value), str(problem.status), f"cvxpy status {problem.status}", label


@contextlib.contextmanager
def _stdout_to_stderr():
    """Send file descriptor 1 (where compiled solvers print their banners) to stderr while the block runs."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):  # no real stdout (a notebook kernel's is a pipe object)
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
