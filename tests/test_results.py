import pytest
import torch

from interp import Grid
from interp.results import stack


def _grid(shape=(2, 3), axes=("layer", "head")):
    return Grid(torch.randn(*shape), axes, meta={"model": "m", "metric": "logit_diff", "nested": {"a": [1, 2]}})


def test_round_trip_is_exact(tmp_path):
    g = Grid(
        torch.randn(2, 3, dtype=torch.float64),
        ("layer", "pos"),
        (("L0", "L1"), ("<bos>", "the", 'x"y')),
        {"model": "zoo:lm-gpt2", "seeds": [1, 2], "x": 0.5},
    )
    h = Grid.load(g.save(tmp_path / "g.safetensors"))
    assert torch.equal(h.values, g.values) and h.values.dtype == torch.float64
    assert (h.axes, h.labels, h.meta) == (g.axes, g.labels, g.meta)
    assert [p.name for p in tmp_path.iterdir()] == ["g.safetensors"]  # no temp file left


def test_validation_errors():
    with pytest.raises(ValueError, match="2 axis names"):
        Grid(torch.zeros(3), ("layer", "head"))
    with pytest.raises(ValueError, match="not an identifier-like name.*batch, pos, layer"):
        Grid(torch.zeros(3), ("two words",))
    assert Grid(torch.zeros(3), ("layers",)).axes == ("layers",)  # free names beside the AXES vocabulary
    with pytest.raises(ValueError, match="3 entries but 2 labels"):
        Grid(torch.zeros(3), ("layer",), (("a", "b"),))


def test_dataframe_and_top():
    g = Grid(torch.tensor([[1.0, 5.0], [3.0, -2.0]]), ("layer", "head"), (("L0", "L1"), (0, 1)))
    df = g.to_dataframe()
    assert list(df.columns) == ["layer", "head", "value"] and len(df) == 4
    assert df.loc[(df["layer"] == "L1") & (df["head"] == 0), "value"].item() == 3.0
    assert g.top(1) == [({"layer": "L0", "head": 1}, 5.0)]
    s = stack([g, g], "seed", [0, 1])
    assert s.axes == ("seed", "layer", "head") and s.shape == (2, 2, 2)


def test_load_rejects_other_files(tmp_path):
    from safetensors.torch import save_file

    save_file({"values": torch.zeros(2)}, tmp_path / "x.safetensors")
    with pytest.raises(ValueError, match="not an interp result file"):
        Grid.load(tmp_path / "x.safetensors")


@pytest.mark.parametrize("shape,axes", [((4,), ("layer",)), ((2, 3), ("layer", "head")), ((2, 3, 4), ("layer", "pos", "head"))])
def test_render_by_axis_count(shape, axes):
    from interp.views import plot

    fig = plot.render(_grid(shape, axes))
    assert fig.layout.title.text
    if len(shape) == 1:  # an ordered first axis draws a line
        assert fig.data[0].type == "scatter" and fig.data[0].mode == "lines+markers"
        assert list(fig.data[0].x) == ["0", "1", "2", "3"]
    else:
        assert fig.data[0].type == "heatmap"
        assert len(fig.data) == (shape[0] if len(shape) == 3 else 1)
    if len(shape) == 3:
        assert {a.text for a in fig.layout.annotations} == {"layer=0", "layer=1"}


def test_render_refuses_four_axes():
    from interp.views import plot

    with pytest.raises(ValueError, match=r"select or average.*grid.mean\('seed'\) or grid.sel\(seed=0\) to get down to 3 axes"):
        plot.render(Grid(torch.zeros(1, 1, 1, 1), ("layer", "pos", "head", "seed")))
    with pytest.raises(TypeError, match="no renderer"):
        plot.render(42)


