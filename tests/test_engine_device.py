"""Rows on the model's device: the chain loop reads back one thing per iteration, the accepted lengths.

The torch path of the loop runs here on CPU tensors (a GPU runs the same code). Every tensor method
that copies to the host is wrapped, and calls made from otspec's or llm_bridge's own code (not from
inside the model) are counted between iterations.
"""

from __future__ import annotations

import numpy as np
import pytest

from llm_bridge.options import DecodeOptions
from llm_bridge.sampling import Sampling
from llm_bridge.sessions import ModelSession
from otspec.engine.controllers import FixedDraftLength
from otspec.engine.loop import chain_loop
from otspec.engine.runstate import LoopHooks
from otspec.verifiers import BlockVerify, TokenVerify
from tests.host_syncs import IterationMarks, SyncCounter
from tests.llm_tiny import random_prompts, tiny_pair, torch


@pytest.fixture
def host_reads():
    """A counter whose ``seen`` grows by one call site for every host read made from otspec / llm_bridge code."""
    with SyncCounter(kinds=("reads",)) as counter:
        yield counter


@pytest.mark.parametrize("verifier", [TokenVerify(), BlockVerify()], ids=["token", "block"])
@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=0.8, top_k=8, top_p=0.9)],
                         ids=["plain", "processed"])
def test_one_host_read_per_iteration_on_the_torch_path(verifier, sampling, host_reads):
    pair = tiny_pair(sharpness=3.0)
    prompts = random_prompts(3, np.random.default_rng(0))
    target = ModelSession(pair.target.model, 3, sampling, host_rows=False, name="target")
    draft = pair.drafter.session(3, sampling, host_rows=False)
    marks = IterationMarks(host_reads)
    run = chain_loop(draft, target, verifier, FixedDraftLength(4), 24, torch.Generator().manual_seed(0),
                     hooks=LoopHooks(observers=[marks]), prompts=prompts)
    per_iteration = np.diff([0, *marks.marks])
    assert len(marks.marks) >= 6 and run.tokens.shape == (3, 24)
    assert per_iteration.max() <= 1, (per_iteration.tolist(), host_reads.seen[:12])
    assert (per_iteration == 1).sum() >= per_iteration.size - 1  # the accepted lengths (none when nothing was drafted)


def test_the_counter_sees_a_host_read(host_reads):
    """Negative control: the numpy-row path reads every row back, and the counter notices."""
    pair = tiny_pair(sharpness=3.0)
    target = ModelSession(pair.target.model, 2, Sampling(), host_rows=True, name="target")
    draft = pair.drafter.session(2, Sampling(), host_rows=True)
    chain_loop(draft, target, TokenVerify(), FixedDraftLength(3), 8, np.random.default_rng(0),
               prompts=random_prompts(2, np.random.default_rng(1)))
    assert len(host_reads.seen) > 8


def test_device_rows_give_the_target_law():
    """The torch path is the same loop: with greedy processing it reproduces plain greedy decoding."""
    pair = tiny_pair(sharpness=3.0)
    greedy = Sampling(temperature=0)
    prompts = random_prompts(2, np.random.default_rng(2))
    spec = chain_loop(pair.drafter.session(2, greedy, host_rows=False),
                      ModelSession(pair.target.model, 2, greedy, host_rows=False), TokenVerify(),
                      FixedDraftLength(3), 15, torch.Generator().manual_seed(1), prompts=prompts)
    plain = chain_loop(None, ModelSession(pair.target.model, 2, greedy), None, None, 15,
                       np.random.default_rng(0), prompts=prompts)
    np.testing.assert_array_equal(spec.tokens, plain.tokens)


def test_speculative_generate_keeps_rows_on_the_device_when_asked():
    from llm_bridge.loop import plain_generate, speculative_generate

    pair = tiny_pair(sharpness=3.0)
    greedy = Sampling(temperature=0)
    prompts = random_prompts(2, np.random.default_rng(5))
    spec = speculative_generate(pair, prompts, TokenVerify(), 3, 12,
                                DecodeOptions(sampling=greedy, progress=False, host_rows=False))
    plain = plain_generate(pair.target, prompts, 12, sampling=greedy, progress=False)
    for a, b in zip(spec.tokens, plain.tokens, strict=True):
        np.testing.assert_array_equal(a, b)
    assert spec.tv and spec.expected_accepted.size == spec.decode.iterations  # the observers read the device rows


