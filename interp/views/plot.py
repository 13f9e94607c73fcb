"""The plotting layer: `render(result)` -> plotly Figure for every result; circuitsvis views.

This is, with report.py, the only module that imports plotly or circuitsvis, and it imports
`interp.results` only: any result is drawn through its Grid (`to_grid()`), whose `meta["chart"]`
picks the chart (`interp.results.CHARTS`); without one a Grid is drawn by its number of axes:
1 -> bar chart, 2 -> heatmap, 3 -> faceted heatmaps (one panel per entry of the first axis),
except where the first axis is ordered (`ORDERED`: layer, pos, step, rank, k, strength) and a line
reads better: 1 ordered axis -> a line; an ordered axis and a small (<= 8) categorical one
(`CATEGORICAL`, e.g. split / metric / model, or a name outside the usual vocabulary) -> one line
per entry. A Grid of 4 or more axes must be reduced first (`grid.mean(...)`, `grid.sel(...)`).
Axis titles and tick labels come from the Grid itself, so a new capability draws with no edit here.
A pandas DataFrame is drawn as a table. A circuits `Graph` is drawn as the interactive circuit
(`interp.views.circuit`: HTML, shown by Jupyter and embedded by the report), not as a plotly figure.

In Jupyter, `show(result)` displays a figure as one output holding both the interactive plotly
figure and a static PNG (`png(...)`: plotly's export through kaleido and a headless Chromium), so a
plain notebook viewer shows the image. circuitsvis views (`attention(...)`) carry the 1.3 MB
circuitsvis bundle only in the first view a kernel displays (or in `circuitsvis_init()`); later
views reuse the `CircuitsVis` global that it defines in the page.
"""

from __future__ import annotations

import html
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from interp.errors import InterpError
from interp.views import bundle as bundle_js  # `bundle` is Widget.html's flag
from interp.registry import VIEWS, view_for
from interp.results import CHARTS, Grid, atomic_path, tag_of
from interp.tensors import AXES

__all__ = ["CATEGORICAL", "ORDERED", "VIEWS", "Widget", "attention", "circuitsvis_bundle", "circuitsvis_init", "png", "render", "show", "view_of"]

# axes whose entries have an order worth a line (x axis of an automatic line chart)
ORDERED = ("layer", "pos", "step", "rank", "k", "strength")
# axes whose entries are a few named things (one line each when beside an ordered axis)
CATEGORICAL = ("split", "metric", "model", "method", "site", "seed", "quantity", "unit")
_MAX_SERIES = 8
# the axes most often averaged away, in the order a 4+-axis error suggests them
_REDUCIBLE = ("seed", "batch", "split", "model", "method", "metric", "step", "strength", "k", "rank", "site")

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
    finite = values[torch.isfinite(values)]  # NaN cells (path_patch's unreachable senders) do not set the scale
    lo, hi = (float(finite.min()), float(finite.max())) if finite.numel() else (0.0, 0.0)
    if lo < 0 < hi:
        bound = max(-lo, hi)
        return dict(color_continuous_scale=_DIVERGING, zmin=-bound, zmax=bound)
    return dict(color_continuous_scale=_SEQUENTIAL)


def render(result: Any):
    """A plotly Figure for any interp result (a Grid, anything with `to_grid()`, a DataFrame);
    for a circuits `Graph`, its interactive `CircuitView` (see `view_of`)."""
    import pandas as pd

    view = view_of(result)
    if view is not None:
        return view
    if isinstance(result, pd.DataFrame):
        return _table(result)
    if hasattr(result, "to_grid"):
        grid = result.to_grid()
        if not isinstance(grid, Grid):
            raise TypeError(f"{type(result).__name__}.to_grid() returned {type(grid).__name__}, not a Grid")
        return _grid(grid)
    raise TypeError(f"no renderer for {type(result).__name__}; expected an interp result (a Grid or one with to_grid())")


