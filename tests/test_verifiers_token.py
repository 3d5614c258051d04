"""TokenVerify: exact unbiasedness (property test), sampler vs law, torch parity, errors."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from scipy import stats
from strategies import g_test, markov_pairs, pearson_noncentrality, table_pairs

from otspec.distributions import residual
from otspec.engine import evaluate
from otspec.sources import IIDSource, bernoulli, random_markov
from otspec.verifiers import Outcome, TokenVerify
from otspec.verifiers.token import acceptance_ratios


@given(markov_pairs(max_vocab=4, max_length=4))
def test_output_law_equals_target_law_markov(pair):
    draft, target, L = pair
    res = evaluate(draft, target, TokenVerify(), L)
    assert res.max_deviation <= 1e-12
    assert abs(res.output_law.sum() - 1.0) <= 1e-12


@given(table_pairs(max_vocab=3, max_length=3))
def test_output_law_equals_target_law_context_dependent(pair):
    draft, target, L = pair
    assert evaluate(draft, target, TokenVerify(), L).max_deviation <= 1e-12


def test_law_rows_are_distributions():
    draft, target = random_markov(3, 1.0, seed=3, sparsity=0.3)
    x = draft.sample(50, 4, np.random.default_rng(0))
    law = TokenVerify().law(x, draft.path_probs(x)[:, :4], target.path_probs(x))
    assert np.allclose(law.accept_probs.sum(-1), 1.0, atol=1e-14)
    assert np.allclose(law.correction_probs.sum(-1), 1.0, atol=1e-14)
    assert (law.accept_probs >= 0).all()


def test_binary_example_token_value_is_10_over_9():
    # spec §7: draft (2/3, 1/3), target (1/3, 2/3), L = 2 -> 2/3 + (2/3)^2 = 10/9
    res = evaluate(IIDSource([2 / 3, 1 / 3]), IIDSource([1 / 3, 2 / 3]), TokenVerify(), 2)
    assert abs(res.expected_accepted - float(Fraction(10, 9))) < 1e-14


def test_law_matches_spec_eq3_by_hand():
    # one draft "aa" in the binary example: a = (1/2, 1/2) -> P(tau) = (1/2, 1/4, 1/4)  (spec §7 table)
    d, t = IIDSource([2 / 3, 1 / 3]), IIDSource([1 / 3, 2 / 3])
    x = np.array([[0, 0]])
    law = TokenVerify().law(x, d.path_probs(x)[:, :2], t.path_probs(x))
    assert np.allclose(law.accept_probs[0], [0.5, 0.25, 0.25], atol=1e-15)
    # residual after rejecting a: (q - p)_+ normalised = all mass on b
    assert np.allclose(law.correction_probs[0, 0], [0.0, 1.0], atol=1e-15)


# ------------------------------------------------------------------ sampler
class ResampleFromTarget(TokenVerify):
    """A classic bug: after a rejection, draw the correction from q instead of (q − p)_+."""

    def sample(self, draft_tokens, draft_probs, target_probs, rng, *, validate=True):
        out = super().sample(draft_tokens, draft_probs, target_probs, rng, validate=validate)
        B = draft_tokens.shape[0]
        rows = target_probs[np.arange(B), out.accepted_len]
        cdf = np.cumsum(rows, axis=-1)
        y = (cdf <= rng.random(B)[:, None]).sum(-1)
        return Outcome(out.accepted_len, np.minimum(y, rows.shape[-1] - 1))

    def law(self, draft_tokens, draft_probs, target_probs, *, validate=True):
        law = super().law(draft_tokens, draft_probs, target_probs, validate=validate)
        law.correction_probs = np.asarray(target_probs)
        return law


SAMPLES_PER_DRAFT = 20_000


def _sampler_fixture():
    draft, target = random_markov(3, 1.0, seed=7, sparsity=0.2)
    enum = draft.enumerate(3)
    drafts = enum.tokens[enum.probs > 0]
    x = np.repeat(drafts, SAMPLES_PER_DRAFT, axis=0)
    return draft, target, drafts, x, draft.path_probs(x)[:, :3], target.path_probs(x)


def _cell_probs(verifier, drafts, dp, tp):
    law = verifier.law(drafts, dp, tp)
    return np.asarray(law.accept_probs)[..., None] * np.asarray(law.correction_probs)  # (D, L+1, V)


def _combined_g(cells, tau, y, n_drafts, L, V):
    idx = np.repeat(np.arange(n_drafts), SAMPLES_PER_DRAFT) * (L + 1) * V + tau * V + y
    counts = np.bincount(idx, minlength=n_drafts * (L + 1) * V).reshape(n_drafts, -1)
    flat = cells.reshape(n_drafts, -1)
    impossible = int(counts[flat == 0].sum())  # outcomes the law gives probability 0
    g_total, df_total = 0.0, 0
    for d in range(n_drafts):
        g, df = g_test(counts[d], flat[d])
        g_total += g
        df_total += df
    return g_total, df_total, impossible


def test_sample_matches_law_g_test():
    """Sampled (tau, Y) per draft agree with `law` (G-test over all drafts, fixed seed).

    Power: against the ResampleFromTarget bug on the same drafts the Pearson
    noncentrality is computed below; the test asserts the power at level 1e-4
    exceeds 0.999, and the negative control must be rejected.
    """
    _, _, drafts, x, dp, tp = _sampler_fixture()
    L, V = 3, 3
    rows = slice(None, None, SAMPLES_PER_DRAFT)
    null = _cell_probs(TokenVerify(), drafts, dp[rows], tp[rows])
    out = TokenVerify().sample(x, dp, tp, np.random.default_rng(2024))
    g, df, impossible = _combined_g(null, np.asarray(out.accepted_len), np.asarray(out.correction),
                                    len(drafts), L, V)
    assert impossible == 0
    assert stats.chi2.sf(g, df) > 1e-4

    alt = _cell_probs(ResampleFromTarget(), drafts, dp[rows], tp[rows])
    lam = sum(pearson_noncentrality(SAMPLES_PER_DRAFT, null[d].ravel(), alt[d].ravel()) for d in range(len(drafts)))
    crit = stats.chi2.isf(1e-4, df)
    assert stats.ncx2.sf(crit, df, lam) > 0.999
    bad = ResampleFromTarget().sample(x, dp, tp, np.random.default_rng(2024))
    g_bad, df_bad, impossible_bad = _combined_g(null, bad.accepted_len, bad.correction, len(drafts), L, V)
    assert impossible_bad > 0 or stats.chi2.sf(g_bad, df_bad) < 1e-4


def test_sample_never_accepts_token_the_target_forbids():
    d, t = IIDSource([0.5, 0.5]), IIDSource([1.0, 0.0])
    x = np.ones((1000, 2), dtype=np.int64)
    out = TokenVerify().sample(x, d.path_probs(x)[:, :2], t.path_probs(x), np.random.default_rng(0))
    assert (out.accepted_len == 0).all() and (out.correction == 0).all()


def test_identical_models_accept_everything():
    d, _ = random_markov(4, 1.0, seed=1)
    res = evaluate(d, d, TokenVerify(), 4)
    assert abs(res.expected_accepted - 4.0) < 1e-12


# -------------------------------------------------------------------- torch
def test_torch_law_equals_numpy_law():
    torch = pytest.importorskip("torch")
    draft, target = random_markov(4, 0.5, seed=11, sparsity=0.3)
    x = draft.sample(64, 5, np.random.default_rng(1))
    dp, tp = draft.path_probs(x)[:, :5], target.path_probs(x)
    ln = TokenVerify().law(x, dp, tp)
    lt = TokenVerify().law(torch.from_numpy(x), torch.from_numpy(np.ascontiguousarray(dp)),
                           torch.from_numpy(np.ascontiguousarray(tp)))
    assert isinstance(lt.accept_probs, torch.Tensor)
    assert np.abs(lt.accept_probs.numpy() - ln.accept_probs).max() < 1e-12
    assert np.abs(lt.correction_probs.numpy() - ln.correction_probs).max() < 1e-12


def test_torch_sample_matches_law():
    torch = pytest.importorskip("torch")
    _, _, drafts, x, dp, tp = _sampler_fixture()
    rows = slice(None, None, SAMPLES_PER_DRAFT)
    null = _cell_probs(TokenVerify(), drafts, dp[rows], tp[rows])
    out = TokenVerify().sample(torch.from_numpy(x), torch.from_numpy(np.ascontiguousarray(dp)),
                               torch.from_numpy(np.ascontiguousarray(tp)), torch.Generator().manual_seed(5))
    assert isinstance(out.accepted_len, torch.Tensor)
    g, df, impossible = _combined_g(null, out.accepted_len.numpy(), out.correction.numpy(), len(drafts), 3, 3)
    assert impossible == 0
    assert stats.chi2.sf(g, df) > 1e-4


# ------------------------------------------------------------------- errors
def _inputs():
    d, t = bernoulli(0.3), bernoulli(0.6)
    x = np.array([[0, 1, 1]])
    return x, np.array(d.path_probs(x)[:, :3]), np.array(t.path_probs(x))


@pytest.mark.parametrize("mutate, message", [
    (lambda x, dp, tp: (x, dp, tp[:, :3]), "target_probs: expected shape"),
    (lambda x, dp, tp: (x, dp[..., :1] * 0 + 1, tp), "vocabulary mismatch"),
    (lambda x, dp, tp: (x, dp * 2, tp), "sums to|is above 1"),  # doubled rows: an entry above 1 is caught first
    (lambda x, dp, tp: (x, dp, np.where(tp > 0.5, np.nan, tp)), "NaN"),
    (lambda x, dp, tp: (x, dp, tp - 0.7), "negative probability"),
    (lambda x, dp, tp: (x + 5, dp, tp), "ids must lie in"),
    (lambda x, dp, tp: (x[0], dp, tp), "draft_tokens: expected shape"),
    (lambda x, dp, tp: (x.astype(float), dp, tp), "integer token ids"),
])
def test_bad_inputs_raise(mutate, message):
    with pytest.raises(ValueError, match=message):
        TokenVerify().law(*mutate(*_inputs()))
    with pytest.raises(ValueError, match=message):
        TokenVerify().sample(*mutate(*_inputs()), np.random.default_rng(0))


def test_zero_draft_probability_on_drafted_token_is_an_error():
    x, dp, tp = _inputs()
    dp[0, 1] = [1.0, 0.0]  # token 1 drafted at position 1 with p = 0
    with pytest.raises(ValueError, match="probability 0 to drafted token 1 .*position 1"):
        TokenVerify().law(x, dp, tp)


def test_acceptance_ratios_and_residual_agree_with_definitions():
    x, dp, tp = _inputs()
    a = acceptance_ratios(x, dp, tp)
    expected = np.minimum(1.0, tp[0, np.arange(3), x[0]] / dp[0, np.arange(3), x[0]])
    assert np.allclose(a[0], expected, atol=0)
    law = TokenVerify().law(x, dp, tp)
    assert np.allclose(law.correction_probs[0, :3], residual(tp[0, :3], dp[0]))
