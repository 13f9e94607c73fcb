"""Extractive structures (Feng, Russell & Steinhardt 2024): fine-tuned facts and their implications.

`interp repro extractive --budget quick|cpu|paper [--seeds N] [--set key=value ...] [--units DIR]`
runs, on each model of the budget: first-hop and second-hop out-of-context reasoning (fine-tune
facts, rank implications), extractive scores of the first-hop delta (upstream scores averaged over
`counterfactuals` other people per prompt), weight grafting with its two controls (the control
graft and the set-2 facts delta alone) on the budget's relation, the full deltas restricted to early
or late layers, optionally fine-tuning with the other layers frozen, and the data-ordering experiment
at zoo scale (a small LM trained here from scratch). Every piece is a unit of
interp.studies.units (keyed by its resolved configuration): a rerun computes only missing units, and
the fine-tunes inside a unit checkpoint per epoch, so a killed run resumes. See docs/extractive.md.
Built from public names of `interp.grafting` only.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from interp import grafting
from interp.errors import InterpError
from interp.model import build_tiny, load
from interp.studies.extractive.doc import regions
from interp.studies.protocol import study
from interp.studies.units import Units, budget as resolve_budget, budget_record, provenance
from interp.studies.verdicts import NOT_RUN, against_all, judge

__all__ = ["BUDGETS", "PAPER", "STUDY", "demo_section", "departures", "gpu_estimate", "hops", "recalibrate_gpu", "regions", "repro", "score_grids", "scores_json",
           "verdicts"]

STUDY = "extractive"
VERSION = 2  # 2: units, second-hop schedule, counterfactual people, grafting relation, base rank
TINY = "tiny-llama"  # a 2-layer random LLaMA over the task's words, built by the study (the quick budget)
# models: specs (TINY is built here); seeds: the person -> city assignment and the shuffling;
# n: people per set; epochs / lr / batch_size: Adam on the facts (the paper trains 7-9B models at lr 3e-6
# for 8 epochs, batch 8; a 135M model learns the first-hop facts at 8 epochs only at lr 1e-4);
# hop2_epochs / hop2_lr: the second hop's facts, which that schedule does not teach;
# counterfactuals: other people per prompt for the upstream score (the authors use ten);
# relation: the grafting facts' relation ("dax": invented, as the paper; "lives_in": shares the hop's delta);
# layers: also fine-tune with the other layers frozen (four more fine-tunes per seed);
# ordering_*: the zoo-scale data-ordering experiment (seeds, pretraining / test epochs, people);
# compute=False (`--set compute=false`): aggregate the stored units only (seeds missing a unit are left out).
BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"models": [TINY], "seeds": [0], "n": 4, "epochs": 15, "lr": 1e-2, "batch_size": 8, "hop2_epochs": 15,
              "hop2_lr": 1e-2, "counterfactuals": 2, "relation": "dax", "layers": True, "ordering_seeds": [0],
              "ordering_epochs": 2, "ordering_test_epochs": 2, "ordering_train": 16, "ordering_test": 8, "compute": True},
    "cpu": {"models": ["smollm2-135m"], "seeds": [0], "n": 20, "epochs": 8, "lr": 1e-4, "batch_size": 8, "hop2_epochs": 16,
            "hop2_lr": 3e-4, "counterfactuals": 10, "relation": "lives_in", "layers": False, "ordering_seeds": [0, 1, 2],
            "ordering_epochs": 60, "ordering_test_epochs": 30, "ordering_train": 96, "ordering_test": 16, "compute": True},
    "paper": {"models": ["smollm2-135m", "gemma3-270m"], "seeds": [0, 1, 2], "n": 20, "epochs": 8, "lr": 1e-4, "batch_size": 8,
              "hop2_epochs": 32, "hop2_lr": 3e-4, "counterfactuals": 10, "relation": "dax", "layers": True,
              "ordering_seeds": [0, 1, 2], "ordering_epochs": 60, "ordering_test_epochs": 30, "ordering_train": 96,
              "ordering_test": 16, "compute": True},
}
LEARNED = 1.0  # second-hop facts count as learned at mean rank <= 1; else their implications test nothing
# the paper's setup, from the authors' code (gradient_grafting.py, data_ordering.py, layer_freezing.py)
PAPER = {"lr": 3e-6, "epochs": 8, "batch_size": 8, "n": 20, "chance": 9.5, "n_layers": 32, "late_layers": 8,
         "counterfactuals": 10, "models": ["OLMo-7B", "Llama-3-8B", "Gemma-2-9B", "Qwen-2-7B"]}


def _train(b: dict[str, Any], hop: int = 1) -> dict[str, Any]:
    key = "hop2_" if hop == 2 else ""
    return {"epochs": b[f"{key}epochs"], "lr": b[f"{key}lr"], "batch_size": b["batch_size"]}


def _load(spec: str, root: Path):
    if spec == TINY:  # every word of the task one token, so first_hop / second_hop run on it
        path = root / "models" / TINY
        if not (path / "config.json").exists():
            build_tiny("llama", path, words=grafting.vocabulary(), seed=0, n_layers=2)
        return load(path)
    return load(spec)


def _steps(*deltas) -> int:
    return sum(len(d.provenance["losses"]) for d in deltas)


def hops(model, spec: str, seed: int, b: dict[str, Any], work: Path, progress: bool) -> dict[str, Any]:
    """One (model, seed) unit: first- and second-hop fine-tunes, their ranks, the deltas restricted to
    early / late layers, and the first-hop delta's extractive scores."""
    n = b["n"]
    one, _ = grafting.assignments(n, seed)
    f1, i1 = grafting.first_hop(model, n, assignment=one)
    f2, i2 = grafting.second_hop(model, n, assignment=one)
    first, d1 = grafting.hop(model, f1, i1, workdir=work, tag="first_hop", progress=progress, seed=seed, **_train(b))
    second, d2 = grafting.hop(model, f2, i2, workdir=work, tag="second_hop", progress=progress, seed=seed, **_train(b, 2))
    second["learned"] = second["facts"]["rank_after"] <= LEARNED
    restricted = grafting.layer_restriction(model, {"first_hop": (f1, i1, d1), "second_hop": (f2, i2, d2)})
    t0 = time.perf_counter()
    scores = grafting.extractive_scores(model, d1, i1, counterfactuals=b["counterfactuals"])
    return {"model": spec, "seed": seed, "first_hop": first, "second_hop": second,
            "layers_restricted": dict(restricted, method="full fine-tuning delta restricted to the layers afterwards"),
            "scores": scores_json(scores), "scores_seconds": time.perf_counter() - t0,
            "finetune_seconds": {"first_hop": d1.provenance["seconds"], "second_hop": d2.provenance["seconds"]},
            "steps": {"first_hop": _steps(d1), "second_hop": _steps(d2)},
            "trainable": sum(t.numel() for t in d1.deltas.values())}


