"""The Ray executor of `interp.sweep`: `interp sweep CONFIG --out DIR --executor ray [--address ADDR]`.

One Ray actor per model loads that model once and runs its jobs in turn; each job's Grid comes
back to the driver, which writes it through the sweep's public result sink
(`interp.sweep.store.Recorder`: Grid.save, the job's `Store` entry and results.json, all atomic), so the workers need no
shared file system, only `interp` and the model specs (hub names, or directories present on every node).

Cluster: no address starts a local cluster (this machine's CPUs, no dashboard) and stops it at
the end; `address="auto"` joins the cluster `ray start` runs here; "HOST:PORT" joins that one. An
address where nothing answers fails within seconds with an InterpError. If this process already
called `ray.init`, that connection is used and left open.

Faults: a worker process that dies (SIGKILL, OOM killer, lost node) restarts its actor (the model
loads again) and Ray retries the job that was running and the ones queued behind it, up to
`retries` times; finished jobs are already on the driver's disk and are never rerun. A job that
raises a Python exception is not retried (the same config raises the same error): its error is
recorded in results.json["failed"] and the other jobs finish. A driver killed mid-sweep loses
only the jobs in flight: rerun the command and it resumes from results.json like the local executor.
"""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING, Any

from interp.errors import InterpError

if TYPE_CHECKING:
    from interp.sweep.store import Recorder

__all__ = ["connect", "execute"]


def _probe(address: str, timeout: float = 3.0) -> None:
    """Fail fast when nothing listens at HOST:PORT (ray.init would otherwise retry for a long time)."""
    target = address.split("://", 1)[-1]
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise InterpError(f"Ray address {address!r}: give 'auto', HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as err:
        raise InterpError(f"no Ray cluster answers at {address} ({err}); start one with `ray start --head` "
                          "or leave out --address for a local cluster") from None


def connect(address: str | None, *, num_cpus: int | None = None) -> bool:
    """Connect this process to Ray; returns whether we started it (and so must shut it down)."""
    try:
        import ray
    except ImportError:
        raise InterpError("--executor ray needs Ray: pip install 'interp[ray]' (or 'ray>=2.9')") from None
    if address not in (None, "auto"):
        _probe(address)
    if ray.is_initialized():
        return False
    quiet = dict(include_dashboard=False, log_to_driver=False, configure_logging=True, logging_level="ERROR")
    if address is None:
        ray.init(num_cpus=num_cpus or os.cpu_count(), object_store_memory=256 * 2**20, **quiet)
        return True
    try:
        ray.init(address=address, **{k: v for k, v in quiet.items() if k != "include_dashboard"})
    except (ConnectionError, RuntimeError, TimeoutError) as err:
        raise InterpError(f"could not join the Ray cluster at {address!r}: {err}") from None
    return True


class SweepWorker:
    """A Ray actor (made by `ray.remote(...)(SweepWorker)`): holds one model, runs its jobs in turn."""

    def __init__(self, spec: str, threads: int):
        import torch

        torch.set_num_threads(max(1, threads))
        self.spec, self.model = spec, None

    def run(self, job: dict[str, Any]):
        from interp.model import load
        from interp.sweep.jobs import run_job

        start = time.time()
        if self.model is None:
            self.model = load(self.spec)
        grid = run_job(job["config"], self.model)
        return grid, time.time() - start, {"pid": os.getpid(), "node": socket.gethostname()}


def execute(pending: list, recorder: Recorder, *, address: str | None = None, progress: bool = True, num_cpus: int | None = None,
            worker_cpus: float = 1, worker_gpus: float = 0, retries: int = 3, on_result=None) -> None:
    """Run `pending` jobs on Ray actors (one per model); hand each result to `recorder` as it lands.

    on_result(job, info) is called after each job is written (info: pid and node of the worker);
    the tests use it to kill a worker half-way."""
    started = connect(address, num_cpus=num_cpus)
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    try:
        Worker = ray.remote(max_restarts=retries, max_task_retries=retries)(SweepWorker)
        actors = {}
        refs = {}
        for job in pending:  # actor tasks run in submission order: a model's jobs run in config order
            spec = job["model"]
            if spec not in actors:
                actors[spec] = Worker.options(num_cpus=worker_cpus, num_gpus=worker_gpus).remote(
                    spec, int(worker_cpus) or 1)
            refs[actors[spec].run.remote(dict(job))] = job
        waiting = list(refs)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            job = refs[ready[0]]
            try:
                grid, seconds, info = ray.get(ready[0])
            except RayTaskError as err:  # the job's own exception: not retried
                cause = err.cause if getattr(err, "cause", None) is not None else err
                recorder.failed_job(job, f"{type(cause).__name__}: {cause}")
                continue
            except RayActorError as err:  # the worker died more than `retries` times
                recorder.failed_job(job, f"worker died on every retry: {type(err).__name__}: {err}")
                continue
            recorder.finished(job, grid, seconds)
            if on_result is not None:
                on_result(job, {**info, "actor": actors[job["model"]]})
    finally:
        if started:
            ray.shutdown()
