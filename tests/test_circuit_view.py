"""The interactive circuit view: its HTML (nodes, ports, edges, escaping, ids), its place in
plot/report, and its behaviour in real headless Chromium (marker `browser`).

The browser tests drive Debian's chromium through Playwright. A missing Chromium FAILS them (CI
must run them); set INTERP_NO_BROWSER=1 to skip them on a machine without one.
"""

from __future__ import annotations

import os
import re
import shutil
from html.parser import HTMLParser

import pytest
import torch

from interp.views import plot, report
from interp.views.circuit import circuit_html, view
from interp.circuits import Graph, edge_list
from interp.errors import InterpError
from interp.results import Grid, Heading

EVIL = "<script>alert(1)</script>"
TOKENS = ["<bos>", EVIL, "b", "&amp;", "c"]
POS, NEG = "#2166ac", "#c0392b"


def make_graph(n_layers=3, n_heads=4, n_kv_heads=2, *, seed=0, tokens=TOKENS, patterns=True, **meta) -> Graph:
    """The full edge list of a small model with random signed scores and causal patterns."""
    senders, receivers = edge_list(n_layers, n_heads, n_kv_heads)
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(len(senders), generator=gen)
    n = len(tokens)
    pat = torch.rand(n_layers, n_heads, n, n, generator=gen).tril()
    meta = {"n_layers": n_layers, "n_heads": n_heads, "n_kv_heads": n_kv_heads, "method": "eap", "model": "toy",
            "task": "ioi", "example": {"tokens": list(tokens)}, **meta}
    return Graph(senders, receivers, scores, meta, pat / pat.sum(-1, keepdim=True) if patterns else None)


class _Elements(HTMLParser):
    """Every start tag as (tag, attrs), with the text of <title> children attached to the parent."""

    def __init__(self):
        super().__init__()
        self.items: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag, attrs):
        self.items.append((tag, {k: v or "" for k, v in attrs}))

    handle_startendtag = handle_starttag


def _parse(text: str) -> list[tuple[str, dict[str, str]]]:
    p = _Elements()
    p.feed(text)
    return p.items


def _classes(attrs) -> set[str]:
    return set(attrs.get("class", "").split())


def _ends(d: str) -> tuple[tuple[float, float], tuple[float, float]]:
    nums = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", d)]
    return (nums[0], nums[1]), (nums[-2], nums[-1])


# ---------------------------------------------------------------------------------------------
# the HTML


def test_every_node_and_port_is_drawn_and_every_edge_joins_its_sender_to_its_receivers_port():
    g = make_graph()  # 3 layers, 4 query heads in 2 KV groups: GQA
    items = _parse(view(g, max_edges=60).html(bundle=False))
    groups = [(t, a) for t, a in items if t == "g"]
    nodes = [a for _, a in groups if "node" in _classes(a)]
    assert len(nodes) == 2 + 3 * (4 + 1)  # embed, logits, every head, every MLP
    ports = {a["data-keys"]: (float(a["cx"]), float(a["cy"])) for t, a in items if t == "circle"}
    assert len(ports) == 3 * 4 + 3 * 2 * 2  # a q port per head, a k and a v port per KV group
    assert {"a2.g1.k", "a2.g1.v", "a2.h3.q"} <= set(ports) and "a2.g2.k" not in ports

    # each box: its rect follows its <g>; senders start at the top middle, MLP/logits end at the bottom middle
    boxes = {}
    for i, (t, a) in enumerate(items):
        if t == "g" and "node" in _classes(a):
            r = items[i + 1][1]
            x, y, w, h = (float(r[k]) for k in ("x", "y", "width", "height"))
            for key in a["data-keys"].split():
                boxes[key] = (x, y, w, h)
    edges = [(a, items[i + 1][1]) for i, (t, a) in enumerate(items) if t == "g" and "edge" in _classes(a)]
    assert len(edges) == 60
    top = g.top(60)
    assert {(a["data-s"], a["data-r"]) for a, _ in edges} == set(zip(top.senders, top.receivers))
    for a, path in edges:
        (x1, y1), (x2, y2) = _ends(path["d"])
        x, y, w, _ = boxes[a["data-s"]]
        assert (x1, y1) == pytest.approx((x + w / 2, y), abs=0.06)
        if a["data-r"] in ports:
            assert (x2, y2) == pytest.approx(ports[a["data-r"]], abs=0.06)
        else:
            x, y, w, h = boxes[a["data-r"]]
            assert (x2, y2) == pytest.approx((x + w / 2, y + h), abs=0.06)
    # GQA: group G's k and v ports lie under its query heads 2G and 2G+1, not under the others
    for layer in range(3):
        for grp in range(2):
            lo, hi = boxes[f"a{layer}.h{2 * grp}"][0], sum(boxes[f"a{layer}.h{2 * grp + 1}"][::2])
            for kind in "kv":
                assert lo < ports[f"a{layer}.g{grp}.{kind}"][0] < hi


