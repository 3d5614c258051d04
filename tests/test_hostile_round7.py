"""Round seven of hostile inputs (issue 43): one test per class of finding, each able to fail on the old code."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
from fractions import Fraction
from math import comb
from pathlib import Path

import numpy as np
import pytest

import otspec
from otspec.errors import SizeLimitError

ROOT = Path(__file__).resolve().parent.parent


def _cli(args, cwd, env=None, timeout=120):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(cwd)]), **(env or {})}
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


TOKEN_SAMPLER = textwrap.dedent("""
    import numpy as np

    def f(draft_tokens, draft_probs, target_probs, rng):
        B, L = draft_tokens.shape
        rows = np.arange(B)
        accepted = np.full(B, L)
        alive = np.ones(B, dtype=bool)
        for i in range(L):
            t = draft_tokens[:, i]
            rej = alive & (rng.random(B) * draft_probs[rows, i, t] > target_probs[rows, i, t])
            accepted[rej] = i
            alive &= ~rej
        out = np.empty(B, dtype=np.int64)
        for b in range(B):
            i = accepted[b]
            row = target_probs[b, i] if i == L else np.clip(target_probs[b, i] - draft_probs[b, i], 0, None)
            out[b] = rng.choice(row.size, p=row / row.sum())
        return accepted, out
    """)


@pytest.mark.parametrize("leftover", ["atexit", "thread"])
def test_an_audit_ends_although_the_sampler_leaves_a_thread_or_exit_handler(tmp_path, leftover):
    extra = {"atexit": "import atexit, time\natexit.register(lambda: time.sleep(10**6))\n",
             "thread": "import threading, time\nthreading.Thread(target=time.sleep, args=(10**6,)).start()\n"}
    (tmp_path / "leftover.py").write_text(TOKEN_SAMPLER + extra[leftover])
    for mode in ([], ["--in-process"]):
        t0 = time.perf_counter()
        out = _cli(["otspec", "audit", "leftover:f", "--samples", "2000", "--json", *mode], tmp_path, timeout=90)
        assert out.returncode == 0 and json.loads(out.stdout)["verdict"] == "no bias detected", out.stderr[-500:]
        assert time.perf_counter() - t0 < 60


def test_a_sampler_holding_the_interpreter_past_the_timeout_is_stopped_by_the_parent(tmp_path):
    (tmp_path / "gil.py").write_text("def f(*args):\n    return sum(range(10**13))\n")
    t0 = time.perf_counter()
    out = _cli(["otspec", "audit", "gil:f", "--samples", "2000", "--timeout", "2"], tmp_path, timeout=90)
    assert out.returncode == 2 and "did not return within --timeout (2 s)" in out.stderr
    assert "python -m otspec: error:" in out.stderr.strip().splitlines()[-1]
    assert time.perf_counter() - t0 < 40


def test_a_sampler_wrong_only_in_small_calls_is_caught(tmp_path):
    (tmp_path / "small.py").write_text(TOKEN_SAMPLER + textwrap.dedent("""
        _right = f

        def f(draft_tokens, draft_probs, target_probs, rng):
            if len(draft_tokens) < 100:  # a batch-1 path that accepts every draft
                B, L = draft_tokens.shape
                return np.full(B, L), np.array([rng.choice(target_probs.shape[-1], p=r) for r in target_probs[:, L]])
            return _right(draft_tokens, draft_probs, target_probs, rng)
        """))
    out = _cli(["otspec", "audit", "small:f", "--samples", "60000", "--json"], tmp_path)
    report = json.loads(out.stdout)
    assert out.returncode == 1 and report["verdict"] != "no bias detected"
    assert any(name.startswith("small_calls") for name in report["failed_tests"])


def test_pipes_devices_and_folders_are_refused_as_data_files(tmp_path):
    from otspec.checks import file_problem
    from otspec.clitools import writable_file
    from otspec.engine.record import RecordError, read_record
    from otspec.sources import load_logged_rows

    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    assert "not a regular file" in file_problem(fifo) and "folder" in file_problem(tmp_path)
    with pytest.raises(ValueError, match="not a regular file"):
        writable_file(fifo, "--out")  # opening it to probe it would block
    with pytest.raises(ValueError, match="not a regular file"):
        load_logged_rows(fifo)
    with pytest.raises(RecordError, match="folder"):
        read_record(tmp_path)
    records = tmp_path / "records"
    records.mkdir()
    os.mkfifo(records / "llm_b.json")
    out = _cli(["otspec.plot", "real_models", "--records", str(records), "--out", str(tmp_path / "x.png")], tmp_path,
               timeout=60)
    assert out.returncode == 2 and "not a regular file" in out.stderr


def test_a_compressed_logged_rows_bomb_is_refused_from_its_headers(tmp_path):
    from otspec.sources import load_logged_rows
    from otspec.sources.logged import MAX_MEMBER_ENTRIES

    path = tmp_path / "bomb.npz"
    big = np.lib.format.open_memmap(tmp_path / "tokens.npy", mode="w+", dtype=np.int8, shape=(MAX_MEMBER_ENTRIES + 1,))
    del big
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.write(tmp_path / "tokens.npy", "tokens.npy")
    assert path.stat().st_size < 2**20
    with pytest.raises(SizeLimitError, match="refused before loading"):
        load_logged_rows(path)


def test_sizes_and_seeds_are_checked_before_allocating():
    with pytest.raises(SizeLimitError, match="MAX_VOCAB_SIZE"):
        otspec.random_iid(10**9)
    with pytest.raises(SizeLimitError, match="MAX_HORIZON"):
        otspec.sources.random_markov(3, horizon=1_000_001)
    for seed in (1.5, "a", True, -1):
        with pytest.raises(ValueError, match="seed"):
            otspec.random_iid(3, seed=seed)
    assert otspec.random_iid(3, seed=np.random.default_rng(1))[0].vocab_size == 3


def test_batch_rejections_of_a_stationary_chain_compute_the_multiround_law_once():
    from otspec.theory.rejections import batch_rejections_per_position

    p, q = otspec.sources.random_markov(3, seed=2)
    t0 = time.perf_counter()
    long = batch_rejections_per_position(p, q, 20_000, 64)
    assert time.perf_counter() - t0 < 20
    short = batch_rejections_per_position(p, q, 50, 64)
    np.testing.assert_allclose(long[:50], short, atol=1e-15)
    tv, q_tv = otspec.theory.rejections.rejections_per_position(p, q, 50), None
    assert q_tv is None and np.all(short <= tv + 1e-12)  # more candidates reject less often


def test_the_bernoulli_block_optimum_is_exact_past_binomial_overflow():
    from otspec.theory.blocks import bernoulli_expected_accepted_optimal as opt

    p, q, L = Fraction(3, 10), Fraction(3, 4), 120
    exact = sum(sum(min(comb(i, k) * p**k * (1 - p) ** (i - k), comb(i, k) * q**k * (1 - q) ** (i - k))
                    for k in range(i + 1)) for i in range(1, L + 1))
    assert opt(0.3, 0.75, L) == pytest.approx(float(exact), abs=1e-13)
    values = [opt(0.3, 0.75, L) for L in (1029, 1030, 2000)]
    assert all(math.isfinite(v) for v in values) and values[0] <= values[2] < 3.8241


def test_public_row_functions_check_their_rows():
    assert otspec.residual([0.75, 0.25], [0.3, 0.7]).tolist() == [1.0, 0.0]  # lists, as the contract says
    assert float(otspec.total_variation([0.3, 0.7], [0.75, 0.25])) == pytest.approx(0.45)
    for f, args in ((otspec.total_variation, ([np.nan, 1], [0.5, 0.5])), (otspec.total_variation, ([1.5, -0.5],
                    [0.5, 0.5])), (otspec.overlap, ([5, 5], [0.5, 0.5])), (otspec.total_variation, ([], []))):
        with pytest.raises(ValueError):
            f(*args)
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="torch tensor"):
        otspec.overlap(np.array([0.5, 0.5]), torch.tensor([0.5, 0.5]))


def test_rows_of_text_masked_arrays_and_huge_integers_are_refused():
    from otspec.distributions import validate_probs

    for bad, match in ((["0.5", "0.5"], "numbers"), (np.ma.array([0.5, 0.5, 9.0], mask=[0, 0, 1]), "masked"),
                       ([10**400, 0], "numbers")):
        with pytest.raises(ValueError, match=match):
            validate_probs(bad, "draft")


def test_temperature_zero_is_the_argmax_row_and_bad_temperatures_are_refused():
    from otspec.distributions import temperature_rows

    assert temperature_rows(np.log([0.2, 0.8, 0.8]), 0).tolist() == [0.0, 1.0, 0.0]
    for t in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="temperature"):
            temperature_rows(np.log([0.2, 0.8]), t)


def test_flags_and_costs_must_be_what_they_say():
    from otspec.theory import lemma3_upper_bound, multiround_acceptance, naive_acceptance
    from otspec.theory.blocks import tokens_per_iteration
    from otspec.theory.cost import CallCosts, predicted_speedup

    p, q = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]
    assert multiround_acceptance(p, q, 2, False) == pytest.approx(0.82)
    for f in (multiround_acceptance, naive_acceptance, lemma3_upper_bound):
        with pytest.raises(ValueError, match="replacement"):
            f(p, q, 2, "False")  # a non-empty text is true: it would silently give the other value
    for make in (lambda: CallCosts(-1.0), lambda: CallCosts(0.1, 0.0), lambda: CallCosts(math.nan),
                 lambda: CallCosts("0.1"), lambda: predicted_speedup(1.0, -0.5, 4),
                 lambda: predicted_speedup(1.0, math.inf, 4), lambda: predicted_speedup(10.0, 0.1, 4),
                 lambda: tokens_per_iteration(math.nan), lambda: tokens_per_iteration(-3.0),
                 lambda: CallCosts(0.1, {1: -2.0}).target(1)):
        with pytest.raises(ValueError):
            make()
    assert predicted_speedup(1.0, 0.5, 2) == 1.0


def test_a_markov_source_keeps_the_horizon_it_is_given():
    from otspec.errors import HorizonError
    from otspec.sources import MarkovSource

    assert MarkovSource([0.5, 0.5], np.stack([np.eye(2)] * 3), horizon=2).horizon == 2
    chain = MarkovSource([0.5, 0.5], np.eye(2), horizon=3)
    assert chain.horizon == 3
    with pytest.raises(HorizonError):
        chain.sample(2, 5, np.random.default_rng(0))


def test_duplicate_and_aliased_keys_are_refused(tmp_path):
    from otspec.sources import load_source
    from otspec.sweep.spec import load_spec

    (tmp_path / "dup.json").write_text('{"type": "iid", "type": "bernoulli", "p": 0.3}')
    with pytest.raises(ValueError, match="appears twice"):
        load_source(tmp_path / "dup.json")
    (tmp_path / "table.json").write_text(json.dumps({"type": "table", "vocab_size": 2, "horizon": 2, "rows": {
        "": [0.5, 0.5], "0": [0.5, 0.5], " 0": [1.0, 0.0], "1": [0.5, 0.5]}}))
    with pytest.raises(ValueError, match="must be written as"):
        load_source(tmp_path / "table.json")
    base = ('name: s\nquantities: [exact]\npairs:\n  - {kind: random_iid, vocab: [4], concentration: [1.0]}\n'
            'verifiers:\n  - {name: token}\n')
    for text, match in (("L: [010]\n", "L"), ("L: [1:30]\n", "L"), ("L: [2]\nL: [3]\n", "appears twice")):
        (tmp_path / "s.yaml").write_text(base + text)
        with pytest.raises(ValueError, match=match):
            load_spec(tmp_path / "s.yaml")
    (tmp_path / "t.yaml").write_text(base + "L: [2]\ntrees: ['2x1', '2X1']\n")
    with pytest.raises(ValueError, match="listed twice"):
        load_spec(tmp_path / "t.yaml")


def test_a_resumed_sweep_reruns_cells_whose_inputs_changed(tmp_path):
    from otspec.sweep.run import run_sweep

    d, t = tmp_path / "d.json", tmp_path / "t.json"
    d.write_text(json.dumps({"type": "iid", "probs": [0.3, 0.7]}))
    t.write_text(json.dumps({"type": "iid", "probs": [0.75, 0.25]}))
    spec = tmp_path / "s.toml"

    def write(quantities, seed=0):
        spec.write_text(f'name = "s"\nseed = {seed}\nL = [2]\nquantities = {quantities}\nblocks = 2000\n'
                        '[[pairs]]\nkind = "json"\ndraft = "d.json"\ntarget = "t.json"\n[[verifiers]]\nname = "token"\n')

    write('["exact"]')
    out = tmp_path / "out"
    assert run_sweep(spec, out, workers=1, progress=False)["ran"] == 1
    assert run_sweep(spec, out, workers=1, progress=False)["ran"] == 0  # nothing changed: nothing runs
    d.write_text(json.dumps({"type": "iid", "probs": [0.75, 0.25]}))  # the draft is now the target
    again = run_sweep(spec, out, workers=1, progress=False)
    assert again["ran"] == 1
    import pandas as pd

    table = pd.read_csv(out / "results.csv")
    assert table["exact_accepted"].iloc[0] == pytest.approx(2.0)  # an identical pair accepts both drafts
    write('["exact", "monte_carlo"]')
    assert run_sweep(spec, out, workers=1, progress=False)["ran"] == 1
    cell = next((out / "cells").glob("*.json"))
    row = json.loads(cell.read_text())
    row["exact_accepted"] = -5.0  # an edited cell is not trusted
    cell.write_text(json.dumps(row))
    assert run_sweep(spec, out, workers=1, progress=False)["ran"] == 1


def test_records_are_range_checked_as_a_whole(tmp_path):
    from otspec.engine.record import RecordError, as_record

    good = json.loads((ROOT / "figures" / "llm_distilled.json").read_text())
    as_record(good)

    def damaged(change):
        rec = json.loads(json.dumps(good))
        change(rec)
        return rec

    run = "runs"
    cases = {
        "block efficiency below 1": lambda r: r[run][0].update(block_efficiency={"mean": 0.2, "low": 0.1, "high": 0.3}),
        "negative baseline": lambda r: r["baseline"].update(tokens_per_s=-5.0),
        "negative speedup interval": lambda r: r[run][0].update(speedup_ci={"low": -5.0, "high": 2.0}),
        "speedup outside its interval": lambda r: r[run][0].update(speedup_ci={"low": 5.0, "high": 6.0}),
        "NaN in a free-form field": lambda r: r[run][0].update(prediction={"x": float("nan")}),
        "histogram of the wrong length": lambda r: r[run][0].update(accepted_length_histogram=[1]),
        "no run": lambda r: r.update(runs=[], tree_runs=[]),
        "block efficiency above L + 1": lambda r: r[run][0].update(
            block_efficiency={"mean": 1e300, "low": 1e300, "high": 1e300}),
    }
    for name, change in cases.items():
        with pytest.raises(RecordError):
            as_record(damaged(change))
            pytest.fail(name)


def test_report_and_plot_check_their_inputs_before_drawing(tmp_path):
    t0 = time.perf_counter()
    for args, flag in ((["--scale", "nan"], "--scale"), (["--out-dir", str(ROOT / "README.md")], "--out-dir"),
                       (["--records", str(tmp_path / "none")], "--records")):
        out = _cli(["otspec.report", *args], tmp_path, timeout=60)
        assert out.returncode == 2 and flag in out.stderr and "Traceback" not in out.stderr
    assert time.perf_counter() - t0 < 40
    out = _cli(["otspec.plot", "rejections", "--draft", "0.3,0.7", "--target", "0.3,0.7", "--out",
                str(tmp_path / "r.png")], tmp_path, timeout=120)
    assert out.returncode in (0, 2) and "Traceback" not in out.stderr


def test_overflowing_numbers_are_refused_by_name(tmp_path):
    (tmp_path / "big.json").write_text('{"type": "bernoulli", "p": 1' + "0" * 400 + "}")
    for args, flag in ((["calc", "block", "--draft", "0.3", "--target", "0.75", "--L", "2", "--cost-ratio", "1e400"],
                        "--cost-ratio"),
                       (["calc", "block", "--draft-source", "big.json", "--target", "0.5", "--L", "2"], "big.json"),
                       (["simulate", "--draft", "0.3", "--target", "0.75", "--L", "2", "--blocks", "1000", "--device",
                         "meta"], "device")):
        out = _cli(["otspec", *args], tmp_path, timeout=60)
        assert out.returncode == 2 and flag in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_api_arguments_of_the_wrong_kind_are_value_errors():
    from otspec.distributions import top_p_mask
    from otspec.theory.pareto import pareto_front
    from otspec.verifiers import DecodingOPT, KSeq

    source, rng = otspec.bernoulli(0.3), np.random.default_rng(0)
    for args in ((True, 3, rng), (2.0, 3, rng), (2, 3, None)):
        with pytest.raises(ValueError):
            source.sample(*args)
    with pytest.raises(SizeLimitError):
        source.sample(10**12, 10**6, rng)  # refused before the array exists
    for p in (True, "0.5", 0.5 + 0j):
        with pytest.raises(ValueError, match="bernoulli"):
            otspec.bernoulli(p)
    for make in (lambda: DecodingOPT(eps="0.1"), lambda: KSeq(rho=True),
                 lambda: pareto_front([0.5, 0.5], [0.75, 0.25], "0.1")):
        with pytest.raises(ValueError):
            make()
    rows = np.array([[0.5, 0.3, 0.2]])
    for top_p, kept in ((0.0, None), (math.nan, None), (0.5, 0)):
        with pytest.raises(ValueError):
            top_p_mask(rows, top_p, kept)
    assert top_p_mask(rows, 0.6).tolist() == [[True, True, False]]
    torch = pytest.importorskip("torch")
    from otspec.verifiers import TokenVerify

    P, Q = torch.full((2, 2, 3), 1 / 3, dtype=torch.float64), torch.full((2, 3, 3), 1 / 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="torch.Generator"):
        TokenVerify().sample(torch.zeros((2, 2), dtype=torch.int64), P, Q, np.random.default_rng(0))


@pytest.mark.parametrize("flag", [["--mix", "-1"], ["--w-rej", "nan"], ["--l2", "foo"], ["--seed", "-1"],
                                  ["--prompts", "60"], ["--fixed", "4097"], ["--train-prompts", "2"]])
def test_adaptive_refuses_its_flags_before_a_model_loads(flag, tmp_path):
    t0 = time.perf_counter()
    out = _cli(["llm_bridge.adaptive", "--no-hf", "--prompts", "1", "--max-new-tokens", "2", "--batch-size", "1",
                "--train-tokens", "2", "--fixed", "1", "--thresholds", "0.5", "--max-length", "2", "--out-dir",
                str(tmp_path), *flag], tmp_path, timeout=120)
    assert out.returncode == 2 and flag[0] in out.stderr and "Traceback" not in out.stderr, out.stderr[-300:]
    assert time.perf_counter() - t0 < 30  # the models (a gigabyte and seconds to load) were never loaded


def test_validate_refuses_a_draft_that_cannot_load_before_the_target_loads(tmp_path):
    t0 = time.perf_counter()
    out = _cli(["llm_bridge.validate", "--draft", str(tmp_path / "no" / "model"), "--no-hf", "--prompts", "1",
                "--max-new-tokens", "2", "--L", "1", "--verifiers", "token", "--out-dir", str(tmp_path / "out")],
               tmp_path, timeout=120)
    assert out.returncode == 2 and "not found" in out.stderr and "Traceback" not in out.stderr, out.stderr[-300:]
    assert time.perf_counter() - t0 < 30


def test_a_self_speculative_draft_deeper_than_the_target_is_refused_before_it_loads(tmp_path, monkeypatch):
    from llm_bridge import drafters, models
    from llm_bridge.validate_config import ValidateConfig

    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 4}))
    assert models.layer_count(str(tmp_path)) == 4 and models.layer_count("smollm2") == 30
    assert models.layer_count("org/name") is None  # a hub id: not known without fetching
    monkeypatch.setattr(drafters, "load_model", lambda *a, **k: pytest.fail("the target was loaded"))
    for target, deepest in ((str(tmp_path), 4), ("smollm2", 30)):
        with pytest.raises(ValueError, match=rf"1 <= K <= {deepest}"):
            drafters.load_pair(target, f"layers:{deepest + 1}")
        with pytest.raises(ValueError, match=rf"1 <= K <= {deepest}"):
            ValidateConfig(target=target, draft=f"layers:{deepest + 1}", lengths=(1,), verifiers=("token",), hf=False)
    ValidateConfig(target=str(tmp_path), draft="layers:4", lengths=(1,), verifiers=("token",), hf=False)


def test_a_missing_data_file_is_both_a_file_not_found_and_a_value_error(tmp_path):
    from llm_bridge.prompts import read_prompts
    from otspec.audit import audit
    from otspec.engine.record import RecordError, read_record
    from otspec.sources.logged import load_logged_rows

    missing = tmp_path / "nope"
    for read in (otspec.load_source, load_logged_rows, read_prompts, read_record,
                 lambda path: audit(lambda *a: None, rows=str(path))):
        for kind in (FileNotFoundError, ValueError):
            with pytest.raises(kind, match="no (such record )?file"):
                read(missing)
    with pytest.raises(RecordError):
        read_record(missing)
