"""Learned hard-concrete (L0) masks, after CoFiPruning and Bhaskar et al. 2024 (see interp.masking)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm.auto import tqdm

from interp import run
from interp.errors import InterpError
from interp.sites import check_head, check_layer
from interp.interventions import Ablation
from interp.storage import load_state, save_state
from interp.masking.mask import HeadMask, MeanOver, check_task, default_reference, interventions, references, sites
from interp.tasks.base import Task

__all__ = ["HardConcrete", "deterministic_gates", "hard_concrete", "hard_concrete_sample", "learn_mask", "learn_masks", "prob_nonzero", "subnetworks"]

# hard-concrete constants (Louizos et al. 2018, as in CoFiPruning)
LIMIT_L, LIMIT_R, BETA, EPS = -0.1, 1.1, 2.0 / 3.0, 1e-6
INIT_LOG_ALPHA = 10.0
SPARSITY_FROM = ("expected", "sampled")
OPTIMIZERS = ("adam", "adamw")

# -- hard-concrete gates (pure functions of log_alpha)


def hard_concrete(log_alpha: Tensor, u: Tensor) -> Tensor:
    """The stretched-and-clamped hard-concrete gate for uniform noise `u`, differentiable in log_alpha."""
    u = u.clamp(EPS, 1 - EPS)
    s = torch.sigmoid((u.log() - (1 - u).log() + log_alpha) / BETA)
    return (s * (LIMIT_R - LIMIT_L) + LIMIT_L).clamp(0.0, 1.0)


def hard_concrete_sample(log_alpha: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One hard-concrete sample per gate (`hard_concrete` of fresh uniform noise)."""
    return hard_concrete(log_alpha, torch.rand(log_alpha.shape, generator=generator))


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


def _check_options(sparsities: Sequence[float], seeds: Sequence[int], sparsity_from: str, optimizer: str,
                   warmup: float, steps: int, batch_size: int, lr: float, weight_decay: float) -> None:
    if not seeds:
        raise InterpError("learn_masks needs at least one seed")
    if len(sparsities) != len(seeds):
        raise InterpError(f"{len(sparsities)} sparsities for {len(seeds)} seeds: give one sparsity, or one per seed")
    for sparsity in sparsities:
        if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)) or not 0.0 <= sparsity < 1.0:
            raise InterpError(f"sparsity={sparsity!r} must lie in [0, 1): the fraction of units to switch off")
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InterpError(f"seed={seed!r} must be an int")
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


@dataclass(frozen=True)
class HardConcrete:
    """The recipe of hard-concrete (L0) mask learning: every option of `learn_masks` but the model,
    task, targets, seeds, pinned units and checkpoint (each field is documented there).
    `HardConcrete()` is this package's recipe; the official Heuristic-Core one is
    `HardConcrete(mean_over="tokens", sparsity_from="sampled", optimizer="adamw", warmup=0.97, lr=0.1,
    ...)`, whose values for a run length `interp.studies.heuristic_core.official(steps)` gives."""

    steps: int = 200
    include_mlps: bool = True
    ablation: Ablation = "mean"
    mean_over: MeanOver = "position"
    sparsity_from: Literal["expected", "sampled"] = "expected"
    optimizer: Literal["adam", "adamw"] = "adam"
    batch_size: int = 32
    weight_decay: float = 0.01
    lr: float = 0.2
    reg_lr: float = 0.5
    warmup: float = 0.6


def _recipe(recipe: HardConcrete, options: dict[str, Any]) -> HardConcrete:
    """`recipe` with `options` (its fields given one by one, as before the recipe existed) applied."""
    unknown = sorted(set(options) - {f.name for f in fields(HardConcrete)})
    if unknown:
        raise InterpError(f"learn_masks got unknown option(s) {unknown}; valid: {[f.name for f in fields(HardConcrete)]}, "
                          "force_on, force_off, checkpoint, checkpoint_every, progress")
    return replace(recipe, **options)


def learn_mask(model, task: Task, *, sparsity: float, seed: int = 0, **kwargs: Any) -> HeadMask:
    """Learn a binary mask at `sparsity` (fraction of units off) keeping the model's behaviour on
    `task`, with hard-concrete (L0) gates as in CoFiPruning / Bhaskar et al. 2024: `learn_masks`
    with one seed (every option is documented there)."""
    return learn_masks(model, task, sparsity=sparsity, seeds=[seed], **kwargs)[0]


