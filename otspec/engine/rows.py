"""Typed rows of real-pair runs: one chain run, one tree run, one draft-length policy, and their parts.

A record (:mod:`otspec.engine.record`) holds lists of these rows. ``llm_bridge`` builds them (``runs.run_record``,
``runs.tree_record``, ``adaptive``'s policies) and the renderers of :mod:`otspec.figures.llm` read their attributes,
so a field renamed or retyped fails in one place: here. Every class is a :class:`JsonObject`: its fields and their
types are its annotations; ``from_json`` checks each field it knows and names the one that is missing or of the
wrong kind (``runs[1]: field 'L' should be int, got float``); keys it does not know stay in ``extra`` and are written
back, and a field left out of the JSON stays left out, so every committed file round-trips unchanged.

================  ===================================================================================
class             what it is
================  ===================================================================================
Estimate          a measured value with its 95 % interval (``mean``, ``low``, ``high``)
Interval          an interval (``low``, ``high``), with the rounds and method where it was measured
Comparison        a measurement beside its prediction (``otspec.engine.forecast.compare_prediction``)
PredictionCheck   the row's two comparisons: block efficiency and speedup
SpeedupPrediction the wall-clock prediction: from a cost profile measured apart, or why there is none
Straggling        calls per batch over iterations per sequence, measured and predicted
ChainRun          one (verifier, L) chain run of ``llm_bridge.validate``
TreeRun           one (multi-draft verifier, tree) run of ``llm_bridge.validate``
PolicyRun         one draft-length policy of ``llm_bridge.adaptive`` (fixed K, a threshold h)
================  ===================================================================================
"""

from __future__ import annotations

import json
import math
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from functools import cache

from ..checks import MAX_DRAFT_LENGTH, finite_real

__all__ = ["ChainRun", "Comparison", "Estimate", "Interval", "JsonObject", "LOCAL", "PolicyRun", "PredictionCheck",
           "RecordError", "SpeedupPrediction", "Straggling", "TreeRun", "run_row"]


class RecordError(ValueError):
    """A record file or object is not what its kind promises; the message names the field."""


#: The ``metadata`` of a field that is not part of the JSON (where a record was read from, ``extra``, ``absent``).
LOCAL = {"json": False}

_NAMES = {dict: "dict", list: "list", str: "str", int: "int", float: "float", bool: "bool"}


@cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


@cache
def _json_fields(cls) -> tuple:
    """A class's fields that are part of its JSON (computed once per class)."""
    return tuple(f for f in fields(cls) if f.metadata.get("json", True))


