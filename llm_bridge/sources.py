"""A language model after a prompt, as an otspec :class:`~otspec.sources.Source`.

:class:`ModelSource` gives the processed next-token rows of a causal LM after ``prompt`` followed
by any token prefix, from full forward passes (no cache): slow, but exactly the rows the decode
loop verifies, so otspec's exact engines run over a real pair unchanged
(:func:`otspec.engine.first_token.first_token_law` is how ``llm_bridge.lossless`` checks
losslessness on real rows).
"""

from __future__ import annotations

import numpy as np

from otspec.sources import Source

from .models import output_size
from .sampling import DEFAULT_SAMPLING, Sampling

__all__ = ["ModelSource"]


class ModelSource(Source):
    """Rows of ``model`` after ``prompt`` + each prefix, processed by ``sampling`` (float64, on the host).

    Parameters
    ----------
    model : transformers causal LM
    prompt : sequence of int
        Token ids the prefixes continue (at least one).
    sampling : Sampling
    chunk : int
        Prefixes scored per forward pass.
    """

    def __init__(self, model, prompt, sampling: Sampling = DEFAULT_SAMPLING, chunk: int = 64):
        self.model, self.sampling, self.chunk = model, sampling, int(chunk)
        self.prompt = [int(t) for t in prompt]
        if not self.prompt:
            raise ValueError("ModelSource: the prompt needs at least one token (a BOS or chat-template token)")
        self.vocab_size = output_size(model)
        self.device = next(model.parameters()).device

    def to_json(self) -> dict:
        raise NotImplementedError("a model source is not serialised: it is a model, a prompt and a processing")

    def _rows(self, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        import torch

        self._check_tokens(tokens)
        out = np.zeros((tokens.shape[0], self.vocab_size))
        for n in np.unique(lengths).tolist():  # one batch per prefix length: no padding in a full forward pass
            rows = np.flatnonzero(lengths == n)
            for i in range(0, rows.size, self.chunk):
                part = rows[i:i + self.chunk]
                ids = torch.as_tensor([self.prompt + tokens[b, :n].tolist() for b in part], device=self.device)
                with torch.no_grad():
                    out[part] = self.sampling.rows(self.model(input_ids=ids).logits[:, -1])
        return out
