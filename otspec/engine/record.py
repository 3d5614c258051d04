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
import math
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..checks import MAX_JSON_DEPTH, MissingFile, file_problem, json_depth, unique_keys
from .record_checks import check_record_numbers
from .rows import LOCAL, ChainRun, Interval, JsonObject, PolicyRun, RecordError, TreeRun

__all__ = ["AdaptiveRecord", "Baseline", "DecodeStep", "Drafter", "Head", "LawSampling", "Lossless", "LosslessCheck",
           "MissingRecord", "ModelPair", "PairRecord", "Peer", "Profile", "RecordError", "Settings", "Settling", "Split",
           "Timing", "TimingAttempt", "as_record", "code_version", "read_json_file", "read_record",
           "results_table"]


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


@dataclass(kw_only=True)
class ModelPair(JsonObject):
    """The models of a record: the target, the draft (a model or a drafter's name), the device and dtype."""

    target: str
    draft: str
    device: str
    dtype: str | None = None


@dataclass(kw_only=True)
class Settings(JsonObject):
    """How a record was made: prompts, tokens, sampling, batch, seed, the software, the code; a training run's
    settings (adaptive records); what this version does not name stays in ``extra``."""

    prompts: int | None = None
    prompt_ids: list | None = None
    prediction_prompts: int | None = None
    prediction_prompt_ids: list | None = None
    max_new_tokens: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    batch_size: int | None = None
    seed: int | None = None
    rule: str | None = None
    max_length: int | None = None
    cache: str | None = None
    threads: int | None = None
    torch: str | None = None
    transformers: str | None = None
    accelerator: str | None = None
    code: dict | None = None
    train_prompts: int | None = None
    train_tokens: int | None = None
    mix: float | None = None
    train_data: str | None = None
    train_draft_length: int | None = None

    @property
    def commit(self) -> tuple[str, bool] | None:
        """(the commit that made the record, whether it had uncommitted changes), or ``None`` where not recorded."""
        if not self.code or "commit" not in self.code:
            return None
        return str(self.code["commit"]), bool(self.code.get("modified"))


@dataclass(kw_only=True)
class Baseline(JsonObject):
    """Plain target sampling in the same run: tokens/s, ms per token and its interleaved timing rounds."""

    tokens_per_s: float
    ms_per_token: float | None = None
    rounds: list | None = None


@dataclass(kw_only=True)
class Monotone(JsonObject):
    """Whether t_target(n) grows with n beyond noise; the pairs (n, n') where it falls."""

    monotone: bool | None = None
    exceptions: list | None = None
    tolerance: float | None = None


@dataclass(kw_only=True)
class Profile(JsonObject):
    """A record's cost profile as written (``llm_bridge.profile.CostProfile.to_json``): call times by width."""

    t_draft_ms: float
    t_target_ms: dict[str, float]
    t_target_ms_interval: dict[str, Interval] | None = None
    context_tokens: float | None = None
    batch_size: int | None = None
    monotone: Monotone | None = None
    disturbed_rounds: list | None = None
    round_tolerance: float | None = None


@dataclass(kw_only=True)
class Drafter(JsonObject):
    """The drafter of a pair record: first-position acceptance 1 - TV and cost ratio t_draft / t_target(1)."""

    name: str | None = None
    acceptance: float | None = None
    cost_ratio: float | None = None


@dataclass(kw_only=True)
class PeerChoice(JsonObject):
    """Which of Hugging Face's modes was timed: the fastest of ``candidates`` on ``prompts`` prediction prompts."""

    candidates: dict | list
    prompts: int


@dataclass(kw_only=True)
class Peer(JsonObject):
    """Hugging Face assisted generation timed with the runs: tokens/s, speedups and acceptance."""

    mode: str
    tokens_per_s: float
    speedup: float
    acceptance_rate: float | None = None
    draft: str | None = None
    plain_tokens_per_s: float | None = None
    speedup_ci: Interval | None = None
    speedup_vs_baseline: float | None = None
    speedup_vs_baseline_ci: Interval | None = None
    choice: PeerChoice | None = None


