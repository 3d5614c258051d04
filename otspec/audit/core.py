"""The statistical audit of a chain sampler (:func:`audit`): drive it over many row pairs, test what it emits.

For each sample the audit picks a row pair of the pool (:mod:`otspec.audit.rows`), draws L drafts from the draft
rows itself, calls the sampler (:func:`otspec.audit.protocol.call_sampler`), and continues the emitted tokens
(kept drafts, then ``next_token``) with fresh target draws to L + 1 tokens. The rows depend on the position only,
so a lossless sampler's L + 1 tokens are independent, the i-th from the target's i-th row. Tested (randomised PIT,
:mod:`otspec.audit.pit`): the first emitted token, and every position pooled; four tests (G and KS each), one
verdict at level ``alpha`` after Bonferroni. Where the verifier is known (``verifier="token"`` …), the mean
accepted length is compared with its exact value on the same drafts (a z-test) and, for verifiers with an exact law
at this vocabulary (token, block), the joint (accepted length, token) of every call is tested against that law
(a randomised PIT over the (L + 1) V outcomes).
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from ..checks import check_progress, check_real, check_seed, check_size
from ..distributions import total_variation
from ..progress import tqdm
from ..verifiers import CHAIN_VERIFIERS
from .pit import (
    BINS,
    bias_interval,
    binned_test,
    mixture_bin_law,
    per_pair_test,
    pit_tables,
    pit_values,
    power_curve,
)
from .protocol import DEFAULT_TIMEOUT_S, call_sampler, check_timeout, load_sampler
from .rows import MAX_AUDIT_DRAFT_LENGTH, RowPool, logged_pool, synthetic_pool

__all__ = ["notice_if_long", "AuditReport", "CALL_BATCH", "DEFAULT_SAMPLES", "MAX_AUDIT_ENTRIES", "audit"]

#: Smallest significance level: below it the tests' critical values overflow (the chi-square quantile at 1 − α is
#: infinite under about 1e-16), so nothing could ever be detected.
MIN_ALPHA = 1e-12


def check_alpha(alpha) -> float:
    """The test level of an audit, statistical or exact: a finite number in [:data:`MIN_ALPHA`, 0.5]."""
    return check_real(alpha, "alpha", low=MIN_ALPHA, high=0.5)
#: Samples of an audit with no options: the default synthetic pool detects a TV bias of 0.02 with power > 0.99.
DEFAULT_SAMPLES = 200_000
#: Most row entries (chunk × (2L + 1) × V) handed to the sampler in one call.
MAX_AUDIT_ENTRIES = 2**23
#: Most sampler outputs one audit tests (a statistical audit of 5·10^7 samples takes hours on a slow sampler).
MAX_AUDIT_SAMPLES = 50_000_000
#: Most samples per sampler call (the timeout is per call: a slow sampler gets small calls).
CALL_BATCH = 5_000
#: An audit projected (from its first calls) to take longer than this says so on stderr before going on.
NOTICE_AFTER_S = 30.0
#: Tests of the output law; the others (with ``verifier``) test the claim to be that verifier.
LAW_TESTS = ("first_token", "all_positions", "per_row_pair", "small_calls")
#: Call sizes of the audit's first calls, in turn: serving code often takes another path for a small batch (batch 1
#: above all), so a share of the samples (:data:`SMALL_CALL_SHARE`, at most :data:`SMALL_CALL_SAMPLES`) comes through
#: small calls, and their first tokens are tested apart (``small_calls``).
SMALL_CALLS = (1, 2, 3, 8, 31, 64)
SMALL_CALL_SHARE = 0.02
SMALL_CALL_SAMPLES = 4096


@dataclass
class AuditReport:
    """The audit's findings (``as_dict`` is the JSON report card)."""

    sampler: str
    verdict: str  # "no bias detected" | "biased" | "not <verifier> verification" (law fine, acceptance differs)
    p_value: float
    alpha: float
    samples: int
    rows: str
    draft_length: int
    vocab: int
    tests: dict
    bias: dict
    power: dict
    acceptance: dict
    bins: dict = field(repr=False)
    seconds: float = 0.0
    #: The tests whose p-value fell below alpha / (number of tests), e.g. ["first_token (G)", "acceptance (z)"]
    failed_tests: list = field(default_factory=list)
    #: The integer seed of the run (drawn from fresh entropy or from the Generator given): audit(seed=it) replays it.
    seed: int | None = None

    @property
    def biased(self) -> bool:
        """The output law failed a test (a sampler that keeps the law but is not the claimed verifier is not)."""
        return self.verdict == "biased"

    @property
    def failed(self) -> bool:
        """Any test failed: the law, or the claim to be ``verifier`` (the command's exit status 1)."""
        return self.verdict != "no bias detected"

    def as_dict(self) -> dict:
        return asdict(self)


