"""Typed records of real-pair runs: what ``llm_bridge`` measures and the figure registry renders.

A record is written once, as JSON, by the model side (``python -m llm_bridge.validate`` writes a
:class:`PairRecord`, ``python -m llm_bridge.adaptive`` an :class:`AdaptiveRecord`) and read by the
presentation side (``otspec.figures.llm``: the report section, the per-record plot and summary),
so neither imports the other. ``from_json`` checks every field it relies on and names the one that
is missing or of the wrong kind; keys it does not know are kept in ``extra`` and written back, so
older and newer files round-trip unchanged.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

__all__ = ["AdaptiveRecord", "PairRecord", "RecordError", "code_version", "read_record"]


class RecordError(ValueError):
    """A record file or object is not what its kind promises; the message names the field."""


#: The folders whose uncommitted changes make a record's code differ from its commit.
CODE_FOLDERS = ("otspec", "llm_bridge")


def code_version(root=None) -> dict | None:
    """The code a record is made from: ``{"commit", "modified"}``, the git commit checked out at ``root`` (default:
    the checkout this package runs from) and whether :data:`CODE_FOLDERS` hold uncommitted changes or new files git
    does not ignore; ``None`` outside a git checkout, where git is missing, or (by default) where this package runs
    from an installed copy rather than a checkout, so a record names what made it whenever it can."""
    root = Path(__file__).resolve().parents[2] if root is None else Path(root).resolve()

    def git(*args) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != root:  # an installed copy inside some checkout
            return None
        commit = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--", *CODE_FOLDERS)
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "modified": bool(changed)}


def _check(obj: dict, key: str, kind, where: str, *, optional: bool = False):
    if key not in obj or obj[key] is None:
        if optional:
            return None
        raise RecordError(f"{where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise RecordError(f"{where}: field {key!r} should be {names}, got {type(value).__name__}")
    return value


def _check_model_pair(obj: dict, where: str) -> dict:
    pair = _check(obj, "model_pair", dict, where)
    for key in ("target", "draft", "device"):
        _check(pair, key, str, f"{where}: model_pair")
    return pair


def _check_estimate(obj: dict, key: str, where: str) -> None:
    est = _check(obj, key, dict, where)
    for part in ("mean", "low", "high"):
        _check(est, part, (int, float), f"{where}: {key}")


@dataclass
class _Record:
    """Shared JSON plumbing: typed fields, unknown keys kept in ``extra``."""

    KIND: ClassVar[str] = "record"

    def to_json(self) -> dict:
        """The JSON object (fields that are ``None`` are left out, ``extra`` keys are written back)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**{k: v for k, v in out.items() if v is not None}, **self.extra}

    def write(self, path) -> Path:
        """Write the record as indented JSON; returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        return path

    @staticmethod
    def _object(obj, where: str) -> dict:
        """The JSON object (parsed from text if need be), with the fields every record has checked."""
        obj = json.loads(obj) if isinstance(obj, str) else obj
        if not isinstance(obj, dict):
            raise RecordError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        _check_model_pair(obj, where)
        _check(obj, "settings", dict, where)
        return obj

    @classmethod
    def _split(cls, obj: dict) -> tuple[dict, dict]:
        names = {f.name for f in fields(cls)} - {"extra"}
        return {k: v for k, v in obj.items() if k in names}, {k: v for k, v in obj.items() if k not in names}


@dataclass
class PairRecord(_Record):
    """One ``llm_bridge.validate`` run of a model pair: chains (``runs``) and trees (``tree_runs``).

    Attributes
    ----------
    model_pair : dict
        ``target``, ``draft``, ``device`` (and ``dtype``).
    settings : dict
        Prompts, tokens, sampling, seed, cache, the machine.
    runs : list of dict
        One row per (verifier, L): measured block efficiency (``{"mean", "low", "high"}``), the
        prediction, speedup, call times and per-position statistics.
    baseline, profile, drafter, hf_assisted, hf_decode_step, lossless, logged_rows : dict or None
    tree_runs : list of dict or None
        One row per (multi-draft verifier, tree).
    extra : dict
        Keys this version does not know.
    """

    KIND: ClassVar[str] = "pair"
    model_pair: dict
    settings: dict
    runs: list
    baseline: dict | None = None
    profile: dict | None = None
    drafter: dict | None = None
    tree_runs: list | None = None
    logged_rows: Any = None
    hf_assisted: dict | None = None
    hf_decode_step: dict | None = None
    lossless: Any = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj, where: str = "record") -> PairRecord:
        """A :class:`PairRecord` from its JSON object (or text), checked field by field."""
        obj = cls._object(obj, where)
        runs = _check(obj, "runs", list, where)
        for i, run in enumerate(runs):
            at = f"{where}: runs[{i}]"
            if not isinstance(run, dict):
                raise RecordError(f"{at}: expected an object, got {type(run).__name__}")
            _check(run, "verifier", str, at)
            _check(run, "L", int, at)
            _check_estimate(run, "block_efficiency", at)
        for i, run in enumerate(_check(obj, "tree_runs", list, where, optional=True) or []):
            at = f"{where}: tree_runs[{i}]"
            _check(run, "verifier", str, at)
            _check_estimate(run, "block_efficiency", at)
        known, extra = cls._split(obj)
        return cls(**known, extra=extra)


@dataclass
class AdaptiveRecord(_Record):
    """One ``llm_bridge.adaptive`` run: SpecDec++ on a model pair (head, fixed lengths, thresholds)."""

    KIND: ClassVar[str] = "adaptive"
    model_pair: dict
    settings: dict
    head: dict
    fixed: list
    threshold: list
    baseline: dict | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj, where: str = "record") -> AdaptiveRecord:
        """An :class:`AdaptiveRecord` from its JSON object (or text), checked field by field."""
        obj = cls._object(obj, where)
        _check(obj, "head", dict, where)
        for key in ("fixed", "threshold"):
            for i, row in enumerate(_check(obj, key, list, where)):
                if not isinstance(row, dict):
                    raise RecordError(f"{where}: {key}[{i}]: expected an object, got {type(row).__name__}")
        known, extra = cls._split(obj)
        return cls(**known, extra=extra)


def read_record(path) -> PairRecord | AdaptiveRecord:
    """The record in a JSON file, by its shape: runs → :class:`PairRecord`, thresholds → :class:`AdaptiveRecord`."""
    path = Path(path)
    if not path.is_file():
        raise RecordError(f"{path}: no such record file")
    try:
        obj = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise RecordError(f"{path}: not JSON ({err})") from err
    if isinstance(obj, dict) and "threshold" in obj:
        return AdaptiveRecord.from_json(obj, str(path))
    return PairRecord.from_json(obj, str(path))