def view_of(obj: Any):
    """The HTML view of `obj`: a view (anything with `html(bundle=...)` and `needs_circuitsvis`, such
    as `interp.views.circuit.CircuitView`) as it is, the view registered for its result type
    (`interp.registry.view`, where the view is defined: a circuits `Graph`), None for anything else."""
    if callable(getattr(obj, "html", None)) and hasattr(obj, "needs_circuitsvis"):
        return obj
    draw = view_for(tag_of(obj))
    return None if draw is None else draw(obj)


def _table(frame) -> Any:
    import plotly.graph_objects as go

    cells = [[html.escape(str(v)) for v in frame[c]] for c in frame.columns]
    fig = go.Figure(go.Table(header=dict(values=[html.escape(str(c)) for c in frame.columns], align="left"),
                             cells=dict(values=cells, align="left")))
    fig.update_layout(template="plotly_white", height=120 + 30 * len(frame))
    return fig


def _grid(grid: Grid):
    if grid.axes and grid.values.numel() == 0:
        raise InterpError(f"cannot draw an empty Grid {dict(zip(grid.axes, grid.shape))}: an axis has no entries")
    chart = grid.meta.get("chart")
    if chart is not None and chart not in CHARTS:
        raise InterpError(f"meta['chart']={chart!r} is not one of {CHARTS}")
    if chart is None:
        chart = _auto_chart(grid)
    if chart in ("lines", "bars", "scatter", "complex"):
        fig = {"lines": _lines, "bars": _bars, "scatter": _scatter, "complex": _complex}[chart](grid)
        fig.update_layout(title=_title(grid), template="plotly_white")
        return fig
    return _by_axes(grid)


def _auto_chart(grid: Grid) -> str | None:
    """"lines" where the first axis is ordered and a line reads better than a bar or heatmap."""
    if not grid.axes or grid.axes[0] not in ORDERED or grid.shape[0] < 2:
        return None
    if len(grid.axes) == 1:
        return "lines"
    if len(grid.axes) == 2:
        second = grid.axes[1]
        categorical = second in CATEGORICAL or second not in AXES
        if categorical and grid.shape[1] <= _MAX_SERIES:
            return "lines"
    return None


def _errors(grid: Grid) -> tuple[torch.Tensor, dict[str, Any] | None]:
    """(values [x, series, ...], error bars) of a Grid whose last axis may be 'quantity'."""
    values = grid.values.float()
    if grid.axes[-1] != "quantity":
        return values, None
    q = list(grid.labels[-1])
    if "value" not in q:
        raise InterpError(f"a 'quantity' axis needs a 'value' entry to draw, got {q}")
    y = values[..., q.index("value")]
    if "ci_low" in q and "ci_high" in q:
        return y, {"high": values[..., q.index("ci_high")] - y, "low": y - values[..., q.index("ci_low")]}
    if "std" in q:
        return y, {"high": values[..., q.index("std")], "low": values[..., q.index("std")]}
    return y, None


def _error_y(err: dict[str, Any] | None, index) -> dict[str, Any] | None:
    if err is None:
        return None
    return dict(type="data", symmetric=False, array=err["high"][index].tolist(), arrayminus=err["low"][index].tolist())


