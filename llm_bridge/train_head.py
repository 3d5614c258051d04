"""``python -m llm_bridge.train_head``: train a feature-level draft head on the target's own samples, reproducibly.

Recipe (every number is a flag; the defaults made the shipped heads):

1. Data: each prompt of ``--prompts`` (default ``data/distill_prompts.txt`` and ``data/head_prompts.txt``,
   164 user messages, none a validation prompt) as a chat turn, ``--samples`` continuations of ``--length``
   tokens sampled from the target at temperature 1 (seeded); every continuation of 10 % of the prompts is
   held out, so that held-out acceptance is that on unseen prompts, as in ``llm_bridge.validate``. The
   target's last features (after its final norm) at every position, and the log-normaliser of its full
   row there, are computed once and cached under
   ``cache_dir()/heads`` (keyed by the recipe), so trying another head or vocabulary costs no sampling.
   With ``--corpus`` (a folder of ``python -m llm_bridge.corpus``; ``default``: the committed corpus of the target)
   the data is that corpus instead: the target's features recomputed by teacher forcing
   (:mod:`llm_bridge.head_data`), every 10th shard held out (``--heldout-sequences`` of its sequences measured), and
   ``--train-tokens`` keeps the first training shards up to that many continuation tokens (a learning curve's
   nested training sets). The record then adds the held-out greedy agreement per draft position: on the corpus's
   temperature-0 continuations, the share of rows where the head's arg-max is the target's (a greedy loop's
   acceptance there).
2. Vocabulary: the ``--vocab`` most frequent tokens of the training continuations (0: all tokens).
   Its coverage (the target's mean mass on it) bounds the head's acceptance and is reported.
3. Loss, at every row a decode loop uses (after the prompt's last token on): the cross-entropy
   −Σ_{v∈S} q(v) log p(v) of the head's row p on its vocabulary S against the target's row q (the
   KL(q ‖ p) up to a constant when S is every token; with a reduced S it is the KL to q restricted
   to S, weighted by q(S)). An EAGLE head adds ``--feature-weight`` × smooth-L1 between its predicted
   feature and the target's, and is trained on ``--unroll`` drafting steps ("training-time test"):
   step s reads the head's own step s − 1 feature, and its attention sees the target's features of
   the prefix and the head's own of the drafted positions before it, as when drafting.
4. AdamW with linear warm-up and cosine decay, ``--steps`` minibatches of ``--batch`` sequences.
5. Acceptance: held-out Σ_v min(p(v), q(v)) = 1 − TV per draft position (q over the full
   vocabulary), measured with the weights as shipped (matrices int8 with a float16 scale per row).

Writes ``drafter.json`` (recipe, sizes, coverage, acceptance per position before and after),
``drafter.safetensors`` and ``train_log.json`` to ``--out`` (default: the shipped head of the kind).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from otspec.checks import check_flag, check_real, check_size
from otspec.clitools import (
    ArgumentParser,
    check_folder_path,
    flags_that_apply,
    index_list,
    integer,
    one_line,
    path_argument,
    real,
)
from otspec.distributions import resolve_device

from . import head_checkpoint as ckpt
from .head_checkpoint import shown_path
from .head_data import PROMPTS, corpus, prompt_files, prompt_split
from .heads import HEAD_DIRS, HEAD_KINDS, build_head, eagle_unrolled, load_head, save_head
from .models import (
    DEFAULT_TARGET,
    ModelNotFound,
    check_model_spec,
    layer_count,
    load_model,
    vocab_count,
)

__all__ = ["HeadRecipe", "TrainingBatch", "corpus", "evaluate", "frequent_tokens", "main", "shown_path", "step_losses", "train_head"]


def frequent_tokens(data: dict, rows, n: int, vocab_size: int) -> np.ndarray:
    """The ``n`` most frequent continuation tokens of sequences ``rows`` (ties: lower id first); all when n is 0."""
    if not n or n >= vocab_size:
        return np.arange(vocab_size)
    counts = np.zeros(vocab_size, dtype=np.int64)
    for r in rows:
        seq = data["tokens"][r].numpy()
        counts += np.bincount(seq[int(data["plens"][r]):int(data["lengths"][r])], minlength=vocab_size)
    return np.sort(np.argsort(-counts, kind="stable")[:n])


class TrainingBatch:
    """One minibatch: pairs i = (feature after token i, token i + 1), and the rows each output is scored on.

    ``score_fraction`` < 1 scores a random share of the pairs' outputs (``rng``: a numpy Generator), every pair still
    read as context: the output head, by far a step's largest cost, then runs on that share only."""

    def __init__(self, data, rows, head, *, score_fraction: float = 1.0, rng=None):
        import torch

        length, plen = data["lengths"][rows], data["plens"][rows]
        T = int(length.max())  # the longest sequence of the batch: the padding past it is dropped
        self.x, self.F, self.lse = (data[k][rows][:, :T] for k in ("tokens", "features", "lse"))
        self.F = self.F.to(head.out_rows.dtype)  # a corpus's features are stored in float16
        fuse = getattr(head, "fuse_layers", ())  # an EAGLE-3 head reads the fused layers' states before F
        self.G = torch.cat([data["extra"][rows][:, :T].to(self.F.dtype), self.F], dim=-1) if fuse else self.F
        self.top = data["argmax"][rows][:, :T] if "argmax" in data else None  # the target's greedy tokens
        pos = torch.arange(T)[None]
        self.real = pos < length[:, None]  # token exists
        self.keep = (torch.ones((len(rows), max(T - 1, 0)), dtype=torch.bool) if score_fraction >= 1 else
                     torch.as_tensor(rng.random((len(rows), max(T - 1, 0))) < score_fraction))  # pair i's output
        self.scored = self.real & (pos >= plen[:, None] - 1)  # the row after token pos is one a decode loop uses
        self.W = head.out_rows

    def log_q_at(self, b, t):
        """The target's log-probabilities on the head's vocabulary after token t of sequence b, at the pairs
        ``(b, t)``: (n, N)."""
        return self.F[b, t] @ self.W.T - self.lse[b, t, None]


