"""Benchmark: core extraction (activations + batched output gradients) vs one backward per example.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cores.py [--spec zoo:lm-llama] [--n 256] [--record benchmarks/RESULTS.md]

(1) `interp.cores.extract(method="ace")` on SVA (sva_id, n rows) at the last residual layer:
    one forward per batch (`interp.run.with_grad`), one backward per batch, then the balanced
    truncation. (2) The naive approach: one forward and one backward per example (a plain
    TransformerLens hook making the site a leaf; the same site), then the same balanced
    truncation. Reports both times, the ratio, and the max |difference| between the two
    gradient sets and between the two cores' principal angles.
Prints a markdown section; `--record` appends it to a file.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from datetime import date

import torch

from interp import cores
from interp.cores import linalg
from interp.hooks import hooks
from timing import report  # benchmarks/timing.py, beside this script
from interp.metrics import logit_diff
from interp.model import ZOO_DIR, build_tiny, load
from interp.tasks import english

BATCH = 256  # rows per batched backward in cores.extract / cores.gradients


def _model(spec: str):
    name = spec.removeprefix("zoo:")
    if spec.startswith("zoo:") and not (ZOO_DIR / name / "config.json").exists():
        path = build_tiny("llama", tempfile.mkdtemp() + "/lm", words=english.WORDS, d_model=128, n_layers=4, n_heads=4, d_mlp=256)
        return load(path), f"random-weight model of {name}'s sizes ({spec} absent)"
    return load(spec), spec


def naive_gradients(model, task, site: str) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward and one backward per example (the baseline)."""
    acts, grads = [], []
    for i in range(len(task)):
        row = task[[i]]
        leaf: list[torch.Tensor] = []

        def grab(act, *, hook):
            x = act.detach().requires_grad_(True)
            leaf.append(x)
            return x

        with torch.enable_grad(), hooks(model, [(site, grab)]):
            out = logit_diff(model(row.clean), row.correct, row.incorrect, row.answer_pos).sum()
            (g,) = torch.autograd.grad(out, leaf[0])
        p = int(row.answer_pos[0])
        acts.append(leaf[0][0, p].detach())
        grads.append(g[0, p])
    return torch.stack(acts), torch.stack(grads)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", default="zoo:lm-llama")
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--record", default=None)
    args = parser.parse_args()
    model, what = _model(args.spec)
    task = english.sva(args.n, split="sva_id", seed=1)
    site = f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"
    cores.extract(model, task[:8], site=site, k=1)  # warm-up

    def best(fn):
        times, out = [], None
        for _ in range(args.repeats):
            start = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - start)
        return min(times), out

    t_batched, core = best(lambda: cores.extract(model, task, site=site, batch_size=BATCH))

    def naive():
        x, g = naive_gradients(model, task, site)
        basis, spectrum = linalg.balanced_truncation(x, g)
        return x, g, basis, spectrum

    t_naive, (x, g, basis, spectrum) = best(naive)
    xb, gb = cores.gradients(model, task, site, batch_size=BATCH)
    grad_diff = float((gb - g).abs().max())
    angle = float(linalg.principal_angles(core.basis, basis[:, : core.k]).max())
    lines = [
        "",
        "## cores",
        "",
        f"{date.today().isoformat()}, {platform.machine()}, {torch.get_num_threads()} torch thread(s), torch {torch.__version__}; "
        f"machine shared with training jobs and other sessions. Model: {what} "
        f"(d_model {model.cfg.d_model}, {model.cfg.n_layers} layers). Task: SVA sva_id, {args.n} rows; site {site}. "
        f"Command: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cores.py --spec {args.spec} --n {args.n}` (best of {args.repeats}).",
        "",
        "| approach | seconds | per example (ms) |",
        "|---|---|---|",
        f"| `cores.extract` (batched gradients, {BATCH} rows per backward) | {t_batched:.3f} | {1000 * t_batched / args.n:.2f} |",
        f"| naive: one forward + backward per example | {t_naive:.3f} | {1000 * t_naive / args.n:.2f} |",
        "",
        f"Ratio naive / batched: **{t_naive / t_batched:.1f}x**. Max |gradient difference| {grad_diff:.2e}; "
        f"largest principal angle between the two cores (k={core.k}) {angle:.2e} rad.",
        "",
    ]
    report(lines, args.record)


if __name__ == "__main__":
    main()
