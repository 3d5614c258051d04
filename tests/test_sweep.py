"""otspec sweep: spec expansion, cells against independent values, executors, resume, lost workers."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from otspec import cli
from otspec.sources import IIDSource, random_iid
from otspec.sweep import cell_id, load_spec, run_sweep
from otspec.sweep.run import CRASH_ONCE_ENV

pd = pytest.importorskip("pandas")

SPEC = """
name = "small"
seed = 11
quantities = ["exact", "optimum", "monte_carlo", "decode", "adaptive"]
L = [2, 3]
k = [2]
cost_ratio = [0.0, 0.2]
blocks = 40000
tokens = 24
sequences = 3

[[pairs]]
kind = "random_iid"
vocab = [4, 40]
concentration = [0.0, 5.0]

[[pairs]]
kind = "iid"
draft = [0.3, 0.7]
target = [0.6, 0.4]
label = "bernoulli"

[[verifiers]]
name = "token"
[[verifiers]]
name = "block"
[[verifiers]]
name = "multiround"
"""
TIMING = ("_seconds", "mc_blocks_per_s")


def _spec(tmp_path, text=SPEC, name="spec.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _table(out):
    frame = pd.read_parquet(out / "results.parquet")
    keep = [c for c in frame.columns if not c.endswith(TIMING)]
    return frame[keep].sort_values("cell").reset_index(drop=True)


def test_spec_expands_the_grid_and_refuses_bad_input(tmp_path):
    spec = load_spec(_spec(tmp_path))
    # 5 pairs x (2 single-draft verifiers x 2 lengths + 1 multi-draft x 1 k) x 2 cost ratios
    assert len(spec.cells) == 5 * (2 * 2 + 1) * 2 and len({cell_id(c) for c in spec.cells}) == len(spec.cells)
    assert all((c["k"] is None) == (c["verifier"] != "multiround") for c in spec.cells)
    yaml_path = tmp_path / "spec.yaml"
    yaml_path.write_text("seed: 11\npairs:\n  - {kind: iid, draft: [0.3, 0.7], target: [0.6, 0.4]}\n"
                         "verifiers:\n  - {name: kseq, rho: [1.5, 2.0]}\nk: [2, 3]\n")
    assert len(load_spec(yaml_path).cells) == 4
    for bad, match in [("pairs = []", "pairs"), ('bogus = 1\n' + SPEC, "unknown"),
                       (SPEC.replace('name = "token"', 'name = "tokn"'), "tokn"),
                       (SPEC.replace('kind = "iid"', 'kind = "zipf"'), "kind"),
                       (SPEC.replace('"adaptive"]', '"adaptive", "magic"]'), "magic"),
                       (SPEC.replace("L = [2, 3]", "L = [2, 0]"), "L"),
                       (SPEC.replace('name = "multiround"', 'name = "kseq"\nrho = [0.5]'), "rho"),
                       ("seed = [", "parse"),
                       (SPEC.replace("vocab = [4, 40]", "vocab = [4, 10000000000]"), "MAX_RANDOM_ENTRIES"),
                       (SPEC.replace("vocab = [4, 40]", "vocab = [4, 40]\nbogus = 2"), "unknown"),
                       (SPEC.replace('kind = "random_iid"\nvocab = [4, 40]', 'kind = "random_markov"\nvocab = 5000'),
                        "MAX_RANDOM_ENTRIES")]:
        with pytest.raises(ValueError, match=match):
            load_spec(_spec(tmp_path, bad, "bad.toml"))
    with pytest.raises(FileNotFoundError):
        load_spec(tmp_path / "missing.toml")
    with pytest.raises(FileNotFoundError, match="no draft source file"):
        load_spec(_spec(tmp_path, 'L = 2\n[[pairs]]\nkind = "json"\ndraft = "d.json"\ntarget = "t.json"\n'
                                  '[[verifiers]]\nname = "token"\n', "json.toml"))


def test_cells_agree_with_independent_values(tmp_path):
    out = tmp_path / "serial"
    run_sweep(_spec(tmp_path), out, workers=1, progress=False)
    t = _table(out)
    assert len(t) == 50
    assert t.filter(like="_note").drop(columns=["decode_note", "adaptive_note"]).isna().all().all()
    token = t[t.verifier == "token"]
    # SpecDec++: the optimal policy is at least as fast as the best fixed length, which is at most fixed L
    assert (token.adaptive_latency <= token.adaptive_best_fixed_latency + 1e-12).all()
    assert (token.adaptive_best_fixed_latency <= token.adaptive_fixed_latency + 1e-12).all()
    free = token[token.cost_ratio == 0]  # free drafts: fixed L latency = 1 / E[tokens per iteration]
    assert np.allclose(free.adaptive_fixed_latency, 1 / free.exact_tokens_per_iteration, rtol=1e-12)
    for _, r in t[t.verifier == "token"].iterrows():
        if r.pair == "bernoulli":
            p, q = np.array([0.3, 0.7]), np.array([0.6, 0.4])
        else:
            d, g = random_iid(int(r.vocab), r.concentration, seed=11)
            p, q = d.probs, g.probs
        beta = 1 - 0.5 * np.abs(p - q).sum()
        e = sum(beta**i for i in range(1, int(r.L) + 1))  # eq. (4) for an IID pair
        assert abs(r.exact_accepted - e) <= 1e-12
        assert abs(r.exact_speedup - (e + 1) / (1 + r.cost_ratio * r.L)) <= 1e-12
    single = t[t.verifier != "multiround"]
    assert (single.exact_accepted <= single.optimum_accepted + 1e-9).all()
    inside = (single.mc_low <= single.exact_high + 1e-9) & (single.exact_low - 1e-9 <= single.mc_high)
    assert inside.mean() >= 0.85  # 95 % intervals: a few misses are expected among 40 cells
    multi = t[t.verifier == "multiround"]
    assert (multi.exact_acceptance <= multi.optimum_acceptance + 1e-9).all()
    hit = (multi.mc_low <= multi.exact_acceptance + 1e-12) & (multi.exact_acceptance - 1e-12 <= multi.mc_high)
    assert hit.mean() >= 0.8 and "monte_carlo_note" not in t  # one step of k candidates, 95 % intervals


def test_local_pool_and_dask_cluster_give_the_serial_rows_exactly(tmp_path):
    pytest.importorskip("distributed")
    spec = _spec(tmp_path)
    run_sweep(spec, tmp_path / "serial", workers=1, progress=False)
    run_sweep(spec, tmp_path / "pool", workers=2, progress=False)
    run_sweep(spec, tmp_path / "dask", cluster="local:2", progress=False)
    serial = _table(tmp_path / "serial")
    pd.testing.assert_frame_equal(serial, _table(tmp_path / "pool"))
    pd.testing.assert_frame_equal(serial, _table(tmp_path / "dask"))
    assert (tmp_path / "dask" / "results.csv").stat().st_size > 0


def test_resume_skips_finished_cells_and_a_lost_worker_loses_no_row(tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    spec = _spec(tmp_path)
    out = tmp_path / "out"
    first = run_sweep(spec, out, workers=1, progress=False)
    assert first["ran"] == 50 and first["skipped"] == 0
    files = sorted((out / "cells").glob("*.json"))
    for f in files[:7]:
        f.unlink()
    again = run_sweep(spec, out, workers=1, progress=False)
    assert again["ran"] == 7 and again["skipped"] == 43
    # a worker killed mid-cell: its cell is run again elsewhere, every finished row stays
    crashed = tmp_path / "crashed"
    marker = tmp_path / "crash.marker"
    monkeypatch.setenv(CRASH_ONCE_ENV, str(marker))
    run_sweep(spec, crashed, cluster="local:2", progress=False)
    assert marker.exists()  # one worker did die
    pd.testing.assert_frame_equal(_table(out), _table(crashed))
    assert not [p for p in os.listdir(crashed / "cells") if p.endswith(".tmp")]


def test_sweep_command_line(tmp_path, capsys):
    spec = _spec(tmp_path, SPEC.replace('quantities = ["exact", "optimum", "monte_carlo", "decode", "adaptive"]',
                                        'quantities = ["exact"]'))
    assert cli.main(["sweep", str(spec), "--workers", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cells"] == 50 and out["ran"] == 50 and out["out"].endswith("spec_results")
    frame = pd.read_csv(out["table"]["csv"])
    assert len(frame) == 50 and not math.isnan(frame.exact_accepted.dropna().iloc[0])
    assert cli.main(["sweep", str(spec), "--workers", "2", "--cluster", "local:2"]) == 2
    assert cli.main(["sweep", str(tmp_path / "nope.toml")]) == 2
    assert cli.main(["sweep", str(spec), "--cluster", "remote:3", "--json"]) == 2


def test_plot_sweep_draws_lines_and_heat_maps_and_names_what_varies(tmp_path, capsys):
    from otspec import plot

    out = tmp_path / "out"
    run_sweep(_spec(tmp_path), out, workers=1, progress=False)
    results = str(out / "results.parquet")
    assert plot.main(["sweep", results, "--x", "L", "--y", "exact_accepted", "--hue", "verifier", "--where",
                      "pair=bernoulli", "--where", "cost_ratio=0", "--out", str(tmp_path / "lines.png")]) == 0
    assert (tmp_path / "lines.png").stat().st_size > 10_000
    assert plot.main(["sweep", str(out / "results.csv"), "--heatmap", "--x", "L", "--y", "concentration", "--z",
                      "mc_accepted", "--where", "verifier=block", "--where", "vocab=40", "--where",
                      "cost_ratio=0.2"]) == 0
    assert (out / "mc_accepted_by_L_concentration.png").exists()
    assert plot.main(["sweep", results, "--x", "L", "--y", "exact_accepted", "--hue", "verifier"]) == 2
    err = capsys.readouterr().err
    assert "pick a slice with --where" in err and "'cost_ratio'" in err and "'exact_speedup'" not in err
    assert plot.main(["sweep", results, "--x", "L", "--y", "nope"]) == 2
    assert plot.main(["sweep", results, "--x", "L", "--y", "exact_accepted", "--where", "vocab=999"]) == 2
    assert plot.main(["sweep", str(tmp_path / "missing.parquet"), "--x", "L", "--y", "exact_accepted"]) == 2
    capsys.readouterr()
    assert plot.main(["sweep", results, "--x", "k", "--y", "decode_block_efficiency", "--where",  # issue 25
                      "verifier=multiround", "--where", "pair=bernoulli", "--where", "cost_ratio=0"]) == 2
    err = capsys.readouterr().err
    assert "empty in every row" in err and "single-draft" in err


LOGGED_SPEC = """
seed = 3
quantities = ["exact", "optimum", "monte_carlo", "decode"]
L = [2, 3]
k = [2]
blocks = 200000

