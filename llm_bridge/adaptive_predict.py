"""The SpecDec++ frontier's predictions (``python -m llm_bridge.adaptive``), made on the prediction prompts.

:func:`frontier_predictor` measures the cost profile with a zero-acceptance dry run of every policy (fixed K, the
threshold or confidence rules) and logs plain decoding there; it returns ``predict(policy, value)``: the decode
engine's replay of fixed K and of the confidence rule (which reads the draft's own rows) over that log. The learned
head's threshold rules read the draft's hidden states, which a log of rows does not hold: they get no prediction.
"""

from __future__ import annotations

from otspec.engine.controllers import as_controller
from otspec.engine.predict import predict_from_log, predict_from_pairs
from otspec.verifiers import TokenVerify

from .calibrate import calibrate
from .logrows import record_rows
from .validate import PREDICTION_SEED_OFFSET

__all__ = ["frontier_predictor", "longest_draft", "policy_key"]


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
    if pair.drafter.reads_target_features:  # a feature head: its rows by draft depth along the run
        from .head_replays import HEAD_METHOD, head_replays

        replays = head_replays(pair, prediction_prompts, tokens, longest_draft(plan, controller), sampling=sampling)

        def run(draft):
            return predict_from_pairs(replays, TokenVerify(), draft, seed=seed, units=units, method=HEAD_METHOD)
    elif not pair.drafter.deterministic:
        log = record_rows(pair, prediction_prompts, tokens, sampling=sampling, batch_size=batch_size,
                          meta={"seed": seed + PREDICTION_SEED_OFFSET, "use": "predictions of the frontier (other "
                                "prompts than the measured runs')"})

        def run(draft):
            return predict_from_log(log, TokenVerify(), draft, seed=seed, units=units)
    else:
        return (lambda *_: None), profile

    def predict(policy, value):
        if policy == "fixed":
            return run(int(value))
        if rule == "confidence":  # it reads the draft's own rows: the replay runs it as the loop does
            return run(controller(policy, value))
        return None

    return predict, profile


def longest_draft(plan, controller) -> int:
    """The longest draft any policy of ``plan`` makes."""
    return max(as_controller(controller(p, v)).max_length for p, v in plan)
