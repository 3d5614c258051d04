"""otspec.distributions: validation, TV, overlap, residual, categorical sampling."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats
from strategies import prob_rows

from otspec.distributions import (
    NORMALISATION_TOL,
    check_same_vocab,
    normalisation_tolerance,
    overlap,
    residual,
    sample_categorical,
    total_variation,
    validate_probs,
)


@pytest.mark.parametrize("bad, message", [
    ([0.5, np.nan], "NaN or infinite"),
    ([0.5, np.inf], "NaN or infinite"),
    ([1.2, -0.2], "negative probability -0.2"),
    ([0.5, 0.4], "sums to 0.9"),
    ([], "vocabulary axis is empty"),
])
def test_validate_probs_rejects_bad_rows(bad, message):
    with pytest.raises(ValueError, match=message):
        validate_probs(bad, "draft")


def test_validate_probs_names_argument_and_row():
    rows = np.array([[0.5, 0.5], [0.3, 0.3]])
    with pytest.raises(ValueError, match=r"target: row \(1,\) sums to 0.6"):
        validate_probs(rows, "target")


def test_validate_probs_tolerance_and_renormalisation():
    row = np.array([0.5, 0.5 + NORMALISATION_TOL / 2])
    out = validate_probs(row, "p")
    assert abs(out.sum() - 1.0) < 1e-15
    with pytest.raises(ValueError):
        validate_probs(np.array([0.5, 0.5 + 2 * NORMALISATION_TOL]), "p")


def test_float32_rows_get_a_dtype_aware_tolerance():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=32_000).astype(np.float32)
    row = np.exp(logits - logits.max())
    row = row / row.sum()  # a float32 softmax row: sum within a few eps*sqrt(V) of 1
    assert normalisation_tolerance(np.float32, 32_000) > abs(float(row.sum(dtype=np.float32)) - 1)
    assert validate_probs(row, "target").dtype == np.float32
    assert normalisation_tolerance(np.float64, 32_000) == NORMALISATION_TOL
    with pytest.raises(ValueError, match="sums to"):
        validate_probs(row * np.float32(1.01), "target")


def test_check_same_vocab():
    with pytest.raises(ValueError, match="draft has 3 tokens, target has 2"):
        check_same_vocab(np.ones(3) / 3, np.ones(2) / 2)


@given(st.integers(1, 6).flatmap(lambda v: st.tuples(prob_rows(v), prob_rows(v))))
def test_tv_overlap_identities(pair):
    p, q = pair
    tv = float(total_variation(p, q))
    assert abs(tv - np.clip(p - q, 0, None).sum()) < 1e-12  # TV = sum (p - q)_+
    assert abs(float(overlap(p, q)) - (1 - tv)) < 1e-12
    r, mass = residual(q, p, return_mass=True)
    assert abs(float(mass) - tv) < 1e-12
    assert abs(r.sum() - 1) < 1e-12 and (r >= 0).all()
    # maximal coupling: min(p, q) + (p - q)_+ redistributed by the residual reproduces q
    accept = np.minimum(p, q)
    assert np.allclose(accept + (1 - accept.sum()) * r, q, atol=1e-12)


def test_batched_shapes():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(5), size=(4, 3))
    q = rng.dirichlet(np.ones(5), size=(4, 3))
    assert total_variation(p, q).shape == (4, 3)
    assert overlap(p, q).shape == (4, 3)
    assert residual(q, p).shape == (4, 3, 5)


def test_residual_zero_mass_returns_normalised_minuend():
    q = np.array([0.2, 0.8])
    assert np.allclose(residual(q, q), q)
    assert np.allclose(residual(np.zeros(3), np.ones(3) / 3), np.ones(3) / 3)  # all-zero: uniform


def test_torch_matches_numpy():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.ones(4), size=6), rng.dirichlet(np.ones(4), size=6)
    tp, tq = torch.from_numpy(p), torch.from_numpy(q)
    assert np.allclose(total_variation(tp, tq).numpy(), total_variation(p, q), atol=1e-15)
    assert np.allclose(residual(tq, tp).numpy(), residual(q, p), atol=1e-15)
    with pytest.raises(ValueError, match="negative"):
        validate_probs(torch.tensor([1.5, -0.5]), "t")


def test_sample_categorical_law_and_zeros():
    probs = np.array([0.0, 0.3, 0.0, 0.7, 0.0])
    draws = sample_categorical(np.broadcast_to(probs, (200_000, 5)), np.random.default_rng(3))
    counts = np.bincount(draws, minlength=5)
    assert counts[[0, 2, 4]].sum() == 0
    assert stats.chisquare(counts[[1, 3]], 200_000 * probs[[1, 3]]).pvalue > 1e-4


def test_sample_categorical_extreme_uniforms_stay_in_support():
    probs = np.array([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]])
    for u in (0.0, 1.0 - 2**-53):
        out = sample_categorical(probs, None, u=np.full(2, u))
        assert probs[np.arange(2), out].min() > 0


def test_top_p_mask_is_the_nucleus_rule_on_numpy_and_torch():
    from otspec.distributions import top_p_mask

    rng = np.random.default_rng(3)
    rows = rng.dirichlet(np.full(7, 0.5), size=40)
    rows[0] = [0.3, 0.3, 0.2, 0.2, 0, 0, 0]  # ties: lower ids first
    for top_p in (0.1, 0.5, 0.9, 1.0):
        mask = top_p_mask(rows, top_p)
        for row, keep in zip(rows, mask, strict=True):  # brute force: add tokens by rank until the mass reaches top_p
            order = sorted(range(7), key=lambda i: (-row[i], i))
            kept, mass = set(), 0.0
            for i in order:
                if mass >= top_p * row.sum():
                    break
                kept.add(i)
                mass += row[i]
            assert set(np.flatnonzero(keep)) == kept
        assert not top_p_mask(rows, top_p, max_kept=2).sum(axis=1).max() > 2
    assert top_p_mask(rows[:1], 0.5).tolist() == [[True, True, False, False, False, False, False]]
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal(top_p_mask(torch.as_tensor(rows), 0.7, max_kept=3).numpy(),
                                  top_p_mask(rows, 0.7, max_kept=3))


def test_temperature_rows_and_resolve_device():
    from otspec.distributions import resolve_device, temperature_rows

    p = np.array([[0.5, 0.25, 0.25, 0.0]])
    with np.errstate(divide="ignore"):
        hot = temperature_rows(np.log(p), 2.0)
    np.testing.assert_allclose(hot, np.sqrt(p) / np.sqrt(p).sum(), atol=1e-15)
    np.testing.assert_allclose(temperature_rows(np.log(p[:, :3]), 1.0), p[:, :3], atol=1e-15)
    assert resolve_device(None) is None
    torch = pytest.importorskip("torch")
    assert resolve_device("cpu") == torch.device("cpu") and resolve_device("auto").type in ("cpu", "cuda")
    with pytest.raises(ValueError, match="torch device"):
        resolve_device("nowhere")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            resolve_device("cuda")


def test_wide_rows_are_drawn_block_wise_as_the_plain_inverse_cdf():
    """Rows of V >= 4096 are drawn without a cumulative sum over V (the decode loops' fast path): same index as the
    plain inverse CDF for the same uniforms, never a zero-probability entry, and the right law."""
    rng = np.random.default_rng(8)
    V = 10_000  # not a multiple of the block width
    rows = rng.dirichlet(np.full(V, 0.05), size=6)
    rows[:, rng.random(V) < 0.5] = 0.0  # many exact zeros
    rows[2] = 0.0
    rows[2, [0, V - 1]] = 0.5  # mass at both ends only
    rows[3] *= 7.0  # unnormalised
    u = rng.random((400, 6))
    cdf = np.cumsum(rows, axis=1)
    plain = np.argmax(cdf[None] > (u * cdf[:, -1])[..., None], axis=-1)
    fast = sample_categorical(np.broadcast_to(rows, (400, 6, V)), None, u=u, check=False)  # the block-wise path
    assert (fast == plain).mean() > 0.999 and np.all(rows[np.arange(6), fast] > 0)
    one_by_one = np.stack([sample_categorical(rows, None, u=u[k], check=False) for k in range(400)])  # row by row
    assert (one_by_one == plain).mean() > 0.999 and np.all(rows[np.arange(6), one_by_one] > 0)
    # u just below 1 with the last blocks empty: the last entry with mass, never an empty block; no mass: index 0
    edge = np.zeros((2, V))
    edge[0, [5, 300]] = [0.25, 0.75]
    for many in (False, True):
        got = sample_categorical(np.tile(edge, (10 if many else 1, 1)), None, u=np.full(20 if many else 2, 1 - 2**-53),
                                 check=False)
        assert got[0] == 300 and got[1] == 0
    draws = sample_categorical(np.tile(rows[2], (20_000, 1)), np.random.default_rng(1), check=False)
    assert set(np.unique(draws)) == {0, V - 1} and abs((draws == 0).mean() - 0.5) < 0.02


def test_wide_rows_take_the_block_wise_path(monkeypatch):
    """The decode loops' draw (numpy, V >= 4096, unchecked) never sums cumulatively over the whole row; the checked
    draw does (so the spy below sees the plain path when it is taken)."""
    widths = []
    cumsum = np.cumsum

    def spy(a, *args, **kwargs):
        widths.append(np.shape(a)[-1])
        return cumsum(a, *args, **kwargs)

    monkeypatch.setattr(np, "cumsum", spy)
    rows = np.random.default_rng(2).dirichlet(np.ones(8192), size=3)
    sample_categorical(rows, np.random.default_rng(0), check=False)
    assert widths and max(widths) < 8192
    widths.clear()
    sample_categorical(rows, np.random.default_rng(0))
    assert max(widths) == 8192
