"""Host synchronisations per speculative iteration, with the timer on: at most one (the accepted lengths).

On a GPU the host waits for the device at every read of a device tensor (``.item``, ``.tolist``, ``.cpu``,
``.numpy``, ``bool(t)``, ...), at every tensor built from ordinary host memory (``torch.as_tensor`` of an array),
at every boolean-mask index and at every ``torch.cuda.synchronize``. The loops run here on CPU tensors (the code a
GPU runs), with :func:`tests.host_syncs.cuda_like_timer` (the CUDA timer's path: events, read in batches), and
:class:`tests.host_syncs.SyncCounter` counts each of these made from otspec's and llm_bridge's own code between
the ends of two iterations; the first interval holds the sessions' start (the prompts' prefill) too.
"""

from __future__ import annotations

import numpy as np
import pytest

from llm_bridge.drafters import Pair
from llm_bridge.sampling import Sampling
from llm_bridge.sessions import ModelSession
from otspec.drafts import parse_tree
from otspec.engine.controllers import FixedDraftLength
from otspec.engine.devicetree import walks_on_device
from otspec.engine.loop import chain_loop, tree_loop
from otspec.engine.runstate import LoopHooks
from otspec.verifiers import CHAIN_VERIFIERS, MULTI_DRAFT_REGISTRY, WHOLE_TREE_REGISTRY
from tests.host_syncs import IterationMarks, SyncCounter, cuda_like_timer
from tests.llm_tiny import VOCAB, random_prompts, tiny_pair, torch

B, L, TOKENS = 3, 3, 20


def _drafter(kind: str) -> Pair:
    pair = tiny_pair(sharpness=3.0)
    if kind == "model":
        return pair
    from llm_bridge.head_drafter import HeadDrafter
    from llm_bridge.heads import EagleHead, MedusaHeads

    torch.manual_seed(3)
    ids = np.arange(VOCAB)
    head = EagleHead(pair.target.model, ids) if kind == "eagle" else MedusaHeads(pair.target.model, ids, k=L)
    with torch.no_grad():
        for p in head.parameters():
            if p.requires_grad:
                p.add_(0.3 * torch.randn_like(p))
    return Pair(pair.target, HeadDrafter(head.eval()))


def _per_iteration(run_loop, timer) -> tuple[np.ndarray, list]:
    with SyncCounter() as counter:
        marks = IterationMarks(counter)
        run_loop(marks)
    return np.diff([0, *marks.marks]), counter.seen


def _device_sessions(pair, timer):
    """The target's and the drafter's sessions with rows on the device (the CPU here), the timer on every model
    call (a feature head's calls are timed by the loop's draft calls)."""
    reads_features = pair.drafter.reads_target_features
    target = ModelSession(pair.target.model, B, Sampling(), host_rows=False, hidden=reads_features, name="target",
                          timer=timer)
    draft = pair.drafter.session(B, Sampling(), host_rows=False, **({} if reads_features else {"timer": timer}))
    return target, draft


@pytest.mark.parametrize("drafter", ["model", "eagle", "medusa"])
@pytest.mark.parametrize("name", sorted(CHAIN_VERIFIERS))
def test_a_chain_iteration_synchronises_at_most_once(name, drafter):
    pair = _drafter(drafter)
    prompts = random_prompts(B, np.random.default_rng(0))
    timer = cuda_like_timer()

    def run_loop(marks):
        target, draft = _device_sessions(pair, timer)
        run = chain_loop(draft, target, CHAIN_VERIFIERS[name](), FixedDraftLength(L), TOKENS,
                         torch.Generator().manual_seed(0), hooks=LoopHooks(observers=[marks], timer=timer),
                         prompts=prompts)
        assert run.tokens.shape == (B, TOKENS)

    per, seen = _per_iteration(run_loop, timer)
    assert per.size >= 5
    assert per.max() <= 1, (per.tolist(), seen[:12])
    assert timer.count("target") >= per.size  # the timer was on and saw every target call


TREES = [("kseq", "2x2x1"), ("multiround", "iid:3:2"), ("multiround_without_replacement", "3x2"), ("naive", "2x2"),
         ("greedy", "3x1x1"), ("spechub", "2x2"), ("gbv", "iid:3:2"), ("traversal", "2x2x1"),
         ("naive", "eagle2:3:2:4")]


