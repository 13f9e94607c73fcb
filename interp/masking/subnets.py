"""Subnetworks: the heuristic core, overlap, evaluation per split, the study, effective size, the
toy-scale reproduction and the demo section (see interp.masking)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp.hooks import hooks
from interp.masking.learn import learn_mask, subnetworks
from interp.masking.mask import (
    Ablation, HeadMask, _check_mask, _check_task, _logits, _sites, mask_hooks, references, threads,
)
from interp.metrics import binary_accuracy, for_task
from interp.results import Grid
from interp.tasks.base import Task

def heuristic_core(masks: Sequence[HeadMask]) -> HeadMask:
    """The units present in every (binarised) mask."""
    if not masks:
        raise ValueError("heuristic_core needs at least one mask")
    bins = [m.binarize() for m in masks]
    shapes = {(tuple(m.heads.shape), m.mlps is None) for m in bins}
    if len(shapes) != 1:
        raise ValueError(f"masks disagree in shape: {sorted(shapes)}; all must cover the same [layer, head] (and MLPs)")
    heads = torch.stack([m.heads for m in bins]).amin(0)
    mlps = None if bins[0].mlps is None else torch.stack([m.mlps for m in bins]).amin(0)
    return HeadMask(heads, mlps, {"name": "core", "of": [m.name for m in masks]})


def jaccard(a: Tensor, b: Tensor) -> float:
    """|a ∩ b| / |a ∪ b| of two binary unit vectors (1.0 when both are empty)."""
    a, b = a > 0.5, b > 0.5
    union = int((a | b).sum())
    return 1.0 if union == 0 else int((a & b).sum()) / union


def overlap(masks: Sequence[HeadMask]) -> Grid:
    """Pairwise Jaccard overlap of the masks' kept units: a [model, other] Grid."""
    if not masks:
        raise ValueError("overlap needs at least one mask")
    units = [m.units() for m in masks]
    if len({u.shape for u in units}) != 1:
        raise ValueError(f"masks cover different unit counts: {[u.numel() for u in units]}")
    n = len(masks)
    values = torch.tensor([[jaccard(units[i], units[j]) for j in range(n)] for i in range(n)])
    names = _names(masks)
    return Grid(values, ("model", "other"), (names, names), {"metric": "jaccard", "title": "overlap of kept units (Jaccard)"})


def _names(masks: Sequence[HeadMask]) -> tuple[str, ...]:
    names = [m.name for m in masks]
    return tuple(n if names.count(n) == 1 else f"{n} #{i}" for i, n in enumerate(names))


def _as_splits(splits: Mapping[str, Task] | Sequence[Task]) -> dict[str, Task]:
    out = dict(splits) if isinstance(splits, Mapping) else {t.split: t for t in splits}
    if not out:
        raise ValueError("evaluate needs at least one split")
    for t in out.values():
        _check_task(t)
    metrics = {t.metric for t in out.values()}
    if len(metrics) != 1:
        raise ValueError(f"splits use different metrics {sorted(metrics)}; evaluate reports one metric column")
    return out


def evaluate(
    model,
    masks: HeadMask | Sequence[HeadMask],
    splits: Mapping[str, Task] | Sequence[Task],
    *,
    ablation: Ablation = "mean",
    reference: Tensor | None = None,
) -> Grid:
    """Accuracy (correct beats incorrect) and the task metric per split, for the full model and
    each mask: a [model, split, metric] Grid whose first model is "full".

    Mean ablation uses one reference for every split: `reference` token rows, by default the
    first split's clean rows. Resample uses each split's own corrupt rows.
    """
    masks = [masks] if isinstance(masks, HeadMask) else list(masks)
    tasks = _as_splits(splits)
    first = next(iter(tasks.values()))
    mean_ref = (reference if reference is not None else first.clean) if ablation == "mean" else None
    values = torch.zeros(len(masks) + 1, len(tasks), 2)
    for m in masks:
        _check_mask(model, m)
    site_union = _sites(HeadMask.full(model, mlps=any(m.mlps is not None for m in masks)))
    shared = references(model, site_union, ablation, mean_ref) if ablation != "resample" else None
    for j, task in enumerate(tasks.values()):
        refs = shared or references(model, site_union, "resample", reference if reference is not None else task.corrupt)
        for i, m in enumerate([None, *masks]):
            with hooks(model, [] if m is None else mask_hooks(m, refs)):
                logits = _logits(model, task.clean)
            values[i, j, 0] = float(binary_accuracy(logits, task.correct, task.incorrect, task.answer_pos).mean())
            values[i, j, 1] = float(for_task(task)(logits))
    labels = (("full", *_names(masks)), tuple(tasks), ("accuracy", first.metric))
    return Grid(values, ("model", "split", "metric"), labels, {"ablation": ablation, "title": "accuracy and metric per split"})


