"""Carried residual targets of the v1 backward block verifier (spec §8.2, line 8).

After v1 Algorithm 3 accepts τ < γ − 1 tokens of a block that started at
position ``s``, the *target model of the following iterations* changes for the
rest of that block: for a prefix y^j of the block (j = τ+1 .. γ−1, counted from
``s``) the next token follows the residual chain

    q_next(·|y^j) ∝ ( T(y^j) t(·|y^j) − P(y^j) p(·|y^j) )_+          (spec eq. (12c))

where t is the target the block was verified against, T(y^j) and P(y^j) are
the target's and draft's joint probabilities of the block part y^j, and p is the
draft. From position s + γ on, q_next = t again.

Because the next iteration may itself end early inside this window, targets
nest: each sequence carries a *stack of windows*. Window k covers next-token
positions below ``end[k]`` and stores ``log_ratio[k]`` = log T_k(y^j)/P(y^j),
where T_k is the target *below* it (the cascade of windows 0..k−1 over the plain
target). The current target row at a position is obtained by applying the active
windows bottom-up (:meth:`ResidualWindows.cascade`); appending a token updates
every active window's ratio with that token's probability under its base
(:meth:`ResidualWindows.advance`).

Everything is vectorised over the batch (rows = sequences); ratios stay in log
space, so blocks of 64 tokens with joint probabilities far below 1e-308 work.
At most γ − 1 windows are active at once (each starts at least one position
after the previous one and spans γ positions), so a depth of γ suffices.

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import array_api_compat
import numpy as np

from ..distributions import host_to_like, namespace, positive_part, residual
from .kernels import ratio_scales

__all__ = ["ResidualWindows", "carry_forward", "score_carried"]


def _xp(x):
    return None if isinstance(x, np.ndarray) else namespace(x)


@dataclass
class ResidualWindows:
    """A stack of residual windows for each of B sequences (numpy, or torch on the rows' device).

    Attributes
    ----------
    end : int array (B, D)
        Window k covers next-token positions ``n < end[:, k]``.
    log_ratio : float array (B, D)
        log T_k(y^j) / P(y^j) over the window's block tokens appended so far.
    valid : bool array (B, D)
        Which slots hold a window; slots are ordered bottom (oldest) to top.

    On torch every operation runs on the device without reading anything back: a level is computed for
    every window (the numpy path skips windows that are active nowhere, which needs a look at the mask), and
    :meth:`push` does not check for a free slot (the depth is the block length, enough by the module's argument).
    """

    end: Any
    log_ratio: Any
    valid: Any

    @classmethod
    def empty(cls, batch: int, depth: int) -> ResidualWindows:
        return cls(np.zeros((batch, depth), np.int64), np.zeros((batch, depth)), np.zeros((batch, depth), bool))

    @property
    def depth(self) -> int:
        return self.end.shape[1]

    def to_like(self, rows) -> None:
        """Move the windows (in place) to the array kind, device and float dtype of ``rows`` (numpy windows and torch
        rows: a copy that does not wait for the device; done once, when a run's first rows arrive)."""
        if isinstance(rows, np.ndarray) or not isinstance(self.end, np.ndarray):
            return
        self.end, self.valid = host_to_like(self.end, rows), host_to_like(self.valid, rows)
        self.log_ratio = host_to_like(self.log_ratio, rows).to(rows.dtype)

    def take(self, rows) -> ResidualWindows:
        """Select / repeat sequences (``rows``: a host index, or one of the windows' kind)."""
        rows = host_to_like(rows, self.end)
        return ResidualWindows(self.end[rows], self.log_ratio[rows], self.valid[rows])

    def put(self, rows, other: ResidualWindows) -> None:
        """Overwrite the windows of sequences ``rows`` with ``other`` (in place)."""
        rows = host_to_like(rows, self.end)
        self.end[rows], self.log_ratio[rows], self.valid[rows] = other.end, other.log_ratio, other.valid

    def active(self, position):
        """(B, D) mask of windows covering the token at ``position`` (shape (B,))."""
        if isinstance(self.end, np.ndarray):
            return self.valid & (np.asarray(position)[:, None] < self.end)
        return self.valid & (host_to_like(position, self.end)[:, None] < self.end)

    def cascade(self, target_row, draft_row, position) -> np.ndarray:
        """Target rows below and after each window: shape (B, D+1, V).

        ``levels[:, 0]`` is the plain target row, ``levels[:, k+1]`` the row after
        applying window k (unchanged where it is inactive); ``levels[:, -1]`` is
        the current target. :meth:`cascade_levels` gives the same rows unstacked.
        """
        levels = self.cascade_levels(target_row, draft_row, position)
        return np.stack(levels, axis=1) if isinstance(levels[0], np.ndarray) else namespace(levels[0]).stack(levels,
                                                                                                            axis=1)

    def cascade_levels(self, target_row, draft_row, position) -> list:
        """:meth:`cascade` as a list of D+1 arrays (B, V), without stacking them: a level that no window
        changes is the level below it (the same array), so a position costs a full-vocabulary row only for
        the windows active at it, and nothing is copied. At a real vocabulary the stacked (B, D+1, V) rows
        of every drafted position are tens to hundreds of MB per iteration, allocated fresh each time."""
        host = isinstance(self.end, np.ndarray)
        levels = [np.asarray(target_row, dtype=np.float64) if host else target_row]
        act = self.active(position)
        for k in range(self.depth):
            below = levels[-1]
            if host and not act[:, k].any():
                levels.append(below)
                continue
            a, b = ratio_scales(self.log_ratio[:, k])
            levels.append(_window_level(below, draft_row, a, b, act[:, k]))
        return levels

    def advance(self, levels, draft_row, position, token) -> ResidualWindows:
        """Windows after appending ``token`` (B,) at ``position`` (B,).

        ``levels`` are this position's :meth:`cascade` rows; each active window's
        ratio gains log base(token) − log p(token).
        """
        rows = np.arange(len(token))
        base = levels[rows, :-1, token]  # (B, D): the row below window k at the token
        return self.advance_at(base, draft_row[rows, token], position)

    def advance_at(self, base, p_tok, position) -> ResidualWindows:
        """:meth:`advance` from the appended token's probabilities alone: ``base`` (B, D), under the row below
        each window, and ``p_tok`` (B,), under the draft."""
        xp = _xp(base)
        act = self.active(position)
        if xp is None:
            p_tok = np.broadcast_to(np.asarray(p_tok)[:, None], base.shape)
        else:
            p_tok = xp.broadcast_to(p_tok[:, None], base.shape)
        # T = 0 is absorbing (-inf); otherwise P = 0 makes the ratio +inf (residual = base row);
        # only finite steps are added, so no inf - inf ever arises
        dead = act & ((base <= 0) | (self.log_ratio == -np.inf))
        unbounded = act & ~dead & (p_tok <= 0)
        finite = act & ~dead & ~unbounded
        if xp is None:
            ratio = self.log_ratio.copy()
            ratio[finite] += np.log(base[finite]) - np.log(p_tok[finite])
            ratio[dead] = -np.inf
            ratio[unbounded] = np.inf
            return ResidualWindows(self.end, ratio, self.valid)
        one = xp.ones_like(base)
        step = xp.log(xp.where(finite, base, one)) - xp.log(xp.where(finite, p_tok, one))
        ratio = self.log_ratio + xp.where(finite, step, xp.zeros_like(step))
        ratio = xp.where(dead, xp.full_like(ratio, -np.inf), xp.where(unbounded, xp.full_like(ratio, np.inf), ratio))
        return ResidualWindows(self.end, ratio, self.valid)

    def push(self, mask, new_end, new_log_ratio, position) -> ResidualWindows:
        """Drop windows that cover nothing from ``position`` on, then add one on top where ``mask``.

        ``new_end`` and ``new_log_ratio`` are scalars or (B,) arrays. Raises
        ``RuntimeError`` if a sequence has no free slot (depth too small; checked on numpy).
        """
        xp = _xp(self.end)
        keep = self.valid & (self.end > (np.asarray(position) if xp is None else host_to_like(position, self.end))[:, None])
        if xp is None:
            order = np.argsort(~keep, axis=1, kind="stable")  # kept windows first, in stack order
            take = np.take_along_axis
        else:
            order = xp.argsort(xp.astype(~keep, xp.int8), axis=1, stable=True)
            take = xp.take_along_axis
        end = take(self.end, order, axis=1)
        ratio = take(self.log_ratio, order, axis=1)
        valid = take(keep, order, axis=1)
        count = (valid.sum(axis=1) if xp is None else xp.sum(xp.astype(valid, xp.int64), axis=1))
        B = count.shape[0]
        if xp is None:
            mask = np.asarray(mask, bool)
            if np.any(mask & (count >= self.depth)):
                raise RuntimeError("ResidualWindows: no free slot; use a depth of at least the block length")
            rows = np.flatnonzero(mask)
            slot = count[rows]
            end[rows, slot] = np.broadcast_to(new_end, mask.shape)[rows]
            ratio[rows, slot] = np.broadcast_to(new_log_ratio, mask.shape)[rows]
            valid[rows, slot] = True
            return ResidualWindows(end, ratio, valid)
        ids = xp.arange(self.depth, device=array_api_compat.device(end))
        put = host_to_like(mask, end)[:, None] & (ids[None, :] == count[:, None])
        new_end = xp.broadcast_to(xp.asarray(host_to_like(new_end, end), dtype=end.dtype,
                                             device=array_api_compat.device(end)), (B,))
        new_ratio = xp.broadcast_to(xp.asarray(host_to_like(new_log_ratio, ratio), dtype=ratio.dtype,
                                               device=array_api_compat.device(end)), (B,))
        return ResidualWindows(xp.where(put, new_end[:, None], end), xp.where(put, new_ratio[:, None], ratio),
                               valid | put)


def _window_level(below, draft_row, a, b, active):
    """``residual(a·below, b·draft_row)`` on the ``active`` rows and ``below`` on the others. On numpy in two (B, V)
    temporaries instead of the eight that the general residual and a select take (the same operations in the same
    order, so the same numbers): at a real vocabulary each is MBs, allocated per window and drafted position. On
    torch the residual of every row, then a select (no host look at which rows are active)."""
    if not isinstance(below, np.ndarray):
        xp = namespace(below)
        level = residual(a[:, None] * below, b[:, None] * draft_row)
        return xp.where(active[:, None], level, below)
    out = positive_part(below, b[:, None] * draft_row, scale=a[:, None])
    mass = out.sum(axis=-1, keepdims=True)
    good = mass[:, 0] > 0
    np.divide(out, np.where(good[:, None], mass, 1.0), out=out)
    bad = np.flatnonzero(~good & active)
    if bad.size:  # zero residual mass (reached with probability 0): residual's fallback, a·below normalised
        out[bad] = residual(a[bad, None] * below[bad], b[bad, None] * draft_row[bad])
    idle = ~np.asarray(active, bool)
    out[idle] = below[idle]
    return out


def _rows_like(n: int, like):
    """0..n−1 as an index of ``like``'s kind and device."""
    if isinstance(like, np.ndarray):
        return np.arange(n)
    return namespace(like).arange(n, device=array_api_compat.device(like))


def _stack(arrays, axis: int):
    return np.stack(arrays, axis=axis) if isinstance(arrays[0], np.ndarray) else namespace(arrays[0]).stack(arrays,
                                                                                                          axis=axis)


def score_carried(windows: ResidualWindows, q_rows, p_rows, toks, p0):
    """Carried-target rows along each drafted path.

    ``q_rows`` (n, g+1, V) and ``p_rows`` (n, g+1, V) are the plain models' rows along the
    drafted tokens ``toks`` (n, g) starting at positions ``p0`` (n,). Returns (the windows
    after 0..g draft tokens, as a list; per position 0..g, its :meth:`ResidualWindows.cascade_levels`
    list, whose last entry is the current target row (n, V)): the residual at a drafted position
    depends on the ratio accumulated over the draft tokens before it, so the windows advance along
    the path while scoring. A ragged batch (rows that drafted fewer than g tokens) is scored to g
    throughout; a row's positions past its own length are never read.
    """
    g = toks.shape[1]
    p0 = host_to_like(p0, windows.end)
    states, levels = [windows], []
    rows = _rows_like(toks.shape[0], windows.end)
    for j in range(g + 1):
        lv = states[-1].cascade_levels(q_rows[:, j], p_rows[:, j], p0 + j)
        levels.append(lv)
        if j < g:
            states.append(states[-1].advance_at(_below_at(lv, rows, toks[:, j]), p_rows[rows, j, toks[:, j]], p0 + j))
    return states, levels


def _below_at(levels, rows, token):
    """(n, D): ``token``'s probability under the level below each window, from a :meth:`ResidualWindows.cascade_levels`
    list (what :meth:`ResidualWindows.advance` reads from the stacked cascade)."""
    return _stack([lv[rows, token] for lv in levels[:-1]], axis=1)


def carry_forward(states, levels, p_rows, p0, g, tau, y, carry) -> ResidualWindows:
    """Windows after an iteration: the state after τ accepted tokens, advanced by Y, plus the
    verifier's new window (when τ ≤ g − 2) covering the rest of the block. ``states`` and
    ``levels``: as :func:`score_carried` returns them; ``g`` the drafted length, one for all rows or per row
    (a ragged batch)."""
    like = states[0].end
    p0 = host_to_like(p0, like)
    rows = _rows_like(tau.shape[0], like)
    after = ResidualWindows(*(_stack([getattr(s, f) for s in states], axis=1)[rows, tau]
                              for f in ("end", "log_ratio", "valid")))
    # Y under each level below a window, at each row's own position τ: (n, D)
    base = _stack([_below_at(levels[j], rows, y) for j in range(len(levels))], axis=0)[tau, rows]
    after = after.advance_at(base, p_rows[rows, tau, y], p0 + tau)
    if carry is None:
        return after.push(np.zeros(tau.shape[0], bool), 0, 0.0, p0 + tau + 1)
    return after.push(tau <= g - 2, p0 + g, carry, p0 + tau + 1)
