"""Round seventeen's leftovers (issue 43): late refusals moved before the work, and messages that name what the user
gave. One test per class, each able to fail on the old code."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.cli_refusals import refused
from tests.corpus_files import damaged_index

P3, Q3 = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]
ROWS = ["--draft", "0.5,0.3,0.2", "--target", "0.2,0.3,0.5"]
CORPUS = Path(__file__).resolve().parent.parent / "llm_bridge" / "data" / "corpus" / "smollm2"


def test_a_tree_wider_than_max_candidates_is_refused_when_read(capsys):
    """simulate --tree 5000 --verifier kseq started its progress bar and failed on k = 5,000 inside the run."""
    from otspec.cli import main
    from otspec.drafts import DraftTree, parse_tree
    from otspec.errors import SizeLimitError

    with pytest.raises(SizeLimitError, match="k_2 = 4,097 children of one node is above MAX_CANDIDATES"):
        parse_tree("2x4097")
    with pytest.raises(SizeLimitError, match="MAX_CANDIDATES"):
        DraftTree((5000,), "greedy")
    err = refused(main, ["simulate", *ROWS, "--tree", "5000", "--verifier", "kseq", "--blocks", "100"], capsys,
                  "--tree '5000'", "MAX_CANDIDATES")
    assert "monte carlo" not in err


def test_a_tree_drawn_without_replacement_is_capped_at_the_vocabulary():
    """Without replacement a node drafts at most V children, so 5000 at V = 3 is the tree 3 (the values calc tree
    gave); past MAX_CANDIDATES once capped, it is refused before any draw."""
    from otspec.drafts import DraftTree, tree_for_vocab
    from otspec.engine.tree import simulate_tree, tree_law
    from otspec.errors import SizeLimitError
    from otspec.sources import IIDSource
    from otspec.verifiers import TraversalVerify

    wide = DraftTree((5000, 2), False)
    assert tree_for_vocab(wide, 3).branching == (3, 2) and tree_for_vocab(wide, 4000).branching == (4000, 2)
    assert tree_for_vocab(DraftTree((2, 2), False), 3) == DraftTree((2, 2), False)
    for V in (4097, 10_000):
        with pytest.raises(SizeLimitError, match=f"k_1 = {min(V, 5000):,}"):
            tree_for_vocab(wide, V)
    for bad in ("2x2", None):
        with pytest.raises(ValueError, match="tree: expected a DraftTree"):
            tree_for_vocab(bad, 3)
    with pytest.raises(ValueError, match="vocab_size"):
        tree_for_vocab(wide, 2.5)
    p, q = IIDSource(P3), IIDSource(Q3)
    exact = tree_law(p, q, TraversalVerify(), wide).expected_tokens_per_iteration
    assert exact == pytest.approx(tree_law(p, q, TraversalVerify(), DraftTree((3, 2), False))
                                  .expected_tokens_per_iteration, abs=1e-12)
    mc = simulate_tree(p, q, TraversalVerify(), wide, 4000, seed=1, progress=False)
    assert abs(mc.accepted.value + 1 - exact) < 4 * (mc.accepted.high - mc.accepted.low) / 3.92 + 1e-9


def test_merged_siblings_draw_past_max_candidates_with_the_same_law(monkeypatch):
    """Siblings drawn with replacement merge when they agree, and the merged node draws m·k children: 256x255 at
    V = 3 died mid-run on k = 13,770 although every width is within MAX_CANDIDATES. Those children are drawn in
    blocks; with the block shrunk to 3 the tokens and the accepted lengths keep their exact laws."""
    import otspec.engine.loop as loop
    from otspec.drafts import DraftTree
    from otspec.engine.tree import generate_tree, tree_law
    from otspec.sources import IIDSource
    from otspec.verifiers import KSeq

    p, q = IIDSource(P3), IIDSource(Q3)
    out = generate_tree(p, q, KSeq(), DraftTree((256, 255)), 12, n_sequences=2, seed=0, progress=False)
    assert out.generated == 24
    sizes = []
    real = loop.sample_candidates

    def spy(rows, k, rng, **kw):
        sizes.append(k)
        return real(rows, k, rng, **kw)

    monkeypatch.setattr(loop, "MAX_CANDIDATES", 3)
    monkeypatch.setattr(loop, "sample_candidates", spy)
    tree = DraftTree((3, 2))
    res = generate_tree(p, q, KSeq(), tree, 3000, n_sequences=2, seed=3, progress=False)
    assert max(sizes) <= 3 and len(sizes) > 100  # every merged node's draw came in blocks of at most 3
    full = res.accept_hist[2]
    n = full.sum()
    mean = (np.arange(3) * full).sum() / n
    sd = np.sqrt(((np.arange(3) - mean) ** 2 * full).sum() / n)
    exact = tree_law(p, q, KSeq(), tree).expected_tokens_per_iteration - 1
    assert abs(mean - exact) < 4.5 * sd / np.sqrt(n), (mean, exact)
    counts = np.bincount(res.tokens.reshape(-1), minlength=3)
    from scipy import stats
    assert stats.chisquare(counts, np.array(Q3) * counts.sum()).pvalue > 1e-4


def test_a_corpus_index_is_checked_in_full_before_any_model(tmp_path, monkeypatch, capsys):
    """train_head loaded the target on an index whose recipe said length = -5, or whose token total was wrong; the
    corpus command resumed onto a listed shard that is a pipe; --openers '' read as no openers; --vocab past the
    target's 49,152 tokens was found after the load."""
    from llm_bridge import corpus, train_head
    from llm_bridge.corpus import CorpusRecipe, build_corpus, load_corpus

    loads = []
    monkeypatch.setattr("llm_bridge.models.load_model", lambda *a, **k: loads.append(a))
    monkeypatch.setattr("llm_bridge.train_head.load_model", lambda *a, **k: loads.append(a))
    index = json.loads((CORPUS / "corpus.json").read_text())
    for name, change, needle in (("length", lambda j: j["recipe"].__setitem__("length", -5), "its recipe: length"),
                                 ("extra", lambda j: j["recipe"].__setitem__("colour", 1), "colour"),
                                 ("total", lambda j: j.__setitem__("tokens", 5), "it says 5 tokens")):
        folder = damaged_index(tmp_path / name, change)
        with pytest.raises(ValueError, match=needle):
            load_corpus(folder)
        refused(train_head.main, ["--kind", "eagle", "--corpus", str(folder), "--out", str(tmp_path / "o")], capsys,
                "damaged corpus index", needle)
    refused(train_head.main, ["--kind", "eagle", "--vocab", "49153", "--out", str(tmp_path / "o")], capsys,
            "--vocab 49,153", "49,152 tokens")
    refused(corpus.main, ["--out", str(tmp_path / "c"), "--openers", ""], capsys, "--openers")
    piped = tmp_path / "piped"
    piped.mkdir()
    shutil.copy(CORPUS / "corpus.json", piped / "corpus.json")
    os.mkfifo(piped / index["shards"][0]["file"])
    with pytest.raises(ValueError, match="not a regular file"):
        build_corpus(CorpusRecipe(**index["recipe"], tokens=10**7), piped, progress=False)
    assert not loads


