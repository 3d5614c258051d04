"""``python -m llm_bridge.corpus``: a training corpus of the target's own text, built in resumable shards.

A feature-level draft head (EAGLE, Medusa) learns the target's next-token rows on the contexts a decode loop meets;
those are the target's own samples after user messages. Recipe (every number is a flag; the defaults made the
committed corpus under ``llm_bridge/data/corpus/<target>``):

1. Messages: the target writes them itself. Its chat template's opening (the system turn, then the user header) is
   continued at temperature 1 for at most ``--message-tokens`` tokens; a message is kept when it ends (the template's
   end-of-turn token, or EOS) within them, holds at least three words, is new in its shard and is none of the
   validation prompts. This samples the user turns the target saw in its own instruction tuning: varied topics,
   lengths and styles, none written here. Left alone, a 135M target writes mostly advice questions ("Can you help me
   ..."), and a head trained on their answers scores 0.37 on the validation prompts' contexts against 0.45 on the
   corpus's own (``benchmarks/bench_head_contexts.py``); ``--openers FILE`` starts each message with an opener drawn
   from a list of request kinds (``message_openers.txt``: stories, code, arithmetic, translation, letters, ...) and
   lets the target write the rest.
2. Continuations: each message as a chat turn, ``--samples`` continuations at temperature 1 and ``--greedy`` at
   temperature 0, ``--length`` tokens each (the validation loop's fixed length: past an end-of-turn token the text
   goes on, as it does there).
3. Shards of ``--shard-messages`` messages, each seeded by ``(--seed, shard index)`` and written when done
   (``shard-NNNNN.npz``); ``corpus.json`` lists them with the recipe. A rerun with the same recipe skips the shards
   present, so an interrupted build resumes, and a larger ``--tokens`` extends a corpus. Shard ``i`` is held out
   (never trained on) when ``i % HELDOUT_EVERY == HELDOUT_EVERY - 1``: held-out acceptance is on unseen messages.

Only token ids are stored (``uint16`` when the vocabulary allows, about 2 bytes a token); the target's features
are recomputed by teacher-forced passes where a head is trained (``llm_bridge.train_head --corpus``). The same
seed gives the same tokens on the same torch build and thread count (``corpus.json`` names both for each shard).
"""

from __future__ import annotations

import json
import lzma
import os
import sys
import time
import zipfile
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from otspec.checks import MissingFile, check_data_file, check_npz_members, check_size, file_problem
from otspec.clitools import ArgumentParser, check_folder_path, integer, one_line, path_argument
from otspec.errors import SizeLimitError

from .models import DEFAULT_TARGET, ModelNotFound
from .prompts import DATA_DIR, data_file, encode_prompts, read_prompts

__all__ = ["CORPUS_DIR", "Corpus", "CorpusRecipe", "HELDOUT_EVERY", "build_corpus", "check_trainable", "joined", "load_corpus",
           "main", "user_messages"]

#: Committed corpora, one folder per target.
CORPUS_DIR = DATA_DIR / "corpus"
#: Shard i is held out when i % HELDOUT_EVERY == HELDOUT_EVERY - 1.
HELDOUT_EVERY = 10
FORMAT = "otspec-corpus-1"
#: Largest values of a recipe, checked before the model loads (far above a laptop's corpus: a larger value is a typo).
LIMITS = {"tokens": 10**9, "shard_messages": 4096, "samples": 64, "greedy": 64, "length": 4096,
          "message_tokens": 1024}
#: Most shards of a corpus (a 10^9-token corpus has 55,000 of the default recipe), and most entries of one shard's
#: array (a shard of the default recipe holds about 20,000 tokens), read from its header before it is loaded.
MAX_SHARDS = 10**6
MAX_SHARD_ENTRIES = 2**24
#: Largest corpus.json read (the default corpus's index is about 5 KB).
MAX_INDEX_BYTES = 2**24
#: Smallest values (a user message of fewer tokens is rarely finished: the target would write none in its attempts).
MINIMA = {"greedy": 0, "message_tokens": 16}
_SENTINEL = "\x00MESSAGE\x00"


