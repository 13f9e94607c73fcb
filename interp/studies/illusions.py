"""Friedman et al.'s Dyck study at toy scale (`interp repro illusions`) and its demo section.

"Interpretability Illusions in the Generalization of Simplified Models" (ICML 2024): simplify the
second-layer head of a Dyck-(20, 10) model (SVD of queries and keys at several ranks, k-means at
several k, one-hot attention), fit in distribution, and measure faithfulness on seen structures,
unseen structures (whole structural families held out of training, `dyck.family`) and unseen
depths. Built on the public API of `interp.simplify` only.

The study is a set of resumable units (`interp.studies.units`): per model seed, one training unit
(seed 0 is the shipped `zoo:dyck`; other seeds are retrained with the zoo's recipe into
$INTERP_CACHE/studies/illusions/models, never into the repository) and one unit per simplifier
family (SVD ranks, k-means ks, one-hot). `repro` aggregates them per seed and across seeds, with
each of the paper's claims read by the rules in `claims`.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Sequence

from tqdm.auto import tqdm

import interp
from interp.errors import InterpError
from interp.results import Grid, Heading
from interp.simplify import (
    METRICS, QUANTITIES, Rows, Sweep, compare_attention, dyck_rows, faithfulness, k_sweep, onehot, rank_sweep,
)
from interp.studies.units import Units, budget as resolve_budget, budget_record, provenance
from interp.tasks import dyck

__all__ = ["BUDGETS", "DEFAULT_MODELS", "DYCK_SPLITS", "REPRO_KS", "REPRO_RANKS", "claims", "demo_section", "findings",
           "markdown", "records", "repro", "write_doc"]

DEFAULT_MODELS = ("zoo:dyck",)

REPRO_RANKS = (1, 2, 4, 8, 16, 32)
REPRO_KS = (2, 4, 8, 16, 32, 64)
DYCK_SPLITS = ("seen_struct", "unseen_struct", "unseen_depth")
OOD_SPLITS = (*DYCK_SPLITS[1:], "unseen_depth_deep")
EVAL_SEED = 12345
# seeds: model seeds (0 = zoo:dyck; others retrained with the zoo's dyck recipe, `steps` steps);
# fit: training sequences the simplifiers are fitted on; rows: fresh sequences per split;
# boot: bootstrap resamples. "paper" is the paper's model (2 layers, d_model 32, one head, Dyck-(20, 10))
# at the zoo's recipe with three seeds and the whole rank / k grid; the paper's own seed count and
# sample sizes are not in our copy of it, so "paper" is the full scale of this study, not a copy of theirs.
BUDGETS = {
    "quick": {"seeds": [0], "steps": 12000, "fit": 200, "rows": 64, "boot": 200, "ranks": [1, 4, 32], "ks": [2, 16]},
    "paper": {"seeds": [0, 1, 2], "steps": 12000, "fit": 1000, "rows": 512, "boot": 1000,
              "ranks": list(REPRO_RANKS), "ks": list(REPRO_KS)},
}
VERSION = 1  # bump when a unit's code changes what it computes
ID_FAITHFUL = 0.98  # "near 100 % same-prediction in distribution" (the paper's rank-4 proxies)
ALPHA = 0.05


def _dyck_eval(n: int, seed: int, deep: bool) -> dict[str, Rows]:
    splits = {s: dyck_rows(n, split=s, seed=seed) for s in DYCK_SPLITS}
    if deep:  # one closer per sequence, among those closing deeper than training (Task split)
        splits["unseen_depth_deep"] = Rows.of(dyck.dyck(n, split="unseen_depth", seed=seed))
    return splits


def records(sweep_or_grid: Sweep | Grid, method: str) -> list[dict[str, Any]]:
    grid = sweep_or_grid.grid if isinstance(sweep_or_grid, Sweep) else sweep_or_grid
    v = grid.values if isinstance(sweep_or_grid, Sweep) else grid.values[None]
    params = grid.labels[0] if isinstance(sweep_or_grid, Sweep) else (None,)
    splits = grid.labels[-3]
    get = lambda p, s, m, q="value": float(v[p, s, METRICS.index(m), QUANTITIES.index(q)])  # noqa: E731
    p_of = lambda p, s, m: None if math.isnan(get(p, s, m, "p_value")) else get(p, s, m, "p_value")  # noqa: E731
    out = []
    for p, param in enumerate(params):
        for s, split in enumerate(splits):
            out.append({
                "method": method,
                "rank": param if method == "svd" else None,
                "k": param if method == "kmeans" else None,
                "split": split,
                "accuracy": get(p, s, "accuracy_simplified"),
                "same_prediction": get(p, s, "same_prediction"),
                "js": get(p, s, "js"),
                "accuracy_ci": [get(p, s, "accuracy_simplified", "ci_low"), get(p, s, "accuracy_simplified", "ci_high")],
                "same_prediction_ci": [get(p, s, "same_prediction", "ci_low"), get(p, s, "same_prediction", "ci_high")],
                "delta": get(p, s, "delta"),
                "delta_ci": [get(p, s, "delta", "ci_low"), get(p, s, "delta", "ci_high")],
                "delta_p": p_of(p, s, "delta"),
                "delta_gap": get(p, s, "delta_gap"),
                "delta_gap_p": p_of(p, s, "delta_gap"),
                "same_prediction_gap": get(p, s, "same_prediction_gap"),
                "same_prediction_gap_p": p_of(p, s, "same_prediction_gap"),
            })
    return out


def findings(result: dict[str, Any]) -> dict[str, Any]:
    """The readings the doc makes, from one model's `study` result: per OOD split, rank-4 SVD's
    same-prediction gap against seen_struct (p), one-hot's accuracy minus the original's (95 %
    CI, p), and the k-means ks whose accuracy gap (delta_gap) is significant at 0.05."""
    recs = result["simplified"]
    pick = lambda method, split, **kw: next(  # noqa: E731
        r for r in recs if r["method"] == method and r["split"] == split and all(r[k] == v for k, v in kw.items()))
    out = {}
    for split in (*DYCK_SPLITS[1:], "unseen_depth_deep"):
        svd4, oh = pick("svd", split, rank=4), pick("onehot", split)
        out[split] = {
            "svd4_same_prediction_gap": svd4["same_prediction_gap"], "svd4_same_prediction_gap_p": svd4["same_prediction_gap_p"],
            "svd4_delta_gap": svd4["delta_gap"], "svd4_delta_gap_p": svd4["delta_gap_p"],
            "onehot_minus_original": oh["delta"], "onehot_minus_original_ci": oh["delta_ci"], "onehot_minus_original_p": oh["delta_p"],
            "kmeans_significant_gap_ks": [r["k"] for r in recs if r["method"] == "kmeans" and r["split"] == split
                                          and r["delta_gap_p"] is not None and r["delta_gap_p"] < 0.05],
        }
    return out


def _sha(folder: Path | None) -> str | None:
    weights = folder / "model.safetensors" if folder is not None else None
    if weights is None or not weights.exists():
        return None
    return hashlib.sha256(weights.read_bytes()).hexdigest()[:16]


def _folder(spec: str) -> Path | None:
    from interp.model import zoo_path

    if spec.startswith("zoo:"):
        return zoo_path(spec[4:])
    return Path(spec).expanduser() if Path(spec).expanduser().is_dir() else None


def _recipe(seed: int, steps: int):
    from interp.train import RECIPES

    return replace(RECIPES["dyck"], seed=seed, steps=steps)


def _retrained(seed: int, steps: int, progress: bool) -> Path:
    """The Dyck model of `seed` trained `steps` steps with the zoo's recipe, in the cache (trained on first use)."""
    from interp.gguf import cache_dir
    from interp.storage import atomic_dir
    from interp.train import RECIPES, train

    recipe = _recipe(seed, steps)
    name = f"dyck-seed{seed}" + ("" if steps == RECIPES["dyck"].steps else f"-steps{steps}")
    folder = cache_dir() / "studies" / "illusions" / "models" / name
    want = json.loads(json.dumps(asdict(recipe)))
    done = lambda f: (f / "card.json").exists() and json.loads((f / "card.json").read_text()).get("recipe") == want  # noqa: E731
    if not done(folder):
        with atomic_dir(folder, complete=done) as tmp:
            train(recipe, tmp, progress=progress)
    return folder


