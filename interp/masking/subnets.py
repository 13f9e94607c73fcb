"""Subnetworks: the heuristic core, overlap, evaluation of masks per split, the study (many masks
across in- and out-of-distribution splits) and effective size (see interp.masking)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp import run
from interp.errors import InterpError
from interp.interventions import Ablation, AblationStyle
from interp.masking.learn import learn_mask, subnetworks
from interp.masking.mask import HeadMask, MeanOver, check_mask, check_task, default_reference, interventions, references, sites
from interp.metrics import binary_accuracy, for_task
from interp.results import Grid, result
from interp.tasks.base import Task
from interp.memory import records_peak

__all__ = [
    "EffectiveSize", "Study", "core_baseline", "effective_size", "evaluate", "heuristic_core", "jaccard", "overlap",
    "random_like", "smallest_within", "study",
]


def heuristic_core(masks: Sequence[HeadMask]) -> HeadMask:
    """The units present in every (binarised) mask."""
    if not masks:
        raise InterpError("heuristic_core needs at least one mask")
    bins = [m.binarize() for m in masks]
    shapes = {(tuple(m.heads.shape), m.mlps is None) for m in bins}
    if len(shapes) != 1:
        raise InterpError(f"masks disagree in shape: {sorted(shapes)}; all must cover the same [layer, head] (and MLPs)")
    heads = torch.stack([m.heads for m in bins]).amin(0)
    mlps = None if bins[0].mlps is None else torch.stack([m.mlps for m in bins]).amin(0)
    return HeadMask(heads, mlps, {"name": "core", "of": [m.name for m in masks]})


def random_like(mask: HeadMask, generator: torch.Generator) -> HeadMask:
    """A random binary mask with `mask`'s kept-head count in every layer (and, when MLPs are
    masked, its number of kept MLPs, on random layers): the null model for a core."""
    m = mask.binarize()
    heads = torch.zeros_like(m.heads)
    for layer, kept in enumerate(m.heads.sum(1).long().tolist()):
        heads[layer, torch.randperm(heads.shape[1], generator=generator)[:kept]] = 1.0
    mlps = None
    if m.mlps is not None:
        mlps = torch.zeros_like(m.mlps)
        mlps[torch.randperm(mlps.numel(), generator=generator)[: int(m.mlps.sum())]] = 1.0
    return HeadMask(heads, mlps, {"name": "random", "like": m.name})


def core_baseline(masks: Sequence[HeadMask], *, draws: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The observed core size of `masks` against chance: the core of random masks with the same
    per-layer kept-head counts (`random_like`, one per mask, `draws` times).

    Returns observed heads/units in the core, the null distribution's mean and 5/50/95 %
    quantiles of core units, `p_value` = P(null core >= observed) (with the +1 correction) and
    `percentile` = P(null core < observed). A core is larger than chance when p_value is small."""
    if not masks:
        raise InterpError("core_baseline needs at least one mask")
    if draws < 1:
        raise InterpError(f"draws={draws} must be >= 1")
    core = heuristic_core(masks)
    observed_heads = int(core.heads.sum())
    observed = int(core.units().sum())
    gen = torch.Generator().manual_seed(seed)
    null = torch.tensor([float(heuristic_core([random_like(m, gen) for m in masks]).units().sum()) for _ in range(draws)])
    q = torch.quantile(null, torch.tensor([0.05, 0.5, 0.95])).tolist()
    return {
        "masks": len(masks), "observed_heads": observed_heads, "observed_units": observed, "draws": draws,
        "null_mean": float(null.mean()), "null_q05": q[0], "null_median": q[1], "null_q95": q[2],
        "p_value": float((1 + (null >= observed).sum()) / (1 + draws)),
        "percentile": float((null < observed).float().mean()),
    }


def jaccard(a: Tensor, b: Tensor) -> float:
    """|a ∩ b| / |a ∪ b| of two binary unit vectors (1.0 when both are empty)."""
    a, b = a > 0.5, b > 0.5
    union = int((a | b).sum())
    return 1.0 if union == 0 else int((a & b).sum()) / union


def overlap(masks: Sequence[HeadMask]) -> Grid:
    """Pairwise Jaccard overlap of the masks' kept units: a [model, other] Grid."""
    if not masks:
        raise InterpError("overlap needs at least one mask")
    units = [m.units() for m in masks]
    if len({u.shape for u in units}) != 1:
        raise InterpError(f"masks cover different unit counts: {[u.numel() for u in units]}")
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
        raise InterpError("evaluate needs at least one split")
    for t in out.values():
        check_task(t)
    metrics = {t.metric for t in out.values()}
    if len(metrics) != 1:
        raise InterpError(f"splits use different metrics {sorted(metrics)}; evaluate reports one metric column")
    return out


def _shared_rows(task: Task, ablation: Ablation) -> Tensor | None:
    """The rows `evaluate` shares between splits for `ablation`: the task's rows it reads (clean for
    mean), none for a paired style (each split's own) or one that reads none."""
    return None if AblationStyle.of(ablation).paired else default_reference(task, ablation, None)


