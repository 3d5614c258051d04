"""The law of the candidate tuple: exact enumeration, sampling, inclusion probabilities, the race formula (7).

Spec: ``docs/mcsd.md``, ``docs/multi_draft_otm.md``.
"""

from __future__ import annotations

import math

import array_api_compat
import numpy as np

from ..checks import (
    COUNT_CAP,
    MAX_CANDIDATES,
    MAX_STEP_ENTRIES,
    capped_perm,
    capped_power,
    check_flag,
    check_size,
    check_unit_interval,
    format_count,
    integer_array,
)
from ..distributions import namespace, one_row, sample_categorical, uniform, validate_probs
from ..errors import SizeLimitError

__all__ = ["DRAWS", "MAX_DRAFT_TUPLES", "MAX_RACE_CELLS", "RACE_STEP", "draft_inclusion_probs", "race_step", "draft_tuple_law",
           "draw_name", "hub_token", "inclusion_iid", "prob_drafts_within", "sample_candidates", "top_tokens_of",
           "tuple_membership"]

#: How k candidates are drawn from one draft row, by the value of a ``replacement`` argument: i.i.d. (True),
#: sequentially without replacement (False), Hu et al.'s greedy drafts ("greedy": the top k − 1 tokens of p,
#: then one token from p restricted to the rest) and SpecHub's hub drafts ("hub", k <= 2: X_1 ~ p, then the
#: hub a = argmax p if X_1 != a, else a token from p restricted to the rest).
DRAWS = {True: "iid", False: "without", "greedy": "greedy", "hub": "hub"}

#: Most tuples :func:`draft_tuple_law` enumerates by default (with replacement s^k, without
#: s!/(s−k)!, s = number of tokens with p > 0): 2^20 tuples of k int64 entries.
MAX_DRAFT_TUPLES = 2**20
#: Most numbers (tokens × (k+1) × quadrature nodes) held by the leave-one-out race
#: computation of :func:`draft_inclusion_probs` without replacement (8 bytes each).
MAX_RACE_CELLS = 2**24
#: Largest step of the trapezoid rule in v = log t for the exponential-race integral (7); the step for k
#: drafts is :func:`race_step`. The integrand is analytic in a strip around the real v axis and decays
#: double-exponentially (t → ∞) and like e^{(k+1)v} (t → 0), so the rule converges geometrically in 1/h;
#: the strip narrows like 1/sqrt(k) (P(N_A(t) >= k) turns from 0 to 1 over a v-width of order 1/sqrt(k)).
#: Against the exact permutation sum (random rows, V <= 7, masses down to 1e-14) the worst error was 1.4e-14
#: at h = 0.1 and 4e-15 at h = 0.2; against the rule at h/2 on OTM-k cuts at V = 4,000, the largest step
#: with errors below 1e-14 was 0.2 at k = 8, 0.15 at 16, 0.1 at 32 and 64, 0.05 at 128 and 256 (h = 0.1
#: erred by 1e-11 at k = 128 and 5e-8 at k = 256).
RACE_STEP = 0.2


def check_k(k) -> int:
    """k, a number of drafts: an integer >= 1, at most 2^63 (the closed forms take any k a count holds)."""
    return check_size(k, "k", what="an integer number of drafts", limit=COUNT_CAP, limit_name="2^63")


def draw_name(replacement) -> str:
    """The draw mode of a ``replacement`` argument (a key of :data:`DRAWS`), or a ValueError."""
    for key, name in DRAWS.items():
        if replacement is key or (isinstance(replacement, str) and replacement == key) or (
                isinstance(replacement, bool | np.bool_) and bool(replacement) is key):
            return name
    raise ValueError(f"replacement: expected True (i.i.d.), False (without replacement), 'greedy' or 'hub', "
                     f"got {replacement!r}")


def tuple_count(s: int, k: int, replacement) -> int:
    """Tuples of positive probability (capped at :data:`COUNT_CAP`)."""
    draw = draw_name(replacement)
    if draw in ("greedy", "hub"):
        return max(1, 2 * s)
    return capped_power(s, k) if draw == "iid" else capped_perm(s, k)


