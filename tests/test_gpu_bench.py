"""benchmarks/gpu.py runs end to end (here on the CPU, at the tiniest size): every section writes its
rows, each timing row carries its ratio to its reference (TL or HF) and to its limit, and a row that
fails is recorded with its error while the run goes on. benchmarks/gpu_model.py builds a model with
random weights from a real config that interp boots."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import interp

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _bench(name: str):
    """The module benchmarks/NAME.py (the benchmarks are scripts, not a package: they import each other
    from their own folder)."""
    import importlib

    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


def test_gpu_benchmark_runs_end_to_end_on_the_cpu(tmp_path):
    out = tmp_path / "gpu.json"
    cmd = [sys.executable, str(BENCH / "gpu.py"), "--spec", "zoo:lm-llama", "--device", "cpu", "--dtypes", "float32",
           "--batches", "1,2", "--new-tokens", "2", "--decode-batch", "2", "--decode-steps", "1", "--repeats", "1",
           "--every", "8", "--zoo", "lm-llama", "--decode-zoo", "lm-gpt2", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["device"] == "cpu" and res["gpu"] is None
    rows = res["rows"]
    assert not [r for r in rows if "error" in r], [(r["what"], r["error"]) for r in rows if "error" in r]
    whats = [r["what"] for r in rows]
    for what in ("exact patching, head x all pos (z)", "exact patching, resid_pre x pos", "attribution patching (z)",
                 "steered generation, 2 tokens"):
        assert sorted(r["batch"] for r in rows if r["what"] == what) == [1, 2], what
    assert sum(w.startswith("entry point: ") for w in whats) == 11
    assert {r["model"] for r in rows if r["what"].startswith("one decode step")} == {"zoo:lm-llama", "zoo:lm-gpt2"}
    timed = [r for r in rows if r["what"] not in ("load", "IOI prompts") and not r["what"].startswith("entry point")]
    assert len(timed) == 4 * 2 + 2 * 2 + 1
    for r in timed:
        assert r["interp / ref"] == pytest.approx(r["interp_s"] / r["ref_s"]) and r["ref"], r["what"]
        assert r["interp / limit"] == pytest.approx(r["interp_s"] / r["limit_s"]), r["what"]
    attribution = [r for r in rows if r["what"] == "attribution patching (z)"]
    assert all(r["max_abs_diff_vs_tl"] < 1e-4 for r in attribution)  # TL's per-example metric agrees with interp's
    forward = next(r for r in rows if r["what"].startswith("one bridge forward") and r["model"] == "zoo:lm-llama")
    assert forward["ops"] > 0 and forward["flops"] > 0 and forward["weight_bytes"] > 0 and forward["seq"] == 1


def test_a_failing_row_is_recorded_and_the_file_is_whole_after_each_row(tmp_path):
    Recorder = _bench("gpu").Recorder
    out = tmp_path / "gpu.json"
    rec = Recorder(str(out), {"device": "cpu"})
    assert json.loads(out.read_text())["rows"] == []
    rec.row("breaks", lambda: 1 / 0, batch=1)
    assert json.loads(out.read_text())["rows"][0]["error"].startswith("ZeroDivisionError")
    rec.row("works", lambda: {"interp_s": 1.0})
    rows = json.loads(out.read_text())["rows"]
    assert [r["what"] for r in rows] == ["breaks", "works"] and rows[1]["interp_s"] == 1.0
    assert not list(tmp_path.glob("*.tmp*"))  # nothing half-written left beside it


def test_random_weight_model_from_a_real_config_boots(tmp_path):
    build = _bench("gpu_model").build
    spec = tmp_path / "spec"
    spec.mkdir()
    for f in Path(interp.model.resolve("zoo:lm-llama")).iterdir():
        if f.suffix == ".json" and f.is_file():
            (spec / f.name).write_bytes(f.read_bytes())
    model = interp.load(build(spec, tmp_path / "model", layers=1))
    assert model.cfg.n_layers == 1
    with torch.no_grad():
        assert torch.isfinite(model(torch.tensor([[1, 2, 3]]))).all()