@records_peak
def evaluate(
    model,
    masks: HeadMask | Sequence[HeadMask],
    splits: Mapping[str, Task] | Sequence[Task],
    *,
    ablation: Ablation = "mean",
    reference: Tensor | None = None,
    mean_over: MeanOver = "position",
    variants_per_forward: int | None = None,
    progress: bool = True,
) -> Grid:
    """Accuracy (correct beats incorrect) and the task metric per split, for the full model and
    each mask: a [model, split, metric] Grid whose first model is "full".

    Per split, every mask is one variant of `interp.run.evaluate` (batched forwards; both metrics
    from one pass). Mean ablation (any style that is not `paired`) uses one reference for every
    split: `reference` token rows, by default the first split's rows it reads (clean). Resample (a
    paired style) uses each split's own rows (corrupt). `mean_over`: see `masking.references`.
    """
    masks = [masks] if isinstance(masks, HeadMask) else list(masks)
    tasks = _as_splits(splits)
    first = next(iter(tasks.values()))
    style = AblationStyle.of(ablation)
    values = torch.zeros(len(masks) + 1, len(tasks), 2)
    for m in masks:
        check_mask(model, m)
    site_union = sites(HeadMask.full(model, mlps=any(m.mlps is not None for m in masks)))
    rows = None if style.reads is None else default_reference(first, ablation, reference)  # zero reads none, even if given
    shared = None if style.paired else references(model, site_union, ablation, rows, mean_over)
    for j, (name, task) in enumerate(tasks.items()):
        refs = shared or run.reference(model, site_union, ablation, default_reference(task, ablation, reference))
        variants = [[], *(interventions(m, refs) for m in masks)]

        def both(logits: Tensor, task: Task = task, metric=for_task(task)) -> dict[str, Tensor]:
            return {"binary_accuracy": binary_accuracy(logits, task.correct, task.incorrect, task.answer_pos).mean(),
                    "task_metric": metric(logits)}

        values[:, j] = run.evaluate(model, task.clean, variants, both, variants_per_forward=variants_per_forward,
                                    answer_pos=task.answer_pos, progress=progress, desc=f"masks on {name}")
    labels = (("full", *_names(masks)), tuple(tasks), ("accuracy", first.metric))
    return Grid(values, ("model", "split", "metric"), labels,
                {"ablation": ablation, "mean_over": mean_over, "title": "accuracy and metric per split", "chart": "heatmap"})


# ---------------------------------------------------------------------------------------------
# the study and effective size


@result
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

    def to_grid(self) -> Grid:
        """Scatter of accuracy in vs out of distribution per mask (the full model as a star),
        coloured by sparsity: a [model, metric] Grid."""
        ids, oods = self.accuracy(self.id_split), self.accuracy(self.ood_split)
        n_units = self.masks[0].n_units if self.masks else 1
        cores = [1 - (len(self.meta["core_per_sparsity"][k]) + len(self.meta.get("core_mlps_per_sparsity", {}).get(k, []))) / n_units
                 for k in self.meta.get("core_per_sparsity", {})][: len(ids) - 1 - len(self.masks)]
        sparsity = [0.0] + [m.sparsity for m in self.masks] + cores
        names = self.evaluation.labels[0]
        coords = (f"accuracy {self.id_split}", f"accuracy {self.ood_split}", "sparsity")
        meta = {**self.meta, "chart": "scatter", "highlight": [names[0]], "metric": "accuracy",
                "title": f"subnetworks: {self.id_split} vs {self.ood_split} accuracy"}
        return Grid(torch.tensor([ids, oods, sparsity]).T, ("model", "metric"), (names, coords), meta)

    def to_json(self) -> dict[str, Any]:
        splits = self.evaluation.labels[1]
        acc = {s: self.accuracy(s) for s in splits}
        subs = [
            {
                "seed": m.meta.get("seed"), "sparsity": m.meta.get("sparsity"), "achieved_sparsity": m.sparsity,
                "accuracy": {s: acc[s][i + 1] for s in splits},
                "heads": [list(h) for h in m.kept_heads()], "mlps": m.kept_mlps(),
                "seconds": m.meta.get("seconds"),
            }
            for i, m in enumerate(self.masks)
        ]
        models = self.evaluation.labels[0]
        core_acc = {name.removeprefix("core s="): {s: acc[s][i] for s in splits}
                    for i, name in enumerate(models) if i > len(self.masks)}
        return {
            **self.meta,
            "full": {s: acc[s][0] for s in splits},
            "subnetworks": subs,
            "core_accuracy": core_acc,
            "core": [list(h) for h in self.core.kept_heads()],
            "core_mlps": self.core.kept_mlps(),
            "overlap": {"labels": list(self.overlap.labels[0]), "jaccard": [[round(float(x), 4) for x in row] for row in self.overlap.values]},
        }


