"""Row pairs the audit drives a sampler with: synthetic families at any vocabulary, or a real pair's logged rows.

A pool holds ``draft`` (P, L, V) and ``target`` (P, L + 1, V) rows; rows depend on the position only, so a
lossless sampler's emitted tokens, continued by the target, are independent with the i-th ~ ``target[:, i]``.

* :func:`synthetic_pool` — four families cycled over the pool: Dirichlet targets at three concentrations with
  drafts mixed toward an independent row (distances from near-equal to far), sparse rows (zeros in both, the draft's
  support not the target's), peaked rows (one dominant token, often a different one for the draft) and near-equal
  rows (a small perturbation of the target).
* :func:`logged_pool` — windows of L + 1 consecutive steps of ``figures/llm_*_rows.npz``, each on the union of its
  steps' kept tokens plus the tail symbols (the sampler never sees a 49,152-wide row it does not need).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_seed, check_size
from ..errors import SizeLimitError
from ..sources import load_logged_rows

__all__ = ["FAMILIES", "MAX_AUDIT_DRAFT_LENGTH", "MAX_POOL_ENTRIES", "RowPool", "logged_pool", "synthetic_pool"]

#: Most probabilities (pairs × (L + 1) × V) of a synthetic pool: 2^24, 128 MiB an array (the pool builds a few):
#: V ≤ 43,690 at the default 128 pairs and L = 2. Checked from the sizes before anything is allocated.
MAX_POOL_ENTRIES = 2**24

FAMILIES = ("dirichlet", "sparse", "peaked", "near_equal")


@dataclass(frozen=True)
class RowPool:
    """Row pairs by position: ``draft`` (P, L, V), ``target`` (P, L + 1, V), and where they came from."""

    draft: np.ndarray
    target: np.ndarray
    source: str
    family: np.ndarray  # (P,) index into the source's family names
    family_names: tuple

    @property
    def size(self) -> int:
        return self.draft.shape[0]

    @property
    def draft_length(self) -> int:
        return self.draft.shape[1]

    @property
    def vocab(self) -> int:
        return self.draft.shape[2]


#: Longest draft an audit drives a sampler with (real speculative decoders draft a few to a few tens of tokens).
MAX_AUDIT_DRAFT_LENGTH = 64

def _one_hot(index: np.ndarray, V: int) -> np.ndarray:
    """(…, V) rows with a 1 at ``index`` (…) (not ``np.eye(V)[index]``, a V × V matrix first)."""
    out = np.zeros((*index.shape, V))
    np.put_along_axis(out, index[..., None], 1.0, axis=-1)
    return out


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / x.sum(axis=-1, keepdims=True)


def synthetic_pool(n_pairs: int = 128, vocab: int = 64, draft_length: int = 2, seed=0) -> RowPool:
    """``n_pairs`` synthetic row pairs of ``vocab`` tokens for drafts of ``draft_length`` (module docstring)."""
    P, V = check_size(n_pairs, "n_pairs", limit=4096, limit_name="4,096"), check_size(
        vocab, "vocab", minimum=2, limit=1_000_000, limit_name="1,000,000")
    L = check_size(draft_length, "draft_length", limit=MAX_AUDIT_DRAFT_LENGTH, limit_name="MAX_AUDIT_DRAFT_LENGTH")
    if P * (L + 1) * V > MAX_POOL_ENTRIES:
        raise SizeLimitError(f"a synthetic pool of {P} row pairs x {L + 1} positions x V = {V:,} is "
                             f"{P * (L + 1) * V:,} probabilities (limit MAX_POOL_ENTRIES = 2^24: V <= "
                             f"{MAX_POOL_ENTRIES // (P * (L + 1)):,} here); audit a large vocabulary on logged rows "
                             "(--rows)")
    rng = np.random.default_rng(check_seed(seed))
    shape = (P, L + 1, V)
    conc = rng.choice([0.1, 0.5, 2.0], size=(P, 1, 1))
    target = rng.dirichlet(np.ones(V), size=(P, L + 1)) ** (1.0 / conc)  # sharper rows at small concentrations
    target = _normalise(target)
    other = _normalise(rng.dirichlet(np.ones(V), size=(P, L + 1)) ** (1.0 / conc))
    lam = rng.uniform(0.1, 1.0, size=(P, L + 1, 1))
    draft = (1 - lam) * target + lam * other
    family = np.arange(P) % len(FAMILIES)
    sparse = family == 1
    if sparse.any():
        keep_q, keep_p = rng.random(shape) > 0.3, rng.random(shape) > 0.3
        keep_q[..., 0] |= ~keep_q.any(axis=-1)
        keep_p[..., 1 % V] |= ~keep_p.any(axis=-1)
        target[sparse] = _normalise(target[sparse] * keep_q[sparse])
        draft[sparse] = _normalise(np.where(keep_p[sparse], draft[sparse] + 1e-3, 0.0))
    peaked = family == 2
    if peaked.any():
        n = int(peaked.sum())
        top_q, top_p = rng.integers(V, size=(n, L + 1)), rng.integers(V, size=(n, L + 1))
        base_q, base_p = _normalise(rng.random((n, L + 1, V))), _normalise(rng.random((n, L + 1, V)))
        w = rng.uniform(0.5, 0.95, size=(n, L + 1, 1))
        target[peaked] = (1 - w) * base_q + w * _one_hot(top_q, V)
        draft[peaked] = (1 - w) * base_p + w * _one_hot(top_p, V)
    near = family == 3
    if near.any():
        noise = rng.dirichlet(np.ones(V), size=(int(near.sum()), L + 1))
        draft[near] = 0.9 * target[near] + 0.1 * noise
    return RowPool(_normalise(draft[:, :L]), _normalise(target), f"synthetic (V = {V}, {P} row pairs)", family,
                   FAMILIES)


def logged_pool(path, draft_length: int = 2, n_pairs: int = 512, tail: str = "overlap", seed=0) -> RowPool:
    """``n_pairs`` windows of ``draft_length`` + 1 steps of a logged-rows file, each on its own compact vocabulary
    (the union of its steps' kept tokens and the tail symbols), padded with zero-probability tokens to the widest."""
    L = check_size(draft_length, "draft_length", limit=MAX_AUDIT_DRAFT_LENGTH, limit_name="MAX_AUDIT_DRAFT_LENGTH")
    n_pairs = check_size(n_pairs, "n_pairs", limit=4096, limit_name="4,096")
    seed = check_seed(seed)
    log = load_logged_rows(path)
    starts = log.windows(L)
    if starts.size == 0:
        raise ValueError(f"{path}: no window of {L + 1} consecutive steps on one path")
    rng = np.random.default_rng(seed)
    chosen = rng.choice(starts, size=n_pairs, replace=starts.size < n_pairs)
    offsets, ids, p, q = log.segments(tail)
    windows = []
    for s in chosen:
        steps = [(ids[offsets[t]:offsets[t + 1]], p[offsets[t]:offsets[t + 1]], q[offsets[t]:offsets[t + 1]])
                 for t in range(int(s), int(s) + L + 1)]
        symbols = np.unique(np.concatenate([tok for tok, _, _ in steps]))
        windows.append((symbols, steps))
    V = max(sym.size for sym, _ in windows)
    draft, target = np.zeros((len(windows), L, V)), np.zeros((len(windows), L + 1, V))
    for w, (symbols, steps) in enumerate(windows):
        for i, (tok, pi, qi) in enumerate(steps):
            at = np.searchsorted(symbols, tok)
            target[w, i, at] = qi
            if i < L:
                draft[w, i, at] = pi
    return RowPool(_normalise(draft), _normalise(target), f"logged rows {path} ({len(windows)} windows, up to {V} "
                   "symbols)", np.zeros(len(windows), dtype=np.int64), ("logged",))
