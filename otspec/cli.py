"""``python -m otspec``: the calculator and simulation command line.

Subcommands
-----------
``calc NAME``      closed forms / exact values for a draft-target pair (``calc block`` ...)
``simulate``       Monte Carlo estimate of one verifier's accepted length
``decode``         end-to-end speculative generation with call counts
``source random``  write a random draft/target pair of JSON sources

Calculators live in :data:`CALCULATORS`; a new one is a function that adds its
arguments and a function that returns a JSON-serialisable dict.

Model pairs are given either inline (``--draft 0.3,0.7 --target 0.75,0.25``; a
single number ``x`` means Bernoulli(x) = (1 − x, x)) or as JSON source files
(``--draft-source FILE --target-source FILE``; format in :mod:`otspec.sources`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from . import theory
from .distributions import total_variation, validate_probs
from .engine import generate, simulate
from .errors import SizeLimitError
from .sources import IIDSource, Source, load_source, random_markov, save_source
from .verifiers import REGISTRY

__all__ = ["CALCULATORS", "Calculator", "main", "parse_probs"]


class CLIError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""


def parse_probs(text: str, name: str = "probs") -> IIDSource:
    """``'0.3,0.7'`` or ``'2/3,1/3'`` → IID row; ``'0.3'`` → Bernoulli(0.3) = (0.7, 0.3). ``name`` labels errors."""
    try:
        values = [float(Fraction(v.strip())) for v in text.split(",") if v.strip() != ""]
    except (ValueError, ZeroDivisionError):
        raise CLIError(f"could not read probabilities from {text!r}; expected comma-separated numbers "
                       "or fractions such as 0.3,0.7 or 2/3,1/3 (or one number p for Bernoulli(p))") from None
    if not values:
        raise CLIError("empty probability list")
    if len(values) == 1:
        values = [1.0 - values[0], values[0]]
    return IIDSource(validate_probs(values, name))


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("model pair (inline rows or JSON source files)")
    g.add_argument("--draft", metavar="P", help="draft row, e.g. 0.3,0.7 (one number p: Bernoulli(p))")
    g.add_argument("--target", metavar="Q", help="target row, e.g. 0.75,0.25")
    g.add_argument("--draft-source", metavar="FILE", help="draft JSON source file")
    g.add_argument("--target-source", metavar="FILE", help="target JSON source file")


def pair_from_args(args) -> tuple[Source, Source]:
    def one(inline, path, role):
        if (inline is None) == (path is None):
            raise CLIError(f"give exactly one of --{role} and --{role}-source")
        return parse_probs(inline, f"--{role}") if inline is not None else load_source(path)

    draft = one(args.draft, args.draft_source, "draft")
    target = one(args.target, args.target_source, "target")
    if draft.vocab_size != target.vocab_size:
        raise CLIError(f"vocabulary mismatch: draft has {draft.vocab_size} tokens, target has {target.vocab_size}")
    return draft, target


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


@dataclass(frozen=True)
class Calculator:
    """One ``calc`` subcommand."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    compute: Callable[[argparse.Namespace], dict]


# ------------------------------------------------------------------ calc block
#: Largest LP (variables = V^(2L)) ``calc block`` solves by default.
CALC_LP_MAX_VARIABLES = 2**16


def _block_arguments(parser):
    add_pair_arguments(parser)
    parser.add_argument("--L", "--draft-length", dest="L", type=_positive_int, required=True,
                        help="draft (block) length L")
    parser.add_argument("--lp-max-variables", type=_positive_int, default=CALC_LP_MAX_VARIABLES,
                        help=f"solve the block-OT LP only up to this many variables V^(2L) "
                             f"(default {CALC_LP_MAX_VARIABLES}); larger sizes report lp = null")


def _block_compute(args) -> dict:
    from .solvers import solve_block_lp

    draft, target = pair_from_args(args)
    L, V = args.L, target.vocab_size
    first = total_variation(draft.next_probs([[]])[0], target.next_probs([[]])[0])
    values = {
        "token": theory.expected_accepted_token(draft, target, L),
        "block_onpath": _or_none(theory.expected_accepted_block, draft, target, L),
        "block_optimal": _or_none(theory.expected_accepted_optimal, draft, target, L),
    }
    out = {
        "quantity": "expected accepted draft tokens per iteration, E[tau] (add 1 for tokens per iteration)",
        "draft_length": L,
        "vocab_size": V,
        "tv_first_token": float(first),
        **values,
        "lp": None,
        "lp_status": f"not solved: {V}^{2 * L} variables exceed --lp-max-variables {args.lp_max_variables}",
    }
    if V ** (2 * L) <= args.lp_max_variables:
        res = solve_block_lp(draft, target, L)
        out["lp"], out["lp_status"] = res.value, res.status
    for name, value in values.items():
        out[f"{name}_tokens_per_iteration"] = None if value is None else theory.tokens_per_iteration(value)
    return out


