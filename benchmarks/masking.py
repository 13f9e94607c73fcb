"""Benchmark: learning one 50%-sparsity hard-concrete mask, and an ablation scan vs plain TL hooks.

    .venv/bin/python benchmarks/masking.py [--spec zoo:lm-gpt2] [--steps 200] [--record benchmarks/RESULTS.md]

(1) Seconds and steps/s to learn one mask (`interp.masking.learn_mask`, sparsity 0.5, default
settings: batch 32, mean ablation, heads + MLPs) on SVA (sva_id, 512 rows). Goal: <= 60 s.
(2) A mean-ablation scan over every head and MLP (`interp.masking.ablation_scan`: every single-unit
ablation one variant of `interp.run.evaluate`, batched and resumed at the unit's layer) against the same
scan written as plain TransformerLens hooks in a loop (`run_with_cache` for the means, then one
`run_with_hooks` per unit), in one process on the same model and rows, with the max |difference|.
Prints a markdown section; `--record` appends it to a file.
(3) `learn_masks` steps/s on the official recipe against a plain torch loop doing the same work (the
Hugging Face model under it, per-head masks as pre-hooks on each attention output projection and
MLP hooks, the same hard-concrete gates, AdamW and schedule, the same draws from the same
generator), one seed and `--seeds` seeds side by side in one batched forward, with the largest
|log_alpha| difference between interp and plain torch after the same steps.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from datetime import date

import torch
import torch.nn.functional as F

from interp import masking
from interp.metrics import for_task
from interp.model import ZOO_DIR, build_tiny, load
from interp.tasks import english, make
from interp.masking.learn import INIT_LOG_ALPHA, hard_concrete
from interp.studies.heuristic_core import official
from timing import best_of, report  # benchmarks/timing.py, beside this script


def _model(spec: str):
    name = spec.removeprefix("zoo:")
    if spec.startswith("zoo:") and not (ZOO_DIR / name / "config.json").exists():
        path = build_tiny("gpt2", tempfile.mkdtemp() + "/lm", words=english.WORDS, d_model=128, n_layers=4, n_heads=4, d_mlp=256)
        return load(path), f"random-weight model of lm-gpt2's sizes ({spec} absent)"
    return load(spec), spec



def plain_tl_scan(model, task) -> torch.Tensor:
    """The same mean-ablation scan as plain TransformerLens hooks in a loop."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    sites = [f"blocks.{l}.attn.hook_z" for l in range(L)] + [f"blocks.{l}.hook_mlp_out" for l in range(L)]
    metric = for_task(task)
    out = torch.zeros(L, H + 1)
    with torch.no_grad():
        _, cache = model.run_with_cache(task.clean, names_filter=lambda n: n in sites)
        valid = (task.clean != 0).float()  # PAD_ID = 0: per-position mean over real tokens
        valid[:, 0] = 1.0
        means = {}
        for s in sites:
            w = valid.view(*valid.shape, *([1] * (cache[s].ndim - 2)))
            means[s] = (cache[s] * w).sum(0) / w.sum(0).clamp_min(1)
        for l in range(L):
            for h in range(H + 1):
                if h < H:
                    def hook(act, hook, h=h):
                        act = act.clone()
                        act[:, :, h] = means[hook.name][None, :, h]
                        return act
                    name = f"blocks.{l}.attn.hook_z"
                else:
                    def hook(act, hook):
                        return means[hook.name][None].expand_as(act).clone()
                    name = f"blocks.{l}.hook_mlp_out"
                out[l, h] = float(metric(model.run_with_hooks(task.clean, fwd_hooks=[(name, hook)])))
    return out


def _blocks(hf):
    """(attention output projection, MLP) per layer of a GPT-2 or LLaMA-family HF model."""
    if hasattr(hf, "transformer"):
        return [(b.attn.c_proj, b.mlp) for b in hf.transformer.h]
    return [(b.self_attn.o_proj, b.mlp) for b in hf.model.layers]


