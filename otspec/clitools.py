"""Argument types and the model-pair arguments shared by ``python -m otspec`` and ``python -m otspec.plot``.

Model pairs are given either inline (``--draft 0.3,0.7 --target 0.75,0.25``; a single number
``x`` means Bernoulli(x) = (1 − x, x)) or as JSON source files (``--draft-source FILE
--target-source FILE``; format in :mod:`otspec.sources`).
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from fractions import Fraction
from pathlib import Path

from .checks import file_problem
from .distributions import validate_probs
from .errors import HorizonError
from .pairs import check_pair
from .sources import IIDSource, Source, load_source

__all__ = ["HelpFormatter", "as_flags", "flags_that_apply", "capped_tree_note", "horizon_message", "check_lengths", "comma_items", "CLIError", "add_pair_arguments", "add_tree_arguments", "join_negative_values", "length_list", "fraction", "pair_from_args", "real",
           "parse_probs", "positive_int", "seed", "tree_from_args", "writable_file", "writable_folder",
           "check_folder_path", "index_list"]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Help that shows each default that says something (not None or False, and not when the text already names
    its default) and keeps the description's line breaks."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default is None or action.default is False or "default" in text:
            return text
        return super()._get_help_string(action)


class _StoreOnce(argparse._StoreAction):
    """A single-valued option that refuses to be given twice: argparse keeps the last value without a word, whether
    repeated (``--seed 1 --seed 2``), under an alias (``--T 3 --horizon 4``) or abbreviated (``--draft-len 2``)."""

    given: str | None = None

    def __call__(self, parser, namespace, values, option_string=None):
        if self.given is not None:
            same = self.given == option_string
            parser.error(f"{option_string} given twice{'' if same else f' (as {self.given} and {option_string})'}: "
                         "it takes one value; give it once")
        self.given = option_string
        super().__call__(parser, namespace, values, option_string)


class ArgumentParser(argparse.ArgumentParser):
    """``argparse``'s parser with its errors in one line, ``PROG: error: MESSAGE (PROG --help lists the options)``,
    exit status 2, instead of the usage block before it (every otspec command line; subcommands inherit it), with
    every single-valued option refused when given twice (:class:`_StoreOnce`), and no abbreviated options: a prefix
    of a longer flag (``--draft`` of ``--draft-out``) is an unknown option, not that flag."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)  # --draft was read as --draft-out, plot record's --out as --out-dir
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)  # argument groups share this registry
        self.register("action", "store", _StoreOnce)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {one_line(message)} ({self.prog} --help lists the options)\n")

    def parse_known_args(self, args=None, namespace=None):
        for action in self._actions:  # a parser may parse more than once
            if isinstance(action, _StoreOnce):
                action.given = None
        return super().parse_known_args(args, namespace)


def one_line(message) -> str:
    """An error message on one line: a newline or carriage return in it (a path that holds one) written as ``\\n``,
    ``\\r``, so that stderr has exactly one line per refusal."""
    return str(message).replace("\r", "\\r").replace("\n", "\\n")


class CLIError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""


def as_flags(message: str, args) -> str:
    """``message`` with a leading Python parameter name (``max_new_tokens: ...``) written as the command's flag
    (``--max-new-tokens: ...``) when ``args`` (the parsed namespace) has that destination: a command line user knows
    the flags, not the parameters they fill."""
    head, sep, rest = str(message).partition(":")
    if sep and head in vars(args) and head.isidentifier():
        return f"--{head.replace('_', '-')}:{rest}"
    return str(message)


def flags_that_apply(args, table) -> None:
    """Each ``(flag, default, needs)`` of ``table``: the default where the flag was not given (its argparse default is
    None), and a ``ValueError`` where it was given but the run does not read it: ``needs`` is the flag it goes with
    (a destination name), or ``(what the run needs, a predicate of args)``."""
    for flag, default, needs in table:
        where, applies = (f"--{needs.replace('_', '-')}", lambda a, n=needs: getattr(a, n)) if isinstance(needs, str) \
            else needs
        if getattr(args, flag) is None:
            setattr(args, flag, default)
        elif not applies(args):  # given where nothing reads it: refused, not ignored, before any model loads
            raise ValueError(f"--{flag.replace('_', '-')}: read only with {where}; this run would ignore it")