def scores_json(scores) -> dict[str, Any]:
    """The (layer, pos) maps of each score for the MLPs and for all heads together, and the
    (layer, head) map summed over positions: what docs/extractive.md and the demo draw."""
    out: dict[str, Any] = {"pos": list(scores.informative.labels[2]), "layer": list(scores.informative.labels[0]),
                           "counterfactuals": scores.upstream.meta.get("counterfactuals", 1)}
    for name in ("informative", "upstream", "downstream"):
        for unit in ("mlp", "heads"):
            out[f"{name}_{unit}"] = [[round(float(v), 6) for v in row] for row in scores.heatmap(name, unit).values]
        per_unit = scores.grid(name).sum("pos").values  # [layer, unit]
        out[f"{name}_per_head"] = [[round(float(v), 6) for v in row[1:]] for row in per_unit]
        out[f"{name}_mlp_total"] = [round(float(row[0]), 6) for row in per_unit]
    return out


def score_grids(res: dict[str, Any]) -> list:
    """Grids (layer, pos) of the committed extractive scores, for the plotting layer."""
    from interp.results import Grid

    sc = res["scores"]
    return [Grid(torch.tensor(sc[f"{name}_{unit}"]), ("layer", "pos"), {"layer": sc["layer"], "pos": sc["pos"]},
                 {"title": f"{name} score, {'MLPs' if unit == 'mlp' else 'all heads'} ({res['model']}, first hop)",
                  "metric": f"{name} score"})
            for name in ("informative", "upstream", "downstream") for unit in ("mlp", "heads")]


def graft_unit(model, spec: str, seed: int, b: dict[str, Any], work: Path, progress: bool) -> dict[str, Any]:
    """One (model, seed) grafting unit on the budget's relation (see grafting.graft)."""
    return dict(grafting.graft(model, b["n"], assignment_seed=seed, relation=b["relation"], workdir=work, progress=progress,
                               seed=seed, **_train(b)), model=spec, seed=seed)