def _or_none(fn, *args):
    """A value that needs enumeration, or None when the size is beyond its stated limit."""
    try:
        return fn(*args)
    except SizeLimitError:
        return None


# -------------------------------------------------------------------- calc otm
def _otm_arguments(parser):
    add_pair_arguments(parser)
    parser.add_argument("--k", type=_positive_int, required=True, help="number of draft candidates")


def _first_rows(args):
    """Token-level rows: inline rows, or the first-token laws of JSON sources."""
    draft, target = pair_from_args(args)
    return draft.next_probs([[]])[0], target.next_probs([[]])[0]


def _otm_compute(args) -> dict:
    from . import solvers

    p, q = _first_rows(args)
    k = args.k
    out = {
        "quantity": "acceptance probability P(output token is one of the k drafts) at one position",
        "k": k,
        "vocab_size": int(p.shape[0]),
        "tv": float(total_variation(p, q)),
        "optimal": solvers.otm_value(p, q, k),
        "optimal_without_replacement": solvers.otm_value(p, q, k, replacement=False),
        "kseq": theory.kseq_acceptance(p, q, k),
        "rho_star": theory.kseq_rho_star(p, q, k),
        "upper_bound": _or_none(theory.lemma3_upper_bound, p, q, k),
        "multiround": theory.multiround_acceptance(p, q, k),
        "multiround_without_replacement": _or_none(theory.multiround_acceptance, p, q, k, False),
        "naive": theory.naive_acceptance(p, q, k),
    }
    return out


# ------------------------------------------------------------- calc rejections
def _rejections_arguments(parser):
    add_pair_arguments(parser)
    parser.add_argument("--T", "--horizon", dest="T", type=_positive_int, required=True,
                        help="horizon: number of generated tokens")
    parser.add_argument("--M", dest="M", type=_positive_int, default=None,
                        help="also report batch speculative decoding with M parallel drafts (Algorithm 4)")


def _rejections_compute(args) -> dict:
    from .theory import rejections

    draft, target = pair_from_args(args)
    value = rejections.expected_rejections(draft, target, args.T)
    out = {
        "quantity": "expected number of rejections over the horizon (full lookahead; Yin et al. Theorem 1)",
        "expected_rejections": value,
        "horizon": args.T,
        "speedup": rejections.speedup(draft, target, args.T),
        "per_position": rejections.rejections_per_position(draft, target, args.T).tolist(),
    }
    if args.M is not None:
        out["batch_M"] = args.M
        out["batch_expected_rejections"] = rejections.batch_expected_rejections(draft, target, args.T, args.M)
    return out


# ----------------------------------------------------------------- calc pareto
def _probability(text: str) -> float:
    try:
        value = float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {value}")
    return value


def _pareto_arguments(parser):
    add_pair_arguments(parser)
    parser.add_argument("--rejection", type=_probability, required=True,
                        help="rejection probability r in [0, 1] of the (possibly biased) verifier")
    parser.add_argument("--method", choices=("highs", "cvxpy"), default="highs", help="LP backend")


def _pareto_compute(args) -> dict:
    from .solvers.pareto import min_bias

    p, q = _first_rows(args)
    res = min_bias(p, q, args.rejection, method=args.method)
    return {
        "quantity": "least achievable bias TV(output law, target) at rejection probability r (one position)",
        "rejection": args.rejection,
        "tv": float(total_variation(p, q)),
        "min_bias": float(theory.pareto_front(p, q, args.rejection)),
        "lp": res.value,
        "lp_status": res.status,
        "accept_probs": None if res.accept_probs is None else np.asarray(res.accept_probs).tolist(),
    }