def _row_losses(logits, log_q, head, top=None):
    """(cross-entropy, acceptance, count, greedy agreement) sums over the rows given: −Σ_S q log p, Σ_S min(p, q),
    the rows, and the rows where the head's arg-max is the target's greedy token ``top`` (NaN without ``top``)."""
    import torch

    logp = torch.log_softmax(logits, dim=-1)
    ce = -(log_q.exp() * logp).sum(-1)
    acc = torch.minimum(logp, log_q).exp().sum(-1)
    agree = torch.tensor(float("nan")) if top is None else (head.vocab[logits.argmax(-1)] == top).sum().float()
    return ce.sum(), acc.sum(), torch.tensor(float(logits.shape[0])), agree


def _eagle_steps(head, batch: TrainingBatch, unroll: int, feature_weight: float):
    """Per drafting step s = 1..unroll: (loss sum, acceptance sum, count, greedy agreements) over the batch (module
    docstring, item 3).

    Only the scored outputs go through the output head (the rest of every sequence is context)."""
    import torch

    scored = batch.scored[:, 1:]  # pair i's output is scored on the row after token i + 1
    n, out = batch.x.shape[1] - 1, []
    for s, h in enumerate(eagle_unrolled(head, batch.x, batch.G, batch.real, unroll), start=1):
        valid = scored.clone()  # step s: the pair s - 1 before it is the last committed one, after the prompt too
        valid[:, :s - 1] = False
        valid[:, s - 1:] &= scored[:, :n - s + 1]
        b, i = (valid & batch.keep).nonzero(as_tuple=True)
        ce, acc, count, agree = _row_losses(head.reduced_logits(h[b, i]), batch.log_q_at(b, i + 1), head,
                                            None if batch.top is None else batch.top[b, i + 1])
        reg = torch.nn.functional.smooth_l1_loss(h[b, i], batch.F[b, i + 1], reduction="none").mean(-1).sum()
        out.append((ce + feature_weight * reg, acc, count, agree))
    return out


