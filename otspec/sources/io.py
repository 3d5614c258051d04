"""The JSON format of sources: read and write (see the package docstring for the format)."""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Mapping

import numpy as np

from ..checks import check_data_file, file_problem, unique_keys
from .base import Source, check_source
from .models import (
    DepthPositionalSource,
    IIDSource,
    MarkovSource,
    PositionalSource,
    TableSource,
    bernoulli,
    uniform_source,
)

__all__ = ["FIELDS", "MAX_SOURCE_FILE_BYTES", "load_source", "save_source", "source_from_json"]


def _integer_field(obj, key: str, kind: str):
    """``obj[key]`` as an int (None if absent), else a ValueError naming the field."""
    if key not in obj or obj[key] is None:
        return None
    value = obj[key]
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):  # numpy integers are integers
        raise ValueError(f"source JSON of type {kind!r}: field {key!r} must be an integer, got {value!r}")
    if abs(int(value)) > 2**62:  # no vocabulary, support or horizon is this large: a typo, or an overflow ahead
        raise ValueError(f"source JSON of type {kind!r}: field {key!r} is a {int(value).bit_length()}-bit integer, "
                         "too large for a machine integer")
    return int(value)


#: The fields each source type reads; any other key (a typo such as ``horizn``) is refused, never ignored.
FIELDS = {"iid": {"probs"}, "bernoulli": {"p"}, "uniform": {"support", "vocab_size"},
          "markov": {"initial", "transition", "horizon"}, "positional": {"rows", "proposes"},
          "depth_positional": {"rows", "proposes"}, "table": {"rows", "vocab_size", "horizon"}}
#: Largest source file read (a table over a large vocabulary is tens of MB; a device or a runaway file is refused).
MAX_SOURCE_FILE_BYTES = 1 << 30


def _no_strings(value, where: str) -> None:
    """Refuse text where numbers go (numpy would read ``"0.5"`` as 0.5 and a typo as an error far away)."""
    stack = [value]  # without recursion: a list nested thousands deep is refused by its shape later
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            raise ValueError(f"{where}: expected numbers, got the text {item!r}")
        if isinstance(item, list):
            stack.extend(item)


def source_from_json(obj) -> Source:
    """Build a source from a JSON object (dict) — see the module docstring.

    A field of the wrong type or shape, or a key the type does not read, is a ``ValueError`` naming the field.
    """
    if not isinstance(obj, Mapping) or "type" not in obj:
        raise ValueError("source JSON: expected an object with a 'type' key "
                         "('iid', 'bernoulli', 'uniform', 'markov', 'positional', 'depth_positional' or 'table')")
    kind = obj["type"]
    if isinstance(kind, str) and kind in FIELDS:
        unknown = sorted(set(obj) - FIELDS[kind] - {"type"})
        if unknown:
            raise ValueError(f"source JSON of type {kind!r}: unknown key(s) {', '.join(map(repr, unknown))}; it reads "
                             f"{', '.join(sorted(FIELDS[kind]))}")
        for key in ("probs", "initial", "transition"):
            if key in obj:
                _no_strings(obj[key], f"source JSON of type {kind!r}: field {key!r}")
        if kind == "table" and "rows" in obj and not isinstance(obj["rows"], dict):
            raise ValueError(f"source JSON of type 'table': field 'rows' is a {type(obj['rows']).__name__}; expected an "
                             'object from prefixes to rows, such as {"": [0.5, 0.5], "0": [0.9, 0.1]}')
        if kind != "table" and "rows" in obj:
            _no_strings(obj["rows"], f"source JSON of type {kind!r}: field 'rows'")
    try:
        return _from_json(obj, kind)
    except KeyError as exc:
        raise ValueError(f"source JSON of type {kind!r}: missing key {exc.args[0]!r}") from None
    except (TypeError, AttributeError) as exc:
        raise ValueError(f"source JSON of type {kind!r}: a field has the wrong type ({exc})") from None


