"""SpecDec++ on the real pair: the acceptance head on the draft's hidden states, the adaptive loop, the frontier.

``python -m llm_bridge.adaptive`` (spec ``specdecpp.md`` §5–7; p is the draft, q the target):

1. **Training data, the paper's construction (§7).** For each training prompt the target writes a
   response X_1..X_N (plain sampling, the run's processing); one draft pass on (prompt, X) gives
   p(·|prompt, X_{<i}) and one target pass q(·|prompt, X_{<i}); Y_i ~ p(·|prompt, X_{<i}) and the soft
   label P_i = min{1, q(Y_i|·)/p(Y_i|·)}; token mixing sets Z_i = X_i with probability r (15 %), else
   Y_i; one draft pass on (prompt, Z) gives e_i, the draft's final hidden state at Z_i, for every
   position with Z_i = Y_i (the head's rows). A feature head (EAGLE) drafts on its own predicted
   states, which no single pass reproduces: its rows come from its real drafting at a fixed K
   (:func:`head_training_data_on_policy`: e_k, its state after drafted token k, and P_k from the rows
   the token was drafted from and verified against).
2. **The head** — :class:`otspec.engine.heads.AcceptanceHead` (the paper's D = 0 head: a linear layer
   and a sigmoid) fitted on the weighted loss (12); held-out prompts give the binary KL diagnostic.
3. **The adaptive loop** — :func:`llm_bridge.loop.speculative_generate` with a
   :class:`~otspec.engine.heads.LearnedHeadController`, two ways: ``threshold``, Algorithm 1's
   convention (``lagged=True``: the features the draft call returns with p_k are e_{k−1}, the
   embedding at the previous drafted token; stop once 1 − ∏ P̂ exceeds h; every round drafts ≥ 2
   tokens), and ``threshold_unlagged`` (``lagged=False``: each drafted token is fed to the draft
   before the rule decides, so P̂_k reads e_k and the rule can stop after one token, at one more
   draft call per round). Only the unlagged rule compares like for like with fixed K = 1.
4. **The frontier** (the paper's Figure 3 on this pair): discard rate N_discarded / N against
   verification rate N_target / N for both threshold rules over h and for fixed K, with measured
   tokens/s and speedup over plain sampling (every run and plain sampling decode each batch of
   prompts in turn: interleaved timing rounds, with plain sampling again at the end as the timing
   check), and the cost model's latency (eq. (4)) from the measured t_draft and t_target. The peer,
   Hugging Face assisted generation with its fastest draft for the target, decodes the same batches in turn
   (``hf_assisted``; ``--no-hf`` leaves it out).

Writes the record ``figures/llm_adaptive_<name>.json`` (an :class:`otspec.engine.record.AdaptiveRecord`;
``python -m otspec.plot record`` and the report draw its ``.md`` and ``.png``); the head is saved as JSON
(``--save-head``).

Spec: ``docs/specdecpp.md``.
"""

from __future__ import annotations

import sys
from argparse import ArgumentTypeError
from dataclasses import dataclass

import numpy as np

from otspec.checks import MAX_DRAFT_LENGTH, check_real, check_size
from otspec.clitools import (
    ArgumentParser,
    comma_items,
    flags_that_apply,
    integer,
    integer_items,
    one_line,
    path_argument,
    positive_int,
    real,
    writable_file,
)
from otspec.engine.controllers import ConfidenceController
from otspec.engine.heads import LearnedHeadController
from otspec.engine.predict import paired_ratio_interval
from otspec.engine.record import AdaptiveRecord, code_version
from otspec.engine.rows import PolicyRun
from otspec.verifiers import TokenVerify

