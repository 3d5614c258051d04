"""The ``calc`` subcommands of ``python -m otspec``: exact values and closed forms for one pair.

Each calculator is a :class:`Calculator` in :data:`CALCULATORS`: a function adding its
arguments and a function returning a JSON-ready dict. A value that is not computed is
``null`` *with a reason*: its key ``<name>_status`` says why (a size beyond a stated limit,
with the size and the limit).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import theory
from .checks import MAX_CANDIDATES, MAX_DRAFT_LENGTH, capped_power, check_size, format_count
from .clitools import (
    CLIError,
    add_pair_arguments,
    add_tree_arguments,
    capped_tree_note,
    check_lengths,
    flags_that_apply,
    fraction,
    length_list,
    pair_from_args,
    positive_int,
    tree_from_args,
)
from .distributions import total_variation
from .drafts import tree_for_vocab
from .errors import HorizonError, SizeLimitError
from .pairs import check_pair
from .sources import IIDSource, Source
from .verifiers import CHAIN_VERIFIERS, REGISTRY, TREE_VERIFIERS, ClosedForm

__all__ = ["CALCULATORS", "Calculator"]


@dataclass(frozen=True)
class Calculator:
    """One ``calc`` subcommand."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    compute: Callable[[argparse.Namespace], dict]


def _value(out: dict, key: str, fn, *args) -> None:
    """``out[key] = fn(*args)``, or None with ``out[key + "_status"]`` saying which limit refused it: a size limit,
    or a source's horizon too short for that one value (Gumbel's exact value enumerates L + 1 tokens; the other
    columns are still reported)."""
    try:
        out[key] = fn(*args)
    except SizeLimitError as exc:
        out[key], out[f"{key}_status"] = None, f"not computed: {exc}"
    except HorizonError as exc:
        out[key], out[f"{key}_status"] = None, f"not computed: {key} needs longer sequences than the sources give: {exc}"