@dataclass(frozen=True)
class CorpusRecipe:
    """What ``python -m llm_bridge.corpus`` builds (its flags), checked when made. ``tokens`` (the continuation
    tokens wanted) only decides how many shards; every other field must match a corpus being extended."""

    target: str = DEFAULT_TARGET
    tokens: int = 1_000_000
    shard_messages: int = 24
    samples: int = 2
    greedy: int = 1
    length: int = 256
    message_tokens: int = 64
    seed: int = 0
    openers: str = ""

    def __post_init__(self):
        for name, limit in LIMITS.items():
            check_size(getattr(self, name), "--" + name.replace("_", "-"), minimum=MINIMA.get(name, 1),
                       limit=limit, limit_name="the corpus's limit")
        check_size(self.seed, "--seed", minimum=0)
        if not isinstance(self.target, str) or not self.target:
            raise ValueError(f"--target: expected a model name, got {self.target!r}")
        if not isinstance(self.openers, str):
            raise ValueError(f"--openers: expected a file name, got {self.openers!r}")
        if self.openers:
            self.opener_lines()  # a missing or empty file is refused before the model loads

    def opener_lines(self) -> list[str]:
        """The openers file's lines (``# comments`` and blank lines skipped; a bare name is looked up in
        ``llm_bridge/data``), or ``[]`` without one."""
        if not self.openers:
            return []
        path = data_file(self.openers)
        try:
            return read_prompts(path)
        except (ValueError, FileNotFoundError) as err:  # UnicodeDecodeError too: named as this flag's file
            raise ValueError(f"--openers {path}: {str(err).removeprefix('prompt file').lstrip(': ')}") from None

    @property
    def shard_tokens(self) -> int:
        """Continuation tokens of one shard."""
        return self.shard_messages * (self.samples + self.greedy) * self.length

    @property
    def shards(self) -> int:
        """Shards needed for ``tokens``."""
        return -(-self.tokens // self.shard_tokens)

    def identity(self) -> dict:
        """The fields a corpus being extended must share (``openers`` only when given: a corpus made before it existed
        keeps its identity)."""
        return {k: v for k, v in asdict(self).items() if k != "tokens" and not (k == "openers" and not v)}


def _template_parts(tokenizer) -> tuple[list[int], set[int]]:
    """The ids that open a user message (system turn and user header) and the ids that may end one."""
    ends = {tokenizer.eos_token_id} - {None}
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": _SENTINEL}], tokenize=False,
                                             add_generation_prompt=True)
        before, after = text.split(_SENTINEL)
        closing = tokenizer(after, add_special_tokens=False)["input_ids"]
        ends |= set(closing[:1])
        return list(tokenizer(before, add_special_tokens=False)["input_ids"]), ends
    bos = getattr(tokenizer, "bos_token_id", None)
    return ([bos] if bos is not None else []), ends


def user_messages(target, n: int, *, seed: int, max_tokens: int = 64, exclude=(), attempts: int = 8,
                  openers=()) -> list[str]:
    """``n`` user messages written by the target (recipe item 1), or fewer after ``attempts`` batches of ``2n``.
    With ``openers`` each message starts with one of them, drawn at random (seeded), and the target writes the
    rest (at least two more words)."""
    from .loop import plain_generate

    opening, ends = _template_parts(target.tokenizer)
    if not opening:
        raise ValueError("the target's tokenizer has no chat template and no BOS token to open a message with")
    seen = {m.strip().casefold() for m in exclude}
    starts = [target.tokenizer(o, add_special_tokens=False)["input_ids"] for o in openers]
    pick = np.random.default_rng([seed, 7])
    out = []
    for attempt in range(attempts):
        chosen = pick.integers(len(starts), size=2 * n) if starts else np.full(2 * n, -1)
        heads = [starts[c] if c >= 0 else [] for c in chosen]
        run = plain_generate(target, [opening + h for h in heads], max_tokens, seed=seed * 1000 + attempt,
                             progress=False)
        for head, toks in zip(heads, run.tokens, strict=True):
            toks = [int(t) for t in toks]
            stop = next((i for i, t in enumerate(toks) if t in ends), None)
            if stop is None:
                continue
            text = target.tokenizer.decode(head + toks[:stop], skip_special_tokens=True).strip()
            words = len(target.tokenizer.decode(head, skip_special_tokens=True).split()) + 2 if head else 3
            if len(text.split()) >= words and text.casefold() not in seen:
                seen.add(text.casefold())
                out.append(text)
                if len(out) == n:
                    return out
    return out