def _options(hint) -> tuple:
    """The types a field's annotation allows, ``None`` apart (``float | None`` → ``(float,)``)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return tuple(h for h in typing.get_args(hint) if h is not type(None))
    return (hint,)


def _kind(hint) -> type:
    return typing.get_origin(hint) or hint


def _matches(value, hint) -> bool:
    kind = _kind(hint)
    if kind is typing.Any:
        return True
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    if isinstance(kind, type) and issubclass(kind, JsonObject):
        return isinstance(value, (dict, kind))
    return isinstance(value, kind)


def _name(hint) -> str:
    kind = _kind(hint)
    return _NAMES.get(kind, "dict" if isinstance(kind, type) and issubclass(kind, JsonObject) else str(kind))


def _load(value, hint, where: str):
    """``value`` checked against ``hint`` and built into it (nested objects, lists and dicts of them)."""
    if value is None:
        if type(None) in typing.get_args(hint) or hint is typing.Any:
            return None
        raise RecordError(f"{where}: should be {_name(hint)}, got null")
    for option in _options(hint):
        if not _matches(value, option):
            continue
        kind, args = _kind(option), typing.get_args(option)
        if isinstance(kind, type) and issubclass(kind, JsonObject):
            return value if isinstance(value, kind) else kind.from_json(value, where)
        if kind is list and args:
            return [_item(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
        if kind is dict and len(args) == 2:
            return {k: _item(v, args[1], f"{where}[{k!r}]") for k, v in value.items()}
        return value
    raise RecordError(f"{where}: should be {' or '.join(map(_name, _options(hint)))}, got {type(value).__name__}")


def _item(value, hint, where: str):
    """One element of a typed list or dict: an object where the element is a :class:`JsonObject`."""
    kind = _kind(hint)
    if isinstance(kind, type) and issubclass(kind, JsonObject) and not isinstance(value, (dict, kind)):
        raise RecordError(f"{where}: expected an object, got {type(value).__name__}")
    return _load(value, hint, where)


def _dump(value):
    if isinstance(value, JsonObject):
        return value.to_json()
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


@dataclass(kw_only=True)
class JsonObject:
    """A JSON object with typed fields (its annotations); ``extra`` holds the keys this version does not know and
    ``absent`` the optional fields the JSON left out (written back as left out), ``order`` its keys' order (kept)."""

    extra: dict = field(default_factory=dict, repr=False, metadata=LOCAL)
    absent: frozenset = field(default=frozenset(), repr=False, compare=False, metadata=LOCAL)
    order: tuple = field(default=(), repr=False, compare=False, metadata=LOCAL)

    @classmethod
    def _fields(cls) -> tuple:
        return _json_fields(cls)

    @classmethod
    def from_json(cls, obj, where: str = "record"):
        """An instance from its JSON object (or text): every known field checked; ``where`` starts each message."""
        obj = json.loads(obj) if isinstance(obj, str) else obj
        if not isinstance(obj, dict):
            raise RecordError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        hints, known, absent = _hints(cls), {}, set()
        for f in cls._fields():
            if f.name not in obj:
                if f.default is MISSING and f.default_factory is MISSING:
                    raise RecordError(f"{where}: missing field {f.name!r}")
                absent.add(f.name)
                continue
            value = obj[f.name]
            if value is None and type(None) not in typing.get_args(hints[f.name]) and hints[f.name] is not typing.Any:
                raise RecordError(f"{where}: missing field {f.name!r}")
            if value is not None and not any(_matches(value, h) for h in _options(hints[f.name])):
                names = " or ".join(map(_name, _options(hints[f.name])))
                raise RecordError(f"{where}: field {f.name!r} should be {names}, got {type(value).__name__}")
            known[f.name] = _load(value, hints[f.name], f"{where}: {f.name}")
        names = {f.name for f in cls._fields()}
        extra = {k: v for k, v in obj.items() if k not in names}
        out = cls(**known, extra=extra, absent=frozenset(absent), order=tuple(obj))
        out.check(where)
        return out

    def check(self, where: str) -> None:
        """Range checks beyond the types (a ``RecordError`` naming the field); none by default."""

    def to_json(self) -> dict:
        """The JSON object: every field but those the source left out, and ``extra``; in the source's key order (an
        object built in code: its fields', then ``extra``)."""
        out = {f.name: _dump(getattr(self, f.name)) for f in self._fields() if f.name not in self.absent}
        out.update(self.extra)
        if not self.order:
            return out
        ordered = {k: out[k] for k in self.order if k in out}
        return {**ordered, **{k: v for k, v in out.items() if k not in ordered}}

    def to_data(self) -> dict:
        """The object as a figure's data file holds it (its JSON; a record adds where it was read from)."""
        return self.to_json()


@dataclass(kw_only=True)
class Estimate(JsonObject):
    """A measured value and its 95 % interval; ``unit`` (``"prompt"``) and ``prompts`` where resampled by prompt."""

    mean: float
    low: float
    high: float
    unit: str | None = None
    prompts: int | None = None

    def check(self, where: str) -> None:
        if not all(finite_real(v) for v in (self.mean, self.low, self.high)):
            raise RecordError(f"{where}: mean, low and high should be finite numbers, got {self.mean}, {self.low}, "
                              f"{self.high}")
        if self.low > self.high:
            raise RecordError(f"{where}: low {self.low} is above high {self.high}")
        slack = 1e-9 * max(1.0, abs(self.mean))
        if not self.low - slack <= self.mean <= self.high + slack:
            raise RecordError(f"{where}: mean {self.mean} lies outside its interval [{self.low}, {self.high}]")


