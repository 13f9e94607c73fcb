"""The GPU estimate's inputs are measured from the forward itself: ops, FLOPs and weight bytes
against hand counts on a tiny model, and the estimate is the largest of its three bounds."""

import pytest
import torch

from interp.studies.gpu_estimate import ASSUMED, forward_profile, gpu_seconds, on_gpu


def test_profile_counts_the_forward(gpt2):
    cfg = gpt2.cfg
    p = forward_profile(gpt2, batch=2, seq=5, repeats=1)
    assert p["weight_bytes"] == sum(t.numel() * t.element_size() for t in gpt2.parameters())
    # every matmul of the blocks and the unembedding: 2 FLOPs per weight per token (attention scores on top)
    per_token = 2 * cfg.n_layers * (4 * cfg.d_model * cfg.n_heads * cfg.d_head + 2 * cfg.d_model * cfg.d_mlp) + 2 * cfg.d_model * cfg.d_vocab
    assert 10 * per_token <= p["flops"] <= 10 * per_token * 1.5
    assert p["ops"] > 10 * cfg.n_layers  # several kernels per block
    assert p["ops"] < 60 * cfg.n_layers + 40  # views, allocations and metadata ops launch nothing (counted: ~100 a layer)
    assert p["gpu_forward_s"] == [gpu_seconds(p["ops"], p["weight_bytes"], p["flops"], us) for us in ASSUMED["launch_us"]]
    assert p["cpu_over_gpu"] == [p["cpu_forward_s"] / g for g in p["gpu_forward_s"]]


def test_the_largest_bound_wins():
    bw, peak = ASSUMED["gb_per_s"] * 1e9, ASSUMED["tflops"] * 1e12
    assert gpu_seconds(1000, 0, 0, 10.0) == pytest.approx(0.01)  # launch-bound: 1000 ops x 10 us
    assert gpu_seconds(1, int(bw), 0, 10.0) == pytest.approx(1.0)  # memory-bound: one second of bandwidth
    assert gpu_seconds(1, 0, int(2 * peak), 10.0) == pytest.approx(2.0)  # compute-bound: two seconds of FLOPs


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