def _shard(target, recipe: CorpusRecipe, index: int, exclude) -> dict:
    """One shard's arrays (module docstring, items 1 and 2)."""
    from .loop import plain_generate
    from .sampling import Sampling

    seed = int(np.random.SeedSequence([recipe.seed, index]).generate_state(1)[0])
    messages = user_messages(target, recipe.shard_messages, seed=seed, max_tokens=recipe.message_tokens,
                             exclude=exclude, openers=recipe.opener_lines())
    if not messages:
        raise ValueError(f"shard {index}: the target wrote no usable user message in 8 attempts of at most "
                         f"--message-tokens {recipe.message_tokens} tokens; allow longer messages")
    prompts = encode_prompts(target.tokenizer, messages)
    seqs, plens, temps, which = [], [], [], []
    for temperature, count in ((1.0, recipe.samples), (0.0, recipe.greedy)):
        if count == 0:
            continue
        jobs = [m for m in range(len(prompts)) for _ in range(count)]
        run = plain_generate(target, [prompts[m] for m in jobs], recipe.length, sampling=Sampling(temperature),
                             seed=seed + 1 + int(temperature == 0), progress=False)
        for m, toks in zip(jobs, run.tokens, strict=True):
            seqs.append(np.concatenate([prompts[m], np.asarray(toks, dtype=np.int64)]))
            plens.append(len(prompts[m]))
            temps.append(temperature)
            which.append(m)
    dtype = np.uint16 if target.vocab_size <= 2**16 else np.uint32
    return {"format": np.array(FORMAT), "vocab_size": np.array(target.vocab_size),
            "tokens": np.concatenate(seqs).astype(dtype),
            "offsets": np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64),
            "prompt_lengths": np.array(plens, dtype=np.int32), "temperature": np.array(temps, dtype=np.float32),
            "message": np.array(which, dtype=np.int32), "messages": np.array(messages)}


#: The keys a corpus index and its shard entries hold (what build_corpus writes, and older indexes' made_with).
_INDEX_KEYS = {"format", "recipe", "shards", "tokens", "vocab_size", "made_with"}
_SHARD_KEYS = {"index", "file", "messages", "sequences", "tokens", "seconds", "torch", "threads"}


