"""The browser view of an `AttributionGraph`: hand-written SVG and a little vanilla JavaScript,
in the style of the head-level circuit view (`interp.views.circuit`).

    view(graph, examples=None)      a `GraphView`: Jupyter shows it, `interp.report` embeds it,
                                    `interp.plot.render(graph)` returns one
    graph_html(graph, ...)          a complete offline HTML document

Layout: the residual stream runs upward. Columns are prompt positions (the token under each);
rows are, bottom to top, the token embeddings, the layers (each feature of a layer at its position;
features are circles, error nodes grey squares) and the logits (at the last position). The view
carries the graph's `max_edges` largest-|weight| edges and the nodes they touch (tokens and logits
always); the slider shows the top n of them and dims nodes no shown edge touches. Edges are blue
where the effect is positive, red where negative; width and opacity grow with |weight|. Hovering a
node shows what it is (layer, position, feature id, activation, influence), its label and, where a
dashboard provides them (`examples`: {(layer, feature): [text, ...]}), its top examples; hovering
an edge shows "source → target: weight". A graph with QK attribution (meta["attention"], written
by `interp.features.qk.with_attention`) also draws each attention edge as a dashed arc at its
layer, from the key's column to the query's; clicking an arc, or choosing it in the list below the
drawing, shows its top query-part / key-part pairs and their terms.

Every token string and label reaches the page HTML-escaped, or as JSON with `<`, `>`, `&` escaped
and put in place as text (never as markup). Nothing is fetched.
"""

from __future__ import annotations

import html
import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from interp import registry
from interp.errors import InterpError
from interp.features.graph import ERROR, FEATURE, LOGIT, TOKEN, AttributionGraph
from interp.files.storage import encodable

__all__ = ["GraphView", "examples_of", "graph_html", "view"]

_ROW, _LEFT, _TOP, _STEP = 54.0, 64.0, 40.0, 13.0
_POS, _NEG = "#2166ac", "#c0392b"
_COLOR = {FEATURE: "#f0a35e", ERROR: "#9a9a9a", TOKEN: "#8fb9d9", LOGIT: "#7fbf7b"}


