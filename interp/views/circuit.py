"""The interactive circuit view of a `Graph`: hand-written SVG and a little vanilla JavaScript.

    circuit_html(graph)        a complete, offline HTML document (write it to a file, open it)
    view(graph)                a `CircuitView`: shown in Jupyter (`_repr_html_`), embedded by
                               `interp.report`; `plot.render(graph)` returns one

Layout (a layered DAG needs no layout library, so nothing is computed in the browser): the
residual stream runs upward. "embed" is the bar at the bottom, "logits" the bar at the top; each
layer is a band holding its attention heads side by side (query-head order) with the layer's MLP
to their right, a little higher (it reads after the heads). A head's query input is the port on
its lower edge; under the heads, one strip per KV group (one per head on non-GQA models, spanning
the group's heads on GQA models) carries that group's key and value ports, so k/v edges end on
KV heads as the Graph stores them. Edge styles repeat the input role: q solid, k dashed, v dotted.

Edges: blue where the score is positive, red where negative; width and opacity grow with |score|
(relative to the largest |score| drawn). The view carries the `max_edges` edges with the largest
|score|; the slider (and number box) sets how many of those, the top n by |score|, are shown.
A node box, port or KV strip that no shown edge touches is dimmed (kept in place at low opacity,
so the picture never jumps); hidden edges are not drawn. Hovering an edge shows "sender →
receiver: score" (a tooltip, and the SVG <title>); clicking a head shows its attention pattern on
the graph's example prompt (circuitsvis AttentionPattern from `graph.patterns[layer, head]` and
`graph.meta["example"]["tokens"]`, positions numbered where no tokens are stored).

Every id carries a fresh random suffix, so several views live in one notebook or report. Token
strings and labels reach the page only HTML-escaped or as JSON with `<`, `>`, `&` escaped.
Nothing is fetched: the circuitsvis bundle is inlined (once: `plot`'s loader in Jupyter, the
report's head in a report, this document's head in `circuit_html`).

Hand-written SVG rather than plotly: per-edge hover and width need one plotly trace per edge
(thousands), plotly has no ports, and here the markup is ~0.4 kB per edge with no library at all
(the SVG is drawn in Python, so it also shows, static, where scripts do not run).
"""

from __future__ import annotations

import html
import json
import uuid
from dataclasses import dataclass
from typing import Any

import torch

from interp.views import bundle as bundle_js  # the name `bundle` is html()'s flag
from interp.circuits.graph import Graph, node
from interp import registry
from interp.errors import InterpError
from interp.files.storage import encodable

__all__ = ["CircuitView", "circuit_html", "view"]

# geometry (px, SVG user units); a layer band is LAYER tall, bands stacked bottom-up
_HEAD_W, _HEAD_H, _GAP = 46.0, 22.0, 10.0
_LEFT = 56.0  # room for the layer labels
_LAYER = 100.0
_TOP = 70.0  # above the first band: the logits bar
_MLP_W = 56.0
_POS, _NEG, _ZERO = "#2166ac", "#c0392b", "#999999"
_DASH = {"q": "", "k": "6 3", "v": "1.5 2.5"}


