"""Execute every notebook in this folder in place, keeping its outputs (``make demo`` runs this).

``python notebooks/execute.py`` runs them at full size; ``--scale 0.02`` (or the environment
variable ``OTSPEC_NB_SCALE``) shrinks their simulations, ``--out DIR`` writes the executed
copies elsewhere instead of overwriting. A notebook whose cell raises stops the run with the
cell's error.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def execute(path: Path, scale: str = "1", timeout: int = 1800):
    """Run notebook ``path`` with ``OTSPEC_NB_SCALE=scale``; return the executed notebook node."""
    import tempfile

    import nbclient
    import nbformat
    from jupyter_client.manager import KernelManager

    class LocalSocketKernel(KernelManager):
        """A kernel that talks over local sockets (IPC) in a private folder, not over unencrypted TCP, which the
        kernel warns about at every start."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.transport, self.ip = "ipc", str(Path(sockets) / "kernel")

    os.environ["OTSPEC_NB_SCALE"] = str(scale)
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="otspec-kernel-") as sockets:
        nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3", kernel_manager_class=LocalSocketKernel,
                                resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default=os.environ.get("OTSPEC_NB_SCALE", "1"), help="simulation size factor")
    parser.add_argument("--out", type=Path, default=None, help="write executed copies here (default: in place)")
    args = parser.parse_args(argv)
    import nbformat

    for path in sorted(HERE.glob("*.ipynb")):
        nb = execute(path, args.scale)
        target = path if args.out is None else args.out / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        print(f"executed {path.name} -> {target}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
