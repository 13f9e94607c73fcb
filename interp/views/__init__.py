"""The views floor: how results are drawn. It reads results and never feeds an analysis.

`plot` renders any result as a plotly figure (`render`) and holds the circuitsvis views; `report`
writes a self-contained HTML report from a list of results; `circuit` is the interactive HTML
view of a circuits `Graph`; `bundle` is the circuitsvis browser bundle the widgets share. Each
loads on first use (`interp.views.plot`), so a view registered for a result type is imported only
when that type is drawn (`interp.registry.view_for`), and plotly and circuitsvis only when
something is. `interp.plot` and `interp.report` are the same modules under the names users type.
"""

__all__ = ["bundle", "circuit", "plot", "report"]


def __getattr__(name: str):
    if name in __all__:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