def layers_unit(model, spec: str, seed: int, b: dict[str, Any], work: Path, progress: bool) -> dict[str, Any]:
    """One (model, seed) unit: facts fine-tuned with only the early layers or only the last quarter free."""
    return dict(grafting.layer_split(model, b["n"], assignment_seed=seed, workdir=work, progress=progress, seed=seed, **_train(b)),
                method="trained with the other layers frozen", model=spec, seed=seed)


def ordering_unit(seed: int, b: dict[str, Any], work: Path, progress: bool) -> dict[str, Any]:
    return grafting.data_ordering(seeds=[seed], epochs=b["ordering_epochs"], test_epochs=b["ordering_test_epochs"], lr=3e-3,
                                  workdir=work, progress=progress, n_train=b["ordering_train"], n_test=b["ordering_test"])


def _configs(b: dict[str, Any], specs: Sequence[str]) -> list[dict[str, Any]]:
    """Every unit of the budget, in run order: per model and seed hops, graft (and layers); then ordering seeds."""
    out = []
    for spec in specs:
        for seed in b["seeds"]:
            common = {"model": spec, "seed": seed, "n": b["n"], "train": _train(b)}
            out.append({"unit": "hops", **common, "train2": _train(b, 2), "counterfactuals": b["counterfactuals"]})
            out.append({"unit": "graft", **common, "relation": b["relation"]})
            if b["layers"]:
                out.append({"unit": "layers", **common})
    for seed in b["ordering_seeds"]:
        out.append({"unit": "ordering", "seed": seed, **{k: b[k] for k in b if k.startswith("ordering_") and k != "ordering_seeds"}})
    return out


def _work(store: Units, c: dict[str, Any]) -> Path:
    """Where a (model, seed, schedule)'s deltas live: shared by its units, so the graft reuses the
    first hop's facts delta (finetune refuses a checkpoint written by another configuration)."""
    key = store.key({k: c[k] for k in ("model", "seed", "n", "train")})
    return store.root / "deltas" / f"{c['model'].replace('/', '_').replace(':', '_')}-{key[:12]}"


@study("extractive")
def repro(progress: bool = True, models: Sequence[str] | None = None, budget: str = "quick",
          overrides: dict[str, Any] | None = None, units: str | Path | None = None) -> dict[str, Any]:
    """`interp repro extractive` at `budget` (BUDGETS, with `overrides`; `models` replaces the budget's
    models). Units are stored under `units` (default $INTERP_CACHE/studies/extractive). One dict:
    per model its per-seed units, means over seeds and verdicts; the data ordering; the budget, the
    timing and the run's provenance."""
    start = time.perf_counter()
    b = resolve_budget(BUDGETS, budget, overrides)
    if models:
        b["models"] = list(models)
    if b["relation"] not in grafting.RELATIONS:
        raise InterpError(f"budget key relation: {b['relation']!r} is not one of {sorted(grafting.RELATIONS)}")
    store = Units(STUDY, units, version=VERSION)
    configs = _configs(b, b["models"])
    results: dict[int, dict[str, Any]] = {}
    loaded: dict[str, Any] = {}
    for i, c in enumerate(tqdm(configs, desc="extractive units", disable=not progress)):
        if not b["compute"]:
            results[i] = store.get(c)
            continue
        if c["unit"] == "ordering":
            fn = lambda c=c: ordering_unit(c["seed"], b, store.root / "ordering" / f"{store.key(c)[:12]}", progress)  # noqa: E731
        else:
            if not store.done(c) and c["model"] not in loaded:
                loaded.clear()  # one model in memory at a time
                loaded[c["model"]] = _load(c["model"], store.root)
            unit = {"hops": hops, "graft": graft_unit, "layers": layers_unit}[c["unit"]]
            fn = lambda c=c, unit=unit: unit(loaded[c["model"]], c["model"], c["seed"], b, _work(store, c), progress)  # noqa: E731
        results[i] = store.run(c, fn)
    out: dict[str, Any] = {"study": STUDY, "paper": PAPER, "learned_rank": LEARNED, "models": {}}
    for spec in b["models"]:
        per, incomplete = _seeds(spec, configs, results)
        out["models"][spec] = {"seeds": per, "mean": _means(per), "incomplete_seeds": incomplete}
        out["models"][spec]["verdicts"] = verdicts(out["models"][spec]["mean"], per, spec)
    ordering = [results[i] for i, c in enumerate(configs) if c["unit"] == "ordering" and results[i] is not None]
    if not ordering:
        raise InterpError("no data-ordering unit is stored: run without --set compute=false first")
    out["data_ordering"] = _ordering(ordering)
    out["verdicts"] = {"data_ordering": _ordering_verdict(out["data_ordering"])}
    out["timing"] = timing(b, out)
    done, total = store.count(configs)
    fraction = paper_fraction(b)
    out["budget"] = budget_record(budget, b, fraction, done, total)
    out["budgets"] = BUDGETS
    name = lambda c: f"{c['unit']} {c.get('model', 'zoo')} seed {c['seed']}"  # noqa: E731
    out["provenance"] = provenance(budget, b, fraction, time.perf_counter() - start, done, total, units_run=store.ran,
                                   units_s={name(c): store.seconds(c) for c in configs if store.seconds(c) is not None})
    out["units_s_total"] = sum(store.seconds(c) or 0.0 for c in configs)  # compute time of every unit, as stored
    return out