def _js_json(value: Any) -> str:
    """JSON safe inside a <script> element: '<', '>' and '&' as \\u escapes (JSON.parse undoes them)."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _fmt(x: float) -> str:
    return f"{x:+.4g}"


class _Layout:
    """Where every node and port sits, from the model shape in the graph's meta."""

    def __init__(self, meta: dict[str, Any]):
        self.n_layers, self.n_heads, self.n_kv = meta["n_layers"], meta["n_heads"], meta["n_kv_heads"]
        self.per = self.n_heads // self.n_kv
        self.row = self.n_heads * (_HEAD_W + _GAP) - _GAP
        self.width = _LEFT + self.row + 24 + _MLP_W + 16
        self.height = _TOP + self.n_layers * _LAYER + 44

    def band(self, layer: int) -> float:
        """Top y of a layer's band (layer 0 lowest)."""
        return _TOP + (self.n_layers - 1 - layer) * _LAYER

    def head_box(self, layer: int, head: int) -> tuple[float, float]:
        return _LEFT + head * (_HEAD_W + _GAP), self.band(layer) + 46

    def mlp_box(self, layer: int) -> tuple[float, float]:
        return _LEFT + self.row + 24, self.band(layer) + 8

    def group_strip(self, layer: int, group: int) -> tuple[float, float, float]:
        """x, y, width of a KV group's strip under its heads."""
        x0, y = self.head_box(layer, group * self.per)
        return x0, y + _HEAD_H + 8, self.per * (_HEAD_W + _GAP) - _GAP

    def embed_box(self) -> tuple[float, float, float]:
        return _LEFT, _TOP + self.n_layers * _LAYER + 8, self.row

    def logits_box(self) -> tuple[float, float, float]:
        return _LEFT, 24.0, self.row

    def out_point(self, name: str) -> tuple[float, float]:
        """Where a sender's edges start: the top middle of its box."""
        n = node(name)
        if n.role == "embed":
            x, y, w = self.embed_box()
            return x + w / 2, y
        if n.role == "head":
            x, y = self.head_box(n.layer, n.index)
            return x + _HEAD_W / 2, y
        x, y = self.mlp_box(n.layer)
        return x + _MLP_W / 2, y

    def in_point(self, name: str) -> tuple[float, float]:
        """Where a receiver's edges end: its port."""
        n = node(name)
        if n.role == "q":
            x, y = self.head_box(n.layer, n.index)
            return x + _HEAD_W / 2, y + _HEAD_H
        if n.role in ("k", "v"):
            x, y, w = self.group_strip(n.layer, n.index)
            return x + w * (0.3 if n.role == "k" else 0.7), y + 9
        if n.role == "mlp":
            x, y = self.mlp_box(n.layer)
            return x + _MLP_W / 2, y + _HEAD_H
        x, y, w = self.logits_box()
        return x + w / 2, y + 24


def _check(graph: Any, max_edges: int) -> None:
    if not isinstance(graph, Graph):
        raise InterpError(f"the circuit view draws an interp.circuits.Graph, got {type(graph).__name__}")
    if not isinstance(max_edges, int) or max_edges < 1:
        raise InterpError(f"max_edges must be a positive int (how many top edges the view carries), got {max_edges!r}")
    if len(graph) == 0:
        raise InterpError("the graph has no edges to draw; pass a Graph with at least one edge")
    bad = int((~torch.isfinite(graph.scores)).sum())
    if bad:
        raise InterpError(f"{bad} of {len(graph)} edge scores are not finite (NaN or inf); the view needs finite scores")


def _tokens(graph: Graph) -> list[str] | None:
    if graph.patterns is None:
        return None
    n = graph.patterns.shape[-1]
    tokens = (graph.meta.get("example") or {}).get("tokens")
    if tokens is None:
        return [str(i) for i in range(n)]
    if len(tokens) != n:
        raise InterpError(f"meta['example']['tokens'] has {len(tokens)} tokens for patterns over {n} positions")
    return [str(t) for t in tokens]


def _causal(graph: Graph) -> bool:
    """Whether the pattern view masks the upper triangle: meta["causal"] if given, else whether the
    stored patterns put no weight above the diagonal (an encoder's do)."""
    if "causal" in graph.meta:
        return bool(graph.meta["causal"])
    return graph.patterns is None or bool((graph.patterns.triu(1).abs() <= 1e-6).all())


