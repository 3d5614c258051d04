"""The layout of the house: no import cycle, dependencies point down, modules stay readable."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

import llm_bridge
import otspec
from otspec.figures import FIGURES

PACKAGE = Path(otspec.__file__).parent
ROOT = PACKAGE.parent
#: The packages whose imports are walked: the library and the model side on top of it.
PACKAGES = (PACKAGE, Path(llm_bridge.__file__).parent)
#: "No module over 500 lines", tests included.
MAX_LINES = 500
#: Presentation: what no lower layer and not the model side may import.
PRESENTATION = ("otspec.figures", "otspec.plot", "otspec.report", "otspec.cli")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")
        parts = parts if is_package else parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    # "from . import x" names submodules; "from .m import f" names module m
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def import_graph() -> nx.DiGraph:
    """Edges module -> otspec / llm_bridge module it imports (at any depth: lazy imports count too)."""
    modules = {_module_name(p): p for package in PACKAGES for p in package.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.ImportFrom):
                targets = _resolve(name, path.name == "__init__.py", node)
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            for target in targets:
                if target in modules and target != name:
                    graph.add_edge(name, target)
    return graph


def _without_package_inits(graph: nx.DiGraph) -> nx.DiGraph:
    """Package ``__init__`` re-exports point at their own children; drop those edges and keep the rest."""
    g = graph.copy()
    for a, b in list(g.edges):
        if b.startswith(a + "."):
            g.remove_edge(a, b)
    return g


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_no_import_cycle():
    cycles = list(nx.simple_cycles(_without_package_inits(import_graph())))
    assert cycles == [], f"import cycles: {cycles[:5]}"


def test_both_packages_are_walked():
    graph = import_graph()
    assert graph.has_edge("llm_bridge.sessions", "otspec.engine.session")
    assert graph.has_edge("llm_bridge.drafters", "llm_bridge.models")


def test_the_model_side_never_imports_presentation():
    graph = import_graph()
    bad = [(a, b) for a, b in graph.edges if _inside(a, "llm_bridge") and any(_inside(b, p) for p in PRESENTATION)]
    assert bad == []


def test_the_library_never_imports_the_model_side():
    graph = import_graph()
    assert [(a, b) for a, b in graph.edges if _inside(a, "otspec") and _inside(b, "llm_bridge")] == []


@pytest.mark.parametrize("lower", ["otspec.solvers", "otspec.theory", "otspec.drafts", "otspec.distributions", "otspec.namespaces",
                                   "otspec.sources", "otspec.errors", "otspec.pairs"])
def test_lower_layers_never_import_verifiers_or_engines(lower):
    graph = import_graph()
    bad = [(a, b) for a, b in graph.edges
           if (a == lower or a.startswith(lower + ".")) and b.split(".")[1] in ("verifiers", "engine", "figures",
                                                                               "plot", "report", "cli")]
    assert bad == []


@pytest.mark.parametrize("layer,above", [("otspec.verifiers", ("engine", "sweep", "audit", "calculators", "experiments",
                                                                 "figures", "plot", "report", "cli")),
                                          ("otspec.engine", ("sweep", "audit", "figures", "plot", "report", "cli"))])
def test_verifiers_and_engines_never_import_upwards(layer, above):
    """The verifiers sit below the engines (an engine drives a verifier, never the reverse) and the engines below
    the sweeps, the auditor and presentation; a lazy import inside a function counts too."""
    graph = import_graph()
    bad = [(a, b) for a, b in graph.edges if _inside(a, layer) and b.split(".")[0] == "otspec"
           and len(b.split(".")) > 1 and b.split(".")[1] in above]
    assert bad == []


def test_the_checker_sees_a_cycle():
    """Negative control: the walker finds an edge it must find and a planted cycle."""
    graph = import_graph()
    assert graph.has_edge("otspec.verifiers.base", "otspec.drafts")
    graph.add_edge("otspec.drafts", "otspec.verifiers.base")
    assert list(nx.simple_cycles(_without_package_inits(graph)))


def test_modules_stay_readable():
    files = [p for folder in (*PACKAGES, ROOT / "tests", ROOT / "benchmarks") for p in folder.rglob("*.py")]
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_library_never_switches_the_matplotlib_backend():
    offenders = [str(p) for p in PACKAGE.rglob("*.py") if "matplotlib.use(" in p.read_text()]
    assert offenders == []


def test_figure_registry_is_consistent():
    stems = [f.stem for f in FIGURES.values()]
    assert len(stems) == len(set(stems))
    for name, fig in FIGURES.items():
        assert fig.name == name and callable(fig.data) and callable(fig.render) and callable(fig.section)


OLD_PATHS = ("otspec.rejections", "otspec.verifiers.multi", "otspec.experiments")


@pytest.mark.parametrize("module", OLD_PATHS)
def test_old_import_paths_warn(module):
    import importlib
    import sys

    sys.modules.pop(module, None)
    with pytest.warns(DeprecationWarning, match=module.replace(".", r"\.")):
        importlib.import_module(module)


def test_theory_names_through_solvers_warn_and_still_work():
    import otspec.solvers
    from otspec.theory.multidraft import kseq_acceptance

    with pytest.warns(DeprecationWarning, match=r"otspec\.solvers\.kseq_acceptance is deprecated"):
        assert otspec.solvers.kseq_acceptance is kseq_acceptance
    with pytest.raises(AttributeError):
        otspec.solvers.no_such_name  # noqa: B018


def test_nothing_here_uses_the_old_paths():
    from otspec.solvers import MOVED_NAMES

    files = [p for folder in (*PACKAGES, ROOT / "tests", ROOT / "benchmarks", ROOT / "simulations")
             for p in folder.rglob("*.py") if p.name not in ("rejections.py", "multi.py", "experiments.py")
             or p.parent.name not in ("otspec", "verifiers")]
    bad = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module in OLD_PATHS or (node.module == "otspec" and any(a.name in ("rejections", "experiments")
                                                                                for a in node.names)):
                    bad.append((str(path.relative_to(ROOT)), node.module))
                if node.module == "otspec.solvers" and any(a.name in MOVED_NAMES for a in node.names):
                    bad.append((str(path.relative_to(ROOT)), "otspec.solvers: " + ", ".join(
                        a.name for a in node.names if a.name in MOVED_NAMES)))
    notebooks = [p.name for p in (ROOT / "notebooks").glob("*.ipynb")
                 if any(old in p.read_text() for old in ("from otspec import rejections", "otspec.verifiers.multi",
                                                         "otspec.experiments"))]
    assert bad == [] and notebooks == []


def test_private_helpers_stay_in_their_module():
    """No ``from <otspec or llm_bridge module> import _name``: a helper used elsewhere gets a public name."""
    graph_modules = {_module_name(p) for package in PACKAGES for p in package.rglob("*.py")}
    files = [p for folder in (*PACKAGES, ROOT / "tests", ROOT / "benchmarks") for p in folder.rglob("*.py")]
    bad = []
    for path in files:
        inside = path.is_relative_to(PACKAGE.parent / "otspec") or path.is_relative_to(PACKAGES[1])
        module = _module_name(path) if inside else ""
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = _resolve(module, path.name == "__init__.py", node)[-1] if node.level else node.module or ""
            if source in graph_modules or source.split(".")[0] in ("otspec", "llm_bridge"):
                bad += [(str(path.relative_to(ROOT)), f"{source}.{a.name}") for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert bad == []
