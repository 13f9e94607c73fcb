"""What a heuristic-core budget costs: its time on this CPU from the measured seconds per
seed-step, and a GPU estimate (labelled one in the doc). A zoo model on a GPU is bound by the
host-side work of a step: its torch ops, counted here on one row, each at the calibrated per-op
cost (interp.studies.gpu_estimate); a real model is not, so its CPU hours are scaled by its forward
profile (calibrated the same way)."""

from __future__ import annotations

import time
from typing import Any, Callable

from interp import masking, tasks
from interp.studies.gpu_estimate import estimate, forward_profile, leaf_ops, load_calibration, on_gpu, summary

__all__ = ["cost", "host_step_ops", "host_step_seconds", "recalibrate_gpu", "timing"]


def host_step_seconds(model, train: tasks.Task, recipe: dict[str, Any], steps: int = 30) -> float:
    """Seconds per step of `learn_mask` (with `recipe`'s options) on one row, one seed: the host-side
    part of a step (Python, hooks, optimizer, kernel launches) on this CPU, where the arithmetic of a
    zoo model is almost free."""
    t0 = time.perf_counter()
    masking.learn_mask(model, train, sparsity=0.5, seed=0, steps=steps, batch_size=1, progress=False, **recipe)
    return (time.perf_counter() - t0) / steps


def host_step_ops(model, train: tasks.Task, recipe: dict[str, Any], steps: tuple[int, int] = (2, 4)) -> int:
    """Torch ops of one step of `learn_mask` on one row (gpu_estimate.leaf_ops of a profiler trace):
    the difference between two runs of `steps` steps over their difference, so set-up is not counted."""
    from torch.profiler import ProfilerActivity, profile

    counts = []
    for n in steps:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            masking.learn_mask(model, train, sparsity=0.5, seed=0, steps=n, batch_size=1, progress=False, **recipe)
        counts.append(leaf_ops(prof))
    return round((counts[1] - counts[0]) / (steps[1] - steps[0]))


def cost(out: dict[str, Any], configs: list[dict[str, Any]], seeds_per_forward: int, real_batch: int,
         model_of: Callable[[str], Any], train_of: Callable[[str], tasks.Task], recipe: dict[str, Any]) -> dict[str, Any]:
    """The `timing` block of the study's JSON: the host step measured and its ops counted on the first
    zoo model, a forward profile of each real model at its batch, then `timing`."""
    zoo = [s for s in out["models"] if s.startswith("zoo:")]
    host = host_step_seconds(model_of(zoo[0]), train_of(zoo[0]), recipe) if zoo else None
    ops = {"model": zoo[0], "ops": host_step_ops(model_of(zoo[0]), train_of(zoo[0]), recipe)} if zoo else None
    profiles = {s: forward_profile(model_of(s), real_batch, int(train_of(s).clean.shape[1]))
                for s in out["models"] if not s.startswith("zoo:")}
    return timing(out, configs, host, seeds_per_forward, profiles, host_ops=ops)


def timing(out: dict[str, Any], configs: list[dict[str, Any]], host_step: float | None, seeds_per_forward: int,
           profiles: dict[str, dict[str, Any]] | None = None, host_ops: dict[str, Any] | None = None,
           cal: dict[str, Any] | None = None) -> dict[str, Any]:
    """The budget's time on this CPU from the measured seconds per seed-step (per model), and a GPU
    estimate: a model with a forward profile (`profiles`), its CPU hours scaled by it; any other (the
    zoo), every group of `seeds_per_forward` seeds costing steps x a GPU step: `host_ops` ({"model",
    "ops"}: a step's counted ops) at the calibrated per-op cost when given, else `host_step` (this
    CPU's host-side step). `gpu_hours_estimate` is the high end; `gpu_hours_range` the calibrated range."""
    profiles = profiles or {}
    cal = load_calibration() if host_ops is not None and cal is None else cal
    per_model = {}
    for spec, m in out["models"].items():
        mine = [c for c in configs if c["model"] == spec]
        seed_steps = sum(c["steps"] for c in mine)
        rate = m.get("seconds_per_seed_step")
        row = {"seed_steps": seed_steps, "cpu_hours": None if rate is None else round(seed_steps * rate / 3600, 2)}
        if spec in profiles:
            _scaled(row, profiles[spec])
        elif host_ops is not None:
            steps = -(-len(mine) // max(1, seeds_per_forward)) * mine[0]["steps"]
            row["gpu_step_groups"] = steps
            _host_bound(row, host_ops["ops"], cal)
        else:
            groups = -(-len(mine) // max(1, seeds_per_forward))
            row["gpu_hours_estimate"] = None if host_step is None else round(groups * mine[0]["steps"] * host_step / 3600, 2)
        per_model[spec] = row
    known = [v["cpu_hours"] for v in per_model.values()]
    out_t = {"host_step_s": None if host_step is None else round(host_step, 4), "per_model": per_model, "profiles": profiles,
             "cpu_hours": None if None in known else round(sum(known), 2)}
    if host_ops is not None:
        out_t.update(host_step_ops=host_ops, calibration=summary(cal))
    return out_t


def _host_bound(row: dict[str, Any], ops: int, cal: dict[str, Any]) -> None:
    """A zoo model's GPU hours: its batched steps (`gpu_step_groups`) x a step's ops at the calibrated cost."""
    fit = row["gpu_step_groups"] * ops * cal["us_per_op"] * 1e-6 / 3600
    row["gpu_hours_range"] = [round(fit * e, 4) for e in cal["error"]]
    row["gpu_hours_estimate"] = row["gpu_hours_range"][1]


def _scaled(row: dict[str, Any], profile: dict[str, Any]) -> None:
    """A profiled model's GPU hours: its CPU hours scaled by its forward profile; the range's high end,
    and the range (the calibration's error) beside it."""
    gpu = on_gpu(row["cpu_hours"], profile)
    row["gpu_hours_estimate"] = None if gpu is None else round(gpu[1], 4)
    if gpu is not None and "calibration" in profile:
        row["gpu_hours_range"] = [round(g, 4) for g in gpu]


def recalibrate_gpu(result: dict[str, Any], cal: dict[str, Any] | None = None) -> dict[str, Any]:
    """`result` with the GPU estimate of its `timing` block re-derived from the stored counts, CPU times
    and CPU hours under the GPU calibration (interp.studies.gpu_estimate.load_calibration); nothing
    else changes, nothing is re-timed."""
    import copy

    cal = load_calibration() if cal is None else cal
    out = copy.deepcopy(result)
    t = out["timing"]
    for spec, p in t.get("profiles", {}).items():
        t["profiles"][spec] = estimate(p, cal)
        _scaled(t["per_model"][spec], t["profiles"][spec])
    if t.get("host_step_ops") is not None:
        t["calibration"] = summary(cal)
        for spec, row in t["per_model"].items():
            if "gpu_step_groups" in row:
                _host_bound(row, t["host_step_ops"]["ops"], cal)
    return out
