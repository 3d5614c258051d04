"""The two quick-start commands install what their job needs and nothing more."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _recipe(target: str) -> str:
    """The recipe lines of ``target`` and of the stamps it depends on, from the Makefile."""
    text = (ROOT / "Makefile").read_text()
    rules = dict(re.findall(r"^([^\s#:=]+):[^\n=]*\n((?:\t[^\n]*\n)*)", text, flags=re.M))
    deps = re.search(rf"^{re.escape(target)}:([^\n]*)", text, flags=re.M).group(1).split()
    stamps = {"$(BASE_STAMP)": "$(BASE_STAMP)", "$(DEMO_STAMP)": "$(DEMO_STAMP)", "$(TEST_STAMP)": "$(TEST_STAMP)"}
    return rules.get(target, "") + "".join(rules.get(stamps.get(d, d), "") for d in deps)


def test_demo_installs_only_the_main_job():
    recipe = _recipe("demo") + _recipe("demo-validate-notebooks") + _recipe("demo-report")
    assert "demo-validate-notebooks" in _recipe("demo") and "demo-report" in _recipe("demo")
    # the main job runs the short real-pair validation: the CPU torch build, the llm extra and the sweep's tables (the
    # README's sweep commands run after it), no test tools
    assert '".[notebooks,llm,sweep]"' in recipe and "TORCH_SPEC" in recipe and "dev" not in recipe
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for tool in ("pytest", "hypothesis", "ruff", "torch", "jupyterlab", "POT"):
        assert not any(req.startswith(tool) for req in extras["notebooks"])
    assert "otspec.report" in recipe and "notebooks/execute.py" in recipe and "llm_bridge.validate" in recipe
    # the short validation writes into a scratch folder, never over a committed record in figures/
    demo = re.search(r"^LLM_DEMO := (.*?)(?<!\\)\n", (ROOT / "Makefile").read_text(), flags=re.M | re.S).group(1)
    assert "--out-dir build/" in demo and "--log-rows" not in demo and "figures/" not in demo
    # and the report and the notebooks into build/demo: a checkout stays clean (make figures remakes figures/)
    assert "otspec.report --out-dir build/demo" in recipe and "notebooks/execute.py --out build/demo" in recipe
    assert "otspec.report --out-dir figures" in _recipe("figures")


def test_test_path_keeps_the_cpu_torch_build():
    recipe = _recipe("test")
    assert "TORCH_SPEC" in recipe and '".[dev,llm]"' in recipe
    assert re.search(r"^TORCH_SPEC \?= torch==2\.13\.0$", (ROOT / "Makefile").read_text(), flags=re.M)


def test_every_committed_cpu_record_has_its_own_make_target():
    text = (ROOT / "Makefile").read_text()
    names = re.search(r"^RECORDS := (.*?)(?<!\\)\n", text, flags=re.M | re.S).group(1).replace("\\", " ").split()
    assert len(names) == len(set(names))
    for name in names:
        assert re.search(rf"^record-{re.escape(name)}:", text, flags=re.M), name
    # llm_<name>.json for every CPU record in figures/ (the forecast belongs to its record; GPU records to make gpu)
    committed = {p.stem.removeprefix("llm_") for p in (ROOT / "figures").glob("llm_*.json")}
    cpu = {n.removeprefix("adaptive_") if n.startswith("adaptive_eagle_") else n for n in committed
           if not n.startswith(("gpu_", "forecast_"))}
    assert cpu == set(names)
    # the records run one after another, then the report
    recipe = _recipe("records")
    assert "for r in $(RECORDS)" in recipe and "-j" not in recipe and "otspec.report" in recipe
