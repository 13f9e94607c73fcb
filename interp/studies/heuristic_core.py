"""The heuristic core (Bhaskar, Friedman & Chen 2024): the reproduction and the demo section.

Masks are learned at each sparsity and seed with the official `princeton-nlp/Heuristic-Core`
choices (`OFFICIAL`: one mean per head over all tokens, sparsity of the sampled gates, AdamW, the
target ramped over ~97 % of training), then evaluated in and out of distribution, with controls:

* zoo language models (word vocabulary): masks learned on ``sva_id`` (a third each of no
  attractor, PP and RC attractors), evaluated on ``sva_id`` and ``sva_attractor_mismatch`` (every
  attractor disagrees with the head noun). Control: the "nearest noun" heuristic's accuracy on each
  split, the score a model reaches with no syntax at all.
* real models (BPE, e.g. ``smollm2-135m``): `interp.tasks.bpe.sva`, masks learned on ``pp_match``
  (the attractor agrees, so the nearest-noun heuristic works) and evaluated on every bpe SVA
  split; plus single-unit ablation scans on ``pp_match`` and ``pp_mismatch``.

Every core (units kept by all masks of one sparsity) is reported beside its chance level: the core
of random masks with the same per-layer kept-head counts (`masking.core_baseline`), and evaluated
alone as a subnetwork. See docs/heuristic_core.md. Built from public names only.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import torch
from tqdm.auto import tqdm

from interp import masking, tasks
from interp.errors import InterpError
from interp.model import ZOO_DIR, build_tiny, describe, load
from interp.results import Heading, stack
from interp.tasks import bpe, english
from interp.tasks.base import SPECIALS

__all__ = ["DEFAULT_MODELS", "OFFICIAL", "PACKAGE", "RECIPES", "official", "demo_section", "markdown", "real_study", "repro", "spread", "summarize", "sva_tasks", "write_doc", "write_repro", "zoo_study"]

DEFAULT_MODELS = ("zoo:lm-gpt2",)
# The official code's recipe (src/pruning/modeling_pert.py, prune-glue.py, prune-all-mnli.sh):
# lr 0.1 for the gates, 1.0 for the multipliers, the target ramped over 6500 + 50 s of 6500 + 56 s steps.
OFFICIAL: dict[str, Any] = {"mean_over": "tokens", "sparsity_from": "sampled", "optimizer": "adamw",
                            "lr": 0.1, "reg_lr": 1.0, "warmup": 0.97}
# AdamW's total decay of log_alpha over their run, lr * weight_decay * steps = 0.1 * 0.01 * ~9300:
# a shorter run keeps it by raising weight_decay (see masking.learn_mask).
OFFICIAL_DECAY = 9.3


PACKAGE: dict[str, Any] = {"mean_over": "tokens"}  # learn_mask's own recipe otherwise
RECIPES = ("official", "package")


def official(steps: int) -> dict[str, Any]:
    """`OFFICIAL` for a run of `steps` steps, weight decay scaled to keep `OFFICIAL_DECAY`."""
    return {**OFFICIAL, "weight_decay": OFFICIAL_DECAY / (OFFICIAL["lr"] * steps)}


def _options(recipe: str, steps: int) -> dict[str, Any]:
    return official(steps) if recipe == "official" else dict(PACKAGE)
REAL_ID, REAL_OOD = "pp_match", "pp_mismatch"
# Bhaskar et al. 2024 (BERT-base on MNLI / HANS non-entailment, mean over subcases), for the doc's comparison
PAPER = {"full_model_hans": 0.272, "sparsity": 0.5, "subnetworks_50_mnli": [0.80, 0.82], "subnetworks_50_hans": [0.013, 0.119]}


def sva_tasks(masked: bool, n_train: int, n_eval: int) -> tuple[tasks.Task, dict[str, tasks.Task]]:
    """Training rows (sva_id, seed 1) and the evaluation splits sva_id / sva_attractor_mismatch (seed 2)."""
    train = tasks.make("sva", split="sva_id", n=n_train, seed=1, masked=masked)
    splits = {s: tasks.make("sva", split=s, n=n_eval, seed=2, masked=masked) for s in ("sva_id", "sva_attractor_mismatch")}
    return train, splits


def spread(values: Sequence[float]) -> dict[str, float]:
    """min / max / mean / standard deviation of accuracies across seeds."""
    t = torch.tensor(list(values), dtype=torch.float64)
    return {"min": float(t.min()), "max": float(t.max()), "mean": float(t.mean()),
            "std": float(t.std()) if len(t) > 1 else 0.0}


def summarize(out: dict[str, Any], id_split: str, ood_split: str) -> dict[str, Any]:
    """Per sparsity: ID / OOD spread across seeds, the core's size against chance, the core's accuracy."""
    summary = {}
    for key, base in out["core_baseline"].items():
        subs = [s for s in out["subnetworks"] if f"{s['sparsity']:g}" == key]
        summary[key] = {
            "achieved_sparsity": spread([s["achieved_sparsity"] for s in subs]),
            "id": spread([s["accuracy"][id_split] for s in subs]),
            "ood": spread([s["accuracy"][ood_split] for s in subs]),
            "core_units": base["observed_units"], "chance_units_mean": base["null_mean"],
            "chance_units_q95": base["null_q95"], "core_p_value": base["p_value"],
            "core_above_chance": base["p_value"] < 0.05,
            "core_accuracy": out["core_accuracy"].get(key),
        }
    return summary


def zoo_study(model, spec: str, *, sparsities: Sequence[float], seeds: Sequence[int], steps: int,
              n_train: int, n_eval: int, baseline_draws: int, progress: bool,
              recipe: str = "official") -> dict[str, Any]:
    """The study on a zoo language model (word vocabulary): SVA in distribution vs attractor mismatch."""
    masked = not describe(model)["is_causal"]
    train, splits = sva_tasks(masked, n_train, n_eval)
    result = masking.study(model, train, splits, sparsities=sparsities, seeds=seeds, steps=steps,
                           baseline_draws=baseline_draws, progress=progress, **_options(recipe, steps))
    out = result.to_json()
    out["nearest_noun_heuristic"] = {s: float(english.nearest_noun_agrees(t).float().mean()) for s, t in splits.items()}
    out["kinds"] = {s: {k: t.meta["kind"].count(k) for k in ("none", "pp", "rc")} for s, t in splits.items()}
    out.update({"model": spec, "masked": masked, "steps": steps, "ablation": "mean", "n_train": n_train, "n_eval": n_eval})
    out["summary"] = summarize(out, "sva_id", "sva_attractor_mismatch")
    return out


def _top(grid, k: int = 5) -> list[dict[str, Any]]:
    """The k units whose ablation lowers the metric most: (layer, unit, drop from baseline)."""
    base = grid.meta["baseline"]
    flat = [(float(base - grid.values[l, u]), l, grid.labels[1][u]) for l in range(grid.values.shape[0]) for u in range(grid.values.shape[1])]
    return [{"layer": l, "unit": u, "drop": round(d, 4)} for d, l, u in sorted(flat, reverse=True)[:k]]


def real_study(model, spec: str, *, sparsities: Sequence[float], seeds: Sequence[int], steps: int,
               n_train: int, n_eval: int, baseline_draws: int, progress: bool,
              recipe: str = "official") -> dict[str, Any]:
    """The study on a real BPE model: ablation scans on pp_match / pp_mismatch, then masks learned on
    pp_match (`n_train` rows), evaluated on every bpe SVA split (`n_eval` rows each)."""
    timings: dict[str, float] = {}
    train = bpe.sva(model, n_train, split=REAL_ID, seed=1)
    splits = {s: bpe.sva(model, n_eval, split=s, seed=2) for s in bpe.SPLITS_SVA}
    middle = {k: t for k, t in splits.items() if k not in (REAL_ID, REAL_OOD)}
    splits = {REAL_ID: splits[REAL_ID], **middle, REAL_OOD: splits[REAL_OOD]}  # ID first, OOD last (Study reads so)
    scans = {}
    for s in (REAL_ID, REAL_OOD):
        t0 = time.perf_counter()
        grid = masking.ablation_scan(model, splits[s], mean_over="tokens", progress=progress)
        timings[f"ablation_scan_{s}"] = round(time.perf_counter() - t0, 1)
        scans[s] = grid
    drop = {s: (g.meta["baseline"] - g.values).flatten() for s, g in scans.items()}
    corr = float(torch.corrcoef(torch.stack([drop[REAL_ID], drop[REAL_OOD]]))[0, 1])
    t0 = time.perf_counter()
    result = masking.study(model, train, splits, sparsities=sparsities, seeds=seeds, steps=steps,
                           baseline_draws=baseline_draws, progress=progress, **_options(recipe, steps))
    timings["masks_and_evaluation"] = round(time.perf_counter() - t0, 1)
    out = result.to_json()
    out["ablation_scan"] = {
        s: {"baseline_logit_diff": round(g.meta["baseline"], 4), "top_units": _top(g),
            "max_drop": round(float(drop[s].max()), 4)} for s, g in scans.items()}
    out["ablation_scan"]["drop_correlation_id_ood"] = round(corr, 4)
    out.update({"model": spec, "task": f"bpe sva, masks learned on {REAL_ID}", "steps": steps, "ablation": "mean",
                "n_train": n_train, "n_eval": n_eval, "timings_s": timings,
                "units": model.cfg.n_layers * (model.cfg.n_heads + 1)})
    out["summary"] = summarize(out, REAL_ID, REAL_OOD)
    return out


def _is_zoo_english(model) -> bool:
    return model.cfg.d_vocab == len(SPECIALS) + len(english.WORDS)


def repro(
    progress: bool = True,
    models: Sequence[str] | None = None,
    *,
    sparsities: Sequence[float] | None = None,
    seeds: Sequence[int] | None = None,
    steps: int | None = None,
    n_train: int | None = None,
    n_eval: int | None = None,
    baseline_draws: int = 2000,
    recipe: str = "official",
) -> dict[str, Any]:
    """The heuristic-core study on `models` (default `DEFAULT_MODELS`); a JSON-serialisable dict.

    `recipe`: "official" (`official(steps)`, the default) or "package" (`learn_mask`'s own
    defaults: expected-L0 Lagrangian, Adam, ramp over 60 % of the steps, with the official mean over
    all tokens), which reaches its target sparsity in few steps.

    Zoo models default to target sparsities (0.7, 0.9), 4 seeds, 300 steps, 512 rows; real models
    to target sparsity 0.7, 2 seeds, 20 steps, 16 training and 8 evaluation rows per split (what
    a shared 2-core CPU allowed, see the doc). Small models run fastest on one torch thread: the CLI (or the caller)
    sets that, not this."""
    start = time.perf_counter()
    if recipe not in RECIPES:
        raise InterpError(f"recipe={recipe!r} is not one of {RECIPES}")
    out: dict[str, Any] = {"recipe": recipe, "options": dict(OFFICIAL if recipe == "official" else PACKAGE),
                           "official_decay": OFFICIAL_DECAY, "paper": PAPER, "models": {}}
    for spec in tqdm(list(models or DEFAULT_MODELS), desc="heuristic-core models", disable=not progress):
        t0 = time.perf_counter()
        model = load(spec)
        zoo = _is_zoo_english(model)
        args = dict(
            sparsities=tuple(sparsities or ((0.7, 0.9) if zoo else (0.7,))),
            seeds=tuple(seeds if seeds is not None else (range(4) if zoo else range(2))),
            steps=steps or (300 if zoo else 20), n_train=n_train or (512 if zoo else 16),
            n_eval=n_eval or (512 if zoo else 8), baseline_draws=baseline_draws, progress=progress, recipe=recipe)
        res = (zoo_study if zoo else real_study)(model, spec, **args)
        res["seconds"] = round(time.perf_counter() - t0, 1)
        out["models"][spec] = res
    out["seconds"] = round(time.perf_counter() - start, 1)
    return out


def demo_section(workdir: Path) -> list:
    """Report items: subnetwork masks of an SVA model, their core and overlap, ID vs OOD accuracy."""
    if (ZOO_DIR / "lm-gpt2" / "config.json").exists():
        spec = "zoo:lm-gpt2"
    else:
        spec = str(build_tiny("gpt2", Path(workdir) / "models" / "masking-gpt2", words=english.WORDS, n_layers=2))
    model = load(spec)
    train, splits = sva_tasks(False, 256, 256)
    result = masking.study(model, train, splits, sparsities=(0.5,), seeds=range(4), steps=120, baseline_draws=200,
                           progress=False, **official(120))
    masks = stack([m.to_grid() for m in result.masks], "model", result.evaluation.labels[0][1 : 1 + len(result.masks)])
    return [
        Heading("Subnetworks and the heuristic core"),
        f"Hard-concrete masks learned at 50% sparsity with four seeds on {spec} (subject-verb agreement, "
        "in distribution; the official Heuristic-Core recipe), then evaluated out of distribution on "
        "attractor-mismatch SVA. Run `interp repro heuristic-core` for the full study with its chance baseline.",
        replace(masks, meta={**masks.meta, "title": "kept units per subnetwork"}),
        result.core,
        result.overlap,
        result,
    ]


# ---------------------------------------------------------------------------------------------
# the doc's tables, rendered from the committed JSON (tests/test_docs.py checks every number)


def _f(x: float | None, nd: int = 3) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def _range(d: dict[str, float]) -> str:
    return f"{_f(d['mean'])} [{_f(d['min'])}, {_f(d['max'])}]"


def markdown(result: dict[str, Any]) -> str:
    """The doc's tables for a `write_repro` document (or one `repro` result): the paper's numbers,
    then per run and model the subnetworks and core per sparsity against chance, the controls,
    and (real models) the ablation scans and timings."""
    p = result["paper"]
    runs = result.get("runs", [result])
    out = ["| Bhaskar et al. 2024 (BERT-base) | in distribution (MNLI) | out of distribution (HANS non-entailment) |",
           "|---|---|---|",
           f"| full model | — | {p['full_model_hans']:.3f} |",
           f"| subnetworks at sparsity {p['sparsity']:.1f} | {p['subnetworks_50_mnli'][0]:.2f}–{p['subnetworks_50_mnli'][1]:.2f} | "
           f"{p['subnetworks_50_hans'][0]:.3f}–{p['subnetworks_50_hans'][1]:.3f} |", ""]
    for run, (spec, m) in ((r, item) for r in runs for item in r["models"].items()):
        splits = list(m["full"])
        id_split, ood_split = (REAL_ID, REAL_OOD) if "ablation_scan" in m else (splits[0], splits[-1])  # as summarize read them
        out.append(f"#### `{spec}`, {run['recipe']} recipe: {len(m['seeds'])} seeds per target sparsity, "
                   f"{m['steps']} steps, {m['seconds']:.1f} s\n")
        out.append(f"| target sparsity | achieved sparsity, mean [min, max] | {id_split} accuracy | {ood_split} accuracy "
                   "| core units | chance core units, mean (95th pct) | p (core ≥ chance) | core alone: ID / OOD |")
        out.append("|---|---|---|---|---|---|---|---|")
        for key, s in m["summary"].items():
            core = s["core_accuracy"] or {}
            out.append(f"| {key} | {_range(s['achieved_sparsity'])} | {_range(s['id'])} | {_range(s['ood'])} | "
                       f"{s['core_units']} | {_f(s['chance_units_mean'])} ({s['chance_units_q95']:g}) | {_f(s['core_p_value'], 4)} | "
                       f"{_f(core.get(id_split))} / {_f(core.get(ood_split))} |")
        out.append("")
        if "nearest_noun_heuristic" in m:
            out.append("| split | full model accuracy | nearest-noun heuristic | rows: none / PP / RC |")
            out.append("|---|---|---|---|")
            for s in splits:
                k = m["kinds"][s]
                out.append(f"| {s} | {_f(m['full'][s])} | {_f(m['nearest_noun_heuristic'][s])} | {k['none']} / {k['pp']} / {k['rc']} |")
        else:
            out.append("| split | full model accuracy |")
            out.append("|---|---|")
            out += [f"| {s} | {_f(m['full'][s])} |" for s in splits]
        out.append("")
        if "ablation_scan" in m:
            scan = m["ablation_scan"]
            out.append("| ablation scan on | baseline logit diff | largest drop | top units (drop) | seconds |")
            out.append("|---|---|---|---|---|")
            for s in (REAL_ID, REAL_OOD):
                top = ", ".join(f"`L{u['layer']}.{u['unit']}` ({_f(u['drop'])})" for u in scan[s]["top_units"][:3])
                out.append(f"| {s} | {_f(scan[s]['baseline_logit_diff'])} | {_f(scan[s]['max_drop'])} | {top} | "
                           f"{m['timings_s'][f'ablation_scan_{s}']:.1f} |")
            out.append("")
            out.append(f"Correlation of the single-unit drops between {REAL_ID} and {REAL_OOD}: "
                       f"{scan['drop_correlation_id_ood']:.3f}; learning the masks and evaluating them took "
                       f"{m['timings_s']['masks_and_evaluation']:.1f} s.\n")
    return "\n".join(out)


def write_repro(results: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write one or more `repro` results (e.g. the zoo run, a SmolLM2 run, a "package" recipe
    run) as the doc's JSON {"paper": PAPER, "runs": [...]}, atomically."""
    import json

    from interp.storage import write_text_atomic

    return write_text_atomic(path, json.dumps({"paper": PAPER, "runs": list(results)}, indent=1))


def write_doc(doc: str | Path, data: str | Path) -> Path:
    """Replace the text between `<!-- tables:begin -->` and `<!-- tables:end -->` in the doc
    with `markdown` of the JSON `data` (written atomically)."""
    import json

    from interp.storage import fill_between

    body = markdown(json.loads(Path(data).read_text()))
    return fill_between(doc, "<!-- tables:begin -->", "<!-- tables:end -->", body)
