"""Learned hard-concrete (L0) masks, after CoFiPruning and Bhaskar et al. 2024 (see interp.masking)."""

from __future__ import annotations

import math
import time
from typing import Any, Literal, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm.auto import tqdm

from interp import run
from interp.errors import InterpError
from interp.hooks import check_head, check_layer
from interp.interventions import Ablation
from interp.masking.mask import HeadMask, MeanOver, check_task, default_reference, interventions, references, sites
from interp.tasks.base import Task

__all__ = ["deterministic_gates", "hard_concrete_sample", "learn_mask", "prob_nonzero", "subnetworks"]

# hard-concrete constants (Louizos et al. 2018, as in CoFiPruning)
LIMIT_L, LIMIT_R, BETA, EPS = -0.1, 1.1, 2.0 / 3.0, 1e-6
INIT_LOG_ALPHA = 10.0
SPARSITY_FROM = ("expected", "sampled")
OPTIMIZERS = ("adam", "adamw")

# -- hard-concrete gates (pure functions of log_alpha)


def hard_concrete_sample(log_alpha: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One stretched-and-clamped hard-concrete sample per gate, differentiable in log_alpha."""
    u = torch.rand(log_alpha.shape, generator=generator).clamp(EPS, 1 - EPS)
    s = torch.sigmoid((u.log() - (1 - u).log() + log_alpha) / BETA)
    return (s * (LIMIT_R - LIMIT_L) + LIMIT_L).clamp(0.0, 1.0)


def prob_nonzero(log_alpha: Tensor) -> Tensor:
    """P(gate > 0) = 1 - Q(0), the expected L0 contribution of each gate."""
    x = (0.0 - LIMIT_L) / (LIMIT_R - LIMIT_L)
    return 1 - torch.sigmoid(math.log(x / (1 - x)) * BETA - log_alpha).clamp(EPS, 1 - EPS)


def deterministic_gates(log_alpha: Tensor, n_zeros: int) -> Tensor:
    """CoFi's evaluation mask: sigmoid(log_alpha / beta * 0.8) with the n_zeros lowest set to 0,
    then binarised (> 0 -> 1)."""
    soft = torch.sigmoid(log_alpha / BETA * 0.8)
    if n_zeros > 0:
        soft[soft.argsort()[:n_zeros]] = 0.0
    return (soft > 0).float()


def _unit_index(model, units: Sequence[tuple[int, int | str]], include_mlps: bool, what: str) -> list[int]:
    """Flat unit indices of (layer, head) pairs; (layer, 'mlp') names an MLP."""
    H = model.cfg.n_heads
    out = []
    for unit in units:
        layer, head = unit
        if head == "mlp":
            check_layer(model, layer)
            if not include_mlps:
                raise InterpError(f"{what} names MLP {layer} but include_mlps=False")
            out.append(model.cfg.n_layers * H + layer)
        else:
            check_head(model, layer, head)
            out.append(layer * H + head)
    return out


def learn_mask(
    model,
    task: Task,
    *,
    sparsity: float,
    seed: int = 0,
    steps: int = 200,
    include_mlps: bool = True,
    force_on: Sequence[tuple[int, int | str]] = (),
    force_off: Sequence[tuple[int, int | str]] = (),
    ablation: Ablation = "mean",
    mean_over: MeanOver = "position",
    sparsity_from: Literal["expected", "sampled"] = "expected",
    optimizer: Literal["adam", "adamw"] = "adam",
    batch_size: int = 32,
    weight_decay: float = 0.01,
    lr: float = 0.2,
    reg_lr: float = 0.5,
    warmup: float = 0.6,
    progress: bool = True,
) -> HeadMask:
    """Learn a binary mask at `sparsity` (fraction of units off) keeping the model's behaviour on
    `task`, with hard-concrete (L0) gates as in CoFiPruning / Bhaskar et al. 2024.

    The target sparsity ramps linearly from 0 over the first `warmup` fraction of `steps`, then
    holds. `force_on` / `force_off` pin units: (layer, head), or (layer, "mlp"). Masked units are
    replaced by `ablation` references from the task's rows (clean for mean, corrupt for resample).

    Two recipes share this loop. The defaults (mean per position, expected L0 in the Lagrangian,
    Adam for the gates, SGD/Adam for the multipliers) are this package's own. The official
    Heuristic-Core choices (`princeton-nlp/Heuristic-Core`, src/pruning) are
    `mean_over="tokens"` (one mean per head over all tokens), `sparsity_from="sampled"` (the
    Lagrangian's sparsity is 1 - mean of the sampled gates, `1 - z_sum / n` in `modeling_pert`),
    `optimizer="adamw"` (one AdamW over gates and multipliers, the multipliers maximising at
    `reg_lr`, learning rates warmed up over the first 2 % of steps then decayed linearly to 0, as
    `get_linear_schedule_with_warmup`), and a target ramped over almost all of training
    (`warmup` ~0.97: their 6500 + 50 s of 6500 + 56 s steps at s % sparsity). `weight_decay`
    (AdamW only; torch's default 0.01, as theirs) matters there: sampled gates start saturated at
    1 (log_alpha ~10), where they pass no gradient, and it is AdamW's decay of log_alpha,
    lr * weight_decay * log_alpha per step, that first brings them within reach of the loss. Over
    their ~9300 steps at lr 0.1 that decay totals lr * weight_decay * steps ~ 9.3; a run with
    fewer steps keeps that product by raising `weight_decay` (as `interp.studies.heuristic_core` does).
    The decay acts on log_alpha only, never on the Lagrange multipliers (as the official code), and
    `lr * weight_decay` must stay below 1, or a step would flip log_alpha's sign.
    """
    check_task(task)
    if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)) or not 0.0 <= sparsity < 1.0:
        raise InterpError(f"sparsity={sparsity!r} must lie in [0, 1): the fraction of units to switch off")
    if sparsity_from not in SPARSITY_FROM:
        raise InterpError(f"sparsity_from={sparsity_from!r} is not one of {SPARSITY_FROM}")
    if optimizer not in OPTIMIZERS:
        raise InterpError(f"optimizer={optimizer!r} is not one of {OPTIMIZERS}")
    if not 0.0 <= warmup <= 1.0:
        raise InterpError(f"warmup={warmup} must lie in [0, 1]: the fraction of steps over which the target ramps up")
    if steps < 1 or batch_size < 1:
        raise InterpError(f"steps={steps} and batch_size={batch_size} must be >= 1")
    if optimizer == "adamw" and lr * weight_decay >= 1.0:
        raise InterpError(f"lr * weight_decay = {lr * weight_decay:g} must be < 1: AdamW multiplies log_alpha by "
                          f"(1 - lr * weight_decay) each step, which would flip its sign (use more steps or less decay)")
    L, H = model.cfg.n_layers, model.cfg.n_heads
    n_units = L * H + (L if include_mlps else 0)
    on = _unit_index(model, force_on, include_mlps, "force_on")
    off = _unit_index(model, force_off, include_mlps, "force_off")
    if set(on) & set(off):
        raise InterpError(f"units {sorted(set(on) & set(off))} are both forced on and forced off")
    forced_on = torch.zeros(n_units, dtype=torch.bool)
    forced_off = torch.zeros(n_units, dtype=torch.bool)
    forced_on[on], forced_off[off] = True, True

    gen = torch.Generator().manual_seed(seed)
    log_alpha = (INIT_LOG_ALPHA + 0.01 * torch.randn(n_units, generator=gen)).requires_grad_()
    # Lagrange multipliers, both by gradient ascent. λ1 (linear term) by plain SGD, so it integrates
    # the gap; λ2 (quadratic term) by Adam, so it grows fast and damps the lockstep overshoot that
    # gates leaving their log_alpha≈10 plateau together otherwise cause.
    lambda1, lambda2 = torch.zeros((), requires_grad=True), torch.zeros((), requires_grad=True)
    if optimizer == "adam":
        opts = [torch.optim.Adam([log_alpha], lr=lr), torch.optim.SGD([lambda1], lr=reg_lr, maximize=True),
                torch.optim.Adam([lambda2], lr=reg_lr, maximize=True)]
        schedules = []
    else:  # the official recipe: one AdamW, linear warm-up (2 %) then linear decay to 0
        # weight decay on log_alpha only: the official code (CoFi-style) decays no Lagrange multiplier,
        # and decaying them at reg_lr * weight_decay per step would shrink (or, >= 1, flip) the constraint.
        opts = [torch.optim.AdamW([{"params": [log_alpha]},
                                   {"params": [lambda1, lambda2], "lr": reg_lr, "maximize": True, "weight_decay": 0.0}],
                                  lr=lr, weight_decay=weight_decay)]
        warm = max(1, round(0.02 * steps))
        schedules = [torch.optim.lr_scheduler.LambdaLR(
            opts[0], lambda i: min((i + 1) / warm, max(0.0, (steps - i) / max(1, steps - warm))))]

    template = HeadMask.full(model, mlps=include_mlps)
    refs = references(model, sites(template), ablation, default_reference(task, ablation, None), mean_over)
    full = torch.cat([run.logits(model, task.clean[i : i + 256]) for i in range(0, len(task), 256)], 0)
    full_logp = full[torch.arange(len(task)), task.answer_pos].log_softmax(-1)  # [batch, d_vocab]

    def expected_sparsity(la: Tensor) -> Tensor:
        keep = torch.where(forced_on, 1.0, torch.where(forced_off, 0.0, prob_nonzero(la)))
        return 1 - keep.mean()

    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)  # the weights stay frozen
    history: list[dict[str, float]] = []
    start = time.perf_counter()
    try:
        for step in tqdm(range(steps), desc=f"mask s={sparsity:g} seed={seed}", disable=not progress, leave=False):
            target = sparsity * min(1.0, step / max(1.0, warmup * steps))
            idx = torch.randperm(len(task), generator=gen)[:batch_size]
            z = hard_concrete_sample(log_alpha, gen)
            z = torch.where(forced_on, 1.0, torch.where(forced_off, 0.0, z))
            heads, mlps = z[: L * H].view(L, H), (z[L * H :] if include_mlps else None)
            batch_refs = {k: r.rows(idx) for k, r in refs.items()}
            with run.intervened(model, interventions((heads, mlps), batch_refs)):
                logits = model(task.clean[idx])
            logq = logits[torch.arange(len(idx)), task.answer_pos[idx]].float().log_softmax(-1)
            kl = F.kl_div(logq, full_logp[idx], log_target=True, reduction="batchmean")
            expected = expected_sparsity(log_alpha)
            current = 1 - z.mean() if sparsity_from == "sampled" else expected
            gap = target - current
            loss = kl + lambda1 * gap + lambda2 * gap**2
            for o in opts:
                o.zero_grad()
            loss.backward()
            for o in (*opts, *schedules):
                o.step()
            if step % 10 == 0 or step == steps - 1:
                history.append({"step": step, "kl": float(kl.detach()), "target": target,
                                "expected_sparsity": float(expected.detach()), "sampled_sparsity": float(1 - z.detach().mean())})
    finally:
        for p in params:
            p.requires_grad_(True)
    seconds = time.perf_counter() - start

    with torch.no_grad():
        la = log_alpha.detach()
        expected_zeros = n_units - int(round(float((1 - expected_sparsity(la)) * n_units)))
        free = ~(forced_on | forced_off)
        gates = torch.where(forced_on, 1.0, 0.0)
        n_free_zeros = min(int(free.sum()), max(0, expected_zeros - int(forced_off.sum())))
        gates[free] = deterministic_gates(la[free], n_free_zeros)
    meta = {
        "seed": seed, "sparsity": sparsity, "steps": steps, "ablation": ablation, "mean_over": mean_over,
        "sparsity_from": sparsity_from, "optimizer": optimizer, "weight_decay": weight_decay, "task": f"{task.name}/{task.split}",
        "expected_sparsity": float(expected_sparsity(la)), "seconds": seconds, "final_kl": history[-1]["kl"],
        "log_alpha": [round(float(x), 4) for x in la], "history": history,
    }
    return HeadMask(gates[: L * H].view(L, H), gates[L * H :] if include_mlps else None, meta)


def subnetworks(model, task: Task, *, sparsity: float, seeds: Sequence[int], progress: bool = True, **kwargs: Any) -> list[HeadMask]:
    """One learned mask per seed at `sparsity` (kwargs go to `learn_mask`). With `progress`, a bar
    over seeds and, under it, one over the current seed's steps (each seed takes seconds)."""
    return [
        learn_mask(model, task, sparsity=sparsity, seed=s, progress=progress, **kwargs)
        for s in tqdm(list(seeds), desc=f"subnetworks s={sparsity:g}", disable=not progress)
    ]


