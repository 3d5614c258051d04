"""otspec's batched verifiers on torch at the default pair's vocabulary, against one target call.

Usage: python benchmarks/bench_verifiers_torch.py [--vocab 49152] [--L 8] [--batches 1,4,16,64,256]
       [--k 4] [--device auto] [--target smollm2|none] [--repeat 3] [--json]

For each verifier (token, block, block_v1) and batch size B it times one ``sample`` call on torch
tensors on the device — B drafts of L tokens with (B, L, V) draft rows and (B, L+1, V) target rows
— and prints verifications per second. With ``--target smollm2`` (the default when the target is
already cached) it also times one target call scoring L + 1 tokens for each of the B sequences
after a 32-token context, and prints verifier time / target-call time (goal, issue 12: <= 3 % on
a GPU). The multi-draft verifiers (kseq, multiround) are timed on one tree level — k i.i.d.
candidates from a (B, V) draft row — and charged L times, one walk of L levels per iteration.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch

from otspec.verifiers import MULTI_DRAFT_REGISTRY, REGISTRY

GOAL_FRACTION = 0.03


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _best(call, device, repeat: int) -> float:
    """Best seconds of ``call()`` over ``repeat`` synchronised runs, after one untimed warm-up run."""
    call()
    best = float("inf")
    for _ in range(repeat):
        _sync(device)
        t0 = time.perf_counter()
        call()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def _rows(shape, device, gen):
    """Random probability rows (peaked like a language model's) of ``shape`` (..., V), float32."""
    return torch.softmax(3.0 * torch.randn(shape, device=device, generator=gen), dim=-1)


def time_verifier(verifier, B: int, L: int, V: int, device, repeat: int) -> float:
    """Best seconds of one ``verifier.sample`` call on B drafts (tokens drawn from their draft rows)."""
    gen = torch.Generator(device=device).manual_seed(0)
    p = _rows((B, L, V), device, gen)
    q = _rows((B, L + 1, V), device, gen)
    tokens = torch.multinomial(p.reshape(B * L, V), 1, generator=gen).reshape(B, L)
    return _best(lambda: verifier.sample(tokens, p, q, gen, validate=False), device, repeat)


def time_level(verifier, B: int, k: int, V: int, device, repeat: int) -> float:
    """Best seconds of one multi-draft ``verifier.sample`` call: k i.i.d. candidates per row, (B, V) rows."""
    gen = torch.Generator(device=device).manual_seed(0)
    p, q = _rows((B, V), device, gen), _rows((B, V), device, gen)
    candidates = torch.multinomial(p, k, replacement=True, generator=gen)
    return _best(lambda: verifier.sample(candidates, p, q, gen, validate=False), device, repeat)


def time_target(model, B: int, L: int, device, repeat: int, context: int = 32) -> float:
    """Best seconds of one target call scoring L + 1 tokens for each of B sequences after ``context`` tokens."""
    from llm_bridge.cache import CachedLM

    gen = torch.Generator().manual_seed(1)
    prefix = torch.randint(3, model.config.vocab_size, (B, context), generator=gen).numpy()
    new = torch.randint(3, model.config.vocab_size, (B, L + 1), generator=gen).numpy()
    cache = CachedLM(model, B)
    cache.feed(prefix, [context] * B)
    best = float("inf")
    for _ in range(repeat + 1):  # the first call warms up
        _sync(device)
        t0 = time.perf_counter()
        cache.feed(new, [L + 1] * B)
        _sync(device)
        best = min(best, time.perf_counter() - t0)
        cache.rollback([context] * B)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=49_152)
    parser.add_argument("--L", type=int, default=8)
    parser.add_argument("--batches", default="1,4,16,64,256")
    parser.add_argument("--k", type=int, default=4, help="candidates per level for kseq and multiround")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--target", default=None, help="'smollm2' (default when cached) or 'none'")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from llm_bridge.models import cache_dir, load_model, resolve_device

    device = torch.device(resolve_device(args.device))
    batches = [int(b) for b in args.batches.split(",")]
    target_name = args.target or ("smollm2" if (cache_dir() / "smollm2-135m-instruct" / "config.json").exists()
                                  else "none")
    model = None if target_name == "none" else load_model(target_name, device=str(device)).model
    rows = []
    for B in batches:
        t_target = time_target(model, B, args.L, device, args.repeat) if model is not None else None
        for name in ("token", "block", "block_v1"):
            seconds = time_verifier(REGISTRY[name](), B, args.L, args.vocab, device, args.repeat)
            rows.append({"verifier": name, "batch": B, "seconds": seconds, "verifications_per_s": B / seconds,
                         "target_call_s": t_target,
                         "fraction_of_target_call": None if t_target is None else seconds / t_target})
        for name in ("kseq", "multiround"):
            seconds = args.L * time_level(MULTI_DRAFT_REGISTRY[name](), B, args.k, args.vocab, device, args.repeat)
            rows.append({"verifier": f"{name} k={args.k}", "batch": B, "seconds": seconds,
                         "verifications_per_s": B / seconds, "target_call_s": t_target,
                         "fraction_of_target_call": None if t_target is None else seconds / t_target})
    info = {"device": str(device), "cpus": os.cpu_count(), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(),
            "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None}
    if args.json:
        print(json.dumps({"machine": info, "vocab": args.vocab, "draft_length": args.L, "target": target_name,
                          "goal_fraction": GOAL_FRACTION, "results": rows}, indent=2))
        return
    print(f"verifier.sample on torch, V = {args.vocab:,}, L = {args.L}, best of {args.repeat}  ({info})")
    for r in rows:
        ratio = "" if r["fraction_of_target_call"] is None else (
            f"  {100 * r['fraction_of_target_call']:6.2f} % of a target call ({1e3 * r['target_call_s']:.1f} ms;"
            f" goal <= {100 * GOAL_FRACTION:.0f} %)")
        print(f"  {r['verifier']:<14} B = {r['batch']:>4}  {1e3 * r['seconds']:9.3f} ms  "
              f"{r['verifications_per_s']:12,.0f} verifications/s{ratio}")


if __name__ == "__main__":
    main()
