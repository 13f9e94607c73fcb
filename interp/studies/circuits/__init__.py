"""Circuits on IOI (Wang et al. 2022; EAP-IG of Hanna et al. 2024; scored as MIB, Mueller et al. 2025).

    interp repro circuits --budget quick|cpu|paper [--set key=value ...] [--units DIR] --out docs/circuits_repro.json
    interp doc circuits --json docs/circuits_repro.json --doc docs/circuits.md

Per model: edge scores by EAP, EAP-IG (5 steps) and exact edge patching (every edge on the zoo
models, a sample stratified by |EAP-IG score| on SmolLM2), their Pearson and Spearman correlations with the exact
scores; the circuits of each method scored as the Mechanistic Interpretability Benchmark scores them
(`interp.circuits.circuit_scores`: faithfulness at MIB's edge fractions, CPR and CMD) beside random
circuits of the same sizes; on the zoo models a learned head mask (`interp.masking.learn_mask`)
whose logits rank the heads, scored the same way (`head_circuit_scores`); and the top heads, each
described by what Wang et al. (2022) used to name the IOI classes: attention from the final
position to the indirect object (name movers) and to the repeated subject S2 (S-inhibition), and
the duplicate-token, induction and previous-token scores of `interp.lens.head_scores`. On SmolLM2
no ranking of every edge by exact patching fits a CPU budget: its "exact" circuits rank a pool of
the EAP-IG top edges (`exact_pool` of the model's edges) by their exact effect, so they are scored
up to that fraction only. Each model is one unit of interp.studies.units (keyed by its resolved
configuration), so a rerun computes only the missing models. Claims read against controls: EAP-IG
ranks edges like exact patching better than EAP does (Hanna et al. 2024), judged on a bootstrap
over edges of the Spearman difference; EAP-IG's circuits score a higher CPR than random circuits
of the same sizes, judged against the random draws' range. `regions(result)` renders the doc.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch
from scipy.stats import pearsonr, spearmanr
from tqdm.auto import tqdm

from interp import lens, run
from interp.circuits import Graph, circuit_scores, eap, eap_ig, exact, head_circuit_scores
from interp.circuits.mib import MIB_FRACTIONS, areas
from interp.circuits.pipeline import is_zoo_english, task_for
from interp.errors import InterpError
from interp.studies.circuits.doc import regions
from interp.studies.protocol import study
from interp.studies.units import Units, budget as resolve_budget, budget_record, provenance
from interp.studies.verdicts import judge

__all__ = ["BUDGETS", "DEFAULT_MODELS", "demo_section", "head_roles", "model_study", "recalibrate_gpu", "regions", "repro", "spearman_gap",
           "stratified_sample", "departures"]

DEFAULT_MODELS = ("zoo:lm-gpt2", "zoo:lm-llama", "zoo:lm-qwen2", "zoo:lm-gemma2", "smollm2-135m")
ROLE_THRESHOLD = 0.3  # attention / detector score above which a head is given a Wang et al. role
STUDY, VERSION = "circuits", 4  # 2: units, budgets, the bootstrap; 3: MIB's CPR / CMD, the learned mask; 4: stratified sample
# n_zoo / n_real: IOI prompts on zoo / real models; exact_zoo / exact_real: edges patched exactly (0: every
# edge), a seeded random sample otherwise; steps: EAP-IG interpolation steps; boot: resamples of edges;
# exact_pool: fraction of a model's edges (the EAP-IG top ones) patched exactly for its exact circuits when
# not every edge is; random: random rankings scored as the control; mask_steps: steps of the learned head
# mask on zoo models (0: none), at mask_sparsity.
# "paper" is this study's full scale (every model, every zoo edge exact), not a copy of one paper's run.
BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"models": ["zoo:lm-llama"], "n_zoo": 8, "n_real": 4, "exact_zoo": 40, "exact_real": 20, "steps": 2, "seed": 0,
              "boot": 200, "exact_pool": 0.05, "random": 2, "random_real": 2, "mask_steps": 20, "mask_sparsity": 0.5},
    "cpu": {"models": list(DEFAULT_MODELS[:4]), "n_zoo": 64, "n_real": 8, "exact_zoo": 0, "exact_real": 400, "steps": 5,
            "seed": 0, "boot": 1000, "exact_pool": 0.01, "random": 20, "random_real": 10, "mask_steps": 200, "mask_sparsity": 0.5},
    "paper": {"models": list(DEFAULT_MODELS), "n_zoo": 64, "n_real": 8, "exact_zoo": 0, "exact_real": 400, "steps": 5,
              "seed": 0, "boot": 1000, "exact_pool": 0.01, "random": 20, "random_real": 10, "mask_steps": 200, "mask_sparsity": 0.5},
}
# random_real: random circuits drawn as the control on real models (each costs a faithfulness curve);
# MIN_DRAWS (10) is the fewest a verdict accepts.
STRATA = 8  # |EAP-IG score| quantile bins the real models' exact edge sample is spread over


def departures(values: dict[str, Any]) -> list[dict[str, Any]]:
    """How a budget differs from the set-ups this study follows: Hanna et al. (2024) for EAP-IG against
    exact patching on GPT-2 small's IOI, MIB (Mueller et al. 2025) for the circuit scores."""
    out = [{"what": "models", "ours": values["models"], "paper": ["gpt2-small (Hanna et al.)", "GPT-2, Qwen-2.5-0.5B, "
            "Gemma-2-2B, Llama-3.1-8B (MIB)"], "why": "no model hub: the zoo's 2-4-layer IOI models and SmolLM2-135M"},
           {"what": "IOI prompts per model", "ours": {"zoo": values["n_zoo"], "real": values["n_real"]}, "paper": "MIB's IOI "
            "test split (thousands of prompts)", "why": "CPU: each prompt costs a forward per exactly patched edge"}]
    if values["exact_real"]:
        out.append({"what": "edges patched exactly on real models", "ours": f"{values['exact_real']} (stratified sample)",
                    "paper": "every edge", "why": "SmolLM2 has 70,651 edges; the sample spreads over |EAP-IG| strata"})
    if values["exact_zoo"]:
        out.append({"what": "edges patched exactly on zoo models", "ours": values["exact_zoo"], "paper": "every edge",
                    "why": "budget"})
    out.append({"what": "exact circuits on real models", "ours": f"the EAP-IG top {values['exact_pool']:.0%} ranked exactly",
                "paper": "every edge ranked by exact patching", "why": "CPU; scored only up to that fraction"})
    return out


