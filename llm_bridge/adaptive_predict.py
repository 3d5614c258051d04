"""The SpecDec++ frontier's predictions (``python -m llm_bridge.adaptive``), made on the prediction prompts.

:func:`frontier_predictor` measures the cost profile with a zero-acceptance dry run of every policy (fixed K, the
threshold or confidence rules) and logs plain decoding there; it returns ``predict(policy, value)``: the decode
engine's replay of fixed K and of the confidence rule (which reads the draft's own rows) over that log, and of the
learned head's threshold rules (:func:`rule_pairs`): the head is read on the draft's hidden
state at each logged token (:func:`~llm_bridge.logrows.draft_states_incremental`) and its rule decides, block start
by block start, how deep the replay drafts; on an EAGLE head it is read on the head's own state at each draft depth.
A drafter whose state the replay does not hold (Medusa's heads) gets no prediction of the rule, and says so.
"""

from __future__ import annotations

import numpy as np

from otspec.engine.controllers import as_controller
from otspec.engine.predict import METHOD, ReplayPlan, predict_from_pairs
from otspec.sources import DepthPositionalSource
from otspec.verifiers import TokenVerify

from .calibrate import calibrate, calibration_batches
from .logrows import draft_states_incremental
from .options import DecodeOptions
from .replays import more_paths, replay_sources
from .validate import PREDICTION_SEED_OFFSET

__all__ = ["HEAD_RULE_METHOD", "NO_HEAD_RULE", "frontier_predictor", "longest_draft", "policy_key", "rule_pairs",
           "rule_proposals"]

#: How a learned head's threshold row is predicted, as records state it.
HEAD_RULE_METHOD = ("decode engine on both models' rows logged along an independent plain-decoding run, with the "
                    "learned head's rule replayed: P-hat read on the draft's hidden state at each logged token (the "
                    "plain path's token standing in for the drafted one), and a block started at s drafts its "
                    "(k + 1)-th token where 1 - prod P-hat over its first k tokens (lagged: k - 1) stays below h; "
                    "interval: " + METHOD.split("interval: ", 1)[-1])

NO_HEAD_RULE = ("no block-efficiency prediction for this rule: the learned head reads a state this drafter's replay "
                "does not hold")

HEAD_RULE_NOTE = ("; the learned head's rule replayed: P-hat read on the head's own state that makes each depth's row, "
                  "and a block drafts on while 1 - prod P-hat < h, as the loop's rule decides")


def policy_key(policy: str, value) -> str:
    """The cost profile's dry-run key of a frontier row."""
    return f"token:L={int(value)}" if policy == "fixed" else f"token:{policy}={value:g}"


def frontier_chains(plan, controller) -> list:
    """The cost profile's chain configurations of a frontier: (dry-run key, token verification, draft) per row."""
    return [(policy_key(p, v), TokenVerify(), controller(p, v)) for p, v in plan]


def frontier_calibration(pair, prediction_prompts, plan, controller, max_new_tokens, *, sampling, seed, batch_size):
    """The frontier's calibration rounds as a generator for ``llm_bridge.timing.timed_runs(beside=...)``, so the
    profile is measured in the same windows as the frontier's runs (:func:`frontier_predictor` takes its result)."""
    options = DecodeOptions(sampling=sampling, batch_size=batch_size, cache="auto", seed=seed + PREDICTION_SEED_OFFSET,
                            progress=False)
    return calibration_batches(pair, prediction_prompts, max_new_tokens, options, chains=frontier_chains(plan, controller))


