"""Scripted sweeps: `interp sweep CONFIG.toml --out DIR` runs a list of experiments, resumably.

A config is a list of `[[experiment]]` tables; each runs on one or more models:

    [[experiment]]
    name = "ioi-heads"            # unique; names the result files
    kind = "activation"           # activation | attribution | path | ablation
    models = ["zoo:lm-gpt2", "zoo:lm-llama"]   # or model = "..."
    task = "ioi"                  # a name from interp.tasks.SPLITS
    split = "test"
    n = 32                        # examples (default 32)
    seed = 0
    site = "z"                    # activation / attribution: a site of interp.patching.SITES
    by_pos = false
    direction = "denoise"         # activation only
    metric = "logit_diff"         # a metric name of interp.metrics.for_task (default: the task's own)
    # path only: senders = [[0, 1], ...] (default: every head); receivers = "logits" or [[1, 2, "q"], ...]
    # ablation only (interp.masking.ablation_scan): ablation = "mean" | "zero" | "resample", mlps = true

Jobs. Each (experiment, model) pair is one job, keyed by a hash of its full resolved
configuration (every default filled in, `resolved`), so a job's identity changes exactly when
something that affects its result changes. A job writes DIR/grids/JOB.safetensors atomically
(its Grid's meta holds the configuration) and then rewrites DIR/results.json, which lists every
job with its configuration, its clean and corrupt baselines and its best cells. A rerun skips
every job whose key is unchanged and whose file exists; a job whose configuration changed is
recomputed and the run says what changed (`summary["recomputed"]`, and on stderr). A sweep killed
at any moment (even kill -9) resumes where it stopped and ends with the same results. The whole
config is validated before any model loads. `load(DIR)` gives every result as one DataFrame.

Store. Each finished job is also one entry of a `Store` (DIR/entries/KEY.json, written
atomically): the one keyed result store of interp, which `interp.studies.units` uses for a
study's units too. results.json is the index rebuilt from it.

Executors. `executor="local"` (the default) runs the jobs here, one model in memory at a time;
`executor="ray"` hands them to Ray actors, one per model (`interp.sweep_ray`). Both write
through a `Recorder` (the public result sink), so the files are the same either way. A job that raises is reported
(`summary["failed"]`) and the others finish; `run` then raises SweepError.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from interp.errors import InterpError
from interp.results import Grid, write_text_atomic

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["ConfigError", "EXECUTORS", "KINDS", "Job", "Recorder", "Store", "SweepError", "job_id", "load",
           "load_config", "plan", "resolved", "run"]

KINDS = ("activation", "attribution", "path", "ablation", "mask")
EXECUTORS = ("local", "ray")
_COMMON = {"name": str, "kind": str, "model": str, "models": list, "task": str, "split": str, "n": int, "seed": int, "metric": str}
_KEYS = {
    "activation": {**_COMMON, "site": str, "by_pos": bool, "direction": str, "positions": str},
    "attribution": {**_COMMON, "site": str, "by_pos": bool, "positions": str},
    "path": {**_COMMON, "senders": list, "receivers": (str, list)},
    "ablation": {**_COMMON, "ablation": str, "mlps": bool},
    # a learned hard-concrete mask (interp.masking.learn_mask); `seed` seeds the gates and the task
    "mask": {**_COMMON, "ablation": str, "mlps": bool, "sparsity": (float, int), "steps": int, "lr": (float, int)},
}
# the defaults `resolved` fills in (metric: the task's own, looked up per task)
_DEFAULTS = {
    "activation": {"by_pos": False, "direction": "denoise", "positions": None},
    "attribution": {"by_pos": False, "positions": None},
    "path": {"senders": None, "receivers": "logits"},
    "ablation": {"ablation": "mean", "mlps": True},
    "mask": {"ablation": "mean", "mlps": True, "sparsity": 0.5, "steps": 200, "lr": 0.2},
}
# bump when a job's code changes what it computes: every key changes with it
_VERSION = 1


class ConfigError(InterpError):
    """A malformed sweep config; raised before any model loads."""


class SweepError(InterpError):
    """Some jobs failed (each on every try); the others finished and are in results.json."""


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
        if kind in ("activation", "attribution"):
            if exp.get("site") not in SITES:
                raise _fail(where, "site", f"{exp.get('site')!r} is not one of {list(SITES)}")
        if exp.get("direction", "denoise") not in ("denoise", "noise"):
            raise _fail(where, "direction", "must be 'denoise' or 'noise'")
        if exp.get("ablation", "mean") not in ("mean", "zero", "resample"):
            raise _fail(where, "ablation", "must be 'mean', 'zero' or 'resample'")
        if kind in ("ablation", "mask") and "metric" in exp:
            raise _fail(where, "metric", f"a {kind} job scores the task's own metric; leave 'metric' out")
        if kind == "mask" and not 0.0 < exp.get("sparsity", 0.5) < 1.0:
            raise _fail(where, "sparsity", "must lie in (0, 1)")
        if kind == "mask" and exp.get("steps", 200) < 1:
            raise _fail(where, "steps", "must be >= 1")
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


_TASK_METRIC: dict[tuple[str, str], str] = {}


def _task_metric(task: str, split: str) -> str:
    if (task, split) not in _TASK_METRIC:
        from interp import tasks

        _TASK_METRIC[task, split] = tasks.make(task, split=split, n=2, seed=0).metric
    return _TASK_METRIC[task, split]


def resolved(exp: dict[str, Any], model: str) -> dict[str, Any]:
    """The full configuration of one job: every key that affects its result, defaults filled in."""
    config = {"experiment": exp["name"], "kind": exp["kind"], "model": model, "task": exp["task"],
              "split": exp["split"], "n": exp.get("n", 32), "seed": exp.get("seed", 0)}
    if exp["kind"] not in ("ablation", "mask"):
        config["metric"] = exp.get("metric") or _task_metric(exp["task"], exp["split"])
    if exp["kind"] in ("activation", "attribution"):
        config["site"] = exp["site"]
    config.update({k: exp.get(k, v) for k, v in _DEFAULTS[exp["kind"]].items()})
    for k in ("sparsity", "lr"):  # `lr = 1` and `lr = 1.0` are one configuration, so one key
        if k in config:
            config[k] = float(config[k])
    return config


class Store:
    """Results keyed by the configuration that made them: one JSON entry per key, written atomically.

    `key(config)` is the sha256 (first 12 hex digits) of the canonical JSON of the config plus the
    store's code-version tag, so it changes exactly when something that affects the result changes
    (bump `version` when the code that computes a result changes what it computes). An entry is
    {"key", "config", "version", "result", ...extra}; `put` writes it to ROOT/entries/KEY.json in
    one atomic rename, so a reader sees a whole entry or none, even after kill -9. Files a result
    keeps beside its entry (tensors, model folders) go under `files(key)` and must be written
    before `put`: an entry's presence then means its files are complete. Sweeps keep their jobs
    here, `interp.studies.units` a study's units.
    """

    def __init__(self, root: str | Path, version: int | str = _VERSION):
        self.root, self.version = Path(root), version

    def key(self, config: dict[str, Any]) -> str:
        try:
            text = json.dumps({**config, "version": self.version}, sort_keys=True, separators=(",", ":"))
        except TypeError as err:
            raise InterpError(f"a store key needs a JSON-able config (str, int, float, bool, None, lists, dicts): {err}") from None
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def _entry(self, key: str) -> Path:
        return self.root / "entries" / f"{key}.json"

    def files(self, key: str) -> Path:
        """The folder for the files a result keeps beside its entry (made on demand by the writer)."""
        return self.root / "files" / key

    def has(self, key: str) -> bool:
        return self._entry(key).exists()

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry stored under `key`, or None."""
        try:
            return json.loads(self._entry(key).read_text())
        except FileNotFoundError:
            return None

    def put(self, key: str, config: dict[str, Any], result: Any, **extra: Any) -> dict[str, Any]:
        """Store `result` (JSON-able) under `key` atomically; returns the entry as read back."""
        entry = {"key": key, "config": config, "version": self.version, **extra, "result": result}
        try:
            text = json.dumps(entry, indent=1) + "\n"
        except TypeError as err:
            raise InterpError(f"a stored result must be JSON-able (save tensors with interp.results.save under "
                              f"Store.files(key) and store their file names): {err}") from None
        write_text_atomic(self._entry(key), text)
        return json.loads(text)

    def keys(self) -> list[str]:
        folder = self.root / "entries"
        return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []

    def remove(self, key: str) -> None:
        """Drop an entry and its files (a result whose configuration left the plan)."""
        import shutil

        self._entry(key).unlink(missing_ok=True)
        shutil.rmtree(self.files(key), ignore_errors=True)


