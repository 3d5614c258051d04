"""The cost profile (llm_bridge.calibrate): measured apart from the runs, and what the prediction reads of it."""

from __future__ import annotations

import json
import platform

import numpy as np
import pytest

from llm_bridge.calibrate import CostProfile, ZeroAcceptance, calibrate, config_key, median_interval
from llm_bridge.measure import CallTimer
from llm_bridge.options import DecodeOptions
from llm_bridge.sampling import Sampling
from otspec.engine.controllers import ConfidenceController, FixedDraftLength
from otspec.engine.loop import chain_loop
from otspec.engine.observers import Observer
from otspec.engine.runstate import LoopHooks
from otspec.engine.session import SourceSession
from otspec.sources import PositionalSource
from otspec.verifiers import REGISTRY, BackwardBlockVerify, KSeq, TokenVerify
from tests.driving import drive_pausing
from tests.llm_tiny import random_prompts, tiny_pair


def synthetic_profile() -> CostProfile:
    rng = np.random.default_rng(0)
    width = np.array([3, 3, 3, 2, 1, 0])
    calls = width + (width > 0)  # one extra draft call per drafted iteration (v1 block verification's next row)
    dry = {"kind": "chain", "width": width.tolist(), "calls": calls.tolist(),
           "draft_ms": (2.0 * calls + rng.uniform(0, 0.2, 6)).tolist(),
           "target_ms": (10.0 + 1.1 * (width + 1) + rng.uniform(0, 0.3, 6)).tolist(),
           "verify_ms": (0.5 * (width > 0)).tolist(), "wall_ms": []}
    dry["wall_ms"] = (np.array(dry["draft_ms"]) + dry["target_ms"] + np.array(dry["verify_ms"]) + 0.8
                      + rng.uniform(0, 0.1, 6)).tolist()
    curve = {n: list(9.0 + n + rng.uniform(0, 0.5, 7)) for n in (1, 2, 4)}
    plain = {"step_ms": list(11.0 + rng.uniform(0, 0.4, 20)), "target_ms": list(10.7 + rng.uniform(0, 0.4, 20)),
             "steps": 20, "seconds": 0.23}
    return CostProfile(2, 16, [4, 5], 30.0, curve, plain, {"block_v1:L=3": dry})


def test_the_iteration_cost_reproduces_the_dry_run_and_moves_along_the_target_curve():
    prof = synthetic_profile()
    c = prof.config("block_v1:L=3")
    assert c["extra_calls"] == pytest.approx(1.0)
    dry = prof.dry["block_v1:L=3"]
    cost = prof.iteration_cost("block_v1:L=3")
    width = np.array(dry["width"])
    # charged at its own widths, the dry run costs exactly what its iterations took
    assert cost(width, width).sum() == pytest.approx(sum(dry["wall_ms"]), rel=1e-12)
    # t_target(n) between and beyond the measured widths: linear, and the curve's medians at them
    med = {n: float(np.median(v)) for n, v in prof.t_target.items()}
    assert prof.t_target_ms(3) == pytest.approx((med[2] + med[4]) / 2)
    assert prof.t_target_ms(6) == pytest.approx(med[4] + 2 * (med[4] - med[2]) / 2)
    assert cost(np.array([3]), np.array([5]))[0] - cost(np.array([3]), np.array([3]))[0] == pytest.approx(
        c["scale"] * (prof.t_target_ms(6) - prof.t_target_ms(4)) + 2 * c["overhead_per_token"])
    # the loop's own work: plain decoding's where nothing is drafted, growing with the draft to the dry run's mean
    plain_gap = np.mean(np.subtract(prof.plain["step_ms"], prof.plain["target_ms"]))
    assert c["overhead_base"] == pytest.approx(plain_gap) and 0 < plain_gap < c["overhead"]
    assert c["overhead_base"] + c["overhead_per_token"] * width.mean() == pytest.approx(c["overhead"])
    assert cost(np.array([0]), np.array([0]))[0] == pytest.approx(c["scale"] * prof.t_target_ms(1) + c["overhead_base"])
    assert prof.plain_step_ms() == pytest.approx(np.mean(prof.plain["step_ms"]))
    plain_f, cost_f = prof.factors("block_v1:L=3", 500, seed=1)
    assert plain_f.shape == cost_f.shape == (500,) and abs(plain_f.mean() - 1) < 0.01 and cost_f.std() > 0
    # with rounds, a slow round moves both sides of a draw together: their ratio, which the speedup reads, stays
    prof.plain["round"] = [i % 2 for i in range(20)]
    prof.plain["step_ms"] = [20.0 if i % 2 else 10.0 for i in range(20)]
    prof.dry["block_v1:L=3"]["round"] = [0, 0, 0, 1, 1, 1]
    prof.dry["block_v1:L=3"]["wall_ms"] = [10.0, 10.0, 10.0, 20.0, 20.0, 20.0]
    plain_f, cost_f = prof.factors("block_v1:L=3", 500, seed=1)
    np.testing.assert_allclose(plain_f / cost_f, 1.0, rtol=1e-12)
    prof.dry["block_v1:L=3"]["wall_ms"] = [10.0, 10.0, 10.0, 24.0, 24.0, 24.0]  # round 1: the dry run 20 % dearer
    plain_f, cost_f = prof.factors("block_v1:L=3", 4000, seed=1)
    assert np.all(plain_f == 1) and abs(cost_f.mean() - 1) < 0.01 and cost_f.std() > 0.05


