"""The peer baseline: Hugging Face assisted generation on the same pair, prompts and processing.

``target.generate(..., assistant_model=draft)`` for a model drafter, ``prompt_lookup_num_tokens``
for the n-gram drafter; one prompt at a time (assisted generation takes batch 1). Calls are
counted with forward hooks: each target call is one verification iteration emitting the accepted
drafts plus one token, so accepted = generated − target calls and the acceptance rate is
accepted / drafted, with drafted = the draft model's forward calls (one per drafted token; prompt
lookup drafts without a model, so its rate is ``None``). ``min_new_tokens`` keeps every run at exactly
``max_new_tokens`` tokens (it masks the end-of-text token until then, which the otspec loop does not
need to do). Hugging Face's timings include its prefill, so the same ``generate`` without a draft is
timed too (``plain_tokens_per_s``) and ``speedup`` is the ratio of the two.

* :func:`hf_batches` is the same generation one batch of prompts at a time, in the style of
  :func:`llm_bridge.loop.plain_batches`: it runs beside otspec's runs in :func:`llm_bridge.loop.interleave` /
  :func:`llm_bridge.runs.timed_runs`, so Hugging Face and otspec are timed in the same windows (ABAB…);
* :func:`choose_peer` picks the draft Hugging Face assisted generation runs best with for a target
  (:data:`PEER_DRAFTS`), timed on a few calibration prompts against Hugging Face's plain ``generate``;
* :func:`peer_record` makes the record's ``hf_assisted`` entry from an assisted and a plain
  :func:`hf_batches` run that went in turn, with a paired bootstrap over the timing rounds
  (:func:`round_bootstrap_ci`, which does not depend on Hugging Face and serves otspec's runs too).

``hf_decode_step`` is the reference for otspec's own decode step: Hugging Face's plain ``generate``
with the matching cache (``cache_implementation="static"`` for static and compiled caches; compiled
is Hugging Face's automatic ``torch.compile`` of the static-cache forward, forced on CPU too). It
times ``generate`` at two lengths and takes the difference, so the prefill and the call overhead
drop out and what is left is milliseconds per decoded token, comparable with the otspec baseline's
``ms_per_token`` (whose timer also starts after the prefill).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from .drafters import NGramDrafter, Pair, make_drafter
from .loop import Tick, chunks, finish, interleave
from .sampling import DEFAULT_SAMPLING, Sampling

__all__ = ["PEER_DRAFTS", "HFResult", "choose_peer", "hf_assisted", "hf_batches", "hf_decode_step", "peer_entries",
           "peer_record", "peer_runs", "round_bootstrap_ci"]

#: The candidate drafts of Hugging Face assisted generation for a target, as :func:`make_drafter` names them:
#: prompt lookup (``prompt_lookup_num_tokens``), then draft models (``assistant_model``).
PEER_DRAFTS = ("ngram", "int8", "distilled")

#: Draft tokens prompt lookup proposes per iteration (Hugging Face's ``prompt_lookup_num_tokens``).
PROMPT_LOOKUP_TOKENS = 8

#: How :func:`choose_peer` chooses, as its result states it.
CHOICE_METHOD = ("Hugging Face assisted generation with each candidate draft and Hugging Face's plain generate, "
                 "batch 1, on calibration prompts (not the measured ones), after an untimed warm-up of one prompt "
                 "each; timed prompt by prompt in turn (one round per prompt: plain, then every candidate); the "
                 "highest tokens/s wins; speedup: over plain generate in the same rounds, with a paired bootstrap "
                 "over the rounds")

#: Failures that mean a draft cannot serve as Hugging Face's assistant (missing weights, a device it does not run
#: on, a vocabulary that does not fit, a head instead of a model); anything else is a bug and propagates.
_UNUSABLE = (OSError, ValueError, ImportError, RuntimeError, TypeError)


@dataclass
class HFResult:
    """What a :func:`hf_batches` run generated and measured (the counterpart of :class:`llm_bridge.loop.BridgeResult`).

    Attributes
    ----------
    tokens : list of int arrays
        The generated continuation of each prompt.
    rounds : list of (generated tokens, seconds)
        One entry per batch of prompts, in order; ``seconds`` is the wall-clock of that batch's ``generate`` calls.
    target_calls, draft_calls : int
        Forward calls of the target and of the draft model (0 for prompt lookup and plain generation).
    mode : str
        ``"assistant model"``, ``"prompt lookup"`` or ``"plain"``.
    draft : str or None
        The drafter's name (``None`` for plain generation).
    """

    tokens: list = field(default_factory=list)
    rounds: list = field(default_factory=list)
    target_calls: int = 0
    draft_calls: int = 0
    mode: str = "plain"
    draft: str | None = None

    @property
    def generated(self) -> int:
        return int(sum(len(t) for t in self.tokens))

    @property
    def seconds(self) -> float:
        return float(sum(s for _, s in self.rounds))

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.seconds

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens (accepted = generated − target calls); ``None`` without draft-model calls."""
        return (self.generated - self.target_calls) / self.draft_calls if self.draft_calls else None