def _edges_svg(graph: Graph, lay: _Layout, order: list[int]) -> list[str]:
    """One <g class="edge"> per carried edge, weakest first so the strongest is drawn on top."""
    scores = graph.scores
    amax = float(scores[order].abs().max())
    out = []
    for rank in reversed(range(len(order))):
        i = order[rank]
        s, r, v = graph.senders[i], graph.receivers[i], float(scores[i])
        (x1, y1), (x2, y2) = lay.out_point(s), lay.in_point(r)
        ym = (y1 + y2) / 2  # vertical tangents at both ends; the curve's midpoint is its bounding box's centre
        d = f"M{x1:.1f},{y1:.1f} C{x1:.1f},{ym:.1f} {x2:.1f},{ym:.1f} {x2:.1f},{y2:.1f}"
        rel = abs(v) / amax if amax > 0 else 0.0
        color = _POS if v > 0 else _NEG if v < 0 else _ZERO
        dash = f' stroke-dasharray="{_DASH[node(r).role]}"' if _DASH.get(node(r).role) else ""
        label = html.escape(f"{s} → {r}: {_fmt(v)}")
        out.append(
            f'<g class="edge" data-rank="{rank}" data-s="{html.escape(s)}" data-r="{html.escape(r)}" data-label="{label}">'
            f'<path class="hit" d="{d}"/>'
            f'<path class="line" d="{d}" stroke="{color}" stroke-width="{0.6 + 4.4 * rel:.2f}" '
            f'stroke-opacity="{0.3 + 0.7 * rel:.2f}"{dash}/>'
            f"<title>{label}</title></g>"
        )
    return out


def _box(cls: str, keys: str, x: float, y: float, w: float, h: float, text: str, tip: str, extra: str = "") -> str:
    return (f'<g class="{cls}" data-keys="{html.escape(keys)}"{extra}><rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" '
            f'height="{h:.1f}" rx="4"/><text x="{x + w / 2:.1f}" y="{y + h / 2 + 4:.1f}">{html.escape(text)}</text>'
            f"<title>{html.escape(tip)}</title></g>")


def _port(key: str, x: float, y: float) -> str:
    return (f'<circle class="port" data-keys="{html.escape(key)}" cx="{x:.1f}" cy="{y:.1f}" r="2.6">'
            f"<title>{html.escape(key)}</title></circle>")


def _nodes_svg(lay: _Layout) -> tuple[list[str], list[str]]:
    """(KV strips and layer labels, drawn under the edges; node boxes and ports, drawn over them)."""
    under, over = [], []
    x, y, w = lay.embed_box()
    over.append(_box("node embed", "embed", x, y, w, 24.0, "embed", "embed: token + position embeddings"))
    x, y, w = lay.logits_box()
    over.append(_box("node logits", "logits", x, y, w, 24.0, "logits", "logits (input of the unembedding)"))
    for layer in range(lay.n_layers):
        top = lay.band(layer)
        under.append(f'<text class="layer" x="6" y="{top + 62:.1f}">L{layer}</text>')
        for g in range(lay.n_kv):
            sx, sy, sw = lay.group_strip(layer, g)
            k, v = f"a{layer}.g{g}.k", f"a{layer}.g{g}.v"
            under.append(f'<g class="kv" data-keys="{k} {v}"><rect x="{sx:.1f}" y="{sy:.1f}" width="{sw:.1f}" height="9" rx="2"/>'
                         f"<title>KV group {g} of layer {layer}: key and value inputs</title></g>")
            for key in (k, v):
                px, py = lay.in_point(key)
                over.append(f'<text class="portname" x="{px:.1f}" y="{py + 9:.1f}">{key[-1]}</text>')
                over.append(_port(key, px, py))
        for h in range(lay.n_heads):
            hx, hy = lay.head_box(layer, h)
            name = f"a{layer}.h{h}"
            over.append(_box("node head", f"{name} {name}.q", hx, hy, _HEAD_W, _HEAD_H, f"h{h}",
                             f"{name}: layer {layer} head {h} (KV group {h // lay.per}); click for its attention pattern",
                             f' data-layer="{layer}" data-head="{h}" tabindex="0"'))
            over.append(_port(f"{name}.q", *lay.in_point(f"{name}.q")))
        mx, my = lay.mlp_box(layer)
        over.append(_box("node mlp", f"m{layer}", mx, my, _MLP_W, _HEAD_H, f"m{layer}", f"m{layer}: MLP of layer {layer}"))
    return under, over


