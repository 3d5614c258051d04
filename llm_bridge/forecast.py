"""``python -m llm_bridge.forecast``: predict a configuration's block efficiency and speedup before it is measured.

A held-out test of the wall-clock model. The forecast measures only what a record's predictions read — the cost
profile (:mod:`llm_bridge.calibrate`) and the plain-decoding log, both on the prediction prompts (the prompts after
the ``--prompts`` a record will measure) — and writes, for each configuration, the predicted block efficiency and
speedup with their prediction intervals to ``figures/llm_forecast_<name>.json``. Commit it, *then* measure the
configuration with ``python -m llm_bridge.validate`` (same pair, prompts, batch and tokens; ``--name`` as given
here): :func:`check_forecast` (and the report's held-out section) put each forecast beside the measurement. Nothing of the measured
run, its prompts or its wall clock enters the forecast.

JSON: ``kind`` = ``"forecast"``, ``pair`` {target, draft, device, dtype}, ``settings`` (the record's settings that
the forecast is for, with ``prompt_ids`` and ``prediction_prompt_ids``), ``record`` (the file name of the record
that will measure it), ``made_at`` (UTC), ``profile`` (the cost profile) and ``forecasts``: per configuration
``verifier``, ``L`` or ``tree``, ``predicted_block_efficiency`` with ``predicted_block_efficiency_interval``,
``predicted_speedup`` with ``predicted_speedup_interval`` and ``speedup_prediction``.
"""

from __future__ import annotations

import json
import sys
import time

from otspec.clitools import (
    ArgumentParser,
    HelpFormatter,
    as_flags,
    comma_items,
    flags_that_apply,
    integer,
    integer_items,
    one_line,
    path_argument,
    real,
)
from otspec.engine.forecast import FORECAST_TOLERANCE, forecast_check, read_forecast
from otspec.engine.record import code_version, read_record
from otspec.verifiers import REGISTRY, TREE_VERIFIERS

from .drafters import load_pair
from .models import DEFAULT_TARGET, ModelNotFound, VocabularyMismatch
from .runs import wall_clock_prediction
from .trees import parse_tree
from .validate import (
    GREEDY_IGNORES,
    RECORDS_OUT,
    output_name,
    output_path,
    prepare_predictions,
    split_prompts,
)
from .validate_config import ValidateConfig

__all__ = ["FORECAST_TOLERANCE", "check_forecast", "forecast", "forecast_check", "main"]

#: The comparison of a forecast with the record that measured it (:func:`otspec.engine.forecast.forecast_check`).
check_forecast = forecast_check

