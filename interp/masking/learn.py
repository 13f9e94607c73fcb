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
from interp.files.storage import load_state, save_state
from interp.files.validate import note
from interp.masking.mask import HeadMask, MeanOver, check_task, default_reference, interventions, references, sites
from interp.tasks.base import Task
from interp.memory import records_peak

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
                   warmup: float, steps: int, batch_size: int, lr: float, weight_decay: float, reg_lr: float) -> None:
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
    for name, value in (("lr", lr), ("weight_decay", weight_decay), ("reg_lr", reg_lr)):  # else torch's optimizer refuses, in its words
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < math.inf:
            raise InterpError(f"{name}={value!r} must be a finite number >= 0")
    if optimizer == "adamw" and lr * weight_decay >= 1.0:
        raise InterpError(f"lr * weight_decay = {lr * weight_decay:g} must be < 1: AdamW multiplies log_alpha by "
                          f"(1 - lr * weight_decay) each step, which would flip its sign (use more steps or less decay)")


@dataclass(frozen=True)
class HardConcrete:
    """The recipe of hard-concrete (L0) mask learning: every option of `learn_masks` but the model,
    task, targets, seeds, pinned units and checkpoint.
    `HardConcrete()` is this package's recipe; the official Heuristic-Core one is
    `HardConcrete(mean_over="tokens", sparsity_from="sampled", optimizer="adamw", warmup=0.97, lr=0.1,
    ...)`, whose values for a run length `interp.studies.heuristic_core.official(steps)` gives.

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


@records_peak
def learn_mask(model, task: Task, *, sparsity: float, seed: int = 0, **kwargs: Any) -> HeadMask:
    """Learn a binary mask at `sparsity` (fraction of units off) keeping the model's behaviour on
    `task`, with hard-concrete (L0) gates as in CoFiPruning / Bhaskar et al. 2024: `learn_masks`
    with one seed (every option is documented there)."""
    return learn_masks(model, task, sparsity=sparsity, seeds=[seed], **kwargs)[0]


@records_peak
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

    The recipe (`HardConcrete`) says what the two recipes this loop runs are: this package's own and
    the official Heuristic-Core one.

    `checkpoint`: a file the state (gates, multipliers, optimizer, generators, history) is written
    to atomically every `checkpoint_every` steps; a run given the same file and options resumes
    from it and ends with the same masks as an uninterrupted run. The caller removes it when done.

    The schedule (steps, include_mlps, ablation, mean_over, sparsity_from, optimizer, batch_size,
    weight_decay, lr, reg_lr, warmup) is one frozen `recipe` (`HardConcrete`); each field may also
    be given by name (`steps=300`), which replaces it in the recipe.
    """
    recipe = _recipe(recipe, options)
    check_task(task)
    seeds = list(seeds)
    sparsities = [sparsity] * len(seeds) if isinstance(sparsity, (int, float)) and not isinstance(sparsity, bool) else list(sparsity)
    r = recipe
    _check_options(sparsities, seeds, r.sparsity_from, r.optimizer, r.warmup, r.steps, r.batch_size, r.lr, r.weight_decay,
                   r.reg_lr)
    device = run.input_device(model)
    task = task.to(device)  # gates, rows and references all live where the model computes
    units = _Units.of(model, r.include_mlps, force_on, force_off, device)
    gates = _Gates.start(seeds, units.n, r, device)
    fingerprint = _fingerprint(seeds, sparsities, task, units, r)
    first, history, elapsed = 0, [], 0.0
    if checkpoint is not None and Path(checkpoint).exists():
        try:
            state = load_state(checkpoint)
        except InterpError as err:  # damaged: the run starts over (and rewrites it), saying so
            note(f"{str(err)[:200]}; starting over")
            state = {}
        if state.get("fingerprint") == fingerprint:  # another run's file is ignored, not misread
            first, history, elapsed = gates.restore(state)

    refs, full_logp = _references(model, task, r)
    sparse = torch.tensor([float(x) for x in sparsities], device=device)
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)  # the weights stay frozen
    start = time.perf_counter() - elapsed
    desc = f"masks s={','.join(sorted({f'{x:g}' for x in sparsities}))} seeds={seeds[0]}..{seeds[-1]}" if len(seeds) > 1 else \
        f"mask s={sparsities[0]:g} seed={seeds[0]}"
    try:
        for step in tqdm(range(first, r.steps), desc=desc, disable=not progress, leave=False, initial=first, total=r.steps):
            target = sparse * min(1.0, step / max(1.0, r.warmup * r.steps))
            record = _step(model, task, gates, units, refs, full_logp, target, r)
            if step % 10 == 0 or step == r.steps - 1:  # kept as tensors: no host sync in the loop
                history.append((step, record))
            if checkpoint is not None and (step + 1) % checkpoint_every == 0 and step + 1 < r.steps:
                save_state({"fingerprint": fingerprint, "step": step + 1, **gates.state(), "history": history,
                            "seconds": time.perf_counter() - start}, checkpoint)
    finally:
        for p in params:
            p.requires_grad_(True)
    return _masks(gates, units, seeds, sparsities, history, task, r, time.perf_counter() - start)


