"""The GPU estimate's inputs are measured from the forward itself: ops, FLOPs and weight bytes
against hand counts on a tiny model, and the estimate is the largest of its three bounds. Its per-op
cost is fitted to measured GPU forwards (interp/data/gpu_calibration.json): the fit reproduces its
own points within the error it states, and a bad calibration file is refused with what was wrong."""

import json
import math
from pathlib import Path

import pytest
import torch

from interp.errors import InterpError
from interp.studies import protocol
from interp.studies.gpu_estimate import (CALIBRATION, estimate, fit, forward_profile, gpu_seconds, load_calibration, on_gpu,
                                         recalibrate)

CAL = load_calibration()
BOUNDS = {"gb_per_s": CAL["gb_per_s"], "tflops": CAL["tflops"]}
DOCS = Path(__file__).resolve().parent.parent / "docs"


def _fitted(p, cal=CAL) -> float:
    return gpu_seconds(p["ops"], p["weight_bytes"], p["flops"], cal["us_per_op"], cal["gb_per_s"], cal["tflops"])


def test_profile_counts_the_forward(gpt2):
    cfg = gpt2.cfg
    p = forward_profile(gpt2, batch=2, seq=5, repeats=1)
    assert p["weight_bytes"] == sum(t.numel() * t.element_size() for t in gpt2.parameters())
    # every matmul of the blocks and the unembedding: 2 FLOPs per weight per token (attention scores on top)
    per_token = 2 * cfg.n_layers * (4 * cfg.d_model * cfg.n_heads * cfg.d_head + 2 * cfg.d_model * cfg.d_mlp) + 2 * cfg.d_model * cfg.d_vocab
    assert 10 * per_token <= p["flops"] <= 10 * per_token * 1.5
    assert p["ops"] > 10 * cfg.n_layers  # several kernels per block
    assert p["ops"] < 60 * cfg.n_layers + 40  # views, allocations and metadata ops launch nothing (counted: ~100 a layer)
    assert p["gpu_forward_s_fit"] == _fitted(p)
    assert p["gpu_forward_s"] == [p["gpu_forward_s_fit"] * e for e in CAL["error"]]  # the calibration's error, visible
    assert p["cpu_over_gpu"] == [p["cpu_forward_s"] / g for g in p["gpu_forward_s"]]
    assert p["calibration"]["us_per_op"] == CAL["us_per_op"] and "assumed" not in p


def test_the_largest_bound_wins():
    bw, peak = BOUNDS["gb_per_s"] * 1e9, BOUNDS["tflops"] * 1e12
    assert gpu_seconds(1000, 0, 0, 10.0, **BOUNDS) == pytest.approx(0.01)  # host-bound: 1000 ops x 10 us
    assert gpu_seconds(1, int(bw), 0, 10.0, **BOUNDS) == pytest.approx(1.0)  # memory-bound: one second of bandwidth
    assert gpu_seconds(1, 0, int(2 * peak), 10.0, **BOUNDS) == pytest.approx(2.0)  # compute-bound: two seconds of FLOPs


def test_the_calibration_reproduces_its_points_within_its_stated_error():
    lo, hi = CAL["error"]
    assert lo <= 1 <= hi and CAL["forwards"] == len(CAL["points"]) == 5
    ratios = []
    for p in CAL["points"]:
        for ms in p["measured_ms"]:  # a range point (the zoo's "7-13 ms") holds at both ends
            ratios.append(ms * 1e-3 / _fitted(p))
            assert lo * (1 - 1e-9) <= ratios[-1] <= hi * (1 + 1e-9), p
    assert min(ratios) == pytest.approx(lo) and max(ratios) == pytest.approx(hi)  # the stated error is the spread, no wider
    assert lo * hi == pytest.approx(1.0)  # the fit sits in the geometric middle of the spread
    # the calibration file's own points: SmolLM2's shape 45.7 ms over 2136 counted ops; the old 5-10 us a op was 2-7x optimistic
    smol = next(p for p in CAL["points"] if p["model"] == "smollm2-135m")
    assert smol["ops"] == 2136 and smol["measured_ms"] == [45.7, 45.7]
    assert 10.0 < CAL["us_per_op"] < 52.0


