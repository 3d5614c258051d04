"""The cost profile of a real pair: what :mod:`llm_bridge.calibrate` measured apart from the runs, and the
cost of a speculative iteration it gives.

From a dry run, :meth:`CostProfile.iteration_cost` builds the cost of an iteration that makes k draft calls and
scores a widest draft of w tokens (a tree: w nodes):

    (k + extra) · t_draft + scale · t_target(w + 1) + t_verify + overhead_base + overhead_per_token · w
    [+ t_draft(2) - t_draft(1) after an iteration in which some sequence of the batch kept its whole draft],

with t_draft the mean draft call, ``extra`` the draft calls beyond one per drafted token (v1 block verification asks for
the row after the draft), ``scale`` the dry run's target calls over the same widths' calls in isolation (a target call
after draft calls costs more than one after another: caches) — these two over every dry run that drafts the same way
(:meth:`CostProfile.same_draft`: token, block and v1 block verification at one L make the same model calls), so that one
configuration's timing noise does not move its prediction alone — t_verify the mean verifier call and the overhead the
rest of the iteration's wall clock (the loop's own work): plain decoding's own work per step where nothing is drafted,
growing linearly with the drafted tokens to the dry run's mean (v1 block verification's residual rows are most of it,
and they scale with the draft: a prompt-lookup run, which mostly drafts nothing, spent a third of its dry run's overhead
per iteration at L = 8, charged a constant). With its own model calls it would reproduce the dry run's mean iteration;
pooled, it leaves out that run's model-call noise (in the batch-8 records of 2026-11-28/29 the same calls cost up to 6 %
more or less from one verifier's dry run to another's in the same rounds). Other widths (a draft cut short at the end of
a sequence, a prompt-lookup draft of any length, a trie of any size) move along the measured t_target(n).
:func:`otspec.engine.predict.predict_wall_clock` then charges these costs to the prediction's replays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .measure import median_interval

__all__ = ["MONOTONE_TOLERANCE", "ROUND_TOLERANCE", "CostProfile"]

#: A calibration round whose plain decoding ran more than this share slower per step than the median round (of at
#: least three) is set aside, its plain steps and its dry runs alike (:meth:`CostProfile.disturbed_rounds`).
ROUND_TOLERANCE = 0.25
#: A target call at width n + 1 counts as cheaper than at n (non-monotone) only when its median is below n's
#: interval by more than this share of n's median (timing noise of a quiet machine).
MONOTONE_TOLERANCE = 0.03


@dataclass
class CostProfile:
    """Call costs of a pair at one batch size, measured apart from the runs (module docstring).

    Attributes
    ----------
    batch_size, max_new_tokens : int
        The runs' batch and tokens per prompt.
    prompt_ids : list of int
        The calibration prompts (lines of the prompt file, 0-based, comments skipped).
    context_tokens : float
        Mean context length per sequence at the timed t_target calls.
    t_target : dict
        {n: [ms, ...]}: timed target calls scoring n tokens per sequence.
    t_draft : dict
        {n: [ms, ...]}: timed draft-model calls feeding n tokens per sequence (n = 1, 2; empty for a head or
        prompt lookup).
    plain : dict
        Plain decoding of the calibration prompts: ``step_ms`` (each step's wall clock, first steps of a batch
        excluded), ``target_ms`` (its target calls), ``steps``, ``seconds``.
    dry : dict
        {configuration key: per-iteration columns ``wall_ms``, ``draft_ms``, ``target_ms``, ``verify_ms``,
        ``calls``, ``width`` and ``kind`` (chain or tree)}.
    device, cache : str
    threads : int
    seconds : float
        Wall clock of the whole calibration.
    interleaved : bool
        Whether the calibration rounds went in turn with the measured runs' batches (``interleaved_with_runs``),
        so that the profile saw the machine in the same windows as the runs it predicts.
    """

    batch_size: int
    max_new_tokens: int
    prompt_ids: list
    context_tokens: float
    t_target: dict
    plain: dict
    dry: dict = field(default_factory=dict)
    device: str = "cpu"
    cache: str = "dynamic"
    threads: int = 1
    seconds: float = 0.0
    t_draft: dict = field(default_factory=dict)
    interleaved: bool = False

    # --------------------------------------------------------------------------------------- derived quantities
    def widths(self) -> np.ndarray:
        return np.array(sorted(int(n) for n in self.t_target), dtype=np.int64)

    def target_curve(self) -> dict:
        """{n: median_interval of t_target(n)}."""
        return {int(n): median_interval(v, seed=int(n)) for n, v in sorted(self.t_target.items(), key=lambda x: int(x[0]))}

    def t_target_ms(self, n):
        """Median t_target(n) at any width (arrays too): linear between measured widths, linear beyond the last two."""
        ns = self.widths()
        meds = np.array([np.median(self.t_target[k] if k in self.t_target else self.t_target[str(k)])
                         for k in ns.tolist()])
        n = np.asarray(n, dtype=np.float64)
        out = np.interp(n, ns, meds)
        if ns.size >= 2:
            slope = (meds[-1] - meds[-2]) / (ns[-1] - ns[-2])
            out = np.where(n > ns[-1], meds[-1] + slope * (n - ns[-1]), out)
        return out

    def disturbed_rounds(self) -> list[int]:
        """The calibration rounds set aside: those whose plain decoding ran more than :data:`ROUND_TOLERANCE` slower
        per step than the median round (with at least three rounds). The rounds decode different prompts, so their
        steps differ by several per cent; a round far beyond that met a disturbance that the dry runs beside it need
        not share. In the llm_ngram record of 2026-11-27 one round's plain steps took 98 ms against 67-70 ms in the
        other three, while its dry runs did not slow down, and the mean plain step moved every prediction of the
        record up by 8 %. Nothing of the measured runs enters this choice."""
        if "round" not in self.plain:
            return []
        step, rounds = np.asarray(self.plain["step_ms"], dtype=np.float64), np.asarray(self.plain["round"])
        ids = np.unique(rounds)
        if ids.size < 3:
            return []
        means = np.array([step[rounds == k].mean() for k in ids])
        return [int(k) for k, m in zip(ids, means, strict=True) if m > (1.0 + ROUND_TOLERANCE) * np.median(means)]

    def _kept(self, columns: dict) -> np.ndarray:
        """Which rows of ``columns`` (plain decoding's or a dry run's) belong to rounds that are not set aside."""
        n = len(columns["step_ms"] if "step_ms" in columns else columns["wall_ms"])
        bad = self.disturbed_rounds()
        if not bad or "round" not in columns:
            return np.ones(n, dtype=bool)
        return ~np.isin(np.asarray(columns["round"]), bad)

    def plain_step_ms(self) -> float:
        """Plain decoding's mean wall clock per batch step (rounds set aside excluded)."""
        return float(np.mean(np.asarray(self.plain["step_ms"], dtype=np.float64)[self._kept(self.plain)]))

    def whole_draft_ms(self, extra_calls: float, kind: str = "chain") -> float:
        """What a batch iteration costs more after one in which a sequence kept its whole draft: t_draft(2) -
        t_draft(1) (medians, at least 0) for a chain whose draft session leaves its last drafted token unfed (no
        extra draft call per iteration), else 0 (a tree's dry run is the tree loop itself; a head or prompt lookup
        has no curve)."""
        if kind != "chain" or extra_calls >= 0.5 or not {1, 2} <= {int(n) for n in self.t_draft}:
            return 0.0
        med = {int(n): float(np.median(v)) for n, v in self.t_draft.items()}
        return max(med[2] - med[1], 0.0)

    def config(self, key: str) -> dict:
        """The iteration cost parameters of a dry-run configuration: ``t_draft``, ``extra_calls``, ``scale``,
        ``t_verify``, ``overhead`` (ms), ``after_whole`` (:meth:`whole_draft_ms`) and ``iteration_ms`` (the dry
        run's mean iteration)."""
        if key not in self.dry:
            raise KeyError(f"no dry run for {key!r} in this profile (it has {sorted(self.dry)})")
        d = self._dry_columns(key)
        width, calls = d["width"], d["calls"]
        drafted = width if self.dry[key].get("kind", "chain") == "chain" else d.get("trace_calls", calls)
        verified = width > 0
        overhead = float(np.mean(d["wall_ms"] - d["draft_ms"] - d["target_ms"] - d["verify_ms"]))
        base = min(self.plain_overhead_ms(), overhead)
        extra = float(np.mean(calls[verified] - drafted[verified])) if verified.any() else 0.0
        own, pool = self._model_costs([key]), self.same_draft(key)
        shared = self._model_costs(pool)
        return {"t_draft": shared["t_draft"], "extra_calls": extra,
                "after_whole": self.whole_draft_ms(extra, self.dry[key].get("kind", "chain")),
                "scale": shared["scale"], "pooled_over": pool, "own_t_draft": own["t_draft"],
                "own_scale": own["scale"],
                "t_verify": float(d["verify_ms"][verified].mean()) if verified.any() else 0.0,
                "overhead": overhead, "overhead_base": base,
                "overhead_per_token": (overhead - base) / float(width.mean()) if width.mean() > 0 else 0.0,
                "iteration_ms": float(d["wall_ms"].mean()), "iterations": int(width.size)}

    def same_draft(self, key: str) -> list[str]:
        """The dry runs that draft as ``key`` does: the same kind (chain or tree) and the same draft (the key after
        its verifier: ``L=4``, ``2x2x1``, a controller's label), ``key`` among them. They make the same draft and
        target calls and differ only in the verifier (and v1 block verification's extra draft call per iteration),
        so :meth:`config` takes the draft call's cost and the target calls' scale from all of them together."""
        kind, draft = self.dry[key].get("kind", "chain"), key.split(":", 1)[-1]
        return sorted(k for k, v in self.dry.items() if v.get("kind", "chain") == kind and k.split(":", 1)[-1] == draft)

    def _dry_columns(self, key: str) -> dict:
        """A dry run's per-iteration columns as numbers, rounds set aside excluded."""
        keep = self._kept(self.dry[key])
        return {k: np.asarray(v, dtype=np.float64)[keep] for k, v in self.dry[key].items()
                if k not in ("kind", "round")}

    def _model_costs(self, keys) -> dict:
        """``t_draft`` (draft time per draft call) and ``scale`` (target time over the same widths' calls timed in
        isolation) over the iterations of the dry runs ``keys`` together."""
        cols = [self._dry_columns(k) for k in keys]
        calls = sum(float(c["calls"].sum()) for c in cols)
        draft = sum(float(c["draft_ms"].sum()) for c in cols)
        target = sum(float(c["target_ms"].sum()) for c in cols)
        isolated = sum(float(self.t_target_ms(c["width"] + 1).sum()) for c in cols)
        if not isolated > 0:  # a run too short to leave a costed iteration (a tiny --max-new-tokens)
            raise ValueError(f"the cost profile's dry runs of {', '.join(keys)} kept no iteration to cost; raise "
                             "--max-new-tokens so that each prompt runs a few iterations")
        return {"t_draft": draft / calls if calls > 0 else 0.0, "scale": target / isolated}

    def plain_overhead_ms(self) -> float:
        """Plain decoding's own work per step (its wall clock outside the target call), 0 where not recorded."""
        if "target_ms" not in self.plain:
            return 0.0
        gap = np.asarray(self.plain["step_ms"], dtype=np.float64) - np.asarray(self.plain["target_ms"], dtype=np.float64)
        return max(float(gap[self._kept(self.plain)].mean()), 0.0)

    def iteration_cost(self, key: str, config: dict | None = None):
        """``cost(calls, width)`` in ms for :func:`otspec.engine.predict.predict_wall_clock` (module docstring);
        ``config``: :meth:`config` of ``key`` where the caller has it already."""
        c = self.config(key) if config is None else config

        def cost(calls, width):
            calls, width = np.asarray(calls, dtype=np.float64), np.asarray(width, dtype=np.float64)
            drafted = width > 0
            return ((calls + c["extra_calls"] * drafted) * c["t_draft"] + c["scale"] * self.t_target_ms(width + 1)
                    + c["t_verify"] * drafted + c["overhead_base"] + c["overhead_per_token"] * width)

        return cost

    def factors(self, key: str, draws: int, seed: int = 0, rounds: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Relative bootstrap resamples (plain step, dry-run iteration) of the profile's means, ``draws`` each; the
        speedup reads their ratio. With rounds, each draw averages ``rounds`` ratios from :meth:`round_ratios`
        (default: as many as the profile kept of ``key``: the uncertainty of its mean; a run's timing rounds: that
        run's own timing noise) and the plain factors are 1. Four rounds of one dry run say too little of its spread
        (in llm_ngram of 2026-11-29 such intervals ran from +-4 to +-12 % for configurations of the same noise), so
        the ratios are pooled over the dry runs. Without rounds the timed steps and iterations are resampled on their
        own (for a run's noise: all 1)."""
        rng = np.random.default_rng(seed)
        if rounds is not None and int(rounds) < 1:
            raise ValueError(f"rounds: expected a positive number of rounds, got {rounds}")
        if "round" not in self.plain or "round" not in self.dry[key]:
            if rounds is not None:
                return np.ones(draws), np.ones(draws)
            plain = np.asarray(self.plain["step_ms"], dtype=np.float64)
            wall = np.asarray(self.dry[key]["wall_ms"], dtype=np.float64)
            return tuple(x[rng.integers(0, x.size, size=(draws, x.size))].mean(axis=1) / x.mean() for x in (plain, wall))
        pool = self.round_ratios()
        if pool.size == 0:
            return np.ones(draws), np.ones(draws)
        own = np.setdiff1d(np.intersect1d(self.dry[key]["round"], self.plain["round"]), self.disturbed_rounds()).size
        size = own if rounds is None else int(rounds)
        return np.ones(draws), pool[rng.integers(0, pool.size, size=(draws, max(size, 1)))].mean(axis=1)

    def round_ratios(self) -> np.ndarray:
        """Each dry run's mean iteration over plain decoding's mean step per round (rounds set aside excluded) over
        its mean across rounds, pooled over the dry runs of two rounds or more; the deviations are widened by
        sqrt(R / (R - 1)) for R rounds (deviations from a mean of R values are that much narrower), in log space where
        the linear widening would make a ratio <= 0 (a round several times faster than the other on a disturbed
        machine): every ratio stays positive."""
        plain_round = np.asarray(self.plain.get("round", []), dtype=np.int64)
        step = np.asarray(self.plain["step_ms"], dtype=np.float64)
        bad, out = self.disturbed_rounds(), []
        for columns in self.dry.values():
            of = np.asarray(columns.get("round", []), dtype=np.int64)
            wall = np.asarray(columns["wall_ms"], dtype=np.float64)
            ids = [k for k in np.unique(of).tolist() if k not in bad and (plain_round == k).any()]
            if len(ids) < 2:
                continue
            y = np.array([wall[of == k].mean() / step[plain_round == k].mean() for k in ids])
            u, widen = y / y.mean(), np.sqrt(len(ids) / (len(ids) - 1))
            linear = 1.0 + (u - 1.0) * widen
            out.append(np.where(linear > 0, linear, u**widen))  # a ratio far below 1 is widened in log space
        return np.concatenate(out) if out else np.zeros(0)

    def monotone(self) -> dict:
        """Whether t_target(n) grows with n up to noise: ``{"monotone", "exceptions"}`` (pairs n, n + 1 whose
        medians fall by more than the noise: :data:`MONOTONE_TOLERANCE` below n's interval)."""
        curve = self.target_curve()
        ns = sorted(curve)
        bad = [[a, b] for a, b in zip(ns, ns[1:], strict=False)
               if curve[b]["median"] < curve[a]["low"] - MONOTONE_TOLERANCE * curve[a]["median"]]
        return {"monotone": not bad, "exceptions": bad, "tolerance": MONOTONE_TOLERANCE}

    # --------------------------------------------------------------------------------------------- JSON
    def to_json(self) -> dict:
        """The record's ``profile``: the raw samples (``samples``) and their summaries — ``t_target_ms`` {n: median},
        ``t_target_ms_interval`` {n: {low, high}}, ``t_draft_ms`` (per configuration and the chain runs' mean),
        ``plain_ms_per_step``, ``configs`` (:meth:`config` per dry run) and ``monotone``."""
        curve = self.target_curve()
        configs = {k: self.config(k) for k in self.dry}
        chain_drafts = [c["t_draft"] for k, c in configs.items() if self.dry[k].get("kind") == "chain" and c["t_draft"]]
        return {"kind": "cost_profile", "batch_size": self.batch_size, "max_new_tokens": self.max_new_tokens,
                "prompt_ids": list(self.prompt_ids), "context_tokens": self.context_tokens,
                "device": self.device, "cache": self.cache, "threads": self.threads, "seconds": self.seconds,
                "t_target_ms": {str(n): c["median"] for n, c in curve.items()},
                "t_target_ms_interval": {str(n): {"low": c["low"], "high": c["high"], "reps": c["n"]}
                                         for n, c in curve.items()},
                "t_draft_ms": float(np.mean(chain_drafts)) if chain_drafts else 0.0,
                "t_draft_width_ms": {str(n): float(np.median(v)) for n, v in sorted(self.t_draft.items())},
                "plain_ms_per_step": self.plain_step_ms(), "configs": configs, "monotone": self.monotone(),
                "disturbed_rounds": self.disturbed_rounds(), "round_tolerance": ROUND_TOLERANCE,
                "interleaved_with_runs": self.interleaved,
                "samples": {"t_target": {str(n): list(map(float, v)) for n, v in self.t_target.items()},
                            "t_draft": {str(n): list(map(float, v)) for n, v in self.t_draft.items()},
                            "plain": self.plain, "dry": self.dry}}

    @classmethod
    def from_json(cls, data: dict) -> CostProfile:
        if not isinstance(data, dict) or data.get("kind") != "cost_profile":
            raise ValueError("profile: expected a cost profile's JSON (kind = cost_profile), e.g. a record's 'profile'")
        s = data["samples"]
        return cls(int(data["batch_size"]), int(data["max_new_tokens"]), list(data["prompt_ids"]),
                   float(data["context_tokens"]), t_target={int(n): list(v) for n, v in s["t_target"].items()},
                   plain=dict(s["plain"]), dry=dict(s["dry"]), device=data.get("device", "cpu"),
                   cache=data.get("cache", "dynamic"), threads=int(data.get("threads", 1)),
                   seconds=float(data.get("seconds", 0.0)),
                   t_draft={int(n): list(v) for n, v in s.get("t_draft", {}).items()},
                   interleaved=bool(data.get("interleaved_with_runs", False)))