def test_gpu_suite_families_are_checked_first(tmp_path, capsys):
    """--families banana started the suite and failed at the model lookup (or blamed the CPU device first)."""
    from llm_bridge.gpu_suite import main

    for families, needle in (("banana", "--families banana"), ("distilled,distilled", "named twice"),
                             ("ngram:0", "--families ngram:0")):
        for extra in ([], ["--smoke"]):
            refused(main, ["--out-dir", str(tmp_path), "--families", families, *extra], capsys, needle)


def test_model_flags_are_named_in_their_refusals(tmp_path, capsys):
    """validate --target '' said "model: an empty name"; an empty .gguf file "cannot mmap an empty file"."""
    from llm_bridge.models import ModelNotFound, check_model_spec
    from llm_bridge.validate import main

    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    text = tmp_path / "text.gguf"
    text.write_text("not a model")
    for flag, value, needle in (("--target", "", "--target: an empty name"), ("--draft", "", "--draft: an empty name"),
                                ("--target", str(empty), "is not a GGUF file (empty)"),
                                ("--target", str(text), "no GGUF header")):
        refused(main, ["--out-dir", str(tmp_path), flag, value, "--no-hf"], capsys, needle)
    with pytest.raises(ModelNotFound, match="^model: an empty name"):
        check_model_spec("")