@records_peak
def study(
    model,
    task: Task,
    splits: Mapping[str, Task] | Sequence[Task],
    *,
    sparsities: Sequence[float],
    seeds: Sequence[int],
    baseline_draws: int = 2000,
    progress: bool = True,
    **kwargs: Any,
) -> Study:
    """Learn a mask per (sparsity, seed) on `task`, evaluate each on `splits` (the first is the
    in-distribution split, the last the out-of-distribution one), and find the core per sparsity
    (the `core` field is the core across every mask). The evaluation's models are "full", the
    masks, then one "core s=S" per sparsity (the core alone kept); `meta["core_baseline"]` holds
    `core_baseline` per sparsity (`baseline_draws` draws). kwargs go to `learn_mask`."""
    tasks = _as_splits(splits)
    start = time.perf_counter()
    masks: list[HeadMask] = []
    for s in sparsities:
        masks += subnetworks(model, task, sparsity=s, seeds=seeds, progress=progress, **kwargs)
    ablation, mean_over = kwargs.get("ablation", "mean"), kwargs.get("mean_over", "position")
    per_sparsity = {f"{s:g}": [m for m in masks if m.meta["sparsity"] == s] for s in sparsities}
    cores = {k: heuristic_core(ms) for k, ms in per_sparsity.items()}
    core_masks = [HeadMask(c.heads, c.mlps, {"name": f"core s={k}"}) for k, c in cores.items()]
    grid = evaluate(model, masks + core_masks, tasks, ablation=ablation, mean_over=mean_over,
                    reference=_shared_rows(task, ablation), progress=progress)
    names = list(tasks)
    meta = {"task": f"{task.name}/{task.split}", "sparsities": list(sparsities), "seeds": list(seeds),
            "core_per_sparsity": {k: [list(h) for h in c.kept_heads()] for k, c in cores.items()},
            "core_mlps_per_sparsity": {k: c.kept_mlps() for k, c in cores.items()},
            "core_baseline": {k: core_baseline(ms, draws=baseline_draws) for k, ms in per_sparsity.items()},
            "seconds": time.perf_counter() - start}
    return Study(tuple(masks), grid, heuristic_core(masks), overlap(masks), names[0], names[-1], meta)


def smallest_within(kept: Sequence[int], accuracy: Tensor, full: Tensor, tolerance: float) -> int:
    """The fewest kept units (entries of `kept`, rows of `accuracy` [k, split]) whose accuracy on
    every split is within `tolerance` of `full` [split]; max(kept) if none is."""
    ok = (accuracy >= full[None] - tolerance).all(-1)
    good = [k for k, fine in zip(kept, ok.tolist()) if fine]
    return min(good) if good else max(kept)


@result
@dataclass(frozen=True)
class EffectiveSize:
    """The fraction of units needed to stay within `tolerance` of the full model's accuracy.

    `curve` is accuracy [k, split] where k is the number of units kept (the last row is the
    full model)."""

    fraction: float
    tolerance: float
    curve: Grid
    meta: dict[str, Any] = field(default_factory=dict)

    def to_grid(self) -> Grid:
        """Accuracy vs units kept, one line per split."""
        meta = {**self.curve.meta, **self.meta, "chart": "lines",
                "title": f"accuracy vs units kept (effective size {self.fraction:.2f})"}
        return Grid(self.curve.values, self.curve.axes, self.curve.labels, meta)


@records_peak
def effective_size(
    model,
    task: Task,
    splits: Mapping[str, Task] | Sequence[Task],
    *,
    tolerance: float = 0.02,
    sparsities: Sequence[float] = (0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    seed: int = 0,
    progress: bool = True,
    **kwargs: Any,
) -> EffectiveSize:
    """As in Bhaskar et al.: prune `task`'s model at each sparsity (one mask per sparsity, learned
    on `task`), and report the smallest fraction of units whose accuracy on every one of `splits`
    stays within `tolerance` of the full model's."""
    if not 0.0 <= tolerance <= 1.0:
        raise InterpError(f"tolerance={tolerance} must lie in [0, 1] (an accuracy difference)")
    tasks = _as_splits(splits)
    masks = [learn_mask(model, task, sparsity=s, seed=seed, progress=False, **kwargs)
             for s in tqdm(sorted(sparsities), desc="effective size", disable=not progress)]
    ablation = kwargs.get("ablation", "mean")
    grid = evaluate(model, masks, tasks, ablation=ablation, reference=_shared_rows(task, ablation), progress=progress)
    acc = grid.values[:, :, 0]  # [model, split], row 0 = full
    n_units = masks[0].n_units if masks else 1
    kept = [n_units] + [n_units - int((m.units() == 0).sum()) for m in masks]
    order = sorted(range(len(kept)), key=lambda i: kept[i])
    curve = Grid(acc[order], ("k", "split"), (tuple(kept[i] for i in order), tuple(tasks)),
                 {"metric": "accuracy", "title": "accuracy vs units kept", "n_units": n_units, "tolerance": tolerance})
    k = smallest_within(kept, acc, acc[0], tolerance)
    meta = {"task": f"{task.name}/{task.split}", "splits": list(tasks), "sparsities": sorted(sparsities), "seed": seed,
            "ablation": ablation, "kept": k, "n_units": n_units}
    return EffectiveSize(k / n_units, tolerance, curve, meta)
