"""The verifier protocol shared by every verification scheme, single- and multi-draft.

A verifier looks at what the drafter produced — a :class:`~otspec.drafts.Draft` in one of
two layouts, a *chain* of L tokens or k *candidates* at one position — and both models'
probability rows, and decides how many draft tokens to keep (``accepted_len``, τ) and which
token to emit next. It has two faces, on one base class :class:`Verifier`:

* :meth:`Verifier.law` — the exact conditional law of the outcome given the draft
  (:class:`VerifierLaw`; used by the exact engine and the unbiasedness tests);
* :meth:`Verifier.sample` — one batched random outcome per draft (:class:`Outcome`),
  vectorised over the batch, with an explicit random generator (used by Monte Carlo, the
  decode loops and ``llm_bridge``).

Both accept numpy arrays and torch tensors (on any device) and return the same namespace;
inputs pass through one check, :func:`otspec.drafts.check_draft`. Shapes::

    chain        tokens (B, L)   draft_probs (B, L, V)   target_probs (B, L+1, V)
    candidates   tokens (B, k)   draft_probs (B, V)      target_probs (B, V)

Outcome of a chain: the first τ draft tokens are kept and Y follows them (a corrected token
when τ < L, a bonus token from q(·|X^L) when τ = L). Outcome of candidates: the verified
position is the last one, so τ = 1 means a candidate was accepted and Y *is* that candidate,
τ = 0 means all were rejected and Y was drawn from the verifier's residual; ``index`` says
which candidate. "Accepted" means returned by the acceptance rule: for the sequential
verifiers (k-Seq, multi-round) a residual draw equal to a candidate counts as rejected.

Carried state. A verifier whose correction reaches into the next iteration (the v1 block
verifier's residual windows) overrides three hooks that do nothing by default:
:meth:`Verifier.start_state`, :meth:`Verifier.current_targets` and
:meth:`Verifier.advance_state`; the decode loop calls them for every verifier, so it has no
verifier-specific branch.

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import array_api_compat
import numpy as np

from ..distributions import namespace, to_host
from ..drafts import CANDIDATES, CHAIN, Draft, check_draft, gather_tokens
from .registry import ClosedForm

__all__ = ["CANDIDATES", "CHAIN", "Outcome", "Verifier", "VerifierLaw", "WholeTreeVerifier", "check_single_draft",
           "gather_tokens"]


@dataclass
class VerifierLaw:
    """Exact conditional law of a verifier's outcome given each draft.

    Attributes
    ----------
    accept_probs : array, shape (B, L+1)
        ``accept_probs[b, l]`` = P(τ = l | draft b); for candidates L = 1 and
        ``accept_probs[b, 1]`` is the acceptance probability.
    correction_probs : array, shape (B, L+1, V)
        ``correction_probs[b, l]`` = law of the emitted token Y given τ = l (rows for events of
        probability 0 are arbitrary valid rows).
    carry : Any
        State the verifier hands to the next iteration (``None`` for the plain target).
    """

    accept_probs: Any
    correction_probs: Any
    carry: Any = None

    @classmethod
    def from_masses(cls, accepted, rejected) -> VerifierLaw:
        """The law of a candidates verifier from the masses P(Y = y, accepted) and P(Y = y, rejected), (B, V) each."""
        xp = namespace(accepted, rejected)
        joint = xp.stack([rejected, accepted], axis=1)  # (B, 2, V): τ = 0, 1
        mass = xp.sum(joint, axis=-1)
        rows = xp.where(mass[..., None] > 0, joint / xp.where(mass > 0, mass, xp.ones_like(mass))[..., None],
                        xp.ones_like(joint) / joint.shape[-1])
        return cls(mass, rows)

    def _joint(self, tau: int):
        return self.accept_probs[:, tau, None] * self.correction_probs[:, tau, :]

    @property
    def expected_accepted(self):
        """E[τ | draft], shape (B,) (for candidates: the acceptance probability)."""
        xp = namespace(self.accept_probs)
        L = self.accept_probs.shape[-1] - 1
        ells = xp.arange(L + 1, dtype=self.accept_probs.dtype, device=array_api_compat.device(self.accept_probs))
        return xp.sum(self.accept_probs * ells, axis=-1)

    @property
    def accepted(self):
        """Candidates: P(Y = y and a candidate was accepted | candidates), shape (B, V)."""
        return self._joint(1)

    @property
    def rejected(self):
        """Candidates: P(Y = y and no candidate was accepted | candidates), shape (B, V)."""
        return self._joint(0)

    @property
    def output(self):
        """Candidates: law of Y given the candidates, shape (B, V)."""
        return self.accepted + self.rejected

    @property
    def acceptance(self):
        """Candidates: P(a candidate is accepted | candidates), shape (B,)."""
        return self.accept_probs[:, 1]


@dataclass
class Outcome:
    """One sampled verification outcome per draft.

    Attributes
    ----------
    accepted_len : int array, shape (B,)
        τ: the first τ draft tokens are kept (candidates: 1 iff a candidate was accepted).
    correction : int array, shape (B,)
        Y: the token emitted after the kept draft tokens (candidates: the emitted token).
    carry : Any
        Per-draft state for the next iteration (``None`` for stateless verifiers).
    index : int array, shape (B,), or None
        Candidates: position of the accepted candidate in the input, -1 when none was.
    """

    accepted_len: Any
    correction: Any
    carry: Any = None
    index: Any = None

    @classmethod
    def from_candidates(cls, token, accepted, index) -> Outcome:
        """The outcome of a candidates verifier from the emitted token, the accept flag and the index."""
        xp = namespace(token)
        return cls(xp.astype(accepted, xp.int64), token, None, index)

    @property
    def token(self):
        """Candidates: the emitted token Y, shape (B,)."""
        return self.correction

    @property
    def accepted(self):
        """Candidates: whether Y is an accepted candidate, bool shape (B,)."""
        return self.accepted_len > 0


class Verifier(ABC):
    """Base class of every verifier; see the module docstring for the protocol and shapes.

    Class attributes describe the scheme to the engines, the CLI and the figures: ``name``
    (registry key), ``label`` and ``style`` (how its curves are drawn), ``layout`` (the draft
    layout it verifies), ``replacement`` (candidates: drawn i.i.d. from p, or sequentially
    without replacement — the draw it is lossless for), ``lossless``.
    """

    name: ClassVar[str] = "verifier"
    label: ClassVar[str] = "verifier"
    style: ClassVar[dict] = {}
    layout: ClassVar[str] = CHAIN
    replacement: bool = True
    #: Candidates: lossless whether they were drawn with or without replacement (the naive verifier).
    any_draw_mode: ClassVar[bool] = False
    #: Lossless for any candidate set, drawn or chosen (EAGLE-2's top-k trees need it).
    any_candidates: ClassVar[bool] = False
    lossless: ClassVar[bool] = True
    #: Candidates must be distinct (checked with ``validate=True``).
    distinct_candidates: ClassVar[bool] = False
    #: Whether the outcome carries a residual target into the next iteration (v1 block verification).
    carries_residual: ClassVar[bool] = False
    #: Whether ``sample`` takes torch rows on their device (every verifier here does); a numpy-only verifier sets
    #: False and the tree loop then walks it on the host (:func:`otspec.engine.devicetree.walks_on_device`).
    device: ClassVar[bool] = True
    #: Whether ``sample`` takes rows of candidates with −1 slots (absent candidates: the fixed-shape tree walk of
    #: :mod:`otspec.engine.devicetree` hands a level's candidates so). A verifier whose law needs exactly k drawn
    #: candidates sets False and the tree loop walks it on tries, grouping rows by their number of candidates.
    padded_candidates: ClassVar[bool] = True

    def check(self, tokens, draft_probs, target_probs, *, validate: bool = True, lengths=None) -> Draft:
        """The one input check (:func:`otspec.drafts.check_draft`) for this verifier's layout."""
        return check_draft(tokens, draft_probs, target_probs, self.layout, validate=validate,
                           distinct=self.distinct_candidates, lengths=lengths)

    @abstractmethod
    def law(self, tokens, draft_probs, target_probs, *, validate: bool = True) -> VerifierLaw:
        """Exact law of (τ, Y) given each draft."""

    @abstractmethod
    def sample(self, tokens, draft_probs, target_probs, rng, *, validate: bool = True) -> Outcome:
        """One outcome per draft; ``rng`` is a numpy ``Generator`` or a ``torch.Generator``."""

    # ----------------------------------------------------- ragged batches (chains)
    #: Whether ``law`` and ``sample`` take ``lengths=`` themselves (one vectorised call for a ragged batch).
    ragged: ClassVar[bool] = False

    # ----------------------------------------------------- closed forms
    #: The closed form this chain verifier attains (:class:`~otspec.verifiers.registry.ClosedForm`: token eq. (4),
    #: block eq. (17), optimal the block-OT optimum eq. (8)); ``None`` when it has none.
    closed_form: ClassVar[ClosedForm | None] = None
    #: It drafts its own tree (batch speculative decoding's M responses), so it is not one of the multi-draft
    #: verifiers a tree of the caller's choosing runs.
    fixed_tree: ClassVar[bool] = False

    def expected_accepted(self, draft, target, length: int) -> float:
        """E[τ] of one iteration with drafts of ``length`` for a pair of sources, in closed form.

        The chain verifiers' counterpart of the multi-draft ``expected_acceptance``; verifiers without
        a closed form raise ``NotImplementedError``."""
        raise NotImplementedError(f"{self.name}: no closed-form expected accepted length")

    def sample_ragged(self, tokens, draft_probs, target_probs, lengths, rng, *, validate: bool = True) -> Outcome:
        """One outcome per row of a ragged chain batch: row b drafted ``lengths[b]`` of the L tokens.

        The layout of vLLM's rejection sampler, padded: positions past a row's length are
        ignored, τ ≤ ``lengths[b]``, and at τ = ``lengths[b]`` Y is drawn from that row's bonus row
        ``target_probs[b, lengths[b]]``. Verifiers with ``ragged = True`` do it in one vectorised
        call; the others are called once per distinct length (same law, host-side grouping).
        """
        if self.ragged:
            return self.sample(tokens, draft_probs, target_probs, rng, validate=validate, lengths=lengths)
        if validate:
            lengths = self.check(tokens, draft_probs, target_probs, lengths=lengths).lengths
        return _by_length(lambda g, idx: self.sample(tokens[idx, :g], draft_probs[idx, :g], target_probs[idx, :g + 1],
                                                     rng, validate=validate), tokens, target_probs, lengths)

    def law_ragged(self, tokens, draft_probs, target_probs, lengths, *, validate: bool = True) -> VerifierLaw:
        """:meth:`law` of a ragged chain batch (see :meth:`sample_ragged`); rows τ > ``lengths[b]`` have probability 0."""
        if self.ragged:
            return self.law(tokens, draft_probs, target_probs, validate=validate, lengths=lengths)
        if validate:
            lengths = self.check(tokens, draft_probs, target_probs, lengths=lengths).lengths
        xp = namespace(target_probs)
        L = tokens.shape[1]
        accept = xp.zeros((tokens.shape[0], L + 1), dtype=target_probs.dtype, device=array_api_compat.device(target_probs))
        correction = xp.zeros_like(target_probs)
        correction[...] = target_probs  # rows of probability 0 stay valid rows
        for g, idx in _groups(lengths):
            law = self.law(tokens[idx, :g], draft_probs[idx, :g], target_probs[idx, :g + 1], validate=validate)
            accept[idx, :g + 1] = law.accept_probs
            correction[idx, :g + 1] = law.correction_probs
        return VerifierLaw(accept, correction)

    # ----------------------------------------------------- carried state (default: none)
    def start_state(self, batch: int, max_length: int) -> Any:
        """State carried between iterations for ``batch`` sequences (``None``: nothing carried)."""
        return None

    def current_targets(self, state, rows, tokens, draft_probs, target_probs, start, lengths, next_draft_row):
        """Target rows this iteration verifies against, and scratch for :meth:`advance_state`.

        ``rows`` (n,) are the sequences of the batch, ``tokens`` (n, L) their drafted tokens,
        ``lengths`` (n,) how many each drafted (a ragged batch, host integers),
        ``draft_probs`` (n, L, V) and ``target_probs`` (n, L+1, V) the plain models' rows,
        ``start`` (n,) the position of the first drafted token, and ``next_draft_row()`` returns
        the draft's (n, V) row after each row's last drafted token (a draft call, made only when
        needed). Default: the plain target rows, no scratch.
        """
        return target_probs, None

    def advance_state(self, state, rows, scratch, outcome: Outcome, start, lengths) -> None:
        """Update ``state`` of sequences ``rows`` after the iteration's ``outcome`` (in place). Default: nothing."""
        return None

    def __repr__(self):
        return f"{type(self).__name__}()"


