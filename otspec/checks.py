"""The validation layer of every public entry point: sizes, numbers and their stated limits.

Probability rows are checked by :func:`otspec.distributions.validate_probs` (its dtype policy
is documented there and in the README's input contract); this module checks everything else:

* :func:`check_size` — an integer-valued size (``L``, ``k``, ``T``, ``M``, ``iterations``,
  ``blocks``, ``vocab``, ``horizon``, ...): a Python or numpy integer (never a bool, a float
  such as 2.7 — or 2.0 — or a string) in its range, else ``ValueError`` naming the argument;
  above a stated limit, :class:`~otspec.errors.SizeLimitError` naming the limit;
* :func:`check_real` — a finite real number in a range (``eps``, ``concentration``, ``scale``,
  ``confidence`` ...);
* :func:`check_token_ids` — token ids inside a vocabulary.

The limits below are the ones whose work grows with the size itself rather than with memory
(memory limits live beside the code that allocates); each is derived from a measurement on a
2-core machine.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .errors import SizeLimitError

__all__ = [
    "COUNT_CAP",
    "MAX_CANDIDATES",
    "MAX_DECODE_ENTRIES",
    "MAX_DRAFT_LENGTH",
    "MAX_HORIZON",
    "MAX_SIMULATION_BLOCKS",
    "MAX_ROW_WORK",
    "MAX_STEP_ENTRIES",
    "MAX_VOCAB_SIZE",
    "MAX_TREE_TOKENS", "MAX_VOCAB_SIZE",
    "capped_perm",
    "format_count",
    "capped_power",
    "check_real",
    "check_size",
    "check_token_ids",
    "check_unit_interval",
    "read_numbers",
    "integer_array",
    "NOT_NUMBERS",
    "real_array",
    "grid_entries",
    "real_grid",
    "all_numbers",
    "tensors_as_arrays",
    "check_flag",
    "check_seed",
    "finite_real",
    "unique_keys",
    "file_problem",
]

#: Longest draft length any engine or closed form accepts. The closed forms are O(L) to
#: O(L²) (the Bernoulli optimum (11b) sums L Binomial laws: 0.6 s at L = 4096) and a block
#: of 4096 drafted tokens is far beyond any real speculative decoder.
MAX_DRAFT_LENGTH = 4096
#: Most candidates k (and parallel responses M): multi-round rejection sampling and batch SD
#: loop once per candidate (≈ 10 µs per row step, so k = 4096 takes well under a second).
MAX_CANDIDATES = 4096
#: Longest horizon T of the Markov-chain theory and of generated sequences (O(T V²) recursions).
MAX_HORIZON = 1_000_000
#: Most Monte Carlo blocks one call simulates: about 15 minutes at the measured 1e6 blocks/s.
MAX_SIMULATION_BLOCKS = 10**9
#: Most tokens (sequences × tokens per sequence) one decode call keeps in its buffer: about 46 bytes each with the
#: ledger, so 1.6 GB at the limit.
MAX_DECODE_ENTRIES = 2**25
#: Largest number of (draft, position, token) probability entries an exact enumeration builds at once.
MAX_EXACT_ENTRIES = 2**26
#: Most draft tokens one tree drafts (a k-config's Σ_i ∏_{j<=i} k_j; an EAGLE-2 tree's top_k + (depth − 1) top_k²).
#: Real trees draft tens to a few thousand (EAGLE-2: 60 kept of ~300 drafted; SpecTr: K·L); every loop scores a
#: tree's nodes in one call, so this also bounds a call's width.
MAX_TREE_TOKENS = 2**16
#: Most probabilities one loop step scores (sequences × scored positions × V, both models' rows): 2^27 float64 is
#: 1 GiB. Checked from the sizes before a decode starts.
MAX_STEP_ENTRIES = 2**27
#: Most probability-row entries one Monte Carlo call that materialises rows may touch: about 15 s to 2 minutes of
#: one core (64 ns per entry for candidate rows at V = 32,000, 8 ns when decoding); the sweeps' per-cell limit too.
MAX_ROW_WORK = 2 * 10**9
#: Largest vocabulary a source is built with: 2^24 tokens (128 MiB per float64 row), far above any real tokenizer
#: (about 256,000); a uniform source of 10^12 tokens is refused before its row is allocated.
MAX_VOCAB_SIZE = 2**24


#: Counts above this are reported as this value (they exceed every limit; no giant integer is built).
COUNT_CAP = 2**63


def capped_power(base: int, exponent: int) -> int:
    """base**exponent, or :data:`COUNT_CAP` when that is larger (computed without building the big integer)."""
    if base <= 1 or exponent * math.log2(base) < 63:
        return min(base**exponent, COUNT_CAP)
    return COUNT_CAP


def capped_perm(n: int, k: int) -> int:
    """n!/(n−k)!, or :data:`COUNT_CAP` when that is larger (stops multiplying once past the cap)."""
    out = 1
    for i in range(min(k, n)):
        out *= n - i
        if out >= COUNT_CAP:
            return COUNT_CAP
    return out


#: Types the ``numbers`` ABCs admit that are no number a parameter means: booleans, and numpy's time spans and dates
#: (``np.timedelta64`` is registered as an integer).
NOT_NUMBERS = (bool, np.timedelta64, np.datetime64)


def check_token_ids(tokens: np.ndarray, vocab_size: int) -> None:
    """A ``ValueError`` unless every id of the integer array ``tokens`` lies in [0, ``vocab_size``) (one reduction: a
    negative id read as unsigned is past any vocabulary)."""
    if tokens.size and tokens.astype(np.int64, copy=False).view(np.uint64).max() >= vocab_size:
        raise ValueError(f"tokens: ids must lie in [0, {vocab_size}); got range [{tokens.min()}, {tokens.max()}]")


def check_unit_interval(values, name: str) -> np.ndarray:
    """``values`` (a number or an array of them) as floats, if each is a real in [0, 1] (a rounding of 1e-9 above 1
    is let by); text, booleans and NaN are refused."""
    arr = np.asarray(tensors_as_arrays(values))  # a tensor that requires grad has no plain numpy view
    if arr.dtype.kind not in "fiu":
        raise ValueError(f"{name}: expected real numbers in [0, 1], got {values!r:.80} (dtype {arr.dtype})")
    arr = arr.astype(np.float64, copy=False)
    inside = (arr >= 0) & (arr <= 1 + 1e-9)  # NaN fails both comparisons
    if not np.all(inside):
        raise ValueError(f"{name}: expected real numbers in [0, 1], got {float(arr[~inside].flat[0])!r}")
    return arr


def grid_entries(values, name: str) -> list:
    """The entries of a non-empty 1-D grid, each as given for its own check (a number alone is a grid of one): a
    2-D grid is refused where flattening it changed the curve's shape, and an empty one where it gave an empty
    curve."""
    if isinstance(values, str | bytes | dict | set):
        raise ValueError(f"{name}: expected a 1-D list of numbers, got {type(values).__name__}")
    try:
        arr = np.asarray(values, dtype=object)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name}: expected a 1-D list of numbers ({exc})") from None
    if arr.ndim > 1 or arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D list of numbers, got shape {arr.shape}")
    return arr.reshape(-1).tolist()


def real_grid(values, name: str, **bounds) -> np.ndarray:
    """A non-empty 1-D grid of reals as floats, each checked by :func:`check_real` with ``bounds``."""
    return np.array([check_real(v, f"{name}[{i}]", **bounds) for i, v in enumerate(grid_entries(values, name))])


def read_numbers(values, name: str, expected: str = "real numbers") -> tuple:
    """``(values, raw)``: ``values`` with torch tensors read on the host, and ``np.asarray`` of it, if every entry is
    a real number; text, booleans, complex numbers, dates and other objects (a source given where its rows go) are
    refused in a ``ValueError`` naming ``name``, as is a masked array (its masked entries would be read as the
    numbers under them). Lists are read entry by entry (``[1.0, False]`` is refused); ``raw`` keeps its dtype."""
    if isinstance(values, np.ma.MaskedArray):
        raise ValueError(f"{name}: a masked array; pass a plain array (masked entries as 0 if that is meant)")
    if isinstance(values, bytearray | memoryview):  # a bytearray was read as a row of its byte values
        raise ValueError(f"{name}: expected {expected}, got {type(values).__name__}")
    values = tensors_as_arrays(values)
    try:
        raw = np.asarray(values)
    except (TypeError, ValueError, OverflowError) as exc:  # a ragged list, a huge integer
        raise ValueError(f"{name}: expected {expected}, could not read it ({exc})") from None
    listed = raw.dtype.kind == "O" or isinstance(values, list | tuple)  # entries read one by one (Decimal, big ints)
    if raw.dtype.kind not in "iufO" or (listed and not all_numbers(values, booleans=False)):
        raise ValueError(f"{name}: expected {expected}, got {_what(values, raw)}")
    return values, raw


def integer_array(values, name: str, what: str = "integers", *, ndim: int | None = None) -> np.ndarray:
    """``values`` as an int64 array if its entries are integers (a float, even a whole one, a boolean or text is
    refused: ``astype(int)`` read 1.5 as 1 and 0.5 as id 0) and, given ``ndim``, it has that many axes; else a
    ``ValueError`` naming ``name`` and ``what`` was expected. An empty array passes whatever its dtype."""
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError) as exc:  # a ragged list
        raise ValueError(f"{name}: expected {what}, could not read them ({exc})") from None
    if (ndim is not None and arr.ndim != ndim) or (arr.size and arr.dtype.kind not in "iu"):
        axes = f"{ndim}-D " if ndim is not None else ""
        raise ValueError(f"{name}: expected {what} (a {axes}integer array), got shape {arr.shape}, dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def real_array(values, name: str, *, finite: bool = True) -> np.ndarray:
    """``values`` as a float64 array if every entry is a real number (:func:`read_numbers`: ``np.asarray(values,
    dtype=float)`` read '0.5' as 0.5 and True as 1.0), and finite unless ``finite`` is False. A torch tensor is read
    on the host."""
    values, raw = read_numbers(values, name)
    try:
        arr = raw.astype(np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{name}: expected real numbers ({exc})") from None
    if finite and arr.size and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: expected finite numbers, got {float(arr[~np.isfinite(arr)].flat[0])!r}")
    return arr


def _what(values, raw: np.ndarray) -> str:
    if isinstance(values, str | bytes):
        return f"the text {values!r:.40}"
    if hasattr(values, "next_probs") and hasattr(values, "vocab_size"):  # a Source, whose rows were meant
        return (f"{type(values).__name__}, a source (pass its rows: source.probs of an IID source, or "
                "source.next_probs(prefixes))")
    if raw.dtype.kind in "iuf":  # a list whose numbers numpy read past a boolean or another object
        return "booleans or other objects among the entries, not only numbers"
    kinds = {"b": "booleans", "U": "text", "S": "bytes", "c": "complex numbers", "O": "text or other objects",
             "M": "dates", "m": "time spans"}
    return f"{kinds.get(raw.dtype.kind, 'dtype ' + str(raw.dtype))} among the entries"


def format_count(n: int) -> str:
    """A count for a message: ``1,234`` — or ``at least 9,223,372,036,854,775,808`` for a capped count."""
    return f"{n:,}" if n < COUNT_CAP else f"at least {COUNT_CAP:,}"


def check_size(value, name: str, *, minimum: int = 1, limit: int | None = None, limit_name: str | None = None,
               what: str = "an integer") -> int:
    """``value`` as an int, if it is an integer (not bool) >= ``minimum`` and <= ``limit``.

    >>> check_size(4, "L")
    4
    >>> check_size(2.7, "L")
    Traceback (most recent call last):
    ...
    ValueError: L: expected an integer >= 1, got 2.7 (float)
    """
    if isinstance(value, NOT_NUMBERS) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}: expected {what} >= {minimum}, got {value!r} ({type(value).__name__})")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name}: expected {what} >= {minimum}, got {_count_text(value)}")
    if limit is not None and value > limit:
        named = limit_name and not limit_name.replace(",", "").replace("_", "").isdigit()
        shown = _count_text(value)
        raise SizeLimitError(f"{name} = {shown} is above {limit_name} = {limit:,}" if named else
                             f"{name} = {shown} is above the limit of {limit:,}", size=value, limit=limit)
    return value


def _count_text(value: int) -> str:
    """An integer for a message: ``1,234``, or ``a 401-digit number (1000...)`` past 30 digits (10**400 was echoed in
    full)."""
    digits = len(str(abs(value)))
    return f"{value:,}" if digits <= 30 else f"a {digits}-digit number ({str(value)[:8]}...)"


def check_seed(seed, name: str = "seed"):
    """``seed`` if it seeds numpy: None, a ``numpy.random.Generator``, or an integer >= 0 (not a bool, a float or
    text), else a ``ValueError`` naming it."""
    import numpy as np

    if seed is None or isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, NOT_NUMBERS) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"{name}: expected None, a numpy Generator or an integer >= 0, got {seed!r} "
                         f"({type(seed).__name__})")
    return int(seed)


def check_real(value, name: str, *, low: float = -math.inf, high: float = math.inf, low_open: bool = False,
               allow_inf: bool = False) -> float:
    """``value`` as a float in [low, high] (``(low, high]`` with ``low_open``); NaN never, ±inf only if allowed.

    >>> check_real(0.5, "eps", low=0)
    0.5
    """
    if isinstance(value, NOT_NUMBERS) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name}: expected a real number, got {value!r} ({type(value).__name__})")
    bounds = f"{'(' if low_open else '['}{low:g}, {high:g}]"
    try:
        x = float(value)
    except OverflowError:  # an integer (or Fraction) past every float: 10**400
        shown = _count_text(value) if isinstance(value, numbers.Integral) else "a number past every float"
        raise ValueError(f"{name}: expected a {'' if allow_inf else 'finite '}number in {bounds}, got {shown}") from None
    if math.isnan(x) or (math.isinf(x) and not allow_inf) or x < low or x > high or (low_open and x == low):
        raise ValueError(f"{name}: expected a {'' if allow_inf else 'finite '}number in {bounds}, got {value!r}")
    return x


class MissingFile(FileNotFoundError, ValueError):
    """A data file that does not exist: a ``FileNotFoundError`` as ``open`` raises, and a ``ValueError`` as every
    other refused input, so either ``except`` catches it."""


def check_data_file(path, what: str) -> None:
    """Refuse ``path`` as ``what`` (a data file to read) unless it is a regular file: :class:`MissingFile` when it
    does not exist, a ``ValueError`` naming the problem (a folder, a pipe, a device) otherwise."""
    problem = file_problem(path)
    if problem == "does not exist":
        raise MissingFile(f"{what} not found: no file {path}")
    if problem:
        raise ValueError(f"{what}: {path!r} {problem}" if not str(path) or problem.startswith("is not a path") else
                         f"{what}: {path} {problem}")


def file_problem(path) -> str | None:
    """Why ``path`` cannot be read as a data file, or None: it does not exist, is a folder, or is not a regular file
    (a device, a pipe or a socket: reading one can block forever or never end)."""
    import os
    import stat

    if isinstance(path, bool) or not isinstance(path, str | os.PathLike):  # os.stat(3) would read descriptor 3
        return f"is not a path (a str or os.PathLike), it is a {type(path).__name__}"
    try:
        text = os.fspath(path)
    except TypeError:  # an __fspath__ that returns no path
        return "is not a path (its __fspath__ returns no str)"
    if not isinstance(text, str):  # bytes too: a bytes path is refused above, and pathlib takes none
        return "is not a path (its __fspath__ returns no str)"
    if not text:
        return "is an empty path"
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError, ValueError):  # ValueError: an embedded NUL
        return "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISDIR(mode):
        return "is a folder (a directory), not a file"
    if not stat.S_ISREG(mode):
        return "is not a regular file (a device, a pipe or a socket)"
    return None


def check_npz_members(path, limit: int, what: str, limit_name: str = "MAX_MEMBER_ENTRIES") -> None:
    """Refuse (a :class:`~otspec.errors.SizeLimitError` naming ``what``) an ``.npz`` archive member whose header
    declares more than ``limit`` entries, or more than ``limit`` 8-byte entries' worth of bytes, before any member is
    loaded: a few MB of zeros can decompress to gigabytes."""
    import math
    import zipfile

    import numpy as np

    from .errors import SizeLimitError

    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            with archive.open(info) as fh:
                version = np.lib.format.read_magic(fh)
                read = (np.lib.format.read_array_header_1_0 if version == (1, 0) else
                        np.lib.format.read_array_header_2_0)
                shape, _, dtype = read(fh)
            entries = math.prod(shape)
            if entries > limit:
                raise SizeLimitError(f"{what}: {path}: array {info.filename!r} declares {entries:,} entries, above "
                                     f"{limit_name} = {limit:,} (refused before loading it)")
            if entries * dtype.itemsize > 8 * limit:  # a wide record or void dtype: few entries, gigabytes
                raise SizeLimitError(f"{what}: {path}: array {info.filename!r} declares {entries:,} entries of "
                                     f"{dtype.itemsize:,} bytes ({dtype}), above {limit_name} = {limit:,} entries of 8 "
                                     "bytes (refused before loading it)")


def unique_keys(pairs) -> dict:
    """A JSON object's keys, each once (``json.load(..., object_pairs_hook=unique_keys)``): a key given twice is an
    error, not a silent choice of the last value."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} appears twice in one object")
        out[key] = value
    return out


