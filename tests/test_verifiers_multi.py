"""Token-level multi-draft verifiers (otspec.verifiers: kseq, multiround, naive, otm).

Exact losslessness over all candidate tuples (property test), acceptance against an
independently computed OTM optimum, the published closed-form numbers, the invalid
"naive first accepted" scheme as a negative control, sampler vs law (G-tests with documented
power), torch parity and input validation.

Convention: p = draft, q = target.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from scipy.optimize import linprog
from strategies import (
    SPECTR_BERNOULLI_TABLE,
    row_instances,
)

from otspec.distributions import residual
from otspec.drafts import draft_tuple_law as candidate_tuple_law
from otspec.drafts import sample_candidates
from otspec.theory.multidraft import kseq_parameters, kseq_rho_star
from otspec.verifiers import (
    KSeq,
    MultiDraftLaw,
    MultiDraftOutcome,
    MultiRound,
    MultiRoundWithoutReplacement,
    NaiveMultiCandidate,
    OTMVerify,
)
from otspec.verifiers.candidates import SequentialMultiDraftVerifier


# ------------------------------------------------------------ independent references
def tuple_law(p, k, replacement):
    """Law of the candidate tuple by itertools (independent of candidate_tuple_law)."""
    support = [int(x) for x in np.flatnonzero(p > 0)]
    out = {}
    if replacement:
        for t in itertools.product(support, repeat=k):
            out[t] = float(np.prod([p[x] for x in t]))
    else:
        for perm in itertools.permutations(support, min(k, len(support))):
            prob = 1.0
            for i, x in enumerate(perm):
                prob *= p[x] / sum(p[z] for z in support if z not in perm[:i])
            out[perm + (-1,) * (k - len(perm))] = prob
    tuples = np.array(list(out), dtype=np.int64).reshape(-1, k)
    return tuples, np.array(list(out.values()))


def membership(tuples, V):
    return (tuples[:, :, None] == np.arange(V)).any(axis=1)


def alpha_lp(p, q, k, replacement):
    """Optimal acceptance (spec eq. (3)) by a dense HiGHS LP over π(tuple, y), presolve off.

    The default feasibility tolerance (1e-7) lets HiGHS misplace tuples of smaller mass
    (e.g. 0.004³), so it is tightened to 1e-10; the result is cross-checked against the
    exact min-cut value (4)."""
    tuples, probs = tuple_law(p, k, replacement)
    M, V = len(tuples), len(q)
    a_eq = np.zeros((M + V, M * V))
    for m in range(M):
        a_eq[m, m * V:(m + 1) * V] = 1.0
    for y in range(V):
        a_eq[M + y, y::V] = 1.0
    res = linprog(-membership(tuples, V).ravel().astype(float), A_eq=a_eq, b_eq=np.concatenate([probs, q]),
                  bounds=(0, None), method="highs-ds",
                  options={"presolve": False, "primal_feasibility_tolerance": 1e-10,
                           "dual_feasibility_tolerance": 1e-10})
    assert res.status == 0
    return -res.fun


def alpha_mincut(p, q, k, replacement):
    """Spec eq. (4): min over subsets A of q(A) + 1 − P_D(S(X) ⊆ A), by brute force."""
    tuples, probs = tuple_law(p, k, replacement)
    best = 1.0
    for mask in itertools.product([False, True], repeat=len(q)):
        A = np.array(mask)
        inside = np.array([all(A[x] for x in t if x >= 0) for t in tuples.tolist()])
        best = min(best, float(q[A].sum()) + 1.0 - float(probs[inside].sum()))
    return best


def tiled_law(verifier, tuples, p, q):
    M = len(tuples)
    return verifier.law(tuples, np.tile(p, (M, 1)), np.tile(q, (M, 1)))


def averaged(verifier, p, q, k, replacement):
    """(E[output law], E[acceptance], P(Y ∈ S)) over the candidate tuples."""
    tuples, probs = tuple_law(p, k, replacement)
    law = tiled_law(verifier, tuples, p, q)
    in_s = (np.asarray(law.output) * membership(tuples, len(q))).sum(1)
    return probs @ law.output, float(probs @ law.acceptance), float(probs @ in_s), law


# ---------------------------------------------------------------- buggy verifiers
class NaiveFirstAccepted(SequentialMultiDraftVerifier):
    """Spec §2's invalid scheme: token-level acceptance min(1, q/p) on every draft, first
    accepted wins, else the single-draft residual (q − p)_+. Not lossless for k ≥ 2."""

    name = "naive_first_accepted"
    lossless = False

    def acceptance_plan(self, candidates, draft_probs, target_probs, *, validate=True):
        p_x = np.take_along_axis(draft_probs, candidates, axis=-1)
        q_x = np.take_along_axis(target_probs, candidates, axis=-1)
        return np.minimum(1.0, q_x / p_x), residual(target_probs, draft_probs)


class KSeqSingleDraftResidual(KSeq):
    """Plausible k-Seq bug: after k rejections draw from (q − p)_+ instead of res_ρ (eq. (9))."""

    def acceptance_plan(self, candidates, draft_probs, target_probs, *, validate=True):
        a, _ = super().acceptance_plan(candidates, draft_probs, target_probs)
        return a, residual(target_probs, draft_probs)


class NaiveFirstOnly(NaiveMultiCandidate):
    """Plausible MCNS bug: Y ~ q, but accepted only if Y equals the first candidate."""

    def law(self, candidates, draft_probs, target_probs, *, validate=True):
        member = candidates[:, :1] == np.arange(target_probs.shape[1])
        return MultiDraftLaw(target_probs * member, target_probs * ~member)

    def sample(self, candidates, draft_probs, target_probs, rng, *, validate=True):
        out = super().sample(candidates, draft_probs, target_probs, rng)
        acc = out.token == candidates[:, 0]
        return MultiDraftOutcome(out.token, acc, np.where(acc, 0, -1))


VERIFIERS = [  # (verifier, draft mode it is lossless for)
    (KSeq(), True),
    (MultiRound(), True),
    (MultiRoundWithoutReplacement(), False),
    (NaiveMultiCandidate(), True),
    (NaiveMultiCandidate(), False),
]


# ------------------------------------------------------------ exact, property-based
@given(row_instances())
def test_tuple_enumerator_matches_reference(inst):
    p, _, k = inst
    for replacement in (True, False):
        mine, pm = candidate_tuple_law(p, k, replacement)
        ref, pr = tuple_law(p, k, replacement)
        assert len(mine) == len(ref) and {tuple(t) for t in mine.tolist()} == {tuple(t) for t in ref.tolist()}
        lookup = {tuple(t): v for t, v in zip(ref.tolist(), pr, strict=True)}
        assert max(abs(v - lookup[tuple(t)]) for t, v in zip(mine.tolist(), pm, strict=True)) < 1e-14
        assert abs(pm.sum() - 1.0) < 1e-12


@given(row_instances())
def test_lossless_and_acceptance_bounds(inst):
    p, q, k = inst
    alpha = {}
    for replacement in (True, False):
        alpha[replacement] = alpha_lp(p, q, k, replacement)
        assert abs(alpha[replacement] - alpha_mincut(p, q, k, replacement)) < 1e-9
    assert alpha[False] >= alpha[True] - 1e-9  # without replacement is never worse [V]

    accept = {}
    for verifier, replacement in [*VERIFIERS, (OTMVerify(True), True), (OTMVerify(False), False)]:
        out, acc, in_s, law = averaged(verifier, p, q, k, replacement)
        assert np.abs(out - q).max() < 1e-12, (verifier, replacement)
        assert (np.asarray(law.accepted) >= 0).all() and (np.asarray(law.rejected) >= 0).all()
        assert np.abs(np.asarray(law.output).sum(1) - 1.0).max() < 1e-12
        assert acc <= in_s + 1e-12  # an accepted candidate is in S
        assert in_s <= alpha[replacement] + 1e-9, (verifier, replacement)
        accept[verifier.name, replacement] = (acc, in_s)
        if replacement == verifier.replacement:  # the verifier's closed form = its enumerated law
            assert abs(verifier.expected_acceptance(p, q, k) - acc) < 1e-9, (verifier, replacement)

    for replacement in (True, False):  # OTM attains the optimum
        acc, in_s = accept["otm", replacement]
        assert abs(acc - alpha[replacement]) < 1e-9 and abs(in_s - alpha[replacement]) < 1e-9
    # k-Seq: E[acceptance] = p_acc (eq. (8)); P(Y ∈ S) ≥ p_acc ≥ (1 − (1 − 1/k)^k) α_k (eq. (11))
    acc, in_s = accept["kseq", True]
    p_acc = float(kseq_parameters(p[None], q[None], k).p_acc[0])
    assert abs(acc - p_acc) < 1e-12
    assert in_s >= p_acc - 1e-12
    assert p_acc >= (1.0 - (1.0 - 1.0 / k) ** k) * alpha[True] - 1e-12
    # MCNS ≤ multi-round (MCSD App. C), in both draft modes
    assert accept["naive", True][0] <= accept["multiround", True][0] + 1e-12
    assert accept["naive", False][0] <= accept["multiround_without_replacement", False][0] + 1e-12
    naive_formula = float(q @ (1.0 - (1.0 - p) ** k))  # spec §8: Σ_y q(y)(1 − (1 − p(y))^k)
    assert abs(accept["naive", True][0] - naive_formula) < 1e-12


@given(row_instances())
def test_kseq_rho_star_is_the_root_of_eq10(inst):
    p, q, k = inst
    rho = float(kseq_rho_star(p[None], q[None], k)[0])

    def f(r):
        beta = np.minimum(p, q / r).sum()
        return 1.0 - (1.0 - beta) ** k - r * beta

    with np.errstate(divide="ignore"):
        max_ratio = np.max(np.where(p > 0, q / np.where(p > 0, p, 1.0), np.where(q > 0, np.inf, 0.0)))
    assert 1.0 <= rho <= max(1.0, min(k, max_ratio)) + 1e-15
    assert f(rho) <= 1e-15
    if rho > 1.0:  # a genuine root, to 1e-12
        assert f(rho - 1e-12 * 1.01) >= -1e-15
    res = kseq_parameters(p[None], q[None], k).residual[0]
    assert (res >= 0).all() and abs(res.sum() - 1.0) < 1e-12


@given(row_instances())
def test_batch_of_distinct_rows_equals_row_by_row(inst):
    p1, q1, k = inst
    p2, q2 = np.roll(p1, 1), q1[::-1].copy()
    rng = np.random.default_rng(0)
    for verifier, replacement in [*VERIFIERS, (OTMVerify(True), True), (OTMVerify(False), False)]:
        c1 = sample_candidates(np.tile(p1, (3, 1)), k, rng, replacement)
        c2 = sample_candidates(np.tile(p2, (3, 1)), k, rng, replacement)
        cand = np.concatenate([c1, c2])
        dp, tp = np.repeat([p1, p2], 3, axis=0), np.repeat([q1, q2], 3, axis=0)
        law = verifier.law(cand, dp, tp)
        for b in range(6):
            one = verifier.law(cand[b:b + 1], dp[b:b + 1], tp[b:b + 1])
            assert np.abs(law.accepted[b] - one.accepted[0]).max() < 1e-15
            assert np.abs(law.rejected[b] - one.rejected[0]).max() < 1e-15


# ------------------------------------------------------------- published numbers
@pytest.mark.parametrize("q1, k, otm, kseq, mr, naive", SPECTR_BERNOULLI_TABLE)
def test_spec_bernoulli_table(q1, k, otm, kseq, mr, naive):
    """multi_draft_otm.md §6 table: p = Ber(0.25) draft, q = Ber(q₁) target."""
    p, q = np.array([0.75, 0.25]), np.array([1.0 - q1, q1])
    closed_form = min(q1, 1 - 0.75**k) + min(1 - q1, 1 - 0.25**k)  # eq. (14)
    assert round(closed_form, 4) == otm
    assert round(averaged(OTMVerify(), p, q, k, True)[2], 4) == otm
    p_acc = float(kseq_parameters(p[None], q[None], k).p_acc[0])
    assert round(p_acc, 4) == kseq
    assert abs(averaged(KSeq(), p, q, k, True)[1] - p_acc) < 1e-12
    assert round(averaged(MultiRound(), p, q, k, True)[1], 4) == mr
    assert round(averaged(NaiveMultiCandidate(), p, q, k, True)[1], 4) == naive


@pytest.mark.parametrize("r, rhos, alphas", [
    (2, [1.0, 1.5, 1.75, 1.875], [0.5, 0.75, 0.875, 0.9375]),
    (3, [1.0, 5 / 3, 57 / 27, 2.4074074074], [1 / 3, 5 / 9, 19 / 27, 0.8024691358]),
])
def test_spec_uniform_kseq_is_optimal(r, rhos, alphas):
    """Spec eq. (15): p = U(6), q = U(6/r): ρ* = r(1 − (1 − 1/r)^k) and k-Seq p_acc = α_k."""
    p = np.full(6, 1 / 6)
    q = np.where(np.arange(6) < 6 // r, r / 6, 0.0)
    for k, rho, alpha in zip(range(1, 5), rhos, alphas, strict=True):
        par = kseq_parameters(p[None], q[None], k)
        assert abs(float(par.rho[0]) - r * (1 - (1 - 1 / r) ** k)) < 1e-11
        assert abs(float(par.rho[0]) - rho) < 1e-9
        assert abs(float(par.p_acc[0]) - (1 - (1 - 1 / r) ** k)) < 1e-11
        assert abs(float(par.p_acc[0]) - alpha) < 1e-9
        if k <= 3:
            assert abs(alpha_lp(p, q, k, True) - float(par.p_acc[0])) < 1e-9


def test_mcsd_worked_example():
    """mcsd.md §8: p = (0.6, 0.3, 0.1), q = (0.3, 0.3, 0.4)."""
    p, q = np.array([0.6, 0.3, 0.1]), np.array([0.3, 0.3, 0.4])
    with_r = [averaged(MultiRound(), p, q, k, True)[1] for k in (1, 2, 4)]
    assert np.allclose(with_r, [0.7, 0.73, 0.7813], atol=1e-12)
    without = [averaged(MultiRoundWithoutReplacement(), p, q, k, False)[1] for k in (2, 3, 4)]
    assert np.allclose(without, [0.775, 1.0, 1.0], atol=1e-12)  # k ≥ 3 drafts the whole support


# ---------------------------------------------------------------- negative control
@pytest.mark.parametrize("k", [1, 2, 3])
def test_naive_first_accepted_is_not_lossless(k):
    """Spec §2 [S §4]: p = Ber(1), q = Ber(1/2): every draft is 1 and is accepted w.p. ½,
    so the naive scheme outputs 1 w.p. 1 − 2^{-k} ≠ ½ (valid only for k = 1); the
    multi-round verifier, which updates the residual, is exact on the same input."""
    p, q = np.array([0.0, 1.0]), np.array([0.5, 0.5])
    out, *_ = averaged(NaiveFirstAccepted(), p, q, k, True)
    assert abs(out[1] - (1.0 - 2.0**-k)) < 1e-15
    assert (abs(out[1] - 0.5) > 0.2) == (k > 1)
    assert np.abs(averaged(MultiRound(), p, q, k, True)[0] - q).max() < 1e-15
    assert np.abs(averaged(KSeq(), p, q, k, True)[0] - q).max() < 1e-15


def test_naive_first_accepted_deviates_on_a_generic_instance():
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
    out, *_ = averaged(NaiveFirstAccepted(), p, q, 2, True)
    assert np.abs(out - q).max() > 0.01
    assert np.abs(averaged(MultiRound(), p, q, 2, True)[0] - q).max() < 1e-15


# ------------------------------------------------------------ edge cases by hand
def test_kseq_edge_cases():
    p = np.array([[0.2, 0.3, 0.5, 0.0], [0.5, 0.5, 0.0, 0.0]])
    q = np.array([[0.2, 0.3, 0.5, 0.0], [0.0, 0.0, 0.4, 0.6]])  # TV = 0; disjoint supports
    par = kseq_parameters(p, q, 3)
    assert np.array_equal(par.rho, [1.0, 1.0])
    assert np.allclose(par.p_acc, [1.0, 0.0], atol=1e-15)
    assert np.allclose(par.residual[1], q[1], atol=1e-15)
    law = KSeq().law(np.array([[2, 0, 1], [0, 1, 1]]), p, q)
    assert np.allclose(law.acceptance, [1.0, 0.0], atol=1e-15)
    assert np.allclose(law.accepted[0], [0.0, 0.0, 1.0, 0.0]) and np.allclose(law.rejected[1], q[1])


def test_minus_one_slots_are_skipped():
    """A -1 slot is "no candidate": k-Seq uses the row's number of real candidates as k."""
    p, q = np.array([[0.5, 0.3, 0.2]]), np.array([[0.2, 0.2, 0.6]])
    for verifier in (KSeq(), MultiRound(), MultiRoundWithoutReplacement(), NaiveMultiCandidate()):
        padded = verifier.law(np.array([[1, -1, 0]]), p, q)
        short = verifier.law(np.array([[1, 0]]), p, q)
        assert np.abs(padded.accepted - short.accepted).max() < 1e-15
        assert np.abs(padded.rejected - short.rejected).max() < 1e-15
    none = KSeq().law(np.full((1, 2), -1), p, q)
    assert np.allclose(none.rejected, q) and float(none.acceptance[0]) == 0.0
    empty = MultiRound().sample(np.zeros((5, 0), dtype=np.int64), np.tile(p, (5, 1)), np.tile(q, (5, 1)),
                                np.random.default_rng(0))
    assert not empty.accepted.any() and (empty.index == -1).all()


def test_multiround_without_replacement_by_hand():
    """p = (0.6, 0.3, 0.1), q = (0.3, 0.3, 0.4), candidates (0, 1): a_1 = min(1, .3/.6) = ½; after
    rejecting 0, t = Norm[(q − p)_+] = (0, 0, 1) and d = (0, ¾, ¼), so a_2 = t(1)/d(1) = 0."""
    p, q = np.array([[0.6, 0.3, 0.1]]), np.array([[0.3, 0.3, 0.4]])
    law = MultiRoundWithoutReplacement().law(np.array([[0, 1]]), p, q)
    assert np.allclose(law.accepted, [[0.5, 0.0, 0.0]], atol=1e-15)
    # second rejection: Norm[(t − d)_+] = (0, 0, 1), reached with probability ½
    assert np.allclose(law.rejected, [[0.0, 0.0, 0.5]], atol=1e-15)
    law2 = MultiRoundWithoutReplacement().law(np.array([[2, 1]]), p, q)
    # a_1 = min(1, 0.4/0.1) = 1
    assert np.allclose(law2.accepted, [[0.0, 0.0, 1.0]], atol=1e-15)
