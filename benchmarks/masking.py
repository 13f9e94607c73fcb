"""Benchmark: learning one 50%-sparsity hard-concrete mask, and an ablation scan vs plain TL hooks.

    .venv/bin/python benchmarks/masking.py [--spec zoo:lm-gpt2] [--steps 200] [--record benchmarks/RESULTS.md]

(1) Seconds and steps/s to learn one mask (`interp.masking.learn_mask`, sparsity 0.5, default
settings: batch 32, mean ablation, heads + MLPs) on SVA (sva_id, 512 rows). Goal: <= 60 s.
(2) A mean-ablation scan over every head and MLP (`interp.masking.ablation_scan`: every single-unit
ablation one variant of `interp.run.evaluate`, batched and resumed at the unit's layer) against the same
scan written as plain TransformerLens hooks in a loop (`run_with_cache` for the means, then one
`run_with_hooks` per unit), in one process on the same model and rows, with the max |difference|.
Prints a markdown section; `--record` appends it to a file.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from datetime import date

import torch

from interp import masking
from interp.metrics import for_task
from interp.model import ZOO_DIR, build_tiny, load
from interp.tasks import english, make
from timing import best_of  # benchmarks/timing.py, beside this script


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="zoo:lm-gpt2")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--record", default=None, help="append the markdown section to this file")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for these small models)")
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
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.record:
        with open(args.record, "a", encoding="utf-8") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
