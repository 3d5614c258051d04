"""One sweep cell: build its pair, run its quantities, return one flat row.

Quantities (columns; a quantity that does not apply or is too large leaves its columns empty and
says why in ``<quantity>_note``; Monte Carlo and decode work is estimated before they run,
:mod:`otspec.sweep.work`):

* ``exact`` — E[τ] of the verifier (single draft: eqs. (4), (17), (8); IID pairs through
  :func:`~otspec.theory.iid.iid_block_values` at any V, with certified ``exact_low``/``exact_high``;
  multi-draft: the verifier's closed-form acceptance of one step of k candidates), with tokens
  per iteration and the speedup (E[τ] + 1) / (c·L + 1) at the cell's cost ratio c.
* ``optimum`` — the block-OT optimum (8) (single draft) or the OTM-k optimum α_k (min-cut dual).
* ``monte_carlo`` — :func:`otspec.engine.simulate` (row-free for IID token / block cells) with its
  interval; multi-draft cells: :func:`otspec.engine.simulate_candidates`, P(accept) of one step.
* ``decode`` — block efficiency of :func:`otspec.engine.generate` with its interval.
* on logged rows (:mod:`otspec.sources.logged`), averaged over every window of L+1 steps: ``exact`` is
  token verification's closed form; for block verification and the optimum it gives the certified
  range ``[token value, Σ_l min_{i≤l} (1 − TV_i)]`` with an empty value
  (:func:`~otspec.theory.positional_window_values`); ``monte_carlo`` is :func:`otspec.engine.simulate_logged`
  (row-free, token and block); multi-draft cells average the closed form and the OTM-k optimum over every
  step. ``decode`` and ``adaptive`` do not apply.
* tree cells (a ``tree`` key; multi-draft and whole-tree verifiers): one iteration on the whole tree
  from the empty context — ``exact`` is :func:`~otspec.engine.tree_law`'s E[accepted], ``optimum`` the
  tree optimum of any lossless verifier (:func:`~otspec.engine.tree_bound`), ``monte_carlo``
  :func:`~otspec.engine.simulate_tree`, ``decode`` :func:`~otspec.engine.generate_tree`; the speedup
  counts one draft call per tree level. Not on logged rows.
* ``adaptive`` — SpecDec++ on an IID pair with token verification: latency per token (t_target = 1,
  t_draft = c) of the exact optimal stopping policy with at most L drafts (``adaptive_latency_low`` /
  ``_high`` bound it: equal on toy pairs, within 1e-9 at LLM vocabularies, :mod:`otspec.theory.adaptive_bracket`),
  of fixed L and of the best fixed length ≤ L, and the optimal policy's speedup over plain decoding.

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import numpy as np

from .. import theory
from ..checks import MAX_CANDIDATES, MAX_DRAFT_LENGTH, check_real, check_size
from ..distributions import temperature_rows, total_variation
from ..engine import (
    Backend,
    generate,
    generate_tree,
    simulate,
    simulate_candidates,
    simulate_logged,
    simulate_tree,
    tree_bound,
    tree_law,
)
from ..solvers.otm_dual import otm_value
from ..sources import (
    IIDSource,
    MarkovSource,
    load_logged_rows,
    load_source,
    random_iid,
    random_markov,
)
from ..theory.iid import iid_block_values
from ..verifiers import MULTI_DRAFT_REGISTRY, REGISTRY, ClosedForm
from .spec import PAIR_KEYS, QUANTITIES, SWEEP_VERIFIERS, cell_id, cell_seed, describe_pair, tree_of
from .work import over_limit

__all__ = ["build_pair", "run_cell", "run_cells", "temper"]

def temper(source, T: float):
    """``source`` with every row raised to 1/T and renormalised (T = 1: the source itself; T = 0: the arg-max rows,
    greedy, as :func:`~otspec.distributions.temperature_rows` makes them)."""
    T = check_real(T, "temperature", low=0.0)  # True was read as T = 1
    if not isinstance(source, IIDSource | MarkovSource):
        raise ValueError(f"temperature {T}: applies to iid and markov sources, not {type(source).__name__}")
    if T == 1.0:
        return source

    def rows(x):
        x = np.asarray(x, dtype=np.float64)
        return temperature_rows(np.where(x > 0, np.log(np.where(x > 0, x, 1.0)), -np.inf), T)

    if isinstance(source, IIDSource):
        return IIDSource(rows(source.probs))
    if isinstance(source, MarkovSource):
        horizon = None if source.stationary else source.transition.shape[0] + 1
        return MarkovSource(rows(source.initial), rows(source.transition), horizon=horizon)
    raise ValueError(f"temperature {T}: applies to iid and markov sources, not {type(source).__name__}")


@functools.lru_cache(maxsize=8)
def _logged(path: str):
    """A worker reads each log once."""
    return load_logged_rows(path)


def build_pair(pair: dict, base: Path = Path("."), temperature: float = 1.0):
    """(draft, target) of a spec's pair entry (random families from their ``pair_seed``)."""
    kind = _require(pair, "pair", ("kind",))["kind"]
    if kind not in _BUILT:
        raise ValueError(f"pair {pair!r}: kind {kind!r} has no sources to build (expected one of {sorted(_BUILT)}; a "
                         "logged pair's rows are read by run_cell)")
    _require(pair, "pair", _BUILT[kind])
    _no_unknown_keys(pair)
    if kind == "random_iid":
        d, t = random_iid(pair["vocab"], pair["concentration"], seed=pair["pair_seed"], sparsity=pair["sparsity"])
    elif kind == "random_markov":
        d, t = random_markov(pair["vocab"], pair["concentration"], horizon=pair.get("horizon"),
                             seed=pair["pair_seed"], sparsity=pair["sparsity"])
    elif kind == "iid":
        d, t = IIDSource(pair["draft"]), IIDSource(pair["target"])
    else:
        d, t = (load_source(p if Path(p).is_absolute() else base / p) for p in (pair["draft"], pair["target"]))
    if d.vocab_size != t.vocab_size:
        raise ValueError(f"pair {describe_pair(pair)}: draft has {d.vocab_size} tokens, target {t.vocab_size}")
    return temper(d, temperature), temper(t, temperature)


