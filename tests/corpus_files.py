"""Small corpus shards for the tests of damaged corpora: two sequences of four tokens over a 24-token vocabulary."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_shard(path: Path, **changes) -> None:
    """A valid shard in ``path``, with the arrays in ``changes`` put in place of its own."""
    arrays = {"format": np.array("otspec-corpus-1"), "vocab_size": np.array(24), "offsets": np.array([0, 4, 8]),
              "tokens": np.array([1, 2, 3, 4, 1, 2, 5, 6], dtype=np.uint16), "prompt_lengths": np.array([2, 2]),
              "message": np.array([0, 0]), "temperature": np.array([1.0, 0.0]), **changes}
    np.savez_compressed(path, **arrays)