def top_tokens_of(p: np.ndarray, n: int) -> np.ndarray:
    """The n most probable tokens of positive mass of a row, by decreasing p, ties to the lower id."""
    order = np.lexsort((np.arange(p.size), -p))
    return order[:n][p[order[:n]] > 0]


def hub_token(p: np.ndarray) -> int:
    """SpecHub's hub: argmax p, ties to the lower id."""
    return int(np.argmax(p))


def _structured_law(p: np.ndarray, k: int, draw: str) -> tuple[np.ndarray, np.ndarray]:
    """Every tuple of the greedy or hub draw with its probability (module :data:`DRAWS`)."""
    if draw == "hub" and k > 2:
        raise ValueError(f"SpecHub's hub draw is defined for k <= 2 drafts, got k = {k}")
    if draw == "hub" and k == 2:
        a = hub_token(p)
        rest = np.flatnonzero((p > 0) & (np.arange(p.size) != a))
        if rest.size == 0:
            return np.array([[a, -1]], dtype=np.int64), np.ones(1)
        tuples = np.concatenate([np.stack([rest, np.full(rest.size, a)], 1), np.stack([np.full(rest.size, a), rest], 1)])
        return tuples.astype(np.int64), np.concatenate([p[rest], p[a] * p[rest] / p[rest].sum()])
    top = top_tokens_of(p, k - 1)
    rest = np.flatnonzero(p > 0)
    rest = rest[~np.isin(rest, top)]
    head = np.full(k - 1, -1, dtype=np.int64)
    head[:top.size] = top
    if rest.size == 0:
        return np.concatenate([head, [-1]])[None].astype(np.int64), np.ones(1)
    tuples = np.concatenate([np.broadcast_to(head, (rest.size, k - 1)), rest[:, None]], axis=1)
    return tuples.astype(np.int64), p[rest] / p[rest].sum()


def draft_tuple_law(draft, k: int, replacement: bool = True, *,
                    max_tuples: int = MAX_DRAFT_TUPLES) -> tuple[np.ndarray, np.ndarray]:
    r"""The law P_D of the candidate tuple: every tuple of positive probability, exactly.

    With replacement P_D(x) = ∏_i p(x_i). Without replacement

    .. math::
        P_D(x) = \prod_{i=1}^{k} \frac{p(x_i)}{\sum_{z \notin \{x_1..x_{i-1}\}} p(z)},
        \qquad x_i \text{ distinct},

    each remaining mass summed over the tokens not drawn yet (no cancellation when the drawn
    tokens carry almost all the mass); tuples that exhaust the support are padded with -1.

    Parameters
    ----------
    draft : array_like, shape (V,)
        p, a probability row.
    k : int
        Number of candidates, >= 1.
    replacement : bool or str
        i.i.d. candidates (True), sequential sampling without replacement (False), or a structured draw
        ("greedy", "hub"; :data:`DRAWS`).
    max_tuples : int
        Refuse (:class:`~otspec.errors.SizeLimitError`) more tuples than this.

    Returns
    -------
    tuples : ndarray of int64, shape (M, k)
        Lexicographic order over the draft support (-1 padding last).
    probs : ndarray, shape (M,)
        P_D of each tuple; all positive, summing to 1 up to rounding.

    >>> tuples, probs = draft_tuple_law([0.5, 0.5], 2, replacement=False)
    >>> tuples.tolist(), probs.tolist()
    ([[0, 1], [1, 0]], [0.5, 0.5])
    """
    p, k, draw = one_row(draft, "draft"), check_k(k), draw_name(replacement)
    max_tuples = check_size(max_tuples, "max_tuples", limit=MAX_DRAFT_TUPLES, limit_name="MAX_DRAFT_TUPLES")
    if draw in ("greedy", "hub"):
        return _structured_law(p, k, draw)
    replacement = draw == "iid"
    supp = np.flatnonzero(p > 0)
    s = supp.size
    n = tuple_count(s, k, replacement)
    if n > max_tuples:
        limit = "MAX_DRAFT_TUPLES" if max_tuples == MAX_DRAFT_TUPLES else "max_tuples"
        count = format_count(n)
        raise SizeLimitError(f"the draft law {'with' if replacement else 'without'} replacement of k={k} drafts "
                             f"over {s} tokens of positive probability has {count} tuples, above {limit} = "
                             f"{max_tuples:,} (the enumeration exceeds max_tuples); use otm_value (no "
                             "enumeration) instead", size=n, limit=max_tuples)
    if n * k > MAX_STEP_ENTRIES:  # one tuple, k = 10^15 ids long, on a one-token support
        raise SizeLimitError(f"the draft law of k={k:,} drafts is {format_count(n)} tuples x k = "
                             f"{format_count(n * k)} token ids, above MAX_STEP_ENTRIES = {MAX_STEP_ENTRIES:,}",
                             size=n * k, limit=MAX_STEP_ENTRIES)
    if replacement:
        idx = np.indices((s,) * k).reshape(k, -1).T  # C order = lexicographic
        tuples = supp[idx]
        return tuples.astype(np.int64), np.prod(p[tuples], axis=1)
    # level by level: children in increasing token order
    kk = min(k, s)
    ps = p[supp]
    prefix = np.zeros((1, 0), dtype=np.int64)  # positions in supp
    probs = np.ones(1)
    avail = np.ones((1, s), dtype=bool)
    for _ in range(kk):
        rem = (ps[None, :] * avail).sum(axis=1)
        row, col = np.nonzero(avail)
        probs = probs[row] * ps[col] / rem[row]
        prefix = np.concatenate([prefix[row], col[:, None]], axis=1)
        avail = avail[row]
        avail[np.arange(row.size), col] = False
    tuples = np.full((prefix.shape[0], k), -1, dtype=np.int64)
    tuples[:, :kk] = supp[prefix]
    return tuples, probs


