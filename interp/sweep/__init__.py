"""Scripted sweeps: `interp sweep CONFIG.toml --out DIR` runs a list of experiments, resumably.

The package is the sweep floor, above the analyses it runs: this module reads configs and holds the
local executor; `jobs` says what a job is (the kinds), `store` where results go, `ray_executor` runs
jobs on Ray.

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

Executors. `EXECUTORS` maps a name to the function that runs pending jobs: "local" (the
default) runs them here, one model in memory at a time; "ray" hands them to Ray actors, one per
model (`interp.sweep.ray_executor`). Both compute a job with `interp.sweep.jobs.run_job` (whose `KINDS` is
the registry of job kinds) and write through `interp.sweep.store.Recorder` (the public result
sink), so the files are the same either way, and neither takes a name from this module. A job that raises
is reported (`summary["failed"]`) and the others finish; `run` then raises SweepError.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from interp.errors import InterpError
from interp.results import Grid
from interp.sweep.jobs import COMMON_KEYS, KINDS, METRICS, Job, JobKind, job_id, resolved, run_job
from interp.files.storage import check_writable, sha256_file
from interp.sweep.store import Recorder, Store
from interp.files.validate import field, note, read_json

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["ConfigError", "EXECUTORS", "KINDS", "Job", "Recorder", "Store", "SweepError", "job_id", "load",
           "load_config", "plan", "resolved", "run", "run_job"]

class ConfigError(InterpError):
    """A malformed sweep config; raised before any model loads."""


class SweepError(InterpError):
    """Some jobs failed (each on every try); the others finished and are in results.json."""


def _fail(where: str, key: str, why: str) -> ConfigError:
    return ConfigError(f"{where}: key {key!r}: {why}")


def _read(path: str | Path) -> list[dict[str, Any]]:
    """The [[experiment]] tables of a TOML file."""
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as err:  # a folder, unreadable, or not text
        raise ConfigError(f"cannot read config file {path} ({type(err).__name__}); pass a UTF-8 TOML file") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML: {err}") from None
    unknown_top = set(raw) - {"experiment"}
    if unknown_top:
        raise ConfigError(f"{path}: unknown top-level key(s) {sorted(unknown_top)}; experiments go in [[experiment]] tables")
    experiments = raw.get("experiment")
    if not isinstance(experiments, list) or not experiments or not all(isinstance(e, dict) for e in experiments):
        raise ConfigError(f"{path}: key 'experiment': need at least one [[experiment]] table")
    return experiments


def _check_types(where: str, exp: dict[str, Any]) -> JobKind:
    """The experiment's kind, once its kind, keys and value types are known good."""
    kind = exp.get("kind")
    if kind not in KINDS:
        raise _fail(where, "kind", f"{kind!r} is not one of {tuple(KINDS)}")
    keys = {**COMMON_KEYS, **KINDS[kind].keys}
    for key, value in exp.items():
        if key not in keys:
            raise _fail(where, key, f"not a {kind} experiment key; valid keys: {sorted(keys)}")
        want = keys[key]
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise _fail(where, key, f"expected {getattr(want, '__name__', want)}, got {type(value).__name__} {value!r}")
    for key in ("name", "task", "split"):
        if key not in exp:
            raise _fail(where, key, "missing")
    return KINDS[kind]


def _check(where: str, exp: dict[str, Any], seen: set[str]) -> dict[str, Any]:
    """One experiment checked, with its models as a list."""
    from interp.tasks import SPLITS

    kind = _check_types(where, exp)
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
    twice = [m for i, m in enumerate(models) if m in models[:i]]
    if twice:  # the same job twice: one key, one file, computed twice
        raise _fail(where, "models", f"lists {twice[0]!r} more than once; name each model once")
    if exp["task"] not in SPLITS:
        raise _fail(where, "task", f"{exp['task']!r} is not one of {sorted(SPLITS)}")
    if exp["split"] not in SPLITS[exp["task"]]:
        raise _fail(where, "split", f"{exp['split']!r} is not a {exp['task']} split; valid: {SPLITS[exp['task']]}")
    bad = kind.check(exp)
    if bad:
        raise _fail(where, *bad)
    if kind.own_metric and "metric" in exp:
        raise _fail(where, "metric", f"a {exp['kind']} job scores the task's own metric; leave 'metric' out")
    if exp.get("metric", "logit_diff") not in METRICS:
        raise _fail(where, "metric", f"must be one of {', '.join(METRICS)}")
    if exp.get("n", 32) < 1:
        raise _fail(where, "n", "must be >= 1")
    return {**exp, "models": models}


