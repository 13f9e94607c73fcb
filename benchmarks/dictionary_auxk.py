"""Dead features of SmolLM2-135M transcoders under AuxK's two readings: Gao et al.'s (the dead
features' top pre-activations through a relu) and interp's default (signed), side by side.

    OMP_NUM_THREADS=1 python benchmarks/dictionary_auxk.py [--layers 3,15] [--seeds 0,1] [--steps 100] [--out FILE.json]

One model forward pass caches the transcoder sites (`mlp_sites`) of `--rows` rows of the english
text's training rows and of its held-out rows (`interp.features.suite`'s split); then, per layer and
seed, two dictionaries that differ only in `Recipe.aux_values` train on the same batches from the
same start (`interp.features.fit`, the suite's cpu16k recipe: 16,384 features, k 32, lr 2e-3, dead
after 10,000 tokens, batches of 1,024 tokens). Each is scored on the held-out tokens: FVE and the
fraction of features that never fire there (dead). The relu reading is the control: the same
statistic under the published loss; the seed-paired difference (signed - relu) is the effect.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import replace
from pathlib import Path

import torch

import interp
from interp.features import Recipe, fit
from interp.features.suite import SUITES, _data
from interp.features.train import _batch, mlp_sites
from interp.files.storage import write_text_atomic


def _acts(model, rows, valid, names: list[str], n_rows: int) -> dict[str, torch.Tensor]:
    out = {n: [] for n in names}
    for i in range(0, min(n_rows, len(rows)), 8):
        acts = _batch(model, rows[i : i + 8], valid[i : i + 8], names)
        for n in names:
            out[n].append(acts[n])
    return {n: torch.cat(v) for n, v in out.items()}


def _scored(d, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    with torch.no_grad():
        f = d.encode(x)
        fve = 1 - (y - d.decode(f)).pow(2).sum(-1).mean() / (y - y.mean(0)).pow(2).sum(-1).mean()
        return {"fve": round(float(fve), 4), "dead": round(float((~(f > 0).any(0)).float().mean()), 4),
                "l0": round(float((f > 0).sum(-1).float().mean()), 2)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", default="3,15")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--rows", type=int, default=800, help="training rows cached (of 127 tokens each)")
    p.add_argument("--out", default="benchmarks/dictionary_auxk.json")
    a = p.parse_args(argv)
    torch.manual_seed(0)
    suite = SUITES["smollm2-english"]
    base = replace(suite.budgets["cpu16k"], tokens=a.steps * 1024, checkpoint_every=10)
    layers, seeds = [int(v) for v in a.layers.split(",")], [int(v) for v in a.seeds.split(",")]
    model = interp.load(suite.model)
    rows, valid, held, held_valid = _data(model, suite)
    names = [n for layer in layers for n in mlp_sites(layer)]
    perm = torch.randperm(len(rows), generator=torch.Generator().manual_seed(7))[: a.rows]
    t0 = time.perf_counter()
    train, test = _acts(model, rows[perm], valid[perm], names, a.rows), _acts(model, held, held_valid, names, len(held))
    out = {"what": __doc__.split("\n\n")[0], "recipe": {**base.__dict__, "prefixes": list(base.prefixes)}, "batch": 1024,
           "steps": a.steps, "train_tokens": len(train[names[0]]), "held_out_tokens": len(test[names[0]]),
           "forward_seconds": round(time.perf_counter() - t0, 1), "runs": []}
    for layer in layers:
        site_in, site_out = mlp_sites(layer)
        for seed in seeds:
            pair = {}
            for aux in ("relu", "signed"):
                t1 = time.perf_counter()
                d = fit(train[site_in], train[site_out], site_in=site_in, site_out=site_out,
                        recipe=replace(base, seed=seed, aux_values=aux), batch=1024)
                pair[aux] = {**_scored(d, test[site_in], test[site_out]), "seconds": round(time.perf_counter() - t1, 1),
                             "train_dead": [r["dead"] for r in d.meta["history"]]}
                print(layer, seed, aux, pair[aux], flush=True)
            out["runs"].append({"layer": layer, "seed": seed, **pair,
                                "signed_minus_relu": {k: round(pair["signed"][k] - pair["relu"][k], 4) for k in ("fve", "dead")}})
            out["machine"] = f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}"
            write_text_atomic(a.out, json.dumps(out, indent=1) + "\n")  # after each pair: a stopped run keeps what it finished


if __name__ == "__main__":
    main()