def _corr(a: Graph, b: Graph) -> dict[str, float]:
    x, y = a.scores.double().numpy(), b.scores.double().numpy()
    return {"pearson": round(float(pearsonr(x, y)[0]), 4), "spearman": round(float(spearmanr(x, y)[0]), 4)}


def spearman_gap(eap_: Graph, eap_ig_: Graph, exact_: Graph, boot: int, seed: int) -> dict[str, Any]:
    """Spearman(EAP-IG, exact) - Spearman(EAP, exact) over the exactly patched edges, with its 2.5-97.5 %
    interval from `boot` resamples of the edges (the same resample for both)."""
    x, y, z = (g.scores.double().numpy() for g in (eap_ig_, eap_, exact_))
    gen = torch.Generator().manual_seed(seed)
    gaps = []
    for _ in range(boot):
        i = torch.randint(len(z), (len(z),), generator=gen).numpy()
        gaps.append(float(spearmanr(x[i], z[i])[0]) - float(spearmanr(y[i], z[i])[0]))
    gaps = torch.tensor(gaps).nan_to_num(0.0)
    return {"gap": float(spearmanr(x, z)[0]) - float(spearmanr(y, z)[0]),
            "ci": [float(gaps.quantile(0.025)), float(gaps.quantile(0.975))], "boot": boot}


