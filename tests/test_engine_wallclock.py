"""The wall-clock prediction: replay traces charged with call costs (otspec.engine.predict.predict_wall_clock).

The ground truth is the loop itself: the chain and tree loops run batches of sequences with a timer that charges a
known cost for every call the loop makes, and the prediction, which sees only replays of single sequences and the
cost per call, must land on the mean of those charges."""

from __future__ import annotations

import numpy as np
import pytest

from otspec.drafts import DraftTree
from otspec.engine.controllers import FixedDraftLength
from otspec.engine.loop import chain_loop, tree_loop
from otspec.engine.observers import Observer
from otspec.engine.predict import (
    IterationTrace,
    ReplayPlan,
    WallClockCosts,
    predict_from_pairs,
    predict_wall_clock,
)
from otspec.engine.runstate import LoopHooks
from otspec.engine.session import SourceSession
from otspec.sources import PositionalSource
from otspec.verifiers import BlockVerify, KSeq, TokenVerify

T_DRAFT, T_FIXED, T_PER_TOKEN, T_VERIFY, OVERHEAD = 0.7, 10.0, 1.5, 0.4, 0.9
AFTER_WHOLE = 2.5  # a first draft call two tokens wide: after some sequence of the batch kept its whole draft


class ChargingTimer:
    """Charges every call the loop makes: draft calls T_DRAFT, a target call scoring n tokens T_FIXED + n
    T_PER_TOKEN, the verifier T_VERIFY per iteration (a tree walk calls it once per level walked: a profile's dry
    run times the iteration's verifier calls together)."""

    def __init__(self, after_whole: float = 0.0):
        self.total, self.verified, self.after_whole, self.wide = 0.0, False, after_whole, False

    def call(self, kind, n, fn, *args):
        self.total += T_DRAFT if kind == "draft" else 0.0
        if kind == "draft" and n == 0 and self.wide:  # the iteration's first draft call (the loop passes n = 0)
            self.total += self.after_whole
        if kind == "verify" and not self.verified:
            self.total, self.verified = self.total + T_VERIFY, True
        if kind == "target":
            self.total += T_FIXED + n * T_PER_TOKEN
        return fn(*args)


class Iterations(Observer):
    def __init__(self, timer):
        self.n, self.timer = 0, timer

    def on_chain(self, step):
        self.n += 1
        self.timer.verified = False
        drafted = np.asarray(step.drafted)
        self.timer.wide = bool(((drafted > 0) & (np.asarray(step.accepted) == drafted)).any())

    def on_tree(self, step):
        self.n += 1
        self.timer.verified = False


def cost(calls, width):
    """The same charges per batch iteration, as the prediction takes them (width: the widest draft or trie)."""
    calls, width = np.asarray(calls, dtype=float), np.asarray(width, dtype=float)
    return calls * T_DRAFT + T_FIXED + (width + 1) * T_PER_TOKEN + T_VERIFY * (width > 0) + OVERHEAD


def pair(seed: int, V: int = 3, T: int = 24):
    rng = np.random.default_rng(seed)
    draft = PositionalSource(rng.dirichlet(np.full(V, 0.6), size=T))
    target = PositionalSource(rng.dirichlet(np.full(V, 0.6), size=T))
    return draft, target


def charged_batches(draft, target, verifier, shape, batch, n_tokens, runs, *, tree=False, after_whole=0.0):
    """Mean charged time of a batch of ``batch`` sequences decoded together by the loop (``runs`` seeds)."""
    totals = []
    for seed in range(runs):
        timer = ChargingTimer(after_whole)
        its = Iterations(timer)
        sessions = (SourceSession(draft, batch, n_tokens + 1, max_prefix=n_tokens - 2),
                    SourceSession(target, batch, n_tokens + 1, max_prefix=n_tokens - 1))
        rng = np.random.default_rng(10_000 + seed)
        if tree:
            tree_loop(*sessions, verifier, shape, n_tokens, rng, hooks=LoopHooks(timer=timer, observers=[its]),
                      batch=batch)
        else:
            chain_loop(*sessions, verifier, FixedDraftLength(shape), n_tokens, rng,
                       hooks=LoopHooks(timer=timer, observers=[its]), batch=batch)
        totals.append(timer.total + OVERHEAD * its.n)
    return float(np.mean(totals))


