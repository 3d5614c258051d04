"""Resumable head training: ``python -m llm_bridge.train_head`` writes ``checkpoint.pt`` beside its output every
``--checkpoint-every`` steps (the trained weights, AdamW's moments, the schedule, both random generators, the log and
the seconds spent), and a rerun of the same recipe continues from it. A resumed run draws the same minibatches and
takes the same steps as one that was never stopped, so its head is the same head. A checkpoint of another recipe
is set aside (renamed ``checkpoint.pt.stale``) with a line saying so, never read into a different run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .prompts import DATA_DIR

__all__ = ["CHECKPOINT", "check_checkpoint_files", "load_checkpoint", "recipe_key", "save_checkpoint", "shown_path"]

CHECKPOINT = "checkpoint.pt"
#: Fields of a recipe that do not change the head it trains (where it goes, how often it reports).
_NOT_THE_HEAD = ("out", "log_every", "progress", "checkpoint_every", "device")


def shown_path(path: Path) -> str:
    """A prompt file or a corpus as a recipe names it: relative to the repository when it lies there."""
    try:
        return str(Path(path).resolve().relative_to(DATA_DIR.resolve().parents[1]))
    except ValueError:
        return str(path)


def recipe_key(recipe) -> str:
    """The recipe's fields that decide the trained head, as canonical JSON (paths as strings)."""
    from dataclasses import fields

    def plain(x):
        if isinstance(x, tuple | list):
            return [plain(v) for v in x]
        return x if isinstance(x, int | float | str | bool) or x is None else shown_path(x)

    return json.dumps({f.name: plain(getattr(recipe, f.name)) for f in fields(recipe)
                       if f.name not in _NOT_THE_HEAD}, sort_keys=True)


def _trainable(head) -> dict:
    return {name: p for name, p in head.named_parameters() if p.requires_grad}


def check_checkpoint_files(folder: Path, flag: str = "--out") -> None:
    """Refuse, before any model loads, a folder, a device or a link to nothing where training writes its checkpoint
    files (``checkpoint.pt``, its temporary file and the name a stale one is set aside under)."""
    from otspec.checks import file_problem

    for name in (CHECKPOINT, "checkpoint.tmp", CHECKPOINT + ".stale"):
        path = Path(folder) / name
        problem = file_problem(path) if not (path.is_symlink() and not path.exists()) else "a link to nothing"
        if problem not in (None, "does not exist"):
            raise ValueError(f"{flag} {folder}: {name} there {problem}; training writes that file")


def save_checkpoint(folder: Path, *, key: str, step: int, head, opt, sched, rng, log: list, seconds: float) -> Path:
    """Write the state after ``step`` to ``folder/checkpoint.pt`` (through a temporary file: a run stopped while
    writing leaves the previous checkpoint whole)."""
    import torch

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / CHECKPOINT
    state = {"key": key, "step": int(step), "seconds": float(seconds), "log": log,
             "weights": {k: v.detach().clone() for k, v in _trainable(head).items()},
             "optimizer": opt.state_dict(), "schedule": sched.state_dict(),
             "numpy_rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state()}
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)
    return path


def load_checkpoint(folder: Path, *, key: str, head, opt, sched, rng, steps: int):
    """Restore a checkpoint of this recipe (``key``) into ``head``, ``opt``, ``sched`` and ``rng``; returns
    ``(step, log, seconds)`` of the state restored, or ``(0, [], 0.0)`` when there is none to resume."""
    import torch

    from otspec.checks import finite_real

    path = Path(folder) / CHECKPOINT
    if not path.is_file():
        return 0, [], 0.0
    try:  # tensors, dicts, lists, numbers and text only: a pickle cannot run code here
        state = torch.load(path, weights_only=True)
    except Exception as err:  # a damaged checkpoint is set aside, never half-read
        ok, why = False, f"unreadable ({type(err).__name__})"
    else:
        step = state.get("step") if isinstance(state, dict) else None
        ok = (isinstance(state, dict) and state.get("key") == key and isinstance(step, int)
              and not isinstance(step, bool) and 0 < step <= steps and isinstance(state.get("log"), list)
              and finite_real(state.get("seconds")) and state["seconds"] >= 0
              and isinstance(state.get("weights"), dict)
              and all(k in state for k in ("optimizer", "schedule", "numpy_rng", "torch_rng")))
        why = "of another recipe" if isinstance(state, dict) and state.get("key") != key else "damaged"
    if not ok:
        path.replace(path.with_name(CHECKPOINT + ".stale"))
        print(f"train_head: {path} is {why}; set aside as {CHECKPOINT}.stale, training from step 0",
              file=sys.stderr)
        return 0, [], 0.0
    params = _trainable(head)
    try:
        if set(params) != set(state["weights"]) or any(
                not torch.is_tensor(state["weights"][k]) or state["weights"][k].shape != p.shape
                for k, p in params.items()):
            raise ValueError("its weights are not this head's")
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(state["weights"][name])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["schedule"])
        rng.bit_generator.state = state["numpy_rng"]
        torch.set_rng_state(state["torch_rng"])
    except (ValueError, TypeError, KeyError, RuntimeError, IndexError, AttributeError) as err:
        raise ValueError(f"{path}: a checkpoint of this recipe that cannot be resumed ({type(err).__name__}: "
                         f"{str(err)[:200]}); delete it to train afresh") from None
    print(f"train_head: resuming from step {state['step']} of {steps} ({path})", file=sys.stderr)
    return int(state["step"]), list(state["log"]), float(state["seconds"])
