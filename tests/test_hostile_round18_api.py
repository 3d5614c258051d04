"""Round eighteen's findings on the Python API (issue 43): rows given as lists, users' sources, numbers past every
float, hand-made sweep cells, saved sources, the auditor's timer, llm_bridge's option objects. One test per class,
each able to fail on the old code."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

P3, Q3 = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]
CORPUS = Path(__file__).resolve().parent.parent / "llm_bridge" / "data" / "corpus" / "smollm2"


def test_engine_rows_given_as_lists_are_read_entry_by_entry():
    """evaluate(['0.5', '0.3', '0.2'], ...) gave 1.19 (text read as numbers) and [True, False, False] 0.24, while
    IIDSource refused both; a list of float16 entries was checked at float64's tolerance."""
    import otspec.engine as E
    from otspec.engine.tree import tree_law
    from otspec.sources import IIDSource
    from otspec.verifiers import KSeq, TokenVerify

    for bad in (["0.5", "0.3", "0.2"], (b"0.5", b"0.3", b"0.2"), [True, False, False]):
        for call in (lambda x: E.evaluate(x, Q3, TokenVerify(), 2), lambda x: E.evaluate(Q3, x, TokenVerify(), 2),
                     lambda x: tree_law(x, Q3, KSeq(), "2x1"),
                     lambda x: E.simulate(x, Q3, TokenVerify(), 2, 100, progress=False)):
            with pytest.raises(ValueError, match="(draft|target): expected a Source or one probability row"):
                call(bad)
    assert E.evaluate(P3, Q3, TokenVerify(), 2).expected_accepted == \
        E.evaluate(IIDSource(P3), IIDSource(Q3), TokenVerify(), 2).expected_accepted
    f16 = [np.float16(0.5), np.float16(0.505)]  # within float16's tolerance, as IIDSource takes it
    assert E.evaluate(f16, [0.5, 0.5], TokenVerify(), 1).expected_accepted == pytest.approx(
        E.evaluate(IIDSource(f16), [0.5, 0.5], TokenVerify(), 1).expected_accepted, abs=1e-15)


def test_a_users_source_subclass_has_its_rows_checked():
    """A Source subclass whose rows summed to 1.4 was simulated (1.258 accepted); one without vocab_size gave an
    AttributeError."""
    import otspec.engine as E
    from otspec.sources import Source
    from otspec.verifiers import TokenVerify

    class Rows(Source):
        vocab_size = 2

        def __init__(self, row):
            self.row = row

        def to_json(self):
            return {}

        def _rows(self, tokens, lengths):
            return np.broadcast_to(np.asarray(self.row), (tokens.shape[0], len(self.row)))

    for row, needle in (([0.7, 0.7], "sums to 1.4"), ([np.nan, 1.0], "NaN"), ([0.5, 0.25, 0.25], "shape")):
        for call in (lambda s: E.simulate(s, [0.5, 0.5], TokenVerify(), 2, 100, progress=False),
                     lambda s: E.evaluate(s, [0.5, 0.5], TokenVerify(), 2),
                     lambda s: E.generate(s, [0.5, 0.5], TokenVerify(), 2, 20, progress=False)):
            with pytest.raises(ValueError, match=needle):
                call(Rows(row))
    assert E.evaluate(Rows([0.5, 0.5]), [0.5, 0.5], TokenVerify(), 2).expected_accepted == 2.0

    class NoVocab(Rows):
        vocab_size = None

    with pytest.raises(ValueError, match="draft: NoVocab.vocab_size is None"):
        E.evaluate(NoVocab([0.5, 0.5]), [0.5, 0.5], TokenVerify(), 2)


