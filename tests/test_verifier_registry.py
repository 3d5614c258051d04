"""One verifier registry filled by declaration: a verifier added in one file (this one) and one line (``register``)
shows up wherever the package lists verifiers — the CLI's choices and runs, sweeps, ``calc``, the audit's adapters,
the figures and the real-pair tools — and the registry refuses declarations that do not hold together."""

from __future__ import annotations

import json

import numpy as np
import pytest

from otspec import cli
from otspec.verifiers import (
    CHAIN_VERIFIERS,
    MULTI_DRAFT_REGISTRY,
    REGISTRY,
    TREE_VERIFIERS,
    VERIFIERS,
    ClosedForm,
    KSeq,
    TokenVerify,
    register,
    unregister,
)


class TokenTwin(TokenVerify):
    """A new lossless chain verifier without a closed form of its own (token verification under another name)."""

    name = "token_twin"
    label = "token verification, twin"
    closed_form = None


class KSeqTwin(KSeq):
    """A new multi-draft verifier (k-Seq under another name)."""

    name = "kseq_twin"
    label = "k-Seq, twin"


@pytest.fixture
def twins():
    register(TokenTwin)  # the one line a new verifier needs (inside otspec: its import in otspec.verifiers)
    register(KSeqTwin)
    yield
    unregister("token_twin")
    unregister("kseq_twin")


def _cli_json(capsys, argv) -> dict:
    assert cli.main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_the_registry_names_every_verifier_once_in_a_fixed_order():
    assert list(REGISTRY) == ["token", "block", "block_v1"]
    assert list(CHAIN_VERIFIERS) == ["token", "block", "block_v1", "gumbel"]
    assert list(MULTI_DRAFT_REGISTRY) == ["kseq", "multiround", "multiround_without_replacement", "naive", "otm",
                                          "greedy", "spechub"]
    assert list(TREE_VERIFIERS)[-2:] == ["traversal", "gbv"]
    assert {"decoding_opt", "decoding_uno", "batch"} <= set(VERIFIERS) and "batch" not in TREE_VERIFIERS
    assert [cls.closed_form for cls in REGISTRY.values()] == [ClosedForm.TOKEN, ClosedForm.BLOCK, ClosedForm.OPTIMAL]
    assert [(f.iid_field, f.calc_key) for f in ClosedForm] == [("token", "token"), ("verification", "block_onpath"),
                                                              ("optimum", "block_optimal")]


def test_a_verifier_added_in_one_file_appears_everywhere(twins, capsys, tmp_path):
    from otspec.audit.adapters import ADAPTERS
    from otspec.audit.protocol import load_sampler
    from otspec.figures.trees_logged import step_verifiers
    from otspec.figures.trees_optimum import VERIFIERS as optimum_figure
    from otspec.sweep import load_spec
    from otspec.sweep.spec import SWEEP_VERIFIERS

    assert "token_twin" in CHAIN_VERIFIERS and "token_twin" not in REGISTRY  # no closed form of its own
    assert "kseq_twin" in MULTI_DRAFT_REGISTRY and "kseq_twin" in TREE_VERIFIERS
    # the CLI: a choice, and a run
    out = _cli_json(capsys, ["simulate", "--draft", "0.6,0.4", "--target", "0.3,0.7", "--verifier",
                             "token_twin", "--L", "2", "--blocks", "20000", "--seed", "1", "--json"])
    assert abs(out["accepted"]["value"] - (0.7 + 0.7**2)) < 4 * out["accepted"]["stderr"]
    # calc: a column for the chain verifier (its own value), a row for the multi-draft one
    block = _cli_json(capsys, ["calc", "block", "--draft", "0.6,0.4", "--target", "0.3,0.7", "--L", "2",
                               "--json"])
    assert block["token_twin"] == pytest.approx(block["token"], abs=1e-15)
    tree = _cli_json(capsys, ["calc", "tree", "--draft", "0.6,0.4", "--target", "0.3,0.7", "--tree", "2x1",
                              "--json"])
    assert tree["verifiers"]["kseq_twin"] == pytest.approx(tree["verifiers"]["kseq"], abs=1e-15)
    # sweeps
    assert {"token_twin", "kseq_twin"} <= set(SWEEP_VERIFIERS)
    spec = tmp_path / "spec.toml"
    spec.write_text('L = [2]\nk = [2]\n[[pairs]]\nkind = "iid"\ndraft = [0.6, 0.4]\ntarget = [0.3, 0.7]\n'
                    '[[verifiers]]\nname = "token_twin"\n[[verifiers]]\nname = "kseq_twin"\n')
    assert {c["verifier"] for c in load_spec(spec).cells} == {"token_twin", "kseq_twin"}
    # the audit's adapters
    sampler = load_sampler("otspec.audit.adapters:token_twin")
    assert "token_twin" in ADAPTERS and ADAPTERS["token_twin"] is sampler
    rng = np.random.default_rng(0)
    accepted, token = sampler(np.zeros((3, 2), dtype=np.int64), np.full((3, 2, 2), 0.5), np.full((3, 3, 2), 0.5), rng)
    assert accepted.tolist() == [2, 2, 2] and token.shape == (3,)
    # the figures and the real-pair tools
    assert "kseq_twin" in optimum_figure and "kseq_twin" in step_verifiers()
    from llm_bridge.validate import TREE_VERIFIERS as validate_trees

    assert "kseq_twin" in validate_trees


def test_a_removed_verifier_is_gone_everywhere(twins):
    from otspec.audit.adapters import ADAPTERS

    unregister("kseq_twin")
    assert "kseq_twin" not in TREE_VERIFIERS
    register(KSeqTwin)
    assert "token_twin" in ADAPTERS


def test_declarations_that_do_not_hold_together_are_refused():
    class Clash(TokenVerify):
        name = "token"

    class NoName(TokenVerify):
        name = "not a name"

    class Sideways(TokenVerify):
        name = "sideways"
        layout = "diagonal"

    class ClosedCandidates(KSeq):
        name = "closed_candidates"
        closed_form = ClosedForm.TOKEN

    for cls, match in ((Clash, "taken by TokenVerify"), (NoName, "identifier"), (Sideways, "layout 'diagonal'"),
                       (ClosedCandidates, "lossless chain verifier")):
        with pytest.raises(ValueError, match=match):
            register(cls)
        assert cls.name not in VERIFIERS or VERIFIERS[cls.name] is not cls
    with pytest.raises(ValueError, match="no verifier 'nothing'"):
        unregister("nothing")
    with pytest.raises(ValueError, match="'fastest'"):
        ClosedForm("fastest")
