"""Prompt files and their token ids (the chat template when the tokenizer has one)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DATA_DIR", "data_file", "encode_prompts", "read_prompts"]

#: Committed prompt files: ``distill_prompts.txt`` (training recipe), ``validate_prompts.txt``.
DATA_DIR = Path(__file__).parent / "data"


def data_file(name) -> Path:
    """A data file a flag names: the path itself when it is a file or holds a ``/``, else the bare name in
    ``llm_bridge/data`` (``head_prompts.txt``, ``message_openers.txt``)."""
    return Path(name) if Path(name).is_file() or "/" in str(name) else DATA_DIR / str(name)


def read_prompts(path, limit: int | None = None) -> list[str]:
    """User messages of a prompt file: one per line, ``#`` comments and blank lines skipped."""
    from otspec.checks import check_data_file

    path = Path(path)
    check_data_file(path, "prompt file")
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    prompts = [ln for ln in lines if ln and not ln.startswith("#")]
    if not prompts:
        raise ValueError(f"prompt file {path} holds no prompt")
    return prompts if limit is None else prompts[:limit]


def encode_prompts(tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids of each message, as a chat turn followed by the assistant's header when a template exists."""
    if getattr(tokenizer, "chat_template", None):
        return [list(tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                                   tokenize=True, return_dict=False)) for t in texts]
    ids = [tokenizer.encode(t) for t in texts]
    bos = getattr(tokenizer, "bos_token_id", None)
    return [([bos] if bos is not None and (not x or x[0] != bos) else []) + list(x) for x in ids]