def test_edges_are_ranked_by_magnitude_coloured_by_sign_and_the_control_spans_them():
    g = make_graph(2, 2, 2, seed=1)
    items = _parse(view(g, max_edges=25, shown=7).html(bundle=False))
    lines = {int(a["data-rank"]): items[i + 2][1] for i, (t, a) in enumerate(items) if "edge" in _classes(a)}
    order = g.order().tolist()
    assert sorted(lines) == list(range(25))
    widths = [float(lines[r]["stroke-width"]) for r in range(25)]
    assert widths == sorted(widths, reverse=True) and widths[0] == pytest.approx(5.0)
    for r in range(25):
        assert lines[r]["stroke"] == (POS if g.scores[order[r]] > 0 else NEG)
    controls = {a["type"]: a for t, a in items if t == "input"}
    for kind in ("range", "number"):
        assert (controls[kind]["min"], controls[kind]["max"], controls[kind]["value"]) == ("1", "25", "7")
    # fewer edges than max_edges: the control ends at the graph's size; the default shows 40
    small = _parse(view(g.top(12)).html(bundle=False))
    assert [(a["max"], a["value"]) for t, a in small if t == "input"] == [("12", "12")] * 2
    big = _parse(view(g).html(bundle=False))
    assert [(a["max"], a["value"]) for t, a in big if t == "input"] == [(str(len(g)), "40")] * 2


def test_tokens_titles_and_meta_reach_the_page_only_escaped():
    g = make_graph(model=f"m{EVIL}")
    doc = circuit_html(g, title=f"t {EVIL}")
    assert "<script>alert(1)" not in doc
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in doc  # title, legend, example prompt: as text
    assert doc.count("\\u003cscript\\u003ealert(1)\\u003c/script\\u003e") == 1  # the tokens' inline JSON
    assert not re.search(r"<script[^>]*\bsrc\s*=", doc, re.IGNORECASE)
    assert doc.count("var CircuitsVis") == 1  # the bundle inlined once, in the head
    no_patterns = circuit_html(make_graph(patterns=False))
    assert "CircuitsVis" not in no_patterns.split("<body>")[0]  # nothing to click for: no bundle


def test_the_pattern_data_is_the_graphs_own_and_encoders_are_not_masked():
    import json

    def data(graph):
        text = view(graph).html(bundle=False)
        return json.loads(re.search(r'<script type="application/json" id="[^"]+">(.*?)</script>', text, re.DOTALL).group(1))

    g = make_graph(2, 2, 1)
    d = data(g)
    assert d["tokens"] == TOKENS and d["causal"] is True
    assert torch.tensor(d["patterns"]) == pytest.approx(g.patterns, abs=5e-5)
    full = torch.softmax(torch.randn(2, 2, 5, 5), -1)  # an encoder attends both ways
    assert data(Graph(g.senders, g.receivers, g.scores, g.meta, full))["causal"] is False
    unnamed = data(Graph(g.senders, g.receivers, g.scores, {**g.meta, "example": None}, g.patterns))
    assert unnamed["tokens"] == ["0", "1", "2", "3", "4"]  # positions stand in for missing token strings
    assert data(make_graph(2, 2, 1, patterns=False))["patterns"] is None


def test_ids_are_unique_across_views_and_every_id_the_script_uses_exists():
    g = make_graph(2, 2, 1)
    page = view(g).html(bundle=False) + view(g).html(bundle=False)
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids)) == 2 * 8
    roots = [a["id"] for t, a in _parse(page) if "interp-circuit" in _classes(a)]
    assert len(roots) == 2
    for root in roots:
        for suffix in ("-data", "-range", "-num", "-count", "-tip", "-pattern", "-caption"):
            assert root + suffix in ids