from .adaptive_predict import NO_HEAD_RULE, frontier_calibration, frontier_predictor, policy_key
from .drafters import load_pair
from .head_training import (
    L2_GRID,
    HeadData,
    check_head_file,
    choose_l2,
    head_training_data,
    head_training_data_on_policy,
    load_head,
    save_head,
    train_head,
)
from .loop import plain_generate, speculative_batches, speculative_generate
from .models import DEFAULT_TARGET, ModelNotFound, VocabularyMismatch
from .options import Changeable, DecodeOptions
from .peer import choose_peer, peer_entries, peer_runs
from .prompts import DATA_DIR, encode_prompts, read_prompts
from .runs import (
    engine_fields,
    predicted_speedup_fields,
    speedup_fields,
    timed_runs,
    wall_clock_prediction,
    with_prediction_check,
)
from .sampling import DEFAULT_SAMPLING, Sampling
from .timing import TimingPlan, add_timing_arguments, phase_log
from .validate import PROMPT_FILE, RECORDS_OUT, output_path, split_prompts
from .validate_config import MAX_NEW_TOKENS, prompt_lines

__all__ = ["L2_GRID", "FrontierPlan", "HeadData", "choose_l2", "frontier", "head_training_data", "head_training_data_on_policy",
           "load_head", "main", "save_head", "train_head"]

RULE_KINDS = ("specdecpp", "confidence")
THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def _row(result, policy: str, value, baseline: dict, batch_size: int = 1) -> dict:
    """One frontier row: what the run measured (the predictions are added by :func:`frontier`). The cost model's
    latency (eq. (4)) counts one sequence's calls: it is the run's at batch 1 only (``latency_ms`` is ``None``
    above, where a call serves the whole batch)."""
    d, timer = result.decode, result.timer
    t_draft, t_target = timer.mean_ms("draft"), timer.mean_ms("target")
    cost = d.cost(t_draft, t_target)
    be = d.block_efficiency
    drafted = d.accept_hist.sum(axis=1)
    tokens, iterations = d.per_sequence
    mean, low, high = paired_ratio_interval(tokens, iterations, seed=0)
    return {"policy": policy, "value": value,
            "block_efficiency": {"mean": mean, "low": low, "high": high, "unit": "prompt", "prompts": int(tokens.size)},
            **be.record_fields("block_efficiency_batch_means"),
            "mean_draft_length": float(drafted @ np.arange(drafted.size) / max(drafted.sum(), 1)),
            "draft_calls_per_iteration": timer.count("draft") / max(d.iterations, 1),
            "discard_rate": cost.discard_rate, "verification_rate": cost.verification_rate,
            "latency_ms": cost.latency if batch_size == 1 else None, "t_draft_ms": t_draft, "t_target_ms": t_target,
            "tokens_per_s": result.tokens_per_s, **speedup_fields(result, baseline, {"mean": mean, "low": low,
                                                                                     "high": high}),
            **engine_fields(d.accept_hist)}


#: What the two threshold rules of a record are.
RULES = {"threshold": "lagged, SpecDec++ Algorithm 1 to the letter: the features at step k are the draft's state at "
                      "token k - 1, so P-hat predicts the previous token's acceptance and every round drafts >= 2 "
                      "tokens (K_max = 1 aside)",
         "threshold_unlagged": "unlagged: each drafted token is fed to the draft before the rule decides, so P-hat_k "
                               "reads the state at token k itself and the rule can stop after 1 token; one more draft "
                               "call per round (the call that would give the next row is also made where it stops)"}


#: The confidence rule (``--rule confidence``, the default for a feature-level draft head).
CONFIDENCE_RULE = ("confidence: draft on while the product of the draft rows' largest probabilities, prod_j max_x "
                   "p_j(x), stays >= h (EAGLE-2's expansion order as a stopping rule; it reads only the draft's own "
                   "rows, so no head is trained)")