def _draw(rows: np.ndarray, rng) -> np.ndarray:
    """One token per row (…, V) by inverse CDF."""
    cum = np.cumsum(rows, axis=-1)
    u = rng.random(rows.shape[:-1])[..., None] * cum[..., -1:]
    return np.minimum((cum <= u).sum(axis=-1), rows.shape[-1] - 1)


def notice_if_long(label: str, n: int, done: int, seconds: float, unit: str = "samples") -> None:
    """One line on stderr when the first calls say the audit will take long (its progress bar shows only on a
    terminal; a script or ``--json`` run would otherwise wait minutes without a word)."""
    eta = seconds / done * (n - done)
    if eta > NOTICE_AFTER_S:
        print(f"otspec audit {label}: {n:,} {unit}, about {eta / 60:.1f} more minutes at the first call's rate "
              f"({done / max(seconds, 1e-9):,.1f} {unit}/s)", file=sys.stderr, flush=True)


def _failed_tests(tests: dict, acceptance: dict, level: float) -> list:
    """Names of the tests below ``level`` (alpha after Bonferroni), law tests first."""
    out = [f"{name} ({kind})" for name in (*LAW_TESTS, "joint_with_verifier") if name in tests
           for kind, key in (("G", "g_p_value"), ("KS", "ks_p_value"), ("pooled X²", "p_value"))
           if key in tests[name] and tests[name][key] < level]
    if "p_value" in acceptance and acceptance["p_value"] < level:
        out.append("acceptance (z)")
    return out


#: Each test kind's statistic and p-value keys, and how the statistic is written.
_STATISTICS = {"G": ("g_statistic", "g_p_value", "G"), "KS": ("ks_statistic", "ks_p_value", "D"),
               "pooled X²": ("statistic", "p_value", "X²"), "z": ("z", "p_value", "z")}


def failed_statistics(report: dict) -> str:
    """Each failed test of an audit's ``as_dict()`` with its statistic and p-value, for the summary line:
    ``first_token (G) G = 2892.4, p = 0``."""
    out = []
    for name in report["failed_tests"]:
        test, kind = name.rsplit(" (", 1)
        stat_key, p_key, symbol = _STATISTICS[kind.rstrip(")")]
        values = report["acceptance"] if test == "acceptance" else report["tests"][test]
        out.append(f"{name}: {symbol} = {values[stat_key]:.4g}, p = {values[p_key]:.2g}")
    return "; ".join(out) or "none"


def verdict(law_failed: bool, claim_failed: bool, verifier: str | None) -> str:
    """The audit's verdict, statistical or exact: "biased" when a test of the output law failed; "not <verifier>
    verification" when only the tests of the claim to be ``verifier`` did (the accepted length, or the joint law of
    accepted length and token); else "no bias detected"."""
    if law_failed:
        return "biased"
    return f"not {verifier} verification" if claim_failed else "no bias detected"


def _verdict(failed: list, verifier: str | None) -> str:
    """:func:`verdict` of the failed tests' names (law tests named by :data:`LAW_TESTS`)."""
    return verdict(any(name.split(" ")[0] in LAW_TESTS for name in failed), bool(failed), verifier)


def _pool(rows, draft_length: int | None, seed) -> RowPool:
    if draft_length is not None:
        draft_length = check_size(draft_length, "draft_length", limit=MAX_AUDIT_DRAFT_LENGTH,
                                  limit_name="MAX_AUDIT_DRAFT_LENGTH")
    if rows is None:
        return synthetic_pool(draft_length=draft_length or 2, seed=seed)
    if isinstance(rows, RowPool):
        if draft_length is not None and draft_length != rows.draft_length:
            raise ValueError(f"draft_length={draft_length}: the row pool given drafts {rows.draft_length} tokens "
                             "(leave draft_length out, or build the pool at that length)")
        return rows
    if isinstance(rows, bool) or not isinstance(rows, str | os.PathLike):  # a row or a number where a file goes
        raise ValueError(f"rows: expected None, a logged-rows .npz path or a RowPool (synthetic_pool(...)), got "
                         f"{type(rows).__name__}")
    return logged_pool(rows, draft_length=draft_length or 2, seed=seed)


