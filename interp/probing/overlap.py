"""Task-specificity: how much two tasks' weight-activation score maps agree on which weights matter.

    top_fraction(score, k)              pure: the top-k fraction of one score map (bool, per matrix)
    jaccard(model, a, b, k)             |top_a ∩ top_b| / |top_a ∪ top_b| over every scored weight
    overlap(model, scores, domain_of)   Grid [task_a, task_b] of Jaccard indices, meta["within"] /
                                        meta["across"]: the mean over pairs of one / two domains

The top k of each matrix is taken within that matrix (scores of different matrices are on
different scales), and the intersections and unions are summed over all matrices.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import torch
from torch import Tensor

from interp.errors import InterpError
from interp.results import Grid

from .scores import WeightScores, linears

__all__ = ["jaccard", "overlap", "top_fraction"]


def top_fraction(score: Tensor, k: float) -> Tensor:
    """Bool map of the ceil(k * numel) highest scores of `score` (ties broken by position)."""
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not 0.0 < k <= 1.0:
        raise InterpError(f"k={k!r} must be a fraction in (0, 1]")
    flat = score.flatten()
    count = max(1, int(torch.tensor(k * flat.numel()).ceil()))
    out = torch.zeros(flat.numel(), dtype=torch.bool)
    out[flat.topk(count, sorted=False).indices.cpu()] = True
    return out.reshape(score.shape)


def _pair_counts(model, scores: list[WeightScores], k: float) -> tuple[Tensor, Tensor]:
    """[n, n] intersection and union sizes of the score maps' top-k weights, summed over matrices
    (each matrix's top-k sets computed once per score map)."""
    n = len(scores)
    inter, union = torch.zeros(n, n, dtype=torch.long), torch.zeros(n, n, dtype=torch.long)
    for name in linears(model):
        for s in scores:
            if name not in s.norms:
                raise InterpError(f"scores do not cover {name}; compute them with input_norms on this model")
        tops = torch.stack([top_fraction(s.matrix(model, name), k).flatten() for s in scores]).float()  # [n, numel]
        both = tops @ tops.T
        sizes = tops.sum(1)
        inter += both.long()
        union += (sizes[:, None] + sizes[None, :] - both).long()
    return inter, union


def jaccard(model, a: WeightScores, b: WeightScores, k: float = 0.1) -> float:
    """Jaccard index of the two score maps' top-k weights (1: the same weights matter most)."""
    inter, union = _pair_counts(model, [a, b], k)
    return float(inter[0, 1] / union[0, 1])


def overlap(model, scores: Mapping[str, WeightScores], domain_of: Mapping[str, str], *, k: float = 0.1) -> Grid:
    """Grid [task_a, task_b] of pairwise Jaccard indices of the top-k weights; `domain_of[task]`
    names each task's domain. meta: "within" / "across" (mean over pairs of tasks of the same /
    different domains; NaN when there are none), "k", "domains"."""
    names = list(scores)
    if len(names) < 2:
        raise InterpError(f"overlap needs the scores of at least two tasks, got {names}")
    missing = [n for n in names if n not in domain_of]
    if missing:
        raise InterpError(f"domain_of does not name the domain of {missing}")
    inter, union = _pair_counts(model, [scores[n] for n in names], k)
    values = inter.double() / union.double()
    within, across = [], []
    for i, j in itertools.combinations(range(len(names)), 2):
        (within if domain_of[names[i]] == domain_of[names[j]] else across).append(float(values[i, j]))
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
    return Grid(values.float(), ("task_a", "task_b"), {"task_a": names, "task_b": names},
                {"metric": f"jaccard_top{k:g}", "k": k, "within": mean(within), "across": mean(across),
                 "domains": [domain_of[n] for n in names], "model": model.cfg.model_name})
