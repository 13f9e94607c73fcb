"""A study as resumable units, its budgets, and the provenance of one run.

A unit is one (model, seed, setting) piece of a study: a mask, a probe, a fine-tune, a fit. Its
result is a small JSON-able dict, stored in the sweep's keyed store (`interp.sweep.Store`) under
the sha of its full resolved configuration plus the study's code-version tag, so a rerun computes
only the units that are missing and a killed run resumes. Each entry carries the study's name, its
code-version tag and a digest of its content; one that is cut short, edited, or another study's is
recomputed with a one-line note, never used (`interp.sweep.store.Store.get`):

    units = Units("illusions")                         # $INTERP_CACHE/studies/illusions
    result = units.run({"model": spec, "seed": 1, "rank": 4}, lambda: fit_and_score(...))
    units.count(configs)                               # (done, total)

Tensors a unit keeps go through interp.results.save under `units.files(config)` (written before
the result is stored, so a stored result's files are complete). A long unit may save its state
to `units.checkpoint_path(config)` (atomically, e.g. with interp.files.storage.atomic_path) and resume
from it; the file is removed once the unit's result is stored.

Budgets: a study declares `BUDGETS = {"quick": {...}, "paper": {...}}`; `budget(BUDGETS, name,
overrides)` resolves one, refusing unknown names and keys. `provenance(...)` records where and how
one run was made; the study's JSON carries it (one run per JSON, never merged).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from interp.errors import InterpError
from interp.sweep import Store

__all__ = ["CHECKPOINT_SUFFIX", "RUN_FIELDS", "Units", "budget", "budget_record", "commit", "comparable", "provenance"]
CHECKPOINT_SUFFIX = ".safetensors"  # written with interp.files.storage.save_state: resuming unpickles nothing

# provenance fields that differ between two runs of the same budget (timing, what this run computed)
RUN_FIELDS = ("date", "wall_s", "units_run", "units_s", "step_profile", "gpu_estimate")


def _cache_dir() -> Path:
    from interp.files.storage import cache_dir  # $INTERP_CACHE, default ~/.cache/interp: the zoo's and GGUF's cache

    return cache_dir()


class Units:
    """The stored units of one study (see the module docstring).

    root: where the units live (default $INTERP_CACHE/studies/STUDY). version: the study's code
    tag; bump it when a unit's code changes what it computes, so every key changes with it."""

    def __init__(self, study: str, root: str | Path | None = None, *, version: int | str = 1):
        self.study = study
        self.root = Path(root).expanduser() if root is not None else _cache_dir() / "studies" / study
        self.store = Store(self.root, version=f"{study}/{version}", wrap="unit", study=study)
        self.ran = 0  # units computed (not read back) by this object

    def key(self, config: dict[str, Any]) -> str:
        return self.store.key(config)

    def done(self, config: dict[str, Any]) -> bool:
        return self.store.has(self.key(config))

    def count(self, configs: Iterable[dict[str, Any]]) -> tuple[int, int]:
        """(units stored, units in `configs`)."""
        flags = [self.done(c) for c in configs]
        return sum(flags), len(flags)

    def files(self, config: dict[str, Any]) -> Path:
        """A folder for the files (tensors, through interp.results.save) a unit keeps beside its result."""
        return self.store.files(self.key(config))

    def checkpoint_path(self, config: dict[str, Any]) -> Path:
        """A per-unit scratch file a long unit may write atomically and resume from; removed when the unit finishes."""
        path = self.root / "checkpoints" / f"{self.key(config)}{CHECKPOINT_SUFFIX}"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def get(self, config: dict[str, Any]) -> dict[str, Any] | None:
        """The stored result of `config`, or None."""
        entry = self.store.get(self.key(config))
        return None if entry is None else entry["result"]

    def seconds(self, config: dict[str, Any]) -> float | None:
        """How long the stored unit of `config` took when it was computed (None if not stored)."""
        entry = self.store.get(self.key(config))
        return None if entry is None else entry.get("seconds")

    def run(self, config: dict[str, Any], fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The stored result of `config` if there is one; else run `fn()`, store its result (with its compute
        seconds and the commit it ran at, "+dirty" for a tree with uncommitted changes), return it.

        The result returned is always the stored one read back (tuples become lists), so a run that
        computes a unit and a run that reads it back aggregate exactly the same values."""
        key = self.key(config)
        entry = self.store.get(key)
        if entry is not None:
            return entry["result"]
        start = time.time()
        result = fn()
        if not isinstance(result, dict):
            raise InterpError(f"a unit of {self.study!r} must return a dict, got {type(result).__name__} (config {config})")
        entry = self.store.put(key, config, result, seconds=round(time.time() - start, 2), commit=commit())
        (self.root / "checkpoints" / f"{key}{CHECKPOINT_SUFFIX}").unlink(missing_ok=True)
        self.ran += 1
        return entry["result"]


def _coerce(key: str, value: Any, like: Any) -> Any:
    """An override in the type of the budget's own value (the CLI hands strings and ints)."""
    if isinstance(like, bool):
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        if isinstance(value, bool):
            return value
    elif isinstance(like, (list, tuple)):
        if isinstance(value, int) and not isinstance(value, bool) and all(isinstance(v, int) for v in like):
            if value < 1:
                raise InterpError(f"budget key {key!r}: {value} must be >= 1 (a count) or a list like 0,1,2")
            return list(range(value))  # `--seeds 3`: seeds 0, 1, 2
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, (list, tuple)) and value:
            kind = type(like[0]) if like else str
            try:
                return [kind(v) for v in value]
            except (TypeError, ValueError):
                pass
    elif isinstance(like, int):
        try:
            if isinstance(value, bool) or float(value) != int(float(value)):
                raise ValueError
            return int(float(value))
        except (TypeError, ValueError):
            pass
    elif isinstance(like, float):
        try:
            if not isinstance(value, bool):
                return float(value)
        except (TypeError, ValueError):
            pass
    elif like is None or isinstance(like, str):
        return value
    raise InterpError(f"budget key {key!r}: {value!r} is not a {type(like).__name__} like the budget's own {like!r}")