def hf_assisted(pair, prompts, max_new_tokens: int, *, sampling: Sampling = DEFAULT_SAMPLING, seed: int = 0) -> dict:
    """{"tokens_per_s", "acceptance_rate", "plain_tokens_per_s", "speedup", "target_calls", "draft_calls",
    "generated", "mode"} over ``prompts``."""
    out = _generate(pair, prompts, max_new_tokens, sampling, seed, assisted=True)
    plain = _generate(pair, prompts, max_new_tokens, sampling, seed, assisted=False)
    out["plain_tokens_per_s"] = plain["tokens_per_s"]
    out["speedup"] = out["tokens_per_s"] / plain["tokens_per_s"]
    return out


def hf_decode_step(pair, prompts, max_new_tokens: int, *, sampling: Sampling = DEFAULT_SAMPLING, seed: int = 0,
                   cache: str = "dynamic") -> dict:
    """{"ms_per_token", "tokens_per_s", "cache"} (None and a "note" when timing noise swamps it): Hugging Face's plain ``generate`` per decoded token with the
    cache kind ``cache`` (dynamic, static or compiled), from the difference of runs of ``max_new_tokens`` and
    of 1 token; a compiled run is preceded by an untimed warm-up."""
    if cache not in ("dynamic", "static", "compiled"):
        raise ValueError(f"cache: expected dynamic, static or compiled, got {cache!r}")
    if max_new_tokens < 2:
        raise ValueError(f"max_new_tokens must be at least 2 to time a decode step, got {max_new_tokens}")
    extra = {}
    if cache != "dynamic":
        from transformers import CompileConfig

        extra["cache_implementation"] = "static"
        if cache == "static":
            extra["disable_compile"] = True
        elif pair.target.model.device.type != "cuda":  # Hugging Face compiles on CUDA only unless told
            config = CompileConfig(mode="default")
            config._compile_all_devices = True
            extra["compile_config"] = config
    if cache == "compiled":
        _generate(pair, prompts[:1], max_new_tokens, sampling, seed, assisted=False, extra=extra)
    long = _generate(pair, prompts, max_new_tokens, sampling, seed, assisted=False, extra=extra)
    short = _generate(pair, prompts, 1, sampling, seed, assisted=False, extra=extra)
    seconds = long["seconds"] - short["seconds"]
    steps = long["generated"] - short["generated"]
    if seconds <= 0:  # timing noise larger than the decode itself (tiny models): no number rather than a wrong one
        return {"ms_per_token": None, "tokens_per_s": None, "cache": cache,
                "note": "the decode steps timed at zero or less against a 1-token run; use more tokens"}
    return {"ms_per_token": 1e3 * seconds / steps, "tokens_per_s": steps / seconds, "cache": cache}