def test_dry_runs_that_draft_alike_share_their_draft_and_target_call_costs():
    prof = synthetic_profile()
    v1 = prof.dry["block_v1:L=3"]
    width = np.array(v1["width"])
    # token verification at the same L: the same widths, no extra draft call, its model calls timed a little dearer
    token = {"kind": "chain", "width": width.tolist(), "calls": width.tolist(),
             "draft_ms": (2.3 * width).tolist(), "target_ms": (12.0 + 1.1 * (width + 1)).tolist(),
             "verify_ms": (0.2 * (width > 0)).tolist()}
    token["wall_ms"] = (np.add(token["draft_ms"], token["target_ms"]) + 1.0).tolist()
    other = {**token, "width": [1, 1, 0], "calls": [1, 1, 0], "draft_ms": [9.0, 9.0, 0.0], "target_ms": [50.0] * 3,
             "verify_ms": [0.1, 0.1, 0.0], "wall_ms": [61.0, 61.0, 51.0]}
    prof.dry.update({"token:L=3": token, "token:L=1": other})
    assert prof.same_draft("block_v1:L=3") == prof.same_draft("token:L=3") == ["block_v1:L=3", "token:L=3"]
    assert prof.same_draft("token:L=1") == ["token:L=1"]
    pool = [prof.dry[k] for k in ("block_v1:L=3", "token:L=3")]
    calls = sum(np.sum(d["calls"]) for d in pool)
    draft = sum(np.sum(d["draft_ms"]) for d in pool)
    c_v1, c_tok = prof.config("block_v1:L=3"), prof.config("token:L=3")
    assert c_v1["t_draft"] == c_tok["t_draft"] == pytest.approx(draft / calls)
    assert c_v1["scale"] == c_tok["scale"]
    assert c_v1["own_t_draft"] == pytest.approx(np.sum(v1["draft_ms"]) / np.sum(v1["calls"]))
    assert c_tok["own_t_draft"] == pytest.approx(2.3) and c_tok["t_draft"] < 2.3 and c_v1["pooled_over"] == ["block_v1:L=3", "token:L=3"]
    # together the pool's dry runs are charged exactly their draft and target time; one run alone is not
    charged_target = sum(c_v1["scale"] * prof.t_target_ms(np.array(d["width"]) + 1).sum() for d in pool)
    assert charged_target == pytest.approx(sum(np.sum(d["target_ms"]) for d in pool), rel=1e-12)
    assert c_tok["scale"] * prof.t_target_ms(width + 1).sum() < np.sum(token["target_ms"])
    # the verifier, the loop's own work and the extra calls stay each run's own
    assert c_tok["t_verify"] == pytest.approx(0.2) and c_tok["extra_calls"] == 0 and c_v1["extra_calls"] == 1
    assert c_tok["overhead"] == pytest.approx(1.0 - 0.2 * np.mean(width > 0))
    # a draft of another length keeps its own costs
    c_one = prof.config("token:L=1")
    assert c_one["t_draft"] == c_one["own_t_draft"] == pytest.approx(9.0) and c_one["pooled_over"] == ["token:L=1"]