def load_config(path: str | Path) -> list[dict[str, Any]]:
    """Parse and validate a sweep config; return the experiments with defaults filled in."""
    from interp.model import resolve

    seen: set[str] = set()
    out = []
    for i, exp in enumerate(_read(path)):
        where = f"{path}: experiment #{i + 1}" + (f" ({exp['name']!r})" if isinstance(exp.get("name"), str) else "")
        out.append(_check(where, exp, seen))
    for exp in out:  # model specs last: cheap checks first, then the file system / hub
        for spec in exp["models"]:
            try:
                resolve(spec)
            except (OSError, ValueError) as err:
                raise _fail(f"{path}: experiment {exp['name']!r}", "models", str(err)) from None
    return out


def _changes(old: dict[str, Any], new: dict[str, Any]) -> str:
    keys = [k for k in dict.fromkeys([*new, *old]) if old.get(k) != new.get(k)]
    return ", ".join(f"{k} {json.dumps(old.get(k))} -> {json.dumps(new.get(k))}" for k in keys) or "code version"


def plan(experiments: list[dict[str, Any]], out: Path) -> tuple[list[Job], dict[str, Any], list[Job], list[str]]:
    """(every job, the finished ones by id, the ones to run, what changed since the last run)."""
    jobs = [Job.make(exp, spec) for exp in experiments for spec in exp["models"]]
    summary_path = out / "results.json"
    before = _summary_jobs(summary_path)
    store = Store(out)
    done = {j["job"]: j for j in before if (out / j["file"]).exists()}  # folders written before the store
    stored = set(store.keys())
    for job in jobs:
        entry = store.get(job["key"])
        if entry is not None and _grid_intact(out, job, entry):
            done[job["id"]] = entry["result"]
        elif job["key"] in stored:  # its entry or its grid is damaged: the job runs again, whatever results.json says
            done.pop(job["id"], None)
    pending = [job for job in jobs if job["id"] not in done]
    previous = {(j.get("experiment"), j.get("model")): j for j in before}
    changed = []
    for job in pending:
        old = previous.get((job["config"]["experiment"], job["model"]))
        if old is not None and old.get("job") != job["id"]:
            changed.append(f"{job['config']['experiment']} on {job['model']}: {_changes(old.get('config', {}), job['config'])}")
    return jobs, done, pending, changed


def _run_local(pending: list[Job], recorder: Recorder, *, progress: bool = True) -> None:
    """Run the jobs here, one model in memory at a time."""
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


def _run_ray(pending: list[Job], recorder: Recorder, **options: Any) -> None:
    """`interp.sweep.ray_executor.execute`: one Ray actor per model (Ray is imported only here)."""
    from interp.sweep.ray_executor import execute

    execute(pending, recorder, **options)


# name -> executor(pending jobs, recorder, *, progress, **options): runs the jobs and hands each
# result (or error) to the recorder. The CLI's --executor choices are these names.
EXECUTORS: dict[str, Callable[..., None]] = {"local": _run_local, "ray": _run_ray}