def _js_json(value: Any) -> str:
    """JSON safe inside a <script> element: '<', '>' and '&' as \\u escapes (JSON.parse undoes them)."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _carried(g: AttributionGraph, max_edges: int) -> tuple[list[tuple[int, int, float]], list[int]]:
    """The top `max_edges` edges (target, source, weight) by |weight| and the nodes they touch
    (plus every token and logit), in node order."""
    t, s = torch.nonzero(g.adjacency, as_tuple=True)
    w = g.adjacency[t, s]
    order = torch.argsort(w.abs(), descending=True)[:max_edges]
    edges = [(int(t[i]), int(s[i]), float(w[i])) for i in order]
    touched = {x for a, b, _ in edges for x in (a, b)} | set(g.of("token").tolist()) | set(g.of("logit").tolist())
    return edges, sorted(touched)


def _places(g: AttributionGraph, nodes: list[int]) -> tuple[dict[int, tuple[float, float]], float, float]:
    """x, y of each node; the drawing's width and height. Each position's column is as wide as its
    fullest layer needs, so the few busy positions do not stretch the rest."""
    n_layers, n_pos = g.meta["n_layers"], len(g.tokens)
    cells: dict[tuple[int, int], list[int]] = {}
    for i in nodes:
        cells.setdefault((int(g.layer[i]), int(g.pos[i])), []).append(i)
    widths = [60.0] * n_pos
    for (layer, pos), members in cells.items():
        if layer < n_layers:
            widths[pos] = max(widths[pos], len(members) * _STEP + 16)
    starts = [_LEFT + sum(widths[:p]) for p in range(n_pos)]
    n_logits = len(cells.get((n_layers, n_pos - 1), []))
    width = max(_LEFT + sum(widths), _LEFT + n_logits * 58.0) + 16
    height = _TOP + (n_layers + 2) * _ROW + 30
    out = {}
    for (layer, pos), members in cells.items():
        y = _TOP + (n_layers - layer) * _ROW  # logits (layer n_layers) on top, tokens (-1) at the bottom
        step = 58.0 if layer == n_layers else _STEP
        x0 = starts[pos] + widths[pos] / 2 - step * (len(members) - 1) / 2
        if layer == n_layers:  # the logits may spread past their column: keep them on the canvas
            x0 = max(_LEFT + 30, min(x0, width - 30 - step * (len(members) - 1)))
        for j, i in enumerate(members):
            out[i] = (x0 + j * step, y)
    return out, width, height


def _node_svg(g: AttributionGraph, i: int, x: float, y: float) -> str:
    kind, key = int(g.kind[i]), html.escape(g.ids[i])
    common = f'class="gnode" data-i="{i}" data-keys="{key}"'
    fill = _COLOR[kind]
    if kind == FEATURE:
        shape = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{fill}" stroke="#6b3b12"/>'
    elif kind == ERROR:
        shape = f'<rect x="{x - 5:.1f}" y="{y - 5:.1f}" width="10" height="10" fill="{fill}" stroke="#444"/>'
    else:
        text = g.tokens[int(g.pos[i])] if kind == TOKEN else g.meta.get("logit_tokens", {}).get(str(int(g.index[i])), "?")
        label = html.escape(text if len(text) <= 8 else text[:7] + "…")
        shape = (f'<rect x="{x - 26:.1f}" y="{y - 10:.1f}" width="52" height="20" rx="4" fill="{fill}" stroke="#444"/>'
                 f'<text x="{x:.1f}" y="{y + 4:.1f}">{label}</text>')
    return f"<g {common}>{shape}<title>{html.escape(g.describe(i))}</title></g>"


def _edge_svg(g: AttributionGraph, rank: int, t: int, s: int, w: float, places, amax: float) -> str:
    (x1, y1), (x2, y2) = places[s], places[t]
    ym = (y1 + y2) / 2
    d = f"M{x1:.1f},{y1:.1f} C{x1:.1f},{ym:.1f} {x2:.1f},{ym:.1f} {x2:.1f},{y2:.1f}"
    rel = abs(w) / amax if amax > 0 else 0.0
    label = html.escape(f"{g.describe(s)} → {g.describe(t)}: {w:+.4g}")
    return (f'<g class="edge" data-rank="{rank}" data-s="{html.escape(g.ids[s])}" data-r="{html.escape(g.ids[t])}" '
            f'data-label="{label}"><path class="hit" d="{d}"/><path class="line" d="{d}" '
            f'stroke="{_POS if w > 0 else _NEG}" stroke-width="{0.5 + 4 * rel:.2f}" stroke-opacity="{0.25 + 0.75 * rel:.2f}"/>'
            f"<title>{label}</title></g>")


def _attention_svg(g: AttributionGraph, places: dict[int, tuple[float, float]]) -> str:
    """Each attention edge of meta["attention"] as a dashed arc at its layer's row, from the key's
    column to the query's (the token nodes' columns); selecting one shows its QK pairs."""
    n_layers = g.meta["n_layers"]
    x_of = {int(g.pos[i]): places[i][0] for i in g.of("token").tolist() if i in places}
    out = []
    for a, e in enumerate(g.meta.get("attention", [])):
        xk, xq = x_of.get(int(e["key"])), x_of.get(int(e["query"]))
        if xk is None or xq is None:
            continue
        y = _TOP + (n_layers - int(e["layer"])) * _ROW - 14
        d = f"M{xk:.1f},{y:.1f} Q{(xk + xq) / 2:.1f},{y - 24 - 0.05 * abs(xq - xk):.1f} {xq:.1f},{y:.1f}"
        label = html.escape(_attention_label(g, e))
        out.append(f'<g class="attn-edge" data-a="{a}" data-label="{label}"><path class="hit" d="{d}"/>'
                   f'<path class="line" d="{d}"/><title>{label}</title></g>')
    return "".join(out)


def _attention_label(g: AttributionGraph, e: dict[str, Any]) -> str:
    q, k = int(e["query"]), int(e["key"])
    tok = lambda p: repr(g.tokens[p]) if 0 <= p < len(g.tokens) else "?"  # noqa: E731
    return (f"L{e['layer']} H{e['head']}: query @{q} {tok(q)} ← key @{k} {tok(k)}, "
            f"score {float(e['score']):+.4g}, pattern {float(e['pattern']):.3f}")


def _attention_panel(g: AttributionGraph, uid: str) -> str:
    """A list of the attention edges and the table of the selected one's top query/key pairs."""
    rows = g.meta.get("attention", [])
    if not rows:
        return ""
    options = "".join(f'<option value="{a}">{html.escape(_attention_label(g, e))}</option>' for a, e in enumerate(rows))
    return (f'<div class="attn"><label for="{uid}-attn">attention edge (QK attribution): </label>'
            f'<select id="{uid}-attn">{options}</select>'
            f'<table><thead><tr><th>query part</th><th>key part</th><th>term</th></tr></thead>'
            f'<tbody id="{uid}-pairs"></tbody></table><div id="{uid}-rest" class="rest"></div></div>')