@dataclass(kw_only=True)
class DecodeStep(JsonObject):
    """otspec's plain decode step against Hugging Face's plain ``generate`` with the same cache kind."""

    ms_per_token: float | None = None
    cache: str | None = None
    otspec_step_ratio: float | None = None


@dataclass(kw_only=True)
class Settling(JsonObject):
    """Warm-up passes until two agreed within ``tolerance``."""

    tolerance: float
    ms_per_token: list[float]
    settled: bool


@dataclass(kw_only=True)
class TimingAttempt(JsonObject):
    """One timing attempt: the baseline's drift across it and why it was unreliable (``None``: it was not)."""

    baseline_drift: float | None = None
    unreliable_timing: str | None = None


@dataclass(kw_only=True)
class Timing(JsonObject):
    """The timing check: plain sampling before and after the runs, the drift, every attempt, the warm-up."""

    baseline_before_ms_per_token: float | None = None
    baseline_after_ms_per_token: float | None = None
    baseline_drift: float | None = None
    unreliable_timing: str | None = None
    attempts: list[TimingAttempt] | None = None
    settling: Settling | None = None


@dataclass(kw_only=True)
class TwoSample(JsonObject):
    """A two-sample G-test of the sampler's first tokens against the target's."""

    p_value: float


@dataclass(kw_only=True)
class LosslessCheck(JsonObject):
    """One verifier's losslessness on the real rows: the first-token law's largest deviation (``None``: checked on
    toy sources, whole tree), draft paths enumerated, the G-test."""

    first_token_max_deviation: float | None = None
    draft_paths: int | None = None
    two_sample: TwoSample | None = None


@dataclass(kw_only=True)
class LawSampling(JsonObject):
    """The sampling the losslessness checks drew under."""

    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None


@dataclass(kw_only=True)
class Lossless(JsonObject):
    """The losslessness checks of a pair record (or the ``status`` saying why there are none)."""

    verifiers: dict[str, LosslessCheck] | None = None
    sampling: LawSampling | None = None
    draft_length: int | None = None
    samples: int | None = None
    status: str | None = None


@dataclass(kw_only=True)
class Split(JsonObject):
    """A quantity on the training rows and on the held-out test rows."""

    train: float | None = None
    test: float | None = None


@dataclass(kw_only=True)
class Head(JsonObject):
    """An adaptive record's stopping rule: a learned head (features, loss weights, fit) or the draft's confidence."""

    rule: str | None = None
    description: str | None = None
    features: int | None = None
    w_rej: float | None = None
    l2: float | None = None
    l2_validation_loss: dict | None = None
    rows: Split | None = None
    binary_kl: Split | None = None
    binary_kl_constant: Split | None = None
    correlation: Split | None = None
    weighted_loss: Split | None = None
    weighted_loss_constant: Split | None = None


@dataclass(kw_only=True)
class _Record(JsonObject):
    """What every record has; ``file`` (its name) and ``path``: where :func:`read_record` read it from (not part of
    its JSON)."""

    KIND: ClassVar[str] = "record"
    model_pair: ModelPair
    settings: Settings
    baseline: Baseline | None = None
    timing: Timing | None = None
    unreliable_timing: str | None = None
    hf_assisted: Peer | None = None
    hf_assisted_skipped: str | None = None
    file: str = field(default="", compare=False, repr=False, metadata=LOCAL)
    path: str = field(default="", compare=False, repr=False, metadata=LOCAL)

    def write(self, path) -> Path:
        """Write the record as indented JSON; returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1, allow_nan=False) + "\n")  # NaN is not JSON: null
        return path

    def to_data(self) -> dict:
        """The record as a figure's data file holds it: ``file`` and ``path`` first, then its JSON."""
        return {"file": self.file, "path": self.path, **self.to_json()}


