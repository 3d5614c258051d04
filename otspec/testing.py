"""Helpers for other projects' test suites: ``assert_lossless(sampler)`` fails a test when an audit finds bias.

    from otspec.testing import assert_lossless

    def test_my_sampler_is_lossless():
        assert_lossless("mypkg.spec:sample", samples=200_000)      # or the callable itself

The sampler follows :mod:`otspec.audit.protocol`. ``exact=True`` runs the exact audit on a small vocabulary
(every drafted block enumerated), which also sees biases too small for the statistical audit's sample size.
"""

from __future__ import annotations

__all__ = ["assert_lossless"]


def assert_lossless(sampler, *, samples: int | None = None, exact: bool = False, alpha: float = 1e-3,
                    verifier: str | None = None, seed: int = 0, **options) -> dict:
    """Audit ``sampler`` (a callable or ``module:function``); raise AssertionError with the findings if it is biased.
    Returns the report (a dict). Protocol violations raise :class:`otspec.audit.SamplerError`."""
    from .audit import DEFAULT_SAMPLES, audit
    from .audit.card import markdown
    from .audit.exact import exact_audit

    if exact:
        report = exact_audit(sampler, alpha=alpha, verifier=verifier, seed=seed,
                             **({"draws": samples} if samples is not None else {}), **options)
        if report["verdict"] != "no bias detected":
            raise AssertionError(f"{report['sampler']} is {report['verdict']} (exact audit, p = {report['p_value']:.3g}): output law "
                                 f"deviates from the target's by up to {report['output_law']['max_deviation']:.3g} "
                                 f"(TV {report['output_law']['tv']:.3g})")
        return report
    result = audit(sampler, samples=DEFAULT_SAMPLES if samples is None else samples, alpha=alpha, verifier=verifier, seed=seed,
                   progress=False, **options)
    if result.failed:  # biased, or (with verifier) not that verifier
        raise AssertionError(f"{result.sampler} is {result.verdict}:\n\n{markdown(result)}")
    return result.as_dict()