def frontier_predictor(pair, prediction_prompts, plan, controller, frontier, *, units: int, rounds=None):
    """(predict(policy, value) -> LogPrediction or None, the cost profile or None), both made on
    ``prediction_prompts``; ``plan`` lists the frontier's (policy, value), ``controller(policy, value)`` makes each
    policy's draft length or controller, ``frontier`` (:class:`llm_bridge.adaptive.FrontierPlan`) gives the tokens,
    sampling, seed, batch size, rule and ``prediction_paths`` (plain paths of each prediction prompt the replays read,
    pooled per prompt: :func:`~llm_bridge.replays.more_paths`), and ``units`` is the number of measured prompts (the
    prediction interval is for a run over that many). ``rounds``: :func:`frontier_calibration`'s result, measured in
    turn with the runs; without it the profile is measured now, by itself."""
    max_new_tokens, sampling, seed, batch_size = (frontier.max_new_tokens, frontier.sampling, frontier.seed,
                                                  frontier.batch_size)
    rule, paths = frontier.rule, frontier.prediction_paths
    if not prediction_prompts:
        return (lambda *_: None), None
    options = DecodeOptions(sampling=sampling, batch_size=batch_size, cache="auto", seed=seed + PREDICTION_SEED_OFFSET)
    profile, tokens = calibrate(pair, prediction_prompts, max_new_tokens, options,
                                chains=frontier_chains(plan, controller), rounds=rounds)
    learned = rule == "specdecpp" and any(p != "fixed" for p, _ in plan)  # threshold rows on the learned head
    if pair.drafter.deterministic:  # prompt lookup has no frontier of its own
        return (lambda *_: None), profile
    head = pair.drafter.reads_target_features  # a feature head with states of its own (EAGLE): its states by depth
    states = [] if learned and head and pair.drafter.has_hidden_states else None
    prompts, tokens = more_paths(pair, prediction_prompts, tokens, max_new_tokens, paths, sampling=sampling,
                                 batch_size=batch_size, seed=seed + PREDICTION_SEED_OFFSET)
    replays = replay_sources(pair, prompts, tokens, longest_draft(plan, controller), sampling=sampling,
                             batch_size=batch_size, states=states,
                             meta={"seed": seed + PREDICTION_SEED_OFFSET, "use": "predictions of the frontier "
                                   "(other prompts than the measured runs')"})
    pairs, method = replays.path_pairs, replays.method
    if head:
        rule_method = method.replace("; interval:", HEAD_RULE_NOTE + "; interval:", 1)
    else:  # a draft model: the learned head reads its hidden state at each logged token
        kept = [(p, t) for p, t in zip(prompts, tokens, strict=True) if len(t)]  # the log's paths
        states = list(draft_states_incremental(pair.drafter, [p for p, _ in kept], [t for _, t in kept], sampling,
                                               batch_size)) if learned else None
        rule_method = HEAD_RULE_METHOD
    stops = []  # P-hat along every path, once: the head is the same for every threshold row

    def predict(policy, value):
        draft = int(value) if policy == "fixed" else controller(policy, value)
        if policy == "fixed" or rule == "confidence":  # the confidence rule reads the draft's own rows: replayed as is
            return predict_from_pairs(pairs(), TokenVerify(), draft,
                                      ReplayPlan(seed=seed, units=units, paths_per_prompt=paths), method=method)
        if states is None:
            return None
        if not stops:
            stops.extend(draft.head.predict(S.reshape(-1, S.shape[-1])).reshape(S.shape[:-1]) for S in states)
        return predict_from_pairs(rule_pairs(pairs(), stops, draft), TokenVerify(), draft.max_length,
                                  ReplayPlan(seed=seed, units=units, paths_per_prompt=paths), method=rule_method)

    return predict, profile


def rule_proposals(stop_probs, threshold: float, max_length: int, *, lagged: bool) -> np.ndarray:
    """Where the learned head's rule drafts, as a (max_length, T) bool array: entry (d, t) says whether a block that
    started at t - d drafts its (d + 1)-th token (at t).

    ``stop_probs`` (T,) or (D, T): P-hat read on the state that the draft's row at position t (and depth d) is made
    from. After its k-th token a block that started at s multiplies P-hat of the state at that token, the one that
    makes the row at (k, s + k) (lagged: the state handed over with p_k, at token k - 1, nothing at k = 1), and keeps
    drafting while 1 - the product < ``threshold``, as :class:`~otspec.engine.heads.LearnedHeadController` decides
    in the loop."""
    P = np.asarray(stop_probs, dtype=np.float64)
    P = P[None] if P.ndim == 1 else P
    D, T = P.shape
    out = np.zeros((max_length, T), dtype=bool)
    out[0] = True
    for s in range(T):
        product = 1.0
        for d in range(1, min(max_length - 1, T - 1 - s) + 1):
            if not (lagged and d == 1):
                k = d - int(lagged)
                product *= P[min(k, D - 1), s + k]
            if not (1.0 - product) < threshold:
                break
            out[d, s + d] = True
    return out


def rule_pairs(pairs, stop_probs, ctrl):
    """Replays (draft, target) with the draft stopping where ``ctrl`` (a
    :class:`~otspec.engine.heads.LearnedHeadController`) would, given P-hat ``stop_probs[i]`` along path i: (T,) on a
    draft model's states, (D, T) on a feature head's by draft depth (:func:`rule_proposals`). A positional draft
    (a logged path) drafts from the same row at every depth; a depth-positional one (a head's replay) keeps its own."""
    for (draft, target), P in zip(pairs, stop_probs, strict=True):
        rows = draft.by_depth if isinstance(draft, DepthPositionalSource) else draft.rows[None]
        rows = rows[np.minimum(np.arange(ctrl.max_length), rows.shape[0] - 1)]
        yield DepthPositionalSource(rows, rule_proposals(P, ctrl.threshold, ctrl.max_length, lagged=ctrl.lagged)), \
            target


def longest_draft(plan, controller) -> int:
    """The longest draft any policy of ``plan`` makes."""
    return max(as_controller(controller(p, v)).max_length for p, v in plan)
