"""Rows of a model's sampling settings: a temperature applied to logits, and nucleus (top-p) masks, for numpy rows
and torch tensors alike (re-exported by :mod:`otspec.distributions`)."""

from __future__ import annotations

import array_api_compat
import numpy as np

from .namespaces import namespace

__all__ = ["temperature_rows", "top_p_mask"]


def temperature_rows(logits, temperature: float):
    """softmax(logits / T) along the last axis (numpy or torch); ``-inf`` logits stay at probability 0.

    A model's logits, or log-probabilities (``log p``, with ``-inf`` where p = 0) to temper a
    probability row: p^(1/T) renormalised. T = 0 (greedy) gives the arg-max row (lowest id on ties); a negative,
    NaN or infinite T is a ``ValueError``.
    """
    from .checks import check_real

    temperature = check_real(temperature, "temperature", low=0.0)
    if temperature == 0:
        if array_api_compat.is_torch_array(logits):
            import torch

            return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype)
        logits = np.asarray(logits)
        return (np.arange(logits.shape[-1]) == logits.argmax(axis=-1)[..., None]).astype(np.result_type(logits, 1.0))
    if array_api_compat.is_torch_array(logits):
        import torch

        if temperature == 1:
            return torch.softmax(logits, dim=-1)
        # the row's maximum first: logits / 1e-320 would overflow to ±inf and the row turn NaN; (logit − max) / T
        # only runs to −inf, so a tiny T gives the arg-max row (ties shared), its limit
        z = logits - logits.amax(dim=-1, keepdim=True)  # (a T below the dtype's smallest number divides by 0:
        return torch.softmax(torch.where(z == 0, z, z / temperature), dim=-1)  # the maxima stay at 0)
    xp = namespace(logits)
    z = logits - xp.max(logits, axis=-1, keepdims=True)
    if temperature != 1:
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            z = xp.where(z == 0, z, z / temperature)
    out = xp.exp(z)
    return out / xp.sum(out, axis=-1, keepdims=True)


def top_p_mask(rows, top_p: float, max_kept: int | None = None):
    """The smallest set of most likely entries of each row whose mass reaches ``top_p`` of the row's total
    (ties: lower id first), at most ``max_kept`` of them: a bool mask of the rows' shape (numpy or torch).

    Entry k of a row sorted by decreasing probability is kept iff the mass ranked above it is below
    ``top_p`` × total (nucleus sampling's rule). ``top_p`` in (0, 1], ``max_kept`` >= 1 (else ``ValueError``).
    """
    from .checks import check_real, check_size
    top_p = check_real(top_p, "top_p", low=0.0, high=1.0, low_open=True)
    max_kept = None if max_kept is None else check_size(max_kept, "max_kept")
    if array_api_compat.is_torch_array(rows):
        import torch

        sorted_rows, order = torch.sort(rows, dim=-1, descending=True, stable=True)
        above = torch.cumsum(sorted_rows, dim=-1) - sorted_rows
        keep = above < top_p * sorted_rows.sum(dim=-1, keepdim=True)
        if max_kept is not None:
            keep &= torch.arange(rows.shape[-1], device=rows.device) < max_kept
        return torch.zeros_like(rows, dtype=torch.bool).scatter(-1, order, keep)
    rows = np.asarray(rows)
    order = np.argsort(-rows, axis=-1, kind="stable")
    sorted_rows = np.take_along_axis(rows, order, axis=-1)
    above = np.cumsum(sorted_rows, axis=-1) - sorted_rows
    keep = above < top_p * sorted_rows.sum(axis=-1, keepdims=True)
    if max_kept is not None:
        keep &= np.arange(rows.shape[-1]) < max_kept
    mask = np.zeros(rows.shape, dtype=bool)
    np.put_along_axis(mask, order, keep, axis=-1)
    return mask

