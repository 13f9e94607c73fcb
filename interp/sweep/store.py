"""Where sweep results go: `Store`, interp's one keyed result store, and `Recorder`, the public
result sink every sweep executor writes through (the local one in `interp.sweep`, the Ray one in
`interp.sweep.ray_executor`), so both leave the same files.

`interp.studies.units` keeps a study's units in a `Store` too.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from interp.errors import InterpError
from interp.results import Grid
from interp.files.storage import sha256_file, write_text_atomic
from interp.files.validate import digest, note

Job = dict[str, Any]  # a planned job: id, key, model, config (interp.sweep.jobs builds them)

__all__ = ["Recorder", "Store"]


class Store:
    """Results keyed by the configuration that made them: one JSON entry per key, written atomically.

    `key(config)` is the sha256 (first 12 hex digits) of the canonical JSON of the config (under
    `wrap` when given: {wrap: config}) plus the store's code-version tag, so it changes exactly when
    something that affects the result changes (bump `version` when the code that computes a result
    changes what it computes). An entry is {"key", "config", "version", "study" (when the store
    names one), "result", ...extra, "digest"}; `put` writes it to ROOT/entries/KEY.json in one atomic
    rename, so a reader sees a whole entry or none, even after kill -9. Files a result keeps beside
    its entry (tensors, model folders) go under `files(key)` and must be written before `put`: an
    entry's presence then means its files are complete. Sweeps keep their jobs here,
    `interp.studies.units` a study's units.

    Reading checks an entry before trusting it: whole JSON, its config giving its key, its version
    and study this store's, its digest (sha256 of the rest of the entry) matching. An entry that
    fails is treated as missing, with a one-line note, so it is recomputed and rewritten; an entry
    written before entries carried a digest is accepted when its config gives its key, and given
    its digest then (rewritten atomically, where the store is writable).
    """

    def __init__(self, root: str | Path, version: int | str = 1, *, wrap: str | None = None, study: str | None = None):
        self.root, self.version, self.wrap, self.study = Path(root), version, wrap, study
        self._noted: set[str] = set()

    def key(self, config: dict[str, Any]) -> str:
        keyed = {self.wrap: config} if self.wrap else config
        try:
            text = json.dumps({**keyed, "version": self.version}, sort_keys=True, separators=(",", ":"))
        except TypeError as err:
            raise InterpError(f"a store key needs a JSON-able config (str, int, float, bool, None, lists, dicts): {err}") from None
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def _entry(self, key: str) -> Path:
        return self.root / "entries" / f"{key}.json"

    def files(self, key: str) -> Path:
        """The folder for the files a result keeps beside its entry (made on demand by the writer)."""
        return self.root / "files" / key

    def has(self, key: str) -> bool:
        """Whether a sound entry is stored under `key` (one that fails its checks is not)."""
        return self.get(key) is not None

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry stored under `key`, or None when there is none or it fails its checks (then a
        one-line note says why: the caller recomputes it)."""
        path = self._entry(key)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as err:
            return self._stale(key, f"is unreadable ({type(err).__name__})")
        try:
            entry = json.loads(text)
        except (ValueError, RecursionError):
            return self._stale(key, "is cut short or not JSON")
        try:
            problem = self._problem(key, entry)
        except RecursionError:
            problem = "is nested too deep"
        if problem:
            return self._stale(key, problem)
        if "digest" not in entry:  # written before entries carried one: accepted once, then given its digest
            entry["digest"] = digest(entry)
            try:
                write_text_atomic(path, json.dumps(entry, indent=1) + "\n")
            except OSError:  # a read-only store stays as it is, and is checked by its keys alone
                pass
        return entry

    def _problem(self, key: str, entry: Any) -> str | None:
        """Why `entry` cannot be trusted as the result of `key` (None when it can)."""
        if not isinstance(entry, dict) or not isinstance(entry.get("config"), dict) or not isinstance(entry.get("result"), dict):
            return "lacks its config or result"
        if entry.get("version") != self.version or entry.get("study") != self.study:
            return (f"was written for {entry.get('study') or 'a sweep'} version {str(entry.get('version'))[:30]!r}, "
                    f"not {self.study or 'a sweep'} version {self.version!r}")
        if entry.get("key") != key or self.key(entry["config"]) != key:
            return "holds a config that does not give its key (edited, or another unit's)"
        stored = entry.get("digest")
        if stored is not None and stored != digest({k: v for k, v in entry.items() if k != "digest"}):
            return "fails its checksum (edited or damaged)"
        return None

    def _stale(self, key: str, problem: str) -> None:
        if key not in self._noted:  # once per entry and store, not once per look
            self._noted.add(key)
            note(f"{'unit' if self.study else 'sweep'} entry {self._entry(key)} {problem}; recomputing it")
        return None

    def put(self, key: str, config: dict[str, Any], result: Any, **extra: Any) -> dict[str, Any]:
        """Store `result` (a JSON-able dict) under `key` atomically, with the digest of the entry;
        returns the entry as read back."""
        if not isinstance(result, dict):
            raise InterpError(f"a stored result must be a dict of JSON values, got {type(result).__name__}")
        entry = {"key": key, "config": config, "version": self.version, **({"study": self.study} if self.study else {}),
                 **extra, "result": result}
        try:
            entry = json.loads(json.dumps(entry))  # as it reads back (tuples as lists), which is what the digest covers
        except TypeError as err:
            raise InterpError(f"a stored result must be JSON-able (save tensors with interp.results.save under "
                              f"Store.files(key) and store their file names): {err}") from None
        entry["digest"] = digest(entry)
        text = json.dumps(entry, indent=1) + "\n"
        write_text_atomic(self._entry(key), text)
        self._noted.discard(key)
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
        self.store.put(job["key"], cfg, self.done[job["id"]], grid_sha256=sha256_file(self.out / file))
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
