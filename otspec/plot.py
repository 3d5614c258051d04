"""``python -m otspec.plot NAME``: compute a figure's data, write ``NAME.json`` and ``NAME.png``.

Each figure is an entry of the registry :data:`otspec.figures.FIGURES` (data function,
renderer, report section). ``python -m otspec.plot all`` writes every figure; ``--out`` chooses the
PNG path (the JSON goes beside it); ``--scale`` shrinks the simulations.
``python -m otspec.plot sweep RESULTS --x COL --y COL`` draws a sweep's table
(:mod:`otspec.figures.sweep`).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from pathlib import Path

from .checks import check_real
from .clitools import (
    ArgumentParser,
    HelpFormatter,
    one_line,
    path_argument,
    real,
    writable_file,
    writable_folder,
)
from .figures import FIGURES, SCRATCH_DIR

__all__ = ["FIGURES", "main", "render", "write_figure"]

DEFAULT_DIR = SCRATCH_DIR
#: Largest ``--scale``: 100 times the report's sizes (the default report takes about 2 minutes).
MAX_SCALE = 100.0


def render(name: str, data: dict):
    """Matplotlib figure for ``name`` from its data dict."""
    return FIGURES[name].render(data)


def _typed(obj):
    """A typed record or row in a figure's data, as its JSON (``json.dumps``'s hook for what it cannot write)."""
    from .engine.rows import JsonObject

    if isinstance(obj, JsonObject):
        return obj.to_data()
    raise TypeError(f"a figure's data holds {type(obj).__name__}, which has no JSON form")


def write_figure(name: str, out: str | os.PathLike | None = None, scale: float = 1.0, require_records: bool = False,
                 **data_kwargs) -> tuple[Path, Path, dict]:
    """Compute, render and save figure ``name``; returns (png path, json path, data).

    ``data_kwargs`` (e.g. ``draft=``, ``target=`` rows) go to the figure's data function; ``records_dir=`` to those
    that read real-model records (others ignore it). ``out`` defaults to ``build/figures/<stem>.png``.
    ``require_records`` refuses a record figure whose folder holds nothing it reads (the plot command: an empty
    figure from a mistyped folder said nothing), before anything is written; the report draws such a section empty.
    """
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; available: {', '.join(sorted(FIGURES))}")
    scale = check_real(scale, "scale", low=0.0, high=MAX_SCALE, low_open=True)
    data_fn, stem = FIGURES[name].data, FIGURES[name].stem
    png = Path(out) if out is not None else DEFAULT_DIR / f"{stem}.png"
    if png.suffix.lower() != ".png":
        raise ValueError(f"--out must name a .png file, got {png}")
    png.parent.mkdir(parents=True, exist_ok=True)
    accepted = inspect.signature(data_fn).parameters
    records_dir = data_kwargs.pop("records_dir", None)  # default: the committed records (figures.RECORDS_DIR)
    if "records_dir" in accepted and records_dir is not None:
        data_kwargs["records_dir"] = records_dir
    unknown = [key for key in data_kwargs if key not in accepted]
    if unknown:
        raise ValueError(f"figure {name!r} does not take {', '.join('--' + k for k in unknown)}")
    data = {**data_fn(scale=scale, **data_kwargs), "figure": stem}  # the JSON names the figure it sits beside
    if require_records and FIGURES[name].reads_records and not any(
            isinstance(v, list) and v for v in data.values()):
        from .figures import RECORDS_DIR

        raise ValueError(f"figure {name!r}: the records folder {records_dir or RECORDS_DIR} holds nothing it reads "
                         "(real-pair records llm_*.json and their logged rows llm_*_rows.npz)")
    fig = render(name, data)
    fig.tight_layout()
    fig.savefig(png)
    js = png.with_suffix(".json")
    js.write_text(json.dumps(data, indent=1, default=_typed) + "\n")
    if FIGURES[name].files is not None:
        FIGURES[name].files(data, png.parent)
    return png, js, data


def _pair(args, names) -> dict:
    """The user's pair as ``draft=``/``target=`` sources (both roles or none), for figures of one pair."""
    given = [args.draft, args.target, args.draft_source, args.target_source]
    if all(x is None for x in given):
        return {}
    from .clitools import CLIError, pair_from_args

    refusing = [n for n in names if not FIGURES[n].pair]
    if refusing:
        raise ValueError(f"figure(s) {', '.join(refusing)} draw a fixed family and take no pair; figures of one "
                         f"pair: {', '.join(PAIR_FIGURES)}")
    try:
        draft, target = pair_from_args(args)
    except CLIError as exc:
        raise ValueError(str(exc)) from None
    return {"draft": draft, "target": target}


