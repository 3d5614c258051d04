"""otspec: speculative decoding seen as optimal transport.

Public API (details in each module; every subpackage below is loaded by ``import otspec``):

* :mod:`otspec.distributions` — validation, TV, overlap, residuals, sampling
* :mod:`otspec.sources` — IID / Markov / table sources, JSON format, random pairs
* :mod:`otspec.drafts` — the Draft concept, draft-tuple laws, candidate sampling, draft trees
* :mod:`otspec.verifiers` — the one verifier protocol and every verifier
* :mod:`otspec.theory` — every closed form, citing its equation
* :mod:`otspec.solvers` — linear programmes, flows and duals
* :mod:`otspec.engine` — exact, Monte Carlo and decode engines, whole-response simulators
* :mod:`otspec.figures` — the figure registry behind ``python -m otspec.plot`` and ``python -m otspec.report``
* :mod:`otspec.errors` — :class:`SizeLimitError`, :class:`SolveError`
"""

__version__ = "0.1.0"

from . import (
    distributions,
    drafts,
    engine,
    errors,
    figures,
    pairs,
    solvers,
    sources,
    theory,
    verifiers,
)
from .checked import checked_overlap as overlap  # the public names check their rows first
from .checked import checked_residual as residual
from .checked import checked_total_variation as total_variation
from .distributions import validate_probs
from .drafts import Draft, DraftTree
from .engine import Backend, evaluate, generate, simulate
from .errors import SizeLimitError, SolveError
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
    "Draft",
    "DraftTree",
    "SizeLimitError",
    "SolveError",
    "distributions",
    "drafts",
    "engine",
    "errors",
    "figures",
    "pairs",
    "solvers",
    "sources",
    "theory",
    "verifiers",
    "Backend",
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
