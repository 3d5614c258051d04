"""Sweep specifications: a TOML or YAML file describing a grid, expanded into cells.

Schema (every key but ``pairs`` and ``verifiers`` optional; a list expands into one cell per value)::

    name = "distance"                 # a label, copied into every row
    seed = 0                          # the sweep seed: every cell's seed derives from it and the cell
    quantities = ["exact", "optimum", "monte_carlo"]   # among QUANTITIES (default: exact, optimum)
    L = [2, 4, 8]                     # draft lengths (single-draft verifiers)
    k = [2, 4]                        # drafts per step (multi-draft verifiers)
    temperature = [1.0]               # both rows raised to 1/T and renormalised
    cost_ratio = [0.1]                # c = t_draft / t_target, for the speedup columns
    blocks = 100000                   # Monte Carlo iterations per cell
    tokens = 128                      # decode: tokens per sequence
    sequences = 8                     # decode: sequences per cell
    confidence = 0.95

    [[pairs]]                         # a seeded random family with a distance knob
    kind = "random_iid"               # random_iid | random_markov | iid | json
    vocab = [1000, 32000]
    concentration = [0.0, 1.0, 10.0]  # the draft approaches the target as it grows
    pair_seed = 0                     # optional: random families default to the sweep seed

    [[pairs]]
    kind = "iid"                      # explicit rows (never expanded)
    draft = [0.3, 0.7]
    target = [0.6, 0.4]

    [[pairs]]
    kind = "json"                     # otspec JSON source files, relative to the spec's folder
    draft = "draft.json"
    target = "target.json"

    [[pairs]]
    kind = "logged"                   # logged rows (otspec.sources.logged), relative to the spec's folder
    file = "rows.npz"
    tail = "overlap"                  # overlap | renormalise (a list expands)
    span = 9                          # optional: blocks start where 9 steps are left (the same starts for L <= 8)

    [[verifiers]]
    name = "token"                    # a name of CHAIN_VERIFIERS, MULTI_DRAFT_REGISTRY or WHOLE_TREE_REGISTRY
    [[verifiers]]
    name = "kseq"
    rho = [1.5, 2.0]                  # constructor parameters, lists expand

    trees = ["2x1", "2x2"]            # draft trees (otspec.drafts.parse_tree) for tree verifiers

Single-draft verifiers take every ``L`` (``k`` is empty for them); multi-draft verifiers are one
step of k candidates from the first-position rows (``L`` is empty for them) and, when the spec has
``trees``, also one iteration on every tree; whole-tree verifiers (traversal) take every tree. A
tree's siblings are drawn as its verifier is lossless for (with or without replacement; the naive
verifier: with). Tree cells have a ``tree`` key (cells without one keep their ids). On logged rows a
single-draft cell averages over every window of L+1 steps of the log, a multi-draft cell over every
step; logged rows keep the temperature they were recorded at (only ``temperature = 1`` is accepted).
``device = "auto"`` (optional) runs row-free Monte Carlo on torch, on CUDA when available.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..checks import (
    MAX_CANDIDATES,
    MAX_DRAFT_LENGTH,
    MissingFile,
    check_data_file,
    check_real,
    check_size,
    file_problem,
    unique_keys,
)
from ..distributions import resolve_device
from ..drafts import parse_tree
from ..sources import MAX_RANDOM_ENTRIES, TAIL_MODES, IIDSource
from ..verifiers import MULTI_DRAFT_REGISTRY, WHOLE_TREE_REGISTRY, VerifierView

__all__ = ["PAIR_KEYS", "PAIR_KINDS", "QUANTITIES", "SWEEP_VERIFIERS", "SweepSpec", "cell_id", "cell_seed", "load_spec", "shared_key",
           "tree_of"]

PAIR_KINDS = ("random_iid", "random_markov", "iid", "json", "logged")
#: What a cell can compute; see :mod:`otspec.sweep.cells`.
QUANTITIES = ("exact", "optimum", "monte_carlo", "decode", "adaptive")
#: The keys a pair entry of each kind may hold besides its kind (load_spec refuses others; so do the cells).
PAIR_KEYS = {"random_iid": {"vocab", "concentration", "sparsity", "pair_seed"},
              "random_markov": {"vocab", "concentration", "sparsity", "pair_seed", "horizon"},
              "iid": {"draft", "target", "label"}, "json": {"draft", "target", "label"},
              "logged": {"file", "tail", "span", "label"}}
_TOP_KEYS = {"name", "seed", "quantities", "L", "k", "trees", "temperature", "cost_ratio", "blocks", "tokens", "sequences",
             "confidence", "device", "pairs", "verifiers"}
MAX_CELLS = 100_000
#: Most YAML nodes a spec may hold once its aliases are expanded (counted on the composed graph, never expanded).
MAX_YAML_NODES = 200_000
#: Largest sweep spec read (a spec is a few kB; a sparse or runaway file is refused unread).
MAX_SPEC_BYTES = 1 << 24
#: Every verifier a sweep can name: the lossless chain verifiers and every verifier of a tree (read when used).
SWEEP_VERIFIERS = VerifierView("sweep verifiers", lossless=True, fixed_tree=False)
#: The files a pair kind names (key, what it is), refused at load time when missing.
_FILES = {"json": (("draft", "draft source"), ("target", "target source")), "logged": (("file", "logged-rows"),)}


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: its settings and the expanded cells (one dict of parameters each)."""

    name: str
    seed: int
    quantities: tuple[str, ...]
    settings: dict
    cells: list = field(repr=False)
    base: Path = Path(".")

    def __post_init__(self):
        object.__setattr__(self, "seed", check_sweep_seed(self.seed))