def _models(budget: dict[str, Any], models: Sequence[str] | None, units: Units, progress: bool) -> list[dict[str, Any]]:
    """One entry per model: label, seed, spec (or None until loaded), its identity for unit keys, training record."""
    from interp.train import RECIPES

    if models:
        return [{"label": spec, "seed": None, "spec": spec, "ident": {"spec": spec, "sha": _sha(_folder(spec))},
                 "training": None, "train_unit": None} for spec in models]
    out = []
    for seed in budget["seeds"]:
        if seed == 0 and budget["steps"] == RECIPES["dyck"].steps:  # the shipped model is seed 0 of the recipe
            folder = _folder("zoo:dyck")
            card = json.loads((folder / "card.json").read_text())
            training = {"source": "zoo:dyck (shipped)", "accuracy": card.get("accuracy"), "train_s": card["training"]["seconds"],
                        "sha": _sha(folder)}
            out.append({"label": "zoo:dyck", "seed": 0, "spec": "zoo:dyck", "ident": {"spec": "zoo:dyck", "sha": training["sha"]},
                        "training": training, "train_unit": None})
            continue
        config = {"unit": "train", "recipe": json.loads(json.dumps(asdict(_recipe(seed, budget["steps"]))))}

        def train_unit(seed=seed) -> dict[str, Any]:
            folder = _retrained(seed, budget["steps"], progress)
            card = json.loads((folder / "card.json").read_text())
            return {"source": f"retrained: interp.train.RECIPES['dyck'], seed {seed}, {budget['steps']} steps",
                    "accuracy": card.get("accuracy"), "train_s": card["training"]["seconds"], "sha": _sha(folder)}

        training = units.run(config, train_unit)
        label = f"dyck seed {seed}"
        out.append({"label": label, "seed": seed, "spec": None, "ident": {"spec": label, "sha": training["sha"],
                    "steps": budget["steps"]}, "training": training, "train_unit": config})
    return out


