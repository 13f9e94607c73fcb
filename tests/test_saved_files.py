"""Files saved by an earlier release still load (tests/data/saved_v1 was written by the code at
commit 12a6631, before result tags stopped depending on module paths)."""

import math
from pathlib import Path

import torch

from interp.results import Grid, Heading, load

V1 = Path(__file__).parent / "data" / "saved_v1"


def test_v1_files_load_with_their_values():
    g = load(V1 / "grid.safetensors")
    assert isinstance(g, Grid) and g.axes == ("layer", "head") and g.labels[1] == ("h0", "h1", "h2")
    assert torch.equal(g.values[0, :2], torch.tensor([1.0, 2.0])) and math.isnan(float(g.values[0, 2]))
    assert g.meta["ops"] == ("x",) and g.meta["inf"] == math.inf and g.meta["model"] == "zoo:demo"
    assert load(V1 / "heading.safetensors") == Heading("a section", 3)
    graph = load(V1 / "graph.safetensors")
    assert type(graph).__name__ == "Graph" and graph.senders == ("embed", "a0.h0")
    assert torch.equal(graph.scores, torch.tensor([0.5, -0.25]))
    mask = load(V1 / "headmask.safetensors")
    assert type(mask).__name__ == "HeadMask" and torch.equal(mask.mlps, torch.tensor([1.0, 0.0]))
    assert mask.meta == {"seed": 3}