def test_numbers_past_every_float_and_odd_spellings_are_refused_by_name():
    """10**400 gave OverflowError tracebacks (check_real, naive_acceptance) and was echoed in 401 digits;
    tokens_per_iteration read np.bool_(True) as 1 and raised TypeError on a list; ThresholdController(np.array(0.5))
    and a torch row that requires grad gave tracebacks."""
    import torch

    from otspec.checks import check_real, check_size
    from otspec.engine.controllers import ThresholdController
    from otspec.solvers import otm_value
    from otspec.sources import random_iid
    from otspec.theory import naive_acceptance, tokens_per_iteration

    with pytest.raises(ValueError, match="concentration: expected a finite number .* a 401-digit number"):
        random_iid(3, concentration=10**400)
    with pytest.raises(ValueError, match="x: expected a number in .*past every float"):
        check_real(__import__("fractions").Fraction(10**400, 3), "x", allow_inf=True)
    with pytest.raises(ValueError, match=r"k = a 401-digit number \(10000000...\) is above 2\^63"):
        naive_acceptance(P3, Q3, 10**400)
    assert naive_acceptance(P3, Q3, 2**40) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="a 31-digit number"):
        check_size(10**30, "n", limit=5)
    for bad in (np.bool_(True), b"0.5", 0.5 + 0j, [True], 10**400):
        with pytest.raises(ValueError, match="expected_accepted"):
            tokens_per_iteration(bad)
    assert tokens_per_iteration([0.5, 1]).tolist() == [1.5, 2.0] and tokens_per_iteration(np.float64(0.5)) == 1.5
    assert ThresholdController(np.array(0.5), 3).thresholds == [0.5, 0.5]
    with pytest.raises(ValueError, match="thresholds"):
        ThresholdController(np.array(True), 3)
    row = torch.tensor(P3, dtype=torch.float64, requires_grad=True)
    assert otm_value(row, Q3, 2) == otm_value(P3, Q3, 2)


def test_api_horizon_refusals_say_what_asked_for_the_length():
    """simulate_tree on a horizon-3 pair said "asked for 6" without the tree's depth; temper(source, 0) was refused
    although temperature 0 is the arg-max row."""
    import otspec.engine as E
    from otspec.engine.tree import simulate_tree
    from otspec.sources import IIDSource, random_markov
    from otspec.sweep import temper
    from otspec.verifiers import KSeq, TokenVerify

    d, t = random_markov(3, horizon=3, seed=1)
    with pytest.raises(ValueError, match=r"asked for 6 \(the tree 1x1x1x1x1 drafts 5 tokens, then one"):
        simulate_tree(d, t, KSeq(), "1x1x1x1x1", 50)
    with pytest.raises(ValueError, match=r"asked for 6 \(draft_length 5"):
        E.evaluate(d, t, TokenVerify(), 5)
    with pytest.raises(ValueError, match=r"asked for 10 \(n_tokens = 10\)"):
        E.generate(d, t, TokenVerify(), 2, 10, progress=False)
    assert temper(IIDSource([0.2, 0.5, 0.3]), 0).probs.tolist() == [0.0, 1.0, 0.0]


def test_a_hand_made_cell_is_checked_as_load_spec_checks_a_spec(tmp_path):
    """run_cell took L = 2.5 and wrote the refusal into a note column beside the bad value; quantities 'exact'
    gave KeyError 'e'; params {'zz': 1} a TypeError; a logged pair without its tail a KeyError; load_spec(3) a
    TypeError and a missing pair file a plain FileNotFoundError; temperature 0 was refused."""
    from otspec.checks import MissingFile
    from otspec.sweep import load_spec, run_cell

    cell = {"pair": {"kind": "iid", "draft": [0.3, 0.7], "target": [0.6, 0.4]}, "verifier": "token", "params": {},
            "L": 2, "k": None, "temperature": 1.0, "cost_ratio": 0.0, "blocks": 100, "tokens": 16, "sequences": 2,
            "confidence": 0.95}
    assert run_cell(cell, 1, ["exact"])["exact_accepted"] > 0
    assert run_cell({**cell, "temperature": 0.0}, 1, ["exact"])["exact_accepted"] == 0.0  # arg-max rows disagree
    for change, needle in ((("L", 2.5), "cell L"), (("L", True), "cell L"), (("k", 5000), "MAX_CANDIDATES"),
                           (("cost_ratio", -1), "cost_ratio"), (("blocks", 0), "cell blocks"),
                           (("confidence", 1.5), "confidence"), (("temperature", "1"), "temperature"),
                           (("params", {"zz": 1}), "parameters {'zz': 1} for 'token'"), (("zz", 1), "unknown keys"),
                           (("pair", {"kind": "logged", "file": "x.npz"}), "missing 'tail'"),
                           (("pair", {"kind": "random_iid", "vocab": 4, "concentration": "1", "pair_seed": 0,
                                      "sparsity": 0.0}), "concentration")):
        with pytest.raises(ValueError, match=needle):
            run_cell({**cell, change[0]: change[1]}, 1, ["exact"])
    for quantities in ("exact", ["zzz"], None, []):
        with pytest.raises(ValueError, match="quantities"):
            run_cell(cell, 1, quantities)
    with pytest.raises(ValueError, match="sweep spec: is not a path"):
        load_spec(3)
    with pytest.raises(ValueError, match=r"unknown keys \['extra'\] for kind 'iid'"):
        run_cell({**cell, "pair": {**cell["pair"], "extra": 1}}, 1, ["exact"])
    spec = tmp_path / "s.toml"
    spec.write_text('name = "s"\nquantities = ["exact"]\ntemperature = [0.0, 1.0]\n[[pairs]]\nkind = "json"\n'
                    'draft = "nowhere.json"\ntarget = "nowhere.json"\n[[verifiers]]\nname = "token"\n')
    with pytest.raises(MissingFile, match="no draft source file"):
        load_spec(spec)
    spec.write_text('name = "s"\nquantities = ["exact"]\nL = [2]\ntemperature = [0.0, 1.0]\n[[pairs]]\nkind = "iid"\n'
                    'draft = [0.3, 0.7]\ntarget = [0.6, 0.4]\n[[verifiers]]\nname = "token"\n')
    assert sorted(c["temperature"] for c in load_spec(spec).cells) == [0.0, 1.0]


