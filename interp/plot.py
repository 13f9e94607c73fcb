"""The plotting layer: `render(result)` -> plotly Figure for every result type; circuitsvis views.

This is, with report.py, the only module that imports plotly or circuitsvis. A Grid is drawn by
its number of axes: 1 -> bar chart, 2 -> heatmap, 3 -> faceted heatmaps (one panel per entry of
the first axis). Axis titles and tick labels come from the Grid itself.
"""

from __future__ import annotations

import html
import json
import uuid
from dataclasses import dataclass
from functools import singledispatch
from pathlib import Path
from typing import Any, Sequence

import torch

from interp.results import Grid

_DIVERGING = "RdBu"
_SEQUENTIAL = "Viridis"


def _ticks(labels: Sequence[Any]) -> list[str]:
    # plotly renders a subset of HTML inside text, so token strings are escaped first
    return [html.escape(str(x)) for x in labels]


def _title(grid: Grid) -> str:
    keys = ("method", "site", "metric", "task", "model")
    parts = [f"{k}={grid.meta[k]}" for k in keys if k in grid.meta]
    return html.escape(grid.meta.get("title") or ", ".join(parts) or "Grid")


def _color(values: torch.Tensor) -> dict[str, Any]:
    lo, hi = float(values.min()), float(values.max())
    if lo < 0 < hi:
        bound = max(-lo, hi)
        return dict(color_continuous_scale=_DIVERGING, zmin=-bound, zmax=bound)
    return dict(color_continuous_scale=_SEQUENTIAL)


@singledispatch
def render(result: Any):
    """A plotly Figure for any interp result."""
    raise TypeError(f"no renderer for {type(result).__name__}; expected an interp result such as Grid")


@render.register
def _(grid: Grid):
    import plotly.express as px
    import plotly.graph_objects as go

    values = grid.values.float()
    if grid.values.ndim == 0:
        raise ValueError("a 0-axis Grid is a scalar; print it instead of plotting")
    if grid.values.ndim == 1:
        fig = go.Figure(go.Bar(x=_ticks(grid.labels[0]), y=values.tolist()))
        fig.update_layout(xaxis_title=grid.axes[0], yaxis_title=grid.meta.get("metric", "value"))
    elif grid.values.ndim == 2:
        fig = px.imshow(
            values.numpy(),
            x=_ticks(grid.labels[1]),
            y=_ticks(grid.labels[0]),
            labels=dict(x=grid.axes[1], y=grid.axes[0], color=grid.meta.get("metric", "value")),
            aspect="auto",
            **_color(values),
        )
    elif grid.values.ndim == 3:
        fig = px.imshow(
            values.numpy(),
            facet_col=0,
            facet_col_wrap=min(4, values.shape[0]),
            x=_ticks(grid.labels[2]),
            y=_ticks(grid.labels[1]),
            labels=dict(x=grid.axes[2], y=grid.axes[1], color=grid.meta.get("metric", "value")),
            aspect="auto",
            **_color(values),
        )
        names = _ticks(grid.labels[0])
        fig.for_each_annotation(lambda a: a.update(text=f"{grid.axes[0]}={names[int(a.text.split('=')[-1])]}"))
    else:
        raise ValueError(
            f"cannot draw a {values.ndim}-axis Grid {grid.axes}; select or average axes down to 3"
        )
    fig.update_layout(title=_title(grid), template="plotly_white")
    return fig


@dataclass(frozen=True)
class Widget:
    """A circuitsvis component with its props, renderable in Jupyter and embeddable in a report.

    The props are kept (rather than only the HTML) so a report can load the circuitsvis bundle
    once and render many widgets against it.
    """

    element: str
    props: dict[str, Any]

    def props_json(self) -> str:
        # json.dumps does not escape '<', so '</script>' in a token would end the script tag
        text = json.dumps(self.props)
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")

    def html(self, bundle: bool = True) -> str:
        div = f"circuits-vis-{uuid.uuid4().hex[:12]}"
        js = circuitsvis_bundle() if bundle else ""
        return (
            f'<div id="{div}" style="margin: 15px 0;"></div>\n'
            f"<script>{js}\nCircuitsVis.render({json.dumps(div)}, CircuitsVis.{self.element}, "
            f"{self.props_json()});</script>"
        )

    def _repr_html_(self) -> str:
        return self.html(bundle=True)


