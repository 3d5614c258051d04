"""Logged rows: draft and target next-token rows recorded along real decoding paths, top-p truncated.

A log holds P paths (one per prompt) of T_i steps. Step t of a path keeps, at the prefix decoding
had emitted, the draft row p_t and the target row q_t on a small support: the union of the draft's
and the target's top-p sets (each at most ``max_kept`` tokens). What truncation removed is recorded
as three numbers: the draft's tail mass, the target's, and their overlap o_t = Σ_{x outside}
min(p_t(x), q_t(x)). Written by ``python -m llm_bridge.validate --log-rows FILE`` from a real pair, or
by :func:`log_rows` (``python -m otspec logrows``) from any pair of sources.

File format: numpy's compressed archive (``.npz``, read without pickles) with the arrays

====================  ==========  ==================================================================
``format``            str         ``"otspec-logged-rows/1"``
``meta``              str         JSON: who wrote it and how (models, top_p, max_kept, temperature)
``vocab_size``        int         V of the models
``path_offsets``      (P+1,) int  path i is steps ``path_offsets[i]:path_offsets[i+1]``
``tokens``            (N,) int    the token emitted at each step
``row_offsets``       (N+1,) int  step t keeps entries ``row_offsets[t]:row_offsets[t+1]``
``row_tokens``        (nnz,) int  kept token ids, increasing within a step
``draft, target``     (nnz,) f8   p_t and q_t at the kept tokens
``draft_tail``        (N,) f8     1 − Σ kept p_t
``target_tail``       (N,) f8     1 − Σ kept q_t
``tail_overlap``      (N,) f8     o_t, 0 <= o_t <= min(draft_tail, target_tail)
====================  ==========  ==================================================================

As a source, rows depend on position only: path i replays as the pair of
:class:`~otspec.sources.PositionalSource` whose row t is (p_t, q_t) — a drafted token does not change
later rows, as it would in the model. Everything otspec computes on a log is exact for that pair.
The tail mode says what the truncated mass becomes:

* ``"overlap"`` (default): three symbols after the vocabulary — V, shared (mass o_t in both rows),
  V+1, draft only (draft_tail − o_t), V+2, target only (target_tail − o_t). TV(p_t, q_t) then equals
  that of the full rows, so token verification accepts exactly as it does on the model's rows; block
  verification sees the tail's likelihood ratios only through these three symbols.
* ``"renormalise"``: the tail is dropped and both rows renormalised on the kept tokens — the rows of
  top-p sampling.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field

import numpy as np

from ..checks import (
    MAX_VOCAB_SIZE,
    check_data_file,
    check_npz_members,
    check_progress,
    check_real,
    check_seed,
    check_size,
    file_problem,
)
from ..distributions import NORMALISATION_TOL, top_p_mask
from ..errors import SizeLimitError
from ..progress import tqdm
from .base import Source, check_source
from .models import PositionalSource

__all__ = ["FORMAT", "MAX_LOG_ENTRIES", "TAIL_MODES", "LoggedRows", "load_logged_rows", "log_rows", "truncate_chunks", "truncate_rows"]

FORMAT = "otspec-logged-rows/1"
TAIL_MODES = ("overlap", "renormalise")
_ARRAYS = ("path_offsets", "tokens", "row_offsets", "row_tokens", "draft", "target", "draft_tail", "target_tail",
           "tail_overlap")
#: Rows handled per chunk by :func:`truncate_rows` (bounds its (rows, V) temporaries).
_CHUNK_ENTRIES = 1 << 24
#: Most row entries (paths × length × V per model) :func:`log_rows` scores and truncates; they are scored a few
#: paths at a time, so memory stays bounded, but truncation sorts every row (1.6·10^7 entries took 6.5 s).
MAX_LOG_ENTRIES = 1 << 27


def truncate_rows(draft_rows, target_rows, top_p: float = 0.95, max_kept: int | None = None) -> dict:
    """Keep the union of both rows' top-p sets at every step; the arrays of the file format (rows part).

    ``draft_rows`` and ``target_rows`` are (N, V) probability rows (float32 rows of a model are
    renormalised in float64 first). Returns ``row_offsets``, ``row_tokens``, ``draft``, ``target``,
    ``draft_tail``, ``target_tail`` and ``tail_overlap``.
    """
    p_all, q_all = np.asarray(draft_rows), np.asarray(target_rows)
    if p_all.ndim != 2 or p_all.shape != q_all.shape:
        raise ValueError(f"draft and target rows: expected two (steps, V) arrays of one shape, got {p_all.shape} "
                         f"and {q_all.shape}")
    step = max(1, _CHUNK_ENTRIES // max(p_all.shape[1], 1))
    return truncate_chunks(((p_all[a:a + step], q_all[a:a + step]) for a in range(0, p_all.shape[0], step)),
                           top_p, max_kept)


def truncate_chunks(chunks, top_p: float = 0.95, max_kept: int | None = None) -> dict:
    """:func:`truncate_rows` over an iterable of (draft rows, target rows) blocks of steps, one block in
    memory at a time (a model's rows at V = 49,152 are 0.4 MB per step)."""
    top_p = check_real(top_p, "top_p", low=0.0, high=1.0, low_open=True)
    if max_kept is not None:
        max_kept = check_size(max_kept, "max_kept")
    parts = {k: [] for k in ("counts", "row_tokens", "draft", "target", "draft_tail", "target_tail", "tail_overlap")}
    width = None
    for p, q in chunks:
        p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
        if p.ndim != 2 or p.shape != q.shape or (width is not None and p.shape[1] != width):
            raise ValueError(f"draft and target rows: expected (steps, V) blocks of one shape, got {p.shape} and "
                             f"{q.shape}")
        width = p.shape[1]
        for name, x in (("draft", p), ("target", q)):
            if not np.all(np.isfinite(x)) or (x < 0).any() or (x.sum(axis=1) <= 0).any():
                raise ValueError(f"{name} rows: expected finite non-negative rows with positive mass")
        p, q = p / p.sum(axis=1, keepdims=True), q / q.sum(axis=1, keepdims=True)
        keep = top_p_mask(p, top_p, max_kept) | top_p_mask(q, top_p, max_kept)
        rows, cols = np.nonzero(keep)  # row-major: token ids increase within a step
        parts["counts"].append(keep.sum(axis=1))
        parts["row_tokens"].append(cols)
        parts["draft"].append(p[rows, cols])
        parts["target"].append(q[rows, cols])
        parts["draft_tail"].append(np.where(keep, 0.0, p).sum(axis=1))
        parts["target_tail"].append(np.where(keep, 0.0, q).sum(axis=1))
        parts["tail_overlap"].append(np.where(keep, 0.0, np.minimum(p, q)).sum(axis=1))
    out = {k: np.concatenate(v) if v else np.zeros(0) for k, v in parts.items()}
    counts = out.pop("counts").astype(np.int64)
    out["row_offsets"] = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    out["row_tokens"] = out["row_tokens"].astype(np.int64)
    return out


@dataclass(frozen=True, eq=False)
class LoggedRows:
    """A log of truncated (draft, target) rows along decoding paths (see the module docstring).

    Build one with :func:`log_rows`, :meth:`from_rows` or :func:`load_logged_rows`; the constructor
    checks every array and raises ``ValueError`` naming the first problem.
    """

    vocab_size: int
    path_offsets: np.ndarray
    tokens: np.ndarray
    row_offsets: np.ndarray
    row_tokens: np.ndarray
    draft: np.ndarray
    target: np.ndarray
    draft_tail: np.ndarray
    target_tail: np.ndarray
    tail_overlap: np.ndarray
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        V = check_size(self.vocab_size, "vocab_size", limit=MAX_VOCAB_SIZE, limit_name="MAX_VOCAB_SIZE")
        tols = {}
        for name in _ARRAYS:
            kind = np.int64 if name in ("path_offsets", "tokens", "row_offsets", "row_tokens") else np.float64
            raw = np.asarray(getattr(self, name))
            if raw.dtype.kind not in "iuf":  # not bool: True is no token id or probability
                raise ValueError(f"logged rows: {name} must be an array of numbers, got dtype {raw.dtype}")
            if kind is np.int64 and raw.dtype.kind == "f" and raw.size and not np.all(
                    np.isfinite(raw) & (raw == np.round(raw))):
                bad = np.flatnonzero(~(np.isfinite(raw) & (raw == np.round(raw))))[0]
                raise ValueError(f"logged rows: {name} holds ids and offsets, so whole numbers; entry {bad} is "
                                 f"{raw[bad]!r} (dtype {raw.dtype})")
            value = raw.astype(kind)
            if name in ("draft", "target") and raw.dtype.kind == "f" and 8 * np.finfo(raw.dtype).eps > NORMALISATION_TOL:
                tols[name] = 8 * float(np.finfo(raw.dtype).eps)  # float16 masses sum to 1 within their eps only
            if value.ndim != 1:
                raise ValueError(f"logged rows: {name} must be one-dimensional, got shape {value.shape}")
            if kind is np.float64 and not np.all(np.isfinite(value)):
                raise ValueError(f"logged rows: {name} holds NaN or infinite values")
            object.__setattr__(self, name, value)
        N, paths, offs = self.tokens.size, self.path_offsets, self.row_offsets
        if paths.size < 2 or paths[0] != 0 or paths[-1] != N or (np.diff(paths) < 1).any():
            raise ValueError(f"logged rows: path_offsets must rise strictly from 0 to the {N} steps (no empty path)")
        if offs.size != N + 1 or offs[0] != 0 or offs[-1] != self.row_tokens.size or (np.diff(offs) < 1).any():
            raise ValueError("logged rows: row_offsets must rise strictly from 0 to the number of kept entries, "
                             "one step per token")
        nnz = self.row_tokens.size
        if self.draft.size != nnz or self.target.size != nnz:
            raise ValueError(f"logged rows: draft and target need one value per kept entry ({nnz}), got "
                             f"{self.draft.size} and {self.target.size}")
        for name in ("draft_tail", "target_tail", "tail_overlap"):
            if getattr(self, name).size != N:
                raise ValueError(f"logged rows: {name} needs one value per step ({N})")
        for name, ids in (("tokens", self.tokens), ("row_tokens", self.row_tokens)):
            if ids.size and (ids.min() < 0 or ids.max() >= V):
                raise ValueError(f"logged rows: {name} must lie in [0, {V}), got [{ids.min()}, {ids.max()}]")
        starts = np.zeros(nnz, dtype=bool)
        starts[offs[:-1]] = True
        if (np.diff(self.row_tokens) <= 0)[~starts[1:]].any():
            raise ValueError("logged rows: row_tokens must increase within each step (no repeated token)")
        for name, kept, tail in (("draft", self.draft, self.draft_tail), ("target", self.target, self.target_tail)):
            tol = tols.get(name, NORMALISATION_TOL)
            if (kept < 0).any() or (tail < -tol).any():
                raise ValueError(f"logged rows: {name} probabilities and tail masses must be non-negative")
            total = np.add.reduceat(kept, offs[:-1]) + tail
            bad = np.flatnonzero(np.abs(total - 1.0) > tol)
            if bad.size:
                raise ValueError(f"logged rows: {name} row of step {bad[0]} sums to {float(total[bad[0]])!r} with its tail; "
                                 f"expected 1 within {tol:g}")
            if name in tols:  # float16 masses: renormalised, as validate_probs renormalises accepted rows
                kept /= np.repeat(total, np.diff(offs))
                tail /= total
        tol = max(tols.values(), default=NORMALISATION_TOL)
        o = self.tail_overlap
        if (o < -tol).any() or (o > np.minimum(self.draft_tail, self.target_tail) + tol).any():
            raise ValueError("logged rows: tail_overlap must lie in [0, min(draft_tail, target_tail)]")
        if not isinstance(self.meta, dict):
            raise ValueError("logged rows: meta must be a dict")

    # ------------------------------------------------------------------ building
    @classmethod
    def from_rows(cls, draft_rows, target_rows, tokens, path_offsets, *, top_p: float = 0.95,
                  max_kept: int | None = None, meta: dict | None = None) -> LoggedRows:
        """Truncate full (N, V) rows along paths (:func:`truncate_rows`) into a log."""
        return cls(vocab_size=int(np.shape(draft_rows)[1]), path_offsets=path_offsets, tokens=tokens,
                   meta={"top_p": top_p, "max_kept": max_kept, **(meta or {})},
                   **truncate_rows(draft_rows, target_rows, top_p, max_kept))

    # ------------------------------------------------------------------ file
    def save(self, path: str | os.PathLike) -> None:
        """Write the compressed ``.npz`` file under exactly this name (a regular file: a device such as /dev/null
        or a pipe is refused, never written to as if it kept the rows)."""
        problem = file_problem(path)
        if problem not in (None, "does not exist"):
            raise ValueError(f"logged rows: cannot save to {path!r}: {problem}")
        with open(path, "wb") as fh:
            np.savez_compressed(fh, format=np.array(FORMAT), meta=np.array(json.dumps(self.meta, default=str)),
                                vocab_size=np.array(self.vocab_size), **{k: getattr(self, k) for k in _ARRAYS})

    # ------------------------------------------------------------------ shape
    @property
    def n_paths(self) -> int:
        return self.path_offsets.size - 1

    @property
    def n_steps(self) -> int:
        return self.tokens.size

    def windows(self, draft_length: int, span: int | None = None) -> np.ndarray:
        """First steps t of the windows of a block of L drafts: rows t..t+L inside one path, and at least
        ``span`` steps (default L+1) left in the path from t. A common ``span`` gives blocks of every L
        the same starts, so values at different L are comparable."""
        L = check_size(draft_length, "draft_length", minimum=0)
        need = L + 1 if span is None else check_size(span, "span")
        if need < L + 1:
            raise ValueError(f"span {need}: a block of L = {L} needs at least {L + 1} steps")
        starts = [np.arange(a, b - need + 1) for a, b in zip(self.path_offsets[:-1], self.path_offsets[1:], strict=True)]
        out = np.concatenate(starts).astype(np.int64)
        if out.size == 0:
            raise ValueError(f"logged rows: no path has the {need} steps a block of L = {L} needs "
                             f"(longest path: {int(np.diff(self.path_offsets).max())} steps)")
        return out

    def vocab(self, tail: str = "overlap") -> int:
        """Symbols of the logged source: V + 3 tail symbols (``overlap``) or V (``renormalise``)."""
        return self.vocab_size + (3 if _tail(tail) == "overlap" else 0)

    # ------------------------------------------------------------------ rows
    @functools.cache  # noqa: B019 - the log is immutable; one table per tail mode
    def segments(self, tail: str = "overlap") -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(offsets, tokens, p, q): every step's rows on its own support, packed flat (entries of mass 0 in
        both rows dropped), each row summing to 1 — what :class:`~otspec.engine.rowfree.RowTables` takes."""
        tail, N, V = _tail(tail), self.n_steps, self.vocab_size
        step = np.repeat(np.arange(N), np.diff(self.row_offsets))
        ids, p, q = [self.row_tokens], [self.draft], [self.target]
        if tail == "overlap":
            o = np.clip(self.tail_overlap, 0.0, None)
            for sym, tp, tq in ((V, o, o), (V + 1, self.draft_tail - o, 0.0 * o), (V + 2, 0.0 * o, self.target_tail - o)):
                tp, tq = np.clip(tp, 0.0, None), np.clip(tq, 0.0, None)
                live = (tp > 0) | (tq > 0)
                step = np.concatenate([step, np.flatnonzero(live)])
                ids.append(np.full(int(live.sum()), sym))
                p.append(tp[live])
                q.append(tq[live])
        order = np.argsort(step, kind="stable")  # step by step; symbols after the kept tokens
        step, ids, p, q = step[order], np.concatenate(ids)[order], np.concatenate(p)[order], np.concatenate(q)[order]
        live = (p > 0) | (q > 0)
        step, ids, p, q = step[live], ids[live], p[live], q[live]
        offsets = np.concatenate([[0], np.cumsum(np.bincount(step, minlength=N))]).astype(np.int64)
        for x in (p, q):
            total = np.add.reduceat(x, offsets[:-1])
            if (total <= 0).any():
                raise ValueError(f"logged rows: step {int(np.flatnonzero(total <= 0)[0])} keeps no mass of one row")
            x /= np.repeat(total, np.diff(offsets))
        return offsets, ids.astype(np.int64), p, q

    def step_rows(self, step: int, tail: str = "overlap") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(token ids, p, q) of one step on its own support."""
        offsets, ids, p, q = self.segments(tail)
        step = check_size(step, "step", minimum=0)
        if step >= self.n_steps:
            raise ValueError(f"step {step}: the log has {self.n_steps} steps")
        a, b = offsets[step], offsets[step + 1]
        return ids[a:b], p[a:b], q[a:b]

    def overlaps(self, tail: str = "overlap") -> np.ndarray:
        """Σ_x min(p_t(x), q_t(x)) = 1 − TV(p_t, q_t) of every step's logged rows, shape (N,)."""
        offsets, _, p, q = self.segments(tail)
        return np.add.reduceat(np.minimum(p, q), offsets[:-1])

    def path_pair(self, path: int, tail: str = "overlap", *, compact: bool = False) -> tuple[Source, Source]:
        """(draft, target) :class:`~otspec.sources.PositionalSource` of one path on the full V' symbols.

        ``compact=True`` relabels the symbols to those the path's rows use (sorted by id): the rows depend
        on position only, so every law of the decoding is the same up to that relabelling, with rows
        hundreds of times narrower than the model's vocabulary.
        """
        path = check_size(path, "path", minimum=0)
        if path >= self.n_paths:
            raise ValueError(f"path {path}: the log has {self.n_paths} paths")
        offsets, ids, p, q = self.segments(tail)
        a, b = self.path_offsets[path], self.path_offsets[path + 1]
        used = ids[offsets[a]:offsets[b]]
        symbols = np.unique(used) if compact else None
        rows = np.zeros((2, b - a, symbols.size if compact else self.vocab(tail)))
        for t in range(a, b):
            e0, e1 = offsets[t], offsets[t + 1]
            at = np.searchsorted(symbols, ids[e0:e1]) if compact else ids[e0:e1]
            rows[0, t - a, at], rows[1, t - a, at] = p[e0:e1], q[e0:e1]
        return PositionalSource(rows[0]), PositionalSource(rows[1])

    def path_pairs(self, tail: str = "overlap", *, compact: bool = True):
        """Every path's :meth:`path_pair`, in order (a generator: one path's rows at a time); relabelled by default,
        as the decode engine replays them."""
        return (self.path_pair(i, tail, compact=compact) for i in range(self.n_paths))

    def summary(self, tail: str = "overlap") -> dict:
        """Counts and means a user checks first: paths, steps, kept tokens, tail masses, acceptance 1 − TV."""
        kept = np.diff(self.row_offsets)
        return {"vocab_size": self.vocab_size, "paths": self.n_paths, "steps": self.n_steps,
                "kept_mean": float(kept.mean()), "kept_max": int(kept.max()),
                "draft_tail_mean": float(self.draft_tail.mean()), "target_tail_mean": float(self.target_tail.mean()),
                "overlap_mean": float(self.overlaps(tail).mean()), "tail": _tail(tail), "meta": self.meta}


