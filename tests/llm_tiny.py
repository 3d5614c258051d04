"""Tiny randomly initialised LLaMA models and a word-level tokenizer for the llm_bridge tests (no download)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB = 24


def tiny_llama(seed: int, layers: int = 2, vocab: int = VOCAB, sharpness: float = 1.0, dtype=None):
    """A LLaMA with hidden size 32; ``sharpness`` scales the tied head (peakier rows, larger TV between seeds). Its
    linear layers are few-row ones, as :func:`llm_bridge.models.load_model` gives on CPU."""
    from llm_bridge.kernels import few_row_linears

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                      tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = transformers.LlamaForCausalLM(config).to(dtype or torch.float64).eval()
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(sharpness)
    return few_row_linears(model)


def tiny_tokenizer(vocab: int = VOCAB, rename: dict | None = None):
    """A whitespace word-level tokenizer over tokens w0..w{vocab-1} (ids = indices); ``rename`` changes entries."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {f"w{i}": i for i in range(vocab)}
    words.update({"<pad>": 0, "<s>": 1, "</s>": 2})
    words = {k: v for k, v in words.items() if k not in {"w0", "w1", "w2"}}
    for old, new in (rename or {}).items():
        words[new] = words.pop(old)
    tok = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                                pad_token="<pad>", unk_token="<pad>")


def tiny_pair(target_seed=0, draft_seed=1, draft_layers=1, sharpness=1.0, vocab=VOCAB, dtype=None):
    from llm_bridge.drafters import ModelDrafter, Pair
    from llm_bridge.models import LoadedModel

    dtype = dtype or torch.float64
    tok = tiny_tokenizer(vocab)
    target = LoadedModel(tiny_llama(target_seed, 2, vocab, sharpness, dtype), tok, "tiny-target", "cpu", dtype)
    draft = LoadedModel(tiny_llama(draft_seed, draft_layers, vocab, sharpness, dtype), tok, "tiny-draft", "cpu", dtype)
    return Pair(target, ModelDrafter(draft))


def random_prompts(n: int, rng: np.random.Generator, low: int = 2, high: int = 7, vocab: int = VOCAB) -> list:
    return [list(rng.integers(3, vocab, size=int(rng.integers(low, high + 1)))) for _ in range(n)]
