"""Probability rows: validation, distances, residuals and categorical sampling.

Every function works on a *row* axis (the last one) and broadcasts over any
leading batch axes. All of them accept numpy arrays and torch tensors alike
(through :mod:`array_api_compat`); the result has the input's type and device.

Conventions
-----------
* ``draft`` is the small model's distribution (``p`` in the specs), ``target``
  the large model's (``q``).
* A row is *valid* when it is finite, non-negative and sums to 1 within :func:`normalisation_tolerance` of its
  dtype (the sum taken in float64); :func:`validate_probs` raises :class:`ValueError` naming the argument otherwise.

Precision policy
----------------
Rows are checked in their own dtype — finite, ≥ 0, ``|Σ − 1| ≤ max(1e-6, 8·eps(dtype))``
with the sum accumulated in float64, a bound that does not grow with the vocabulary (a
softmax row rounded entry by entry is off by at most eps/2 in total, whatever V) — and then
renormalised in a working precision: float64 and float32 rows keep their dtype; float16 and
bfloat16 rows are upcast to float32 first; integer input becomes float64 (booleans are refused: a mask is no row).
Tolerances: 1e-6 (float64 and float32), 7.8e-3 (float16), 6.25e-2 (bfloat16).

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

import math

import array_api_compat
import numpy as np

from .checks import (
    check_dense,
    check_real,
    check_size,
    coarsest_eps,
    read_numbers,
)
from .namespaces import namespace, resolve_device  # re-exported: the package imports them from here
from .tempering import temperature_rows, top_p_mask  # re-exported likewise

#: Absolute tolerance on ``|sum(row) - 1|`` accepted by :func:`validate_probs` for
#: float64 (and float32) rows. Rows inside the tolerance are renormalised; rows outside are an error.
NORMALISATION_TOL = 1e-6
#: Multiple of a dtype's machine epsilon accepted in ``|sum(row) - 1|`` (float16, bfloat16).
EPS_MULTIPLE = 8


def normalisation_tolerance(dtype, vocab_size: int | None = None, xp=np) -> float:
    """Accepted ``|sum(row) - 1|`` for rows of ``dtype``: ``max(NORMALISATION_TOL, 8 * eps(dtype))``.

    The sum is accumulated in float64, so the only error left is each entry's own rounding
    (at most eps/2 of the total, whatever the vocabulary): the bound does not grow with
    ``vocab_size`` (kept in the signature for callers that pass it). float16: 7.8e-3,
    bfloat16: 6.25e-2.

    >>> normalisation_tolerance(np.float16)
    0.0078125
    """
    return eps_tolerance(float(xp.finfo(dtype).eps))


def eps_tolerance(eps: float | None) -> float | None:
    """:func:`normalisation_tolerance` from a machine epsilon (``None`` passes through: the default applies)."""
    return None if eps is None else max(NORMALISATION_TOL, EPS_MULTIPLE * eps)


__all__ = [
    "NORMALISATION_TOL",
    "resolve_device",
    "temperature_rows",
    "top_p_mask",
    "normalisation_tolerance",
    "eps_tolerance",
    "check_same_vocab",
    "one_row",
    "row_pair",
    "first_index",
    "host_to_like",
    "to_device",
    "on_device",
    "namespace",
    "likelihood_ratio",
    "overlap",
    "positive_part",
    "residual",
    "sample_categorical",
    "to_host",
    "total_variation",
    "uniform",
    "validate_probs",
    "zeros_of",
]


def _is_torch(x) -> bool:
    return array_api_compat.is_torch_array(x)


def to_host(x) -> np.ndarray:
    """A numpy array from numpy (as is) or torch (a copy from any device)."""
    return x if isinstance(x, np.ndarray) else x.numpy(force=True) if _is_torch(x) else np.asarray(x)


def host_to_like(values, like):
    """Host values (integers, an index) in the array kind and on the device of ``like`` (numpy or torch);
    values that are already a tensor are returned as they are. A copy to a GPU does not wait for it
    (:func:`to_device`)."""
    if not _is_torch(like) or _is_torch(values):
        return values if array_api_compat.is_array_api_obj(values) else np.asarray(values)
    return to_device(values, like.device)


def to_device(values, device):
    """Host values (a numpy array, a list, a scalar) as a torch tensor on ``device``, without waiting for the device.

    On CUDA the values go through page-locked memory and a non-blocking copy, as vLLM's and SGLang's
    input preparation does: a copy from ordinary memory (``torch.as_tensor(array, device="cuda")``)
    first waits for every kernel queued before it, so a decode loop that copies its bookkeeping that
    way synchronises with the GPU at every copy. The page-locked block is not reused before its copy
    has run (torch's caching host allocator records the copy), so the host array may change at once.
    On the CPU the tensor shares the array's memory, as ``torch.as_tensor`` does.
    """
    import torch

    array = np.asarray(values)
    if not (array.flags.c_contiguous and array.flags.writeable):  # from_numpy takes neither negative strides nor views
        array = np.array(array, order="C")                          # that cannot be written (np.broadcast_to)
    if array.dtype == object:
        raise ValueError(f"to_device: expected numbers, got an array of objects {values!r}")
    tensor = torch.from_numpy(array)
    device = torch.device(device)
    if device.type == "cpu":
        return tensor
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def on_device(x, device):
    """``x`` on ``device``: a tensor moved (a no-op where it is already), host values copied by :func:`to_device`."""
    if _is_torch(x):
        return x.to(device)
    return to_device(x, device)


def zeros_of(like, shape):
    """Zeros of ``shape`` with the dtype, kind and device of the array ``like``."""
    if isinstance(like, np.ndarray):
        return np.zeros(shape, dtype=like.dtype)
    return namespace(like).zeros(shape, dtype=like.dtype, device=like.device)


def validate_probs(probs, name: str = "probs", *, tol: float | None = None, min_ndim: int = 1):
    """Check that the last axis of ``probs`` holds probability rows.

    Parameters
    ----------
    probs : array_like, shape (..., V)
        Candidate probability rows. Python lists are converted to float64 numpy.
    name : str
        Argument name used in error messages.
    tol : float, optional
        Largest accepted ``|sum(row) - 1|``; default :func:`normalisation_tolerance`
        (:data:`NORMALISATION_TOL` for float64).
    min_ndim : int
        Minimum number of axes (1 for a single row).

    Returns
    -------
    array, shape (..., V)
        Floating-point rows renormalised to sum to exactly 1 (up to rounding).

    Raises
    ------
    ValueError
        On NaN/inf, negative entries, an empty vocabulary, too few axes or a
        row sum outside ``1 ± tol``; the message names ``name``, the first
        offending row and what was expected.

    Examples
    --------
    >>> validate_probs([0.25, 0.75], "draft")
    array([0.25, 0.75])
    """
    min_ndim = check_size(min_ndim, "min_ndim")  # True, 1.5 or NaN would be compared as numbers
    if tol is not None:
        tol = check_real(tol, "tol", low=0.0, allow_inf=True)
    if isinstance(probs, np.ma.MaskedArray) or not array_api_compat.is_array_api_obj(probs):
        probs, raw = read_numbers(probs, name, "probabilities (real numbers)")  # lists entry by entry: [1.0, False]
        if tol is None:  # float16 rows in a list keep their tolerance
            tol = eps_tolerance(coarsest_eps(probs))
        try:
            probs = raw.astype(np.float64)
        except (TypeError, ValueError, OverflowError) as exc:  # an object entry too large for a float
            raise ValueError(f"{name}: expected probabilities (real numbers) ({exc})") from None
    check_dense(probs, name)
    xp = namespace(probs)
    if not xp.isdtype(probs.dtype, "real floating"):
        if not xp.isdtype(probs.dtype, "integral"):
            raise ValueError(f"{name}: expected real probabilities, got dtype {probs.dtype}")
        probs = xp.astype(probs, xp.float64)
    checked_dtype = probs.dtype
    if xp.finfo(probs.dtype).bits < 32:  # float16 / bfloat16: checked as given, worked on in float32
        probs = xp.astype(probs, xp.float32)
    if probs.ndim < min_ndim:
        raise ValueError(f"{name}: expected at least {min_ndim} axis/axes (..., vocab), got shape {tuple(probs.shape)}")
    if probs.shape[-1] == 0:
        raise ValueError(f"{name}: the vocabulary axis is empty (shape {tuple(probs.shape)})")
    bad = ~xp.isfinite(probs)
    if bool(xp.any(bad)):
        raise ValueError(f"{name}: contains NaN or infinite entries at {first_index(bad)}; expected finite probabilities")
    neg = probs < 0
    if bool(xp.any(neg)):
        idx = first_index(neg)
        raise ValueError(f"{name}: negative probability {float(probs[idx])!r} at index {idx}; expected entries >= 0")
    if tol is None:
        tol = normalisation_tolerance(checked_dtype, None, xp)
    elif not (isinstance(tol, int | float) and not isinstance(tol, bool) and math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol: expected a finite tolerance >= 0, got {tol!r} (NaN would switch the check off)")
    big = probs > 1.0 + tol  # before summing: a row of huge entries would overflow the sum
    if bool(xp.any(big)):
        idx = first_index(big)
        raise ValueError(f"{name}: probability {float(probs[idx])!r} at index {idx} is above 1; expected entries in "
                         "[0, 1] summing to 1")
    sums = xp.sum(xp.astype(probs, xp.float64), axis=-1)
    off = xp.abs(sums - 1.0) > tol
    if bool(xp.any(off)):
        idx = first_index(off)
        raise ValueError(
            f"{name}: row {idx} sums to {float(sums[idx])!r}; expected rows summing to 1 "
            f"(tolerance {tol:g} for {checked_dtype}) over the last axis of shape {tuple(probs.shape)}"
        )
    return probs / xp.astype(sums, probs.dtype)[..., None]


def first_index(mask):
    """Index tuple of the first True entry of a boolean array (numpy or torch)."""
    arr = np.asarray(mask.cpu() if _is_torch(mask) else mask)
    return tuple(int(i) for i in np.argwhere(arr)[0])


def check_same_vocab(draft, target, draft_name: str = "draft", target_name: str = "target") -> int:
    """Raise ``ValueError`` unless the last axes (vocabulary sizes) agree; return V."""
    vd, vt = draft.shape[-1], target.shape[-1]
    if vd != vt:
        raise ValueError(
            f"vocabulary mismatch: {draft_name} has {vd} tokens, {target_name} has {vt}; "
            "both models must share one vocabulary"
        )
    return int(vd)


def row_pair(draft, target) -> tuple[np.ndarray, np.ndarray]:
    """One draft row and one target row, validated, as float64 numpy arrays of shape (V,).

    The one check behind every closed form and solver on a single (p, q) pair: each row is
    validated by :func:`validate_probs` (torch tensors are moved to numpy), must be 1-D, and
    both must share a vocabulary.
    """
    p, q = one_row(draft, "draft"), one_row(target, "target")
    check_same_vocab(p, q)
    return p, q


def one_row(probs, name: str) -> np.ndarray:
    """One validated probability row as a float64 numpy array of shape (V,) (torch tensors are moved to numpy)."""
    arr = validate_probs(probs, name)
    if _is_torch(arr):
        arr = arr.detach().cpu().numpy()  # a row that requires grad too
    arr = np.array(arr, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected one probability row of shape (V,), got shape {arr.shape}")
    return arr


def _arrays(draft, target):
    """Two rows (or batches) as arrays of one namespace over one vocabulary (lists become numpy)."""
    draft, target = (x if array_api_compat.is_array_api_obj(x) else np.asarray(x, dtype=np.float64)
                     for x in (draft, target))
    check_same_vocab(draft, target)
    return draft, target


def total_variation(draft, target):
    """TV(p, q) = ½ Σ_x |p(x) − q(x)|, batched over leading axes; at most 1 (rounding on disjoint supports
    cannot push it past, where it would be an invalid rejection probability).

    >>> round(float(total_variation(np.array([0.3, 0.7]), np.array([0.75, 0.25]))), 12)
    0.45
    >>> p = np.array([0.7816153257870219, 0.21838467421297827, 0.0, 0.0])
    >>> q = np.array([0.0, 0.0, 0.9632991963561205, 0.036700803643879475])
    >>> float(0.5 * np.abs(p - q).sum()), float(total_variation(p, q))  # disjoint supports
    (1.0000000000000002, 1.0)
    """
    draft, target = _arrays(draft, target)
    xp = namespace(draft, target)
    return xp.minimum(0.5 * xp.sum(xp.abs(draft - target), axis=-1), 1.0)


def likelihood_ratio(draft, target):
    """r(x) = q(x)/p(x) along the last axis: +inf where only the target has mass, 0 where neither has.

    Rows are taken as given (numpy or torch, not validated).

    >>> likelihood_ratio(np.array([0.5, 0.5, 0.0, 0.0]), np.array([0.25, 0.25, 0.5, 0.0])).tolist()
    [0.5, 0.5, inf, 0.0]
    """
    xp = namespace(draft, target)
    positive = draft > 0
    return xp.where(positive, target / xp.where(positive, draft, xp.ones_like(draft)),
                    xp.where(target > 0, xp.full_like(draft, math.inf), xp.zeros_like(draft)))


def overlap(draft, target):
    """Σ_x min(p(x), q(x)) = 1 − TV(p, q): the maximal-coupling acceptance probability."""
    draft, target = _arrays(draft, target)
    xp = namespace(draft, target)
    return xp.sum(xp.minimum(draft, target), axis=-1)


def positive_part(minuend, subtrahend, scale=None):
    """``(scale · a − b)_+`` elementwise (``scale`` broadcasts against ``a``; ``None`` is 1), numpy or torch.

    The unnormalised residual of the verifiers' hot paths: on numpy it is computed in one temporary,
    in place (a multiply or copy, a subtraction, a maximum), not a new array per operation.
    """
    if isinstance(minuend, np.ndarray) and isinstance(subtrahend, np.ndarray):
        out = np.multiply(minuend, scale) if scale is not None else np.array(minuend, dtype=np.result_type(
            minuend, subtrahend, 1.0))
        out -= subtrahend
        return np.maximum(out, 0.0, out=out)
    xp = namespace(minuend, subtrahend)
    return xp.maximum((minuend if scale is None else scale * minuend) - subtrahend, 0.0)


def residual(minuend, subtrahend, *, return_mass: bool = False):
    """Normalised positive part ``(a − b)_+ / Σ (a − b)_+`` along the last axis.

    For speculative sampling call ``residual(target, draft)`` (spec eq. (2));
    block verification calls ``residual(w * target, draft)`` (eq. (16)).

    Where the mass ``Σ (a − b)_+`` is exactly 0 the residual is undefined; the
    function then returns ``a`` normalised (the target itself when ``a`` is a
    target row), and a uniform row if ``a`` is zero as well. Verifiers only
    reach such rows with probability 0, so the choice never changes a law.

    Parameters
    ----------
    minuend, subtrahend : array, shape (..., V)
    return_mass : bool
        Also return the mass ``Σ (a − b)_+`` of shape (...).
    """
    xp = namespace(minuend, subtrahend)
    pos = positive_part(minuend, subtrahend)
    mass = xp.sum(pos, axis=-1, keepdims=True)
    a_mass = xp.sum(minuend, axis=-1, keepdims=True)
    vocab = minuend.shape[-1]
    fallback = xp.where(a_mass > 0, minuend / xp.where(a_mass > 0, a_mass, 1.0), 1.0 / vocab)
    out = xp.where(mass > 0, pos / xp.where(mass > 0, mass, 1.0), fallback)
    if return_mass:
        return out, mass[..., 0]
    return out


def uniform(rng, shape, like):
    """U[0, 1) draws of ``shape`` from ``rng`` in the namespace/device of ``like``: a :class:`numpy.random.Generator`
    for numpy arrays, a :class:`torch.Generator` (or ``None``: torch's global one) for torch tensors."""
    if _is_torch(like):
        import torch

        if rng is not None and not isinstance(rng, torch.Generator):
            raise ValueError(f"rng: expected a torch.Generator (or None) for torch tensors, got {type(rng).__module__}."
                             f"{type(rng).__name__}")
        return torch.rand(shape, generator=rng, dtype=like.dtype, device=like.device)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng: expected a numpy Generator for numpy arrays (e.g. np.random.default_rng(0)), "
                         f"got {type(rng).__name__}")
    return rng.random(shape)


def sample_categorical(probs, rng, u=None, *, check: bool = True):
    """One draw from each row of ``probs`` (shape (..., V)) by inverse CDF.

    Rows must be non-negative with a positive sum (an all-zero row is a ``ValueError``); they
    need not sum to 1. ``check=False`` skips that test, which reads a value back from the
    device: the decode loops sample rows they know to be valid without a host synchronisation
    (an all-zero row then gives index 0).

    Returns integer indices of shape (...). ``u`` optionally supplies the uniforms (shape (...)). Entries with
    probability 0 are never returned."""
    if u is None:
        u = uniform(rng, probs.shape[:-1], probs)
    if isinstance(probs, np.ndarray) and not check:  # the decode loops' draw: numpy directly, no namespace
        cdf = None if probs.shape[-1] >= _BLOCKED_FROM else np.cumsum(probs, axis=-1)
        return _blocked_draw(probs, u) if cdf is None else np.argmax(cdf > (u * cdf[..., -1])[..., None], axis=-1)
    xp = namespace(probs)
    cdf = xp.cumulative_sum(probs, axis=-1)
    if check and probs.shape[-1] and (bool(xp.any(probs < 0)) or not bool(xp.all(xp.isfinite(cdf[..., -1])))):
        raise ValueError("probs: rows to sample from need finite entries >= 0 (got a negative, NaN or infinite entry)")
    if check and (probs.shape[-1] == 0 or not bool(xp.all(cdf[..., -1] > 0))):
        raise ValueError("probs: every row to sample from needs positive total mass (got an empty or all-zero row)")
    # u is scaled by the row total, so rows need not be normalised and rounding in the
    # cumulative sum cannot push past the end. The first index with cdf > u * total has
    # cdf[idx] > cdf[idx-1], so a zero-probability entry (cdf flat there) is never chosen.
    past = cdf > (u * cdf[..., -1])[..., None]
    if _is_torch(past):  # torch's argmax takes no booleans; numpy's is fastest on them
        past = xp.astype(past, xp.uint8)
    return xp.argmax(past, axis=-1)


#: Rows at least this wide are drawn block-wise on numpy (:func:`_blocked_draw`); the block width; up to this many
#: rows are drawn one at a time (a decode step's few rows: fewer array operations than the vectorised draw).
_BLOCKED_FROM, _BLOCK, _ROW_BY_ROW = 4096, 256, 8


def _blocked_draw(probs: np.ndarray, u) -> np.ndarray:
    """The inverse-CDF draw of :func:`sample_categorical` for wide numpy rows, without a cumulative sum over V.

    The row is cut into blocks of :data:`_BLOCK` entries: the block sums (one vectorised pass), the block
    whose cumulative end first exceeds u · total, then a cumulative sum inside that block alone. The
    index is the same first entry whose CDF exceeds u · total (zero-probability entries are never it);
    where rounding between the two summation orders puts the target past the block's last entry, that
    last entry of positive probability is taken, which is what exact arithmetic gives. u · total is
    kept below the total, so the block found always holds mass; an all-zero row gives index 0.
    """
    V = probs.shape[-1]
    flat = np.reshape(probs, (-1, V))
    n, starts = flat.shape[0], np.arange(0, V, _BLOCK)
    ends = np.cumsum(np.add.reduceat(flat, starts, axis=1), axis=1)  # the CDF at each block's last entry
    target = np.minimum(np.reshape(u, -1) * ends[:, -1], np.nextafter(ends[:, -1], 0.0))
    if n <= _ROW_BY_ROW:
        out = np.zeros(n, dtype=np.int64)
        for r in range(n):
            block = int(np.searchsorted(ends[r], target[r], side="right"))
            if block == starts.size:  # no mass at all
                continue
            local = flat[r, starts[block]:starts[block] + _BLOCK]
            before = ends[r, block - 1] if block else 0.0
            step = int(np.searchsorted(before + np.cumsum(local), target[r], side="right"))
            out[r] = starts[block] + (step if step < local.size else int(np.flatnonzero(local > 0)[-1]))
        return np.reshape(out, np.shape(probs)[:-1])
    rows = np.arange(n)
    block = np.minimum((ends <= target[:, None]).sum(axis=1), starts.size - 1)
    before = np.where(block > 0, ends[rows, np.maximum(block - 1, 0)], 0.0)
    at = block[:, None] * _BLOCK + np.arange(_BLOCK)[None, :]
    inside = at < V
    local = np.where(inside, np.take_along_axis(flat, np.minimum(at, V - 1), axis=1), 0.0)
    step = (before[:, None] + np.cumsum(local, axis=1) <= target[:, None]).sum(axis=1)
    last = _BLOCK - 1 - np.argmax((local > 0)[:, ::-1], axis=1)
    step = np.where(step >= inside.sum(axis=1), last, step)
    return np.reshape(np.where(ends[:, -1] > 0, block * _BLOCK + step, 0), np.shape(probs)[:-1])
