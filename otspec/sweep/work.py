"""The work of a sweep cell's sampling quantities, estimated from its parameters alone.

``exact``, ``optimum`` and ``adaptive`` are bounded by their solvers' own limits, each checked from
arithmetic on the sizes before anything is built (a refusal there is a note in seconds). Monte
Carlo and decoding always succeed, given time: their work is counted here, in probability-row
entries touched, and a cell quantity above :data:`MAX_CELL_WORK` is not run — its columns stay
empty and ``<quantity>_note`` gives the estimate, the formula and the limit. The sweep command
reports the estimate of the whole grid before it starts.

Entries (V the vocabulary, B the Monte Carlo blocks, S × N the decoded sequences × tokens):

* Monte Carlo, row-free (token and published block verification of IID pairs and of logged rows; one
  step of naive, k-Seq or multi-round candidates on an IID pair): B·(L+1) or B·k, whatever V;
* Monte Carlo with rows: B·(L+1)·V (single draft), B·k·V (one step of k candidates), B·n·V on a
  tree of n draft tokens;
* decode: S·N·(L+1)·V (S·N·n·V on a tree).
"""

from __future__ import annotations

from ..checks import MAX_ROW_WORK
from ..drafts import parse_tree
from ..engine.rowfree import row_free_sampler
from ..engine.rowfree_multi import has_row_free_candidates
from .spec import SWEEP_VERIFIERS, describe_pair

__all__ = ["MAX_CELL_WORK", "cell_work", "over_limit", "pair_vocab", "spec_work"]

#: Most probability-row entries one cell's Monte Carlo or decode quantity may touch. Measured on one core: 64 ns per
#: entry for k-Seq candidates on rows at V = 32,000, 52 ns on a 2x2 tree, 20 ns for Markov block rows, 8 ns when decoding,
#: so the limit is 15 s to 2 minutes of one core.
MAX_CELL_WORK = MAX_ROW_WORK


def pair_vocab(pair: dict) -> int | None:
    """The vocabulary of a spec's pair entry when the spec itself says it (None for source files and logs)."""
    if pair["kind"] in ("random_iid", "random_markov"):
        return int(pair["vocab"])
    if pair["kind"] == "iid":
        return len(pair["draft"]) if isinstance(pair["draft"], list | tuple) else 2
    return None


def cell_work(cell: dict, quantity: str, vocab: int | None, iid: bool) -> tuple[int, str] | None:
    """(estimated row entries, how they were counted) of ``quantity`` in ``cell``, or None when its solvers bound it
    themselves, it does not apply, or it needs a vocabulary not known yet (``vocab`` None)."""
    name, L, k, tree = cell["verifier"], cell["L"], cell["k"], cell.get("tree")
    logged = cell["pair"]["kind"] == "logged"
    blocks, draws = cell["blocks"], cell["sequences"] * cell["tokens"]
    if quantity == "monte_carlo":
        verifier = SWEEP_VERIFIERS[name](**cell["params"])
        if tree is None and k is None and (logged or iid) and row_free_sampler(verifier):
            return blocks * (L + 1), f"blocks {blocks:,} x (L + 1) = {L + 1} (row-free)"
        if vocab is None or logged:
            return None
        if tree is not None:  # each node's row, and its prefix (depth + 2 tokens) that a toy session reads
            parsed = parse_tree(tree)
            n, width = parsed.num_tokens, vocab + parsed.depth + 2
            return blocks * n * width, f"blocks {blocks:,} x {n} tree tokens x (V + depth + 2) = {width:,}"
        if k is not None:
            if iid and has_row_free_candidates(verifier):
                return blocks * k, f"blocks {blocks:,} x k = {k} (row-free)"
            return blocks * k * vocab, f"blocks {blocks:,} x k = {k} x V = {vocab:,}"
        return blocks * (L + 1) * vocab, f"blocks {blocks:,} x (L + 1) = {L + 1} x V = {vocab:,}"
    if quantity == "decode" and vocab is not None and not logged and (tree is not None or k is None):
        n = parse_tree(tree).num_tokens if tree is not None else L + 1
        what = f"{n} tree tokens" if tree is not None else f"(L + 1) = {n}"
        return draws * n * vocab, (f"sequences x tokens = {draws:,} x {what} x V = {vocab:,}")
    return None


def over_limit(cell: dict, quantity: str, vocab: int | None, iid: bool) -> str | None:
    """The note of a cell quantity whose estimated work exceeds :data:`MAX_CELL_WORK`, else None."""
    work = cell_work(cell, quantity, vocab, iid)
    if work is None or work[0] <= MAX_CELL_WORK:
        return None
    return (f"{quantity} not run: about {work[0]:,} row entries ({work[1]}) exceed MAX_CELL_WORK = {MAX_CELL_WORK:,}; "
            "lower blocks, tokens, sequences or the vocabulary")


def spec_work(cells: list[dict], quantities) -> dict:
    """The grid's estimate before it runs: total entries of the cells whose vocabulary the spec gives, the heaviest
    cell quantity that will run, and the cell quantities over :data:`MAX_CELL_WORK` (left empty with a note)."""
    total, heaviest, over, unknown = 0, None, [], 0
    for cell in cells:
        vocab = pair_vocab(cell["pair"])
        iid = cell["pair"]["kind"] in ("random_iid", "iid")
        for quantity in quantities:
            work = cell_work(cell, quantity, vocab, iid)
            if work is None:
                unknown += quantity in ("monte_carlo", "decode") and vocab is None  # a file's vocabulary: counted
                continue                                                         # in the cell, when it is read
            shape = " ".join(f"{key}={cell[key]}" for key in ("L", "k", "tree") if cell.get(key) is not None)
            label = f"{describe_pair(cell['pair'])} {cell['verifier']} {shape} {quantity}: {work[1]}"
            if work[0] > MAX_CELL_WORK:
                over.append(label)
                continue
            total += work[0]
            if heaviest is None or work[0] > heaviest[0]:
                heaviest = (work[0], label)
    return {"estimated_entries": total, "heaviest": None if heaviest is None else heaviest[1],
            "heaviest_entries": None if heaviest is None else heaviest[0], "over_limit": len(over),
            "over_limit_first": over[:3], "unestimated": unknown}
