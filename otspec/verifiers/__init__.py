"""Verifiers: one protocol (exact ``law`` + batched ``sample``) for every scheme."""

from .base import Outcome, Verifier, VerifierLaw, check_single_draft
from .token import TokenVerify

#: Verifiers by their short name (used by the CLI and reports).
REGISTRY = {cls.name: cls for cls in (TokenVerify,)}

__all__ = ["REGISTRY", "Outcome", "TokenVerify", "Verifier", "VerifierLaw", "check_single_draft"]