#: The keys of a pair entry :func:`build_pair` reads, by kind (a spec's pairs hold them once loaded).
_BUILT = {"random_iid": ("vocab", "concentration", "pair_seed", "sparsity"),
          "random_markov": ("vocab", "concentration", "pair_seed", "sparsity"),
          "iid": ("draft", "target"), "json": ("draft", "target")}
#: The keys of a cell :func:`run_cell` reads (a :class:`~otspec.sweep.SweepSpec`'s cells hold them).
_CELL_KEYS = ("pair", "verifier", "params", "L", "k", "temperature", "cost_ratio", "blocks", "tokens", "sequences",
              "confidence")


def _require(entry, what: str, keys) -> dict:
    """``entry`` when it is a dict holding ``keys``, else a ``ValueError`` naming what is missing (not a KeyError)."""
    if not isinstance(entry, dict):
        raise ValueError(f"{what}: expected a dict (as a SweepSpec's cells hold it), got {type(entry).__name__}")
    missing = [key for key in keys if key not in entry]
    if missing:
        raise ValueError(f"{what} {entry!r}: missing {', '.join(map(repr, missing))} (as a SweepSpec's cells hold it)")
    return entry


def check_cell(cell, quantities) -> None:
    """Refuse (a ``ValueError`` naming the key) a cell :func:`run_cell` could not run as :func:`load_spec` would have
    made it: a missing or unknown key, or a value load_spec refuses (L = 2.5, k = 5000, a negative cost ratio, ...),
    and quantities that are not a list of names among :data:`QUANTITIES`. A hand-made cell's bad value had become a
    note in its row, beside the value itself."""
    _require(cell, "cell", _CELL_KEYS)
    unknown = sorted(set(cell) - {*_CELL_KEYS, "tree", "device"})
    if unknown:
        raise ValueError(f"cell: unknown keys {unknown} (a SweepSpec's cells hold {sorted(_CELL_KEYS)}, tree, device)")
    if isinstance(quantities, str) or not isinstance(quantities, list | tuple) or not quantities or any(
            q not in QUANTITIES for q in quantities):
        raise ValueError(f"quantities: expected a list of names among {QUANTITIES}, got {quantities!r}")
    for key, limit, limit_name in (("L", MAX_DRAFT_LENGTH, "MAX_DRAFT_LENGTH"), ("k", MAX_CANDIDATES, "MAX_CANDIDATES")):
        if cell[key] is not None:
            check_size(cell[key], f"cell {key}", limit=limit, limit_name=limit_name)
    for key in ("blocks", "tokens", "sequences"):
        check_size(cell[key], f"cell {key}")
    check_real(cell["temperature"], "cell temperature", low=0.0)
    check_real(cell["cost_ratio"], "cell cost_ratio", low=0.0)
    check_real(cell["confidence"], "cell confidence", low=0.0, high=1.0, low_open=True)
    if cell["confidence"] >= 1:
        raise ValueError(f"cell confidence: expected a level in (0, 1), got {cell['confidence']!r}")
    if cell["L"] is None and cell["k"] is None and cell.get("tree") is None:
        raise ValueError("cell: L, k and tree are all None; a cell drafts a chain (L), k candidates or a tree")
    name, params = cell["verifier"], cell["params"]
    if name not in SWEEP_VERIFIERS or not isinstance(params, dict):
        raise ValueError(f"cell: verifier {name!r} with params {params!r}: expected a name among "
                         f"{sorted(SWEEP_VERIFIERS)} and a dict of its parameters")
    try:
        SWEEP_VERIFIERS[name](**params)
    except TypeError as err:  # an unknown keyword, as load_spec words it
        raise ValueError(f"cell: parameters {params!r} for {name!r}: {err}") from None
    pair = _require(cell["pair"], "cell's pair", ("kind",))
    if pair["kind"] == "logged":
        _require(pair, "cell's pair", ("file", "tail"))
        _no_unknown_keys(pair)
    elif pair["kind"] not in _BUILT:
        raise ValueError(f"cell's pair {pair!r}: kind {pair['kind']!r}: expected one of {sorted({*_BUILT, 'logged'})}")


