"""One GPU's time for a study measured on this CPU: an estimate, scaled from one measured forward and
calibrated against forwards measured on a GPU.

A study's units spend their time in forwards (and backwards) of one model, so its GPU time is about
its measured CPU time times (GPU forward / CPU forward). The CPU forward is timed here; the GPU
forward is the largest of three lower bounds computed from the same forward's counted work: its
leaf torch ops times a per-op host cost (Python, hooks, kernel launch), its weight bytes over memory
bandwidth, and its FLOPs over peak throughput. Written by hand: no library predicts a GPU's time from
a CPU run; this is the smallest model that says which bound a forward of this size hits.

The per-op cost is not assumed: it is fitted to the measured GPU forwards of
`interp/data/gpu_calibration.json` (`load_calibration`), and the spread of measured / estimated over
those forwards after the fit (`error`) is carried into every estimate: a GPU time is given as the
range [fit x error low, fit x error high]. Bandwidth and FLOP rates stay assumed (no calibration
forward was bound by them). An estimate, not a measurement: the doc says so beside every number.

Calibration file (format "interp.gpu_calibration/1"): `device`, `date` ("YYYY-MM"), `source`, `cite`
(a short label of the source, kept in each study JSON's calibration block), `bounds_assumed` ({"gb_per_s", "tflops"}) and
`points`, each {"model", "batch", "seq", "measured_ms", "ops", "weight_bytes", "flops"}, where
`measured_ms` is a number or a [low, high] range (a source that gives one range over several models),
and ops/bytes/FLOPs are what `forward_profile` counts for that forward. Its `include` list names
benchmark JSONs measured on a GPU (paths relative to the calibration file, e.g. "gpu.json" for
`benchmarks/gpu.json`, or {"path", "date", "device"} to supply what the JSON lacks). From such a JSON
(top level: `device` "cuda...", a GPU name in `gpu` or `device_name`, `date` "YYYY-MM[-DD]", `rows`),
each row whose `what` starts with "one bridge forward" is a point: {"what": "one bridge forward,
batch 20 x 1 token", "model": spec, "batch": 20, "seq": 1, "interp_s": seconds (or "ms"), "dtype":
"float32" (other dtypes are skipped: the studies' forwards are float32), and optionally "ops",
"weight_bytes", "flops" (else taken from the calibration point of the same model and shape)}; a row
with an `error` (it failed) is skipped. benchmarks/gpu.py's `forward` section writes such rows. A
measured row replaces the file's point of the same model and shape.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable

import torch

from interp.errors import InterpError

CALIBRATION = Path(__file__).resolve().parents[1] / "data" / "gpu_calibration.json"  # shipped in the wheel
FORMAT = "interp.gpu_calibration/1"
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


# aten ops that launch no kernel on a GPU (views, allocation, metadata) or only through the ops they call
NO_KERNEL = frozenset({
    "view", "_unsafe_view", "as_strided", "reshape", "expand", "expand_as", "t", "transpose", "unsqueeze", "squeeze",
    "select", "slice", "permute", "unflatten", "flatten", "split", "chunk", "unbind", "narrow", "view_as", "alias",
    "empty", "empty_strided", "empty_like", "resize_", "resolve_conj", "resolve_neg", "result_type", "detach", "lift_fresh",
    "dropout", "to", "contiguous", "linear", "matmul", "size", "stride", "is_nonzero", "item", "_local_scalar_dense",
})


def leaf_ops(prof) -> int:
    """Kernels a torch.profiler trace (CPU) would launch on a GPU: per top-level aten op, the deepest
    ops under it that do work (an op whose children launch nothing counts once; views, allocations
    and metadata ops in NO_KERNEL count nothing)."""
    def kernels(e) -> int:
        inner = sum(kernels(c) for c in e.cpu_children if c.name.startswith("aten::"))
        return inner if inner else int(e.name.removeprefix("aten::") not in NO_KERNEL)

    roots = [e for e in prof.events() if e.name.startswith("aten::")
             and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))]
    return sum(kernels(e) for e in roots)


def _bad(path: Path, what: str) -> InterpError:
    return InterpError(f"GPU calibration {path}: {what} (see interp.studies.gpu_estimate's docstring for the format; "
                       f"the committed one is {CALIBRATION}; $INTERP_GPU_CALIBRATION names another)")


def _point(p: dict[str, Any], path: Path, where: str) -> dict[str, Any]:
    """One calibration point, checked: measured_ms as a [low, high] pair (equal ends for one value)."""
    need = ("model", "batch", "seq", "measured_ms", "ops", "weight_bytes", "flops")
    missing = [k for k in need if k not in p]
    if missing:
        raise _bad(path, f"{where} lacks {missing}; a point needs {list(need)}")
    ms = p["measured_ms"]
    ms = [ms, ms] if isinstance(ms, (int, float)) and not isinstance(ms, bool) else ms
    if not (isinstance(ms, list) and len(ms) == 2 and all(isinstance(x, (int, float)) and x > 0 for x in ms) and ms[0] <= ms[1]):
        raise _bad(path, f"{where}: measured_ms {p['measured_ms']!r} is neither a positive number nor a [low, high] pair")
    if not all(isinstance(p[k], int) and p[k] >= 0 for k in ("ops", "weight_bytes", "flops")) or p["ops"] < 1:
        raise _bad(path, f"{where}: ops (>= 1), weight_bytes and flops must be counts, got "
                         f"{[p[k] for k in ('ops', 'weight_bytes', 'flops')]}")
    return {**p, "measured_ms": [float(ms[0]), float(ms[1])]}


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise _bad(path, "no such file") from None
    except json.JSONDecodeError as e:
        raise _bad(path, f"not JSON ({e})") from None


def _measured_rows(entry: Any, base: Path, points: dict[tuple, dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    """The points of one included benchmark JSON (its "one bridge forward" rows on a GPU)."""
    entry = {"path": entry} if isinstance(entry, str) else entry
    if not isinstance(entry, dict) or "path" not in entry:
        raise _bad(path, f"include entry {entry!r} is neither a path nor {{'path': ...}}")
    run_path = base / entry["path"]
    run = _read(run_path)
    if not isinstance(run, dict) or not isinstance(run.get("rows"), list):
        raise _bad(path, f"included {run_path} has no `rows` list")
    device = str(run.get("device", entry.get("device", "")))
    name = entry.get("device") if not str(entry.get("device", "")).startswith("cuda") else None
    name = run.get("gpu") or run.get("device_name") or name
    if not device.startswith("cuda") and not name:
        raise _bad(path, f"included {run_path} was measured on {device!r}, not on a GPU: a CPU run cannot calibrate a GPU estimate")
    out = []
    for i, row in enumerate(run["rows"]):
        if (not str(row.get("what", "")).startswith("one bridge forward") or row.get("dtype", "float32") != "float32"
                or "error" in row):  # another row, another dtype, or a row that failed (it records its error)
            continue
        where = f"{run_path} row {i}"
        key = (row.get("model"), row.get("batch"), row.get("seq"))
        counted = {k: row[k] if k in row else points.get(key, {}).get(k) for k in ("ops", "weight_bytes", "flops")}
        if None in counted.values():
            raise _bad(path, f"{where} ({key}) has no ops/weight_bytes/flops and no calibration point of the same model "
                             "and shape to take them from: count them with forward_profile and add them to the row")
        ms = row["ms"] if "ms" in row else 1e3 * row["interp_s"] if "interp_s" in row else None
        date = row.get("date") or run.get("date") or entry.get("date")
        if ms is None or not date:
            raise _bad(path, f"{where} needs a time (interp_s or ms) and a date (row, JSON or include entry)")
        out.append(_point({"model": key[0], "batch": key[1], "seq": key[2], "measured_ms": ms, **counted,
                           "device": str(row.get("gpu") or name or device), "date": str(date), "cite": run_path.name},
                          path, where))
    return out


def load_calibration(path: str | Path | None = None) -> dict[str, Any]:
    """The calibration at `path` (default: $INTERP_GPU_CALIBRATION, else the repository's
    interp/data/gpu_calibration.json; an installed copy of interp has none, so set the variable there),
    with the GPU benchmark JSONs it includes: its points, the per-op host cost fitted to them
    (`us_per_op`, minimising the largest ratio of measured to estimated either way, a range point
    counted at its worst end) and the error that remains (`error`: [min, max] of measured / estimated
    over the points)."""
    path = Path(path or os.environ.get("INTERP_GPU_CALIBRATION") or CALIBRATION)
    raw = _read(path)
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise _bad(path, f"format is {raw.get('format') if isinstance(raw, dict) else type(raw).__name__!r}, not {FORMAT!r}")
    for k in ("device", "date", "source", "cite", "points", "bounds_assumed"):
        if k not in raw:
            raise _bad(path, f"no `{k}`")
    if not isinstance(raw["points"], list) or not raw["points"]:
        raise _bad(path, "`points` must be a non-empty list")
    points = {}
    for i, p in enumerate(raw["points"]):
        q = _point(p, path, f"point {i}")
        points[(q["model"], q["batch"], q["seq"])] = {"device": raw["device"], "date": raw["date"], "cite": raw["cite"], **q}
    for entry in raw.get("include", []):
        for q in _measured_rows(entry, path.parent, points, path):
            points[(q["model"], q["batch"], q["seq"])] = q
    bounds = {"gb_per_s": float(raw["bounds_assumed"]["gb_per_s"]), "tflops": float(raw["bounds_assumed"]["tflops"])}
    us, error = fit(list(points.values()), bounds)
    date = max(p["date"] for p in points.values())
    try:
        year, month = int(date[:4]), int(date[5:7])
    except ValueError:
        raise _bad(path, f"date {date!r} is not YYYY-MM") from None
    devices = sorted({p["device"] for p in points.values()})
    return {"us_per_op": us, "error": error, **bounds, "forwards": len(points), "devices": " and ".join(devices),
            "date": date[:7], "year": year, "month": month, "month_name": MONTHS[month - 1],
            "sources": sorted({p["cite"] for p in points.values()}),
            "file": path.name, "points": list(points.values())}


def gpu_seconds(ops: int, weight_bytes: int, flops: int, us_per_op: float, gb_per_s: float, tflops: float) -> float:
    """One forward on the GPU: the largest of its per-op host, memory and compute bounds."""
    return max(ops * us_per_op * 1e-6, weight_bytes / (gb_per_s * 1e9), flops / (tflops * 1e12))


def fit(points: list[dict[str, Any]], bounds: dict[str, float]) -> tuple[float, list[float]]:
    """The per-op cost (µs) that makes the worst ratio of measured to estimated smallest either way
    (the geometric middle of the lowest and highest per-op cost the points imply), fitted on the
    points bound by their ops at that cost; and [min, max] of measured / estimated over all points."""
    use = points
    for _ in range(3):  # drop points a memory or FLOP bound decides at the fitted cost, refit
        implied = [(p["measured_ms"][0] * 1e3 / p["ops"], p["measured_ms"][1] * 1e3 / p["ops"]) for p in use]
        us = math.sqrt(min(lo for lo, _ in implied) * max(hi for _, hi in implied))
        kept = [p for p in points if gpu_seconds(p["ops"], p["weight_bytes"], p["flops"], us, **bounds) == p["ops"] * us * 1e-6]
        if not kept or kept == use:
            break
        use = kept
    ratios = [(p["measured_ms"][k] * 1e-3 / gpu_seconds(p["ops"], p["weight_bytes"], p["flops"], us, **bounds))
              for p in points for k in (0, 1)]
    return us, [min(ratios), max(ratios)]


def summary(cal: dict[str, Any]) -> dict[str, Any]:
    """What a profile keeps of the calibration (its JSON's `calibration` block; the docs read it)."""
    return {k: cal[k] for k in ("us_per_op", "error", "gb_per_s", "tflops", "forwards", "devices", "date", "year", "month",
                                "month_name", "sources", "file")}


def estimate(profile: dict[str, Any], cal: dict[str, Any] | None = None) -> dict[str, Any]:
    """`profile` (counted ops, weight bytes, FLOPs and the CPU forward's seconds, as stored) with its
    GPU estimate from the calibration: `gpu_forward_s_fit`, the range `gpu_forward_s` (the fit times
    the calibration's error) and `cpu_over_gpu`. Counts only: nothing is timed again."""
    cal = load_calibration() if cal is None else cal
    fitted = gpu_seconds(profile["ops"], profile["weight_bytes"], profile["flops"], cal["us_per_op"], cal["gb_per_s"], cal["tflops"])
    gpu = [fitted * e for e in cal["error"]]
    kept = {k: v for k, v in profile.items() if k not in ("assumed", "calibration", "gpu_forward_s_fit", "gpu_forward_s", "cpu_over_gpu")}
    return {**kept, "calibration": summary(cal), "gpu_forward_s_fit": fitted, "gpu_forward_s": gpu,
            "cpu_over_gpu": [profile["cpu_forward_s"] / g for g in gpu]}


def forward_profile(model, batch: int, seq: int, repeats: int = 3, cal: dict[str, Any] | None = None) -> dict[str, Any]:
    """One forward of `model` on `batch` x `seq` random tokens: its CPU time here (best of `repeats`,
    the study's one torch thread), its leaf ops, FLOPs and weight bytes, and the calibrated GPU
    estimate (`estimate`) with `cpu_over_gpu`, the speed-up it implies (one value per end of the range)."""
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    if batch < 1 or seq < 1:
        raise ValueError(f"forward_profile needs batch >= 1 and seq >= 1, got batch={batch}, seq={seq}")
    cal = load_calibration() if cal is None else cal
    vocab = int(model.cfg.d_vocab)
    tokens = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            model(tokens)
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                model(tokens)
                best = min(best, time.perf_counter() - t0)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                model(tokens)
            with FlopCounterMode(display=False) as flops:
                model(tokens)
    finally:
        torch.set_num_threads(threads)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return estimate({"batch": batch, "seq": seq, "cpu_forward_s": best, "ops": leaf_ops(prof),
                     "flops": int(flops.get_total_flops()), "weight_bytes": weight_bytes}, cal)


def calibration_words(num: Callable[..., str], cal: dict[str, Any]) -> str:
    """The calibrated per-op cost and the error left after the fit, as a doc says them: `num(*keys)`
    renders a value of a `calibration` block (bound to the JSON by the caller); `cal` is that block."""
    return (f"{num('us_per_op')} µs each (a host cost per op fitted to {num('forwards')} bridge forwards measured on one "
            f"{cal['devices']} in {cal['month_name']} {num('year')}, each with its source in `interp/data/{cal['file']}`; after that fit the estimate "
            f"was still off by {num('error', 0)}–{num('error', 1)} times, measured over estimated, so each GPU figure is "
            "that range)")


def bound_words(num: Callable[..., str], cal: dict[str, Any]) -> str:
    """How a doc says the calibrated GPU bound (`num` and `cal` as in `calibration_words`)."""
    return (f"the largest of its torch ops at {calibration_words(num, cal)}, its weight bytes at {num('gb_per_s')} GB/s and "
            f"its FLOPs at {num('tflops')} TFLOP/s (these two rates assumed: no calibration forward was bound by them)")


def on_gpu(cpu_time: float | int | None, profile: dict[str, Any]) -> list[float] | None:
    """A time measured (or scaled from measured units) on this CPU, on one GPU: a [low, high] estimate
    in the same unit (the calibration's error included)."""
    if cpu_time is None:
        return None
    return sorted(cpu_time / r for r in profile["cpu_over_gpu"])


def recalibrate(name: str, json_path: str | Path, doc_path: str | Path | None = None) -> Path:
    """Re-derive the GPU estimate of study `name`'s committed JSON under the calibration (its module's
    `recalibrate_gpu`: stored op counts and CPU times, nothing re-timed, nothing else changed), write
    it back, and refill the doc's regions from it when `doc_path` is given."""
    import importlib

    from interp.files.storage import write_text_atomic
    from interp.studies import protocol

    entry = protocol.get(name)
    module = importlib.import_module(entry.module)
    if not hasattr(module, "recalibrate_gpu"):
        raise InterpError(f"study {name!r} ({entry.module}) has no recalibrate_gpu(result, cal): its GPU estimate "
                          "cannot be re-derived from its JSON")
    path = Path(json_path)
    result = module.recalibrate_gpu(json.loads(path.read_text()), load_calibration())
    write_text_atomic(path, json.dumps(result, indent=2) + "\n")
    if doc_path is not None:
        entry.write_doc(path, doc_path)
    return path


if __name__ == "__main__":  # python -m interp.studies.gpu_estimate STUDY JSON [DOC]
    import sys

    if len(sys.argv) not in (3, 4):
        sys.exit("usage: python -m interp.studies.gpu_estimate STUDY JSON [DOC]  (STUDY as in `interp repro`)")
    print(f"recalibrated {recalibrate(*sys.argv[1:])}")
