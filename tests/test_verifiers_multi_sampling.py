"""Token-level multi-draft verifiers: every sampler against its exact law (G-tests with computed power)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from strategies import (
    g_test,
    pearson_noncentrality,
)
from test_verifiers_multi import (
    VERIFIERS,
    KSeqSingleDraftResidual,
    NaiveFirstAccepted,
    NaiveFirstOnly,
)

from otspec.drafts import draft_tuple_law as candidate_tuple_law
from otspec.drafts import sample_candidates
from otspec.verifiers import (
    KSeq,
    MultiDraftOutcome,
    MultiRound,
    MultiRoundWithoutReplacement,
    NaiveMultiCandidate,
    OTMVerify,
)

# ------------------------------------------------------------------ sampler vs law
P_ROW = np.array([0.4, 0.35, 0.25, 0.0])  # token 3 is never drafted
Q_ROW = np.array([0.0, 0.3, 0.3, 0.4])  # token 0 is never acceptable
K = 2
N_PER_TUPLE = 20_000


def _cells(law):
    """(M, 2V) cell probabilities of (accepted, token): [rejected row | accepted row]."""
    return np.concatenate([np.asarray(law.rejected), np.asarray(law.accepted)], axis=1)


def _g_against(null, tuple_id, out, M, V):
    token, acc = np.asarray(out.token), np.asarray(out.accepted)
    counts = np.bincount(tuple_id * 2 * V + acc.astype(np.int64) * V + token, minlength=M * 2 * V).reshape(M, -1)
    impossible = int(counts[null == 0].sum())
    g_total, df_total = 0.0, 0
    for m in range(M):
        g, df = g_test(counts[m], null[m])
        g_total += g
        df_total += df
    return g_total, df_total, impossible


def _sampler_fixture(replacement):
    tuples, _ = candidate_tuple_law(P_ROW, K, replacement)
    M = len(tuples)
    x = np.repeat(tuples, N_PER_TUPLE, axis=0)
    return tuples, x, np.tile(P_ROW, (len(x), 1)), np.tile(Q_ROW, (len(x), 1)), np.repeat(np.arange(M), N_PER_TUPLE)


def _check_outcome_consistency(out, x):
    token, acc, idx = (np.asarray(a) for a in (out.token, out.accepted, out.index))
    assert ((idx == -1) == ~acc).all()
    rows = np.flatnonzero(acc)
    assert (x[rows, idx[rows]] == token[rows]).all()
    assert Q_ROW[token].min() > 0  # never a token the target forbids


@pytest.mark.parametrize("verifier, replacement, bug", [
    (KSeq(), True, KSeqSingleDraftResidual()),
    (MultiRound(), True, NaiveFirstAccepted()),  # forgetting the residual update
    (MultiRoundWithoutReplacement(), False, MultiRound()),  # forgetting to renormalise the draft
    (NaiveMultiCandidate(), True, NaiveFirstOnly()),
    (OTMVerify(True), True, NaiveMultiCandidate()),  # ignoring the plan
    (OTMVerify(False), False, NaiveMultiCandidate()),
], ids=["kseq", "multiround", "multiround_wo", "naive", "otm_with", "otm_without"])
def test_sample_matches_law_g_test(verifier, replacement, bug):
    """Sampled (accepted, Y) per candidate tuple agree with `law` (G-test summed over all tuples
    of positive probability, 20,000 samples each, fixed seed, level 1e-4).

    Power: against the listed plausible bug, evaluated on the same tuples, the Pearson
    noncentrality λ = n Σ (alt − null)²/null (over cells with null ≥ 1e-6) gives power ≥ 0.999
    at level 1e-4 (asserted; the smallest λ, for k-Seq vs. the single-draft residual, is
    about 750 on 28 degrees of freedom), and the bug's own sampler must be
    rejected (negative control).
    """
    tuples, x, dp, tp, tuple_id = _sampler_fixture(replacement)
    M, V = len(tuples), len(P_ROW)
    null = _cells(verifier.law(tuples, dp[:M], tp[:M]))
    out = verifier.sample(x, dp, tp, np.random.default_rng(2024))
    _check_outcome_consistency(out, x)
    g, df, impossible = _g_against(null, tuple_id, out, M, V)
    assert impossible == 0
    assert stats.chi2.sf(g, df) > 1e-4

    alt = _cells(bug.law(tuples, dp[:M], tp[:M]))
    # conservative λ: cells the null gives < 1e-6 (e.g. k-Seq residual entries of order
    # 1e-13 because ρ* is bracketed from above) would inflate λ without adding real power
    firm = np.where(null < 1e-6, 0.0, null)
    lam = sum(pearson_noncentrality(N_PER_TUPLE, firm[m], alt[m]) for m in range(M))
    assert stats.ncx2.sf(stats.chi2.isf(1e-4, df), df, lam) > 0.999
    bad = bug.sample(x, dp, tp, np.random.default_rng(2024))
    g_bad, df_bad, impossible_bad = _g_against(null, tuple_id, bad, M, V)
    assert impossible_bad > 0 or stats.chi2.sf(g_bad, df_bad) < 1e-4


@pytest.mark.parametrize("p, k, replacement", [
    ([0.5, 0.3, 0.2, 0.0], 2, True),
    ([0.5, 0.3, 0.2, 0.0], 2, False),
    ([0.7, 0.0, 0.3], 3, False),  # support exhausted: the last slot is -1
])
def test_sample_candidates_matches_tuple_law(p, k, replacement):
    p = np.array(p)
    tuples, probs = candidate_tuple_law(p, k, replacement)
    n = 100_000
    x = sample_candidates(np.tile(p, (n, 1)), k, np.random.default_rng(7), replacement)
    assert x.shape == (n, k) and x.dtype == np.int64
    codes = {tuple(t): i for i, t in enumerate(tuples.tolist())}
    ids = np.array([codes.get(tuple(r), -1) for r in np.unique(x, axis=0).tolist()])
    assert (ids >= 0).all()  # every drawn tuple has positive probability
    uniq, counts = np.unique(x, axis=0, return_counts=True)
    full = np.zeros(len(tuples))
    full[[codes[tuple(r)] for r in uniq.tolist()]] = counts
    g, df = g_test(full, probs)
    assert stats.chi2.sf(g, df) > 1e-4


# -------------------------------------------------------------------------- torch
@pytest.mark.parametrize("verifier, replacement", VERIFIERS, ids=lambda v: getattr(v, "name", str(v)))
def test_torch_law_equals_numpy_law(verifier, replacement):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    B, V, k = 64, 5, 3
    dp = rng.dirichlet(np.full(V, 0.5), size=B) * (rng.random((B, V)) > 0.2)
    dp[:, 0] += 1e-3
    dp /= dp.sum(1, keepdims=True)
    tp = rng.dirichlet(np.full(V, 0.5), size=B)
    tp[rng.random((B, V)) < 0.2] = 0.0
    tp[:, -1] += 1e-3
    tp /= tp.sum(1, keepdims=True)
    x = sample_candidates(dp, k, rng, replacement)
    ln = verifier.law(x, dp, tp)
    lt = verifier.law(torch.from_numpy(x), torch.from_numpy(dp), torch.from_numpy(tp))
    assert isinstance(lt.accepted, torch.Tensor)
    assert np.abs(lt.accepted.numpy() - ln.accepted).max() < 1e-12
    assert np.abs(lt.rejected.numpy() - ln.rejected).max() < 1e-12
    xt = sample_candidates(torch.from_numpy(dp), k, torch.Generator().manual_seed(0), replacement)
    assert xt.shape == (B, k) and xt.dtype == torch.int64


@pytest.mark.parametrize("verifier, replacement", [(KSeq(), True), (MultiRoundWithoutReplacement(), False)],
                         ids=["kseq", "multiround_wo"])
def test_torch_sample_matches_law(verifier, replacement):
    torch = pytest.importorskip("torch")
    tuples, x, dp, tp, tuple_id = _sampler_fixture(replacement)
    M, V = len(tuples), len(P_ROW)
    null = _cells(verifier.law(tuples, dp[:M], tp[:M]))
    out = verifier.sample(torch.from_numpy(x), torch.from_numpy(dp), torch.from_numpy(tp),
                          torch.Generator().manual_seed(5))
    assert isinstance(out.token, torch.Tensor) and out.accepted.dtype == torch.bool
    out = MultiDraftOutcome(out.token.numpy(), out.accepted.numpy(), out.index.numpy())
    _check_outcome_consistency(out, x)
    g, df, impossible = _g_against(null, tuple_id, out, M, V)
    assert impossible == 0
    assert stats.chi2.sf(g, df) > 1e-4


def test_otm_on_torch_rows_is_the_plan_solved_on_the_host():
    """Torch rows are read back, the plan solved on the host, and the law handed back as tensors: the numpy law."""
    torch = pytest.importorskip("torch")
    c, p, q = np.array([[0, 1], [2, 2]]), np.array([[0.5, 0.3, 0.2]] * 2), np.array([[0.2, 0.2, 0.6]] * 2)
    want = OTMVerify().law(c, p, q)
    got = OTMVerify().law(torch.tensor(c), torch.tensor(p), torch.tensor(q))
    assert isinstance(got.accept_probs, torch.Tensor)
    np.testing.assert_allclose(got.accept_probs.numpy(), want.accept_probs, atol=1e-12)
    np.testing.assert_allclose(got.correction_probs.numpy(), want.correction_probs, atol=1e-12)
    out = OTMVerify().sample(torch.tensor(c), torch.tensor(p), torch.tensor(q), torch.Generator().manual_seed(0))
    assert isinstance(out.token, torch.Tensor) and out.token.dtype == torch.int64


# ------------------------------------------------------------------------- errors
def _inputs():
    return (np.array([[0, 1], [2, 1]]), np.array([[0.5, 0.3, 0.2], [0.5, 0.3, 0.2]]),
            np.array([[0.2, 0.2, 0.6], [0.2, 0.2, 0.6]]))


ALL = [KSeq(), MultiRound(), MultiRoundWithoutReplacement(), NaiveMultiCandidate(), OTMVerify()]


@pytest.mark.parametrize("verifier", ALL, ids=lambda v: v.name)
@pytest.mark.parametrize("mutate, message", [
    (lambda x, dp, tp: (x[0], dp, tp), "candidates: expected shape"),
    (lambda x, dp, tp: (x.astype(float), dp, tp), "integer token ids"),
    (lambda x, dp, tp: (x + 5, dp, tp), r"ids must lie in \[-1, 3\)"),
    (lambda x, dp, tp: (x - 3, dp, tp), r"ids must lie in \[-1, 3\)"),
    (lambda x, dp, tp: (x, dp, tp[:1]), "target_probs: expected shape"),
    (lambda x, dp, tp: (x, dp[None], tp), "draft_probs: expected shape"),
    (lambda x, dp, tp: (x, dp[:, :2] / dp[:, :2].sum(1, keepdims=True), tp), "vocabulary mismatch"),
    (lambda x, dp, tp: (x, dp * 2, tp), "sums to"),
    (lambda x, dp, tp: (x, dp, np.where(tp > 0.5, np.nan, tp)), "NaN"),
    (lambda x, dp, tp: (x, dp, tp - 0.3), "negative probability"),
    (lambda x, dp, tp: (x, np.array([[0.5, 0.5, 0.0]] * 2), tp),
     r"probability 0 to candidate 2 \(row 1, position 0\)"),
])
def test_bad_inputs_raise(verifier, mutate, message):
    with pytest.raises(ValueError, match=message):
        verifier.law(*mutate(*_inputs()))
    with pytest.raises(ValueError, match=message):
        verifier.sample(*mutate(*_inputs()), np.random.default_rng(0))


def test_verifier_specific_errors():
    _, dp, tp = _inputs()
    with pytest.raises(ValueError, match=r"token 1 repeated in row 0 \(positions 0 and 1\)"):
        MultiRoundWithoutReplacement().law(np.array([[1, 1]]), dp[:1], tp[:1])
    with pytest.raises(ValueError, match="k-Seq residual is negative"):  # ρ = 1 < ρ* ≈ 1.15
        KSeq(rho=1.0).law(np.array([[0, 1]]), [[0.75, 0.25]], [[0.5, 0.5]])
    assert KSeq(rho=2.0).law(np.array([[0, 1]]), [[0.75, 0.25]], [[0.5, 0.5]]).output.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="rho: expected"):
        KSeq(rho=0.5)
    with pytest.raises(ValueError, match="exceeds max_tuples"):
        OTMVerify().law(np.zeros((1, 6), dtype=np.int64), np.full((1, 5), 0.2), np.full((1, 5), 0.2))
    with pytest.raises(ValueError, match="probability 0 under sampling with replacement"):
        OTMVerify(True).law(np.array([[0, -1]]), dp[:1], tp[:1])
    with pytest.raises(ValueError, match="probability 0 under sampling without replacement"):
        OTMVerify(False).law(np.array([[1, 1]]), dp[:1], tp[:1])
    with pytest.raises(ValueError, match="non-negative number of candidates"):
        sample_candidates(dp, -1, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"expected shape \(batch, V\)"):
        sample_candidates(dp[None], 2, np.random.default_rng(0))


def test_names_and_modes():
    assert [v.name for v in ALL] == ["kseq", "multiround", "multiround_without_replacement", "naive", "otm"]
    assert [v.replacement for v in ALL] == [True, True, False, True, True]
    assert OTMVerify(False).replacement is False
    assert all(v.lossless for v in ALL)
