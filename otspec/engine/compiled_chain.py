"""Compiled (numba) decode loop for token verification at a fixed draft length on lookup sources.

:func:`otspec.engine.decode.generate` runs its chain loop here when nothing else would watch or steer it
(:func:`otspec.engine.lookup.chain_plan` decides, and gives the sources' lookup tables): the verifier
is :class:`~otspec.verifiers.TokenVerify` itself, the draft length a plain integer L, no observer is attached, and both
sources are IID rows or order-1 Markov chains (stationary or time-varying), whose next row is a lookup in a table by
(tokens so far, previous token). Everything else takes the Python loop of :mod:`otspec.engine.loop`.

The kernel runs the same algorithm as that loop, one sequence at a time: with n of N tokens done it drafts
g = min(L, N − n − 1) tokens, x_j ~ p_j, and token verification (Leviathan et al. 2023, Algorithm 1) accepts x_j with
probability min(1, q_j(x_j) / p_j(x_j)); at the first rejection it emits a correction from the residual
(q_j − p_j)_+ / Σ (q_j − p_j)_+ and drops the rest, and after g acceptances it emits a bonus token from q_g. The drafts
after a rejection are not drawn (their values are never read; the draft calls still count g, as the Python loop makes
them), which is the law of drawing them. The Ledger receives every iteration's (sequence, start, drafted depth,
accepted), the same records as the Python loop's, so the result (block efficiency, its interval, the cost model) is
computed by the same code. Uniforms: xoshiro256+ seeded from the caller's numpy Generator
(:func:`otspec.engine.compiled.seed_state`), so a seed fixes the result; the draws differ from the Python loop's.
"""

from __future__ import annotations

import numpy as np

from ..jit import available
from ..jit import njit as _njit
from .compiled import next_uniform, seed_state

__all__ = ["available", "decode_chains", "residual_tables"]


def decode_chains(tables, L: int, N: int, B: int, rng: np.random.Generator):
    """Decode ``B`` sequences of ``N`` tokens with token verification at draft length ``L``.

    Returns ``tokens`` (B, N) and the iterations' ``rows``, ``starts``, ``drafted`` and ``accepted`` (each (I,),
    I = the number of iterations, in sequence order)."""
    draft, target = tables
    state = seed_state(int(rng.integers(2**63)))
    tokens = np.zeros((B, N), dtype=np.int64)
    log = np.zeros((4, B * N), dtype=np.int64)
    residual = residual_tables(draft, target)
    tabled = residual is not None
    res_init, res_stack, res_stationary, res_markov = residual if tabled else (
        np.zeros(1), np.zeros((1, 1, 1)), True, False)
    count = _kernel(draft.initial, draft.initial_cdf, draft.stack, draft.stack_cdf, draft.stationary, draft.markov,
                    target.initial, target.initial_cdf, target.stack, target.stack_cdf, target.stationary,
                    target.markov, tabled, res_init, res_stack, res_stationary, res_markov, int(L), tokens, log, state)
    return tokens, log[0, :count], log[1, :count], log[2, :count], log[3, :count]


def residual_tables(draft, target):
    """The residual rows (q − p)_+ as cumulative sums, laid out as a lookup table (initial, stack, stationary,
    markov), so that a correction is an O(log V) draw rather than two passes over V (at V = 16 M and thousands of
    rejections those passes ran for minutes); ``None`` when the pair's tables do not share a layout small enough
    (at most twice the larger table), where the kernel sums the residual per draw as before. The draws are the
    same: the same running sums, searched for the same uniform."""
    stationary, markov = draft.stationary and target.stationary, draft.markov or target.markov
    V = target.initial.size
    K = 1 if stationary else min(t.stack.shape[0] for t in (draft, target) if not t.stationary)
    A = V if markov else 1
    if K * A * V > 2 * max(draft.stack.size, target.stack.size):
        return None

    def laid_out(table):
        return np.broadcast_to(table.stack if table.stationary else table.stack[:K], (K, A, V))

    initial = np.cumsum(np.clip(target.initial - draft.initial, 0.0, None))
    stack = np.cumsum(np.clip(laid_out(target) - laid_out(draft), 0.0, None), axis=-1)
    return initial, stack, stationary, markov


@_njit
def _row(table, stationary, markov, n, prev):
    """The row (or its cumulative sums) after ``n`` tokens, the last ``prev``, of a table past the first token."""
    return table[0 if stationary else n - 1, prev if markov else 0]


@_njit
def _draw(cdf, u):
    """Inverse-CDF draw of a row with cumulative sums ``cdf`` from a uniform ``u`` in [0, 1)."""
    i = np.searchsorted(cdf, u * cdf[-1], side="right")
    return min(i, cdf.size - 1)


@_njit
def _residual_draw(q, p, u):
    """A draw from (q − p)_+ normalised (the caller has rejected, so its mass is positive)."""
    total = 0.0
    for v in range(q.size):
        if q[v] > p[v]:
            total += q[v] - p[v]
    target = u * total
    acc = 0.0
    last = 0
    for v in range(q.size):
        if q[v] > p[v]:
            acc += q[v] - p[v]
            last = v
            if acc > target:
                return v
    return last  # rounding: the last token of positive residual mass


@_njit
def _kernel(d_init, d_init_cdf, d_stack, d_stack_cdf, d_stationary, d_markov, t_init, t_init_cdf, t_stack,
            t_stack_cdf, t_stationary, t_markov, tabled, r_init, r_stack, r_stationary, r_markov, L, tokens, log,
            state):
    B, N = tokens.shape
    count = 0
    for b in range(B):
        n = 0
        while n < N:
            g = min(L, N - n - 1)
            log[0, count] = b
            log[1, count] = n
            log[2, count] = g
            accepted = 0
            prev = tokens[b, n - 1] if n > 0 else 0
            emitted = False
            for j in range(g):
                pos = n + j
                if pos == 0:
                    x = _draw(d_init_cdf, next_uniform(state))
                    p, q = d_init, t_init
                else:
                    x = _draw(_row(d_stack_cdf, d_stationary, d_markov, pos, prev), next_uniform(state))
                    p = _row(d_stack, d_stationary, d_markov, pos, prev)
                    q = _row(t_stack, t_stationary, t_markov, pos, prev)
                if next_uniform(state) * p[x] < q[x]:  # accepted with probability min(1, q(x) / p(x))
                    tokens[b, pos] = x
                    accepted += 1
                    prev = x
                    continue
                u = next_uniform(state)
                if not tabled:
                    tokens[b, pos] = _residual_draw(q, p, u)
                elif pos == 0:
                    tokens[b, pos] = _draw(r_init, u)
                else:
                    tokens[b, pos] = _draw(_row(r_stack, r_stationary, r_markov, pos, prev), u)
                emitted = True
                break
            if not emitted:  # every drafted token accepted: the bonus token from the target's next row
                pos = n + g
                if pos == 0:
                    tokens[b, pos] = _draw(t_init_cdf, next_uniform(state))
                else:
                    tokens[b, pos] = _draw(_row(t_stack_cdf, t_stationary, t_markov, pos, prev), next_uniform(state))
            log[3, count] = accepted
            count += 1
            n += accepted + 1
    return count
