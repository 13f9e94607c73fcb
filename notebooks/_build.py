"""Executes notebooks in place with nbclient and keeps their outputs small (used by `make notebooks`).

    .venv/bin/python notebooks/_build.py notebooks/*.ipynb

Each notebook runs top to bottom in a fresh kernel inside a temporary directory (files a notebook
writes do not land in the repository). Outputs are kept except stderr streams (progress bars,
warnings); execution timestamps are dropped so a rerun changes only what the code printed. A cell
that raises stops the build with the error. The build scripts (`build_*.py`) write the notebooks
without outputs; this file fills them in.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

MAX_BYTES = int(1.5 * 2**20)  # 1.5 MiB: tests/test_notebooks.py holds every committed notebook under this


def execute(path: str | Path, timeout: int = 900) -> float:
    """Run the notebook at `path` and write it back with its outputs; returns the seconds taken."""
    import nbformat
    from nbclient import NotebookClient

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # the zoo models are tiny; the kernel inherits this
    with tempfile.TemporaryDirectory() as tmp:
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": tmp}})
        client.execute()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not (o.output_type == "stream" and o.name == "stderr")]
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, path)
    return time.perf_counter() - start


def main(paths: list[str]) -> None:
    for p in paths:
        seconds = execute(p)
        size = Path(p).stat().st_size
        flag = "" if size <= MAX_BYTES else "  (over the 1.5 MiB limit)"
        print(f"{p}: {seconds:.0f} s, {size / 1e3:.0f} kB{flag}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