def test_render_display_report_and_png(monkeypatch):
    g = make_graph()
    v = plot.render(g)
    assert type(v).__name__ == "CircuitView" and v.graph is g and plot.view_of(v) is v
    assert plot.view_of(Grid(torch.ones(2), ("x",))) is None
    monkeypatch.setitem(plot._CIRCUITSVIS, "sent", False)
    first, second = v._repr_html_(), v._repr_html_()
    assert "DecompressionStream" in first and "DecompressionStream" not in second  # the bundle goes once
    assert "Graph(" in repr(v)

    grid = Grid(torch.randn(2, 3), ("layer", "pos"))
    text = report.to_html([Heading("circuit"), g, grid, view(g.top(5), title="five")])
    assert text.count('class="interp-circuit"') == 2
    assert text.count("var CircuitsVis") == 1 and text.count("plotly.js v") == 1
    assert "var CircuitsVis" not in report.to_html([make_graph(patterns=False)])

    image = plot.png(g, width=300, height=200)  # the static image of a circuit: its top-edges chart
    assert image[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input_is_refused_clearly():
    g = make_graph(2, 2, 2)
    # outside tests: InterpError "the circuit view draws an interp.circuits.Graph, got Grid"; here
    # the jaxtyping/beartype checker (tests only) refuses the argument first
    with pytest.raises((InterpError, TypeError), match="interp.circuits.*Graph"):
        view(Grid(torch.ones(2), ("x",)))
    with pytest.raises(InterpError, match="max_edges must be a positive int"):
        view(g, max_edges=0)
    with pytest.raises(InterpError, match="shown must be a positive int"):
        view(g, shown=0)
    with pytest.raises(InterpError, match="has 2 tokens for patterns over 5 positions"):
        view(Graph(g.senders, g.receivers, g.scores, {**g.meta, "example": {"tokens": ["a", "b"]}}, g.patterns)).html()
    nan = g.scores.clone()
    nan[3] = float("nan")
    with pytest.raises(InterpError, match="1 of .* edge scores are not finite"):
        view(Graph(g.senders, g.receivers, nan, g.meta))
    with pytest.raises(InterpError, match="no edges to draw"):
        view(g.top(0))


# ---------------------------------------------------------------------------------------------
# in the browser


@pytest.fixture(scope="module")
def browser():
    if os.environ.get("INTERP_NO_BROWSER") == "1":
        pytest.skip("INTERP_NO_BROWSER=1")
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("no Chromium for the browser tests: apt-get install chromium (or set INTERP_NO_BROWSER=1 to skip)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True)
        yield b
        b.close()


class Page:
    """A page opened from a file, recording console errors, page errors, dialogs and every
    request other than the file itself (data: and blob: URLs are in-page, not network)."""

    def __init__(self, browser, path):
        self.errors, self.requests, self.dialogs = [], [], []
        self.page = browser.new_page(viewport={"width": 1200, "height": 900})
        url = path.resolve().as_uri()

        def route(r):
            if r.request.url == url:
                r.continue_()
            else:
                self.requests.append(r.request.url)
                r.abort()

        self.page.route("**/*", route)
        self.page.on("request", lambda q: q.url in (url,) or q.url.startswith(("data:", "blob:"))
                     or self.requests.append(q.url))
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.goto(url)

    def visible_edges(self, root="") -> int:
        return self.page.evaluate(f"Array.from(document.querySelectorAll('{root} g.edge'))"
                                  ".filter(e => getComputedStyle(e).display !== 'none').length")

    def clean(self):
        assert self.errors == [] and self.requests == [] and self.dialogs == []


_HOVER_POINT = """(g) => {
  // a point of the edge's hit path where the edge is the topmost element (a node box may cover the middle)
  const path = g.querySelector('path.hit'), n = path.getTotalLength(), m = path.getScreenCTM();
  for (const f of [0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8]) {
    const p = path.getPointAtLength(f * n), x = m.a * p.x + m.e, y = m.d * p.y + m.f;
    const hit = document.elementFromPoint(x, y);
    if (hit && g.contains(hit)) return [x, y];
  }
  return null;
}"""


@pytest.mark.browser
def test_circuit_view_in_chromium(browser, tmp_path):
    g = make_graph()
    path = tmp_path / "circuit.html"
    path.write_text(circuit_html(g, max_edges=100))
    page = Page(browser, path)
    pg = page.page
    assert pg.locator("g.node").count() == 2 + 3 * 5
    assert page.visible_edges() == 40  # the default

    # the control: the top n edges, and nodes touched by none of them dimmed
    pg.locator("input[type=number]").fill("3")
    assert page.visible_edges() == 3 and pg.locator("input[type=range]").input_value() == "3"
    top = g.top(3)
    touched = set(top.senders) | set(top.receivers)
    lit = pg.evaluate("Array.from(document.querySelectorAll('[data-keys]:not(.dim)')).map(e => e.getAttribute('data-keys'))")
    assert lit and all(set(k.split()) & touched for k in lit)
    dimmed = pg.evaluate("Array.from(document.querySelectorAll('[data-keys].dim')).map(e => e.getAttribute('data-keys'))")
    assert all(not set(k.split()) & touched for k in dimmed) and len(lit) + len(dimmed) == 17 + 24 + 6
    pg.locator("input[type=range]").fill("100")
    assert page.visible_edges() == 100 and pg.locator("[id$=-count]").inner_text() == "100 of 100 edges shown"
    pg.locator("input[type=range]").fill("1")
    assert page.visible_edges() == 1

    # hovering the top edge shows sender -> receiver and its score
    edge = pg.locator('g.edge[data-rank="0"]')
    x, y = edge.evaluate(_HOVER_POINT)
    pg.mouse.move(x, y)
    tip = pg.locator("[id$=-tip]")
    assert tip.is_visible()
    i = int(g.order()[0])
    assert tip.inner_text() == f"{g.senders[i]} → {g.receivers[i]}: {float(g.scores[i]):+.4g}"
    pg.mouse.move(2, 2)
    assert not tip.is_visible()

    # clicking a head draws its pattern (a circuitsvis canvas); a second click replaces it
    pg.locator('g.head[data-layer="1"][data-head="2"]').click()
    pg.locator("[id$=-pattern] canvas").wait_for(timeout=15000)
    assert pg.locator("[id$=-caption]").inner_text().startswith("a1.h2: attention")
    pg.locator('g.head[data-layer="2"][data-head="0"]').click()
    pg.locator("[id$=-pattern] canvas").wait_for(timeout=15000)
    assert pg.locator("[id$=-pattern] canvas").count() == 1
    assert pg.locator("g.head.picked").count() == 1

    # the token '<script>' is text on the page and ran nothing
    assert EVIL in pg.locator(".example").inner_text()
    assert pg.evaluate("Array.from(document.scripts).every(s => s.text.trim() !== 'alert(1)')")  # no element made of it
    page.clean()


@pytest.mark.browser
def test_two_views_and_widgets_in_one_report_in_chromium(browser, tmp_path):
    """A report as the demo builds it: plotly figures, circuitsvis views and two circuits on one
    page, each working on its own (unique ids), nothing fetched, no console error."""
    g = make_graph()
    pattern = torch.tril(torch.ones(2, 5, 5))
    items = [
        Heading(f"report {EVIL}"),
        Grid(torch.randn(2, 3), ("layer", "pos"), (("a", "b"), ("<bos>", EVIL, "x"))),
        plot.attention(pattern / pattern.sum(-1, keepdim=True), TOKENS),
        g,
        view(make_graph(2, 2, 2, seed=3), title="second", shown=2),
    ]
    path = report.write(items, tmp_path / "report.html", title="r")
    page = Page(browser, path)
    pg = page.page
    pg.locator(".js-plotly-plot .main-svg").first.wait_for(timeout=15000)
    pg.locator("[id^=circuits-vis-] canvas, [id^=circuits-vis-] table, [id^=circuits-vis-] svg").first.wait_for(timeout=15000)
    first, second = (f"#{i}" for i in pg.evaluate("Array.from(document.querySelectorAll('.interp-circuit')).map(e => e.id)"))
    assert page.visible_edges(first) == 40 and page.visible_edges(second) == 2
    pg.locator(f"{second} input[type=number]").fill("5")
    assert page.visible_edges(first) == 40 and page.visible_edges(second) == 5  # the control drives its own view
    pg.locator(f'{first} g.head[data-layer="0"][data-head="1"]').click()
    pg.locator(f"{first} [id$=-pattern] canvas").wait_for(timeout=15000)
    assert pg.locator(f"{second} [id$=-pattern] canvas").count() == 0
    assert EVIL in pg.locator("h2").first.inner_text()
    page.clean()


@pytest.mark.browser
def test_demo_report_in_chromium(browser, tmp_path):
    """The demo's report built from its own sections (the zoo table, one model per family with
    circuitsvis attention and plotly ablation scans, and the IOI circuit) in Chromium: every plotly
    figure and circuitsvis view renders, the circuit works, nothing is fetched, no console error.
    (The full `run_demo`, ~2 min here, is checked without a browser by test_cli.)"""
    from interp import demo

    circuit = demo.section_circuit(tmp_path)
    assert circuit, "the zoo's lm-gpt2 ships with interp: the circuit section must not be empty"
    items = [*demo.section_zoo(tmp_path), *demo.section_models(tmp_path), *circuit]
    path = report.write(items, tmp_path / "report.html", title="interp demo")
    text = path.read_text()
    page = Page(browser, path)
    pg = page.page
    figures, views = text.count("Plotly.newPlot"), text.count("CircuitsVis.render(")
    assert figures >= 6 and views >= 5
    pg.wait_for_function("n => document.querySelectorAll('.js-plotly-plot .main-svg').length >= n", arg=figures,
                         timeout=20000)
    pg.wait_for_function("Array.from(document.querySelectorAll('[id^=circuits-vis-]')).every(d => d.children.length)",
                         timeout=20000)
    assert pg.locator(".interp-circuit").count() == 1
    assert pg.locator(".interp-circuit g.node").count() == 2 + 4 * (4 + 1)  # lm-gpt2: 4 layers x 4 heads
    pg.locator(".interp-circuit input[type=number]").fill("10")
    assert page.visible_edges(".interp-circuit") == 10
    pg.locator('.interp-circuit g.head[data-layer="1"][data-head="0"]').click()
    pg.locator(".interp-circuit [id$=-pattern] canvas").wait_for(timeout=15000)
    page.clean()