def test_labels_as_a_mapping_from_axis_to_ticks():
    g = Grid(torch.zeros(3, 2), ("layer", "head"), {"head": ("h0", "h1")})
    assert g.labels == ((0, 1, 2), ("h0", "h1"))
    with pytest.raises(ValueError, match="axis 'head' has 2 entries but 3 labels"):
        Grid(torch.zeros(3, 2), ("layer", "head"), {"head": ("a", "b", "c")})
    with pytest.raises(ValueError, match=r"labels name axes \['pos'\]"):
        Grid(torch.zeros(3, 2), ("layer", "head"), {"pos": (1, 2)})


def test_every_result_type_round_trips_through_one_format(tmp_path):
    from interp import results
    from interp.masking import HeadMask

    mask = HeadMask(torch.tensor([[1.0, 0.0], [0.5, 1.0]]), None, {"seed": 3, "t": (1, 2), "x": float("nan")})
    back = results.load(results.save(mask, tmp_path / "m.safetensors"))
    assert isinstance(back, HeadMask) and torch.equal(back.heads, mask.heads) and back.meta["t"] == (1, 2)
    assert back.meta["x"] != back.meta["x"]  # NaN survives
    with pytest.raises(ValueError, match="cannot read .*c.json as an interp result file"):
        (tmp_path / "c.json").write_text("{}")
        results.load(tmp_path / "c.json")


# ---- Grid operations, each checked against the same operation on to_xarray() ----------------

import math  # noqa: E402

import numpy as np  # noqa: E402


def _planted():
    g = torch.Generator().manual_seed(0)
    values = torch.randn(3, 4, 2, generator=g, dtype=torch.float64)
    values[1, 2, 0] = float("nan")  # a NaN cell (path_patch leaves these): reductions skip it
    return Grid(values, ("layer", "head", "seed"), {"head": ("h0", "h1", "h2", "h3"), "seed": (10, 20)},
                {"metric": "logit_diff", "clean_metric": 2.0, "corrupt_metric": -1.0})


G = _planted()
H = Grid(torch.randn(3, 4, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64), G.axes, G.labels)
# (ours, xarray's) — the same expression in both vocabularies
EQUIVALENT = {
    "index": (lambda g, h: g[1, 0], lambda x, y: x[1, 0]),
    "index slice": (lambda g, h: g[:, 1:3], lambda x, y: x[:, 1:3]),
    "isel": (lambda g, h: g.isel(layer=1), lambda x, y: x.isel(layer=1)),
    "isel list": (lambda g, h: g.isel(head=[0, 3], seed=1), lambda x, y: x.isel(head=[0, 3], seed=1)),
    "isel negative": (lambda g, h: g.isel(layer=-1), lambda x, y: x.isel(layer=-1)),
    "sel": (lambda g, h: g.sel(layer=1, head="h0"), lambda x, y: x.sel(layer=1, head="h0")),
    "sel list": (lambda g, h: g.sel(head=["h3", "h1"]), lambda x, y: x.sel(head=["h3", "h1"])),
    "sel int label": (lambda g, h: g.sel(seed=20), lambda x, y: x.sel(seed=20)),
    "mean": (lambda g, h: g.mean("head"), lambda x, y: x.mean("head")),
    "mean two": (lambda g, h: g.mean("head", "seed"), lambda x, y: x.mean(["head", "seed"])),
    "mean all": (lambda g, h: g.mean(), lambda x, y: x.mean()),
    "sum": (lambda g, h: g.sum("layer"), lambda x, y: x.sum("layer")),
    "max": (lambda g, h: g.max("seed"), lambda x, y: x.max("seed")),
    "min": (lambda g, h: g.min("layer", "head"), lambda x, y: x.min(["layer", "head"])),
    "std": (lambda g, h: g.std("head"), lambda x, y: x.std("head")),
    "sub grid": (lambda g, h: g - h, lambda x, y: x - y),
    "add grid": (lambda g, h: g + h, lambda x, y: x + y),
    "mul grid": (lambda g, h: g * h, lambda x, y: x * y),
    "div grid": (lambda g, h: g / h, lambda x, y: x / y),
    "div scalar": (lambda g, h: g / 2, lambda x, y: x / 2),
    "rsub scalar": (lambda g, h: 1 - g, lambda x, y: 1 - x),
    "rmul scalar": (lambda g, h: 3 * g, lambda x, y: 3 * x),
    "neg": (lambda g, h: -g, lambda x, y: -x),
    "baseline": (lambda g, h: g - g.mean(), lambda x, y: x - x.mean()),
    "nested means": (lambda g, h: g.mean("seed").mean("head"), lambda x, y: x.mean("seed").mean("head")),
    "chain": (lambda g, h: (g.sel(seed=10) - h.sel(seed=10)).max("head"),
              lambda x, y: (x.sel(seed=10) - y.sel(seed=10)).max("head")),
}


