"""Task-specificity: how much two tasks' weight-activation score maps agree on which weights matter.

    top_fraction(score, k)              pure: the top-k fraction of one score map (bool, per matrix)
    jaccard(model, a, b, k)             |top_a ∩ top_b| / |top_a ∪ top_b| over every scored weight
    overlap(model, scores, domain_of)   Grid [task_a, task_b] of Jaccard indices, meta["within"] /
                                        meta["across"]: the mean over pairs of one / two domains
    overlap_null(grid, permutations)    the permutation null of within - across: the tasks dealt to
                                        domains at random (domain sizes kept), p-value and quantiles

The top k of each matrix is taken within that matrix (scores of different matrices are on
different scales), and the intersections and unions are summed over all matrices.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

import torch
from torch import Tensor

from interp.errors import InterpError
from interp.results import Grid
from interp.model import name_of

from .scores import WeightScores, linears

__all__ = ["jaccard", "overlap", "overlap_null", "within_minus_across", "top_fraction"]


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
                 "domains": [domain_of[n] for n in names], "model": name_of(model)})


def within_minus_across(values: Tensor, domains: list[str]) -> float:
    """Mean Jaccard over same-domain pairs minus the mean over different-domain pairs."""
    same = torch.tensor([[a == b for b in domains] for a in domains])
    upper = torch.ones_like(same).triu(1)
    w, a = values[same & upper], values[~same & upper]
    if len(w) == 0 or len(a) == 0:
        raise InterpError(f"within - across needs pairs of one domain and of two; domains {domains}")
    return float(w.double().mean() - a.double().mean())


def overlap_null(grid: Grid, *, permutations: int = 10000, seed: int = 0) -> dict:
    """The permutation null of `overlap`'s within - across difference: the same Jaccard matrix with the
    tasks dealt to domains at random (each domain keeps its number of tasks), `permutations` times.
    Returns observed, null mean / 95th / 99th percentile, and p = (1 + #null >= observed) / (1 + n).
    With few tasks the distinct deals are few (9 tasks in 4 domains: 2,520 labelled deals), so the
    smallest p it can give is about 1 / that; it is reported beside p."""
    if isinstance(permutations, bool) or not isinstance(permutations, int) or permutations < 1:
        raise InterpError(f"permutations={permutations!r} must be an int >= 1")
    domains = list(grid.meta["domains"])
    values = grid.values.double()
    observed = within_minus_across(values, domains)
    gen = torch.Generator().manual_seed(seed)
    null = torch.empty(permutations, dtype=torch.float64)
    for i in range(permutations):
        order = torch.randperm(len(domains), generator=gen).tolist()
        null[i] = within_minus_across(values, [domains[j] for j in order])
    sizes = sorted(domains.count(d) for d in dict.fromkeys(domains))
    deals = math.factorial(len(domains))
    for k in sizes:
        deals //= math.factorial(k)
    return {"observed": observed, "permutations": permutations, "seed": seed,
            "null_mean": float(null.mean()), "null_q95": float(null.quantile(0.95)),
            "null_q99": float(null.quantile(0.99)), "null_max": float(null.max()),
            "p": float((1 + int((null >= observed - 1e-12).sum())) / (1 + permutations)), "distinct_deals": deals}
