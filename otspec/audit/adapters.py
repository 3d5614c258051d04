"""Adapters: otspec's own verifiers, Hugging Face transformers' speculative sampling and any torch sampler, on the
chain protocol of :mod:`otspec.audit.protocol` (``module:function`` names for ``python -m otspec audit``).

* ``otspec.audit.adapters:token``, ``:block``, ``:gumbel`` — lossless otspec chain verifiers;
  ``:block_v1`` — the v1 backward block verifier, exact only when its carried residual target replaces the target
  in the next iteration: the chain protocol continues with the plain target, so the audit rightly flags it;
  ``:decoding_opt`` — Decoding-OPT with an unlimited bias budget, biased by design.
* ``otspec.audit.adapters:hf_speculative_sampling`` — ``transformers.generation.utils._speculative_sampling`` of
  the installed transformers (Leviathan et al.'s Algorithm 1, one sequence per call; it draws from torch's global
  generator, seeded here from ``rng``). Its variable names swap ours: its q is the draft, its p the target.
* :func:`torch_sampler` — wraps a sampler written for torch tensors (inputs converted, outputs read back).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ..verifiers import CHAIN_VERIFIERS, DecodingOPT

__all__ = ["ADAPTERS", "chain_sampler", "decoding_opt", "hf_speculative_sampling", "hf_version", "torch_sampler",
           "verifier_sampler"]


def verifier_sampler(verifier) -> Callable:
    """The protocol sampler of an otspec chain verifier (its batched ``sample``)."""

    def sampler(draft_tokens, draft_probs, target_probs, rng):
        out = verifier.sample(draft_tokens, draft_probs, target_probs, rng)
        return np.asarray(out.accepted_len), np.asarray(out.token)

    sampler.__name__ = verifier.name
    sampler.__doc__ = f"otspec's {verifier.label} on the audit protocol."
    return sampler


_SAMPLERS: dict[type, Callable] = {}


def chain_sampler(name: str) -> Callable:
    """The protocol sampler of the registered lossless chain verifier ``name`` (:data:`otspec.verifiers.CHAIN_VERIFIERS`),
    one per verifier class: ``otspec.audit.adapters:<name>`` names it (``token``, ``block``, ``block_v1``,
    ``gumbel``, and any verifier registered later)."""
    cls = CHAIN_VERIFIERS[name]
    if cls not in _SAMPLERS:
        _SAMPLERS[cls] = verifier_sampler(cls())
    return _SAMPLERS[cls]


def __getattr__(name: str):
    if name in CHAIN_VERIFIERS:
        return chain_sampler(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Decoding-OPT with an unlimited bias budget: biased by design (the negative control of the real-pair records).
decoding_opt = verifier_sampler(DecodingOPT(float("inf")))


def torch_sampler(fn: Callable, device: str = "cpu", dtype: str = "float64") -> Callable:
    """A protocol sampler around ``fn(draft_tokens, draft_probs, target_probs, generator)`` written for torch tensors:
    the rows go in as ``dtype`` tensors on ``device`` with a ``torch.Generator`` seeded from ``rng``."""

    def sampler(draft_tokens, draft_probs, target_probs, rng):
        import torch

        gen = torch.Generator(device=device).manual_seed(int(rng.integers(2**62)))
        kind = getattr(torch, dtype)
        accepted, token = fn(torch.as_tensor(draft_tokens, device=device),
                             torch.as_tensor(draft_probs, dtype=kind, device=device),
                             torch.as_tensor(target_probs, dtype=kind, device=device), gen)
        return (accepted.detach().cpu().numpy() if hasattr(accepted, "detach") else np.asarray(accepted),
                token.detach().cpu().numpy() if hasattr(token, "detach") else np.asarray(token))

    sampler.__name__ = getattr(fn, "__name__", "torch_sampler")
    return sampler


def hf_version() -> str | None:
    """The installed transformers version (None when it is not installed)."""
    try:
        import transformers
    except ImportError:
        return None
    return transformers.__version__


def hf_speculative_sampling(draft_tokens, draft_probs, target_probs, rng):
    """``transformers.generation.utils._speculative_sampling`` row by row: log-probabilities as logits, the drafted
    tokens as the candidates; returns its match count and the last selected token."""
    import torch
    from transformers.generation.utils import _speculative_sampling

    B, L = draft_tokens.shape
    torch.manual_seed(int(rng.integers(2**62)))  # it samples from torch's global generator
    accepted, token = np.zeros(B, dtype=np.int64), np.zeros(B, dtype=np.int64)
    with np.errstate(divide="ignore"):
        draft_logits, target_logits = np.log(draft_probs), np.log(target_probs)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one tiny row at a time: extra threads only spin (100x slower in a notebook kernel)
    try:
        for b in range(B):
            selected, n_matches = _speculative_sampling(
                torch.as_tensor(draft_tokens[b][None]), torch.as_tensor(draft_logits[b][None]), L,
                torch.as_tensor(target_logits[b][None]))
            accepted[b], token[b] = int(n_matches), int(selected[0, -1])
    finally:
        torch.set_num_threads(threads)
    return accepted, token


class _Adapters(Mapping):
    """The adapters by name, read when used: every registered lossless chain verifier, Decoding-OPT and Hugging
    Face's sampler."""

    def _names(self) -> list[str]:
        return [*CHAIN_VERIFIERS, "decoding_opt", "hf_speculative_sampling"]

    def __getitem__(self, name: str) -> Callable:
        if name in CHAIN_VERIFIERS:
            return chain_sampler(name)
        return {"decoding_opt": decoding_opt, "hf_speculative_sampling": hf_speculative_sampling}[name]

    def __iter__(self):
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


#: The adapters by name (``python -m otspec audit`` lists them).
ADAPTERS = _Adapters()
