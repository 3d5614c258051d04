"""The README's examples stay true: its Python blocks run, its shell commands exit 0.

A new user's first try — ``import otspec; otspec.theory.expected_accepted_token(...)`` —
once failed with an AttributeError. Every ```python block is run in a fresh interpreter,
and every ``python -m otspec...`` line of the ```bash blocks in one scratch folder, in order
(figure and report commands at a small ``--scale``; ``make`` lines are what CI itself runs).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_shell_examples_run(tmp_path):
    toml = [code for lang, code in BLOCKS if lang == "toml"]
    if toml:  # the sweep spec of the README's Sweeps section, as its commands name it
        (tmp_path / "grid.toml").write_text(toml[0].replace("blocks = 100000", "blocks = 20000"))
    for line in SHELL:
        args = shlex.split(line)[1:]
        if args[1] in ("otspec.plot", "otspec.report") and args[2:3] != ["sweep"]:  # sweep plots simulate nothing
            args += ["--scale", SCALE]
        if "--blocks" in args:
            args[args.index("--blocks") + 1] = "20000"
        if "--tokens" in args:
            args[args.index("--tokens") + 1] = "300"
        args = [str(ROOT / a) if a.startswith("figures/") and a.endswith(".npz") else a for a in args]  # committed logs
        proc = subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert proc.returncode == (1 if line in EXIT_ONE else 0), (line, proc.stderr)
        assert "Traceback" not in proc.stderr
