"""How `interp.run.evaluate` groups variants into forwards: a pure planner (`plan_forwards`, tested
by an invariant), each forward's fixed cost, and how many variants fit in one forward.
"""

from __future__ import annotations

from typing import Sequence

import torch

from interp.errors import InterpError
from interp.interventions import Intervention
from interp.sites import layer_of

__all__ = ["FORWARD_COST", "forward_cost", "plan_forwards", "start_of", "variants_that_fit"]


# A forward's fixed cost, in row-positions through every block: what one forward of a 4-layer,
# d_model-128 model costs beyond its arithmetic on this project's CPU (benchmarks/RESULTS.md).
FORWARD_COST = 128
# That model's weights per block as forward_cost counts them (the bridge's 2-D parameters: GPT-2's
# fused and split attention 7 d^2, MLP 2 d * 4d, d = 128). The fixed cost
# grows with the number of modules run (per block) and the arithmetic with the weights per block,
# so a model with b weights per block has a fixed cost of FORWARD_COST * _REF_BLOCK / b
# row-positions: about 9 on SmolLM2-135M, where a forward's fixed cost is a small part.
_REF_BLOCK = 245_760


def forward_cost(model) -> float:
    """The fixed cost of one forward of `model` in row-positions through every block (see above)."""
    per_block = sum(p.numel() for p in model.blocks[0].parameters() if p.ndim == 2)
    return FORWARD_COST * _REF_BLOCK / max(per_block, 1)


def plan_forwards(starts: Sequence[tuple[int, int]], batch: int, n_pos: int, n_layers: int, size: int,
                  resumable: bool, cost: float | None = None) -> list[tuple[int, int, list[int]]]:
    """Group variants into forwards of at most `size`: [(first block, first position, variant indices)].

    `starts[i]` is variant i's (first intervened block, first intervened position). It leaves every
    block before it, and (causal attention) every position before it, as in the base run, so its
    forward may begin there; variants sharing a forward begin at the earliest among them. With
    variants in (block, position) order, the split minimises the total work, counting each
    forward's fixed cost as `cost` row-positions (default `FORWARD_COST`; `forward_cost(model)` for
    a model) by dynamic programming over split points.
    """
    cost = FORWARD_COST if cost is None else cost
    if not resumable:
        return [(0, 0, list(range(i, min(i + size, len(starts))))) for i in range(0, len(starts), size)]
    order = sorted(range(len(starts)), key=lambda i: starts[i])
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: least cost of the first j variants in order
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        layer, start = n_layers, n_pos
        for i in range(j - 1, max(-1, j - 1 - size), -1):  # the last forward holds order[i:j]
            layer, start = min(layer, starts[order[i]][0]), min(start, starts[order[i]][1])
            total = best[i] + cost + (j - i) * batch * (n_pos - start) * (n_layers - layer) / n_layers
            if total < best[j]:
                best[j], cut[j] = total, i
    plans, j = [], n
    while j:
        members = order[cut[j]:j]
        plans.append((min(starts[m][0] for m in members), min(starts[m][1] for m in members), members))
        j = cut[j]
    return plans[::-1]


def start_of(model, interventions: Sequence[Intervention], n_pos: int) -> tuple[int, int]:
    """(first block, first position) that the interventions can change; (n_layers, 0), the base
    run, when they change nothing. A negative first_pos counts from the end (Patch(pos=-1)), so
    it is taken as 0; one at or past `n_pos` changes nothing in this input."""
    layers = [layer_of(site) or 0 for iv in interventions for site in iv.sites]
    first = min((iv.first_pos for iv in interventions if iv.sites), default=n_pos)
    if not layers or first >= n_pos:
        return model.cfg.n_layers, 0
    return min(layers), max(0, first)


def variants_that_fit(model, batch: int, pos: int, requested: int | None) -> int:
    """Variants per forward: a user value, else what fits comfortably in memory (at most 64)."""
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise InterpError(f"variants_per_forward={requested!r} must be an int >= 1")
        return requested
    cfg = model.cfg
    # floats kept per row: residual-sized activations (~16 per layer) and attention maps (~4 per head)
    per_row = 4 * pos * cfg.n_layers * (16 * cfg.d_model + 4 * cfg.n_heads * pos) + 4 * pos * cfg.d_vocab
    if str(cfg.device).startswith("cuda"):
        free = torch.cuda.mem_get_info()[0] * 0.5
    else:
        import psutil  # portable: os.sysconf's page counts exist on Linux only

        free = psutil.virtual_memory().available * 0.25
    return int(max(1, min(64, free // max(1, per_row * batch))))