@dataclass(kw_only=True)
class Interval(JsonObject):
    """An interval; a measured one also carries its ``median``, its ``rounds`` (the per-round values of a range, the
    count of a bootstrap interval) and the ``method`` that made it."""

    low: float | None
    high: float | None
    median: float | None = None
    rounds: list[float] | int | None = None
    method: str | None = None

    def check(self, where: str) -> None:
        for name in ("low", "high", "median"):
            x = getattr(self, name)
            if isinstance(x, float) and not math.isfinite(x):
                raise RecordError(f"{where}: {name} should be a finite number or null, got {x}")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise RecordError(f"{where}: low {self.low} is above high {self.high}")


@dataclass(kw_only=True)
class Comparison(JsonObject):
    """A measurement beside its prediction: relative error, within the tolerance, inside the interval, holds."""

    relative_error: float
    holds: bool
    within_tolerance: bool | None = None
    inside_interval: bool | None = None


@dataclass(kw_only=True)
class PredictionCheck(JsonObject):
    """A row's predictions against its measurements (``None``: nothing predicted)."""

    block_efficiency: Comparison | None = None
    speedup: Comparison | None = None


@dataclass(kw_only=True)
class SpeedupPrediction(JsonObject):
    """The wall-clock prediction of a row: ``source`` ``"cost_profile"`` (a profile measured apart from the run), or
    ``None`` with the ``note`` saying why there is none; the profile's costs and the replays' batch iterations."""

    source: str | None = None
    note: str | None = None
    costs_ms: dict | None = None
    batches: int | None = None
    batch: int | None = None
    batch_iterations: float | None = None
    mean_iterations: float | None = None
    ms_per_batch: float | None = None
    plain_ms_per_step: float | None = None
    after_whole_ms_per_iteration: float | None = None


@dataclass(kw_only=True)
class Straggling(JsonObject):
    """Target calls per batch over a sequence's mean iterations: measured, and predicted from the replays."""

    measured: float | None = None
    predicted: float | None = None
    batch_size: int | None = None


def _in_range(value, name: str, where: str, low: float, high: float) -> None:
    """Refuse a number (or an entry of a list of numbers) outside [low, high], naming the field."""
    for i, x in enumerate(value if isinstance(value, list) else [value]):
        if isinstance(x, int | float) and not isinstance(x, bool) and not low <= x <= high:
            at = f"[{i}]" if isinstance(value, list) else ""
            span = f">= {low:g}" if high == math.inf else f"in [{low:g}, {high:g}]"
            raise RecordError(f"{where}: field {name!r}{at} should be {span}, got {x}")


@dataclass(kw_only=True)
class _Run(JsonObject):
    """What every measured row has: block efficiency over prompts, its prediction, the speedup and its prediction."""

    block_efficiency: Estimate
    block_efficiency_batch_means: Estimate | None = None
    predicted_block_efficiency: float | None = None
    predicted_block_efficiency_interval: Interval | None = None
    prediction_method: str | None = None
    prediction: dict | None = None
    mean_acceptance_length: float | None = None
    acceptance_per_position_unconditional: list[float | None] | None = None
    draft_acceptance_rate: float | None = None
    engine_metrics: dict | None = None
    t_draft_ms: float | None = None
    tokens_per_s: float | None = None
    speedup: float | None = None
    speedup_ci: Interval | None = None
    speedup_range: Interval | None = None
    speedup_interval: Interval | None = None
    predicted_speedup: float | None = None
    predicted_speedup_interval: Interval | None = None
    predicted_speedup_ignoring_straggling: float | None = None
    speedup_prediction: SpeedupPrediction | None = None
    prediction_check: PredictionCheck | None = None

    #: Fields that are probabilities (each entry of a list one): in [0, 1] where given. Subclasses extend both lists.
    PROBABILITIES = ("acceptance_per_position_unconditional", "draft_acceptance_rate")
    #: Fields that are costs, rates, ratios or counts: >= 0 where given.
    NONNEGATIVE = ("predicted_block_efficiency", "mean_acceptance_length", "t_draft_ms", "tokens_per_s", "speedup",
                   "predicted_speedup", "predicted_speedup_ignoring_straggling")

    def check(self, where: str) -> None:
        """Every float a run holds is finite (``null`` says "not measured"), probabilities lie in [0, 1], costs and
        speedups are >= 0, counts are >= 0: a damaged record is refused naming the field, never drawn."""
        for f in self._fields():
            value = getattr(self, f.name)
            for i, x in enumerate(value if isinstance(value, list) else [value]):
                if isinstance(x, float) and not math.isfinite(x):
                    at = f"[{i}]" if isinstance(value, list) else ""
                    raise RecordError(f"{where}: field {f.name!r}{at} should be a finite number or null, got {x}")
        for name in self.PROBABILITIES:
            _in_range(getattr(self, name), name, where, 0.0, 1.0)
        for name in self.NONNEGATIVE:
            _in_range(getattr(self, name), name, where, 0.0, math.inf)

    @property
    def speedup_spread(self) -> Interval | None:
        """The speedup's confidence interval where the row has one, else its range over the timing rounds."""
        return self.speedup_ci or self.speedup_interval