def check_sweep_seed(seed) -> int:
    """A sweep's seed: an integer in [0, 2^63 - 1] (not a bool, a float or text)."""
    return check_size(seed, "seed", minimum=0, limit=2**63 - 1, limit_name="the largest seed")


def _as_list(value) -> list:
    return list(value) if isinstance(value, list | tuple) else [value]


def _grid(entry: dict, where: str = "spec") -> list[dict]:
    """Every combination of the list-valued keys of ``entry`` (an empty list would silently remove the entry)."""
    empty = sorted(key for key, value in entry.items() if isinstance(value, list | tuple) and not value)
    if empty:
        raise _error(where, f"{empty[0]}: an empty list expands to no cells; give at least one value")
    keys = sorted(entry)
    values = [_as_list(entry[key]) for key in keys]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]


def _error(where: str, message: str) -> ValueError:
    return ValueError(f"sweep spec {where}: {message}")


def _read(path: Path) -> dict:
    check_data_file(path, "sweep spec")  # missing: MissingFile; a folder, a pipe or a device: refused by name
    if path.stat().st_size > MAX_SPEC_BYTES:
        raise ValueError(f"sweep spec {path}: {path.stat().st_size:,} bytes, above MAX_SPEC_BYTES = {MAX_SPEC_BYTES:,}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"sweep spec {path}: not UTF-8 text (a binary file?); expected TOML or YAML") from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            _check_yaml_size(yaml, text, path)
            data = yaml.load(text, Loader=_strict_loader(yaml))
        elif path.suffix.lower() == ".json":
            data = json.loads(text, object_pairs_hook=unique_keys, parse_constant=_no_constant)
        else:
            data = tomllib.loads(text)
    except Exception as err:  # the parsers' own messages name the line; their first line is the message
        first = " ".join(str(err).split("\n")[0].split())
        mark = getattr(err, "problem_mark", None)  # YAML says where on a later line
        if mark is not None:
            first += f" (line {mark.line + 1}, column {mark.column + 1})"
        kind = {".yaml": "YAML", ".yml": "YAML", ".json": "JSON"}.get(path.suffix.lower(), "TOML")
        raise ValueError(f"sweep spec {path}: cannot parse it as {kind} (read by its suffix: .yaml/.yml as YAML, .json "
                         f"as JSON, any other as TOML): {first}") from None
    if not isinstance(data, dict):
        raise ValueError(f"sweep spec {path}: expected a table of keys at the top level")
    return data


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number a spec may hold")


def _strict_loader(yaml):
    """PyYAML's safe loader with YAML 1.2's plain numbers and unique keys: YAML 1.1 reads ``010`` as 8 (octal) and
    ``1:30`` as 90 (base 60), and keeps the last of two equal keys; here the first two are text (then refused where
    a number goes) and the third an error."""
    import re

    class Strict(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # '<<: *anchor' (its keys may be overridden)
                    continue
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} appears twice",
                                                            key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep)

    number_tags = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
    Strict.yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in resolvers if tag not in number_tags]
                                      for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    Strict.add_implicit_resolver(number_tags[0], re.compile(r"^[-+]?(0|[1-9][0-9]*)$"), list("-+0123456789"))
    Strict.add_implicit_resolver(number_tags[1], re.compile(
        r"^[-+]?(\.[0-9]+|[0-9]+\.[0-9]*)([eE][-+]?[0-9]+)?$|^[-+]?[0-9]+[eE][-+]?[0-9]+$"
        r"|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$"),
        list("-+0123456789."))
    return Strict


