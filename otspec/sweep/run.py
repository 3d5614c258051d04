"""Running a sweep: cells on an executor, one file per finished cell, a table at the end.

Storage: ``OUT/cells/<cell>.json`` is written by whoever ran the cell (a worker, the local pool or
this process) to a temporary name and renamed into place, so a file is there whole or not at all.
A rerun skips every cell whose file exists (resume), and a worker that dies loses only the cell it
was running (the engine re-runs it). ``OUT/results.parquet`` and ``OUT/results.csv`` gather the
rows, in the spec's cell order, once every cell is done.

Executors: ``serial`` (this process), a local process pool (the default: embedded, nothing to start),
or Dask distributed (``scheduler="tcp://HOST:PORT"`` for a running cluster, ``cluster="local:N"`` to
start a LocalCluster of N single-threaded workers). Each cell's seed comes from the sweep seed and
its own parameters, so rows do not depend on the executor, the worker count or the order. Cells that
differ only in their cost ratio are one task (:func:`~otspec.sweep.cells.run_cells`): the ratio only
rescales the speedup columns (and the adaptive policy, run per ratio), so everything else is computed once.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from ..checks import check_progress, check_size, file_problem
from ..progress import tqdm
from .cells import check_pair, run_cells
from .spec import SweepSpec, cell_id, load_spec, shared_key
from .work import MAX_CELL_WORK, spec_work

__all__ = ["CRASH_ONCE_ENV", "MAX_LOCAL_WORKERS", "gather", "run_sweep", "write_tables"]


def _cell_path(out: Path, cell: dict) -> Path:
    return out / "cells" / f"{cell_id(cell)}.json"


def _file_digests(value, base: Path, cache: dict) -> dict:
    """sha256 of every file a cell names (a string that is a file under ``base``), by name."""
    found = {}
    stack = [value]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, list | tuple):
            stack.extend(x)
        elif isinstance(x, str) and x and len(x) < 4096:
            path = base / x
            if path.is_file():
                if path not in cache:
                    with path.open("rb") as fh:  # streamed: a large logged-rows file is never held whole
                        cache[path] = hashlib.file_digest(fh, "sha256").hexdigest()
                found[x] = cache[path]
    return found


def cell_key(cell: dict, spec: SweepSpec, cache: dict | None = None) -> str:
    """What a finished cell's row was computed from: the cell, the sweep's quantities and seed, and the bytes of
    the files it names. A row stored under another key (the spec or a source file changed since) is run again."""
    files = _file_digests(cell, Path(spec.base), {} if cache is None else cache)
    text = json.dumps([cell, sorted(spec.quantities), spec.seed, files], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _digest(row: dict) -> str:
    return hashlib.sha256(json.dumps({k: v for k, v in row.items() if k != "row_digest"}, sort_keys=True,
                                     allow_nan=True).encode()).hexdigest()[:16]


def check_out_folder(out: Path, spec: SweepSpec) -> None:
    """A ``ValueError`` naming the first path of the results folder that is there but is no regular file (a folder, a
    pipe, a device) where a cell's file or a table goes, or a ``cells`` that is no folder: checked before any cell
    runs, and before a pipe could be opened."""
    cells = out / "cells"
    if cells.exists() and not cells.is_dir():
        raise ValueError(f"--out {out}: {cells} is not a folder (the finished cells are stored there)")
    paths = [out / "results.parquet", out / "results.csv"] + ([_cell_path(out, c) for c in spec.cells]
                                                              if cells.is_dir() else [])
    for path in paths:
        problem = file_problem(path)
        if problem not in (None, "does not exist"):
            raise ValueError(f"--out {out}: {path} {problem}; remove it (a finished cell or a table is a file)")


#: Largest finished cell file read (a row is a few kB; a larger file is recomputed unread).
MAX_CELL_BYTES = 1 << 24


def _stored(path: Path, key: str) -> dict | None:
    """The row stored at ``path`` if it is whole, unedited and made under ``key``; else None (the cell runs again)."""
    if file_problem(path) is not None:  # missing, or no regular file: never opened (a pipe would block)
        return None
    if path.stat().st_size > MAX_CELL_BYTES:  # a cell's row is a few kB: a 2 GB file is no cell (it was read whole)
        return None
    try:
        row = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(row, dict) or row.get("cell_key") != key or row.get("row_digest") != _digest(row):
        return None
    return row


def _write_atomic(path: Path, row: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(row, fh, allow_nan=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


#: Fault injection for the crash tests: when this variable names a file that does not exist yet, the
#: next cell to start creates it and kills its own process mid-cell (as a lost worker would).
CRASH_ONCE_ENV = "OTSPEC_SWEEP_CRASH_ONCE"


def _run_and_store(cells: list, seed: int, quantities, base: str, out: str, extra: dict) -> int:
    """Run cells that differ only in their cost ratio and write their rows (this runs in the worker: finished rows
    survive the worker); returns how many."""
    marker = os.environ.get(CRASH_ONCE_ENV)
    if marker:
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.close(fd)
            os._exit(17)
    for cell, row in zip(cells, run_cells(cells, seed, quantities, Path(base)), strict=True):
        stored = {**extra, **row, "cell_key": extra["keys"][cell_id(cell)]}
        stored.pop("keys", None)
        _write_atomic(_cell_path(Path(out), cell), {**stored, "row_digest": _digest(stored)})
    return len(cells)


#: Most processes a sweep starts on this machine (``--workers`` or ``--cluster local:N``): each is a Python process of
#: a few hundred MB; far more than the cores only thrashes (100,000 asked for started 1,080 processes in 8 s).
MAX_LOCAL_WORKERS = 256


def _parse_cluster(cluster: str) -> int:
    kind, _, n = cluster.partition(":")
    if kind != "local" or not (n.isascii() and n.isdigit()) or int(n) < 1:  # '²' is a digit to str.isdigit
        raise ValueError(f"--cluster {cluster!r}: expected local:N with N >= 1 workers")
    return check_size(int(n), f"--cluster {cluster}: N", limit=MAX_LOCAL_WORKERS, limit_name="MAX_LOCAL_WORKERS")


def run_sweep(spec: SweepSpec | str | os.PathLike, out, *, workers: int | None = None, scheduler: str | None = None,
              cluster: str | None = None, progress: bool | None = None) -> dict:
    """Run every unfinished cell of ``spec`` into ``out``; returns {"cells", "ran", "skipped", "table"}.

    ``workers``: 1 runs in this process, N a local pool of N processes (default: the CPU count);
    ``scheduler`` / ``cluster``: Dask distributed instead (see the module docstring).
    """
    progress = check_progress(progress)
    spec = spec if isinstance(spec, SweepSpec) else load_spec(spec)
    if scheduler and cluster:
        raise ValueError("give --scheduler or --cluster, not both")
    if workers is not None:  # checked before anything starts
        workers = check_size(workers, "--workers", limit=MAX_LOCAL_WORKERS, limit_name="MAX_LOCAL_WORKERS")
    if cluster:
        _parse_cluster(cluster)
    out = Path(out)
    for pair in {json.dumps(c["pair"], sort_keys=True, default=str): c["pair"] for c in spec.cells}.values():
        check_pair(pair, Path(spec.base))  # before the folder is made or any cell runs
    check_out_folder(out, spec)  # a pipe where a cell file goes blocked the read; a folder failed after the run
    cache: dict = {}
    keys = {cell_id(c): cell_key(c, spec, cache) for c in spec.cells}
    todo = [c for c in spec.cells if _stored(_cell_path(out, c), keys[cell_id(c)]) is None]
    extra = {"sweep": spec.name, "sweep_seed": spec.seed, "keys": {cell_id(c): keys[cell_id(c)] for c in todo}}
    args = (spec.seed, list(spec.quantities), str(spec.base), str(out), extra)
    groups: dict = {}  # cells that differ only in their cost ratio run together: one computation, one row each
    for cell in todo:
        groups.setdefault(shared_key(cell), []).append(cell)
    tasks = list(groups.values())
    estimate = spec_work([group[0] for group in tasks], spec.quantities)
    remote = scheduler_client(scheduler) if scheduler and tasks else None  # reached before any folder or line
    out.mkdir(parents=True, exist_ok=True)  # made once the spec's pairs have been read
    if progress is not False and (estimate["estimated_entries"] or estimate["over_limit"]):
        print(_estimate_line(spec.name, len(todo), estimate), file=sys.stderr)
    bar = tqdm(total=len(spec.cells), initial=len(spec.cells) - len(todo), unit="cell", desc=f"sweep {spec.name}",
               disable=None if progress is None else not progress)
    try:
        if remote is not None or cluster:
            _run_dask(tasks, args, remote, cluster, bar)
        elif (workers or os.cpu_count() or 1) == 1 or len(tasks) <= 1:
            for group in tasks:
                bar.update(_run_and_store(group, *args))
        else:
            with ProcessPoolExecutor(max_workers=min(workers or os.cpu_count(), len(tasks))) as pool:
                for fut in as_completed([pool.submit(_run_and_store, group, *args) for group in tasks]):
                    bar.update(fut.result())
    finally:
        bar.close()
        if remote is not None:
            remote.close()
    table = write_tables(gather(spec, out), out)
    return {"cells": len(spec.cells), "ran": len(todo), "skipped": len(spec.cells) - len(todo), "table": table,
            "estimate": estimate}


def _estimate_line(name: str, n: int, estimate: dict) -> str:
    """What the sweep is about to do, from :func:`~otspec.sweep.work.spec_work`."""
    line = (f"sweep {name}: {n} cells to run; Monte Carlo and decoding touch about "
            f"{estimate['estimated_entries']:.2g} row entries (~{estimate['estimated_entries'] * 40e-9:.0f} s of one "
            f"core at 40 ns each)")
    if estimate.get("unestimated"):
        line += (f", not counting {estimate['unestimated']} cell quantities on source files or logged rows (their "
                 "vocabulary is read in the cell, and a quantity past MAX_CELL_WORK is left empty there)")
    if estimate["heaviest"]:
        line += f"; heaviest: {estimate['heaviest']}"
    if estimate["over_limit"]:
        line += (f"; {estimate['over_limit']} cell quantities exceed MAX_CELL_WORK = {MAX_CELL_WORK:,} entries and "
                 f"are left empty with a note (first: {estimate['over_limit_first'][0]})")
    return line


def _run_dask(tasks, args, remote, cluster, bar) -> None:
    """The tasks on Dask: the client ``remote`` of a running scheduler, or a local cluster of ``cluster``."""
    try:
        from distributed import Client, LocalCluster
        from distributed import as_completed as dask_completed
    except ImportError:
        raise ImportError(f"Dask distributed is not installed: {EXTRAS_HINT}") from None
    local = LocalCluster(n_workers=max(1, min(_parse_cluster(cluster), len(tasks))), threads_per_worker=1, processes=True,
                         dashboard_address=None) if cluster else None
    try:
        client = Client(local) if local is not None else remote
        with client:
            # retries: a task whose worker died is run again elsewhere; finished cells are already on disk
            futures = [client.submit(_run_and_store, group, *args, pure=False, retries=3) for group in tasks]
            for fut in dask_completed(futures):
                bar.update(fut.result())
    finally:
        if local is not None:
            local.close()


def scheduler_client(address: str):
    """A Dask client of the scheduler at ``address``; an address where no Dask scheduler answers (nothing there, a
    server of another kind, TLS without its settings, a protocol not installed) is a ``ConnectionError`` naming it."""
    from distributed import Client

    try:
        return Client(address, timeout="30s")
    except Exception as err:  # noqa: BLE001 - the comm layers raise many kinds (OSError, TypeError, MemoryError)
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ConnectionError(f"--scheduler {address}: no Dask scheduler could be reached there "
                              f"({type(err).__name__}: {first})") from None


def gather(spec: SweepSpec, out) -> list[dict]:
    """The rows of every finished cell of ``spec`` in ``out``, in the spec's cell order."""
    rows, cache = [], {}
    for cell in spec.cells:
        row = _stored(_cell_path(Path(out), cell), cell_key(cell, spec, cache))
        if row is not None:
            rows.append({k: v for k, v in row.items() if k not in ("cell_key", "row_digest")})
    return rows


