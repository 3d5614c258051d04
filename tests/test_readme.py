"""The README's examples stay true: its Python blocks run, its shell commands exit 0.

A new user's first try — ``import otspec; otspec.theory.expected_accepted_token(...)`` —
once failed with an AttributeError. Every ```python block is run in a fresh interpreter,
and every ``python -m otspec...`` line of the ```bash blocks in one scratch folder, in order
(figure and report commands at a small ``--scale``; ``make`` lines are what CI itself runs).
The first line of each module (``otspec``, ``otspec.plot``, ``otspec.report``) runs in a fresh
interpreter, as a user runs it; the others call the same ``main(argv)`` that ``python -m`` calls
(each module's ``__main__`` is ``sys.exit(main())``) in this process, which spares each line
its second of interpreter start, imports and kernel loading.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_report import check_small_report

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README.read_text(), flags=re.S)
PYTHON = [code for lang, code in BLOCKS if lang == "python"]
SHELL = [line.split(" #")[0].strip() for lang, code in BLOCKS if lang == "bash" for line in code.splitlines()
         if line.strip().startswith("python -m otspec")]
#: Lines whose comment says "exit 1" (an audit that finds bias) must exit 1, every other line 0.
EXIT_ONE = {line.split(" #")[0].strip() for lang, code in BLOCKS if lang == "bash" for line in code.splitlines()
            if line.strip().startswith("python -m otspec") and "# exit 1" in line}
ROOT = README.parent
#: Figure and report commands run at this size in the test (the README's are full size).
SCALE = "0.02"


def test_readme_has_examples():
    assert len(PYTHON) >= 2 and len(SHELL) >= 10


@pytest.mark.parametrize("code", PYTHON, ids=[f"python-{i}" for i in range(len(PYTHON))])
def test_python_examples_run(code, tmp_path):
    small = code.replace("1_000_000", "20_000").replace("n_tokens=10_000", "n_tokens=500")
    proc = subprocess.run([sys.executable, "-c", small], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def _run(args: list[str], cwd: Path, *, fresh: bool, monkeypatch) -> tuple[int, str]:
    """(exit status, stderr) of ``python -m MODULE ARGS`` (``args`` = ["-m", MODULE, ARGS...]) run in ``cwd``: in a
    fresh interpreter, or through the module's ``main`` here."""
    if fresh:
        proc = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
        return proc.returncode, proc.stderr
    main = importlib.import_module({"otspec": "otspec.cli"}.get(args[1], args[1])).main
    out, err = io.StringIO(), io.StringIO()
    with monkeypatch.context() as m, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        m.chdir(cwd)
        m.setattr(sys, "argv", [args[1], *args[2:]])
        status = main(args[2:])
    return status, err.getvalue()


def _simulates(name: list) -> bool:
    """Whether a plot or report command simulates anything ``--scale`` could shrink (a figure of exact numbers or
    committed records refuses the flag)."""
    from otspec.figures import FIGURES

    return not name or name[0] not in FIGURES or FIGURES[name[0]].scaled


def test_shell_examples_run(tmp_path, monkeypatch):
    seen = set()
    toml = [code for lang, code in BLOCKS if lang == "toml"]
    if toml:  # the sweep spec of the README's Sweeps section, as its commands name it
        (tmp_path / "build").mkdir()
        (tmp_path / "build" / "grid.toml").write_text(toml[0].replace("blocks = 100000", "blocks = 20000"))
    for line in SHELL:
        args = shlex.split(line)[1:]
        if args[1] in ("otspec.plot", "otspec.report") and args[2:3] != ["sweep"] and _simulates(args[2:3]):
            args += ["--scale", SCALE]
        if "--blocks" in args:
            args[args.index("--blocks") + 1] = "20000"
        if "--tokens" in args:
            args[args.index("--tokens") + 1] = "300"
        args = [str(ROOT / a) if a.startswith("figures/") and a.endswith(".npz") else a for a in args]  # committed logs
        status, stderr = _run(args, tmp_path, fresh=args[1] not in seen, monkeypatch=monkeypatch)
        seen.add(args[1])
        assert status == (1 if line in EXIT_ONE else 0), (line, stderr)
        assert "Traceback" not in stderr, (line, stderr)
    assert "otspec.report" in seen
    check_small_report(tmp_path / "build" / "figures")  # the report line's output, checked as test_report checks it
