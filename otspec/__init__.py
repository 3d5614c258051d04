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

from .distributions import overlap, residual, total_variation, validate_probs  # noqa: E402
from .engine import evaluate, generate, simulate  # noqa: E402
from .sources import (  # noqa: E402
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
from .verifiers import TokenVerify  # noqa: E402

__all__ = [
    "__version__", "validate_probs", "total_variation", "overlap", "residual",
    "IIDSource", "MarkovSource", "TableSource", "bernoulli", "uniform_source", "random_markov",
    "random_iid", "source_from_json", "load_source", "TokenVerify", "evaluate", "simulate", "generate",
]
