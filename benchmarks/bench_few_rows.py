"""Few-row products on CPU: ``F.linear`` against the W xᵀ route of :mod:`llm_bridge.kernels`.

Usage: python benchmarks/bench_few_rows.py [--rows 1,2,3,4,8,16] [--repeat 7] [--model] [--json]

Times, per number of rows, the product of the default target's weight shapes laid out as in the model (30
layers of q, k, v, o, gate, up and down, each weight read from memory once, as in a decode step) and of its
output head (576 × 49,152), by ``torch.nn.functional.linear`` and by :func:`llm_bridge.kernels.few_row_product`,
and prints the ratio. ``--model`` also times the default target's whole forward pass over n new tokens after a
40-token prompt, as loaded (few-row linears) and with plain ``torch.nn.Linear`` layers: t_target(n), the cost
the speculative cost model reads. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from llm_bridge.cache import cache_kwargs
from llm_bridge.kernels import few_row_product, plain_linears

LAYERS = 30
SHAPES = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]
HEAD = (49152, 576)


def median_ms(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def products(rows: list[int], repeat: int) -> list[dict]:
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(*shape, generator=gen) for _ in range(LAYERS) for shape in SHAPES]
    head = torch.randn(*HEAD, generator=gen)
    out = []
    for n in rows:
        xs = {k: torch.randn(n, k, generator=gen) for k in (576, 1536)}
        with torch.inference_mode():
            body_linear = median_ms(lambda xs=xs: [torch.nn.functional.linear(xs[w.shape[1]], w) for w in weights], repeat)
            body_few = median_ms(lambda xs=xs: [few_row_product(xs[w.shape[1]], w) for w in weights], repeat)
            head_linear = median_ms(lambda xs=xs: torch.nn.functional.linear(xs[576], head), repeat)
            head_few = median_ms(lambda xs=xs: few_row_product(xs[576], head), repeat)
        out.append({"rows": n, "body_linear_ms": body_linear, "body_few_rows_ms": body_few,
                    "head_linear_ms": head_linear, "head_few_rows_ms": head_few})
    return out


def forward_times(rows: list[int], repeat: int) -> list[dict]:
    from transformers import DynamicCache

    from llm_bridge.models import DEFAULT_TARGET, load_model

    model = load_model(DEFAULT_TARGET).model
    plain = plain_linears(load_model(DEFAULT_TARGET).model)
    prompt = torch.arange(1, 41).reshape(1, -1)
    out = []
    with torch.inference_mode():
        for n in rows:
            row = {"rows": n}
            for label, m in (("few_rows", model), ("linear", plain)):
                cache = DynamicCache()
                m(prompt, **cache_kwargs(m, cache), use_cache=True)
                new = torch.arange(100, 100 + n).reshape(1, -1)

                def step(m=m, cache=cache, new=new):
                    m(new, **cache_kwargs(m, cache), use_cache=True)
                    cache.crop(-new.shape[1])

                row[f"t_target_{label}_ms"] = median_ms(step, repeat)
            out.append(row)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,2,3,4,8,16")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--model", action="store_true", help="also time the default target's forward pass")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = [int(r) for r in args.rows.split(",")]
    result = {"threads": torch.get_num_threads(), "products": products(rows, args.repeat)}
    print(f"{'rows':>5} {'body linear':>12} {'body W xT':>10} {'ratio':>6} {'head linear':>12} {'head W xT':>10} "
          f"{'ratio':>6}   (ms, {result['threads']} threads)")
    for r in result["products"]:
        print(f"{r['rows']:5d} {r['body_linear_ms']:12.2f} {r['body_few_rows_ms']:10.2f} "
              f"{r['body_linear_ms'] / r['body_few_rows_ms']:5.2f}x {r['head_linear_ms']:12.2f} "
              f"{r['head_few_rows_ms']:10.2f} {r['head_linear_ms'] / r['head_few_rows_ms']:5.2f}x")
    if args.model:
        result["forward"] = forward_times([n for n in rows if n <= 9], args.repeat)
        base = result["forward"][0]["t_target_few_rows_ms"]
        print(f"\n{'n':>3} {'t_target linear':>16} {'t_target W xT':>14} {'ratio':>6} {'t(n)/t(1)':>10}")
        for r in result["forward"]:
            print(f"{r['rows']:3d} {r['t_target_linear_ms']:16.2f} {r['t_target_few_rows_ms']:14.2f} "
                  f"{r['t_target_linear_ms'] / r['t_target_few_rows_ms']:5.2f}x "
                  f"{r['t_target_few_rows_ms'] / base:10.2f}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