def _medusa_steps(head, batch: TrainingBatch):
    """Per block r: (loss sum, acceptance sum, count, greedy agreements): block r on the feature after token i scores
    the row after token i + 1 + r (scored rows only); Hydra's block also reads tokens i + 1 .. i + 1 + r."""
    import torch

    T, out = batch.x.shape[1], []
    for r in range(head.k):
        n = T - 1 - r
        if n <= 0:
            break
        valid = batch.scored[:, 1:1 + n] & batch.scored[:, 1 + r:1 + r + n]  # "Y" is the prompt's last token or later
        b, i = (valid & batch.keep[:, :n]).nonzero(as_tuple=True)
        seen = batch.x[b[:, None], (i + 1)[:, None] + torch.arange(r + 1)] if head.hydra else None  # Hydra's tokens
        out.append(_row_losses(head.block_logits(batch.F[b, i], r, seen), batch.log_q_at(b, i + 1 + r), head,
                               None if batch.top is None else batch.top[b, i + 1 + r]))
    return out


def step_losses(head, batch, unroll, feature_weight):
    """Per draft position: (loss sum, acceptance sum, count, greedy agreements) of ``head`` on a
    :class:`TrainingBatch`."""
    return _eagle_steps(head, batch, unroll, feature_weight) if head.kind == "eagle" else _medusa_steps(head, batch)


def _evaluate_rows(head, data, rows, unroll: int, batch: int):
    """(acceptance per position, greedy agreement per position, coverage) over sequences ``rows``."""
    import torch

    sums, cover, n_cover = None, 0.0, 0.0
    with torch.no_grad():
        for i in range(0, len(rows), batch):
            b = TrainingBatch(data, rows[i:i + batch], head)
            got = np.array([[float(a), float(c), float(g)] for _, a, c, g in step_losses(head, b, unroll, 0.0)])
            sums = got if sums is None else sums + got
            seq, at = b.scored[:, 1:].nonzero(as_tuple=True)  # the rows after token at + 1 a decode loop uses
            cover += float(b.log_q_at(seq, at + 1).exp().sum())
            n_cover += float(seq.numel())
    return (sums[:, 0] / sums[:, 1]).tolist(), (sums[:, 2] / sums[:, 1]).tolist(), cover / n_cover


def evaluate(head, data, rows, unroll: int, batch: int = 8) -> dict:
    """Held-out acceptance 1 − TV per draft position at temperature 1 and the vocabulary's coverage (mean q(S)) on
    the sequences sampled at temperature 1; with a corpus's greedy continuations and the target's arg-max tokens,
    also ``greedy_agreement_per_position`` on them: the share of rows where the head's arg-max is the target's
    (a greedy decode loop's acceptance at that position, its earlier drafts accepted)."""
    rows = np.asarray(rows)
    temps = np.asarray(data.get("temperature", np.ones(len(data["lengths"]))))[rows]
    acc, agree, cover = _evaluate_rows(head, data, rows[temps != 0], unroll, batch)
    out = {"acceptance_per_position": acc, "coverage": cover}
    if "argmax" in data:
        out["agreement_per_position_temperature_1"] = agree
        if np.any(temps == 0):
            out["greedy_agreement_per_position"] = _evaluate_rows(head, data, rows[temps == 0], unroll, batch)[1]
    return out