def test_the_fit_recovers_a_known_cost_and_skips_memory_bound_points():
    points = [{"ops": n, "weight_bytes": 0, "flops": 0, "measured_ms": [n * 0.02, n * 0.02]} for n in (100, 300, 2000)]
    us, error = fit(points, BOUNDS)
    assert us == pytest.approx(20.0) and error == pytest.approx([1.0, 1.0])
    heavy = {"ops": 10, "weight_bytes": int(2e10), "flops": 0, "measured_ms": [10.0, 10.0]}  # 10 ms of bandwidth
    us, error = fit(points + [heavy], BOUNDS)
    assert us == pytest.approx(20.0) and error == pytest.approx([1.0, 1.0])


def test_estimate_reads_counts_only_and_replaces_old_assumptions():
    old = {"batch": 20, "seq": 1, "cpu_forward_s": 0.156, "ops": 2136, "flops": 5380577280, "weight_bytes": 651306240,
           "assumed": {"launch_us": [5.0, 10.0]}, "gpu_forward_s": [0.01068, 0.02136], "cpu_over_gpu": [14.6, 7.3]}
    new = estimate(old, CAL)
    assert "assumed" not in new and {k: new[k] for k in ("batch", "seq", "cpu_forward_s", "ops")} == \
        {"batch": 20, "seq": 1, "cpu_forward_s": 0.156, "ops": 2136}
    assert new["gpu_forward_s"][0] <= 0.0457 <= new["gpu_forward_s"][1]  # the measured H200 forward is inside the range
    assert estimate(new, CAL) == new  # idempotent


def test_profile_runs_on_one_thread_and_restores_the_callers(gpt2):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        forward_profile(gpt2, 1, 4, repeats=1)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_more_rows_more_flops_about_the_same_ops(gpt2):
    a, b = forward_profile(gpt2, 1, 4, repeats=1), forward_profile(gpt2, 4, 4, repeats=1)
    assert b["flops"] == pytest.approx(4 * a["flops"], rel=0.01)
    assert abs(a["ops"] - b["ops"]) <= 0.1 * a["ops"]  # launches do not grow with rows (a few shape-dependent paths)


def test_on_gpu_scales_and_orders():
    prof = {"cpu_over_gpu": [4.0, 2.0]}
    assert on_gpu(8.0, prof) == [2.0, 4.0]
    assert on_gpu(None, prof) is None


def test_bad_shape_is_named(gpt2):
    with pytest.raises(ValueError, match="batch >= 1"):
        forward_profile(gpt2, 0, 4)


# --- the calibration file: refused with what was wrong; a GPU benchmark's rows join it ---------------------------------


