"""The Ray executor on a real local Ray cluster (Ray's own GCS, raylet and worker processes)."""

import json
import os
import signal
import time

import pytest
import torch

from interp.errors import InterpError
from interp.sweep import SweepError, run

ray = pytest.importorskip("ray")

from test_sweep import BROKEN, CONFIG, _grids, _without_seconds  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=128 * 2**20, log_to_driver=False,
             logging_level="ERROR")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def reference(tmp_path_factory, english_dirs):
    root = tmp_path_factory.mktemp("ray-sweep")
    config = root / "sweep.toml"
    config.write_text(CONFIG.format(**english_dirs))
    return config, run(config, root / "local", progress=False), root / "local"


def _same(ref_summary, ref_dir, summary, out):
    assert summary["complete"] and _without_seconds(summary) == _without_seconds(ref_summary)
    ref, got = _grids(ref_dir), _grids(out)
    assert ref.keys() == got.keys()
    for name in ref:
        assert torch.equal(ref[name].values.nan_to_num(-1), got[name].values.nan_to_num(-1)), name
        run_only = ("peak_memory",)  # measured per run, like seconds
        assert {k: v for k, v in ref[name].meta.items() if k not in run_only} == \
            {k: v for k, v in got[name].meta.items() if k not in run_only}


def test_ray_results_identical_to_local(cluster, reference, tmp_path):
    config, ref_summary, ref_dir = reference
    workers = set()
    summary = run(config, tmp_path / "ray", progress=False, executor="ray",
                  on_result=lambda job, info: workers.add((job["model"], info["pid"])))
    _same(ref_summary, ref_dir, summary, tmp_path / "ray")
    assert len({pid for _, pid in workers}) == 2  # one actor per model, each ran its model's three jobs
    assert not [p for p in (tmp_path / "ray").rglob(".*") if p.is_file()]


def test_sigkill_of_a_worker_half_way_reruns_its_job(cluster, reference, tmp_path):
    config, ref_summary, ref_dir = reference
    killed, pids = [], []

    def kill_first(job, info):
        pids.append((job["model"], info["pid"]))
        if not killed:  # that actor has now started its model's next job: kill it mid-job
            os.kill(info["pid"], signal.SIGKILL)
            killed.append(info)

    summary = run(config, tmp_path / "ray", progress=False, executor="ray", on_result=kill_first)
    _same(ref_summary, ref_dir, summary, tmp_path / "ray")
    model = pids[0][0]
    later = [pid for m, pid in pids[1:] if m == model]
    assert later and later[-1] != killed[0]["pid"]  # a restarted actor (a new process) finished its jobs


def test_a_job_failing_every_try_is_reported_and_the_others_finish(cluster, tmp_path, english_dirs):
    path = tmp_path / "bad.toml"
    path.write_text(BROKEN.format(model=english_dirs["gpt2"]) + f"""
[[experiment]]
name = "fine"
kind = "attribution"
model = "{english_dirs['gpt2']}"
task = "ioi"
split = "test"
n = 2
site = "z"
""")
    with pytest.raises(SweepError, match="layer 9 is out of range"):
        run(path, tmp_path / "out", progress=False, executor="ray")
    summary = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [j["experiment"] for j in summary["jobs"]] == ["fine"] and summary["failed"][0]["experiment"] == "broken"


def test_an_address_where_no_cluster_answers_fails_fast(reference, tmp_path):
    config = reference[0]
    start = time.time()
    with pytest.raises(InterpError, match="no Ray cluster answers at 127.0.0.1:9"):
        run(config, tmp_path / "out", progress=False, executor="ray", address="127.0.0.1:9")
    assert time.time() - start < 10
    with pytest.raises(InterpError, match="need --executor ray"):
        run(config, tmp_path / "out", progress=False, address="auto")
