"""Token verification on random Markov pairs: exact E[accepted] vs decode-loop block efficiency.

For each draft length L and several draft/target distances (the ``concentration``
of :func:`otspec.random_markov`), print the exact expected accepted length of one
iteration from an empty context (eq. (4)) and the long-run block efficiency the
decode loop measures. On stationary chains the two differ: later iterations start
from the chain's typical contexts rather than from the first-token law.

Usage: python simulations/token_markov_sweep.py [--vocab 4] [--tokens 5000] [--seed 0]

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

import argparse

from otspec import random_markov, theory
from otspec.engine import generate
from otspec.verifiers import TokenVerify


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=5000, help="tokens per sequence")
    parser.add_argument("--sequences", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"{'conc':>6} {'L':>3} {'E[tau]+1 (empty ctx)':>21} {'block efficiency [95% CI]':>34}")
    for conc in (0.5, 2.0, 10.0):
        draft, target = random_markov(args.vocab, conc, seed=args.seed)
        for L in (1, 2, 4, 8):
            first = theory.tokens_per_iteration(theory.expected_accepted_token(draft, target, L))
            be = generate(draft, target, TokenVerify(), L, args.tokens, n_sequences=args.sequences,
                          seed=args.seed + L, progress=False).block_efficiency
            print(f"{conc:6.1f} {L:3d} {first:21.4f} {be.value:14.4f} [{be.low:.4f}, {be.high:.4f}]")


if __name__ == "__main__":
    main()
