"""A self-contained HTML report from a list of results: works offline, scripts embedded once.

Items may be: a Grid or any result `plot.render` knows (drawn as a plotly figure), a plotly
Figure, a `plot.Widget` (circuitsvis), a circuits `Graph` or `CircuitView` (the interactive
circuit), a pandas DataFrame (a table), a `Heading`, or a str (a paragraph). Every piece of text
is HTML-escaped; the plotly and circuitsvis bundles are inlined once at the top, whatever the
number of figures.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Iterable

from interp.views import plot
from interp.files.storage import encodable
from interp.results import Heading, write_text_atomic

__all__ = ["Heading", "to_html", "write"]


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th { background: #f3f3f3; }
p { line-height: 1.5; }
.note { color: #555; }
"""


def _figure_html(fig) -> str:
    import plotly.io as pio

    return pio.to_html(fig, full_html=False, include_plotlyjs=False, config={"responsive": True})


def _table_html(frame) -> str:
    return frame.to_html(index=False, escape=True, float_format=lambda x: f"{x:.4g}", border=0)


def _item_html(item: Any) -> tuple[str, str | None]:
    """HTML for one item and which bundle it needs ('plotly', 'circuitsvis' or None)."""
    import pandas as pd
    import plotly.graph_objects as go

    if isinstance(item, Heading):
        level = min(max(item.level, 1), 6)
        return f"<h{level}>{html.escape(item.text)}</h{level}>", None
    if isinstance(item, str):
        return f"<p>{html.escape(item)}</p>", None
    if isinstance(item, pd.DataFrame):
        return _table_html(item), None
    if isinstance(item, plot.Widget):
        return item.html(bundle=False), "circuitsvis"
    if isinstance(item, go.Figure):
        return _figure_html(item), "plotly"
    view = plot.view_of(item)
    if view is not None:
        return view.html(bundle=False), "circuitsvis" if view.needs_circuitsvis else None
    if not hasattr(item, "to_grid") and hasattr(item, "to_dataframe"):  # a table-only result
        return _table_html(item.to_dataframe()), None
    return _figure_html(plot.render(item)), "plotly"


def to_html(items: Iterable[Any], *, title: str = "interp report") -> str:
    parts, needs = [], set()
    for item in items:
        body, need = _item_html(item)
        parts.append(body)
        if need:
            needs.add(need)
    head = [f"<meta charset='utf-8'><title>{html.escape(title)}</title><style>{_STYLE}</style>"]
    if "plotly" in needs:
        from plotly.offline import get_plotlyjs

        head.append(f"<script type='text/javascript'>{get_plotlyjs()}</script>")
    if "circuitsvis" in needs:
        head.append(f"<script type='text/javascript'>{plot.circuitsvis_bundle()}</script>")
    return encodable(
        "<!DOCTYPE html>\n<html><head>" + "\n".join(head) + "</head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n" + "\n".join(parts) + "\n</body></html>\n"
    )


def write(items: Iterable[Any], path: str | Path, *, title: str = "interp report") -> Path:
    """Write the report to `path` atomically (a temp file renamed into place)."""
    return write_text_atomic(path, to_html(items, title=title))