def _seeds(spec: str, configs: list[dict[str, Any]], results: dict[int, dict[str, Any] | None]) -> tuple[dict, list[str]]:
    """{seed: {unit: result}} of the seeds of `spec` whose every unit is stored, and the seeds left out."""
    per: dict[str, dict[str, Any]] = {}
    planned: dict[str, set[str]] = {}
    for i, c in enumerate(configs):
        if c.get("model") == spec:
            planned.setdefault(str(c["seed"]), set()).add(c["unit"])
            if results[i] is not None:
                per.setdefault(str(c["seed"]), {})[c["unit"]] = results[i]
    complete = {s: u for s, u in per.items() if set(u) == planned[s]}
    if not complete:
        raise InterpError(f"no seed of {spec} has all its units ({', '.join(sorted(next(iter(planned.values()))))}) "
                          "stored: run without --set compute=false first")
    return complete, sorted(set(planned) - set(complete))


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


# the ranks the doc and the verdicts read, as paths into one seed's units
MEAN_KEYS = {
    "first_facts_before": ("hops", "first_hop", "facts", "rank_before"), "first_facts_after": ("hops", "first_hop", "facts", "rank_after"),
    "first_impl_before": ("hops", "first_hop", "implications", "rank_before"),
    "first_impl_after": ("hops", "first_hop", "implications", "rank_after"),
    "second_facts_before": ("hops", "second_hop", "facts", "rank_before"),
    "second_facts_after": ("hops", "second_hop", "facts", "rank_after"),
    "second_impl_before": ("hops", "second_hop", "implications", "rank_before"),
    "second_impl_after": ("hops", "second_hop", "implications", "rank_after"),
    "graft": ("graft", "graft_rank"), "graft_control": ("graft", "control_rank"), "facts2_only": ("graft", "facts2_only_rank"),
    "graft_base": ("graft", "base_rank"), "graft_facts2": ("graft", "facts2_rank"), "graft_set1": ("graft", "graft_set1_rank"),
    "chance": ("hops", "first_hop", "implications", "chance"),
}


def _get(d: dict, path: Sequence[str]) -> Any:
    for k in path:
        d = d[k]
    return d


