"""Controls for a set of learned masks: distinct masks only, and random masks at matched ID accuracy.

Two seeds can learn the same binary mask (the optimisation is nearly deterministic once the gates
leave their plateau), and a chance test that counts such a pair twice counts one draw as two
independent ones. `distinct` keeps the first mask of each kept-unit set and names the duplicates.

A spread of out-of-distribution accuracy across learned masks means little alone: random masks of
the same per-layer kept counts might spread as much at the same in-distribution accuracy.
`matched_random` draws such masks (`random_like`), scores them on the same splits, and keeps those
whose in-distribution accuracy lies within `tolerance` of the learned masks' range, so the learned
spread has a control from the same budget.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from interp.errors import InterpError
from interp.masking.mask import HeadMask, MeanOver
from interp.masking.subnets import evaluate, random_like
from interp.tasks.base import Task

__all__ = ["distinct", "matched_random", "signature"]


def signature(mask: HeadMask) -> tuple[int, ...]:
    """The kept units of a binarised mask, as a hashable tuple of unit indices (heads, then MLPs)."""
    return tuple(int(i) for i in (mask.binarize().units() > 0.5).nonzero().flatten().tolist())


def distinct(masks: Sequence[HeadMask]) -> tuple[list[HeadMask], list[dict[str, Any]]]:
    """The masks with each kept-unit set once (the first of each, in order), and one record per
    dropped duplicate: {"name", "same_as"} (mask names, e.g. "s=0.5 seed=1")."""
    seen: dict[tuple[int, ...], HeadMask] = {}
    dropped = []
    for m in masks:
        sig = signature(m)
        if sig in seen:
            dropped.append({"name": m.name, "same_as": seen[sig].name})
        else:
            seen[sig] = m
    return list(seen.values()), dropped


def _spread(values: Sequence[float]) -> dict[str, float | int] | None:
    if not values:
        return None
    t = torch.tensor(list(values), dtype=torch.float64)
    return {"n": len(t), "min": float(t.min()), "max": float(t.max()), "mean": float(t.mean()),
            "std": float(t.std()) if len(t) > 1 else 0.0}


def matched_random(
    model,
    masks: Sequence[HeadMask],
    splits: Mapping[str, Task],
    *,
    draws: int = 500,
    tolerance: float = 0.02,
    seed: int = 0,
    mean_over: MeanOver = "position",
    reference: torch.Tensor | None = None,
    learned: Mapping[str, Sequence[float]] | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Random masks with the per-layer kept counts of `masks` (`draws` in all, cycling through the
    masks), mean-ablated and scored on `splits` (first = in distribution, last = out); those whose
    ID accuracy lies in [min - tolerance, max + tolerance] of the learned masks' ID accuracies are
    "matched". `learned` ({split: accuracies}) gives the learned masks' accuracies if already
    measured; else they are evaluated here. Returns the learned and random spreads per split, the
    matched count, the matched masks' OOD spread (None when no random mask matched), and
    `matched_ood_std_null`: the 5/50/95 % quantiles of the OOD std of as many matched random masks
    as there are learned ones (2000 resamples with replacement; None with < 2 matched)."""
    if not masks:
        raise InterpError("matched_random needs at least one learned mask")
    if draws < 1 or not 0.0 <= tolerance <= 1.0:
        raise InterpError(f"draws={draws} must be >= 1 and tolerance={tolerance} in [0, 1]")
    names = list(splits)
    id_split, ood_split = names[0], names[-1]
    gen = torch.Generator().manual_seed(seed)
    randoms = [random_like(masks[i % len(masks)], gen) for i in range(draws)]
    todo = randoms if learned is not None else [*masks, *randoms]
    grid = evaluate(model, todo, splits, ablation="mean", mean_over=mean_over, reference=reference, progress=progress)
    acc = grid.values[1:, :, 0]  # [mask, split], row 0 of the grid is the full model
    if learned is None:
        learned = {s: acc[: len(masks), j].tolist() for j, s in enumerate(names)}
        acc = acc[len(masks):]
    lo, hi = min(learned[id_split]) - tolerance, max(learned[id_split]) + tolerance
    ids, oods = acc[:, 0].tolist(), acc[:, -1].tolist()
    matched = [o for i, o in zip(ids, oods) if lo <= i <= hi]
    null = None
    n = len(learned[ood_split])
    if len(matched) >= 2 and n >= 2:  # the std of n matched random masks, resampled: a spread null of the learned masks' size
        pick = torch.randint(len(matched), (2000, n), generator=gen)
        stds = torch.tensor(matched, dtype=torch.float64)[pick].std(1)
        q = torch.quantile(stds, torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64)).tolist()
        null = {"n": n, "resamples": 2000, "q05": q[0], "median": q[1], "q95": q[2]}
    return {
        "draws": draws, "tolerance": tolerance, "id_split": id_split, "ood_split": ood_split,
        "id_window": [lo, hi],
        "learned": {s: _spread(learned[s]) for s in (id_split, ood_split)},
        "random": {id_split: _spread(ids), ood_split: _spread(oods)},
        "matched": len(matched),
        "matched_ood": _spread(matched),
        "matched_ood_std_null": null,
    }
