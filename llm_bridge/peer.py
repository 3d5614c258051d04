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

``hf_decode_step`` is the reference for otspec's own decode step: Hugging Face's plain ``generate``
with the matching cache (``cache_implementation="static"`` for static and compiled caches; compiled
is Hugging Face's automatic ``torch.compile`` of the static-cache forward, forced on CPU too). It
times ``generate`` at two lengths and takes the difference, so the prefill and the call overhead
drop out and what is left is milliseconds per decoded token, comparable with the otspec baseline's
``ms_per_token`` (whose timer also starts after the prefill).
"""

from __future__ import annotations

import time

from .drafters import NGramDrafter
from .sampling import DEFAULT_SAMPLING, Sampling

__all__ = ["hf_assisted", "hf_decode_step"]


def hf_assisted(pair, prompts, max_new_tokens: int, *, sampling: Sampling = DEFAULT_SAMPLING, seed: int = 0) -> dict:
    """{"tokens_per_s", "acceptance_rate", "plain_tokens_per_s", "speedup", "target_calls", "draft_calls",
    "generated", "mode"} over ``prompts``."""
    out = _generate(pair, prompts, max_new_tokens, sampling, seed, assisted=True)
    plain = _generate(pair, prompts, max_new_tokens, sampling, seed, assisted=False)
    out["plain_tokens_per_s"] = plain["tokens_per_s"]
    out["speedup"] = out["tokens_per_s"] / plain["tokens_per_s"]
    return out


def hf_decode_step(pair, prompts, max_new_tokens: int, *, sampling: Sampling = DEFAULT_SAMPLING, seed: int = 0,
                   cache: str = "dynamic") -> dict:
    """{"ms_per_token", "tokens_per_s", "cache"} (None and a "note" when timing noise swamps it): Hugging Face's plain ``generate`` per decoded token with the
    cache kind ``cache`` (dynamic, static or compiled), from the difference of runs of ``max_new_tokens`` and
    of 1 token; a compiled run is preceded by an untimed warm-up."""
    if cache not in ("dynamic", "static", "compiled"):
        raise ValueError(f"cache: expected dynamic, static or compiled, got {cache!r}")
    if max_new_tokens < 2:
        raise ValueError(f"max_new_tokens must be at least 2 to time a decode step, got {max_new_tokens}")
    extra = {}
    if cache != "dynamic":
        from transformers import CompileConfig

        extra["cache_implementation"] = "static"
        if cache == "static":
            extra["disable_compile"] = True
        elif pair.target.model.device.type != "cuda":  # Hugging Face compiles on CUDA only unless told
            config = CompileConfig(mode="default")
            config._compile_all_devices = True
            extra["compile_config"] = config
    if cache == "compiled":
        _generate(pair, prompts[:1], max_new_tokens, sampling, seed, assisted=False, extra=extra)
    long = _generate(pair, prompts, max_new_tokens, sampling, seed, assisted=False, extra=extra)
    short = _generate(pair, prompts, 1, sampling, seed, assisted=False, extra=extra)
    seconds = long["seconds"] - short["seconds"]
    steps = long["generated"] - short["generated"]
    if seconds <= 0:  # timing noise larger than the decode itself (tiny models): no number rather than a wrong one
        return {"ms_per_token": None, "tokens_per_s": None, "cache": cache,
                "note": "the decode steps timed at zero or less against a 1-token run; use more tokens"}
    return {"ms_per_token": 1e3 * seconds / steps, "tokens_per_s": steps / seconds, "cache": cache}


def _generate(pair, prompts, max_new_tokens, sampling, seed, assisted: bool, extra=None) -> dict:
    import torch

    target = pair.target.model
    counts = {"target": 0, "draft": 0}
    hooks = [target.register_forward_hook(lambda *_: counts.__setitem__("target", counts["target"] + 1))]
    kwargs = {"max_new_tokens": max_new_tokens, "min_new_tokens": max_new_tokens, **sampling.hf_kwargs(),
              **(extra or {})}
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
            "target_calls": counts["target"], "draft_calls": counts["draft"], "generated": generated, "mode": mode,
            "seconds": seconds}
