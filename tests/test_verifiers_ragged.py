"""Ragged chain batches: rows that drafted different numbers of tokens, verified in one call.

Oracle: the same verifier on each row truncated to its own length (the non-ragged protocol,
itself checked against enumeration elsewhere). Laws agree to 1e-12; samplers match the law by
G-tests; a sampler that forgets the lengths (bonus row at L instead of at the row's length) fails.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from strategies import g_test

from otspec.verifiers import (
    BackwardBlockVerify,
    BlockVerify,
    DecodingOPT,
    GumbelCouplingVerify,
    TokenVerify,
)
from otspec.verifiers.base import Outcome

CHAIN = [TokenVerify(), BlockVerify(), BackwardBlockVerify(), GumbelCouplingVerify(), DecodingOPT(eps=0.2)]
IDS = [v.name for v in CHAIN]


def ragged_batch(seed: int, B: int = 6, L: int = 3, V: int = 3, zero_padding: bool = True):
    """Drafts with both models' rows (each row a different context), per-row lengths covering 0..L."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(V) * 0.8, size=(B, L))
    q = rng.dirichlet(np.ones(V) * 0.8, size=(B, L + 1))
    tokens = np.array([[rng.choice(V, p=p[b, i]) for i in range(L)] for b in range(B)])
    lengths = np.arange(B) % (L + 1)
    if zero_padding:  # what the decode loops hand over: zeros past each row's length
        for b in range(B):
            p[b, lengths[b]:] = 0.0
            tokens[b, lengths[b]:] = 0
    return tokens, p, q, lengths


@pytest.mark.parametrize("verifier", CHAIN, ids=IDS)
@pytest.mark.parametrize("seed", range(4))
def test_ragged_law_equals_each_row_truncated(verifier, seed):
    tokens, p, q, lengths = ragged_batch(seed)
    law = verifier.law_ragged(tokens, p, q, lengths, validate=False)
    for b, g in enumerate(lengths.tolist()):
        own = verifier.law(tokens[b:b + 1, :g], p[b:b + 1, :g], q[b:b + 1, :g + 1])
        np.testing.assert_allclose(law.accept_probs[b, :g + 1], own.accept_probs[0], atol=1e-12)
        assert np.all(law.accept_probs[b, g + 1:] == 0)
        live = own.accept_probs[0] > 0
        np.testing.assert_allclose(law.correction_probs[b, :g + 1][live], own.correction_probs[0][live], atol=1e-12)


def _joint_counts(out: Outcome, B: int, L: int, V: int) -> np.ndarray:
    tau, y = np.asarray(out.accepted_len), np.asarray(out.correction)
    counts = np.zeros((B, L + 1, V))
    np.add.at(counts, (np.arange(tau.size) % B, tau, y), 1)
    return counts


def _p_value(counts, law) -> float:
    cells = law.accept_probs[..., None] * law.correction_probs
    stat = dof = 0
    for b in range(cells.shape[0]):
        assert counts[b][cells[b] == 0].sum() == 0  # nothing outside the law's support
        g, d = g_test(counts[b].ravel(), cells[b].ravel())
        stat, dof = stat + g, dof + d
    return float(stats.chi2.sf(stat, dof))


@pytest.mark.parametrize("verifier", CHAIN, ids=IDS)
def test_ragged_sampler_follows_the_ragged_law(verifier):
    tokens, p, q, lengths = ragged_batch(11)
    B, L, V = p.shape
    reps = 6000
    tiled = [np.tile(x, (reps,) + (1,) * (x.ndim - 1)) for x in (tokens, p, q, lengths)]
    out = verifier.sample_ragged(*tiled[:3], tiled[3], np.random.default_rng(5), validate=False)
    assert np.all(np.asarray(out.accepted_len) <= tiled[3])
    law = verifier.law_ragged(tokens, p, q, lengths, validate=False)
    assert _p_value(_joint_counts(out, B, L, V), law) > 1e-3


def test_a_sampler_that_ignores_the_lengths_is_caught():
    """Negative control: the non-ragged sampler on the same padded batch reads the padding as drafts and goes
    past a row's length (and draws its bonus from row L, not row L_b)."""
    tokens, p, q, lengths = ragged_batch(11, zero_padding=False)
    B, L, V = p.shape
    reps = 6000
    tiled = [np.tile(x, (reps,) + (1,) * (x.ndim - 1)) for x in (tokens, p, q)]
    wrong = TokenVerify().sample(*tiled, np.random.default_rng(5))
    law = TokenVerify().law_ragged(tokens, p, q, lengths)
    counts = _joint_counts(wrong, B, L, V)
    outside = sum(counts[b][(law.accept_probs[b, :, None] * law.correction_probs[b]) == 0].sum() for b in range(B))
    assert outside > 0  # it emits outcomes the ragged law forbids (τ past a row's length)


