"""``otspec audit``: an exactness auditor for anyone's speculative sampler.

* :mod:`~otspec.audit.protocol` — the chain protocol ``sampler(draft_tokens, draft_probs, target_probs, rng) ->
  (accepted, next_token)``, ``module:function`` loading, protocol errors and timeouts;
* :mod:`~otspec.audit.core` — the statistical audit at any vocabulary (:func:`audit`);
* :mod:`~otspec.audit.exact` — the exact audit on small vocabularies (:func:`exact_audit`);
* :mod:`~otspec.audit.adapters` — otspec's verifiers and Hugging Face's sampler on the protocol;
* :mod:`~otspec.audit.catalogue` — known real-world failures re-created as faulty samplers;
* :mod:`~otspec.audit.card` — the report card (Markdown, JSON, figure).
"""

from .catalogue import CATALOGUE, Failure
from .core import DEFAULT_SAMPLES, AuditReport, audit
from .protocol import SamplerError, SamplerTimeout, call_sampler, load_sampler
from .rows import RowPool, logged_pool, synthetic_pool

__all__ = ["CATALOGUE", "DEFAULT_SAMPLES", "AuditReport", "Failure", "RowPool", "SamplerError", "SamplerTimeout",
           "audit", "call_sampler", "load_sampler", "logged_pool", "synthetic_pool"]
