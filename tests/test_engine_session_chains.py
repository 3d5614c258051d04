"""A toy source's session drafts a fixed-length chain in one call (SourceSession.draft_chain): the chain loop then
makes exactly the tokens, drafts and draft rows it makes drafting a token per call, for every kind of source and
chain verifier, whatever the batch, and where the rows stop proposing (prompt lookup replays)."""

from __future__ import annotations

import numpy as np
import pytest

from otspec.engine.controllers import FixedDraftLength
from otspec.engine.loop import chain_loop
from otspec.engine.observers import Observer
from otspec.engine.runstate import LoopHooks
from otspec.engine.session import SourceSession
from otspec.sources import (
    DepthPositionalSource,
    MarkovSource,
    PositionalSource,
    random_iid,
    random_markov,
)
from otspec.verifiers import BackwardBlockVerify, BlockVerify, GumbelCouplingVerify, TokenVerify

V, N, L = 4, 14, 3


class TokenByToken(FixedDraftLength):
    """The same fixed length, not declared fixed: the loop drafts it a token per session call."""

    fixed_length = False


class Steps(Observer):
    def __init__(self):
        self.seen = []

    def on_chain(self, step) -> None:
        drafted = step.drafted
        rows = [step.draft_rows[i, :drafted[i]].copy() for i in range(drafted.size)] if step.draft_rows is not None \
            else []
        self.seen.append((step.rows.copy(), drafted.copy(), step.tokens.copy(), rows, step.accepted.copy(),
                          np.asarray(step.correction).copy()))


def _pairs():
    rng = np.random.default_rng(11)
    yield "iid", random_iid(vocab=V, seed=1)
    yield "markov", random_markov(vocab=V, seed=2)
    varying = [MarkovSource(rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V), size=(N + 1, V)))
               for _ in range(2)]
    yield "markov_time_varying", tuple(varying)
    proposes = rng.random(N + 2) < 0.7
    yield "positional_proposes", (PositionalSource(rng.dirichlet(np.ones(V), size=N + 2), proposes),
                                  PositionalSource(rng.dirichlet(np.ones(V), size=N + 2)))
    by_depth = rng.random((L + 1, N + 2)) < 0.8
    yield "depth_positional", (DepthPositionalSource(rng.dirichlet(np.ones(V), size=(L + 1, N + 2)), by_depth),
                               DepthPositionalSource(rng.dirichlet(np.ones(V), size=(L + 1, N + 2))))


def _run(pair, verifier, controller, batch, seed):
    draft, target = pair
    sessions = SourceSession(draft, batch, N + 1, max_prefix=N - 2), SourceSession(target, batch, N + 1, max_prefix=N - 1)
    seen = Steps()
    run = chain_loop(*sessions, verifier, controller, N, np.random.default_rng(seed),
                     hooks=LoopHooks(observers=[seen]), batch=batch)
    return run.tokens, seen.seen


@pytest.mark.parametrize("name,pair", list(_pairs()), ids=[n for n, _ in _pairs()])
@pytest.mark.parametrize("verifier", [TokenVerify(), BlockVerify(), BackwardBlockVerify(), GumbelCouplingVerify()],
                         ids=["token", "block", "block_v1", "gumbel"])
@pytest.mark.parametrize("batch", [1, 4])
def test_a_chain_drafted_in_one_call_is_the_chain_drafted_a_token_per_call(name, pair, verifier, batch):
    assert SourceSession(pair[0], 1, 4).drafts_chains and FixedDraftLength(L).fixed_length
    for seed in (0, 1):
        tokens, steps = _run(pair, verifier, FixedDraftLength(L), batch, seed)
        tokens_slow, steps_slow = _run(pair, verifier, TokenByToken(L), batch, seed)
        np.testing.assert_array_equal(tokens, tokens_slow)
        assert len(steps) == len(steps_slow)
        for fast, slow in zip(steps, steps_slow, strict=True):
            for a, b in zip(fast[:3] + fast[4:], slow[:3] + slow[4:], strict=True):
                np.testing.assert_array_equal(a, b)
            for a, b in zip(fast[3], slow[3], strict=True):
                np.testing.assert_array_equal(a, b)
    if name == "positional_proposes":  # the replay does stop drafting somewhere, so that path is covered
        assert any((s[1] < np.minimum(L, N - 1)).any() for s in steps)


def test_a_session_of_a_model_like_source_drafts_a_token_per_call():
    class Plain(SourceSession):
        drafts_chains = False

    pair = random_iid(vocab=V, seed=1)
    tokens, _ = _run(pair, TokenVerify(), FixedDraftLength(L), 2, 0)
    draft, target = pair
    sessions = Plain(draft, 2, N + 1, max_prefix=N - 2), SourceSession(target, 2, N + 1, max_prefix=N - 1)
    run = chain_loop(*sessions, TokenVerify(), FixedDraftLength(L), N, np.random.default_rng(0), batch=2)
    np.testing.assert_array_equal(run.tokens, tokens)


def test_a_subclass_that_decides_itself_and_a_timed_run_draft_a_token_per_call():
    class StopAfterOne(FixedDraftLength):
        def keep_drafting(self, step, rows, **_):
            return np.zeros(rows.shape[0], dtype=bool)

    class Calls:
        def __init__(self):
            self.draft = 0

        def call(self, kind, n, fn, *args):
            self.draft += kind == "draft"
            return fn(*args)

    assert not StopAfterOne(3).fixed_length
    draft, target = random_iid(vocab=V, seed=1)
    timer = Calls()
    sessions = SourceSession(draft, 2, N + 1, max_prefix=N - 2), SourceSession(target, 2, N + 1, max_prefix=N - 1)
    seen = Steps()
    chain_loop(*sessions, TokenVerify(), FixedDraftLength(L), N, np.random.default_rng(0),
               hooks=LoopHooks(timer=timer, observers=[seen]), batch=2)
    full = sum(int(drafted.max() == L) for _, drafted, *_ in seen.seen)
    assert full > 0 and timer.draft >= len(seen.seen) + (L - 1) * full  # a call per drafted token, as a model's
