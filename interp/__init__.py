"""interp: mechanistic interpretability on TransformerLens 4.x bridges.

    import interp
    from interp.interventions import Patch, Mask
    model = interp.load("zoo:lm-gpt2")            # or a hub name, or a local HF directory
    task = interp.tasks.make("ioi", split="train", n=64)
    logits = interp.run.logits(model, task.clean, [Mask.ablate("z", [0, 2], n_heads=4, layer=1)])

Every capability intervenes through `interp.interventions` (data) and `interp.run` (the one
runner) and returns results (`interp.Grid`, or a type with `to_grid()`) that
`interp.results.save` / `load` store and `interp.plot.render` draws. Importing interp touches no
network and does not import plotly or circuitsvis; `interp.plot` and `interp.report` do, on first
use as attributes (`interp.plot.render(g)`) or when you import them.
"""

from interp import hooks, interventions, metrics, run, sites, tasks
from interp.errors import InterpError
from interp.hooks import hooks as hooked
from interp.model import FAMILIES, build_tiny, describe, load
from interp.results import Grid
from interp.tasks.base import Task

_LAZY = (
    "patching", "lens", "circuits", "masking", "simplify", "cores", "steering", "probing", "grafting", "studies", "sweep",
    "zoo", "train", "plot", "report", "circuit_view", "gguf",
)


def __getattr__(name: str):
    """Analysis modules load on first use (`interp.patching`), keeping `import interp` light."""
    if name in _LAZY:
        import importlib

        return importlib.import_module(f"interp.{name}")
    raise AttributeError(f"module 'interp' has no attribute {name!r}")


__all__ = [
    "FAMILIES",
    "Grid",
    "InterpError",
    "Task",
    "build_tiny",
    "describe",
    "hooked",
    "hooks",
    "interventions",
    "load",
    "metrics",
    "run",
    "sites",
    "tasks",
    *_LAZY,
]
__version__ = "0.1.0"
