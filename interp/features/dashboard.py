"""A small browser dashboard of a dictionary's features: for each feature its top-activating
contexts, each token shaded by that feature's activation there (hover shows the number), the
activating token boxed. Every token and label is HTML-escaped; the page needs no script and no
network. `interp.plot` draws a `TopExamples` through this view (registered with `interp.registry.view`), `interp.report`
embeds it, Jupyter displays it.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from interp import registry
from interp.errors import InterpError
from interp.features.sites import TopExamples
from interp.files.storage import encodable

__all__ = ["FeatureDashboard", "dashboard_html", "view"]

_STYLE = """<style>
.fdash { font-family: system-ui, sans-serif; font-size: 13px; }
.fdash .feature { border-top: 1px solid #ddd; padding: 6px 0; }
.fdash .ctx { font-family: ui-monospace, monospace; white-space: pre; margin: 2px 0; }
.fdash .tok { border-radius: 2px; border-right: 1px solid #e4e4e4; }  /* token boundaries: word-level tokens carry no spaces */
.fdash .at { outline: 1px solid #c00; }
.fdash .val { color: #666; display: inline-block; width: 5em; }
</style>"""


def _token(text: str, act: float, top: float, center: bool) -> str:
    act = act + 0.0  # -0.0 (a JumpReLU's masked negative) shown as 0
    alpha = 0.0 if top <= 0 else max(0.0, min(1.0, act / top))
    cls = "tok at" if center else "tok"
    shown = html.escape(text.replace("\n", "\u21b5"))  # a newline token shown as one glyph
    return (f'<span class="{cls}" title="{act:.3g}" '
            f'style="background: rgba(255, 120, 0, {alpha:.2f})">{shown}</span>')


@dataclass(frozen=True)
class FeatureDashboard:
    """The view of a TopExamples (see the module docstring)."""

    top: TopExamples
    max_features: int = 50

    needs_circuitsvis = False

    def __post_init__(self) -> None:
        if not isinstance(self.top, TopExamples):
            raise InterpError(f"FeatureDashboard draws a TopExamples, got {type(self.top).__name__}")

    def heading(self) -> str:
        t = self.top
        return f"Top examples: {t.dictionary or 'dictionary'}" + (f" ({t.model})" if t.model and t.model not in t.dictionary else "")

    def html(self, bundle: bool = False) -> str:
        """The dashboard as an HTML fragment (`bundle` is accepted for the view protocol; unused)."""
        t = self.top
        parts = [_STYLE, '<div class="fdash">', f"<h3>{html.escape(self.heading())}</h3>"]
        for i, feat in enumerate(t.features.tolist()[: self.max_features]):
            top = float(t.values[i].max()) if t.values.shape[1] else 0.0
            parts.append(f'<div class="feature"><b>feature {int(feat)}</b> max {top:.3g}')
            for j in range(t.values.shape[1]):
                if float(t.values[i, j]) <= 0:
                    continue
                toks = "".join(_token(s, float(t.context_acts[i, j, w]), top, w == t.center)
                               for w, s in enumerate(t.contexts[i][j]))
                parts.append(f'<div class="ctx"><span class="val">{float(t.values[i, j]):.3g}</span>{toks}</div>')
            parts.append("</div>")
        shown = min(len(t.features), self.max_features)
        if shown < len(t.features):
            parts.append(f"<p>{shown} of {len(t.features)} features shown</p>")
        parts.append("</div>")
        return "\n".join(parts)

    def _repr_html_(self) -> str:
        return self.html()


@registry.view("TopExamples")
def view(top: TopExamples) -> FeatureDashboard:
    return FeatureDashboard(top)


def dashboard_html(top: TopExamples, *, max_features: int = 50) -> str:
    """A complete standalone HTML document of the dashboard."""
    v = FeatureDashboard(top, max_features)
    return encodable(f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(v.heading())}</title></head>"
                     f"<body>\n{v.html()}\n</body></html>\n")
