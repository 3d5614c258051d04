"""The acceptance head's training set on the real pair (SpecDec++, spec ``specdecpp.md`` §7; p is the draft, q the
target): the paper's one-pass construction with token mixing (:func:`head_training_data`), rows from real drafting
for a feature head that drafts on its own states (:func:`head_training_data_on_policy`), the ridge penalty chosen
on held-out prompts (:func:`choose_l2`), the fit and its report (:func:`train_head`), and the head as JSON
(:func:`save_head`, :func:`load_head`). :mod:`llm_bridge.adaptive` runs them and re-exports them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from otspec.checks import MissingFile, file_problem
from otspec.distributions import sample_categorical, to_host
from otspec.engine.controllers import DraftLengthController
from otspec.engine.heads import AcceptanceHead, binary_kl
from otspec.engine.observers import Observer
from otspec.verifiers import TokenVerify

from .loop import chunks, plain_generate, speculative_generate
from .options import DecodeOptions
from .sampling import DEFAULT_SAMPLING, Sampling

__all__ = ["L2_GRID", "HeadData", "choose_l2", "head_training_data", "head_training_data_on_policy", "load_head",
           "save_head", "train_head"]


@dataclass(frozen=True)
class HeadData:
    """Rows of the head's training set: features e_i (n, H), soft labels P_i (n,), and the prompt of each row."""

    features: np.ndarray
    labels: np.ndarray
    prompt: np.ndarray

    def split(self, held_out: float = 0.2):
        """(train, test) by prompt: the last ``held_out`` share of prompts is the test set."""
        prompts = np.unique(self.prompt)
        n_train = min(max(int(round(len(prompts) * (1 - held_out))), 1), max(len(prompts) - 1, 1))
        sel = np.isin(self.prompt, prompts[:n_train])
        take = lambda m: HeadData(self.features[m], self.labels[m], self.prompt[m])  # noqa: E731
        return take(sel), take(~sel)


def _forward(model, ids, hidden: bool = False):
    import torch

    device = next(model.parameters()).device
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor([list(ids)], device=device), output_hidden_states=hidden)
    return out.logits[0], (out.hidden_states[-1][0] if hidden else None)


def head_training_data(pair, prompts, max_new_tokens: int, *, mix: float = 0.15,
                       sampling: Sampling = DEFAULT_SAMPLING, seed=0, batch_size: int = 16,
                       progress: bool | None = None) -> HeadData:
    """The paper's training data (:mod:`llm_bridge.adaptive`'s docstring, step 1) for ``prompts`` (token id lists)."""
    from tqdm.auto import tqdm

    if not 0.0 <= mix <= 1.0:
        raise ValueError(f"mix: expected a probability in [0, 1], got {mix!r}")
    if pair.drafter.deterministic:
        raise ValueError("the acceptance head reads a model draft's hidden states; the n-gram drafter has none")
    responses = plain_generate(pair.target, prompts, max_new_tokens, sampling=sampling, seed=seed,
                               batch_size=batch_size, progress=progress).tokens
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 1]))
    feats, labels, which = [], [], []
    for j, (prompt, X) in enumerate(tqdm(list(zip(prompts, responses, strict=True)), desc="head data", leave=False,
                                         disable=None if progress is None else not progress)):
        P, N = len(prompt), len(X)
        rows = slice(P - 1, P - 1 + N)  # logits at these positions predict X_1..X_N
        q = sampling.rows(_forward(pair.target.model, list(prompt) + list(X))[0][rows])
        p = sampling.rows(_forward(pair.drafter.model, list(prompt) + list(X))[0][rows])
        Y = sample_categorical(p, rng)
        label = np.minimum(1.0, q[np.arange(N), Y] / p[np.arange(N), Y])
        from_draft = rng.random(N) >= mix
        Z = np.where(from_draft, Y, X)
        _, hidden = _forward(pair.drafter.model, list(prompt) + Z.tolist(), hidden=True)
        e = hidden[P:P + N].double().cpu().numpy()  # e_i at Z_i: position P + i − 1 for i = 1..N
        feats.append(e[from_draft])
        labels.append(label[from_draft])
        which.append(np.full(int(from_draft.sum()), j))
    return HeadData(np.concatenate(feats), np.concatenate(labels), np.concatenate(which))