def _legend(graph: Graph, carried: int) -> str:
    m = graph.meta
    facts = []
    for k in ("method", "steps", "model", "task", "metric", "n_examples", "clean_metric", "corrupt_metric"):
        if k in m and m[k] is not None:
            v = m[k]
            facts.append(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}")

    def sample(color: str, width: float, dash: str = "") -> str:
        return (f'<svg width="34" height="10"><line x1="1" y1="5" x2="33" y2="5" stroke="{color}" '
                f'stroke-width="{width}" stroke-dasharray="{dash}"/></svg>')

    rows = [
        f"{sample(_POS, 3.0)} positive score &nbsp; {sample(_NEG, 3.0)} negative score &nbsp; width and opacity: |score|",
        (f"{sample('#555', 1.5)} into q &nbsp; {sample('#555', 1.5, _DASH['k'])} into k &nbsp; "
         f"{sample('#555', 1.5, _DASH['v'])} into v &nbsp; (q port under each head; k, v ports on the KV-group "
         "strip below the heads)"),
        "dimmed: no shown edge touches it. Hover an edge for its score; click a head for its attention pattern.",
        f"score: {html.escape(str(m.get('convention', 'signed effect of the edge on the metric')))}",
        f"{len(graph)} edges in the graph; the view carries the top {carried} by |score|. "
        + html.escape(", ".join(facts)),
    ]
    return '<div class="legend">' + "".join(f"<div>{r}</div>" for r in rows) + "</div>"


_CSS = """
#{u} {{ font-family: system-ui, sans-serif; font-size: 13px; color: #222; position: relative; }}
#{u} .wrap {{ display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }}
#{u} .canvas {{ flex: 1 1 420px; max-height: 80vh; overflow: auto; border: 1px solid #ddd; }}
#{u} svg.circuit {{ display: block; max-width: 100%; height: auto; }}
#{u} .edge path {{ fill: none; }}
#{u} .edge .hit {{ stroke: transparent; stroke-width: 7; pointer-events: stroke; }}
#{u} .edge .line {{ pointer-events: none; }}
#{u} .edge:hover .line {{ stroke-opacity: 1; }}
#{u} .node rect {{ fill: #fdfdfd; stroke: #444; stroke-width: 1; }}
#{u} .node text, #{u} .layer, #{u} .portname {{ text-anchor: middle; font-size: 11px; pointer-events: none; fill: #222; }}
#{u} .layer {{ text-anchor: start; fill: #666; }}
#{u} .portname {{ font-size: 7px; fill: #777; }}
#{u} .head {{ cursor: pointer; }}
#{u} .head.picked rect {{ stroke: #e08e0b; stroke-width: 2.5; }}
#{u} .kv rect {{ fill: #eee; stroke: #bbb; }}
#{u} .port {{ fill: #444; }}
#{u} .dim {{ opacity: 0.22; }}
#{u} .panel {{ flex: 0 1 380px; min-width: 260px; }}
#{u} .controls {{ margin: 6px 0; }}
#{u} .example {{ color: #444; margin-bottom: 6px; word-break: break-word; }}
#{u} .controls input[type=number] {{ width: 5em; }}
#{u} .legend {{ color: #444; margin: 6px 0; line-height: 1.6; }}
#{u} .legend svg {{ vertical-align: middle; }}
#{u} .tip {{ position: absolute; display: none; background: #fff; border: 1px solid #888; padding: 2px 6px;
             pointer-events: none; white-space: nowrap; font-size: 12px; box-shadow: 1px 1px 3px #0003; z-index: 10; }}
"""

