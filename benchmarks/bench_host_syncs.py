"""Host synchronisations per speculative iteration, for every chain verifier and every tree verifier, timer on.

Usage: python benchmarks/bench_host_syncs.py [--batch 3] [--tokens 48] [--L 4] [--tree 2x2x1] [--iid-tree iid:2:3]
       [--json FILE]

On a GPU every read of a device tensor on the host (``.item``, ``.tolist``, ``.cpu``, ``.numpy``, ``bool(t)``,
``int(t)``, ``np.asarray(t)``), every tensor built from host data (``torch.as_tensor`` / ``torch.tensor`` of a list or
an array), every boolean-mask index (its size depends on the data) and every ``torch.cuda.synchronize`` waits for the
device; and every torch operation outside a model's forward pass is a kernel launch there (about 5-10 µs of a host
that a GPU waits for when the models are small). This benchmark runs the loops on two tiny random models on the CPU
(the same code a GPU runs), with a
:class:`~llm_bridge.measure.CallTimer` as a record's runs have, and counts each of these made from otspec's or
llm_bridge's own code (not from inside the model), per iteration (``tests.host_syncs.SyncCounter``, the device tests'
counter too); the timer's synchronisations are counted where it would make them on CUDA (twice per timed call). It
prints, per configuration, the mean and largest count per iteration, the torch operations per iteration outside the
models (``tests.host_syncs.OpCounter``) and the commonest call sites, or why it did
not run (a verifier without a torch path, a size it refuses). Chains run with rows on the device
(``host_rows=False``), and trees too: k-configs with a verifier of candidates take the device walk
(:mod:`otspec.engine.devicetree`), the others the host walk over device rows. Nothing is asserted: it measures
where the loops stand (``tests/test_host_syncs.py`` asserts the bound).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from otspec.engine.runstate import LoopHooks

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--L", type=int, default=4)
    parser.add_argument("--tree", default="2x2x1")
    parser.add_argument("--iid-tree", default="iid:2:3", help="for a verifier of i.i.d. paths only (GBV)")
    parser.add_argument("--json", default=None, help="write the counts here")
    args = parser.parse_args(argv)

    import torch

    from llm_bridge.sampling import Sampling
    from llm_bridge.sessions import ModelSession
    from llm_bridge.trees import parse_tree
    from llm_bridge.validate import TREE_VERIFIERS
    from otspec.engine.controllers import FixedDraftLength
    from otspec.engine.loop import chain_loop, tree_loop
    from otspec.verifiers import CHAIN_VERIFIERS
    from tests.host_syncs import IterationMarks, OpCounter, OpMarks, SyncCounter, cuda_like_timer
    from tests.llm_tiny import random_prompts, tiny_pair

    pair, sampling, B = tiny_pair(sharpness=3.0), Sampling(), args.batch
    models = (pair.target.model, pair.drafter.model)
    prompts = random_prompts(B, np.random.default_rng(0))
    results = {}

    def run(label, make_loop):
        timer = cuda_like_timer()  # the CUDA timer's path, its events on the host clock; its synchronisations counted
        with SyncCounter() as counter, OpCounter(models) as ops:
            marks, op_marks = IterationMarks(counter), OpMarks(ops)
            try:
                make_loop(timer, [marks, op_marks])
            except Exception as err:  # a verifier without a torch path, a size it refuses: say so and go on
                results[label] = {"error": f"{type(err).__name__}: {err}"}
                print(f"{label:44s} did not run: {type(err).__name__}: {err}")
                return
        per = np.diff([0, *marks.marks])[1:]  # the first iteration holds the prefill
        launched = np.diff(op_marks.marks)
        sites = Counter(counter.seen[marks.marks[0]:]).most_common(5)
        results[label] = {"iterations": int(per.size), "mean": float(per.mean()), "max": int(per.max()),
                          "sites": [[s, n] for s, n in sites], "ops_per_iteration": float(launched.mean())}
        print(f"{label:44s} {per.size:3d} it | syncs per iteration mean {per.mean():4.1f} max {per.max():3d} | "
              f"ops {launched.mean():6.0f} | " + "; ".join(f"{n}x {s}" for s, n in sites[:2]))

    for name, cls in CHAIN_VERIFIERS.items():
        def chain(timer, marks, cls=cls):
            target = ModelSession(pair.target.model, B, sampling, host_rows=False, name="target", timer=timer)
            draft = pair.drafter.session(B, sampling, host_rows=False, timer=timer)
            chain_loop(draft, target, cls(), FixedDraftLength(args.L), args.tokens, torch.Generator().manual_seed(0),
                       hooks=LoopHooks(observers=marks, timer=timer), prompts=prompts)
        run(f"chain {name} L = {args.L}", chain)
    for name, cls in TREE_VERIFIERS.items():
        verifier = cls()
        spec, tree = args.tree, parse_tree(args.tree, verifier.replacement)
        try:
            getattr(verifier, "check_tree", lambda t: None)(tree)
        except ValueError:  # a verifier of i.i.d. paths only (GBV)
            spec, tree = args.iid_tree, parse_tree(args.iid_tree, verifier.replacement)

        def grow(timer, marks, verifier=verifier, tree=tree):
            target = ModelSession(pair.target.model, B, sampling, host_rows=False, name="target", timer=timer)
            draft = pair.drafter.session(B, sampling, host_rows=False, timer=timer)
            tree_loop(draft, target, verifier, tree, args.tokens, torch.Generator().manual_seed(0),
                      hooks=LoopHooks(observers=marks, timer=timer), prompts=prompts)
        run(f"tree {name} {spec}", grow)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