def test_sources_survive_a_save_and_the_auditor_leaves_no_timer_behind(tmp_path):
    """A stationary MarkovSource lost its horizon on save (the reloaded one decoded past it); a float32 row came back
    5e-9 off; save_source through a link to nothing gave FileNotFoundError; audit(timeout=1e-9) left its SIGINT and
    SIGALRM handlers and watchdog behind, which raised SamplerTimeout a second later in unrelated code; audit(rows=3)
    gave a TypeError."""
    import signal
    import time

    from otspec.audit import SamplerTimeout, audit
    from otspec.audit.adapters import token
    from otspec.sources import IIDSource, MarkovSource, load_source, save_source

    chain = MarkovSource([0.5, 0.5], [[0.9, 0.1], [0.2, 0.8]], horizon=4)
    save_source(chain, tmp_path / "m.json")
    assert load_source(tmp_path / "m.json").horizon == 4
    row = IIDSource(np.array([0.1, 0.2, 0.7], dtype=np.float32))
    save_source(row, tmp_path / "r.json")
    assert np.array_equal(load_source(tmp_path / "r.json").probs, row.probs) and row.probs.sum() == 1.0
    (tmp_path / "link.json").symlink_to(tmp_path / "nowhere" / "x.json")
    for path, needle in ((tmp_path / "link.json", "a link to nothing"), (tmp_path / "no" / "x.json", "cannot be written")):
        with pytest.raises(ValueError, match=needle):
            save_source(row, path)
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGALRM)
    for _ in range(5):
        with pytest.raises(SamplerTimeout):
            audit(token, samples=300, timeout=1e-9, progress=False)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGALRM)) == handlers
    time.sleep(1.5)  # the watchdog's SIGINT would come after 1 s
    for rows in (3, [0.5, 0.5]):
        with pytest.raises(ValueError, match="rows: expected None, a logged-rows .npz path"):
            audit(token, samples=300, rows=rows, progress=False)


