"""Peak memory of one piece of work, on the device it ran on, for a result's meta.

    with memory.peak(device) as seen:
        ...                                    # the work
    meta["peak_memory"] = seen.record()        # {"device": "cuda:0", "bytes": ..., "what": ...}

On CUDA the peak is `torch.cuda.max_memory_allocated` after `reset_peak_memory_stats` (tensors
only, the allocator's own count). On Linux CPUs it is the process's resident high-water mark
(VmHWM) after resetting it through /proc/self/clear_refs, so it includes the weights and
everything else resident; where that reset is refused the record says so and holds the
process's lifetime peak instead. Both resets touch only these counters, never an allocation.
"""

from __future__ import annotations

import functools
import resource
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from interp.model import input_device

__all__ = ["Peak", "peak", "records_peak", "resident_peak"]


def resident_peak() -> int:
    """This process's resident high-water mark in bytes (VmHWM; ru_maxrss where /proc is absent)."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_resident_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


@dataclass
class Peak:
    """What `peak` measured: `bytes` and what they count (`what`)."""

    device: str
    bytes: int = 0
    what: str = ""
    _start: int = field(default=0, repr=False)

    def record(self) -> dict:
        return {"device": self.device, "bytes": int(self.bytes), "gib": round(self.bytes / 2**30, 4), "what": self.what}


@contextmanager
def peak(device: str | torch.device) -> Iterator[Peak]:
    """Measures the peak memory of the body on `device` (see the module docstring); the numbers
    are filled in when the body ends, even when it raises."""
    dev = torch.device(device)
    seen = Peak(str(dev))
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        seen._start = torch.cuda.memory_allocated(dev)
        seen.what = "peak bytes allocated by torch on this GPU during the call (weights included)"
    elif _reset_resident_peak():
        seen.what = "peak resident bytes of the process during the call (weights included)"
    else:
        seen.what = "peak resident bytes of the process since it started (this system cannot reset the counter)"
    try:
        yield seen
    finally:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
            seen.bytes = torch.cuda.max_memory_allocated(dev)
        elif dev.type == "mps":
            seen.bytes = int(torch.mps.driver_allocated_memory())
            seen.what = "memory the MPS driver holds at the end of the call"
        else:
            seen.bytes = resident_peak()


_DEPTH = [0]  # calls of `records_peak` functions in progress: only the outermost measures


def _device_of(first: Any) -> torch.device:
    if isinstance(first, torch.nn.Module):
        return input_device(first)
    return first.device if isinstance(first, torch.Tensor) else torch.device("cpu")


def records_peak(fn: Callable) -> Callable:
    """Decorator for an analysis `fn(model_or_tensor, ...)`: the peak memory of the call, on the
    device of its first argument, goes into its result's meta["peak_memory"] (each result's, for a
    list or a dict of results). A call made inside another such call leaves the measuring to the outer one, whose
    counter it would otherwise reset."""

    @functools.wraps(fn)
    def measured(*args: Any, **kwargs: Any) -> Any:
        if _DEPTH[0]:
            return fn(*args, **kwargs)
        _DEPTH[0] += 1
        try:
            with peak(_device_of(args[0] if args else None)) as seen:
                out = fn(*args, **kwargs)
        finally:
            _DEPTH[0] -= 1
        results = out.values() if isinstance(out, dict) else out if isinstance(out, (list, tuple)) else (out,)
        for result in results:
            meta = getattr(result, "meta", None)
            if isinstance(meta, dict):
                meta["peak_memory"] = seen.record()
        return out

    return measured