def _read_index(folder: Path) -> dict | None:
    """The checked ``corpus.json`` of ``folder``, or None when there is none (a ``ValueError`` naming it when it is
    not a regular file, not JSON, or not an index of this format)."""
    path = folder / "corpus.json"
    if file_problem(path) == "does not exist":
        return None
    check_data_file(path, "corpus index")  # a pipe named corpus.json would block the read, then the write
    if path.stat().st_size > MAX_INDEX_BYTES:  # an index lists shards: a few KB (a sparse 12 GB file is no index)
        raise ValueError(f"{path}: {path.stat().st_size:,} bytes, above MAX_INDEX_BYTES = {MAX_INDEX_BYTES:,}: not "
                         "a corpus index")
    try:
        index = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise ValueError(f"{path}: not JSON ({type(err).__name__}: {err})") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise ValueError(f"{path}: not an otspec corpus index (format {FORMAT!r})")

    def count(x, low=0):
        return isinstance(x, int) and not isinstance(x, bool) and x >= low

    shards, recipe = index.get("shards"), index.get("recipe")
    if (not isinstance(recipe, dict) or not count(recipe.get("shard_messages"), 1)
            or recipe["shard_messages"] > LIMITS["shard_messages"] or not isinstance(shards, list)
            or not all(isinstance(e, dict) and count(e.get("index")) and e["index"] < MAX_SHARDS
                       and count(e.get("tokens")) and isinstance(e.get("file"), str)
                       and e["file"] == Path(e["file"]).name != "" for e in shards)
            or len({e["index"] for e in shards}) != len(shards) or len({e["file"] for e in shards}) != len(shards)
            or ("vocab_size" in index and not count(index["vocab_size"], 1))
            or (shards and "vocab_size" not in index)):
        raise ValueError(f"{path}: a damaged corpus index (expected a recipe with its shard_messages (at most "
                         f"{LIMITS['shard_messages']:,}), a list of "
                         f"shards each with its own index below {MAX_SHARDS:,}, its own file name in this folder and a "
                         "token count, and a vocabulary size >= 1)")
    try:  # the recipe's own limits, as its flags are checked (its openers file is not read: a name is enough)
        CorpusRecipe(**{**recipe, "openers": ""})
        if not isinstance(recipe.get("openers", ""), str):
            raise ValueError(f"--openers: expected a file name, got {recipe['openers']!r}")
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path}: a damaged corpus index (its recipe: {one_line(err).removeprefix('--')})") from None
    unknown = sorted(set(index) - _INDEX_KEYS) + sorted({k for s in shards for k in s} - _SHARD_KEYS)
    if unknown:  # a typo or a foreign field is refused, as a source file's is
        raise ValueError(f"{path}: a damaged corpus index (keys it does not have: {unknown})")
    if "made_with" in index and not isinstance(index["made_with"], dict):
        raise ValueError(f"{path}: a damaged corpus index (made_with is {index['made_with']!r}; expected an object)")
    numbers = [(k, s[k]) for s in shards for k in ("messages", "sequences", "seconds", "threads") if k in s]
    bad = next(((k, v) for k, v in numbers if isinstance(v, bool) or not isinstance(v, int | float) or v != v or v < 0),
               None)
    if bad is not None:
        raise ValueError(f"{path}: a damaged corpus index ({bad[0]} is {bad[1]!r}; expected a number >= 0)")
    length, most = recipe.get("length", CorpusRecipe.length), recipe["shard_messages"]
    odd = next((s for s in shards if ("sequences" in s and s["tokens"] != s["sequences"] * length)
                or s.get("messages", 0) > most), None)
    if odd is not None:  # each sequence continues its message by recipe.length tokens, at most shard_messages a shard
        raise ValueError(f"{path}: a damaged corpus index (shard {odd['index']} lists {odd.get('sequences')} sequences "
                         f"of {length} tokens, {odd['tokens']:,} tokens and {odd.get('messages')} messages; the recipe "
                         f"makes tokens = sequences x {length} and at most {most} messages)")
    if "tokens" in index and index["tokens"] != sum(s["tokens"] for s in shards):
        raise ValueError(f"{path}: a damaged corpus index (it says {index['tokens']!r} tokens; its shards list "
                         f"{sum(s['tokens'] for s in shards):,})")
    return index


def build_corpus(recipe: CorpusRecipe, out=None, *, progress: bool = True, device: str = "cpu") -> dict:
    """Build (or resume, or extend) the corpus of ``recipe`` in ``out`` (default ``CORPUS_DIR / target``); returns
    its ``corpus.json`` index."""
    import torch

    from otspec.progress import tqdm

    from .models import load_model

    folder = Path(out) if out is not None else CORPUS_DIR / recipe.target
    index = _read_index(folder)
    if index is not None and index["recipe"] != recipe.identity():
        raise ValueError(f"--out: {folder} holds a corpus of another recipe ({index['recipe']}); use its flags "
                         "to extend it, or another --out")
    index = index or {"format": FORMAT, "recipe": recipe.identity(), "shards": []}
    for s in index["shards"]:  # a listed shard that is there but not a file (a pipe would block) is refused first
        if file_problem(folder / s["file"]) != "does not exist":
            check_data_file(folder / s["file"], "corpus shard (listed in corpus.json)")
    have = {s["index"] for s in index["shards"] if (folder / s["file"]).is_file()}
    todo = [i for i in range(recipe.shards) if i not in have]
    if not todo:
        return index
    target = load_model(recipe.target, device=device, dtype="float32")
    exclude = read_prompts(DATA_DIR / "validate_prompts.txt")
    folder.mkdir(parents=True, exist_ok=True)
    done = sum(s["tokens"] for s in index["shards"] if s["index"] in have)
    bar = tqdm(total=recipe.shards * recipe.shard_tokens, initial=min(done, recipe.shards * recipe.shard_tokens),
               desc="corpus", unit="tok", disable=not progress)
    for i in todo:
        t0 = time.perf_counter()
        arrays = _shard(target, recipe, i, exclude)
        name = f"shard-{i:05d}.npz"
        tmp = folder / (name + ".tmp")
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)
        tmp.replace(folder / name)
        generated = int(len(arrays["temperature"]) * recipe.length)
        index["shards"] = [s for s in index["shards"] if s["index"] != i] + [
            {"index": i, "file": name, "messages": int(len(arrays["messages"])),
             "sequences": int(len(arrays["temperature"])), "tokens": generated,
             "seconds": round(time.perf_counter() - t0, 1), "torch": torch.__version__,
             "threads": torch.get_num_threads()}]
        index["shards"].sort(key=lambda s: s["index"])
        index["tokens"] = sum(s["tokens"] for s in index["shards"])
        index["vocab_size"] = int(target.vocab_size)
        (folder / "corpus.json.tmp").write_text(json.dumps(index, indent=1) + "\n")
        (folder / "corpus.json.tmp").replace(folder / "corpus.json")  # a reader never sees half an index
        bar.update(generated)
    bar.close()
    return index


