"""Autoregressive sources over a finite vocabulary.

A *source* answers one question for a batch: given token prefixes, what is the
law of the next token? Everything else (joint probabilities, enumeration,
sampling) is derived from that.

Prefixes are passed as a padded integer buffer ``tokens`` of shape (B, T) plus
``lengths`` of shape (B,): row ``b`` conditions on ``tokens[b, :lengths[b]]``.
The padding convention lets the decode engine keep sequences of different
lengths in one array; when ``lengths`` is omitted every row uses all T tokens.

Sources in this module
----------------------
* :class:`IIDSource` — every token drawn from one row (Bernoulli, uniform U(d), any vector).
* :class:`MarkovSource` — order-1 chains, stationary (one matrix) or time-varying
  (one matrix per step, hence a finite horizon).
* :class:`DepthPositionalSource` — a positional draft whose row also depends on how many tokens it
  has drafted since the last commit (a logged feature-level head, replayed per draft depth);
* :class:`PositionalSource` — token t drawn from row t whatever came before (finite horizon); a
  logged decoding path replays this way (:mod:`otspec.sources.logged`).
* :class:`TableSource` — arbitrary prefix → row tables or callables (finite horizon).

JSON format (read by :func:`source_from_json`, written by ``Source.to_json``)::

    {"type": "iid", "probs": [0.3, 0.7]}
    {"type": "bernoulli", "p": 0.7}                       # P(token 1) = p
    {"type": "uniform", "support": 4, "vocab_size": 6}    # U(4) inside 6 tokens
    {"type": "markov", "initial": [...], "transition": [[...], ...]}
    {"type": "markov", "initial": [...], "transition": [M1, M2, ...], "horizon": T}
    {"type": "positional", "rows": [[...], ...]}          # row t: law of token t
    {"type": "positional", "rows": [...], "proposes": [true, false, ...]}  # a draft with gaps
    {"type": "table", "vocab_size": 2, "horizon": 2,
     "rows": {"": [0.5, 0.5], "0": [0.9, 0.1], "1": [0.2, 0.8]}}

``transition[a][b]`` is P(next = b | previous = a). For a time-varying chain the
i-th matrix (0-based) gives token i+2 from token i+1, so a horizon-T chain needs
T−1 matrices.
"""
from .base import (
    EMPTY_PREFIX,
    MAX_ENUMERATION,
    Enumeration,
    Source,
    check_enumeration,
    extend_prefixes,
)
from .io import load_source, save_source, source_from_json
from .logged import TAIL_MODES, LoggedRows, load_logged_rows, log_rows
from .models import (
    DepthPositionalSource,
    GreedySource,
    IIDSource,
    MarkovSource,
    PositionalSource,
    TableSource,
    bernoulli,
    uniform_source,
)
from .random import MAX_RANDOM_ENTRIES, random_iid, random_markov

__all__ = [
    "DepthPositionalSource",
    "EMPTY_PREFIX",
    "MAX_ENUMERATION",
    "MAX_RANDOM_ENTRIES",
    "Enumeration",
    "GreedySource",
    "IIDSource",
    "LoggedRows",
    "MarkovSource",
    "TAIL_MODES",
    "PositionalSource",
    "Source",
    "TableSource",
    "bernoulli",
    "check_enumeration",
    "extend_prefixes",
    "load_logged_rows",
    "load_source",
    "log_rows",
    "random_iid",
    "random_markov",
    "save_source",
    "source_from_json",
    "uniform_source",
]