@pytest.mark.parametrize("case", EQUIVALENT)
def test_grid_operations_equal_xarray(case):
    ours, theirs = EQUIVALENT[case]
    got, want = ours(G, H), theirs(G.to_xarray(), H.to_xarray())
    assert got.axes == tuple(want.dims)
    assert got.labels == tuple(tuple(want.coords[d].values.tolist()) for d in want.dims)
    assert np.allclose(got.values.numpy(), want.values, equal_nan=True)
    assert got.meta["metric"] == "logit_diff"  # meta rides along
    back = got.to_xarray()
    assert back.dims == want.dims and np.allclose(back.values, want.values, equal_nan=True)


def test_to_xarray_carries_axes_labels_and_meta():
    x = G.to_xarray()
    assert x.dims == G.axes and list(x.coords["head"].values) == ["h0", "h1", "h2", "h3"]
    assert x.attrs["metric"] == "logit_diff" and x.shape == G.shape


def test_selection_drops_or_keeps_axes_and_len():
    assert len(G) == 3 and len(G.sel(layer=0)) == 4
    assert G[1].axes == ("head", "seed") and G.isel(head=[2]).axes == ("layer", "head", "seed")
    one = G[0, 0, 0]
    assert one.axes == () and float(one) == pytest.approx(float(G.values[0, 0, 0]))
    with pytest.raises(ValueError, match="no label 'h9'.*'h0', 'h1'"):
        G.sel(head="h9")
    with pytest.raises(ValueError, match="out of range for axis 'layer' of size 3"):
        G.isel(layer=3)
    with pytest.raises(ValueError, match=r"axis 'pos' not in \('layer', 'head', 'seed'\)"):
        G.mean("pos")
    with pytest.raises(ValueError, match="4 indices for a Grid with 3 axes"):
        G[0, 0, 0, 0]
    with pytest.raises(ValueError, match="no length"):
        len(one)


def test_arithmetic_refuses_misaligned_grids_and_notes_operations():
    other = Grid(torch.zeros(3, 4), ("layer", "head"))
    with pytest.raises(ValueError, match=r"not aligned.*Grid\(layer=3 .*head=4 .*seed=2.*\) - Grid\(layer=3 .*head=4 \[0, 1, 2, 3\]\)"):
        G - other
    relabelled = Grid(G.values, G.axes, {"head": ("a", "b", "c", "d"), "seed": (10, 20)})
    with pytest.raises(ValueError, match="not aligned"):
        G + relabelled
    with pytest.raises(TypeError):
        G + "x"
    assert (G / 2).meta["ops"] == ["/ 2"] and (-G.mean("head")).meta["ops"] == ["mean('head')", "negated"]
    assert "ops" not in G.meta  # the original is untouched (frozen)


