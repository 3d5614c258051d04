"""Range checks a record gets as a whole, beyond each row class's own (:mod:`otspec.engine.rows`).

Every number of a record measures something that cannot be negative (a rate, a time, a count, a probability, a
speedup) except a prediction's relative error and the verification time of Lemma 3.1; every acceptance rate and
two-point probability is at most 1; and every quantity of tokens per target call (block efficiency, its prediction,
its interval, the two-point bound) is at least 1, since each target call emits a token. These hold at any depth, in
the rows' free-form fields (``prediction``, ``engine_metrics``) too, so they are checked by walking the JSON rather
than field by field. A record holds at least one run; a run's speedup lies inside its confidence interval and each
prediction inside its interval; a chain run's tokens per target call (block efficiency, its prediction, bounds and
mean accepted length, at any depth) are at most L + 1 and its histogram of accepted lengths has one bin per length
0..L and counts at least one verification per iteration; every histogram is a list of counts and every ``lossless``
verdict a boolean.
"""

from __future__ import annotations

import math
import re

from ..checks import MAX_DRAFT_LENGTH
from ..sources import TAIL_MODES

__all__ = ["AT_LEAST_ONE", "CHOICES", "POSITIVE", "SHARES", "SIGNED", "check_record_numbers"]

#: Keys whose numbers may be negative: a prediction's relative error, and Lemma 3.1's verification time
#: (t_target − t_draft per target call: negative for a draft that costs more than its target, as layers:30 does).
SIGNED = frozenset({"relative_error", "verification_time"})
#: Keys whose numbers (at any depth below them, counts of prompts aside) are tokens per target call: >= 1.
AT_LEAST_ONE = frozenset({"block_efficiency", "block_efficiency_batch_means", "predicted_block_efficiency",
                          "predicted_block_efficiency_interval", "expected_block_efficiency_given_drafts",
                          "two_point_upper_bound", "two_point_upper_bound_interval", "mean_acceptance_length"})
#: Keys whose numbers (at any depth below them) are probabilities: <= 1.
SHARES = frozenset({"two_point_per_position", "tv_per_position", "acceptance_per_position", "acceptance_rate",
                    "acceptance_per_position_unconditional", "acceptance_per_position_conditional",
                    "draft_acceptance_rate", "predicted_acceptance_per_position_unconditional", "acceptance", "top_p"})
_COUNTS = ("prompts", "rounds", "unit")
#: Keys that count things a run had at least one of (tokens asked for, sequences per batch, threads, tokens made,
#: target calls, training sizes): integers >= 1 wherever they stand. A record of "0 new tokens" was drawn as given.
SIZES = frozenset({"max_new_tokens", "batch_size", "threads", "generated", "iterations", "prediction_prompts",
                   "train_prompts", "train_tokens", "train_draft_length", "max_length", "prediction_paths",
                   "target_calls", "cpus", "vocab_size"})
#: Keys whose numbers are rates or times of a run that happened: > 0 (0 tokens/s was drawn as given), and top-p.
POSITIVE = frozenset({"tokens_per_s", "plain_tokens_per_s", "ms_per_token", "ms_per_step", "top_p"})
_DEVICE = re.compile(r"(cpu|mps|(cuda|xpu)(:\d+)?)")
_PREDICTION_COUNTS = ("paths", "units", "sequences_per_path", "paths_per_prompt")
#: Text settings a record names from a fixed list (a KV cache kind, a torch dtype), wherever they stand.
CHOICES = {"cache": ("auto", "dynamic", "static", "compiled"), "dtype": ("float32", "float64", "bfloat16", "float16")}
_RUN_LISTS = ("runs", "tree_runs", "fixed", "threshold", "threshold_unlagged")
#: A run's values that lie inside an interval of the same run: (value, interval, what the interval is).
_INSIDE = (("speedup", "speedup_ci", "confidence interval"),
           ("predicted_speedup", "predicted_speedup_interval", "interval"),
           ("predicted_block_efficiency", "predicted_block_efficiency_interval", "interval"))