def hf_batches(pair, prompts, max_new_tokens: int, *, sampling: Sampling, seed: int = 0,
               batch_size: int | None = None, assisted: bool = True, **ignored):
    """Hugging Face ``generate`` as a ``*_batches`` generator: it yields a :class:`~llm_bridge.loop.Tick` after every
    prompt (a ``generate`` call cannot be suspended midway; a batch's last prompt ends with the round-end tick), and
    returns an :class:`HFResult` (drive it with :func:`llm_bridge.loop.finish` or :func:`~llm_bridge.loop.interleave`).

    Within a batch (:func:`llm_bridge.loop.chunks` of ``batch_size`` prompts, default all) the prompts go one at a
    time: assisted generation with ``pair``'s drafter, or the target's plain ``generate`` when ``assisted`` is false.
    Prompt i (over all batches) is drawn with seed ``seed + i``, so the tokens do not depend on the batching. The
    other keyword arguments :func:`llm_bridge.runs.timed_runs` passes every run (``cache``, ``progress``, …) are
    accepted and ignored: Hugging Face chooses its own cache for assisted generation."""
    del ignored
    result = HFResult(mode=_mode(pair, assisted), draft=pair.drafter.name if assisted else None)
    for offset, chunk in chunks(prompts, batch_size):
        generated, seconds = 0, 0.0
        for j, prompt in enumerate(chunk):  # a prompt at a time, so that interleave can pair them with other runs
            part = _run(pair, [prompt], max_new_tokens, sampling, seed + offset + j, assisted)
            result.tokens += part["tokens"]
            generated += int(sum(len(t) for t in part["tokens"]))
            seconds += part["seconds"]
            result.target_calls += part["target"]
            result.draft_calls += part["draft"]
            if j + 1 < len(chunk):  # the batch's last prompt ends at the round-end tick below
                yield Tick((offset + j + 1) / len(prompts))
        result.rounds.append((generated, seconds))
        yield Tick((offset + len(chunk)) / len(prompts), round_end=True)
    return result


def choose_peer(target, prompts, max_new_tokens: int, *, sampling: Sampling, seed: int = 0, drafts=PEER_DRAFTS,
                make=None):
    """The draft Hugging Face assisted generation runs fastest with for ``target`` (a ``LoadedModel``, or a
    :class:`~llm_bridge.drafters.Pair` whose target is taken).

    Each of ``drafts`` is made by ``make(name, target)`` (default :func:`llm_bridge.drafters.make_drafter`); one that
    cannot be made (missing weights, int8 off the CPU, a vocabulary that does not fit, a feature-level head rather
    than a model) or whose ``generate`` fails in the warm-up is skipped, with its reason. The others are timed on
    ``prompts`` — a few calibration prompts, not the measured ones — in turn with Hugging Face's plain ``generate``
    (:data:`CHOICE_METHOD`); the highest tokens/s wins.

    Returns ``(pair, info)``: the chosen :class:`Pair` (``None`` when every candidate was skipped) and the JSON
    object ``{"chosen", "candidates": {name: {"tokens_per_s", "speedup", "speedup_ci", "acceptance_rate", "mode",
    "draft", "skipped"}}, "plain_tokens_per_s", "prompts", "max_new_tokens", "load_average", "method"}``, where
    ``load_average`` is the machine's 1-minute load average when the choice started and ended (other work on the
    machine makes a calibration of a few prompts noisy; ``speedup_ci`` shows how much)."""
    if not len(prompts):
        raise ValueError("choose_peer needs at least one calibration prompt")
    if int(max_new_tokens) != max_new_tokens or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    target = target.target if isinstance(target, Pair) else target
    make = make_drafter if make is None else make
    common = {"sampling": sampling, "seed": seed, "batch_size": 1}
    load_start = _load_average()
    plain = Pair(target, None)
    finish(hf_batches(plain, prompts[:1], max_new_tokens, assisted=False, **common))  # untimed warm-up
    skipped, pairs = {}, {}
    for name in drafts:
        try:
            pair = Pair(target, make(name, target))
            _mode(pair, True)
        except _UNUSABLE as err:
            skipped[name] = f"cannot be made for Hugging Face assisted generation: {type(err).__name__}: {err}"
            continue
        try:
            finish(hf_batches(pair, prompts[:1], max_new_tokens, **common))  # untimed warm-up, and a smoke test
        except _UNUSABLE as err:
            skipped[name] = f"Hugging Face assisted generation failed: {type(err).__name__}: {err}"
            continue
        pairs[name] = pair
    names = list(pairs)
    base, *results = interleave([hf_batches(plain, prompts, max_new_tokens, assisted=False, **common)]
                                + [hf_batches(pairs[n], prompts, max_new_tokens, **common) for n in names])
    candidates = {}
    for name in drafts:
        if name in skipped:
            candidates[name] = {"tokens_per_s": None, "speedup": None, "speedup_ci": None, "acceptance_rate": None,
                                "mode": None, "draft": None, "skipped": skipped[name]}
    for name, r in zip(names, results, strict=True):
        ci = round_bootstrap_ci(r.rounds, base.rounds, draws=2000, seed=seed)
        candidates[name] = {"tokens_per_s": r.tokens_per_s, "speedup": r.tokens_per_s / base.tokens_per_s,
                            "speedup_ci": {k: ci[k] for k in ("low", "high", "method")},
                            "acceptance_rate": r.acceptance_rate, "mode": r.mode, "draft": r.draft, "skipped": None}
    chosen = max(names, key=lambda n: candidates[n]["tokens_per_s"]) if names else None
    info = {"chosen": chosen, "candidates": {n: candidates[n] for n in drafts},
            "plain_tokens_per_s": base.tokens_per_s, "prompts": len(prompts), "max_new_tokens": int(max_new_tokens),
            "load_average": {"start": load_start, "end": _load_average()}, "method": CHOICE_METHOD}
    return (pairs[chosen] if chosen is not None else None), info