def tuple_membership(tuples, vocab_size: int) -> np.ndarray:
    """Boolean matrix (M, V): entry [m, y] is True iff token y appears in tuple m (-1 = padding)."""
    V = check_size(vocab_size, "vocab_size")
    tuples = integer_array(tuples, "tuples", "tuples of token ids, shape (M, k)", ndim=2)  # 0.5 was read as 0
    if tuples.shape[0] * (V + 1) > MAX_STEP_ENTRIES:
        raise SizeLimitError(f"a membership matrix of {tuples.shape[0]:,} tuples x V + 1 = {V + 1:,} is above "
                             f"MAX_STEP_ENTRIES = {MAX_STEP_ENTRIES:,}", size=tuples.shape[0] * (V + 1),
                             limit=MAX_STEP_ENTRIES)
    if tuples.size and (tuples.max() >= V or tuples.min() < -1):
        raise ValueError(f"tuples: entries must be token ids in [0, {V}) or -1 (padding)")
    member = np.zeros((tuples.shape[0], V + 1), dtype=bool)  # column V collects the -1 padding
    member[np.arange(tuples.shape[0])[:, None], tuples] = True
    return member[:, :V]


def one_hot(tokens, V, like):
    """(B, V) rows of ``like``'s dtype with a 1 at each token (all zero for -1)."""
    xp = namespace(like)
    ids = xp.arange(V, device=array_api_compat.device(like))
    return xp.astype(tokens[:, None] == ids, like.dtype)


