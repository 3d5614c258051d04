r"""The exact audit on small vocabularies (:func:`exact_audit`): every drafted block enumerated with its exact
probability, the sampler's conditional law per block measured on a stratified batch, the output law assembled
exactly and compared with the target's.

For a few synthetic positional row pairs (V and L small), each block x of positive draft probability π(x) is
handed to the sampler ``draws`` times in one batch. Where the sampler takes its uniforms from ``rng.random`` (all
of otspec's do, and most numpy samplers), :class:`StratifiedGenerator` stratifies them along the batch (one
uniform per stratum and column, the strata shuffled per column): the measured conditional law of (τ, Y) given x
is then nearly free of sampling noise for one-uniform decisions. The emitted tokens x_1 … x_τ, Y are continued
by the target rows exactly, so the output law over Ω^{L+1} is Σ_x π(x) Σ_{τ,y} f(τ, y | x) · q(continuation); it
is compared with the target's ⊗_i q_i cell by cell, each deviation against its standard error from the measured
frequencies (max |z| with Bonferroni over the cells). Where the verifier is named, the mean accepted length is
compared with its exact value Σ_x π(x) E[τ | x], and the measured conditional law with the verifier's exact one.
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from ..checks import check_size
from ..verifiers import CHAIN_VERIFIERS
from .core import check_alpha, notice_if_long, verdict
from .protocol import DEFAULT_TIMEOUT_S, call_sampler, check_timeout, load_sampler
from .rows import synthetic_pool

__all__ = ["MAX_EXACT_BLOCKS", "MAX_EXACT_LENGTH", "MAX_EXACT_VOCAB", "StratifiedGenerator", "exact_audit"]

#: Most (row pair, drafted block) combinations the exact audit enumerates.
MAX_EXACT_BLOCKS = 4096
#: Largest vocabulary and draft length of the exact audit (it enumerates V**L blocks and V**(L+1) output cells).
MAX_EXACT_VOCAB, MAX_EXACT_LENGTH = 8, 4


class StratifiedGenerator(np.random.Generator):
    """A numpy Generator whose ``random(size)`` is stratified along the first axis (the batch): row m of a column
    lies in [m/M, (m+1)/M) after a per-column shuffle; every other method is numpy's own."""

    def __init__(self, seed):
        super().__init__(np.random.PCG64(seed))

    def random(self, size=None, dtype=np.float64, out=None):
        if size is None or out is not None:
            return super().random(size, dtype=dtype, out=out)
        shape = (size,) if np.isscalar(size) else tuple(size)
        if not shape or shape[0] < 2:
            return super().random(shape, dtype=dtype)
        u = super().random(shape)
        perm = np.argsort(super().random(shape), axis=0)  # an independent shuffle of the strata per column
        return ((perm + u) / shape[0]).astype(dtype)


def _target_law(target: np.ndarray) -> np.ndarray:
    law = np.ones(1)
    for row in target:
        law = np.outer(law, row).ravel()
    return law


