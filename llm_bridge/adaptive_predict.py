"""The SpecDec++ frontier's predictions (``python -m llm_bridge.adaptive``), made on the prediction prompts.

:func:`frontier_predictor` measures the cost profile with a zero-acceptance dry run of every policy (fixed K, the
threshold or confidence rules) and logs plain decoding there; it returns ``predict(policy, value)``: the decode
engine's replay of fixed K and of the confidence rule (which reads the draft's own rows) over that log, and of the
learned head's threshold rules on a draft model (:func:`head_rule_pairs`): the head is read on the draft's hidden
state at each logged token (:func:`~llm_bridge.logrows.draft_states_incremental`) and its rule decides, block start
by block start, how deep the replay drafts. On a feature-level draft head (EAGLE) the learned rule reads the head's
own state by draft depth, which is not replayed: those rows get no prediction and say so.
"""

from __future__ import annotations

import numpy as np

from otspec.engine.controllers import as_controller
from otspec.engine.heads import LearnedHeadController
from otspec.engine.predict import METHOD, predict_from_log, predict_from_pairs
from otspec.sources import DepthPositionalSource
from otspec.verifiers import TokenVerify

from .calibrate import calibrate
from .logrows import draft_states_incremental, record_rows
from .validate import PREDICTION_SEED_OFFSET

__all__ = ["HEAD_RULE_METHOD", "NO_HEAD_RULE", "frontier_predictor", "head_rule_pairs", "learned_rule_pairs", "longest_draft", "policy_key",
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


def frontier_predictor(pair, prediction_prompts, plan, controller, max_new_tokens, *, sampling, seed, batch_size, rule,
                       units: int):
    """(predict(policy, value) -> LogPrediction or None, the cost profile or None), both made on
    ``prediction_prompts``; ``plan`` lists the frontier's (policy, value), ``controller(policy, value)`` makes each
    policy's draft length or controller, and ``units`` is the number of measured prompts (the prediction interval is
    for a run over that many)."""
    if not prediction_prompts:
        return (lambda *_: None), None
    profile, tokens = calibrate(pair, prediction_prompts, max_new_tokens,
                                chains=[(policy_key(p, v), TokenVerify(), controller(p, v)) for p, v in plan],
                                sampling=sampling, batch_size=batch_size, cache="auto", seed=seed + PREDICTION_SEED_OFFSET)
    log = states = None
    if pair.drafter.reads_target_features:  # a feature head: its rows by draft depth along the run
        from .head_replays import HEAD_METHOD, head_replays

        states = [] if rule == "specdecpp" and pair.drafter.kind == "eagle" else None
        replays = head_replays(pair, prediction_prompts, tokens, longest_draft(plan, controller), sampling=sampling,
                               states=states)

        def run(draft):
            if isinstance(draft, LearnedHeadController):  # the rule on the head's own state at every draft depth
                stops = [draft.head.predict(S.reshape(-1, S.shape[-1])).reshape(S.shape[:2]) for S in states]
                return predict_from_pairs(learned_rule_pairs(replays, stops, draft), TokenVerify(), draft.max_length,
                                          seed=seed, units=units,
                                          method=HEAD_METHOD.replace("; interval:", HEAD_RULE_NOTE + "; interval:", 1))
            return predict_from_pairs(replays, TokenVerify(), draft, seed=seed, units=units, method=HEAD_METHOD)
    elif not pair.drafter.deterministic:
        log = record_rows(pair, prediction_prompts, tokens, sampling=sampling, batch_size=batch_size,
                          meta={"seed": seed + PREDICTION_SEED_OFFSET, "use": "predictions of the frontier (other "
                                "prompts than the measured runs')"})

        def run(draft):
            return predict_from_log(log, TokenVerify(), draft, seed=seed, units=units)
    else:
        return (lambda *_: None), profile

    stops = []

    def predict(policy, value):
        if policy == "fixed":
            return run(int(value))
        if rule == "confidence":  # it reads the draft's own rows: the replay runs it as the loop does
            return run(controller(policy, value))
        ctrl = controller(policy, value)
        if log is None:
            return run(ctrl) if states else None
        if not stops:  # P-hat at every logged token, once: the head is the same for every threshold row
            kept = [(p, t) for p, t in zip(prediction_prompts, tokens, strict=True) if len(t)]
            stops.extend(ctrl.head.predict(x) for x in draft_states_incremental(
                pair.drafter, [p for p, _ in kept], [t for _, t in kept], sampling, batch_size))
        return predict_from_pairs(head_rule_pairs(log, stops, ctrl), TokenVerify(), ctrl.max_length, seed=seed,
                                  units=units, method=HEAD_RULE_METHOD)

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


def learned_rule_pairs(replays, stop_probs, ctrl):
    """Depth replays (draft, target) of a feature head (:func:`~llm_bridge.head_replays.head_replays`) with the
    draft stopping where ``ctrl`` would, given P-hat ``stop_probs[i]`` (D, T) by depth along path i."""
    for (draft, target), P in zip(replays, stop_probs, strict=True):
        rows = draft.by_depth[np.minimum(np.arange(ctrl.max_length), draft.by_depth.shape[0] - 1)]
        yield DepthPositionalSource(rows, rule_proposals(P, ctrl.threshold, ctrl.max_length, lagged=ctrl.lagged)), \
            target


def head_rule_pairs(log, stop_probs, ctrl):
    """The log's (draft, target) pairs with the draft stopping where ``ctrl`` (a
    :class:`~otspec.engine.heads.LearnedHeadController`) would, given P-hat ``stop_probs[i]`` (T,) along path i
    (:func:`rule_proposals`)."""
    for i in range(log.n_paths):
        draft, target = log.path_pair(i, "overlap", compact=True)
        proposes = rule_proposals(stop_probs[i], ctrl.threshold, ctrl.max_length, lagged=ctrl.lagged)
        yield DepthPositionalSource(np.broadcast_to(draft.rows, (ctrl.max_length, *draft.rows.shape)), proposes), target


def longest_draft(plan, controller) -> int:
    """The longest draft any policy of ``plan`` makes."""
    return max(as_controller(controller(p, v)).max_length for p, v in plan)