@dataclass(kw_only=True)
class PairRecord(_Record):
    """One ``llm_bridge.validate`` run of a model pair: chains (``runs``) and trees (``tree_runs``).

    Attributes
    ----------
    model_pair : ModelPair
    settings : Settings
        Prompts, tokens, sampling, seed, cache, the machine.
    runs : list of ChainRun
        One row per (verifier, L).
    tree_runs : list of TreeRun or None
        One row per (multi-draft verifier, tree).
    baseline, profile, drafter, timing, hf_assisted, hf_decode_step, lossless : the run's other sections
    extra : dict
        Keys this version does not know.
    """

    KIND: ClassVar[str] = "pair"
    runs: list[ChainRun]
    tree_runs: list[TreeRun] | None = None

    def check(self, where: str) -> None:
        if not self.runs and not self.tree_runs:
            raise RecordError(f"{where}: field 'runs' is empty (and no tree_runs): a record with no run to show")
    profile: Profile | None = None
    drafter: Drafter | None = None
    logged_rows: dict | None = None
    hf_decode_step: DecodeStep | None = None
    lossless: Lossless | None = None

    @property
    def all_runs(self) -> list:
        """The chain runs, then the tree runs."""
        return list(self.runs) + list(self.tree_runs or [])


@dataclass(kw_only=True)
class AdaptiveRecord(_Record):
    """One ``llm_bridge.adaptive`` run: SpecDec++ on a model pair (head, fixed lengths, thresholds)."""

    KIND: ClassVar[str] = "adaptive"
    head: Head
    fixed: list[PolicyRun]
    threshold: list[PolicyRun]
    threshold_unlagged: list[PolicyRun] | None = None

    def check(self, where: str) -> None:
        if not self.fixed and not self.threshold:
            raise RecordError(f"{where}: fields 'fixed' and 'threshold' are both empty: a record with no policy to show")
    rules: dict[str, str] | None = None

    @property
    def confidence_rule(self) -> bool:
        """Whether the threshold rows are the draft-confidence rule (no learned head)."""
        return self.head.rule == "confidence"


class MissingRecord(RecordError, MissingFile):
    """A record file that does not exist: a :class:`RecordError` and a ``FileNotFoundError``."""


#: Largest record or forecast file read (the committed records are at most 1.5 MB).
MAX_RECORD_BYTES = 2**28


def check_record_size(path) -> None:
    """Refuse, unread, a record or forecast file past :data:`MAX_RECORD_BYTES` (a sparse or runaway file)."""
    size = Path(path).stat().st_size
    if size > MAX_RECORD_BYTES:
        raise RecordError(f"{path}: {size:,} bytes, above MAX_RECORD_BYTES = {MAX_RECORD_BYTES:,}")


def read_json_file(path, what: str = "record"):
    """The JSON in the data file ``path`` (a record, a forecast), every way it can fail named as a ``RecordError``
    (:class:`MissingRecord` when there is no file): not a path, not a regular file, not UTF-8, not JSON, too deep."""
    problem = file_problem(path)  # before Path(): an integer would be a file descriptor
    if problem is not None and problem.startswith("is not a path"):
        raise RecordError(f"{what} path {path!r} {problem}")
    path = Path(path)
    if problem == "does not exist":
        raise MissingRecord(f"{path}: no such {what} file")
    if problem:
        raise RecordError(f"{path}: {problem}")
    check_record_size(path)  # a record is a few MB
    try:
        obj = json.loads(path.read_text(), object_pairs_hook=unique_keys)
    except json.JSONDecodeError as err:
        raise RecordError(f"{path}: not JSON ({err})") from err
    except UnicodeDecodeError:
        raise RecordError(f"{path}: not a JSON {what} (not UTF-8 text)") from None
    except ValueError as err:  # an integer of thousands of digits
        raise RecordError(f"{path}: not a JSON {what} ({err})") from None
    except RecursionError:
        raise RecordError(f"{path}: nests JSON too deeply to be a {what}") from None
    if json_depth(obj) > MAX_JSON_DEPTH:
        raise RecordError(f"{path}: nests JSON more than MAX_JSON_DEPTH = {MAX_JSON_DEPTH} levels deep; not a {what}")
    return obj


