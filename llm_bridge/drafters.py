"""Drafters for a target model: a smaller LM with its own KV cache, or an n-gram lookup.

Every drafter is an :class:`otspec.engine.session.Drafter`: it opens a
:class:`~otspec.engine.session.Session` over a batch of sequences (:mod:`llm_bridge.sessions`), the
protocol the decode loops of :mod:`otspec.engine.loop` drive. Names understood by
:func:`make_drafter`:

* ``"distilled"`` — the shipped draft made by ``python -m llm_bridge.distill``: the target's
  first layers, retrained by distillation, on the target's own embedding and tied head;
* ``"layers:K"`` — the target's first K layers untrained (self-speculation, a baseline);
* ``"int8"`` — the target with every linear layer in int8, activations quantised per token so that a token's
  row depends on its context alone (:mod:`llm_bridge.int8`; CPU only);
* ``"eagle"`` / ``"medusa"`` — the shipped feature-level heads made by ``python -m llm_bridge.train_head``
  (:mod:`llm_bridge.heads`): they read the target's own hidden states, over a reduced vocabulary;
  ``"head:FOLDER"`` loads another trained head;
* ``"ngram"`` / ``"ngram:N"`` — prompt lookup: the token that followed the most recent earlier
  occurrence of the last N (then N−1, …, 1) tokens; a deterministic draft (a one-hot row) at
  negligible cost, and no draft where nothing matches;
* anything else — a model loaded by :func:`llm_bridge.models.load_model`, whose tokenizer must
  agree with the target's.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from otspec.engine.session import Drafter

from .int8 import dequantize_rows, int8_model, quantize_rows
from .models import (
    DEFAULT_TARGET,
    LoadedModel,
    check_model_spec,
    check_vocabularies,
    layer_count,
    load_model,
    vocab_count,
)
from .sampling import DEFAULT_SAMPLING
from .sessions import ModelSession, NGramSession

__all__ = ["DISTILLED_DIR", "DRAFTERS", "ModelDrafter", "NGramDrafter", "Pair", "check_head_files", "dequantize_rows",
           "load_pair",
           "drafter_names", "make_drafter", "quantize_rows", "register_drafter", "truncated_target", "unregister_drafter"]

#: Where ``python -m llm_bridge.distill`` writes the shipped draft (config, weights, training log).
DISTILLED_DIR = Path(__file__).parent / "weights" / "distilled"


@dataclass
class Pair:
    """A target model and a drafter on the same device."""

    target: LoadedModel
    drafter: Any

    @property
    def tokenizer(self):
        return self.target.tokenizer

    def describe(self) -> dict:
        """The JSON ``model_pair`` object."""
        return {"target": self.target.name, "draft": self.drafter.name, "device": self.target.device,
                "dtype": str(self.target.dtype).removeprefix("torch.")}


class ModelDrafter(Drafter):
    """A draft language model; its session is a :class:`~llm_bridge.sessions.ModelSession`."""

    def __init__(self, loaded: LoadedModel, name: str | None = None):
        self.loaded, self.name = loaded, name or loaded.name
        self.model = loaded.model

    def session(self, batch: int, sampling=None, *, hidden: bool = False, cache: str = "auto",
                max_length: int | None = None, timer=None, host_rows: bool = True) -> ModelSession:
        """A KV-cache session over ``batch`` sequences (``cache``: a kind of :func:`~llm_bridge.cache.make_cache`)."""
        return ModelSession(self.model, batch, DEFAULT_SAMPLING if sampling is None else sampling, hidden=hidden,
                            cache=cache, max_length=max_length, timer=timer, name="draft", host_rows=host_rows)

    def replays(self, pair, prompts, continuations, longest: int, **options):
        """Both models' rows logged along the plain paths (:func:`llm_bridge.replays.model_replays`)."""
        from .replays import model_replays

        return model_replays(pair, prompts, continuations, longest, **options)

    def source(self, target_model, prompt, sampling=None):
        """The draft model's rows after ``prompt``, from full passes without a cache."""
        from .sources import ModelSource

        return ModelSource(self.model, prompt, DEFAULT_SAMPLING if sampling is None else sampling)


