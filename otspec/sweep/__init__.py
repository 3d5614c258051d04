"""Sweeps: grids of pairs × verifiers × lengths × drafts, one row per cell (``python -m otspec sweep``).

:mod:`.spec` reads and expands a TOML/YAML spec, :mod:`.cells` computes one cell, :mod:`.run` runs
the cells on a local pool or Dask distributed and writes Parquet and CSV tables.
"""

from .cells import build_pair, run_cell, run_cells, temper
from .run import gather, run_sweep, write_tables
from .spec import PAIR_KINDS, QUANTITIES, SweepSpec, cell_id, cell_seed, load_spec

__all__ = ["PAIR_KINDS", "QUANTITIES", "SweepSpec", "build_pair", "cell_id", "cell_seed", "gather", "load_spec",
           "run_cell", "run_cells", "run_sweep", "temper", "write_tables"]