def _plain_digits(text) -> bool:
    """Whether ``text`` is written in ASCII without underscores: ``float()`` and ``Fraction`` also read ``0_1`` as 1.0
    and ``٠.٣`` as 0.3."""
    return str(text).isascii() and "_" not in str(text)


def fraction(text: str) -> float:
    """A number or a fraction (``0.3``, ``2/3``) written in ASCII (:func:`_plain_digits`) as a float. ``ValueError``
    otherwise (``OverflowError`` past the float range)."""
    if not _plain_digits(text):
        raise ValueError(f"not ASCII digits: {text!r}")
    return float(Fraction(text))


def check_lengths(lengths, flag: str = "--L") -> None:
    """Every draft length of a ``--L`` list within :data:`~otspec.checks.MAX_DRAFT_LENGTH`, checked before the first
    row's work (a late one was refused after minutes)."""
    from .checks import MAX_DRAFT_LENGTH, check_size

    for L in lengths:
        check_size(L, flag, limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")


def parse_probs(text: str, name: str = "probs") -> IIDSource:
    """``'0.3,0.7'`` or ``'2/3,1/3'`` → IID row; ``'0.3'`` → Bernoulli(0.3) = (0.7, 0.3). ``name`` labels errors."""
    try:
        items = comma_items(text)  # '0.5,,0.3' would silently be a row of three
    except ValueError:
        raise CLIError(f"{name}: an empty entry in {text!r}; expected comma-separated numbers with none left "
                       "out") from None
    try:
        values = [fraction(v) for v in items]
    except OverflowError:
        raise CLIError(f"{name}: {text!r} holds a number too large for a probability (expected entries in [0, 1])") from None
    except (ValueError, ZeroDivisionError):
        raise CLIError(f"{name}: could not read probabilities from {text!r}; expected comma-separated numbers "
                       "or fractions such as 0.3,0.7 or 2/3,1/3 (or one number p for Bernoulli(p))") from None
    if not values:
        raise CLIError(f"{name}: empty probability list")
    if len(values) == 1:
        if not 0.0 <= values[0] <= 1.0:
            raise CLIError(f"{name}: one number p means Bernoulli(p) and must lie in [0, 1], got {values[0]!r}")
        values = [1.0 - values[0], values[0]]
    return IIDSource(validate_probs(values, name))


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    """``--draft``/``--target`` rows or ``--draft-source``/``--target-source`` files (exactly one of each)."""
    g = parser.add_argument_group("model pair (inline rows or JSON source files; exactly one of each role)")
    g.add_argument("--draft", metavar="P", help="draft row, e.g. 0.3,0.7 (one number p: Bernoulli(p))")
    g.add_argument("--target", metavar="Q", help="target row, e.g. 0.75,0.25")
    g.add_argument("--draft-source", metavar="FILE", help="draft JSON source file (IID, Markov or table)")
    g.add_argument("--target-source", metavar="FILE", help="target JSON source file")


def pair_from_args(args) -> tuple[Source, Source]:
    """The (draft, target) sources named by :func:`add_pair_arguments`, checked for one vocabulary."""

    def one(inline, path, role):
        if (inline is None) == (path is None):
            raise CLIError(f"give exactly one of --{role} and --{role}-source")
        return parse_probs(inline, f"--{role}") if inline is not None else load_source(path)

    draft = one(args.draft, args.draft_source, "draft")
    target = one(args.target, args.target_source, "target")
    check_pair(draft, target)
    return draft, target


def _integer(text: str, minimum: int, what: str) -> int:
    if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", str(text)):  # int() also reads 1_6 as 16 (a typo for 1,6?) and ٣ as 3
        raise argparse.ArgumentTypeError(f"expected {what} (ASCII digits, no underscores), got {text!r}")
    value = int(text)
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
    return value


def integer(text: str) -> int:
    """An integer written in ASCII digits, with an optional sign (argparse type; ``int()`` would also read ``1_6`` as
    16 and ``٣`` as 3). The flag's own range is checked where it is used."""
    if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", str(text)):
        raise argparse.ArgumentTypeError(f"expected an integer (ASCII digits, no underscores), got {text!r}")
    return int(text)


def real(text: str) -> float:
    """A real number written in ASCII (argparse type; :func:`_plain_digits`). The flag's own range is checked where
    it is used."""
    if not _plain_digits(text):
        raise argparse.ArgumentTypeError(f"expected a number (ASCII digits, no underscores), got {text!r}")
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def integer_items(text: str, flag: str) -> list[int]:
    """The integers of a comma-separated list (:func:`comma_items`; ``""`` is the empty list), each as
    :func:`integer` reads it; a ``ValueError`` naming ``flag`` otherwise."""
    try:
        return [integer(x) for x in comma_items(text, flag)]
    except (argparse.ArgumentTypeError, ValueError):  # a non-integer, or an empty item ('2,,4')
        raise ValueError(f"{flag} {text!r}: expected comma-separated integers (ASCII digits, no underscores, no "
                         "empty item)") from None


def positive_int(text: str) -> int:
    """An integer >= 1 (argparse type)."""
    return _integer(text, 1, "a positive integer")


def seed(text: str) -> int:
    """A random seed: an integer >= 0 (argparse type)."""
    return _integer(text, 0, "an integer seed >= 0")


#: Flags whose value may start with "-" (a row such as -0.1,1.1 is read as a value, then refused).
VALUE_FLAGS = ("--draft", "--target")


def join_negative_values(argv: list[str]) -> list[str]:
    """``--draft -0.1,1.1`` → ``--draft=-0.1,1.1`` so argparse hands the value to its flag."""
    out = []
    for i, arg in enumerate(argv):
        if i and argv[i - 1] in VALUE_FLAGS and arg.startswith("-") and arg[1:2].replace(".", "").isdigit():
            out[-1] = f"{argv[i - 1]}={arg}"
        else:
            out.append(arg)
    return out


def comma_items(text: str, flag: str | None = None) -> list[str]:
    """The items of a comma-separated list: ``""`` is the empty list, an empty item inside (``"2,,4"``, ``"2,"``) a
    ``ValueError`` naming ``flag`` when given (a typo, not a shorter list)."""
    if not str(text).strip():
        return []
    items = [part.strip() for part in str(text).split(",")]
    if not all(items):
        raise ValueError(f"{flag + ' ' if flag else ''}{text!r}: an empty item in a comma-separated list")
    return items


def length_list(text: str) -> list[int]:
    """``'4'`` or ``'2,4,8'`` → a list of positive integers (argparse type)."""
    values = [part.strip() for part in str(text).split(",")]
    if not values or any(v == "" for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return [positive_int(v) for v in values]


def index_list(text: str) -> tuple[int, ...]:
    """``'3,15'`` → ``(3, 15)``: indices >= 0, comma-separated, digits only (argparse type; ``1_5`` is refused, not
    read as 15)."""
    values = [part.strip() for part in str(text).split(",")]
    if not all(v.isascii() and v.isdigit() for v in values):
        raise argparse.ArgumentTypeError(f"expected indices >= 0 (digits), separated by commas, got {text!r}")
    return tuple(int(v) for v in values)


def add_tree_arguments(parser: argparse.ArgumentParser, required: bool) -> None:
    """``--tree SPEC`` and ``--without-replacement`` (see :func:`otspec.drafts.parse_tree`)."""
    parser.add_argument("--tree", required=required, default=None,
                        help="draft tree: a k-config (2x1, 4x2x2x1), iid:K:L, or EAGLE-2's eagle2:DEPTH:TOP_K:NODES"
                             + ("" if required else "; the verifier is then a multi-draft or whole-tree one"))
    parser.add_argument("--without-replacement", action="store_true",
                        help="siblings of a k-config tree are drawn without replacement (Traversal Verification "
                             "needs it; chains are the same either way); the same as --draw without")
    parser.add_argument("--draw", choices=("iid", "without", "greedy", "hub"), default=None,
                        help="how siblings are drawn: iid, without replacement, Hu et al.'s greedy drafts (the top "
                             "k-1 tokens, then one from the rest), SpecHub's hub pair (k <= 2); default: iid for calc "
                             "tree, the verifier's own draw for simulate/decode")


def capped_tree_note(tree, vocab_size: int) -> dict:
    """``{"note": ...}`` when ``tree`` draws more children without replacement than there are tokens (the draw stops
    when they run out: every number is that of the tree with each k_i capped at V), else ``{}``."""
    if tree.deterministic or tree.draw != "without" or max(tree.branching) <= vocab_size:
        return {}
    return {"note": f"children drawn without replacement from V = {vocab_size} tokens: a node drafts at most "
                    f"{vocab_size} children (the draw stops when the tokens run out), so these are the values of the "
                    f"tree with every k_i capped at {vocab_size}"}


def horizon_message(args, exc) -> str:
    """For a :class:`~otspec.errors.HorizonError` of a command line, its message in the command's words: which flag
    asked for the length and which source files bound it (the source's own message names neither); else ``""``."""
    if not isinstance(exc, HorizonError) or exc.length is None:
        return ""
    L = getattr(args, "L", None)
    lengths = L if isinstance(L, list) else [L]
    tree = getattr(args, "tree", None)
    depth = len(str(tree).split("x")) if tree and str(tree).replace("x", "").isdigit() else None
    asks = [(f"--tree {tree}", "its depth + 1", None if depth is None else depth + 1) if tree else None,
            (f"--tokens {args.tokens:,}", "", args.tokens) if getattr(args, "tokens", None) is not None else None,
            (f"--T {args.T:,}", "", args.T) if getattr(args, "T", None) is not None else None,
            (f"--L {','.join(map(str, lengths))}", f"L = {exc.length - 1}, + 1" if exc.length - 1 in lengths else "",
             exc.length if exc.length in lengths or exc.length - 1 in lengths else None) if L is not None else None]
    asks = [a for a in asks if a is not None]
    ask = next((a for a in asks if a[2] == exc.length), asks[0] if asks else None)  # the flag whose length it is
    files = [f"--{role}-source {getattr(args, role + '_source')}" for role in ("draft", "target")
             if getattr(args, role + "_source", None) is not None]
    said = f"{ask[0]} needs sequences of {exc.length:,} tokens" + (f" ({ask[1]})" if ask[1] else "") if ask else \
        f"this command needs sequences of {exc.length:,} tokens"
    return f"{said}, past the horizon {exc.horizon} of {' or '.join(files) or 'a source'}"


def tree_from_args(args):
    """The :class:`~otspec.drafts.DraftTree` (or EAGLE-2 tree) of ``--tree``; a bad spec is a CLIError."""
    from .drafts import ConfidenceTree, parse_tree

    draw = getattr(args, "draw", None)
    if draw is not None and args.without_replacement and draw != "without":
        raise CLIError(f"--without-replacement and --draw {draw}: give one of them")
    replacement = {"iid": True, "without": False, "greedy": "greedy", "hub": "hub"}[
        draw or ("without" if args.without_replacement else "iid")]
    try:
        tree = parse_tree(args.tree, replacement=replacement)
    except ValueError as exc:
        raise CLIError(f"--tree {args.tree!r}: {exc}") from None
    asked = args.without_replacement or (draw is not None and not getattr(args, "draw_chosen_for_verifier", False))
    if asked and isinstance(tree, ConfidenceTree):  # an EAGLE-2 tree keeps the draft's most confident tokens
        raise CLIError(f"--tree {args.tree!r}: an EAGLE-2 tree is drawn by the draft's confidence (its top tokens, "
                       "distinct); --draw and --without-replacement apply to k-configs and iid:K:L trees")
    return tree


def path_argument(text: str) -> Path:
    """An argparse ``type`` for a file or folder path: any path but an empty one (``--out ''`` would write into the
    working folder, or read it, without a word)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a path, got an empty one")
    return Path(text)


def _not_blank(path, flag: str) -> None:
    """Refuse an empty or blank path: ``''`` is the working folder to pathlib, ``'   '`` a file named by spaces."""
    if isinstance(path, str) and not path.strip():
        raise ValueError(f"{flag}: expected a path, got {path!r}")
    if isinstance(path, str | os.PathLike):
        size = len(os.fsencode(os.path.join(os.getcwd(), os.fspath(path))))
        if size >= MAX_PATH_BYTES:  # the system refuses it at the first open, named by a message of 4 kB
            raise ValueError(f"{flag}: a path of {size:,} bytes, above the system's limit of {MAX_PATH_BYTES - 1:,} "
                             f"(it starts {os.fspath(path)[:40]!r})")


#: PATH_MAX on Linux: a path as long is refused by the system.
MAX_PATH_BYTES = 4096


def check_folder_path(path, flag: str) -> None:
    """Refuse (a ``ValueError`` naming ``flag``), without making anything, a folder path that cannot be made: a
    file, a device or a link to nothing in its place, a symlink loop, a name longer than 255 bytes, or a file where
    a parent folder should be, a place where no file can be written (checked with a probe file, removed at once)."""
    _not_blank(path, flag)
    out = Path(path)
    try:
        resolved = out.resolve()
    except (RuntimeError, OSError) as err:  # a symlink loop (RuntimeError on Python 3.11)
        raise ValueError(f"{flag} {out}: cannot be resolved ({err})") from None
    if os.path.lexists(out) and not out.is_dir():
        raise ValueError(f"{flag} {out}: is a file, a device or a link to nothing, not a folder")
    if any(len(os.fsencode(part)) > 255 for part in resolved.parts):  # undecodable bytes too
        raise ValueError(f"{flag} {out}: a name longer than 255 bytes")
    written = Path.cwd() / out  # as written: ``afile/..`` goes through a file, which resolving would hide
    for step in reversed(written.parents):
        if os.path.lexists(step) and not step.is_dir():
            raise ValueError(f"{flag} {out}: {step} is not a folder (a file, or a link to nothing)")
    nearest = next(p for p in (written, *written.parents) if p.is_dir())  # the root at worst
    try:  # a probe file, removed at once: /proc, /sys, a read-only mount take no new file
        with tempfile.NamedTemporaryFile(dir=nearest, prefix=".otspec-probe-"):
            pass
    except OSError as err:
        raise ValueError(f"{flag} {out}: cannot write in {nearest} ({err.strerror or err})") from None


def writable_folder(path, flag: str) -> Path:
    """``path``, a folder a command writes into at its end, checked at its start: it exists or can be made, and can
    be written to (a ``ValueError`` naming ``flag`` otherwise), so a long run never fails at its last step."""
    folder = Path(path)
    check_folder_path(folder, flag)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{flag} {folder}: cannot be made ({err.strerror or err})") from None
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{flag} {folder}: cannot be written to")
    return folder


def writable_file(path, flag: str, *, make_folder: bool = False) -> Path:
    """``path``, a file a command writes at its end, checked at its start: its folder exists (``make_folder``: is
    made) and can be written to, and ``path`` is not a folder (a ``ValueError`` naming ``flag`` otherwise)."""
    _not_blank(path, flag)
    path = Path(path)
    written = Path.cwd() / path
    if any(len(os.fsencode(part)) > 255 for part in written.parts):  # undecodable bytes too
        raise ValueError(f"{flag} {path}: a name longer than 255 bytes")
    try:
        dangling = next((p for p in (written, *written.parents) if p.is_symlink() and not p.exists()), None)
    except OSError as err:  # a name the system refuses to look up
        raise ValueError(f"{flag} {path}: cannot be looked up ({err.strerror or err})") from None
    if dangling is not None:  # as cp does: nothing is written through a link to nothing (made where it points)
        raise ValueError(f"{flag} {path}: {dangling} is a link to nothing (or a loop of links); not written through")
    try:
        folder = path.resolve().parent
    except (RuntimeError, OSError) as err:  # a symlink loop (RuntimeError on Python 3.11)
        raise ValueError(f"{flag} {path}: cannot be resolved ({err})") from None
    if make_folder:
        writable_folder(folder, flag)
    if not folder.is_dir():
        raise ValueError(f"{flag} {path}: its folder does not exist")
    problem = file_problem(path)
    if problem not in (None, "does not exist"):  # opening a pipe or a device to probe it can block forever
        raise ValueError(f"{flag} {path}: {problem}; expected a file to write")
    if path.is_dir() or not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"{flag} {path}: cannot be written to")
    existed = path.exists()
    try:  # permissions are not the whole story (/proc, a read-only mount): open it for appending, as the end will
        with open(path, "a"):
            pass
    except OSError as err:
        raise ValueError(f"{flag} {path}: cannot be written to ({err.strerror or err})") from None
    if not existed:
        path.unlink(missing_ok=True)
    return path