def _hover(g: AttributionGraph, i: int, examples: Mapping[tuple[int, int], Sequence[str]]) -> dict[str, Any]:
    kind = int(g.kind[i])
    lines = [g.describe(i)]
    if kind == FEATURE:
        lines.append(f"activation {float(g.activation[i]):.4g}")
    if g.influence is not None:
        lines.append(f"cumulative influence {float(g.influence[i]):.3f}")
    found = list(examples.get((int(g.layer[i]), int(g.index[i])), ())) if kind == FEATURE else []
    return {"lines": lines, "examples": [str(e) for e in found[:5]]}


_CSS = """
#{u} {{ font-family: system-ui, sans-serif; font-size: 13px; color: #222; position: relative; }}
#{u} .canvas {{ max-height: 85vh; overflow: auto; border: 1px solid #ddd; }}
#{u} svg {{ display: block; }}
#{u} .edge path {{ fill: none; }}
#{u} .edge .hit {{ stroke: transparent; stroke-width: 7; pointer-events: stroke; }}
#{u} .edge .line {{ pointer-events: none; }}
#{u} .gnode text {{ text-anchor: middle; font-size: 10px; pointer-events: none; }}
#{u} .gnode {{ cursor: default; }}
#{u} .rowname {{ font-size: 11px; fill: #666; }}
#{u} .dim {{ opacity: 0.18; }}
#{u} .legend {{ color: #444; margin: 6px 0; line-height: 1.6; }}
#{u} .tip {{ position: absolute; display: none; background: #fff; border: 1px solid #888; padding: 3px 7px;
             pointer-events: none; max-width: 460px; font-size: 12px; box-shadow: 1px 1px 3px #0003; z-index: 10; }}
#{u} .tip .ex {{ color: #555; font-family: monospace; white-space: pre-wrap; }}
#{u} .attn-edge path {{ fill: none; }}
#{u} .attn-edge .hit {{ stroke: transparent; stroke-width: 8; pointer-events: stroke; cursor: pointer; }}
#{u} .attn-edge .line {{ stroke: #7b3fa0; stroke-width: 1.5; stroke-dasharray: 4 3; pointer-events: none; }}
#{u} .attn-edge.on .line {{ stroke-width: 3.5; }}
#{u} .attn table {{ border-collapse: collapse; margin: 4px 0; }}
#{u} .attn td, #{u} .attn th {{ border: 1px solid #ddd; padding: 2px 6px; text-align: left; }}
"""