def _fingerprint(seeds: list[int], sparsities: list[float], task: Task, units: "_Units", r: HardConcrete) -> dict[str, Any]:
    """What a checkpoint must match to be resumed, as the checkpoint reads it back (JSON values)."""
    return json.loads(json.dumps({
        "seeds": seeds, "sparsities": [float(x) for x in sparsities], "steps": r.steps, "units": units.n,
        "task": f"{task.name}/{task.split}/{len(task)}", "on": units.on, "off": units.off, "ablation": r.ablation,
        "mean_over": r.mean_over, "sparsity_from": r.sparsity_from, "optimizer": r.optimizer,
        "batch_size": r.batch_size, "weight_decay": r.weight_decay, "lr": r.lr, "reg_lr": r.reg_lr, "warmup": r.warmup}))


def _references(model, task: Task, r: HardConcrete) -> tuple[dict, Tensor]:
    """The masked units' ablation references, and the full model's log-probabilities at each row's answer."""
    refs = references(model, sites(HeadMask.full(model, mlps=r.include_mlps)), r.ablation,
                      default_reference(task, r.ablation, None), r.mean_over)
    full = torch.cat([run.logits(model, task.clean[i : i + 256]) for i in range(0, len(task), 256)], 0)
    return refs, full[torch.arange(len(task), device=full.device), task.answer_pos.to(full.device)].float().log_softmax(-1)  # [batch, d_vocab]


@dataclass(frozen=True)
class _Units:
    """The maskable units (every head, then every MLP) and which are pinned on or off."""

    layers_heads: tuple[int, int]
    n: int
    on: list[int]
    off: list[int]
    forced_on: Tensor
    forced_off: Tensor

    @classmethod
    def of(cls, model, include_mlps: bool, force_on, force_off, device: torch.device) -> "_Units":
        L, H = model.cfg.n_layers, model.cfg.n_heads
        n = L * H + (L if include_mlps else 0)
        on = _unit_index(model, force_on, include_mlps, "force_on")
        off = _unit_index(model, force_off, include_mlps, "force_off")
        if set(on) & set(off):
            raise InterpError(f"units {sorted(set(on) & set(off))} are both forced on and forced off")
        forced_on, forced_off = torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)  # cpu: moved when returned
        forced_on[on], forced_off[off] = True, True
        return cls((L, H), n, on, off, forced_on.to(device), forced_off.to(device))

    @property
    def n_heads(self) -> int:
        return self.layers_heads[0] * self.layers_heads[1]

    def pin(self, z: Tensor) -> Tensor:
        return torch.where(self.forced_on, 1.0, torch.where(self.forced_off, 0.0, z))

    def expected_sparsity(self, log_alpha: Tensor) -> Tensor:  # [seed]
        return 1 - self.pin(prob_nonzero(log_alpha)).mean(-1)


