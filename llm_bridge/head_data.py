"""A feature-level head's training data from a committed corpus (:mod:`llm_bridge.corpus`): the target's features
recomputed by teacher-forced passes, cached, never stored in the repository.

For every corpus sequence (prompt and continuation) one forward pass of the target gives, at every position, its
last feature (after the final norm: what its output head reads), the log-normaliser of its full output row there
(so that a head's loss is against the target's exact row), and optionally its hidden states after earlier layers
(``extra``: the low and middle layers an EAGLE-3-style head fuses with the last feature). Everything is kept as
float16 except the log-normalisers, right-padded to the longest sequence, and cached under ``cache_dir()/heads``
keyed by the target, the shard's bytes and the layer (the last features, and each extra layer in a file of its own, so
that heads fusing other layers reuse what is cached).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from otspec.checks import check_data_file
from otspec.clitools import comma_items

from .corpus import CORPUS_DIR, load_corpus
from .models import cache_dir
from .prompts import DATA_DIR, data_file, encode_prompts, read_prompts

__all__ = ["PROMPTS", "corpus", "corpus_split", "corpus_training_data", "prompt_files", "prompt_split", "target_features"]

#: The prompt files a head trains on without a corpus (``train_head --prompts``'s default).
PROMPTS = (DATA_DIR / "distill_prompts.txt", DATA_DIR / "head_prompts.txt")


def target_features(model, tokens, lengths, extra=(), *, batch_tokens: int = 8192, progress: bool = True):
    """(last features (n, T, H) float16, log-normalisers (n, T) float32, arg-max tokens (n, T) int64, extra layers'
    states (n, T, k·H) float16 or None) of ``model`` on right-padded ``tokens`` (n, T) of ``lengths``; ``extra`` indexes the decoder's
    ``hidden_states`` (0: the embeddings, i: after layer i). Positions past a length are zero."""
    import torch

    from otspec.progress import tqdm

    n, T = tokens.shape
    H = model.config.hidden_size
    W = model.get_output_embeddings().weight.detach()
    feats = torch.zeros((n, T, H), dtype=torch.float16)
    lse = torch.zeros((n, T), dtype=torch.float32)
    top = torch.zeros((n, T), dtype=torch.int64)
    more = torch.zeros((n, T, len(extra) * H), dtype=torch.float16) if extra else None
    order = np.argsort(-np.asarray(lengths), kind="stable")  # similar lengths together: little padding per batch
    bar = tqdm(total=int(np.sum(lengths)), desc="target features", unit="tok", disable=not progress)
    i = 0
    with torch.no_grad():
        while i < n:
            width = int(lengths[order[i]])
            rows = order[i:i + max(1, batch_tokens // width)]
            ids = torch.as_tensor(np.asarray(tokens)[rows, :width], device=model.device)
            out = model.base_model(input_ids=ids, output_hidden_states=bool(extra))  # causal: padding after a
            h = out.last_hidden_state.to(W.dtype)                                  # length changes nothing
            real = torch.as_tensor(np.arange(width)[None] < np.asarray(lengths)[rows, None])
            logits = h @ W.T
            z = torch.logsumexp(logits, dim=-1).cpu()
            idx = torch.as_tensor(rows)
            feats[idx, :width] = (h.cpu() * real[..., None]).half()
            lse[idx, :width] = (z * real).float()
            top[idx, :width] = logits.argmax(-1).cpu() * real
            if extra:
                states = torch.cat([out.hidden_states[k].float() for k in extra], dim=-1).cpu()
                more[idx, :width] = (states * real[..., None]).half()
            bar.update(int(np.asarray(lengths)[rows].sum()))
            i += len(rows)
    bar.close()
    return feats, lse, top, more


def _shard_key(target_name: str, vocab_size: int, path: Path, extra) -> str:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps([target_name, vocab_size, digest, list(extra)]).encode()).hexdigest()[:16]


def _save(obj, path: Path) -> None:
    """``torch.save`` to ``path`` through a temporary name: an interrupted write leaves no half-made cache file."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(obj, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)


