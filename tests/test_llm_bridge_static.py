"""Static KV caches with position-based rollback (the CUDA path of llm_bridge), checked on CPU."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from llm_bridge.cache import STATIC_BUCKET, StaticCachedLM, make_cache
from llm_bridge.loop import plain_generate, speculative_generate
from llm_bridge.options import DecodeOptions
from llm_bridge.trees import tree_generate
from otspec.verifiers import BlockVerify, KSeq, TokenVerify
from tests.llm_tiny import random_prompts, tiny_llama, tiny_pair, torch


def _ref(model, seq):
    with torch.no_grad():
        return model(torch.as_tensor([seq])).logits[0, -1]


def _gap(a, b) -> float:
    return float((a - b).abs().max())


def test_static_cache_feed_rollback_tree_and_squeeze_equal_full_passes():
    model = tiny_llama(6)
    c = StaticCachedLM(model, 2, 24)
    seqs = [[1, 5, 7, 9], [1, 4]]
    lg, _ = c.feed(np.array([[1, 5, 7, 9], [1, 4, 0, 0]]), [4, 2])
    assert _gap(lg[0, 3], _ref(model, seqs[0])) < 1e-12 and _gap(lg[1, 1], _ref(model, seqs[1])) < 1e-12
    keys = c.cache.layers[0].keys
    c.feed(np.array([[3, 8], [6, 2]]), [2, 2])
    c.rollback([5, 3])  # position-based: only the mask and the pointer change
    assert c.ptr == 5 and c.length.tolist() == [5, 3] and c.cache.layers[0].keys is keys
    seqs = [[1, 5, 7, 9, 3], [1, 4, 6]]
    lg, _ = c.feed_tree(np.array([[11, 12, 13], [17, 18, 0]]), np.array([[-1, -1, 0], [-1, 0, -1]]), [3, 2])
    assert _gap(lg[0, 2], _ref(model, seqs[0] + [11, 13])) < 1e-12
    assert _gap(lg[1, 1], _ref(model, seqs[1] + [17, 18])) < 1e-12
    c.keep_path([[0, 2], [0]])
    seqs = [seqs[0] + [11, 13], seqs[1] + [17]]
    for i in range(8):  # uneven rollbacks leave holes until the slots run out and are squeezed out in place
        c.rollback(c.length - np.array([0, 1]))
        seqs[1] = seqs[1][:-1]
        lg, _ = c.feed(np.array([[3 + i, 4], [5, 6 + i]]), [2, 2])
        seqs = [seqs[0] + [3 + i, 4], seqs[1] + [5, 6 + i]]
    assert c.length.tolist() == [len(s) for s in seqs] and c.cache.layers[0].keys is keys
    assert _gap(lg[0, 1], _ref(model, seqs[0])) < 1e-12 and _gap(lg[1, 1], _ref(model, seqs[1])) < 1e-12
    with pytest.raises(ValueError, match="max_length"):
        c.feed(np.zeros((2, 6), dtype=np.int64), [6, 6])
    with pytest.raises(ValueError, match="needs max_length"):
        make_cache(model, 1, kind="static")
    with pytest.raises(ValueError, match="cache: expected"):
        make_cache(model, 1, kind="paged")


@pytest.mark.parametrize("verifier", [TokenVerify(), BlockVerify()], ids=["token", "block"])
def test_loops_on_static_caches_equal_the_dynamic_ones(verifier):
    pair = tiny_pair(sharpness=2.0)
    prompts = random_prompts(3, np.random.default_rng(11))
    runs = [speculative_generate(pair, prompts, verifier, 3, 20, DecodeOptions(seed=4, progress=False, cache=kind))
            for kind in ("dynamic", "static")]
    assert [t.tolist() for t in runs[0].tokens] == [t.tolist() for t in runs[1].tokens]
    trees = [tree_generate(pair, prompts, KSeq(), "2x2", 16, DecodeOptions(seed=4, progress=False, cache=kind))
             for kind in ("dynamic", "static")]
    assert [t.tolist() for t in trees[0].tokens] == [t.tolist() for t in trees[1].tokens]
    plain = [plain_generate(pair.target, prompts, 12, seed=2, progress=False, cache=kind) for kind in ("dynamic",
                                                                                                     "static")]
    assert [t.tolist() for t in plain[0].tokens] == [t.tolist() for t in plain[1].tokens]


def test_compiled_static_cache_matches_eager_on_cpu():
    model = tiny_llama(6, dtype=torch.float32)
    c = make_cache(model, 1, kind="compiled", max_length=32)
    c.feed(np.array([[1, 5, 7, 9]]), [4])
    seq = [1, 5, 7, 9]
    for x in (3, 4, 5):
        lg, _ = c.feed(np.array([[x]]), [1])
        seq.append(x)
    assert _gap(lg[0, 0], _ref(model, seq)) < 1e-5
    c.rollback([5])
    lg, _ = c.feed(np.array([[11]]), [1])  # same width: the compiled graph is reused after the rollback
    assert _gap(lg[0, 0], _ref(model, [1, 5, 7, 9, 3, 11])) < 1e-5


def test_hugging_face_decode_step_reference_runs_with_each_cache_kind():
    from llm_bridge.peer import hf_decode_step

    pair = tiny_pair(sharpness=2.0)
    prompts = random_prompts(2, np.random.default_rng(3))
    for kind in ("dynamic", "static"):
        step = hf_decode_step(pair, prompts, 24, cache=kind)
        assert step["cache"] == kind
        if step["ms_per_token"] is None:  # only when timing noise swamps a tiny model, and then it says so
            assert "note" in step
        else:
            assert step["ms_per_token"] > 0 and step["tokens_per_s"] == pytest.approx(1e3 / step["ms_per_token"])
    with pytest.raises(ValueError, match="cache: expected"):
        hf_decode_step(pair, prompts, 8, cache="paged")
    with pytest.raises(ValueError, match="at least 2"):
        hf_decode_step(pair, prompts, 1)


def test_sessions_of_one_size_share_cache_tensors_once_the_earlier_one_is_gone():
    model = tiny_llama(7)
    a = make_cache(model, 2, kind="static", max_length=20)
    b = make_cache(model, 2, kind="static", max_length=20)
    assert b.cache is not a.cache  # both alive: each has its own slots
    a.feed(np.array([[1, 5, 7], [1, 4, 0]]), [3, 2])
    held = a.cache
    del a
    c = make_cache(model, 2, kind="static", max_length=20)
    assert c.cache is held and make_cache(model, 1, kind="static", max_length=20).cache is not held
    lg, _ = c.feed(np.array([[1, 9], [1, 3]]), [2, 2])  # the slots a wrote are masked out: a fresh sequence
    assert _gap(lg[0, 1], _ref(model, [1, 9])) < 1e-12 and _gap(lg[1, 1], _ref(model, [1, 3])) < 1e-12


def test_compiled_caches_build_two_graphs_per_model_across_prompts_lengths_and_sessions():
    """What a GPU run met: prompts of several lengths, plain sessions beside feature-reading ones, rows of a
    batch of one with any stride, draft lengths cut short at the end of a run (a new width each). Two graphs per
    model (width 1, any wider call), and the eager tokens."""
    from torch._dynamo.utils import counters

    from tests.test_llm_bridge_heads import head_pair

    torch._dynamo.reset()
    counters.clear()
    pair = head_pair("eagle")
    prompts = random_prompts(3, np.random.default_rng(5), low=2, high=9)
    assert len({len(p) for p in prompts}) == 3
    runs = [plain_generate(pair.target, prompts, n, seed=1, batch_size=1, progress=False, cache=kind)
            for n, kind in ((6, "compiled"), (12, "compiled"), (12, "static"))]
    assert counters["stats"]["unique_graphs"] == 1  # eager prefills, one slot count: the target's width-1 graph
    assert [t.tolist() for t in runs[1].tokens] == [t.tolist() for t in runs[2].tokens]
    for L in (1, 3, 4):
        spec = [speculative_generate(pair, prompts, TokenVerify(), L, 10,
                                     DecodeOptions(seed=2, batch_size=1, progress=False, cache=kind)) for kind in ("compiled", "static")]
        assert [t.tolist() for t in spec[0].tokens] == [t.tolist() for t in spec[1].tokens]
    # the target reads features now (same width-1 graph) and verifies L + 1 tokens, or fewer at the end of a run,
    # in one graph of symbolic width; the head feeds 1 pair (width-1 graph) or several (its symbolic-width graph)
    assert counters["stats"]["unique_graphs"] == 4
    assert make_cache(pair.target.model, 1, kind="compiled", max_length=10).max_length == STATIC_BUCKET


def test_logits_and_features_equal_the_models_own_outputs():
    """The compiled route (decoder, then output head) gives the model's logits and last hidden states; a model
    whose head soft-caps its logits is called as it is."""
    from llm_bridge.cache import logits_and_features

    model = tiny_llama(4)
    x = torch.as_tensor([[1, 5, 7, 9, 3]])
    with torch.no_grad():
        out = model(input_ids=x, output_hidden_states=True)
        logits, h = logits_and_features(model)(input_ids=x)
        assert _gap(logits, out.logits) < 1e-12 and _gap(h, out.hidden_states[-1]) < 1e-12
        model.config.final_logit_softcapping = 30.0
        step = logits_and_features(model)
        assert step.__code__ is not logits_and_features(tiny_llama(4)).__code__  # the model's own forward
        logits, h = step(input_ids=x)
        assert _gap(logits, out.logits) < 1e-12 and _gap(h, out.hidden_states[-1]) < 1e-12


def test_cache_kwargs_names_the_cache_as_each_forward_takes_it():
    """transformers renamed ``past_key_values`` to ``cache`` (the old name warns and goes away): each module gets
    its cache under the keyword its own forward declares, whichever the other inputs used."""
    from llm_bridge.cache import cache_kwargs

    class Old(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None, use_cache=False):
            return past_key_values

    class New(torch.nn.Module):
        def forward(self, input_ids, cache=None, use_cache=False):
            return cache

    marker = object()
    assert cache_kwargs(Old(), marker) == {"past_key_values": marker}
    assert cache_kwargs(New(), marker, {"input_ids": 1, "past_key_values": 2}) == {"input_ids": 1, "cache": marker}
    for module in (Old(), New()):
        assert module(0, **cache_kwargs(module, marker)) is marker
    model = tiny_llama(4)  # the installed transformers' own model takes whichever its forward names
    key, = cache_kwargs(model, None)
    assert key in inspect.signature(type(model).forward).parameters
