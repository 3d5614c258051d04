"""Turn logits into the probability rows the verifier sees: temperature, top-k, top-p, one place.

Speculative decoding is lossless for the *processed* target law, and only if the draft's rows go
through the same processing; :class:`Sampling` is applied to both models' logits (and by the
plain-sampling baseline), in float64 so that the verifier's exactness checks hold to 1e-12.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from otspec.checks import check_real
from otspec.distributions import temperature_rows, top_p_mask

__all__ = ["DEFAULT_SAMPLING", "Sampling"]


@dataclass(frozen=True)
class Sampling:
    """Logit processing shared by draft and target.

    Parameters
    ----------
    temperature : float
        Logits are divided by it; 0 means greedy (a one-hot row on the arg-max, lowest id on ties).
    top_k : int
        Keep the k most likely tokens (0: all). Ties at the k-th value keep the lower ids.
    top_p : float
        Keep the smallest set of most likely tokens whose mass reaches ``top_p`` (1: all).
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        check_real(self.temperature, "temperature", low=0.0)
        check_real(self.top_p, "top_p", low=0.0, high=1.0, low_open=True)
        if int(self.top_k) != self.top_k or self.top_k < 0:
            raise ValueError(f"top_k: expected an integer >= 0, got {self.top_k!r}")

    def probs(self, logits):
        """Probability rows as float64 tensors on the logits' device (same shape (..., V)) after the processing."""
        import torch

        z = logits.detach().to(torch.float64)
        if self.temperature == 0:
            return torch.nn.functional.one_hot(z.argmax(dim=-1), z.shape[-1]).to(torch.float64)
        if self.top_k and self.top_k < z.shape[-1]:
            kth = torch.topk(z, self.top_k, dim=-1).values[..., -1:]
            z = z.masked_fill(z < kth, -torch.inf)
        probs = temperature_rows(z, self.temperature)
        if self.top_p < 1.0:
            probs = probs.masked_fill(~top_p_mask(probs, self.top_p), 0.0)
            probs = probs / probs.sum(dim=-1, keepdim=True)
        return probs

    def rows(self, logits) -> np.ndarray:
        """:meth:`probs` as float64 numpy arrays on the host."""
        return self.probs(logits).cpu().numpy()

    def hf_kwargs(self) -> dict:
        """The same processing as Hugging Face ``generate`` arguments (for the assisted-generation peer)."""
        if self.temperature == 0:
            return {"do_sample": False}
        return {"do_sample": True, "temperature": self.temperature, "top_k": int(self.top_k) or None,
                "top_p": self.top_p}


#: Plain sampling at temperature 1 (the default of every loop).
DEFAULT_SAMPLING = Sampling()