def run(config: str | Path, out: str | Path, *, progress: bool = True, executor: str = "local",
        address: str | None = None, log: Callable[[str], None] | None = None, **executor_kw: Any) -> dict[str, Any]:
    """Run (or resume) a sweep; returns the summary also written to OUT/results.json.

    executor: "local" (here) or "ray" (`interp.sweep.ray_executor.execute`: `address` None starts a local
    cluster, "auto" joins a running one; executor_kw: num_cpus, worker_cpus, worker_gpus, retries).
    log: where "recomputing ..." lines go (default: stderr when progress is on).
    """
    if executor not in EXECUTORS:
        raise InterpError(f"executor {executor!r} is not one of {tuple(EXECUTORS)}")
    if executor == "local" and (address is not None or executor_kw):
        raise InterpError("--address and the worker options need --executor ray")
    out = check_writable(out, folder=True)  # before the config's models load, not after the first job
    _check_sweep_folder(out)
    experiments = load_config(config)
    (out / "grids").mkdir(parents=True, exist_ok=True)
    jobs, done, pending, changed = plan(experiments, out)
    before = {j["file"] for j in done.values()}
    prior = out / "results.json"
    stale_files = {j["file"] for j in _summary_jobs(prior)}
    log = log or ((lambda line: print(line, file=sys.stderr)) if progress else (lambda line: None))
    for line in changed:
        log(f"recomputing {line}")
    with tqdm(total=len(jobs), initial=len(jobs) - len(pending), desc="sweep", disable=not progress) as bar:
        recorder = Recorder(out, jobs, done, changed, bar)
        if pending:
            options = {"address": address, **executor_kw} if executor == "ray" else {}
            EXECUTORS[executor](pending, recorder, progress=progress, **options)
    current = {f"grids/{j['id']}.safetensors" for j in jobs}
    for file in (stale_files | before) - current:  # results of jobs whose configuration changed or left
        (out / file).unlink(missing_ok=True)
    keys = {j["key"] for j in jobs}
    for key in {k for k in recorder.store.keys() if _KEY.fullmatch(k)} - keys:  # another file there is not the sweep's
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
    for entry in _summary_jobs(path, trusted=False):
        frame = Grid.load(out / entry["file"]).to_dataframe()
        extra = {"job": entry["job"], **{k: entry[k] for k in ("clean_metric", "corrupt_metric", "baseline") if k in entry},
                 **entry.get("config", {})}
        for column, value in extra.items():
            frame[column if column not in frame.columns else f"config.{column}"] = (
                json.dumps(value) if isinstance(value, (list, dict)) else value)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _grid_intact(out: Path, job: Job, entry: dict[str, Any]) -> bool:
    """Whether a sound entry's grid file is this job's own (never a path the entry could point
    elsewhere), present, and (for entries that record it) of the sha256 written with it; a damaged
    grid is recomputed, with a one-line note."""
    file = f"grids/{job['id']}.safetensors"
    if entry["result"].get("file") != file or not (out / file).exists():
        return False
    if "grid_sha256" in entry and entry["grid_sha256"] != sha256_file(out / file):
        note(f"sweep grid {out / file} fails its checksum (damaged on disk); recomputing it")
        return False
    return True


_KEY = re.compile(r"[0-9a-f]{12}")  # what Store.key gives
_GRID_FILE = re.compile(r"grids/[A-Za-z0-9_.-]+\.safetensors")


def _check_sweep_folder(out: Path) -> None:
    """Refuse an --out whose results.json or report.html another program wrote: a sweep rewrites both.
    Its own results.json is always a JSON object with a "jobs" list (written atomically), and its
    report.html never stands without results.json or its grids/ folder."""
    summary, page = out / "results.json", out / "report.html"
    fix = f"pass a new folder for --out, or move the file out of {out}"
    if summary.exists():
        try:
            data = read_json(summary, "results.json")
        except InterpError:
            raise InterpError(f"{summary} is not a sweep's results (not readable UTF-8 JSON); {fix}") from None
        if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
            raise InterpError(f"{summary} is not a sweep's results (no \"jobs\" list); {fix}")
    elif page.exists() and not (out / "grids").is_dir():
        raise InterpError(f"{page} is not a sweep's report (the folder holds no sweep); {fix}")


def _summary_jobs(path: Path, *, trusted: bool = True) -> list[dict[str, Any]]:
    """The jobs of a sweep's results.json, each checked to name a job and a grid file inside the
    sweep's grids/ folder (a file the sweep may delete when its job leaves the plan). A damaged file
    is refused when a user loads it (`trusted=False`); a run treats it as absent, says so in one
    line and rewrites it."""
    if not path.exists():
        return []
    try:
        data = read_json(path, "a sweep's results.json", "the folder a sweep wrote")
        jobs = field(data, "jobs", list, path)
        for i, j in enumerate(jobs):
            if not _GRID_FILE.fullmatch(str(field(j, "file", str, path, where=f"jobs.{i}"))):
                raise InterpError(f"{path}: jobs.{i}.file is {j['file'][:60]!r}; it must be grids/NAME.safetensors")
            field(j, "job", str, path, where=f"jobs.{i}")
    except InterpError as err:
        if not trusted:
            raise
        note(f"{str(err)[:200]}; rebuilding it from the sweep's entries")
        return []
    return jobs


def _write_report(out: Path, jobs: list[Job]) -> None:
    from interp.views import report
    from interp.results import Heading

    items: list[Any] = []
    for job in jobs:
        grid = Grid.load(out / "grids" / f"{job['id']}.safetensors")
        items += [Heading(f"{job['config']['experiment']} on {job['model']}", 3), grid]
    report.write(items, out / "report.html", title="interp sweep")