class _Lazy:
    """The model and data of one seed, built only when one of its units must run."""

    def __init__(self, entry: dict[str, Any], budget: dict[str, Any], progress: bool):
        self.entry, self.budget, self.progress, self._model = entry, budget, progress, None

    def model(self):
        if self._model is None:
            e = self.entry
            spec = e["spec"] or str(_retrained(e["seed"], self.budget["steps"], self.progress))
            self._model = interp.load(spec)
        return self._model

    def data(self) -> tuple[Rows, dict[str, Rows]]:
        return dyck_rows(self.budget["fit"], split="train", seed=0), _dyck_eval(self.budget["rows"], EVAL_SEED, deep=True)


def _unit_fns(lazy: _Lazy, budget: dict[str, Any]) -> dict[str, Any]:
    """The three simplifier units of one model: name -> fn."""
    ev = dict(reference="seen_struct", n_boot=budget["boot"], progress=lazy.progress)

    def svd_unit() -> dict[str, Any]:
        model, (fit, splits) = lazy.model(), lazy.data()
        sweep = rank_sweep(model, (model.cfg.n_layers - 1, 0), fit, splits, ranks=list(budget["ranks"]), **ev)
        return {"records": records(sweep, "svd"), "vectors": sweep.meta["fitted_on"]["n_vectors"]}

    def kmeans_unit() -> dict[str, Any]:
        model, (fit, splits) = lazy.model(), lazy.data()
        return {"records": records(k_sweep(model, (model.cfg.n_layers - 1, 0), fit, splits, ks=list(budget["ks"]), **ev), "kmeans")}

    def onehot_unit() -> dict[str, Any]:
        model, (_, splits) = lazy.model(), lazy.data()
        head = (model.cfg.n_layers - 1, 0)
        grid = faithfulness(model, onehot(model, head), splits, reference="seen_struct", n_boot=budget["boot"])
        acc = METRICS.index("accuracy_original")
        return {"records": records(grid, "onehot"), "head": list(head),
                "original": {s: float(grid.values[i, acc, 0]) for i, s in enumerate(grid.labels[0])}}

    return {"svd": svd_unit, "kmeans": kmeans_unit, "onehot": onehot_unit}