# ---------------------------------------------------------------------------------------------
# the study and effective size


@dataclass(frozen=True)
class Study:
    """Subnetworks of one model: the masks, their evaluation per split, the core and the overlap.

    `evaluation` is [model, split, metric] with model 0 = "full"; `id_split` and `ood_split` name
    the splits to contrast (drawn as a scatter).
    """

    masks: tuple[HeadMask, ...]
    evaluation: Grid
    core: HeadMask
    overlap: Grid
    id_split: str
    ood_split: str
    meta: dict[str, Any] = field(default_factory=dict)

    def accuracy(self, split: str) -> list[float]:
        """Accuracy on `split` for the full model then each mask."""
        j = self.evaluation.labels[1].index(split)
        return [float(v) for v in self.evaluation.values[:, j, 0]]

    def to_json(self) -> dict[str, Any]:
        splits = self.evaluation.labels[1]
        acc = {s: self.accuracy(s) for s in splits}
        subs = [
            {
                "seed": m.meta.get("seed"), "sparsity": m.meta.get("sparsity"),
                "accuracy": {s: acc[s][i + 1] for s in splits},
                "heads": [list(h) for h in m.kept_heads()], "mlps": m.kept_mlps(),
                "seconds": m.meta.get("seconds"),
            }
            for i, m in enumerate(self.masks)
        ]
        return {
            **self.meta,
            "full": {s: acc[s][0] for s in splits},
            "subnetworks": subs,
            "core": [list(h) for h in self.core.kept_heads()],
            "core_mlps": self.core.kept_mlps(),
            "overlap": {"labels": list(self.overlap.labels[0]), "jaccard": [[round(float(x), 4) for x in row] for row in self.overlap.values]},
        }


def study(
    model,
    task: Task,
    splits: Mapping[str, Task] | Sequence[Task],
    *,
    sparsities: Sequence[float],
    seeds: Sequence[int],
    progress: bool = False,
    **kwargs: Any,
) -> Study:
    """Learn a mask per (sparsity, seed) on `task`, evaluate each on `splits` (the first is the
    in-distribution split, the last the out-of-distribution one), and find the core per sparsity
    (the `core` field is the core across every mask). kwargs go to `learn_mask`."""
    tasks = _as_splits(splits)
    start = time.perf_counter()
    masks: list[HeadMask] = []
    for s in sparsities:
        masks += subnetworks(model, task, sparsity=s, seeds=seeds, progress=progress, **kwargs)
    ablation = kwargs.get("ablation", "mean")
    grid = evaluate(model, masks, tasks, ablation=ablation, reference=task.clean if ablation == "mean" else None)
    cores = {f"{s:g}": [list(h) for h in heuristic_core([m for m in masks if m.meta["sparsity"] == s]).kept_heads()] for s in sparsities}
    names = list(tasks)
    meta = {"task": f"{task.name}/{task.split}", "sparsities": list(sparsities), "seeds": list(seeds),
            "core_per_sparsity": cores, "seconds": time.perf_counter() - start}
    return Study(tuple(masks), grid, heuristic_core(masks), overlap(masks), names[0], names[-1], meta)


def smallest_within(kept: Sequence[int], accuracy: Tensor, full: Tensor, tolerance: float) -> int:
    """The fewest kept units (entries of `kept`, rows of `accuracy` [k, split]) whose accuracy on
    every split is within `tolerance` of `full` [split]; max(kept) if none is."""
    ok = (accuracy >= full[None] - tolerance).all(-1)
    good = [k for k, fine in zip(kept, ok.tolist()) if fine]
    return min(good) if good else max(kept)


