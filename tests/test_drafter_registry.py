"""A drafter declares what it can do, and a new one is one file: its class and one registered maker (here, in this
file) make it a name every tool understands — the loop runs it, the exact engine enumerates its law, the predictions
replay it, and what it declared it cannot do is refused before any decoding."""

from __future__ import annotations

import numpy as np
import pytest

from llm_bridge.drafters import (
    DRAFTERS,
    ModelDrafter,
    NGramDrafter,
    drafter_names,
    make_drafter,
    register_drafter,
    unregister_drafter,
)
from llm_bridge.options import DecodeOptions
from llm_bridge.sessions import ModelSession
from otspec.engine.session import Drafter
from otspec.verifiers import KSeq, TokenVerify
from tests.llm_tiny import random_prompts, tiny_pair


class TwinDrafter(Drafter):
    """Drafts from the target's own rows (every draft accepted), chains of at most three tokens, no trees."""

    drafts_trees = False
    max_draft_length = 3

    def __init__(self, target):
        self.target, self.name = target, "twin"

    def session(self, batch, sampling=None, *, hidden=False, cache="auto", max_length=None, timer=None,
                host_rows=True):
        self.check_plan(hidden=hidden)
        from llm_bridge.sampling import DEFAULT_SAMPLING

        return ModelSession(self.target.model, batch, sampling or DEFAULT_SAMPLING, hidden=hidden, cache=cache,
                            max_length=max_length, timer=timer, name="draft", host_rows=host_rows)

    def source(self, target_model, prompt, sampling=None):
        from llm_bridge.sampling import DEFAULT_SAMPLING
        from llm_bridge.sources import ModelSource

        return ModelSource(self.target.model, prompt, sampling or DEFAULT_SAMPLING)

    def replays(self, pair, prompts, continuations, longest, **options):
        from llm_bridge.replays import model_replays

        return model_replays(pair, prompts, continuations, longest, **options)


@pytest.fixture
def twin():
    register_drafter("twin", description="the target itself")(lambda argument, target: TwinDrafter(target))  # one line
    yield
    unregister_drafter("twin")


def test_the_built_in_drafters_declare_what_they_can_do():
    assert list(DRAFTERS)[:3] == ["ngram", "layers", "distilled"]
    assert drafter_names().startswith("ngram[:N], layers:K, distilled, eagle, medusa, head:FOLDER, int8")
    lookup = NGramDrafter(24, 3)
    assert lookup.capabilities() == {"deterministic": True, "reads_target_features": False, "drafts_trees": False,
                                     "max_draft_length": None, "has_hidden_states": False}
    with pytest.raises(ValueError, match="one token per position"):
        lookup.check_plan(trees=True)
    with pytest.raises(ValueError, match="draws nothing"):
        lookup.check_plan(exact=True)
    with pytest.raises(ValueError, match="no states of its own"):
        lookup.session(1, hidden=True)
    model = tiny_pair().drafter
    assert isinstance(model, ModelDrafter) and model.capabilities()["drafts_trees"] and not model.deterministic


def test_a_drafter_added_in_one_file_runs_everywhere(twin):
    from llm_bridge.loop import speculative_generate
    from llm_bridge.lossless import first_token_law
    from llm_bridge.replays import replay_sources
    from llm_bridge.trees import tree_generate

    pair = tiny_pair(sharpness=3.0)
    pair.drafter = make_drafter("twin", pair.target)
    assert "twin" in drafter_names() and isinstance(pair.drafter, TwinDrafter)
    prompts = random_prompts(3, np.random.default_rng(0))
    # the loop: drafting from the target's own rows, every draft is accepted (L + 1 tokens per iteration)
    run = speculative_generate(pair, prompts, TokenVerify(), 3, 9, DecodeOptions(progress=False, record_law=False))
    hist = run.decode.accept_hist  # [g, t]: iterations that drafted g tokens and accepted t
    assert all(hist[g, :g].sum() == 0 for g in range(hist.shape[0])) and hist[3, 3] > 0
    # the exact engine on its declared source: the first token's law is the target's row
    law = first_token_law(pair, prompts[0], TokenVerify(), 2)
    assert law.max_deviation < 1e-12
    # the predictions' replays
    replays = replay_sources(pair, prompts[:1], [run.tokens[0]], 2)
    assert replays.kind == "log" and len(replays.path_pairs()) == 1
    # what it declared it cannot do is refused before decoding
    with pytest.raises(ValueError, match="proposes at most 3 tokens"):
        pair.drafter.check_plan(lengths=[2, 4])
    with pytest.raises(ValueError, match="can only draft chains"):
        tree_generate(pair, prompts, KSeq(), "2x1", 4, DecodeOptions(progress=False))
    with pytest.raises(ValueError, match="takes no argument"):
        make_drafter("twin:2", pair.target)


def test_drafter_names_are_refused_clearly(twin):
    pair = tiny_pair()
    with pytest.raises(ValueError, match=r"give layers:ARGUMENT \(K, the target's first K layers\)"):
        make_drafter("layers", pair.target)
    with pytest.raises(ValueError, match="taken"):
        register_drafter("twin")
    with pytest.raises(ValueError, match="no drafter 'nothing'"):
        unregister_drafter("nothing")
