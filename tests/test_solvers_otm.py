"""Multi-draft OTM-k (spec multi_draft_otm.md §2–8, tests of §10): LP = max-flow = sorted prefixes = 2^V cuts."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import quad
from strategies import SPECTR_BERNOULLI_TABLE, row_instances

from otspec.drafts import (
    draft_inclusion_probs,
    draft_tuple_law,
    prob_drafts_within,
    tuple_membership,
)
from otspec.solvers import (
    OTMResult,
    otm_lp,
    otm_maxflow,
    otm_min_cut,
    otm_value,
    otm_value_bruteforce,
    plan_acceptance,
)
from otspec.theory.multidraft import (
    bernoulli_alpha,
    kseq_acceptance,
    kseq_beta,
    kseq_residual,
    kseq_rho_star,
    lemma3_upper_bound,
    multiround_acceptance,
    naive_acceptance,
    uniform_alpha,
)


# ------------------------------------------------------ independent references
def law_by_itertools(p, k, replacement):
    """{tuple: probability} by plain recursion (padding -1 when the support runs out)."""
    law = {}

    def walk(prefix, prob, left):
        if len(prefix) == k or (not replacement and left.sum() <= 0):
            law[tuple(prefix) + (-1,) * (k - len(prefix))] = prob
            return
        d = p if replacement else left / left.sum()
        for x in np.flatnonzero(d > 0):
            nxt = left.copy()
            nxt[x] = 0.0
            walk(prefix + [int(x)], prob * d[x], nxt)

    walk([], 1.0, np.asarray(p, dtype=np.float64).copy())
    return law


def cut_minimum(p, q, k, replacement):
    """Eq. (4) over all subsets A with itertools, P_D(S ⊆ A) from the recursive law."""
    law = law_by_itertools(p, k, replacement)
    V = len(p)
    best = 1.0
    for r in range(V + 1):
        for A in itertools.combinations(range(V), r):
            inside = sum(m for x, m in law.items() if set(x) - {-1} <= set(A))
            best = min(best, float(q[list(A)].sum()) + 1.0 - inside)
    return best


def check_plan(result: OTMResult, p, q, k, replacement, tol=1e-9):
    tuples, plan = result.plan
    ref_tuples, ref_probs = draft_tuple_law(p, k, replacement)
    assert np.array_equal(tuples, ref_tuples)
    assert plan.shape == (len(ref_probs), len(q)) and plan.min() >= 0
    assert np.abs(plan.sum(axis=1) - ref_probs).max() <= tol
    assert np.abs(plan.sum(axis=0) - q).max() <= tol
    assert abs(plan_acceptance(tuples, plan) - result.value) <= tol


# ---------------------------------------------------- all routes agree (§10.1)
@settings(max_examples=200, deadline=None)
@given(row_instances(), st.booleans())
def test_lp_maxflow_sorted_prefix_and_bruteforce_agree(case, replacement):
    p, q, k = case
    lp = otm_lp(p, q, k, replacement)
    flow = otm_maxflow(p, q, k, replacement)
    assert lp.status == flow.status == "optimal"
    assert lp.method == "highs" and flow.method == "maxflow:network_simplex"
    brute = otm_value_bruteforce(p, q, k, replacement)
    assert abs(brute - cut_minimum(p, q, k, replacement)) <= 1e-12
    for value in (lp.value, flow.value, otm_value(p, q, k, replacement)):
        assert abs(value - brute) <= 1e-9
    check_plan(lp, p, q, k, replacement)
    check_plan(flow, p, q, k, replacement)


@settings(max_examples=100, deadline=None)
@given(row_instances(), st.booleans())
def test_lemma3_bound_equals_alpha(case, replacement):
    p, q, k = case
    assert abs(lemma3_upper_bound(p, q, k, replacement) - otm_value(p, q, k, replacement)) <= 1e-12


@settings(max_examples=60, deadline=None)
@given(row_instances(), st.booleans())
def test_pot_emd_with_membership_cost_agrees(case, replacement):
    ot = pytest.importorskip("ot")
    p, q, k = case
    tuples, probs = draft_tuple_law(p, k, replacement)
    cost = 1.0 - tuple_membership(tuples, len(p)).astype(np.float64)
    alpha = 1.0 - ot.emd2(probs, q * (probs.sum() / q.sum()), cost)
    assert abs(alpha - otm_value(p, q, k, replacement)) <= 1e-9


def test_min_cut_set_attains_the_value():
    rng = np.random.default_rng(3)
    for _ in range(50):
        V, k = int(rng.integers(2, 7)), int(rng.integers(1, 5))
        p, q = rng.dirichlet(np.full(V, 0.5)), rng.dirichlet(np.full(V, 0.5))
        for replacement in (True, False):
            value, A = otm_min_cut(p, q, k, replacement)
            assert value == otm_value(p, q, k, replacement)
            cut = q[A].sum() + 1.0 - prob_drafts_within(p, A, k, replacement, method="enumerate")
            assert abs(min(1.0, cut) - value) <= 1e-12


def test_sorted_prefix_equals_bruteforce_on_larger_vocabularies():
    rng = np.random.default_rng(11)
    for _ in range(40):
        V, k = int(rng.integers(5, 11)), int(rng.integers(2, 6))
        conc = rng.choice([0.1, 0.5, 3.0])
        p, q = rng.dirichlet(np.full(V, conc)), rng.dirichlet(np.full(V, conc))
        p[rng.integers(V)] = 0.0
        p /= p.sum()
        for replacement in (True, False):
            assert abs(otm_value(p, q, k, replacement) - otm_value_bruteforce(p, q, k, replacement)) <= 1e-10


def test_fast_route_matches_a_plain_loop_and_handles_32k_tokens():
    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.ones(2000)), rng.dirichlet(np.ones(2000))
    ratio = np.where(p > 0, q / p, np.inf)
    best, qa, pa = 1.0, 0.0, 0.0
    for i in np.argsort(ratio, kind="stable"):  # spec §11 alpha_sorted_iid
        qa, pa = qa + q[i], pa + p[i]
        best = min(best, qa + 1 - pa**8)
    assert abs(otm_value(p, q, 8) - best) <= 1e-12
    p, q = rng.dirichlet(np.ones(32_000)), rng.dirichlet(np.ones(32_000))
    alpha = otm_value(p, q, 8)
    assert otm_value(p, q, 1) - 1e-12 <= alpha <= 1.0
    assert otm_value(p, q, 8, replacement=False) >= alpha - 1e-12


# ------------------------------------------------------------ spec numbers
def test_bernoulli_examples_of_the_spec():
    assert otm_value([0.75, 0.25], [0.5, 0.5], 2) == pytest.approx(0.9375, abs=1e-15)
    assert bernoulli_alpha(0.25, 0.5, 2) == 0.9375
    assert otm_value([0.75, 0.25], [0.25, 0.75], 4) == pytest.approx(0.93359375, abs=1e-15)
    assert bernoulli_alpha(0.25, 0.75, 4) == 0.93359375
    assert otm_lp([0.75, 0.25], [0.25, 0.75], 4).value == pytest.approx(0.93359375, abs=1e-12)


# q1, k, OTM (14), k-Seq p_acc, multi-round, naive (spec §6 table, p = Ber(0.25))
@pytest.mark.parametrize("q1, k, otm, kseq, multiround, naive", SPECTR_BERNOULLI_TABLE)
def test_section6_table(q1, k, otm, kseq, multiround, naive):
    p, q = np.array([0.75, 0.25]), np.array([1 - q1, q1])
    assert round(otm_value(p, q, k), 4) == otm
    assert round(bernoulli_alpha(0.25, q1, k), 4) == otm
    assert round(kseq_acceptance(p, q, k), 4) == kseq
    assert round(multiround_acceptance(p, q, k), 4) == multiround
    assert round(naive_acceptance(p, q, k), 4) == naive


@pytest.mark.parametrize("p1, q1", [(0.25, 0.1), (0.25, 0.5), (0.25, 0.75), (0.25, 1.0), (0.6, 0.3)])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 6])
def test_bernoulli_closed_form_equals_lp(p1, q1, k):
    p, q = [1 - p1, p1], [1 - q1, q1]
    assert abs(otm_lp(p, q, k).value - bernoulli_alpha(p1, q1, k)) <= 1e-9
    assert abs(otm_value(p, q, k) - bernoulli_alpha(p1, q1, k)) <= 1e-14


def uniform_pair(d, r):
    p = np.full(d, 1.0 / d)
    q = np.zeros(d)
    q[: d // r] = r / d
    return p, q


def test_uniform_d6_r3_k3():
    p, q = uniform_pair(6, 3)
    assert abs(otm_value(p, q, 3) - 19 / 27) <= 1e-15
    assert abs(uniform_alpha(3, 3) - 19 / 27) <= 1e-15
    assert abs(kseq_rho_star(p, q, 3) - 57 / 27) <= 1e-11
    assert abs(kseq_acceptance(p, q, 3) - 19 / 27) <= 1e-11
    assert abs(kseq_beta(p, q, 57 / 27) - 1 / 3) <= 1e-15


@pytest.mark.parametrize("r, alphas, rhos", [
    (2, [0.5, 0.75, 0.875, 0.9375], [1, 1.5, 1.75, 1.875]),
    (3, [0.3333, 0.5556, 0.7037, 0.8025], [1, 1.6667, 2.1111, 2.4074]),
])
def test_uniform_closed_form_equals_lp(r, alphas, rhos):
    p, q = uniform_pair(6, r)
    for k in range(1, 5):
        lp = otm_lp(p, q, k).value
        assert abs(lp - uniform_alpha(r, k)) <= 1e-9
        assert round(lp, 4) == alphas[k - 1]
        rho = kseq_rho_star(p, q, k)
        assert round(rho, 4) == rhos[k - 1]
        assert abs(rho - r * uniform_alpha(r, k)) <= 1e-11  # ρ* = r (1 − (1 − 1/r)^k)
        assert abs(kseq_acceptance(p, q, k) - uniform_alpha(r, k)) <= 1e-11  # k-Seq is optimal here


# ------------------------------------------------ structure of α_k (§10.6–8)
def random_pairs(seed, n, vmin=2, vmax=6, zeros=True):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        V = int(rng.integers(vmin, vmax + 1))
        conc = rng.choice([0.2, 1.0, 5.0])
        p, q = rng.dirichlet(np.full(V, conc)), rng.dirichlet(np.full(V, conc))
        if zeros and rng.random() < 0.3:
            p[rng.integers(V)] = 0.0
        if zeros and rng.random() < 0.3:
            q[rng.integers(V)] = 0.0
        yield p / p.sum(), q / q.sum(), rng


def test_without_replacement_is_at_least_with_replacement():
    for p, q, _ in random_pairs(1, 100, vmin=3, vmax=6):
        for k in (2, 3):
            assert otm_value(p, q, k, replacement=False) >= otm_value(p, q, k) - 1e-12


def test_alpha_is_non_decreasing_in_k_and_k1_is_one_minus_tv():
    for p, q, _ in random_pairs(2, 60):
        for replacement in (True, False):
            values = [otm_value(p, q, k, replacement) for k in range(1, 7)]
            assert all(b >= a - 1e-12 for a, b in itertools.pairwise(values))
            assert abs(values[0] - np.minimum(p, q).sum()) <= 1e-12
        # Lemma 1: the limit k → ∞ is q(supp p)
        assert abs(otm_value(p, q, 10**9) - q[p > 0].sum()) <= 1e-9


def test_race_integral_equals_permutation_sum():
    for p, _, rng in random_pairs(4, 150, vmax=7):
        k = int(rng.integers(1, 5))
        A = np.flatnonzero(rng.random(p.size) < 0.6)
        exact = prob_drafts_within(p, A, k, replacement=False, method="enumerate")
        assert abs(prob_drafts_within(p, A, k, replacement=False) - exact) <= 1e-10
    # tiny and extreme masses, a larger set: against adaptive quadrature of (7) directly
    p = np.array([0.5, 0.3, 1e-9, 0.1, 1e-13, 0.05, 0.05 - 1e-9 - 1e-13])
    for A, k in [([0, 1, 2, 3], 3), ([2, 4, 5, 6], 2), ([0, 1, 3, 5, 6], 4)]:
        exact = prob_drafts_within(p, A, k, replacement=False, method="enumerate")
        assert abs(prob_drafts_within(p, A, k, replacement=False) - exact) <= 1e-10
    rng = np.random.default_rng(9)
    p = rng.dirichlet(np.ones(40))
    A, k = np.arange(25), 5
    s = p[25:].sum()

    def integrand(t):
        probs = 1.0 - np.exp(-p[A] * t)
        dist = np.zeros(k + 1)
        dist[0] = 1.0
        for b in probs:
            dist[1:] = dist[1:] * (1 - b) + dist[:-1] * b
            dist[0] *= 1 - b
        return s * math.exp(-s * t) * (1.0 - dist[:k].sum())

    ref = quad(integrand, 0, np.inf, epsabs=1e-14, epsrel=1e-12, limit=500)[0]
    assert abs(prob_drafts_within(p, A, k, replacement=False) - ref) <= 1e-10
    assert prob_drafts_within(p, A, k) == pytest.approx(p[A].sum() ** k, rel=1e-15)


def test_draft_inclusion_probabilities_match_the_tuple_law():
    for p, _, rng in random_pairs(6, 60, vmax=7):
        k = int(rng.integers(1, 5))
        for replacement in (True, False):
            tuples, probs = draft_tuple_law(p, k, replacement)
            exact = probs @ tuple_membership(tuples, p.size)
            assert np.abs(draft_inclusion_probs(p, k, replacement) - exact).max() <= 1e-10


# ----------------------------------------------------------- k-Seq (§4)
def kseq_output_law(p, q, k, rho):
    """Exact output law of kSeq via (9b), summed over all draft tuples."""
    res = kseq_residual(p, q, k, rho)
    a = np.minimum(1.0, np.divide(q, rho * p, out=np.zeros_like(p), where=p > 0))
    out = np.zeros_like(q)
    tuples, probs = draft_tuple_law(p, k)
    for x, px in zip(tuples, probs, strict=True):
        rejected = px
        for xi in x:
            out[xi] += rejected * a[xi]
            rejected *= 1 - a[xi]
        out += rejected * res
    return out


def test_kseq_is_valid_at_rho_star_and_within_its_guarantee():
    for p, q, _ in random_pairs(7, 80, vmax=5):
        for k in (1, 2, 3, 4):
            rho = kseq_rho_star(p, q, k)
            assert 1.0 <= rho <= k
            res = kseq_residual(p, q, k, rho)
            assert res.min() >= 0 and abs(res.sum() - 1) <= 1e-12
            assert np.abs(kseq_output_law(p, q, k, rho) - q).max() <= 1e-10
            alpha = otm_value(p, q, k)
            p_acc = kseq_acceptance(p, q, k)
            assert p_acc <= alpha + 1e-12
            assert p_acc >= (1 - (1 - 1 / k) ** k) * alpha - 1e-12  # eq. (11)


def test_rho_star_can_exceed_max_ratio_when_the_target_leaves_the_draft_support():
    # SpecTr's bracket [1, min(k, max q/p)] assumes supp q ⊆ supp p
    p, q = np.array([0.5, 0.5, 0.0]), np.array([0.6, 0.0, 0.4])
    rho = kseq_rho_star(p, q, 2)
    assert abs(rho - 0.6 / (1 - math.sqrt(0.4))) <= 1e-11
    with pytest.raises(ValueError, match=r"rho=1.2 gives a negative residual mass .* rho must be >= rho\*"):
        kseq_residual(p, q, 2, 1.2)
    assert np.abs(kseq_output_law(p, q, 2, rho) - q).max() <= 1e-12


def test_kseq_edge_cases():
    p = np.array([0.2, 0.3, 0.5])
    assert kseq_rho_star(p, p, 4) == 1.0 and kseq_acceptance(p, p, 4) == 1.0
    assert np.array_equal(kseq_residual(p, p, 4, 1.0), p)
    d, t = np.array([0.5, 0.5, 0.0]), np.array([0.0, 0.0, 1.0])
    assert kseq_rho_star(d, t, 3) == 1.0 and kseq_acceptance(d, t, 3) == 0.0
    assert np.array_equal(kseq_residual(d, t, 3, 1.0), t)
    q = np.array([0.6, 0.3, 0.1])
    assert kseq_rho_star(p, q, 1) == 1.0  # k = 1: plain speculative sampling
    assert kseq_acceptance(p, q, 1) == pytest.approx(np.minimum(p, q).sum(), abs=1e-15)


# ------------------------------------------ multi-round and naive (§8, §10.7)
def multiround_by_paths(p, q, k):
    """MR-with acceptance by recursion over every draft and accept/reject branch."""
    def rec(t, depth):
        if depth == k:
            return 0.0
        pos = np.maximum(t - p, 0.0)
        t_next = pos / pos.sum() if pos.sum() > 0 else t
        total = 0.0
        for x in np.flatnonzero(p > 0):
            a = min(1.0, t[x] / p[x])
            total += p[x] * (a + (1 - a) * (rec(t_next, depth + 1) if a < 1 else 0.0))
        return total

    return rec(q, 0)


def test_multiround_and_naive_orderings():
    for p, q, _ in random_pairs(8, 60, vmax=5):
        for k in (1, 2, 3):
            mr = multiround_acceptance(p, q, k)
            assert abs(mr - multiround_by_paths(p, q, k)) <= 1e-12
            assert naive_acceptance(p, q, k) <= mr + 1e-12  # MCSD App. C
            assert mr <= otm_value(p, q, k) + 1e-12
            mr_wor = multiround_acceptance(p, q, k, replacement=False)
            assert mr_wor <= otm_value(p, q, k, replacement=False) + 1e-12
            assert naive_acceptance(p, q, k, replacement=False) <= otm_value(p, q, k, replacement=False) + 1e-12
        assert abs(multiround_acceptance(p, q, 1, replacement=False) - np.minimum(p, q).sum()) <= 1e-12


def test_multiround_without_replacement_at_temperature_zero_is_top_k_membership():
    # one-hot-like target: MR-without accepts iff the target's token is among the drafts (= MCNS)
    p = np.array([0.4, 0.3, 0.2, 0.1])
    q = np.array([0.0, 0.0, 1.0, 0.0])
    for k in (1, 2, 3):
        assert abs(multiround_acceptance(p, q, k, replacement=False)
                   - naive_acceptance(p, q, k, replacement=False)) <= 1e-12


# ------------------------------------------------------------ draft law
def test_draft_tuple_law_is_exact_lexicographic_and_padded():
    for p, _, rng in random_pairs(10, 40, vmax=5):
        k = int(rng.integers(1, 5))
        for replacement in (True, False):
            tuples, probs = draft_tuple_law(p, k, replacement)
            ref = law_by_itertools(p, k, replacement)
            assert [tuple(t) for t in tuples] == sorted(ref, key=lambda x: [v if v >= 0 else 10**9 for v in x])
            assert np.abs(probs - np.array([ref[tuple(t)] for t in tuples])).max() <= 1e-15
            assert abs(probs.sum() - 1) <= 1e-12 and probs.min() > 0
    tuples, probs = draft_tuple_law([0.5, 0.0, 0.5], 3, replacement=False)
    assert tuples.tolist() == [[0, 2, -1], [2, 0, -1]] and probs.tolist() == [0.5, 0.5]


def test_draft_tuple_law_without_replacement_keeps_tiny_remaining_masses_exact():
    p = np.array([1 - 1e-12, 5e-13, 5e-13])
    _, probs = draft_tuple_law(p, 2, replacement=False)
    assert probs[:2] == pytest.approx([(1 - 1e-12) * 0.5] * 2, rel=1e-12)
    assert abs(probs.sum() - 1) <= 1e-15


def test_tiny_masses_do_not_break_the_lp():
    rng = np.random.default_rng(12)
    for _ in range(10):
        p, q = rng.dirichlet(np.full(3, 0.3)), rng.dirichlet(np.full(3, 0.3))
        p[rng.integers(3)] = 10.0 ** rng.uniform(-12, -9)
        q[rng.integers(3)] = 10.0 ** rng.uniform(-12, -9)
        p, q = p / p.sum(), q / q.sum()
        for replacement in (True, False):
            ref = otm_value_bruteforce(p, q, 4, replacement)
            assert abs(otm_lp(p, q, 4, replacement).value - ref) <= 1e-9
            assert abs(otm_maxflow(p, q, 4, replacement).value - ref) <= 1e-9


def multiround_wor_by_recursion(p, q, k):
    """Multi-round without replacement by the plain recursion over every rejected token (MCSD Alg. 2)."""
    def acc(t, d, depth):
        accept = float(np.minimum(d, t).sum())
        pos = np.maximum(t - d, 0.0)
        if depth == k or pos.sum() <= 0.0:
            return accept
        rej = np.maximum(d - t, 0.0)
        for x in np.flatnonzero(rej > 0):
            d_next = d.copy()
            d_next[x] = 0.0
            if d_next.sum() > 0.0:
                accept += float(rej[x]) * acc(pos / pos.sum(), d_next / d_next.sum(), depth + 1)
        return accept

    return acc(q, p, 1)


def test_multiround_without_replacement_last_round_matches_the_recursion():
    # the last draft's branches summed at once (sorted ratios) against one branch at a time, ties and zeros included
    cases = list(random_pairs(9, 40, vmax=7))
    cases.append((np.array([0.25, 0.25, 0.5, 0.0]), np.array([0.5, 0.25, 0.0, 0.25]), None))
    cases.append((np.array([0.5, 0.5]), np.array([0.1, 0.9]), None))  # the second draft exhausts the support
    for p, q, _ in cases:
        for k in (2, 3, 4):
            assert abs(multiround_acceptance(p, q, k, replacement=False)
                       - multiround_wor_by_recursion(p, q, k)) <= 1e-12


@pytest.mark.parametrize("V, k, alpha", [(300, 4, 1.0), (300, 12, 1.0), (200, 3, 0.2)])
def test_pruned_cuts_without_replacement_equal_every_prefix_cut(V, k, alpha):
    """The min over all V + 1 sorted prefixes, each cut by its own race integral, against otm_min_cut, which
    skips prefixes whose lower bound is above a certified upper bound and stops after the last candidate."""
    rng = np.random.default_rng(V + k)
    p, q = rng.dirichlet(np.full(V, alpha)), rng.dirichlet(np.full(V, alpha))
    order = np.argsort(q / p)
    cuts = [q[order[:j]].sum() + 1.0 - prob_drafts_within(p, order[:j], k, replacement=False) for j in range(V + 1)]
    value, A = otm_min_cut(p, q, k, replacement=False)
    assert abs(value - min(cuts)) <= 1e-13
    assert abs(q[A].sum() + 1.0 - prob_drafts_within(p, A, k, replacement=False) - value) <= 1e-13  # its argmin


@pytest.mark.parametrize("k", [32, 128])
def test_the_race_step_shrinks_with_k(k):
    """P(N_A(t) >= k) turns from 0 to 1 over a v-width ~ 1/sqrt(k): a fixed step of 0.1 erred by 5e-8 at k = 256."""
    from otspec.drafts.laws import race_step

    rng = np.random.default_rng(k)
    p = rng.dirichlet(np.ones(600))
    A = np.arange(450)
    value = prob_drafts_within(p, A, k, replacement=False)
    s = p[450:].sum()

    def integrand(v):  # (7) in v = log t, by adaptive quadrature
        t = math.exp(v)
        probs = -np.expm1(-p[A] * t)
        dist = np.zeros(k + 1)
        dist[0] = 1.0
        for b in probs:
            dist[k] += dist[k - 1] * b
            dist[1:k] = dist[1:k] * (1 - b) + dist[:k - 1] * b
            dist[0] *= 1 - b
        return s * t * math.exp(-s * t) * dist[k]

    ref = quad(integrand, -10, math.log(60 / s), epsabs=1e-15, epsrel=1e-13, limit=400)[0]
    assert abs(value - ref) <= 1e-12
    assert race_step(k) < race_step(8) <= 0.2
