"""A bar on signatures: no function of otspec or llm_bridge takes more than 10 parameters, and no call passes more
than 10 positional arguments (a record built from 17 unnamed values is one misordered pair away from a silent wrong
field), compiled kernels aside. Issue 42 found 15 functions over the first bar; configuration objects replaced
their long keyword lists (``Backend``, ``DecodeOptions``, ``ValidateConfig``, ``HeadRecipe`` …)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_PARAMETERS = 10
MAX_POSITIONAL = 10


def _parameters(node: ast.FunctionDef) -> int:
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
    return len(names) + (a.vararg is not None) + (a.kwarg is not None)


def _compiled(node: ast.FunctionDef) -> bool:
    return any((d.id if isinstance(d, ast.Name) else getattr(d, "attr", "")) in ("njit", "_njit")
               for d in node.decorator_list)


def _name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)


def over_the_bar(source: str, path: str, kernels: frozenset = frozenset()) -> dict[str, int]:
    """``path::name -> count`` of the functions of ``source`` over :data:`MAX_PARAMETERS` and of the calls (named
    ``path:line:callee``) passing more than :data:`MAX_POSITIONAL` positional arguments; compiled functions and calls
    of ``kernels`` (the names of compiled functions) aside."""
    tree = ast.parse(source)
    found = {f"{path}::{node.name}": _parameters(node) for node in ast.walk(tree)
             if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not _compiled(node)
             and _parameters(node) > MAX_PARAMETERS}
    found.update({f"{path}:{node.lineno}:{_name(node)}": len(node.args) for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and len(node.args) > MAX_POSITIONAL and _name(node) not in kernels})
    return found


def _sources() -> dict[str, str]:
    return {path.relative_to(ROOT).as_posix(): path.read_text()
            for package in ("otspec", "llm_bridge") for path in sorted((ROOT / package).rglob("*.py"))}


def test_no_function_takes_more_than_ten_parameters_and_no_call_passes_more_than_ten_positional():
    sources = _sources()
    kernels = frozenset(node.name for source in sources.values() for node in ast.walk(ast.parse(source))
                        if isinstance(node, ast.FunctionDef) and _compiled(node))
    assert len(kernels) >= 5  # the numba kernels are found (else the exemption would be vacuous)
    found = {}
    for path, source in sources.items():
        found.update(over_the_bar(source, path, kernels))
    assert not found, f"over the bar (use a configuration object, or keywords): {found}"


def test_the_bar_counts_what_it_should():
    source = ("def wide(a, b, c, d, e, f, g, h, i, j, *, k): pass\n"
              "def narrow(self, a, b, c, d, e, f, g, h, i, j): pass\n"
              "def spread(a, *args, b, c, d, e, f, g, h, i, **kw): pass\n"
              "@njit\ndef kernel(a, b, c, d, e, f, g, h, i, j, k, l): pass\n"
              "kernel(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)\n"
              "Record(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)\n"
              "Record(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, k=11)\n")
    assert over_the_bar(source, "m.py", frozenset({"kernel"})) == {"m.py::wide": 11, "m.py::spread": 11,
                                                                    "m.py:7:Record": 11}