def _kind_of(key: str, item, at: str, where: str, error) -> None:
    """A histogram is a list of counts, a verdict ``lossless`` a boolean (or null): text there was drawn as given."""
    if key.endswith("_histogram") and item is not None and not (
            isinstance(item, list) and all(isinstance(h, int | float) and not isinstance(h, bool) for h in item)):
        raise error(f"{where}: {at} should be a list of counts, got {type(item).__name__} {str(item)[:40]!r}")
    if key == "engine_metrics" and isinstance(item, dict):  # counts and rates only: text there was drawn as given
        text = next((k for k, v in item.items() if isinstance(v, str) and not k.endswith("_histogram")), None)
        if text is not None:
            raise error(f"{where}: {at}.{text} should be a number, got {item[text]!r}")
    if key == "prompts" and isinstance(item, int | float) and not isinstance(item, bool) and item < 1:
        raise error(f"{where}: {at} should be a count of prompts >= 1, got {item}")
    if key in SIZES and item is not None and not (isinstance(item, int) and not isinstance(item, bool) and item >= 1):
        raise error(f"{where}: {at} should be an integer >= 1, got {item!r}")
    if key == "lengths" and item is not None and not (
            isinstance(item, list) and item and all(isinstance(x, int) and not isinstance(x, bool)
                                                    and 1 <= x <= MAX_DRAFT_LENGTH for x in item)):
        raise error(f"{where}: {at} should be a non-empty list of draft lengths in [1, {MAX_DRAFT_LENGTH}], got "
                    f"{str(item)[:40]}")
    if key in POSITIVE and isinstance(item, int | float) and not isinstance(item, bool) and not item > 0:
        raise error(f"{where}: {at} should be > 0, got {item}")
    if key.endswith("prompt_ids") and item is not None and not (
            isinstance(item, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in item)
            and len(set(item)) == len(item)):
        raise error(f"{where}: {at} should be a list of distinct prompt numbers >= 0, got {str(item)[:40]}")
    if key == "device" and isinstance(item, str) and not _DEVICE.fullmatch(item):
        raise error(f"{where}: {at} should be a device (cpu, cuda, cuda:N, mps), got {item[:40]!r}")
    if key == "tail" and at.endswith("logged_rows.tail") and item not in TAIL_MODES:
        raise error(f"{where}: {at} should be one of {TAIL_MODES}, got {str(item)[:40]!r}")
    if key == "code" and isinstance(item, dict):  # the commit that made the record, said in its summary
        commit, modified = item.get("commit"), item.get("modified")
        if commit is not None and not (isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{7,64}", commit)):
            raise error(f"{where}: {at}.commit should be a commit hash (hex text), got {commit!r:.40}")
        if modified is not None and not isinstance(modified, bool):
            raise error(f"{where}: {at}.modified should be true or false, got {modified!r:.40}")
    if key == "accelerator" and item is not None and not (isinstance(item, str) and item.strip()
                                                         and item.strip().lower() not in ("null", "none")):
        raise error(f"{where}: {at} should be a device name or null, got {item!r:.40}")
    if key in CHOICES and isinstance(item, str) and item not in CHOICES[key]:
        raise error(f"{where}: {at} should be one of {CHOICES[key]}, got {item[:40]!r}")
    if key == "unit" and at.endswith("block_efficiency.unit") and item not in (None, "prompt"):  # its interval's
        raise error(f"{where}: {at} should be 'prompt' (the interval's unit), got {str(item)[:40]!r}")
    if key in ("draft", "target", "name") and isinstance(item, str) and not (item.strip() and item.isprintable()):
        raise error(f"{where}: {at} should be a printable name, got {item[:40]!r}")  # a newline broke the summary
    if key == "lossless" and item is not None and not isinstance(item, bool | dict):  # (a record's section is one)
        raise error(f"{where}: {at} should be true, false or null, got {item!r}")


def _walk(value, path: tuple, where: str, error) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _kind_of(str(key), item, ".".join((*path, str(key))).replace(".[", "["), where, error)
            _walk(item, (*path, str(key)), where, error)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _walk(item, (*path, f"[{i}]"), where, error)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        named = [p for p in path if not p.startswith("[")]
        at = ".".join(path).replace(".[", "[")
        if isinstance(value, int) and abs(value) > 1e300:  # no float holds it
            raise error(f"{where}: {at} should be a finite number, got an integer of {len(str(abs(value)))} digits")
        if isinstance(value, float) and not math.isfinite(value):
            raise error(f"{where}: {at} should be a finite number or null, got {value}")
        if value < 0 and not SIGNED.intersection(named):
            raise error(f"{where}: {at} should be >= 0 (a rate, time, count, probability or speedup), got {value}")
        if SHARES.intersection(named) and value > 1 + 1e-9:
            raise error(f"{where}: {at} should be <= 1 (a probability or rate of acceptance), got {value}")
        inside = [p for p in named if p in AT_LEAST_ONE]
        percentile = named[-2:] == ["block_efficiency", "low"]  # the estimate's own interval (a bootstrap of values
        if (inside and "prediction_check" not in named and (named[-1] not in _COUNTS + ("low",) or percentile)  # >= 1);
                and value < 1 - 1e-9):                                           # a batch-means t-interval may start below 1
            raise error(f"{where}: {at} should be >= 1 (tokens per target call: each call emits one), got {value}")


def check_record_numbers(obj: dict, where: str, error) -> None:
    """Refuse (``error``, a ``ValueError`` subclass, naming the field) a record's JSON object that breaks the module
    docstring's rules."""
    _walk(obj, (), where, error)
    settings = obj.get("settings")
    for count, ids in (("prompts", "prompt_ids"), ("prediction_prompts", "prediction_prompt_ids")):
        if isinstance(settings, dict) and isinstance(settings.get(ids), list) and isinstance(settings.get(count), int) \
                and settings[count] != len(settings[ids]):
            raise error(f"{where}: settings.{count} = {settings[count]} but settings.{ids} lists "
                        f"{len(settings[ids])}")
    if not any(isinstance(obj.get(key), list) and obj[key] for key in _RUN_LISTS):
        raise error(f"{where}: the record holds no run (its runs, tree_runs or policies are all empty or missing)")
    for key in _RUN_LISTS:
        runs = obj.get(key)
        for i, run in enumerate(runs if isinstance(runs, list) else []):
            if not isinstance(run, dict):
                continue
            at = f"{where}: {key}[{i}]"
            for name, band_name, what in _INSIDE:  # a value inside its interval
                x, band = run.get(name), run.get(band_name)
                if isinstance(x, int | float) and isinstance(band, dict):
                    low, high = band.get("low"), band.get("high")
                    if isinstance(low, int | float) and isinstance(high, int | float):
                        slack = 1e-9 * max(1.0, abs(x))
                        if not low - slack <= x <= high + slack:
                            raise error(f"{at}: {name} {x} lies outside its {what} [{low}, {high}]")
            hist, L = run.get("accepted_length_histogram"), run.get("L")
            if isinstance(L, int) and not isinstance(L, bool):  # L drafts and one target token at most, at any depth
                _at_most(run, (), L + 1, at, error)
            if isinstance(hist, list) and isinstance(L, int) and not isinstance(L, bool) and len(hist) != L + 1:
                raise error(f"{at}: accepted_length_histogram should hold L + 1 = {L + 1} bins (accepted lengths "
                            f"0..L), got {len(hist)}")
            iterations = run.get("iterations")
            if (isinstance(hist, list) and hist and all(isinstance(h, int | float) for h in hist)
                    and sum(hist) < (iterations if isinstance(iterations, int | float) else 1)):
                raise error(f"{at}: accepted_length_histogram counts {sum(hist)} verifications, fewer than the run's "
                            f"{iterations} iterations (each verifies at least one sequence)")


def _at_most(value, path: tuple, most: int, at: str, error) -> None:
    """Every number of a run counted in tokens per target call (keys of :data:`AT_LEAST_ONE`, a prediction's check
    and counts aside) is at most ``most`` = L + 1."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key != "prediction_check":
                _at_most(item, (*path, str(key)), most, at, error)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _at_most(item, (*path, f"[{i}]"), most, at, error)
    elif (isinstance(value, int | float) and not isinstance(value, bool) and value > most + 1e-9
          and AT_LEAST_ONE.intersection(path) and path[-1] not in _COUNTS + _PREDICTION_COUNTS
          and (path[-1] not in ("high", "mean_high") or path == ("block_efficiency", "high"))):  # a t interval of
        # batch means may end past the bound its values keep; the estimate's own (percentile) interval may not
        name = ".".join(path).replace(".[", "[")
        raise error(f"{at}: {name} {value} is above L + 1 = {most} (tokens per target call)")
