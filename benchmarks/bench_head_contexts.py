"""Where a feature head's acceptance comes from: the shipped head scored on the contexts of each prompt set.

Usage: python benchmarks/bench_head_contexts.py [--target smollm2] [--head llm_bridge/weights/eagle] [--prompts 32]
       [--samples 2] [--tokens 64] [--seed 1] [--json]

A head trained on the target's own corpus (``llm_bridge.corpus``) is measured there on held-out shards; a record
(``llm_bridge.validate``) measures it in the decode loop on the validation prompts. When the two disagree, the
cause is either the contexts (the corpus's self-written user messages against the validation prompts, its 256-token
continuations against the record's 64) or the loop. This script separates them without training on anything: it
scores the head's held-out acceptance 1 − TV per draft position (the same ``evaluate`` as training, temperature 1,
the target's exact rows) on

1. the corpus's held-out shards, every continuation token, then only the first ``--tokens`` of each;
2. fresh temperature-1 continuations of the first ``--prompts`` validation prompts (``--tokens`` each, as a record
   decodes them; sampled here, never trained on);
3. the same for the prompt files the earlier heads were trained on (``distill_prompts``, ``head_prompts``);

and prints each against the first, so that a ratio far below 1 on the validation prompts names the contexts, and a
ratio near 1 leaves the gap to the loop. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path


def _first_tokens(data: dict, tokens: int) -> dict:
    """``data`` with every sequence cut to its prompt and the first ``tokens`` of its continuation."""
    import torch

    return {**data, "lengths": torch.minimum(data["lengths"], data["plens"] + tokens)}


def _prompt_set(target, name: str, texts: list[str], samples: int, tokens: int, seed: int):
    from llm_bridge.train_head import corpus

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.txt"
        path.write_text("\n".join(texts) + "\n")
        return corpus(target, target_name=f"bench-{name}", samples=samples, length=tokens, seed=seed,
                      prompts=[path], progress=False)


def main(argv=None) -> int:
    import numpy as np
    import torch

    from llm_bridge.corpus import CORPUS_DIR, load_corpus
    from llm_bridge.head_data import target_features
    from llm_bridge.heads import HEAD_DIRS, load_head
    from llm_bridge.models import DEFAULT_TARGET, cache_dir, load_model
    from llm_bridge.prompts import DATA_DIR, read_prompts
    from llm_bridge.train_head import evaluate
    from otspec.progress import tqdm

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--head", default=str(HEAD_DIRS["eagle"]))
    ap.add_argument("--prompts", type=int, default=32, help="prompts of each file sampled")
    ap.add_argument("--samples", type=int, default=2, help="continuations per prompt (temperature 1)")
    ap.add_argument("--tokens", type=int, default=64, help="continuation tokens (a record decodes 64)")
    ap.add_argument("--heldout-sequences", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    target = load_model(args.target, device="cpu", dtype="float32")
    head, _ = load_head(Path(args.head), target.model)
    unroll = 3
    rows = {}
    if (CORPUS_DIR / args.target).is_dir():  # the same held-out draw as training's (seed 0), its features only
        corpus = load_corpus(CORPUS_DIR / args.target)
        held = np.flatnonzero(corpus.heldout)
        val = np.sort(np.random.default_rng(0).permutation(held)[:args.heldout_sequences])
        width = int(corpus.lengths[val].max())
        cached = cache_dir() / "heads" / f"bench-heldout-{args.target}-{args.heldout_sequences}.pt"
        if cached.is_file():
            feats, lse, top = torch.load(cached)
        else:
            feats, lse, top, _ = target_features(target.model, corpus.tokens[val, :width], corpus.lengths[val])
            torch.save((feats, lse, top), cached)
        data = {"tokens": torch.as_tensor(corpus.tokens[val, :width]), "lengths": torch.as_tensor(corpus.lengths[val]),
                "plens": torch.as_tensor(corpus.plens[val]), "features": feats, "lse": lse, "argmax": top,
                "temperature": corpus.temperature[val]}
        every = np.arange(len(val))
        rows["corpus held-out, all tokens"] = (data, every)
        rows[f"corpus held-out, first {args.tokens}"] = (_first_tokens(data, args.tokens), every)
    sets = {"validate_prompts": DATA_DIR / "validate_prompts.txt", "head_prompts": DATA_DIR / "head_prompts.txt",
            "distill_prompts": DATA_DIR / "distill_prompts.txt"}
    for name, path in tqdm(sets.items(), desc="prompt sets", unit="set"):
        data = _prompt_set(target, name, read_prompts(path, args.prompts), args.samples, args.tokens, args.seed)
        rows[f"{name} (first {args.prompts}), {args.tokens} tokens"] = (data, np.arange(len(data["tokens"])))
    out = {}
    for label, (data, which) in rows.items():
        got = evaluate(head, data, np.asarray(which), unroll)
        out[label] = {"acceptance_per_position": got["acceptance_per_position"], "coverage": got["coverage"],
                      "sequences": int(len(which))}
    base = next(iter(out.values()))["acceptance_per_position"][0]
    if args.json:
        print(json.dumps({"head": args.head, "settings": vars(args), "sets": out}, indent=1))
        return 0
    print(f"head {args.head}: held-out acceptance 1 - TV per draft position (temperature 1)")
    for label, got in out.items():
        acc = " / ".join(f"{a:.3f}" for a in got["acceptance_per_position"])
        print(f"  {label:<48} {acc}   coverage {got['coverage']:.3f}   first position / first row "
              f"{got['acceptance_per_position'][0] / base:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