class NGramDrafter(Drafter):
    """Prompt lookup decoding: propose the continuation of the last ``n``-gram's latest earlier occurrence."""

    deterministic = True
    drafts_trees = False
    has_hidden_states = False

    def __init__(self, vocab_size: int, n: int = 3):
        if int(n) != n or n < 1:
            raise ValueError(f"ngram: expected n >= 1, got {n!r}")
        self.vocab_size, self.n, self.name = int(vocab_size), int(n), f"ngram:{n}"

    def session(self, batch: int, sampling=None, *, hidden: bool = False, cache: str = "auto",
                max_length: int | None = None, timer=None, host_rows: bool = True) -> NGramSession:
        """A lookup session over ``batch`` sequences (nothing to cache, sample or time: those arguments are moot)."""
        self.check_plan(hidden=hidden)
        if not host_rows:
            raise ValueError("the n-gram drafter's rows live on the host (host_rows=True)")
        return NGramSession(self, batch)

    def replays(self, pair, prompts, continuations, longest: int, **options):
        """Its own chains at every block start (:func:`llm_bridge.replays.lookup_replays`)."""
        from .replays import lookup_replays

        return lookup_replays(pair, prompts, continuations, longest, **options)

    def propose(self, history: np.ndarray) -> int:
        """The proposed next token after ``history`` (1-D ids), or -1 when no suffix recurs."""
        for k in range(min(self.n, history.size - 1), 0, -1):
            suffix = history[-k:]
            windows = np.lib.stride_tricks.sliding_window_view(history[:-1], k)  # every k-gram with a successor
            hits = np.flatnonzero((windows == suffix).all(axis=1))
            if hits.size:
                return int(history[hits[-1] + k])
        return -1


def truncated_target(target: LoadedModel, layers: int):
    """A copy of the target keeping its first ``layers`` decoder layers (embedding, final norm and head shared)."""
    model = target.model
    n = model.config.num_hidden_layers
    if int(layers) != layers or not 1 <= layers <= n:
        raise ValueError(f"layers:K needs 1 <= K <= {n} (the target's layers), got {layers!r}")
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = int(layers)
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:layers]
    draft = type(model)(config).to(device=target.device, dtype=target.dtype)
    state = {k: v for k, v in model.state_dict().items()
             if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers}
    draft.load_state_dict(state, strict=False)
    return draft.eval()


def _distilled(target: LoadedModel, folder: Path = DISTILLED_DIR):
    """The shipped distilled draft: the target's architecture with the trained layers of ``folder``."""
    from safetensors.torch import load_file

    meta_path = folder / "draft.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"no distilled draft at {folder} (run: python -m llm_bridge.distill)")
    meta = json.loads(meta_path.read_text())
    if meta["target_vocab_size"] != target.vocab_size:
        raise ValueError(f"the distilled draft was made for a vocabulary of {meta['target_vocab_size']:,}; "
                         f"this target has {target.vocab_size:,}")
    draft = truncated_target(target, meta["layers"])
    trained = {k: v.to(target.dtype) for k, v in dequantize_rows(load_file(folder / "draft.safetensors")).items()}
    missing = set(trained) - set(draft.state_dict())
    if missing:
        raise ValueError(f"{folder}: weights {sorted(missing)[:3]} do not fit a {meta['layers']}-layer draft")
    draft.load_state_dict(trained, strict=False)
    return draft.to(target.device).eval()


#: Drafter makers by name: ``name`` or ``name:ARGUMENT`` -> ``make(argument or None, target)`` (:func:`register_drafter`).
DRAFTERS: dict = {}


def register_drafter(name: str, *, argument: str | None = None, optional: bool = False, description: str = "",
                     check=None, check_target=None):
    """File a drafter maker under ``name`` (a decorator of ``make(argument, target) -> Drafter``): ``make_drafter``
    then understands ``name`` and, with ``argument`` (what it is, for messages), ``name:ARGUMENT`` (``optional``: the
    argument may be left out, and ``make`` gets ``None``); ``check(argument)``, when given, refuses a bad argument
    before any model loads (:func:`check_drafter_spec`), and ``check_target(argument, target_spec)`` one that does not
    fit the target the pair names. A new drafter is its class and one decorated maker."""
    if not name.isidentifier() or name in DRAFTERS:
        raise ValueError(f"register_drafter: {name!r} is not an identifier or is taken")

    def decorate(make):
        DRAFTERS[name] = {"make": make, "argument": argument, "optional": optional, "description": description,
                          "check": check, "check_target": check_target}
        return make

    return decorate


def unregister_drafter(name: str) -> None:
    """Remove a drafter maker (a plugin's or a test's)."""
    if DRAFTERS.pop(name, None) is None:
        raise ValueError(f"unregister_drafter: no drafter {name!r}; registered: {sorted(DRAFTERS)}")


def _positive(what: str):
    def check(argument):
        if argument is not None and not (argument.isascii() and argument.isdigit() and int(argument) >= 1):
            raise ValueError(f"{what}: expected an integer >= 1, got {argument!r}")
    return check


def _folder(argument):
    if not Path(argument).is_dir():
        raise ValueError(f"head:{argument}: no such folder (a head made by python -m llm_bridge.train_head)")
    check_head_files(Path(argument), f"head:{argument}")  # its two files read as far as they can be without a model