@dataclass(frozen=True)
class FrontierPlan(Changeable):
    """The policies of a frontier and how they are decoded (``python -m llm_bridge.adaptive``'s flags), checked when
    made: ``fixed`` draft lengths K and ``thresholds`` h in [0, 1] of the ``rule`` (``specdecpp``: the learned head,
    lagged and, with ``unlagged``, without the lag; ``confidence``: the draft's own confidence) up to ``max_length``;
    ``max_new_tokens`` per prompt, ``sampling``, ``seed``, ``batch_size``, ``progress``; timing (``timing_attempts``,
    ``pairing``); the peer (``hf``, chosen on ``hf_prompts`` prediction prompts); ``prediction_paths`` plain paths of
    each prediction prompt."""

    thresholds: tuple = THRESHOLDS
    fixed: tuple = (1, 2, 3, 4, 6, 8)
    max_length: int = 12
    max_new_tokens: int = 48
    sampling: Sampling = DEFAULT_SAMPLING
    seed: int = 0
    batch_size: int = 8
    progress: bool | None = None
    unlagged: bool = True
    timing_attempts: int = 1
    rule: str = "specdecpp"
    hf: bool = False
    hf_prompts: int = 4
    prediction_paths: int = 1
    pairing: str | None = None

    def __post_init__(self):
        if self.rule not in RULE_KINDS:
            raise ValueError(f"rule: expected one of {RULE_KINDS}, got {self.rule!r}")
        object.__setattr__(self, "thresholds", tuple(float(check_real(h, "--thresholds", low=0.0, high=1.0))
                                                     for h in self.thresholds))
        object.__setattr__(self, "fixed", tuple(check_size(K, "--fixed") for K in self.fixed))
        for flag, values in (("--thresholds", self.thresholds), ("--fixed", self.fixed)):
            if len(set(values)) < len(values):  # each policy is run once
                raise ValueError(f"{flag} {','.join(map(str, values))}: a value given twice")
        if not self.thresholds or not self.fixed:  # the frontier sets the rule's thresholds against fixed lengths
            raise ValueError(f"--{'thresholds' if not self.thresholds else 'fixed'}: empty; the frontier compares the "
                             "rule's thresholds with fixed draft lengths: give at least one of each")
        for name in ("max_length", "max_new_tokens", "batch_size", "timing_attempts", "hf_prompts",
                     "prediction_paths"):
            check_size(getattr(self, name), "--" + name.replace("_", "-"))
        check_size(self.max_new_tokens, "--max-new-tokens", limit=MAX_NEW_TOKENS, limit_name="MAX_NEW_TOKENS")
        check_size(self.max_length, "--max-length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")


