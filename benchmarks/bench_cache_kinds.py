"""Per-call cost of the default target and the shipped EAGLE head by KV-cache kind: dynamic, static, compiled.

Usage: python benchmarks/bench_cache_kinds.py [--rows 1,2,3] [--kinds dynamic,static,compiled] [--repeat 15]
       [--device auto] [--json]

Times what a batch-1 decode loop pays per call: the target scoring n new tokens after a 40-token prompt
(t_target(n)) and the EAGLE head taking n (feature, token) pairs (t_draft(n)), each through the session cache
of :func:`llm_bridge.cache.make_cache` (feed, then roll back). The first call of each compiled width builds its
graph; its time is printed as the compile time. Prints each kind's times and their ratio to the dynamic cache,
and t_target(n) / t_target(1) and t_draft(1) / t_target(1), the two ratios the speculative cost model reads.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

PROMPT = 40


def _timed(step, repeat: int) -> tuple[float, float]:
    """(seconds of the first call, median ms of the next ``repeat``)."""
    start = time.perf_counter()
    step()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return first, 1e3 * float(np.median(times))


def call_costs(model, kind: str, rows: list[int], repeat: int, features: int | None = None) -> list[dict]:
    """t(n) of ``model`` on a batch of one through a ``kind`` cache (``features``: the head's feature width)."""
    from llm_bridge.cache import make_cache

    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    extra = (lambda m: {}) if features is None else \
        (lambda m: {"features": torch.randn(1, m, features, generator=torch.Generator().manual_seed(m)).to(device,
                                                                                                          dtype)})
    cache = make_cache(model, 1, hidden=features is not None, kind=kind, max_length=PROMPT + max(rows) + 8)
    cache.feed(np.arange(1, PROMPT + 1)[None], [PROMPT], **extra(PROMPT))
    out = []
    for n in rows:
        new, inputs = np.arange(100, 100 + n)[None], extra(n)

        def step(new=new, inputs=inputs, n=n):
            cache.feed(new, [n], **inputs)
            cache.rollback([PROMPT])
            if device.type == "cuda":
                torch.cuda.synchronize()

        first, ms = _timed(step, repeat)
        out.append({"rows": n, "ms": ms, "first_call_s": first})
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,2,3")
    parser.add_argument("--kinds", default="dynamic,static,compiled")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from llm_bridge.drafters import load_pair
    from llm_bridge.models import DEFAULT_TARGET

    rows = [int(r) for r in args.rows.split(",")]
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    pair = load_pair(DEFAULT_TARGET, "eagle", device=args.device)
    head = pair.drafter.head
    result = {"threads": torch.get_num_threads(), "device": pair.target.device, "kinds": {}}
    with torch.inference_mode():
        for kind in kinds:
            result["kinds"][kind] = {"target": call_costs(pair.target.model, kind, rows, args.repeat),
                                     "eagle": call_costs(head, kind, rows, args.repeat,
                                                         features=head.config.hidden_size)}
    base = result["kinds"].get("dynamic")
    print(f"{'kind':>9} {'n':>2} {'t_target ms':>12} {'t_draft ms':>11} {'t(n)/t(1)':>10} {'draft/t(1)':>11} "
          f"{'target vs dynamic':>18} {'first call s':>13}   ({result['threads']} threads, {result['device']})")
    for kind, costs in result["kinds"].items():
        t1 = costs["target"][0]["ms"]
        for i, (t, d) in enumerate(zip(costs["target"], costs["eagle"], strict=True)):
            ratio = "" if base is None else f"{base['target'][i]['ms'] / t['ms']:17.2f}x"
            print(f"{kind:>9} {t['rows']:2d} {t['ms']:12.2f} {d['ms']:11.2f} {t['ms'] / t1:10.2f} "
                  f"{d['ms'] / t1:11.3f} {ratio:>18} {t['first_call_s'] + d['first_call_s']:13.1f}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
