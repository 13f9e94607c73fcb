"""Every notebook in notebooks/ executes top to bottom without error, and is committed with its
outputs (`make notebooks`): at least one figure a plain viewer can show, and a small file."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MAX_BYTES = int(1.5 * 2**20)  # notebooks/_build.py reports against the same limit
BUNDLE_MARK = "DecompressionStream"  # in the HTML of the output that carries the circuitsvis bundle


def _outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors


def test_notebooks_have_build_scripts():
    for path in NOTEBOOKS:
        assert (path.parent / f"build_{path.stem}.py").exists(), f"{path.name} has no build script"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_committed_with_outputs(path):
    outputs = _outputs(path)
    assert outputs, f"{path.name} has no outputs: run `make notebooks`"
    assert not [o for o in outputs if o["output_type"] == "error"], f"{path.name} was committed with an error"
    figures = [o for o in outputs if {"image/png", "application/vnd.plotly.v1+json"} & set(o.get("data", {}))]
    assert figures, f"{path.name} has no figure output (image/png or plotly)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_small(path):
    size = path.stat().st_size
    assert size <= MAX_BYTES, f"{path.name} is {size / 2**20:.2f} MiB (limit 1.5 MiB)"
    outputs = _outputs(path)
    bundles = [o for o in outputs if BUNDLE_MARK in _text(o.get("data", {}).get("text/html", ""))]
    assert len(bundles) <= 1, f"{path.name} carries the circuitsvis bundle {len(bundles)} times"
    # every static image sits beside its interactive figure, or stands alone; none is huge
    for o in outputs:
        png = o.get("data", {}).get("image/png")
        if png:
            assert len(_text(png)) < 400_000, f"a {len(_text(png)) / 1e3:.0f} kB PNG in {path.name}"


def test_show_and_widgets_stay_small():
    """plot.show: one output with a PNG and the plotly figure; circuitsvis bundle in the first view only."""
    import torch

    from interp.views import plot
    from interp.errors import InterpError
    from interp.results import Grid

    grid = Grid(torch.arange(6.0).reshape(2, 3), ("layer", "head"))
    try:
        shown = plot.show(grid, display=False)
    except InterpError as e:  # no Chrome/Chromium on this machine
        pytest.skip(str(e))
    bundle = shown._repr_mimebundle_()
    assert bundle["image/png"] and bundle["application/vnd.plotly.v1+json"]["data"]
    plot._CIRCUITSVIS["sent"] = False
    first, second = (plot.attention(torch.eye(3), ["a", "b", "c"])._repr_html_() for _ in range(2))
    assert BUNDLE_MARK in first and BUNDLE_MARK not in second and len(second) < 5_000
    assert "CircuitsVis.render" in second
