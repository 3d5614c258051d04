r"""SpecDec++'s acceptance-prediction head: data construction, the weighted loss, a trainable head.

Spec ``specdecpp.md`` §5 and §7 (p is the draft, q the target). The head predicts, from what
the draft side can see when it has drafted Y_i, the conditional acceptance probability
P_i = min{1, q(Y_i|ctx)/p(Y_i|ctx)} (eq. (9)), and the controller stops once the predicted
P(some drafted token rejected) = 1 − ∏ P̂_i exceeds a threshold (eq. (11)).

* :func:`token_mixing_data` — the paper's training data (§7) on otspec sources: draft samples Y_i,
  soft labels P_i, and token mixing (Z_i is the target's token with probability r, else Y_i); labels
  and features share the mixed context (see its docstring for the one deviation from the spec).
* :func:`weighted_bce` — the loss (12): −w_acc P log P̂ − w_rej (1 − P) log(1 − P̂); :func:`binary_kl`
  the evaluation diagnostic.
* :class:`AcceptanceHead` — the D = 0 head of the paper (a linear layer and a sigmoid) on any
  feature vectors: here one-hot (previous token, drafted token) features of a source, in
  ``llm_bridge`` the draft model's final hidden states. Fitted by L-BFGS (scipy) on the convex
  weighted loss with a small L2 penalty.
* :class:`LearnedHeadController` — the decode-loop controller that acts on the head.

Spec: ``docs/specdecpp.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..checks import MAX_DRAFT_LENGTH, MAX_SIMULATION_BLOCKS, check_real, check_size
from ..distributions import sample_categorical
from ..pairs import check_pair
from ..sources import Source
from .controllers import DraftLengthController

__all__ = ["AcceptanceHead", "LearnedHeadController", "MixedData", "binary_kl", "one_hot_features",
           "token_mixing_data", "weighted_bce"]

_CLIP = 1e-12


def weighted_bce(labels, predictions, w_acc: float = 1.0, w_rej: float = 1.0) -> float:
    """Mean of −w_acc P log P̂ − w_rej (1 − P) log(1 − P̂) (``specdecpp.md`` eq. (12))."""
    P = np.asarray(labels, dtype=np.float64)
    Ph = np.clip(np.asarray(predictions, dtype=np.float64), _CLIP, 1 - _CLIP)
    return float(np.mean(-w_acc * P * np.log(Ph) - w_rej * (1 - P) * np.log1p(-Ph)))


def binary_kl(labels, predictions) -> float:
    """Mean binary KL(P ‖ P̂) = P log(P/P̂) + (1 − P) log((1 − P)/(1 − P̂)), the paper's diagnostic."""
    P = np.asarray(labels, dtype=np.float64)
    Ph = np.clip(np.asarray(predictions, dtype=np.float64), _CLIP, 1 - _CLIP)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(P > 0, P * np.log(P / Ph), 0.0)
        b = np.where(P < 1, (1 - P) * np.log((1 - P) / (1 - Ph)), 0.0)
    return float(np.mean(a + b))


def one_hot_features(previous, tokens, vocab_size: int) -> np.ndarray:
    """Draft-side features of a source: one-hot of (previous token, drafted token), shape (n, V²).

    For an order-1 Markov pair the acceptance probability is a function of exactly this pair,
    so a linear head on these features can represent it. ``previous`` is -1 at the first position
    (mapped to its own block of V features, so the width is (V + 1)·V).
    """
    previous, tokens = np.asarray(previous), np.asarray(tokens)
    V = int(vocab_size)
    out = np.zeros((tokens.size, (V + 1) * V))
    out[np.arange(tokens.size), (previous + 1) * V + tokens] = 1.0
    return out


@dataclass(frozen=True)
class MixedData:
    """Training data of :func:`token_mixing_data`: rows are positions taken from the draft (Z_i = Y_i)."""

    previous: np.ndarray  # Z_{i-1} (-1 at the first position), the draft's context
    tokens: np.ndarray    # Y_i, the drafted token
    labels: np.ndarray    # P_i = min{1, q(Y_i | Z_{<i}) / p(Y_i | Z_{<i})}