def _nonnegative(text: str) -> float:
    try:
        value = fraction(text)
    except (ValueError, ZeroDivisionError, OverflowError):  # 1e400 overflows a float
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not (np.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


# ------------------------------------------------------------------ calc block
#: Largest LP (variables = V^(2L)) ``calc block`` solves by default.
CALC_LP_MAX_VARIABLES = 2**16
#: Longest draft length ``calc block --cost-ratio`` searches for the best L by default.
BEST_LENGTH_SEARCH = 64


def _block_arguments(parser):
    add_pair_arguments(parser)
    parser.add_argument("--L", "--draft-length", dest="L", type=length_list, required=True,
                        help="draft (block) length L, or several separated by commas (2,4,8): one object each")
    parser.add_argument("--lp-max-variables", type=positive_int, default=CALC_LP_MAX_VARIABLES,
                        help="solve the block-OT LP only up to this many variables V^(2L); larger sizes report "
                             "lp = null with the reason in lp_status")
    parser.add_argument("--cost-ratio", type=_nonnegative, default=None, metavar="C",
                        help="cost of one draft call relative to one target call (c = t_draft / t_target): also "
                             "report the predicted wall-clock speedup (E[tau] + 1) / (1 + c L) and the best L")
    parser.add_argument("--max-length", type=positive_int, default=None,
                        help="with --cost-ratio: search the best draft length of token verification among "
                             f"1..max-length (capped by the sources' horizons; default {BEST_LENGTH_SEARCH})")


def _iid_bounds(values: dict, draft: Source, target: Source, L: int) -> None:
    """IID pairs too large to enumerate: certified bounds from :mod:`otspec.theory.iid` (value = midpoint)."""
    fields = {cls.closed_form.calc_key: cls.closed_form.iid_field for cls in REGISTRY.values()
              if cls.closed_form is not ClosedForm.TOKEN}  # token verification's value is always computed
    missing = [key for key in fields if values.get(key) is None]
    if not missing or not (isinstance(draft, IIDSource) and isinstance(target, IIDSource)):
        return
    try:
        res = theory.iid_block_values(draft.probs, target.probs, L)
    except SizeLimitError as exc:  # the bounds too have a limit: the closed forms' statuses say both
        for key in missing:
            values[f"{key}_status"] += f"; certified bounds not computed either: {exc}"
        return
    for key in missing:
        bound = getattr(res, fields[key])
        values.pop(f"{key}_status", None)
        values[key], values[f"{key}_bounds"], values[f"{key}_method"] = bound.value, [bound.low, bound.high], \
            bound.method


def _block_compute(args) -> dict | list:
    """One object for one --L, a list of them (one per length, in order) for several."""
    flags_that_apply(args, (("max_length", BEST_LENGTH_SEARCH, "cost_ratio"),))  # not ignored without it
    lengths = args.L if isinstance(args.L, list) else [args.L]
    check_lengths(lengths)
    from .solvers import MAX_LP_VARIABLES

    # a larger LP would be refused by the solver, in a message that does not name the flag
    check_size(args.lp_max_variables, "--lp-max-variables", limit=MAX_LP_VARIABLES, limit_name="MAX_LP_VARIABLES")
    rows = [_block_one(args, L) for L in lengths]
    return rows[0] if len(rows) == 1 else rows


def block_keys() -> dict:
    """``calc block``'s JSON key of every registered lossless chain verifier: its closed form's
    (:attr:`~otspec.verifiers.ClosedForm.calc_key`: ``token``, ``block_onpath``, ``block_optimal``), or its name for a
    verifier without one (``gumbel``: its exact value by enumeration)."""
    return {cls.closed_form.calc_key if cls.closed_form else name: cls for name, cls in CHAIN_VERIFIERS.items()}


def _closed_form_keys(values: dict) -> list[str]:
    return [cls.closed_form.calc_key for cls in REGISTRY.values() if values.get(cls.closed_form.calc_key) is not None]


def _block_one(args, L) -> dict:
    from .solvers import solve_block_lp

    L = check_size(L, "--L", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    draft, target = pair_from_args(args)
    check_pair(draft, target, L)  # the block of L drafts: every column needs it (Gumbel's one more is optional)
    V = target.vocab_size
    first = total_variation(draft.next_probs([[]])[0], target.next_probs([[]])[0])
    values: dict = {}
    for key, verifier in block_keys().items():  # each verifier's own value (its closed form where it has one)
        _value(values, key, verifier().expected_accepted, draft, target, L)
    _iid_bounds(values, draft, target, L)
    out = {
        "quantity": "expected accepted draft tokens per iteration, E[tau] (add 1 for tokens per iteration)",
        "draft_length": L,
        "vocab_size": V,
        "tv_first_token": float(first),
        **values,
    }
    n_var = capped_power(V, 2 * L)
    if n_var <= args.lp_max_variables:
        res = solve_block_lp(draft, target, L)
        out["lp"], out["lp_status"] = res.value, res.status
    else:
        out["lp"] = None
        out["lp_status"] = (f"not solved: the block LP has {V}^{2 * L} = {format_count(n_var)} variables, which exceed "
                            f"--lp-max-variables {args.lp_max_variables:,}")
    names = _closed_form_keys(values)
    for name in names:
        out[f"{name}_tokens_per_iteration"] = theory.tokens_per_iteration(values[name])
    out["acceptance_rate"] = {name: values[name] / L for name in names}
    out["acceptance_rate_note"] = "accepted / drafted = E[tau] / L, as serving engines report it"
    names = {cls: name for name, cls in CHAIN_VERIFIERS.items()}  # simulate/decode --verifier of each column
    out["simulate_verifier"] = {key: names[cls] for key, cls in block_keys().items() if key in out}
    if args.cost_ratio is not None:
        check_size(args.max_length, "--max-length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
        out.update(_cost_model(draft, target, L, args.cost_ratio, args.max_length, values))
    return out


def _cost_model(draft: Source, target: Source, L: int, c: float, max_length: int, values: dict) -> dict:
    names = _closed_form_keys(values)
    horizon = min(h for h in (draft.horizon, target.horizon, max_length) if h is not None)
    lengths = range(1, horizon + 1)
    token = [theory.expected_accepted_token(draft, target, ell) for ell in lengths]
    speed = [theory.predicted_speedup(v, c, ell) for ell, v in zip(lengths, token, strict=True)]
    best = int(np.argmax(speed))
    return {
        "cost_ratio": c,
        "speedup": {name: theory.predicted_speedup(values[name], c, L) for name in names},
        "speedup_model": ("(E[tau] + 1) / (1 + c L): one target call scoring L + 1 tokens costs one plain decoding "
                          "step, each drafted token c of it"),
        "best_length": lengths[best],
        "best_speedup": speed[best],
        "best_length_verifier": "token",
        "best_length_searched": [1, horizon],
    }


# -------------------------------------------------------------------- calc otm
def _otm_arguments(parser):
    add_pair_arguments(parser)
    parser.add_argument("--k", type=positive_int, required=True, help="number of draft candidates")


def _one_position_rows(args, what: str):
    """Token-level rows: inline rows or IID sources; other sources are refused with the reason."""
    draft, target = pair_from_args(args)
    for role, src in (("draft", draft), ("target", target)):
        if not isinstance(src, IIDSource):
            raise CLIError(f"calc {what} works at one position, so it needs IID rows; the {role} source "
                           f"{src!r} is context-dependent. Give --draft/--target rows, or IID source files "
                           f"(for a Markov chain, pass the row of the context you want)")
    return draft.probs, target.probs


def _otm_compute(args) -> dict:
    from . import solvers

    p, q = _one_position_rows(args, "otm")
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
    }
    _value(out, "upper_bound", theory.lemma3_upper_bound, p, q, k)
    _value(out, "multiround", theory.multiround_acceptance, p, q, k)
    _value(out, "multiround_without_replacement", theory.multiround_acceptance, p, q, k, False)
    out["naive"] = theory.naive_acceptance(p, q, k)
    out["greedy_drafts"] = solvers.structured_value(p, q, k, "greedy")  # Hu et al.: optimum = the greedy verifier
    if k <= 2:
        out["spechub"] = solvers.structured_value(p, q, k, "hub")
    else:
        out["spechub"], out["spechub_status"] = None, f"not applicable: SpecHub's hub draw has k <= 2 drafts (k = {k})"
    return out


# -------------------------------------------------------------------- calc tree
def _tree_arguments(parser):
    add_pair_arguments(parser)
    add_tree_arguments(parser, required=True)


def _tree_compute(args) -> dict:
    from .engine.tree import tree_bound, tree_law

    draft, target = pair_from_args(args)
    tree = tree_from_args(args)
    for source in (draft, target):  # every value needs depth + 1 tokens: refused here, not each column null
        source.check_length(tree.depth + 1, f"the tree {tree} drafts {tree.depth} tokens, then one from the target")
    out = {"quantity": "expected accepted tokens per iteration (exact), from an empty context", "tree": str(tree),
           "depth": tree.depth, "vocab_size": target.vocab_size, "verifiers": {}}
    V = target.vocab_size
    capped = capped_tree_note(tree, V)
    out.update(capped)
    tree = tree_for_vocab(tree, V)  # the same draws as the capped tree's, computed on it (4096x1 at V = 3 took 30 s)

    _value(out, "optimum", lambda: (lambda o: {"value": o.value, "coupling": o.coupling,
                                               "per_depth": o.per_level.tolist(), "per_depth_sum": o.per_level_sum,
                                               "drafted_trees": o.trees})(
        tree_bound(draft, target, tree)))
    for name, cls in TREE_VERIFIERS.items():
        try:
            out["verifiers"][name] = tree_law(draft, target, cls(), tree, "match").expected_accepted
        except SizeLimitError as exc:
            out["verifiers"][name], out["verifiers"][f"{name}_status"] = None, f"not computed: {exc}"
        except ValueError as exc:  # a verifier that does not fit this tree's draw
            out["verifiers"][name], out["verifiers"][f"{name}_status"] = None, f"not applicable: {exc}"
    return out


# ------------------------------------------------------------- calc rejections
def _rejections_arguments(parser):
    add_pair_arguments(parser)
    parser.add_argument("--T", "--horizon", dest="T", type=positive_int, required=True,
                        help="horizon: number of generated tokens")
    parser.add_argument("--M", dest="M", type=positive_int, default=None,
                        help="also report batch speculative decoding with M parallel drafts (Algorithm 4)")


def _rejections_compute(args) -> dict:
    from .theory import rejections

    if args.M is not None:  # checked before the T rejections are computed (3.9 s at T = 10^6)
        check_size(args.M, "--M", limit=MAX_CANDIDATES, limit_name="MAX_CANDIDATES")
    draft, target = pair_from_args(args)
    value = rejections.expected_rejections(draft, target, args.T)
    out = {
        "quantity": "expected number of rejections over the horizon (full lookahead; Yin et al. Theorem 1)",
        "expected_rejections": value,
        "horizon": args.T,
        "speedup": rejections.speedup(draft, target, args.T) if value > 0 else None,
        "per_position": rejections.rejections_per_position(draft, target, args.T).tolist(),
    }
    if value == 0:
        out["speedup_status"] = "undefined (infinite): E[N_rej] = 0, the draft equals the target and never is rejected"
    if args.M is not None:
        out["batch_M"] = args.M
        out["batch_expected_rejections"] = rejections.batch_expected_rejections(draft, target, args.T, args.M)
    return out


# ----------------------------------------------------------------- calc pareto
def _probability(text: str) -> float:
    try:
        value = fraction(text)
    except (ValueError, ZeroDivisionError, OverflowError):  # 1e400 overflows a float
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

    p, q = _one_position_rows(args, "pareto")
    out = {
        "quantity": "least achievable bias TV(output law, target) at rejection probability r (one position)",
        "rejection": args.rejection,
        "tv": float(total_variation(p, q)),
        "min_bias": float(theory.pareto_front(p, q, args.rejection)),
    }
    try:
        res = min_bias(p, q, args.rejection, method=args.method)
    except SizeLimitError as exc:
        reason = f"not solved: {exc}"
        return {**out, "lp": None, "lp_status": reason, "accept_probs": None, "accept_probs_status": reason}
    return {**out, "lp": res.value, "lp_status": res.status, "accept_probs": np.asarray(res.accept_probs).tolist()}


# --------------------------------------------------------------- calc adaptive
def _adaptive_arguments(parser):
    add_pair_arguments(parser)
    parser.add_argument("--t-draft", type=_nonnegative, required=True, metavar="A",
                        help="cost of one draft call (any unit)")
    parser.add_argument("--t-target", type=_nonnegative, default=1.0, metavar="B",
                        help="cost of one target call, same unit")
    parser.add_argument("--max-length", type=positive_int, required=True, metavar="K",
                        help="longest draft per iteration")


def _adaptive_compute(args) -> dict:
    K = check_size(args.max_length, "--max-length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    if args.t_target <= 0:
        raise CLIError(f"--t-target: expected a cost > 0, got {args.t_target!r}")
    draft, target = pair_from_args(args)
    if not (isinstance(draft, IIDSource) and isinstance(target, IIDSource)):
        return _adaptive_markov(draft, target, K, args)
    p, q = draft.probs, target.probs
    out = _fixed_lengths(lambda k: theory.fixed_length_latency(p, q, k, args.t_draft, args.t_target), K, args,
                         "latency per generated token (time per iteration / tokens per iteration; same unit as the costs)")
    opt = theory.optimal_stopping(p, q, K, args.t_draft, args.t_target)  # the bracket past toy sizes: never refused
    return {**out, "optimal": opt.latency, "optimal_expected_drafted": opt.expected_drafted,
            "optimal_method": opt.method, "optimal_latency_bounds": list(opt.latency_bounds),
            "optimal_expected_drafted_bounds": list(opt.expected_drafted_bounds),
            "optimal_expected_tokens": opt.expected_tokens,
            "optimal_is_threshold_policy": opt.is_threshold_policy,
            "optimal_thresholds": [t["continue_below"] for t in opt.thresholds],
            "optimal_thresholds_note": ("after drafted token j the optimal policy drafts another iff P(some drafted "
                                        "token is rejected) < optimal_thresholds[j-1] (null: always stop)"),
            "optimal_threshold_intervals": opt.thresholds}


def _fixed_lengths(latency_of, K: int, args, quantity: str) -> dict:
    """The keys shared by both routes: plain decoding, every fixed length 1..K and the best of them."""
    fixed = {str(k): latency_of(k) for k in range(1, K + 1)}
    best = min(fixed, key=fixed.get)
    return {"quantity": quantity, "autoregressive": args.t_target, "fixed": fixed, "best_fixed_length": int(best),
            "best_fixed": fixed[best]}


def _adaptive_markov(draft, target, K, args) -> dict:
    """calc adaptive on a stationary Markov pair: exact average-cost latencies (theory.adaptive_markov)."""
    from .theory.adaptive_markov import (
        longest_markov_length,
        markov_optimal_stopping,
        markov_policy_latency,
    )

    longest = longest_markov_length(target.vocab_size)
    if K > longest:  # every fixed length is walked too: refused here, naming the flag, rather than at length 17
        raise CLIError(f"--max-length {K}: the exact latencies of a Markov pair at V = {target.vocab_size:,} walk "
                       f"every drafted path; {f'at most {longest}' if longest else 'not even 1'} fits here "
                       "(MAX_MARKOV_PATHS = 2^18 paths)")
    out = _fixed_lengths(lambda k: markov_policy_latency(draft, target, k, args.t_draft, args.t_target), K, args,
                         "long-run latency per generated token of a stationary Markov pair (same unit as the costs)")
    try:
        opt = markov_optimal_stopping(draft, target, K, args.t_draft, args.t_target)
    except SizeLimitError as exc:
        reason = f"not computed: {exc}"
        return {**out, "optimal": None, "optimal_status": reason, "optimal_thresholds": None,
                "optimal_thresholds_status": reason}
    out.update({"optimal": opt.latency, "optimal_is_threshold_policy": opt.is_threshold_policy})
    if opt.is_threshold_policy:
        out.update({"optimal_thresholds": [t["continue_below"] for t in opt.thresholds],
                    "optimal_thresholds_note": ("after drafted token j the optimal rule drafts another iff P(some "
                                                "drafted token is rejected) < optimal_thresholds[j-1], one value per "
                                                "step whatever the drafted context (null: always stop), on the paths "
                                                "the rule reaches"),
                    "optimal_threshold_intervals": opt.thresholds})
    else:
        out.update({"optimal_thresholds": None, "optimal_thresholds_status": (
            "no threshold policy: the optimal rule depends on the drafted context (Theorem 4.3's structure fails "
            "here); see optimal_counterexample"), "optimal_counterexample": opt.counterexample})
    return out


#: ``calc`` subcommands by name; later capabilities register theirs here.
CALCULATORS: dict[str, Calculator] = {
    "block": Calculator("single-draft verification of a block of L tokens", _block_arguments, _block_compute),
    "otm": Calculator("multi-draft (k candidates) acceptance: optimum, k-Seq, multi-round, naive",
                      _otm_arguments, _otm_compute),
    "tree": Calculator("a draft tree: the exact optimum of any lossless verifier, and every tree verifier's value",
                       _tree_arguments, _tree_compute),
    "rejections": Calculator("expected rejections over a horizon T (Markov-chain theory)",
                             _rejections_arguments, _rejections_compute),
    "pareto": Calculator("rejection vs bias trade-off: least bias at a rejection probability",
                         _pareto_arguments, _pareto_compute),
    "adaptive": Calculator("adaptive draft length (SpecDec++): fixed lengths and the exact optimal stopping policy",
                           _adaptive_arguments, _adaptive_compute),
}