def stratified_sample(score: torch.Tensor, k: int, seed: int, strata: int = STRATA) -> torch.Tensor:
    """k indices (ascending) spread evenly over `strata` equal-count quantile bins of `score`, drawn at
    random within each bin: every size of effect is in the sample in proportion, so a correlation over it
    is not left to which few large edges a simple random draw happens to include."""
    n = len(score)
    if not 0 < k <= n:
        raise InterpError(f"a sample of {k} edges from {n} is not possible")
    gen = torch.Generator().manual_seed(seed)
    order = score.detach().cpu().argsort()
    bins = order.tensor_split(min(strata, k))
    counts = [k // len(bins) + (i < k % len(bins)) for i in range(len(bins))]
    picks = [b[torch.randperm(len(b), generator=gen)[:c]] for b, c in zip(bins, counts)]
    return torch.cat(picks).sort().values


def head_roles(model, task, heads: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """For each (layer, head): mean attention from END to IO, S1 and S2 on the clean prompts, the
    duplicate-token score on them, induction and previous-token scores on repeated random tokens,
    and the Wang et al. roles whose score passes ROLE_THRESHOLD (a name mover must also attend to
    IO at least twice as much as to S1)."""
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(model.cfg.n_layers)]
    _, acts = run.cache(model, task.clean.to(model.cfg.device), names)
    rows = torch.arange(len(task))
    end, io, s1, s2 = (task.positions[k].cpu() for k in ("END", "IO", "S1", "S2"))
    dup = lens.head_scores(model, task, "duplicate_token").values
    ind = lens.head_scores(model, None, "induction").values
    prev = lens.head_scores(model, None, "previous_token").values
    out = []
    for layer, head in heads:
        p = acts[names[layer]][:, head].float().cpu()  # [batch, dest, src]
        row = {"head": f"a{layer}.h{head}", "end_to_io": float(p[rows, end, io].mean()),
               "end_to_s1": float(p[rows, end, s1].mean()), "end_to_s2": float(p[rows, end, s2].mean()), "duplicate": float(dup[layer, head]),
               "induction": float(ind[layer, head]), "previous": float(prev[layer, head])}
        row = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}
        roles = [name for name, key in (("S-inhibition", "end_to_s2"), ("duplicate token", "duplicate"),
                                        ("induction", "induction"), ("previous token", "previous"))
                 if row[key] >= ROLE_THRESHOLD]
        if row["end_to_io"] >= ROLE_THRESHOLD and row["end_to_io"] >= 2 * row["end_to_s1"]:
            roles.insert(0, "name mover")  # it must prefer the indirect object, not attend to names alike
        out.append({**row, "roles": roles})
    return out


def _series(grid, name: str, order: str) -> list[float | None]:
    k = grid.labels[1].index(name)
    o = grid.labels[2].index(order)
    return [None if v != v else round(v, 4) for v in grid.values[:, k, o].tolist()]  # NaN (not measured) -> null


def _mib(grid, orders: tuple[str, str]) -> dict[str, Any]:
    """The JSON of a circuit_scores / head_circuit_scores Grid: per series its f curves, CPR, CMD and
    the last fraction it reaches; the random draws' CPR and CMD; and every series' areas over the
    fractions all of them reach (`common`), which is what compares a partial series with the rest."""
    m = grid.meta
    names = list(grid.labels[1])
    series = {n: {"cpr": round(m["cpr"][n], 4), "cmd": round(m["cmd"][n], 4), "upto": m["upto"][n],
                  "signed": _series(grid, n, orders[0]), "absolute": _series(grid, n, orders[1])} for n in names}
    reach = min(len([v for v in s["absolute"] if v is not None]) for s in series.values())
    fr = list(MIB_FRACTIONS[:reach])
    common = {"upto": fr[-1] if fr else None,
              "cpr": {n: round(areas(fr, s["signed"][:reach])[0], 4) for n, s in series.items()},
              "cmd": {n: round(areas(fr, s["absolute"][:reach])[1], 4) for n, s in series.items()}}
    rnd = m["random"]
    return {"fractions": list(MIB_FRACTIONS), "sizes": m["sizes"], "ablation": m["ablation"],
            "empty_metric": round(m["empty_metric"], 4), "series": series, "common": common,
            "random": {"draws": rnd["draws"], "seed": rnd["seed"], "cpr": [round(x, 4) for x in rnd["cpr"]],
                       "cmd": [round(x, 4) for x in rnd["cmd"]],
                       "cpr_range": [round(min(rnd["cpr"]), 4), round(max(rnd["cpr"]), 4)] if rnd["cpr"] else None,
                       "cmd_range": [round(min(rnd["cmd"]), 4), round(max(rnd["cmd"]), 4)] if rnd["cmd"] else None}}