def _check_yaml_size(yaml, text: str, path: Path) -> None:
    """Refuse a YAML spec whose aliases expand beyond :data:`MAX_YAML_NODES` nodes (a "billion laughs" file of a
    kilobyte): the expanded size is counted on the composed node graph, each shared node once per reference."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    sizes: dict = {}

    def size(node) -> int:
        key = id(node)
        if key not in sizes:
            sizes[key] = 0  # a cycle (a self-referencing alias) counts as big
            if isinstance(node, yaml.SequenceNode):
                total = 1 + sum(size(child) for child in node.value)
            elif isinstance(node, yaml.MappingNode):
                total = 1 + sum(size(k) + size(v) for k, v in node.value)
            else:
                total = 1
            sizes[key] = total if total <= MAX_YAML_NODES else MAX_YAML_NODES + 1
        elif sizes[key] == 0:
            return MAX_YAML_NODES + 1
        return sizes[key]

    n = 0 if root is None else size(root)
    if n > MAX_YAML_NODES:
        raise ValueError(f"sweep spec {path}: its aliases expand to more than MAX_YAML_NODES = {MAX_YAML_NODES:,} nodes")


def _count(entry: dict) -> int:
    """How many combinations :func:`_grid` would make of ``entry``, without making them."""
    n = 1
    for value in entry.values():
        n *= max(len(value), 1) if isinstance(value, list | tuple) else 1
    return n


def _check_grid_size(data: dict) -> None:
    """Refuse a grid over :data:`MAX_CELLS` from the list lengths alone, before any entry is expanded."""
    def length(key, default=1):
        value = data.get(key)
        return default if value is None else (len(value) if isinstance(value, list | tuple) else 1)

    pairs = data.get("pairs") if isinstance(data.get("pairs"), list) else []
    verifiers = data.get("verifiers") if isinstance(data.get("verifiers"), list) else []
    n_pairs = sum(_count({k: v for k, v in p.items() if k not in ("draft", "target")}) for p in pairs
                  if isinstance(p, dict))
    per_verifier = max(length("L"), length("k") + length("trees", 0), length("trees", 0), 1)
    n_verifiers = sum(_count({k: v for k, v in e.items() if k != "name"}) for e in verifiers if isinstance(e, dict))
    n = n_pairs * n_verifiers * per_verifier * length("temperature") * length("cost_ratio")
    if n > MAX_CELLS:
        raise _error("grid", f"up to {n:,} cells (pairs {n_pairs:,} x verifier entries {n_verifiers:,} x {per_verifier} "
                             f"lengths/trees x temperatures x cost ratios) exceed MAX_CELLS = {MAX_CELLS:,}; refused "
                             "before expanding it")


def _pairs(raw, seed: int) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        raise _error("pairs", "expected a non-empty list of [[pairs]] tables")
    out = []
    for i, entry in enumerate(raw):
        where = f"pairs[{i}]"
        if not isinstance(entry, dict) or entry.get("kind") not in PAIR_KINDS:
            raise _error(where, f"kind: expected one of {PAIR_KINDS}")
        kind = entry["kind"]
        rest = {k: v for k, v in entry.items() if k != "kind"}
        unknown = set(rest) - PAIR_KEYS[kind]
        if unknown:
            raise _error(where, f"unknown keys {sorted(unknown)} for kind {kind!r}; expected among "
                                f"{sorted(PAIR_KEYS[kind])}")
        if kind == "logged":
            if "file" not in rest:
                raise _error(where, "kind 'logged' needs file (a logged-rows .npz)")
            for tail in _as_list(rest.setdefault("tail", "overlap")):
                if tail not in TAIL_MODES:
                    raise _error(where, f"tail: expected one of {TAIL_MODES}, got {tail!r}")
            for span in _as_list(rest.get("span", [])):
                check_size(span, f"{where}.span")
            out.extend({"kind": kind, **combo} for combo in _grid(rest, where))
            continue
        if kind in ("iid", "json"):
            if "draft" not in rest or "target" not in rest:
                raise _error(where, f"kind {kind!r} needs draft and target")
            sizes = {}
            for role in ("draft", "target") if kind == "iid" else ():  # refused here, not in a cell's note
                try:
                    sizes[role] = IIDSource(rest[role]).vocab_size  # [true, false] is no row; p is Bernoulli(p)
                except ValueError as err:
                    raise _error(f"{where}.{role}", str(err).removeprefix("probs: ")) from None
            if len(set(sizes.values())) > 1:
                raise _error(where, f"draft and target rows of different vocabularies ({sizes['draft']} and "
                                    f"{sizes['target']} tokens)")
            out.append({"kind": kind, **rest})
            continue
        if "vocab" not in rest:
            raise _error(where, f"kind {kind!r} needs vocab")
        rest.setdefault("concentration", 1.0)
        rest.setdefault("sparsity", 0.0)
        rest.setdefault("pair_seed", seed)
        for combo in _grid(rest, where):
            check_size(combo["pair_seed"], f"{where}.pair_seed", minimum=0)
            V = check_size(combo["vocab"], f"{where}.vocab", limit=MAX_RANDOM_ENTRIES, limit_name="MAX_RANDOM_ENTRIES")
            horizon = combo.get("horizon")  # None: a stationary chain (one matrix); 0 is refused, not read as None
            matrices = max(check_size(horizon, f"{where}.horizon") - 1, 1) if horizon is not None else 1
            if kind == "random_markov" and matrices * V * V > MAX_RANDOM_ENTRIES:  # refused here, not in a worker
                raise _error(where, f"{matrices:,} transition matrices of {V:,} x {V:,} entries exceed "
                                    f"MAX_RANDOM_ENTRIES = {MAX_RANDOM_ENTRIES:,}")
            check_real(combo["concentration"], f"{where}.concentration", low=0.0)
            # sparsity lies in [0, 1): 1.0 (every entry zero) is refused here, not in its cell after progress bars
            if check_real(combo["sparsity"], f"{where}.sparsity", low=0.0, high=1.0) == 1.0:
                raise _error(f"{where}.sparsity", "expected a number in [0, 1), got 1.0 (every entry zero)")
            out.append({"kind": kind, **combo})
    return out


def _verifiers(raw) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        raise _error("verifiers", "expected a non-empty list of [[verifiers]] tables")
    out = []
    for i, entry in enumerate(raw):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or name not in SWEEP_VERIFIERS:
            raise _error(f"verifiers[{i}]", f"name: expected one of {sorted(SWEEP_VERIFIERS)}, got {name!r}")
        params = {k: v for k, v in entry.items() if k != "name"}
        for combo in _grid(params, f"verifiers[{i}]"):
            try:
                SWEEP_VERIFIERS[name](**combo)  # the constructor checks its parameters now, not in a worker later
            except TypeError as err:
                raise _error(f"verifiers[{i}]", f"parameters {combo} for {name!r}: {err}") from None
            out.append({"name": name, "multi": name in MULTI_DRAFT_REGISTRY, "whole_tree": name in WHOLE_TREE_REGISTRY,
                        "params": combo})
    return out


def _trees(data: dict) -> list[str]:
    """The spec's tree strings, each parsed now (a bad one is refused here, not in a worker later)."""
    raw = _as_list(data.get("trees", []))
    if "trees" in data and not raw:  # as L = [] is: an empty list given is a mistake, not "no trees"
        raise _error("trees", "expected at least one tree (leave the key out for chain cells only)")
    for i, text in enumerate(raw):
        if not isinstance(text, str):
            raise _error(f"trees[{i}]", f"expected a tree spec string (2x1, iid:2:3, eagle2:2:2:3), got {text!r}")
        try:
            parse_tree(text)
        except ValueError as err:
            raise _error(f"trees[{i}]", str(err)) from None
    canonical = [str(parse_tree(text)) for text in raw]  # '2X1', ' 2x1' and 'iid:2:2' are all the tree 2x1
    if len(set(canonical)) != len(canonical):
        raise _error("trees", f"a tree is listed twice ({raw} are the trees {canonical}: tree specs are read without "
                              "case or spaces, and iid:K:L is the k-config Kx1x...x1)")
    return raw