def _no_unknown_keys(pair: dict) -> None:
    """A key :data:`~otspec.sweep.spec.PAIR_KEYS` does not list for the pair's kind is refused, as load_spec does."""
    unknown = sorted(set(pair) - {"kind", *PAIR_KEYS[pair["kind"]]})
    if unknown:
        raise ValueError(f"pair {pair!r:.80}: unknown keys {unknown} for kind {pair['kind']!r}; expected among "
                         f"{sorted(PAIR_KEYS[pair['kind']])}")


def check_pair(pair: dict, base: Path = Path(".")) -> None:
    """Read a pair's files (JSON sources, logged rows) and rows, so that a damaged one is refused before a sweep
    makes its folder or runs a cell; random families were checked with the spec and are built in the cells."""
    if pair["kind"] == "logged":
        _logged(str((base / pair["file"]).resolve()))  # the key the cells read it by (read once per process)
    elif pair["kind"] in ("iid", "json"):
        build_pair(pair, base)


def _quantity(row: dict, name: str, fn) -> None:
    """Run one quantity; a ValueError (too large, not applicable) becomes its note instead of the sweep's end."""
    t0 = time.perf_counter()
    try:
        row.update(fn())
    except (ValueError, NotImplementedError) as err:
        row[f"{name}_note"] = str(err)
    row[f"{name}_seconds"] = time.perf_counter() - t0