@dataclass(kw_only=True)
class _ModelRun(_Run):
    """A run of ``llm_bridge.validate`` (a chain or a tree): counts, call times, timing rounds."""

    verifier: str
    accepted_length_histogram: list[int] | None = None
    iterations: int | None = None
    generated: int | None = None
    draft_calls: int | None = None
    target_calls: int | None = None
    t_target_ms: dict[str, float] | None = None
    t_verify_ms: float | None = None
    overhead_ms_per_iteration: float | None = None
    verify_fraction_of_target_call: float | None = None
    draft_seconds: float | None = None
    target_seconds: float | None = None
    seconds: float | None = None
    baseline_tokens_per_s: float | None = None
    timing_rounds: list | None = None
    batch_straggling: Straggling | None = None

    NONNEGATIVE = _Run.NONNEGATIVE + (
        "accepted_length_histogram", "iterations", "generated", "draft_calls", "target_calls", "t_verify_ms",
        "overhead_ms_per_iteration", "verify_fraction_of_target_call", "draft_seconds", "target_seconds", "seconds",
        "baseline_tokens_per_s")

    def check(self, where: str) -> None:
        super().check(where)
        for key, ms in (self.t_target_ms or {}).items():
            if not (key.isascii() and key.isdigit() and len(key) <= 9 and int(key) >= 1):
                raise RecordError(f"{where}: field 't_target_ms' should be keyed by tokens scored per call (1, 2, ...), "
                                  f"got the key {key!r}")
            if not (finite_real(ms) and ms > 0):
                raise RecordError(f"{where}: field 't_target_ms'[{key!r}] should be a time > 0 ms, got {ms}")


@dataclass(kw_only=True)
class ChainRun(_ModelRun):
    """One chain run: a verifier at draft length ``L``, with the two-point bound and per-position statistics."""

    L: int
    predicted_acceptance_per_position_unconditional: list[float | None] | None = None
    two_point_upper_bound: float | None = None
    two_point_upper_bound_interval: Interval | None = None
    two_point_upper_bound_by_formula: dict[str, float] | None = None
    expected_block_efficiency_given_drafts: float | None = None
    acceptance_rate: float | None = None
    acceptance_per_position: list[float | None] | None = None
    tv_per_position: list[float | None] | None = None
    two_point_per_position: dict[str, list[float]] | None = None
    drafted_length_histogram: list[int] | None = None
    time_decomposition_ms: dict | None = None

    PROBABILITIES = _ModelRun.PROBABILITIES + ("acceptance_rate", "acceptance_per_position", "tv_per_position",
                                               "predicted_acceptance_per_position_unconditional")
    NONNEGATIVE = _ModelRun.NONNEGATIVE + ("drafted_length_histogram",)

    def check(self, where: str) -> None:
        from ..verifiers import REGISTRY

        if self.verifier not in REGISTRY:
            raise RecordError(f"{where}: field 'verifier' should name a chain verifier ({', '.join(sorted(REGISTRY))}), "
                              f"got {self.verifier!r}")
        if not 1 <= self.L <= MAX_DRAFT_LENGTH:  # first: the per-position checks below read L
            raise RecordError(f"{where}: field 'L' should be a draft length in [1, {MAX_DRAFT_LENGTH}], got {self.L}")
        super().check(where)
        for name in ("acceptance_per_position", "tv_per_position"):  # one entry per drafted position
            values = getattr(self, name)
            if values is not None and len(values) != self.L:
                raise RecordError(f"{where}: field {name!r} should hold one entry per drafted position (L = {self.L}), "
                                  f"got {len(values)}")


    @property
    def config(self) -> str:
        """The draft as a row names it: ``L = 3``."""
        return f"L = {self.L}"

    @property
    def key(self) -> tuple:
        """(verifier, L, tree): the configuration a forecast names."""
        return self.verifier, self.L, None


