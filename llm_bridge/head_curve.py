"""``python -m llm_bridge.head_curve``: held-out acceptance of each kind of draft head against its training data.

Each point trains one head with ``python -m llm_bridge.train_head --corpus`` on the corpus's first training shards
up to ``n`` continuation tokens (nested sets: a larger set holds every smaller one), the same steps, batch and seed
at every size, and measures it on the same held-out shards: acceptance 1 − TV per draft position at temperature 1
and the greedy agreement per position on the greedy continuations. Where the curve flattens, more of the target's
text no longer helps that head; where it still rises, the head is data-bound.

Heads (``--heads``): ``eagle`` (one decoder layer on the last feature), ``eagle3`` (the same with the low and middle
layers ``--fuse`` fused in), ``eagle3x2`` (EAGLE-3 with two decoder layers), ``medusa`` (residual blocks on the last
feature) and ``hydra`` (Medusa's blocks that also read the drafted tokens). Points are written to ``--out`` as each finishes (a rerun skips those already there
with the same settings) with a figure beside it; the heads themselves go to ``--heads-dir``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from otspec.clitools import (
    ArgumentParser,
    check_folder_path,
    comma_items,
    flags_that_apply,
    index_list,
    integer,
    length_list,
    one_line,
    path_argument,
    real,
    writable_file,
)

from .models import DEFAULT_TARGET, ModelNotFound
from .prompts import DATA_DIR

__all__ = ["HEADS", "curve_point", "finished_head", "head_recipe", "main", "plot_curve", "read_curve", "run_curve"]

#: The head kinds a curve can hold, and the train_head options each means.
HEADS = {"eagle": {"kind": "eagle"}, "eagle3": {"kind": "eagle", "fuse": None},
         "eagle3x2": {"kind": "eagle", "fuse": None, "head_layers": 2}, "medusa": {"kind": "medusa"},
         "hydra": {"kind": "medusa", "hydra": True}}
FORMAT = "otspec-head-curve-1"
#: Largest counts of a point: train_head takes at most 10^9 training tokens (a whole last sequence may pass it).
POINT_LIMITS = {"train_tokens_asked": 10**9, "train_tokens": 2 * 10**9, "trained_parameters": 10**12}


def head_recipe(head: str, tokens: int, *, settings: dict, out: Path):
    """The :class:`~llm_bridge.train_head.HeadRecipe` of one point."""
    from .train_head import HeadRecipe

    options = dict(HEADS[head])
    if "fuse" in options:
        if not settings["fuse"]:
            raise ValueError(f"--fuse: the {head} head fuses target layers; name them (e.g. 3,15)")
        options["fuse"] = tuple(settings["fuse"])
    corpus = Path(settings["corpus"])  # relative to the repository where it lies there (train_head.shown_path)
    corpus = corpus if corpus.is_absolute() else DATA_DIR.resolve().parents[1] / corpus
    return HeadRecipe(**options, target=settings["target"], corpus=corpus, train_tokens=tokens,
                      steps=settings["steps"], batch=settings["batch"], lr=settings["lr"], seed=settings["seed"],
                      heldout_sequences=settings["heldout_sequences"], vocab=settings["vocab"], out=out,
                      score_fraction=settings.get("score_fraction", 1.0),
                      log_every=max(1, settings["steps"] // 4), progress=settings.get("progress", True))


def run_curve(heads, sizes, settings: dict, out: Path, heads_dir: Path) -> dict:
    """Train and measure every (head, size) point missing from ``out`` (written after each); returns the record."""
    from .train_head import train_head

    record = read_curve(out) if out.is_file() else None
    kept = {k: v for k, v in settings.items() if k != "progress"}
    if record is None or record.get("format") != FORMAT or record.get("settings") != kept:
        record = {"format": FORMAT, "settings": kept, "points": []}
    for head in heads:
        for n in sizes:
            if any(p["head"] == head and p["train_tokens_asked"] == n for p in record["points"]):
                continue
            recipe = head_recipe(head, n, settings=settings, out=heads_dir / f"{head}_{n}")
            point = finished_head(recipe, head, n)
            if point is None:
                point = curve_point(train_head(recipe), head, n, "the head just trained")
            record["points"].append(point)
            out.write_text(json.dumps(record, indent=1) + "\n")
            plot_curve(record, out.with_suffix(".png"))
    return record


def curve_point(got: dict, head: str, n: int, where: str) -> dict:
    """The curve point of a ``drafter.json`` record ``got`` (of ``head`` at ``n`` training tokens asked), checked as
    :func:`read_curve` checks a point: a damaged record is a ``ValueError`` naming ``where``, never a point."""
    try:
        held = got["heldout"]
        point = {"head": head, "train_tokens_asked": n, "train_tokens": got["recipe"]["train_tokens"],
                 "acceptance_per_position": held["acceptance_per_position"],
                 "greedy_agreement_per_position": held.get("greedy_agreement_per_position"),
                 "coverage": held["coverage"], "trained_parameters": got["trained_parameters"],
                 "seconds": round(got["seconds"], 1) if isinstance(got["seconds"], int | float) else got["seconds"]}
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as err:
        raise ValueError(f"{where}: not a finished head's record ({type(err).__name__}: {err}); delete it to train "
                         "the point afresh") from None
    if not _point_ok(point):
        raise ValueError(f"{where}: its numbers are out of range for a curve point (acceptances, agreements and "
                         "coverage in [0, 1], counts within POINT_LIMITS, seconds >= 0); delete it to train the point "
                         "afresh")
    return point


def finished_head(recipe, head: str | None = None, n: int | None = None):
    """The curve point of a head that ``recipe`` already trained to the end in its folder (a curve stopped after a
    head finished, before its point was written), or None; a ``drafter.json`` of this recipe that is damaged is a
    ``ValueError`` naming it. ``head`` and ``n`` name the point (default: from the folder's name)."""
    from otspec.engine.record import RecordError, read_json_file

    from .head_checkpoint import recipe_key

    path = Path(recipe.out) / "drafter.json"
    if not path.is_file():
        return None
    try:
        record = read_json_file(path, "head record")  # a regular file, bounded in bytes and depth, unique keys
    except RecordError as err:
        raise ValueError(str(err)) from None
    if not isinstance(record, dict) or record.get("recipe_fields") != json.loads(recipe_key(recipe)):
        return None  # another recipe's head: trained again over it
    name = head or Path(recipe.out).name.rpartition("_")[0]
    return curve_point(record, name, n if n is not None else int(recipe.train_tokens), str(path))


def _point_ok(p) -> bool:
    """Whether a curve point holds what :func:`run_curve` writes: a known head, counts >= 0, shares in [0, 1]."""
    from otspec.checks import finite_real

    def count(x, most):  # a point trained on something, with something, within train_head's limits
        return isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= most

    def shares(xs):
        return isinstance(xs, list) and len(xs) > 0 and all(isinstance(x, int | float) and not isinstance(x, bool)
                                            and 0 <= x <= 1 + 1e-5 for x in xs)  # float32 sums round past 1

    return (isinstance(p, dict) and p.get("head") in HEADS
            and all(count(p.get(k), most) for k, most in POINT_LIMITS.items())
            and shares(p.get("acceptance_per_position")) and shares([p.get("coverage")])
            and (p.get("greedy_agreement_per_position") is None or shares(p["greedy_agreement_per_position"]))
            and finite_real(p.get("seconds")) and p["seconds"] >= 0)


def read_curve(path: Path) -> dict:
    """A curve record written by :func:`run_curve`, checked: a point resumed from a damaged file would be printed and
    plotted as if measured, and a JSON file of another kind would be written over (a ``ValueError`` naming ``path``)."""
    from otspec.checks import check_data_file
    from otspec.engine.record import RecordError, read_json_file

    check_data_file(path, "--out (a head curve to resume)")
    path = Path(path)
    try:  # the checks of every record: size before reading, UTF-8, JSON, unique keys, depth
        record = read_json_file(path, "head curve")
    except RecordError as err:
        detail = str(err).removeprefix(f"{path}: ")
        raise ValueError(f"--out {path}: not a JSON head curve ({detail}); move it away") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:  # another file: never written over
        raise ValueError(f"--out {path}: a JSON file that is not a head curve (format {FORMAT!r}); choose another "
                         "--out, or move it away")
    points = record.get("points")
    if not isinstance(points, list):
        raise ValueError(f"--out {path}: 'points' is not a list; move the file away to start afresh")
    bad = next((i for i, p in enumerate(points) if not _point_ok(p)), None)
    if bad is not None:
        raise ValueError(f"--out {path}: point {bad} is damaged (expected a known head, token and parameter counts >= 1 "
                         "within POINT_LIMITS, acceptances, agreements and coverage in [0, 1], seconds >= 0); move the "
                         "file away to start afresh")
    return record


def plot_curve(record: dict, path: Path) -> None:
    """Held-out acceptance at each draft position (temperature 1, solid) and greedy agreement (dotted) against the
    training tokens, one colour per head."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for c, head in enumerate(dict.fromkeys(p["head"] for p in record["points"])):
        pts = sorted((p for p in record["points"] if p["head"] == head), key=lambda p: p["train_tokens"])
        x = [p["train_tokens"] for p in pts]
        for ax, key in zip(axes, ("acceptance_per_position", "greedy_agreement_per_position"), strict=True):
            if any(p[key] is None for p in pts):
                continue
            for d in range(len(pts[0][key])):
                ax.plot(x, [p[key][d] for p in pts], marker="o", color=f"C{c}", alpha=1.0 - 0.25 * d,
                        linestyle=("-", "--", ":", "-.")[d % 4], label=f"{head}, position {d + 1}")
    for ax, title in zip(axes, ("temperature 1: held-out 1 − TV", "temperature 0: held-out greedy agreement"),
                         strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training tokens (the target's own continuations)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("acceptance at each draft position")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Draft heads of {record['settings']['target']}: held-out acceptance against training data")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _heads(text: str) -> list:
    import argparse

    heads = comma_items(text)
    unknown = [h for h in heads if h not in HEADS]
    if unknown or not heads:
        raise argparse.ArgumentTypeError(f"expected heads among {', '.join(HEADS)}, got {text!r}")
    if len(set(heads)) < len(heads):  # each head is trained once per size
        raise argparse.ArgumentTypeError(f"{text!r} names a head twice")
    return heads


def main(argv=None) -> int:
    from .corpus import CORPUS_DIR, check_trainable, load_corpus
    from .head_checkpoint import shown_path

    ap = ArgumentParser(prog="python -m llm_bridge.head_curve", description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=_heads, default=list(HEADS), help="comma-separated, among " + ", ".join(HEADS))
    ap.add_argument("--train-tokens", type=length_list, default=[62_500, 125_000, 250_000, 500_000, 1_000_000],
                    help="training sizes, comma-separated (continuation tokens)")
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--corpus", type=path_argument, default=None, help="default: the committed corpus of the target")
    ap.add_argument("--steps", type=integer, default=600)
    ap.add_argument("--batch", type=integer, default=8)
    ap.add_argument("--lr", type=real, default=1e-3)
    ap.add_argument("--vocab", type=integer, default=8192)
    ap.add_argument("--fuse", type=index_list, default=None,
                    help="eagle3, eagle3x2: the target layers fused with its last feature (default 3,15)")
    ap.add_argument("--heldout-sequences", type=integer, default=256)
    ap.add_argument("--score-fraction", type=real, default=0.25,
                    help="share of each batch's outputs scored (train_head --score-fraction)")
    ap.add_argument("--seed", type=integer, default=0)
    ap.add_argument("--out", type=path_argument, default=Path("build/records/llm_head_curve.json"))
    ap.add_argument("--heads-dir", type=path_argument, default=Path("build/heads"))
    args = ap.parse_args(argv)
    sizes = sorted(set(args.train_tokens))
    try:
        flags_that_apply(args, (("fuse", (3, 15), ("--heads eagle3 or eagle3x2 (the heads that fuse layers)",
                                                    lambda a: any("fuse" in HEADS[h] for h in a.heads))),))
        corpus = args.corpus if args.corpus is not None else CORPUS_DIR / args.target
        try:  # a missing or damaged index or shard is refused before any model loads
            check_trainable(load_corpus(corpus), str(corpus))
        except (ValueError, FileNotFoundError) as err:
            raise ValueError(f"--corpus: {err}") from None
        settings = {"target": args.target, "corpus": shown_path(Path(corpus)), "steps": args.steps, "batch": args.batch,
                    "lr": args.lr, "vocab": args.vocab, "fuse": list(args.fuse),
                    "heldout_sequences": args.heldout_sequences, "seed": args.seed,
                    "score_fraction": args.score_fraction}
        for head in args.heads:  # every recipe checked before any model loads
            for n in sizes:
                head_recipe(head, n, settings=settings, out=args.heads_dir / head)
        writable_file(args.out, "--out", make_folder=True)
        if args.out.is_file():
            read_curve(args.out)  # a damaged record to resume is refused now, not after the first point
        check_folder_path(args.heads_dir, "--heads-dir")  # each head's folder is made when it is written
        record = run_curve(args.heads, sizes, settings, args.out, args.heads_dir)
    except (ModelNotFound, ImportError, ValueError, FileNotFoundError) as err:
        print(f"python -m llm_bridge.head_curve: {one_line(err)}", file=sys.stderr)
        return 2
    print(json.dumps(record["points"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