#: Deepest nesting of a JSON data file read (records and forecasts nest at most 8 levels; a field nested hundreds
#: deep would be read, then break whatever writes or walks it later).
MAX_JSON_DEPTH = 64


def json_depth(obj, limit: int = MAX_JSON_DEPTH) -> int:
    """The nesting depth of lists and dicts in ``obj`` (1 for a flat list), counted without recursion and
    stopping once past ``limit``."""
    deepest, stack = 0, [(obj, 1)]
    while stack and deepest <= limit:
        x, d = stack.pop()
        if isinstance(x, dict | list | tuple):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in (x.values() if isinstance(x, dict) else x))
    return deepest


def finite_real(value) -> bool:
    """Whether ``value`` is a finite real number a JSON file can hold (an int or a float, not bool); an integer of
    hundreds of digits is no float and is refused, rather than raising ``OverflowError``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def check_flag(value, name: str) -> bool:
    """``value`` if it is a bool (Python or numpy), else a ``ValueError`` naming it: the text 'False' is true."""
    import numpy as np

    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name}: expected True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def check_progress(progress):
    """``progress`` if it is ``None`` (a bar on a terminal), ``True`` or ``False``, else a ``ValueError``: the text
    'False' would show a bar."""
    if progress is None or isinstance(progress, bool | np.bool_):
        return None if progress is None else bool(progress)
    raise ValueError(f"progress: expected None (a bar on a terminal), True or False, got {progress!r} "
                     f"({type(progress).__name__})")


def check_dense(array, name: str) -> None:
    """Refuse a meta or sparse torch tensor (a ``ValueError`` naming ``name``): it holds no values to check."""
    if getattr(array, "is_nested", False):
        raise ValueError(f"{name}: a nested tensor (rows of different lengths) is not a probability array")
    if getattr(array, "is_meta", False) or str(getattr(array, "layout", "torch.strided")) != "torch.strided":
        raise ValueError(f"{name}: a {'meta' if getattr(array, 'is_meta', False) else 'sparse'} tensor holds no values "
                         "to check; pass a dense tensor with its values")


def tensors_as_arrays(items, depth: int = 3):
    """A list (of lists, ``depth`` levels) with each torch tensor in it as a float64 numpy array (detached, on the
    CPU: bfloat16 and tensors that require grad have no numpy view); boolean tensors are left as they are, for the
    caller to refuse. A list without tensors is returned as it is."""
    if isinstance(items, list | tuple):
        if depth == 0:
            return items
        out = [tensors_as_arrays(x, depth - 1) for x in items]
        return out if any(a is not b for a, b in zip(out, items, strict=True)) else items
    if type(items).__module__.split(".")[0] == "torch" and hasattr(items, "detach"):
        if getattr(items, "is_meta", False):  # shapes without values
            raise ValueError("a tensor on the 'meta' device holds no values")
        if str(items.dtype) != "torch.bool" and not items.dtype.is_complex:
            return items.detach().cpu().double().numpy()
    return items


def coarsest_eps(items, depth: int = 3) -> float | None:
    """The machine epsilon of the least precise floating dtype among the arrays and tensors in ``items`` (a list of
    them, ``depth`` levels), or ``None`` when there is none: a list of float16 rows is checked at float16's tolerance,
    not at float64's after it is read as one array."""
    if isinstance(items, list | tuple):
        found = [e for e in (coarsest_eps(x, depth - 1) for x in items) if e is not None] if depth else []
        return max(found, default=None)
    dtype = getattr(items, "dtype", None)
    if type(items).__module__.split(".")[0] == "torch" and dtype is not None and dtype.is_floating_point:
        import torch

        return float(torch.finfo(dtype).eps)
    if isinstance(dtype, np.dtype) and dtype.kind == "f":
        return float(np.finfo(dtype).eps)
    return None


def all_numbers(items, *, booleans: bool = True) -> bool:
    """Whether a nested list holds only real numbers (``Decimal`` included; no text, None or other objects; no
    booleans either unless ``booleans``). Arrays, 0-d arrays and tensors among the entries are read by their dtype."""
    import numbers
    from decimal import Decimal

    import numpy as np

    kinds = "iufb" if booleans else "iuf"
    stack = [items]
    while stack:
        x = stack.pop()
        if isinstance(x, list | tuple):
            stack.extend(x)
        elif isinstance(x, bool | np.bool_):
            if not booleans:
                return False
        elif isinstance(x, numbers.Real | Decimal):
            continue
        elif isinstance(x, np.ndarray) or hasattr(x, "__array__"):  # an array, a 0-d array, a torch scalar among rows
            try:
                arr = np.asarray(x)
            except (TypeError, ValueError, RuntimeError):  # a GPU tensor, an array-like that cannot be read
                return False
            if arr.dtype.kind == "O":
                stack.extend(arr.ravel().tolist())
            elif arr.dtype.kind not in kinds:
                return False
        else:
            return False
    return True