def test_calc_names_the_flag_past_a_solver_limit(tmp_path, capsys):
    """calc block took --lp-max-variables 700,000 and the LP refused in a message without the flag; calc adaptive
    --max-length 4096 on a Markov pair quoted max_length=17, a value the user never gave."""
    from otspec.cli import main
    from otspec.sources import MarkovSource, save_source

    refused(main, ["calc", "block", "--draft", "0.3,0.7", "--target", "0.75,0.25", "--L", "2",
                   "--lp-max-variables", "700000"], capsys, "--lp-max-variables", "MAX_LP_VARIABLES = 600,000")
    for role, matrix in (("d", [[0.6, 0.4], [0.3, 0.7]]), ("t", [[0.5, 0.5], [0.2, 0.8]])):
        save_source(MarkovSource([0.5, 0.5], matrix), tmp_path / f"{role}.json")
    pair = ["--draft-source", str(tmp_path / "d.json"), "--target-source", str(tmp_path / "t.json"), "--t-draft", "0.1"]
    for K in ("17", "4096"):
        err = refused(main, ["calc", "adaptive", *pair, "--max-length", K], capsys, f"--max-length {K}",
                      "at most 16")
        assert "17" not in err.replace("--max-length 17", "")
    main(["calc", "adaptive", *pair, "--max-length", "16", "--json"])
    assert json.loads(capsys.readouterr().out)["best_fixed_length"] >= 1


def test_horizon_refusals_name_the_flag_and_the_files(tmp_path, capsys):
    """"MarkovSource supports sequences of at most 8 tokens (its horizon); asked for 9" named neither --L nor the
    source file; --tree with --L blamed the default verifier."""
    from otspec.cli import main
    from otspec.errors import HorizonError
    from otspec.sources import MarkovSource, save_source

    chain = MarkovSource([0.5, 0.5], [[[0.6, 0.4], [0.3, 0.7]]] * 7)  # horizon 8
    for role in ("d", "t"):
        save_source(chain, tmp_path / f"{role}.json")
    pair = ["--draft-source", str(tmp_path / "d.json"), "--target-source", str(tmp_path / "t.json")]
    refused(main, ["simulate", *pair, "--L", "8", "--blocks", "100"], capsys, "--L 8 needs sequences of 9 tokens",
            "horizon 8", "d.json")
    refused(main, ["decode", *pair, "--L", "2", "--tokens", "20", "--sequences", "1"], capsys,
            "--tokens 20 needs sequences of 20 tokens, past the horizon 8", "t.json")
    refused(main, ["simulate", *pair, "--tree", "2x2x2x2x2x2x2x2", "--verifier", "kseq", "--blocks", "10"], capsys,
            "--tree 2x2x2x2x2x2x2x2 needs sequences of 9 tokens")
    with pytest.raises(HorizonError) as info:
        chain.check_length(12)
    assert (info.value.horizon, info.value.length) == (8, 12)
    refused(main, ["simulate", *ROWS, "--tree", "2x1", "--L", "2", "--blocks", "100"], capsys, "--L and --tree")


