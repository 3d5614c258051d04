"""Exact evaluation over several consecutive iterations, with carried targets.

The state of a generation after some iterations is a *branch*: the emitted
prefix, the τ of each iteration, the residual windows the verifier left behind
(v1 block verification), and the branch probability. One iteration expands
every branch by every draft block with positive draft probability, applies the
verifier's exact law, and branches again on (τ, Y). Branches with the same
prefix and τ history have the same carried target, so they are merged.

After the last iteration every branch is continued by its *carried target*
(spec eq. (1): for v1 the residual chain, otherwise the plain target) up to
N = iterations · (L + 1) tokens — the most the iterations can emit — and the
resulting law over Ω^N is compared with the target's.

All branch operations are vectorised over branches (rows); the Python loops run
over positions and τ values only.

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

import numpy as np

from ..checks import MAX_DRAFT_LENGTH, capped_power, check_size, format_count
from ..errors import SizeLimitError
from ..sources import Source
from ..verifiers.base import Verifier
from ..verifiers.carry import ResidualWindows

#: Entries of the dense plan :func:`coupling_law` returns (V^L × V^L), checked before it is enumerated.
MAX_COUPLING_ENTRIES = 2**24

#: Largest number of branch rows held at once.
MAX_BRANCH_ROWS = 2**22

__all__ = ["MAX_BRANCH_ROWS", "branch_law", "coupling_law"]


def check_branches(n: int) -> None:
    """A ``SizeLimitError`` for more than :data:`MAX_BRANCH_ROWS` branches, raised from the count before the rows
    are copied (the copies of the rows, their windows and histories took gigabytes before the refusal)."""
    if n > MAX_BRANCH_ROWS:
        raise SizeLimitError(f"exact multi-iteration evaluation needs {n:,} branches, above MAX_BRANCH_ROWS "
                             f"= {MAX_BRANCH_ROWS:,}; reduce the vocabulary, the draft length or the number of "
                             "iterations", size=n, limit=MAX_BRANCH_ROWS)


class _Branches:
    """Rows of (tokens buffer, length, mass, windows, τ history)."""

    def __init__(self, buf, length, mass, windows, taus):
        self.buf, self.length, self.mass, self.windows, self.taus = buf, length, mass, windows, taus
        check_branches(len(mass))

    def take(self, rows) -> _Branches:
        return _Branches(self.buf[rows], self.length[rows], self.mass[rows], self.windows.take(rows), self.taus[rows])

    @staticmethod
    def concat(parts) -> _Branches:
        return _Branches(
            np.concatenate([p.buf for p in parts]),
            np.concatenate([p.length for p in parts]),
            np.concatenate([p.mass for p in parts]),
            ResidualWindows(*(np.concatenate([getattr(p.windows, f) for p in parts])
                              for f in ("end", "log_ratio", "valid"))),
            np.concatenate([p.taus for p in parts]),
        )

    def rows_at(self, draft, target, position):
        """Draft row, cascade levels at ``position`` (B,)."""
        p_row = draft.next_probs(self.buf, position)
        q_row = target.next_probs(self.buf, position)
        return p_row, self.windows.cascade(q_row, p_row, position)

    def extend(self, probs, levels, p_row, position, others: int = 0) -> _Branches:
        """Every row followed by every token of positive ``probs`` (B, V), lexicographic (``others``: branches kept
        beside them, counted against the limit before anything is copied)."""
        parent, tok = np.nonzero(probs > 0)
        check_branches(len(parent) + others)
        out = self.take(parent)
        out.buf[np.arange(len(parent)), position[parent]] = tok
        out.mass = out.mass * probs[parent, tok]
        out.windows = out.windows.advance(levels[parent], p_row[parent], position[parent], tok)
        return out

    def merge(self, use_taus: bool) -> _Branches:
        """Sum the mass of rows with the same prefix (and τ history when targets are carried)."""
        masked = np.where(np.arange(self.buf.shape[1]) < self.length[:, None], self.buf, -1)
        key = np.concatenate([self.length[:, None], masked] + ([self.taus] if use_taus else []), axis=1)
        _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
        out = self.take(first)
        out.mass = np.bincount(inverse.ravel(), weights=self.mass, minlength=len(first))
        return out


def _iterate(draft: Source, target: Source, verifier: Verifier, L: int, states: _Branches, keep_paths: bool = False):
    """One speculative iteration from every branch; returns (new branches, P(τ = l), drafts).

    With ``keep_paths`` the outcome branches are not merged and their τ history
    ends with the index of the draft path they came from (rows of ``drafts``).
    """
    paths = states
    records = []  # per position: (paths before the token, draft row, cascade levels)
    for i in range(L + 1):
        pos = paths.length + i
        p_row, levels = paths.rows_at(draft, target, pos)
        records.append((paths, p_row, levels))
        if i < L:
            check_branches(int(np.count_nonzero(p_row > 0)) * (i + 2))  # the new paths and every record re-taken
            paths = paths.extend(p_row, levels, p_row, pos)
            # earlier records follow their paths (rows repeat as paths branch)
            parent = np.repeat(np.arange(len(p_row)), (p_row > 0).sum(axis=1))
            records = [(r.take(parent), pr[parent], lv[parent]) for r, pr, lv in records]
    n = len(paths.mass)
    start = paths.length
    drafts = paths.buf[np.arange(n)[:, None], start[:, None] + np.arange(L)]
    draft_rows = np.stack([pr for _, pr, _ in records[:L]], axis=1)
    target_rows = np.stack([lv[:, -1] for _, _, lv in records], axis=1)
    law = verifier.law(drafts, draft_rows, target_rows)
    accept = np.asarray(law.accept_probs, dtype=np.float64)
    corr = np.asarray(law.correction_probs, dtype=np.float64)
    carry = None if law.carry is None else np.asarray(law.carry, dtype=np.float64)
    accept_dist = paths.mass @ accept / paths.mass.sum()

    outcomes, total = [], 0
    for ell in range(L + 1):
        before, p_row, levels = records[ell]  # state after X^ell (draft tokens beyond are ignored)
        emitted = paths.mass[:, None] * accept[:, ell, None] * corr[:, ell, :]
        pos = start + ell
        idx, y = np.nonzero(emitted > 0)
        total += len(idx)
        check_branches(total)
        branch = before.take(idx)
        branch.buf[np.arange(len(idx)), pos[idx]] = y
        branch.mass = emitted[idx, y]
        branch.windows = branch.windows.advance(levels[idx], p_row[idx], pos[idx], y)
        branch.length = pos[idx] + 1
        extra = [np.full((len(idx), 1), ell)] + ([idx[:, None]] if keep_paths else [])
        branch.taus = np.concatenate([before.taus[idx], *extra], axis=1)
        if carry is not None:
            branch.windows = branch.windows.push(np.full(len(idx), ell <= L - 2), start[idx] + L,
                                                 carry[idx, ell, y], branch.length)
        outcomes.append(branch)
    branches = _Branches.concat(outcomes)
    if not keep_paths:
        branches = branches.merge(use_taus=carry is not None)
    return branches, accept_dist, drafts


def _continue(states: _Branches, draft: Source, target: Source, length: int) -> _Branches:
    """Extend every branch shorter than ``length`` with its carried target, token by token."""
    finished, kept = [], 0  # branches of full length, set aside once (not copied again every step)
    while (states.length < length).any():
        todo = states.length < length
        if not todo.all():
            finished.append(states.take(np.flatnonzero(~todo)))
            kept += len(finished[-1].mass)
            states = states.take(np.flatnonzero(todo))
        p_row, levels = states.rows_at(draft, target, states.length)
        states = states.extend(levels[:, -1], levels, p_row, states.length, others=kept)
        states.length = states.length + 1
    return _Branches.concat(finished + [states]) if finished else states


def _start(width: int, depth: int) -> _Branches:
    return _Branches(np.zeros((1, width), np.int64), np.zeros(1, np.int64), np.ones(1),
                     ResidualWindows.empty(1, depth), np.zeros((1, 0), np.int64))


def coupling_law(draft: Source, target: Source, verifier: Verifier, L: int) -> np.ndarray:
    """The coupling π(x^L, y^L) a verifier induces (spec §4, "verifier → coupling").

    X^L is the draft block; Y^L the first L tokens of the emitted (X^τ, Y)
    continued by the carried target. A lossless verifier's π has marginals
    p^L (rows) and q^L (columns), so it is feasible for the block-OT LP.

    Returns a dense array of shape (V**L, V**L), lexicographic on both axes.
    """
    from .arguments import chain_call

    L = check_size(L, "L", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    draft, target = chain_call("coupling_law", draft, target, verifier, L)  # the sources and the verifier too
    V = target.vocab_size
    entries = capped_power(V, 2 * L)
    if entries > MAX_COUPLING_ENTRIES:  # a dense (V^L, V^L) array: counted before the enumeration starts
        raise SizeLimitError(f"coupling_law: the plan over V = {V:,}, L = {L} has V^(2L) = {format_count(entries)} "
                             f"entries, above MAX_COUPLING_ENTRIES = 2^24; a smaller vocabulary or draft length",
                             size=entries, limit=MAX_COUPLING_ENTRIES)
    target.check_length(L + 1)
    branches, _, drafts = _iterate(draft, target, verifier, L, _start(L + 1, L), keep_paths=True)
    branches = _continue(branches, draft, target, L)
    digits = V ** np.arange(L - 1, -1, -1)
    rows = drafts[branches.taus[:, -1]] @ digits
    cols = branches.buf[:, :L] @ digits
    out = np.zeros((V**L, V**L))
    np.add.at(out, (rows, cols), branches.mass)
    return out


def branch_law(draft: Source, target: Source, verifier: Verifier, L: int, iterations: int):
    """Exact law of ``iterations`` consecutive iterations continued by the carried target.

    Returns ``(output_law over Ω^N, accept_dists (iterations, L+1), N)``.
    """
    N = iterations * (L + 1)
    target.check_length(N)
    draft.check_length(N)
    V = target.vocab_size
    states = _start(N, L)
    dists = []
    for _ in range(iterations):
        states, dist, _ = _iterate(draft, target, verifier, L, states)
        dists.append(dist)
    states = _continue(states, draft, target, N)
    index = states.buf @ (V ** np.arange(N - 1, -1, -1))
    return np.bincount(index, weights=states.mass, minlength=V**N), np.array(dists), N
