"""Where the cost profile's dry run and a real run of the same configuration part, iteration by iteration.

Usage: python benchmarks/bench_dry_vs_run.py [--target smollm2|tiny] [--draft distilled] [--verifier block_v1]
       [--L 8 | --tree 4x2x2x1] [--batch 8] [--prompts 8] [--tokens 64] [--rounds 2] [--json FILE]

A record predicts a run's wall clock from a cost profile (``llm_bridge.calibrate``) whose per-iteration costs come
from a *dry run* of the configuration: for a chain every draft rejected, for a tree the real loop. Where a
prediction misses, the record's miss decomposition says which part of the iteration (loop overhead, draft, target,
verifier) the run paid more for; this benchmark says why. Round by round it runs the dry run (``dry_run`` over
``dry_tokens``: a chain's half the tokens, a tree's all of them; here from the prompts themselves) and the run
(``speculative_generate`` or ``tree_batches``), both at the same batch, and prints per batch iteration: wall clock, draft / target / verifier calls and the rest, and
counters patched into the loop for the duration —

* chains with a verifier that carries residual targets (v1 block verification): the time in ``current_targets``,
  the cascade passes per iteration (one per scored position of each group of equal draft lengths), the residual
  windows active in a pass (over the batch: a window costs a full-vocabulary residual for every row when any row
  has it), and the groups of equal draft lengths per iteration;
* trees: the time growing the tries outside the draft calls, and the KV slots (tokens plus holes) a session holds
  when it commits the accepted path;
* chains on dynamic caches: the KV slots each target and draft call attends over (tokens plus the holes that
  rolled-back drafts leave until the cache compacts them) and the longest row's tokens beside them.

Then the ratios run / dry. Nothing is asserted. ``--target tiny`` uses two tiny random models (no download).
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np


class Counters:
    """Loop counters for one phase, patched in on ``__enter__`` and restored on ``__exit__``."""

    def __init__(self, target_model=None):
        self.target_model = target_model
        self.reset()
        self._undo = []

    def reset(self) -> None:
        self.v = {"current_targets_s": 0.0, "passes": 0, "active_windows": 0, "groups": 0, "carried_calls": 0,
                  "grow_outside_s": 0.0, "slots": [], "target_slots": [], "target_tokens": [], "draft_slots": [],
                  "draft_tokens": [], "target_calls": [], "draft_calls": []}

    def _patch(self, owner, name, make) -> None:
        orig = getattr(owner, name)
        setattr(owner, name, make(orig))
        self._undo.append((owner, name, orig))

    def __enter__(self):
        import llm_bridge.cache as cache
        import otspec.engine.loop as loop
        import otspec.verifiers.carry as carry
        from otspec.verifiers import REGISTRY

        def cascade_levels(orig):
            def wrapped(windows, target_row, draft_row, position):
                act = windows.active(position)
                self.v["passes"] += 1
                self.v["active_windows"] += int(act.any(axis=0).sum())
                return orig(windows, target_row, draft_row, position)
            return wrapped

        def current_targets(orig):
            def wrapped(verifier, state, rows, tokens, p, q, start, lengths, nxt):
                t = time.perf_counter()
                out = orig(verifier, state, rows, tokens, p, q, start, lengths, nxt)
                self.v["current_targets_s"] += time.perf_counter() - t
                self.v["carried_calls"] += 1
                self.v["groups"] += int(np.unique(np.asarray(lengths)).size)
                return out
            return wrapped

        def grow(orig):
            def wrapped(draft, tree, run, depth, rng):
                timer = run.call.timer
                before = timer.total("draft") if timer is not None else 0.0
                t = time.perf_counter()
                out = orig(draft, tree, run, depth, rng)
                inside = (timer.total("draft") - before) if timer is not None else 0.0
                self.v["grow_outside_s"] += time.perf_counter() - t - inside
                return out
            return wrapped

        def keep_path(orig):
            def wrapped(session, paths):
                valid = getattr(session, "valid", None)
                if valid is not None:
                    self.v["slots"].append(int(valid.shape[1]))
                return orig(session, paths)
            return wrapped

        def feed(orig):  # a chain call of a dynamic cache: the slots it attends over (tokens and holes)
            def wrapped(lm, tokens, counts, **inputs):
                who = "target" if lm.model is self.target_model else "draft"
                self.v[f"{who}_slots"].append(int(lm.valid.shape[1]))
                self.v[f"{who}_tokens"].append(float(np.max(lm.length, initial=0)))
                before, t = int(lm.valid.shape[1]), time.perf_counter()
                out = orig(lm, tokens, counts, **inputs)
                m = int(np.shape(tokens)[1])  # (width, slots attended: the cache's and the call's own, ms) per call
                self.v[f"{who}_calls"].append((m, before + m, 1e3 * (time.perf_counter() - t)))
                return out
            return wrapped

        self._patch(carry.ResidualWindows, "cascade_levels", cascade_levels)
        self._patch(cache.CachedLM, "feed", feed)
        self._patch(type(REGISTRY["block_v1"]()), "current_targets", current_targets)
        self._patch(loop, "_grow", grow)
        self._patch(cache._Pending, "keep_path", keep_path)
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, orig in reversed(self._undo):
            setattr(owner, name, orig)
        self._undo.clear()


def _phase(name: str, iterations: int, wall, draft, target, verify, c: dict, by_width: dict) -> dict:
    n = max(iterations, 1)
    common = max(by_width, key=lambda w: len(by_width[w]), default=0)  # the most frequent scored width
    row = {"phase": name, "iterations": iterations, "wall_ms": wall / n, "draft_ms": draft / n,
           "common_width": int(common), "target_call_at_common_width_ms": float(np.mean(by_width[common]))
           if by_width else 0.0, "target_call_ms_by_width": {int(w): float(np.mean(v)) for w, v in by_width.items()},
           "target_ms": target / n, "verify_ms": verify / n, "rest_ms": (wall - draft - target - verify) / n,
           "current_targets_ms": 1e3 * c["current_targets_s"] / n, "passes": c["passes"] / n,
           "active_windows": c["active_windows"] / max(c["passes"], 1),
           "groups": c["groups"] / max(c["carried_calls"], 1), "grow_outside_ms": 1e3 * c["grow_outside_s"] / n,
           "slots": float(np.mean(c["slots"])) if c["slots"] else 0.0,
           **{k: float(np.mean(c[k])) if c[k] else 0.0 for k in ("target_slots", "target_tokens", "draft_slots",
                                                                  "draft_tokens")},
           "target_calls": list(c["target_calls"]), "draft_calls": list(c["draft_calls"])}
    print(f"{name:4s} {iterations:4d} it | ms/it wall {row['wall_ms']:7.1f} draft {row['draft_ms']:6.1f} target "
          f"{row['target_ms']:6.1f} (a call at {common}: {row['target_call_at_common_width_ms']:6.1f}) verify "
          f"{row['verify_ms']:5.1f} rest {row['rest_ms']:6.1f} | current_targets "
          f"{row['current_targets_ms']:6.1f} passes {row['passes']:4.1f} windows/pass {row['active_windows']:4.2f} "
          f"groups {row['groups']:4.2f} | grow outside calls {row['grow_outside_ms']:6.1f} KV slots "
          f"{row['slots']:6.1f} | a call's KV slots (longest row): target {row['target_slots']:6.1f} "
          f"({row['target_tokens']:6.1f}) draft {row['draft_slots']:6.1f} ({row['draft_tokens']:6.1f})", flush=True)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="smollm2", help="smollm2, a folder, or 'tiny'")
    parser.add_argument("--draft", default="distilled")
    parser.add_argument("--verifier", default="block_v1")
    parser.add_argument("--L", type=int, default=8)
    parser.add_argument("--tree", default=None, help="a tree (e.g. 4x2x2x1) instead of a chain of --L tokens")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument("--dry-from", choices=("prompt", "calibration"), default="prompt",
                        help="where a chain's dry run starts: the prompts, or a quarter into each prompt's plain "
                             "continuation as the cost profile's dry runs do (decoded once, untimed)")
    args = parser.parse_args(argv)

    import torch

    from llm_bridge.dry_runs import dry_run, dry_tokens
    from llm_bridge.loop import finish, speculative_generate
    from llm_bridge.prompts import DATA_DIR, encode_prompts, read_prompts
    from llm_bridge.sampling import Sampling
    from llm_bridge.trees import parse_tree, tree_batches
    from llm_bridge.validate import TREE_VERIFIERS
    from otspec.verifiers import REGISTRY

    torch.set_num_threads(args.threads)
    if args.target == "tiny":
        import sys
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.llm_tiny import tiny_pair

        pair, texts = tiny_pair(sharpness=3.0), None
    else:
        from llm_bridge.drafters import load_pair

        pair = load_pair(args.target, args.draft, device="cpu")
        texts = read_prompts(DATA_DIR / "validate_prompts.txt")
    # the prediction prompts' lines (after the measured ones), as a record's calibration uses
    ids = ([[1 + (i % 5), 2, 3] for i in range(args.prompts)] if texts is None else
           encode_prompts(pair.target.tokenizer, texts[32:32 + args.prompts]))
    sampling, N = Sampling(), args.tokens
    tree_spec = args.tree
    make = (lambda: TREE_VERIFIERS[args.verifier]()) if tree_spec else (lambda: REGISTRY[args.verifier]())
    draft = parse_tree(tree_spec, make().replacement) if tree_spec else args.L
    label = f"{args.verifier} {tree_spec or f'L = {args.L}'}, batch {args.batch}, {args.prompts} prompts x {N} tokens"
    print(f"{label}; target {args.target}, draft {args.draft}, {args.threads} threads, {platform.processor() or '?'}")

    def run_once(seed: int):
        kw = dict(sampling=sampling, seed=seed, cache="dynamic", progress=False, record_law=False,
                  batch_size=args.batch)
        if tree_spec:
            return finish(tree_batches(pair, ids, make(), tree_spec, N, defer_closed_forms=True, **kw))
        return speculative_generate(pair, ids, make(), args.L, N, **kw)

    run_once(0)  # warm-up (untimed)
    if tree_spec or args.dry_from == "prompt":
        dry_from, n_dry = [list(i) for i in ids], dry_tokens(N, draft)
    else:  # as calibrate does: one batch at a time, from a quarter of each plain continuation on
        from llm_bridge.dry_runs import dry_contexts
        from llm_bridge.loop import plain_generate

        plain = plain_generate(pair.target, ids, N, sampling=sampling, seed=99, batch_size=args.batch, cache="dynamic")
        dry_from, n_dry = dry_contexts(draft, ids, [np.asarray(t) for t in plain.tokens], N)
    rows = []
    with Counters(pair.target.model) as counters:
        for r in range(args.rounds):
            for phase in ("dry", "run"):
                counters.reset()
                if phase == "dry":
                    cols = dry_run(pair, make(), draft, dry_from, n_dry, sampling=sampling, cache="dynamic",
                                   seed=r + 1)
                    widths: dict = {}
                    for w, ms in zip(cols["width"], cols["target_ms"], strict=True):
                        widths.setdefault(int(w) + 1, []).append(ms)
                    rows.append(_phase("dry", len(cols["wall_ms"]), *(sum(cols[k]) for k in (
                        "wall_ms", "draft_ms", "target_ms", "verify_ms")), counters.v, widths))
                else:
                    out = run_once(r + 1)
                    tm = out.timer
                    rows.append(_phase("run", tm.count("target"), 1e3 * out.seconds,
                                       *(1e3 * tm.total(k) for k in ("draft", "target", "verify")), counters.v,
                                       {n: [1e3 * x for x in v] for n, v in tm.records["target"].items()}))
    keys = ("wall_ms", "draft_ms", "target_ms", "verify_ms", "rest_ms", "current_targets_ms", "passes",
            "active_windows", "groups", "grow_outside_ms", "slots", "target_slots", "target_tokens", "draft_slots",
            "draft_tokens")
    mean = {ph: {k: float(np.mean([r[k] for r in rows if r["phase"] == ph])) for k in keys} for ph in ("dry", "run")}
    print("run / dry: " + ", ".join(f"{k} {mean['run'][k] / mean['dry'][k]:.3f}" for k in keys
                                    if mean["dry"][k] > 0))
    common = next(r["common_width"] for r in rows if r["phase"] == "run")  # the run's most frequent width
    at = {ph: [r["target_call_ms_by_width"][common] for r in rows if r["phase"] == ph
               and common in r["target_call_ms_by_width"]] for ph in ("dry", "run")}
    if at["dry"] and at["run"]:
        print(f"a target call scoring {common} tokens per sequence: run {np.mean(at['run']):.1f} ms, dry run "
              f"{np.mean(at['dry']):.1f} ms (x {np.mean(at['run']) / np.mean(at['dry']):.3f})")
    calls = {ph: np.array([x for r in rows if r["phase"] == ph for x in r["target_calls"]], dtype=np.float64).reshape(
        -1, 3) for ph in ("dry", "run")}
    drafts = {ph: np.array([x for r in rows if r["phase"] == ph for x in r["draft_calls"]], dtype=np.float64).reshape(
        -1, 3) for ph in ("dry", "run")}
    for m in sorted(set(drafts["run"][:, 0].astype(int)) | set(drafts["dry"][:, 0].astype(int))):
        at = {ph: d[d[:, 0] == m] for ph, d in drafts.items()}
        print(f"draft calls of width {m}: " + ", ".join(
            f"{ph} {len(a)} calls, {a[:, 2].mean():.1f} ms at {a[:, 1].mean():.1f} slots" if len(a) else f"{ph} none"
            for ph, a in at.items()))
    dry_at, run_at = (c[c[:, 0] == common] for c in (calls["dry"], calls["run"]))
    if len(dry_at) >= 3 and len(run_at):  # the dry run's own cost per attended slot, at the run's common width
        slope = np.polyfit(dry_at[:, 1], dry_at[:, 2], 1)[0]
        gap = run_at[:, 1].mean() - dry_at[:, 1].mean()
        print(f"target calls of width {common}: slots attended run {run_at[:, 1].mean():.1f}, dry "
              f"{dry_at[:, 1].mean():.1f}; the dry run's cost per slot {slope:.3f} ms (fit over its "
              f"{len(dry_at)} calls, slots {dry_at[:, 1].min():.0f}-{dry_at[:, 1].max():.0f}) -> expected run - dry "
              f"{slope * gap:+.1f} ms, measured {run_at[:, 2].mean() - dry_at[:, 2].mean():+.1f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"configuration": label, "rows": rows, "mean": mean}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