def _logged_runs(cell: dict, log, verifier, seeds, row: dict) -> dict:
    """The quantities of a cell on logged rows (see the module docstring)."""
    name, L, k, c, tail = cell["verifier"], cell["L"], cell["k"], cell["cost_ratio"], cell["pair"]["tail"]
    multi = name in MULTI_DRAFT_REGISTRY
    alpha = log.overlaps(tail)
    row.update(vocab=log.vocab(tail), tv_first_token=float(1.0 - alpha[0]), tv_mean=float(1.0 - alpha.mean()),
               log_paths=log.n_paths, log_steps=log.n_steps)
    bounds = {}

    def single():
        if not bounds:
            W = log.windows(L, cell["pair"].get("span"))
            bounds["token"], bounds["high"] = theory.positional_window_values(alpha[W[:, None] + np.arange(L)])
        return bounds["token"], bounds["high"]

    def per_step(fn):
        return float(np.mean([fn(*log.step_rows(t, tail)[1:], k) for t in range(log.n_steps)]))

    def exact():
        if multi:
            a = per_step(verifier.expected_acceptance)
            return {"exact_acceptance": a, "exact_tokens_per_step": 1.0 + a,
                    "exact_speedup": theory.predicted_speedup(a, c, 1)}
        if name not in REGISTRY:
            raise NotImplementedError(f"{name} on logged rows: no exact value (its rows' closed forms are for "
                                      "sources)")
        token, high = single()
        if REGISTRY[name].closed_form is ClosedForm.TOKEN:
            return {"exact_accepted": token, "exact_low": token, "exact_high": token,
                    "exact_tokens_per_iteration": token + 1.0, "exact_speedup": theory.predicted_speedup(token, c, L)}
        return {"exact_low": token, "exact_high": high,
                "exact_note": f"{name} on logged rows: a certified range (token value, min-overlap bound), no value"}

    def optimum():
        if multi:
            return {"optimum_acceptance": per_step(otm_value)}
        token, high = single()
        return {"optimum_low": token, "optimum_high": high,
                "optimum_note": "the block-OT optimum on logged rows: a certified range only"}

    def monte_carlo():
        if multi:
            raise NotImplementedError(_MC_SINGLE)
        res = simulate_logged(log, verifier, L, cell["blocks"], tail=tail, span=cell["pair"].get("span"),
                              seed=np.random.default_rng(seeds[0]), progress=False, confidence=cell["confidence"],
                              backend=Backend(device=cell.get("device")))
        return _mc_columns(res, cell["blocks"])

    off = _unavailable_on_logs
    return {"exact": exact, "optimum": optimum, "monte_carlo": monte_carlo, "decode": off("decode")["decode"],
            "adaptive": off("adaptive")["adaptive"]}


def _unavailable_on_logs(what: str) -> dict:
    """Every quantity raising: ``what`` does not run on logged rows (their rows depend on position only)."""
    def run():
        raise NotImplementedError(f"{what} on logged rows: their rows depend on position only, there is no "
                                  "context to decode from")
    return dict.fromkeys(("exact", "optimum", "monte_carlo", "decode", "adaptive"), run)


def _tree_runs(cell: dict, sources, verifier, seeds, row: dict) -> dict:
    """The quantities of a tree cell: one iteration on the whole tree from the empty context."""
    draft, target = sources
    c, conf = cell["cost_ratio"], cell["confidence"]
    tree = tree_of(cell, verifier)
    row.update(vocab=target.vocab_size, L=tree.depth,
               tv_first_token=float(total_variation(draft.next_probs([[]])[0], target.next_probs([[]])[0])))

    def exact():
        e = tree_law(draft, target, verifier, tree).expected_accepted
        return {"exact_accepted": e, "exact_low": e, "exact_high": e, "exact_tokens_per_iteration": e + 1.0,
                "exact_speedup": theory.predicted_speedup(e, c, tree.depth)}

    def optimum():
        e = tree_bound(draft, target, tree).value
        return {"optimum_accepted": e, "optimum_low": e, "optimum_high": e,
                "optimum_speedup": theory.predicted_speedup(e, c, tree.depth)}

    def monte_carlo():
        res = simulate_tree(draft, target, verifier, tree, cell["blocks"], seed=np.random.default_rng(seeds[0]),
                            progress=False, confidence=conf)
        return _mc_columns(res, cell["blocks"])

    def decode():
        res = generate_tree(draft, target, verifier, tree, cell["tokens"], n_sequences=cell["sequences"],
                            seed=np.random.default_rng(seeds[1]), progress=False)
        be = res.at_confidence(conf).block_efficiency
        return {"decode_block_efficiency": be.value, "decode_low": be.low, "decode_high": be.high}

    def adaptive():
        raise NotImplementedError("adaptive cells: token verification of an IID pair (SpecDec++'s setting)")

    return {"exact": exact, "optimum": optimum, "monte_carlo": monte_carlo, "decode": decode, "adaptive": adaptive}