def token_mixing_data(draft: Source, target: Source, n_sequences: int, length: int, *, mix: float = 0.15,
                      seed=0) -> MixedData:
    """Training data with the paper's token mixing (§7), built position by position, vectorised over sequences.

    At each position i, with the mixed context Z_{<i}: Y_i ~ p(·|Z_{<i}) (the draft's sample),
    X_i ~ q(·|Z_{<i}) (the target's), the soft label P_i = min{1, q(Y_i|Z_{<i}) / p(Y_i|Z_{<i})}, and
    Z_i = X_i with probability ``mix`` (r = 15 % in the paper), else Y_i. Rows are the positions with
    Z_i = Y_i. [D] The spec's step 3 computes the label at the target response's context X_{<i} but
    reads the features at Z_{<i}; for a source whose acceptance depends on the context the two differ
    at most positions, so here label and features share the context Z_{<i} (the context the head
    meets at inference, where drafts continue drafts and corrections come from the target).
    """
    n = check_size(n_sequences, "n_sequences", limit=MAX_SIMULATION_BLOCKS, limit_name="MAX_SIMULATION_BLOCKS")
    T = check_size(length, "length")
    mix = check_real(mix, "mix", low=0.0, high=1.0)
    check_pair(draft, target, T)
    rng = np.random.default_rng(seed)
    Z = np.zeros((n, T), dtype=np.int64)
    prev, toks, labels = [], [], []
    rows = np.arange(n)
    for i in range(T):
        p_row, q_row = draft.next_probs(Z[:, :i]), target.next_probs(Z[:, :i])
        Y, X = sample_categorical(p_row, rng), sample_categorical(q_row, rng)
        label = np.minimum(1.0, q_row[rows, Y] / p_row[rows, Y])
        from_draft = rng.random(n) >= mix
        Z[:, i] = np.where(from_draft, Y, X)
        prev.append((Z[:, i - 1] if i else np.full(n, -1))[from_draft])
        toks.append(Y[from_draft])
        labels.append(label[from_draft])
    return MixedData(np.concatenate(prev), np.concatenate(toks), np.concatenate(labels))


class AcceptanceHead:
    """P̂ = sigmoid(θ·φ + b) on feature vectors φ (the paper's D = 0 head), fitted on the weighted loss (12).

    Parameters
    ----------
    w_acc, w_rej : float
        Class weights of (12) (the paper: w_acc = 1, w_rej ∈ {1, 3, 6, 12}).
    l2 : float
        Ridge penalty on θ (keeps weights finite where every label is 1).
    """

    def __init__(self, w_acc: float = 1.0, w_rej: float = 1.0, l2: float = 1e-4):
        self.w_acc = check_real(w_acc, "w_acc", low=0.0)
        self.w_rej = check_real(w_rej, "w_rej", low=0.0)
        self.l2 = check_real(l2, "l2", low=0.0)
        self.theta: np.ndarray | None = None
        self.bias = 0.0

    def fit(self, features, labels) -> AcceptanceHead:
        """Minimise mean (12) + l2·|θ|² by L-BFGS (the loss is convex in (θ, b))."""
        F = np.asarray(features, dtype=np.float64)
        P = np.asarray(labels, dtype=np.float64)
        if F.ndim != 2 or P.shape != (F.shape[0],) or F.shape[0] == 0:
            raise ValueError(f"features (n, d) and labels (n,) expected, got {F.shape} and {P.shape}")
        if not (np.all(np.isfinite(F)) and np.all((P >= 0) & (P <= 1))):
            raise ValueError("features must be finite and labels in [0, 1]")

        def loss(w):
            value, log_p = self._weighted(F @ w[:-1] + w[-1], P)
            sig = np.exp(log_p)
            dz = (-self.w_acc * P * (1 - sig) + self.w_rej * (1 - P) * sig) / F.shape[0]
            grad = np.concatenate([F.T @ dz + 2 * self.l2 * w[:-1], [dz.sum()]])
            return value + self.l2 * w[:-1] @ w[:-1], grad

        # here, not at import: scipy.optimize takes a third of a second to import
        from scipy.optimize import minimize

        res = minimize(loss, np.zeros(F.shape[1] + 1), jac=True, method="L-BFGS-B", options={"maxiter": 2000})
        self.theta, self.bias = res.x[:-1], float(res.x[-1])
        return self

    def _weighted(self, z, P):
        """(mean loss (12) at logits z, log sigmoid(z)), in the stable log-sigmoid form."""
        log_p, log_1p = -np.logaddexp(0.0, -z), -np.logaddexp(0.0, z)
        return np.mean(-self.w_acc * P * log_p - self.w_rej * (1 - P) * log_1p), log_p

    def loss(self, features, labels) -> float:
        """Mean weighted loss (12) on held-out rows, without the ridge penalty (for choosing ``l2``)."""
        if self.theta is None:
            raise ValueError("AcceptanceHead: call fit before loss")
        z = np.asarray(features, dtype=np.float64) @ self.theta + self.bias
        return float(self._weighted(z, np.asarray(labels, dtype=np.float64))[0])

    def predict(self, features) -> np.ndarray:
        """Predicted acceptance probabilities, shape (n,)."""
        if self.theta is None:
            raise ValueError("AcceptanceHead: call fit before predict")
        z = np.asarray(features, dtype=np.float64) @ self.theta + self.bias
        return np.exp(-np.logaddexp(0.0, -z))


