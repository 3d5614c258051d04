r"""The over-acceptance family b_ε = min{1, (q + ε)/p} of Yin et al. (2024), eq. (9): rejections against bias.

Spec ``yin_theory.md`` §7. A rejection-based verifier at one position draws x̃ ~ p (the
**draft**), accepts it with probability b(x̃) and otherwise resamples from P; its bias is
TV(p b + r P, q) against the **target** q, r = 1 − Σ p b. Accepting a little more than speculative
decoding, b_ε = min{1, (q + ε)/p}, trades rejections for bias: with Decoding-OPT (P = Theorem 4's
P*, here the standard residual Norm[(q − p)_+]) every ε lies on Theorem 5's front
max{0, TV − r}; Decoding-UNO (P = q) lies above it. The verifiers are
:class:`otspec.verifiers.biased.DecodingOPT` / ``DecodingUNO``. Re-exported by
:mod:`otspec.theory.pareto`.

Spec: ``docs/yin_theory.md``.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..checks import check_real, grid_entries
from ..distributions import namespace, residual, row_pair, total_variation

__all__ = ["family_curve", "over_acceptance", "over_acceptance_kernel"]


def _check_eps(eps) -> float:
    """ε >= 0 as a float (∞: every draft accepted); NaN, text ('0.1') and booleans refused."""
    return check_real(eps, "eps", low=0.0, allow_inf=True)


def _check_mode(mode: str) -> str:
    if mode not in ("opt", "uno"):
        raise ValueError(f"mode: expected 'opt' (Decoding-OPT, P = P*) or 'uno' (Decoding-UNO, P = q), got {mode!r}")
    return mode


def over_acceptance_kernel(draft_probs, target_probs, eps, mode: str = "opt"):
    """The step kernel of the over-acceptance verifier b_ε = min{1, (q + ε)/p} (eq. (9) of [1]): (a, r, P).

    a = p b_ε = min(p, q + ε) is the accepted mass, r = (1 − Σ a)_+ the rejection probability and P
    the resampling row: Theorem 4's P* = Norm[(q − a)_+] for Decoding-OPT (equal to the SD residual
    Norm[(q − p)_+], and q where that is empty), q itself for Decoding-UNO. The output law is a + r P.

    Parameters
    ----------
    draft_probs, target_probs : array, shape (..., V)
        Valid probability rows p and q (numpy or torch).
    eps : float or array
        ε >= 0, a scalar or an array that broadcasts against the rows.
    mode : {"opt", "uno"}, default "opt"
        Decoding-OPT (P = P*) or Decoding-UNO (P = q).

    Returns
    -------
    a : array, shape (..., V)
        The accepted mass.
    r : array, shape (...)
        The rejection probability.
    P : array, shape (..., V)
        The resampling row.

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    >>> import numpy as np
    >>> a, r, P = over_acceptance_kernel(np.array([0.5, 0.5]), np.array([0.75, 0.25]), 0.125)
    >>> a.tolist(), float(r), P.tolist()  # a = min(p, q + 0.125); r = 1 - 0.875; P* = Norm[(q - a)_+]
    ([0.5, 0.375], 0.125, [1.0, 0.0])
    """
    if mode not in ("opt", "uno"):
        raise ValueError(f"mode: expected 'opt' (Decoding-OPT) or 'uno' (Decoding-UNO), got {mode!r}")
    if isinstance(eps, numbers.Real | str) or eps is None:  # an array of ε is the caller's to check (hot path)
        _check_eps(eps)  # '0.1' would end in numpy's ufunc error, NaN in rows of NaN
    xp = namespace(draft_probs, target_probs)
    a = xp.minimum(draft_probs, target_probs + eps)
    r = xp.clip(1.0 - xp.sum(a, axis=-1), min=0.0)
    return a, r, (residual(target_probs, a) if mode == "opt" else target_probs)


def _over_acceptance(p, q, e, mode) -> dict:
    a, r, P = over_acceptance_kernel(p, q, e, mode)  # a = p b_eps; equal to p where p = 0
    b = np.divide(a, p, out=np.ones_like(p), where=p > 0)
    r = float(r)
    law = a + r * P
    return {"eps": e, "mode": mode, "rejection": r, "bias": float(total_variation(law, q)),
            "front": max(0.0, float(total_variation(p, q)) - r), "accept_probs": b, "resampling": P,
            "output_law": law}


def over_acceptance(draft, target, eps: float, mode: str = "opt") -> dict:
    r"""Exact rejection and bias of the over-acceptance verifier b_ε (eq. (9) of [1]).

    .. math::
        b_\varepsilon(x) = \min\{1, (q(x) + \varepsilon)/p(x)\},\quad
        r = 1 - \sum_x \min(p, q + \varepsilon) = \mathrm{TV} - \sum_x \min\{(p - q)_+, \varepsilon\}.

    ``mode="opt"`` (Decoding-OPT) resamples from Theorem 4's P* = Norm[(q − p b_ε)_+],
    which for this family is the standard SD residual Norm[(q − p)_+]; its bias is
    Σ min{(p − q)_+, ε} = TV − r, exactly on the front. ``mode="uno"`` (Decoding-UNO)
    resamples from q: bias TV(min(p, q + ε) + r q, q), above the front (already at ε = 0).

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    eps : float
        ε >= 0 (``inf`` allowed: accept every draft).
    mode : {"opt", "uno"}, default "opt"
        The resampling law.

    Returns
    -------
    dict
        ``eps``, ``mode``, ``rejection``, ``bias``, ``front`` (= max{0, TV − r}) as floats;
        ``accept_probs`` (b_ε, 1 where p = 0), ``resampling`` (P) and ``output_law``
        (p b_ε + r P) as arrays of shape (V,).

    Raises
    ------
    ValueError
        On invalid rows, a vocabulary mismatch, ε negative or NaN, or an unknown mode.

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    p = (0.5, 0.5), q = (0.75, 0.25), TV = 0.25, ε = 0.125: a = (0.5, 0.375) and r = 0.125.
    Decoding-OPT outputs (0.625, 0.375), bias 0.125 = TV − r; Decoding-UNO outputs
    a + r q = (0.59375, 0.40625), bias 0.15625.

    >>> res = over_acceptance([0.5, 0.5], [0.75, 0.25], 0.125)
    >>> res["rejection"], res["bias"], res["front"]
    (0.125, 0.125, 0.125)
    >>> over_acceptance([0.5, 0.5], [0.75, 0.25], 0.125, mode="uno")["bias"]
    0.15625
    """
    p, q = row_pair(draft, target)
    return _over_acceptance(p, q, _check_eps(eps), _check_mode(mode))


def family_curve(draft, target, eps_grid, mode: str = "opt") -> dict:
    """:func:`over_acceptance` over a grid of ε (eq. (9) of [1]): JSON-ready lists ``eps``, ``rejection``, ``bias``, ``front``.

    Decoding-OPT traces the Pareto front max{0, TV − r} of Theorem 5 as ε runs from 0 (speculative
    decoding, r = TV) to max (p − q)_+ (every draft accepted, r = 0).

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    eps_grid : array_like of float, shape (G,)
        Values of ε >= 0.
    mode : {"opt", "uno"}, default "opt"
        The resampling law (see :func:`over_acceptance`).

    Returns
    -------
    dict
        ``mode``, and lists of length G: ``eps``, ``rejection``, ``bias``, ``front``.

    Raises
    ------
    ValueError
        As :func:`over_acceptance`.

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    >>> curve = family_curve([0.5, 0.5], [0.75, 0.25], [0.0, 0.125, 0.25])
    >>> curve["rejection"], curve["bias"]  # r = 0.25 - eps, bias = TV - r = eps
    ([0.25, 0.125, 0.0], [0.0, 0.125, 0.25])
    """
    p, q = row_pair(draft, target)
    mode = _check_mode(mode)
    grid = [_check_eps(e) for e in grid_entries(eps_grid, "eps_grid")]  # read as given: '0.1' refused
    rows = [_over_acceptance(p, q, e, mode) for e in grid]
    return {"mode": mode, **{k: [row[k] for row in rows] for k in ("eps", "rejection", "bias", "front")}}