# The behaviour: show the top n edges, dim untouched nodes, tooltip, click a head -> circuitsvis.
_JS = """
(function () {
  var uid = %(uid)s, root = document.getElementById(uid);
  var data = JSON.parse(document.getElementById(uid + "-data").textContent);
  var edges = root.querySelectorAll("g.edge"), keyed = root.querySelectorAll("[data-keys]");
  var range = document.getElementById(uid + "-range"), num = document.getElementById(uid + "-num");
  var count = document.getElementById(uid + "-count"), tip = document.getElementById(uid + "-tip");
  var panel = document.getElementById(uid + "-pattern"), caption = document.getElementById(uid + "-caption");
  function show(n) {
    n = Math.max(1, Math.min(data.carried, Math.round(Number(n)) || 1));
    range.value = n; num.value = n;
    var on = {};
    for (var i = 0; i < edges.length; i++) {
      var e = edges[i], visible = Number(e.getAttribute("data-rank")) < n;
      e.style.display = visible ? "" : "none";
      if (visible) { on[e.getAttribute("data-s")] = true; on[e.getAttribute("data-r")] = true; }
    }
    for (var j = 0; j < keyed.length; j++) {
      var keys = keyed[j].getAttribute("data-keys").split(" "), hit = false;
      for (var k = 0; k < keys.length; k++) { if (on[keys[k]]) { hit = true; } }
      keyed[j].classList.toggle("dim", !hit);
    }
    count.textContent = n + " of " + data.carried + " edges shown";
  }
  range.addEventListener("input", function () { show(range.value); });
  num.addEventListener("input", function () { if (num.value !== "") { show(num.value); } });
  function place(ev) {
    var box = root.getBoundingClientRect();
    tip.style.left = (ev.clientX - box.left + 14) + "px"; tip.style.top = (ev.clientY - box.top + 10) + "px";
  }
  root.addEventListener("mouseover", function (ev) {
    var g = ev.target.closest ? ev.target.closest("g.edge") : null;
    if (!g) { return; }
    tip.textContent = g.getAttribute("data-label"); tip.style.display = "block"; place(ev);
  });
  root.addEventListener("mousemove", function (ev) { if (tip.style.display === "block") { place(ev); } });
  root.addEventListener("mouseout", function (ev) {
    var g = ev.target.closest ? ev.target.closest("g.edge") : null;
    if (g && !(ev.relatedTarget && g.contains(ev.relatedTarget))) { tip.style.display = "none"; }
  });
  var drawn = 0;
  function pattern(head) {
    var layer = Number(head.getAttribute("data-layer")), h = Number(head.getAttribute("data-head"));
    var picked = root.querySelectorAll("g.head.picked");
    for (var i = 0; i < picked.length; i++) { picked[i].classList.remove("picked"); }
    head.classList.add("picked");
    panel.textContent = "";
    if (!data.patterns) {
      caption.textContent = "a" + layer + ".h" + h + ": this graph stores no attention patterns (Graph.patterns is None)";
      return;
    }
    caption.textContent = "a" + layer + ".h" + h + ": attention on the example prompt (rows: destination, columns: source)";
    // a fresh element per click: React must not mount twice on one container
    var div = document.createElement("div");
    div.id = uid + "-pattern-" + (drawn++);
    panel.appendChild(div);
    var props = {tokens: data.tokens, attention: data.patterns[layer][h], maskUpperTri: data.causal};
    (function draw(n) {
      if (window.CircuitsVis) { CircuitsVis.render(div.id, CircuitsVis.AttentionPattern, props); }
      else if (n > 0) { setTimeout(function () { draw(n - 1); }, 200); }
      else { div.textContent = "circuitsvis is not loaded: run interp.plot.circuitsvis_init()"; }
    })(50);
  }
  root.addEventListener("click", function (ev) {
    var head = ev.target.closest ? ev.target.closest("g.head") : null;
    if (head) { pattern(head); }
  });
  root.addEventListener("keydown", function (ev) {
    var head = ev.target.closest ? ev.target.closest("g.head") : null;
    if (head && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); pattern(head); }
  });
  show(data.initial);
})();
"""


