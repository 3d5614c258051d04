"""How much a record's block-efficiency prediction depends on its log's draw of one plain path per prompt.

Usage: python benchmarks/bench_log_paths.py [--target smollm2|tiny] [--draft eagle] [--prompts 32] [--tokens 48,64]
       [--L 1,4] [--seeds 1,11,21] [--batch 8] [--json FILE]

A record predicts block efficiency by replaying the drafter against the target along one plain-decoding path per
prediction prompt (``llm_bridge.validate``: prompts 32-63 when 32 are measured). Here both prompt sets, the measured
one (0 .. P-1) and the prediction one (P .. 2P-1), get plain paths under several seeds, and for each seed, set and
horizon the same replay the records use (a feature head's rows by draft depth, or a draft model's logged rows) gives
the predicted block efficiency at every L. Beside it, the first draft's overlap with the target along the paths,
sum min(p, q) per position, averaged per prompt over the seeds, by stretch of the continuation (the first N - 16
tokens, the last 16), with a bootstrap over prompts of the difference between the two sets.

What it tells: the spread over seeds is how far the log's path draw alone moves a prediction; the difference between
the sets is how far the prompts themselves do. Nothing is asserted. ``--target tiny`` uses two tiny random models.
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _overlap(pairs) -> np.ndarray:
    """(prompts, T): the first draft's overlap with the target, sum min(p, q), at every position of each path."""
    from otspec.distributions import overlap

    out = [overlap(draft.by_depth[0] if hasattr(draft, "by_depth") else draft.rows, target.rows)
           for draft, target in pairs]
    T = min(len(x) for x in out)
    return np.stack([x[:T] for x in out])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="smollm2", help="smollm2, a folder, or 'tiny'")
    parser.add_argument("--draft", default="eagle")
    parser.add_argument("--prompts", type=int, default=32, help="prompts per set (measured, then prediction)")
    parser.add_argument("--tokens", default="48,64", help="horizons N (comma-separated); paths have the longest")
    parser.add_argument("--L", default="1,4", help="draft lengths (comma-separated)")
    parser.add_argument("--seeds", default="1,11,21", help="plain-path seeds (comma-separated)")
    parser.add_argument("--batch", type=int, default=8, help="plain decoding's batch")
    parser.add_argument("--json", default=None, help="write the numbers here")
    args = parser.parse_args(argv)
    horizons, lengths, seeds = _ints(args.tokens), _ints(args.L), _ints(args.seeds)
    if not horizons or min(horizons) < 2 or not lengths or min(lengths) < 1 or not seeds or args.prompts < 2:
        parser.error("--tokens >= 2, --L >= 1, at least one seed and --prompts >= 2")

    from llm_bridge.loop import plain_generate
    from llm_bridge.replays import replay_sources
    from llm_bridge.sampling import DEFAULT_SAMPLING
    from otspec.engine.predict import ReplayPlan, predict_from_pairs
    from otspec.verifiers import TokenVerify

    if args.target == "tiny":
        import sys
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.llm_tiny import tiny_pair

        pair = tiny_pair(sharpness=3.0)
        sets = {"measured": [[1 + (i % 5), 2, 3 + i % 7] for i in range(args.prompts)],
                "prediction": [[1 + (i % 5), 4, 3 + i % 7] for i in range(args.prompts)]}
    else:
        from llm_bridge.drafters import load_pair
        from llm_bridge.validate import split_prompts

        pair = load_pair(args.target, args.draft, device="cpu")
        measured, predicted, *_ = split_prompts(pair.tokenizer, args.prompts)
        sets = {"measured": measured, "prediction": predicted}
    N_max, depth = max(horizons), max(lengths)
    print(f"target {args.target}, draft {args.draft}; {args.prompts} prompts per set, paths of {N_max} tokens, "
          f"seeds {seeds}")
    predicted, overlap = {}, {name: [] for name in sets}
    everything = sets["measured"] + sets["prediction"]
    for seed in seeds:  # one plain run over both sets (measured first), so a seed draws every path at once
        drawn = plain_generate(pair.target, everything, N_max, sampling=DEFAULT_SAMPLING, seed=seed,
                               batch_size=args.batch, progress=False).tokens
        for k, (name, prompts) in enumerate(sets.items()):
            paths = drawn[k * args.prompts:(k + 1) * args.prompts]
            for N in sorted(horizons, reverse=True):
                pairs = replay_sources(pair, prompts, [t[:N] for t in paths], depth, sampling=DEFAULT_SAMPLING,
                                       batch_size=args.batch).path_pairs()  # as the records' predictions make them
                if N == N_max:
                    overlap[name].append(_overlap(pairs))
                for L in lengths:
                    pr = predict_from_pairs(pairs, TokenVerify(), L, ReplayPlan(seed=0, units=args.prompts))
                    predicted[f"{name} N={N} L={L} seed={seed}"] = [pr.block_efficiency, pr.low, pr.high]
                    print(f"seed {seed:3d}  {name:10s}  N = {N:3d}  L = {L}:  predicted block efficiency "
                          f"{pr.block_efficiency:.4f} [{pr.low:.4f}, {pr.high:.4f}]", flush=True)
    for N in horizons:
        for L in lengths:
            row = {name: [predicted[f"{name} N={N} L={L} seed={s}"][0] for s in seeds] for name in sets}
            print(f"N = {N:3d}, L = {L}: over seeds, measured set {min(row['measured']):.4f}-{max(row['measured']):.4f}"
                  f", prediction set {min(row['prediction']):.4f}-{max(row['prediction']):.4f}")
    rng, stretches = np.random.default_rng(0), {}
    per_prompt = {name: np.mean(overlap[name], axis=0) for name in sets}  # (prompts, T) averaged over seeds
    T = per_prompt["measured"].shape[1]
    tail = 16 if T > 32 else T // 2  # the last stretch: 16 tokens (half of a short path)
    for label, cut in ((f"tokens 1-{T - tail}", slice(0, T - tail)), (f"tokens {T - tail + 1}-{T}", slice(T - tail, T)),
                       (f"tokens 1-{T}", slice(0, T))):
        m, p = per_prompt["measured"][:, cut].mean(axis=1), per_prompt["prediction"][:, cut].mean(axis=1)
        boot = [rng.choice(p, p.size).mean() - rng.choice(m, m.size).mean() for _ in range(4000)]
        low, high = np.percentile(boot, [2.5, 97.5])
        stretches[label] = {"measured": m.mean(), "prediction": p.mean(), "difference": p.mean() - m.mean(),
                            "low": low, "high": high}
        print(f"first-draft overlap, {label}: measured set {m.mean():.4f}, prediction set {p.mean():.4f}, "
              f"difference {p.mean() - m.mean():+.4f} (95 % over prompts [{low:+.4f}, {high:+.4f}])")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": vars(args), "predicted": predicted, "overlap": stretches}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