def frontier(pair, prompts, head, plan: FrontierPlan | None = None, *, prediction_prompts=None) -> dict:
    """Fixed K and the threshold rule on the learned head (lagged, and with ``unlagged`` the rule without the lag),
    on the same prompts with plain sampling beside them: every run and plain sampling decode each batch of prompts
    in turn (interleaved timing rounds; ``pairing`` as :func:`llm_bridge.timing.timed_runs` takes it), and plain
    sampling runs again at the end (the record's timing check).
    ``rule="confidence"``: the threshold rows use :class:`~otspec.engine.controllers.ConfidenceController` (no head;
    ``head`` and ``unlagged`` are ignored). ``prediction_prompts`` (token ids; other prompts than ``prompts``): where
    the predictions are made — the plain-decoding log and the cost profile
    (:func:`llm_bridge.calibrate.calibration_batches`, with a zero-acceptance dry run of every policy, its rounds taken
    in turn with the runs' batches so that it sees the machine in the same windows; ``prediction_paths`` plain paths
    of each, pooled per prompt); without them no row is predicted. ``hf``: the peer, Hugging Face
    assisted generation with the fastest draft it takes for the target (chosen on ``hf_prompts`` of the prediction
    prompts, :func:`llm_bridge.peer.choose_peer`), decoded in turn with the runs, with its plain ``generate`` beside
    it (``hf_assisted``, as :mod:`llm_bridge.validate` records it)."""
    c = FrontierPlan() if plan is None else plan
    thresholds, fixed, max_length, max_new_tokens = c.thresholds, c.fixed, c.max_length, c.max_new_tokens
    sampling, seed, batch_size, progress, rule = c.sampling, c.seed, c.batch_size, c.progress, c.rule
    timing_attempts, pairing, hf, hf_prompts = c.timing_attempts, c.pairing, c.hf, c.hf_prompts
    unlagged, phase = c.unlagged and rule == "specdecpp", phase_log("adaptive", progress)
    plan = [("fixed", int(K)) for K in fixed] + [("threshold", float(h)) for h in thresholds]
    if unlagged:
        plan += [("threshold_unlagged", float(h)) for h in thresholds]

    def controller(policy, value):
        if policy == "fixed":
            return int(value)
        if rule == "confidence":
            return ConfidenceController(value, max_length)
        return LearnedHeadController(head, None, value, max_length, lagged=policy == "threshold")

    def run(policy, value, **common):
        ctrl = controller(policy, value)
        return speculative_batches(pair, prompts, TokenVerify(), ctrl, max_new_tokens,
                                   DecodeOptions(record_law=False, **common))

    def warm_up():  # untimed: one batch of plain sampling and of the longest fixed K
        plain_generate(pair.target, prompts[:batch_size], max_new_tokens, sampling=sampling, progress=False)
        if fixed:
            speculative_generate(pair, prompts[:batch_size], TokenVerify(), int(max(fixed)), max_new_tokens,
                                 DecodeOptions(sampling=sampling, progress=False, record_law=False))

    runs = [lambda p=p, v=v, **kw: run(p, v, **kw) for p, v in plan]
    peer, peer_choice = None, None
    if hf and prediction_prompts:
        peer, peer_choice = choose_peer(pair.target, prediction_prompts[:hf_prompts], max_new_tokens,
                                        sampling=sampling, seed=seed)
        phase(f"peer chosen: {peer_choice['chosen']}")
    runs += peer_runs(peer, prompts, max_new_tokens)
    beside = None if not prediction_prompts else (lambda: frontier_calibration(  # the profile, in the same windows
        pair, prediction_prompts, plan, controller, max_new_tokens, sampling=sampling, seed=seed, batch_size=batch_size))
    timed = timed_runs(pair.target, prompts, runs, max_new_tokens,
                       DecodeOptions(sampling=sampling, seed=seed, batch_size=batch_size, progress=progress),
                       TimingPlan(attempts=timing_attempts, pairing=pairing, desc="frontier runs"),
                       warm_up=warm_up, beside=beside)
    baseline, results, timing = timed.baseline, timed.results, timed.timing
    peer_results, results = (results[-2:], results[:-2]) if peer is not None else (None, results)
    phase("timed runs done")
    # predictions, made on the prediction prompts: fixed K, the confidence rule and (on a draft model) the learned
    # head's threshold rules by the decode engine on both models' rows logged along plain decoding there (a feature
    # head: its rows replayed by draft depth, and no prediction of the learned rule); every policy's iteration costs
    # from its dry run
    rules = RULES if rule == "specdecpp" else {"threshold": CONFIDENCE_RULE}
    out = {"baseline": baseline, "timing": timing, "fixed": [], "threshold": [], "rules": rules}
    if unlagged:
        out["threshold_unlagged"] = []
    if timing["unreliable_timing"]:
        out["unreliable_timing"] = timing["unreliable_timing"]
    out.update(peer_entries(peer_choice, peer_results, baseline["rounds"]))  # over its plain generate and ours
    predict, profile = frontier_predictor(pair, prediction_prompts, plan, controller, c,
                                          units=len(prompts), rounds=timed.beside)
    phase("profile and predictions done")
    if profile is not None:
        out["profile"] = profile.to_json()
    for (policy, value), result in zip(plan, results, strict=True):
        row = _row(result, policy, value, baseline, batch_size)
        pred = predict(policy, value)
        if pred is not None:
            row.update(predicted_block_efficiency=pred.block_efficiency,
                       predicted_block_efficiency_interval={"low": pred.low, "high": pred.high},
                       prediction_method=pred.method, prediction=pred.as_dict())
        wall = wall_clock_prediction(profile, policy_key(policy, value), pred, batch_size=batch_size,
                                     units=len(prompts), n_tokens=max_new_tokens)
        if pred is None and profile is not None:
            wall = {"source": None, "note": NO_HEAD_RULE}
        row.update(predicted_speedup_fields(wall))
        out[policy].append(PolicyRun.from_json(with_prediction_check(row), f"{policy} {value}"))
    return out