@pytest.mark.parametrize("verifier, L", [(TokenVerify(), 3), (BlockVerify(), 4)])
def test_the_prediction_matches_what_the_loop_charges_a_batch(verifier, L):
    draft, target = pair(0)
    N, B, plain_step = 24, 4, T_FIXED + T_PER_TOKEN + OVERHEAD
    truth = charged_batches(draft, target, verifier, L, B, N, runs=500)
    pred = predict_from_pairs([(draft, target)], verifier, L, ReplayPlan(sequences=1024, seed=1, units=B))
    out = predict_wall_clock(pred.traces, WallClockCosts(plain_step, cost), batch=B, units=B, n_tokens=N, draws=2000,
                             seed=2)
    assert out["speedup"] == pytest.approx(N * plain_step / truth, rel=0.025)
    assert out["ms_per_batch"] == pytest.approx(truth, rel=0.025)
    # a batch waits for its slowest sequence: more iterations than the mean sequence, and slower than charging each
    # sequence its own iterations at its own width
    assert out["batch_iterations"] > out["mean_iterations"] * 1.02
    assert out["ignoring_straggling"] > out["speedup"]
    assert out["low"] <= out["speedup"] <= out["high"]


def test_an_iteration_after_a_whole_draft_kept_is_charged_its_wider_first_draft_call():
    """A draft close to the target keeps whole drafts often; the loop charges AFTER_WHOLE to the next iteration's
    first draft call when any sequence of the batch kept its whole draft, and the prediction, from the replays'
    ``whole`` traces, must land on it; without the term it misses by the share those iterations make."""
    draft, target = pair(4)
    draft = PositionalSource(0.9 * target.rows + 0.1 * draft.rows)
    N, B, L = 24, 3, 2
    truth = charged_batches(draft, target, TokenVerify(), L, B, N, runs=400, after_whole=AFTER_WHOLE)
    pred = predict_from_pairs([(draft, target)], TokenVerify(), L, ReplayPlan(sequences=1024, seed=1, units=B))
    assert 0.3 < pred.traces["whole"][pred.traces["width"] > 0].mean() < 0.95
    common = {"batch": B, "units": B, "n_tokens": N, "draws": 500, "seed": 2}
    out = predict_wall_clock(pred.traces, WallClockCosts(12.0, cost, after_whole=AFTER_WHOLE), **common)
    assert out["ms_per_batch"] == pytest.approx(truth, rel=0.02)
    without = predict_wall_clock(pred.traces, WallClockCosts(12.0, cost), **common)
    assert without["ms_per_batch"] < truth * 0.95
    assert out["ignoring_straggling"] < without["ignoring_straggling"]
    with pytest.raises(ValueError, match="after_whole"):
        WallClockCosts(12.0, cost, after_whole=-1.0)


def test_the_prediction_matches_what_the_tree_loop_charges():
    draft, target = pair(3)
    tree, N, B = DraftTree.parse("2x1"), 24, 3  # N: the replayed paths' length
    verifier = KSeq()
    truth = charged_batches(draft, target, verifier, tree, B, N, runs=200, tree=True)
    pred = predict_from_pairs([(draft, target)], verifier, tree, ReplayPlan(sequences=200, seed=1, units=B))
    out = predict_wall_clock(pred.traces, WallClockCosts(1.0, cost), batch=B, units=B, n_tokens=N, draws=500, seed=2)
    assert out["ms_per_batch"] == pytest.approx(truth, rel=0.025)