def _key(config: dict[str, Any]) -> str:
    return Store("", _VERSION).key(config)


def job_id(exp: dict[str, Any], model: str) -> str:
    """The job's file stem: readable name and model, then the key of its resolved configuration."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", model).strip("-")
    return f"{exp['name']}__{safe}__{_key(resolved(exp, model))}"


class Job(dict):
    """One (experiment, model) pair: id, key, config (resolved), model (spec); a dict, so it pickles."""

    @classmethod
    def make(cls, exp: dict[str, Any], model: str) -> Job:
        config = resolved(exp, model)
        return cls(id=job_id(exp, model), key=_key(config), config=config, model=model)


def run_job(config: dict[str, Any], model) -> Grid:
    """Compute one job's Grid on a loaded model (what every executor calls)."""
    from interp import patching, tasks
    from interp.metrics import for_task

    task = tasks.make(config["task"], split=config["split"], n=config["n"], seed=config["seed"])
    if config["kind"] == "ablation":
        from interp.masking import ablation_scan

        return ablation_scan(model, task, ablation=config["ablation"], mlps=config["mlps"], progress=False)
    if config["kind"] == "mask":
        from interp.masking import learn_mask

        mask = learn_mask(model, task, sparsity=config["sparsity"], seed=config["seed"], steps=config["steps"],
                          include_mlps=config["mlps"], ablation=config["ablation"], lr=config["lr"], progress=False)
        return mask.to_grid()
    # the task's own metric lets patching unembed only at the answer positions
    metric = None if config["metric"] == task.metric else for_task(task, config["metric"])
    if config["kind"] == "activation":
        return patching.activation_patch(
            model, task, metric=metric, site=config["site"], by_pos=config["by_pos"],
            positions=config["positions"], direction=config["direction"], progress=False,
        )
    if config["kind"] == "attribution":
        return patching.attribution_patch(model, task, metric=metric, site=config["site"], by_pos=config["by_pos"],
                                          positions=config["positions"])
    senders = [tuple(s) for s in config["senders"]] if config["senders"] is not None else None
    receivers = config["receivers"]
    receivers = receivers if receivers == "logits" else [tuple(r) for r in receivers]
    return patching.path_patch(model, task, metric=metric, senders=senders, receivers=receivers, progress=False)