@dataclass(frozen=True, eq=False)
class CircuitView:
    """The interactive circuit of a `Graph` (see the module doc): `html()` gives the fragment,
    Jupyter displays it, `interp.report` embeds it."""

    graph: Graph
    title: str | None = None
    max_edges: int = 1000
    shown: int | None = None  # edges shown at first; default min(carried, 40)

    def __post_init__(self) -> None:
        _check(self.graph, self.max_edges)
        if self.shown is not None and (not isinstance(self.shown, int) or self.shown < 1):
            raise InterpError(f"shown must be a positive int (edges shown at first), got {self.shown!r}")

    @property
    def needs_circuitsvis(self) -> bool:
        """True where clicking a head draws a circuitsvis pattern (the graph stores patterns)."""
        return self.graph.patterns is not None

    def html(self, bundle: bool = True) -> str:
        """The view as an HTML fragment; with `bundle`, it carries the circuitsvis loader (only
        where the graph has patterns), else it waits for a `CircuitsVis` defined on the page."""
        g, lay = self.graph, _Layout(self.graph.meta)
        uid = f"circuit-{uuid.uuid4().hex[:12]}"
        order = g.order().tolist()[: self.max_edges]
        carried = len(order)
        initial = min(carried, self.shown or 40)
        under, over = _nodes_svg(lay)
        data = {"carried": carried, "initial": initial, "causal": _causal(g),
                "tokens": _tokens(g),
                "patterns": None if g.patterns is None else torch.round(g.patterns.float(), decimals=4).tolist()}
        title = self.heading()
        zoom = min(1.6, max(1.0, 600 / lay.width))  # small models drawn larger; the viewBox keeps coordinates
        svg = (f'<svg class="circuit" xmlns="http://www.w3.org/2000/svg" width="{zoom * lay.width:.0f}" '
               f'height="{zoom * lay.height:.0f}" '
               f'viewBox="0 0 {lay.width:.0f} {lay.height:.0f}" role="img" aria-label="{html.escape(title)}">'
               + "".join(under) + '<g class="edges">' + "".join(_edges_svg(g, lay, order)) + "</g>"
               + "".join(over) + "</svg>")
        controls = (
            f'<div class="controls"><label for="{uid}-range">top edges by |score|: </label>'
            f'<input type="range" id="{uid}-range" min="1" max="{carried}" step="1" value="{initial}"> '
            f'<input type="number" id="{uid}-num" min="1" max="{carried}" step="1" value="{initial}" aria-label="edges shown"> '
            f'<span id="{uid}-count">{initial} of {carried} edges shown</span></div>'
        )
        tokens = data["tokens"]
        example = "" if tokens is None else (
            f'<div class="example">example prompt ({len(tokens)} tokens): {html.escape(" | ".join(tokens))}</div>')
        panel = (f'<div class="panel">{example}<div id="{uid}-caption">click a head for its attention pattern on the '
                 f'example prompt</div><div id="{uid}-pattern"></div></div>')
        loader = f"<script>{bundle_js.loader()}</script>" if bundle and self.needs_circuitsvis else ""
        return (
            f'<div class="interp-circuit" id="{uid}"><style>{_CSS.format(u=uid)}</style>'
            f'<div class="title"><b>{html.escape(title)}</b></div>{controls}{_legend(g, carried)}'
            f'<div class="wrap"><div class="canvas">{svg}</div>{panel}</div>'
            f'<div class="tip" id="{uid}-tip"></div>'
            f'<script type="application/json" id="{uid}-data">{_js_json(data)}</script>'
            f"{loader}<script>{_JS % {'uid': json.dumps(uid)}}</script></div>"
        )

    def heading(self) -> str:
        """The title shown above the view: `title`, else method, model and task from the meta."""
        m = self.graph.meta
        return self.title or " ".join(str(m[k]) for k in ("method", "model", "task") if k in m) or "circuit"

    def _repr_html_(self) -> str:
        # like plot.Widget: the circuitsvis bundle goes with the first view this kernel displays only
        return self.html(bundle=bundle_js.first_view(self.needs_circuitsvis))

    def __repr__(self) -> str:
        return f"CircuitView({self.graph!r})"


@registry.view("Graph")
def view(graph: Graph, *, title: str | None = None, max_edges: int = 1000, shown: int | None = None) -> CircuitView:
    """The interactive view of `graph`: its top `max_edges` edges by |score|, `shown` of them at first."""
    return CircuitView(graph, title, max_edges, shown)


def circuit_html(graph: Graph, *, title: str | None = None, max_edges: int = 1000, shown: int | None = None) -> str:
    """A complete standalone HTML document of the view: no network request of any kind."""
    v = view(graph, title=title, max_edges=max_edges, shown=shown)
    head = f"<meta charset='utf-8'><title>{html.escape(v.heading())}</title>"
    if v.needs_circuitsvis:
        head += f"<script type='text/javascript'>{bundle_js.text()}</script>"
    return encodable(f"<!DOCTYPE html>\n<html><head>{head}</head><body>\n{v.html(bundle=False)}\n</body></html>\n")