def peer_record(assisted_result, plain_result, baseline_rounds=None) -> dict:
    """The record's ``hf_assisted`` entry from an assisted and a plain :func:`hf_batches` run decoded in turn.

    ``speedup`` is assisted over plain ``generate``, ``rounds`` its value per timing round and ``speedup_ci`` the
    paired round bootstrap of :func:`round_bootstrap_ci`. With ``baseline_rounds`` (otspec plain sampling's rounds,
    e.g. ``timed_runs(...).baseline["rounds"]``: ``{"generated", "seconds"}`` entries) that pair up with the runs'
    rounds (as many), ``speedup_vs_baseline`` and ``speedup_vs_baseline_ci`` compare with otspec's plain sampling the
    same way; rounds that do not pair up give ``None`` for both and the reason in ``speedup_vs_baseline_skipped``."""
    a, p = assisted_result, plain_result
    if len(a.rounds) != len(p.rounds):
        raise ValueError(f"the assisted run has {len(a.rounds)} timing rounds and the plain run {len(p.rounds)}: "
                         "peer_record takes two hf_batches runs decoded in turn over the same batches")
    ci = round_bootstrap_ci(a.rounds, p.rounds)
    out = {"tokens_per_s": a.tokens_per_s, "acceptance_rate": a.acceptance_rate,
           "plain_tokens_per_s": p.tokens_per_s, "speedup": a.tokens_per_s / p.tokens_per_s,
           "target_calls": a.target_calls, "draft_calls": a.draft_calls, "generated": a.generated, "mode": a.mode,
           "draft": a.draft, "prompts": len(a.tokens),
           "rounds": [(ga / sa) / (gp / sp) for (ga, sa), (gp, sp) in zip(a.rounds, p.rounds, strict=True)],
           "speedup_ci": {k: ci[k] for k in ("low", "high", "median", "method")},
           "timing_rounds": [{"generated": g, "seconds": s} for g, s in a.rounds],
           "plain_timing_rounds": [{"generated": g, "seconds": s} for g, s in p.rounds]}
    if baseline_rounds is not None:
        base = _round_array(baseline_rounds, "baseline_rounds")
        if len(base) != len(a.rounds):
            out.update(speedup_vs_baseline=None, speedup_vs_baseline_ci=None,
                       speedup_vs_baseline_skipped=f"otspec's baseline has {len(base)} timing rounds and the Hugging "
                       f"Face runs {len(a.rounds)}: they were not decoded in turn over the same batches")
        else:
            ci = round_bootstrap_ci(a.rounds, base)
            out["speedup_vs_baseline"] = float(a.tokens_per_s / (base[:, 0].sum() / base[:, 1].sum()))
            out["speedup_vs_baseline_ci"] = {k: ci[k] for k in ("low", "high", "median", "method")}
    return out


