"""The trees_logged figure: one step of k candidates on logged rows, every verifier against its draw's optimum."""

from __future__ import annotations

import numpy as np

from otspec import theory
from otspec.figures.trees_logged import trees_logged_data
from otspec.sources import load_logged_rows, log_rows, random_markov


def test_every_verifier_sits_below_the_optimum_of_its_draw(tmp_path):
    draft, target = random_markov(12, 1.0, seed=3, sparsity=0.2)
    log_rows(draft, target, 3, 10, top_p=0.9, seed=1).save(tmp_path / "llm_toy_rows.npz")
    data = trees_logged_data(scale=0.1, records_dir=tmp_path)
    (log,) = data["logs"]
    opt = {draw: np.array(v) for draw, v in log["optimum"].items()}
    assert np.all(opt["without"] >= opt["iid"] - 1e-12)  # Hu et al.: without replacement is never below i.i.d.
    for name, v in log["verifiers"].items():
        for i, (value, method) in enumerate(zip(v["values"], v["methods"], strict=True)):
            if value is None:
                assert name == "spechub" and log["ks"][i] > 2
                continue
            slack = 1e-9 if method == "exact" else 0.05  # Monte Carlo: 400 trials per step
            assert value <= opt[v["draw"]][i] + slack, (name, log["ks"][i])
    assert np.allclose(log["verifiers"]["otm"]["values"], opt["iid"], atol=1e-9)  # the OTM plan reaches it
    assert np.allclose(log["verifiers"]["greedy"]["values"], opt["greedy"], atol=1e-9)
    assert abs(log["verifiers"]["spechub"]["values"][0] - opt["greedy"][0]) < 1e-12  # the greedy draw at k = 2
    # k-Seq by hand on the same steps (the figure spreads them evenly over the log)
    rows = load_logged_rows(tmp_path / "llm_toy_rows.npz")
    steps = np.unique(np.linspace(0, rows.n_steps - 1, min(log["steps"], rows.n_steps)).astype(int))
    by_hand = np.mean([theory.kseq_acceptance(*rows.step_rows(int(t))[1:], 2) for t in steps])
    assert abs(log["verifiers"]["kseq"]["values"][0] - by_hand) < 1e-12