def _from_json(obj, kind) -> Source:
    if kind == "iid":
        return IIDSource(obj["probs"])
    if kind == "bernoulli":
        if isinstance(obj["p"], int) and not isinstance(obj["p"], bool) and not -2 <= obj["p"] <= 2:
            raise ValueError(f"bernoulli source: 'p' must be a probability in [0, 1], got an integer of "
                             f"{len(str(abs(obj['p'])))} digits")
        if isinstance(obj["p"], bool) or not isinstance(obj["p"], int | float):
            raise ValueError(f"source JSON of type 'bernoulli': field 'p' must be a number, got {obj['p']!r}")
        return bernoulli(obj["p"])
    if kind == "uniform":
        return uniform_source(_integer_field(obj, "support", kind), _integer_field(obj, "vocab_size", kind))
    if kind == "markov":
        source = MarkovSource(obj["initial"], obj["transition"], horizon=_integer_field(obj, "horizon", kind))
        if not source.stationary and source.horizon != source.transition.shape[0] + 1:  # a file says what it holds
            raise ValueError(f"source JSON of type 'markov': 'horizon' {source.horizon} does not match its "
                             f"{source.transition.shape[0]} transition matrices (horizon {source.transition.shape[0] + 1}"
                             "); drop 'horizon' or the matrices past it")
        return source
    if kind in ("positional", "depth_positional"):
        proposes = obj.get("proposes")
        flags = isinstance(proposes, list) and all(isinstance(x, bool) for x in proposes)
        if kind == "depth_positional" and isinstance(proposes, list) and not flags:  # or one list per depth
            flags = all(isinstance(row, list) and all(isinstance(x, bool) for x in row) for row in proposes) \
                and len({len(row) for row in proposes}) == 1
        if proposes is not None and not flags:
            raise ValueError(f"{kind} source: 'proposes' must be a list of true/false, one per row"
                             + (" (or one such list per depth, all as long)" if kind == "depth_positional" else ""))
        cls = PositionalSource if kind == "positional" else DepthPositionalSource
        return cls(obj["rows"], None if proposes is None else np.asarray(proposes, dtype=bool))
    if kind == "table":
        rows = {}
        for key, value in obj["rows"].items():
            _no_strings(value, f"source JSON of type 'table': row {key!r}")
            try:
                prefix = tuple(int(t) for t in str(key).split(",") if t != "")
            except ValueError:
                raise ValueError(f"source JSON of type 'table': row key {key!r} must be comma-separated token "
                                 "ids such as '0,1' ('' for the empty prefix)") from None
            if ",".join(map(str, prefix)) != str(key):  # ' 0' or '0,' would silently share a row with '0'
                raise ValueError(f"source JSON of type 'table': row key {key!r} must be written as "
                                 f"{','.join(map(str, prefix))!r} (token ids, commas, no spaces)")
            rows[prefix] = value
        return TableSource(rows, _integer_field(obj, "vocab_size", kind), _integer_field(obj, "horizon", kind))
    raise ValueError(f"source JSON: unknown type {kind!r}; expected 'iid', 'bernoulli', 'uniform', 'markov', 'positional', "
                     "'depth_positional' or 'table'")


def load_source(path: str | os.PathLike) -> Source:
    """Read a JSON source file (see :func:`source_from_json`): a regular file of at most
    :data:`MAX_SOURCE_FILE_BYTES` (a device such as /dev/zero would be read forever)."""
    check_data_file(path, "source file (JSON)")
    size = os.path.getsize(path)
    if size > MAX_SOURCE_FILE_BYTES:
        raise ValueError(f"source file {path} holds {size:,} bytes, above MAX_SOURCE_FILE_BYTES = "
                         f"{MAX_SOURCE_FILE_BYTES:,}")
    try:
        with open(path) as fh:
            obj = json.load(fh, object_pairs_hook=unique_keys)
    except FileNotFoundError:
        raise ValueError(f"source file not found: {path}") from None
    except IsADirectoryError:
        raise ValueError(f"source file {path} is a directory; expected a JSON source file") from None
    except UnicodeDecodeError:
        raise ValueError(f"source file {path} is not a UTF-8 text file (binary data?); expected JSON") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"source file {path} is not valid JSON: {exc}") from None
    except ValueError as exc:  # a key given twice, or an integer past Python's digit limit
        digits = "limit (4300 digits) for integer string conversion" in str(exc)
        raise ValueError(f"source file {path}: " + ("holds an integer of more than 4,300 digits (no size or count "
                                                    "is that large)" if digits else str(exc))) from None
    except RecursionError:
        raise ValueError(f"source file {path} nests JSON too deeply to be a source") from None
    try:
        source = source_from_json(obj)
    except ValueError as exc:
        raise ValueError(f"source file {path}: {exc}") from None
    source.origin = f"source file {path}"
    return source


def save_source(source: Source, path: str | os.PathLike) -> None:
    """Write ``source.to_json()`` to ``path`` (a regular file: a device or a pipe is refused)."""
    check_source(source, "source")
    problem = file_problem(path)
    if problem not in (None, "does not exist"):
        raise ValueError(f"source file {path!r}: cannot be written: {problem}")
    if os.path.islink(path) and not os.path.exists(path):  # as cp does: not written where a link to nothing points
        raise ValueError(f"source file {path!r}: a link to nothing (or a loop of links); not written through")
    text = json.dumps(source.to_json(), indent=1)  # a source without a JSON form is refused before the file is made
    try:
        with open(path, "w") as fh:
            fh.write(text)
    except OSError as err:  # a folder that does not exist, no permission
        raise ValueError(f"source file {path!r}: cannot be written ({err.strerror or err})") from None
