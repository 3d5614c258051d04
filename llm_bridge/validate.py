"""``python -m llm_bridge.validate``: otspec's verifiers on a real pair, measured next to the theory.

For every verifier × draft length it runs the speculative loop on the measured prompts, and in the same
process, interleaved with it, plain target sampling (the speedup's denominator), Hugging Face assisted
generation with its fastest draft (the peer) and the cost profile's calibration rounds on the prediction prompts
(the ones after the measured ones: plain decoding, which is also the plain-decoding log the predictions read, and
every configuration's dry run; so the profile sees the machine in the same windows as the runs it predicts, and
never their wall clock); then the predictions (:func:`prepare_predictions`) and the losslessness checks. It writes
the record ``figures/llm_<name>.json`` (an :class:`otspec.engine.record.PairRecord`, the contract below);
``python -m otspec.plot record`` (and the report) draw its ``.md`` summary and ``.png`` plot.

JSON: ``model_pair`` {target, draft, device, dtype}; ``runs``: per run ``verifier``, ``L``,
``block_efficiency`` {mean, low, high}, ``predicted_block_efficiency`` (with ``predicted_block_efficiency_interval``,
``prediction_method`` and ``prediction``: otspec's decode engine replaying a log of both models' rows along plain
decoding of the prediction prompts, seed + 1, :mod:`otspec.engine.predict`; the verifier's closed form on the
two-point reduction of the run's own rows stays as ``two_point_upper_bound``), ``acceptance_rate``,
``tv_per_position``, ``t_draft_ms``, ``t_target_ms`` (object keyed by n), ``tokens_per_s``,
``baseline_tokens_per_s``, ``speedup`` with ``speedup_ci`` (paired bootstrap over the timing rounds) and
``speedup_range``, ``predicted_speedup`` with ``predicted_speedup_interval`` and ``speedup_prediction`` (the cost
profile charged to the replays: :func:`llm_bridge.runs.wall_clock_prediction`), and more: histograms, acceptance per
position, the SpecDec++ time decomposition at batch 1; ``settings`` with ``prompt_ids`` and
``prediction_prompt_ids``; ``hf_assisted`` {tokens_per_s, acceptance_rate, speedup, speedup_ci, speedup_vs_baseline,
choice}; ``hf_decode_step`` {ms_per_token, tokens_per_s, cache, otspec_step_ratio}: Hugging
Face's plain decode step with the same cache kind and otspec's step over it (the CUDA goal is at
most 1.5); plus ``baseline``, ``profile`` (the :class:`~llm_bridge.profile.CostProfile`), ``drafter`` and
``lossless``; ``timing`` {baseline_before_ms_per_token,
baseline_after_ms_per_token, baseline_drift, load, load_average, cpus, threads, unreliable_timing}: plain sampling with
one seed runs before and after the measured runs, and a drift above 10 % or other work above the cores this run leaves free (the
load average less this process's own CPU use) sets the top-level
``unreliable_timing`` (the reason), which the summaries and plots show instead of trusting the times.
Every run also carries the serving engines' metrics (:mod:`otspec.engine.metrics`). With ``--trees``:
``tree_runs``, per multi-draft verifier × draft tree (k-configs such as ``4x2x2x1``, or ``iid:K:L``
for SpecTr's K drafts of L tokens) ``verifier``, ``tree``, ``rule``, ``block_efficiency``,
``expected_block_efficiency_given_tree``, ``predicted_block_efficiency`` (the verifier's closed-form
acceptance per depth), ``otm_bound_block_efficiency`` (the OTM-k optimum on the same rows; both over the
first :data:`~llm_bridge.trees.MAX_CLOSED_FORM_NODES` nodes of each depth),
per-depth ``go_on`` / ``acceptance`` / ``optimum`` / ``tv``, ``target_nodes_per_call``, times,
``tokens_per_s``, ``speedup`` and ``predicted_speedup``. With ``--log-rows FILE``: ``logged_rows``
{file, paths, steps, kept_mean, overlap_mean, ...}, and FILE holds both models' rows along the plain
continuations, top-p truncated (:mod:`llm_bridge.logrows`), for otspec's offline sweeps.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
from pathlib import Path

import numpy as np

from otspec.clitools import (
    ArgumentParser,
    HelpFormatter,
    as_flags,
    check_folder_path,
    comma_items,
    flags_that_apply,
    integer,
    integer_items,
    one_line,
    path_argument,
    real,
    writable_file,
)
from otspec.engine.predict import ReplayPlan, predict_from_log, predict_from_pairs
from otspec.engine.record import PairRecord, code_version, results_table
from otspec.verifiers import REGISTRY, TREE_VERIFIERS, DecodingOPT

from .cache import CACHE_KINDS
from .calibrate import calibrate, calibration_batches, config_key
from .drafters import drafter_names, load_pair
from .logrows import DEFAULT_LOG_MAX_KEPT, DEFAULT_LOG_TOP_P, check_loggable
from .loop import plain_generate, speculative_batches, speculative_generate
from .lossless import TWO_SAMPLE_OPTIONS, first_token_law, root_token_law, two_sample_test
from .models import (
    DEFAULT_TARGET,
    ModelNotFound,
    VocabularyMismatch,
    accelerator_name,
    resolve_device,
    resolve_dtype,
)
from .options import DecodeOptions
from .peer import choose_peer, hf_decode_step, peer_entries, peer_runs
from .prompts import DATA_DIR, encode_prompts, read_prompts
from .replays import more_paths, replay_sources
from .runs import (
    ENGINE_KEYS,
    MAX_BASELINE_DRIFT,
    export_synthetic_rates,
    run_record,
    timed_runs,
    timing_check,
    tree_record,
)
from .sampling import Sampling
from .timing import TimingPlan, add_timing_arguments, phase_log
from .trees import parse_tree, tree_batches, tree_generate
from .validate_config import PROMPT_FILE, ValidateConfig, prompt_lines

__all__ = ["ENGINE_KEYS", "MAX_BASELINE_DRIFT", "TREE_VERIFIERS", "ValidateConfig", "export_synthetic_rates", "main",
           "output_path", "timing_check", "validate"]


FIGURES = Path(__file__).resolve().parent.parent / "figures"
#: Where a record goes unless told (``--out-dir``; ``make records`` writes the committed ``figures/``).
RECORDS_OUT = Path("build") / "records"
#: ``--top-k`` and ``--top-p`` (defaults 0 and 1) are read only by sampling: greedy decoding (``--temperature 0``)
#: takes the arg-max row whatever they are, so given with it they are refused, not ignored.
GREEDY_IGNORES = tuple((flag, default, ("sampling (--temperature > 0; greedy decoding reads neither)",
                                        lambda a: a.temperature != 0)) for flag, default in (("top_k", 0), ("top_p", 1.0)))
#: The plain run after the measured runs (the timing check) and the calibration's plain decoding of the prediction
#: prompts (the log the predictions read) use seed + this.
PREDICTION_SEED_OFFSET = 1


def _lossless(pair, prompt, verifiers, sampling: Sampling, samples: int, seed: int, multi=()) -> dict:
    """Exact first-token law (L = 2) and the two-sample test for each verifier, with a biased negative control."""
    if pair.drafter.deterministic:
        return {"status": "skipped: the n-gram drafter draws nothing to enumerate; see the model drafters' runs"}
    out = {"sampling": {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p},
           "draft_length": 2, "samples": samples, "verifiers": {}}
    checks = [(name, REGISTRY[name]()) for name in verifiers] + [("decoding_opt_eps_inf (biased control)",
                                                                   DecodingOPT(float("inf")))]
    for i, (name, verifier) in enumerate(checks):
        law = first_token_law(pair, prompt, verifier, 2, sampling=sampling)
        test = None if samples == 0 else two_sample_test(pair, prompt, verifier, 2,
                                                         TWO_SAMPLE_OPTIONS.but(sampling=sampling, seed=seed + 10 * i),
                                                         n=samples, tokens=2)
        out["verifiers"][name] = {"lossless": verifier.lossless, "first_token_max_deviation": law.max_deviation,
                                  "draft_paths": law.paths, "two_sample": test}
    for i, name in enumerate(multi):  # the root's law with k = 2 candidates, and a 2x1 tree against plain sampling
        verifier = TREE_VERIFIERS[name]()
        whole = verifier.layout == "tree"  # its exact law enumerates whole drafted trees: checked on toy sources
        law = None if whole else root_token_law(pair, prompt, verifier, 2, sampling=sampling)
        test = None if samples == 0 else two_sample_test(pair, prompt, verifier, "2x1",
                                                         TWO_SAMPLE_OPTIONS.but(sampling=sampling,
                                                                                seed=seed + 1000 + 10 * i),
                                                         n=samples, tokens=2)
        out["verifiers"][f"{name} (tree 2x1)"] = {
            "lossless": verifier.lossless, "first_token_max_deviation": None if whole else law.max_deviation,
            "draft_paths": None if whole else law.paths, "two_sample": test,
            **({"exact_law": "whole-tree verifier: exact output law tested on toy sources (tests)"} if whole else {})}
    return out


def validate(config: ValidateConfig | None = None, *, pair=None) -> PairRecord:
    """Everything of the module docstring, as ``config`` (:class:`~llm_bridge.validate_config.ValidateConfig`, checked
    when it was made) says; returns the record. ``pair`` (a loaded :class:`~llm_bridge.drafters.Pair`) replaces the
    config's ``target``, ``draft``, ``device`` and ``dtype``; ``trees`` (k-configs) adds a run per multi-draft verifier × tree (``tree_pairs``: per (verifier, tree) pair); ``cache`` is a kind of
    :func:`~llm_bridge.cache.make_cache` (``auto``: compiled static caches on CUDA, dynamic eager on CPU;
    a compiled run first warms every call shape up, untimed); ``log_rows`` (a path) also writes there the
    logged rows the predictions use: both models' rows along plain decoding of the prediction prompts (seed + 1,
    after the measured runs), replayed ``prediction_sequences`` times per prompt by :func:`otspec.engine.predict.predict_from_log`;
    ``timing_attempts``: how many times the timed runs may be measured while the timing check fails
    (:func:`~llm_bridge.runs.timed_runs`); ``pairing``: how they take turns (``steps`` or ``batches``; default
    :func:`llm_bridge.timing.default_pairing`); ``prediction_prompts`` (default: as many as ``prompts``): the prompts
    after the measured ones in the prompt file, on which everything the predictions read is measured (the plain-decoding
    log and the cost profile, :func:`llm_bridge.calibrate.calibrate`), never on the measured prompts;
    ``prediction_paths``: plain paths of each prediction prompt the replays read (the calibration's and more,
    :func:`~llm_bridge.replays.more_paths`), pooled per prompt."""
    import torch
    import transformers

    c = ValidateConfig() if config is None else config
    if pair is None:  # checked before any model is loaded
        resolve_device(c.device)
        resolve_dtype(c.dtype)
    phase = phase_log("validate", c.progress)  # a line per phase: how far a long record (or a compiling run) has got
    pair = pair or load_pair(c.target, c.draft, device=c.device, dtype=c.dtype)
    phase("models loaded")
    if c.log_rows is not None:  # before any decoding
        check_loggable(pair)
    pair.drafter.check_plan(lengths=c.lengths, trees=bool(c.run_trees))
    cache = c.cache
    if cache == "auto":
        cache = "compiled" if pair.target.device.startswith("cuda") else "dynamic"
    sampling = c.sampling
    ids, pred_ids, prompt_ids, prediction_ids = split_prompts(pair.tokenizer, c.prompts, c.prediction_prompts)
    rng = np.random.default_rng(c.seed)
    configs = [(name, L) for name in c.verifiers for L in c.lengths]
    tree_configs = [(n, parse_tree(t)) for n, t in c.tree_configs]

    def warm_up():
        if cache == "compiled":  # compile every call shape before anything is timed
            _warm_up(pair, ids[:c.batch_size], c.lengths, tree_configs, c.rule, sampling, cache)
            phase("compiled graphs warmed up")
            return
        # a fresh process's first decoding is slow: one whole batch of each kind goes untimed first
        plain_generate(pair.target, ids[:c.batch_size], c.max_new_tokens, sampling=sampling, progress=False, cache=cache)
        if c.lengths:
            speculative_generate(pair, ids[:c.batch_size], REGISTRY["token"](), max(c.lengths), c.max_new_tokens,
                                 DecodeOptions(sampling=sampling, progress=False, record_law=False, cache=cache))

    # the peer: Hugging Face assisted generation with the fastest draft it takes for this target, chosen on some of
    # the prediction prompts, then timed on the measured prompts with the runs (and Hugging Face's plain generate)
    peer, peer_choice = None, None
    if c.hf:
        peer, peer_choice = choose_peer(pair.target, pred_ids[:c.hf_prompts], c.max_new_tokens, sampling=sampling,
                                        seed=c.seed)
        phase(f"peer chosen: {peer_choice['chosen']}")
    # plain sampling and every run taking turns (llm_bridge.timing.timed_runs), between two identical plain runs
    runs = [lambda name=name, L=L, **kw: speculative_batches(pair, ids, REGISTRY[name](), L, c.max_new_tokens,
                                                             DecodeOptions(**kw))
            for name, L in configs]
    runs += [lambda name=name, tree=tree, **kw: tree_batches(pair, ids, TREE_VERIFIERS[name](), tree, c.max_new_tokens,
                                                             DecodeOptions(**kw), rule=c.rule, defer_closed_forms=True)
             for name, tree in tree_configs]
    runs += peer_runs(peer, ids, c.max_new_tokens)
    # the cost profile's calibration rounds (on the prediction prompts) go in turn with them: the same windows
    timed = timed_runs(pair.target, ids, runs, c.max_new_tokens,
                       DecodeOptions(sampling=sampling, seed=c.seed, batch_size=c.batch_size, cache=cache,
                                     progress=c.progress),
                       TimingPlan(attempts=c.timing_attempts, pairing=c.pairing,
                                  check_seed=c.seed + PREDICTION_SEED_OFFSET),
                       warm_up=warm_up, beside=lambda: calibration_round_batches(
                           pair, pred_ids, c.max_new_tokens, chains=configs, trees=tree_configs, sampling=sampling,
                           batch_size=c.batch_size, cache=cache, seed=c.seed, rule=c.rule))
    baseline, results, timing = timed.baseline, timed.results, timed.timing
    peer_results, results = (results[-2:], results[:-2]) if peer is not None else (None, results)
    phase("timed runs done")
    prof, predict, log = prepare_predictions(pair, pred_ids, c.but(cache=cache), chains=configs, trees=tree_configs,
                                             prompt_ids=prediction_ids, units=len(ids), rounds=timed.beside)
    chain_results = [(name, L, result) for (name, L), result in zip(configs, results[:len(configs)], strict=True)]
    tree_results = [(name, tree, result) for (name, tree), result in zip(tree_configs, results[len(configs):],
                                                                          strict=True)]
    phase("profile and prediction rows done")
    runs = [run_record(result, name, L, baseline, prof, rng, predict(REGISTRY[name](), L), batch_size=c.batch_size,
                       n_tokens=c.max_new_tokens)
            for name, L, result in chain_results]
    tree_runs = [tree_record(result, name, baseline, predict(TREE_VERIFIERS[name](), result.tree),
                             batch_size=c.batch_size, profile=prof, n_tokens=c.max_new_tokens,
                             tree_key=str(parse_tree(tree, result.tree.replacement)))
                 for name, tree, result in tree_results]  # the tree as the run drew it (with or without replacement)
    logged = None
    if c.log_rows is not None:
        log.save(c.log_rows)
        logged = {"file": str(c.log_rows), **{k: v for k, v in log.summary().items() if k != "meta"}}
    record = {
        "model_pair": pair.describe(),
        "settings": {"prompts": c.prompts, "prompt_file": PROMPT_FILE, "prompt_ids": prompt_ids, "code": code_version(),
                     "prediction_prompts": c.prediction_count, "prediction_prompt_ids": prediction_ids,
                     "prediction_paths": c.prediction_paths, "max_new_tokens": c.max_new_tokens, "lengths": list(c.lengths),
                     "temperature": c.temperature, "top_k": c.top_k, "top_p": c.top_p, "seed": c.seed,
                     "batch_size": c.batch_size, "hf_prompts": min(c.hf_prompts, len(pred_ids)), "cache": cache, "torch": torch.__version__, "transformers": transformers.__version__,
                     "threads": torch.get_num_threads(), "machine": platform.machine(),
                     "accelerator": accelerator_name(pair.target.device),
                     "python": platform.python_version()},
        "baseline": baseline, "profile": prof.to_json(), "timing": timing,
        **({"unreliable_timing": timing["unreliable_timing"]} if timing["unreliable_timing"] else {}),
        "drafter": {"name": pair.drafter.name, "acceptance": float(np.mean([1 - r.tv_per_position[0]
                                                                            for r in runs])) if runs else None,
                    "cost_ratio": prof.to_json()["t_draft_ms"] / float(prof.t_target_ms(1))},
        "runs": runs,
    }
    if logged is not None:
        record["logged_rows"] = logged
    if c.run_trees:
        record["tree_runs"] = tree_runs
        record["settings"].update(trees=list(c.run_trees), rule=c.rule)
    phase("predictions done")
    # its speedup over its own plain generate, and over otspec's plain sampling, interleaved with the runs
    record.update({"hf_assisted": None, **peer_entries(peer_choice, peer_results, baseline["rounds"])})
    if c.hf and c.max_new_tokens >= 2:  # the otspec decode step against Hugging Face's, same cache kind
        step = hf_decode_step(pair, ids[:min(2, len(ids))], c.max_new_tokens, sampling=sampling, seed=c.seed, cache=cache)
        step["otspec_step_ratio"] = (None if step["ms_per_token"] is None
                                     else baseline["ms_per_token"] / step["ms_per_token"])
        record["hf_decode_step"] = step
    phase("Hugging Face peer done" if c.hf else "no Hugging Face peer")
    law_sampling = Sampling(c.temperature or 1.0, c.top_k or 8, c.top_p)
    checked = list(c.verifiers) if c.lossless_verifiers is None else list(c.lossless_verifiers)
    record["lossless"] = _lossless(pair, ids[0], checked, law_sampling, c.lossless_samples, c.seed,
                                   c.run_multi_verifiers if c.lossless_verifiers is None else [])
    phase("losslessness checks done")
    return PairRecord.from_json(record)


def prepare_predictions(pair, prompts, config: ValidateConfig, *, chains, trees, prompt_ids, units: int, rounds=None):
    """Everything the predictions read, measured on ``prompts`` (the prediction prompts, never the measured ones), with
    ``config``'s tokens, sampling, batch size, cache kind (resolved: not ``auto``), seed, tree walk rule, replays
    (``prediction_sequences`` of ``prediction_paths`` paths per prompt) and logged rows' truncation:
    the cost profile (:func:`~llm_bridge.calibrate.calibrate`: plain decoding, t_target(n) per width, a dry run of
    every chain (verifier name, L) and tree (verifier name, tree spec) configuration) and, along the plain decoding,
    the rows the replays read (both models' logged rows; a feature head's rows by draft depth; prompt lookup's
    proposals). Returns ``(profile, predict, log)``: ``predict(verifier, draft)`` is the
    :class:`~otspec.engine.predict.LogPrediction` of a run over ``units`` prompts, ``log`` the logged rows (``None``
    for a head or prompt lookup). ``rounds``: the calibration rounds already measured in turn with the runs
    (:func:`calibration_round_batches`'s result, via ``timed_runs(beside=...)``); without them the profile is measured
    now, by itself (:func:`~llm_bridge.calibrate.calibrate`). ``paths``: plain paths per prompt the replays read (the
    calibration's first, the rest decoded untimed by :func:`~llm_bridge.replays.more_paths`)."""
    c = config
    max_new_tokens, sampling, batch_size, cache, seed, rule = (c.max_new_tokens, c.sampling, c.batch_size, c.cache,
                                                               c.seed, c.rule)
    sequences, paths = c.prediction_sequences, c.prediction_paths
    calibration = DecodeOptions(sampling=sampling, batch_size=batch_size, cache=cache, seed=seed + PREDICTION_SEED_OFFSET)
    prof, tokens = calibrate(pair, prompts, max_new_tokens, calibration, **profile_specs(chains, trees),
                             prompt_ids=prompt_ids, rule=rule, rounds=rounds)
    paths_of, tokens = more_paths(pair, prompts, tokens, max_new_tokens, paths, sampling=sampling,
                                  batch_size=batch_size, cache=cache, seed=seed + PREDICTION_SEED_OFFSET)
    replays = replay_sources(pair, paths_of, tokens, max([L for _, L in chains], default=1), sampling=sampling,
                             batch_size=batch_size, top_p=c.log_top_p, max_kept=c.log_max_kept,
                             meta={"prompts": len(prompts), "paths_per_prompt": paths, "prompt_ids": list(prompt_ids),
                                   "max_new_tokens": max_new_tokens, "seed": seed + PREDICTION_SEED_OFFSET,
                                   "use": "predictions (other prompts than the measured runs')"})
    log = replays.log

    def predict(verifier, draft):
        if log is None:
            return predict_from_pairs(replays.pairs, verifier, draft,
                                      ReplayPlan(sequences=sequences, seed=seed, units=units, paths_per_prompt=paths),
                                      method=replays.method)
        return predict_from_log(log, verifier, draft,
                                ReplayPlan(sequences=sequences, seed=seed, rule=rule, units=units, paths_per_prompt=paths))

    return prof, predict, log


def profile_specs(chains, trees) -> dict:
    """The cost profile's ``chains`` and ``trees`` arguments for chain (verifier name, L) and tree (verifier name, tree
    spec) configurations: each with its dry-run key (:func:`~llm_bridge.calibrate.config_key`) and verifier."""
    return {"chains": [(config_key(name, L), REGISTRY[name](), L) for name, L in chains],
            "trees": [(config_key(name, str(t)), v, t) for name, tree in trees
                      for v in [TREE_VERIFIERS[name]()] for t in [parse_tree(tree, v.replacement)]]}


def calibration_round_batches(pair, prompts, max_new_tokens: int, *, chains, trees, sampling, batch_size: int,
                              cache: str, seed: int, rule: str = "match"):
    """The calibration rounds of :func:`prepare_predictions`'s profile as a generator for ``timed_runs(beside=...)``:
    :func:`~llm_bridge.calibrate.calibration_batches` on the prediction ``prompts`` with the same configurations and
    seed that :func:`prepare_predictions` would calibrate with."""
    options = DecodeOptions(sampling=sampling, batch_size=batch_size, cache=cache, seed=seed + PREDICTION_SEED_OFFSET,
                            progress=False)
    return calibration_batches(pair, prompts, max_new_tokens, options, **profile_specs(chains, trees), rule=rule)


def split_prompts(tokenizer, prompts: int, prediction_prompts: int | None = None) -> tuple[list, list, list, list]:
    """(measured prompts' ids, prediction prompts' ids, their line indices): the first ``prompts`` prompts of
    :data:`PROMPT_FILE` are measured and the next ``prediction_prompts`` (default: as many) are where the
    predictions are made, so no prediction reads the prompts it predicts."""
    texts = read_prompts(DATA_DIR / PROMPT_FILE)
    measured, predicted = prompt_lines(prompts, prediction_prompts, len(texts))
    return (encode_prompts(tokenizer, [texts[i] for i in measured]),
            encode_prompts(tokenizer, [texts[i] for i in predicted]), measured, predicted)


def _warm_up(pair, ids, lengths, tree_configs, rule, sampling, cache) -> None:
    """Run each chain length, and each tree with its first verifier, briefly (untimed): compiled graphs exist."""
    plain_generate(pair.target, ids, 4, sampling=sampling, progress=False, cache=cache)
    for L in lengths:
        speculative_generate(pair, ids, REGISTRY["token"](), L, 3 * (L + 1),
                             DecodeOptions(sampling=sampling, progress=False, record_law=False, cache=cache))
    for tree, name in {str(tree): name for name, tree in reversed(tree_configs)}.items():
        tree_generate(pair, ids, TREE_VERIFIERS[name](), tree, 3 * (parse_tree(tree).depth + 1),
                      DecodeOptions(sampling=sampling, progress=False, record_law=False, cache=cache), rule=rule)


def output_name(draft: str) -> str:
    """The ``<name>`` of ``figures/llm_<name>.*`` made from a draft spec or path."""
    return re.sub(r"[^A-Za-z0-9_]+", "_", Path(draft).name).strip("_") or "pair"


def output_path(out_dir, name: str | None, draft: str, prefix: str = "llm_") -> Path:
    """``out_dir/<prefix><name>.json``, checked before any model loads: ``name`` (default :func:`output_name` of the
    draft) is a file-name stem — letters, digits, ``_ . + -``, no path separators, so nothing is written outside
    ``out_dir`` —, and ``out_dir`` exists or can be made, and can be written to. A ``ValueError`` names the flag."""
    name = output_name(draft) if name is None else str(name)
    if not re.fullmatch(r"[A-Za-z0-9_.+-]+", name) or name.strip(".") == "":
        raise ValueError(f"--name {name!r}: expected a file-name stem (letters, digits, _ . + -), without path "
                         "separators: the record is written as <out-dir>/" + prefix + "<name>.json")
    if len(f"{prefix}{name}.json".encode()) > 200:  # and its .md/.png beside it: file names end at 255 bytes
        raise ValueError(f"--name: {len(name)} characters is too long for a file name (at most "
                         f"{200 - len(prefix) - 5})")
    check_folder_path(out_dir, "--out-dir")  # made when the record is written (nothing left behind before)
    return Path(out_dir) / f"{prefix}{name}.json"


def main(argv=None) -> int:
    ap = ArgumentParser(prog="python -m llm_bridge.validate", description=__doc__.splitlines()[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("--target", default=DEFAULT_TARGET, help="'smollm2', a folder, a .gguf file or a hub id")
    ap.add_argument("--draft", default="distilled",
                    help=f"{drafter_names()}, or a model")
    ap.add_argument("--verifiers", default="token,block,block_v1",
                    help=f"chain verifiers for the draft lengths, comma-separated, among {','.join(REGISTRY)}")
    ap.add_argument("--L", default="2,4,8", help="draft lengths, comma-separated")
    ap.add_argument("--trees", default="", help="draft trees for multi-draft runs, comma-separated k-configs "
                    "(4x2x2x1), iid:K:L (K i.i.d. drafts of L tokens) or eagle2:D:K:M (EAGLE-2's confidence-ordered "
                    "tree: depth D, top-K expansion, M nodes; with --multi-verifiers naive); none by default")
    ap.add_argument("--multi-verifiers", default=None,
                    help=f"tree verifiers for --trees, among {','.join(TREE_VERIFIERS)} (default: kseq,multiround)")
    ap.add_argument("--rule", default=None, choices=("match", "accepted"),
                    help="with --trees: the tree walk, SpecTr's match (go on when a candidate equals Y; the default) or "
                         "MCSD's accepted")
    ap.add_argument("--prompts", type=integer, default=32, help="validation prompts (the interval's independent units; "
                    "committed records use at least 32)")
    ap.add_argument("--max-new-tokens", type=integer, default=64, help="tokens generated per prompt")
    ap.add_argument("--device", default="auto", help="auto (CUDA when visible), cpu, cuda, cuda:1, ...")
    ap.add_argument("--cache", default="auto", choices=CACHE_KINDS,
                    help="KV caches: compiled static (the CUDA default), static eager, dynamic eager (the CPU default)")
    ap.add_argument("--dtype", default="float32", help="model weights: float32, bfloat16, float16 or float64")
    ap.add_argument("--temperature", type=real, default=1.0, help="sampling temperature of both models (0: greedy)")
    ap.add_argument("--top-k", type=integer, default=None,
                    help="keep the k most probable tokens of every row (default 0: all; with --temperature > 0)")
    ap.add_argument("--top-p", type=real, default=None,
                    help="keep the smallest set of mass >= top-p of every row (default 1; with --temperature > 0)")
    ap.add_argument("--seed", type=integer, default=0, help="random seed")
    ap.add_argument("--batch-size", type=integer, default=8, help="prompts decoded together")
    ap.add_argument("--lossless-samples", type=integer, default=200,
                    help="draws per side of the two-sample test (0: the exact first-token laws only)")
    ap.add_argument("--lossless-verifiers", default=None,
                    help="chain verifiers whose losslessness is checked (default: every verifier run, and the "
                         "multi-draft ones with --trees); the biased control is always checked")
    ap.add_argument("--no-hf", action="store_true", help="skip Hugging Face assisted generation")
    ap.add_argument("--hf-prompts", type=integer, default=None,
                    help="prediction prompts on which the peer's draft is chosen (Hugging Face assisted generation "
                         "with prompt lookup, int8 or distilled: the fastest); the chosen peer then runs on every "
                         "measured prompt, interleaved with the runs")
    ap.add_argument("--name", help="output name: figures/llm_<name>.* (default: from the draft)")
    ap.add_argument("--out-dir", type=path_argument, default=RECORDS_OUT,
                    help="where the record (llm_<name>.json, .md, .png) goes; make records writes the committed figures/")
    ap.add_argument("--json", action="store_true", help="also print the JSON record")
    ap.add_argument("--log-rows", type=path_argument, default=None, metavar="FILE",
                    help="also write the rows the predictions read: both models' rows along the second plain run "
                         "(seed + 1), top-p truncated (a logged-rows .npz for python -m otspec sweep / simulate "
                         "--logged)")
    ap.add_argument("--export-synthetic-rates", type=path_argument, default=None, metavar="FILE",
                    help="also write each run's per-position unconditional acceptance rates and mean acceptance "
                         "length (measured, and predicted where present) for a serving engine's synthetic mode")
    ap.add_argument("--prediction-prompts", type=integer, default=None,
                    help="prompts after the measured ones on which the predictions' log and cost profile are measured "
                         "(default: as many as --prompts)")
    ap.add_argument("--prediction-sequences", type=integer, default=32,
                    help="replays of each logged path by the prediction's decode engine")
    ap.add_argument("--prediction-paths", type=integer, default=1,
                    help="plain paths of each prediction prompt the replays read, pooled per prompt (more take the "
                         "draw of one continuation out of the prediction; temperature 0 has one)")
    ap.add_argument("--log-top-p", type=real, default=None,
                    help=f"with --log-rows: mass kept per row (default {DEFAULT_LOG_TOP_P})")
    ap.add_argument("--log-max-kept", type=integer, default=None,
                    help="with --log-rows: at most this many tokens per row and model")
    ap.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help="progress bars on stderr (default: when stderr is a terminal); each phase's elapsed time (and, "
                         "without bars, each timing round's) is a line on stderr unless --no-progress")
    add_timing_arguments(ap)
    args = ap.parse_args(argv)
    try:
        lengths = integer_items(args.L, "--L")  # "" alone: no chain runs
    except ValueError as err:
        ap.error(str(err))
    try:
        out_path = output_path(args.out_dir, args.name, args.draft)
        if args.export_synthetic_rates is not None:
            writable_file(args.export_synthetic_rates, "--export-synthetic-rates")
    except ValueError as err:
        ap.error(str(err))
    try:
        flags_that_apply(args, (("multi_verifiers", "kseq,multiround", "trees"), ("rule", "match", "trees"),
                                ("hf_prompts", 4, ("the peer (no --no-hf)", lambda a: not a.no_hf)),
                                ("log_top_p", DEFAULT_LOG_TOP_P, "log_rows"),
                                ("log_max_kept", DEFAULT_LOG_MAX_KEPT, "log_rows")) + GREEDY_IGNORES)
        config = ValidateConfig(
            target=args.target, draft=args.draft, verifiers=tuple(comma_items(args.verifiers, "--verifiers")),
            lengths=tuple(lengths), prompts=args.prompts, max_new_tokens=args.max_new_tokens, device=args.device,
            dtype=args.dtype, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
            batch_size=args.batch_size, lossless_samples=args.lossless_samples, hf=not args.no_hf,
            trees=tuple(comma_items(args.trees, "--trees")),
            multi_verifiers=tuple(comma_items(args.multi_verifiers, "--multi-verifiers")),
            rule=args.rule, cache=args.cache, log_rows=args.log_rows, log_top_p=args.log_top_p,
            log_max_kept=args.log_max_kept, prediction_sequences=args.prediction_sequences,
            hf_prompts=args.hf_prompts, timing_attempts=args.timing_attempts, pairing=args.pairing,
            progress=args.progress, prediction_prompts=args.prediction_prompts,
            prediction_paths=args.prediction_paths,
            lossless_verifiers=None if args.lossless_verifiers is None else
            tuple(comma_items(args.lossless_verifiers, "--lossless-verifiers")))
    except (FileNotFoundError, ValueError) as err:  # the settings, checked before any folder is made
        print(f"python -m llm_bridge.validate: {as_flags(one_line(err), args)}", file=sys.stderr)
        return 2
    try:
        record = validate(config)
    except (ModelNotFound, FileNotFoundError, VocabularyMismatch, ImportError, ValueError) as err:
        print(f"python -m llm_bridge.validate: {as_flags(one_line(err), args)}", file=sys.stderr)
        return 2
    path = record.write(out_path)
    if args.export_synthetic_rates is not None:
        print(f"wrote {export_synthetic_rates(record.to_json(), args.export_synthetic_rates)}", file=sys.stderr)
    if args.json:
        print(json.dumps(record.to_json(), indent=1))
    else:
        print(results_table(record))
    print(f"wrote {path} (its plot and summary: python -m otspec.plot record {path})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