def _lines(grid: Grid):
    """(x, series[, panel][, quantity]): one line per series, one panel per entry of the third axis."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    y, err = _errors(grid)
    if y.ndim == 1:
        y = y[:, None]
        err = None if err is None else {k: v[:, None] for k, v in err.items()}
    if y.ndim == 2:
        y = y[..., None]
        err = None if err is None else {k: v[..., None] for k, v in err.items()}
    if y.ndim != 3:
        raise InterpError(f"a lines chart takes (x, series[, panel]) axes, got {grid.axes}")
    x = _ticks(grid.labels[0])
    series = _ticks(grid.labels[1]) if grid.values.ndim > 1 and grid.axes[1] != "quantity" else ["value"]
    panels = _ticks(grid.labels[2]) if y.shape[2] > 1 else [""]
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=panels if y.shape[2] > 1 else None)
    for s, name in enumerate(series):
        color = qualitative.Plotly[s % len(qualitative.Plotly)]
        for p in range(len(panels)):
            fig.add_trace(go.Scatter(x=x, y=y[:, s, p].tolist(), mode="lines+markers", name=name, legendgroup=name,
                                     showlegend=p == 0, line=dict(color=color), error_y=_error_y(err, (slice(None), s, p))),
                          row=1, col=p + 1)
    fig.update_xaxes(title_text=grid.axes[0], type="log" if grid.meta.get("log_x") else None)
    fig.update_yaxes(title_text=html.escape(str(grid.meta.get("metric", "value"))), col=1)
    return fig


def _bars(grid: Grid):
    """(group, series[, quantity]): grouped bars; meta['chance'] draws a dashed line."""
    import plotly.graph_objects as go

    y, err = _errors(grid)
    if y.ndim == 1:
        y, err = y[:, None], None if err is None else {k: v[:, None] for k, v in err.items()}
    if y.ndim != 2:
        raise InterpError(f"a bars chart takes (group, series) axes, got {grid.axes}")
    x = _ticks(grid.labels[0])
    series = _ticks(grid.labels[1]) if grid.axes[1] != "quantity" else ["value"]
    fig = go.Figure()
    for s, name in enumerate(series):
        fig.add_trace(go.Bar(x=x, y=y[:, s].tolist(), name=name, error_y=_error_y(err, (slice(None), s))))
    if grid.meta.get("chance") is not None:
        fig.add_hline(y=float(grid.meta["chance"]), line_dash="dash", annotation_text="chance")
    fig.update_layout(barmode="group", yaxis_title=html.escape(str(grid.meta.get("metric", "value"))))
    return fig


def _scatter(grid: Grid):
    """(points, coordinates): x, y and an optional colour per point; meta['highlight'] as stars."""
    import plotly.graph_objects as go

    if grid.values.ndim != 2 or grid.shape[1] not in (2, 3):
        raise InterpError(f"a scatter chart takes (points, coordinates) with 2 or 3 coordinates, got {grid.axes} {grid.shape}")
    v = grid.values.float()
    names = _ticks(grid.labels[0])
    coords = _ticks(grid.labels[1])
    star = {str(h) for h in grid.meta.get("highlight", ())}
    plain = [i for i, n in enumerate(grid.labels[0]) if str(n) not in star]
    marker = dict(size=10)
    if v.shape[1] == 3:
        marker.update(color=v[plain, 2].tolist(), colorscale=_SEQUENTIAL, showscale=True, colorbar=dict(title=coords[2]))
    fig = go.Figure(go.Scatter(x=v[plain, 0].tolist(), y=v[plain, 1].tolist(), mode="markers", text=[names[i] for i in plain],
                               marker=marker, name=grid.axes[0]))
    picked = [i for i in range(v.shape[0]) if i not in plain]
    if picked:
        fig.add_trace(go.Scatter(x=v[picked, 0].tolist(), y=v[picked, 1].tolist(), mode="markers", text=[names[i] for i in picked],
                                 marker=dict(size=16, symbol="star", color="crimson"), name=", ".join(names[i] for i in picked)))
    fig.update_layout(xaxis_title=coords[0], yaxis_title=coords[1])
    return fig


def _complex(grid: Grid):
    """(points, coordinates=(real, imag)): eigenvalues in the complex plane with the unit circle."""
    import math

    import plotly.graph_objects as go

    if grid.values.ndim != 2 or grid.shape[1] != 2:
        raise InterpError(f"a complex chart takes (points, coordinates=(real, imag)), got {grid.axes} {grid.shape}")
    t = [2 * math.pi * i / 200 for i in range(201)]
    fig = go.Figure(go.Scatter(x=[math.cos(a) for a in t], y=[math.sin(a) for a in t], mode="lines",
                               line=dict(color="lightgray", dash="dot"), name="unit circle", hoverinfo="skip"))
    ref = grid.meta.get("reference")
    if ref:
        fig.add_trace(go.Scatter(x=[r[0] for r in ref], y=[r[1] for r in ref], mode="markers", name="reference",
                                 marker=dict(size=14, symbol="circle-open", color="crimson", line=dict(width=2))))
    v = grid.values.float()
    fig.add_trace(go.Scatter(x=v[:, 0].tolist(), y=v[:, 1].tolist(), mode="markers", name=grid.axes[0],
                             marker=dict(size=9, symbol="x", color="royalblue")))
    fig.update_layout(xaxis_title="real", yaxis_title="imaginary", yaxis=dict(scaleanchor="x", scaleratio=1))
    return fig


def _by_axes(grid: Grid):
    import plotly.express as px
    import plotly.graph_objects as go

    values = grid.values.float()
    if grid.values.ndim == 0:
        raise InterpError("a 0-axis Grid is a scalar; print it instead of plotting")
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
        pick = next((a for a in _REDUCIBLE if a in grid.axes), grid.axes[0])
        example = grid.labels[grid.axis(pick)][0]
        raise InterpError(
            f"cannot draw a {values.ndim}-axis Grid {dict(zip(grid.axes, grid.shape))}; select or average axes "
            f"down to 3: use grid.mean({pick!r}) or grid.sel({pick}={example!r}) to get down to {values.ndim - 1} axes"
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
        """The view as HTML; without the bundle it waits for a `CircuitsVis` defined elsewhere on the page."""
        div = f"circuits-vis-{uuid.uuid4().hex[:12]}"
        call = f"CircuitsVis.render({json.dumps(div)}, CircuitsVis.{self.element}, {self.props_json()});"
        if bundle:
            script = f"{bundle_js.loader()}\n{bundle_js.waiting(div, call)}"
        else:
            script = bundle_js.waiting(div, call)
        return f'<div id="{div}" style="margin: 15px 0;"></div>\n<script>{script}</script>'

    def __repr__(self) -> str:
        # short: a notebook stores this text beside the HTML view
        tokens, heads = self.props.get("tokens"), self.props.get("attentionHeadNames")
        what = ", ".join(x for x in (f"{len(heads)} heads" if heads else "", f"{len(tokens)} tokens" if tokens else "") if x)
        return f"Widget({self.element}{', ' + what if what else ''})"

    def _repr_html_(self) -> str:
        # the bundle goes with the first view this kernel displays only (see circuitsvis_init)
        return self.html(bundle=bundle_js.first_view())


def circuitsvis_init():
    """An IPython HTML object that loads the circuitsvis bundle into the page once (display it, or
    make it a cell's last expression); circuitsvis views displayed after it carry no bundle."""
    from IPython.display import HTML

    bundle_js.SENT["sent"] = True
    return HTML(f"<script>{bundle_js.loader()}</script>")


def circuitsvis_bundle() -> str:
    """circuitsvis's self-contained browser bundle (defines the global `CircuitsVis`)."""
    return bundle_js.text()


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
        raise InterpError(f"pattern must be [head, dest, src] with dest == src, got {tuple(pattern.shape)}")
    if len(tokens) != pattern.shape[-1]:
        raise InterpError(f"{len(tokens)} tokens for a pattern over {pattern.shape[-1]} positions")
    names = list(head_names) if head_names is not None else [f"H{h}" for h in range(pattern.shape[0])]
    if len(names) != pattern.shape[0]:
        raise InterpError(f"{len(names)} head names for {pattern.shape[0]} heads")
    props = {
        "attention": pattern.tolist(),
        "tokens": [str(t) for t in tokens],
        "attentionHeadNames": names,
        "maskUpperTri": causal,
    }
    return Widget("AttentionHeads", props)


# ---------------------------------------------------------------------------------------------
# static images


def _figure(obj: Any):
    import plotly.graph_objects as go

    if isinstance(obj, go.Figure):
        return obj
    view = view_of(obj)
    if view is not None:  # a view is interactive HTML: its static image is its result's chart
        return _grid((obj if hasattr(obj, "to_grid") else view.graph).to_grid())
    return render(obj)


_KALEIDO = {"server": False}


def _kaleido_server() -> None:
    """One Chromium for all exports of this process (a fresh one per image costs ~2 s)."""
    if _KALEIDO["server"]:
        return
    import atexit

    import kaleido

    if hasattr(kaleido, "start_sync_server"):
        kaleido.start_sync_server(silence_warnings=True)
        atexit.register(kaleido.stop_sync_server, silence_warnings=True)
    _KALEIDO["server"] = True


def png(obj: Any, path: str | Path | None = None, *, width: int | None = None, height: int | None = None,
        scale: float = 1.0) -> bytes:
    """A PNG of a plotly Figure or of any result `render` draws (written to `path` if given); for a
    circuits `Graph` (whose view is interactive HTML), the bar chart of its top edges (`to_grid()`).

    Uses plotly's static export: the `kaleido` package (in the `dev` extras) driving a headless
    Chrome or Chromium (Debian: `apt-get install chromium`; kaleido finds /usr/bin/chromium, or set
    BROWSER_PATH). Works offline.
    """
    import warnings

    fig = _figure(obj)
    width = width or fig.layout.width or 760
    height = height or fig.layout.height or 460
    try:
        _kaleido_server()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "kopts is ignored if using a server"
            data = fig.to_image(format="png", width=width, height=height, scale=scale)
    except (ImportError, ValueError, RuntimeError, OSError) as e:
        raise InterpError(f"could not export a PNG ({type(e).__name__}: {e}); static export needs `pip install "
                          f"kaleido` and a Chrome/Chromium (Debian: apt-get install chromium, or set BROWSER_PATH)") from e
    if path is not None:  # beside its final name, renamed into place: never a half-written PNG
        with atomic_path(path) as tmp:
            Path(tmp).write_bytes(data)
    return data


def _figure_json(fig) -> dict[str, Any]:
    import plotly.io as pio

    spec = json.loads(pio.to_json(fig, validate=False, remove_uids=True))
    return {"data": spec.get("data", []), "layout": spec.get("layout", {}), "config": {}}


class Shown:
    """A figure as one Jupyter output: the interactive plotly figure (`application/vnd.plotly.v1+json`,
    drawn by JupyterLab / VS Code) beside a static PNG (drawn by any notebook viewer)."""

    def __init__(self, fig, image: bytes, interactive: bool = True):
        self.figure, self.image, self.interactive = fig, image, interactive

    def _repr_mimebundle_(self, include=None, exclude=None):
        import base64

        bundle = {"image/png": base64.b64encode(self.image).decode("ascii"),
                  "text/plain": f"<figure: {html.escape(str(self.figure.layout.title.text or ''))}>"}
        if self.interactive:
            bundle["application/vnd.plotly.v1+json"] = _figure_json(self.figure)
        return bundle

    def _repr_png_(self) -> bytes:
        return self.image


def show(obj: Any, *, interactive: bool = True, width: int | None = None, height: int | None = None,
         display: bool = True) -> Shown | None:
    """Display a result (or a plotly Figure) in Jupyter as the interactive figure and a static PNG.

    With `display=False` the object is returned instead (a cell's last expression shows it).
    """
    fig = _figure(obj)
    shown = Shown(fig, png(fig, width=width, height=height), interactive)
    if display:
        from IPython.display import display as _display

        _display(shown)
        return None
    return shown


_CIRCUITSVIS = bundle_js.SENT  # the one flag, under the name notebooks' tests reset