class _StateRecorder(DraftLengthController):
    """Fixed K that keeps the draft's state at each drafted token (unlagged: after the token is fed)."""

    needs_context = True
    reads_drafted_state = True

    def __init__(self, length: int):
        self.max_length = int(length)
        self.states: dict = {}

    def keep_drafting(self, step, draft_rows, *, which=None, features=None, **_):
        for b, f in zip(which.tolist(), np.asarray(features, dtype=np.float64), strict=True):
            self.states[(b, step)] = f
        return np.full(len(which), step < self.max_length)


class _LabelObserver(Observer):
    """Pairs each drafted token's state (from a :class:`_StateRecorder`) with its soft label min{1, q/p}."""

    def __init__(self, recorder: _StateRecorder, offset: int):
        self.recorder, self.offset = recorder, int(offset)
        self.features, self.labels, self.prompt = [], [], []

    def on_chain(self, step) -> None:
        p_rows, q_rows, tokens = to_host(step.draft_rows), to_host(step.target_rows), to_host(step.tokens)
        for i, (b, g) in enumerate(zip(step.rows.tolist(), step.drafted.tolist(), strict=True)):
            for k in range(g):
                y = tokens[i, k]
                self.features.append(self.recorder.states.pop((b, k + 1)))
                self.labels.append(min(1.0, q_rows[i, k, y] / p_rows[i, k, y]))
                self.prompt.append(self.offset + b)
        self.recorder.states.clear()


def head_training_data_on_policy(pair, prompts, max_new_tokens: int, *, draft_length: int = 4,
                                 sampling: Sampling = DEFAULT_SAMPLING, seed=0, batch_size: int = 8,
                                 progress: bool | None = None) -> HeadData:
    """Training rows for a drafter whose state depends on its own drafted path (a feature head such as EAGLE).

    The paper's one-pass construction (mixing target and draft tokens in one draft pass) does not apply to a
    head that drafts on its own predicted features, so the rows come from real drafting instead: speculative
    decoding with token verification at fixed K = ``draft_length`` on ``prompts``, every drafted token Y_k
    giving a row (e_k, P_k) with e_k the head's state after it is fed (what the unlagged rule reads) and the
    soft label P_k = min{1, q_k(Y_k)/p_k(Y_k)} from the rows the token was drafted from and verified against
    (also for tokens drafted past a rejection: their rows are scored all the same)."""
    if pair.drafter.deterministic:
        raise ValueError("the acceptance head reads a drafter's states; the n-gram drafter has none")
    features, labels, which = [], [], []
    for offset, chunk in chunks(prompts, batch_size):
        recorder = _StateRecorder(draft_length)
        observer = _LabelObserver(recorder, offset)
        speculative_generate(pair, chunk, TokenVerify(), recorder, max_new_tokens,
                             DecodeOptions(sampling=sampling, seed=seed + offset, progress=progress, record_law=False, observers=[observer]))
        features += observer.features
        labels += observer.labels
        which += observer.prompt
    if not labels:
        raise ValueError("no drafted tokens to learn from")
    return HeadData(np.stack(features), np.asarray(labels, dtype=np.float64), np.asarray(which, dtype=np.int64))


L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)


def choose_l2(data: HeadData, *, w_rej: float = 3.0, grid=L2_GRID, held_out: float = 0.25) -> tuple[float, dict]:
    """(l2, validation loss per l2): the ridge penalty with the smallest weighted loss (12) on the last
    ``held_out`` share of ``data``'s prompts, the head fitted on the others (a split by prompt)."""
    fit, val = data.split(held_out)
    if not val.labels.size:
        raise ValueError("choosing l2 needs at least two prompts of head data")
    scores = {float(l2): AcceptanceHead(1.0, w_rej, float(l2)).fit(fit.features, fit.labels).loss(val.features,
                                                                                                 val.labels)
              for l2 in grid}
    return min(scores, key=scores.get), scores