def sample_candidates(draft_probs, k: int, rng, replacement: bool = True, *, validate: bool = True):
    """Draw k candidates per row of ``draft_probs`` (B, V) → int (B, k).

    ``replacement=True``: i.i.d. from p. ``replacement=False``: sequentially without
    replacement (candidate i from p restricted to the tokens not drawn yet, renormalised;
    MCSD eq. (1)); once the draft support is exhausted the remaining slots are -1.
    ``"greedy"`` and ``"hub"``: the structured draws of :data:`DRAWS`.
    ``rng`` is a numpy ``Generator`` or a ``torch.Generator``. ``validate=False`` skips the checks of
    the rows, which read values back from a device: a decode loop draws from rows it knows to be valid
    without waiting for the GPU.
    """
    k = check_size(k, "k", minimum=0, what="a non-negative number of candidates (an integer)", limit=MAX_CANDIDATES,
                   limit_name="MAX_CANDIDATES")
    draw = draw_name(replacement)
    p = validate_probs(draft_probs, "draft_probs", min_ndim=2) if check_flag(validate, "validate") else draft_probs
    if p.ndim != 2:
        raise ValueError(f"draft_probs: expected shape (batch, V), got {tuple(p.shape)}")
    xp = namespace(p)
    B, V = p.shape
    if k == 0:
        return xp.zeros((B, 0), dtype=xp.int64, device=array_api_compat.device(p))
    if draw in ("greedy", "hub"):
        if isinstance(p, np.ndarray):
            return _sample_structured(p, k, rng, draw)
        return _sample_structured_xp(p, k, rng, draw)
    if draw == "iid":
        u = uniform(rng, (B, k), p)
        return xp.astype(sample_categorical(xp.broadcast_to(p[:, None, :], (B, k, V)), rng, u, check=validate),
                         xp.int64)
    drafted = xp.zeros_like(p)
    out = []
    for _ in range(k):
        w = p * (1.0 - drafted)
        left = xp.sum(w, axis=-1) > 0  # rows whose support is not exhausted yet
        x = xp.astype(sample_categorical(xp.where(left[:, None], w, p), rng, check=validate), xp.int64)
        x = xp.where(left, x, xp.full_like(x, -1))
        drafted = drafted + one_hot(x, V, p)
        out.append(x)
    return xp.stack(out, axis=1)


def _sample_structured_xp(p, k: int, rng, draw: str):
    """:func:`_sample_structured` on torch rows, on their device and without reading anything back (the same law;
    the draws come from the torch generator)."""
    xp = namespace(p)
    V = p.shape[1]
    ids = xp.arange(V, device=array_api_compat.device(p))

    def rest(excluded):  # one token from p without the excluded ones; -1 where nothing is left
        w = xp.where(excluded, xp.zeros_like(p), p)
        left = xp.sum(w, axis=-1) > 0
        x = xp.astype(sample_categorical(xp.where(left[:, None], w, p), rng, check=False), xp.int64)
        return xp.where(left, x, xp.full_like(x, -1))

    if draw == "hub":
        if k > 2:
            raise ValueError(f"SpecHub's hub draw is defined for k <= 2 drafts, got k = {k}")
        first = xp.astype(sample_categorical(p, rng, check=False), xp.int64)
        if k == 1:
            return first[:, None]
        hub = xp.astype(xp.argmax(p, axis=1), xp.int64)
        return xp.stack([first, xp.where(first != hub, hub, rest(ids[None, :] == hub[:, None]))], axis=1)
    order = xp.astype(xp.argsort(-p, axis=1, stable=True)[:, :k - 1], xp.int64)  # ties: the smaller id first
    head = xp.where(xp.take_along_axis(p, order, axis=1) > 0, order, xp.full_like(order, -1))
    excluded = xp.any(ids[None, None, :] == order[:, :, None], axis=1)
    return xp.concat([head, rest(excluded)[:, None]], axis=1)


def _draw_rest(p: np.ndarray, excluded: np.ndarray, rng) -> np.ndarray:
    """One token per row from p without the ``excluded`` tokens (B, V) bool, renormalised; -1 where no mass is left."""
    w = np.where(excluded, 0.0, p)
    left = w.sum(axis=1) > 0
    out = np.full(p.shape[0], -1, dtype=np.int64)
    if left.any():
        out[left] = np.asarray(sample_categorical(w[left] / w[left].sum(axis=1, keepdims=True), rng), dtype=np.int64)
    return out


def _sample_structured(p: np.ndarray, k: int, rng, draw: str) -> np.ndarray:
    """Greedy or hub candidates for each row of p (B, V): see :data:`DRAWS`."""
    B, V = p.shape
    if draw == "hub":
        if k > 2:
            raise ValueError(f"SpecHub's hub draw is defined for k <= 2 drafts, got k = {k}")
        first = np.asarray(sample_categorical(p, rng), dtype=np.int64)
        if k == 1:
            return first[:, None]
        hub = np.argmax(p, axis=1)
        second = np.where(first != hub, hub, _draw_rest(p, np.arange(V) == hub[:, None], rng))
        return np.stack([first, second], axis=1)
    order = np.lexsort((np.broadcast_to(np.arange(V), (B, V)), -p), axis=-1)[:, :k - 1]
    head = np.where(np.take_along_axis(p, order, axis=1) > 0, order, -1)
    excluded = np.zeros((B, V), dtype=bool)
    np.put_along_axis(excluded, order, True, axis=1)
    return np.concatenate([head, _draw_rest(p, excluded, rng)[:, None]], axis=1).astype(np.int64)