def test_sweep_cells_and_pairs_refuse_malformed_dicts():
    """build_pair({}) and run_cell({}) raised KeyError."""
    from otspec.sweep import build_pair, run_cell

    good = {"kind": "iid", "draft": [0.5, 0.5], "target": [0.25, 0.75]}
    assert build_pair(good)[0].vocab_size == 2
    for pair, needle in (({}, "missing 'kind'"), ({"kind": "iid"}, "missing 'draft', 'target'"), (3, "a dict"),
                         ({"kind": "logged", "file": "x.npz"}, "read by run_cell"), ({"kind": "zz"}, "kind 'zz'")):
        with pytest.raises(ValueError, match=needle):
            build_pair(pair)
    cell = {"pair": good, "verifier": "token", "params": {}, "L": 2, "k": None, "temperature": 1.0,
            "cost_ratio": 0.1, "blocks": 100, "tokens": 100, "sequences": 1, "confidence": 0.95}
    assert run_cell(cell, 0, ["exact"])["exact_accepted"] > 0
    for bad, needle in (({}, "missing 'pair'"), ({**cell, "verifier": "zz"}, "verifier 'zz'"),
                        ({**cell, "params": 3}, "a dict of its parameters"), ({**cell, "pair": {"kind": "logged"}},
                                                                               "missing 'file'"), ([cell], "a dict")):
        with pytest.raises(ValueError, match=needle):
            run_cell(bad, 0, ["exact"])


def test_a_source_where_a_row_goes_is_named():
    """validate_probs(IIDSource) said "booleans, text or other objects among the entries"."""
    from otspec.checks import integer_array, real_array
    from otspec.distributions import validate_probs
    from otspec.sources import IIDSource

    with pytest.raises(ValueError, match="got IIDSource, a source .pass its rows"):
        validate_probs(IIDSource(P3), "draft")
    with pytest.raises(ValueError, match="got IIDSource, a source"):
        real_array(IIDSource(P3), "x")
    with pytest.raises(ValueError, match="booleans or other objects among the entries"):
        validate_probs([0.5, True], "draft")
    for bad in ([1.5, 2], [[1, 2], [3]], np.array([True]), ["1"]):
        with pytest.raises(ValueError, match="ids: expected"):
            integer_array(bad, "ids")
    with pytest.raises(ValueError, match="2-D integer array"):
        integer_array([1, 2], "ids", ndim=2)
    assert integer_array(np.array([], dtype=float), "ids").dtype == np.int64


def test_audit_takes_every_seed_the_readme_promises():
    """audit(seed=None) and audit(seed=Generator) were refused; the README says seeds are None, a Generator or an
    integer. The report keeps the integer used, which replays the run."""
    from otspec.audit import audit
    from otspec.audit.adapters import token

    for seed in (None, np.random.default_rng(7)):
        first = audit(token, samples=300, seed=seed, progress=False)
        assert isinstance(first.seed, int) and first.seed >= 0
        again = audit(token, samples=300, seed=first.seed, progress=False)
        assert again.p_value == first.p_value and again.tests == first.tests
    assert audit(token, samples=300, seed=5, progress=False).seed == 5
    for bad in (-1, 2.5, True, "3"):
        with pytest.raises(ValueError, match="seed"):
            audit(token, samples=300, seed=bad, progress=False)


def test_markov_pair_says_where_its_matrices_come_from():
    """markov_pair(2048, 4) said "5 matrices" with no word on the horizon that asked for them."""
    from otspec.errors import SizeLimitError
    from otspec.theory.rejections import markov_pair

    with pytest.raises(SizeLimitError, match=r"markov_pair\(vocab=2,048, horizon=4\): .*horizon \+ 1 = 5 matrices"):
        markov_pair(2048, 4)


def test_unknown_arrays_and_unordered_thresholds_are_refused(tmp_path):
    """A logged-rows file with an extra array loaded (a JSON source refuses an unknown key); ThresholdController took
    a set, whose order is not the steps'."""
    from otspec.engine.controllers import ThresholdController
    from otspec.sources import load_logged_rows

    source = Path(__file__).resolve().parent.parent / "figures" / "llm_default_rows.npz"
    with np.load(source) as z:
        arrays = dict(z)
    np.savez(tmp_path / "extra.npz", **arrays, extra=np.zeros(3))
    with pytest.raises(ValueError, match=r"arrays this format does not have: \['extra'\]"):
        load_logged_rows(tmp_path / "extra.npz")
    np.savez(tmp_path / "same.npz", **arrays)
    assert load_logged_rows(tmp_path / "same.npz").vocab_size == int(arrays["vocab_size"])
    for bad in ({0.1, 0.5}, {1: 0.1, 2: 0.5}, "0.1", True):
        with pytest.raises(ValueError, match="thresholds"):
            ThresholdController(bad, 3)
    assert ThresholdController(np.float32(0.25), 3).thresholds == [0.25, 0.25]
    assert ThresholdController((0.1, None), 3).thresholds == [0.1, None]