def circuitsvis_bundle() -> str:
    """circuitsvis's self-contained browser bundle (defines the global `CircuitsVis`)."""
    import circuitsvis

    path = Path(circuitsvis.__file__).parent / "dist" / "cdn" / "iife.js"
    return path.read_text(encoding="utf-8").replace("</script>", "<\\/script>")


def attention(
    pattern: torch.Tensor,
    tokens: Sequence[str],
    *,
    head_names: Sequence[str] | None = None,
    causal: bool = True,
) -> Widget:
    """A circuitsvis AttentionHeads view of `pattern` [head, dest, src] (or [dest, src]).

    `tokens` are the token strings, one per position. Pass `causal=False` for encoders.
    """
    pattern = torch.as_tensor(pattern).detach().float().cpu()
    if pattern.ndim == 2:
        pattern = pattern[None]
    if pattern.ndim != 3 or pattern.shape[1] != pattern.shape[2]:
        raise ValueError(f"pattern must be [head, dest, src] with dest == src, got {tuple(pattern.shape)}")
    if len(tokens) != pattern.shape[-1]:
        raise ValueError(f"{len(tokens)} tokens for a pattern over {pattern.shape[-1]} positions")
    names = list(head_names) if head_names is not None else [f"H{h}" for h in range(pattern.shape[0])]
    if len(names) != pattern.shape[0]:
        raise ValueError(f"{len(names)} head names for {pattern.shape[0]} heads")
    props = {
        "attention": pattern.tolist(),
        "tokens": [str(t) for t in tokens],
        "attentionHeadNames": names,
        "maskUpperTri": causal,
    }
    return Widget("AttentionHeads", props)


# --- attention simplifiers (interp.simplify) ---------------------------------------------------

from interp.simplify import METRICS as _SIMPLIFY_METRICS  # noqa: E402
from interp.simplify import QUANTITIES as _SIMPLIFY_QUANTITIES  # noqa: E402
from interp.simplify import AttentionComparison, Sweep  # noqa: E402


