"""Scripted sweeps: `interp sweep CONFIG.toml --out DIR` runs a list of experiments, resumably.

A config is a list of `[[experiment]]` tables; each runs on one or more models:

    [[experiment]]
    name = "ioi-heads"            # unique; names the result files
    kind = "activation"           # activation | attribution | path
    models = ["zoo:lm-gpt2", "zoo:lm-llama"]   # or model = "..."
    task = "ioi"                  # a name from interp.tasks.SPLITS
    split = "test"
    n = 32                        # examples (default 32)
    seed = 0
    site = "z"                    # activation / attribution: a site of interp.patching.SITES
    by_pos = false
    direction = "denoise"         # activation only
    metric = "logit_diff"         # a metric name of interp.metrics.for_task
    # path only: senders = [[0, 1], ...] (default: every head); receivers = "logits" or [[1, 2, "q"], ...]

Each (experiment, model) job writes DIR/grids/JOB.safetensors atomically and then rewrites
DIR/results.json; a rerun skips every job whose file exists, so a sweep killed at any moment
(even kill -9) resumes where it stopped and ends with the same results. The whole config is
validated before any model loads.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from interp.errors import InterpError
from interp.results import Grid, write_text_atomic

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["ConfigError", "KINDS", "job_id", "load_config", "run"]

KINDS = ("activation", "attribution", "path")
_COMMON = {"name": str, "kind": str, "model": str, "models": list, "task": str, "split": str, "n": int, "seed": int, "metric": str}
_KEYS = {
    "activation": {**_COMMON, "site": str, "by_pos": bool, "direction": str, "positions": str},
    "attribution": {**_COMMON, "site": str, "by_pos": bool, "positions": str},
    "path": {**_COMMON, "senders": list, "receivers": (str, list)},
}


class ConfigError(InterpError):
    """A malformed sweep config; raised before any model loads."""


def _fail(where: str, key: str, why: str) -> ConfigError:
    return ConfigError(f"{where}: key {key!r}: {why}")


def load_config(path: str | Path) -> list[dict[str, Any]]:
    """Parse and validate a sweep config; return the experiments with defaults filled in."""
    from interp.patching import SITES
    from interp.tasks import SPLITS

    try:
        raw = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML: {err}") from None
    unknown_top = set(raw) - {"experiment"}
    if unknown_top:
        raise ConfigError(f"{path}: unknown top-level key(s) {sorted(unknown_top)}; experiments go in [[experiment]] tables")
    experiments = raw.get("experiment")
    if not isinstance(experiments, list) or not experiments:
        raise ConfigError(f"{path}: key 'experiment': need at least one [[experiment]] table")
    seen: set[str] = set()
    out = []
    for i, exp in enumerate(experiments):
        where = f"{path}: experiment #{i + 1}" + (f" ({exp['name']!r})" if isinstance(exp.get("name"), str) else "")
        kind = exp.get("kind")
        if kind not in KINDS:
            raise _fail(where, "kind", f"{kind!r} is not one of {KINDS}")
        for key, value in exp.items():
            if key not in _KEYS[kind]:
                raise _fail(where, key, f"not a {kind} experiment key; valid keys: {sorted(_KEYS[kind])}")
            want = _KEYS[kind][key]
            if not isinstance(value, want) or (want is int and isinstance(value, bool)):
                raise _fail(where, key, f"expected {getattr(want, '__name__', want)}, got {type(value).__name__} {value!r}")
        for key in ("name", "task", "split"):
            if key not in exp:
                raise _fail(where, key, "missing")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", exp["name"]):
            raise _fail(where, "name", "use letters, digits, '-', '_' or '.' only (it names files)")
        if exp["name"] in seen:
            raise _fail(where, "name", f"{exp['name']!r} is used twice")
        seen.add(exp["name"])
        if ("model" in exp) == ("models" in exp):
            raise _fail(where, "model", "give exactly one of 'model' or 'models'")
        models = [exp["model"]] if "model" in exp else exp["models"]
        if not models or not all(isinstance(m, str) for m in models):
            raise _fail(where, "models", "must be a non-empty list of model specs")
        if exp["task"] not in SPLITS:
            raise _fail(where, "task", f"{exp['task']!r} is not one of {sorted(SPLITS)}")
        if exp["split"] not in SPLITS[exp["task"]]:
            raise _fail(where, "split", f"{exp['split']!r} is not a {exp['task']} split; valid: {SPLITS[exp['task']]}")
        if kind != "path":
            if exp.get("site") not in SITES:
                raise _fail(where, "site", f"{exp.get('site')!r} is not one of {list(SITES)}")
        if exp.get("direction", "denoise") not in ("denoise", "noise"):
            raise _fail(where, "direction", "must be 'denoise' or 'noise'")
        if exp.get("metric", "logit_diff") not in ("logit_diff", "prob", "accuracy", "binary_accuracy"):
            raise _fail(where, "metric", "must be logit_diff, prob, accuracy or binary_accuracy")
        if exp.get("n", 32) < 1:
            raise _fail(where, "n", "must be >= 1")
        receivers = exp.get("receivers", "logits")
        if isinstance(receivers, str) and receivers != "logits":
            raise _fail(where, "receivers", "must be 'logits' or a list of [layer, head, 'q'|'k'|'v']")
        if isinstance(receivers, list) and not all(
            isinstance(r, list) and len(r) == 3 and r[2] in ("q", "k", "v") for r in receivers
        ):
            raise _fail(where, "receivers", "each receiver is [layer, head, 'q'|'k'|'v']")
        out.append({**exp, "models": models, "kind": kind})
    for exp in out:  # model specs last: cheap checks first, then the file system / hub
        from interp.model import resolve

        for spec in exp["models"]:
            try:
                resolve(spec)
            except (OSError, ValueError) as err:
                raise _fail(f"{path}: experiment {exp['name']!r}", "models", str(err)) from None
    return out


def job_id(exp: dict[str, Any], model: str) -> str:
    return f"{exp['name']}__{re.sub(r'[^A-Za-z0-9_.-]+', '-', model).strip('-')}"


def _run_job(exp: dict[str, Any], model) -> Grid:
    from interp import patching, tasks
    from interp.metrics import for_task

    task = tasks.make(exp["task"], split=exp["split"], n=exp.get("n", 32), seed=exp.get("seed", 0))
    # the task's own metric lets patching unembed only at the answer positions
    metric = None if exp.get("metric", task.metric) == task.metric else for_task(task, exp["metric"])
    if exp["kind"] == "activation":
        return patching.activation_patch(
            model, task, metric=metric, site=exp["site"], by_pos=exp.get("by_pos", False),
            positions=exp.get("positions"), direction=exp.get("direction", "denoise"), progress=False,
        )
    if exp["kind"] == "attribution":
        return patching.attribution_patch(model, task, metric=metric, site=exp["site"], by_pos=exp.get("by_pos", False),
                                          positions=exp.get("positions"))
    senders = [tuple(s) for s in exp["senders"]] if "senders" in exp else None
    receivers = exp.get("receivers", "logits")
    receivers = receivers if receivers == "logits" else [tuple(r) for r in receivers]
    return patching.path_patch(model, task, metric=metric, senders=senders, receivers=receivers, progress=False)


def run(config: str | Path, out: str | Path, *, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) a sweep; returns the summary also written to OUT/results.json."""
    from interp.model import load

    experiments = load_config(config)
    out = Path(out)
    (out / "grids").mkdir(parents=True, exist_ok=True)
    jobs = [(exp, spec) for exp in experiments for spec in exp["models"]]
    summary_path = out / "results.json"
    done = {j["job"]: j for j in json.loads(summary_path.read_text())["jobs"]} if summary_path.exists() else {}
    models: dict[str, Any] = {}
    for exp, spec in tqdm(jobs, desc="sweep", disable=not progress):
        jid = job_id(exp, spec)
        path = out / "grids" / f"{jid}.safetensors"
        if path.exists() and jid in done:
            continue
        start = time.time()
        if spec not in models:
            models = {spec: load(spec)}  # one model in memory at a time
        grid = _run_job(exp, models[spec])
        grid = Grid(grid.values, grid.axes, grid.labels, {**grid.meta, "model": spec, "experiment": exp["name"]})
        grid.save(path)
        done[jid] = {
            "job": jid, "experiment": exp["name"], "kind": exp["kind"], "model": spec, "task": exp["task"],
            "split": exp["split"], "site": exp.get("site"), "axes": list(grid.axes), "shape": list(grid.shape),
            "file": f"grids/{jid}.safetensors", "top": [[c, v] for c, v in grid.top(3)],
            "seconds": round(time.time() - start, 2),
        }
        _write_summary(summary_path, jobs, done)
    _write_summary(summary_path, jobs, done)
    _write_report(out, jobs)
    return json.loads(summary_path.read_text())


def _write_summary(path: Path, jobs, done: dict[str, Any]) -> None:
    ordered = [done[job_id(e, s)] for e, s in jobs if job_id(e, s) in done]
    complete = len(ordered) == len(jobs)
    write_text_atomic(path, json.dumps({"complete": complete, "jobs": ordered}, indent=2) + "\n")


def _write_report(out: Path, jobs) -> None:
    from interp import report
    from interp.results import Heading

    items: list[Any] = []
    for exp, spec in jobs:
        grid = Grid.load(out / "grids" / f"{job_id(exp, spec)}.safetensors")
        items += [Heading(f"{exp['name']} on {spec}", 3), grid]
    report.write(items, out / "report.html", title="interp sweep")
