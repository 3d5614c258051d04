"""The ``int8`` drafter: the target with every linear layer in int8, activations quantised per token.

Each linear layer keeps its weight as int8 with one float scale per output row. At call time every
*token's* input vector gets its own scale (its largest magnitude / 127), the integer products
accumulate exactly in int32 (``torch._int_mm``) and are scaled back. A token's output therefore depends
on that token's own input alone: not on the other tokens of the call, its padding or the other
sequences of the batch.

That property is what makes the drafter a draft *model*, p(· | context). PyTorch's dynamic quantisation
(``torch.ao.quantization.quantize_dynamic``, which this drafter used before) takes one activation scale
per call over the whole (batch × tokens × features) input, so a sequence's rows moved with its
batch-mates and with how many tokens the call fed: in one record the first-position acceptance
1 − TV of the same pair was 0.53–0.54 in the token-verification runs and 0.64–0.68 in the block_v1 runs
(whose draft calls have other shapes), and rows logged along a plain run, in one full pass (1 − TV = 0.34)
or token by token, predicted neither: the predictions missed by +19 to +50 % and then by −5 to −16 %.
"""

from __future__ import annotations

import copy
from functools import cache

__all__ = ["dequantize_rows", "int8_linear", "int8_model", "quantize_per_row", "quantize_rows"]


def quantize_per_row(t):
    """(int8 rows, float32 scale per row (…, 1)) of a float tensor: each row over its largest magnitude / 127."""
    import torch

    scale = (t.abs().amax(dim=-1, keepdim=True) / 127.0).clamp_min(1e-12)
    return torch.round(t / scale).clamp(-127, 127).to(torch.int8), scale


@cache
def _int8_linear_class():
    """The module class, made on first use (torch is imported lazily across llm_bridge)."""
    import torch

    class Int8Linear(torch.nn.Module):
        """``y = x Wᵀ + b`` with W in int8 (a scale per output row) and x quantised per token (a scale per row of
        the flattened input); int32 accumulation, the output in the input's dtype."""

        def __init__(self, linear):
            super().__init__()
            w = linear.weight.detach().float()
            q, scale = quantize_per_row(w)
            self.in_features, self.out_features = int(w.shape[1]), int(w.shape[0])
            self.register_buffer("weight_int8", q.t().contiguous())  # (in, out): the layout torch._int_mm takes
            self.register_buffer("weight_scale", scale.reshape(-1))
            self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())

        @property
        def weight(self):
            """The dequantised weight (out, in), float32."""
            return (self.weight_int8.t().float() * self.weight_scale[:, None]).contiguous()

        def forward(self, x):
            lead, dtype = x.shape[:-1], x.dtype
            flat = x.reshape(-1, self.in_features).float()
            q, scale = quantize_per_row(flat)
            y = torch._int_mm(q, self.weight_int8).float() * scale * self.weight_scale
            if self.bias is not None:
                y = y + self.bias
            return y.reshape(*lead, self.out_features).to(dtype)

        def extra_repr(self) -> str:
            return f"in_features={self.in_features}, out_features={self.out_features}, activations per token"

    return Int8Linear


def int8_linear(linear):
    """An int8 copy of a ``torch.nn.Linear`` (see the module docstring)."""
    return _int8_linear_class()(linear)


def int8_model(model):
    """A copy of ``model`` whose every ``torch.nn.Linear`` (the output head included) is int8 (:func:`int8_linear`);
    embeddings, norms and attention stay in float."""
    import torch

    out = copy.deepcopy(model)
    for module in list(out.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, name, int8_linear(child))
    return out.eval()


def quantize_rows(weights: dict) -> dict:
    """int8 copies of 2-D tensors with a float16 scale per row (``name:int8``, ``name:scale``); others float16."""
    import torch

    out = {}
    for name, w in weights.items():
        w = w.detach().float().cpu()
        if w.ndim == 2:
            q, scale = quantize_per_row(w)
            out[f"{name}:int8"] = q.contiguous()
            out[f"{name}:scale"] = scale.to(torch.float16).contiguous()
        else:
            out[name] = w.to(torch.float16).contiguous()
    return out


def dequantize_rows(stored: dict) -> dict:
    """Float32 tensors back from :func:`quantize_rows`' layout."""
    out = {}
    for name, t in stored.items():
        if name.endswith(":int8"):
            base = name.removesuffix(":int8")
            out[base] = t.float() * stored[f"{base}:scale"].float()
        elif not name.endswith(":scale"):
            out[name] = t.float()
    return out
