"""Batch speculative decoding (Yin et al. 2024, Algorithm 4) on the verifier protocol.

Spec ``yin_theory.md`` §6. M draft responses are drafted i.i.d. from the same prefix; at a
round's first position their first tokens are verified by multi-round rejection sampling
(:class:`~otspec.verifiers.multiround.MultiRound` over M candidates); once a response is
accepted it is followed with the plain speculative check until a rejection, which starts the
next round. As a verifier this is the one-position multi-round rule plus a draft *shape*:
the tree of M i.i.d. responses (config (M, 1, ..., 1)) walked with the "accepted"
continuation rule, so ``generate_tree(draft, target, v, v.tree(L), n, rule=v.rule)`` runs
Algorithm 4 with responses of L tokens. Below the first level each tree node has one child,
and multi-round with one candidate is the speculative check. The round-start state across
positions is not a verifier's business: it lives in the tree walk
(:mod:`otspec.engine.tree`) and, with full lookahead over a whole horizon, in
:func:`otspec.engine.sequence.simulate_batch_rejections`; the expected rejections are
recursion (4)–(5), :func:`otspec.theory.rejections.batch_expected_rejections`.
"""

from __future__ import annotations

from ..drafts import DraftTree
from ..theory.rejections import check_batch_size
from .multiround import MultiRound
from .registry import register

__all__ = ["BatchVerify"]


@register
class BatchVerify(MultiRound):
    """Algorithm 4's verification: multi-round over ``M`` i.i.d. responses, then follow the accepted one."""

    name = "batch"
    label = "batch SD (Algorithm 4)"
    style = {"linestyle": "-.", "color": "C4"}
    #: The tree continuation rule of Algorithm 4: follow the accepted response only.
    rule = "accepted"
    fixed_tree = True

    def __init__(self, M: int = 2):
        self.M = check_batch_size(M)

    def tree(self, length: int) -> DraftTree:
        """The draft shape: M i.i.d. responses of ``length`` tokens, config (M, 1, ..., 1)."""
        return DraftTree.spectr_iid(self.M, length)

    def __repr__(self):
        return f"BatchVerify(M={self.M})"
