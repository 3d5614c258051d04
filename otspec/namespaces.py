"""The array-API namespace of numpy or torch arrays (:func:`namespace`), with a lean numpy ``clip``."""

from __future__ import annotations

import types

import array_api_compat
import numpy as np

__all__ = ["namespace"]


class _Numpy(types.ModuleType):
    """array_api_compat's numpy namespace with a lean ``clip``: the compat one checks its bounds in Python and
    costs 19–29 µs a call on small arrays, ten times ``np.maximum``; the toy-source loops call it thousands of
    times a second. Every other name is the compat namespace's own."""

    def __init__(self, compat):
        super().__init__(compat.__name__, compat.__doc__)
        self._compat = compat

    def __getattr__(self, name):  # first use of a name: kept as an attribute, so the next is a plain lookup
        value = getattr(self._compat, name)
        setattr(self, name, value)
        return value

    def clip(self, x, /, min=None, max=None):  # noqa: A002 (the array API's names)
        """The array API's clip for a numpy array of >= 1 dimension and scalar bounds (else the compat one)."""
        if not (type(x) is np.ndarray and x.ndim and isinstance(min, int | float | None)
                and isinstance(max, int | float | None)):
            return self._compat.clip(x, min=min, max=max)
        out = x if min is None else np.maximum(x, min)
        out = out if max is None else np.minimum(out, max)
        return out if out.dtype == x.dtype else out.astype(x.dtype)


_NUMPY = _Numpy(array_api_compat.array_namespace(np.zeros(0)))


def namespace(*arrays):
    """Array-API namespace shared by ``arrays`` (numpy or torch); numpy arrays alone skip the general lookup."""
    if arrays and all(type(a) is np.ndarray for a in arrays):
        return _NUMPY
    return array_api_compat.array_namespace(*arrays)


def resolve_device(device):
    """Where arrays live: ``None`` keeps numpy; ``"auto"`` is torch on CUDA when a GPU is visible, else on the CPU;
    anything else must name a torch device that exists here (``"cpu"``, ``"cuda"``, ``"cuda:1"``)."""
    if device is None:
        return None
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device: expected None, 'auto' or a torch device such as 'cpu' or 'cuda', "
                         f"got {device!r} ({err})") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r}: no CUDA GPU is visible to torch (use 'auto' or 'cpu')")
    if resolved.type not in ("cpu", "cuda"):  # meta holds no numbers; mps, xla and others are not supported here
        raise ValueError(f"device={device!r}: expected 'cpu', 'cuda' (or 'cuda:N') or 'auto'")
    return resolved