def read_record(path) -> PairRecord | AdaptiveRecord:
    """The record in a JSON file, by its shape: runs → :class:`PairRecord`, thresholds → :class:`AdaptiveRecord`."""
    obj = read_json_file(path)
    path = Path(path)
    if not isinstance(obj, dict):  # as_record would read a JSON string as the text of a record
        raise RecordError(f"{path}: expected a JSON object (a record), got {type(obj).__name__}")
    record = as_record(obj, str(path))
    # every command writes a baseline; only a record built in memory (as_record) may leave it out
    if record.baseline is None or not record.baseline.tokens_per_s > 0:
        raise RecordError(f"{path}: no 'baseline' with tokens_per_s > 0 (plain sampling, the denominator of every "
                          "speedup)")
    record.file, record.path = path.name, str(path)
    return record


def as_record(obj, where: str = "record") -> PairRecord | AdaptiveRecord:
    """A record from its JSON object (or text), by its shape: thresholds → :class:`AdaptiveRecord`, else
    :class:`PairRecord`; a record already typed is returned as it is. A ``file`` key (a figure's data entry) is
    taken as where it was read from."""
    if isinstance(obj, (PairRecord, AdaptiveRecord)):
        return obj
    try:
        obj = json.loads(obj) if isinstance(obj, str) else obj
    except (ValueError, RecursionError) as err:
        raise RecordError(f"{where}: not the JSON text of a record ({type(err).__name__})") from None
    if not isinstance(obj, dict):
        raise RecordError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    local = {k: obj[k] for k in ("file", "path") if k in obj}
    body = {k: v for k, v in obj.items() if k not in local}
    record = (AdaptiveRecord if "threshold" in body else PairRecord).from_json(body, where)  # field checks first
    check_record_numbers(body, where, RecordError)
    record.file, record.path = str(local.get("file", "")), str(local.get("path", ""))
    return record


def _cell(x, digits: int) -> str:
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}f}"


def results_table(record) -> str:
    """A pair record's results as a plain-text table for a terminal (``python -m llm_bridge.validate`` prints it;
    the Markdown summary is :func:`otspec.figures.llm.record_markdown`): one row per run, measured against predicted,
    then plain sampling and the Hugging Face peer."""
    record = as_record(record)
    rows = [("verifier", "draft", "block eff. [95% CI]", "predicted", "tokens/s", "speedup [95% CI]", "predicted")]
    for r in record.all_runs:
        be, iv = r.block_efficiency, r.speedup_spread
        rows.append((r.verifier, r.config.replace(" ", ""),
                     f"{_cell(be.mean, 3)} [{_cell(be.low, 3)}, {_cell(be.high, 3)}]",
                     _cell(r.predicted_block_efficiency, 3), _cell(r.tokens_per_s, 1),
                     _cell(r.speedup, 2) + (f" [{_cell(iv.low, 2)}, {_cell(iv.high, 2)}]" if iv else ""),
                     _cell(r.predicted_speedup, 2)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    out.append(f"plain sampling: {_cell(record.baseline.tokens_per_s, 1)} tokens/s")
    if hf := record.hf_assisted:
        out.append(f"Hugging Face assisted generation: {_cell(hf.tokens_per_s, 1)} tokens/s, speedup "
                   f"{_cell(hf.speedup, 2)} over its own plain generate")
    if record.unreliable_timing:
        out.append(f"UNRELIABLE TIMING: {record.unreliable_timing}")
    return "\n".join(out)

