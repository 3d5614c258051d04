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


#: The committed corpus of the default target.
DEFAULT_CORPUS = Path(__file__).resolve().parent.parent / "llm_bridge" / "data" / "corpus" / "smollm2"


def damaged_index(folder: Path, change) -> Path:
    """``folder`` made, holding a copy of the default corpus's ``corpus.json`` changed in place by ``change`` (a
    function of the index), and no shard."""
    import json

    index = json.loads((DEFAULT_CORPUS / "corpus.json").read_text())
    change(index)
    folder.mkdir()
    (folder / "corpus.json").write_text(json.dumps(index))
    return folder
