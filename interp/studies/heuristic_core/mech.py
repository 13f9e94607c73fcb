"""The heuristic core's two mechanism claims (Bhaskar et al. 2024), and how the study's budgets depart
from the paper's set-up (`departures`).

Emergence (``hc.core_emerges_early``: "the core heads emerge early in training"). One zoo recipe
(`emergence_recipe`, e.g. lm-llama) is retrained by `interp.zoo.train` with a checkpoint every
`emergence_every` steps (`emergence_unit`, a stored unit: training, then a single-head mean-ablation
scan of the in-distribution task at every checkpoint). `emergence` then reads, per checkpoint, how
important the final model's core heads (the study's core at the paper's sparsity: heads kept by every
distinct learned mask) are among all heads -- the mean percentile of their importance (the drop of the
task's logit difference when each head alone is mean-ablated) -- beside random head sets of the core's
size (`draws` of them, 5th-95th percentile). The verdict is read at the last checkpoint before the
model generalizes out of distribution (attractor-mismatch accuracy first >= `GENERALIZED`): core
heads that "emerge early" are already more important than random heads there.

Generalization adds heads (``hc.generalization_adds_heads``: "generalization comes from additional
heads that read the core heads' outputs"). On the stored masks: `reading` scores each head by how
much of the task (out of distribution, where generalization shows) flows into it from the core heads
-- the summed |EAP edge score| (`interp.circuits.eap`) from every core head into its query input and
its KV group's key and value inputs (shared evenly by the group's heads, as `Graph.heads` does). The
distinct masks are split by OOD accuracy (top half: generalizing; bottom half: not). Two controls: the
generalizing masks' extra (non-core) heads against random non-core heads with the same per-layer
counts (`draws`, 5th-95th percentile), and against the non-generalizing masks' extra heads (their
difference, 2.5th-97.5th percentile of a bootstrap over heads). The claim needs both.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import torch

from interp import tasks
from interp.errors import InterpError
from interp.studies.verdicts import against_all, judge

__all__ = ["GENERALIZED", "departures", "emergence", "emergence_unit", "model_reading", "percentile_of", "reading", "reading_scores",
           "study_emergence"]

GENERALIZED = 0.9  # OOD accuracy at which a checkpoint counts as generalizing (the full zoo models score 1.0)
LEVELS = (0.05, 0.5, 0.95)


def _quantiles(x: torch.Tensor, levels: Sequence[float] = LEVELS) -> list[float]:
    return torch.quantile(x.double(), torch.tensor(levels, dtype=torch.float64)).tolist()


# ---------------------------------------------------------------------------------------------
# emergence over training checkpoints


def checkpoints_dir(recipe: str, every: int, steps: int | None) -> Path:
    """Where `emergence_unit` trains `recipe` with its checkpoints ($INTERP_CACHE, outside git)."""
    from interp.files.storage import cache_dir

    return cache_dir() / "studies" / "heuristic-core-emergence" / f"{recipe}-every{every}{'' if steps is None else f'-steps{steps}'}"


def emergence_unit(recipe: str, every: int, steps: int | None, rows: int, progress: bool = False) -> dict[str, Any]:
    """Train zoo recipe `recipe` (`steps`: per phase, None: the recipe's own) with a checkpoint every
    `every` steps (reused when already trained), then at every checkpoint the in-distribution SVA
    accuracy history and each head's importance: the task metric (logit difference on `rows` sva_id
    rows) of the unablated checkpoint minus that with the head alone mean-ablated (one mean over all
    tokens, as the study's masks). `final_vs_shipped`: the largest weight difference between the
    last checkpoint and the shipped zoo model (None when `steps` shortens the recipe)."""
    from safetensors.torch import load_file

    from interp import masking
    from interp.model import ZOO_DIR, load
    from interp.zoo.train import RECIPES, train

    if recipe not in RECIPES:
        raise InterpError(f"emergence_recipe={recipe!r} is not a zoo recipe; give one of {sorted(RECIPES)}")
    out_dir = checkpoints_dir(recipe, every, steps)
    t0 = time.perf_counter()
    if not (out_dir / "card.json").exists():
        train(replace(RECIPES[recipe], eval_every=every), out_dir, steps=steps, progress=progress, evaluate_after=False)
    train_s = time.perf_counter() - t0
    card = json.loads((out_dir / "card.json").read_text())
    task = tasks.make("sva", split="sva_id", n=rows, seed=1, masked=False)  # the study's training rows (sva_tasks)
    result: dict[str, Any] = {"steps": [], "importance": [], "baseline": [], "history": card["history"],
                              "train_seconds": card["training"]["seconds"]}
    t0 = time.perf_counter()
    for ckpt in sorted((out_dir / "checkpoints").glob("step-*")):
        grid = masking.ablation_scan(load(str(ckpt)), task, ablation="mean", mean_over="tokens", mlps=False, progress=False)
        result["steps"].append(int(ckpt.name.split("-")[1]))
        result["baseline"].append(grid.meta["baseline"])
        result["importance"].append((grid.meta["baseline"] - grid.values).tolist())
    result["scan_seconds"] = round(time.perf_counter() - t0, 1)
    shipped = ZOO_DIR / recipe / "model.safetensors"
    result["final_vs_shipped"] = None
    if steps is None and shipped.exists():
        a, b = load_file(str(shipped)), load_file(str(out_dir / "model.safetensors"))
        result["final_vs_shipped"] = max(float((a[k].float() - b[k].float()).abs().max()) for k in a if k in b)
    result["seconds"] = round(train_s + result["scan_seconds"], 1)
    return result


def percentile_of(importance: torch.Tensor, heads: Sequence[Sequence[int]]) -> float:
    """The mean, over `heads`, of each head's percentile among all heads by importance [layer, head]:
    the fraction of the other heads less important than it (ties count half); 1 = the most important."""
    flat = importance.flatten().double()
    n_heads = importance.shape[1]
    idx = [int(layer) * n_heads + int(h) for layer, h in heads]
    pct = [(float((flat < flat[i]).sum()) + 0.5 * (float((flat == flat[i]).sum()) - 1)) / (flat.numel() - 1) for i in idx]
    return sum(pct) / len(pct)


def emergence(unit: dict[str, Any], core_heads: Sequence[Sequence[int]], *, draws: int, ood_split: str,
              id_split: str, seed: int = 0) -> dict[str, Any]:
    """Per checkpoint of `unit` (`emergence_unit`): ID / OOD accuracy, the core heads' mean importance
    percentile (`percentile_of`) and that of `draws` random head sets of the core's size (median,
    5th / 95th percentile); the first step where the model generalizes (OOD >= GENERALIZED), the first
    where the core stands above the random sets' 95th percentile, and the verdict at the last checkpoint
    before generalization (None / "not run" where the core has no head or no such checkpoint exists)."""
    acc = {h["step"]: h for h in unit["history"]}
    rows = []
    gen = torch.Generator().manual_seed(seed)
    for step, imp in zip(unit["steps"], unit["importance"]):
        imp = torch.tensor(imp)
        row: dict[str, Any] = {"step": step, "id": acc[step][id_split], "ood": acc[step][ood_split]}
        if core_heads:
            n = imp.numel()
            sets = [torch.randperm(n, generator=gen)[: len(core_heads)] for _ in range(draws)]
            null = torch.tensor([percentile_of(imp, [(int(i) // imp.shape[1], int(i) % imp.shape[1]) for i in s]) for s in sets])
            q05, med, q95 = _quantiles(null)
            row.update(core=percentile_of(imp, core_heads), random={"q05": q05, "median": med, "q95": q95, "draws": draws})
        rows.append(row)
    generalized = next((r["step"] for r in rows if r["ood"] >= GENERALIZED), None)
    before = [r for r in rows if generalized is not None and r["step"] < generalized]
    pre = before[-1] if before and core_heads else None
    core_first = next((r["step"] for r in rows if core_heads and r["core"] > r["random"]["q95"]), None)
    total = rows[-1]["step"] if rows else None
    verdict = judge("the final core's heads are more important than random heads of the core's size at the last checkpoint "
                    "before the model generalizes out of distribution (mean importance percentile)",
                    pre["core"] if pre else None, pre["random"]["median"] if pre else None, "greater",
                    control_ci=(pre["random"]["q05"], pre["random"]["q95"]) if pre else None, null="random units",
                    draws=draws if pre else None, claim_id="hc.core_emerges_early")
    return {"core_heads": [list(h) for h in core_heads], "checkpoints": rows, "generalized_at": generalized,
            "judged_at": pre["step"] if pre else None, "core_first_above_random": core_first, "last_step": total,
            "final_vs_shipped": unit.get("final_vs_shipped"), "seconds": unit.get("seconds"), "verdict": verdict}


# ---------------------------------------------------------------------------------------------
# do the generalizing masks' extra heads read the core?


def reading_scores(graph, core_heads: Sequence[Sequence[int]]) -> torch.Tensor:
    """[layer, head]: the summed |edge score| of `graph` (an `interp.circuits.Graph`) from the core
    heads into each head's query input and its KV group's key and value inputs (split evenly over the
    group's query heads)."""
    from interp.circuits.graph import node

    nl, nh, nkv = graph.meta["n_layers"], graph.meta["n_heads"], graph.meta["n_kv_heads"]
    per = nh // nkv
    core = {f"a{int(layer)}.h{int(h)}" for layer, h in core_heads}
    out = torch.zeros(nl, nh, dtype=torch.float64)  # cpu: a result
    for s, r, v in zip(graph.senders, graph.receivers, graph.scores.abs().tolist()):
        if s not in core:
            continue
        b = node(r)
        if b.role == "q":
            out[b.layer, b.index] += v
        elif b.role in ("k", "v"):
            out[b.layer, b.index * per:(b.index + 1) * per] += v / per
    return out


def reading(scores: torch.Tensor, core_heads: Sequence[Sequence[int]], masks: Sequence[dict[str, Any]], *, draws: int,
            seed: int = 0) -> dict[str, Any]:
    """Judge ``hc.generalization_adds_heads`` from per-head reading scores [layer, head]
    (`reading_scores`) and the distinct masks (dicts with "heads" and "ood"): see the module doc."""
    n_heads = scores.shape[1]
    core = {(int(layer), int(h)) for layer, h in core_heads}
    ranked = sorted(masks, key=lambda m: -m["ood"])
    half = len(ranked) // 2
    gen_masks, non_masks = ranked[:half], ranked[len(ranked) - half:]
    extras = lambda m: [tuple(h) for h in m["heads"] if tuple(h) not in core]  # noqa: E731
    out: dict[str, Any] = {"core_heads": [list(h) for h in sorted(core)], "masks": len(ranked),
                           "generalizing": [{"ood": m["ood"], "extra_heads": len(extras(m))} for m in gen_masks],
                           "not_generalizing": [{"ood": m["ood"], "extra_heads": len(extras(m))} for m in non_masks]}
    ok = bool(core) and half >= 1 and all(extras(m) for m in gen_masks + non_masks)
    if ok:
        read = lambda hs: torch.tensor([float(scores[h]) for h in hs], dtype=torch.float64)  # noqa: E731
        effect = float(torch.stack([read(extras(m)).mean() for m in gen_masks]).mean())
        gen = torch.Generator().manual_seed(seed)
        free = [[h for h in range(n_heads) if (layer, h) not in core] for layer in range(scores.shape[0])]
        null = []
        for _ in range(draws):
            per_mask = []
            for m in gen_masks:
                picked = []
                for layer in range(scores.shape[0]):
                    k = sum(1 for h in extras(m) if h[0] == layer)
                    picked += [(layer, free[layer][int(i)]) for i in torch.randperm(len(free[layer]), generator=gen)[:k]]
                per_mask.append(read(picked).mean())
            null.append(torch.stack(per_mask).mean())
        q05, med, q95 = _quantiles(torch.stack(null))
        g = torch.cat([read(extras(m)) for m in gen_masks])
        n = torch.cat([read(extras(m)) for m in non_masks])
        boot = torch.stack([g[torch.randint(len(g), (len(g),), generator=gen)].mean() - n[torch.randint(len(n), (len(n),), generator=gen)].mean()
                            for _ in range(draws)])
        lo, hi = _quantiles(boot, (0.025, 0.975))
        non_mean = float(torch.stack([read(extras(m)).mean() for m in non_masks]).mean())
        out.update(generalizing_extra_reading=effect, not_generalizing_extra_reading=non_mean,
                   random={"q05": q05, "median": med, "q95": q95, "draws": draws},
                   difference={"value": effect - non_mean, "ci95": [lo, hi], "resamples": draws},
                   core_reading_total=float(scores.sum()))
    e = out.get("generalizing_extra_reading")
    out["vs_random"] = judge("the generalizing masks' extra heads read the core heads more than random non-core heads with "
                             "the same per-layer counts (summed |EAP score| from the core, mean per head)",
                             e, out["random"]["median"] if ok else None, "greater",
                             control_ci=(out["random"]["q05"], out["random"]["q95"]) if ok else None,
                             null="random units", draws=draws if ok else None)
    out["vs_not_generalizing"] = judge("the generalizing masks' extra heads read the core heads more than the non-generalizing "
                                       "masks' extra heads (difference of means, bootstrap over heads)",
                                       e, out["not_generalizing_extra_reading"] if ok else None, "greater",
                                       diff_ci=out["difference"]["ci95"] if ok else None, null="baseline",
                                       draws=draws if ok else None)
    out["claim"] = {"label": "the generalizing masks' extra heads read the core heads' outputs, beyond random non-core heads "
                             "and beyond the non-generalizing masks' extra heads", "claim_id": "hc.generalization_adds_heads",
                    "word": against_all([out["vs_random"]["word"], out["vs_not_generalizing"]["word"]])}
    return out


# ---------------------------------------------------------------------------------------------
# both, inside the study's repro


def model_reading(model, m: dict[str, Any], b: dict[str, Any], ood) -> dict[str, Any]:
    """hc.generalization_adds_heads for one model of the study (`m`: its aggregated entry, budget `b`) on
    its distinct masks at the paper's sparsity: EAP on `ood` (the out-of-distribution task), then `reading`."""
    from interp import circuits

    s = m["sparsities"].get(f"{b['sparsity']:g}", {})
    core = [tuple(h) for h in s.get("core", {}).get("heads", [])]
    masks = {}
    for x in m["masks"]:
        if x["sparsity"] == b["sparsity"]:
            masks.setdefault((tuple(map(tuple, x["heads"])), tuple(x["mlps"])), {"heads": x["heads"], "ood": x["accuracy"][m["ood_split"]]})
    scores = torch.zeros(model.cfg.n_layers, model.cfg.n_heads)
    if core:
        scores = reading_scores(circuits.eap(model, ood, batch_size=16, progress=False), core)
    return {"split": m["ood_split"], **reading(scores, core, list(masks.values()), draws=b["reading_draws"]),
            "scores": scores.tolist() if core else None}


def study_emergence(out: dict[str, Any], b: dict[str, Any], store, progress: bool) -> dict[str, Any] | None:
    """hc.core_emerges_early: `emergence_recipe` retrained with checkpoints (a stored unit, computed when
    `learn` is on) and its final core's heads traced back (`emergence`)."""
    name = b["emergence_recipe"]
    if not name:
        return None
    m = out["models"].get(f"zoo:{name}", {})
    config = {"unit": "emergence", "recipe": name, "every": b["emergence_every"], "steps": b["emergence_steps"],
              "rows": b["emergence_rows"]}
    unit = store.run(config, lambda: emergence_unit(name, config["every"], config["steps"], config["rows"], progress)) \
        if b["learn"] else store.get(config)
    core = m.get("sparsities", {}).get(f"{b['sparsity']:g}", {}).get("core", {}).get("heads", [])
    if unit is None or not m:
        return {"recipe": name, "unit_done": unit is not None, "verdict": emergence(
            {"steps": [], "importance": [], "history": []}, [], draws=b["emergence_draws"], ood_split="", id_split="")["verdict"]}
    return {"recipe": name, "every": config["every"], "rows": config["rows"], **emergence(
        unit, core, draws=b["emergence_draws"], ood_split=m["ood_split"], id_split=m["id_split"])}


# ---------------------------------------------------------------------------------------------
# how a budget departs from the paper


PAPER_STEPS, PAPER_BATCH = 9300, 128  # the official pruning recipe's steps and batch (the paper's appendix)


def departures(v: dict[str, Any]) -> list[dict[str, Any]]:
    """Every way budget values `v` differ from the paper's set-up (BERT-base fine-tuned on MNLI, pruned
    with the official recipe for 9300 steps at batch 128, judged on HANS), each with both values."""
    zoo = [m for m in v["models"] if m.startswith("zoo:")]
    real = [m for m in v["models"] if not m.startswith("zoo:")]
    row = lambda what, ours, paper, why: {"what": what, "ours": ours, "paper": paper, "why": why}  # noqa: E731
    out = [
        row("models", ", ".join(v["models"]) + " (zoo: 4 layers x 4 heads, d_model 128, trained here on synthetic English; "
            "SmolLM2-135M: 30 layers x 9 heads, pretrained)", "BERT-base (12 layers x 12 heads, 110M parameters) fine-tuned on MNLI",
            "no fine-tuned BERT or MNLI reaches this machine; the zoo runs on a CPU"),
        row("task and data", f"subject-verb agreement: {v['rows']} training rows of sva_id, judged on sva_id / sva_attractor_mismatch "
            f"(SmolLM2: {v['real_rows']} rows of BPE pp_match / pp_mismatch)", "MNLI in distribution, "
            "HANS non-entailment out of distribution", "the attractor-mismatch split breaks the nearest-noun heuristic as HANS "
            "breaks lexical overlap; MNLI/HANS are not on this machine"),
        row("mask batch size", v["batch_size"], PAPER_BATCH, "CPU time: steps x rows per step is "
            f"{v['steps'] * v['batch_size'] / (PAPER_STEPS * PAPER_BATCH):.3g} of the paper's"),
        row("units masked", "every head and every MLP, each one unit", "heads and MLP dimensions, sparsity counted in parameters "
            "(CoFiPruning)", "the zoo has 16 heads and 4 MLPs: a unit per head keeps the core a set of heads"),
    ]
    if v["steps"] != PAPER_STEPS:
        out.append(row("mask steps (zoo)", v["steps"], PAPER_STEPS, "a shorter run; AdamW's weight decay is scaled to keep the "
                       "paper's total decay (official(steps))"))
    if real:
        out.append(row(f"mask schedule ({', '.join(real)})", f"{v['real_steps']} steps, batch {v['real_batch_size']}, "
                       f"{v['real_recipe']} recipe", f"{PAPER_STEPS} steps, batch {PAPER_BATCH}, official recipe",
                       "CPU time: a 135M model's mask step takes ~0.8 s here"))
    if zoo:
        seeds = len(v["seeds"])
        out.append(row("masks per model", f"{seeds} seeds at sparsity {v['sparsity']:g} on {zoo[0]}, {v['other_model_seeds']} on "
                       f"each other zoo model, {v['other_seeds']} at each of {v['other_sparsities']}; {v['real_seeds']} on each "
                       "real model", "many seeds per sparsity on one model (the paper's own count is not in our summary)",
                       "CPU time: lm-gpt2's 12 masks at 9300 steps took 2.4 CPU hours"))
    out.append(row("emergence", f"{v['emergence_recipe']} retrained with a checkpoint every {v['emergence_every']} steps; "
                   "per-head single mean-ablation importance at each (masks are not relearned per checkpoint)",
                   "the core traced over the training of the paper's model (the analysis is not in our summary)",
                   "learning masks at every checkpoint would cost ~0.1 CPU hour each; the importance scan takes seconds")
               if v.get("emergence_recipe") else
               row("emergence", "not run", "the core traced over training", "this budget trains no checkpoints"))
    out.append(row("reading the core", "EAP edge scores (first-order) from the core heads into each head's q/k/v, on the "
                   "out-of-distribution split, in the full model", "the generalizing heads' dependence on the core heads' "
                   "outputs (method not in our summary)", "one forward and backward per batch covers every edge"))
    return out