def test_round18_command_lines(tmp_path, capsys):
    """calc block, calc rejections and calc tree named neither the flag nor the file past a horizon (calc tree exited
    0 with every value null); calc rejections computed T = 10^6 rejections before refusing --M 4097; a Markov file
    whose horizon needs more matrices than it holds was reported as "asked for 5"; plot record drew a record whose
    cache, dtype, interval unit or model name was damaged; validate --verifiers token,token and head_curve --heads
    eagle,eagle reached the model; gpu_suite printed a 309-digit budget."""
    from llm_bridge.gpu_suite import main as gpu_main
    from llm_bridge.head_curve import main as curve_main
    from llm_bridge.validate import main as validate_main
    from otspec.cli import main
    from otspec.plot import main as plot_main
    from otspec.sources import MarkovSource, save_source

    chain = MarkovSource([0.5, 0.5], [[[0.6, 0.4], [0.3, 0.7]]])  # horizon 2
    for role in ("d", "t"):
        save_source(chain, tmp_path / f"{role}.json")
    pair = ["--draft-source", str(tmp_path / "d.json"), "--target-source", str(tmp_path / "t.json")]
    refused(main, ["calc", "block", *pair, "--L", "1,2,3"], capsys, "--L 1,2,3 needs sequences of 3 tokens",
            "past the horizon 2", "d.json")
    refused(main, ["calc", "rejections", *pair, "--T", "9"], capsys, "--T 9 needs sequences of 9 tokens")
    refused(main, ["calc", "tree", *pair, "--tree", "2x2x2"], capsys, "--tree 2x2x2 needs sequences of 4 tokens")
    refused(main, ["calc", "rejections", "--draft", "0.3,0.7", "--target", "0.6,0.4", "--T", "10", "--M", "4097"],
            capsys, "--M = 4,097 is above MAX_CANDIDATES")
    with pytest.raises(ValueError, match="horizon 5 needs 4 transition matrices, got 1"):
        MarkovSource([0.5, 0.5], [[[0.5, 0.5], [0.5, 0.5]]], horizon=5)
    record = json.loads((Path(__file__).resolve().parent.parent / "figures" / "llm_default.json").read_text())
    for change, needle in ((lambda r: r["settings"].__setitem__("cache", "banana"), "settings.cache"),
                           (lambda r: r["model_pair"].__setitem__("dtype", "float7"), "model_pair.dtype"),
                           (lambda r: r["runs"][0]["block_efficiency"].__setitem__("unit", "banana"), "unit"),
                           (lambda r: r["model_pair"].__setitem__("draft", "a\nb"), "printable")):
        damaged = json.loads(json.dumps(record))
        change(damaged)
        (tmp_path / "r.json").write_text(json.dumps(damaged))
        refused(plot_main, ["record", str(tmp_path / "r.json"), "--out-dir", str(tmp_path / "o")], capsys, needle)
    refused(validate_main, ["--out-dir", str(tmp_path), "--verifiers", "token,token", "--no-hf"], capsys,
            "names one twice")
    refused(curve_main, ["--out", str(tmp_path / "c.json"), "--heads", "eagle,eagle"], capsys, "names a head twice")
    err = refused(gpu_main, ["--out-dir", str(tmp_path), "--smoke", "--budget", "1e308"], capsys, "--budget")
    assert len(err) < 300


