"""Few-row linear layers for CPU decoding.

A decode step multiplies every weight matrix by a handful of rows: one per sequence and scored token. torch's
``F.linear`` (x Wᵀ) hands this to a matrix product tuned for many rows; on CPU (MKL) it streams a weight well below
the memory's speed for one row and slower still for two to four, which is exactly the regime of speculative
verification (L + 1 scored tokens). The same product written the other way round, W xᵀ, streams each weight once at
close to full speed; a single row is doubled so that it takes that path too rather than the matrix-vector one.
``benchmarks/bench_few_rows.py`` prints both on the default target's shapes (on 2 cores: its output head and its
30-layer body take about three times less for one or two rows).

:func:`few_row_linears` swaps every ``torch.nn.Linear`` of a model for :class:`FewRowLinear`, keeping the very
same parameters (tied weights stay tied; :func:`plain_linears` swaps them back); :func:`few_row_product` is the
product itself, for a head's own matrix. Same function, same weights: the sums run in another order, so float32
results move by ~1e-7 relative (float64: ~1e-16), and plain and speculative decoding both run the swapped model.
"""

from __future__ import annotations

from functools import lru_cache

MAX_ROWS = 64
"""Above this many rows ``F.linear`` is as fast or faster (prefill)."""


def few_row_product(x, weight):
    """``x @ weight.T`` for ``x`` of shape (..., in) and ``weight`` (out, in), computed as ``(weight @ xᵀ)ᵀ`` when
    ``x`` has at most :data:`MAX_ROWS` rows (on CPU)."""
    import torch

    lead = x.shape[:-1]
    flat = x.reshape(-1, x.shape[-1])
    rows = flat.shape[0]
    if rows > MAX_ROWS or rows == 0 or x.device.type != "cpu":
        return torch.nn.functional.linear(x, weight)
    pair = torch.cat([flat, flat]) if rows == 1 else flat.contiguous()
    out = (weight @ pair.T)[:, :rows]
    return out.T.contiguous().reshape(*lead, weight.shape[0])


@lru_cache(maxsize=1)
def _few_row_linear_class():
    import torch

    class FewRowLinear(torch.nn.Linear):
        """A ``torch.nn.Linear`` whose product is :func:`few_row_product`."""

        def forward(self, x):
            y = few_row_product(x, self.weight)
            return y if self.bias is None else y + self.bias

    return FewRowLinear


def _same_parameters(cls, linear):
    """A ``cls`` layer (a ``torch.nn.Linear`` class) holding ``linear``'s own weight and bias (no copy)."""
    new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
    new.weight, new.bias = linear.weight, linear.bias
    new.train(linear.training)
    return new


def few_row_linear(linear):
    """A :class:`FewRowLinear` holding ``linear``'s own weight and bias parameters (no copy)."""
    return _same_parameters(_few_row_linear_class(), linear)


def _swap(model, match, make):
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if match(child):
                setattr(module, name, make(child))
    return model


def few_row_linears(model):
    """Swap every ``torch.nn.Linear`` of ``model`` (in place) for :func:`few_row_linear`; returns ``model``."""
    import torch

    return _swap(model, lambda child: type(child) is torch.nn.Linear, few_row_linear)


def plain_linears(model):
    """Undo :func:`few_row_linears` in place (plain ``torch.nn.Linear`` layers, same parameters); returns ``model``."""
    import torch

    cls = _few_row_linear_class()
    return _swap(model, lambda child: isinstance(child, cls), lambda child: _same_parameters(torch.nn.Linear, child))


def int8_packed(weight):
    """``weight`` (out, in) as symmetric int8 rows (one scale per row, as :mod:`llm_bridge.int8` stores a head),
    prepacked for ``torch.ops.quantized.linear_dynamic`` (CPU, fbgemm)."""
    import torch

    w = weight.detach().float().cpu()
    scale = (w.abs().amax(dim=1) / 127).clamp(min=1e-12).double()
    q = torch.quantize_per_channel(w, scale, torch.zeros(w.shape[0], dtype=torch.int64), 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(q, None)


def int8_product(x, packed):
    """``x @ Wᵀ`` with the int8 weight ``packed`` (:func:`int8_packed`): each call quantises the rows of ``x``
    (float32, CPU) to 8 bits with one scale, sums in int32. A fourth of the float32 weight's bytes is read: for the
    few rows of a draft step, that is the product's cost. One scale for a whole row suits inputs without outlier
    channels (a final-normed feature before the output rows), not a residual stream."""
    import torch

    flat = x.reshape(-1, x.shape[-1])
    if flat.shape[0] == 0:
        return x.new_zeros((*x.shape[:-1], torch.ops.quantized.linear_unpack(packed)[0].shape[0]))
    out = torch.ops.quantized.linear_dynamic(flat.contiguous(), packed, _reduce_range())
    return out.reshape(*x.shape[:-1], out.shape[-1])


@lru_cache(maxsize=1)
def _reduce_range() -> bool:
    """fbgemm's 7-bit inputs where the CPU lacks VNNI (its 8-bit products could saturate 16-bit sums there)."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return True
    return not ("avx512_vnni" in flags or "avx_vnni" in flags)


def int8_ready(model) -> bool:
    """Whether :func:`int8_product` can run ``model``'s products: float32 on CPU, with fbgemm's kernels here."""
    import torch

    param = next(model.parameters(), None)
    return (param is not None and param.dtype == torch.float32 and param.device.type == "cpu"
            and "fbgemm" in torch.backends.quantized.supported_engines)


def __getattr__(name):
    if name == "FewRowLinear":
        return _few_row_linear_class()
    raise AttributeError(name)