def tree_of(cell: dict, verifier):
    """The draft tree of a tree cell, its siblings drawn as ``verifier`` is lossless for."""
    return parse_tree(cell["tree"], replacement=getattr(verifier, "replacement", True))


def _numbers(data: dict, key: str, default, check) -> list:
    values = _as_list(data.get(key, default))
    if not values:
        raise _error(key, "expected at least one value")
    return [check(v, key) for v in values]


def canonical(obj) -> str:
    """Canonical JSON of a cell's parameters (sorted keys): equal cells, equal text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def cell_id(params: dict) -> str:
    """A short stable name of a cell: the first 16 hex digits of the SHA-256 of its canonical parameters."""
    return hashlib.sha256(canonical(params).encode()).hexdigest()[:16]


def shared_key(params: dict) -> str:
    """What cells that differ only in their cost ratio share: the canonical parameters without ``cost_ratio``."""
    return canonical({k: v for k, v in params.items() if k != "cost_ratio"})


def cell_seed(sweep_seed: int, params: dict) -> np.random.SeedSequence:
    """The cell's seed sequence: the sweep seed and the cell's own parameters but the cost ratio (which only rescales
    the speedup columns, so cells that differ in it share their draws), nothing about workers or order."""
    sweep_seed = check_sweep_seed(sweep_seed)  # int() read '3', True and 2.7
    digest = hashlib.sha256(shared_key(params).encode()).digest()
    return np.random.SeedSequence([sweep_seed, *np.frombuffer(digest[:16], dtype=np.uint32).tolist()])


def load_spec(path) -> SweepSpec:
    """Read, validate and expand a sweep spec (TOML, or YAML for ``.yaml``/``.yml``)."""
    problem = file_problem(path)
    if problem is not None and problem.startswith("is not a path"):  # Path(3) or a bytes __fspath__: a TypeError
        raise ValueError(f"sweep spec: {problem}")
    path = Path(path)
    data = _read(path)
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise _error("keys", f"unknown {sorted(unknown)}; expected among {sorted(_TOP_KEYS)}")
    seed = check_sweep_seed(data.get("seed", 0))
    _check_grid_size(data)
    quantities = tuple(_as_list(data.get("quantities", ["exact", "optimum"])))
    bad = [q for q in quantities if q not in QUANTITIES]
    if bad or not quantities:
        raise _error("quantities", f"{bad or 'none'}: expected names among {QUANTITIES}")
    Ls = _numbers(data, "L", [4], lambda v, k: check_size(v, k, limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH"))
    ks = _numbers(data, "k", [2], lambda v, k: check_size(v, k, limit=MAX_CANDIDATES, limit_name="MAX_CANDIDATES"))
    temps = _numbers(data, "temperature", [1.0], lambda v, k: check_real(v, k, low=0.0))  # 0: the arg-max rows
    costs = _numbers(data, "cost_ratio", [0.0], lambda v, k: check_real(v, k, low=0.0))
    settings = {"blocks": check_size(data.get("blocks", 100_000), "blocks"),
                "tokens": check_size(data.get("tokens", 128), "tokens"),
                "sequences": check_size(data.get("sequences", 8), "sequences"),
                "confidence": check_real(data.get("confidence", 0.95), "confidence", low=0.0, high=1.0,
                                         low_open=True)}
    if "device" in data:  # only when given, so cells of specs without it keep their ids
        settings["device"] = None if data["device"] in (None, "numpy") else str(data["device"])
        resolve_device(settings["device"])
    if settings["confidence"] >= 1:
        raise _error("confidence", f"expected a level in (0, 1), got {settings['confidence']!r}")
    pairs, verifiers = _pairs(data.get("pairs"), seed), _verifiers(data.get("verifiers"))
    for pair in pairs:  # missing files are refused now, not in a worker later
        for key, role in _FILES.get(pair["kind"], ()):
            name = pair[key]
            if not isinstance(name, str) or not name.strip():
                raise _error(f"pairs ({pair['kind']}) {key}", f"expected the {role} file's name (a path relative to "
                                                             f"the spec's folder), got {name!r}")
            problem = file_problem(path.parent / name)
            if problem == "does not exist":
                shown = str(path.parent / name)  # a NUL or a newline in the name is shown escaped, not written out
                raise MissingFile(f"sweep spec pairs: no {role} file {shown if shown.isprintable() else repr(shown)}")
            if problem:  # a folder, a pipe or a device: named as what it is, not as missing
                raise _error(f"pairs ({pair['kind']}) {key}", f"the {role} file {path.parent / name} {problem}")
        if pair["kind"] == "logged" and any(T != 1.0 for T in temps):
            raise _error("temperature", f"logged rows keep the temperature they were recorded at; sweep "
                                        f"{describe_pair(pair)} at temperature 1 (got {temps})")
    trees = _trees(data)
    lonely = sorted({v["name"] for v in verifiers if v["whole_tree"]}) if not trees else []
    if lonely:
        raise _error("trees", f"{lonely} verify whole draft trees: give trees = [\"2x1\", ...]")

    def shapes(ver) -> list[dict]:
        """(L, k, tree) of each cell of one verifier entry."""
        if ver["whole_tree"]:
            return [{"L": None, "k": None, "tree": t} for t in trees]
        if ver["multi"]:
            return [{"L": None, "k": k} for k in ks] + [{"L": None, "k": None, "tree": t} for t in trees]
        return [{"L": length, "k": None} for length in Ls]

    n = len(pairs) * sum(len(shapes(v)) for v in verifiers) * len(temps) * len(costs)
    if n > MAX_CELLS:
        raise _error("grid", f"{n:,} cells exceed MAX_CELLS = {MAX_CELLS:,}")
    cells = []
    for pair, ver, T, c in itertools.product(pairs, verifiers, temps, costs):
        for shape in shapes(ver):
            cells.append({"pair": pair, "verifier": ver["name"], "params": ver["params"], **shape,
                          "temperature": T, "cost_ratio": c, **settings})
    if len({cell_id(c) for c in cells}) != len(cells):
        raise _error("grid", "two cells have the same parameters (a value listed twice?)")
    return SweepSpec(str(data.get("name", path.stem)), seed, quantities, settings, cells, path.parent.resolve())


def describe_pair(pair: dict) -> str:
    """A short label of a pair entry for tables and plots."""
    if pair["kind"] == "logged":
        return str(pair.get("label") or f"logged:{Path(pair['file']).name}({pair['tail']})")
    if pair["kind"] in ("iid", "json"):
        return str(pair.get("label") or (f"{pair['kind']}:{Path(pair['draft']).name}/{Path(pair['target']).name}"
                                         if pair["kind"] == "json" else "iid"))
    return f"{pair['kind']}(V={pair['vocab']}, c={pair['concentration']:g})"