@dataclass(kw_only=True)
class TreeRun(_ModelRun):
    """One multi-draft run: a verifier on a ``tree`` (k-config or EAGLE-2 spec), per-depth go-on and optimum."""

    tree: str
    rule: str | None = None
    replacement: bool | str | None = None
    tree_tokens: int | None = None
    expected_block_efficiency_given_tree: float | None = None
    per_depth_product_block_efficiency: float | None = None
    go_on_block_efficiency: float | None = None
    otm_bound_block_efficiency: float | None = None
    go_on: list[float | None] | None = None
    acceptance: list[float | None] | None = None
    optimum: list[float | None] | None = None
    tv: list[float | None] | None = None
    candidates: list[float | None] | None = None
    drafted_depth_histogram: list[int] | None = None
    target_nodes_per_call: float | None = None
    t_target_mean_ms: float | None = None

    PROBABILITIES = _ModelRun.PROBABILITIES + ("go_on", "acceptance", "tv")
    NONNEGATIVE = _ModelRun.NONNEGATIVE + ("drafted_depth_histogram",)

    def check(self, where: str) -> None:
        from ..drafts import parse_tree
        from ..verifiers import TREE_VERIFIERS

        if self.verifier not in TREE_VERIFIERS:
            raise RecordError(f"{where}: field 'verifier' should name a multi-draft verifier "
                              f"({', '.join(sorted(TREE_VERIFIERS))}), got {self.verifier!r}")
        try:
            parse_tree(self.tree)
        except ValueError as err:
            raise RecordError(f"{where}: field 'tree' is not a tree spec ({err})") from None
        super().check(where)

    @property
    def config(self) -> str:
        return self.tree

    @property
    def key(self) -> tuple:
        return self.verifier, None, self.tree


@dataclass(kw_only=True)
class PolicyRun(_Run):
    """One draft-length policy of ``llm_bridge.adaptive``: ``policy`` (``fixed``, ``threshold``,
    ``threshold_unlagged``) at ``value`` (K, or the threshold h), with the SpecDec++ rates."""

    policy: str
    value: float
    mean_draft_length: float | None = None
    draft_calls_per_iteration: float | None = None
    discard_rate: float | None = None
    verification_rate: float | None = None
    latency_ms: float | None = None
    t_target_ms: float | None = None

    #: SpecDec++'s rates are per generated token: >= 0, not <= 1.
    NONNEGATIVE = _Run.NONNEGATIVE + ("discard_rate", "verification_rate", "mean_draft_length",
                                      "draft_calls_per_iteration", "latency_ms", "t_target_ms")

    def check(self, where: str) -> None:
        super().check(where)
        if not (self.value >= 0 and self.value != float("inf")):  # NaN fails the first comparison
            raise RecordError(f"{where}: field 'value' should be a threshold >= 0 or a draft length, got {self.value}")
        if self.policy == "fixed" and (self.value != int(self.value) or self.value < 1):
            raise RecordError(f"{where}: a fixed policy's 'value' is a draft length (an integer >= 1), got {self.value}")


def run_row(obj, where: str = "row") -> ChainRun | TreeRun | PolicyRun:
    """A row of any kind from its JSON object, by its shape: ``tree`` → :class:`TreeRun`, ``policy`` →
    :class:`PolicyRun`, else :class:`ChainRun`; a row already typed is returned as it is."""
    if isinstance(obj, (ChainRun, TreeRun, PolicyRun)):
        return obj
    if not isinstance(obj, dict):
        raise RecordError(f"{where}: expected an object, got {type(obj).__name__}")
    kind = TreeRun if "tree" in obj else PolicyRun if "policy" in obj else ChainRun
    return kind.from_json(obj, where)