def _groups(lengths):
    """(g, rows) for every distinct draft length g of a ragged batch (lengths on the host)."""
    lengths = to_host(lengths)
    return [(int(g), np.flatnonzero(lengths == g)) for g in np.unique(lengths)]


def _by_length(call, tokens, target_probs, lengths) -> Outcome:
    """Assemble one :class:`Outcome` from ``call(g, rows)`` on every group of equal draft length."""
    xp = namespace(target_probs)
    B = tokens.shape[0]
    device = array_api_compat.device(target_probs)
    tau = xp.zeros(B, dtype=xp.int64, device=device)
    y = xp.zeros(B, dtype=xp.int64, device=device)
    carry = None
    for g, idx in _groups(lengths):
        at = idx if isinstance(target_probs, np.ndarray) else xp.asarray(idx, device=device)
        out = call(g, at)
        tau[at], y[at] = out.accepted_len, out.correction
        if out.carry is not None:
            if carry is None:
                carry = xp.zeros(B, dtype=target_probs.dtype, device=device)
            carry[at] = out.carry
    return Outcome(tau, y, carry)


def check_single_draft(draft_tokens, draft_probs, target_probs, *, validate: bool = True):
    """``(tokens, draft_probs, target_probs)`` of a validated chain (see :func:`otspec.drafts.check_draft`)."""
    d = check_draft(draft_tokens, draft_probs, target_probs, CHAIN, validate=validate)
    return d.tokens, d.draft_probs, d.target_probs


class WholeTreeVerifier:
    """A verifier of a whole drafted tree (``layout == "tree"``): the tree loop hands it every drafted node's rows
    at once. Subclasses give ``check_tree`` (refuse trees whose draw they do not keep exact), ``tree_law`` (every
    outcome: accepted path, its probability, the row of the next token) and ``sample_tree`` (accepted nodes, next
    token); ``replacement`` is the draw of the children they are lossless for."""

    layout = "tree"
    replacement = True
    any_draw_mode = False
    any_candidates = False
    lossless = True
    closed_form = None
    fixed_tree = False

    def check_tree(self, tree) -> None:
        raise NotImplementedError

    def tree_law(self, tree) -> list:
        raise NotImplementedError

    def sample_tree(self, tree, rng) -> tuple[list, int]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