@dataclass(frozen=True)
class HeadRecipe:
    """How a feature-level draft head is trained (``python -m llm_bridge.train_head``'s flags), checked when made.

    ``kind`` (``eagle`` or ``medusa``) on ``target``'s final hidden states; the draft vocabulary: the ``vocab`` most
    frequent tokens (0: all); the corpus: ``samples`` continuations of ``length`` tokens per prompt of the files
    ``prompts``; training: ``steps`` AdamW steps of ``batch`` sequences at learning rate ``lr`` (warm-up, cosine
    decay), EAGLE's ``unroll`` drafting steps and ``feature_weight`` on the feature regression, Medusa's
    ``medusa_heads`` blocks; ``seed``, ``device``; ``out`` (default: ``llm_bridge/weights/<kind>``), a log line every
    ``log_every`` steps, a progress bar."""

    kind: str = "eagle"
    target: str = DEFAULT_TARGET
    vocab: int = 8192
    samples: int = 8
    length: int = 128
    steps: int = 1000
    batch: int = 8
    lr: float = 1e-3
    unroll: int = 3
    medusa_heads: int = 4
    feature_weight: float = 0.1
    fuse: tuple = ()
    head_layers: int = 1
    hydra: bool = False
    seed: int = 0
    device: str = "cpu"
    prompts: object = PROMPTS
    corpus: Path | None = None
    train_tokens: int = 0
    heldout_sequences: int = 256
    score_fraction: float = 1.0
    out: Path | None = None
    log_every: int = 25
    progress: bool = True
    checkpoint_every: int = 50

    def __post_init__(self):
        if self.kind not in HEAD_KINDS:
            raise ValueError(f"--kind: expected one of {HEAD_KINDS}, got {self.kind!r}")
        check_flag(self.hydra, "--hydra")  # the text 'False' is not False
        check_flag(self.progress, "progress")
        resolve_device(self.device)
        if self.out is not None:  # /proc, a file in the way: refused here, before any model loads
            if isinstance(self.out, bytes) or not isinstance(self.out, str | os.PathLike):
                raise ValueError(f"--out: expected a folder path, got {type(self.out).__name__}")
            check_folder_path(self.out, "--out")
        for name in ("steps", "batch", "unroll", "samples", "length", "medusa_heads", "log_every", "heldout_sequences",
                     "head_layers", "checkpoint_every"):
            check_size(getattr(self, name), "--" + name.replace("_", "-"), limit=RECIPE_LIMITS.get(name),
                       limit_name="train_head's limit")
        if isinstance(self.vocab, bool) or int(self.vocab) != self.vocab or self.vocab < 0:
            raise ValueError(f"--vocab: expected an integer >= 0 (0: the whole vocabulary), got {self.vocab!r}")
        if self.vocab > MAX_HEAD_VOCAB:
            raise ValueError(f"--vocab: {self.vocab:,} is above {MAX_HEAD_VOCAB:,} (0 takes the target's whole "
                             "vocabulary)")
        check_real(self.lr, "--lr", low=0.0, low_open=True)
        check_real(self.feature_weight, "--feature-weight", low=0.0)
        check_real(self.score_fraction, "--score-fraction", low=0.01, high=1.0)  # below 1 %: steps that score nothing
        check_size(self.seed, "--seed", minimum=0)
        check_size(self.train_tokens, "--train-tokens", minimum=0, limit=10**9, limit_name="train_head's limit")
        if self.head_layers != 1 and self.kind != "eagle":
            raise ValueError("--head-layers: the decoder layers of an EAGLE head (--kind eagle)")
        if self.hydra and self.kind != "medusa":
            raise ValueError("--hydra: Hydra's blocks are Medusa heads that also read the drafted tokens (--kind medusa)")
        if self.fuse and (self.kind != "eagle" or self.corpus is None):
            raise ValueError("--fuse: an EAGLE head fuses target layers, and their states come with a --corpus")
        if any(isinstance(i, bool) or int(i) != i or not 0 <= i < 4096 for i in self.fuse) or len(
                set(self.fuse)) != len(self.fuse):
            raise ValueError(f"--fuse: expected distinct target layer indices >= 0, got {list(self.fuse)}")
        deepest = layer_count(self.target)  # from its config, before it loads
        if deepest is not None and (self.head_layers > deepest or any(i >= deepest for i in self.fuse)):
            raise ValueError(f"--head-layers {self.head_layers}, --fuse {list(self.fuse)}: the target {self.target!r} "
                             f"has {deepest} layers (head layers <= {deepest}, fused layers < {deepest})")
        size = vocab_count(self.target)
        if size is not None and self.vocab > size:
            raise ValueError(f"--vocab {self.vocab:,}: the target {self.target!r} has {size:,} tokens (a draft vocabulary "
                             "is some of them; 0 takes all)")
        if self.train_tokens and self.corpus is None:
            raise ValueError("--train-tokens: a learning curve's smaller training sets are taken from a --corpus")
        check_model_spec(self.target, "--target", hub=False)  # last: an empty name, a non-text, a missing .gguf file