_MC_SINGLE = "Monte Carlo of multi-draft cells on logged rows: not available (exact and optimum average every step)"


def _mc_columns(res, blocks: int) -> dict:
    a = res.accepted
    return {"mc_accepted": a.value, "mc_low": a.low, "mc_high": a.high, "mc_stderr": a.stderr,
            "mc_blocks": blocks, "mc_blocks_per_s": blocks / max(res.elapsed_s, 1e-12)}


def run_cell(cell: dict, sweep_seed: int, quantities, base: Path = Path(".")) -> dict:
    """The row of one cell: its parameters, then the columns of each quantity."""
    check_cell(cell, quantities)
    pair, name, params = cell["pair"], cell["verifier"], cell["params"]
    sources = None if pair["kind"] == "logged" else build_pair(pair, base, cell["temperature"])  # its values checked
    row = {"cell": cell_id(cell), "pair": describe_pair(pair), "pair_kind": pair["kind"],
           "concentration": pair.get("concentration"), "sparsity": pair.get("sparsity"),
           "pair_seed": pair.get("pair_seed"), "tail": pair.get("tail"), "verifier": name, "L": cell["L"],
           "k": cell["k"], "temperature": cell["temperature"], "cost_ratio": cell["cost_ratio"],
           **{f"param_{key}": value for key, value in sorted(params.items())}}
    seeds = cell_seed(sweep_seed, cell).spawn(2)
    verifier = SWEEP_VERIFIERS[name](**params)
    if cell.get("tree") is not None:
        row["tree"] = cell["tree"]
        runs = _unavailable_on_logs("tree cells") if sources is None else _tree_runs(cell, sources, verifier, seeds, row)
    elif sources is None:
        runs = _logged_runs(cell, _logged(str((base / pair["file"]).resolve())), verifier, seeds, row)
    else:
        runs = _source_runs(cell, sources, verifier, seeds, row)
    iid = sources is not None and all(isinstance(s, IIDSource) for s in sources)
    for qname in quantities:
        note = over_limit(cell, qname, row.get("vocab"), iid)  # estimated from the sizes, before running
        if note is None:
            _quantity(row, qname, runs[qname])
        else:
            row[f"{qname}_note"], row[f"{qname}_seconds"] = note, 0.0
    return row


#: Speedup columns and the value each rescales (the first present); every other column but ``adaptive``'s is free
#: of the cost ratio.
_SPEEDUPS = {"exact_speedup": ("exact_accepted", "exact_acceptance"), "optimum_speedup": ("optimum_accepted",)}


def run_cells(cells: list, sweep_seed: int, quantities, base: Path = Path(".")) -> list[dict]:
    """The rows of cells that differ only in their cost ratio (one :func:`~otspec.sweep.spec.shared_key`).

    Every quantity runs once, for the first cell; the others get its columns with the speedups
    recomputed at their own ratio (the draws are the same: the seed ignores the ratio), and
    ``adaptive``, whose policy depends on the ratio, runs for each. Equal to running each cell alone.
    """
    first, *rest = cells
    row = run_cell(first, sweep_seed, quantities, base)
    rows = [row]
    for cell in rest:
        out = {**row, "cell": cell_id(cell), "cost_ratio": cell["cost_ratio"]}
        drafts = 1 if row.get("L") is None else row["L"]  # a multi-draft step drafts once; a tree, once per level
        for column, values in _SPEEDUPS.items():
            if column in row:
                value = next(row[v] for v in values if v in row)
                out[column] = theory.predicted_speedup(value, cell["cost_ratio"], drafts)
        if "adaptive" in quantities:
            out = {k: v for k, v in out.items() if not k.startswith("adaptive_")}
            own = run_cell(cell, sweep_seed, ["adaptive"], base)
            out.update({k: v for k, v in own.items() if k.startswith("adaptive_")})
        rows.append(out)
    return rows


