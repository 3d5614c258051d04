"""``python -m llm_bridge.distill``: make the shipped ``distilled`` draft of the default target, reproducibly.

Recipe (every number is a flag; the defaults made the committed weights):

1. Data: each prompt of ``data/distill_prompts.txt`` as a chat turn, ``--samples`` continuations of
   ``--length`` tokens sampled from the target at temperature 1 (seeded). 10 % of the sequences
   are held out to measure acceptance.
2. Teacher: the target's last hidden state (after its final norm) at every position, stored once;
   the teacher's rows are its tied head applied to them, so the loss below is over the full vocabulary.
   Only the rows a decode loop uses count: those after the prompt's last token and after each
   continuation token (the shared system prompt would otherwise be memorised and inflate acceptance).
3. Draft: the target's first ``--layers`` decoder layers and final norm, initialised from the
   target and trained; the embedding and tied head stay the target's (not trained, not shipped).
4. Loss: KL(target ‖ draft) per position, AdamW with cosine decay for ``--steps`` steps on
   minibatches of ``--batch`` sequences.
5. Shipped: the trained layers with each matrix stored as int8 with one float16 scale per row
   (≤ 20 MB), ``draft.json`` (recipe, sizes, acceptance before and after) and ``train_log.json``
   (loss and held-out acceptance along training), under ``llm_bridge/weights/distilled``.

Acceptance is the mean per-token Σ_x min(p(x), q(x)) = 1 − TV at temperature 1 on held-out
target samples, measured with the weights exactly as shipped (after int8 rounding).
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from otspec.checks import check_real, check_size
from otspec.clitools import (
    ArgumentParser,
    check_folder_path,
    integer,
    one_line,
    path_argument,
    real,
)

from .drafters import DISTILLED_DIR, dequantize_rows, quantize_rows, truncated_target
from .loop import plain_generate
from .models import DEFAULT_TARGET, ModelNotFound, check_model_spec, layer_count, load_model
from .prompts import DATA_DIR, encode_prompts, read_prompts

__all__ = ["DistillRecipe", "distill", "last_features", "main", "sample_corpus"]


def sample_corpus(target, prompts, samples: int, length: int, seed: int, batch: int = 32):
    """Target samples: (token array (n, T) right-padded, lengths (n,), prompt lengths (n,))."""
    jobs = [p for p in prompts for _ in range(samples)]
    seqs, plens = [], []
    for i in range(0, len(jobs), batch):
        chunk = jobs[i:i + batch]
        run = plain_generate(target, chunk, length, seed=seed + i, progress=True)
        seqs += [np.concatenate([p, t]) for p, t in zip(chunk, run.tokens, strict=True)]
        plens += [len(p) for p in chunk]
    lengths = np.array([len(s) for s in seqs])
    out = np.zeros((len(seqs), lengths.max()), dtype=np.int64)
    for b, s in enumerate(seqs):
        out[b, :len(s)] = s
    return out, lengths, np.array(plens)


def last_features(model, tokens, lengths, batch: int = 16):
    """Last hidden states (after the final norm) of ``model`` on every sequence, (n, T, H) float32 CPU."""
    import torch

    outs = []
    with torch.no_grad():
        for i in range(0, len(tokens), batch):
            ids = torch.as_tensor(tokens[i:i + batch], device=model.device)
            mask = torch.as_tensor(np.arange(tokens.shape[1])[None] < lengths[i:i + batch, None], device=model.device)
            outs.append(model.model(input_ids=ids, attention_mask=mask.long()).last_hidden_state.float().cpu())
    return torch.cat(outs)


def _kl_and_overlap(head, draft_hidden, teacher_hidden, mask):
    """Mean KL(q ‖ p) and mean Σ min(p, q) over the positions of ``mask`` (rows from a shared head)."""
    import torch

    logp = torch.log_softmax(head(draft_hidden).float(), dim=-1)
    logq = torch.log_softmax(head(teacher_hidden).float(), dim=-1)
    kl = (logq.exp() * (logq - logp)).sum(-1)
    overlap = torch.minimum(logp, logq).exp().sum(-1)
    m = mask.float()
    return (kl * m).sum() / m.sum(), (overlap * m).sum() / m.sum()


def _masks(tokens, lengths, plens, device):
    """(attention mask, loss mask): real tokens, and the rows a decode loop uses (after the prompt's last token on)."""
    import torch

    pos = np.arange(tokens.shape[1])[None]
    real = pos < lengths[:, None]
    return (torch.as_tensor(real, device=device).long(),
            torch.as_tensor(real & (pos >= plens[:, None] - 1), device=device))


def _evaluate(draft, head, tokens, lengths, plens, teacher, batch: int = 8) -> float:
    import torch

    total = count = 0.0
    with torch.no_grad():
        for i in range(0, len(tokens), batch):
            ids = torch.as_tensor(tokens[i:i + batch], device=draft.device)
            attention, mask = _masks(tokens[i:i + batch], lengths[i:i + batch], plens[i:i + batch], draft.device)
            h = draft.model(input_ids=ids, attention_mask=attention).last_hidden_state
            _, ov = _kl_and_overlap(head, h, teacher[i:i + batch].to(draft.device), mask)
            total += float(ov) * float(mask.sum())
            count += float(mask.sum())
    return total / count


@dataclass(frozen=True)
class DistillRecipe:
    """How the distilled draft is made (``python -m llm_bridge.distill``'s flags), checked when made: the first
    ``layers`` layers of ``target``, trained on ``samples`` continuations of ``length`` tokens per prompt for ``steps``
    AdamW steps of ``batch`` sequences at learning rate ``lr``; ``seed``, ``device``, the output folder ``out``, a log
    line every ``log_every`` steps."""

    target: str = DEFAULT_TARGET
    layers: int = 4
    samples: int = 6
    length: int = 128
    steps: int = 400
    batch: int = 8
    lr: float = 5e-4
    seed: int = 0
    device: str = "auto"
    out: Path = DISTILLED_DIR
    log_every: int = 25

    def __post_init__(self):
        for name in ("layers", "samples", "length", "steps", "batch", "log_every"):
            check_size(getattr(self, name), "--" + name.replace("_", "-"))
        check_real(self.lr, "--lr", low=0.0, low_open=True)
        check_size(self.seed, "--seed", minimum=0)
        deepest = layer_count(self.target)  # from its config, before it loads
        if deepest is not None and self.layers > deepest:
            raise ValueError(f"--layers {self.layers}: the target {self.target!r} has {deepest} layers (a draft of its "
                             f"first layers takes at most {deepest})")
        check_model_spec(self.target, "--target", hub=False)  # an empty name or a missing .gguf file: named


def distill(recipe: DistillRecipe) -> dict:
    """Run the recipe of the module docstring (``recipe``: a :class:`DistillRecipe`); returns the ``draft.json``
    record."""
    import torch
    from safetensors.torch import save_file

    target, layers, samples, length, steps = recipe.target, recipe.layers, recipe.samples, recipe.length, recipe.steps
    batch, lr, seed, device, out, log_every = (recipe.batch, recipe.lr, recipe.seed, recipe.device, recipe.out,
                                               recipe.log_every)

    torch.manual_seed(seed)
    t_start = time.perf_counter()
    tgt = load_model(target, device=device, dtype="float32")
    prompt_ids = encode_prompts(tgt.tokenizer, read_prompts(DATA_DIR / "distill_prompts.txt"))
    tokens, lengths, plens = sample_corpus(tgt, prompt_ids, samples, length, seed)
    teacher = last_features(tgt.model, tokens, lengths)
    order = np.random.default_rng(seed).permutation(len(tokens))
    n_val = max(1, len(tokens) // 10)
    val, train = order[:n_val], order[n_val:]
    draft = truncated_target(tgt, layers)
    head = tgt.model.get_output_embeddings()
    for p in draft.parameters():
        p.requires_grad_(False)
    trained = {n: p for n, p in draft.named_parameters() if n.startswith("model.layers.") or n == "model.norm.weight"}
    for p in trained.values():
        p.requires_grad_(True)
    heldout = (tokens[val], lengths[val], plens[val], teacher[val])
    before = _evaluate(draft, head, *heldout)
    opt = torch.optim.AdamW(trained.values(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    rng, log = np.random.default_rng(seed + 1), []
    draft.train()
    for step in range(1, steps + 1):
        pick = rng.choice(train, size=min(batch, len(train)), replace=False)
        ids = torch.as_tensor(tokens[pick], device=draft.device)
        attention, mask = _masks(tokens[pick], lengths[pick], plens[pick], draft.device)
        h = draft.model(input_ids=ids, attention_mask=attention).last_hidden_state
        loss, overlap = _kl_and_overlap(head, h, teacher[pick].to(draft.device), mask)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained.values(), 1.0)
        opt.step()
        sched.step()
        if step % log_every == 0 or step == steps:
            draft.eval()
            entry = {"step": step, "kl": float(loss.detach()), "train_overlap": float(overlap.detach()),
                     "heldout_overlap": _evaluate(draft, head, *heldout),
                     "seconds": time.perf_counter() - t_start}
            draft.train()
            log.append(entry)
            print(json.dumps(entry), flush=True)
    draft.eval()
    stored = quantize_rows({n: p for n, p in trained.items()})
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(stored, out / "draft.safetensors")
    draft.load_state_dict({k: v.to(draft.device) for k, v in dequantize_rows(stored).items()}, strict=False)
    record = {"target": target, "target_vocab_size": tgt.vocab_size, "layers": layers,
              "trained_parameters": int(sum(p.numel() for p in trained.values())),
              "file_bytes": (out / "draft.safetensors").stat().st_size,
              "recipe": {"prompts": "llm_bridge/data/distill_prompts.txt", "samples_per_prompt": samples,
                         "length": length, "sequences": len(tokens), "tokens": int(lengths.sum()),
                         "heldout_sequences": int(n_val), "steps": steps, "batch": batch, "lr": lr, "seed": seed,
                         "loss": "KL(target || draft), full vocabulary, continuation rows only", "optimizer": "AdamW, cosine decay",
                         "storage": "int8 per-row scales (float16)"},
              "heldout_acceptance_before": before,
              "heldout_acceptance_after": _evaluate(draft, head, *heldout),
              "device": tgt.device, "seconds": time.perf_counter() - t_start}
    (out / "draft.json").write_text(json.dumps(record, indent=2) + "\n")
    (out / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    return record


def main(argv=None) -> int:
    ap = ArgumentParser(prog="python -m llm_bridge.distill", description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--layers", type=integer, default=4)
    ap.add_argument("--samples", type=integer, default=6, help="continuations sampled per prompt")
    ap.add_argument("--length", type=integer, default=128, help="tokens per continuation")
    ap.add_argument("--steps", type=integer, default=400)
    ap.add_argument("--batch", type=integer, default=8)
    ap.add_argument("--lr", type=real, default=5e-4)
    ap.add_argument("--seed", type=integer, default=0)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", type=path_argument, default=DISTILLED_DIR)
    ap.add_argument("--log-every", type=integer, default=25)
    args = ap.parse_args(argv)
    try:
        check_folder_path(args.out, "--out")  # made when the first file is written
        record = distill(DistillRecipe(target=args.target, layers=args.layers, samples=args.samples,
                                       length=args.length, steps=args.steps, batch=args.batch, lr=args.lr,
                                       seed=args.seed, device=args.device, out=args.out, log_every=args.log_every))
    except (ModelNotFound, ImportError, ValueError) as err:
        print(f"python -m llm_bridge.distill: {one_line(err)}", file=sys.stderr)
        return 2
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