def _changes(old: dict[str, Any], new: dict[str, Any]) -> str:
    keys = [k for k in dict.fromkeys([*new, *old]) if old.get(k) != new.get(k)]
    return ", ".join(f"{k} {json.dumps(old.get(k))} -> {json.dumps(new.get(k))}" for k in keys) or "code version"


def plan(experiments: list[dict[str, Any]], out: Path) -> tuple[list[Job], dict[str, Any], list[Job], list[str]]:
    """(every job, the finished ones by id, the ones to run, what changed since the last run)."""
    jobs = [Job.make(exp, spec) for exp in experiments for spec in exp["models"]]
    summary_path = out / "results.json"
    before = json.loads(summary_path.read_text())["jobs"] if summary_path.exists() else []
    store = Store(out)
    done = {j["job"]: j for j in before if (out / j["file"]).exists()}  # folders written before the store
    for job in jobs:
        entry = store.get(job["key"])
        if entry is not None and (out / entry["result"]["file"]).exists():
            done[job["id"]] = entry["result"]
    pending = [job for job in jobs if job["id"] not in done]
    previous = {(j.get("experiment"), j.get("model")): j for j in before}
    changed = []
    for job in pending:
        old = previous.get((job["config"]["experiment"], job["model"]))
        if old is not None and old.get("job") != job["id"]:
            changed.append(f"{job['config']['experiment']} on {job['model']}: {_changes(old.get('config', {}), job['config'])}")
    return jobs, done, pending, changed