def _means(per: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Means over seeds of MEAN_KEYS (and of the layer tables), with every seed's value beside."""
    out: dict[str, Any] = {}
    for name, path in MEAN_KEYS.items():
        vals = [_get(u, path) for u in per.values()]
        out[name] = _mean(vals)
        out[name + "_per_seed"] = vals
    out["second_learned_seeds"] = sum(bool(u["hops"]["second_hop"]["learned"]) for u in per.values())
    out["seeds"] = len(per)
    for key in ("layers_restricted", "layers"):
        if all(key in u or key in u.get("hops", {}) for u in per.values()):
            tables = [u["hops"][key] if key in u.get("hops", {}) else u[key] for u in per.values()]
            out[key] = {part: {"layers": tables[0][part]["layers"], **{
                h: {m: _mean([t[part][h][m] for t in tables]) for m in ("facts_rank", "implications_rank")}
                for h in ("first_hop", "second_hop")}} for part in ("early_only", "late_only")}
    return out


def _rule(effects: list[float], controls: list[float]) -> dict[str, Any]:
    """The judge keywords: the 95 % t-interval of the per-seed differences (effect - control) over the
    seeds. (The min-max of three seeds' differences, used before, excludes zero by chance in one null run
    of four: it was no 95 % interval.) With one seed there is no interval, so nothing is told apart."""
    if len(effects) < 2:
        return {}
    from scipy.stats import t

    d = [e - c for e, c in zip(effects, controls)]
    n, mean = len(d), sum(d) / len(d)
    sd = (sum((x - mean) ** 2 for x in d) / (n - 1)) ** 0.5
    half = float(t.ppf(0.975, n - 1)) * sd / n ** 0.5
    return {"diff_ci": (mean - half, mean + half)}


def _early_late(per: dict[str, dict[str, Any]], model: str) -> dict[str, Any] | None:
    """es.early_late_layers on the layer-frozen fine-tunes (the paper's layer_freezing; else the full deltas
    restricted afterwards): early-only minus late-only implication rank is lower for first-hop than for
    second-hop implications -- early layers serve the first hop, late layers the second (the paper: fact
    learning at early and late layers gives different forms of generalization). The control is the same
    difference on the other hop, per seed."""
    for key in ("layers", "layers_restricted"):
        tables = [u[key] if key in u else u.get("hops", {}).get(key) for u in per.values()]
        if tables and all(tables):
            break
    else:
        return None
    gap = lambda t, hop: t["early_only"][hop]["implications_rank"] - t["late_only"][hop]["implications_rank"]  # noqa: E731
    first, second = [gap(t, "first_hop") for t in tables], [gap(t, "second_hop") for t in tables]
    return judge(f"{model}: early-only minus late-only implication rank is lower for the first hop than the second "
                 f"({tables[0]['method']})", _mean(first), _mean(second), "less", **_rule(first, second),
                 null="baseline", claim_id="es.early_late_layers")


def departures(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Each way the budget differs from Feng et al.'s set-up (PAPER, from the authors' code)."""
    out = [{"what": "models", "ours": values["models"], "paper": PAPER["models"],
            "why": "no model hub and a 2-core CPU: the two pretrained decoders that install here (135M, 270M)"}]
    for key, what, why in (("lr", "learning rate (facts)", "a 135M model does not learn the facts in 8 epochs at 3e-6"),
                           ("hop2_lr", "learning rate (second-hop facts)", "the first-hop schedule leaves them unlearned"),
                           ("hop2_epochs", "epochs (second-hop facts)", "the first-hop schedule leaves them unlearned")):
        paper = PAPER["lr" if "lr" in key else "epochs"]
        if values[key] != paper:
            ratio = f" ({values[key] / paper:.0f}x)" if "lr" in key else ""
            out.append({"what": what, "ours": f"{values[key]:g}{ratio}", "paper": paper, "why": why})
    for key in ("epochs", "batch_size", "n", "counterfactuals"):
        if values[key] != PAPER[key]:
            out.append({"what": key, "ours": values[key], "paper": PAPER[key], "why": "budget"})
    if len(values["seeds"]) < 3:
        out.append({"what": "seeds", "ours": len(values["seeds"]), "paper": 3, "why": "budget"})
    out.append({"what": "data ordering", "ours": f"zoo-scale pretraining from scratch ({values['ordering_train']} people, "
                f"{values['ordering_epochs']} epochs)", "paper": "OLMo-7B continued pretraining",
                "why": "the ordering needs pretraining a model; only a small one fits a CPU"})
    return out


def verdicts(m: dict[str, Any], per: dict[str, dict[str, Any]], model: str = "") -> dict[str, Any]:
    """The claims' words by interp.studies.verdicts (ranks: lower is the paper's side). The second hop
    is "not run" unless its facts were learned (rank <= LEARNED) in every seed: implications of facts
    never learned test nothing. Grafting must beat the control graft and the set-2 facts delta alone
    (a graft no better than the facts alone shows no transferred structure). `model` prefixes each claim."""
    s = lambda k: m[k + "_per_seed"]  # noqa: E731
    judge_ = lambda text, *a, **k: judge(f"{model}: {text}" if model else text, *a, **k)  # noqa: E731
    first = judge_("fine-tuning on facts lowers the rank of their implications", m["first_impl_after"], m["first_impl_before"],
                  "less", **_rule(s("first_impl_after"), s("first_impl_before")), null="baseline", claim_id="es.first_hop")
    learned = m["second_learned_seeds"] == m["seeds"]
    second = judge_("the same for the second hop (read only when its facts were learned)",
                   m["second_impl_after"] if learned else None, m["second_impl_before"], "less",
                   **_rule(s("second_impl_after"), s("second_impl_before")), null="baseline", claim_id="es.second_hop")
    graft = {"vs_control": judge_("the graft ranks set-2 implications better than the control graft", m["graft"],
                                 m["graft_control"], "less", **_rule(s("graft"), s("graft_control")), null="baseline"),
             "vs_facts_alone": judge_("the graft ranks them better than the set-2 facts delta alone", m["graft"],
                                     m["facts2_only"], "less", **_rule(s("graft"), s("facts2_only")), null="baseline")}
    graft["word"] = against_all(v["word"] for v in graft.values())
    graft["label"] = f"{model}: grafting, against both controls" if model else "grafting, against both controls"
    graft["claim_id"] = "es.grafting"
    out = {"first_hop": first, "second_hop": second, "second_hop_learned": learned, "grafting": graft}
    if per and (layers := _early_late(per, model)) is not None:
        out["early_late_layers"] = layers
    return out


def _ordering(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The ordering units (one seed each) as one table: mean per order over seeds, per-seed rows."""
    per_seed = {o: [r["per_seed"][o][0] for r in rows] for o in grafting.ORDERS}
    out: dict[str, Any] = {o: _mean([x["test_implications"] for x in v]) for o, v in per_seed.items()}
    return {**out, "chance": rows[0]["chance"], "seeds": [r["seeds"][0] for r in rows], "per_seed": per_seed,
            "setup": rows[0]["setup"]}