#: Figures that accept the user's pair (``--draft/--target`` or ``--draft-source/--target-source``).
PAIR_FIGURES = [name for name, figure in FIGURES.items() if figure.pair]


def main(argv=None) -> int:
    from .clitools import add_pair_arguments

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["sweep"]:  # a sweep's results table, not a registered figure
        from .figures.sweep import main as sweep_main

        return sweep_main(argv[1:])
    if argv[:1] == ["record"]:  # a real pair's record: its plot and summary beside it
        from .figures.llm import record_main

        return record_main(argv[1:])

    parser = ArgumentParser(prog="python -m otspec.plot", description=__doc__.split("\n\n")[0],
                                     formatter_class=HelpFormatter)
    parser.add_argument("name", choices=sorted(FIGURES) + ["all"], help="figure to draw")
    parser.add_argument("--out", type=path_argument, help=f"PNG path (default {DEFAULT_DIR}/<stem>.png; JSON beside it; the committed "
                                      "figures/ are remade by make figures)")
    parser.add_argument("--records", type=path_argument, default=None,
                        help="folder of the real-model records (llm_*.json, llm_*_rows.npz) the record figures read "
                             "(default: the committed figures/)")
    parser.add_argument("--scale", type=real, default=None,
                        help=f"simulation size factor, in (0, {MAX_SCALE:g}] (default 1; refused for a figure with "
                             "nothing to simulate)")
    add_pair_arguments(parser)
    parser.epilog = (f"Figures of one pair ({', '.join(PAIR_FIGURES)}) draw the user's pair when --draft/--target "
                     "or --draft-source/--target-source are given, else their built-in default.")
    args = parser.parse_args(argv)
    names = sorted(FIGURES) if args.name == "all" else [args.name]
    if args.out and len(names) > 1:
        parser.error("--out names one file; draw one figure at a time with it")
    try:
        if args.out is not None:  # checked before the figure is computed, not after
            writable_folder(Path(args.out).parent, "--out")
            writable_file(args.out, "--out")
        if args.records is not None:
            from .figures.common import check_records_given

            check_records_given(args.records)
            readers = [n for n in names if "records_dir" in inspect.signature(FIGURES[n].data).parameters]
            if not readers:  # a figure of toy sources would draw without a word about the folder
                raise ValueError(f"--records: figure {args.name!r} reads no real-model records; it is drawn from toy "
                                 "sources (leave --records out)")
        if args.scale is not None and not any(FIGURES[n].scaled for n in names):
            raise ValueError(f"--scale: figure {args.name!r} simulates nothing (its numbers are exact or read from "
                             "records); leave --scale out")
        pair = _pair(args, names)
        scale = 1.0 if args.scale is None else args.scale
        for name in names:
            png, js, _ = write_figure(name, args.out, scale, require_records=args.name != "all",
                                      records_dir=args.records, **pair)
            print(f"wrote {png} and {js}")
    except (ValueError, OSError) as exc:
        print(f"{parser.prog}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except (TypeError, KeyError, AttributeError, IndexError, ArithmeticError) as exc:  # an input the checks let by
        print(f"{parser.prog}: error: {args.name}: the figure cannot be drawn from these inputs "
              f"({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