#: ``calc`` subcommands by name; later capabilities register theirs here.
CALCULATORS: dict[str, Calculator] = {
    "block": Calculator("single-draft verification of a block of L tokens", _block_arguments, _block_compute),
    "otm": Calculator("multi-draft (k candidates) acceptance: optimum, k-Seq, multi-round, naive",
                      _otm_arguments, _otm_compute),
    "rejections": Calculator("expected rejections over a horizon T (Markov-chain theory)",
                             _rejections_arguments, _rejections_compute),
    "pareto": Calculator("rejection vs bias trade-off: least bias at a rejection probability",
                         _pareto_arguments, _pareto_compute),
}


# ----------------------------------------------------------- other subcommands
def _verifier_argument(parser):
    parser.add_argument("--verifier", choices=sorted(REGISTRY), default="token", help="verification scheme")


def _simulate(args) -> dict:
    draft, target = pair_from_args(args)
    res = simulate(draft, target, REGISTRY[args.verifier](), args.L, args.blocks, seed=args.seed,
                   progress=not args.json)
    return {
        "verifier": args.verifier,
        "draft_length": args.L,
        "blocks": args.blocks,
        "seed": args.seed,
        "accepted": res.accepted.as_dict(),
        "tokens_per_iteration": res.tokens_per_iteration.as_dict(),
        "accept_dist": res.accept_dist.tolist(),
    }


def _decode(args) -> dict:
    draft, target = pair_from_args(args)
    res = generate(draft, target, REGISTRY[args.verifier](), args.L, args.tokens,
                   n_sequences=args.sequences, seed=args.seed, progress=not args.json)
    return {"verifier": args.verifier, "draft_length": args.L, "seed": args.seed, **res.summary()}


def _source_random(args) -> dict:
    draft, target = random_markov(args.vocab, args.concentration, horizon=args.horizon, seed=args.seed,
                                  sparsity=args.sparsity)
    save_source(draft, args.draft_out)
    save_source(target, args.target_out)
    return {"draft": args.draft_out, "target": args.target_out, "vocab_size": args.vocab,
            "horizon": args.horizon, "seed": args.seed}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m otspec", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    calc = sub.add_parser("calc", help="exact values and closed forms for a model pair")
    calc_sub = calc.add_subparsers(dest="calculator", required=True)
    for name, spec in CALCULATORS.items():
        p = calc_sub.add_parser(name, help=spec.help)
        spec.add_arguments(p)
        p.add_argument("--json", action="store_true", help="print one JSON object")
        p.set_defaults(run=spec.compute)

    sim = sub.add_parser("simulate", help="Monte Carlo estimate of accepted tokens per iteration")
    add_pair_arguments(sim)
    _verifier_argument(sim)
    sim.add_argument("--L", dest="L", type=_positive_int, required=True)
    sim.add_argument("--blocks", type=_positive_int, default=1_000_000)
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--json", action="store_true")
    sim.set_defaults(run=_simulate)

    dec = sub.add_parser("decode", help="end-to-end speculative generation with call counts")
    add_pair_arguments(dec)
    _verifier_argument(dec)
    dec.add_argument("--L", dest="L", type=_positive_int, required=True)
    dec.add_argument("--tokens", type=_positive_int, default=10_000, help="tokens per sequence")
    dec.add_argument("--sequences", type=_positive_int, default=32)
    dec.add_argument("--seed", type=int, default=0)
    dec.add_argument("--json", action="store_true")
    dec.set_defaults(run=_decode)

    src = sub.add_parser("source", help="write JSON sources")
    src_sub = src.add_subparsers(dest="source_command", required=True)
    rnd = src_sub.add_parser("random", help="a random Markov draft/target pair (see otspec.sources.random_markov)")
    rnd.add_argument("--vocab", type=_positive_int, required=True)
    rnd.add_argument("--concentration", type=float, default=1.0, help="0 = independent draft; larger = closer")
    rnd.add_argument("--horizon", type=_positive_int, default=None, help="time-varying chain of this horizon")
    rnd.add_argument("--sparsity", type=float, default=0.0)
    rnd.add_argument("--seed", type=int, default=0)
    rnd.add_argument("--draft-out", required=True, metavar="FILE")
    rnd.add_argument("--target-out", required=True, metavar="FILE")
    rnd.add_argument("--json", action="store_true")
    rnd.set_defaults(run=_source_random)
    return parser


def _print_human(result: dict, indent: str = "") -> None:
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
    args = parser.parse_args(argv)
    try:
        result = args.run(args)
    except (CLIError, ValueError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_human(result)
    return 0