def _mask_scores(model, task, gi: Graph, steps: int, sparsity: float, seed: int, random: int,
                 progress: bool) -> dict[str, Any]:
    """A learned head mask (hard-concrete, resample ablation, heads only) whose logits rank the heads,
    and EAP-IG's summed |edge score| per head, scored as head circuits beside random head rankings."""
    from interp.masking import learn_mask

    t0 = time.perf_counter()
    mask = learn_mask(model, task, sparsity=sparsity, seed=seed, steps=steps, include_mlps=False,
                      ablation="resample", progress=progress)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    logits = torch.tensor(mask.meta["log_alpha"][: L * H]).view(L, H)
    learned = round(time.perf_counter() - t0, 2)
    grid = head_circuit_scores(model, task, {"mask": logits, "eap-ig heads": gi.heads().values}, random=random, seed=seed,
                               progress=progress)
    return {"steps": steps, "sparsity": sparsity, "kept_heads": int(mask.heads.sum()), "final_kl": round(mask.meta["final_kl"], 4),
            "seconds": learned, **_mib(grid, ("score", "score"))}


def _fwd_bwd_seconds(model, task) -> float:
    """One forward and one backward of the task's metric on the clean rows (what EAP cannot avoid)."""
    from interp.metrics import for_task

    names = ["blocks.0.hook_resid_pre"]
    t0 = time.perf_counter()
    logits, acts = run.with_grad(model, task.clean.to(model.cfg.device), names, answer_pos=task.answer_pos)
    with torch.enable_grad():
        torch.autograd.grad(for_task(task)(logits), [acts[names[0]]])
    return time.perf_counter() - t0


def model_study(spec: str, *, n: int | None = None, n_exact: int | None = None, steps: int = 5, seed: int = 0,
                progress: bool = True, boot: int = 1000, exact_pool: float = 0.01, random: int = 3,
                mask_steps: int = 0, mask_sparsity: float = 0.5) -> dict[str, Any]:
    """The study on one model (see the module docstring); zoo models: n=64 and every edge exact;
    real models: n=8, 200 sampled edges exact for the correlations and the EAP-IG top `exact_pool`
    of the edges exact for the exact circuits."""
    from interp.model import load

    t_start = time.perf_counter()
    model = load(spec)
    zoo = is_zoo_english(model)
    n = n or (64 if zoo else 8)
    task = task_for(model, "ioi", n=n, seed=seed)
    out: dict[str, Any] = {"model": spec, "task": task.name, "split": task.split, "n": len(task)}
    try:
        g = eap(model, task, progress=progress)
    except InterpError as err:  # e.g. post-norm blocks: recorded, not hidden
        return {**out, "refused": str(err)}
    gi = eap_ig(model, task, steps=steps, progress=progress)
    if (n_exact is None or n_exact == 0 or n_exact >= len(g)) and zoo:
        sample = g
    else:
        sample = g.select(stratified_sample(gi.scores.abs(), min(len(g), n_exact or 200), seed))
    x = exact(model, task, sample, progress=progress)
    at = {e: i for i, e in enumerate(zip(g.senders, g.receivers))}
    idx = torch.tensor([at[e] for e in zip(x.senders, x.receivers)])
    fb = min(_fwd_bwd_seconds(model, task) for _ in range(2))
    ranked = x if len(x) == len(g) else exact(model, task, gi.top(max(1, math.ceil(exact_pool * len(g)))), progress=progress)
    t0 = time.perf_counter()
    grid = circuit_scores(model, task, {"eap": g, "eap-ig": gi, "exact": ranked}, random=random, seed=seed, progress=progress)
    mib = {**_mib(grid, ("signed", "absolute")), "exact_ranked": len(ranked), "seconds": round(time.perf_counter() - t0, 2),
           "exact_seconds": round(ranked.meta["seconds"], 2)}
    top, top_edges = gi.heads().top(8), gi.top(10)
    out.update({
        "n_layers": g.meta["n_layers"], "n_heads": g.meta["n_heads"], "n_kv_heads": g.meta["n_kv_heads"],
        "edges": len(g), "exact_edges": len(x), "steps": steps,
        "clean_metric": round(g.meta["clean_metric"], 4), "corrupt_metric": round(g.meta["corrupt_metric"], 4),
        "seconds": {"eap": round(g.meta["seconds"], 2), "eap_ig": round(gi.meta["seconds"], 2),
                    "exact": round(x.meta["seconds"], 2), "forward_backward": round(fb, 3)},
        "correlation": {"eap": _corr(g.select(idx), x), "eap_ig": _corr(gi.select(idx), x)},
        "spearman_gap": spearman_gap(g.select(idx), gi.select(idx), x, boot, seed),
        "mib": mib,
        "top_heads": [{"score": round(v, 4), **r} for (w, v), r in
                      zip(top, head_roles(model, task, [(w["layer"], w["head"]) for w, _ in top]))],
        "top_edges": [{"sender": s, "receiver": r, "score": round(float(v), 4)}
                      for s, r, v in zip(top_edges.senders, top_edges.receivers, top_edges.scores)],
    })
    if zoo and mask_steps:
        out["mask"] = _mask_scores(model, task, gi, mask_steps, mask_sparsity, seed, random, progress)
    out["total_seconds"] = round(time.perf_counter() - t_start, 1)
    return out