#: How to install the sweep's extras, in a checkout (make demo and make test install them) or from the index.
EXTRAS_HINT = ("make demo installs them; or .venv/bin/pip install -e '.[sweep]' in a checkout (pip install "
               "'otspec[sweep]' from the package index)")


def missing_extras(dask: bool = False) -> list[str]:
    """The sweep's extras that are not importable here: pandas and pyarrow (its tables), distributed (a Dask run)."""
    import importlib.util

    names = ("pandas", "pyarrow") + (("distributed",) if dask else ())
    return [name for name in names if importlib.util.find_spec(name) is None]


def write_tables(rows: list[dict], out) -> dict:
    """``results.parquet`` and ``results.csv`` in ``out`` (pandas + pyarrow); returns their paths."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(f"pandas and pyarrow are needed for sweep tables: {EXTRAS_HINT}") from None
    out = Path(out)
    frame = pd.DataFrame(rows)
    paths = {"parquet": out / "results.parquet", "csv": out / "results.csv"}
    for kind, path in paths.items():  # written beside, then moved in: a link there is replaced, not written through
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb" if kind == "parquet" else "w", **({} if kind == "parquet" else {"newline": ""})) as fh:
            # through Python's open: pyarrow cannot name undecodable bytes
            frame.to_parquet(fh, index=False) if kind == "parquet" else frame.to_csv(fh, index=False)
        tmp.replace(path)
    return {k: str(v) for k, v in paths.items()}
