r"""Block laws on the prefix tree: their checks, the agreement length β and the optimum of eq. (8).

Spec ``token_and_block_verification.md`` §4–5. A block law is a vector of length N = V**L in
lexicographic order (token 0 first), as :meth:`otspec.sources.Source.enumerate` returns it, so
block index k has base-V digits x_1 … x_L (most significant first). β(x^L, y^L) is the length of
the longest common prefix of two blocks (eq. (5)); Theorem 1 of the v1 paper (eq. (8)) gives the
best expected β of any coupling of the draft's law p and the target's law q as
Σ_{ℓ=1..L} Σ_{x^ℓ} min(p(x^ℓ), q(x^ℓ)).

:class:`BlockOTResult` is the result type of every route; the solvers that return a plan as well
live in :mod:`otspec.solvers.block_ot` (linear programmes) and :mod:`otspec.solvers.block_tree`
(greedy matching on the prefix tree), and :mod:`~otspec.solvers.block_ot` re-exports everything here.

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..checks import MAX_DRAFT_LENGTH, capped_power, check_size, integer_array, real_array
from ..pairs import check_pair
from ..sources import Source

#: Largest accepted |sum(law) − 1| of a block law.
BLOCK_LAW_TOL = 1e-9

__all__ = [
    "BLOCK_LAW_TOL",
    "BlockOTResult",
    "block_laws",
    "block_ot_value",
    "check_block_shape",
    "common_prefix_length",
    "plan_expected_length",
    "prefix_tree_value",
    "validated_block_laws",
]


@dataclass(frozen=True)
class BlockOTResult:
    """Optimal block coupling, the result of every block OT route (:mod:`~otspec.solvers.block_ot`,
    :mod:`~otspec.solvers.block_tree`).

    Attributes
    ----------
    value : float
        Maximal expected accepted length E_π[β] (not the cost L − β).
    plan : scipy.sparse.coo_array, shape (V**L, V**L), or None
        π(x^L, y^L): rows are draft blocks, columns target blocks, lexicographic.
        ``None`` when the tree route was asked for the value only.
    status : str
        ``"optimal"``, or ``"optimal_inaccurate"`` when a cvxpy solver says so
        (its plan still met the marginals to :data:`~otspec.solvers.block_ot.CVXPY_RESIDUAL_TOL`; the
        value may be off by ~1e-7). Failures raise :class:`~otspec.solvers.block_ot.BlockOTSolveError`.
    message : str
        The solver's message.
    method : str
        ``"highs"``, ``"cvxpy:<SOLVER>"`` or ``"tree"``.
    n_variables : int
        LP routes: V**(2L) coupling variables. Tree route: Σ_{ℓ=1..L} V**ℓ
        prefix-tree nodes, the number of minima in eq. (8).
    """

    value: float
    plan: sp.coo_array | None
    status: str
    message: str
    method: str
    n_variables: int


def check_block_shape(vocab_size, draft_length) -> tuple[int, int, int]:
    """(V, L, N): the checked vocabulary size and draft length, and N = V**L (capped, so it stays small
    beyond every limit).

    Raises ``ValueError`` for a size below 1 or not an integer, :class:`~otspec.errors.SizeLimitError`
    for L above :data:`~otspec.checks.MAX_DRAFT_LENGTH`.
    """
    V = check_size(vocab_size, "vocab_size")
    L = check_size(draft_length, "draft_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    return V, L, capped_power(V, L)  # a count beyond every limit stays a small integer


def _check_law(law, name: str, n: int, V: int, L: int) -> np.ndarray:
    arr = real_array(law, name, finite=False)  # a copy ('0.5' and True refused): callers' arrays are never modified
    if arr.shape != (n,):
        raise ValueError(f"{name}: expected a block law of shape ({n},) = (vocab_size**draft_length,) "
                         f"for vocab_size={V}, draft_length={L}; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or infinite entries (first at index "
                         f"{int(np.flatnonzero(~np.isfinite(arr))[0])}); expected finite probabilities")
    if np.any(arr < 0):
        k = int(np.flatnonzero(arr < 0)[0])
        raise ValueError(f"{name}: negative probability {float(arr[k])!r} at index {k}; expected entries >= 0")
    total = float(arr.sum())
    if abs(total - 1.0) > BLOCK_LAW_TOL:
        raise ValueError(f"{name}: sums to {total!r}; expected a probability vector summing to 1 "
                         f"(tolerance {BLOCK_LAW_TOL:g})")
    return arr


def validated_block_laws(draft_law, target_law, vocab_size, draft_length):
    """(p, q, V, L, N): copies of both block laws, checked, with q rescaled to p's total so that the
    transport problem between them is exactly feasible.

    Raises ``ValueError`` for a law of the wrong shape, with a NaN, infinite or negative entry, or
    whose sum is off 1 by more than :data:`BLOCK_LAW_TOL`; sizes as :func:`check_block_shape`.
    """
    V, L, n = check_block_shape(vocab_size, draft_length)
    p = _check_law(draft_law, "draft_law", n, V, L)
    q = _check_law(target_law, "target_law", n, V, L)
    q *= p.sum() / q.sum()
    return p, q, V, L, n


def block_laws(draft: Source, target: Source, draft_length: int) -> tuple[np.ndarray, np.ndarray]:
    """The draft's and the target's laws of their first L tokens, as two block laws.

    p(x^L) = Π_{i=1..L} p(x_i | x^{i−1}) for every block x^L ∈ Ω^L, and the same for q; these are
    the marginals of the block transport problem, eq. (7) (eqs. (4)–(5) of [1]).

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    draft_length : int
        L >= 1, at most :data:`~otspec.checks.MAX_DRAFT_LENGTH` and either source's horizon.

    Returns
    -------
    p, q : ndarray of float64, shape (V**L,) each
        Lexicographic block laws (block k has base-V digits x_1 … x_L).

    Raises
    ------
    ValueError
        On a vocabulary mismatch, or (from :meth:`~otspec.sources.Source.enumerate`)
        when V**L exceeds :data:`~otspec.sources.MAX_ENUMERATION` or a horizon.

    References
    ----------
    .. [1] Z. Sun, J. H. Ro, A. Beirami, A. T. Suresh, "Optimal Block-Level Draft Verification for
       Accelerating Speculative Decoding", arXiv:2403.10444v1, 2024.

    Examples
    --------
    Two Bernoulli sources (P(token 1) = 0.25 and 0.75); blocks 00, 01, 10, 11:

    >>> from otspec.sources import bernoulli
    >>> p, q = block_laws(bernoulli(0.25), bernoulli(0.75), 2)
    >>> p.tolist()  # 0.75·0.75, 0.75·0.25, 0.25·0.75, 0.25·0.25
    [0.5625, 0.1875, 0.1875, 0.0625]
    >>> q.tolist()
    [0.0625, 0.1875, 0.1875, 0.5625]
    """
    check_pair(draft, target)
    check_block_shape(draft.vocab_size, draft_length)
    return draft.enumerate(draft_length).probs, target.enumerate(draft_length).probs


def common_prefix_length(draft_blocks, target_blocks, vocab_size: int, draft_length: int) -> np.ndarray:
    """β of block pairs given by their lexicographic indices, eq. (5): the length of the longest common prefix.

    Two blocks agree on their first ℓ tokens iff their indices agree after integer division by
    V**(L−ℓ); β(x, y) = Σ_{ℓ=1..L} 1{x // V**(L−ℓ) = y // V**(L−ℓ)} counts the ℓ for which they do.
    L − β is the transport cost of the block problem [1].

    Parameters
    ----------
    draft_blocks, target_blocks : int array_like, broadcastable shapes
        Block indices in [0, V**L).
    vocab_size : int
        V >= 1.
    draft_length : int
        L >= 1.

    Returns
    -------
    ndarray of int64, the broadcast shape
        β in {0, …, L}.

    Raises
    ------
    ValueError
        For sizes below 1; :class:`~otspec.errors.SizeLimitError` for L above
        :data:`~otspec.checks.MAX_DRAFT_LENGTH`.

    References
    ----------
    .. [1] Z. Sun, J. H. Ro, A. Beirami, A. T. Suresh, "Optimal Block-Level Draft Verification for
       Accelerating Speculative Decoding", arXiv:2403.10444v1, 2024.

    Examples
    --------
    V = 2, L = 2: blocks 0, 1, 2, 3 are 00, 01, 10, 11.

    >>> common_prefix_length([0, 1, 2, 3], 0, 2, 2).tolist()  # against 00: both, the first, none, none
    [2, 1, 0, 0]
    """
    V, L, n = check_block_shape(vocab_size, draft_length)
    blocks = []
    for name, b in (("draft_blocks", draft_blocks), ("target_blocks", target_blocks)):
        arr = integer_array(b, name, "block indices")  # 0.5 was read as block 0
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            raise ValueError(f"{name}: block indices must lie in [0, {n}) = [0, vocab_size**draft_length); got "
                             f"range [{arr.min()}, {arr.max()}]")
        blocks.append(arr)
    try:
        x, y = np.broadcast_arrays(*blocks)
    except ValueError:
        raise ValueError(f"draft_blocks, target_blocks: shapes {blocks[0].shape} and {blocks[1].shape} do not "
                         "broadcast") from None
    beta = np.zeros(x.shape, dtype=np.int64)
    for ell in range(1, L + 1):  # L passes over the arrays, none over their entries
        scale = V ** (L - ell)
        beta += (x // scale) == (y // scale)
    return beta


def plan_expected_length(plan, vocab_size: int, draft_length: int) -> float:
    """The expected accepted length of a plan: E_π[β] = Σ_{x,y} π(x, y) β(x, y).

    β is the common prefix length (:func:`common_prefix_length`); the marginals of π are not
    checked, so any non-negative matrix of the right shape is evaluated. For a coupling of p and q
    this is the objective of the block transport problem (6) of [1].

    Parameters
    ----------
    plan : scipy sparse matrix/array or array_like, shape (V**L, V**L)
        Rows are draft blocks, columns target blocks, lexicographic.
    vocab_size : int
        V >= 1.
    draft_length : int
        L >= 1.

    Returns
    -------
    float
        Σ π β.

    Raises
    ------
    ValueError
        If ``plan`` is not of shape (V**L, V**L), or for invalid sizes.

    References
    ----------
    .. [1] Z. Sun, J. H. Ro, A. Beirami, A. T. Suresh, "Optimal Block-Level Draft Verification for
       Accelerating Speculative Decoding", arXiv:2403.10444v1, 2024.

    Examples
    --------
    Half the mass on (00, 00), which agree on both tokens, half on (01, 00), which agree on one:

    >>> import numpy as np
    >>> plan = np.zeros((4, 4))
    >>> plan[0, 0] = plan[1, 0] = 0.5
    >>> plan_expected_length(plan, 2, 2)  # 0.5·2 + 0.5·1
    1.5
    """
    V, L, n = check_block_shape(vocab_size, draft_length)
    coo = sp.coo_array(plan)
    if coo.dtype.kind not in "iuf" or (coo.nnz and not (np.all(np.isfinite(coo.data)) and coo.data.min() >= 0)):
        raise ValueError(f"plan: expected a non-negative matrix of finite real numbers (dtype {coo.dtype})")
    if coo.shape != (n, n):
        raise ValueError(f"plan: expected shape ({n}, {n}) for vocab_size={V}, draft_length={L}; got {coo.shape}")
    beta = common_prefix_length(coo.row, coo.col, V, L)
    return float(np.dot(coo.data, beta))


def prefix_tree_value(p: np.ndarray, q: np.ndarray, vocab_size: int, draft_length: int) -> float:
    """Σ_{ℓ=1..L} Σ_{x^ℓ} min(p(x^ℓ), q(x^ℓ)) of two block laws already checked (no validation).

    The prefix laws of level ℓ − 1 are those of level ℓ with the V children of each node summed.
    """
    V, total = vocab_size, 0.0
    for _ in range(draft_length):  # depth L, L-1, ..., 1: prefix laws by summing the V children of each node
        total += float(np.minimum(p, q).sum())
        p, q = p.reshape(-1, V).sum(axis=1), q.reshape(-1, V).sum(axis=1)
    return total


def block_ot_value(draft_law, target_law, vocab_size: int, draft_length: int) -> float:
    """The block-OT optimum, eq. (8), from two block laws, in O(V**L) work.

    max_π E_π[β] = Σ_{ℓ=1..L} Σ_{x^ℓ ∈ Ω^ℓ} min(p(x^ℓ), q(x^ℓ)) over the couplings π of the
    draft's block law p and the target's q (Theorem 1 of [1]); no size limit beyond memory. For
    L = 1 it is the token-level acceptance Σ_x min(p(x), q(x)) = 1 − TV(p, q) [2].

    Parameters
    ----------
    draft_law, target_law : array_like, shape (V**L,)
        p and q, lexicographic; finite, non-negative, each summing to 1 within
        :data:`BLOCK_LAW_TOL` (q is rescaled to p's total).
    vocab_size : int
        V >= 1.
    draft_length : int
        L >= 1, at most :data:`~otspec.checks.MAX_DRAFT_LENGTH`.

    Returns
    -------
    float
        The optimal expected accepted length, in [0, L].

    Raises
    ------
    ValueError
        On invalid laws or sizes (see :func:`validated_block_laws`).

    References
    ----------
    .. [1] Z. Sun, J. H. Ro, A. Beirami, A. T. Suresh, "Optimal Block-Level Draft Verification for
       Accelerating Speculative Decoding", arXiv:2403.10444v1, 2024.
    .. [2] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via Speculative
       Decoding", ICML 2023, arXiv:2211.17192.

    Examples
    --------
    >>> block_ot_value([0.5, 0.5], [0.75, 0.25], 2, 1)  # L = 1: 1 - TV(p, q) = 1 - 0.25
    0.75
    >>> p = [0.5625, 0.1875, 0.1875, 0.0625]  # Ber(0.25) blocks of length 2
    >>> q = [0.0625, 0.1875, 0.1875, 0.5625]  # Ber(0.75) blocks
    >>> block_ot_value(p, q, 2, 2)  # level 1: min(.75,.25) + min(.25,.75); level 2: .0625+.1875+.1875+.0625
    1.0
    """
    p, q, V, L, _ = validated_block_laws(draft_law, target_law, vocab_size, draft_length)
    return prefix_tree_value(p, q, V, L)