def peer_runs(peer, prompts, max_new_tokens: int) -> list:
    """The peer's two runs for :func:`llm_bridge.runs.timed_runs`, to decode each batch in turn with the others:
    assisted generation with ``peer``'s draft, then the target's plain ``generate`` (``[]`` without a peer)."""
    if peer is None:
        return []
    return [partial(hf_batches, peer, prompts, max_new_tokens, assisted=True),
            partial(hf_batches, peer, prompts, max_new_tokens, assisted=False)]


def peer_entries(choice, results, baseline_rounds) -> dict:
    """A record's peer keys from :func:`choose_peer`'s ``choice`` and the results of :func:`peer_runs`:
    ``hf_assisted`` (:func:`peer_record` with the choice), or ``hf_assisted`` ``None`` and ``hf_assisted_skipped``
    (why) when no draft could be used; ``{}`` when no peer was sought (``choice`` is ``None``)."""
    if choice is None:
        return {}
    if results is None:
        return {"hf_assisted": None, "hf_assisted_skipped": "no draft Hugging Face assisted generation takes for this "
                "target: " + "; ".join(f"{k}: {v['skipped']}" for k, v in choice["candidates"].items())}
    return {"hf_assisted": {**peer_record(*results, baseline_rounds), "choice": choice}}


def round_bootstrap_ci(num_rounds, den_rounds, *, confidence: float = 0.95, draws: int = 4000, seed: int = 0) -> dict:
    """Paired bootstrap interval of a speedup over timing rounds.

    ``num_rounds`` and ``den_rounds`` are the rounds of two runs decoded in turn (round i of both in the same
    window): ``(generated, seconds)`` pairs or ``{"generated", "seconds"}`` entries, as many on each side. The
    statistic is (Σ generated / Σ seconds of ``num_rounds``) / (the same of ``den_rounds``); each draw resamples
    round indices with replacement and takes both sides' rounds at those indices. Returns ``{"low", "high",
    "median", "point", "rounds", "method"}``: the ``confidence`` percentile interval of ``draws`` draws (seeded),
    their median and the statistic on all rounds. With one round the interval is that round's ratio: rounds are the
    unit of the timing's spread, so more rounds are needed for an interval worth the name."""
    num, den = _round_array(num_rounds, "num_rounds"), _round_array(den_rounds, "den_rounds")
    if len(num) != len(den):
        raise ValueError(f"num_rounds has {len(num)} rounds and den_rounds {len(den)}: a paired bootstrap needs the "
                         "rounds of two runs decoded in turn, as many on each side")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    if int(draws) != draws or draws < 1:
        raise ValueError(f"draws must be a positive integer, got {draws!r}")
    idx = np.random.default_rng(seed).integers(0, len(num), size=(int(draws), len(num)))
    stats = _speed(num[idx]) / _speed(den[idx])
    tail = (1 - confidence) / 2
    low, median, high = (float(x) for x in np.quantile(stats, [tail, 0.5, 1 - tail]))
    return {"low": low, "high": high, "median": median, "point": float(_speed(num) / _speed(den)),
            "rounds": len(num),
            "method": f"paired bootstrap over timing rounds: round indices resampled with replacement, the same for "
                      f"both runs ({int(draws)} draws, seed {seed}); statistic (sum of generated tokens / sum of "
                      f"seconds) of one run over the other's; {100 * confidence:g} % percentile interval"}