def forecast(pair, config: ValidateConfig, *, name: str = "pair") -> dict:
    """The forecast of every configuration (module docstring) of the run ``python -m llm_bridge.validate`` would make
    with ``config`` (:class:`~llm_bridge.validate_config.ValidateConfig`: its verifiers, lengths, trees, prompts,
    sampling, batch, cache, ``prediction_sequences`` replays of ``prediction_paths`` plain paths of each prediction
    prompt); ``name``: the record's, ``llm_<name>.json``."""
    c = config
    sampling = c.sampling
    cache = c.cache
    if cache == "auto":
        cache = "compiled" if str(pair.target.device).startswith("cuda") else "dynamic"
    ids, pred_ids, prompt_ids, prediction_ids = split_prompts(pair.tokenizer, c.prompts, c.prediction_prompts)
    chains = [(v, L) for v in c.verifiers for L in c.lengths]
    tree_configs = c.tree_configs
    max_new_tokens, batch_size, lengths, trees = c.max_new_tokens, c.batch_size, c.lengths, c.run_trees
    profile, predict, _ = prepare_predictions(pair, pred_ids, c.but(cache=cache), chains=chains, trees=tree_configs,
                                              prompt_ids=prediction_ids, units=len(ids))
    rows = []
    for v, draft in chains + tree_configs:
        tree = isinstance(draft, str)
        verifier = (TREE_VERIFIERS if tree else REGISTRY)[v]()
        shape = parse_tree(draft, verifier.replacement) if tree else draft
        pred = predict(verifier, shape)
        wall = wall_clock_prediction(profile, f"{v}:{shape}" if tree else f"{v}:L={draft}", pred,
                                     batch_size=batch_size, units=len(ids), n_tokens=max_new_tokens)
        rows.append({"verifier": v, **({"tree": str(shape)} if tree else {"L": draft}),
                     "predicted_block_efficiency": pred.block_efficiency,
                     "predicted_block_efficiency_interval": {"low": pred.low, "high": pred.high},
                     "prediction_method": pred.method, "predicted_speedup": wall.get("speedup"),
                     "predicted_speedup_interval": {"low": wall["low"], "high": wall["high"]} if wall.get("source")
                     else None, "speedup_prediction": wall})
    return {"kind": "forecast", "pair": pair.describe(),
            "settings": {"prompts": c.prompts, "prompt_ids": prompt_ids, "prediction_prompt_ids": prediction_ids,
                         "code": code_version(),
                         "max_new_tokens": max_new_tokens, "batch_size": batch_size,
                         "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
                         "seed": c.seed, "cache": cache, "lengths": list(lengths), "verifiers": list(c.verifiers),
                         "prediction_paths": c.prediction_paths,
                         **({"trees": list(trees), "rule": c.rule} if trees else {})},
            "record": f"llm_{name}.json", "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "profile": profile.to_json(), "forecasts": rows}


#: Flags of a forecast's settings (flag destination → its key in the forecast's ``settings``, and how the flag's
#: value is written there), which ``--check`` compares with the forecast on file.
_SETTINGS = {"temperature": ("temperature", float), "top_k": ("top_k", int), "top_p": ("top_p", float),
             "seed": ("seed", int), "max_new_tokens": ("max_new_tokens", int), "batch_size": ("batch_size", int),
             "prompts": ("prompts", int), "prediction_paths": ("prediction_paths", int),
             "verifiers": ("verifiers", lambda text: comma_items(text, "--verifiers")),
             "L": ("lengths", lambda text: list(_lengths(text)))}


def _same_settings(args, made: dict, defaults: dict) -> None:
    """With ``--check``: a setting flag given must be the forecast's own (a forecast made at temperature 1 was
    checked as if at 0.5, without a word); flags left at their defaults are not compared."""
    settings = made.get("settings") or {}
    for dest, (key, read) in _SETTINGS.items():
        value = getattr(args, dest)
        if value is None or key not in settings or value == defaults[dest]:
            continue
        if read(value) != settings[key]:
            raise ValueError(f"--{dest.replace('_', '-')} {value}: the forecast on file was made with {key} = "
                             f"{settings[key]!r}; --check compares that forecast (forecast again for another setting)")


def _lengths(text: str) -> tuple:
    """``--L``: comma-separated draft lengths (an empty item or a non-integer refused naming the flag)."""
    return tuple(integer_items(text, "--L"))


def main(argv=None) -> int:
    ap = ArgumentParser(prog="python -m llm_bridge.forecast", description=__doc__.splitlines()[0],
                                 formatter_class=HelpFormatter)
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--draft", default="distilled")
    ap.add_argument("--verifiers", default="token", help="chain verifiers, comma-separated")
    ap.add_argument("--L", default="1", help="draft lengths, comma-separated")
    ap.add_argument("--trees", default="", help="draft trees, comma-separated (as validate --trees)")
    ap.add_argument("--multi-verifiers", default=None, help="tree verifiers for --trees (default: kseq)")
    ap.add_argument("--rule", default=None, choices=("match", "accepted"), help="with --trees: the tree walk (match)")
    ap.add_argument("--prompts", type=integer, default=32, help="prompts the record will measure (its first ones)")
    ap.add_argument("--prediction-prompts", type=integer, default=None,
                    help="prompts after those on which the forecast is made (default: as many as --prompts)")
    ap.add_argument("--max-new-tokens", type=integer, default=64)
    ap.add_argument("--batch-size", type=integer, default=8)
    ap.add_argument("--temperature", type=real, default=1.0)
    ap.add_argument("--top-k", type=integer, default=None, help="(default 0: all tokens; with --temperature > 0)")
    ap.add_argument("--top-p", type=real, default=None, help="(default 1: all tokens; with --temperature > 0)")
    ap.add_argument("--seed", type=integer, default=0)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--cache", default="auto")
    ap.add_argument("--prediction-sequences", type=integer, default=32, help="replays of each logged path")
    ap.add_argument("--prediction-paths", type=integer, default=1,
                    help="plain paths of each prediction prompt, pooled per prompt (as validate --prediction-paths)")
    ap.add_argument("--name", help="the record's name, llm_<name>.json (default: from the draft); the forecast goes "
                                   "to llm_forecast_<name>.json")
    ap.add_argument("--out-dir", type=path_argument, default=RECORDS_OUT)
    ap.add_argument("--check", type=path_argument, default=None, metavar="RECORD",
                    help="instead of forecasting: compare the forecast llm_forecast_<name>.json with RECORD")
    args = ap.parse_args(argv)
    if args.name is not None and not args.name.strip():
        print("python -m llm_bridge.forecast: --name: empty (leave it out for the draft's name)", file=sys.stderr)
        return 2
    name = args.name or output_name(args.draft)
    try:
        path = output_path(args.out_dir, name, args.draft, prefix="llm_forecast_")
    except ValueError as err:
        ap.error(str(err))
    try:
        if args.check is not None:
            made = read_forecast(path)
            _same_settings(args, made, {dest: ap.get_default(dest) for dest in _SETTINGS})
            for row in check_forecast(made, read_record(args.check)):
                print(json.dumps(row.to_json()))
            return 0
        flags_that_apply(args, (("multi_verifiers", "kseq", "trees"), ("rule", "match", "trees")) + GREEDY_IGNORES)
        config = ValidateConfig(
            target=args.target, draft=args.draft, device=args.device, dtype=args.dtype,
            verifiers=tuple(comma_items(args.verifiers, "--verifiers")),
            lengths=_lengths(args.L),
            trees=tuple(comma_items(args.trees, "--trees")),
            multi_verifiers=tuple(comma_items(args.multi_verifiers, "--multi-verifiers")),
            rule=args.rule, prompts=args.prompts, prediction_prompts=args.prediction_prompts,
            max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, temperature=args.temperature,
            top_k=args.top_k, top_p=args.top_p, seed=args.seed, cache=args.cache,
            prediction_sequences=args.prediction_sequences, prediction_paths=args.prediction_paths)
        pair = load_pair(config.target, config.draft, device=config.device, dtype=config.dtype)
        out = forecast(pair, config, name=name)
    except (ModelNotFound, FileNotFoundError, VocabularyMismatch, ImportError, ValueError) as err:
        print(f"python -m llm_bridge.forecast: {as_flags(one_line(err), args)}", file=sys.stderr)
        return 2
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    for row in out["forecasts"]:
        interval = row["predicted_speedup_interval"] or {}
        print(f"{row['verifier']} {row.get('L', row.get('tree'))}: block efficiency "
              f"{row['predicted_block_efficiency']:.3f}, speedup {row['predicted_speedup']} "
              f"[{interval.get('low')}, {interval.get('high')}]")
    print(f"wrote {path}; measure it with python -m llm_bridge.validate (same settings, --name {name}), then "
          f"python -m llm_bridge.forecast --name {name} --check {args.out_dir / f'llm_{name}.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