@pytest.mark.parametrize("drafter", ["model", "eagle"])
@pytest.mark.parametrize("name,spec", TREES, ids=[f"{n}-{t}" for n, t in TREES])
def test_a_device_tree_iteration_synchronises_at_most_once(name, spec, drafter):
    """Every verifier of candidates with a torch path, GBV and Traversal, on a k-config it is lossless for, and naive
    on EAGLE-2's confidence tree: growth, scoring and the walk on the device, and one read back (the emitted counts
    with the walked nodes)."""
    pair = _drafter(drafter)
    verifier = {**MULTI_DRAFT_REGISTRY, **WHOLE_TREE_REGISTRY}[name]()
    tree = parse_tree(spec, verifier.replacement)
    assert walks_on_device(verifier, tree)
    prompts = random_prompts(B, np.random.default_rng(0))
    timer = cuda_like_timer()

    def run_loop(marks):
        target, draft = _device_sessions(pair, timer)
        run = tree_loop(draft, target, verifier, tree, TOKENS, torch.Generator().manual_seed(0),
                        hooks=LoopHooks(observers=[marks], timer=timer), prompts=prompts)
        assert run.tokens.shape == (B, TOKENS)

    per, seen = _per_iteration(run_loop, timer)
    assert per.size >= 5
    assert per.max() <= 1, (per.tolist(), seen[:12])


@pytest.mark.parametrize("passed", [True, False], ids=["device-passed", "device-behind"])
def test_the_timer_reads_its_events_in_batches(passed):
    """Events are read every 4 outermost calls: without waiting where the device has passed them (a loop that reads
    its accepted lengths back), else with one synchronisation per backlog of 8; once the records are read every
    timed call has exactly one record, of non-negative time."""
    pair = tiny_pair(sharpness=3.0)
    prompts = random_prompts(B, np.random.default_rng(0))
    timer = cuda_like_timer(passed, resolve_every=4)
    calls, outermost = [], []
    timed = timer.call

    def counting(kind, n, fn, *args):
        outermost.append(not timer._open)
        calls.append(kind)
        return timed(kind, n, fn, *args)

    timer.call = counting

    def run_loop(marks):
        target = ModelSession(pair.target.model, B, Sampling(), host_rows=False, name="target", timer=timer)
        draft = pair.drafter.session(B, Sampling(), host_rows=False, timer=timer)
        chain_loop(draft, target, CHAIN_VERIFIERS["block_v1"](), FixedDraftLength(L), TOKENS,
                   torch.Generator().manual_seed(0), hooks=LoopHooks(observers=[marks], timer=timer), prompts=prompts)

    _, seen = _per_iteration(run_loop, timer)
    syncs = [s for s in seen if s.startswith("synchronize")]
    assert len(syncs) == timer.resolutions == (0 if passed else sum(outermost) // 8)
    assert sum(len(t) for kind in timer.records.values() for t in kind.values()) == len(calls)
    assert not timer._waiting
    assert all(t >= 0 for kind in timer.records.values() for times in kind.values() for t in times)


def test_the_counter_sees_a_host_synchronisation():
    """Negative control: with rows handed over as numpy arrays every call reads its rows back, and the counter
    notices."""
    pair = tiny_pair(sharpness=3.0)
    prompts = random_prompts(2, np.random.default_rng(1))

    def run_loop(marks):
        target = ModelSession(pair.target.model, 2, Sampling(), host_rows=True, name="target")
        draft = pair.drafter.session(2, Sampling(), host_rows=True)
        chain_loop(draft, target, CHAIN_VERIFIERS["token"](), FixedDraftLength(L), 8, np.random.default_rng(0),
                   hooks=LoopHooks(observers=[marks]), prompts=prompts)

    per, _ = _per_iteration(run_loop, None)
    assert per.min() > 1


@pytest.mark.parametrize("spec,name", [("2x2", "kseq"), ("eagle2:3:2:4", "naive"), ("chain", "block_v1")])
def test_static_caches_keep_one_read_per_iteration(spec, name):
    """The GPU's cache kind (a static cache with a slot mask; compiled there, eager here) adds no synchronisation."""
    pair = tiny_pair(sharpness=3.0)
    prompts = random_prompts(B, np.random.default_rng(0))
    timer = cuda_like_timer()

    def run_loop(marks):
        target = ModelSession(pair.target.model, B, Sampling(), host_rows=False, cache="static", max_length=64,
                              name="target", timer=timer)
        draft = pair.drafter.session(B, Sampling(), host_rows=False, cache="static", max_length=64, timer=timer)
        rng = torch.Generator().manual_seed(0)
        if spec == "chain":
            chain_loop(draft, target, CHAIN_VERIFIERS[name](), FixedDraftLength(L), TOKENS, rng,
                       hooks=LoopHooks(observers=[marks], timer=timer), prompts=prompts)
        else:
            verifier = MULTI_DRAFT_REGISTRY[name]()
            tree_loop(draft, target, verifier, parse_tree(spec, verifier.replacement), TOKENS, rng,
                      hooks=LoopHooks(observers=[marks], timer=timer), prompts=prompts)

    per, seen = _per_iteration(run_loop, timer)
    assert per.size >= 5 and per.max() <= 1, (per.tolist(), seen[:12])