def audit(sampler, *, samples: int = DEFAULT_SAMPLES, rows=None, draft_length: int | None = None, seed: int = 0,
          alpha: float = 1e-3, verifier: str | None = None, timeout: float | None = DEFAULT_TIMEOUT_S,
          chunk: int | None = None, progress: bool | None = None) -> AuditReport:
    """Audit ``sampler`` (a callable or ``"module:function"``) on ``samples`` draws (module docstring).

    ``rows``: None (the synthetic families at 64 tokens), a logged-rows ``.npz`` path, or a
    :class:`~otspec.audit.rows.RowPool` (another vocabulary: ``rows=synthetic_pool(vocab=V, draft_length=L)``).
    ``draft_length``: L of the synthetic or logged pool (default 2); a pool given says its own, and a different
    one is refused. The report names the sampler by its ``__name__`` (or the ``module:function`` string).
    ``seed``: an integer >= 0, None (fresh entropy) or a numpy Generator (an integer is drawn from it); the report's
    ``seed`` is the integer used, which replays the audit. ``verifier``: the name of the chain verifier the sampler
    claims to be
    (``token``, ``block``, ``gumbel``), to test its acceptance too. Raises :class:`~otspec.audit.protocol.SamplerError`
    when the sampler breaks the protocol (raises, wrong shapes or values, no return within ``timeout`` s).
    """
    progress = check_progress(progress)
    label = sampler if isinstance(sampler, str) else getattr(sampler, "__name__", repr(sampler))
    fn = load_sampler(sampler, timeout) if isinstance(sampler, str) else sampler
    if not callable(fn):
        raise ValueError(f"sampler: expected a callable or module:function, got {sampler!r}")
    n = check_size(samples, "samples", minimum=100, limit=MAX_AUDIT_SAMPLES, limit_name="MAX_AUDIT_SAMPLES")
    seed = check_seed(seed)  # a bool or a float is not a seed
    if seed is None:  # fresh entropy, as numpy reads None; the report keeps the integer that replays the run
        seed = int(np.random.SeedSequence().entropy % 2**63)
    elif isinstance(seed, np.random.Generator):
        seed = int(seed.integers(2**63))
    alpha = check_alpha(alpha)
    timeout = check_timeout(timeout)
    if chunk is not None:
        chunk = check_size(chunk, "chunk", limit=CALL_BATCH, limit_name="CALL_BATCH")
    if verifier is not None and verifier not in CHAIN_VERIFIERS:
        raise ValueError(f"verifier {verifier!r}: expected one of {sorted(CHAIN_VERIFIERS)}")
    pool = _pool(rows, draft_length, seed)
    L, V = pool.draft_length, pool.vocab
    step = chunk or max(1, min(CALL_BATCH, MAX_AUDIT_ENTRIES // ((2 * L + 1) * V)))
    rng = np.random.default_rng(seed)
    sampler_rng = np.random.default_rng([seed, 1])
    ranks = [pit_tables(pool.draft[:, i] if i < L else pool.target[:, i], pool.target[:, i]) for i in range(L + 1)]
    first_u, all_u, accepted_sum, accepted_hist = [], [], 0.0, np.zeros(L + 1, dtype=np.int64)
    pair_counts = np.zeros((pool.size, V), dtype=np.int64)
    expected_sum = 0.0
    law = CHAIN_VERIFIERS[verifier]() if verifier else None
    joint_u = []
    t0 = time.perf_counter()
    with tqdm(total=n, unit="sample", unit_scale=True, desc=f"audit {label}", leave=False,
              disable=None if progress is None else not progress) as bar:
        done, small_left, small_u, timed = 0, 0, [], False
        if chunk is None:
            small_left = min(SMALL_CALL_SAMPLES, int(SMALL_CALL_SHARE * n)) if n >= 5_000 else 0
        sizes = itertools.cycle(SMALL_CALLS)
        while done < n:
            small = small_left > 0
            b = min(next(sizes) if small else step, n - done, small_left if small else n)
            small_left -= b if small else 0
            idx = rng.integers(pool.size, size=b)
            P, Q = pool.draft[idx], pool.target[idx]
            drafts = _draw(P, rng)
            tau, token = call_sampler(fn, drafts, P, Q, sampler_rng, timeout)
            emitted = _draw(Q, rng)  # the target's continuation; positions up to τ + 1 are the sampler's
            pos = np.arange(L + 1)
            emitted = np.where(pos < tau[:, None], np.concatenate([drafts, drafts[:, :1]], axis=1), emitted)
            emitted[np.arange(b), tau] = token
            np.add.at(pair_counts, (idx, emitted[:, 0]), 1)
            for i in range(L + 1):
                _, before = ranks[i]
                u = pit_values(emitted[:, i], Q[:, i], before[idx], rng)
                all_u.append(u)
                if i == 0:
                    first_u.append(u)
                    if small:
                        small_u.append(u)
            accepted_sum += float(tau.sum())
            accepted_hist += np.bincount(tau, minlength=L + 1)
            if law is not None and hasattr(law, "expected_given_drafts"):  # no pair integrals at this V
                e = law.expected_given_drafts(drafts, P, Q)
                expected_sum += float(e.sum())
            elif law is not None:  # the verifier's exact law of (τ, Y) given the drafts: a PIT of the outcome too
                exact = law.law(drafts, P, Q, validate=False)
                e = np.asarray(exact.expected_accepted, dtype=float)
                expected_sum += float(e.sum())
                joint = (np.asarray(exact.accept_probs)[:, :, None] * np.asarray(exact.correction_probs)).reshape(b, -1)
                cell = tau * V + token
                rows = np.arange(b)
                joint_u.append(np.cumsum(joint, axis=1)[rows, cell] - joint[rows, cell] * rng.random(b))
            done += b
            bar.update(b)
            if not small and not timed and done < n:  # the first full-size call gives the rate
                timed = True
                notice_if_long(label, n, done, time.perf_counter() - t0)
    seconds = time.perf_counter() - t0
    first, pooled = np.concatenate(first_u), np.concatenate(all_u)
    tests = {"first_token": binned_test(first), "all_positions": binned_test(pooled)}
    if small_u:  # the small calls' first tokens alone (a sampler wrong only at small batches hides in the total)
        tests["small_calls"] = binned_test(np.concatenate(small_u))
    p_values = [t[k] for t in tests.values() for k in ("g_p_value", "ks_p_value")]
    tests["per_row_pair"] = per_pair_test(pair_counts, pool.target[:, 0])
    p_values.append(tests["per_row_pair"]["p_value"])
    acceptance = {"mean_accepted": accepted_sum / n, "accepted_histogram": accepted_hist.tolist(),
                  "acceptance_rate": accepted_sum / n / L if L else None}
    if law is not None:
        mean_e = expected_sum / n
        var = max(0.0, np.mean(np.repeat(np.arange(L + 1), accepted_hist) ** 2) - (accepted_sum / n) ** 2)
        z = (accepted_sum / n - mean_e) / max(np.sqrt(var / n), 1e-12)
        from scipy import stats

        p_acc = float(2 * stats.norm.sf(abs(z)))
        acceptance.update(verifier=verifier, expected_accepted=mean_e, z=float(z), p_value=p_acc)
        p_values.append(p_acc)
    if joint_u:  # (accepted length, token) against the verifier's exact conditional law
        tests["joint_with_verifier"] = binned_test(np.clip(np.concatenate(joint_u), 0.0, 1.0 - 1e-15))
        p_values += [tests["joint_with_verifier"]["g_p_value"], tests["joint_with_verifier"]["ks_p_value"]]
    p_value = float(min(1.0, len(p_values) * min(p_values)))
    failed = _failed_tests(tests, acceptance, alpha / len(p_values))
    g = mixture_bin_law(pool.draft[:, 0], pool.target[:, 0], *ranks[0])
    mean_tv = float(np.mean(total_variation(pool.draft[:, 0], pool.target[:, 0])))
    first_counts = np.array(tests["first_token"]["counts"])
    return AuditReport(
        sampler=str(label), verdict=_verdict(failed, verifier), p_value=p_value, alpha=alpha, failed_tests=failed,
        samples=n, rows=pool.source, draft_length=L, vocab=V, tests=tests,
        bias={"first_token": bias_interval(first_counts, seed=seed),
              "all_positions": bias_interval(tests["all_positions"]["counts"], seed=seed + 1)},
        power={**power_curve(g, mean_tv, n, alpha=alpha / max(len(p_values), 1)), "mean_tv_first_row": mean_tv},
        acceptance=acceptance,
        bins={"edges": np.linspace(0, 1, BINS + 1).tolist(), "first_token_observed": (first_counts / n).tolist(),
              "expected": [1 / BINS] * BINS, "draft_mixture": g.tolist()},
        seconds=seconds, seed=seed)
