"""interp: mechanistic interpretability on TransformerLens 4.x bridges.

    import interp
    model = interp.load("zoo:lm-gpt2")            # or a hub name, or a local HF directory
    task = interp.tasks.make("ioi", split="train", n=64)
    grid = interp.Grid(...)                        # every analysis returns labelled results

Importing interp touches no network and does not import plotly or circuitsvis; `interp.plot`
and `interp.report` do, when you import them.
"""

from interp import hooks, metrics, tasks
from interp.hooks import hooks as hooked
from interp.model import FAMILIES, build_tiny, describe, load
from interp.results import Grid
from interp.tasks.base import Task

_LAZY = ("patching", "masking", "simplify", "cores", "steering", "sweep", "zoo", "train")


def __getattr__(name: str):
    """Analysis modules load on first use (`interp.patching`), keeping `import interp` light."""
    if name in _LAZY:
        import importlib

        return importlib.import_module(f"interp.{name}")
    raise AttributeError(f"module 'interp' has no attribute {name!r}")


__all__ = [
    "FAMILIES",
    "Grid",
    "Task",
    "build_tiny",
    "describe",
    "hooked",
    "hooks",
    "load",
    "metrics",
    "tasks",
    *_LAZY,
]
__version__ = "0.1.0"
