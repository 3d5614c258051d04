"""The optimal multi-draft coupling OTM-k as a verifier (SpecTr §5; spec ``multi_draft_otm.md`` §2)."""

from __future__ import annotations

import array_api_compat
import numpy as np

from ..checks import capped_power, check_flag, check_size, format_count
from ..distributions import host_to_like, sample_categorical, to_host
from ..drafts.laws import MAX_DRAFT_TUPLES
from ..errors import SizeLimitError
from ..solvers.otm import otm_maxflow
from ..solvers.otm_dual import otm_value
from .candidates import MultiDraftVerifier, membership_law, membership_outcome
from .registry import register

__all__ = ["OTM_MAX_TUPLES", "OTMVerify"]

#: Default bound on V**k for :class:`OTMVerify` (the plan has V**(k+1) entries).
OTM_MAX_TUPLES = 4096


def _encode(tuples, V):
    """Integer code of each row of an int (M, k) array with entries in [-1, V)."""
    weights = (V + 1) ** np.arange(tuples.shape[1], dtype=np.int64)
    return (tuples.astype(np.int64) + 1) @ weights


@register
class OTMVerify(MultiDraftVerifier):
    """Y ~ π(x^k, ·)/P_D(x^k) for the optimal plan π between the candidate-tuple law P_D and q.

    For each distinct (p, q) row pair the plan is solved exactly by
    :func:`otspec.solvers.otm.otm_maxflow` (cached by the rows' bytes); Y is drawn from the
    plan's row of the given tuple and accepted iff Y ∈ S(x^k), so the expected acceptance is
    the optimum α_k. Optimal plans are many, and in a draft tree the levels below depend on which one is
    followed; this one is canonical (:data:`otspec.solvers.otm.CANONICAL_PLAN`), a function of the rows alone,
    the same in every run: among the plans attaining α_k, the one of greatest E[number of drafts equal to Y]
    (the nodes SpecTr's match rule continues with), then of lexicographically greatest accepted flows from the
    draft multisets (in the order of their first tuple) to their tokens (ascending); a multiset's flow is split
    over its tuples in proportion to their probability, so reorderings of a tuple share one conditional law.

    Tokens outside both rows' supports take no part in the plan, so each pair is solved on its joint support:
    numpy-only, for small supports (after top-k / top-p truncation a language model's rows qualify):
    support**k may not exceed ``max_tuples``.

    Parameters
    ----------
    replacement : bool
        Draft mode the plan is built for (the candidates must be drawn that way).
    max_tuples : int
        Largest V**k accepted.
    cache_size : int
        Plans kept (oldest dropped first).
    """

    name = "otm"
    label = "OTM optimum (i.i.d. drafts)"
    style = {"linestyle": "-", "color": "C0"}
    #: Torch rows are read back once per call: the plan is a max-flow per row pair, solved on the host.
    reads_back = True
    #: The plan is for exactly k candidates drawn from the row: no −1 slots (trees are walked on tries).
    padded_candidates = False

    def __init__(self, replacement: bool = True, max_tuples: int = OTM_MAX_TUPLES, cache_size: int = 1024):
        self.replacement = check_flag(replacement, "replacement")  # the text 'False' is true: refused
        self.max_tuples = check_size(max_tuples, "max_tuples", limit=MAX_DRAFT_TUPLES, limit_name="MAX_DRAFT_TUPLES")
        self.cache_size = check_size(cache_size, "cache_size", minimum=0)
        self._cache: dict = {}
        if not self.replacement:
            self.label = "optimum, drafts w/o replacement"
            self.style = {"linestyle": ":", "color": "C0"}

    def expected_acceptance(self, draft, target, k: int) -> float:
        """α_k, the optimum this verifier attains (min-cut dual, no tuple enumeration)."""
        return otm_value(draft, target, k, self.replacement)

    def __repr__(self):
        return f"OTMVerify(replacement={self.replacement})"

    def plan(self, draft_row, target_row, k: int):
        """(tuples (M, k), plan (M, V)): the canonical optimal plan for one (p, q) pair, rows = tuples.

        ``tuples`` are those of positive probability (:func:`otspec.drafts.draft_tuple_law`);
        the row sums of ``plan`` are their probabilities and its column sums are q. The plan is the one
        :func:`otspec.solvers.otm.otm_maxflow` defines (:data:`otspec.solvers.otm.CANONICAL_PLAN`).
        """
        p = np.ascontiguousarray(draft_row, dtype=np.float64)
        q = np.ascontiguousarray(target_row, dtype=np.float64)
        key = (p.tobytes(), q.tobytes(), int(k))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        V = p.shape[0]
        count = capped_power(V, int(k))
        if count > self.max_tuples:
            raise SizeLimitError(f"OTMVerify: V**k = {V}**{k} = {format_count(count)} candidate tuples (V = the rows' "
                                 f"joint support) exceeds max_tuples={self.max_tuples}; the OTM plan is only practical "
                                 "for small supports and k (truncate the rows with top-k / top-p)",
                                 size=count, limit=self.max_tuples)
        out = otm_maxflow(p, q, int(k), self.replacement).plan
        if len(self._cache) >= self.cache_size:
            self._cache.pop(next(iter(self._cache)))
        self._cache[key] = out
        return out

    def _kernel(self, candidates, draft_probs, target_probs, validate):
        """(candidates, the law of Y for each row (B, V)) in the kind of the rows: torch rows are read back, the plans
        solved on the host (a max-flow per distinct row pair) and the kernel handed back on their device."""
        if any(array_api_compat.is_torch_array(a) for a in (candidates, draft_probs, target_probs)):
            like = next(a for a in (target_probs, draft_probs, candidates) if array_api_compat.is_torch_array(a))
            cands, kernel = self._kernel(*(to_host(a) for a in (candidates, draft_probs, target_probs)), validate)
            return host_to_like(cands, like), host_to_like(kernel, like).to(like.dtype)
        for arr in (candidates, draft_probs, target_probs):
            if array_api_compat.is_array_api_obj(arr) and not array_api_compat.is_numpy_array(arr):
                raise TypeError(f"OTMVerify takes numpy or torch rows; got {type(arr)}")
        d = self.check(candidates, draft_probs, target_probs, validate=validate)
        candidates = np.asarray(d.tokens)
        p, q = np.asarray(d.draft_probs, dtype=np.float64), np.asarray(d.target_probs, dtype=np.float64)
        B, k = candidates.shape
        V = p.shape[1]
        kernel = np.zeros((B, V))
        if B == 0 or k == 0:  # no candidate: nothing can be accepted, Y is drawn from q
            return candidates, q.copy() if k == 0 else kernel
        groups: dict = {}  # one plan per distinct (p, q) pair, on the pair's joint support (keyed by its bytes:
        for b in range(B):  # np.unique(axis=0) on rows of a real vocabulary took 50 ms per row)
            support = np.flatnonzero((p[b] > 0) | (q[b] > 0))
            key = (support.tobytes(), p[b, support].tobytes(), q[b, support].tobytes())
            groups.setdefault(key, (support, []))[1].append(b)
        for support, members in groups.values():
            rows = np.asarray(members, dtype=np.int64)
            tuples, plan = self.plan(p[rows[0], support], q[rows[0], support], k)
            codes = _encode(tuples, support.size)
            order = np.argsort(codes)
            cands = candidates[rows]
            at = np.minimum(np.searchsorted(support, cands), support.size - 1)
            inside = (cands < 0) | (support[at] == cands)
            want = _encode(np.where(cands < 0, -1, at), support.size)
            pos = np.minimum(np.searchsorted(codes[order], want), len(codes) - 1)
            found = inside.all(axis=1) & (codes[order][pos] == want)
            if not found.all():
                b = int(rows[np.flatnonzero(~found)[0]])
                mode = "with" if self.replacement else "without"
                raise ValueError(f"candidates: row {b} {candidates[b].tolist()} has probability 0 under sampling "
                                 f"{mode} replacement from draft_probs; OTMVerify(replacement={self.replacement}) "
                                 "needs candidates drawn that way")
            sel = plan[order[pos]]
            kernel[np.ix_(rows, support)] = sel / sel.sum(axis=1, keepdims=True)
        return candidates, kernel

    def law(self, candidates, draft_probs, target_probs, *, validate=True):
        return membership_law(*self._kernel(candidates, draft_probs, target_probs, validate))

    def sample(self, candidates, draft_probs, target_probs, rng, *, validate=True):
        candidates, kernel = self._kernel(candidates, draft_probs, target_probs, validate)
        y = sample_categorical(kernel, rng, check=validate)
        return membership_outcome(candidates, y.astype(np.int64) if isinstance(y, np.ndarray) else y.long())
