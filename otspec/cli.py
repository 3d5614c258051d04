"""``python -m otspec``: the calculator and simulation command line.

Subcommands
-----------
``calc NAME``      closed forms / exact values for a draft-target pair (``calc block`` ...)
``simulate``       Monte Carlo estimate of one verifier's accepted length (one row per L)
``decode``         end-to-end speculative generation with call counts (one row per L)
``source random``  write a random draft/target pair of JSON sources
``source logged``  log top-p truncated draft/target rows along paths of a pair (a logged-rows file)
``sweep SPEC``     a grid of pairs × verifiers × L × k from a TOML/YAML spec, one table row per cell
``audit SAMPLER``  test whether anyone's speculative sampler (module:function) keeps the target's law

Calculators live in :data:`otspec.calculators.CALCULATORS`. Model pairs are given inline
(``--draft 0.3,0.7 --target 0.75,0.25``; one number x means Bernoulli(x)) or as JSON source
files (``--draft-source FILE --target-source FILE``). Bad input exits with status 2 and a
message; ``--json`` prints one JSON object (a list of objects for several lengths).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path

from .audit.command import add_audit_parser
from .calculators import CALCULATORS, Calculator
from .checks import MAX_TREE_TOKENS, check_real
from .clitools import (
    ArgumentParser,
    CLIError,
    HelpFormatter,
    add_pair_arguments,
    add_tree_arguments,
    capped_tree_note,
    check_folder_path,
    check_lengths,
    flags_that_apply,
    horizon_message,
    join_negative_values,
    length_list,
    one_line,
    pair_from_args,
    parse_probs,
    path_argument,
    positive_int,
    real,
    seed,
    tree_from_args,
    writable_file,
)
from .engine import Backend, generate, generate_tree, simulate, simulate_logged, simulate_tree
from .engine.trie import check_tree_verifier
from .errors import SolveError
from .sources import TAIL_MODES, load_logged_rows, log_rows, random_markov, save_source
from .verifiers import CHAIN_VERIFIERS, TREE_VERIFIERS

__all__ = ["CALCULATORS", "CLIError", "Calculator", "build_parser", "main", "parse_probs"]


_Formatter = HelpFormatter


def _verifier_argument(parser, trees: bool = False):
    names = sorted(CHAIN_VERIFIERS) + (sorted(TREE_VERIFIERS) if trees else [])
    chains = ", ".join(f"{name} ({cls.label})" for name, cls in CHAIN_VERIFIERS.items())
    parser.add_argument("--verifier", choices=names, default="token",
                        help=f"verification scheme: {chains}"
                             + ("; with --tree a multi-draft or whole-tree verifier: " + ", ".join(
                                 f"{name} ({cls.label})" for name, cls in TREE_VERIFIERS.items()) if trees else ""))
    if trees:
        add_tree_arguments(parser, required=False)


def _tree_run(args):
    """(verifier, tree) of ``--tree``, or None without it; a verifier that does not verify trees is refused."""
    if args.tree is None:
        if args.draw is not None:  # a chain has no siblings (greedy would not be a chain's draw): refused, not ignored
            raise CLIError(f"--draw {args.draw}: how a tree's siblings are drawn; read only with --tree (a chain "
                           "drafts one token per position; --without-replacement is accepted, the same chain)")
        if args.verifier not in CHAIN_VERIFIERS:
            raise CLIError(f"--verifier {args.verifier}: a tree verifier; give the tree with --tree")
        if args.L is None:
            raise CLIError("--L: required (draft lengths), or --tree for a draft tree")
        return None
    if args.L is not None:  # said first: with both, the default chain verifier is not what the user got wrong
        raise CLIError("--L and --tree: the tree sets the draft length (its depth); give one of them")
    if args.verifier in CHAIN_VERIFIERS:
        raise CLIError(f"--tree: --verifier {args.verifier} verifies one chain; choose among "
                       f"{sorted(TREE_VERIFIERS)}")
    verifier = TREE_VERIFIERS[args.verifier]()
    if args.draw is None and not args.without_replacement:  # children drawn as the verifier needs
        args.draw = {True: "iid", False: "without"}.get(verifier.replacement, verifier.replacement)
        args.draw_chosen_for_verifier = True
    tree = tree_from_args(args)
    try:
        check_tree_verifier(verifier, tree)
    except ValueError as exc:
        raise CLIError(f"--tree {args.tree} with --verifier {args.verifier}: {exc}") from None
    return verifier, tree


def _rows(args, one_row) -> dict | list:
    """One row per draft length of ``--L``: the row itself for one length, a list for several."""
    check_lengths(args.L)
    rows = [one_row(args, L) for L in args.L]
    return rows[0] if len(rows) == 1 else rows


def _simulate(args):
    if args.tail is not None and args.logged is None:  # a pair of sources has no truncated mass: not a silent no-op
        raise CLIError(f"--tail {args.tail}: the truncated mass of logged rows; give it with --logged FILE")
    tree_run = _tree_run(args)
    if tree_run is not None:
        if args.logged is not None:
            raise CLIError("--tree with --logged: tree Monte Carlo needs a pair of sources (logged rows hold one "
                           "path per step)")
        if args.device is not None:
            raise CLIError(f"--device {args.device}: tree Monte Carlo scores rows on numpy; --device is read by "
                           "chain runs' row-free sampling only")
        verifier, tree = tree_run
        draft, target = pair_from_args(args)
        res = simulate_tree(draft, target, verifier, tree, args.blocks, seed=args.seed, progress=not args.json)
        return {"verifier": args.verifier, "tree": str(tree), "draft_length": tree.depth, "blocks": args.blocks,
                "seed": args.seed, "accepted": res.accepted.as_dict(),
                "tokens_per_iteration": res.tokens_per_iteration.as_dict(), "accept_dist": res.accept_dist.tolist(),
                **capped_tree_note(tree, target.vocab_size)}
    if args.logged is not None:
        if any(x is not None for x in (args.draft, args.target, args.draft_source, args.target_source)):
            raise CLIError("--logged replaces the model pair: give it alone")
        log = load_logged_rows(args.logged)
    else:
        draft, target = pair_from_args(args)
        check_lengths(args.L)  # every length of the list within the horizon before the first runs
        target.check_length(max(args.L) + 1, f"draft_length {max(args.L)}, then one token from the target")

    def row(args, L):
        verifier = CHAIN_VERIFIERS[args.verifier]()
        if args.logged is not None:
            res = simulate_logged(log, verifier, L, args.blocks, tail=args.tail or "overlap", seed=args.seed,
                                  progress=not args.json, backend=Backend(device=args.device))
        else:
            res = simulate(draft, target, verifier, L, args.blocks, seed=args.seed, progress=not args.json,
                           backend=Backend(device=args.device))
        out = {"verifier": args.verifier, "draft_length": L, "blocks": args.blocks, "seed": args.seed,
               "accepted": res.accepted.as_dict(), "tokens_per_iteration": res.tokens_per_iteration.as_dict(),
               "acceptance_rate": res.accepted.value / L, "accept_dist": res.accept_dist.tolist(),
               "accept_dist_note": f"share of blocks that accepted 0, 1, ..., {L} drafts"}
        if args.logged is None and verifier.closed_form is not None:  # the exact value the estimate is of
            try:
                out["exact_accepted"] = float(verifier.expected_accepted(draft, target, L))
            except ValueError as exc:  # a closed form that does not reach this pair (too large)
                out["exact_accepted"], out["exact_accepted_status"] = None, f"not computed: {exc}"
        return out

    return _rows(args, row)


def _decode(args):
    flags_that_apply(args, (("t_target", 1.0, "t_draft"),))  # a cost needs both times: alone it would be ignored
    check_real(args.t_target, "--t-target", low=0.0, low_open=True)  # checked before any decoding
    if args.t_draft is not None:
        check_real(args.t_draft, "--t-draft", low=0.0)
        calls = float(args.tokens) * float(args.sequences)  # target calls at most; draft calls at most L (a tree's
        longest = max(args.L or [1]) if args.tree is None else MAX_TREE_TOKENS  # tokens) per target call
        if args.t_draft / args.t_target > 1e300 or args.t_target * calls > 1e300 or args.t_draft * longest * calls > 1e300:
            raise CLIError(f"--t-draft {args.t_draft:g}, --t-target {args.t_target:g}: the run's total time "
                           "overflows a float; give both in one sensible unit (milliseconds, or --t-target 1)")
    tree_run = _tree_run(args)
    draft, target = pair_from_args(args)

    def row(args, L):
        if tree_run is not None:
            res = generate_tree(draft, target, *tree_run, args.tokens, n_sequences=args.sequences, seed=args.seed,
                                progress=not args.json)
            row = {"verifier": args.verifier, "tree": str(tree_run[1]), "draft_length": L, "seed": args.seed,
                   **res.summary(), **capped_tree_note(tree_run[1], target.vocab_size)}
        else:
            res = generate(draft, target, CHAIN_VERIFIERS[args.verifier](), L, args.tokens, n_sequences=args.sequences,
                           seed=args.seed, progress=not args.json)
            row = {"verifier": args.verifier, "draft_length": L, "seed": args.seed, **res.summary()}
        if args.t_draft is not None:
            row["cost"] = res.cost(args.t_draft, args.t_target).as_dict()
        return row

    if tree_run is not None:
        return row(args, tree_run[1].depth)
    return _rows(args, row)


def _source_random(args) -> dict:
    for flag, path in (("--draft-out", args.draft_out), ("--target-out", args.target_out)):  # both, before either
        writable_file(path, flag, make_folder=True)  # is written (a symlink loop is refused here, not resolved below)
    if Path(args.draft_out).resolve() == Path(args.target_out).resolve():
        raise CLIError(f"--draft-out and --target-out name the same file ({args.draft_out}); the target would "
                       "overwrite the draft")
    draft, target = random_markov(args.vocab, args.concentration, horizon=args.horizon, seed=args.seed,
                                  sparsity=args.sparsity)
    entries = target.transition.size
    if entries > 2**21:  # JSON writes about 3e5 numbers a second: say so before a minute of silence
        print(f"source random: writing 2 x {entries:,} probabilities as JSON (about {2 * entries / 3e5:.0f} s)",
              file=sys.stderr)
    for flag, source, path in (("--draft-out", draft, args.draft_out), ("--target-out", target, args.target_out)):
        try:
            save_source(source, path)
        except OSError as exc:
            raise CLIError(f"{flag}: cannot write {path}: {exc.strerror or exc}") from None
    return {"draft": args.draft_out, "target": args.target_out, "vocab_size": args.vocab,
            "horizon": args.horizon, "seed": args.seed}


def _source_logged(args) -> dict:
    writable_file(args.out, "--out", make_folder=True)  # a device or a pipe refused before the rows are scored
    draft, target = pair_from_args(args)
    log = log_rows(draft, target, args.paths, args.length, top_p=args.top_p, max_kept=args.max_kept, seed=args.seed)
    try:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        log.save(args.out)
    except OSError as exc:
        raise CLIError(f"--out: cannot write {args.out}: {exc.strerror or exc}") from None
    return {"out": str(args.out), **{k: v for k, v in log.summary().items() if k != "meta"}}


#: What ``sweep --scheduler`` takes: a Dask scheduler's address, ``[protocol://]host:port``: an ASCII host name or
#: address (an IPv6 address in brackets), a port without leading zeros; a network protocol (``inproc://`` names a
#: scheduler inside another process, which a sweep cannot reach).
SCHEDULER_ADDRESS = (r"((tcp|tls|ws|wss|ucx)://)?(\[[0-9a-fA-F.]*:[0-9a-fA-F:.]*\]|[A-Za-z0-9][A-Za-z0-9.-]*)"
                     r":(?P<port>[1-9][0-9]{0,4})")


def _check_scheduler(address: str) -> None:
    """A Dask scheduler's address, refused before any cell runs: its form, its port (1-65535), and what its
    protocol needs here (TLS settings in Dask's configuration for tls:// and wss://, ucx-py for ucx://)."""
    import importlib.util

    got = re.fullmatch(SCHEDULER_ADDRESS, address)
    if not got or not 1 <= int(got["port"]) <= 65535:
        raise CLIError(f"--scheduler {address!r}: expected the address of a Dask scheduler, [tcp://]host:port with an "
                       "ASCII host name or address ([...] for IPv6) and a port 1-65535 without leading zeros (or tls://, "
                       "ws://, wss://, ucx://)")
    protocol = address.split("://")[0] if "://" in address else "tcp"
    if protocol == "ucx" and importlib.util.find_spec("ucp") is None:
        raise CLIError(f"--scheduler {address}: ucx:// needs ucx-py, not installed here; use tcp://")
    if protocol in ("tls", "wss"):
        from distributed.security import Security

        if Security().get_connection_args("client").get("ssl_context") is None:
            raise CLIError(f"--scheduler {address}: {protocol}:// needs TLS settings in Dask's configuration "
                           "(distributed.comm.tls.ca-file and client certificate); none are set here")


def _sweep(args) -> dict:
    from .sweep import load_spec, run_sweep
    from .sweep.run import EXTRAS_HINT, missing_extras

    missing = missing_extras(dask=bool(args.scheduler or args.cluster))
    if missing:  # refused before any cell runs (the tables are written at the end)
        raise CLIError(f"the sweep needs {', '.join(missing)}, not installed in this environment: {EXTRAS_HINT}")
    spec = load_spec(args.spec)
    out = args.out or Path(args.spec).with_suffix("").parent / f"{Path(args.spec).stem}_results"
    check_folder_path(out, "--out")  # refused before any cell runs; made only once one does
    if args.scheduler is not None:
        _check_scheduler(str(args.scheduler))
    if args.cluster is not None and not str(args.cluster).strip():
        raise CLIError("--cluster: empty (give local:N, or leave the flag out)")
    if args.workers is not None and (args.scheduler or args.cluster):
        raise CLIError("--workers is the local pool's size; with --scheduler or --cluster the cluster decides")
    return {"sweep": spec.name, "out": str(out), **run_sweep(spec, out, workers=args.workers, scheduler=args.scheduler,
                                                              cluster=args.cluster, progress=not args.json)}


def _json_flag(parser):
    parser.add_argument("--json", action="store_true", help="print JSON instead of a human-readable summary")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m otspec", description=__doc__.split("\n\n")[0],
                                     formatter_class=_Formatter)
    sub = parser.add_subparsers(dest="command", required=True)

    calc = sub.add_parser("calc", help="exact values and closed forms for a model pair", formatter_class=_Formatter)
    calc_sub = calc.add_subparsers(dest="calculator", required=True)
    for name, spec in CALCULATORS.items():
        p = calc_sub.add_parser(name, help=spec.help, description=spec.help, formatter_class=_Formatter)
        spec.add_arguments(p)
        _json_flag(p)
        p.set_defaults(run=spec.compute)

    sim = sub.add_parser("simulate", help="Monte Carlo estimate of accepted tokens per iteration",
                         formatter_class=_Formatter)
    add_pair_arguments(sim)
    _verifier_argument(sim, trees=True)
    sim.add_argument("--L", dest="L", type=length_list, default=None,
                     help="draft length, or several separated by commas (2,4,8): one row each (not with --tree)")
    sim.add_argument("--blocks", type=positive_int, default=1_000_000, help="simulated iterations per length")
    sim.add_argument("--seed", type=seed, default=0, help="random seed (an integer >= 0)")
    sim.add_argument("--logged", metavar="FILE", default=None,
                     help="instead of a pair: a logged-rows file; blocks start at random windows of its paths")
    sim.add_argument("--tail", choices=TAIL_MODES, default=None, help="with --logged: what the truncated mass "
                     "becomes (see otspec.sources.logged; default overlap)")
    sim.add_argument("--device", default=None, help="row-free sampling on torch: auto (CUDA when available), cpu, "
                     "cuda, cuda:1, ... (default: numpy)")
    _json_flag(sim)
    sim.set_defaults(run=_simulate)

    dec = sub.add_parser("decode", help="end-to-end speculative generation with call counts",
                         formatter_class=_Formatter)
    add_pair_arguments(dec)
    _verifier_argument(dec, trees=True)
    dec.add_argument("--L", dest="L", type=length_list, default=None,
                     help="draft length, or several separated by commas (2,4,8): one row each (not with --tree)")
    dec.add_argument("--tokens", type=positive_int, default=10_000, help="tokens generated per sequence")
    dec.add_argument("--sequences", type=positive_int, default=32, help="independent sequences")
    dec.add_argument("--seed", type=seed, default=0, help="random seed (an integer >= 0)")
    dec.add_argument("--t-draft", type=real, default=None, metavar="A",
                     help="cost of one draft call (any unit): also report the SpecDec++ time decomposition, latency "
                          "per token, discard and verification rates")
    dec.add_argument("--t-target", type=real, default=None, metavar="B",
                     help="with --t-draft: cost of one target call, same unit (default 1)")
    _json_flag(dec)
    dec.set_defaults(run=_decode)

    src = sub.add_parser("source", help="write JSON sources", formatter_class=_Formatter)
    src_sub = src.add_subparsers(dest="source_command", required=True)
    rnd = src_sub.add_parser("random", help="a random Markov draft/target pair (see otspec.sources.random_markov)",
                             formatter_class=_Formatter)
    rnd.add_argument("--vocab", type=positive_int, required=True, help="vocabulary size V")
    rnd.add_argument("--concentration", type=real, default=1.0,
                     help="closeness of draft to target: 0 = independent draft, larger = closer")
    rnd.add_argument("--horizon", type=positive_int, default=None,
                     help="time-varying chain of this horizon (default: a stationary chain)")
    rnd.add_argument("--sparsity", type=real, default=0.0, help="probability that an entry is exactly 0")
    rnd.add_argument("--seed", type=seed, default=0, help="random seed (an integer >= 0)")
    rnd.add_argument("--draft-out", required=True, metavar="FILE", help="where to write the draft source")
    rnd.add_argument("--target-out", required=True, metavar="FILE", help="where to write the target source")
    _json_flag(rnd)
    rnd.set_defaults(run=_source_random)
    lgd = src_sub.add_parser("logged", help="log top-p truncated rows of a pair along target paths "
                                            "(see otspec.sources.logged)", formatter_class=_Formatter)
    add_pair_arguments(lgd)
    lgd.add_argument("--paths", type=positive_int, default=8, help="paths (sequences) to log")
    lgd.add_argument("--length", type=positive_int, default=64, help="steps per path")
    lgd.add_argument("--top-p", type=real, default=0.95, help="keep each row's smallest set of mass >= top-p")
    lgd.add_argument("--max-kept", type=positive_int, default=None, help="and at most this many tokens per row")
    lgd.add_argument("--seed", type=seed, default=0, help="random seed (an integer >= 0)")
    lgd.add_argument("--out", required=True, metavar="FILE", help="the .npz file to write")
    _json_flag(lgd)
    lgd.set_defaults(run=_source_logged)

    swp = sub.add_parser("sweep", help="run a grid from a TOML/YAML spec into Parquet and CSV tables (see README, "
                                       "Sweeps)", formatter_class=_Formatter)
    swp.add_argument("spec", metavar="SPEC", help="the sweep spec (.toml, or .yaml/.yml)")
    swp.add_argument("--out", type=path_argument, default=None,
                     help="results folder (cells/, results.parquet, results.csv); default: SPEC's folder, "
                          "<spec name>_results. Finished cells there are skipped (resume)")
    swp.add_argument("--workers", type=positive_int, default=None,
                     help="local process pool size (default: the CPU count; 1 runs in this process)")
    swp.add_argument("--scheduler", metavar="tcp://HOST:PORT", default=None,
                     help="run on a running Dask distributed scheduler")
    swp.add_argument("--cluster", metavar="local:N", default=None,
                     help="start a Dask LocalCluster of N single-threaded workers")
    _json_flag(swp)
    swp.set_defaults(run=_sweep)
    add_audit_parser(sub, _Formatter, _json_flag)
    return parser


