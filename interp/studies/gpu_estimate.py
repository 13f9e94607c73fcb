"""One GPU's time for a study measured on this CPU: an estimate, scaled from one measured forward.

A study's units spend their time in forwards (and backwards) of one model, so its GPU time is about
its measured CPU time times (GPU forward / CPU forward). The CPU forward is timed here; the GPU
forward is the largest of three lower bounds computed from the same forward's measured work: its
leaf torch ops times a per-op launch cost (kernel launch and Python), its weight bytes over memory
bandwidth, and its FLOPs over peak throughput. Written by hand: no library predicts a GPU's time from
a CPU run; this is the smallest model that says which bound a forward of this size hits. An
estimate, not a measurement: the doc says so beside every number it gives.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

# assumed for one datacenter GPU (H100/H200 class, fp32 without tensor cores); the JSON keeps them
ASSUMED = {"launch_us": [5.0, 10.0], "gb_per_s": 2000.0, "tflops": 50.0}


# aten ops that launch no kernel on a GPU (views, allocation, metadata) or only through the ops they call
NO_KERNEL = frozenset({
    "view", "_unsafe_view", "as_strided", "reshape", "expand", "expand_as", "t", "transpose", "unsqueeze", "squeeze",
    "select", "slice", "permute", "unflatten", "flatten", "split", "chunk", "unbind", "narrow", "view_as", "alias",
    "empty", "empty_strided", "empty_like", "resize_", "resolve_conj", "resolve_neg", "result_type", "detach", "lift_fresh",
    "dropout", "to", "contiguous", "linear", "matmul", "size", "stride", "is_nonzero", "item", "_local_scalar_dense",
})


def leaf_ops(prof) -> int:
    """Kernels a torch.profiler trace (CPU) would launch on a GPU: per top-level aten op, the deepest
    ops under it that do work (an op whose children launch nothing counts once; views, allocations
    and metadata ops in NO_KERNEL count nothing)."""
    def kernels(e) -> int:
        inner = sum(kernels(c) for c in e.cpu_children if c.name.startswith("aten::"))
        return inner if inner else int(e.name.removeprefix("aten::") not in NO_KERNEL)

    roots = [e for e in prof.events() if e.name.startswith("aten::")
             and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))]
    return sum(kernels(e) for e in roots)


def gpu_seconds(ops: int, weight_bytes: int, flops: int, launch_us: float) -> float:
    """One forward on the assumed GPU: the largest of its launch, memory and compute bounds."""
    return max(ops * launch_us * 1e-6, weight_bytes / (ASSUMED["gb_per_s"] * 1e9), flops / (ASSUMED["tflops"] * 1e12))


def forward_profile(model, batch: int, seq: int, repeats: int = 3) -> dict[str, Any]:
    """One forward of `model` on `batch` x `seq` random tokens: its CPU time here (best of `repeats`,
    the study's one torch thread), its leaf ops, FLOPs and weight bytes, and the GPU estimate
    (`gpu_forward_s`, one value per assumed launch cost) with `cpu_over_gpu`, the speed-up it implies."""
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    if batch < 1 or seq < 1:
        raise ValueError(f"forward_profile needs batch >= 1 and seq >= 1, got batch={batch}, seq={seq}")
    vocab = int(model.cfg.d_vocab)
    tokens = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            model(tokens)
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                model(tokens)
                best = min(best, time.perf_counter() - t0)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                model(tokens)
            with FlopCounterMode(display=False) as flops:
                model(tokens)
    finally:
        torch.set_num_threads(threads)
    ops, n_flops = leaf_ops(prof), int(flops.get_total_flops())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    gpu = [gpu_seconds(ops, weight_bytes, n_flops, us) for us in ASSUMED["launch_us"]]
    return {"batch": batch, "seq": seq, "cpu_forward_s": best, "ops": ops, "flops": n_flops, "weight_bytes": weight_bytes,
            "assumed": ASSUMED, "gpu_forward_s": gpu, "cpu_over_gpu": [best / g for g in gpu]}


def bound_words(num: Callable[[Any], str], launch: tuple[int, ...] = (0, 1)) -> str:
    """How a doc says the GPU bound, each assumption rendered by `num(*keys)` (a value of a profile's
    `assumed` block, bound to the JSON by the caller); `launch` picks the launch costs named."""
    us = "–".join(num("launch_us", i) for i in launch)
    return (f"the largest of its torch ops at {us} µs each, its weight bytes at {num('gb_per_s')} GB/s and its FLOPs at "
            f"{num('tflops')} TFLOP/s")


def on_gpu(cpu_time: float | int | None, profile: dict[str, Any]) -> list[float] | None:
    """A time measured (or scaled from measured units) on this CPU, on one GPU: a [low, high] estimate
    in the same unit."""
    if cpu_time is None:
        return None
    return sorted(cpu_time / r for r in profile["cpu_over_gpu"])