def _config(spec: str, b: dict[str, Any]) -> dict[str, Any]:
    zoo = spec.startswith("zoo:")
    return {"model": spec, "n": b["n_zoo"] if zoo else b["n_real"], "n_exact": b["exact_zoo"] if zoo else b["exact_real"],
            "steps": b["steps"], "seed": b["seed"], "boot": b["boot"], "exact_pool": b["exact_pool"],
            "mask_steps": b["mask_steps"] if zoo else 0, "mask_sparsity": b["mask_sparsity"],
            "random": b["random"] if zoo else b["random_real"]}


@study("circuits")
def repro(progress: bool = True, models: list[str] | None = None, budget: str = "quick",
          overrides: dict[str, Any] | None = None, units: str | Path | None = None) -> dict[str, Any]:
    """`interp repro circuits` at `budget` (BUDGETS with `overrides`; `models` replaces the budget's):
    one unit per model (stored under `units`, default $INTERP_CACHE/studies/circuits), the verdict of
    the EAP-IG-vs-EAP claim per model, the budget and the run's provenance."""
    start = time.perf_counter()
    b = resolve_budget(BUDGETS, budget, overrides)
    if models:
        b["models"] = list(models)
    store = Units(STUDY, units, version=VERSION)
    configs = [_config(spec, b) for spec in b["models"]]
    res: dict[str, Any] = {"threshold": ROLE_THRESHOLD, "models": {}, "verdicts": {}, "mib_verdicts": {}}
    for c in tqdm(configs, desc="circuit models", disable=not progress):
        kw = {k: v for k, v in c.items() if k != "model"}
        m = res["models"][c["model"]] = store.run(c, lambda c=c, kw=kw: model_study(c["model"], progress=progress, **kw))
        if "refused" not in m:
            gap = m["spearman_gap"]
            res["verdicts"][c["model"]] = judge(
                f"{c['model']}: EAP-IG ranks edges like exact patching better than EAP (Spearman, bootstrap over edges)",
                m["correlation"]["eap_ig"]["spearman"], m["correlation"]["eap"]["spearman"], "greater", diff_ci=gap["ci"],
                null="method")
            res["mib_verdicts"][c["model"]] = _cpr_verdict(c["model"], m["mib"])
    done, total = store.count(configs)
    full = BUDGETS["paper"]
    fraction = sum(min(1.0, _config(s, b)["n"] / _config(s, full)["n"]) for s in b["models"] if s in full["models"]) / len(full["models"])
    res["budget"] = budget_record(budget, b, fraction, done, total)
    res["budgets"] = BUDGETS
    res["provenance"] = provenance(budget, b, fraction, time.perf_counter() - start, done, total, units_run=store.ran,
                                   units_s={c["model"]: store.seconds(c) for c in configs})
    res["provenance"]["gpu_estimate"] = _gpu_estimate(configs, res["provenance"]["units_s"])  # measured here: varies run to run
    return res