def test_at_batch_one_straggling_changes_nothing_and_the_interval_narrows_with_more_prompts():
    pairs = [pair(s) for s in range(6)]
    pred = predict_from_pairs(pairs, TokenVerify(), 3, ReplayPlan(sequences=32, seed=0, units=4))
    one = predict_wall_clock(pred.traces, WallClockCosts(12.0, cost), batch=1, units=4, n_tokens=24, draws=1000, seed=0)
    assert one["speedup"] == pytest.approx(one["ignoring_straggling"], rel=1e-12)
    assert one["batch_iterations"] == pytest.approx(one["mean_iterations"], rel=1e-12)
    many = predict_wall_clock(pred.traces, WallClockCosts(12.0, cost), batch=1, units=64, n_tokens=24, draws=1000,
                              seed=0)
    assert many["high"] - many["low"] < one["high"] - one["low"]
    # the profile's uncertainty widens it: factors spread by 5 % on the speculative side
    spread = np.random.default_rng(0).normal(1.0, 0.05, size=1000)
    wider = predict_wall_clock(pred.traces, WallClockCosts(12.0, cost, cost_factors=np.abs(spread)), batch=1, units=64,
                               n_tokens=24, draws=1000, seed=0)
    assert wider["high"] - wider["low"] > 1.5 * (many["high"] - many["low"])
    assert wider["speedup"] == many["speedup"]  # the point uses the profile's means


def test_traces_record_drafted_tokens_and_calls():
    draft, target = pair(1)
    pred = predict_from_pairs([(draft, target)], TokenVerify(), 2, ReplayPlan(sequences=5, seed=0))
    width, calls = pred.traces["width"], pred.traces["calls"]
    assert width.shape[:2] == (1, 5) and width.shape == calls.shape
    its = (width >= 0).sum(axis=2)
    np.testing.assert_array_equal(its[0], pred.replay_iterations[0])
    live = width[width >= 0]
    assert live.max() == 2 and live.min() >= 0 and (calls[width >= 0] == live).all()
    trace = IterationTrace(2)
    assert [a.shape for a in trace.arrays()] == [(2, 0), (2, 0), (2, 0)]
    # a whole draft kept: always where the draft is the target, never where it puts its mass elsewhere
    rows = np.full((24, 3), 1 / 3)
    kept = predict_from_pairs([(PositionalSource(rows), PositionalSource(rows))], TokenVerify(), 2,
                              ReplayPlan(sequences=3)).traces
    assert (kept["whole"][kept["width"] > 0] == 1).all() and (kept["whole"][kept["width"] < 0] == -1).all()
    other = np.tile([0.0, 0.0, 1.0], (24, 1))
    elsewhere = np.tile([0.5, 0.5, 0.0], (24, 1))
    lost = predict_from_pairs([(PositionalSource(other), PositionalSource(elsewhere))], TokenVerify(), 2,
                              ReplayPlan(sequences=3)).traces
    assert (lost["whole"][lost["width"] >= 0] == 0).all()


def test_bad_input_is_refused():
    draft, target = pair(2)
    traces = predict_from_pairs([(draft, target)], TokenVerify(), 2, ReplayPlan(sequences=4, seed=0)).traces
    good, costs = {"batch": 2, "units": 4, "n_tokens": 24, "draws": 50}, WallClockCosts(10.0, cost)
    with pytest.raises(ValueError, match="traces"):
        predict_wall_clock({"width": traces["width"], "calls": traces["calls"][:, :1]}, costs, **good)
    with pytest.raises(ValueError, match="plain_step"):
        WallClockCosts(0.0, cost)
    with pytest.raises(ValueError, match="cost_factors"):
        predict_wall_clock(traces, WallClockCosts(10.0, cost, cost_factors=np.ones(3)), **good)
    with pytest.raises(ValueError, match="plain_factors"):
        predict_wall_clock(traces, WallClockCosts(10.0, cost, plain_factors=-np.ones(50)), **good)
    with pytest.raises(ValueError, match="units"):
        predict_wall_clock(traces, costs, **{**good, "units": 0})
