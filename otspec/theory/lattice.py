"""FFT walks on a lattice with certified rounding, shared by the certified bounds of :mod:`otspec.theory.iid`
and :mod:`otspec.theory.adaptive_bracket`.

A walk X_l = X_{l-1} + step on integer points, X_0 = 0, with the law of the step given on a window of
integers, is propagated by FFT convolution; :func:`lattice_walk` carries a bound on the l1 rounding error
of every law it yields, so callers can widen their bounds by it.
"""

from __future__ import annotations

import functools
import math

import numpy as np

__all__ = ["fast_len", "lattice_walk"]

_EPS = float(np.finfo(np.float64).eps)


@functools.lru_cache(maxsize=64)
def fast_len(n: int) -> int:
    """Smallest 2^a 3^b 5^c >= n: f 2^a >= n first holds at a = bit_length((n - 1) // f)."""
    return min(f << ((n - 1) // f).bit_length() for f in (3**i * 5**j for i in range(16) for j in range(11)))


def lattice_walk(kernel, k0: int, L: int, lo: int, hi: int, below: str, above: str):
    """Laws of the lattice walk X_l = fold(X_{l-1} + step), X_0 = 0, on the window [lo, hi].

    ``kernel[i]`` is the (sub-)probability of the step k0 + i. Mass leaving the window below /
    above is "drop"ped, "clamp"ed onto the edge or "absorb"ed (counted in ``absorbed``). Yields
    (law, offset, absorbed, err) for l = 1..L, ``err`` bounding the l1 rounding error of the FFTs
    so far: 10 eps log2(n) sqrt(n) ||law||_2 ||kernel||_1 per step (the 2-norm error bound of an
    FFT convolution, Higham §24.1, with a generous constant; folding never increases l1 errors).
    """
    law, off, absorbed, err, cache, kmass = np.ones(1), 0, 0.0, 0.0, {}, float(kernel.sum())
    for _ in range(L):
        m = law.size + kernel.size - 1
        n = fast_len(m)  # linear convolution by FFT
        if n not in cache:
            cache[n] = np.fft.rfft(kernel, n)
        full = np.fft.irfft(np.fft.rfft(law, n) * cache[n], n)[:m]
        err += 10.0 * _EPS * math.log2(max(n, 2)) * math.sqrt(n * float(np.sum(law * law))) * kmass
        start = off + k0
        i0, i1 = min(max(lo - start, 0), m), max(min(hi - start + 1, m), 0)
        under, over = float(full[:i0].sum()), float(full[i1:].sum())
        law, off = (full[i0:i1].copy(), start + i0) if i0 < i1 else (np.zeros(1), hi if start > hi else lo)
        for mass, how, edge in ((under, below, 0), (over, above, -1)):
            if how == "clamp":
                law[edge] += mass
            elif how == "absorb":
                absorbed += mass
        yield law, off, absorbed, err