def test_normalize_on_a_planted_case():
    g = Grid(torch.tensor([-1.0, 0.5, 2.0, 3.5]), ("layer",), meta={"clean_metric": 2.0, "corrupt_metric": -1.0})
    for n in (g.normalize(), g.normalize(-1.0, 2.0), g.normalize(corrupt=-1, clean=2)):
        assert torch.allclose(n.values, torch.tensor([0.0, 0.5, 1.0, 1.5]))
        assert n.meta["normalized"] == "0 = corrupt baseline, 1 = clean baseline"
    change = Grid(torch.tensor([0.0, 1.5, 3.0]), ("layer",),
                  meta={"clean_metric": 2.0, "corrupt_metric": -1.0, "relative_to": "corrupt_metric"})
    assert torch.allclose(change.normalize().values, torch.tensor([0.0, 0.5, 1.0]))  # changes: divided only
    with pytest.raises(ValueError, match="must be finite and different"):
        g.normalize(1.0, 1.0)
    with pytest.raises(ValueError, match="needs the corrupt and clean baselines"):
        Grid(torch.zeros(2), ("layer",)).normalize()


def test_repr_is_concise_and_html_escapes_labels():
    big = Grid(torch.arange(10_000.0).view(100, 100), ("layer", "pos"), meta={"metric": "logit_diff"})
    text = repr(big)
    assert text == "Grid(layer=100, pos=100, metric='logit_diff'; min 0, max 9999)" and "tensor" not in text
    evil = "<script>alert(1)</script>"
    small = Grid(torch.tensor([[1.0, 2.0]]), ("layer", "pos"), (("L0",), (evil, "&")), {"metric": evil})
    page = small._repr_html_()
    assert "<table>" in page and "<script>" not in page and "&lt;script&gt;alert(1)" in page and "&amp;" in page
    summary = Grid(torch.zeros(2, 2, 2), ("layer", "pos", "head"), {"pos": (evil, "b")})._repr_html_()
    assert "<script>" not in summary and "&lt;script&gt;" in summary and "layer" in summary
    assert "1 NaN" in repr(Grid(torch.tensor([1.0, math.nan]), ("layer",)))


@pytest.mark.parametrize("axes,shape,chart", [
    (("layer",), (5,), "lines"), (("step",), (5,), "lines"), (("head",), (5,), "bar"),
    (("layer", "split"), (5, 3), "lines"), (("pos", "model"), (5, 2), "lines"), (("layer", "head"), (5, 3), "heatmap"),
    (("layer", "split"), (5, 9), "heatmap"), (("split", "layer"), (3, 5), "heatmap"),
])
def test_ordered_first_axis_draws_lines(axes, shape, chart):
    from interp.views import plot

    fig = plot.render(Grid(torch.randn(*shape), axes, meta={"metric": "logit_diff"}))
    kinds = {d.type for d in fig.data}
    if chart == "lines":
        assert kinds == {"scatter"} and len(fig.data) == (shape[1] if len(shape) == 2 else 1)
        assert fig.layout.xaxis.title.text == axes[0]
    else:
        assert kinds == {chart}


def test_render_draws_a_reduced_grid():
    from interp.views import plot

    four = Grid(torch.randn(3, 2, 2, 4), ("seed", "layer", "head", "pos"))
    assert {d.type for d in plot.render(four.mean("seed")).data} == {"heatmap"}
    with pytest.raises(ValueError, match="grid.mean\\('seed'\\)"):
        plot.render(four)


def test_fill_between_replaces_only_the_marked_block(tmp_path):
    from interp.errors import InterpError
    from interp.files.storage import fill_between

    doc = tmp_path / "d.md"
    doc.write_text("intro\n<!-- a -->\nold table\n<!-- b -->\nafter\n")
    fill_between(doc, "<!-- a -->", "<!-- b -->", "| x |\n|---|\n| 1 |")
    assert doc.read_text() == "intro\n<!-- a -->\n| x |\n|---|\n| 1 |\n<!-- b -->\nafter\n"
    with pytest.raises(InterpError, match="no <!-- b --> ... <!-- a --> block"):
        fill_between(doc, "<!-- b -->", "<!-- a -->", "x")  # markers out of order
    assert "| 1 |" in doc.read_text()  # a refused fill leaves the file as it was