def test_llm_options_are_checked_when_made():
    """ValidateConfig(hf='yes') and HeadRecipe(progress='no') were taken; verifiers='token' was read as five
    names; .but(zzz=1) gave a TypeError; train_head(HeadRecipe(out='/proc/zz')) fetched the model before refusing
    the folder; check_model_spec('x' * 5000) gave an OSError and check_model_spec(3) spoke of a hub id 3; the same
    corpus twice trained every sequence twice; load_corpus('/nonexistent') was a plain FileNotFoundError."""
    from llm_bridge.corpus import load_corpus
    from llm_bridge.models import ModelNotFound, check_model_spec
    from llm_bridge.train_head import HeadRecipe
    from llm_bridge.validate_config import ValidateConfig
    from otspec.checks import MissingFile

    for kwargs, needle in (({"hf": "yes"}, "hf"), ({"progress": "no"}, "progress"),
                           ({"verifiers": "token"}, "verifiers: expected a list or tuple"),
                           ({"trees": "2x1"}, "trees: expected a list"),
                           ({"tree_pairs": ("x",)}, "tree_pairs: expected .verifier, tree. pairs"),
                           ({"target": ""}, "target: an empty name"), ({"draft": 3}, "draft: expected a model name")):
        with pytest.raises(ValueError, match=needle):
            ValidateConfig(**{"hf": False, **kwargs})
    with pytest.raises(ValueError, match=r"ValidateConfig.but: no options \['zzz'\]"):
        ValidateConfig(hf=False).but(zzz=1)
    for kwargs, needle in (({"progress": "no"}, "progress"), ({"hydra": "False"}, "--hydra"),
                           ({"out": Path("/proc/zz")}, "--out"), ({"target": ""}, "--target: an empty name"),
                           ({"target": 3}, "--target: expected a model name"), ({"device": "zzz"}, "device")):
        with pytest.raises(ValueError, match=needle):
            HeadRecipe(**kwargs)
    for spec, needle in (("x" * 5000, "cannot be looked up"), (None, "expected a model name")):
        with pytest.raises(ModelNotFound, match=needle):
            check_model_spec(spec)
    assert issubclass(ModelNotFound, ValueError)
    with pytest.raises(ValueError, match="a corpus folder given twice"):
        load_corpus([CORPUS, CORPUS.parent / "smollm2" / "."])
    with pytest.raises(MissingFile):
        load_corpus("/nonexistent-corpus")


def test_every_verifier_of_candidates_takes_none_and_a_lattice_step_lies_in_the_unit_interval():
    """With no candidate (k = 0, as a sequence that drafted nothing) multi-round emits Y ~ q; SpecHub and greedy
    gave an IndexError, k-Seq blamed max_k and OTM refused k; iid_block_values took a lattice step of 10 on
    [0, 1]."""
    from otspec.theory import iid_block_values
    from otspec.verifiers import GreedyDraftVerify, KSeq, MultiRound, OTMVerify, SpecHubVerify

    p, q = np.array([[0.5, 0.5]]), np.array([[0.6, 0.4]])
    none = np.zeros((1, 0), dtype=int)
    for verifier in (SpecHubVerify(), KSeq(), MultiRound(), GreedyDraftVerify(), OTMVerify()):
        law = verifier.law(none, p, q)
        assert np.array_equal(law.rejected, q) and not law.accepted.any()
        out = verifier.sample(np.zeros((2000, 0), dtype=int), np.tile(p, (2000, 1)), np.tile(q, (2000, 1)),
                              np.random.default_rng(0))
        assert not out.accepted.any() and abs((out.token == 0).mean() - 0.6) < 0.05
    with pytest.raises(ValueError, match=r"step: expected a finite number in \(0, 1\]"):
        iid_block_values([0.3, 0.7], [0.6, 0.4], 3, route="lattice", step=10.0)


def test_multiround_stops_walking_rounds_once_its_residual_is_fixed():
    """A merged node's thousands of multi-round candidates were each a pass over the rows (256x255 at V = 3: 70 s
    for 100 trees); once t = Norm[(t - p)_+] is a fixed point the later rounds come in one gather. The law equals
    the round-by-round one (the torch path walks every round)."""
    import torch

    from otspec.verifiers import MultiRound

    rng = np.random.default_rng(0)
    for trial in range(400):
        V, B, k = int(rng.integers(2, 6)), int(rng.integers(1, 5)), int(rng.integers(1, 40))
        p, q = rng.dirichlet(np.ones(V) * 0.5, B), rng.dirichlet(np.ones(V) * 0.5, B)
        if trial % 3 == 0:
            p[:, 0] = 0
            p /= p.sum(axis=1, keepdims=True)
        if trial % 5 == 0:
            q = p.copy()
        cands = np.stack([rng.choice(V, k, p=p[b]) for b in range(B)])
        cands[rng.random(cands.shape) < 0.2] = -1
        fast = MultiRound().law(cands, p, q)
        walked = MultiRound().law(torch.tensor(cands), torch.tensor(p), torch.tensor(q))
        assert np.abs(fast.accepted - walked.accepted.numpy()).max() < 1e-13
        assert np.abs(fast.rejected - walked.rejected.numpy()).max() < 1e-13


