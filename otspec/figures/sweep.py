"""``python -m otspec.plot sweep RESULTS``: lines or a heat map from a sweep's results table.

Lines: ``--x`` against ``--y``, one line per value of ``--hue``, with the interval band of ``y`` where
the table has one (``exact_*``: ``exact_low``/``exact_high``; ``mc_accepted``: ``mc_low``/``mc_high``;
``decode_block_efficiency``: ``decode_low``/``decode_high``). Heat map (``--heatmap``): ``--x`` by
``--y`` coloured by ``--z``. ``--where col=value`` (repeatable) picks a slice; every remaining
(hue, x) or (x, y) must name one row, else the error lists the columns that still vary.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

from ..clitools import (
    ArgumentParser,
    HelpFormatter,
    flags_that_apply,
    one_line,
    path_argument,
    writable_file,
)

__all__ = ["INTERVALS", "PARAMETERS", "main", "plot_sweep", "read_results"]

#: Most lines of one figure (``--hue`` values): more is no figure a reader can tell apart.
MAX_HUE_LINES = 64
#: The interval columns of a plotted value.
INTERVALS = {"exact_accepted": ("exact_low", "exact_high"), "mc_accepted": ("mc_low", "mc_high"),
             "decode_block_efficiency": ("decode_low", "decode_high"),
             "optimum_accepted": ("optimum_low", "optimum_high")}
#: The columns that describe a cell (``param_*`` too): what ``--where`` may need to fix.
PARAMETERS = ("pair", "pair_kind", "vocab", "concentration", "sparsity", "pair_seed", "verifier", "L", "k",
              "temperature", "cost_ratio")


def read_results(path):
    """The results table (Parquet, or CSV for ``.csv``) as a pandas DataFrame."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no sweep results at {path} (run: python -m otspec sweep SPEC)")
    try:
        with warnings.catch_warnings():  # a row longer than the header: pandas would shift it onto an index
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(path, index_col=False) if path.suffix.lower() == ".csv" else pd.read_parquet(path)
    except pd.errors.ParserWarning:
        raise ValueError(f"sweep results {path}: a row has more fields than the header (a damaged CSV)") from None
    except (ValueError, OSError, UnicodeDecodeError) as err:  # pandas' and pyarrow's parse errors are ValueErrors
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ValueError(f"sweep results {path}: not a readable {'CSV' if path.suffix.lower() == '.csv' else 'Parquet'}"
                         f" table ({first})") from None
    names = list(frame.columns)
    if path.suffix.lower() == ".csv":  # pandas renames a repeated header name 'x' to 'x.1': read the header as written
        import csv

        with open(path, newline="", encoding="utf-8", errors="replace") as fh:
            names = next(csv.reader(fh), [])
    twice = sorted({str(n) for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"sweep results {path}: column(s) {', '.join(map(repr, twice))} named twice; which one is meant "
                         "cannot be told")
    if frame.empty:
        raise ValueError(f"sweep results {path}: the table holds no rows")
    return frame


def _where(frame, conditions):
    for cond in conditions or ():
        col, sep, value = cond.partition("=")
        if not sep or col not in frame.columns:
            raise ValueError(f"--where {cond!r}: expected COLUMN=VALUE with a column of the table")
        column = frame[col]
        try:
            mask = np.isclose(column.astype(float), float(value))
        except (TypeError, ValueError):
            mask = column.astype(str) == value
        frame = frame[mask]
    if frame.empty:
        raise ValueError("no row left after --where" if conditions else "the table holds no rows")
    return frame


def _typed(frame, name: str, numeric: bool):
    """``frame`` with column ``name`` as numbers (required for a value, ``numeric``) or, for an axis, numbers or text
    but not a mix of the two (matplotlib cannot order them): a clear error instead of a drawing library's."""
    import pandas as pd

    column = frame[name]
    odd = column[column.map(lambda v: isinstance(v, list | tuple | dict | set | np.ndarray))]
    if not odd.empty:  # lists, arrays, mappings from Parquet: neither a number nor a label
        raise ValueError(f"column {name!r} must hold {'numbers' if numeric else 'numbers or text'}; it has a "
                         f"{type(odd.iloc[0]).__name__} cell ({one_line(repr(odd.iloc[0]))[:40]})")
    try:
        as_numbers = pd.to_numeric(column, errors="coerce")
        infinite = np.isinf(as_numbers.to_numpy(dtype=float, na_value=np.nan))
    except OverflowError:  # an integer of hundreds of digits
        raise ValueError(f"column {name!r} holds an integer beyond the float range: nothing a plot can place") from None
    except (TypeError, ValueError):  # lists and other objects: text to draw, if anything
        as_numbers = pd.Series(np.nan, index=column.index)
        infinite = np.zeros(len(column), dtype=bool)
    bad = column[as_numbers.isna() & column.notna()]
    if infinite.any():  # inf, or a number no float holds (1e400, 400 digits): drawn off the axes without a word
        raise ValueError(f"column {name!r} holds {str(column[infinite].iloc[0])[:40]!r}, infinite or beyond the "
                         "float range: nothing a plot can place")
    if bad.empty:
        return frame.assign(**{name: as_numbers})
    if numeric or len(bad) < column.notna().sum():
        raise ValueError(f"column {name!r} must hold {'numbers' if numeric else 'numbers or text, not both'}; "
                         f"it has {bad.iloc[0]!r}")
    return frame.assign(**{name: [("(missing)" if pd.isna(v) else str(v)) for v in column]})  # plain str: no NaN


def _one_row_each(frame, keys, value_cols):
    counts = frame.groupby(keys, dropna=False).size()
    if (counts > 1).any():
        params = [c for c in frame.columns if (c in PARAMETERS or c.startswith("param_")) and c not in keys
                  and frame[c].nunique(dropna=False) > 1]
        raise ValueError(f"several rows share each {tuple(keys)}: pick a slice with --where on {params}")


def plot_sweep(frame, x: str, y: str, *, hue: str | None = None, heatmap: bool = False, z: str | None = None,
               title: str | None = None):
    """A matplotlib figure of the table ``frame`` (see the module docstring)."""
    import matplotlib.pyplot as plt

    missing = [c for c in (x, y, hue, z) if c is not None and c not in frame.columns]
    if missing:
        raise ValueError(f"columns {missing} are not in the table; it has {sorted(frame.columns)}")
    if heatmap and z is None:
        raise ValueError("--heatmap needs --z, the value to colour")
    axes = [name for name in (x, y, hue, z) if name is not None] if heatmap else [x, y] + ([hue] if hue else [])
    if len(set(axes)) < len(axes):  # pandas said "The name L occurs multiple times, use a level number"
        raise ValueError(f"--x {x}, --y {y}{f', --hue {hue}' if hue else ''}{f', --z {z}' if z else ''}: one column "
                         "named twice; each axis takes its own")
    value = z if heatmap else y
    for name in (x, y, hue, z):
        if name is not None:
            frame = _typed(frame, name, numeric=name == value)
    if frame[value].isna().all():  # an empty figure reported as a success is worse than a refusal
        notes = [c for c in frame.columns if c.endswith("_note") and frame[c].notna().any()]
        why = "; ".join(f"{c}: {frame[c].dropna().iloc[0]}" for c in notes[:2])
        raise ValueError(f"column {value!r} is empty in every row: nothing to draw" + (f" ({why})" if why else ""))
    for name in (x, y) if heatmap else (x,):
        if frame[name].isna().all():  # every point at an undefined place
            raise ValueError(f"column {name!r} is empty in every row: no place to draw anything")
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    if heatmap:
        frame = frame.dropna(subset=[z])
        _one_row_each(frame, [x, y], [z])
        grid = frame.pivot(index=y, columns=x, values=z).sort_index().sort_index(axis=1)
        im = ax.imshow(grid.to_numpy(dtype=float), origin="lower", aspect="auto", cmap="viridis")
        ax.set_xticks(range(grid.shape[1]), [f"{v:g}" if isinstance(v, float) else str(v) for v in grid.columns])
        ax.set_yticks(range(grid.shape[0]), [f"{v:g}" if isinstance(v, float) else str(v) for v in grid.index])
        fig.colorbar(im, ax=ax, label=z)
    else:
        frame = frame.dropna(subset=[y])
        keys = [hue, x] if hue else [x]
        if hue and frame[hue].nunique(dropna=False) > MAX_HUE_LINES:  # thousands of lines and legend entries
            raise ValueError(f"--hue {hue}: {frame[hue].nunique(dropna=False):,} values, above MAX_HUE_LINES = "
                             f"{MAX_HUE_LINES} lines; pick a slice with --where")
        _one_row_each(frame, keys, [y])
        band = INTERVALS.get(y)
        groups = frame.groupby(hue, dropna=False) if hue else [(None, frame)]
        for i, (name, part) in enumerate(groups):
            part = part.sort_values(x)
            label = None if hue is None else f"{hue} = {name}"
            ax.plot(part[x], part[y], "o-", color=f"C{i}", label=label)
            if band and all(b in part.columns for b in band) and part[list(band)].notna().all().all():
                ax.fill_between(part[x], part[band[0]], part[band[1]], color=f"C{i}", alpha=0.2)
        if hue:
            ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title or (f"{z} by {x} and {y}" if heatmap else f"{y} by {x}"), fontsize=10)
    return fig