def _configs(entry: dict[str, Any], budget: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each simplifier unit's config: the model's identity and the budget keys that change its result."""
    keys = {"svd": ("fit", "rows", "boot", "ranks"), "kmeans": ("fit", "rows", "boot", "ks"), "onehot": ("rows", "boot")}
    return {name: {"unit": name, "model": entry["ident"], "eval_seed": EVAL_SEED, **{k: budget[k] for k in ks}}
            for name, ks in keys.items()}


def _check(budget: dict[str, Any], models, overrides) -> None:
    if 4 not in budget["ranks"]:
        raise InterpError(f"ranks {budget['ranks']}: include 4, the rank the paper's claims are read at")
    if models and "seeds" in (overrides or {}):
        raise InterpError("--seeds picks which Dyck seeds to retrain; with --model the models are given: leave out one")
    bad = [v for v in [*budget["ranks"], *budget["ks"], budget["fit"], budget["rows"], budget["boot"], budget["steps"]] if v < 1]
    if bad or any(s < 0 for s in budget["seeds"]):
        raise InterpError(f"budget {budget}: ranks, ks, fit, rows, boot and steps must be >= 1 and seeds >= 0")


def paper_fraction(budget: dict[str, Any], n_models: int) -> float:
    """This budget's share of the paper budget: the product of its shares (each capped at 1) of
    models x evaluated sequences, fit sequences, training steps and simplifier settings."""
    paper = BUDGETS["paper"]
    share = lambda a, b: min(1.0, a / b)  # noqa: E731
    settings = len(set(budget["ranks"]) & set(paper["ranks"])) + len(set(budget["ks"]) & set(paper["ks"]))
    return (share(n_models * budget["rows"], len(paper["seeds"]) * paper["rows"]) * share(budget["fit"], paper["fit"])
            * share(budget["steps"], paper["steps"]) * share(settings, len(paper["ranks"]) + len(paper["ks"])))


def repro(progress: bool = True, models: Sequence[str] | None = None, budget: str = "quick",
          overrides: dict[str, Any] | None = None, units: str | Path | None = None) -> dict[str, Any]:
    """`interp repro illusions`: the study at budget `budget` (BUDGETS, with `overrides`), one entry
    per model seed under "models", the readings across seeds under "claims", and the run's
    "budget" and "provenance". `models`: Dyck models to use instead of the budget's seeds.
    `units`: where finished units are stored (default $INTERP_CACHE/studies/illusions)."""
    start = time.time()
    b = resolve_budget(BUDGETS, budget, overrides)
    _check(b, models, overrides)
    store = Units("illusions", units, version=VERSION)
    entries = _models(b, models, store, progress)
    out: dict[str, Any] = {"models": {}}
    all_configs = [e["train_unit"] for e in entries if e["train_unit"] is not None]
    for entry in tqdm(entries, desc="illusions models", disable=not progress):
        lazy, configs = _Lazy(entry, b, progress), _configs(entry, b)
        fns = _unit_fns(lazy, b)
        res = {name: store.run(configs[name], fns[name]) for name in ("svd", "kmeans", "onehot")}
        all_configs += configs.values()
        m = {
            "model": entry["label"], "seed": entry["seed"], "training": entry["training"], "heads": [res["onehot"]["head"]],
            "fit": {"split": "train", "sequences": b["fit"], "vectors": res["svd"]["vectors"]},
            "eval": {"sequences_per_split": b["rows"], "seed": EVAL_SEED,
                     "scored": "every closing bracket (unseen_depth_deep: one deep closer per sequence)"},
            "original": res["onehot"]["original"],
            "simplified": res["svd"]["records"] + res["kmeans"]["records"] + res["onehot"]["records"],
            "held_out_families": "unseen_struct: skeletons whose (depth, peaks) family is held out of training (dyck.family)",
        }
        m["findings"] = findings(m)
        out["models"][entry["label"]] = m
    out["across_seeds"] = across(out["models"])
    out["claims"] = claims(out["models"])
    done, total = store.count(all_configs)
    fraction = paper_fraction(b, len(entries))
    out["budget"] = budget_record(budget, b, fraction, done, total)
    out["provenance"] = provenance(budget, b, fraction, time.time() - start, done, total, units_run=store.ran)
    return out


def _label(r: dict[str, Any]) -> str:
    return {"svd": "SVD rank {rank}", "kmeans": "k-means k={k}", "onehot": "one-hot"}[r["method"]].format(rank=r["rank"], k=r["k"])


def across(models: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per simplifier and split: same-prediction and accuracy, mean / min / max over the models."""
    cells: dict[str, dict[str, dict[str, list[float]]]] = {}
    for m in models.values():
        for s, v in m["original"].items():
            cells.setdefault("original", {}).setdefault(s, {"accuracy": [], "same_prediction": []})["accuracy"].append(v)
        for r in m["simplified"]:
            c = cells.setdefault(_label(r), {}).setdefault(r["split"], {"accuracy": [], "same_prediction": []})
            c["accuracy"].append(r["accuracy"])
            c["same_prediction"].append(r["same_prediction"])
    stat = lambda v: {"mean": sum(v) / len(v), "min": min(v), "max": max(v)} if v else None  # noqa: E731
    return {"n_models": len(models),
            "cells": {label: {s: {q: stat(v) for q, v in c.items()} for s, c in splits.items()} for label, splits in cells.items()}}


def claims(models: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The paper's Dyck claims read across the models, by these rules (ALPHA = 0.05, ID_FAITHFUL = 0.98):

    - proxy_deviates[split]: a proxy's same-prediction gap against seen_struct. "reproduced" when on
      every model the gap is negative at p < ALPHA *and* the proxy is faithful in distribution
      (same-prediction >= ID_FAITHFUL on seen_struct); "partly" when the gap is negative at p < ALPHA
      on every model but the proxy is already less faithful than that in distribution (so the OOD
      drop sits on an in-distribution gap of the same kind); else "not reproduced". Read for SVD
      rank 4 (the paper's setting) and listed for every proxy.
    - onehot_above_original_on_depth: one-hot minus original accuracy on unseen_depth; "reproduced"
      when positive at p < ALPHA on every model, "opposite" when negative at p < ALPHA on every model,
      else "not reproduced".
    - original_generalises_to_structure: the original's accuracy on unseen_struct within 0.02 of
      seen_struct on every model ("agrees"), else "disagrees".
    """
    ms = list(models.values())
    sig_neg = lambda r, key: r[f"{key}_p"] is not None and r[f"{key}_p"] < ALPHA and r[key] < 0  # noqa: E731
    out: dict[str, Any] = {"rules": "see interp.studies.illusions.claims", "alpha": ALPHA, "id_faithful": ID_FAITHFUL}
    orig = [{"model": m["model"], "seen_struct": m["original"]["seen_struct"], "unseen_struct": m["original"]["unseen_struct"]} for m in ms]
    out["original_generalises_to_structure"] = {
        "per_model": orig,
        "verdict": "agrees" if all(o["seen_struct"] - o["unseen_struct"] <= 0.02 for o in orig) else "disagrees"}
    proxies = sorted({_label(r) for m in ms for r in m["simplified"] if r["method"] != "onehot"},
                     key=lambda t: (t.split()[0], int(t.split("=")[-1].split()[-1])))
    deviates = {}
    for split in OOD_SPLITS:
        rows = {}
        for label in proxies:
            per = []
            for m in ms:
                rec = {r["split"]: r for r in m["simplified"] if _label(r) == label}
                per.append({"model": m["model"], "id_same_prediction": rec["seen_struct"]["same_prediction"],
                            "id_unfaithful": 1 - rec["seen_struct"]["same_prediction"],
                            "same_prediction_gap": rec[split]["same_prediction_gap"],
                            "p": rec[split]["same_prediction_gap_p"], "significant_drop": sig_neg(rec[split], "same_prediction_gap")})
            drop = all(p["significant_drop"] for p in per)
            faithful = all(p["id_same_prediction"] >= ID_FAITHFUL for p in per)
            rows[label] = {"per_model": per, "models_with_drop": sum(p["significant_drop"] for p in per),
                           "id_faithful_all": faithful,
                           "verdict": "reproduced" if drop and faithful else "partly" if drop else "not reproduced"}
        deviates[split] = {"svd_rank_4": rows.get("SVD rank 4"), "proxies": rows}
    out["proxy_deviates"] = deviates
    oh = [{"model": m["model"], **{k: m["findings"]["unseen_depth"][f"onehot_minus_original{s}"] for k, s in
           (("minus_original", ""), ("ci", "_ci"), ("p", "_p"))}} for m in ms]
    sig = lambda o: o["p"] is not None and o["p"] < ALPHA  # noqa: E731
    verdict = ("reproduced" if all(sig(o) and o["minus_original"] > 0 for o in oh) else
               "opposite" if all(sig(o) and o["minus_original"] < 0 for o in oh) else "not reproduced")
    out["onehot_above_original_on_depth"] = {"per_model": oh, "verdict": verdict}
    return out

def _demo_model(workdir: Path) -> tuple[Any, str]:
    if any(card.get("name") == "dyck" for card in interp.zoo.entries()):
        return interp.load("zoo:dyck"), "zoo:dyck"
    path = interp.build_tiny("gpt2", workdir / "models" / "dyck-random", words=dyck.words(20), n_layers=2, d_model=32, n_heads=1, d_mlp=128)
    return interp.load(path), "a random-weight Dyck-shaped model (zoo:dyck is not trained yet)"


def demo_section(workdir: Path) -> list[Any]:
    """Report items: faithfulness against SVD rank (one line per split) and one-hot vs original attention."""
    from interp import plot  # plotly and circuitsvis only when the demo runs

    model, name = _demo_model(Path(workdir))
    head = (model.cfg.n_layers - 1, 0)
    fit = dyck_rows(300, split="train", seed=0)
    splits = _dyck_eval(256, 12345, deep=False)
    sweep = rank_sweep(model, head, fit, splits, ranks=[1, 2, 4, 8, 16, 32], reference="seen_struct", n_boot=200, progress=False)
    oh = faithfulness(model, onehot(model, head), splits, reference="seen_struct", n_boot=200)
    keep = ["accuracy_original", "accuracy_simplified", "same_prediction", "js"]
    table = oh.to_dataframe()
    table = table[(table.quantity == "value") & table.metric.isin(keep)].pivot(index="split", columns="metric", values="value")[keep].reset_index()
    example = dyck.dyck(1, split="unseen_depth", seed=3).clean[0]
    view = compare_attention(model, onehot(model, head), example, head)
    return [
        Heading("Attention simplifiers: faithfulness in and out of distribution"),
        f"Model: {name}. The second-layer head {head} is simplified, fitted on 300 training "
        "sequences, and compared with the original on 256 fresh sequences per split, scored at "
        "every closing bracket (Friedman et al. 2024). Lines: one per split; error bars: 95 % "
        "bootstrap intervals over sequences.",
        sweep,
        Heading("One-hot attention", 3),
        table,
        view,
        plot.attention(view.patterns, list(view.tokens), head_names=list(view.names)),  # the interactive view
    ]


# ---------------------------------------------------------------------------------------------
# the doc's tables, rendered from the committed JSON (tests/test_docs.py checks every number)

def _p(p: float | None) -> str:
    return "—" if p is None else f"{p:.3f}"


def _summary(result: dict[str, Any]) -> list[str]:
    b, prov, acr = result["budget"], result["provenance"], result["across_seeds"]
    machine = prov["machine"]
    out = [f"Budget `{b['name']}` ({b['paper_fraction']:.4g} of the paper budget), {b['units_done']}/{b['units_total']} units, "
           f"{acr['n_models']} models: {', '.join(f'`{k}`' for k in result['models'])}; run {prov['date']} in {prov['wall_s']:.0f} s "
           f"on {machine['gpu'] or machine['cpu']} ({machine['cpus']} CPUs, {machine['torch_threads']} torch threads), "
           f"commit `{prov['commit']}`.\n",
           "Across models, each cell: same-prediction mean [min, max] (original: accuracy).\n"]
    splits = list(next(iter(result["models"].values()))["original"])
    out.append("| simplifier | " + " | ".join(splits) + " |")
    out.append("|---|" + "---|" * len(splits))
    for label, cells in acr["cells"].items():
        q = "accuracy" if label == "original" else "same_prediction"
        fmt = lambda c: "—" if c is None else f"{c['mean']:.3f} [{c['min']:.3f}, {c['max']:.3f}]"  # noqa: E731
        out.append(f"| {label} | " + " | ".join(fmt(cells.get(s, {}).get(q)) for s in splits) + " |")
    out.append("")
    return out


def _claims_table(result: dict[str, Any]) -> list[str]:
    c = result["claims"]
    out = ["Claims across models (rules in `illusions.claims`): per model, in-distribution same-prediction "
           "(1 − it is the proxy's in-distribution unfaithfulness), then its same-prediction gap on the split (p).\n",
           "| claim | split | per model: ID same-prediction → gap (p) | models with a drop at p < 0.05 | verdict |",
           "|---|---|---|---|---|"]
    for split, d in c["proxy_deviates"].items():
        for label, row in d["proxies"].items():
            if label != "SVD rank 4" and row["verdict"] == "not reproduced" and row["models_with_drop"] == 0:
                continue  # the table lists rank 4 always, other proxies where any model drops
            per = "; ".join(f"{p['id_same_prediction']:.3f} → {p['same_prediction_gap']:.3f} ({_p(p['p'])})" for p in row["per_model"])
            out.append(f"| {label} deviates OOD | {split} | {per} | {row['models_with_drop']} of {len(row['per_model'])} | {row['verdict']} |")
    oh = c["onehot_above_original_on_depth"]
    per = "; ".join(f"{o['minus_original']:.3f} [{o['ci'][0]:.3f}, {o['ci'][1]:.3f}] ({_p(o['p'])})" for o in oh["per_model"])
    out.append(f"| one-hot − original accuracy > 0 | unseen_depth | {per} | — | {oh['verdict']} |")
    og = c["original_generalises_to_structure"]
    per = "; ".join(f"{o['seen_struct']:.3f} → {o['unseen_struct']:.3f}" for o in og["per_model"])
    out.append(f"| original: accuracy seen → unseen structures | unseen_struct | {per} | — | {og['verdict']} |")
    out.append("")
    return out


def _per_model(spec: str, m: dict[str, Any]) -> list[str]:
    splits = list(m["original"])
    out = [f"#### `{spec}`: {m['fit']['sequences']} fit sequences, {m['eval']['sequences_per_split']} per split\n",
           "Each cell: accuracy / same-prediction / JS (bits).\n",
           "| simplifier | " + " | ".join(splits) + " |", "|---|" + "---|" * len(splits),
           "| original | " + " | ".join(f"{m['original'][s]:.3f} / — / —" for s in splits) + " |"]
    rows: dict[str, dict[str, str]] = {}
    for r in m["simplified"]:
        rows.setdefault(_label(r), {})[r["split"]] = f"{r['accuracy']:.3f} / {r['same_prediction']:.3f} / {r['js']:.3f}"
    out += [f"| {label} | " + " | ".join(cells.get(s, "—") for s in splits) + " |" for label, cells in rows.items()]
    out += ["", "Paired gaps against seen_struct (two-sided bootstrap p over sequences):\n",
            "| split | SVD rank 4: same-prediction gap (p) | SVD rank 4: accuracy gap (p) | one-hot − original accuracy [95 % CI] (p) | k-means ks with an accuracy gap at p < 0.05 |",
            "|---|---|---|---|---|"]
    for s, f in m["findings"].items():
        lo, hi = f["onehot_minus_original_ci"]
        ks = ", ".join(str(k) for k in f["kmeans_significant_gap_ks"]) or "none"
        out.append(f"| {s} | {f['svd4_same_prediction_gap']:.3f} ({_p(f['svd4_same_prediction_gap_p'])}) | "
                   f"{f['svd4_delta_gap']:.3f} ({_p(f['svd4_delta_gap_p'])}) | "
                   f"{f['onehot_minus_original']:.3f} [{lo:.3f}, {hi:.3f}] ({_p(f['onehot_minus_original_p'])}) | {ks} |")
    out.append("")
    return out


def markdown(result: dict[str, Any]) -> str:
    """The doc's tables for one `repro` result: the run, the across-model summary, the claims with
    their verdicts, then per model accuracy / same-prediction / JS and the paired gaps."""
    out = _summary(result) + _claims_table(result)
    for spec, m in result["models"].items():
        out += _per_model(spec, m)
    return "\n".join(out)


def write_doc(doc: str | Path, data: str | Path) -> Path:
    """Replace the text between `<!-- tables:begin -->` and `<!-- tables:end -->` in the doc
    with `markdown` of the JSON `data` (written atomically)."""
    import json

    from interp.storage import fill_between

    body = markdown(json.loads(Path(data).read_text()))
    return fill_between(doc, "<!-- tables:begin -->", "<!-- tables:end -->", body)