def test_a_round_whose_plain_decoding_ran_far_slower_is_set_aside_with_its_dry_runs():
    prof, key = synthetic_profile(), "block_v1:L=3"
    # four rounds of 5 plain steps: rounds 0-2 differ by a few per cent (their prompts), round 3 ran 45 % slower
    prof.plain["round"] = [i // 5 for i in range(20)]
    prof.plain["step_ms"] = [10.0] * 5 + [10.5] * 5 + [9.8] * 5 + [14.5] * 5
    prof.plain["target_ms"] = [x - 0.5 for x in prof.plain["step_ms"]]
    dry = prof.dry[key]
    dry["round"] = [0, 1, 2, 3, 3, 2]
    assert prof.disturbed_rounds() == [3]
    assert prof.plain_step_ms() == pytest.approx(np.mean([10.0] * 5 + [10.5] * 5 + [9.8] * 5))
    assert prof.plain_overhead_ms() == pytest.approx(0.5)
    c, kept = prof.config(key), [0, 1, 2, 5]  # the dry run's iterations of rounds 0-2 only
    assert c["iterations"] == 4 and c["iteration_ms"] == pytest.approx(np.mean(np.asarray(dry["wall_ms"])[kept]))
    assert c["t_draft"] == pytest.approx(np.sum(np.asarray(dry["draft_ms"])[kept]) / np.sum(np.asarray(dry["calls"])[kept]))
    plain_f, cost_f = prof.factors(key, 400, seed=2)
    assert np.all(plain_f == 1) and abs(cost_f.mean() - 1) < 0.1
    # no draw holds the slow round: the ratios are those of rounds 0-2 (round 2 has two iterations), widened
    wall = np.asarray(dry["wall_ms"])
    y = np.array([wall[0], wall[1], wall[[2, 5]].mean()]) / np.array([10.0, 10.5, 9.8])
    kept = 1 + (y / y.mean() - 1) * np.sqrt(3 / 2)
    np.testing.assert_allclose(np.sort(prof.round_ratios()), np.sort(kept), rtol=1e-12)
    assert kept.min() - 1e-12 <= cost_f.min() and cost_f.max() <= kept.max() + 1e-12
    assert prof.to_json()["disturbed_rounds"] == [3]
    # within the tolerance (or with fewer than three rounds) nothing is set aside
    prof.plain["step_ms"] = [10.0] * 5 + [10.5] * 5 + [9.8] * 5 + [12.0] * 5
    assert prof.disturbed_rounds() == [] and prof.plain_step_ms() == pytest.approx(np.mean(prof.plain["step_ms"]))
    prof.plain["round"] = [i // 10 for i in range(20)]
    assert prof.disturbed_rounds() == []


def test_the_profile_round_trips_through_json_and_reports_monotonicity():
    prof = synthetic_profile()
    data = json.loads(json.dumps(prof.to_json()))
    assert CostProfile.from_json(data).to_json() == data
    assert data["t_target_ms"] == {str(n): pytest.approx(float(np.median(v))) for n, v in prof.t_target.items()}
    assert all(v["low"] <= data["t_target_ms"][n] <= v["high"] for n, v in data["t_target_ms_interval"].items())
    assert data["monotone"]["monotone"]
    prof.t_target[4] = [5.0] * 7  # far below t_target(2): not noise
    assert prof.monotone()["exceptions"] == [[2, 4]]
    with pytest.raises(ValueError, match="cost profile"):
        CostProfile.from_json({"t_target_ms": {"1": 3.0}})  # an older record's profile
    with pytest.raises(KeyError, match="no dry run"):
        prof.config("token:L=9")
    with pytest.raises(ValueError, match="samples"):
        median_interval([])


def test_zero_acceptance_runs_the_verifier_and_keeps_nothing():
    rng = np.random.default_rng(0)
    draft, target = (PositionalSource(rng.dirichlet(np.ones(4), size=12)) for _ in range(2))
    calls = []

    class Spy(TokenVerify):
        def sample_ragged(self, *args, **kwargs):
            calls.append(1)
            return super().sample_ragged(*args, **kwargs)

    class Accepted(Observer):
        def __init__(self):
            self.accepted = []

        def on_chain(self, step):
            self.accepted += list(step.accepted)

    seen = Accepted()
    sessions = SourceSession(draft, 3, 13, max_prefix=10), SourceSession(target, 3, 13, max_prefix=11)
    run = chain_loop(*sessions, ZeroAcceptance(Spy()), FixedDraftLength(3), 12, np.random.default_rng(1),
                     hooks=LoopHooks(observers=[seen]), batch=3)
    assert run.tokens.shape == (3, 12) and set(seen.accepted) == {0}
    assert len(calls) == 11  # one iteration per token; the last drafts nothing and is not verified
    assert ZeroAcceptance(BackwardBlockVerify()).carries_residual
    with pytest.raises(ValueError, match="chain verifiers"):
        ZeroAcceptance(KSeq())


def test_a_dry_run_emits_the_targets_own_draw_and_sets_its_time_aside():
    # one-hot rows: the target says position i is token i mod 4, the draft proposes the next token (always rejected)
    draft, target = (PositionalSource(np.eye(4)[(np.arange(12) + shift) % 4]) for shift in (1, 0))
    timer = CallTimer()
    sessions = SourceSession(draft, 2, 13, max_prefix=10), SourceSession(target, 2, 13, max_prefix=11)
    run = chain_loop(*sessions, ZeroAcceptance(TokenVerify(), timer), FixedDraftLength(3), 12,
                     np.random.default_rng(1), hooks=LoopHooks(timer=timer), batch=2)
    np.testing.assert_array_equal(run.tokens, np.tile(np.arange(12) % 4, (2, 1)))  # plain decoding's text
    assert timer.count("aside") == timer.count("verify") == 11  # a draw per verified iteration, outside the verifier


def test_calibrate_on_a_tiny_pair():
    pair = tiny_pair()
    prompts = random_prompts(4, np.random.default_rng(0))
    chains = [(config_key(n, 2), REGISTRY[n](), 2) for n in ("token", "block_v1")]
    chains.append(("token:confidence=0.3", TokenVerify(), ConfidenceController(0.3, 3)))
    from otspec.drafts import parse_tree

    trees = [(config_key("kseq", "2x1"), KSeq(), parse_tree("2x1"))]
    prof, tokens = calibrate(pair, prompts, 12, DecodeOptions(sampling=Sampling(), batch_size=2, cache="dynamic"),
                             chains=chains, trees=trees, prompt_ids=[7, 8, 9, 10], reps=3)
    assert len(tokens) == 4 and all(t.size == 12 for t in tokens)
    assert sorted(prof.t_target) == [1, 2, 3, 4, 5]  # 1 … L_max + 1, and the tree's nodes + 1
    assert all(len(v) == 3 for v in prof.t_target.values())
    # two rounds (batches of 2): plain decoding's steps, the first of each batch (it holds the prefill) left out
    assert prof.plain["steps"] == len(prof.plain["step_ms"]) == 2 * 11 and prof.plain["round"] == [0] * 11 + [1] * 11
    assert set(prof.dry) == {"token:L=2", "block_v1:L=2", "token:confidence=0.3", "kseq:2x1"}
    token = prof.dry["token:L=2"]  # 8 dry tokens per round (dry_tokens), the first iteration left out
    assert token["kind"] == "chain" and token["round"] == [0] * 7 + [1] * 7 and len(token["wall_ms"]) == 14
    assert max(token["width"]) == 2 and prof.config("token:L=2")["extra_calls"] == 0
    assert prof.config("block_v1:L=2")["extra_calls"] == pytest.approx(1.0)
    assert prof.dry["kseq:2x1"]["kind"] == "tree" and prof.prompt_ids == [7, 8, 9, 10]
    assert CostProfile.from_json(json.loads(json.dumps(prof.to_json()))).config("kseq:2x1") == prof.config("kseq:2x1")
    # the draft model's calls at widths 1 and 2: charged after a whole draft kept, but not where v1 fed its last token
    assert sorted(prof.t_draft) == [1, 2] and all(len(v) == 3 for v in prof.t_draft.values())
    gap = max(float(np.median(prof.t_draft[2]) - np.median(prof.t_draft[1])), 0.0)
    assert prof.config("token:L=2")["after_whole"] == pytest.approx(gap)
    assert prof.config("block_v1:L=2")["after_whole"] == prof.config("kseq:2x1")["after_whole"] == 0.0
    again = CostProfile.from_json(json.loads(json.dumps(prof.to_json())))
    assert again.t_draft == prof.t_draft and again.config("token:L=2") == prof.config("token:L=2")


def test_whole_draft_extra_is_the_draft_curves_step_only_where_the_last_token_waits():
    prof = synthetic_profile()
    assert prof.whole_draft_ms(0.0) == 0.0  # no draft curve (a head, prompt lookup, an older record)
    prof.t_draft = {1: [4.0, 4.2, 4.1], 2: [6.0, 6.5, 6.1]}
    assert prof.whole_draft_ms(0.0) == pytest.approx(6.1 - 4.1)
    assert prof.whole_draft_ms(1.0) == 0.0 and prof.whole_draft_ms(0.0, "tree") == 0.0
    prof.t_draft = {1: [4.0], 2: [3.0]}  # noise below the one-token call: nothing charged, never a negative cost
    assert prof.whole_draft_ms(0.0) == 0.0


def test_a_draft_model_feeds_two_tokens_first_after_its_whole_draft_was_kept(monkeypatch):
    """The premise of ``after_whole``: with the draft equal to the target every draft is kept, and the next
    iteration's first draft call feeds the unfed last drafted token with the emitted one; v1 block verification,
    which fed it to ask for the row after it, feeds one."""
    from llm_bridge.drafters import ModelDrafter, Pair
    from llm_bridge.loop import speculative_generate
    from llm_bridge.sessions import ModelSession

    tiny = tiny_pair()
    same = Pair(tiny.target, ModelDrafter(tiny.target))
    widths, feed = [], ModelSession.feed

    def counting(self, tokens, counts):
        if self.name == "draft":
            widths.append(int(self.pending_len.max(initial=0)) + int(np.max(counts, initial=0)))
        return feed(self, tokens, counts)

    monkeypatch.setattr(ModelSession, "feed", counting)
    prompts = random_prompts(2, np.random.default_rng(3))
    for name, want in (("token", 2), ("block_v1", 1)):
        widths.clear()
        run = speculative_generate(same, prompts, REGISTRY[name](), 3, 12,
                                   DecodeOptions(sampling=Sampling(), progress=False))
        assert run.decode.block_efficiency.value == pytest.approx(4.0, rel=0.2)  # whole drafts kept
        assert max(widths) == want, name


def test_the_measured_runs_own_timing_noise_is_drawn_from_the_calibrations_rounds():
    prof, key = synthetic_profile(), "block_v1:L=3"
    # six rounds whose plain steps and dry iterations differ together by up to 10 %, the dry runs by 4 % more
    prof.plain["round"] = [i % 6 for i in range(20)]
    level = {k: 1.0 + 0.1 * np.sin(k) for k in range(6)}
    prof.plain["step_ms"] = [10.0 * level[i % 6] for i in range(20)]
    dry = prof.dry[key]
    dry["round"] = [0, 1, 2, 3, 4, 5]
    dry["wall_ms"] = [20.0 * level[k] * (1.04 if k % 2 else 0.96) for k in dry["round"]]
    whole = prof.factors(key, 3000, seed=3)
    np.testing.assert_array_equal(whole[1], prof.factors(key, 3000, seed=3, rounds=6)[1])  # the default: all 6
    one, two = prof.factors(key, 3000, seed=3, rounds=1), prof.factors(key, 3000, seed=3, rounds=32)
    spread = [np.std(np.log(f[0] / f[1])) for f in (one, whole, two)]
    assert spread[0] > 2 * spread[1] > 2 * spread[2] > 0  # a run of fewer rounds is noisier: about 1 / sqrt(rounds)
    assert spread[0] / spread[1] == pytest.approx(np.sqrt(6), rel=0.15)
    with pytest.raises(ValueError, match="rounds"):
        prof.factors(key, 10, rounds=0)
    # without rounds the profile gives no run noise: ones, while its own resampling stays
    for col in (prof.plain, dry):
        col.pop("round")
    assert np.all(prof.factors(key, 50, rounds=4)[0] == 1) and prof.factors(key, 50)[1].std() > 0


def test_the_round_to_round_noise_is_pooled_over_the_dry_runs():
    prof, key = synthetic_profile(), "block_v1:L=3"
    prof.plain["round"] = [i % 4 for i in range(20)]
    prof.plain["step_ms"] = [10.0] * 20
    prof.dry[key].update(round=[0, 1, 2, 3, 0, 1], wall_ms=[20.0] * 6)  # this dry run: the same in every round
    noisy = {**prof.dry[key], "wall_ms": [18.0, 22.0, 18.0, 22.0, 18.0, 22.0]}  # another: +-10 % by round
    prof.dry["token:L=3"] = noisy
    ratios = prof.round_ratios()
    assert ratios.size == 8 and np.sum(ratios == 1.0) == 4  # four rounds of each
    quiet_f, noisy_f = prof.factors(key, 4000, seed=5, rounds=1)[1], prof.factors("token:L=3", 4000, seed=5, rounds=1)[1]
    np.testing.assert_array_equal(quiet_f, noisy_f)  # one spread for both: the pool's
    widened = 0.1 * np.sqrt(4 / 3)
    assert np.std(quiet_f) == pytest.approx(np.sqrt(0.5) * widened, rel=0.05)
    with pytest.raises(ValueError, match="rounds"):
        prof.factors(key, 10, rounds=0)


def test_the_predicted_speedups_interval_carries_the_measured_runs_timing_noise():
    from types import SimpleNamespace

    from llm_bridge.runs import wall_clock_prediction
    prof, key = synthetic_profile(), "block_v1:L=3"
    prof.plain["round"] = [i % 4 for i in range(20)]
    prof.plain["step_ms"] = [10.0 * (1.0 + 0.05 * (i % 4)) for i in range(20)]
    prof.dry[key]["round"] = [0, 1, 2, 3, 0, 1]
    width = np.full((6, 3, 5), 3)
    width[..., -1] = -1
    pred = SimpleNamespace(traces={"width": width, "calls": np.where(width >= 0, 3, -1)})
    wide = wall_clock_prediction(prof, key, pred, batch_size=1, units=2, n_tokens=8)
    narrow = wall_clock_prediction(prof, key, pred, batch_size=1, units=64, n_tokens=8)
    assert wide["run_rounds"] == 2 and narrow["run_rounds"] == 64
    assert "own timing noise" in wide["method"] and "averages 2 round-by-round ratios" in wide["method"]
    # the point prediction is the same; two timed rounds leave a wider interval than 64
    assert wide["speedup"] == pytest.approx(narrow["speedup"], rel=1e-12)
    assert wide["high"] - wide["low"] > narrow["high"] - narrow["low"] > 0
    assert wall_clock_prediction(prof, key, pred, batch_size=8, units=64, n_tokens=8)["run_rounds"] == 8


def test_a_records_calibration_rounds_go_in_turn_with_its_runs_and_measure_what_calibrate_measures(capsys):
    from llm_bridge.calibrate import calibration_batches
    from llm_bridge.loop import speculative_batches
    from llm_bridge.timing import timed_runs

    pair = tiny_pair()
    rng = np.random.default_rng(1)
    measured, calibration = random_prompts(4, rng), random_prompts(4, rng)
    chains = [(config_key("token", 2), TokenVerify(), 2)]
    order = []

    def logged(name, batches):  # a *_batches generator that notes each batch it finishes
        while True:
            try:
                tick = next(batches)
            except StopIteration as stop:
                return stop.value
            if tick.round_end:
                order.append(name)
            yield tick

    def run(**kw):
        return logged("run", speculative_batches(pair, measured, TokenVerify(), 2, 10,
                                                 DecodeOptions(record_law=False, **kw)))

    def beside():
        options = DecodeOptions(sampling=Sampling(), batch_size=2, cache="dynamic", seed=5)
        return logged("calibration", calibration_batches(pair, calibration, 10, options, chains=chains))

    timed = timed_runs(pair.target, measured, [run], 10, DecodeOptions(batch_size=2, cache="dynamic"), beside=beside)
    assert order == ["run", "calibration"] * 2 and len(timed.results) == 1  # round by round, the runs' windows
    if platform.libc_ver()[0] == "glibc":  # freed memory kept, so a run's cost does not hang on what the others freed
        assert timed.timing["allocator"]["kept"] and timed.timing["allocator"]["mmap_threshold"] == 32 * 2**20
    else:
        assert not timed.timing["allocator"]["kept"]
    # no progress bar in a log (stderr is not a terminal here): a line per phase and per timing round instead
    lines = [line.split(" at ")[0] for line in capsys.readouterr().err.splitlines()]
    assert lines[0].startswith("interleaved runs: warmed up, settled after ")
    assert lines[1:3] == [f"interleaved runs: attempt 1 of 1, round {r} of 2 done" for r in (1, 2)]
    assert lines[3].startswith("interleaved runs: timing attempt 1 of 1: plain sampling drifted ") and len(lines) == 4
    timed_runs(pair.target, measured[:2], [], 4, DecodeOptions(batch_size=2, progress=False))
    assert capsys.readouterr().err == ""  # progress=False: silent
    prof, _ = calibrate(pair, calibration, 10, DecodeOptions(sampling=Sampling(), batch_size=2, cache="dynamic"),
                        chains=chains, prompt_ids=[4, 5, 6, 7], reps=2, rounds=timed.beside)  # only the curves timed now
    alone, tokens = calibrate(pair, calibration, 10,
                              DecodeOptions(sampling=Sampling(), batch_size=2, cache="dynamic", seed=5),
                              chains=chains, reps=2)
    # the same plain continuations (the log the predictions replay) and the same dry runs' shapes either way
    assert all(np.array_equal(a, b) for a, b in zip(timed.beside.tokens, tokens, strict=True))
    assert prof.dry["token:L=2"]["round"] == alone.dry["token:L=2"]["round"] == [0] * 7 + [1] * 7
    assert prof.plain["round"] == alone.plain["round"] and sorted(prof.t_target) == [1, 2, 3]
    data = json.loads(json.dumps(prof.to_json()))
    assert data["interleaved_with_runs"] is True and alone.to_json()["interleaved_with_runs"] is False
    assert CostProfile.from_json(data).interleaved


def test_a_dry_run_suspended_between_iterations_leaves_the_time_away_out_of_its_columns():
    from llm_bridge.dry_runs import dry_run_steps

    pair = tiny_pair()
    contexts = random_prompts(2, np.random.default_rng(3))
    pause = 0.2  # seconds the driver spends elsewhere at every yield: far above a tiny model's iteration
    shares, cols = drive_pausing(dry_run_steps(pair, TokenVerify(), 2, contexts, 8, sampling=Sampling(),
                                               cache="dynamic", seed=0), pause)
    assert shares == sorted(shares) and shares[-1] == 1.0 and len(cols["wall_ms"]) == len(shares) - 1 >= 2
    # every iteration's wall clock is its own: no row holds a pause (each would be at least 200 ms)
    assert max(cols["wall_ms"]) < 1e3 * pause
    assert all(w >= t for w, t in zip(cols["wall_ms"], cols["target_ms"], strict=True))


def test_a_calibration_rounds_loops_take_turns_in_the_measured_runs_order(monkeypatch):
    import itertools

    import llm_bridge.calibrate as calibration
    from llm_bridge.loop import relay
    from otspec.drafts import parse_tree
    from otspec.engine.loop import finish
    from otspec.verifiers import MultiRound

    log = []

    def logged(name, make):  # the real loop, noting each iteration it makes
        return lambda *args, **kw: relay(make(*args, **kw), lambda x: log.append(name(args)) or x)

    monkeypatch.setattr(calibration, "_plain_chunk", logged(lambda a: "plain", calibration._plain_chunk))
    monkeypatch.setattr(calibration, "dry_run_steps",
                        logged(lambda a: f"{type(a[1]).__name__}:{a[2]}", calibration.dry_run_steps))
    pair = tiny_pair()
    prompts = random_prompts(4, np.random.default_rng(0))
    chains = [(config_key(n, 2), REGISTRY[n](), 2) for n in ("token", "block_v1")]
    trees = [(config_key(n, "2x1"), v, parse_tree("2x1"))
             for n, v in (("kseq", KSeq()), ("multiround", MultiRound()))]
    rounds = finish(calibration.calibration_batches(pair, prompts, 12,
                                                    DecodeOptions(sampling=Sampling(), batch_size=2, cache="dynamic"),
                                                    chains=chains, trees=trees))
    first_keys = ["plain", "KSeq:2x1", "MultiRound:2x1"]
    phases = [list(g) for _, g in itertools.groupby(log, key=lambda e: e in first_keys)]
    assert [p[0] in first_keys for p in phases] == [True, False] * 2  # two rounds of two phases each
    for first, chained in zip(phases[::2], phases[1::2], strict=True):
        # plain decoding and the tree dry runs (which start from the prompts) take turns iteration by iteration, in
        # the order listed, as the measured runs do (not plain decoding whole first: a tree iteration before its last)
        assert first[:3] == first_keys and first.count("plain") == 12
        last_plain = len(first) - 1 - first[::-1].index("plain")
        assert first.index("KSeq:2x1") < last_plain and first.index("MultiRound:2x1") < last_plain
        # then the chain dry runs (which start from plain decoding's continuation), each iteration the other's turn
        # (zero acceptance: both make the same number of iterations)
        assert chained == ["TokenVerify:2", "BackwardBlockVerify:2"] * (len(chained) // 2) and len(chained) >= 16
    # the columns land under their own configuration, whatever the order they were measured in
    assert [rounds.dry[k]["kind"] for k in ("token:L=2", "block_v1:L=2", "kseq:2x1", "multiround:2x1")] == \
        ["chain", "chain", "tree", "tree"]
    assert rounds.dry["token:L=2"]["round"] == [0] * 7 + [1] * 7 and rounds.plain["round"] == [0] * 11 + [1] * 11


def test_a_round_many_times_faster_than_the_other_still_gives_positive_factors():
    """Two rounds, one 8x faster (a disturbed machine): widening its deviation by sqrt(2) would give a negative time
    ratio; it is widened in log space instead, and every factor the wall-clock prediction reads stays positive."""
    prof, key = synthetic_profile(), "block_v1:L=3"
    prof.plain["round"] = [i % 2 for i in range(20)]
    prof.plain["step_ms"] = [10.0] * 20
    prof.dry[key].update(round=[0, 1, 0, 1, 0, 1], wall_ms=[2.5, 20.0, 2.5, 20.0, 2.5, 20.0])
    u = np.array([2.5, 20.0]) / 11.25
    ratios = prof.round_ratios()
    np.testing.assert_allclose(np.sort(ratios[-2:]), [u[0] ** np.sqrt(2), 1 + (u[1] - 1) * np.sqrt(2)], rtol=1e-12)
    assert (ratios > 0).all() and (prof.factors(key, 500, seed=1, rounds=1)[1] > 0).all()