@dataclass
class Corpus:
    """A loaded corpus: ``tokens`` (n, T) int64 right-padded, ``lengths``, ``plens`` (prompt lengths), ``prompt``
    (a global message id), ``temperature``, ``shard`` and ``heldout`` (n,) per sequence; ``vocab_size``; ``files``:
    the file of each shard loaded, by shard index."""

    tokens: np.ndarray
    lengths: np.ndarray
    plens: np.ndarray
    prompt: np.ndarray
    temperature: np.ndarray
    shard: np.ndarray
    vocab_size: int
    files: dict

    @property
    def heldout(self) -> np.ndarray:
        return self.shard % HELDOUT_EVERY == HELDOUT_EVERY - 1

    def __len__(self) -> int:
        return len(self.lengths)


def _check_shard(path: Path, z, vocab_size: int) -> None:
    integral = ("offsets", "tokens", "prompt_lengths", "message")
    if (any(z[k].ndim != 1 or z[k].dtype.kind not in "iu" for k in integral) or z["vocab_size"].shape != ()
            or z["vocab_size"].dtype.kind not in "iu" or z["temperature"].dtype.kind != "f"
            or z["temperature"].shape != z["prompt_lengths"].shape):
        raise ValueError(f"{path}: a damaged shard (integer token ids, offsets, prompt lengths and message ids, one "
                         "float temperature per sequence, one integer vocabulary size)")
    for k in integral:  # signed from here: an unsigned offset above 2**63 turns negative and is refused, not wrapped
        z[k] = z[k].astype(np.int64)
    if str(z["format"]) != FORMAT or int(z["vocab_size"]) != vocab_size:
        raise ValueError(f"{path}: not a shard of this corpus (format {FORMAT!r}, vocabulary {vocab_size})")
    if (not np.all(np.isfinite(z["temperature"])) or np.any(z["temperature"] < 0) or np.any(z["message"] < 0)
            or (len(z["tokens"]) and int(z["tokens"].min()) < 0)):
        raise ValueError(f"{path}: a damaged shard (a negative or non-finite temperature, message id or token id)")
    off, n = z["offsets"], len(z["prompt_lengths"])
    if len(off) != n + 1 or off[0] != 0 or off[-1] != len(z["tokens"]) or np.any(np.diff(off) <= 0):
        raise ValueError(f"{path}: offsets do not delimit its {n} sequences")
    if len(z["tokens"]) and int(z["tokens"].max()) >= vocab_size:
        raise ValueError(f"{path}: a token id is outside the vocabulary of {vocab_size}")
    if np.any(z["prompt_lengths"] < 1) or np.any(z["prompt_lengths"] >= np.diff(off)):
        raise ValueError(f"{path}: a prompt length is not inside its sequence")