def test_round18b_late_checks_and_damaged_records(tmp_path, capsys):
    """Damaged records were drawn (0 tokens/s, top_p 0, duplicate or text prompt ids, a prompt count that disagrees
    with its ids, device 'banana', an empty model name, a tail mode 'banana'); adaptive --save-head would overwrite
    a record; distill --target '' said "model: an empty name"; OTM's tuple limit came after the progress bar; a
    --L list ran its first length before the horizon refused a later one; a .json sweep spec was parsed as TOML."""
    from llm_bridge.adaptive import main as adaptive_main
    from llm_bridge.distill import main as distill_main
    from otspec.cli import main
    from otspec.plot import main as plot_main
    from otspec.sources import MarkovSource, save_source

    record = json.loads((Path(__file__).resolve().parent.parent / "figures" / "llm_default.json").read_text())
    for change, needle in ((lambda r: r["baseline"].__setitem__("tokens_per_s", 0), "tokens_per_s should be > 0"),
                           (lambda r: r["settings"].__setitem__("top_p", 0), "top_p"),
                           (lambda r: r["settings"]["prompt_ids"].__setitem__(0, "0"), "prompt_ids"),
                           (lambda r: r["settings"]["prompt_ids"].__setitem__(1, 0), "distinct"),
                           (lambda r: r["settings"].__setitem__("prompts", 31), "settings.prompts = 31"),
                           (lambda r: r["model_pair"].__setitem__("device", "banana"), "model_pair.device"),
                           (lambda r: r["model_pair"].__setitem__("target", " "), "model_pair.target"),
                           (lambda r: r["logged_rows"].__setitem__("tail", "banana"), "logged_rows.tail"),
                           (lambda r: r["timing"].__setitem__("cpus", 0), "timing.cpus")):
        damaged = json.loads(json.dumps(record))
        change(damaged)
        (tmp_path / "r.json").write_text(json.dumps(damaged))
        refused(plot_main, ["record", str(tmp_path / "r.json"), "--out-dir", str(tmp_path / "o")], capsys, needle)
    (tmp_path / "keep.json").write_text(json.dumps(record))
    refused(adaptive_main, ["--out-dir", str(tmp_path), "--save-head", str(tmp_path / "keep.json")], capsys,
            "not an acceptance head")
    refused(distill_main, ["--out", str(tmp_path / "d"), "--target", ""], capsys, "--target: an empty name")
    refused(main, ["simulate", *ROWS, "--tree", "256x255", "--verifier", "otm", "--blocks", "100"], capsys,
            "OTMVerify on the tree 256x255", "max_tuples")
    save_source(MarkovSource([0.5, 0.5], [[[0.6, 0.4], [0.3, 0.7]]] * 7), tmp_path / "h8.json")
    err = refused(main, ["simulate", "--draft-source", str(tmp_path / "h8.json"), "--target-source",
                         str(tmp_path / "h8.json"), "--L", "1,8", "--blocks", "100"], capsys, "--L 1,8 needs")
    assert "monte carlo" not in err
    spec = {"name": "j", "quantities": ["exact"], "L": [2], "verifiers": [{"name": "token"}],
            "pairs": [{"kind": "iid", "draft": [0.3, 0.7], "target": [0.6, 0.4]}]}
    (tmp_path / "s.json").write_text(json.dumps(spec))
    assert main(["sweep", str(tmp_path / "s.json"), "--workers", "1", "--out", str(tmp_path / "sw"), "--json"]) == 0
    capsys.readouterr()
    (tmp_path / "s.txt").write_text(json.dumps(spec))
    refused(main, ["sweep", str(tmp_path / "s.txt"), "--workers", "1", "--out", str(tmp_path / "sw2")], capsys,
            "cannot parse it as TOML (read by its suffix")


def test_adaptive_refuses_a_policy_given_twice(tmp_path, capsys):
    """adaptive --thresholds 0.5,0.5 and --fixed 2,2 reached the model fetch (each policy is run once)."""
    from llm_bridge.adaptive import main

    for flag, value in (("--thresholds", "0.5,0.5"), ("--fixed", "2,2")):
        refused(main, ["--out-dir", str(tmp_path), flag, value], capsys, f"{flag} {value}: a value given twice")