def main(argv=None) -> int:
    parser = ArgumentParser(prog="python -m otspec.plot sweep", description=__doc__.splitlines()[0],
                                     formatter_class=HelpFormatter)
    parser.add_argument("results", help="results.parquet (or .csv) written by python -m otspec sweep")
    parser.add_argument("--x", required=True, help="column on the horizontal axis")
    parser.add_argument("--y", required=True, help="value column (lines) or vertical-axis column (--heatmap)")
    parser.add_argument("--hue", help="one line per value of this column")
    parser.add_argument("--heatmap", action="store_true", help="a heat map of --z over --x and --y")
    parser.add_argument("--z", help="the value coloured in a heat map")
    parser.add_argument("--where", action="append", metavar="COL=VALUE", help="keep only these rows (repeatable)")
    parser.add_argument("--out", type=path_argument, help="PNG path (default: beside RESULTS, named after the axes)")
    args = parser.parse_args(argv)
    try:
        flags_that_apply(args, (("z", None, "heatmap"),
                                ("hue", None, ("lines (a heat map has no hue; leave out --heatmap)",
                                               lambda a: not a.heatmap))))
        stem = f"{args.z}_by_{args.x}_{args.y}" if args.heatmap else f"{args.y}_by_{args.x}"
        out = Path(args.out) if args.out else Path(args.results).with_name(f"{stem}.png")
        if out.suffix.lower() != ".png":
            raise ValueError(f"--out must name a .png file, got {out}")
        writable_file(out, "--out", make_folder=True)  # its folder made, as every figure command makes its own
        frame = _where(read_results(args.results), args.where)
        fig = plot_sweep(frame, args.x, args.y, hue=args.hue, heatmap=args.heatmap, z=args.z)
        fig.tight_layout()
        fig.savefig(out)
    except (ValueError, OSError, ImportError) as exc:
        print(f"{parser.prog}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0
