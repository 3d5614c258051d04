"""One registry of verifiers, filled by declaration, and the one name of each closed form.

A verifier class declares what it is in class attributes (:class:`~otspec.verifiers.base.Verifier`): ``name``,
``layout`` (``"chain"``, ``"candidates"`` or ``"tree"``), ``lossless``, ``closed_form`` (a :class:`ClosedForm`
or ``None``), ``replacement`` (the draw of candidates it is exact for: ``True`` i.i.d., ``False`` without
replacement, ``"greedy"`` or ``"hub"`` for the structured draws), ``any_draw_mode`` and ``fixed_tree`` (it drafts
its own tree, as batch speculative decoding does). :func:`register` files the class under its name, and every
list the package shows — the CLI's choices, the sweeps', the calculators' columns, the audit's adapters, the
figures' curves — is a :class:`VerifierView` of the registry, read when it is used. A new verifier is one file
(the class, decorated with ``@register``) and one line (its import in :mod:`otspec.verifiers`), or a call of
:func:`register` from the user's own code.

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import StrEnum

from ..drafts import CANDIDATES, CHAIN

__all__ = ["LAYOUTS", "TREE", "ClosedForm", "VerifierView", "register", "registered", "unregister"]

#: The layout of a whole-tree verifier (the tree loop hands it every drafted node's rows at once).
TREE = "tree"
LAYOUTS = (CHAIN, CANDIDATES, TREE)


class ClosedForm(StrEnum):
    """The closed-form expected accepted length a lossless chain verifier attains: its one name.

    ``TOKEN``: token verification, eq. (4); ``BLOCK``: published (on-path) block verification, eq. (17);
    ``OPTIMAL``: the block-OT optimum, eq. (8), which the v1 backward block verifier attains. The value is the
    name in the real-pair records (``predicted_block_efficiency`` keys); :attr:`iid_field` and :attr:`calc_key`
    are the names the IID theory (:class:`~otspec.theory.IIDBlockValues`) and ``otspec calc block`` give it.
    """

    TOKEN = "token"
    BLOCK = "block"
    OPTIMAL = "optimal"

    @property
    def iid_field(self) -> str:
        """Its field of :class:`~otspec.theory.IIDBlockValues` (``token``, ``verification``, ``optimum``)."""
        return {"token": "token", "block": "verification", "optimal": "optimum"}[self.value]

    @property
    def calc_key(self) -> str:
        """Its key in ``otspec calc block`` (``token``, ``block_onpath``, ``block_optimal``)."""
        return {"token": "token", "block": "block_onpath", "optimal": "block_optimal"}[self.value]

    @property
    def equation(self) -> str:
        """The equation of the block-verification paper it is (for labels)."""
        return {"token": "eq. (4)", "block": "eq. (17)", "optimal": "eq. (8)"}[self.value]


_REGISTERED: dict[str, type] = {}


def register(cls: type) -> type:
    """File a verifier class under its ``name`` (a class decorator); its declaration is checked first.

    Raises
    ------
    ValueError
        For a name already taken by another class, an unknown layout, or a closed form on a verifier that is not
        a lossless chain verifier.
    """
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"register: {cls!r} needs a class attribute `name` that is an identifier, got {name!r}")
    if name in _REGISTERED and _REGISTERED[name] is not cls:
        raise ValueError(f"register: the name {name!r} is taken by {_REGISTERED[name].__qualname__}")
    if cls.layout not in LAYOUTS:
        raise ValueError(f"register: {name}: layout {cls.layout!r} is not one of {LAYOUTS}")
    if cls.closed_form is not None:
        cls.closed_form = ClosedForm(cls.closed_form)
        if cls.layout != CHAIN or not cls.lossless:
            raise ValueError(f"register: {name}: a closed form belongs to a lossless chain verifier")
    _REGISTERED[name] = cls
    return cls


def unregister(name: str) -> type:
    """Remove a verifier from the registry (a plugin's or a test's); returns its class."""
    try:
        return _REGISTERED.pop(name)
    except KeyError:
        raise ValueError(f"unregister: no verifier {name!r}; registered: {sorted(_REGISTERED)}") from None


def registered(*, layouts: tuple[str, ...] = LAYOUTS, lossless: bool | None = None, closed_form: bool | None = None,
               fixed_tree: bool | None = None) -> dict[str, type]:
    """The registered verifier classes by name of one of ``layouts`` that match every other criterion given
    (``None``: either way)."""
    for flag, value in (("lossless", lossless), ("closed_form", closed_form), ("fixed_tree", fixed_tree)):
        if value is not None and type(value).__name__ not in ("bool", "bool_"):  # 'False' matched the True ones
            raise ValueError(f"{flag}: expected None (either way), True or False, got {value!r}")
    layouts = (layouts,) if isinstance(layouts, str) else tuple(layouts)
    unknown = [x for x in layouts if x not in LAYOUTS]
    if unknown:
        raise ValueError(f"layouts: expected some of {LAYOUTS}, got {unknown[0]!r}")
    return {name: cls for name, cls in _REGISTERED.items()
            if cls.layout in layouts and (lossless is None or cls.lossless == lossless)
            and (closed_form is None or (cls.closed_form is not None) == closed_form)
            and (fixed_tree is None or cls.fixed_tree == fixed_tree)}


class VerifierView(Mapping):
    """A live, read-only view of the registry: the verifiers matching fixed criteria (:func:`registered`'s),
    read on every use, so that a verifier registered later appears in it."""

    def __init__(self, description: str, **criteria):
        self.description, self.criteria = description, criteria

    def _current(self) -> dict[str, type]:
        return registered(**self.criteria)

    def __getitem__(self, name: str) -> type:
        return self._current()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())

    def __repr__(self) -> str:
        return f"VerifierView({self.description}: {sorted(self._current())})"
