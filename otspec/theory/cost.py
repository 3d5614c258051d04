"""The one cost model of speculative decoding: call times → latency per token and speedup.

An iteration makes ``draft_calls`` draft calls of t_draft each, one target call scoring n tokens
(t_target(n): a number, or a table/callable of n when the width matters, as it does on a real
model), and spends ``overhead`` in the verifier and the loop. It emits E[τ] + 1 tokens, so

    latency per token = (draft_calls · t_draft + t_target(n) + overhead) / (E[τ] + 1),
    speedup           = plain time per token / latency   (plain: t_target(1) by default).

With t_target constant, draft_calls = n − 1 = L and no overhead this is the familiar
(E[τ] + 1) / (1 + c L), c = t_draft / t_target. Over a whole run (SpecDec++ §3.2,
``specdecpp.md`` eqs. (1)–(4)) the same costs give T_total = t_draft·N_draft + t_target·N_target
and, for single-draft chains (N_draft + N_target = N + N_discarded), Lemma 3.1's split into the
oracle time t_draft·N, the discard time t_draft·N_discarded and the verification time
(t_target − t_draft)·N_target (:meth:`CallCosts.decomposition`).

Used by the closed forms (:func:`otspec.theory.predicted_speedup`), ``calc``, the sweeps, the
decode ledger (:meth:`otspec.engine.DecodeResult.cost`) and the real-pair records of ``llm_bridge``.

Spec: ``docs/specdecpp.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..checks import check_real, check_size

__all__ = ["CallCosts", "predicted_speedup"]


@dataclass(frozen=True)
class CallCosts:
    """Per-call times in one unit (a target call = 1, or milliseconds).

    Parameters
    ----------
    t_draft : float
        One draft call.
    t_target : float, mapping n -> float, or callable n -> float
        One target call scoring n tokens (a mapping is looked up by ``n`` or ``str(n)``).
    overhead : float
        Verifier and loop time per iteration.
    """

    t_draft: float
    t_target: Any = 1.0
    overhead: float = 0.0

    def __post_init__(self):
        check_real(self.t_draft, "t_draft", low=0.0)
        check_real(self.overhead, "overhead", low=0.0)
        if not isinstance(self.t_target, Mapping | Callable):
            check_real(self.t_target, "t_target", low=0.0, low_open=True)

    def target(self, n: int = 1) -> float:
        """t_target(n) (a finite time > 0)."""
        t = self.t_target
        if isinstance(t, Mapping):
            if n not in t and str(n) not in t:
                raise ValueError(f"t_target: no time for a target call scoring {n} token(s) (the mapping has "
                                 f"{sorted(map(str, t))[:8]})")
            t = t[n] if n in t else t[str(n)]
        elif isinstance(t, Callable):
            t = t(n)
        return check_real(t, f"t_target({n})", low=0.0, low_open=True)

    def iteration_time(self, draft_calls: float, scored: int = 1) -> float:
        """draft_calls · t_draft + t_target(scored) + overhead."""
        return draft_calls * self.t_draft + self.target(scored) + self.overhead

    def latency(self, tokens_per_iteration: float, draft_calls: float, scored: int = 1) -> float:
        """Time per generated token."""
        return self.iteration_time(draft_calls, scored) / tokens_per_iteration

    def speedup(self, tokens_per_iteration: float, draft_calls: float, scored: int = 1,
                plain_per_token: float | None = None) -> float:
        """Plain time per token (default t_target(1)) over the latency."""
        plain = self.target(1) if plain_per_token is None else plain_per_token
        return tokens_per_iteration * plain / self.iteration_time(draft_calls, scored)

    def decomposition(self, generated: int, draft_calls: int, target_calls: int, discarded: int) -> dict:
        """A run's time (eq. (1)) and Lemma 3.1's three parts (eq. (3)); ``holds``: eq. (2) holds for the run."""
        t_d, t_t = self.t_draft, self.target(1)
        return {"total_time": t_d * draft_calls + t_t * target_calls, "oracle_time": t_d * generated,
                "discard_time": t_d * discarded, "verification_time": (t_t - t_d) * target_calls,
                "holds": draft_calls + target_calls == generated + discarded}


def predicted_speedup(expected_accepted: float, cost_ratio: float, draft_length: int) -> float:
    """Speedup over plain decoding, (E[τ] + 1) / (1 + c L), under the standard cost model of [1].

    One iteration makes L draft calls of relative cost c = t_draft / t_target and one target call,
    and emits E[τ] + 1 tokens, while plain decoding emits one token per target call
    (:class:`CallCosts` with t_target = 1 and no overhead). With an IID acceptance rate α,
    E[τ] + 1 = (1 − α^{L+1}) / (1 − α) and this is the expected walltime improvement factor of [1].

    Parameters
    ----------
    expected_accepted : float
        E[τ], the expected number of accepted drafts per iteration.
    cost_ratio : float
        c = t_draft / t_target.
    draft_length : int
        L, the draft calls per iteration.

    Returns
    -------
    float
        The predicted speedup.

    References
    ----------
    .. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via Speculative
       Decoding", ICML 2023, arXiv:2211.17192.

    Examples
    --------
    >>> predicted_speedup(1.0, 0.5, 2)  # (1 + 1) / (1 + 0.5·2)
    1.0
    >>> predicted_speedup(3.0, 0.0, 3)  # free drafts, all 3 accepted: 4 tokens per target call
    4.0
    """
    L = check_size(draft_length, "draft_length")
    check_real(cost_ratio, "cost_ratio", low=0.0)
    tau = check_real(expected_accepted, "expected_accepted", low=0.0, high=float(L))  # at most L drafts accepted
    return CallCosts(cost_ratio).speedup(tau + 1.0, L, L + 1)