def plain_learn(model, task, *, seed: int, steps: int, sparsity: float = 0.5, batch_size: int = 32) -> torch.Tensor:
    """The official recipe's loop in plain torch on the HF model under the bridge: one mean per head
    (and per MLP) over all non-padding tokens, a hard-concrete gate per unit, KL at the answer, the
    Lagrangian on the sampled gates' sparsity, AdamW with warm-up and linear decay. Returns log_alpha."""
    hf = model.original_model
    L, H = model.cfg.n_layers, model.cfg.n_heads
    opts = official(9300)
    blocks = _blocks(hf)
    valid = task.clean != 0
    z_means, mlp_means, handles = [], [], []
    with torch.no_grad():  # the references: one forward over every row, recording each site
        rec: dict[str, torch.Tensor] = {}
        for l, (proj, mlp) in enumerate(blocks):
            handles.append(proj.register_forward_pre_hook(lambda m, a, l=l: rec.__setitem__(f"z{l}", a[0])))
            handles.append(mlp.register_forward_hook(lambda m, a, o, l=l: rec.__setitem__(f"m{l}", o)))
        full = hf(task.clean).logits
        for h in handles:
            h.remove()
        for l in range(L):
            z_means.append(rec[f"z{l}"][valid].mean(0).view(H, -1))
            mlp_means.append(rec[f"m{l}"][valid].mean(0))
    full_logp = full[torch.arange(len(task)), task.answer_pos].log_softmax(-1)
    gen = torch.Generator().manual_seed(seed)
    log_alpha = (INIT_LOG_ALPHA + 0.01 * torch.randn(L * H + L, generator=gen))[None].requires_grad_()
    lam1, lam2 = torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)
    opt = torch.optim.AdamW([{"params": [log_alpha]}, {"params": [lam1, lam2], "lr": opts["reg_lr"], "maximize": True,
                             "weight_decay": 0.0}], lr=opts["lr"], weight_decay=opts["weight_decay"])
    warm = max(1, round(0.02 * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min((i + 1) / warm, max(0.0, (steps - i) / max(1, steps - warm))))
    gates: dict[str, torch.Tensor] = {}
    for l, (proj, mlp) in enumerate(blocks):
        def head_hook(m, args, l=l):
            z = args[0].unflatten(-1, (H, -1))
            g = gates["z"][l][:, None]
            return ((z - z_means[l]) * g + z_means[l]).flatten(-2)
        handles.append(proj.register_forward_pre_hook(head_hook))
        handles.append(mlp.register_forward_hook(lambda m, a, o, l=l: (o - mlp_means[l]) * gates["m"][l] + mlp_means[l]))
    for p in hf.parameters():
        p.requires_grad_(False)
    try:
        for step in range(steps):
            target = sparsity * min(1.0, step / max(1.0, opts["warmup"] * steps))
            idx = torch.randperm(len(task), generator=gen)[:batch_size]
            z = hard_concrete(log_alpha, torch.rand(L * H + L, generator=gen)[None])[0]
            gates["z"], gates["m"] = z[: L * H].view(L, H), z[L * H :]
            logq = hf(task.clean[idx]).logits[torch.arange(len(idx)), task.answer_pos[idx]].log_softmax(-1)
            kl = F.kl_div(logq, full_logp[idx], log_target=True, reduction="batchmean")
            gap = target - (1 - z.mean())
            loss = kl + lam1 * gap + lam2 * gap**2
            opt.zero_grad()
            loss.sum().backward()
            opt.step()
            sched.step()
    finally:
        for h in handles:
            h.remove()
        for p in hf.parameters():
            p.requires_grad_(True)
    return log_alpha.detach()[0]


def learn_speed(model, task, steps: int, seeds: int, repeats: int) -> dict[str, float]:
    """Steps/s of learn_masks (official recipe) with 1 and `seeds` seeds, and of `plain_learn`."""
    opts = official(9300)
    t_one = t_many = t_plain = float("inf")
    for _ in range(repeats):  # alternated, best of each, so the shared CPU's load hits all alike
        t, one = best_of(lambda: masking.learn_mask(model, task, sparsity=0.5, seed=0, steps=steps, progress=False, **opts), 1)
        t_one = min(t_one, t)
        t, _ = best_of(lambda: masking.learn_masks(model, task, sparsity=0.5, seeds=list(range(seeds)), steps=steps,
                                                    progress=False, **opts), 1)
        t_many = min(t_many, t)
        t, plain = best_of(lambda: plain_learn(model, task, seed=0, steps=steps), 1)
        t_plain = min(t_plain, t)
    diff = float((torch.tensor(one.meta["log_alpha"]) - plain).abs().max())
    return {"one": steps / t_one, "many": steps * seeds / t_many, "plain": steps / t_plain, "diff": diff,
            "t_one": t_one, "t_many": t_many, "t_plain": t_plain}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="zoo:lm-gpt2")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--record", default=None, help="append the markdown section to this file")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for these small models)")
    parser.add_argument("--learn-steps", type=int, default=100, help="steps per timed learn_masks / plain torch run")
    parser.add_argument("--seeds", type=int, default=4, help="seeds learned side by side in the batched run")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    model, name = _model(args.spec)
    train = make("sva", split="sva_id", n=512, seed=1)
    start = time.perf_counter()
    mask = masking.learn_mask(model, train, sparsity=0.5, seed=0, steps=args.steps, progress=False)
    learn_s = time.perf_counter() - start

    scan_task = make("sva", split="sva_id", n=256, seed=2)
    # alternate the two, best of `repeats` each, so load from other jobs on a shared CPU hits both alike
    t_interp = t_tl = float("inf")
    for _ in range(args.repeats):
        t, grid = best_of(lambda: masking.ablation_scan(model, scan_task, ablation="mean", progress=False), 1)
        t_interp = min(t_interp, t)
        t, plain = best_of(lambda: plain_tl_scan(model, scan_task), 1)
        t_tl = min(t_tl, t)
    diff = float((grid.values - plain).abs().max())
    speed = learn_speed(model, train, args.learn_steps, args.seeds, max(1, args.repeats // 2))

    lines = [
        "## masking",
        "",
        f"{date.today().isoformat()} · {platform.machine()} · {platform.processor() or platform.platform()} · "
        f"torch {torch.__version__} · {torch.get_num_threads()} threads · model: {name} · CPU shared with other jobs",
        "",
        "| measurement | value |",
        "|---|---|",
        f"| learn one mask, sparsity 0.5, {args.steps} steps, batch 32, 20 units (seconds) | {learn_s:.1f} |",
        f"| steps per second | {args.steps / learn_s:.2f} |",
        f"| mask: units off / expected sparsity | {int((mask.units() == 0).sum())}/{mask.n_units} / {mask.meta['expected_sparsity']:.3f} |",
        f"| ablation scan, {grid.values.numel()} units, 256 rows: interp, batched `run.evaluate` (s) | {t_interp:.2f} |",
        f"| same scan as plain TL hooks in a loop (s) | {t_tl:.2f} |",
        f"| ratio TL / interp (best of {args.repeats} each, alternated) | {t_tl / t_interp:.2f} |",
        f"| max abs difference of the two scans | {diff:.2e} |",
        f"| official recipe, {args.learn_steps} steps, batch 32: plain torch loop (HF model + hooks), steps/s | {speed['plain']:.2f} |",
        f"| `learn_mask`, one seed, steps/s (x plain torch) | {speed['one']:.2f} ({speed['one'] / speed['plain']:.2f}x) |",
        f"| `learn_masks`, {args.seeds} seeds in one forward, mask-steps/s (x plain torch) | {speed['many']:.2f} ({speed['many'] / speed['plain']:.2f}x) |",
        f"| max abs difference of log_alpha, `learn_mask` vs plain torch, same seed | {speed['diff']:.1e} |",
        "",
    ]
    report(lines, args.record, lead="\n")


if __name__ == "__main__":
    main()
