"""What a drafter's predictions replay, chosen in one place.

Every prediction of a real run (``llm_bridge.validate``'s runs, ``llm_bridge.adaptive``'s frontier, the
benchmarks that check them) replays the drafter along plain decoding of the prediction prompts, and what it can
replay depends on the drafter alone:

* prompt lookup (a deterministic drafter): its own chains at every block start and the target's probability of
  each chain token (:func:`~llm_bridge.ngram_replays.ngram_pairs`);
* a feature-level head (EAGLE, Medusa): its rows at every draft depth, since they change with the depth
  (:func:`~llm_bridge.head_replays.head_replays`);
* a draft model: both models' rows, logged once (:func:`~llm_bridge.logrows.record_rows`), which a record can also
  write out for offline sweeps.

:func:`replay_sources` makes the one that fits and says which it made (:class:`Replays`). One plain path per
prompt is itself a draw (an easy continuation predicts high); :func:`more_paths` decodes more of them, and
:func:`otspec.engine.predict.predict_from_pairs` (``paths_per_prompt``) pools a prompt's paths.
"""

from __future__ import annotations

from dataclasses import dataclass

from otspec.checks import check_size
from otspec.engine.predict import METHOD

from .logrows import DEFAULT_LOG_MAX_KEPT, DEFAULT_LOG_TOP_P, record_rows
from .ngram_replays import NGRAM_METHOD, ngram_pairs
from .sampling import DEFAULT_SAMPLING, Sampling

__all__ = ["Replays", "more_paths", "replay_sources"]


@dataclass(frozen=True)
class Replays:
    """The replay sources of one drafter along plain decoding: ``kind`` is ``"ngram"``, ``"head"`` or ``"log"``;
    ``pairs`` the (draft, target) sources per prompt where they are made directly, ``log`` the logged rows of a
    draft model (``None`` otherwise); ``method`` how the prediction is made, as records state it."""

    kind: str
    method: str
    pairs: list | None = None
    log: object | None = None

    def path_pairs(self) -> list:
        """(draft, target) sources, one pair per plain path, whatever the kind."""
        return list(self.log.path_pairs()) if self.log is not None else list(self.pairs)


def replay_sources(pair, prompts, continuations, longest: int, *, sampling: Sampling = DEFAULT_SAMPLING,
                   batch_size: int | None = None, top_p: float = DEFAULT_LOG_TOP_P,
                   max_kept: int | None = DEFAULT_LOG_MAX_KEPT, states: list | None = None,
                   meta: dict | None = None) -> Replays:
    """The replays of ``pair.drafter`` along ``continuations`` (plain decoding of ``prompts``, one each): the
    drafter's own :meth:`replays` (a draft model's logged rows, a head's rows by draft depth, prompt lookup's chains).

    ``longest``: the longest draft any prediction replays; every kind carries one row past it (a v1 block
    verifier reads the draft's row after its last drafted token). ``top_p`` / ``max_kept`` truncate a head's and a
    draft model's rows; ``batch_size`` is the batch a draft model's rows are computed in, as the loop does;
    ``states`` (a list) receives an EAGLE head's states by depth, for a learned draft-length rule; ``meta`` goes into
    a draft model's log. A drafter-independent refusal: ``longest`` must be a positive integer."""
    longest = check_size(longest, "longest draft")
    return pair.drafter.replays(pair, prompts, continuations, longest, sampling=sampling, batch_size=batch_size,
                                top_p=top_p, max_kept=max_kept, states=states, meta=meta)


def model_replays(pair, prompts, continuations, longest: int, *, sampling: Sampling = DEFAULT_SAMPLING,
                  batch_size: int | None = None, top_p: float = DEFAULT_LOG_TOP_P,
                  max_kept: int | None = DEFAULT_LOG_MAX_KEPT, meta: dict | None = None, **_) -> Replays:
    """A draft model's replays: both models' rows logged along the plain paths (:func:`record_rows`)."""
    return Replays("log", METHOD, log=record_rows(pair, prompts, continuations, sampling=sampling, top_p=top_p,
                                                   max_kept=max_kept, meta=meta, batch_size=batch_size))


def lookup_replays(pair, prompts, continuations, longest: int, *, sampling: Sampling = DEFAULT_SAMPLING,
                   **_) -> Replays:
    """Prompt lookup's replays: its own chains at every block start, the target's rows along the same path."""
    return Replays("ngram", NGRAM_METHOD, pairs=ngram_pairs(pair, prompts, continuations, depth=longest,
                                                             sampling=sampling))


def more_paths(pair, prompts, continuations, max_new_tokens: int, paths: int, *, sampling: Sampling = DEFAULT_SAMPLING,
               batch_size: int | None = None, cache: str = "auto", seed: int = 0) -> tuple[list, list]:
    """(prompts, continuations) with ``paths`` plain paths of each prompt, one prompt's after another (the order
    ``predict_from_pairs(paths_per_prompt=paths)`` reads): the given continuation first, then ``paths - 1`` more
    plain decodings of every prompt by the target (seeds ``seed + 1``, ``seed + 2``, ...; untimed)."""
    from .loop import plain_generate

    paths = check_size(paths, "paths")
    if len(continuations) != len(prompts):
        raise ValueError(f"continuations: expected one per prompt ({len(prompts)}), got {len(continuations)}")
    extra = [plain_generate(pair.target, prompts, max_new_tokens, sampling=sampling, seed=seed + g,
                            batch_size=batch_size, progress=False, cache=cache).tokens for g in range(1, paths)]
    return ([prompt for prompt in prompts for _ in range(paths)],
            [path for k, first in enumerate(continuations) for path in [first, *(e[k] for e in extra)]])