class Recorder:
    """The result sink every executor writes through: `finished(job, grid, seconds)` saves the Grid,
    stores the job's entry in the sweep's `Store` and rewrites results.json, all atomically;
    `failed_job(job, error)` records an error. `bar`: anything with update(n) (a tqdm bar)."""

    def __init__(self, out: Path, jobs: list[Job], done: dict[str, Any], recomputed: list[str], bar):
        self.out, self.jobs, self.done, self.recomputed, self.bar = out, jobs, done, recomputed, bar
        self.store = Store(out)
        self.failed: dict[str, dict[str, Any]] = {}

    def finished(self, job: Job, grid: Grid, seconds: float) -> None:
        cfg = job["config"]
        meta = {**grid.meta, "model": job["model"], "experiment": cfg["experiment"], "job": job["id"], "key": job["key"],
                "config": cfg}
        grid = Grid(grid.values, grid.axes, grid.labels, meta)
        file = f"grids/{job['id']}.safetensors"
        grid.save(self.out / file)
        baselines = {k: meta[k] for k in ("clean_metric", "corrupt_metric", "baseline") if k in meta}
        self.done[job["id"]] = {
            "job": job["id"], "key": job["key"], "experiment": cfg["experiment"], "kind": cfg["kind"],
            "model": job["model"], "task": cfg["task"], "split": cfg["split"], "site": cfg.get("site"),
            "metric": meta.get("metric", cfg.get("metric")), **baselines, "config": cfg,
            "axes": list(grid.axes), "shape": list(grid.shape), "file": file,
            "top": [[c, v] for c, v in grid.top(3)], "seconds": round(seconds, 2),
        }
        self.store.put(job["key"], cfg, self.done[job["id"]])
        self.failed.pop(job["id"], None)
        self.write()
        self.bar.update(1)

    def failed_job(self, job: Job, error: str) -> None:
        self.failed[job["id"]] = {"job": job["id"], "experiment": job["config"]["experiment"], "model": job["model"],
                                  "error": error}
        self.write()

    def write(self) -> None:
        ordered = [self.done[j["id"]] for j in self.jobs if j["id"] in self.done]
        summary = {"complete": len(ordered) == len(self.jobs), "jobs": ordered}
        if self.recomputed:
            summary["recomputed"] = self.recomputed
        if self.failed:
            summary["failed"] = list(self.failed.values())
        write_text_atomic(self.out / "results.json", json.dumps(summary, indent=2) + "\n")


def _run_local(pending: list[Job], recorder: Recorder) -> None:
    from interp.model import load as load_model

    models: dict[str, Any] = {}
    order = {spec: i for i, spec in enumerate(dict.fromkeys(j["model"] for j in pending))}
    for job in sorted(pending, key=lambda j: order[j["model"]]):  # each model loads once
        start = time.time()
        try:
            if job["model"] not in models:
                models = {}  # one model in memory at a time
                models[job["model"]] = load_model(job["model"])
            grid = run_job(job["config"], models[job["model"]])
        except Exception as err:  # reported; the other jobs go on
            recorder.failed_job(job, f"{type(err).__name__}: {err}")
            continue
        recorder.finished(job, grid, time.time() - start)