_JS = """
(function () {
  var uid = %(uid)s, root = document.getElementById(uid);
  var data = JSON.parse(document.getElementById(uid + "-data").textContent);
  var edges = root.querySelectorAll("g.edge"), keyed = root.querySelectorAll("[data-keys]");
  var range = document.getElementById(uid + "-range"), num = document.getElementById(uid + "-num");
  var count = document.getElementById(uid + "-count"), tip = document.getElementById(uid + "-tip");
  function show(n) {
    n = Math.max(1, Math.min(data.carried, Math.round(Number(n)) || 1));
    range.value = n; num.value = n;
    var on = {};
    for (var i = 0; i < edges.length; i++) {
      var e = edges[i], visible = Number(e.getAttribute("data-rank")) < n;
      e.style.display = visible ? "" : "none";
      if (visible) { on[e.getAttribute("data-s")] = true; on[e.getAttribute("data-r")] = true; }
    }
    for (var j = 0; j < keyed.length; j++) { keyed[j].classList.toggle("dim", !on[keyed[j].getAttribute("data-keys")]); }
    count.textContent = n + " of " + data.carried + " edges shown";
  }
  range.addEventListener("input", function () { show(range.value); });
  num.addEventListener("input", function () { if (num.value !== "") { show(num.value); } });
  function place(ev) {
    var box = root.getBoundingClientRect();
    tip.style.left = (ev.clientX - box.left + 14) + "px"; tip.style.top = (ev.clientY - box.top + 10) + "px";
  }
  function fill(info) {
    tip.textContent = "";
    info.lines.forEach(function (l) { var d = document.createElement("div"); d.textContent = l; tip.appendChild(d); });
    if (info.examples.length) {
      var h = document.createElement("div"); h.textContent = "top examples:"; tip.appendChild(h);
      info.examples.forEach(function (x) { var d = document.createElement("div"); d.className = "ex"; d.textContent = x; tip.appendChild(d); });
    }
  }
  root.addEventListener("mouseover", function (ev) {
    var n = ev.target.closest ? ev.target.closest("g.gnode") : null;
    var g = ev.target.closest ? (ev.target.closest("g.edge") || ev.target.closest("g.attn-edge")) : null;
    if (n) { fill(data.nodes[n.getAttribute("data-i")]); }
    else if (g) { tip.textContent = g.getAttribute("data-label"); }
    else { return; }
    tip.style.display = "block"; place(ev);
  });
  root.addEventListener("mousemove", function (ev) { if (tip.style.display === "block") { place(ev); } });
  root.addEventListener("mouseout", function (ev) {
    var g = ev.target.closest ? (ev.target.closest("g.edge") || ev.target.closest("g.gnode") || ev.target.closest("g.attn-edge")) : null;
    if (g && !(ev.relatedTarget && g.contains(ev.relatedTarget))) { tip.style.display = "none"; }
  });
  var attn = data.attention, sel = document.getElementById(uid + "-attn");
  var arcs = root.querySelectorAll("g.attn-edge");
  function pick(a) {
    if (!sel || !attn[a]) { return; }
    sel.value = String(a);
    var body = document.getElementById(uid + "-pairs");
    body.textContent = "";
    attn[a].pairs.forEach(function (p) {
      var tr = document.createElement("tr");
      [p.query, p.key, (p.weight >= 0 ? "+" : "") + p.weight.toPrecision(4)].forEach(function (c) {
        var td = document.createElement("td"); td.textContent = c; tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    document.getElementById(uid + "-rest").textContent = "other pairs: " + attn[a].rest.toPrecision(4) +
      "; score " + attn[a].score.toPrecision(4) + " (the terms sum to it)";
    for (var i = 0; i < arcs.length; i++) { arcs[i].classList.toggle("on", arcs[i].getAttribute("data-a") === String(a)); }
  }
  if (sel) { sel.addEventListener("change", function () { pick(Number(sel.value)); }); }
  root.addEventListener("click", function (ev) {
    var arc = ev.target.closest ? ev.target.closest("g.attn-edge") : null;
    if (arc) { pick(Number(arc.getAttribute("data-a"))); }
  });
  pick(0);
  show(data.initial);
  var canvas = root.querySelector(".canvas");
  canvas.scrollLeft = canvas.scrollWidth;  // the answer is computed at the last position: start there
})();
"""