def test_gpu_suite_smoke_runs_every_step_on_cpu(tmp_path):
    """``python -m llm_bridge.gpu_suite --smoke --device cpu``: the GPU suite's path at toy sizes."""
    from llm_bridge import gpu_suite
    from otspec.engine.record import read_record
    from tests.llm_tiny import tiny_llama, tiny_tokenizer

    for name, seed, layers in (("target", 0, 2), ("draft", 1, 1)):
        tiny_llama(seed, layers, dtype=torch.float32).save_pretrained(tmp_path / name)
        tiny_tokenizer().save_pretrained(tmp_path / name)
    from llm_bridge.heads import EagleHead, save_head
    from llm_bridge.models import load_model

    save_head(EagleHead(load_model(str(tmp_path / "target"), device="cpu").model, np.arange(3, 20)), tmp_path / "eagle",
              {"target": "tiny"})  # a head on the suite's static cache
    out = tmp_path / "figs"
    code = gpu_suite.main(["--smoke", "--device", "cpu", "--target", str(tmp_path / "target"),
                           "--families", f"{tmp_path / 'draft'},ngram:2,head:{tmp_path / 'eagle'}", "--out-dir",
                           str(out)])
    assert code == 0
    summary = __import__("json").loads((out / "llm_gpu_suite.json").read_text())
    assert [s["step"].split()[0] for s in summary["steps"]] == ["validate", "validate", "validate", "multi-draft",
                                                                "trees", "bench_verifiers_torch"]
    assert summary["within_budget"] in (True, False) and summary["budget_seconds"] == gpu_suite.BUDGET_SECONDS
    for name in ("llm_gpu_draft.json", "llm_gpu_ngram_2.json", "llm_gpu_eagle.json", "llm_gpu_multidraft.json",
                 "llm_gpu_trees.json"):
        record = read_record(out / name)
        assert record.runs and record.settings.cache == "static"
    assert [r.L for r in read_record(out / "llm_gpu_draft.json").runs if r.verifier == "token"] == [1, 2]
    multi = read_record(out / "llm_gpu_multidraft.json")
    assert {r.verifier for r in multi.tree_runs} == {"kseq", "otm"} and multi.settings.top_k == 8
    trees = read_record(out / "llm_gpu_trees.json")
    assert {(r.verifier, r.tree) for r in trees.tree_runs} == {
        ("kseq", "2x1"), ("traversal", "2x1"), ("naive", "eagle2:2:2:3")}
    assert "results" in __import__("json").loads((out / "llm_gpu_verifiers.json").read_text())
    assert gpu_suite.main(["--device", "cpu", "--out-dir", str(out)]) == 2  # no GPU: only a smoke run


@pytest.mark.parametrize("verifier", ["token", "block", "block_v1"])
@pytest.mark.parametrize("drafter", ["model", "eagle"])
def test_device_rows_are_never_converted_to_numpy_implicitly(verifier, drafter, monkeypatch):
    """``np.asarray`` of a CUDA tensor raises; the torch path copies with ``to_host``. Here the implicit
    conversion raises on CPU too, so a verifier or drafter that relies on it fails without a GPU."""
    from llm_bridge.loop import speculative_generate
    from otspec.verifiers import REGISTRY
    from tests.test_llm_bridge_heads import head_pair

    pair = tiny_pair(sharpness=3.0) if drafter == "model" else head_pair("eagle")
    prompts = random_prompts(2, np.random.default_rng(4))

    def refuse(self, *args, **kwargs):
        raise TypeError("implicit numpy conversion of a tensor (fails on a GPU)")

    monkeypatch.setattr(torch.Tensor, "__array__", refuse)
    with pytest.raises(TypeError, match="implicit"):  # the guard is live
        np.asarray(torch.zeros(2))
    run = speculative_generate(pair, prompts, REGISTRY[verifier](), 3, 12,
                               DecodeOptions(progress=False, host_rows=False))
    assert [len(t) for t in run.tokens] == [12, 12]