def _tail(tail: str) -> str:
    if tail not in TAIL_MODES:
        raise ValueError(f"tail: expected one of {TAIL_MODES}, got {tail!r}")
    return tail


#: Most entries of one array of a logged-rows file, read from its header before anything is decompressed (a log written
#: within :data:`MAX_LOG_ENTRIES` stores fewer).
MAX_MEMBER_ENTRIES = MAX_LOG_ENTRIES


def load_logged_rows(path: str | os.PathLike) -> LoggedRows:
    """Read and check a logged-rows file (the module docstring gives the format)."""
    check_data_file(path, "logged rows")  # first: a number or a bytes path is refused by name
    path = os.fspath(path)
    try:  # whatever is wrong with an untrusted file (not a zip, a damaged member, one .npy array) is the same error
        check_npz_members(path, MAX_MEMBER_ENTRIES, "logged rows")
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError(f"it holds one {type(data).__name__}, not named arrays")
        with data:
            arrays = {k: data[k] for k in data.files}
    except SizeLimitError:
        raise
    except Exception as err:
        raise ValueError(f"logged rows: {path} is not a numpy .npz archive ({type(err).__name__}: "
                         f"{str(err).split('. ')[0]})") from None
    if "format" not in arrays or str(arrays["format"]) != FORMAT:
        raise ValueError(f"logged rows: {path} is not an otspec logged-rows file (expected format {FORMAT!r}, got "
                         f"{str(arrays['format']) if 'format' in arrays else 'none'!r})")
    missing = [k for k in ("vocab_size", "meta", *_ARRAYS) if k not in arrays]
    if missing:
        raise ValueError(f"logged rows: {path} lacks the arrays {missing}")
    unknown = sorted(set(arrays) - {"format", "vocab_size", "meta", *_ARRAYS})
    if unknown:  # as a JSON source's unknown key: a misspelt or foreign array is refused, not ignored
        raise ValueError(f"logged rows: {path} holds arrays this format does not have: {unknown}")
    try:
        meta = json.loads(str(arrays["meta"]))
    except (ValueError, RecursionError) as err:  # RecursionError: nested too deep
        raise ValueError(f"logged rows: {path}: meta is not JSON ({type(err).__name__}: {err})") from None
    vocab = arrays["vocab_size"]
    if vocab.shape != () or vocab.dtype.kind not in "iu":
        raise ValueError(f"logged rows: {path}: vocab_size must be one integer, got {vocab!r} (dtype {vocab.dtype})")
    check_size(int(vocab), f"logged rows: {path}: vocab_size", limit=MAX_VOCAB_SIZE, limit_name="MAX_VOCAB_SIZE")
    return LoggedRows(vocab_size=int(vocab), meta=meta, **{k: arrays[k] for k in _ARRAYS})


