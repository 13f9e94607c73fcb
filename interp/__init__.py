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

The top level is grouped by floor, each importing only from those before it: errors, tensors and
sites; registry; files; tasks; model; hooks; interventions; results, metrics and memory; run; the
analyses (patching, lens, circuits, masking, simplify, cores, steering, probing, grafting,
features); views (plot, report); sweep; zoo; studies (README, "What is where"). A module that moved
still imports from its old name (`_MOVED` below).

Words, one meaning each across interp (where an older name says otherwise, the module's
docstring says which meaning it has):

    site          a hook point: a full hook name, or a short name + layer/head/pos (`interp.sites`)
    intervention  a frozen dataclass that transforms activations at its sites; a weight edit
                  replaces parameters; a variant is the list of both that one run applies (`interp.run`)
    ablation      what replaces an activation: "zero", "mean", "resample" or another registered style
                  (`interventions.AblationStyle`; their names: `interventions.ABLATIONS`)
    task          clean/corrupt token rows with answers and a metric (`interp.Task`); a task family
                  is a module of `interp.tasks`; a split is one of its ID/OOD parts
    core          an algorithmic core: a small subspace that carries a computation (`interp.cores`);
                  the heuristic core is that paper's set of heads (`masking.heuristic_core`)
    study         one paper's reproduction in `interp.studies`; `masking.Study` is a result type
                  (several masks of one task), named before the studies existed, kept for its saved tag
    kind          which one of a small closed set of variants a thing is, named by a string; the set
                  is written where the thing's type is defined: a sweep job's kind (`sweep.jobs.KINDS`),
                  a site's activation layout (`sites.Kind`), a weight's place in its block
                  (`probing.scores.KINDS`), a dictionary's ("sae" or "transcoder", `Dictionary.kind`),
                  weight scores' method (`meta["kind"]`), an SVA subject's phrase; a circuit graph's
                  node has a role, not a kind
    probing       parameter probing: pruning weights to find the ones a domain needs (`interp.probing`),
                  not a classifier trained on activations
"""

import sys as _sys

# Modules that moved when the top level was grouped by role: old name -> new name. `interp.plot`
# and `interp.report` are how users spell the views (README, notebooks), so they stay quiet
# aliases; the other old names import with one DeprecationWarning that gives the new name.
_MOVED = {
    "interp.plot": "interp.views.plot", "interp.report": "interp.views.report",
    "interp.circuit_view": "interp.views.circuit", "interp.bundle": "interp.views.bundle",
    "interp.sweep_jobs": "interp.sweep.jobs", "interp.sweep_store": "interp.sweep.store",
    "interp.sweep_ray": "interp.sweep.ray_executor", "interp.train": "interp.zoo.train",
    "interp.gguf": "interp.model.gguf", "interp.load_cache": "interp.model.load_cache",
    "interp.storage": "interp.files.storage", "interp.validate": "interp.files.validate",
}
_QUIET = {"interp.plot", "interp.report"}


class _MovedModules:
    """A `sys.meta_path` finder for `_MOVED`'s old names: `import interp.plot` gives the very module
    `interp.views.plot` (one module object, so state and monkeypatches are shared)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in _MOVED:
            return None
        import importlib.util

        return importlib.util.spec_from_loader(name, _MovedModules)

    @staticmethod
    def create_module(spec):
        import importlib

        module = importlib.import_module(_MOVED[spec.name])
        spec.loader_state = module.__spec__
        if spec.name not in _QUIET:
            import warnings

            warnings.warn(f"{spec.name} moved to {_MOVED[spec.name]}; import it from there", DeprecationWarning,
                          stacklevel=_importer_level())
        return module

    @staticmethod
    def exec_module(module):
        # the import system stamped the old name's spec on the module: give it back its own, so
        # `importlib.reload` sees the real module
        module.__spec__ = module.__spec__.loader_state


def _importer_level() -> int:
    """The stack level of the first frame outside the import machinery and this file: the
    `import` statement (or `interp.x` attribute) a deprecation should point at. `warnings` does not
    count importlib's bootstrap frames, so neither does this."""
    frame, level = _sys._getframe(1), 1
    while frame is not None and (frame.f_code.co_filename == __file__ or "importlib" in frame.f_code.co_filename):
        frame = frame.f_back
        if frame is not None and "_bootstrap" not in frame.f_code.co_filename:
            level += 1
    return level


# first, so an old name never reaches a stale file; a re-imported interp replaces its old finder
_sys.meta_path[:] = [_MovedModules, *(f for f in _sys.meta_path if getattr(f, "__name__", "") != "_MovedModules")]

from interp import hooks, interventions, metrics, run, sites, tasks
from interp.errors import InterpError
from interp.hooks import hooks as hooked
from interp.model import FAMILIES, build_tiny, describe, load
from interp.results import Grid
from interp.tasks.base import Task

_LAZY = (
    "patching", "lens", "circuits", "masking", "simplify", "cores", "steering", "probing", "grafting", "studies", "sweep",
    "zoo", "plot", "report", "views", "files", "features", "memory", "registry",
)


def __getattr__(name: str):
    """Analysis modules load on first use (`interp.patching`), keeping `import interp` light."""
    if name in _LAZY or f"interp.{name}" in _MOVED:
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
