"""Dictionary training throughput: trainable tokens per second, and the share of the time spent in
the model's forward (the rest is the dictionaries' own steps), one run per model.

    OMP_NUM_THREADS=1 python benchmarks/dictionaries.py [--steps N] [--out FILE.json]

Each model trains its committed suite (interp.features.suite, "cpu" recipe: zoo:lm-gpt2 4
transcoders + 1 SAE; SmolLM2-135M 30 transcoders + 1 SAE, all from the same forwards) for
`--steps` steps into a temporary folder. The forward time is what `interp.run.cache` takes
(activations of every site, logits at one position only); interp.features.train records it.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from dataclasses import replace

import torch

import interp
from interp.features import suite as suites
from interp.features.corpus import token_rows
from interp.features.train import train_dictionaries


def measure(name: str, steps: int) -> dict:
    s = suites.SUITES[name]
    recipe = s.budgets["cpu"]
    model = interp.load(s.model)
    if s.source == "zoo":
        rows, valid = token_rows(model, "zoo", max_rows=s.zoo_rows, seed=1)
    else:
        rows, valid = token_rows(model, s.source, n_ctx=s.n_ctx)
    per_step = int(valid[: recipe.rows].sum())  # about: rows differ in length on the zoo
    small = replace(recipe, tokens=steps * per_step, checkpoint_every=10**6)
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        d = next(iter(train_dictionaries(model, s.pairs(), rows, valid, out, recipe=small, progress=False).values()))
        wall = time.perf_counter() - t0
    meta = d.meta
    return {"model": s.model, "dictionaries": len(s.pairs()), "n_features": recipe.n_features, "k": recipe.k,
            "tokens": meta["tokens"], "steps": meta["steps"], "seconds": meta["seconds"],
            "forward_seconds": meta["forward_seconds"], "wall_seconds": round(wall, 1),
            "tokens_per_s": round(meta["tokens"] / meta["seconds"], 1),
            "forward_share": round(meta["forward_seconds"] / meta["seconds"], 3)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}",
              "runs": [measure(n, a.steps) for n in ("zoo", "smollm2")]}
    text = json.dumps(result, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
