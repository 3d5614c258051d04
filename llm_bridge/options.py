"""How a real pair decodes, in one object: the options every chain and tree run of ``llm_bridge`` shares.

:func:`llm_bridge.loop.speculative_generate` / :func:`~llm_bridge.loop.speculative_batches` and
:func:`llm_bridge.trees.tree_generate` / :func:`~llm_bridge.trees.tree_batches` take a :class:`DecodeOptions` after
their model pair, prompts, verifier, draft and token count, instead of nine keywords each::

    options = DecodeOptions(sampling=Sampling(1.0, top_k=8), seed=3, batch_size=8, progress=False)
    result = speculative_generate(pair, prompts, TokenVerify(), 4, 64, options)
    again = speculative_generate(pair, prompts, BlockVerify(), 4, 64, options.but(record_law=False))
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Self

from .sampling import DEFAULT_SAMPLING, Sampling

__all__ = ["DEFAULT_OPTIONS", "Changeable", "DecodeOptions"]


class Changeable:
    """A frozen options dataclass that makes changed copies: ``options.but(seed=3)``."""

    def but(self, **changes) -> Self:
        """A copy with ``changes``, checked again when it is made (a name that is not a field: ``ValueError``)."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ValueError(f"{type(self).__name__}.but: no options {unknown}")
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class DecodeOptions(Changeable):
    """The options of a speculative run.

    Attributes
    ----------
    sampling : Sampling
        Temperature, top-k and top-p of both models' rows.
    seed : int
        Seed of the loop's generator (numpy on the host, ``torch.Generator`` on the device).
    batch_size : int or None
        Prompts decoded together (default: all at once); one timing round each.
    progress : bool or None
        A progress bar (default: where the output is a terminal).
    confidence : float
        Level of the block efficiency's interval over batch means.
    record_law : bool
        Also compute E[τ | draft] from the verifier's exact law on every iteration's rows.
    cache : str
        A kind of :func:`llm_bridge.cache.make_cache` for both models (``auto``: compiled static caches on CUDA,
        dynamic on CPU).
    host_rows : bool or None
        Hand the rows over as numpy with a numpy generator (default: on the CPU, or with a drafter that makes no
        tensors); otherwise they stay on the model's device and only accepted lengths are read back.
    observers : tuple
        :class:`otspec.engine.observers.Observer` objects that see every iteration of every batch (chains only).
    """

    sampling: Sampling = DEFAULT_SAMPLING
    seed: int = 0
    batch_size: int | None = None
    progress: bool | None = None
    confidence: float = 0.95
    record_law: bool = True
    cache: str = "auto"
    host_rows: bool | None = None
    observers: tuple = ()

    def __post_init__(self):
        if not isinstance(self.sampling, Sampling):
            raise TypeError(f"DecodeOptions.sampling should be a Sampling, got {type(self.sampling).__name__}")
        if self.batch_size is not None and (isinstance(self.batch_size, bool) or int(self.batch_size) < 1):
            raise ValueError(f"DecodeOptions.batch_size should be None or >= 1, got {self.batch_size!r}")
        if not 0.0 < float(self.confidence) < 1.0:
            raise ValueError(f"DecodeOptions.confidence should be in (0, 1), got {self.confidence!r}")
        object.__setattr__(self, "observers", tuple(self.observers))



#: The options a run takes when it is given none.
DEFAULT_OPTIONS = DecodeOptions()