[[pairs]]
kind = "logged"
file = "rows.npz"
tail = ["overlap", "renormalise"]

[[verifiers]]
name = "token"
[[verifiers]]
name = "block"
[[verifiers]]
name = "kseq"
"""


def test_logged_rows_sweep_checks_its_cells_against_the_windows_and_steps(tmp_path):
    from otspec.sources import load_logged_rows, log_rows, random_markov
    from otspec.theory import positional_window_values
    from otspec.verifiers import KSeq

    d, t = random_markov(12, 1.0, seed=5)
    log_rows(d, t, 4, 10, top_p=0.85, seed=6).save(tmp_path / "rows.npz")
    log = load_logged_rows(tmp_path / "rows.npz")
    out = tmp_path / "out"
    run_sweep(load_spec(_spec(tmp_path, LOGGED_SPEC)), out, workers=1, progress=False)
    frame = pd.read_parquet(out / "results.parquet")
    assert len(frame) == 2 * (2 * 2 + 1)
    for row in frame.itertuples():
        tail = row.tail
        alpha = log.overlaps(tail)
        assert row.vocab == log.vocab(tail) and row.pair == f"logged:rows.npz({tail})"
        assert "logged rows" in row.decode_note
        if row.verifier == "kseq":
            steps = [KSeq().expected_acceptance(*log.step_rows(s, tail)[1:], 2) for s in range(log.n_steps)]
            assert abs(row.exact_acceptance - np.mean(steps)) <= 1e-12
            assert row.optimum_acceptance >= row.exact_acceptance - 1e-9
            assert "multi-draft cells on logged rows" in row.monte_carlo_note
            continue
        L = int(row.L)
        W = log.windows(L)
        token, high = positional_window_values(alpha[W[:, None] + np.arange(L)])
        assert row.exact_low == token and row.optimum_low == token and row.optimum_high == high
        assert row.exact_high == (token if row.verifier == "token" else high)
        assert row.mc_low <= row.exact_high + 1e-12 and row.mc_high >= token - 1e-12
        if row.verifier == "token":
            assert row.exact_accepted == token and row.mc_low <= token <= row.mc_high
        else:
            assert math.isnan(row.exact_accepted) and "certified range" in row.exact_note
    for bad, match in [(LOGGED_SPEC.replace('file = "rows.npz"', 'file = "none.npz"'), "no logged-rows file"),
                       (LOGGED_SPEC + "temperature = [1.0, 0.5]\n", "temperature"),
                       (LOGGED_SPEC.replace('"renormalise"]', '"merge"]'), "tail"),
                       (LOGGED_SPEC.replace('file = "rows.npz"', ''), "needs file")]:
        with pytest.raises((ValueError, FileNotFoundError), match=match):
            load_spec(_spec(tmp_path, bad, "bad.toml"))


def test_tree_cells_agree_with_the_exact_tree_law_and_the_optimum(tmp_path):
    """trees = [...]: whole-tree verifiers take every tree, multi-draft ones every k and every tree, drawn as
    each verifier is lossless for; exact values are tree_law's, every verifier at or below tree_bound,
    Monte Carlo intervals around them; a tree a verifier cannot verify leaves a note."""
    from otspec.drafts import parse_tree
    from otspec.engine import tree_bound, tree_law
    from otspec.verifiers import KSeq, TraversalVerify

    text = ('quantities = ["exact", "optimum", "monte_carlo", "decode"]\nk = [2]\nL = [2]\n'
            'trees = ["2x1", "1x1", "eagle2:2:2:3"]\nblocks = 20000\ntokens = 12\nsequences = 2\nseed = 3\n'
            '[[pairs]]\nkind = "iid"\ndraft = [0.5, 0.3, 0.2]\ntarget = [0.2, 0.3, 0.5]\n'
            '[[verifiers]]\nname = "traversal"\n[[verifiers]]\nname = "kseq"\n[[verifiers]]\nname = "token"\n')
    spec = load_spec(_spec(tmp_path, text))
    assert len(spec.cells) == 3 + (1 + 3) + 1
    assert all("tree" not in c for c in spec.cells if c["verifier"] == "token" or c["k"] is not None)
    run_sweep(_spec(tmp_path, text), tmp_path / "out", workers=1, progress=False)
    t = _table(tmp_path / "out")
    d, g = IIDSource([0.5, 0.3, 0.2]), IIDSource([0.2, 0.3, 0.5])
    for name, cls, repl in (("traversal", TraversalVerify, False), ("kseq", KSeq, True)):
        for tree in ("2x1", "1x1"):
            r = t[(t.verifier == name) & (t.tree == tree)].iloc[0]
            dt = parse_tree(tree, replacement=repl)
            assert r.exact_accepted == pytest.approx(tree_law(d, g, cls(), dt).expected_accepted, abs=1e-12)
            assert r.optimum_accepted == pytest.approx(tree_bound(d, g, dt).value, abs=1e-9)
            assert r.exact_accepted <= r.optimum_accepted + 1e-9 and r.L == 2
            assert r.mc_low - 1e-9 <= r.exact_accepted <= r.mc_high + 1e-9
        eagle = t[(t.verifier == name) & (t.tree == "eagle2:2:2:3")].iloc[0]
        assert np.isnan(eagle.exact_accepted) and ("naive" in eagle.exact_note or "without replacement" in eagle.exact_note)
    with pytest.raises(ValueError, match="traversal"):
        load_spec(_spec(tmp_path, text.replace('trees = ["2x1", "1x1", "eagle2:2:2:3"]\n', ""), "none.toml"))
    with pytest.raises(ValueError, match=r"trees\[0\]"):
        load_spec(_spec(tmp_path, text.replace('"2x1", "1x1"', '"2xx1", "1x1"'), "bad.toml"))


def test_hostile_specs_are_refused_before_expanding(tmp_path):
    """Issue 25: a short spec of list-valued parameters whose grid reaches 10^8 cells, a 1 kB YAML of nested aliases
    and an unbounded k are refused within seconds, naming the limit, before anything is expanded."""
    import time

    big = ('k = [2]\nL = [2]\n[[pairs]]\nkind = "random_iid"\nvocab = [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]\n'
           f'concentration = {list(range(1000))}\nsparsity = {[i / 1000 for i in range(100)]}\n'
           '[[verifiers]]\nname = "kseq"\n' + f'rho = {[1.0 + i / 100 for i in range(100)]}\n')
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="MAX_CELLS"):
        load_spec(_spec(tmp_path, big, "big.toml"))
    laughs = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)) + "pairs: [{kind: iid, draft: [0.5, 0.5], target: [0.5, 0.5]}]\nverifiers: [{name: token}]\n"
    with pytest.raises(ValueError, match="MAX_YAML_NODES"):
        load_spec(_spec(tmp_path, laughs, "laughs.yaml"))
    with pytest.raises(ValueError, match="MAX_CANDIDATES"):
        load_spec(_spec(tmp_path, SPEC.replace("k = [2]", "k = [10000000]"), "k.toml"))
    assert time.perf_counter() - t0 < 10