def budget(budgets: dict[str, dict[str, Any]], name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Budget `name` of a study's BUDGETS with `overrides` applied (each coerced to the type of the
    value it replaces; an int for a list of ints means range(n)). Unknown names and keys are refused."""
    if name not in budgets:
        raise InterpError(f"no budget {name!r}; this study's budgets: {', '.join(budgets)}")
    out = dict(budgets[name])
    for key, value in (overrides or {}).items():
        if key not in out:
            raise InterpError(f"this study takes no budget key {key!r}; its keys: {', '.join(sorted(out))}")
        out[key] = _coerce(key, value, out[key])
    return out


def budget_record(name: str, resolved: dict[str, Any], paper_fraction: float | None, units_done: int,
                  units_total: int) -> dict[str, Any]:
    """The `budget` block of a study's JSON."""
    return {"name": name, "values": resolved, "paper_fraction": None if paper_fraction is None else float(f"{paper_fraction:.4g}"),
            "units_done": units_done, "units_total": units_total}


def repro_command(study: str, budget: dict[str, Any], defaults: dict[str, dict[str, Any]], *, out: str,
                  units: str | None = None) -> str:
    """The `interp repro` command that made a result from its `budget` block: the budget's name, and
    every value that differs from that budget's `defaults` (models as `--model`, the rest as `--set`)."""
    import shlex

    values, base = budget["values"], defaults[budget["name"]]
    parts = [f"interp repro {study}", f"--budget {budget['name']}"]
    if "models" in values and values["models"] != base.get("models"):
        parts += [f"--model {shlex.quote(m)}" for m in values["models"]]
    parts += [f"--set {shlex.quote(k + '=' + json.dumps(v, separators=(',', ':')))}"
              for k, v in values.items() if k != "models" and base.get(k) != v]
    parts += [f"--units {shlex.quote(str(units))}"] * (units is not None) + [f"--out {shlex.quote(str(out))}"]
    return " ".join(parts)


def commit() -> str | None:
    """The commit interp's code is at, "+dirty" when its tracked files differ from it (None outside git)."""
    return _commit()


def _commit() -> str | None:
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "."], cwd=here.parent,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(module: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return None


def provenance(budget_name: str, resolved_budget: dict[str, Any], paper_fraction: float | None, wall_s: float,
               units_done: int, units_total: int, *, units_run: int | None = None,
               units_s: dict[str, float] | None = None) -> dict[str, Any]:
    """Where and how one run was made: commit (None outside a git checkout; "+dirty" when interp's
    tracked files differ from it), date, machine, library versions, wall time, the budget with its
    fraction of the paper's, and units done / total (`units_run`: how many this run computed;
    `units_s`: each unit's compute time as stored when it ran)."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    out = {
        "commit": _commit(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {"cpu": _cpu(), "cpus": os.cpu_count(), "gpu": gpu, "torch_threads": torch.get_num_threads(),
                    "device": "cuda" if gpu else "cpu"},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     **{m: _version(m) for m in ("transformers", "transformer_lens", "interp")}},
        "wall_s": round(wall_s, 1),
        "budget": budget_record(budget_name, resolved_budget, paper_fraction, units_done, units_total),
    }
    if units_run is not None:
        out["units_run"] = units_run
    if units_s is not None:
        out["units_s"] = units_s
    return out


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    """A study result without the provenance fields that differ from run to run (`RUN_FIELDS`):
    what two runs of one budget (one killed and resumed, one not) must agree on."""
    out = dict(result)
    if "provenance" in out:
        out["provenance"] = {k: v for k, v in out["provenance"].items() if k not in RUN_FIELDS}
    return out
