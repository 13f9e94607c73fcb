"""Where sweep results go: `Store`, interp's one keyed result store, and `Recorder`, the public
result sink every sweep executor writes through (the local one in `interp.sweep`, the Ray one in
`interp.sweep_ray`), so both leave the same files.

`interp.studies.units` keeps a study's units in a `Store` too.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from interp.errors import InterpError
from interp.results import Grid
from interp.storage import write_text_atomic

Job = dict[str, Any]  # a planned job: id, key, model, config (interp.sweep_jobs builds them)

__all__ = ["Recorder", "Store"]


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

    def __init__(self, root: str | Path, version: int | str = 1):
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