def exact_audit(sampler, *, vocab: int = 3, draft_length: int = 2, pairs: int = 4, draws: int = 20_000,
                seed: int = 0, alpha: float = 1e-3, verifier: str | None = None,
                timeout: float | None = DEFAULT_TIMEOUT_S) -> dict:
    """The exact audit of the module docstring; returns its JSON report (``verdict``, ``p_value``, deviations)."""
    label = sampler if isinstance(sampler, str) else getattr(sampler, "__name__", repr(sampler))
    fn = load_sampler(sampler, timeout) if isinstance(sampler, str) else sampler
    V = check_size(vocab, "vocab", minimum=2, limit=MAX_EXACT_VOCAB, limit_name="MAX_EXACT_VOCAB")
    L = check_size(draft_length, "draft_length", limit=MAX_EXACT_LENGTH, limit_name="MAX_EXACT_LENGTH")
    M = check_size(draws, "samples (draws per block)", minimum=100, limit=1_000_000,
                   limit_name="the exact audit's limit")
    P = check_size(pairs, "pairs", limit=64, limit_name="64")
    alpha = check_alpha(alpha)
    timeout = check_timeout(timeout)
    if P * V**L > MAX_EXACT_BLOCKS:
        raise ValueError(f"the exact audit would enumerate {P} pairs x {V}**{L} blocks = {P * V**L:,} "
                         f"(limit MAX_EXACT_BLOCKS = {MAX_EXACT_BLOCKS:,})")
    if verifier is not None and verifier not in CHAIN_VERIFIERS:
        raise ValueError(f"verifier {verifier!r}: expected one of {sorted(CHAIN_VERIFIERS)}")
    law_of = CHAIN_VERIFIERS[verifier]() if verifier else None
    seed = check_size(seed, "seed", minimum=0, what="an integer")  # a bool or a float is not a seed
    pool = synthetic_pool(n_pairs=P, vocab=V, draft_length=L, seed=seed)
    rng = StratifiedGenerator([seed, 7])
    cells = V ** (L + 1)
    worst = {"max_deviation": 0.0, "tv": 0.0, "max_abs_z": 0.0, "conditional_max_deviation": 0.0}
    z_all, acc_obs, acc_exact, acc_var = [], 0.0, 0.0, 0.0
    blocks, t0 = P * V**L, time.perf_counter()  # a notice on stderr when the first block says it will take long
    for k in range(P):
        p, q = pool.draft[k], pool.target[k]
        target = _target_law(q)
        out, var = np.zeros(cells), np.zeros(cells)
        for x in itertools.product(range(V), repeat=L):
            pi = float(np.prod([p[i, t] for i, t in enumerate(x)]))
            if pi == 0:
                continue
            xs = np.tile(np.array(x, dtype=np.int64), (M, 1))
            tau, y = call_sampler(fn, xs, np.repeat(p[None], M, 0), np.repeat(q[None], M, 0), rng, timeout)
            freq = np.bincount(tau * V + y, minlength=(L + 1) * V).reshape(L + 1, V) / M
            contrib = np.zeros(((L + 1) * V, cells))  # outcome (τ, y) -> its continued law over Ω^{L+1}
            for t in range(L + 1):
                for yy in range(V):
                    prefix = list(x[:t]) + [yy]
                    law = np.ones(1)
                    for i in range(L + 1):
                        row = np.eye(V)[prefix[i]] if i < len(prefix) else q[i]
                        law = np.outer(law, row).ravel()
                    contrib[t * V + yy] = law
            if k == 0 and t0 is not None:
                notice_if_long(str(sampler if isinstance(sampler, str) else getattr(sampler, "__name__", "sampler")),
                               blocks, 1, time.perf_counter() - t0, "blocks")
                t0 = None
            f = freq.ravel()
            out += pi * (f @ contrib)
            g = (f * M + 0.5) / (M + 0.5 * f.size)  # unseen outcomes keep some variance (a continuity floor)
            var += pi**2 * np.maximum(g @ contrib**2 - (g @ contrib) ** 2, 0.0) / M
            acc_obs += pi * float(freq.sum(axis=1) @ np.arange(L + 1)) / P
            if law_of is not None:
                exact = law_of.law(np.array([x]), p[None], q[None])
                cond = (np.asarray(exact.accept_probs)[0][:, None] * np.asarray(exact.correction_probs)[0])
                worst["conditional_max_deviation"] = max(worst["conditional_max_deviation"],
                                                         float(np.abs(cond - freq).max()))
                e = float(np.asarray(exact.expected_accepted)[0])
                acc_exact += pi * e / P
                second = float(cond.sum(axis=1) @ np.arange(L + 1) ** 2)
                acc_var += (pi / P) ** 2 * max(second - e**2, 0.0) / M
        dev = out - target
        floor = np.maximum(np.sqrt(var), 1e-12)
        z = np.where((var > 0) | (np.abs(dev) > 1e-12), dev / floor, 0.0)
        z_all.append(z)
        worst["max_deviation"] = max(worst["max_deviation"], float(np.abs(dev).max()))
        worst["tv"] = max(worst["tv"], float(0.5 * np.abs(dev).sum()))
    z = np.concatenate(z_all)
    worst["max_abs_z"] = float(np.abs(z).max())
    from scipy import stats  # here, not at import: scipy.stats takes about a second to import

    p_law = float(min(1.0, z.size * 2 * stats.norm.sf(worst["max_abs_z"])))
    p_values = [p_law]
    acceptance = {"mean_accepted": acc_obs}
    if law_of is not None:
        za = (acc_obs - acc_exact) / max(np.sqrt(acc_var), 1e-12)
        acceptance.update(verifier=verifier, exact=acc_exact, z=float(za), p_value=float(2 * stats.norm.sf(abs(za))))
        p_values.append(acceptance["p_value"])
    p_value = float(min(1.0, len(p_values) * min(p_values)))
    level = alpha / len(p_values)
    failed = ["output law (max |z|)"] * (p_law < level) + ["acceptance (z)"] * (len(p_values) > 1 and p_values[1] < level)
    return {"sampler": str(label), "mode": "exact", "verdict": verdict(p_law < level, bool(failed), verifier),
            "failed_tests": failed,
            "p_value": p_value, "alpha": alpha, "vocab": V, "draft_length": L, "pairs": P, "draws_per_block": M,
            "output_law": worst, "acceptance": acceptance,
            "note": "drafted blocks enumerated exactly; the sampler's conditional law per block measured on a batch with "
                    "stratified uniforms; deviations against their standard errors"}
