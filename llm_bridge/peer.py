"""The peer baseline: Hugging Face assisted generation on the same pair, prompts and processing.

``target.generate(..., assistant_model=draft)`` for a model drafter, ``prompt_lookup_num_tokens``
for the n-gram drafter; one prompt at a time (assisted generation takes batch 1). Calls are
counted with forward hooks: each target call is one verification iteration emitting the accepted
drafts plus one token, so accepted = generated − target calls and the acceptance rate is
accepted / drafted, with drafted = the draft model's forward calls (one per drafted token).
``min_new_tokens`` keeps every run at exactly ``max_new_tokens`` tokens (it masks the end-of-text
token until then, which the otspec loop does not need to do). Hugging Face's timings include its
prefill, so the same ``generate`` without a draft is timed too (``plain_tokens_per_s``) and
``speedup`` is the ratio of the two.
"""

from __future__ import annotations

import time

from .drafters import NGramDrafter
from .sampling import DEFAULT_SAMPLING, Sampling

__all__ = ["hf_assisted"]


def hf_assisted(pair, prompts, max_new_tokens: int, *, sampling: Sampling = DEFAULT_SAMPLING, seed: int = 0) -> dict:
    """{"tokens_per_s", "acceptance_rate", "plain_tokens_per_s", "speedup", "target_calls", "draft_calls",
    "generated", "mode"} over ``prompts``."""
    out = _generate(pair, prompts, max_new_tokens, sampling, seed, assisted=True)
    plain = _generate(pair, prompts, max_new_tokens, sampling, seed, assisted=False)
    out["plain_tokens_per_s"] = plain["tokens_per_s"]
    out["speedup"] = out["tokens_per_s"] / plain["tokens_per_s"]
    return out


def _generate(pair, prompts, max_new_tokens, sampling, seed, assisted: bool) -> dict:
    import torch

    target = pair.target.model
    counts = {"target": 0, "draft": 0}
    hooks = [target.register_forward_hook(lambda *_: counts.__setitem__("target", counts["target"] + 1))]
    kwargs = {"max_new_tokens": max_new_tokens, "min_new_tokens": max_new_tokens, **sampling.hf_kwargs()}
    if not assisted:
        mode = "plain"
    elif isinstance(pair.drafter, NGramDrafter):
        kwargs["prompt_lookup_num_tokens"], mode = 8, "prompt lookup"
    else:
        draft = pair.drafter.model
        hooks.append(draft.register_forward_hook(lambda *_: counts.__setitem__("draft", counts["draft"] + 1)))
        kwargs["assistant_model"], mode = draft, "assistant model"
    pad = pair.tokenizer.pad_token_id if pair.tokenizer is not None else None
    generated, seconds = 0, 0.0
    try:
        for i, prompt in enumerate(prompts):
            torch.manual_seed(seed + i)
            ids = torch.as_tensor([list(prompt)], device=target.device)
            if target.device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.no_grad():
                out = target.generate(ids, attention_mask=torch.ones_like(ids), pad_token_id=pad, **kwargs)
            if target.device.type == "cuda":
                torch.cuda.synchronize()
            seconds += time.perf_counter() - t0
            generated += int(out.shape[1] - ids.shape[1])
    finally:
        for h in hooks:
            h.remove()
    accepted = generated - counts["target"]
    return {"tokens_per_s": generated / seconds, "acceptance_rate": accepted / counts["draft"] if counts["draft"] else None,
            "target_calls": counts["target"], "draft_calls": counts["draft"], "generated": generated, "mode": mode}