def _ordering_verdict(order: dict[str, Any]) -> dict[str, Any]:
    ff = [x["test_implications"] for x in order["per_seed"]["facts_first"]]
    imp = [x["test_implications"] for x in order["per_seed"]["implications_first"]]
    return judge("facts-first pretraining generalizes better than implications-first", order["facts_first"],
                 order["implications_first"], "less", **_rule(ff, imp), null="baseline", claim_id="es.data_ordering")


def _unit_steps(b: dict[str, Any]) -> dict[str, int]:
    """Optimizer steps of each unit kind at budget `b` (fine-tunes of n rows at batch_size)."""
    per_epoch = -(-b["n"] // b["batch_size"])
    hop = b["epochs"] * per_epoch
    return {"hops": hop + b["hop2_epochs"] * per_epoch,
            "graft": (4 if b["relation"] != "lives_in" else 3) * hop,  # lives_in reuses the hop's facts delta
            "layers": 4 * hop if b["layers"] else 0}


def paper_fraction(b: dict[str, Any]) -> float:
    """This budget's share of the study's paper budget: model-seeds x fine-tuning steps x counterfactuals x
    ordering seeds, each share capped at 1 (not a share of the paper's compute: it fine-tuned 7-9B models)."""
    p = BUDGETS["paper"]
    share = lambda x, y: min(1.0, x / y) if y else 1.0  # noqa: E731
    mine, theirs = sum(_unit_steps(b).values()), sum(_unit_steps(p).values())
    return (share(len(b["models"]) * len(b["seeds"]), len(p["models"]) * len(p["seeds"])) * share(mine, theirs)
            * share(b["counterfactuals"], p["counterfactuals"]) * share(len(b["ordering_seeds"]), len(p["ordering_seeds"])))


# GPU estimate (not a measurement): a fine-tuning step of a 100M-parameter model at batch 8
# x ~15 tokens is bound by the host cost of its torch ops and by memory traffic, not arithmetic. Counted:
# the leaf ops of one step of interp.grafting.finetune (forward, backward, Adam; batch 8 of first-hop facts),
# on this CPU with torch.profiler (the difference between a 2- and a 1-epoch run of one step each,
# 2026-12-05); each op at the calibrated per-op cost (interp.studies.gpu_estimate). On this CPU Adam updates
# each parameter with its own ops; on a GPU its foreach path launches fewer, so the count errs high.
# Assumed: each trainable float is read or written ~16 times a step (weight + delta in forward and backward,
# gradient, Adam's two moments and the update) at the calibration's bandwidth.
GPU_COUNTS = {"ops_per_step": {"smollm2-135m": 5305, "gemma3-270m": 4784}, "touches_per_param": 16}


def gpu_estimate(spec: str, trainable: int, cal: dict[str, Any] | None = None) -> list[float] | None:
    """One fine-tuning step of `spec` on one GPU, [low, high] seconds: its counted ops at the calibrated
    per-op cost plus its memory traffic, times the calibration's error (None for a model not counted)."""
    from interp.studies.gpu_estimate import load_calibration

    cal = load_calibration() if cal is None else cal
    ops = GPU_COUNTS["ops_per_step"].get(spec)
    if ops is None:
        return None
    fit = ops * cal["us_per_op"] * 1e-6 + trainable * 4 * GPU_COUNTS["touches_per_param"] / (cal["gb_per_s"] * 1e9)
    return [fit * e for e in cal["error"]]


def timing(b: dict[str, Any], out: dict[str, Any], cal: dict[str, Any] | None = None) -> dict[str, Any]:
    """Measured seconds per fine-tuning step per model (from the stored units), and the paper budget's
    time per model at that rate on this CPU and (an estimate) on one GPU."""
    res: dict[str, Any] = {"paper_steps_per_model": sum(_unit_steps(BUDGETS["paper"]).values()) * len(BUDGETS["paper"]["seeds"]),
                           "models": {}}
    for spec, m in out["models"].items():
        secs = steps = 0
        for u in m["seeds"].values():
            h = u["hops"]
            secs += sum(h["finetune_seconds"].values()) + u["graft"]["finetune_seconds"]
            steps += sum(h["steps"].values()) + u["graft"]["steps"]
        per_step = secs / steps
        trainable = sum(u["hops"].get("trainable", 0) for u in m["seeds"].values()) // max(1, len(m["seeds"]))
        row = {"s_per_step": per_step, "steps": steps, "paper_cpu_h": per_step * res["paper_steps_per_model"] / 3600}
        if trainable:
            row["trainable"] = trainable
        res["models"][spec] = row
    return _gpu_timing(res, cal)


def _gpu_timing(res: dict[str, Any], cal: dict[str, Any] | None) -> dict[str, Any]:
    """The `timing` block with its GPU part (re-)derived from the counts and the calibration."""
    from interp.studies.gpu_estimate import load_calibration, summary

    cal = load_calibration() if cal is None else cal
    res = {k: v for k, v in res.items() if k != "gpu_assumed"}
    res.update(gpu_counts=GPU_COUNTS, calibration=summary(cal))
    for spec, row in res["models"].items():
        for k in ("gpu_s_per_step_estimate", "paper_gpu_min_estimate"):
            row.pop(k, None)
        step = gpu_estimate(spec, row["trainable"], cal) if row.get("trainable") else None
        if step is not None:
            row.update(gpu_s_per_step_estimate=step, paper_gpu_min_estimate=[s * res["paper_steps_per_model"] / 60 for s in step])
    return res


def recalibrate_gpu(result: dict[str, Any], cal: dict[str, Any] | None = None) -> dict[str, Any]:
    """`result` with its `timing` block's GPU part re-derived under the GPU calibration; nothing else changes."""
    import copy

    out = copy.deepcopy(result)
    out["timing"] = _gpu_timing(out["timing"], cal)
    return out


def demo_section(workdir: Path) -> list:
    """Report items: the quick budget run here (a tiny model, seconds): ranks before / after and the
    first-hop delta's informative and upstream scores, and the zoo-scale ordering table."""
    from interp.results import Grid, Heading

    res = repro(progress=False, budget="quick", units=Path(workdir) / "extractive-units")
    spec, m = next(iter(res["models"].items()))
    mean = m["mean"]
    rows = [("first hop", "first_impl"), ("second hop", "second_impl")]
    items: list = [Heading("Extractive structures (Feng et al. 2024), quick budget"), Grid(
        values=torch.tensor([[mean[k + "_before"], mean[k + "_after"], mean["chance"]] for _, k in rows]),
        axes=("experiment", "quantity"), labels={"experiment": [r for r, _ in rows], "quantity": ["rank before", "rank after", "chance"]},
        meta={"title": f"implication mean rank, {spec} (quick budget)", "metric": "mean rank"})]
    items.extend(score_grids({"model": spec, "scores": next(iter(m["seeds"].values()))["hops"]["scores"]})[:4])
    order = res["data_ordering"]
    items.append(Grid(torch.tensor([order[o] for o in grafting.ORDERS] + [order["chance"]]), ("order",),
                      {"order": list(grafting.ORDERS) + ["chance"]},
                      {"title": "data ordering (zoo scale): new people's implication rank", "metric": "mean rank"}))
    return items