# ================================================================= P_D(S ⊆ A): the race
def race_step(k: int) -> float:
    """The trapezoid step for k drafts: min(:data:`RACE_STEP`, 0.55 / sqrt(k)) (0.19 at k = 8, 0.034 at k = 256)."""
    return min(RACE_STEP, 0.55 / math.sqrt(k))


def race_nodes(k: int, s_min: float) -> tuple[np.ndarray, float]:
    """Nodes t = e^v of the trapezoid rule in v for ∫ s e^{-st} P(N_A(t) >= k) dt, all s >= s_min.

    Below v_lo the integrand (in v) is at most s t^{k+1}/k! (P(N >= k) <= (p(A)t)^k/k!, s <= 1),
    whose integral over v < v_lo is e^{(k+1) v_lo}/(k+1)! < 1e-18; above v_hi the weight's tail e^{-s t} is < 1e-19.
    """
    h = race_step(k)
    v_lo = (math.log(1e-18) + math.lgamma(k + 2)) / (k + 1) - 0.5
    v_hi = math.log(45.0 / s_min) + 1.0
    return np.exp(np.arange(v_lo, v_hi + h, h)), h


def race_weights(s, t: np.ndarray, h: float) -> np.ndarray:
    """h · s t e^{-s t}: the trapezoid weights of the density s e^{-st} dt = s t e^{-st} dv."""
    st = np.multiply.outer(np.asarray(s, dtype=np.float64), t)
    return h * st * np.exp(-st)


def race_add_token(dp: np.ndarray, rate: float, t: np.ndarray) -> None:
    """Poisson-binomial DP, in place: dp[i] = P(N = i) (i < k), dp[k] = P(N >= k), one more token."""
    b = -np.expm1(-rate * t)  # P(arrived by t)
    c = np.exp(-rate * t)
    k = dp.shape[0] - 1
    moved = dp[:k] * b
    dp[:k] *= c
    dp[1:] += moved


def _race_within(inside: np.ndarray, s: float, k: int) -> float:
    """P_D(S ⊆ A) without replacement from A's positive masses and s = p(outside A), eq. (7)."""
    if s <= 0:
        return 1.0
    if inside.size < k:
        return 0.0
    t, h = race_nodes(k, s)
    dp = np.zeros((k + 1, t.size))
    dp[0] = 1.0
    for rate in inside:
        race_add_token(dp, float(rate), t)
    return float(min(1.0, race_weights(s, t, h) @ dp[k]))