def test_round19_command_lines(tmp_path, capsys):
    """A record whose block_efficiency.low was 0.5 was drawn (a percentile interval of values >= 1); decode --tree 2x2
    --tokens 9 past a horizon of 8 blamed --tree; a 5,000-digit integer in a source file gave Python's digit-limit
    text."""
    from otspec.cli import main
    from otspec.plot import main as plot_main
    from otspec.sources import MarkovSource, save_source

    record = json.loads((Path(__file__).resolve().parent.parent / "figures" / "llm_default.json").read_text())
    record["runs"][0]["block_efficiency"]["low"] = 0.5
    (tmp_path / "r.json").write_text(json.dumps(record))
    refused(plot_main, ["record", str(tmp_path / "r.json"), "--out-dir", str(tmp_path / "o")], capsys,
            "block_efficiency.low", ">= 1")
    save_source(MarkovSource([0.5, 0.5], [[[0.6, 0.4], [0.3, 0.7]]] * 7), tmp_path / "h8.json")
    pair = ["--draft-source", str(tmp_path / "h8.json"), "--target-source", str(tmp_path / "h8.json")]
    refused(main, ["decode", *pair, "--tree", "2x2", "--verifier", "kseq", "--tokens", "9", "--sequences", "2"], capsys,
            "--tokens 9 needs sequences of 9 tokens")
    (tmp_path / "big.json").write_text('{"type": "uniform", "vocab_size": ' + "9" * 5000 + ', "support": 2}')
    refused(main, ["calc", "block", "--draft-source", str(tmp_path / "big.json"), "--target-source",
                   str(tmp_path / "big.json"), "--L", "2"], capsys, "an integer of more than 4,300 digits")


def test_round19_sweeps_and_records(tmp_path, capsys):
    """A 2 GiB sparse cell file was read whole (4.25 GB); results.csv as a link wrote the table through it into an
    unrelated file; trees iid:2:2 and 2x1 made two identical cells; plot sweep --x L --y L gave pandas' message; a
    record's code.commit as a number, code.modified as text and accelerator "null" were drawn."""
    from otspec.cli import main
    from otspec.plot import main as plot_main
    from otspec.sweep import load_spec

    spec = tmp_path / "s.toml"
    spec.write_text('name = "s"\nquantities = ["exact"]\nL = [2]\n[[pairs]]\nkind = "iid"\ndraft = [0.3, 0.7]\n'
                    'target = [0.6, 0.4]\n[[verifiers]]\nname = "token"\n')
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--workers", "1", "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    cell = next((out / "cells").glob("*.json"))
    with open(cell, "r+b") as fh:  # a sparse 2 GiB cell: recomputed without being read
        fh.truncate(2**31)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (out / "results.csv").unlink()
    (out / "results.csv").symlink_to(victim)
    assert main(["sweep", str(spec), "--workers", "1", "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    assert victim.read_text() == "keep me" and not (out / "results.csv").is_symlink() and cell.stat().st_size < 2**20
    twice = tmp_path / "t.toml"
    twice.write_text(spec.read_text().replace('L = [2]', 'trees = ["iid:2:2", "2x1"]').replace('"token"', '"gbv"'))
    with pytest.raises(ValueError, match="a tree is listed twice"):
        load_spec(twice)
    refused(plot_main, ["sweep", str(out / "results.csv"), "--x", "L", "--y", "L", "--out", str(tmp_path / "p.png")],
            capsys, "one column named twice")
    record = json.loads((Path(__file__).resolve().parent.parent / "figures" / "llm_default.json").read_text())
    for change, needle in ((lambda s: s.__setitem__("code", {"commit": 12345}), "code.commit"),
                           (lambda s: s.__setitem__("code", {"commit": "380ccf3", "modified": "yes"}), "code.modified"),
                           (lambda s: s.__setitem__("accelerator", "null"), "settings.accelerator")):
        damaged = json.loads(json.dumps(record))
        change(damaged["settings"])
        (tmp_path / "r.json").write_text(json.dumps(damaged))
        refused(plot_main, ["record", str(tmp_path / "r.json"), "--out-dir", str(tmp_path / "o")], capsys, needle)
