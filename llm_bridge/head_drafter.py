"""The drafter made of a feature-level head on the target (:class:`~llm_bridge.heads.EagleHead` or
:class:`~llm_bridge.heads.MedusaHeads`): its sessions, its exact source and its replays, as it declares them."""

from __future__ import annotations

from otspec.engine.session import Drafter, Session

from .head_replays import HEAD_METHOD, HeadSource, head_replays
from .head_sessions import EagleSession, MedusaSession
from .sampling import DEFAULT_SAMPLING

__all__ = ["HeadDrafter"]


class HeadDrafter(Drafter):
    """A drafter made of a feature-level head (:class:`EagleHead` or :class:`MedusaHeads`) on the target.

    It declares what its head can do: an EAGLE head runs on its own predicted features, so it grows trees, drafts
    any length and has states for a learned draft-length head; Medusa's k heads each read the last target feature
    alone, so they draft chains of at most k tokens and have no state of their own."""

    reads_target_features = True

    def __init__(self, head, name: str | None = None, meta: dict | None = None):
        self.head, self.kind = head, head.kind
        self.name, self.meta = name or head.kind, meta or {}
        eagle = self.kind == "eagle"
        self.target_layers = tuple(getattr(head, "fuse_layers", ()))  # layers fused before the last feature (EAGLE-3)
        self.drafts_trees = self.has_hidden_states = eagle
        self.max_draft_length = None if eagle else int(head.k)

    def session(self, batch: int, sampling=None, *, hidden: bool = False, cache: str = "auto",
                max_length: int | None = None, timer=None, host_rows: bool = True) -> Session:
        """A session of the head over ``batch`` sequences (``timer`` is the loop's: the head's calls are its draft
        calls)."""
        self.check_plan(hidden=hidden)
        sampling = DEFAULT_SAMPLING if sampling is None else sampling
        if self.kind == "eagle":
            return EagleSession(self.head, batch, sampling, hidden=hidden, cache=cache, max_length=max_length,
                                host_rows=host_rows)
        return MedusaSession(self.head, batch, sampling, host_rows=host_rows)

    def replays(self, pair, prompts, continuations, longest: int, **options):
        """Its rows at every draft depth along the plain paths (:func:`llm_bridge.head_replays.head_replays`, with the
        ``sampling``, ``top_p``, ``max_kept`` and ``states`` given), one row past ``longest``; ``states`` receives an
        EAGLE head's states by depth."""
        from .replays import Replays

        kept = {key: options[key] for key in ("sampling", "top_p", "max_kept", "states") if key in options}
        return Replays("head", HEAD_METHOD, pairs=head_replays(pair, prompts, continuations, longest + 1, **kept))

    def source(self, target_model, prompt, sampling=None):
        """The head's rows after ``prompt`` on the target's features, from full passes without a cache."""
        return HeadSource(self.head, target_model, prompt, DEFAULT_SAMPLING if sampling is None else sampling)
