"""The engine's entry checks: what ``evaluate``, ``simulate``, ``generate`` and the tree functions accept.

Each refusal names the argument and what was expected, and where an argument is of the wrong kind for the function
(a multi-draft or whole-tree verifier given to a chain function, a tree given as a draft length) it names the
function that takes it. What is natural is accepted as numpy accepts array-likes: a probability row (a list, a numpy
array) stands for the IID source that draws every token from it, and a tree spec string (``"2x1"``,
``"eagle2:3:2:4"``) for the tree :func:`~otspec.drafts.parse_tree` reads.

>>> from otspec.engine import evaluate
>>> from otspec.verifiers import TokenVerify
>>> round(evaluate([0.6, 0.3, 0.1], [0.2, 0.5, 0.3], TokenVerify(), 2).expected_accepted, 12)  # α + α², α = 0.6
0.96
"""

from __future__ import annotations

import array_api_compat
import numpy as np

from ..checks import read_numbers
from ..distributions import validate_probs
from ..drafts import ConfidenceTree, DraftTree, parse_tree
from ..pairs import check_pair
from ..sources import IIDSource, Source

__all__ = ["TREE_FUNCTIONS", "as_source", "as_sources", "as_tree", "chain_call", "check_chain_verifier",
           "check_draft_length", "check_verifier", "rng_of"]

#: Where trees go: the engine's tree functions.
TREE_FUNCTIONS = "otspec.engine.tree_law, simulate_tree or generate_tree"


def as_source(source, name: str) -> Source:
    """``source`` as a :class:`~otspec.sources.Source`: a source as it is, one probability row (1-D array-like) as
    the IID source of that row; anything else refused naming ``name``."""
    if isinstance(source, Source):
        return source
    if isinstance(source, (str, bytes, dict, type(None), bool)) or isinstance(source, type):
        raise ValueError(f"{name}: expected a Source (otspec.IIDSource, otspec.MarkovSource, ...) or one probability "
                         f"row, got {type(source).__name__}")
    if array_api_compat.is_array_api_obj(source):  # numpy or torch: read in its own dtype (float16 keeps its tolerance)
        row = source
    else:  # a list or tuple, read entry by entry (text and booleans are refused, not read as numbers)
        _, row = read_numbers(source, name, "a Source or one probability row (real numbers)")
    if row.ndim != 1:
        raise ValueError(f"{name}: expected a Source or one probability row (shape (V,)), got an array of shape "
                         f"{tuple(row.shape)}; a Markov chain is otspec.MarkovSource(initial, transition)")
    if row is not source:  # a list: refused naming the argument at its entries' tolerance, then built as IIDSource
        validate_probs(source, name)  # builds it (the same numbers as IIDSource(list) to the last bit)
        return IIDSource(source)
    checked = validate_probs(row, name)  # refused naming the argument (complex, NaN, negative, unnormalised ...)
    if isinstance(row, np.ndarray) and row.dtype == np.float64:
        return IIDSource(row)  # built as IIDSource(row) builds it: the same numbers to the last bit
    if hasattr(checked, "detach"):  # a torch tensor, on any device
        checked = checked.detach().cpu().double().numpy()
    checked = np.asarray(checked, dtype=np.float64)
    return IIDSource(checked / checked.sum())  # float16/32 rows within their tolerance, renormalised in float64


def as_sources(draft, target) -> tuple[Source, Source]:
    """(draft, target) as sources (:func:`as_source`)."""
    return as_source(draft, "draft"), as_source(target, "target")


def check_verifier(verifier) -> None:
    """Refuse what is not a verifier instance (a class, a name, anything else), naming what was given."""
    if isinstance(verifier, type):
        raise ValueError(f"verifier: got the class {verifier.__name__}; pass an instance, {verifier.__name__}()")
    if getattr(verifier, "layout", None) not in ("chain", "candidates", "tree"):
        raise ValueError(f"verifier: expected an otspec verifier (e.g. otspec.verifiers.TokenVerify()), got "
                         f"{type(verifier).__name__}")


def check_chain_verifier(verifier, where: str) -> None:
    """Refuse a verifier that does not verify a chain of draft tokens, naming the functions that take it."""
    check_verifier(verifier)
    name = type(verifier).__name__
    if verifier.layout == "candidates":
        raise ValueError(f"{name} verifies k candidates at one position, not a chain; {where} takes chain verifiers. "
                         f"Trees of candidates go to {TREE_FUNCTIONS} with a DraftTree (DraftTree.parse('4x1'): 4 "
                         "candidates, one level); one position to otspec.engine.simulate_candidates")
    if verifier.layout == "tree":
        raise ValueError(f"{name} verifies a whole drafted tree; {where} takes chain verifiers. Use {TREE_FUNCTIONS} "
                         "with a DraftTree (DraftTree.chain(L): a chain of L tokens)")


def check_draft_length(draft_length, where: str) -> None:
    """Refuse a tree given where a draft length goes, naming the functions that take trees."""
    spec = isinstance(draft_length, str) and ("x" in draft_length.lower() or draft_length.lower().startswith(
        ("eagle2", "iid:")))  # a tree spec string; other strings are refused as draft lengths
    if isinstance(draft_length, (DraftTree, ConfidenceTree)) or spec:
        raise ValueError(f"draft_length: got the tree {draft_length!r}; {where} drafts chains of L tokens, trees go "
                         f"to {TREE_FUNCTIONS} (e.g. tree_law(draft, target, KSeq(), DraftTree.parse('2x1')))")


def chain_call(where: str, draft, target, verifier, draft_length) -> tuple[Source, Source]:
    """The entry check of the chain functions (``evaluate``, ``simulate``, ``generate``, named by ``where``): the
    sources (:func:`as_sources`), a tree given as the draft length, then a verifier of another layout; returns
    (draft, target) as sources."""
    draft, target = as_sources(draft, target)
    check_pair(draft, target, depth_aware=where == "generate")  # only the decode loop follows rows by depth
    check_draft_length(draft_length, where)
    check_chain_verifier(verifier, where)
    return draft, target


def as_tree(tree):
    """``tree`` as a :class:`~otspec.drafts.DraftTree` or :class:`~otspec.drafts.ConfidenceTree`: a tree as it is, a
    spec string through :func:`~otspec.drafts.parse_tree` (children drawn with replacement; for another draw pass
    ``parse_tree(spec, replacement=False)``)."""
    if isinstance(tree, (DraftTree, ConfidenceTree)):
        return tree
    if isinstance(tree, str):
        return parse_tree(tree)
    if isinstance(tree, (int, np.integer)) and not isinstance(tree, bool):
        raise ValueError(f"tree: got the integer {tree}; a chain of L tokens is DraftTree.chain(L), or use evaluate, "
                         "simulate or generate with draft_length")
    raise ValueError(f"tree: expected a DraftTree, a ConfidenceTree or a spec string such as '2x1' or 'eagle2:3:2:4', "
                     f"got {type(tree).__name__}")


def rng_of(seed) -> np.random.Generator:
    """The generator of ``seed``: a numpy ``Generator`` as it is, an integer >= 0 (not a bool), a ``SeedSequence`` or
    None (fresh entropy) through ``numpy.random.default_rng``; anything else refused naming ``seed``."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or isinstance(seed, np.random.SeedSequence):
        return np.random.default_rng(seed)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected an integer >= 0 or a numpy Generator, got {seed!r} ({type(seed).__name__})")
    return np.random.default_rng(int(seed))