PROFILE_SEQ = 16  # about an IOI prompt's tokens


def _gpu_estimate(configs: list[dict[str, Any]], units_s: dict[str, float | None]) -> dict[str, Any]:
    """Each stored model unit's seconds on one GPU: an estimate, scaled by one forward of the unit's
    prompts timed here against its GPU bound (interp.studies.gpu_estimate)."""
    from interp.model import load
    from interp.studies.gpu_estimate import forward_profile, on_gpu

    out = {}
    for c in configs:
        if units_s.get(c["model"]) is None:
            continue
        prof = forward_profile(load(c["model"]), c["n"], PROFILE_SEQ)
        out[c["model"]] = {**prof, "unit_seconds_estimate": on_gpu(units_s[c["model"]], prof)}
    return out


def recalibrate_gpu(result: dict[str, Any], cal: dict[str, Any] | None = None) -> dict[str, Any]:
    """`result` with its GPU estimate re-derived from the stored forward counts, CPU times and unit
    seconds under the GPU calibration (interp.studies.gpu_estimate.load_calibration); nothing is re-timed."""
    import copy

    from interp.studies.gpu_estimate import estimate, on_gpu

    out = copy.deepcopy(result)
    gpu = out["provenance"].get("gpu_estimate") or {}
    for spec, prof in gpu.items():
        p = estimate({k: v for k, v in prof.items() if k != "unit_seconds_estimate"}, cal)
        gpu[spec] = {**p, "unit_seconds_estimate": on_gpu(out["provenance"]["units_s"][spec], p)}
    return out


def _cpr_verdict(spec: str, mib: dict[str, Any]) -> dict[str, Any]:
    """EAP-IG's CPR against random circuits of the same sizes: their mean, told apart by their range."""
    return judge(f"{spec}: EAP-IG circuits recover more of the task than random circuits of the same sizes (MIB CPR)",
                 mib["series"]["eap-ig"]["cpr"], mib["series"]["random"]["cpr"], "greater",
                 control_ci=mib["random"]["cpr_range"], null="random circuits", draws=_random_draws(mib))


def _random_draws(mib: dict[str, Any]) -> int | None:
    """How many random rankings made the random circuits' CPR (their range is the control interval)."""
    draws = mib.get("random", {}).get("draws")
    return draws if isinstance(draws, int) else None


def demo_section(workdir: Path) -> list:
    """Report items: the EAP-IG circuit of zoo:lm-llama on IOI (the interactive view) and its
    circuits scored as MIB scores them (faithfulness by circuit size, CPR, CMD) beside random ones."""
    from interp.circuits.pipeline import with_example
    from interp.model import load
    from interp.results import Heading

    model = load("zoo:lm-llama")
    task = task_for(model, "ioi", n=16)
    graph = with_example(model, task, eap_ig(model, task, steps=5, progress=False))
    graph = type(graph)(graph.senders, graph.receivers, graph.scores, {**graph.meta, "model": "zoo:lm-llama"}, graph.patterns)
    grid = circuit_scores(model, task, {"eap-ig": graph}, random=3, progress=False)
    cpr, cmd = grid.meta["cpr"], grid.meta["cmd"]
    return [
        Heading("Circuits: edge attribution on IOI"),
        f"EAP-IG (5 steps) edge scores of zoo:lm-llama on 16 IOI prompts; k and v edges end on its KV heads. "
        f"Hover an edge for its score, click a head for its attention on the first prompt. Scored as the MIB benchmark "
        f"scores circuits (every other edge patched from the counterfactual prompt, circuits of 0.1 % to 100 % of the "
        f"edges): CPR {cpr['eap-ig']:.3f} (area under the faithfulness curve; random circuits of the same sizes "
        f"{cpr['random']:.3f}), CMD {cmd['eap-ig']:.3f} (area between the curve and 1; random {cmd['random']:.3f}). "
        "`interp circuit MODEL --out DIR` writes the circuit for any model.",
        graph,
        graph.heads(),
        grid,
    ]