def check_head_files(folder: Path, name: str) -> None:
    """Refuse (a ``ValueError`` naming ``name``), before any model loads, a head folder whose ``drafter.json`` is not a
    head's record or whose ``drafter.safetensors`` is missing, empty, truncated or not safetensors."""
    from safetensors import safe_open

    from otspec.checks import file_problem

    from .heads import HEAD_KINDS

    for file in ("drafter.json", "drafter.safetensors"):
        problem = file_problem(folder / file)
        if problem is not None:
            raise ValueError(f"{name}: {file} there {problem} (a head made by python -m llm_bridge.train_head holds "
                             "drafter.json and drafter.safetensors)")
    meta = _head_record(folder, name)
    V = meta.get("target_vocab_size") if isinstance(meta, dict) else None
    if not isinstance(meta, dict) or meta.get("kind") not in HEAD_KINDS or isinstance(V, bool) or \
            not isinstance(V, int) or V < 1 or not isinstance(meta.get("recipe", {}), dict):
        raise ValueError(f"{name}: drafter.json is not a head's record (a kind among {HEAD_KINDS}, an integer "
                         "target_vocab_size, a recipe object if any)")
    unknown = sorted(set(meta) - HEAD_RECORD_KEYS)
    vocab = meta.get("recipe", {}).get("vocab", 0)
    if unknown or isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 0:
        raise ValueError(f"{name}: drafter.json is damaged ({f'keys it does not have: {unknown}' if unknown else ''}"
                         f"{'' if unknown else f'recipe.vocab {vocab!r}, expected an integer >= 0'})")
    try:
        with safe_open(folder / "drafter.safetensors", "pt") as weights:
            keys = list(weights.keys())
    except Exception as err:  # safetensors' own error type: a truncated or foreign file
        raise ValueError(f"{name}: drafter.safetensors cannot be read ({str(err).splitlines()[0][:120]})") from None
    if "vocab" not in keys:
        raise ValueError(f"{name}: drafter.safetensors holds no 'vocab' (not a head's weights)")
    prefix = {"eagle": "body.", "medusa": "blocks."}.get(meta["kind"])
    if prefix is not None and not any(k.startswith(prefix) for k in keys):  # another kind's weights
        raise ValueError(f"{name}: drafter.json says kind {meta['kind']!r}, but the weights are not such a head's")


def _head_record(folder: Path, name: str):
    """A head folder's ``drafter.json`` as JSON (a byte-order mark let by; a key given twice refused)."""
    from otspec.checks import unique_keys

    try:
        return json.loads((folder / "drafter.json").read_text(encoding="utf-8-sig"), object_pairs_hook=unique_keys)
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise ValueError(f"{name}: drafter.json is not JSON ({type(err).__name__}: {str(err)[:80]})") from None


#: The fields a head's drafter.json holds (train_head's record and save_head's sizes).
HEAD_RECORD_KEYS = frozenset({"target", "recipe", "heldout_before", "recipe_fields", "kind", "vocab_size",
                              "target_vocab_size", "medusa_heads", "fuse_layers", "hydra", "head_layers",
                              "trained_parameters", "file_bytes", "heldout", "seconds"})


def _head_target(argument, target_spec) -> None:
    """A head made for another target: its vocabulary, or the default target's name, differs."""
    if argument is None:
        return
    meta = _head_record(Path(argument), f"head:{argument}")  # checked by _folder first
    size = vocab_count(target_spec)
    made_for = meta.get("target")
    if (size is not None and meta["target_vocab_size"] != size) or (
            target_spec == DEFAULT_TARGET and isinstance(made_for, str) and made_for != DEFAULT_TARGET):
        raise ValueError(f"head:{argument}: made for the target {made_for!r} (vocabulary "
                         f"{meta['target_vocab_size']:,}); this target is {target_spec!r}"
                         + (f" ({size:,} tokens)" if size is not None else ""))


@register_drafter("ngram", argument="N, the longest n-gram looked up (default 3)", optional=True,
                  description="prompt lookup", check=_positive("ngram:N"))
def _ngram(argument, target: LoadedModel):
    return NGramDrafter(target.vocab_size, 3 if argument is None else int(argument))


def _within_layers(argument, target_spec):
    layers = layer_count(target_spec)
    if argument is not None and layers is not None and int(argument) > layers:
        raise ValueError(f"layers:K needs 1 <= K <= {layers} (the layers of the target {target_spec!r}), got "
                         f"{argument!r}")


@register_drafter("layers", argument="K, the target's first K layers", description="self-speculation, untrained",
                  check=_positive("layers:K"), check_target=_within_layers)
def _layers(argument, target: LoadedModel):
    spec = f"layers:{argument}"
    return ModelDrafter(LoadedModel(truncated_target(target, int(argument)), target.tokenizer, spec, target.device,
                                    target.dtype), spec)


