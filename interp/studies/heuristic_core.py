"""The heuristic core (Bhaskar, Friedman & Chen 2024) at toy scale: the reproduction and the demo section.

Masks are learned on subject-verb agreement (in distribution) at each sparsity and seed, then
evaluated on sva_id and on sva_attractor_mismatch, whose attractor always disagrees with the head
noun (so "agree with the nearest noun" fails). Works on decoders and on the BERT encoder
(masked-verb SVA). See docs/heuristic_core.md. Built from public names of `interp.masking` only.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from interp import masking, tasks
from interp.model import ZOO_DIR, build_tiny, describe, load
from interp.results import Heading, stack
from interp.tasks import english

__all__ = ["demo_section", "repro", "sva_tasks"]


def sva_tasks(masked: bool, n_train: int, n_eval: int) -> tuple[tasks.Task, dict[str, tasks.Task]]:
    """Training rows (sva_id, seed 1) and the evaluation splits sva_id / sva_attractor_mismatch (seed 2)."""
    train = tasks.make("sva", split="sva_id", n=n_train, seed=1, masked=masked)
    splits = {s: tasks.make("sva", split=s, n=n_eval, seed=2, masked=masked) for s in ("sva_id", "sva_attractor_mismatch")}
    return train, splits


def repro(
    progress: bool = True,
    *,
    spec: str = "zoo:lm-gpt2",
    sparsities: Sequence[float] = (0.5, 0.7),
    seeds: Sequence[int] = tuple(range(8)),
    steps: int = 200,
    n_train: int = 512,
    n_eval: int = 512,
) -> dict[str, Any]:
    """The heuristic-core study at toy scale on `spec`; returns a JSON-serialisable dict.

    Small models run fastest on one torch thread: the CLI (or the caller) sets that, not this."""
    start = time.perf_counter()
    model = load(spec)
    masked = not describe(model)["is_causal"]
    train, splits = sva_tasks(masked, n_train, n_eval)
    result = masking.study(model, train, splits, sparsities=sparsities, seeds=seeds, steps=steps, progress=progress)
    out = result.to_json()
    out.update({"model": spec, "masked": masked, "steps": steps, "ablation": "mean", "seconds": time.perf_counter() - start})
    return out


def demo_section(workdir: Path) -> list:
    """Report items: subnetwork masks of an SVA model, their core and overlap, ID vs OOD accuracy."""
    if (ZOO_DIR / "lm-gpt2" / "config.json").exists():
        spec = "zoo:lm-gpt2"
    else:
        spec = str(build_tiny("gpt2", Path(workdir) / "models" / "masking-gpt2", words=english.WORDS, n_layers=2))
    model = load(spec)
    train, splits = sva_tasks(False, 256, 256)
    result = masking.study(model, train, splits, sparsities=(0.5,), seeds=range(4), steps=120, progress=False)
    masks = stack([m.to_grid() for m in result.masks], "model", result.evaluation.labels[0][1:])
    return [
        Heading("Subnetworks and the heuristic core"),
        f"Hard-concrete masks learned at 50% sparsity with four seeds on {spec} (subject-verb agreement, "
        "in distribution), then evaluated out of distribution on attractor-mismatch SVA. "
        "Run `interp repro heuristic-core` for the full study.",
        replace(masks, meta={**masks.meta, "title": "kept units per subnetwork"}),
        result.core,
        result.overlap,
        result,
    ]