def strict_json(value, key: str = "value"):
    """``value`` with every NaN/±inf float replaced by None, and a ``<key>_status`` beside it saying why."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(v, float) and not math.isfinite(v):
                out[k] = None
                out.setdefault(f"{k}_status", "undefined (NaN)" if math.isnan(v) else f"not finite ({v})")
            else:
                out[k] = strict_json(v, k)
        return out
    if isinstance(value, list | tuple):
        return [None if isinstance(v, float) and not math.isfinite(v) else strict_json(v, key) for v in value]
    return value


def _print_human(result, indent: str = "") -> None:
    if isinstance(result, list):
        for row in result:
            _print_human(row, indent)
            print()
        return
    width = max((len(k) for k in result), default=0)
    for key, value in result.items():
        if isinstance(value, dict):
            print(f"{indent}{key}:")
            _print_human(value, indent + "  ")
        elif isinstance(value, float):
            print(f"{indent}{key:<{width}}  {value:.10g}")
        else:
            print(f"{indent}{key:<{width}}  {value}")


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(join_negative_values(sys.argv[1:] if argv is None else list(argv)))
    args.command_line = argv is None  # the process's own command line (the audit isolates its sampler then)
    try:
        result = args.run(args)
    except (CLIError, ValueError, SolveError, OSError) as exc:
        print(f"{parser.prog}: error: {horizon_message(args, exc) or one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C (or a sampler raising it): one line, the shell's status for SIGINT
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130
    status = result.pop("_exit_status", 0) if isinstance(result, dict) else 0  # the audit's verdict
    if sys.stdout is None:  # an in-process sampler set it to None: print where the process's stdout was
        sys.stdout = sys.__stdout__
    try:
        if args.json:
            print(json.dumps(strict_json(result), indent=2, allow_nan=False))
        else:
            _print_human(result)
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. `... --json | head`: the reader left; exit quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (ValueError, OSError, AttributeError) as exc:  # stdout closed under us (a sampler closed it or its file
        # descriptor): the verdict goes to stderr
        print(f"{parser.prog}: cannot print the result ({exc}); verdict: {result.get('verdict', 'none')}",
              file=sys.stderr)
        return 2
    return status