@dataclass
class _Gates:
    """What the run learns (gates, Lagrange multipliers) and drives it (optimizers, schedules, each
    seed's generator): exactly what a checkpoint holds."""

    log_alpha: Tensor
    lambda1: Tensor
    lambda2: Tensor
    opts: list
    schedules: list
    gens: list[torch.Generator]

    @classmethod
    def start(cls, seeds: Sequence[int], n_units: int, r: HardConcrete, device: torch.device) -> "_Gates":
        # CPU generators: a seed draws the same rows and noise on every device
        gens = [torch.Generator().manual_seed(s) for s in seeds]
        log_alpha = torch.stack([INIT_LOG_ALPHA + 0.01 * torch.randn(n_units, generator=g) for g in gens]).to(device).requires_grad_()
        # Lagrange multipliers, one pair per seed, both by gradient ascent. λ1 (linear term) by plain SGD
        # (package recipe), so it integrates the gap; λ2 (quadratic term) by Adam, so it grows fast and
        # damps the lockstep overshoot that gates leaving their log_alpha≈10 plateau together otherwise cause.
        lambda1 = torch.zeros(len(seeds), device=device, requires_grad=True)
        lambda2 = torch.zeros(len(seeds), device=device, requires_grad=True)
        if r.optimizer == "adam":
            opts = [torch.optim.Adam([log_alpha], lr=r.lr), torch.optim.SGD([lambda1], lr=r.reg_lr, maximize=True),
                    torch.optim.Adam([lambda2], lr=r.reg_lr, maximize=True)]
            return cls(log_alpha, lambda1, lambda2, opts, [], gens)
        # the official recipe: one AdamW, linear warm-up (2 %) then linear decay to 0; weight decay on log_alpha
        # only: the official code (CoFi-style) decays no Lagrange multiplier, and decaying them at
        # reg_lr * weight_decay per step would shrink (or, >= 1, flip) the constraint.
        opts = [torch.optim.AdamW([{"params": [log_alpha]},
                                   {"params": [lambda1, lambda2], "lr": r.reg_lr, "maximize": True, "weight_decay": 0.0}],
                                  lr=r.lr, weight_decay=r.weight_decay)]
        steps, warm = r.steps, max(1, round(0.02 * r.steps))
        schedules = [torch.optim.lr_scheduler.LambdaLR(
            opts[0], lambda i: min((i + 1) / warm, max(0.0, (steps - i) / max(1, steps - warm))))]
        return cls(log_alpha, lambda1, lambda2, opts, schedules, gens)

    def state(self) -> dict[str, Any]:
        return {"log_alpha": self.log_alpha.detach().cpu(), "lambda1": self.lambda1.detach().cpu(),
                "lambda2": self.lambda2.detach().cpu(), "opts": [o.state_dict() for o in self.opts],
                "schedules": [sch.state_dict() for sch in self.schedules], "gens": [g.get_state() for g in self.gens]}

    def restore(self, state: dict[str, Any]) -> tuple[int, list, float]:
        """Load `state` (a checkpoint); returns (first step, history, seconds so far)."""
        with torch.no_grad():
            for name in ("log_alpha", "lambda1", "lambda2"):
                getattr(self, name).copy_(state[name])
        for o, sd in zip(self.opts, state["opts"]):
            o.load_state_dict(sd)
        for sch, sd in zip(self.schedules, state["schedules"]):
            sch.load_state_dict(sd)
        for g, gs in zip(self.gens, state["gens"]):
            g.set_state(gs)
        return state["step"], state["history"], state["seconds"]