def learn_masks(
    model,
    task: Task,
    *,
    sparsity: float | Sequence[float],
    seeds: Sequence[int],
    recipe: HardConcrete = HardConcrete(),
    force_on: Sequence[tuple[int, int | str]] = (),
    force_off: Sequence[tuple[int, int | str]] = (),
    checkpoint: str | Path | None = None,
    checkpoint_every: int = 500,
    progress: bool = True,
    **options: Any,
) -> list[HeadMask]:
    """Learn one binary mask per seed (`sparsity`: one target for all, or one per seed) in ONE
    batched forward per step: the gates are stacked [seed, unit], each seed draws its own batch rows
    and gate noise from its own generator (`torch.Generator().manual_seed(seed)`, in the order a
    lone run draws them) and its rows are masked by its own gates (`interp.interventions.Mask` with
    a per-row mask); its loss, multipliers and optimizer state are its own (every optimizer here is
    elementwise), so each mask equals the one `learn_mask(seed=s)` learns alone, to float tolerance
    (tests/test_masking.py). On a small model a step costs little more for 12 seeds than for one.

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

    `checkpoint`: a file the state (gates, multipliers, optimizer, generators, history) is written
    to atomically every `checkpoint_every` steps; a run given the same file and options resumes
    from it and ends with the same masks as an uninterrupted run. The caller removes it when done.

    The schedule (steps, include_mlps, ablation, mean_over, sparsity_from, optimizer, batch_size,
    weight_decay, lr, reg_lr, warmup) is one frozen `recipe` (`HardConcrete`); each field may also
    be given by name (`steps=300`), which replaces it in the recipe.
    """
    recipe = _recipe(recipe, options)
    (steps, include_mlps, ablation, mean_over, sparsity_from, optimizer, batch_size, weight_decay, lr, reg_lr,
     warmup) = (getattr(recipe, f.name) for f in fields(HardConcrete))
    check_task(task)
    seeds = list(seeds)
    sparsities = [sparsity] * len(seeds) if isinstance(sparsity, (int, float)) and not isinstance(sparsity, bool) else list(sparsity)
    _check_options(sparsities, seeds, sparsity_from, optimizer, warmup, steps, batch_size, lr, weight_decay)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    n_units = L * H + (L if include_mlps else 0)
    S = len(seeds)
    on = _unit_index(model, force_on, include_mlps, "force_on")
    off = _unit_index(model, force_off, include_mlps, "force_off")
    if set(on) & set(off):
        raise InterpError(f"units {sorted(set(on) & set(off))} are both forced on and forced off")
    forced_on = torch.zeros(n_units, dtype=torch.bool)
    forced_off = torch.zeros(n_units, dtype=torch.bool)
    forced_on[on], forced_off[off] = True, True

    gens = [torch.Generator().manual_seed(s) for s in seeds]
    log_alpha = torch.stack([INIT_LOG_ALPHA + 0.01 * torch.randn(n_units, generator=g) for g in gens]).requires_grad_()
    # Lagrange multipliers, one pair per seed, both by gradient ascent. λ1 (linear term) by plain SGD
    # (package recipe), so it integrates the gap; λ2 (quadratic term) by Adam, so it grows fast and
    # damps the lockstep overshoot that gates leaving their log_alpha≈10 plateau together otherwise cause.
    lambda1, lambda2 = torch.zeros(S, requires_grad=True), torch.zeros(S, requires_grad=True)
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

    fingerprint = {"seeds": seeds, "sparsities": [float(x) for x in sparsities], "steps": steps, "units": n_units,
                   "task": f"{task.name}/{task.split}/{len(task)}", "on": on, "off": off, "ablation": ablation,
                   "mean_over": mean_over, "sparsity_from": sparsity_from, "optimizer": optimizer,
                   "batch_size": batch_size, "weight_decay": weight_decay, "lr": lr, "reg_lr": reg_lr, "warmup": warmup}
    first, history, elapsed = 0, [], 0.0
    if checkpoint is not None and Path(checkpoint).exists():
        state = load_state(checkpoint)
        if state.get("fingerprint") == json.loads(json.dumps(fingerprint)):  # another run's file is ignored, not misread
            with torch.no_grad():
                log_alpha.copy_(state["log_alpha"])
                lambda1.copy_(state["lambda1"])
                lambda2.copy_(state["lambda2"])
            for o, sd in zip(opts, state["opts"]):
                o.load_state_dict(sd)
            for sch, sd in zip(schedules, state["schedules"]):
                sch.load_state_dict(sd)
            for g, gs in zip(gens, state["gens"]):
                g.set_state(gs)
            first, history, elapsed = state["step"], state["history"], state["seconds"]

    template = HeadMask.full(model, mlps=include_mlps)
    refs = references(model, sites(template), ablation, default_reference(task, ablation, None), mean_over)
    full = torch.cat([run.logits(model, task.clean[i : i + 256]) for i in range(0, len(task), 256)], 0)
    full_logp = full[torch.arange(len(task)), task.answer_pos].float().log_softmax(-1)  # [batch, d_vocab]
    sparse = torch.tensor([float(x) for x in sparsities])

    def expected_sparsity(la: Tensor) -> Tensor:  # [seed]
        keep = torch.where(forced_on, 1.0, torch.where(forced_off, 0.0, prob_nonzero(la)))
        return 1 - keep.mean(-1)

    def save(step: int, seconds: float) -> None:
        state = {"fingerprint": fingerprint, "step": step, "log_alpha": log_alpha.detach().clone(),
                 "lambda1": lambda1.detach().clone(), "lambda2": lambda2.detach().clone(),
                 "opts": [o.state_dict() for o in opts], "schedules": [sch.state_dict() for sch in schedules],
                 "gens": [g.get_state() for g in gens], "history": history, "seconds": seconds}
        save_state(state, checkpoint)

    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)  # the weights stay frozen
    start = time.perf_counter() - elapsed
    desc = f"masks s={','.join(sorted({f'{x:g}' for x in sparsities}))} seeds={seeds[0]}..{seeds[-1]}" if S > 1 else \
        f"mask s={sparsities[0]:g} seed={seeds[0]}"
    try:
        for step in tqdm(range(first, steps), desc=desc, disable=not progress, leave=False, initial=first, total=steps):
            target = sparse * min(1.0, step / max(1.0, warmup * steps))
            # each seed's rows, then its gate noise, from its own generator (the order a lone run draws them)
            idx, noise = [], []
            for g in gens:
                idx.append(torch.randperm(len(task), generator=g)[:batch_size])
                noise.append(torch.rand(n_units, generator=g))
            rows = torch.cat(idx)
            z = hard_concrete(log_alpha, torch.stack(noise))
            z = torch.where(forced_on, 1.0, torch.where(forced_off, 0.0, z))  # [seed, unit]
            per_row = z[0] if S == 1 else z.repeat_interleave(len(idx[0]), 0)  # [unit] or [row, unit]
            heads = per_row[..., : L * H].unflatten(-1, (L, H))
            mlps = per_row[..., L * H :] if include_mlps else None
            batch_refs = {k: r.rows(rows) for k, r in refs.items()}
            at = task.answer_pos[rows]
            # the loss reads one position per row: unembed only there (a large part of a step on a big vocabulary)
            with run.intervened(model, interventions((heads, mlps), batch_refs), logits_at=at):
                logits = model(task.clean[rows])
            logq = logits[:, 0].float().log_softmax(-1)
            kl_rows = F.kl_div(logq, full_logp[rows], log_target=True, reduction="none").sum(-1)
            kl = kl_rows.view(S, -1).mean(1)  # [seed]: each seed's batchmean
            expected = expected_sparsity(log_alpha)
            current = 1 - z.mean(-1) if sparsity_from == "sampled" else expected
            gap = target - current
            loss = (kl + lambda1 * gap + lambda2 * gap**2).sum()  # seeds share no parameter: their gradients stay apart
            for o in opts:
                o.zero_grad()
            loss.backward()
            for o in (*opts, *schedules):
                o.step()
            if step % 10 == 0 or step == steps - 1:  # kept as tensors: no host sync in the loop
                history.append((step, torch.stack([kl.detach(), target, expected.detach(), 1 - z.detach().mean(-1)])))
            if checkpoint is not None and (step + 1) % checkpoint_every == 0 and step + 1 < steps:
                save(step + 1, time.perf_counter() - start)
    finally:
        for p in params:
            p.requires_grad_(True)
    seconds = time.perf_counter() - start

    table = torch.stack([h for _, h in history]).tolist()  # [record, 4, seed]
    out = []
    with torch.no_grad():
        for i, (seed, sp) in enumerate(zip(seeds, sparsities)):
            la = log_alpha[i].detach()
            expected_zeros = n_units - int(round(float((1 - expected_sparsity(la)) * n_units)))
            free = ~(forced_on | forced_off)
            gates = torch.where(forced_on, 1.0, 0.0)
            n_free_zeros = min(int(free.sum()), max(0, expected_zeros - int(forced_off.sum())))
            gates[free] = deterministic_gates(la[free], n_free_zeros)
            hist = [{"step": step, "kl": row[0][i], "target": row[1][i], "expected_sparsity": row[2][i],
                     "sampled_sparsity": row[3][i]} for (step, _), row in zip(history, table)]
            meta = {
                "seed": seed, "sparsity": sp, "steps": steps, "ablation": ablation, "mean_over": mean_over,
                "sparsity_from": sparsity_from, "optimizer": optimizer, "weight_decay": weight_decay,
                "task": f"{task.name}/{task.split}", "expected_sparsity": float(expected_sparsity(la)),
                "seconds": seconds, "learned_with": S, "final_kl": hist[-1]["kl"],
                "log_alpha": [round(float(x), 4) for x in la], "history": hist,
            }
            out.append(HeadMask(gates[: L * H].view(L, H), gates[L * H :] if include_mlps else None, meta))
    return out


def subnetworks(model, task: Task, *, sparsity: float, seeds: Sequence[int], progress: bool = True,
                seeds_per_forward: int | None = None, **kwargs: Any) -> list[HeadMask]:
    """One learned mask per seed at `sparsity` (kwargs go to `learn_masks`), `seeds_per_forward`
    seeds learned side by side in one batched forward (default: all of them)."""
    seeds = list(seeds)
    size = seeds_per_forward or max(1, len(seeds))
    out: list[HeadMask] = []
    for i in tqdm(range(0, len(seeds), size), desc=f"subnetworks s={sparsity:g}", disable=not progress or len(seeds) <= size):
        out += learn_masks(model, task, sparsity=sparsity, seeds=seeds[i : i + size], progress=progress, **kwargs)
    return out
