"""Replays of a prompt-lookup drafter along a plain continuation, chain by chain, for the run predictions.

Prompt lookup (:class:`~llm_bridge.drafters.NGramDrafter`) drafts a *chain*: at a block that starts after the
committed prefix h, it proposes c_1 = propose(h), then c_2 = propose(h + c_1), … — once the last n-gram has
matched, the chain keeps copying the matched passage, so its d-th token depends on the tokens it drafted
before it. A replay that asks the drafter at each position of the plain path instead (its first token only)
drafts where the plain path happens to match, a shorter and more broken chain than the real one (on
llm_ngram: the real runs drafted 0.67 / 1.29 / 2.46 tokens per iteration at L = 2 / 4 / 8, which that replay
under-counted, so the batch's widest draft and its target call widths were under-predicted).

:func:`ngram_pairs` replays the real chain. For every block start s of a plain continuation it runs the drafter
as the decode loop does (:func:`prompt_lookup_chains`) and scores the whole chain with the target
(:func:`chain_probs`: the plain path and every chain in one forward pass, each chain attending to its own
prefix). Every row the loop reads is then known at (draft depth d, position s + d): the drafter proposes
c_{d+1} there or nothing, and the target's probability of it after h + c_1..c_d. One-hot draft rows make every
verifier's law depend on the target only through that probability, so each (depth, position) is lumped to two
symbols, the proposal (0) and the rest (1), and the pair is a
:class:`~otspec.sources.DepthPositionalSource` draft and target. Between blocks the replay follows the
positions of the plain path (as every positional replay does): after τ accepted tokens and a correction the next
block starts at s + τ + 1, with the plain path's prefix there.
"""

from __future__ import annotations

import numpy as np

from .sampling import DEFAULT_SAMPLING, Sampling

__all__ = ["NGRAM_METHOD", "chain_probs", "ngram_pairs", "prompt_lookup_chains"]

#: How a prompt-lookup drafter's prediction is made, as records state it.
NGRAM_METHOD = ("decode engine on an independent plain-decoding run: per prompt and block start, the n-gram "
                "drafter's own chain there (it proposes again after each token it drafted, as the decode loop "
                "does) and the target's probability of each chain token after the chain before it (one-hot "
                "rows lumped to {the proposal, the rest} per draft depth and position: a depth-positional pair); "
                "interval: prediction interval for a run over the measured number of prompts (two-level paired "
                "bootstrap over prompts and their replays, percentile)")


def prompt_lookup_chains(drafter, history, start: int, depth: int) -> list[list[int]]:
    """The drafter's chain of at most ``depth`` tokens at every block start ``s`` of ``history[start:]``: chain s
    continues ``history[:start + s]`` as the decode loop drafts it (stopping where the drafter proposes nothing)."""
    history = np.asarray(history, dtype=np.int64)
    chains = []
    for end in range(start, history.size):
        chain, context = [], history[:end]
        while len(chain) < depth:
            token = drafter.propose(context)
            if token < 0:
                break
            chain.append(int(token))
            context = np.append(context, token)
        chains.append(chain)
    return chains


def chain_probs(model, history, start: int, chains, sampling: Sampling = DEFAULT_SAMPLING):
    """The target's processed rows along ``history`` and its probabilities of every chain's tokens.

    ``chains[s]`` is drafted after ``history[:start + s]``. One forward pass scores the path and every chain's
    tokens but its last, each chain token attending to its own prefix and the chain tokens before it (a 4-D
    mask, positions as the chain's own). Returns ``(rows, probs)``: ``rows`` (T, V), row s predicting
    ``history[start + s]``; ``probs[s][d]`` the target's probability of ``chains[s][d]`` after
    ``history[:start + s] + chains[s][:d]``."""
    import torch

    history = [int(t) for t in history]
    N, T = len(history), len(history) - start
    if start < 1 or T != len(chains):
        raise ValueError(f"chain_probs: expected a prompt of >= 1 token and one chain per block start ({T}), "
                         f"got start {start} and {len(chains)} chains")
    fed = [(s, d) for s, chain in enumerate(chains) for d in range(1, len(chain))]  # chain token d - 1 of block s
    M = N + len(fed)
    ids, positions = history + [chains[s][d - 1] for s, d in fed], list(range(N)) + [start + s + d - 1 for s, d in fed]
    mask = np.zeros((M, M), dtype=bool)
    mask[:N, :N] = np.tril(np.ones((N, N), dtype=bool))
    slot = {key: N + i for i, key in enumerate(fed)}
    for (s, d), i in slot.items():
        mask[i, :start + s] = True
        mask[i, [slot[s, k] for k in range(1, d + 1)]] = True
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(input_ids=torch.as_tensor([ids], device=device),
                       position_ids=torch.as_tensor([positions], device=device),
                       attention_mask=torch.as_tensor(mask[None, None], device=device)).logits[0]
    rows = np.asarray(sampling.rows(logits[start - 1:N - 1]), dtype=np.float64)
    after = np.asarray(sampling.rows(logits[N:]), dtype=np.float64) if fed else np.zeros((0, rows.shape[1]))
    probs = []
    for s, chain in enumerate(chains):
        row = [rows[s, chain[0]]] if chain else []
        row += [after[slot[s, d] - N, chain[d]] for d in range(1, len(chain))]
        probs.append(np.clip(np.asarray(row, dtype=np.float64), 0.0, 1.0))
    return rows, probs


def ngram_pairs(pair, prompts, continuations, *, depth: int, sampling: Sampling = DEFAULT_SAMPLING) -> list:
    """Replays of a prompt-lookup drafter (``pair.drafter.propose``) along plain continuations, one per prompt.

    ``depth`` is the longest draft the runs make (their largest L). Returns [(draft, target)]
    :class:`~otspec.sources.DepthPositionalSource` pairs (module docstring) for
    :func:`otspec.engine.predict.predict_from_pairs`; continuations of fewer than two tokens are left out."""
    from otspec.checks import check_size
    from otspec.sources import DepthPositionalSource

    if not pair.drafter.deterministic:
        raise ValueError(f"ngram_pairs: {pair.drafter.name!r} is not a prompt-lookup drafter (log its rows instead)")
    depth = check_size(depth, "depth")
    D = depth + 2  # rows up to one past the chain (the bonus row; a v1 block verifier reads one more draft row)
    out = []
    for prompt, cont in zip(prompts, continuations, strict=True):
        prompt, cont = [int(t) for t in prompt], [int(t) for t in cont]
        if len(cont) < 2:
            continue
        T, history = len(cont), prompt + cont
        chains = prompt_lookup_chains(pair.drafter, history, len(prompt), depth)
        _, probs = chain_probs(pair.target.model, history, len(prompt), chains, sampling)
        proposes = np.zeros((D, T), dtype=bool)
        q = np.zeros((D, T))
        for s, p in enumerate(probs):
            d = np.arange(min(p.size, T - s))
            proposes[d, s + d], q[d, s + d] = True, p[d]
        draft = DepthPositionalSource(np.broadcast_to([1.0, 0.0], (D, T, 2)), proposes)
        out.append((draft, DepthPositionalSource(np.stack([q, 1.0 - q], axis=-1))))
    if not out:
        raise ValueError("ngram_pairs: no continuation has the two tokens a replay needs")
    return out