def _step(model, task: Task, gates: _Gates, units: _Units, refs, full_logp: Tensor, target: Tensor, r: HardConcrete) -> Tensor:
    """One optimisation step of every seed; returns [kl, target, expected, sampled sparsity] x [seed]."""
    S = len(gates.gens)
    # each seed's rows, then its gate noise, from its own generator (the order a lone run draws them)
    idx, noise = [], []
    for g in gates.gens:
        idx.append(torch.randperm(len(task), generator=g)[: r.batch_size])
        noise.append(torch.rand(units.n, generator=g))
    device = gates.log_alpha.device
    rows = torch.cat(idx).to(device)
    z = units.pin(hard_concrete(gates.log_alpha, torch.stack(noise).to(device)))  # [seed, unit]
    per_row = z[0] if S == 1 else z.repeat_interleave(len(idx[0]), 0)  # [unit] or [row, unit]
    heads = per_row[..., : units.n_heads].unflatten(-1, units.layers_heads)
    mlps = per_row[..., units.n_heads :] if r.include_mlps else None
    batch_refs = {k: ref.rows(rows) for k, ref in refs.items()}
    # the loss reads one position per row: unembed only there (a large part of a step on a big vocabulary)
    with run.intervened(model, interventions((heads, mlps), batch_refs), logits_at=task.answer_pos[rows]):
        logits = model(task.clean[rows])
    logq = logits[:, 0].float().log_softmax(-1)
    kl_rows = F.kl_div(logq, full_logp[rows], log_target=True, reduction="none").sum(-1)
    kl = kl_rows.view(S, -1).mean(1)  # [seed]: each seed's batchmean
    expected = units.expected_sparsity(gates.log_alpha)
    current = 1 - z.mean(-1) if r.sparsity_from == "sampled" else expected
    gap = target - current
    loss = (kl + gates.lambda1 * gap + gates.lambda2 * gap**2).sum()  # seeds share no parameter: their gradients stay apart
    for o in gates.opts:
        o.zero_grad()
    loss.backward()
    for o in (*gates.opts, *gates.schedules):
        o.step()
    return torch.stack([kl.detach(), target, expected.detach(), 1 - z.detach().mean(-1)])


def _masks(gates: _Gates, units: _Units, seeds: list[int], sparsities: list[float], history: list, task: Task,
           r: HardConcrete, seconds: float) -> list[HeadMask]:
    """CoFi's deterministic evaluation masks: per seed, the expected number of zeros at the lowest log_alpha."""
    table = torch.stack([h for _, h in history]).tolist()  # [record, 4, seed]
    n, n_heads, out = units.n, units.n_heads, []
    with torch.no_grad():
        for i, (seed, sp) in enumerate(zip(seeds, sparsities)):
            la = gates.log_alpha[i].detach()
            expected_zeros = n - int(round(float((1 - units.expected_sparsity(la)) * n)))
            free = ~(units.forced_on | units.forced_off)
            g = torch.where(units.forced_on, 1.0, 0.0)
            n_free_zeros = min(int(free.sum()), max(0, expected_zeros - int(units.forced_off.sum())))
            g[free] = deterministic_gates(la[free], n_free_zeros)
            hist = [{"step": step, "kl": row[0][i], "target": row[1][i], "expected_sparsity": row[2][i],
                     "sampled_sparsity": row[3][i]} for (step, _), row in zip(history, table)]
            meta = {
                "seed": seed, "sparsity": sp, "steps": r.steps, "ablation": r.ablation, "mean_over": r.mean_over,
                "sparsity_from": r.sparsity_from, "optimizer": r.optimizer, "weight_decay": r.weight_decay,
                "task": f"{task.name}/{task.split}", "expected_sparsity": float(units.expected_sparsity(la)),
                "seconds": seconds, "learned_with": len(seeds), "final_kl": hist[-1]["kl"],
                "log_alpha": [round(float(x), 4) for x in la], "history": hist,
            }
            g = g.cpu()  # a mask is a small result, kept on the CPU like every result
            out.append(HeadMask(g[:n_heads].view(units.layers_heads), g[n_heads:] if r.include_mlps else None, meta))
    return out

@records_peak
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