def corpus_training_data(target, *, target_name: str, folder=None, extra=(), progress: bool = True) -> dict:
    """The corpus in ``folder`` (default: the committed one of ``target_name``) with the target's features: the dict
    :class:`llm_bridge.train_head.TrainingBatch` reads (``tokens``, ``lengths``, ``plens``, ``features``, ``lse``,
    ``argmax`` (the target's greedy token after each position), ``prompt``, and ``extra`` when ``extra`` layers are
    asked for) plus ``heldout`` (bool per sequence: its shard is held out) and ``temperature``. Features are cached
    shard by shard (keyed by the shard's bytes), so a corpus that grows costs only its new shards."""
    import torch

    folder = (folder if isinstance(folder, list | tuple) else Path(folder)) if folder is not None else \
        CORPUS_DIR / target_name
    corpus = load_corpus(folder)  # several folders: their union (llm_bridge.corpus.joined)
    if corpus.vocab_size != target.vocab_size:
        raise ValueError(f"--corpus {folder}: made for a vocabulary of {corpus.vocab_size:,}; the target has "
                         f"{target.vocab_size:,}")
    n, T = corpus.tokens.shape
    H = target.model.config.hidden_size
    data = {"features": torch.zeros((n, T, H), dtype=torch.float16), "lse": torch.zeros((n, T)),
            "argmax": torch.zeros((n, T), dtype=torch.int64)}
    if extra:
        data["extra"] = torch.zeros((n, T, len(extra) * H), dtype=torch.float16)
    todo = []
    for index, file in corpus.files.items():  # the last features, and each extra layer apart: any head reuses them
        keys = [_shard_key(target_name, corpus.vocab_size, file, layers) for layers in ([], *([k] for k in extra))]
        todo.append((np.flatnonzero(corpus.shard == index), [cache_dir() / "heads" / f"features-{k}.pt" for k in keys]))
    missing = [(rows, paths) for rows, paths in todo if not all(path.is_file() for path in paths)]
    if missing and progress:
        print(f"train_head: the target's features on {sum(int(corpus.lengths[r].sum()) for r, _ in missing):,} "
              f"tokens of {len(missing)} corpus shards (cached under {cache_dir() / 'heads'})", file=sys.stderr)
    for rows, (base, *layers) in todo:
        width = int(corpus.lengths[rows].max())
        todo_layers = [(k, path) for k, path in zip(extra, layers, strict=True) if not path.is_file()]
        fresh = {}  # the layers this pass computes, kept in memory rather than read back from their files
        if base.is_file() and not todo_layers:
            got = torch.load(base)
        else:
            feats, lse, top, more = target_features(target.model, corpus.tokens[rows, :width], corpus.lengths[rows],
                                                    tuple(k for k, _ in todo_layers), progress=progress)
            got = {"features": feats, "lse": lse, "argmax": top}
            _save(got, base)
            for j, (_, path) in enumerate(todo_layers):
                fresh[path] = more[..., j * H:(j + 1) * H].clone()
                _save({"extra": fresh[path]}, path)
        if extra:
            got["extra"] = torch.cat([fresh[path] if path in fresh else torch.load(path)["extra"] for path in layers],
                                     dim=-1)
        at = torch.as_tensor(rows)
        for key in data:
            data[key][at, :width] = got[key]
    data.update({"tokens": torch.as_tensor(corpus.tokens), "lengths": torch.as_tensor(corpus.lengths),
                 "plens": torch.as_tensor(corpus.plens), "prompt": torch.as_tensor(corpus.prompt),
                 "heldout": corpus.heldout, "temperature": corpus.temperature})
    return data


