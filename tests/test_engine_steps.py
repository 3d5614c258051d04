"""The decode loops as generators (otspec.engine.loop.chain_steps / tree_steps): the same tokens as the loops run
whole, whoever drives them and however long they are suspended, and the time suspended left out of their clock."""

from __future__ import annotations

import time

import numpy as np
import pytest

from otspec.drafts import DraftTree
from otspec.engine.controllers import FixedDraftLength
from otspec.engine.loop import chain_loop, chain_steps, finish, tree_loop, tree_steps
from otspec.engine.observers import Observer
from otspec.engine.runstate import LoopHooks
from otspec.engine.session import SourceSession
from otspec.sources import PositionalSource
from otspec.verifiers import KSeq, TokenVerify
from tests.driving import drive_pausing

V, N, B = 4, 12, 3
PAUSE = 0.02  # seconds the driver sleeps at every yield


class Pauses(Observer):
    """What the loop tells its observers: every iteration, and every time it was suspended."""

    def __init__(self):
        self.iterations, self.pauses = 0, []

    def on_chain(self, step) -> None:
        self.iterations += 1

    def on_tree(self, step) -> None:
        self.iterations += 1

    def on_pause(self, seconds: float) -> None:
        self.pauses.append(seconds)


def _sources():
    rng = np.random.default_rng(4)
    return (PositionalSource(rng.dirichlet(np.full(V, 0.7), size=N + 2)),
            PositionalSource(rng.dirichlet(np.full(V, 0.7), size=N + 2)))


def _sessions():
    draft, target = _sources()
    return SourceSession(draft, B, N + 1, max_prefix=N - 2), SourceSession(target, B, N + 1, max_prefix=N - 1)


def _steps(tree: bool, observers, seed=0):
    sessions, rng = _sessions(), np.random.default_rng(seed)
    if tree:
        return tree_steps(*sessions, KSeq(), DraftTree.parse("2x1"), N, rng, hooks=LoopHooks(observers=observers),
                          batch=B)
    return chain_steps(*sessions, TokenVerify(), FixedDraftLength(3), N, rng, hooks=LoopHooks(observers=observers),
                       batch=B)


@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_a_suspended_loop_makes_the_same_tokens_and_leaves_its_time_away_out(tree):
    sessions = _sessions()
    whole = (tree_loop(*sessions, KSeq(), DraftTree.parse("2x1"), N, np.random.default_rng(0), batch=B) if tree else
             chain_loop(*sessions, TokenVerify(), FixedDraftLength(3), N, np.random.default_rng(0), batch=B))
    seen = Pauses()
    t0 = time.perf_counter()
    emitted, run = drive_pausing(_steps(tree, [seen]), PAUSE)  # the driver runs other work at every yield
    wall, yields = time.perf_counter() - t0, len(emitted)
    np.testing.assert_array_equal(run.tokens, whole.tokens)
    assert yields == seen.iterations == len(seen.pauses) >= N // 4  # a yield after every iteration
    # the tokens generated so far, over all sequences, ending at all of them
    assert emitted == sorted(emitted) and emitted[-1] == B * N and emitted[0] >= B
    assert all(p >= PAUSE for p in seen.pauses)
    assert run.seconds == pytest.approx(wall - sum(seen.pauses), abs=0.05)
    assert run.seconds < wall - yields * PAUSE + 1e-9


def test_finish_runs_a_generator_to_its_end_and_returns_what_it_returns():
    seen = Pauses()
    run = finish(_steps(False, [seen], seed=5))
    assert run.tokens.shape == (B, N) and seen.iterations == len(seen.pauses)
