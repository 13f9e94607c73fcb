import re
from dataclasses import replace

import pandas as pd
import pytest
import torch

from interp import Grid
from interp.views import plot, report
from test_circuit_view import browser  # noqa: F401  (the shared Chromium fixture)

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
    with pytest.raises(ValueError, match="2 tokens for a pattern over 3"):
        plot.attention(torch.ones(3, 3), ["a", "b"])
    with pytest.raises(ValueError, match="dest == src"):
        plot.attention(torch.ones(2, 3, 4), ["a", "b", "c", "d"])
    w = plot.attention(torch.eye(2), ["<a>", "b"])
    assert "\\u003ca\\u003e" in w.props_json() and "CircuitsVis.render" in w._repr_html_()


def test_a_lone_surrogate_in_any_text_is_written_as_a_replacement_character(tmp_path):
    """A token read from JSON "\\ud800" is a str UTF-8 cannot encode: every standalone page shows it
    as U+FFFD instead of raising UnicodeEncodeError when written."""
    from interp.features.graph_view import graph_html
    from interp.views.circuit import circuit_html
    from test_circuit_view import make_graph
    from test_features_graph import _toy

    lone = "a\udc80b"
    grid = Grid(torch.randn(1, 2), ("layer", "pos"), ((lone,), ("x", lone)), meta={"title": lone})
    path = report.write([report.Heading(lone), lone, grid], tmp_path / "r.html", title=lone)
    text = path.read_text(encoding="utf-8")
    assert text.count("a\ufffdb") >= 3 and "\udc80" not in text
    toy = _toy([[0, 0, 2, 0], [0, 0, 0, 0], [0, 0, 0, 0], [3, -1, 0, 0]], [0, 1, 2, 3], [0, 0, 0, 1.0])
    for page in (circuit_html(make_graph(tokens=["<bos>", lone, "c"])), graph_html(replace(toy, tokens=(lone,)))):
        assert "a\ufffdb" in page and page.encode("utf-8")


@pytest.mark.browser
def test_hostile_text_in_every_kind_of_item_runs_nothing_in_chromium(browser, tmp_path):
    """Token strings, titles and cells that try every way out of their context (closing the script
    that holds the JSON, an element with a handler, an attribute quote, a comment) stay text."""
    from test_circuit_view import Page, make_graph
    from test_features_graph import _toy

    hostile = ["</script><script>window.__pwned = 1</script>", "<img src=x onerror='window.__pwned = 2'>",
               "\" onmouseover=\"window.__pwned = 3", "<!--", "&amp; \n\t\u2028 漢字 🙂", "x" * 3000]
    pattern = torch.tril(torch.ones(6, 6))
    toy = _toy([[0, 0, 2, 0], [0, 0, 0, 0], [0, 0, 0, 0], [3, -1, 0, 0]], [0, 1, 2, 3], [0, 0, 0, 1.0])
    items = [report.Heading(hostile[0]), hostile[1], pd.DataFrame({hostile[2]: hostile}),
             Grid(torch.randn(2, 6), ("layer", "pos"), ((hostile[1], "b"), tuple(hostile)), meta={"title": hostile[0]}),
             plot.attention(pattern / pattern.sum(-1, keepdim=True), hostile),
             make_graph(tokens=hostile, model=hostile[0]), replace(toy, tokens=(hostile[0],), meta={**toy.meta, "model": hostile[1]})]
    page = Page(browser, report.write(items, tmp_path / "r.html", title=hostile[2]))
    pg = page.page
    pg.locator(".js-plotly-plot .main-svg").first.wait_for(timeout=15000)
    pg.locator("[id^=circuits-vis-] canvas, [id^=circuits-vis-] table, [id^=circuits-vis-] svg").first.wait_for(timeout=15000)
    assert pg.evaluate("window.__pwned") is None and pg.evaluate("document.images.length") == 0
    assert hostile[0] in pg.locator("h2").first.inner_text() and pg.title() == hostile[2]
    page.clean()
