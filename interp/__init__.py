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

Words, one meaning each across interp (where an older name says otherwise, the module's
docstring says which meaning it has):

    site          a hook point: a full hook name, or a short name + layer/head/pos (`interp.sites`)
    intervention  a frozen dataclass that transforms activations at its sites; a weight edit
                  replaces parameters; a variant is the list of both that one run applies (`interp.run`)
    ablation      what replaces an activation: "zero", "mean" or "resample" (`interventions.ABLATIONS`)
    task          clean/corrupt token rows with answers and a metric (`interp.Task`); a task family
                  is a module of `interp.tasks`; a split is one of its ID/OOD parts
    core          an algorithmic core: a small subspace that carries a computation (`interp.cores`);
                  the heuristic core is that paper's set of heads (`masking.heuristic_core`)
    study         one paper's reproduction in `interp.studies`; `masking.Study` is a result type
                  (several masks of one task), named before the studies existed, kept for its saved tag
    kind          a sweep job's kind (`interp.sweep_jobs.KINDS`); elsewhere only as a field of a
                  saved record (a site's kind, a probing score's kind, an SVA subject's kind)
    probing       parameter probing: pruning weights to find the ones a domain needs (`interp.probing`),
                  not a classifier trained on activations
"""

from interp import hooks, interventions, metrics, run, sites, tasks
from interp.errors import InterpError
from interp.hooks import hooks as hooked
from interp.model import FAMILIES, build_tiny, describe, load
from interp.results import Grid
from interp.tasks.base import Task

_LAZY = (
    "patching", "lens", "circuits", "masking", "simplify", "cores", "steering", "probing", "grafting", "studies", "sweep",
    "zoo", "train", "plot", "report", "circuit_view", "gguf", "features",
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