@dataclass(frozen=True)
class EffectiveSize:
    """The fraction of units needed to stay within `tolerance` of the full model's accuracy.

    `curve` is accuracy [k, split] where k is the number of units kept (the last row is the
    full model)."""

    fraction: float
    tolerance: float
    curve: Grid


def effective_size(
    model,
    task: Task,
    splits: Mapping[str, Task] | Sequence[Task],
    *,
    tolerance: float = 0.02,
    sparsities: Sequence[float] = (0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    seed: int = 0,
    progress: bool = False,
    **kwargs: Any,
) -> EffectiveSize:
    """As in Bhaskar et al.: prune `task`'s model at each sparsity (one mask per sparsity, learned
    on `task`), and report the smallest fraction of units whose accuracy on every one of `splits`
    stays within `tolerance` of the full model's."""
    if not 0.0 <= tolerance <= 1.0:
        raise ValueError(f"tolerance={tolerance} must lie in [0, 1] (an accuracy difference)")
    tasks = _as_splits(splits)
    masks = [learn_mask(model, task, sparsity=s, seed=seed, **kwargs) for s in tqdm(sorted(sparsities), desc="effective size", disable=not progress)]
    ablation = kwargs.get("ablation", "mean")
    grid = evaluate(model, masks, tasks, ablation=ablation, reference=task.clean if ablation == "mean" else None)
    acc = grid.values[:, :, 0]  # [model, split], row 0 = full
    n_units = masks[0].n_units if masks else 1
    kept = [n_units] + [n_units - int((m.units() == 0).sum()) for m in masks]
    order = sorted(range(len(kept)), key=lambda i: kept[i])
    curve = Grid(acc[order], ("k", "split"), (tuple(kept[i] for i in order), tuple(tasks)),
                 {"metric": "accuracy", "title": "accuracy vs units kept", "n_units": n_units, "tolerance": tolerance})
    k = smallest_within(kept, acc, acc[0], tolerance)
    return EffectiveSize(k / n_units, tolerance, curve)


# ---------------------------------------------------------------------------------------------
# reproduction and demo


def _sva_tasks(masked: bool, n_train: int, n_eval: int) -> tuple[Task, dict[str, Task]]:
    from interp.tasks import make

    train = make("sva", split="sva_id", n=n_train, seed=1, masked=masked)
    splits = {s: make("sva", split=s, n=n_eval, seed=2, masked=masked) for s in ("sva_id", "sva_attractor_mismatch")}
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
    """The heuristic-core study at toy scale: masks learned on SVA (in distribution) at each
    sparsity and seed, evaluated on sva_id and on sva_attractor_mismatch, whose attractor always
    disagrees with the head noun (so "agree with the nearest noun" fails). Works on decoders and
    on the BERT encoder (masked-verb SVA). Returns a JSON-serialisable dict."""
    from interp.model import describe, load

    start = time.perf_counter()
    model = load(spec)
    masked = not describe(model)["is_causal"]
    train, splits = _sva_tasks(masked, n_train, n_eval)
    with threads(1):
        result = study(model, train, splits, sparsities=sparsities, seeds=seeds, steps=steps, progress=progress)
    out = result.to_json()
    out.update({"model": spec, "masked": masked, "steps": steps, "ablation": "mean", "seconds": time.perf_counter() - start})
    return out


def demo_section(workdir: Path) -> list:
    """Report items: subnetwork masks of an SVA model, their core and overlap, ID vs OOD accuracy."""
    from interp.model import ZOO_DIR, build_tiny, load
    from interp.results import Heading, stack
    from interp.tasks import english

    if (ZOO_DIR / "lm-gpt2" / "config.json").exists():
        spec = "zoo:lm-gpt2"
    else:
        spec = str(build_tiny("gpt2", Path(workdir) / "models" / "masking-gpt2", words=english.WORDS, n_layers=2))
    model = load(spec)
    train, splits = _sva_tasks(False, 256, 256)
    with threads(1):
        result = study(model, train, splits, sparsities=(0.5,), seeds=range(4), steps=120)
    masks = stack([m.to_grid() for m in result.masks], "model", _names(result.masks))
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
