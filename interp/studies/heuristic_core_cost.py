"""What a heuristic-core budget costs: its time on this CPU from the measured seconds per
seed-step, and a GPU estimate (labelled one in the doc). A zoo model on a GPU is bound by the
host-side work of a step, measured here on one row; a real model is not, so its CPU hours are
scaled by its forward profile (interp.studies.gpu_estimate)."""

from __future__ import annotations

import time
from typing import Any, Callable

from interp import masking, tasks
from interp.studies.gpu_estimate import forward_profile, on_gpu

__all__ = ["cost", "host_step_seconds", "timing"]


def host_step_seconds(model, train: tasks.Task, recipe: dict[str, Any], steps: int = 30) -> float:
    """Seconds per step of `learn_mask` (with `recipe`'s options) on one row, one seed: the host-side
    part of a step (Python, hooks, optimizer, kernel launches), what a step costs where the
    arithmetic is free. A GPU runs the zoo's tiny models at about this rate."""
    t0 = time.perf_counter()
    masking.learn_mask(model, train, sparsity=0.5, seed=0, steps=steps, batch_size=1, progress=False, **recipe)
    return (time.perf_counter() - t0) / steps


def cost(out: dict[str, Any], configs: list[dict[str, Any]], seeds_per_forward: int, real_batch: int,
         model_of: Callable[[str], Any], train_of: Callable[[str], tasks.Task], recipe: dict[str, Any]) -> dict[str, Any]:
    """The `timing` block of the study's JSON: the host step measured on the first zoo model, a
    forward profile of each real model at its batch, then `timing`."""
    zoo = [s for s in out["models"] if s.startswith("zoo:")]
    host = host_step_seconds(model_of(zoo[0]), train_of(zoo[0]), recipe) if zoo else None
    profiles = {s: forward_profile(model_of(s), real_batch, int(train_of(s).clean.shape[1]))
                for s in out["models"] if not s.startswith("zoo:")}
    return timing(out, configs, host, seeds_per_forward, profiles)


def timing(out: dict[str, Any], configs: list[dict[str, Any]], host_step: float | None, seeds_per_forward: int,
           profiles: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The budget's time on this CPU from the measured seconds per seed-step (per model), and a GPU
    estimate: a model with a forward profile (`profiles`), its CPU hours scaled by it (the high end);
    any other (the zoo), every group of `seeds_per_forward` seeds costing steps x `host_step`."""
    profiles = profiles or {}
    per_model = {}
    for spec, m in out["models"].items():
        mine = [c for c in configs if c["model"] == spec]
        seed_steps = sum(c["steps"] for c in mine)
        rate = m.get("seconds_per_seed_step")
        cpu_hours = None if rate is None else round(seed_steps * rate / 3600, 2)
        if spec in profiles:
            gpu = on_gpu(cpu_hours, profiles[spec])
            gpu = None if gpu is None else round(gpu[1], 4)
        else:
            groups = -(-len(mine) // max(1, seeds_per_forward))
            gpu = None if host_step is None else round(groups * mine[0]["steps"] * host_step / 3600, 2)
        per_model[spec] = {"seed_steps": seed_steps, "cpu_hours": cpu_hours, "gpu_hours_estimate": gpu}
    known = [v["cpu_hours"] for v in per_model.values()]
    return {"host_step_s": None if host_step is None else round(host_step, 4), "per_model": per_model, "profiles": profiles,
            "cpu_hours": None if None in known else round(sum(known), 2)}