def load_corpus(folder=None, *, target: str = DEFAULT_TARGET, max_tokens: int | None = None) -> Corpus:
    """The corpus in ``folder`` (default ``CORPUS_DIR / target``), checked shard by shard; ``max_tokens`` keeps the
    first shards whose continuation tokens reach it (a learning curve's smaller corpora are prefixes). A list or
    tuple of folders is their union (:func:`joined`)."""
    if isinstance(folder, list | tuple):
        if max_tokens is not None:
            raise ValueError("max_tokens: a prefix of one corpus; give one folder")
        seen = [os.path.realpath(os.fspath(f)) if isinstance(f, str | os.PathLike) else f for f in folder]
        if len(set(map(str, seen))) < len(seen):  # every sequence would be trained on twice
            raise ValueError(f"--corpus: a corpus folder given twice ({', '.join(map(str, folder))})")
        return joined([load_corpus(f, target=target) for f in folder])
    if max_tokens is not None:
        check_size(max_tokens, "max_tokens")
    if folder is not None and not isinstance(folder, str | os.PathLike):
        raise TypeError(f"load_corpus: folder: expected a path, got {folder!r} ({type(folder).__name__})")
    try:
        folder = Path(folder) if folder is not None else CORPUS_DIR / target
    except TypeError as err:  # a PathLike whose __fspath__ gives no text
        raise TypeError(f"load_corpus: folder: not a path ({err})") from None
    index = _read_index(folder)
    if index is None:
        raise MissingFile(f"{folder} holds no corpus.json; build one with python -m llm_bridge.corpus")
    vocab, rows, total, files = int(index.get("vocab_size", 1)), [], 0, {}
    for s in index["shards"]:
        if max_tokens is not None and total >= max_tokens:
            break
        path = folder / s["file"]
        check_data_file(path, "corpus shard (listed in corpus.json)")
        try:
            check_npz_members(path, MAX_SHARD_ENTRIES, "corpus shard", "MAX_SHARD_ENTRIES")
            with np.load(path, allow_pickle=False) as arrays:
                z = {key: arrays[key] for key in ("format", "vocab_size", "offsets", "tokens", "prompt_lengths",
                                                  "message", "temperature")}
        except SizeLimitError:
            raise
        except (OSError, KeyError, TypeError, ValueError, EOFError, zipfile.BadZipFile, NotImplementedError,
                RuntimeError, zlib.error, lzma.LZMAError) as err:  # a method or an encryption zip lacks; a damaged stream
            raise ValueError(f"{path}: not a corpus shard ({type(err).__name__}: {err})") from None
        _check_shard(path, z, vocab)
        off = z["offsets"]
        if int((np.diff(off) - z["prompt_lengths"]).sum()) != s["tokens"]:  # max_tokens counts what the index says
            raise ValueError(f"{path}: holds {int((np.diff(off) - z['prompt_lengths']).sum()):,} continuation tokens; "
                             f"corpus.json says {s['tokens']:,}")
        toks = z["tokens"].astype(np.int64)
        for j in range(len(off) - 1):
            rows.append((toks[off[j]:off[j + 1]], int(z["prompt_lengths"][j]),
                         s["index"] * index["recipe"]["shard_messages"] + int(z["message"][j]),
                         float(z["temperature"][j]), s["index"]))
        total += s["tokens"]
        files[s["index"]] = path
    lengths = np.array([len(r[0]) for r in rows])
    if len(rows) * int(lengths.max(initial=0)) > MAX_SHARD_ENTRIES * 16:  # padded to the longest: refused first
        raise SizeLimitError(f"{folder}: {len(rows):,} sequences padded to the longest ({int(lengths.max()):,} tokens) "
                             f"exceed {MAX_SHARD_ENTRIES * 16:,} entries (16 x MAX_SHARD_ENTRIES)")
    tokens = np.zeros((len(rows), int(lengths.max(initial=0))), dtype=np.int64)
    for b, r in enumerate(rows):
        tokens[b, :len(r[0])] = r[0]
    return Corpus(tokens, lengths, np.array([r[1] for r in rows]), np.array([r[2] for r in rows]),
                  np.array([r[3] for r in rows]), np.array([r[4] for r in rows]), vocab, files)


