"""Few-row linear layers: the same function as ``torch.nn.Linear`` with the same (tied) parameters."""

from __future__ import annotations

import numpy as np
import pytest

from llm_bridge.int8 import int8_model
from llm_bridge.kernels import (
    MAX_ROWS,
    FewRowLinear,
    few_row_linears,
    few_row_product,
    plain_linears,
)
from tests.llm_tiny import tiny_llama, torch


@pytest.mark.parametrize("lead", [(1,), (2,), (3,), (1, 1), (2, 3), (4, 5), (MAX_ROWS + 1,), (0,)])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_few_row_product_is_the_linear_product(lead, dtype):
    gen = torch.Generator().manual_seed(sum(lead))
    dt = getattr(torch, dtype)
    w = torch.randn(37, 19, generator=gen, dtype=dt)
    x = torch.randn(*lead, 19, generator=gen, dtype=dt)
    got, want = few_row_product(x, w), torch.nn.functional.linear(x, w)
    assert got.shape == want.shape == (*lead, 37)
    assert got.is_contiguous()
    tol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol, atol=tol)


def test_few_row_product_of_a_strided_input():
    """A column-major input (what elementwise products of transposed outputs give) is still the right product."""
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(11, 7, generator=gen, dtype=torch.float64)
    x = torch.randn(7, 3, generator=gen, dtype=torch.float64).T  # (3, 7), strides (1, 3)
    np.testing.assert_allclose(few_row_product(x, w).numpy(), (x @ w.T).numpy(), rtol=1e-12, atol=1e-12)


def test_few_row_linears_keep_the_parameters_and_the_outputs():
    model = tiny_llama(0)
    plain = plain_linears(tiny_llama(0))
    assert not any(isinstance(m, FewRowLinear) for m in plain.modules())
    n_linear = sum(isinstance(m, FewRowLinear) for m in model.modules())
    assert n_linear == 2 * 7 + 1  # q k v o gate up down per layer, and the output head
    assert model.lm_head.weight is model.get_input_embeddings().weight  # still tied
    assert set(model.state_dict()) == set(plain.state_dict())
    ids = torch.tensor([[3, 5, 7, 11, 13]])
    with torch.no_grad():
        for n in (1, 2, 5):
            np.testing.assert_allclose(model(ids[:, :n]).logits.numpy(), plain(ids[:, :n]).logits.numpy(),
                                       rtol=1e-12, atol=1e-12)
    swapped_twice = few_row_linears(model)
    assert swapped_twice is model and sum(isinstance(m, FewRowLinear) for m in model.modules()) == n_linear


def test_int8_copies_still_see_few_row_linears_as_linear_layers():
    model = tiny_llama(0, dtype=torch.float32)
    quantized = int8_model(model)
    assert not any(isinstance(m, FewRowLinear) for m in quantized.modules())