def main(argv=None) -> int:
    ap = ArgumentParser(prog="python -m llm_bridge.adaptive", description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--draft", default="distilled")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--rule", default="auto", choices=("auto", *RULE_KINDS),
                    help="the dynamic rule: SpecDec++'s learned acceptance head, or the draft's own confidence (auto: "
                         "confidence for a feature-level draft head such as eagle, else specdecpp)")
    ap.add_argument("--head", type=path_argument, help="a saved head (JSON) instead of training one")
    ap.add_argument("--save-head", type=path_argument, help="write the trained head here (JSON)")
    ap.add_argument("--train-prompts", type=positive_int, default=None,
                    help="prompts of distill_prompts.txt to train on (default 64; the flags down to --l2 train a head: "
                         "not with --head or the confidence rule)")
    ap.add_argument("--train-tokens", type=positive_int, default=None,
                    help="target response length per training prompt (default 96)")
    ap.add_argument("--mix", type=real, default=None, help="token mixing rate r (default 0.15; a draft model's head)")
    ap.add_argument("--train-draft-length", type=integer, default=None,
                    help="a feature head's training rows come from its own drafting at this fixed K (default 4; "
                         "eagle and medusa)")
    ap.add_argument("--w-rej", type=real, default=None, help="(default 3)")
    ap.add_argument("--l2", default=None, help="ridge penalty of the head, or auto (the default): chosen on held-out "
                    f"training prompts among {','.join(map(str, L2_GRID))}")
    ap.add_argument("--thresholds", default=",".join(map(str, THRESHOLDS)))
    ap.add_argument("--fixed", default="1,2,3,4,6,8", help="fixed draft lengths K for comparison")
    ap.add_argument("--max-length", type=integer, default=12, help="K_max of the threshold rule")
    ap.add_argument("--prompts", type=integer, default=32, help="validation prompts of the loop (the intervals' units)")
    ap.add_argument("--prediction-prompts", type=integer, default=None,
                    help="prompts after the measured ones on which the predictions' log and cost profile are measured "
                         "(default: as many as --prompts)")
    ap.add_argument("--prediction-paths", type=integer, default=1,
                    help="plain paths of each prediction prompt the replays read, pooled per prompt")
    ap.add_argument("--batch-size", type=integer, default=8, help="prompts decoded together (one timing round each)")
    ap.add_argument("--no-unlagged", action="store_true", help="run only the lagged rule of Algorithm 1")
    ap.add_argument("--max-new-tokens", type=integer, default=48)
    ap.add_argument("--temperature", type=real, default=1.0)
    ap.add_argument("--seed", type=integer, default=0)
    ap.add_argument("--name", help="output name: figures/llm_adaptive_<name>.* (default: the draft)")
    ap.add_argument("--out-dir", type=path_argument, default=RECORDS_OUT,
                    help="where the record goes; make records writes the committed figures/")
    ap.add_argument("--no-hf", action="store_true", help="skip the peer (Hugging Face assisted generation)")
    ap.add_argument("--hf-prompts", type=integer, default=None,
                    help="prediction prompts on which the peer's draft (prompt lookup, int8, distilled) is chosen "
                         "(default 4; not with --no-hf)")
    add_timing_arguments(ap)
    args = ap.parse_args(argv)
    try:
        thresholds = [real(x) for x in comma_items(args.thresholds)]  # float() would read 0_5 and ٠.٥
        fixed = integer_items(args.fixed, "--fixed")
    except (ValueError, ArgumentTypeError):
        ap.error("--thresholds and --fixed take comma-separated numbers in ASCII digits (--fixed: integers)")
    try:  # --no-hf --hf-prompts 2: refused, not ignored
        flags_that_apply(args, (("hf_prompts", 4, ("the peer (no --no-hf)", lambda a: not a.no_hf)),) + TRAINING_FLAGS)
    except ValueError as err:
        ap.error(str(err))
    try:
        out_path = output_path(args.out_dir, args.name, args.draft, prefix="llm_adaptive_")
    except ValueError as err:
        ap.error(str(err))
    try:
        record = run(args, thresholds, fixed)
    except (ModelNotFound, VocabularyMismatch, ImportError, ValueError, FileNotFoundError) as err:
        print(f"python -m llm_bridge.adaptive: {one_line(err)}", file=sys.stderr)
        return 2
    path = record.write(out_path)
    print(f"wrote {path} (its plot and summary: python -m otspec.plot record {path})", file=sys.stderr)
    return 0