def test_an_in_process_audit_keeps_stdout_for_its_report(tmp_path, capsys, monkeypatch):
    """With --in-process a sampler's print went to stdout ahead of the report (with --json, not one JSON document);
    in the child process it goes to stderr."""
    import json
    import sys

    from otspec.cli import main

    (tmp_path / "chatty.py").write_text("from otspec.audit.adapters import token\n\n\ndef chatty(*args):\n"
                                        "    print('{\"verdict\": \"fake\"}')\n    return token(*args)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("chatty", None)
    assert main(["audit", "chatty:chatty", "--in-process", "--json", "--samples", "300"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["verdict"] == "no bias detected" and "fake" in out.err


def test_round19_api_spellings():
    """np.timedelta64 was read as a number (numpy registers it as an integer) and a bytearray as a row of its byte
    values; a user's source with a text or NaN horizon or a float vocabulary gave TypeErrors or was used; rows a
    user's source returned as a list or tensor reached the engines as such; a lattice step of 5e-324 gave an
    OverflowError; tensors that require grad or live on 'meta' gave torch's errors; call_sampler took list drafts
    to an AttributeError; load_logged_rows(3), HeadRecipe(out=3) and a spec whose rows differ in length got
    through to TypeErrors or a cell."""
    import torch

    import otspec.engine as E
    from llm_bridge.train_head import HeadRecipe
    from otspec.audit import call_sampler
    from otspec.audit.adapters import token
    from otspec.drafts import inclusion_iid
    from otspec.sources import Source, bernoulli, load_logged_rows
    from otspec.theory import (
        iid_block_values,
        pareto_front,
        predicted_speedup,
        tokens_per_iteration,
    )
    from otspec.verifiers import TokenVerify

    for call in (lambda: bernoulli(np.timedelta64(1)), lambda: predicted_speedup(1.5, np.timedelta64(1), 2),
                 lambda: E.simulate(P3, Q3, TokenVerify(), np.timedelta64(2), 50),
                 lambda: E.evaluate(bytearray([1, 0, 0]), Q3, TokenVerify(), 2),
                 lambda: iid_block_values(P3, Q3, 2, route="lattice", step=5e-324),
                 lambda: tokens_per_iteration(torch.tensor(0.5, device="meta")),
                 lambda: load_logged_rows(3), lambda: HeadRecipe(out=3), lambda: HeadRecipe(out=b"/tmp/x")):
        with pytest.raises(ValueError):
            call()
    grad = torch.tensor(0.25, requires_grad=True)
    assert pareto_front(P3, Q3, grad) == pareto_front(P3, Q3, 0.25)
    assert inclusion_iid(grad, 2).tolist() == inclusion_iid(0.25, 2).tolist()

    class Odd(Source):
        vocab_size, horizon = 2, None

        def __init__(self, **kw):
            self.__dict__.update(kw)

        def to_json(self):
            return {}

        def _rows(self, tokens, lengths):
            rows = [[0.5, 0.5]] * tokens.shape[0]
            return torch.tensor(rows, dtype=torch.float64) if getattr(self, "tensor", False) else rows

    for kw, needle in (({"horizon": "9"}, "horizon is '9'"), ({"horizon": float("nan")}, "horizon is nan"),
                       ({"vocab_size": 2.0}, "vocab_size is 2.0")):
        with pytest.raises(ValueError, match=needle):
            E.evaluate(Odd(**kw), [0.5, 0.5], TokenVerify(), 2)
    for kw in ({}, {"tensor": True}):  # a list or a tensor of rows: read as float64 rows
        assert E.simulate(Odd(**kw), [0.5, 0.5], TokenVerify(), 2, 200, progress=False).accepted.value == 2.0
        assert E.evaluate(Odd(**kw), [0.5, 0.5], TokenVerify(), 2).expected_accepted == 2.0
    tau, y = call_sampler(token, [[0, 1]], np.full((1, 2, 2), 0.5), np.full((1, 3, 2), 0.5), np.random.default_rng(0))
    assert tau.shape == (1,) and y.shape == (1,)
    with pytest.raises(ValueError, match="draft_probs, target_probs: expected shapes"):
        call_sampler(token, [[0, 1]], np.full((1, 2, 2), 0.5), np.full((1, 2, 2), 0.5), np.random.default_rng(0))


def test_a_spec_pair_of_two_vocabularies_is_refused_when_read(tmp_path):
    from otspec.sweep import load_spec

    spec = tmp_path / "s.toml"
    spec.write_text('name = "s"\nquantities = ["exact"]\nL = [2]\n[[pairs]]\nkind = "iid"\ndraft = [0.3, 0.7]\n'
                    'target = [0.6, 0.3, 0.1]\n[[verifiers]]\nname = "token"\n')
    with pytest.raises(ValueError, match="different vocabularies .2 and 3 tokens"):
        load_spec(spec)


def test_round19_llm_files_are_read_before_any_model(tmp_path):
    """A corpus index with a key it does not have, a NaN shard time or a number for made_with, and a head folder whose
    drafter.json or drafter.safetensors is damaged, reached the model fetch; validate took the trees 2x1 and 2X1."""

    from llm_bridge.corpus import load_corpus
    from llm_bridge.drafters import check_drafter_spec
    from llm_bridge.validate_config import ValidateConfig
    from tests.corpus_files import damaged_index

    for i, (change, needle) in enumerate((
            (lambda j: j.__setitem__("colour", 1), "keys it does not have: \\['colour'\\]"),
            (lambda j: j["shards"][0].__setitem__("seconds", float("nan")), "seconds is nan"),
            (lambda j: j.__setitem__("made_with", 3), "made_with is 3; expected an object"))):
        with pytest.raises(ValueError, match=needle):
            load_corpus(damaged_index(tmp_path / f"c{i}", change))
    shipped = Path(__file__).resolve().parent.parent / "llm_bridge" / "weights" / "eagle"
    head = tmp_path / "head"
    head.mkdir()
    (head / "drafter.json").write_text((shipped / "drafter.json").read_text())
    (head / "drafter.safetensors").write_bytes((shipped / "drafter.safetensors").read_bytes()[:1000])
    with pytest.raises(ValueError, match="drafter.safetensors cannot be read"):
        check_drafter_spec(f"head:{head}")
    (head / "drafter.json").write_text("{}")
    with pytest.raises(ValueError, match="not a head's record"):
        check_drafter_spec(f"head:{head}")
    check_drafter_spec(f"head:{shipped}")
    with pytest.raises(ValueError, match="names one twice"):
        ValidateConfig(hf=False, trees=("2x1", "2X1"))


def test_round20_head_folders_and_corpus_shards_are_read_before_any_model(tmp_path):
    """A head made for another target, with an unknown or duplicated key, a text recipe.vocab or another kind's
    weights, and a corpus shard whose sequences or messages disagree with its recipe, reached the model fetch."""
    import json
    import shutil

    from llm_bridge.corpus import load_corpus
    from llm_bridge.drafters import check_drafter_spec
    from tests.corpus_files import damaged_index

    shipped = Path(__file__).resolve().parent.parent / "llm_bridge" / "weights" / "eagle"
    meta = json.loads((shipped / "drafter.json").read_text())
    for i, (change, needle) in enumerate((
            (lambda m: m.__setitem__("target", "banana"), "made for the target 'banana'"),
            (lambda m: m.__setitem__("zzz", 1), "keys it does not have"),
            (lambda m: m["recipe"].__setitem__("vocab", "8192"), "recipe.vocab '8192'"),
            (lambda m: m.__setitem__("kind", "medusa"), "the weights are not such a head's"))):
        head = tmp_path / f"h{i}"
        shutil.copytree(shipped, head)
        damaged = json.loads(json.dumps(meta))
        change(damaged)
        (head / "drafter.json").write_text(json.dumps(damaged))
        with pytest.raises(ValueError, match=needle):
            check_drafter_spec(f"head:{head}", "smollm2")
    (head / "drafter.json").write_text('{"kind": "eagle", "kind": "eagle"}')
    with pytest.raises(ValueError, match="appears twice"):
        check_drafter_spec(f"head:{head}")
    for i, (change, needle) in enumerate(((lambda j: j["shards"][0].__setitem__("sequences", 0), "sequences x 256"),
                                          (lambda j: j["shards"][0].__setitem__("messages", 25), "at most 24"))):
        with pytest.raises(ValueError, match=needle):
            load_corpus(damaged_index(tmp_path / f"c{i}", change))
