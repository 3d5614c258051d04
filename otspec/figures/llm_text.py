"""Text helpers shared by the real-pair record summaries (:mod:`otspec.figures.llm`, :mod:`.llm_adaptive`)."""

from __future__ import annotations

import math

__all__ = ["NO_INTERVAL", "code_text", "fmt", "interval_text", "nan_for_none", "peer_text", "timing_text"]


def fmt(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def timing_text(record) -> list[str]:
    """The timing check in words: the baseline before and after, the drift, and every attempt measured."""
    t = record.timing
    if t is None or t.baseline_drift is None:
        return []
    text = (f"Timing check: plain sampling {t.baseline_before_ms_per_token:.2f} ms per token before the runs and "
            f"{t.baseline_after_ms_per_token:.2f} after (drift {100 * t.baseline_drift:.1f} %).")
    if len(attempts := t.attempts or []) > 1:
        text += (f" Measured in attempt {len(attempts)}: the earlier attempts, discarded whole because the check "
                 "failed, drifted " + "; ".join(f"{100 * a.baseline_drift:.1f} % ({a.unreliable_timing})"
                                                for a in attempts[:-1]) + ".")
    if settling := t.settling:
        text += (f" Warm-up passes until two agreed within {100 * settling.tolerance:.0f} %: "
                 + ", ".join(f"{x:.1f}" for x in settling.ms_per_token) + " ms per token"
                 + ("." if settling.settled else " (never settled)."))
    return [text, ""]


#: How a missing interval shows in a table cell that always has one.
NO_INTERVAL = " [–, –]"


def interval_text(iv, digits: int = 3, missing: str = "") -> str:
    """`` [low, high]`` of an interval (an :class:`~otspec.engine.rows.Interval`), or ``missing`` where there is
    none."""
    return missing if not iv else f" [{fmt(iv.low, digits)}, {fmt(iv.high, digits)}]"


def nan_for_none(values) -> list:
    """``values`` with ``None`` (nothing measured or predicted) as NaN, for a plot."""
    return [float("nan") if v is None else v for v in values]


def peer_text(record) -> list[str]:
    """The record's Hugging Face peer in a sentence (``hf_assisted``), or why it has none; ``[]`` without either."""
    hf = record.hf_assisted
    if not hf:
        skipped = record.hf_assisted_skipped
        return [f"Hugging Face assisted generation: none ({skipped})."] if skipped else []
    return [f"Hugging Face assisted generation ({hf.mode}" + (f", draft {hf.draft}" if hf.draft else "")
            + f"): **{fmt(hf.tokens_per_s, 1)} tokens/s** against {fmt(hf.plain_tokens_per_s, 1)} "
            f"for its plain `generate` (speedup {fmt(hf.speedup, 2)}{interval_text(hf.speedup_ci, 2)}; "
            f"both include the prefill), acceptance rate {fmt(hf.acceptance_rate)}"
            + (f"; {fmt(hf.speedup_vs_baseline, 2)}{interval_text(hf.speedup_vs_baseline_ci, 2)} of "
               "otspec's plain sampling" if hf.speedup_vs_baseline is not None else "")
            + (f". The fastest of {', '.join(sorted(hf.choice.candidates))} on "
               f"{hf.choice.prompts} prediction prompts; timed on every measured prompt with the runs"
               if hf.choice else "") + "."]


def code_text(settings) -> str:
    """`` Made from commit abc1234.`` (with its uncommitted changes, where it had any) where the record names the
    code that made it (``settings.code``), else nothing."""
    if settings.commit is None:
        return ""
    commit, modified = settings.commit
    return f" Made from commit {commit[:7]}{' with uncommitted changes' if modified else ''}."