def log_rows(draft: Source, target: Source, paths: int, length: int, *, top_p: float = 0.95,
             max_kept: int | None = None, seed=0, progress: bool | None = None) -> LoggedRows:
    """A log from any pair of sources: ``paths`` sequences of ``length`` tokens sampled from the target
    (what lossless decoding emits), both rows recorded at every prefix and truncated (:func:`truncate_rows`).

    Rows are scored a few paths at a time (memory stays bounded); ``paths × length × V`` above
    :data:`MAX_LOG_ENTRIES` is refused before anything is sampled. ``progress``: a bar over paths
    (``None``: on a terminal).
    """
    progress = check_progress(progress)
    draft, target = check_source(draft, "draft"), check_source(target, "target")
    paths, length, seed = check_size(paths, "paths"), check_size(length, "length"), check_seed(seed)
    V = draft.vocab_size
    if V != target.vocab_size:
        raise ValueError(f"draft has {V} tokens, target {target.vocab_size}")
    if paths * length * V > MAX_LOG_ENTRIES:
        raise SizeLimitError(f"logging {paths:,} paths x {length:,} steps x V = {V:,} is {paths * length * V:,} row "
                             f"entries per model, above MAX_LOG_ENTRIES = {MAX_LOG_ENTRIES:,}; log fewer paths or "
                             "steps", size=paths * length * V, limit=MAX_LOG_ENTRIES)
    rng = np.random.default_rng(seed)
    tokens = target.sample(paths, length, rng)
    per = max(1, _CHUNK_ENTRIES // (length * V))
    bar = tqdm(total=paths, unit="path", desc="logging rows", leave=False,
               disable=None if progress is None else not progress)

    def chunks():
        for a in range(0, paths, per):
            block = tokens[a:a + per]
            yield tuple(s.path_probs(block, include_next=False).reshape(block.shape[0] * length, V)
                        for s in (draft, target))
            bar.update(block.shape[0])

    arrays = truncate_chunks(chunks(), top_p, max_kept)
    bar.close()
    meta = {"top_p": top_p, "max_kept": max_kept, "written_by": "otspec.sources.logged.log_rows",
            "draft": repr(draft), "target": repr(target), "seed": seed if isinstance(seed, int) else None}
    return LoggedRows(vocab_size=V, path_offsets=np.arange(paths + 1) * length, tokens=tokens.reshape(-1), meta=meta,
                      **arrays)