def train_head(data: HeadData, *, w_rej: float = 3.0, l2: float | str = "auto", held_out: float = 0.2):
    """(head, report): the head fitted on the training prompts, binary KL and mean labels on both splits.

    ``l2="auto"`` picks the ridge penalty by :func:`choose_l2` inside the training prompts (the test
    prompts stay unseen)."""
    train, test = data.split(held_out)
    validation = None
    if l2 == "auto":
        l2, validation = choose_l2(train, w_rej=w_rej)
    head = AcceptanceHead(1.0, w_rej, float(l2)).fit(train.features, train.labels)
    report = {"rows": {"train": int(train.labels.size), "test": int(test.labels.size)}, "w_acc": 1.0, "w_rej": w_rej,
              "l2": float(l2), "mean_label": {"train": float(train.labels.mean())}}
    if validation is not None:
        report["l2_validation_loss"] = {str(k): v for k, v in validation.items()}
    # the best constant under the same weighted loss: with w_rej > 1 it sits below the mean label, as the head does
    constant = AcceptanceHead(1.0, w_rej, 0.0).fit(np.zeros((train.labels.size, 1)), train.labels)
    for name, part in (("train", train), ("test", test)):
        if part.labels.size:
            pred = head.predict(part.features)
            report.setdefault("binary_kl", {})[name] = binary_kl(part.labels, pred)
            report.setdefault("binary_kl_constant", {})[name] = binary_kl(part.labels,
                                                                         np.full(part.labels.size, train.labels.mean()))
            report["mean_label"][name] = float(part.labels.mean())
            report.setdefault("weighted_loss", {})[name] = head.loss(part.features, part.labels)
            report.setdefault("weighted_loss_constant", {})[name] = constant.loss(np.zeros((part.labels.size, 1)),
                                                                                  part.labels)
            report.setdefault("correlation", {})[name] = float(np.corrcoef(part.labels, pred)[0, 1]) \
                if part.labels.std() > 0 and pred.std() > 0 else None
    return head, report


def save_head(head: AcceptanceHead, path, meta: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**meta, "theta": head.theta.tolist(), "bias": head.bias}) + "\n")
    return path


def check_head_file(path) -> None:
    """Refuse (a ``ValueError`` naming ``--save-head``) a path where :func:`save_head` would overwrite a file that is
    not an acceptance head (a source, a record), before anything is trained."""
    path = Path(path)
    if path.is_file():
        try:
            meta = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError, RecursionError):
            meta = None
        if not (isinstance(meta, dict) and {"theta", "bias"} <= set(meta)):
            raise ValueError(f"--save-head {path}: that file is not an acceptance head; it would be overwritten "
                             "(give a new name)")


def load_head(path) -> tuple[AcceptanceHead, dict]:
    """(head, metadata) from :func:`save_head`'s JSON."""
    path = Path(path)
    problem = file_problem(path)
    if problem == "does not exist":
        raise MissingFile(f"no acceptance head at {path} (train one: python -m llm_bridge.adaptive)")
    if problem is not None:  # a folder or a pipe: named as what it is, not as missing
        raise ValueError(f"--head {path} {problem}; expected an acceptance head saved by --save-head")
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise ValueError(f"--head {path}: not a JSON file (an acceptance head is saved by --save-head)") from None
    if not isinstance(meta, dict) or not {"theta", "bias"} <= set(meta):
        raise ValueError(f"--head {path}: not an acceptance head (no 'theta' and 'bias'; one is saved by --save-head)")
    try:
        theta, bias = np.asarray(meta.pop("theta"), dtype=np.float64), float(meta.pop("bias"))
    except (TypeError, ValueError):
        raise ValueError(f"--head {path}: 'theta' should be a list of numbers and 'bias' a number") from None
    if theta.ndim != 1 or not np.isfinite(theta).all() or not np.isfinite(bias):
        raise ValueError(f"--head {path}: 'theta' should be one finite vector and 'bias' finite")
    head = AcceptanceHead(meta.get("w_acc", 1.0), meta.get("w_rej", 1.0), meta.get("l2", 1e-4))
    head.theta, head.bias = theta, bias
    return head, meta