def test_ragged_torch_equals_numpy():
    torch = pytest.importorskip("torch")
    tokens, p, q, lengths = ragged_batch(3)
    for verifier in (TokenVerify(), BlockVerify()):
        want = verifier.law_ragged(tokens, p, q, lengths, validate=False)
        got = verifier.law_ragged(*(torch.as_tensor(x) for x in (tokens, p, q, lengths)), validate=False)
        np.testing.assert_allclose(got.accept_probs.numpy(), want.accept_probs, atol=1e-12)
        out = verifier.sample_ragged(*(torch.as_tensor(x) for x in (tokens, p, q, lengths)),
                                     torch.Generator().manual_seed(0), validate=False)
        assert bool((out.accepted_len <= torch.as_tensor(lengths)).all())


def test_lengths_are_checked():
    tokens, p, q, lengths = ragged_batch(0, zero_padding=False)
    with pytest.raises(ValueError, match=r"lengths: every draft length must lie in \[0, L\]"):
        TokenVerify().sample_ragged(tokens, p, q, lengths + 4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="lengths: expected integer draft lengths of shape"):
        TokenVerify().sample_ragged(tokens, p, q, lengths[:2], np.random.default_rng(0))
    with pytest.raises(ValueError, match="lengths: expected integer"):
        BlockVerify().law_ragged(tokens, p, q, lengths.astype(float))
    with pytest.raises(ValueError, match=r"lengths: every draft length must lie in \[0, L\]"):
        BackwardBlockVerify().sample_ragged(tokens, p, q, -lengths - 1, np.random.default_rng(0))


@pytest.mark.parametrize("verifier", [v for v in CHAIN if v.ragged], ids=[v.name for v in CHAIN if v.ragged])
def test_ragged_torch_sampler_follows_the_ragged_law(verifier):
    """Every ragged chain verifier samples on torch in one call (the decode loop's device path) from the law the
    numpy enumeration gives."""
    torch = pytest.importorskip("torch")
    tokens, p, q, lengths = ragged_batch(11)
    B, L, V = p.shape
    reps = 6000
    tiled = [torch.as_tensor(np.tile(x, (reps,) + (1,) * (x.ndim - 1))) for x in (tokens, p, q, lengths)]
    out = verifier.sample_ragged(*tiled[:3], tiled[3], torch.Generator().manual_seed(3), validate=False)
    assert isinstance(out.accepted_len, torch.Tensor) and isinstance(out.correction, torch.Tensor)
    out = Outcome(out.accepted_len.numpy(), out.correction.numpy())
    assert np.all(out.accepted_len <= tiled[3].numpy())
    law = verifier.law_ragged(tokens, p, q, lengths, validate=False)
    assert _p_value(_joint_counts(out, B, L, V), law) > 1e-3


def test_v1_carried_windows_on_torch_equal_the_numpy_groups():
    """The v1 block verifier's carried residual targets, scored on torch in one ragged pass, equal the numpy path's
    (one group per draft length) to 1e-12 over iterations that open, nest and close windows; so do the windows."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    B, L, V = 6, 4, 5
    verifier = BackwardBlockVerify()
    host, dev = verifier.start_state(B, L), verifier.start_state(B, L)
    done, rows, opened = np.zeros(B, dtype=np.int64), np.arange(B), 0
    for _ in range(10):
        lengths = rng.integers(0, L + 1, size=B)
        width = int(lengths.max())
        p = rng.dirichlet(np.ones(V) * 0.5, size=(B, width))
        q = rng.dirichlet(np.ones(V) * 0.5, size=(B, width + 1))
        after = rng.dirichlet(np.ones(V) * 0.5, size=B)
        tokens = np.array([[rng.choice(V, p=p[b, i]) for i in range(width)] for b in range(B)]).reshape(B, width)
        t = [torch.as_tensor(x) for x in (tokens, p, q, after)]
        want, scratch_h = verifier.current_targets(host, rows, tokens, p, q, done, lengths, lambda after=after: after)
        got, scratch_d = verifier.current_targets(dev, rows, *t[:3], done, lengths, lambda t=t: t[3])
        assert isinstance(got, torch.Tensor)
        for b, g in enumerate(lengths.tolist()):
            np.testing.assert_allclose(got[b, :g + 1].numpy(), want[b, :g + 1], atol=1e-12)
        out = verifier.sample_ragged(tokens, p, want, lengths, np.random.default_rng(int(rng.integers(1 << 30))),
                                     validate=False)
        verifier.advance_state(host, rows, scratch_h, out, done, lengths)
        verifier.advance_state(dev, rows, scratch_d, Outcome(*(torch.as_tensor(np.asarray(x)) for x in
                                                               (out.accepted_len, out.correction, out.carry))),
                               done, lengths)
        valid = host.valid
        np.testing.assert_array_equal(dev.valid.numpy(), valid)
        np.testing.assert_array_equal(dev.end.numpy()[valid], host.end[valid])
        np.testing.assert_allclose(dev.log_ratio.numpy()[valid], host.log_ratio[valid], atol=1e-12)
        opened += int(valid.sum())
        done += np.asarray(out.accepted_len) + 1
    assert opened >= 5  # windows were carried (the comparison is not of empty stacks)