class LearnedHeadController(DraftLengthController):
    """Stop once 1 − ∏ P̂_i ≥ ``threshold`` (eq. (11)), P̂ from a head on draft-side features.

    ``featurize(previous, tokens)`` maps the token before each drafted one (-1 at a sequence start)
    and the drafted tokens to feature rows; a loop that has richer draft-side features (the draft
    model's hidden states in ``llm_bridge``) passes them as ``features=`` instead.

    ``lagged=True`` is SpecDec++ Algorithm 1 to the letter (spec §6): the features handed over at
    step k are the draft's embedding e_{k−1} at the previous drafted token (the forward pass that
    yields p_k), so they predict the acceptance of token k − 1; step 1 multiplies nothing (its
    features describe the context, not a drafted token), so for h > 0 every round drafts at least
    2 tokens unless ``max_length`` is 1.

    ``lagged=False`` in a loop whose draft session returns features (``llm_bridge``'s hidden states)
    is the rule without the lag: the loop feeds each drafted token to the draft before asking
    (``reads_drafted_state``), so the features at step k are e_k, the state at token k itself, and
    P̂_k predicts the acceptance of token k; the price is one more draft call per round (the call
    that would give p_{k+1} is made also where the rule stops). A loop without features (toy
    sources) uses ``featurize(previous, tokens)``, which already describes token k.
    """

    needs_context = True

    def __init__(self, head: AcceptanceHead, featurize: Callable, threshold: float, max_length: int, *,
                 lagged: bool = False):
        self.head, self.featurize, self.lagged = head, featurize, bool(lagged)
        self.threshold = check_real(threshold, "threshold", low=0.0, high=1.0)
        self.max_length = check_size(max_length, "max_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
        self._predicted = np.ones(0)

    @property
    def reads_drafted_state(self) -> bool:
        """Whether a loop with draft features should hand over the state at the drafted token (unlagged)."""
        return not self.lagged

    def start(self, n: int) -> None:
        self._predicted = np.ones(n)

    def keep_drafting(self, step, draft_rows, *, which=None, tokens=None, previous=None, features=None, **_):
        """``features`` (m, d), when a loop has them (``llm_bridge``: the draft's hidden states), replace
        ``featurize(previous, tokens)``."""
        if features is None:
            if tokens is None or previous is None:
                raise ValueError("LearnedHeadController needs features, or the drafted tokens and the tokens before them")
            features = self.featurize(previous, tokens)
        n = np.asarray(features).shape[0]
        which = np.arange(n) if which is None else which
        if not (self.lagged and step == 1):
            self._predicted[which] *= self.head.predict(features)
        return ((1.0 - self._predicted[which]) < self.threshold) & (step < self.max_length)