#: Largest values of a recipe, checked before any model loads (each far above what trains a head on a laptop: a
#: value beyond them is a typo that would run for days or allocate more memory than the machine has).
RECIPE_LIMITS = {"steps": 1_000_000, "batch": 4096, "unroll": 16, "samples": 1_000_000, "length": 4096,
                 "medusa_heads": 16, "log_every": 1_000_000, "heldout_sequences": 100_000, "head_layers": 64,
                 "checkpoint_every": 1_000_000}
#: Largest reduced vocabulary of a head (the real targets' vocabularies are below 2^18).
MAX_HEAD_VOCAB = 2**18


def train_head(recipe: HeadRecipe) -> dict:
    """Run the recipe of the module docstring (``recipe``: a :class:`HeadRecipe`); returns the ``drafter.json``
    record."""
    import torch
    from tqdm.auto import tqdm

    kind, target, vocab, samples, length = recipe.kind, recipe.target, recipe.vocab, recipe.samples, recipe.length
    steps, batch, lr, unroll, seed = recipe.steps, recipe.batch, recipe.lr, recipe.unroll, recipe.seed
    progress, log_every, feature_weight = recipe.progress, recipe.log_every, recipe.feature_weight
    medusa_heads, device, prompts, out = recipe.medusa_heads, recipe.device, recipe.prompts, recipe.out
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    ckpt.check_checkpoint_files(out if out is not None else HEAD_DIRS[kind])  # before any model loads
    if recipe.corpus is None:
        files = prompt_files(prompts)  # a missing prompt file is refused before the model loads
    else:
        from .corpus import check_trainable, load_corpus

        loaded = load_corpus(recipe.corpus)  # a damaged index or shard too, before any model
        check_trainable(loaded, f"--corpus {recipe.corpus}")
        size = vocab_count(target)
        if size is not None and loaded.vocab_size != size:  # another model's token ids
            raise ValueError(f"--corpus {recipe.corpus}: made with a vocabulary of {loaded.vocab_size:,} tokens; the "
                             f"target {target!r} has {size:,}")
    tgt = load_model(target, device=device, dtype="float32")
    if recipe.corpus is None:
        data = corpus(tgt, target_name=target, samples=samples, length=length, seed=seed, prompts=files,
                      progress=progress)
        val, train, held_text = prompt_split(data["prompt"].numpy(), seed)
    else:
        from .head_data import corpus_split, corpus_training_data

        data = corpus_training_data(tgt, target_name=target, folder=recipe.corpus, extra=recipe.fuse,
                                    progress=progress)
        val, train, held_text = corpus_split(data, recipe.corpus, recipe.seed, recipe.heldout_sequences,
                                               recipe.train_tokens)
    prompt_of = data["prompt"].numpy()
    ids = frequent_tokens(data, train, vocab, tgt.vocab_size)
    head = build_head(kind, tgt.model, ids, **({"k": medusa_heads, "hydra": recipe.hydra} if kind == "medusa"
                                               else {"fuse": recipe.fuse, "layers": recipe.head_layers}))
    unroll = unroll if kind == "eagle" else head.k
    before = evaluate(head, data, val, unroll)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    rng, out = np.random.default_rng(seed + 1), Path(out) if out is not None else HEAD_DIRS[kind]
    key = ckpt.recipe_key(recipe)
    done, log, spent = ckpt.load_checkpoint(out, key=key, head=head, opt=opt, sched=sched, rng=rng, steps=steps)
    t0 -= spent  # the seconds of the steps before a resume count
    head.train()
    bar = tqdm(range(done + 1, steps + 1), desc=f"train {kind}", initial=done, total=steps, disable=not progress)
    for step in bar:
        b = TrainingBatch(data, rng.choice(train, size=min(batch, len(train)), replace=False), head,
                          score_fraction=recipe.score_fraction, rng=rng)
        parts = step_losses(head, b, unroll, feature_weight)
        loss = sum(ls / c.clamp(min=1) for ls, _, c, _ in parts) / len(parts)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        train_acc = [float((a / c.clamp(min=1)).detach()) for _, a, c, _ in parts]
        bar.set_postfix(loss=f"{float(loss):.3f}", acc1=f"{train_acc[0]:.3f}")
        if step % log_every == 0 or step == steps:
            head.eval()
            held = evaluate(head, data, val, unroll)
            entry = {"step": step, "loss": float(loss.detach()), "train_acceptance": train_acc,
                     "heldout": held["acceptance_per_position"], "seconds": time.perf_counter() - t0}
            if "greedy_agreement_per_position" in held:
                entry["heldout_greedy"] = held["greedy_agreement_per_position"]
            head.train()
            log.append(entry)
            bar.write(json.dumps(entry))
        if step % recipe.checkpoint_every == 0 and step < steps:
            ckpt.save_checkpoint(out, key=key, step=step, head=head, opt=opt, sched=sched, rng=rng, log=log,
                            seconds=time.perf_counter() - t0)
    head.eval()
    source = ({"prompts": [shown_path(f) for f in files], "samples_per_prompt": samples, "length": length}
              if recipe.corpus is None else
              {"corpus": ",".join(shown_path(Path(f)) for f in _folders(recipe.corpus)), "train_tokens": int((data["lengths"] - data["plens"])[train].sum())})
    if recipe.score_fraction < 1:
        source["score_fraction"] = recipe.score_fraction
    recipe = {**source, "sequences": int(len(prompt_of)), "tokens": int(data["lengths"].sum()),
              "train_sequences": int(train.size), "heldout": held_text,
              "heldout_sequences": int(val.size),
              "vocab": int(ids.size), "steps": steps, "batch": batch, "lr": lr, "seed": seed,
              "unroll": unroll if kind == "eagle" else None, "feature_weight": feature_weight if kind == "eagle" else None,
              "loss": "cross-entropy of the head's row on its vocabulary against the target's row (KL up to a constant)"
                      + (" + feature smooth-L1, unrolled drafting steps" if kind == "eagle" else ""),
              "optimizer": "AdamW, linear warm-up, cosine decay", "storage": "int8 per-row scales (float16)"}
    record = save_head(head, out, {"target": target, "recipe": recipe, "heldout_before": before,
                                   "recipe_fields": json.loads(key)})
    shipped, _ = load_head(out, tgt.model)
    record["heldout"] = evaluate(shipped, data, val, unroll)
    record["seconds"] = time.perf_counter() - t0
    (out / "drafter.json").write_text(json.dumps(record, indent=2) + "\n")
    (out / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    (out / ckpt.CHECKPOINT).unlink(missing_ok=True)
    return record


def _corpus_folder(arg, target: str):
    """``--corpus``: a folder, ``default`` (the target's committed corpus), or several of them comma-separated
    (trained on together; each keeps its held-out shards)."""
    from .corpus import CORPUS_DIR

    if arg is None:
        return None
    parts = [p.strip() for p in str(arg).split(",")] if "," in str(arg) else [arg]
    if any(p == "" for p in parts):
        raise ValueError(f"--corpus {arg!r}: an empty folder name in the list")
    folders = [CORPUS_DIR / target if str(p) == "default" else Path(p) for p in parts]
    return folders[0] if len(folders) == 1 else tuple(folders)


def _folders(corpus) -> tuple:
    return tuple(corpus) if isinstance(corpus, list | tuple) else (corpus,)


#: Flags read by one kind of head or one source of data only, with their defaults and when they apply
#: (:func:`otspec.clitools.flags_that_apply`): given where they do not, they would be ignored without a word.
_EAGLE, _MEDUSA = ("--kind eagle", lambda a: a.kind == "eagle"), ("--kind medusa", lambda a: a.kind == "medusa")
_PROMPTS, _CORPUS = ("training on prompts (without --corpus)", lambda a: a.corpus is None), \
    ("--corpus", lambda a: a.corpus is not None)
_ONLY = (("unroll", 3, _EAGLE), ("feature_weight", 0.1, _EAGLE), ("medusa_heads", 4, _MEDUSA),
         ("prompts", ",".join(f.name for f in PROMPTS), _PROMPTS), ("samples", 8, _PROMPTS),
         ("length", 128, _PROMPTS), ("heldout_sequences", 256, _CORPUS))


def main(argv=None) -> int:
    ap = ArgumentParser(prog="python -m llm_bridge.train_head", description=__doc__.splitlines()[0])
    ap.add_argument("--kind", required=True, choices=HEAD_KINDS)
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--vocab", type=integer, default=8192, help="draft vocabulary: the N most frequent tokens (0: all)")
    ap.add_argument("--prompts", default=None,
                    help="prompt files, comma-separated (bare names: llm_bridge/data)")
    ap.add_argument("--corpus", type=path_argument, default=None,
                    help="train on a corpus folder of python -m llm_bridge.corpus (instead of --prompts, --samples, "
                         "--length); 'default': the committed corpus of the target")
    ap.add_argument("--train-tokens", type=integer, default=0,
                    help="with --corpus: train on its first shards up to this many continuation tokens (0: all)")
    ap.add_argument("--heldout-sequences", type=integer, default=None, help="with --corpus: held-out sequences measured")
    ap.add_argument("--samples", type=integer, default=None, help="continuations sampled per prompt")
    ap.add_argument("--length", type=integer, default=None, help="tokens per continuation")
    ap.add_argument("--steps", type=integer, default=1000)
    ap.add_argument("--batch", type=integer, default=8)
    ap.add_argument("--lr", type=real, default=1e-3)
    ap.add_argument("--unroll", type=integer, default=None, help="EAGLE: drafting steps trained (training-time test)")
    ap.add_argument("--medusa-heads", type=integer, default=None, help="Medusa: blocks (the longest draft)")
    ap.add_argument("--feature-weight", type=real, default=None, help="EAGLE: weight of the feature regression")
    ap.add_argument("--fuse", type=index_list, default=(),
                    help="EAGLE with --corpus: target layers fused with the last feature (EAGLE-3), e.g. 4,15")
    ap.add_argument("--head-layers", type=integer, default=1,
                    help="EAGLE: the head's decoder layers (from the target's last ones); each costs a layer per draft")
    ap.add_argument("--score-fraction", type=real, default=1.0,
                    help="score this random share of each batch's outputs (the rest stays context): a cheaper step")
    ap.add_argument("--hydra", action="store_true",
                    help="Medusa: Hydra's blocks, each also reading the committed token and the tokens drafted before")
    ap.add_argument("--seed", type=integer, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=path_argument, default=None, help="output folder (default: llm_bridge/weights/<kind>)")
    ap.add_argument("--log-every", type=integer, default=25)
    ap.add_argument("--checkpoint-every", type=integer, default=50,
                    help="write --out/checkpoint.pt every this many steps; a rerun of the same recipe resumes from it")
    args = ap.parse_args(argv)
    try:
        flags_that_apply(args, _ONLY)  # a flag the recipe would ignore is refused before any model loads
        record = train_head(HeadRecipe(
            kind=args.kind, target=args.target, vocab=args.vocab, samples=args.samples, length=args.length,
            steps=args.steps, batch=args.batch, lr=args.lr, unroll=args.unroll, medusa_heads=args.medusa_heads,
            feature_weight=args.feature_weight, seed=args.seed, device=args.device, prompts=args.prompts,
            corpus=_corpus_folder(args.corpus, args.target), train_tokens=args.train_tokens,
            heldout_sequences=args.heldout_sequences, fuse=args.fuse, hydra=args.hydra, head_layers=args.head_layers,
            score_fraction=args.score_fraction, out=args.out, log_every=args.log_every,
            checkpoint_every=args.checkpoint_every))
    except (ModelNotFound, ImportError, ValueError, FileNotFoundError) as err:
        print(f"python -m llm_bridge.train_head: {one_line(err)}", file=sys.stderr)
        return 2
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
