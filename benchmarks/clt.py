"""Cross-layer against per-layer transcoders on the zoo's English LLaMA (zoo:lm-llama, 4 layers,
d_model 128), at the same width (features a layer) and the same L0 (k features a layer per token),
trained on the same activations; a CLT trained on shuffled outputs is the control.

    OMP_NUM_THREADS=1 python benchmarks/clt.py [--tokens 200000] [--out benchmarks/clt.json]

Measured: each layer's fraction of variance unexplained on held-out tokens; on held-out prompts
(english.prefixes), the attribution graphs' replacement and completeness scores (mean and a 95 %
bootstrap interval over prompts); for the top attention edge of each prompt (qk.attention_edges)
the largest |sum of QK terms - the model's score| (the exactness check) and the top pair's share.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

import interp
from interp.features.attribute import attribute
from interp.features.clt import activations, fit_clt
from interp.features.qk import attention_edges, qk_attribution
from interp.features.train import Recipe, fit, mlp_sites
from interp.tasks import english


def stream(sentences: list[str], width: int) -> torch.Tensor:
    """The sentences' token ids (BOS .. EOS each) end to end, cut into rows of `width`."""
    ids = [i for row in english.encode(sentences) for i in row]
    n = len(ids) // width
    return torch.tensor(ids[: n * width]).view(n, width)


def fvu(pred: torch.Tensor, y: torch.Tensor) -> list[float]:
    """Per layer: |y - pred|^2 / |y - mean y|^2 over tokens."""
    return [round(float((pred[:, l] - y[:, l]).pow(2).sum() / (y[:, l] - y[:, l].mean(0)).pow(2).sum()), 4)
            for l in range(y.shape[1])]


def interval(values: list[float], draws: int = 2000) -> list[float]:
    g = torch.Generator().manual_seed(0)
    v = torch.tensor(values)
    means = v[torch.randint(len(v), (draws, len(v)), generator=g)].mean(1)
    return [round(float(v.mean()), 4), round(float(means.quantile(0.025)), 4), round(float(means.quantile(0.975)), 4)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=200_000)
    ap.add_argument("--features", type=int, default=256)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--out", default="benchmarks/clt.json")
    args = ap.parse_args()
    t0 = time.perf_counter()
    model = interp.load("zoo:lm-llama")
    train, held = stream(english.corpus(4000, seed=0), 16), stream(english.corpus(600, seed=1), 16)
    x, y = activations(model, train)
    xh, yh = activations(model, held)
    recipe = Recipe(n_features=args.features, k=args.k, tokens=args.tokens, lr=3e-3)
    L = model.cfg.n_layers
    per_layer = [fit(x[:, l], y[:, l], site_in=mlp_sites(l)[0], site_out=mlp_sites(l)[1], recipe=recipe, batch=1024)
                 for l in range(L)]
    clt = fit_clt(x, y, recipe=recipe, batch=1024, model_name="zoo:lm-llama")
    g = torch.Generator().manual_seed(1)
    control = fit_clt(x, y[torch.randperm(len(y), generator=g)], recipe=recipe, batch=1024)
    train_s = time.perf_counter() - t0
    out = {"model": "zoo:lm-llama", "recipe": {"n_features": args.features, "k": args.k, "tokens": args.tokens, "lr": 3e-3},
           "train_tokens": len(x), "held_out_tokens": len(xh), "fvu": {
               "per-layer": fvu(torch.stack([d(xh[:, l]) for l, d in enumerate(per_layer)], 1), yh),
               "cross-layer": fvu(clt(xh), yh), "control (shuffled outputs)": fvu(control(xh), yh)}}
    prompts = english.prefixes(args.prompts, seed=2)
    scores, qk_err, qk_share = {"per-layer": [], "cross-layer": [], "control (shuffled outputs)": []}, [], []
    for prompt in prompts:
        for name, tcs in (("per-layer", per_layer), ("cross-layer", clt), ("control (shuffled outputs)", control)):
            scores[name].append(attribute(model, prompt, tcs, progress=False).scores())
        edge = attention_edges(model, prompt, 1)
        if edge:
            qk = qk_attribution(model, prompt, clt, edge)[0]
            qk_err.append(abs(float(qk.terms.sum()) - qk.score))
            qk_share.append(abs(qk.top(1)[0][2]) / float(qk.terms.abs().sum()))
    out["graphs"] = {name: {k: interval([s[k] for s in rows]) for k in ("replacement", "completeness")}
                     for name, rows in scores.items()}
    out["graphs_note"] = "mean and 95 % bootstrap interval over the held-out prompts"
    out["qk"] = {"edges": len(qk_err), "max_abs_error": max(qk_err), "top_pair_share": interval(qk_share)}
    out["prompts"] = prompts
    out["seconds"] = {"training": round(train_s, 1), "total": round(time.perf_counter() - t0, 1)}
    out["machine"] = {"platform": platform.platform(), "torch": torch.__version__, "threads": torch.get_num_threads()}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("fvu", "graphs", "qk", "seconds")}, indent=1))


if __name__ == "__main__":
    main()