@render.register
def _(sweep: Sweep):
    """Faithfulness against rank (or k): one line per split, a panel per metric, 95 % CI bars."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    grid = sweep.grid
    panels = ("accuracy_simplified", "same_prediction", "js")
    titles = ("accuracy (dashed: original)", "same prediction", "attention JS (bits)")
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=titles)
    x = list(grid.labels[0])
    q = {name: _SIMPLIFY_QUANTITIES.index(name) for name in ("value", "ci_low", "ci_high")}
    for s, split in enumerate(grid.labels[1]):
        color = qualitative.Plotly[s % len(qualitative.Plotly)]
        for col, metric in enumerate(panels, start=1):
            v = grid.values[:, s, _SIMPLIFY_METRICS.index(metric)].float()
            y = v[:, q["value"]]
            err = dict(type="data", symmetric=False, array=(v[:, q["ci_high"]] - y).tolist(), arrayminus=(y - v[:, q["ci_low"]]).tolist())
            fig.add_trace(go.Scatter(x=x, y=y.tolist(), mode="lines+markers", name=html.escape(str(split)), legendgroup=str(split),
                                     showlegend=col == 1, line=dict(color=color), error_y=err), row=1, col=col)
            if metric == "accuracy_simplified":
                orig = grid.values[:, s, _SIMPLIFY_METRICS.index("accuracy_original"), q["value"]].float()
                fig.add_trace(go.Scatter(x=x, y=orig.tolist(), mode="lines", line=dict(color=color, dash="dash"),
                                         legendgroup=str(split), showlegend=False, hoverinfo="skip"), row=1, col=col)
    for col in range(1, len(panels) + 1):
        fig.update_xaxes(title_text=grid.axes[0], type="log" if grid.axes[0] in ("rank", "k") else None, row=1, col=col)
    heads = grid.meta.get("heads", "")
    fig.update_layout(title=html.escape(f"{grid.meta.get('method', 'simplifier')} on heads {heads}: faithfulness per split"), template="plotly_white")
    return fig


@render.register
def _(comparison: AttentionComparison):
    """Original and simplified attention of one head side by side (use `attention` for circuitsvis)."""
    import plotly.express as px

    ticks = _ticks(comparison.tokens)
    fig = px.imshow(comparison.patterns.float().numpy(), facet_col=0, x=ticks, y=ticks, zmin=0, zmax=1,
                    labels=dict(x="src", y="dest", color="attention"), color_continuous_scale=_SEQUENTIAL)
    names = _ticks(comparison.names)
    fig.for_each_annotation(lambda a: a.update(text=names[int(a.text.split("=")[-1])]))
    fig.update_layout(title=html.escape(f"attention of head {comparison.meta.get('head', '')}"), template="plotly_white")
    return fig


# --- interp.masking results (HeadMask -> heatmap, Study -> ID vs OOD scatter, EffectiveSize -> curve)
from interp.masking import EffectiveSize, HeadMask, Study  # noqa: E402  (masking imports no plotting)


@render.register
def _(mask: HeadMask):
    fig = render(mask.to_grid())
    fig.update_layout(coloraxis_showscale=False)
    return fig


@render.register
def _(result: Study):
    import plotly.graph_objects as go

    x, y = result.accuracy(result.id_split), result.accuracy(result.ood_split)
    sparsity = [m.meta.get("sparsity", float("nan")) for m in result.masks]
    names = _ticks(result.evaluation.labels[0])
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=x[1:], y=y[1:], mode="markers", name="subnetworks", text=names[1:],
        marker=dict(size=10, color=sparsity, colorscale=_SEQUENTIAL, showscale=True, colorbar=dict(title="sparsity")),
    ))
    fig.add_trace(go.Scatter(x=x[:1], y=y[:1], mode="markers", name="full model", text=names[:1],
                             marker=dict(size=16, symbol="star", color="crimson")))
    fig.update_layout(
        title="subnetworks: in- vs out-of-distribution accuracy", template="plotly_white",
        xaxis_title=f"accuracy on {html.escape(result.id_split)}", yaxis_title=f"accuracy on {html.escape(result.ood_split)}",
    )
    return fig


@render.register
def _(result: EffectiveSize):
    import plotly.graph_objects as go

    curve = result.curve
    fig = go.Figure()
    for j, split in enumerate(_ticks(curve.labels[1])):
        fig.add_trace(go.Scatter(x=list(curve.labels[0]), y=curve.values[:, j].tolist(), mode="lines+markers", name=split))
    fig.add_vline(x=result.fraction * curve.meta.get("n_units", 1), line_dash="dash", annotation_text=f"effective size {result.fraction:.2f}")
    fig.update_layout(title="accuracy vs units kept", xaxis_title="units kept (k)", yaxis_title="accuracy", template="plotly_white")
    return fig


# --- interp.cores results (Operator -> eigenvalues in the complex plane, ValidationBars -> bars)
from interp.cores import Operator, ValidationBars  # noqa: E402  (cores imports no plotting)


@render.register
def _(op: Operator):
    """Eigenvalues of a square operator in the complex plane with the unit circle; the reference
    eigenvalues in `op.meta["reference"]` ([[re, im], ...]), if any, beside them."""
    import math

    import plotly.graph_objects as go

    fig = go.Figure()
    t = [2 * math.pi * i / 200 for i in range(201)]
    fig.add_trace(go.Scatter(x=[math.cos(a) for a in t], y=[math.sin(a) for a in t], mode="lines",
                             line=dict(color="lightgray", dash="dot"), name="unit circle", hoverinfo="skip"))
    ref = op.meta.get("reference")
    if ref:
        fig.add_trace(go.Scatter(x=[r[0] for r in ref], y=[r[1] for r in ref], mode="markers", name="reference",
                                 marker=dict(size=14, symbol="circle-open", color="crimson", line=dict(width=2))))
    fig.add_trace(go.Scatter(x=op.eig_real.tolist(), y=op.eig_imag.tolist(), mode="markers", name="operator",
                             marker=dict(size=9, symbol="x", color="royalblue")))
    title = op.meta.get("title") or f"operator {op.source} -> {op.target}: eigenvalues (R² {op.r2:.3f})"
    fig.update_layout(title=html.escape(title), xaxis_title="real", yaxis_title="imaginary", template="plotly_white",
                      yaxis=dict(scaleanchor="x", scaleratio=1))
    return fig


@render.register
def _(bars: ValidationBars):
    """One group per intervention: the core beside the random-subspace control (± std)."""
    import plotly.graph_objects as go

    grid = bars.grid
    m = grid.labels[2].index(bars.metric)
    q = {name: grid.labels[1].index(name) for name in ("core", "random_mean", "random_std")}
    x = _ticks(grid.labels[0])
    fig = go.Figure()
    fig.add_trace(go.Bar(x=x, y=grid.values[:, q["core"], m].tolist(), name=f"core (k={grid.meta.get('k', '?')})"))
    fig.add_trace(go.Bar(x=x, y=grid.values[:, q["random_mean"], m].tolist(), name="random subspace, same k",
                         error_y=dict(type="data", array=grid.values[:, q["random_std"], m].tolist())))
    chance = grid.meta.get("chance", {}).get(bars.metric)
    if chance is not None:
        fig.add_hline(y=chance, line_dash="dash", annotation_text="chance")
    title = grid.meta.get("title") or f"core validation at {grid.meta.get('site', '')}"
    fig.update_layout(barmode="group", title=html.escape(title), yaxis_title=html.escape(bars.metric), template="plotly_white")
    return fig


# --- interp.steering results (Comparison -> side-by-side table, Generation -> projection over steps)
from interp.steering import Comparison, Generation  # noqa: E402  (steering imports no plotting)

_STEER_COLORS = {"agree": "#1a7f37", "flip": "#c2410c"}


def _tagged(text: str, tags: Sequence[str]) -> str:
    words = text.split()
    return " ".join(
        f"<b><span style='color:{_STEER_COLORS[t]}'>{html.escape(w)}</span></b>" if t in _STEER_COLORS else html.escape(w)
        for w, t in zip(words, list(tags) + [""] * (len(words) - len(tags)))
    )


@render.register
def _(result: Comparison):
    """Prompts with unsteered and steered continuations; main verbs green (agree) or orange (flipped)."""
    import plotly.graph_objects as go

    cells = [
        [html.escape(p) for p in result.prompts],
        [_tagged(t, g) for t, g in zip(result.unsteered, result.unsteered_tags)],
        [_tagged(t, g) for t, g in zip(result.steered, result.steered_tags)],
    ]
    fig = go.Figure(go.Table(
        header=dict(values=["prompt", "unsteered", "steered"], align="left", font=dict(size=13)),
        cells=dict(values=cells, align="left", height=26),
        columnwidth=[3, 3, 3],
    ))
    what = "; ".join(result.meta.get("interventions", []))
    fig.update_layout(title=html.escape(f"steered vs unsteered ({what}); verbs: green agree, orange flipped"),
                      template="plotly_white", height=120 + 30 * len(result.prompts))
    return fig


@render.register
def _(result: Generation):
    """The projection on each intervention's axis at every step, one line per prompt."""
    import plotly.graph_objects as go

    if result.projections is None:
        raise ValueError("this Generation has no recorded projections; generate(..., record=True) records them")
    fig = go.Figure()
    units = result.meta.get("interventions", [])
    for i in range(result.projections.shape[0]):
        for b in range(result.projections.shape[1]):
            name = html.escape(f"{units[i] if i < len(units) else i}: {result.prompts[b]}")
            fig.add_trace(go.Scatter(y=result.projections[i, b].tolist(), mode="lines+markers", name=name))
    fig.update_layout(title="projection (h - mean) . u before the intervention, per generation step",
                      xaxis_title="step", yaxis_title="projection", template="plotly_white")
    return fig