def prob_drafts_within(draft, subset, k: int, replacement: bool = True, method: str = "race") -> float:
    r"""P_D(S(X) ⊆ A): the probability that every candidate lies in the token set A.

    With replacement this is p(A)^k. Without replacement (spec eq. (7)), draw order = order
    of independent arrival times T_x ~ Exp(p(x)) (an exponential race), so S ⊆ A iff the
    k-th arrival in A precedes the first arrival outside A, which is Exp(s), s = p(Ω∖A):

    .. math::
        P_D(S \subseteq A) = \int_0^\infty s e^{-st}\, P(N_A(t) \ge k)\, dt,

    N_A(t) Poisson-binomial with success probabilities 1 − e^{−p(x) t}, x ∈ A (O(|A|·k) DP
    per node). The integral is taken by the trapezoid rule in v = log t with step
    :func:`race_step` (errors <= 1e-14 against the permutation sum).

    Parameters
    ----------
    draft : array_like, shape (V,)
    subset : array_like of int, or bool mask of shape (V,)
        The token set A.
    k : int
    replacement : bool
    method : {"race", "enumerate"}
        Without replacement: the integral above, or the exact sum over the tuples of
        :func:`draft_tuple_law`.
    """
    p = one_row(draft, "draft")
    k, replacement = check_k(k), check_flag(replacement, "replacement")
    A = np.asarray(subset)
    if A.dtype == bool:
        if A.shape != p.shape:
            raise ValueError(f"subset: a boolean mask must have shape {p.shape}, got {A.shape}")
        A = np.flatnonzero(A)
    if A.ndim > 1:  # a 2-D list was flattened
        raise ValueError(f"subset: expected token ids (a 1-D list of integers) or a boolean mask of shape {p.shape}, "
                         f"got shape {A.shape}")
    A = np.unique(integer_array(A, "subset", f"token ids or a boolean mask of shape {p.shape}").reshape(-1))
    if A.size and (A.min() < 0 or A.max() >= p.size):
        raise ValueError(f"subset: token ids must lie in [0, {p.size})")
    if method not in ("race", "enumerate"):
        raise ValueError(f"method: expected 'race' or 'enumerate', got {method!r}")
    if replacement:
        return float(p[A].sum()) ** k
    mask = np.zeros(p.size + 1, dtype=bool)
    mask[A] = True
    if method == "enumerate":
        tuples, probs = draft_tuple_law(p, k, False)
        mask[-1] = True  # the -1 padding is inside every set
        return float(probs[mask[tuples].all(axis=1)].sum())
    mask = mask[:-1]
    return _race_within(p[mask & (p > 0)], float(p[~mask].sum()), k)


def inclusion_iid(s, k: int):
    """1 − (1 − s)^k, accurate for small s (s = 1 gives 1): P(a token of mass s is among k i.i.d. draws).

    ``s`` is a mass or an array of them, each in [0, 1]; ``k`` an integer >= 1.
    """
    s, k = check_unit_interval(s, "s"), check_k(k)
    with np.errstate(divide="ignore"):
        return -np.expm1(k * np.log1p(-np.minimum(s, 1.0)))


def draft_inclusion_probs(draft, k: int, replacement: bool = True) -> np.ndarray:
    r"""P_D(y ∈ S(X)) for every token y, shape (V,).

    With replacement 1 − (1 − p(y))^k. Without replacement P(y ∉ S) = P_D(S ⊆ Ω∖{y}) by the
    race formula (7) with s = p(y), the Poisson-binomial law of the other tokens obtained by
    combining prefix and suffix DPs (leave-one-out): O(V·k·nodes) time and at most
    :data:`MAX_RACE_CELLS` stored numbers.

    >>> draft_inclusion_probs([0.5, 0.5], 2).tolist()
    [0.75, 0.75]
    """
    p = one_row(draft, "draft")
    k = check_k(k)
    if check_flag(replacement, "replacement"):
        return inclusion_iid(p, k)
    supp = np.flatnonzero(p > 0)
    n = supp.size
    out = np.zeros(p.size)
    if n <= k:  # every token of the support is drawn
        out[supp] = 1.0
        return out
    ps = p[supp]
    t, h = race_nodes(k, float(ps.min()))
    cells = (n + 1) * (k + 1) * t.size
    if cells > MAX_RACE_CELLS:
        raise SizeLimitError(f"draft_inclusion_probs without replacement would hold {cells:,} numbers for {n} "
                             f"tokens, above MAX_RACE_CELLS = {MAX_RACE_CELLS:,}", size=cells, limit=MAX_RACE_CELLS)
    pre = np.zeros((n + 1, k + 1, t.size))
    pre[0, 0] = 1.0
    for i in range(n):
        pre[i + 1] = pre[i]
        race_add_token(pre[i + 1], float(ps[i]), t)
    suf = np.zeros((k + 1, t.size))
    suf[0] = 1.0
    for i in range(n - 1, -1, -1):  # suf: tokens after i; pre[i]: tokens before i
        tail = np.cumsum(suf[::-1], axis=0)[::-1]  # tail[c] = P(N_suffix >= c)
        at_least_k = np.einsum("an,an->n", pre[i], tail[::-1])  # Σ_a P(pre = a) P(suf >= k − a)
        out[supp[i]] = 1.0 - float(race_weights(ps[i], t, h) @ at_least_k)
        race_add_token(suf, float(ps[i]), t)
    return np.clip(out, 0.0, 1.0)