def run(config: str | Path, out: str | Path, *, progress: bool = True, executor: str = "local",
        address: str | None = None, log: Callable[[str], None] | None = None, **executor_kw: Any) -> dict[str, Any]:
    """Run (or resume) a sweep; returns the summary also written to OUT/results.json.

    executor: "local" (here) or "ray" (`interp.sweep_ray.execute`: `address` None starts a local
    cluster, "auto" joins a running one; executor_kw: num_cpus, worker_cpus, worker_gpus, retries).
    log: where "recomputing ..." lines go (default: stderr when progress is on).
    """
    if executor not in EXECUTORS:
        raise InterpError(f"executor {executor!r} is not one of {EXECUTORS}")
    if executor == "local" and (address is not None or executor_kw):
        raise InterpError("--address and the worker options need --executor ray")
    experiments = load_config(config)
    out = Path(out)
    (out / "grids").mkdir(parents=True, exist_ok=True)
    jobs, done, pending, changed = plan(experiments, out)
    before = {j["file"] for j in done.values()}
    prior = out / "results.json"
    stale_files = {j["file"] for j in json.loads(prior.read_text())["jobs"]} if prior.exists() else set()
    log = log or ((lambda line: print(line, file=sys.stderr)) if progress else (lambda line: None))
    for line in changed:
        log(f"recomputing {line}")
    with tqdm(total=len(jobs), initial=len(jobs) - len(pending), desc="sweep", disable=not progress) as bar:
        recorder = Recorder(out, jobs, done, changed, bar)
        if pending and executor == "ray":
            from interp.sweep_ray import execute

            execute(pending, recorder, address=address, progress=progress, **executor_kw)
        elif pending:
            _run_local(pending, recorder)
    current = {f"grids/{j['id']}.safetensors" for j in jobs}
    for file in (stale_files | before) - current:  # results of jobs whose configuration changed or left
        (out / file).unlink(missing_ok=True)
    keys = {j["key"] for j in jobs}
    for key in set(recorder.store.keys()) - keys:
        recorder.store.remove(key)
    recorder.write()
    _write_report(out, [j for j in jobs if j["id"] in recorder.done])
    summary = json.loads(prior.read_text())
    if recorder.failed:
        lines = "; ".join(f"{f['job']}: {f['error']}" for f in recorder.failed.values())
        raise SweepError(f"{len(recorder.failed)} of {len(jobs)} jobs failed (the others are in {prior}): {lines}")
    return summary


def load(out: str | Path):
    """Every result of a sweep folder as one long pandas DataFrame: a row per Grid cell, with the
    cell's axis labels, its `value`, and its job's configuration (and job id, baselines) as columns."""
    import pandas as pd

    out = Path(out)
    path = out / "results.json"
    if not path.exists():
        raise InterpError(f"{out} holds no sweep results (no results.json)")
    frames = []
    for entry in json.loads(path.read_text())["jobs"]:
        frame = Grid.load(out / entry["file"]).to_dataframe()
        extra = {"job": entry["job"], **{k: entry[k] for k in ("clean_metric", "corrupt_metric", "baseline") if k in entry},
                 **entry.get("config", {})}
        for column, value in extra.items():
            frame[column if column not in frame.columns else f"config.{column}"] = (
                json.dumps(value) if isinstance(value, (list, dict)) else value)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _write_report(out: Path, jobs: list[Job]) -> None:
    from interp import report
    from interp.results import Heading

    items: list[Any] = []
    for job in jobs:
        grid = Grid.load(out / "grids" / f"{job['id']}.safetensors")
        items += [Heading(f"{job['config']['experiment']} on {job['model']}", 3), grid]
    report.write(items, out / "report.html", title="interp sweep")
