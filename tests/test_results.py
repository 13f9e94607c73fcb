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
    with pytest.raises(ValueError, match="not in the vocabulary"):
        Grid(torch.zeros(3), ("layers",))
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
    from interp import plot

    fig = plot.render(_grid(shape, axes))
    assert fig.layout.title.text
    if len(shape) == 1:
        assert fig.data[0].type == "bar" and list(fig.data[0].x) == ["0", "1", "2", "3"]
    else:
        assert fig.data[0].type == "heatmap"
        assert len(fig.data) == (shape[0] if len(shape) == 3 else 1)
    if len(shape) == 3:
        assert {a.text for a in fig.layout.annotations} == {"layer=0", "layer=1"}


def test_render_refuses_four_axes():
    from interp import plot

    with pytest.raises(ValueError, match="select or average"):
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