def _write(tmp_path: Path, data, name: str = "cal.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


RAW = json.loads(CALIBRATION.read_text())


@pytest.mark.parametrize("change, message", [
    (lambda d: "{not json", "not JSON"),
    (lambda d: {**d, "format": "other/1"}, "format is 'other/1'"),
    (lambda d: {k: v for k, v in d.items() if k != "points"}, "no `points`"),
    (lambda d: {**d, "points": []}, "non-empty list"),
    (lambda d: {**d, "points": [{k: v for k, v in d["points"][0].items() if k != "ops"}]}, r"point 0 lacks \['ops'\]"),
    (lambda d: {**d, "points": [{**d["points"][0], "measured_ms": -1}]}, "measured_ms -1"),
    (lambda d: {**d, "points": [{**d["points"][0], "measured_ms": [13, 7]}]}, r"\[low, high\]"),
    (lambda d: {**d, "date": "December"}, "not YYYY-MM"),
])
def test_a_malformed_calibration_is_refused_with_what_was_wrong(tmp_path, change, message):
    with pytest.raises(InterpError, match=message):
        load_calibration(_write(tmp_path, change(RAW)))


def test_a_missing_calibration_names_the_file(tmp_path, monkeypatch):
    with pytest.raises(InterpError, match=r"nowhere\.json: no such file.*gpu_calibration\.json"):
        load_calibration(tmp_path / "nowhere.json")
    monkeypatch.setenv("INTERP_GPU_CALIBRATION", str(tmp_path / "elsewhere.json"))  # an installed copy points here
    with pytest.raises(InterpError, match=r"elsewhere\.json: no such file"):
        load_calibration()


def _bench(tmp_path: Path, rows: list, **top) -> Path:
    return _write(tmp_path, {"device": "cuda", "gpu": "NVIDIA H100", "date": "2027-01-10", "rows": rows, **top}, "gpu.json")


def test_a_gpu_benchmarks_forward_rows_join_and_replace_points(tmp_path):
    _bench(tmp_path, [
        {"what": "one bridge forward, batch 20 x 1 token", "model": "zoo:lm-gpt2", "batch": 20, "seq": 1, "interp_s": 0.00675},
        {"what": "one bridge forward, batch 20 x 1 token", "model": "zoo:lm-llama", "batch": 20, "seq": 1, "dtype": "bfloat16",
         "interp_s": 1.0},  # not the studies' dtype: skipped
        {"what": "exact patching, heads z", "interp_s": 1.0},  # not a forward row
        {"what": "one bridge forward, batch 20 x 1 token", "model": "zoo:lm-qwen2", "error": "OutOfMemoryError"},  # failed
        {"what": "one bridge forward, batch 20 x 1 token", "model": "big", "batch": 20, "seq": 1, "ms": 60.0, "ops": 3000,
         "weight_bytes": 0, "flops": 0},
    ])
    cal = load_calibration(_write(tmp_path, {**RAW, "include": ["gpu.json"]}))
    points = {p["model"]: p for p in cal["points"]}
    assert cal["forwards"] == 6 and points["zoo:lm-gpt2"]["measured_ms"] == pytest.approx([6.75, 6.75])
    assert points["zoo:lm-gpt2"]["ops"] == 250  # counts from the file's point of the same model and shape
    assert points["big"]["device"] == "NVIDIA H100" and cal["date"] == "2027-01"
    assert cal["devices"] == "NVIDIA H100 and NVIDIA H200" and cal["sources"] == sorted(["gpu.json", RAW["cite"]])
    for p in cal["points"]:
        for ms in p["measured_ms"]:
            assert cal["error"][0] - 1e-9 <= ms * 1e-3 / _fitted(p, cal) <= cal["error"][1] + 1e-9


@pytest.mark.parametrize("rows, top, message", [
    ([{"what": "one bridge forward", "model": "new", "batch": 1, "seq": 1, "interp_s": 0.01}], {}, "no ops/weight_bytes/flops"),
    ([{"what": "one bridge forward", "model": "zoo:lm-gpt2", "batch": 20, "seq": 1}], {}, "needs a time"),
    ([], {"device": "cpu", "gpu": None}, "not on a GPU"),
])
def test_a_bad_benchmark_row_is_refused(tmp_path, rows, top, message):
    _bench(tmp_path, rows, **top)
    with pytest.raises(InterpError, match=message):
        load_calibration(_write(tmp_path, {**RAW, "include": ["gpu.json"]}))


# --- the committed study JSONs carry the committed calibration -----------------------------------------------------------


def _committed():
    for name in sorted(protocol.REGISTRY):
        path = DOCS / f"{name.replace('-', '_')}_repro.json"
        # a study of tiny models trained here (grokking) states no GPU figure, so has nothing to recalibrate
        if path.exists() and "gpu_estimate" in path.read_text():
            yield pytest.param(name, path, id=name)


@pytest.mark.parametrize("name, path", list(_committed()))
def test_every_committed_study_json_is_calibrated_with_the_committed_calibration(name, path):
    """Recalibrating a committed JSON changes nothing: its GPU figures were derived from this calibration
    (after a change of interp/data/gpu_calibration.json: `python -m interp.studies.gpu_estimate STUDY JSON DOC`)."""
    import importlib

    data = json.loads(path.read_text())
    again = importlib.import_module(protocol.get(name).module).recalibrate_gpu(data, CAL)
    assert _close(again, data), f"{path.name} was not derived from the committed calibration"
    assert "assumed" not in json.dumps(data).replace("bounds_assumed", "")


def _close(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def test_recalibrate_refuses_a_study_without_the_hook(tmp_path, monkeypatch):
    monkeypatch.setitem(protocol.REGISTRY, "none", protocol.Entry("none", "interp.studies.units"))
    with pytest.raises(InterpError, match="no recalibrate_gpu"):
        recalibrate("none", tmp_path / "x.json")
