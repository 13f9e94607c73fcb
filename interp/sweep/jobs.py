"""What a sweep job is: the job kinds (one registry), a job's resolved configuration and key, and
`run_job`, which computes one job's Grid on a loaded model.

Every executor (`interp.sweep`'s local one, `interp.sweep.ray_executor`'s Ray actors) calls
`run_job` and writes through `interp.sweep.store.Recorder`; neither takes a name from the package's
`__init__` (the config reader and the local executor), so an executor never closes an import cycle.
A job's kind is a name in `KINDS`, which maps it to its `JobKind`: the TOML keys it accepts beyond
the common ones, the defaults `resolved` fills in, a check of an experiment's values, and the
function that computes its Grid. `KINDS` is the one list of kinds: the config parser and the CLI
read it.

Words: an *experiment* is one `[[experiment]]` table; a *job* is one (experiment, model) pair; a
job's *kind* is one of the names in `KINDS` (not a task family, not an ablation), as `interp`'s
glossary uses the word: one of a closed set of variants.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from interp.interventions import ABLATIONS
from interp.metrics import TASK_METRICS as METRICS
from interp.results import Grid
from interp.sweep.store import Store

__all__ = ["ABLATIONS", "COMMON_KEYS", "KINDS", "METRICS", "VERSION", "Job", "JobKind", "job_id", "job_key", "resolved", "run_job"]

COMMON_KEYS = {"name": str, "kind": str, "model": str, "models": list, "task": str, "split": str, "n": int, "seed": int,
               "metric": str}
# bump when a job's code changes what it computes: every key changes with it
VERSION = 1


@dataclass(frozen=True)
class JobKind:
    """What one kind of sweep job takes and computes. `keys`: the TOML keys it takes beyond
    COMMON_KEYS (name -> type); `defaults`: what `resolved` fills in; `required`: keys with no default; `own_metric`: it scores
    the task's own metric (a `metric` key is refused); `check(exp)`: (key, why) for a bad value, or
    None; `compute(model, task, config, metric)`: the job's Grid (metric None: the task's own)."""

    compute: Callable[..., Grid]
    keys: dict[str, Any]
    defaults: dict[str, Any]
    required: tuple[str, ...] = ()
    own_metric: bool = False
    check: Callable[[dict[str, Any]], tuple[str, str] | None] = field(default=lambda exp: None)


def _check_site(exp):
    from interp.patching import SITES

    if exp.get("positions") not in (None, "index", "named", "mean"):
        return "positions", "must be 'index', 'named' or 'mean'"
    if exp.get("positions") is not None and not exp.get("by_pos", False):
        return "positions", "applies to a by-position sweep; set by_pos = true too"
    return None if exp.get("site") in SITES else ("site", f"{exp.get('site')!r} is not one of {list(SITES)}")


def _check_activation(exp):
    if exp.get("direction", "denoise") not in ("denoise", "noise"):
        return "direction", "must be 'denoise' or 'noise'"
    return _check_site(exp)


def _check_ablation(exp):
    return None if exp.get("ablation", "mean") in ABLATIONS else ("ablation", f"must be one of {', '.join(ABLATIONS)}")


def _check_mask(exp):
    if not 0.0 < exp.get("sparsity", 0.5) < 1.0:
        return "sparsity", "must lie in (0, 1)"
    if exp.get("steps", 200) < 1:
        return "steps", "must be >= 1"
    if not 0.0 < exp.get("lr", 0.2) < math.inf:
        return "lr", "must be a finite number > 0"
    return _check_ablation(exp)


def _heads(rows: list, size: int) -> bool:
    """Whether `rows` is a non-empty list of [layer, head, ...] lists of `size`, layer and head ints >= 0."""
    return bool(rows) and all(isinstance(r, list) and len(r) == size and all(
        isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in r[:2]) for r in rows)


def _check_path(exp):
    receivers = exp.get("receivers", "logits")
    if isinstance(receivers, str) and receivers != "logits":
        return "receivers", "must be 'logits' or a list of [layer, head, 'q'|'k'|'v']"
    if isinstance(receivers, list) and not (_heads(receivers, 3) and all(r[2] in ("q", "k", "v") for r in receivers)):
        return "receivers", "must be a non-empty list of [layer, head, 'q'|'k'|'v'] (layer and head ints >= 0)"
    if "senders" in exp and not _heads(exp["senders"], 2):
        return "senders", "must be a non-empty list of [layer, head] (ints >= 0); leave it out for every head"
    return None


def _activation(model, task, config, metric) -> Grid:
    from interp.patching import activation_patch

    return activation_patch(model, task, metric=metric, site=config["site"], by_pos=config["by_pos"],
                            positions=config["positions"], direction=config["direction"], progress=False)


def _attribution(model, task, config, metric) -> Grid:
    from interp.patching import attribution_patch

    return attribution_patch(model, task, metric=metric, site=config["site"], by_pos=config["by_pos"],
                             positions=config["positions"])


def _path(model, task, config, metric) -> Grid:
    from interp.patching import path_patch

    senders = [tuple(s) for s in config["senders"]] if config["senders"] is not None else None
    receivers = config["receivers"]
    receivers = receivers if receivers == "logits" else [tuple(r) for r in receivers]
    return path_patch(model, task, metric=metric, senders=senders, receivers=receivers, progress=False)


def _ablation(model, task, config, metric) -> Grid:
    from interp.masking import ablation_scan

    return ablation_scan(model, task, ablation=config["ablation"], mlps=config["mlps"], progress=False)


def _mask(model, task, config, metric) -> Grid:
    from interp.masking import learn_mask

    mask = learn_mask(model, task, sparsity=config["sparsity"], seed=config["seed"], steps=config["steps"],
                      include_mlps=config["mlps"], ablation=config["ablation"], lr=config["lr"], progress=False)
    return mask.to_grid()


_PATCH_KEYS = {"site": str, "by_pos": bool, "positions": str}
KINDS: dict[str, JobKind] = {
    "activation": JobKind(_activation, {**_PATCH_KEYS, "direction": str},
                          {"by_pos": False, "direction": "denoise", "positions": None}, ("site",), check=_check_activation),
    "attribution": JobKind(_attribution, _PATCH_KEYS, {"by_pos": False, "positions": None}, ("site",), check=_check_site),
    "path": JobKind(_path, {"senders": list, "receivers": (str, list)}, {"senders": None, "receivers": "logits"},
                    check=_check_path),
    # interp.masking.ablation_scan
    "ablation": JobKind(_ablation, {"ablation": str, "mlps": bool}, {"ablation": "mean", "mlps": True}, own_metric=True,
                        check=_check_ablation),
    # a learned hard-concrete mask (interp.masking.learn_mask); `seed` seeds the gates and the task
    "mask": JobKind(_mask, {"ablation": str, "mlps": bool, "sparsity": (float, int), "steps": int, "lr": (float, int)},
                    {"ablation": "mean", "mlps": True, "sparsity": 0.5, "steps": 200, "lr": 0.2}, own_metric=True,
                    check=_check_mask),
}

_TASK_METRIC: dict[tuple[str, str], str] = {}


def _task_metric(task: str, split: str) -> str:
    if (task, split) not in _TASK_METRIC:
        from interp import tasks

        _TASK_METRIC[task, split] = tasks.make(task, split=split, n=2, seed=0).metric
    return _TASK_METRIC[task, split]


def resolved(exp: dict[str, Any], model: str) -> dict[str, Any]:
    """The full configuration of one job: every key that affects its result, defaults filled in."""
    kind = KINDS[exp["kind"]]
    config = {"experiment": exp["name"], "kind": exp["kind"], "model": model, "task": exp["task"],
              "split": exp["split"], "n": exp.get("n", 32), "seed": exp.get("seed", 0)}
    if not kind.own_metric:
        config["metric"] = exp.get("metric") or _task_metric(exp["task"], exp["split"])
    config.update({k: exp[k] for k in kind.required})
    config.update({k: exp.get(k, v) for k, v in kind.defaults.items()})
    for k in ("sparsity", "lr"):  # `lr = 1` and `lr = 1.0` are one configuration, so one key
        if k in config:
            config[k] = float(config[k])
    return config


def job_key(config: dict[str, Any]) -> str:
    """The key of a resolved configuration: its entry's key in the sweep's `Store`."""
    return Store("", VERSION).key(config)


def job_id(exp: dict[str, Any], model: str) -> str:
    """The job's file stem: readable name and model, then the key of its resolved configuration."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", model).strip("-")
    return f"{exp['name']}__{safe}__{job_key(resolved(exp, model))}"


class Job(dict):
    """One (experiment, model) pair: id, key, config (resolved), model (spec); a dict, so it pickles."""

    @classmethod
    def make(cls, exp: dict[str, Any], model: str) -> Job:
        config = resolved(exp, model)
        return cls(id=job_id(exp, model), key=job_key(config), config=config, model=model)


def run_job(config: dict[str, Any], model) -> Grid:
    """Compute one job's Grid on a loaded model (what every executor calls)."""
    from interp import tasks
    from interp.metrics import for_task

    task = tasks.make(config["task"], split=config["split"], n=config["n"], seed=config["seed"])
    kind = KINDS[config["kind"]]
    # the task's own metric lets patching unembed only at the answer positions
    metric = None if kind.own_metric or config["metric"] == task.metric else for_task(task, config["metric"])
    return kind.compute(model, task, config, metric)