def _source_runs(cell: dict, sources, verifier, seeds, row: dict) -> dict:
    """The quantities of a cell on a pair of sources (see the module docstring)."""
    name, L, k, c, conf = cell["verifier"], cell["L"], cell["k"], cell["cost_ratio"], cell["confidence"]
    multi = name in MULTI_DRAFT_REGISTRY
    draft, target = sources
    p, q = draft.next_probs([[]])[0], target.next_probs([[]])[0]
    row.update(vocab=target.vocab_size, tv_first_token=float(total_variation(p, q)))

    iid = isinstance(draft, IIDSource) and isinstance(target, IIDSource)
    iid_values = {}

    def single(form: ClosedForm, attains=None):
        """(value, low, high) of a closed form: IID pairs by iid_block_values (certified bounds at any V), others
        exactly, by the verifier class that ``attains`` it (its own closed form) or, for the optimum, the theory."""
        if iid:
            if not iid_values:
                iid_values.update(vars(iid_block_values(draft.probs, target.probs, L)))
            v = iid_values[form.iid_field]
            return v.value, v.low, v.high
        e = (theory.expected_accepted_optimal(draft, target, L) if attains is None
             else attains().expected_accepted(draft, target, L))
        return e, e, e

    def exact():
        if multi:
            a = verifier.expected_acceptance(p, q, k)  # one step: one batched draft call
            return {"exact_acceptance": a, "exact_tokens_per_step": 1.0 + a,
                    "exact_speedup": theory.predicted_speedup(a, c, 1)}
        if name in REGISTRY:
            e, lo, hi = single(REGISTRY[name].closed_form, REGISTRY[name])
        else:  # the Gumbel coupling: its own value (IID pairs in O(V log V), other sources by enumeration)
            e = lo = hi = verifier.expected_accepted(draft, target, L)
        return {"exact_accepted": e, "exact_low": lo, "exact_high": hi, "exact_tokens_per_iteration": e + 1.0,
                "exact_speedup": theory.predicted_speedup(e, c, L)}

    def optimum():
        if multi:
            return {"optimum_acceptance": otm_value(p, q, k, verifier.replacement)}  # for the verifier's draw
        e, lo, hi = single(ClosedForm.OPTIMAL)
        return {"optimum_accepted": e, "optimum_low": lo, "optimum_high": hi, "optimum_speedup": theory.predicted_speedup(e, c, L)}

    def monte_carlo():
        if multi:  # one step of k candidates at the first position, as the exact column
            res = simulate_candidates(p, q, verifier, k, cell["blocks"], seed=np.random.default_rng(seeds[0]),
                                      progress=False, confidence=conf)
            return _mc_columns(res, cell["blocks"])
        res = simulate(draft, target, verifier, L, cell["blocks"], seed=np.random.default_rng(seeds[0]),
                       progress=False, confidence=conf, backend=Backend(device=cell.get("device")))
        return _mc_columns(res, cell["blocks"])

    def decode():
        if multi:
            raise NotImplementedError("decode cells are single-draft")
        res = generate(draft, target, verifier, L, cell["tokens"], n_sequences=cell["sequences"],
                       seed=np.random.default_rng(seeds[1]), progress=False)
        be = res.at_confidence(conf).block_efficiency
        return {"decode_block_efficiency": be.value, "decode_low": be.low, "decode_high": be.high}

    def adaptive():
        if name != "token" or not iid:
            raise NotImplementedError("adaptive cells: token verification of an IID pair (SpecDec++'s setting)")
        fixed = theory.fixed_length_latency(draft.probs, target.probs, L, c, 1.0)
        best = min(theory.fixed_length_latency(draft.probs, target.probs, j, c, 1.0) for j in range(1, L + 1))
        opt = theory.optimal_stopping(draft.probs, target.probs, L, c, 1.0)  # the bracket past toy sizes
        return {"adaptive_latency": opt.latency, "adaptive_latency_low": opt.latency_bounds[0],
                "adaptive_latency_high": opt.latency_bounds[1], "adaptive_fixed_latency": fixed,
                "adaptive_best_fixed_latency": best, "adaptive_speedup": 1.0 / opt.latency,
                "adaptive_expected_drafted": opt.expected_drafted}

    return {"exact": exact, "optimum": optimum, "monte_carlo": monte_carlo, "decode": decode, "adaptive": adaptive}