def prompt_split(prompt_of, seed: int):
    """(held-out rows, shuffled training rows, description): every continuation of 10 % of the prompts held out."""
    n_prompts = int(prompt_of.max()) + 1
    if n_prompts < 2:
        raise ValueError("--prompts: at least two prompts are needed (one is held out)")
    held = np.random.default_rng(seed).permutation(n_prompts)[:max(1, n_prompts // 10)]
    is_val = np.isin(prompt_of, held)
    val, train = np.flatnonzero(is_val), np.random.default_rng(seed).permutation(np.flatnonzero(~is_val))
    return val, train, f"every continuation of {held.size} of the {n_prompts} prompts"


def corpus_split(data: dict, folder, seed: int, heldout_sequences: int, train_tokens: int = 0):
    """(held-out rows, shuffled training rows, description) of a corpus: ``heldout_sequences`` sequences of its
    held-out shards (a seeded draw, the same for every training-set size), and its other sequences in shard order
    up to ``train_tokens`` continuation tokens (0: all), so that a learning curve's training sets are nested."""
    held = np.flatnonzero(data["heldout"])
    if held.size == 0:
        raise ValueError(f"--corpus {folder}: no held-out shard (shard i is held out when i % 10 == 9: the "
                         "corpus needs at least 10 shards)")
    val = np.sort(np.random.default_rng(seed).permutation(held)[:heldout_sequences])
    train = np.flatnonzero(~data["heldout"])
    if train_tokens:
        made = np.cumsum((data["lengths"] - data["plens"]).numpy()[train])
        train = train[:int(np.searchsorted(made, train_tokens)) + 1]
    return val, np.random.default_rng(seed).permutation(train), (
        f"{val.size} sequences of the corpus's held-out shards (every 10th; messages never trained on)")


def _log_normalisers(model, features, batch: int = 4096):
    """logsumexp of the target's full logit row at every feature (n, T)."""
    import torch

    W = model.get_output_embeddings().weight.detach()
    flat = features.reshape(-1, features.shape[-1])
    out = torch.empty(flat.shape[0])
    with torch.no_grad():
        for i in range(0, flat.shape[0], batch):
            out[i:i + batch] = torch.logsumexp(flat[i:i + batch].to(W.device) @ W.T, dim=-1).cpu()
    return out.reshape(features.shape[:-1])


def prompt_files(spec) -> tuple[Path, ...]:
    """Prompt files from a comma-separated list (bare names are looked up in ``llm_bridge/data``)."""
    names = comma_items(spec, "--prompts") if isinstance(spec, str) else [str(n) for n in spec]
    files = tuple(data_file(n) for n in names if n)
    for f in files:
        check_data_file(f, "--prompts: prompt file")
    if not files:
        raise ValueError("--prompts: expected at least one prompt file")
    return files


def corpus(target, *, target_name: str, samples: int, length: int, seed: int, prompts=PROMPTS,
           progress: bool = True) -> dict:
    """The cached training data: tokens (n, T), lengths, prompt lengths, features (n, T, H), log-normalisers
    (n, T), and each sequence's prompt (n,) (sequences are grouped by prompt, ``samples`` each)."""
    import torch

    from .distill import last_features, sample_corpus

    files = prompt_files(prompts)
    texts = [f.read_text() for f in files]
    text = texts[0] if len(texts) == 1 else texts  # one file: the key of the corpora cached before --prompts
    key = hashlib.sha256(json.dumps([target_name, target.vocab_size, samples, length, seed, text]).encode()).hexdigest()
    path = cache_dir() / "heads" / f"corpus-{key[:16]}.pt"
    if path.is_file():
        data = torch.load(path)
        data.setdefault("prompt", torch.arange(len(data["tokens"])) // samples)
        return data
    if progress:
        print(f"train_head: sampling {samples} continuations of {length} tokens per prompt (cached at {path})",
              file=sys.stderr)
    prompt_ids = encode_prompts(target.tokenizer, [m for f in files for m in read_prompts(f)])
    tokens, lengths, plens = sample_corpus(target, prompt_ids, samples, length, seed)
    features = last_features(target.model, tokens, lengths)
    data = {"tokens": torch.as_tensor(tokens), "lengths": torch.as_tensor(lengths), "plens": torch.as_tensor(plens),
            "features": features, "lse": _log_normalisers(target.model, features),
            "prompt": torch.arange(len(tokens)) // samples}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(data, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)
    return data