@register_drafter("distilled", description="the shipped distilled draft")
def _distilled_drafter(argument, target: LoadedModel):
    return ModelDrafter(LoadedModel(_distilled(target), target.tokenizer, "distilled", target.device, target.dtype),
                        "distilled")


def _head(spec: str, folder: Path, target: LoadedModel):
    from .head_drafter import HeadDrafter
    from .heads import int8_head, load_head
    from .kernels import int8_ready

    head, meta = load_head(folder, target.model)
    if int8_ready(head):  # its output rows as int8 on CPU: the largest product of a draft step at a fourth of the bytes
        meta = {**meta, "compute": int8_head(head).compute}
    return HeadDrafter(head, spec, meta)


def _shipped_head(kind: str, argument, target: LoadedModel):
    from .heads import HEAD_DIRS

    return _head(kind, HEAD_DIRS[kind], target)


register_drafter("eagle", description="the shipped EAGLE-style head")(partial(_shipped_head, "eagle"))
register_drafter("medusa", description="the shipped Medusa heads")(partial(_shipped_head, "medusa"))


@register_drafter("head", argument="FOLDER of a trained head", description="a head made by python -m llm_bridge.train_head",
                  check=_folder, check_target=_head_target)
def _head_folder(argument, target: LoadedModel):
    return _head(f"head:{argument}", Path(argument), target)


@register_drafter("int8", description="the target in int8 (CPU)")
def _int8(argument, target: LoadedModel):
    if target.device != "cpu":
        raise ValueError("the int8 draft multiplies in int8 on the CPU (torch._int_mm): run on device='cpu'")
    return ModelDrafter(LoadedModel(int8_model(target.model), target.tokenizer, "int8", target.device, target.dtype),
                        "int8")


def drafter_names() -> str:
    """The registered drafter names as a user writes them (``ngram[:N]``, ``layers:K``, ...), for help texts."""
    def spelled(name, entry):
        if entry["argument"] is None:
            return name
        word = entry["argument"].split(",")[0].split()[0]
        return f"{name}[:{word}]" if entry["optional"] else f"{name}:{word}"

    return ", ".join(spelled(name, entry) for name, entry in DRAFTERS.items())


def check_drafter_spec(spec: str, target: str | None = None) -> None:
    """Refuse a registered drafter's spec whose form or argument is wrong (``ngram:0``, ``layers:-1``, ``head:`` of
    no folder, an argument to a name that takes none), or, given the ``target`` spec, that does not fit it
    (``layers:999`` of a 30-layer target, read from its config), before any model loads; a model name or path is
    checked when it loads."""
    spec = str(spec)
    name, _, argument = spec.partition(":")
    entry = DRAFTERS.get(name)
    if entry is None:
        return
    if argument and entry["argument"] is None:
        raise ValueError(f"drafter {spec!r}: {name} takes no argument")
    if not argument and entry["argument"] is not None and not entry["optional"]:
        raise ValueError(f"drafter {spec!r}: give {name}:ARGUMENT ({entry['argument']})")
    if entry.get("check") is not None:
        entry["check"](argument or None)
    if target is not None and entry.get("check_target") is not None:
        entry["check_target"](argument or None, str(target))


def make_drafter(spec: str, target: LoadedModel):
    """The drafter named ``spec`` for ``target``: a registered name (:data:`DRAFTERS`, ``name`` or ``name:ARGUMENT``;
    see the module docstring), else a model loaded by :func:`~llm_bridge.models.load_model`."""
    spec = str(spec)
    name, _, argument = spec.partition(":")
    entry = DRAFTERS.get(name)
    if entry is not None:
        check_drafter_spec(spec)
        return entry["make"](argument or None, target)
    draft = load_model(spec, device=target.device, dtype=target.dtype)
    check_vocabularies(target.tokenizer, draft.tokenizer)
    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"draft rows have width {draft.vocab_size:,}, the target's {target.vocab_size:,}")
    return ModelDrafter(draft)


def load_pair(target: str = DEFAULT_TARGET, draft: str = "distilled", *, device: str = "auto",
              dtype: Any = "float32"):
    """Load a target model and a drafter on one device; see the module docstring for drafter names.

    Returns a :class:`Pair`. A model drafter's tokenizer must agree with the
    target's (:func:`check_vocabularies`) and its rows must have the target's width.
    """
    if str(draft).partition(":")[0] not in DRAFTERS:  # a model draft that cannot load is refused before the target
        check_model_spec(str(draft), "draft")
    else:
        check_drafter_spec(str(draft), target)
    check_model_spec(target, "target")  # an empty name or an empty .gguf file, named as the target
    tgt = load_model(target, device=device, dtype=dtype)
    return Pair(tgt, make_drafter(draft, tgt))