def _load_average() -> float | None:
    """The 1-minute load average (``None`` where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def _speed(rounds: np.ndarray):
    """Σ generated / Σ seconds over the round axis (the second to last) of (..., rounds, 2) arrays."""
    return rounds[..., 0].sum(axis=-1) / rounds[..., 1].sum(axis=-1)


def _round_array(rounds, what: str) -> np.ndarray:
    """Timing rounds as a float (rounds, 2) array of (generated, seconds), checked."""
    rows = [(r["generated"], r["seconds"]) if isinstance(r, dict) else tuple(r) for r in rounds]
    if not rows:
        raise ValueError(f"{what} is empty: at least one timing round is needed")
    if any(len(r) != 2 for r in rows):
        raise ValueError(f"{what}: every round must be a (generated, seconds) pair")
    arr = np.asarray(rows, dtype=float)
    if not np.isfinite(arr).all():
        raise ValueError(f"{what}: generated tokens and seconds must be finite numbers")
    if (arr[:, 0] <= 0).any():
        raise ValueError(f"{what}: every round must have generated a positive number of tokens, got "
                         f"{arr[:, 0].tolist()}")
    if (arr[:, 1] <= 0).any():
        raise ValueError(f"{what}: every round must have taken positive seconds, got non-positive ones in "
                         f"{arr[:, 1].tolist()}")
    return arr


def _mode(pair, assisted: bool) -> str:
    """How ``generate`` runs for ``pair``; a ValueError when its drafter cannot be Hugging Face's assistant."""
    if not assisted:
        return "plain"
    if isinstance(pair.drafter, NGramDrafter):
        return "prompt lookup"
    if getattr(pair.drafter, "model", None) is None:
        name = getattr(pair.drafter, "name", type(pair.drafter).__name__)
        raise ValueError(f"Hugging Face assisted generation takes a draft model or prompt lookup; the drafter "
                         f"{name!r} has no model of its own (a feature-level head on the target, or no drafter)")
    return "assistant model"


def _generate(pair, prompts, max_new_tokens, sampling, seed, assisted: bool, extra=None) -> dict:
    """All of ``prompts`` in one go (:func:`hf_assisted`, :func:`hf_decode_step`): totals as a dict."""
    part = _run(pair, prompts, max_new_tokens, sampling, seed, assisted, extra)
    r = HFResult(part["tokens"], [(sum(len(t) for t in part["tokens"]), part["seconds"])], part["target"],
                 part["draft"], part["mode"])
    return {"tokens_per_s": r.tokens_per_s, "acceptance_rate": r.acceptance_rate, "target_calls": r.target_calls,
            "draft_calls": r.draft_calls, "generated": r.generated, "mode": r.mode, "seconds": r.seconds}


def _run(pair, prompts, max_new_tokens, sampling, first_seed, assisted: bool, extra=None) -> dict:
    """``generate`` for each of ``prompts`` in turn, prompt i seeded with ``first_seed + i``: {"tokens", "seconds",
    "target", "draft", "mode"}. The call counters are hooked for these prompts only, so the calls of runs decoded in
    between (the same target, in :func:`~llm_bridge.loop.interleave`) are not counted."""
    target = pair.target.model
    mode = _mode(pair, assisted)
    kwargs = {"max_new_tokens": max_new_tokens, "min_new_tokens": max_new_tokens, **sampling.hf_kwargs(),
              **(extra or {})}
    counted = {"target": target}
    if mode == "prompt lookup":
        kwargs["prompt_lookup_num_tokens"] = PROMPT_LOOKUP_TOKENS
    elif mode == "assistant model":
        kwargs["assistant_model"] = counted["draft"] = pair.drafter.model
    counts = dict.fromkeys(("target", "draft"), 0)
    hooks = [model.register_forward_hook(lambda *_, key=key: counts.__setitem__(key, counts[key] + 1))
             for key, model in counted.items()]
    pad = pair.tokenizer.pad_token_id if pair.tokenizer is not None else None
    tokens, seconds = [], 0.0
    try:
        for i, prompt in enumerate(prompts):
            out, dt = _generate_one(target, prompt, first_seed + i, pad, kwargs)
            tokens.append(out)
            seconds += dt
    finally:
        for h in hooks:
            h.remove()
    return {"tokens": tokens, "seconds": seconds, "mode": mode, **counts}


def _generate_one(model, prompt, seed: int, pad, kwargs) -> tuple[np.ndarray, float]:
    """One prompt's ``generate`` (batch 1): the generated token ids and the call's wall-clock."""
    import torch

    torch.manual_seed(seed)
    ids = torch.as_tensor([list(prompt)], device=model.device)
    cuda = model.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its per-call notes on min_new_tokens would fill a record's log
    t0 = time.perf_counter()
    try:
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), pad_token_id=pad, **kwargs)
    finally:
        hf_logging.set_verbosity(level)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return out[0, ids.shape[1]:].cpu().numpy(), seconds