def _check_before_loading(args, fixed) -> None:
    """The flags FrontierPlan and the head's training would refuse only after the models load, each named."""
    check_size(args.seed, "--seed", minimum=0)
    check_real(args.mix, "--mix", low=0.0, high=1.0)
    check_real(args.w_rej, "--w-rej", low=0.0)
    if args.l2 != "auto":
        try:
            check_real(float(args.l2), "--l2", low=0.0)
        except ValueError as err:
            raise ValueError(f"--l2 {args.l2!r}: expected 'auto' or a finite number >= 0 ({err})") from None
    for K in fixed:
        check_size(K, "--fixed", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    prompt_lines(args.prompts, args.prediction_prompts, len(read_prompts(DATA_DIR / PROMPT_FILE)))
    trains = _trains(args)
    if trains and args.l2 == "auto" and args.train_prompts < 4:
        raise ValueError(f"--train-prompts {args.train_prompts}: choosing --l2 auto holds out a quarter of the training "
                         "prompts; give at least 4, or a fixed --l2")


#: Drafters whose default rule is the draft's own confidence (no head is trained).
HEADS = ("eagle", "medusa")


def _feature_draft(args) -> bool:
    """Whether the draft reads the target's features (a head): the confidence rule is its default, and a learned
    rule is trained on its own drafting."""
    return args.draft in HEADS or str(args.draft).startswith("head:")


def _specdecpp(args) -> bool:
    return args.rule == "specdecpp" or (args.rule == "auto" and not _feature_draft(args))


def _trains(args) -> bool:
    return args.head is None and _specdecpp(args)


_TRAINS = ("training a head (--rule specdecpp, or auto with a draft model; no --head)", _trains)
#: The head's training flags, each refused where nothing is trained (a saved --head, the confidence rule) or the
#: draft's kind does not read it, rather than ignored (flags_that_apply).
TRAINING_FLAGS = (
    ("head", None, ("the learned rule (--rule specdecpp, or auto with a draft model; the confidence rule reads no "
                    "head)", _specdecpp)),
    ("save_head", None, _TRAINS), ("train_prompts", 64, _TRAINS), ("train_tokens", 96, _TRAINS),
    ("w_rej", 3.0, _TRAINS), ("l2", "auto", _TRAINS),
    ("mix", 0.15, ("training a head for a draft model (its mixing rows; a feature draft trains on its own drafting)",
                   lambda a: _trains(a) and not _feature_draft(a))),
    ("train_draft_length", 4, ("training a head for a feature draft (eagle, medusa: rows from its own drafting)",
                               lambda a: _trains(a) and _feature_draft(a))),
)


def run(args, thresholds, fixed) -> AdaptiveRecord:
    """Load the pair, train (or load) the head, run the frontier; the record."""
    import torch

    _check_before_loading(args, fixed)
    plan = FrontierPlan(thresholds=tuple(thresholds), fixed=tuple(fixed), max_length=args.max_length,
                        max_new_tokens=args.max_new_tokens, sampling=Sampling(args.temperature), seed=args.seed,
                        batch_size=args.batch_size, unlagged=not args.no_unlagged,
                        timing_attempts=args.timing_attempts, pairing=args.pairing, hf=not args.no_hf,
                        hf_prompts=args.hf_prompts, prediction_paths=args.prediction_paths)  # checked: no model yet
    for name in ("prompts", "train_draft_length") + (("prediction_prompts",) if args.prediction_prompts is not None
                                                     else ()):
        check_size(getattr(args, name), "--" + name.replace("_", "-"))
    check_size(args.train_draft_length, "--train-draft-length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    check_size(args.train_tokens, "--train-tokens", limit=MAX_NEW_TOKENS, limit_name="MAX_NEW_TOKENS")
    if args.save_head:
        writable_file(args.save_head, "--save-head")
        check_head_file(args.save_head)  # an existing source or record is not overwritten by a head
    sampling = plan.sampling
    saved = load_head(args.head) if args.head else None  # a file that is not a head: refused before the models load
    held = len(read_prompts(DATA_DIR / "distill_prompts.txt"))
    if not saved and args.train_prompts > held:
        raise ValueError(f"--train-prompts {args.train_prompts}: the training prompt file holds {held}")
    pair = load_pair(args.target, args.draft, device=args.device, dtype=args.dtype)
    rule = args.rule if args.rule != "auto" else ("confidence" if pair.drafter.reads_target_features else "specdecpp")
    train_data = {}  # how a trained head's rows were made
    if rule == "confidence":
        head, report = None, {"rule": "confidence", "description": CONFIDENCE_RULE}
    elif saved is not None:
        head, report = saved
    else:
        train_ids = encode_prompts(pair.tokenizer, read_prompts(DATA_DIR / "distill_prompts.txt", args.train_prompts))
        if pair.drafter.reads_target_features:  # a feature head drafts on its own states: rows from real drafting
            data = head_training_data_on_policy(pair, train_ids, args.train_tokens,
                                                draft_length=args.train_draft_length,
                                                sampling=sampling, seed=args.seed, batch_size=args.batch_size)
            train_data = {"train_data": "on-policy", "train_draft_length": args.train_draft_length}
        else:
            data = head_training_data(pair, train_ids, args.train_tokens, mix=args.mix, sampling=sampling,
                                      seed=args.seed)
            train_data = {"train_data": "mixing"}
        head, report = train_head(data, w_rej=args.w_rej, l2=args.l2 if args.l2 == "auto" else float(args.l2))
        report["features"] = int(data.features.shape[1])
        if args.save_head:
            save_head(head, args.save_head, {**report, "draft": pair.drafter.name, "target": pair.target.name})
    ids, pred_ids, prompt_ids, prediction_ids = split_prompts(pair.tokenizer, args.prompts, args.prediction_prompts)
    record = {"model_pair": pair.describe(),
              "settings": {"train_prompts": args.train_prompts, "train_tokens": args.train_tokens, "mix": args.mix,
                           **train_data,
                           "prompts": args.prompts, "prompt_file": PROMPT_FILE, "prompt_ids": prompt_ids,
                           "code": code_version(),
                           "prediction_prompts": len(prediction_ids), "prediction_prompt_ids": prediction_ids,
                           "batch_size": args.batch_size, "max_new_tokens": args.max_new_tokens,
                           "prediction_paths": args.prediction_paths,
                           "max_length": args.max_length, "temperature": args.temperature, "seed": args.seed,
                           "hf_prompts": None if args.no_hf else min(args.hf_prompts, len(prediction_ids)),
                           "torch": torch.__version__, "threads": torch.get_num_threads()},
              "head": report}
    record.update(frontier(pair, ids, head, plan.but(rule=rule), prediction_prompts=pred_ids))
    return AdaptiveRecord.from_json(record)


if __name__ == "__main__":
    raise SystemExit(main())