def joined(corpora: list) -> Corpus:
    """Corpora of one vocabulary as one: corpus j's shard i becomes shard j·MAX_SHARDS + i (each keeps its held-out
    shards, since MAX_SHARDS is a multiple of HELDOUT_EVERY) and its messages are numbered after the previous ones'."""
    if not corpora:
        raise ValueError("--corpus: no corpus folder given")
    if len({c.vocab_size for c in corpora}) > 1:
        raise ValueError(f"--corpus: the corpora were made for different vocabularies "
                         f"({sorted({c.vocab_size for c in corpora})})")
    width = max(c.tokens.shape[1] for c in corpora)
    tokens = np.concatenate([np.pad(c.tokens, ((0, 0), (0, width - c.tokens.shape[1]))) for c in corpora])
    message_base = np.cumsum([0] + [int(c.prompt.max(initial=-1)) + 1 for c in corpora[:-1]])
    return Corpus(tokens, np.concatenate([c.lengths for c in corpora]), np.concatenate([c.plens for c in corpora]),
                  np.concatenate([c.prompt + base for c, base in zip(corpora, message_base, strict=True)]),
                  np.concatenate([c.temperature for c in corpora]),
                  np.concatenate([c.shard + j * MAX_SHARDS for j, c in enumerate(corpora)]), corpora[0].vocab_size,
                  {j * MAX_SHARDS + i: path for j, c in enumerate(corpora) for i, path in c.files.items()})


def check_trainable(corpus: Corpus, name: str) -> None:
    """Refuse (a ``ValueError`` naming ``name``) a corpus a head cannot be trained and scored on: it needs a
    training shard and a held-out one (shard i is held out when i % HELDOUT_EVERY == HELDOUT_EVERY - 1)."""
    held = corpus.heldout
    if not held.any() or held.all():
        raise ValueError(f"{name}: no {'held-out' if not held.any() else 'training'} shard (shard i is "
                         f"held out when i % {HELDOUT_EVERY} == {HELDOUT_EVERY - 1}: the corpus needs at least "
                         f"{HELDOUT_EVERY} shards, and one of them not held out)")


def main(argv=None) -> int:
    ap = ArgumentParser(prog="python -m llm_bridge.corpus", description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=DEFAULT_TARGET)
    ap.add_argument("--tokens", type=integer, default=1_000_000, help="continuation tokens wanted (shards until reached)")
    ap.add_argument("--shard-messages", type=integer, default=24, help="user messages per shard")
    ap.add_argument("--samples", type=integer, default=2, help="continuations per message at temperature 1")
    ap.add_argument("--greedy", type=integer, default=1, help="continuations per message at temperature 0")
    ap.add_argument("--length", type=integer, default=256, help="tokens per continuation")
    ap.add_argument("--message-tokens", type=integer, default=64, help="longest user message the target writes")
    ap.add_argument("--seed", type=integer, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=path_argument, default=None, help="corpus folder (default: llm_bridge/data/corpus/"
                                                                    "<target>)")
    ap.add_argument("--openers", type=path_argument, default=None, help="a file of message openers, one per line (bare names: "
                    "llm_bridge/data, e.g. message_openers.txt); each message starts with one and the target writes "
                    "the rest (default: none, the target writes whole messages)")
    args = ap.parse_args(argv)
    try:
        recipe = CorpusRecipe(target=args.target, tokens=args.tokens, shard_messages=args.shard_messages,
                              samples=args.samples, greedy=args.greedy, length=args.length,
                              message_tokens=args.message_tokens, seed=args.seed,
                              openers="" if args.openers is None else str(args.openers))
        check_folder_path(args.out if args.out is not None else CORPUS_DIR / recipe.target, "--out")  # made when written
        index = build_corpus(recipe, args.out, device=args.device)
    except (ModelNotFound, ImportError, ValueError, FileNotFoundError) as err:
        print(f"python -m llm_bridge.corpus: {one_line(err)}", file=sys.stderr)
        return 2
    print(json.dumps({k: v for k, v in index.items() if k != "shards"} | {"shards": len(index["shards"])}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
