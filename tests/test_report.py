import re

import pandas as pd
import torch

from interp import Grid
from interp.views import plot, report

EVIL = "</script><script>alert(1)</script>"


def test_report_is_self_contained_and_escapes_tokens(tmp_path):
    grid = Grid(torch.randn(2, 3), ("layer", "pos"), (("a", "b"), ("<bos>", EVIL, "&")))
    pattern = torch.tril(torch.ones(2, 3, 3))
    items = [
        report.Heading(f"heading {EVIL}"),
        f"paragraph {EVIL}",
        pd.DataFrame({"token": [EVIL], "value": [1.0]}),
        grid,
        plot.render(grid),
        plot.attention(pattern / pattern.sum(-1, keepdim=True), ["<bos>", EVIL, "b"]),
        plot.attention(pattern[0], ["x", "y", "z"]),
    ]
    path = report.write(items, tmp_path / "r.html", title=f"t {EVIL}")
    text = path.read_text()
    assert not re.search(r"<script[^>]*\bsrc\s*=", text, re.I)  # nothing fetched from the network
    assert "<script>alert(1)" not in text
    assert text.count("alert(1)") >= 5  # every copy present, all in escaped form
    assert text.count("var CircuitsVis") == 1  # bundle embedded once
    plotly_banner = "plotly.js v"
    assert text.count(plotly_banner) == 1
    assert text.count("CircuitsVis.render(") == 2
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in text
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_attention_widget_validates_shapes():
    import pytest

    with pytest.raises(ValueError, match="2 tokens for a pattern over 3"):
        plot.attention(torch.ones(3, 3), ["a", "b"])
    with pytest.raises(ValueError, match="dest == src"):
        plot.attention(torch.ones(2, 3, 4), ["a", "b", "c", "d"])
    w = plot.attention(torch.eye(2), ["<a>", "b"])
    assert "\\u003ca\\u003e" in w.props_json() and "CircuitsVis.render" in w._repr_html_()