@dataclass(frozen=True, eq=False)
class GraphView:
    """The interactive view of an AttributionGraph (module doc): `html()` gives the fragment."""

    graph: AttributionGraph
    title: str | None = None
    max_edges: int = 500
    shown: int | None = None  # edges shown at first; default min(carried, 40)
    examples: Mapping[tuple[int, int], Sequence[str]] = field(default_factory=dict)
    needs_circuitsvis = False

    def __post_init__(self) -> None:
        if not isinstance(self.graph, AttributionGraph):
            raise InterpError(f"the graph view draws an interp.features.AttributionGraph, got {type(self.graph).__name__}")
        if not isinstance(self.max_edges, int) or self.max_edges < 1:
            raise InterpError(f"max_edges must be a positive int, got {self.max_edges!r}")
        if not bool((self.graph.adjacency != 0).any()):
            raise InterpError("the graph has no edges to draw")
        if not bool(torch.isfinite(self.graph.adjacency).all()):
            raise InterpError("the graph has non-finite edge weights (NaN or inf); the view needs finite weights")

    def heading(self) -> str:
        g = self.graph
        return self.title or f"attribution graph: {g.model or 'model'}, {g.meta.get('prompt', ''.join(g.tokens))!r}"

    def html(self, bundle: bool = True) -> str:
        """The view as an HTML fragment (`bundle` is accepted for the report's protocol: nothing to load)."""
        g, uid = self.graph, f"attr-{uuid.uuid4().hex[:12]}"
        edges, nodes = _carried(g, self.max_edges)
        places, width, height = _places(g, nodes)
        amax = max(abs(w) for _, _, w in edges)
        carried = len(edges)
        initial = min(carried, self.shown or 40)
        n_layers = g.meta["n_layers"]
        rows = [f'<text class="rowname" x="6" y="{_TOP + (n_layers - layer) * _ROW + 4:.1f}">{name}</text>'
                for layer, name in [(n_layers, "logits"), *((l, f"L{l}") for l in range(n_layers - 1, -1, -1)), (-1, "tokens")]]
        svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" role="img" '
               f'aria-label="{html.escape(self.heading())}">' + "".join(rows)
               + '<g class="edges">' + "".join(_edge_svg(g, r, t, s, w, places, amax) for r, (t, s, w) in reversed(list(enumerate(edges))))
               + "</g>" + _attention_svg(g, places) + "".join(_node_svg(g, i, *places[i]) for i in nodes) + "</svg>")
        data = {"carried": carried, "initial": initial, "attention": g.meta.get("attention", []),
                "nodes": {str(i): _hover(g, i, self.examples) for i in nodes}}
        scores = g.scores()
        legend = (f'<div class="legend">blue: positive direct effect, red: negative; width: |weight|. Circles: '
                  f"features, grey squares: error nodes. {len(nodes)} nodes and the top {carried} of "
                  f"{int((g.adjacency != 0).sum())} edges carried. Replacement score {scores['replacement']:.3f}, "
                  f"completeness {scores['completeness']:.3f} (this graph). Hover a node or an edge"
                  + ("; dashed arcs: attention edges, click one for the features that drive its score" if
                     g.meta.get("attention") else "") + ".</div>")
        controls = (f'<div class="controls"><label for="{uid}-range">top edges by |weight|: </label>'
                    f'<input type="range" id="{uid}-range" min="1" max="{carried}" step="1" value="{initial}"> '
                    f'<input type="number" id="{uid}-num" min="1" max="{carried}" step="1" value="{initial}" aria-label="edges shown"> '
                    f'<span id="{uid}-count">{initial} of {carried} edges shown</span></div>')
        prompt = html.escape(" | ".join(g.tokens))
        return (f'<div class="interp-attribution" id="{uid}"><style>{_CSS.format(u=uid)}</style>'
                f'<div class="title"><b>{html.escape(self.heading())}</b></div><div class="example">prompt: {prompt}</div>'
                f'{controls}{legend}<div class="canvas">{svg}</div>{_attention_panel(g, uid)}<div class="tip" id="{uid}-tip"></div>'
                f'<script type="application/json" id="{uid}-data">{_js_json(data)}</script>'
                f"<script>{_JS % {'uid': json.dumps(uid)}}</script></div>")

    def _repr_html_(self) -> str:
        return self.html()

    def __repr__(self) -> str:
        return f"GraphView({self.graph!r})"


def examples_of(tops: Mapping[int, Any]) -> dict[tuple[int, int], list[str]]:
    """{(layer, feature): texts} from the feature dashboard's `TopExamples` per layer
    (`interp.features.top_examples` of that layer's transcoder): each example's context with the
    activating token in [[ ]]."""
    out: dict[tuple[int, int], list[str]] = {}
    for layer, top in tops.items():
        for i, feature in enumerate(top.features.tolist()):
            texts = []
            for j, context in enumerate(top.contexts[i]):
                if float(top.values[i, j]) <= 0:
                    continue
                words = list(context)
                words[top.center] = f"[[{words[top.center]}]]"
                texts.append(f"{''.join(words)}  ({float(top.values[i, j]):.3g})")
            out[(int(layer), int(feature))] = texts
    return out


@registry.view("AttributionGraph")
def view(graph: AttributionGraph, *, title: str | None = None, max_edges: int = 500, shown: int | None = None,
         examples: Mapping[tuple[int, int], Sequence[str]] | None = None) -> GraphView:
    """The interactive view of `graph`: its top `max_edges` edges by |weight|, `shown` at first;
    `examples` {(layer, feature): texts} appear when hovering that feature."""
    return GraphView(graph, title, max_edges, shown, dict(examples or {}))


def graph_html(graph: AttributionGraph, **kwargs: Any) -> str:
    """A complete standalone HTML document of the view (no network request of any kind)."""
    v = view(graph, **kwargs)
    head = f"<meta charset='utf-8'><title>{html.escape(v.heading())}</title>"
    return encodable(f"<!DOCTYPE html>\n<html><head>{head}</head><body>\n{v.html()}\n</body></html>\n")
