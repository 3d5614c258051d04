"""otspec: speculative decoding seen as optimal transport.

Public API (details in each module):

* :mod:`otspec.distributions` — validation, TV, overlap, residuals, sampling
* :mod:`otspec.sources` — IID / Markov / table sources, JSON format, random pairs
* :mod:`otspec.verifiers` — the verifier protocol and every verifier
* :mod:`otspec.engine` — exact, Monte Carlo and decode engines
* :mod:`otspec.theory` — closed forms
* :mod:`otspec.plot`, :mod:`otspec.report` — figures and the report
"""

__version__ = "0.1.0"

from .distributions import overlap, residual, total_variation, validate_probs
from .engine import evaluate, generate, simulate
from .sources import (
    IIDSource,
    MarkovSource,
    TableSource,
    bernoulli,
    load_source,
    random_iid,
    random_markov,
    source_from_json,
    uniform_source,
)
from .verifiers import TokenVerify

__all__ = [
    "IIDSource",
    "MarkovSource",
    "TableSource",
    "TokenVerify",
    "__version__",
    "bernoulli",
    "evaluate",
    "generate",
    "load_source",
    "overlap",
    "random_iid",
    "random_markov",
    "residual",
    "simulate",
    "source_from_json",
    "total_variation",
    "uniform_source",
    "validate_probs",
]
