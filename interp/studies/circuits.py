"""The IOI circuit study: EAP, EAP-IG and exact edge patching on the zoo IOI models and SmolLM2.

    interp repro circuits --budget quick|cpu|paper [--set key=value ...] [--units DIR] --out docs/circuits_repro.json
    python -m interp.circuits.study --render --doc docs/circuits.md --out docs/circuits_repro.json

Per model: edge scores by EAP, EAP-IG (5 steps) and exact edge patching (every edge on the zoo
models, a seeded random sample on SmolLM2), their Pearson and Spearman correlations with the exact
scores, the faithfulness curve of the EAP-IG circuit (mean and resample ablation) with the least
edges recovering 80 / 90 %, and the top heads, each described by what Wang et al. (2022) used to
name the IOI classes: attention from the final position to the indirect object (name movers) and
to the repeated subject S2 (S-inhibition), and the duplicate-token, induction and previous-token
scores of `interp.lens.head_scores`. Each model is one unit of interp.studies.units (keyed by its
resolved configuration), so a rerun computes only the missing models. The claim read against a
control: EAP-IG ranks edges like exact patching better than EAP does (Hanna et al. 2024), judged on a
bootstrap over edges of the Spearman difference. `regions(result)` renders the doc from the JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from scipy.stats import pearsonr, spearmanr
from tqdm.auto import tqdm

from interp import lens, run
from interp.circuits.circuit import faithfulness_curve
from interp.circuits.eap import eap, eap_ig
from interp.circuits.exact import exact
from interp.circuits.graph import Graph
from interp.circuits.pipeline import is_zoo_english, task_for
from interp.errors import InterpError
from interp.studies.units import Units, budget as resolve_budget, budget_record, provenance
from interp.studies.verdicts import judge

__all__ = ["BUDGETS", "DEFAULT_MODELS", "demo_section", "head_roles", "main", "model_study", "regions", "repro", "spearman_gap", "write_doc"]

DEFAULT_MODELS = ("zoo:lm-gpt2", "zoo:lm-llama", "zoo:lm-qwen2", "zoo:lm-gemma2", "smollm2-135m")
ROLE_THRESHOLD = 0.3  # attention / detector score above which a head is given a Wang et al. role
STUDY, VERSION = "circuits", 2  # 2: units, budgets, the bootstrap of the EAP-IG vs EAP agreement
# n_zoo / n_real: IOI prompts on zoo / real models; exact_zoo / exact_real: edges patched exactly (0: every
# edge), a seeded random sample otherwise; steps: EAP-IG interpolation steps; boot: resamples of edges.
# "paper" is this study's full scale (every model, every zoo edge exact), not a copy of one paper's run.
BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"models": ["zoo:lm-llama"], "n_zoo": 8, "n_real": 4, "exact_zoo": 40, "exact_real": 20, "steps": 2, "seed": 0,
              "boot": 200},
    "cpu": {"models": list(DEFAULT_MODELS[:4]), "n_zoo": 64, "n_real": 8, "exact_zoo": 0, "exact_real": 200, "steps": 5,
            "seed": 0, "boot": 1000},
    "paper": {"models": list(DEFAULT_MODELS), "n_zoo": 64, "n_real": 8, "exact_zoo": 0, "exact_real": 200, "steps": 5,
              "seed": 0, "boot": 1000},
}


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


def _curve(model, task, graph: Graph, ablation: str, progress: bool) -> dict[str, Any]:
    c = faithfulness_curve(model, task, graph, ablation=ablation, progress=progress)
    return {"edges_80": c.meta["edges_80"], "edges_90": c.meta["edges_90"],
            "empty_recovered": round(c.meta["empty_recovered"], 4), "seconds": round(c.meta["seconds"], 2),
            "edges": c.edges.tolist(), "recovered": [round(x, 4) for x in c.recovered.tolist()]}


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
                progress: bool = True, boot: int = 1000) -> dict[str, Any]:
    """The study on one model (see the module docstring); zoo models: n=64 and every edge exact;
    real models: n=8 and 200 sampled edges exact."""
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
        k = min(len(g), n_exact or 200)
        pick = torch.randperm(len(g), generator=torch.Generator().manual_seed(seed))[:k].sort().values
        sample = g.select(pick)
    x = exact(model, task, sample, progress=progress)
    at = {e: i for i, e in enumerate(zip(g.senders, g.receivers))}
    idx = torch.tensor([at[e] for e in zip(x.senders, x.receivers)])
    fb = min(_fwd_bwd_seconds(model, task) for _ in range(2))
    top, top_edges = gi.heads().top(8), gi.top(10)
    out.update({
        "n_layers": g.meta["n_layers"], "n_heads": g.meta["n_heads"], "n_kv_heads": g.meta["n_kv_heads"],
        "edges": len(g), "exact_edges": len(x), "steps": steps,
        "clean_metric": round(g.meta["clean_metric"], 4), "corrupt_metric": round(g.meta["corrupt_metric"], 4),
        "seconds": {"eap": round(g.meta["seconds"], 2), "eap_ig": round(gi.meta["seconds"], 2),
                    "exact": round(x.meta["seconds"], 2), "forward_backward": round(fb, 3)},
        "correlation": {"eap": _corr(g.select(idx), x), "eap_ig": _corr(gi.select(idx), x)},
        "spearman_gap": spearman_gap(g.select(idx), gi.select(idx), x, boot, seed),
        "faithfulness": {a: _curve(model, task, gi, a, progress) for a in ("mean", "resample")},
        "top_heads": [{"score": round(v, 4), **r} for (w, v), r in
                      zip(top, head_roles(model, task, [(w["layer"], w["head"]) for w, _ in top]))],
        "top_edges": [{"sender": s, "receiver": r, "score": round(float(v), 4)}
                      for s, r, v in zip(top_edges.senders, top_edges.receivers, top_edges.scores)],
    })
    out["total_seconds"] = round(time.perf_counter() - t_start, 1)
    return out


def _config(spec: str, b: dict[str, Any]) -> dict[str, Any]:
    zoo = spec.startswith("zoo:")
    return {"model": spec, "n": b["n_zoo"] if zoo else b["n_real"], "n_exact": b["exact_zoo"] if zoo else b["exact_real"],
            "steps": b["steps"], "seed": b["seed"], "boot": b["boot"]}


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
    res: dict[str, Any] = {"threshold": ROLE_THRESHOLD, "models": {}, "verdicts": {}}
    for c in tqdm(configs, desc="circuit models", disable=not progress):
        kw = {k: v for k, v in c.items() if k != "model"}
        m = res["models"][c["model"]] = store.run(c, lambda c=c, kw=kw: model_study(c["model"], progress=progress, **kw))
        if "refused" not in m:
            gap = m["spearman_gap"]
            res["verdicts"][c["model"]] = judge(
                f"{c['model']}: EAP-IG ranks edges like exact patching better than EAP (Spearman, bootstrap over edges)",
                m["correlation"]["eap_ig"]["spearman"], m["correlation"]["eap"]["spearman"], "greater", diff_ci=gap["ci"])
    done, total = store.count(configs)
    full = BUDGETS["paper"]
    fraction = sum(min(1.0, _config(s, b)["n"] / _config(s, full)["n"]) for s in b["models"] if s in full["models"]) / len(full["models"])
    res["budget"] = budget_record(budget, b, fraction, done, total)
    res["budgets"] = BUDGETS
    res["provenance"] = provenance(budget, b, fraction, time.perf_counter() - start, done, total, units_run=store.ran,
                                   units_s={c["model"]: store.seconds(c) for c in configs})
    return res


def demo_section(workdir: Path) -> list:
    """Report items: the EAP-IG circuit of zoo:lm-llama on IOI (the interactive view) and its
    faithfulness curve under resample ablation."""
    from interp.circuits.pipeline import with_example
    from interp.model import load
    from interp.results import Heading

    model = load("zoo:lm-llama")
    task = task_for(model, "ioi", n=16)
    graph = with_example(model, task, eap_ig(model, task, steps=5, progress=False))
    graph = type(graph)(graph.senders, graph.receivers, graph.scores, {**graph.meta, "model": "zoo:lm-llama"}, graph.patterns)
    curve = faithfulness_curve(model, task, graph, ablation="resample", progress=False)
    return [
        Heading("Circuits: edge attribution on IOI"),
        f"EAP-IG (5 steps) edge scores of zoo:lm-llama on 16 IOI prompts; k and v edges end on its KV heads. "
        f"Hover an edge for its score, click a head for its attention on the first prompt. With every other edge "
        f"resample-ablated, {curve.meta['edges_80']} edges recover 80 % and {curve.meta['edges_90']} edges 90 % of the "
        "clean-minus-corrupt logit difference. `interp circuit MODEL --out DIR` writes the same for any model.",
        graph,
        graph.heads(),
        curve,
    ]


COMMAND = "interp repro circuits --budget {name} --out docs/circuits_repro.json"
RENDER = "python -m interp.circuits.study --render --doc docs/circuits.md --out docs/circuits_repro.json"


def _run_region(r, d: dict[str, Any]) -> str:
    b, prov = d["budget"], d["provenance"]
    lines = [f"The committed numbers: budget `{b['name']}`, made by `{COMMAND.format(name=b['name'])}` then `{RENDER}`; "
             f"{r.num('/budget/paper_fraction')} of this study's `paper` budget (its full scale: every model, every zoo "
             f"edge exact), {r.int('/budget/units_done')} of {r.int('/budget/units_total')} model units. Run `{prov['date']}` "
             f"in {r.num('/provenance/wall_s')} s ({r.int('/provenance/units_run')} units computed by this run) on "
             f"`{prov['machine']['cpu']}`, {r.int('/provenance/machine/cpus')} CPUs shared with other jobs, "
             f"{r.int('/provenance/machine/torch_threads')} torch threads, commit `{prov['commit']}`. Per model unit: "
             + "; ".join(f"`{k}` {r.num(f'/provenance/units_s/{k}')} s" for k in prov["units_s"]) + ".",
             f"The `paper` budget: `{COMMAND.format(name='paper')}` (resumable; it adds `smollm2-135m` with a sample of "
             "exactly patched edges). On this CPU it takes the zoo units above plus one SmolLM2 unit, which this run did not "
             "measure, so no time is claimed for it. *GPU: not measured (no GPU was lent to this "
             "session); every method here is a batched forward/backward, so a GPU's time is bounded below by the "
             "forward + backward column divided by the GPU's speed-up on a model this small.*"]
    return r.region("\n\n".join(lines))


def regions(result: dict[str, Any]) -> dict[str, str]:
    """The doc's generated regions, every number read from `result` through interp.studies.docs.Render."""
    from interp.studies.docs import Render, pointer

    r = Render(result)
    run = _run_region(r, result)  # each region closes (r.region) before the next one's numbers are made
    ok = {k: v for k, v in result["models"].items() if "refused" not in v}
    P = lambda spec, *k: pointer("models", spec, *k)  # noqa: E731
    lines = ["| model | layers × heads (KV) | n | clean | corrupt | edges | exact edges | EAP r / ρ | EAP-IG r / ρ |",
             "|---|---|---|---|---|---|---|---|---|"]
    for spec, m in ok.items():
        c = lambda meth, k: r.num(P(spec, "correlation", meth, k))  # noqa: E731
        lines.append(f"| `{spec}` | {r.int(P(spec, 'n_layers'))} × {r.int(P(spec, 'n_heads'))} ({r.int(P(spec, 'n_kv_heads'))}) | "
                     f"{r.int(P(spec, 'n'))} | {r.num(P(spec, 'clean_metric'))} | {r.num(P(spec, 'corrupt_metric'))} | "
                     f"{r.int(P(spec, 'edges'))} | {r.int(P(spec, 'exact_edges'))} | {c('eap', 'pearson')} / {c('eap', 'spearman')} | "
                     f"{c('eap_ig', 'pearson')} / {c('eap_ig', 'spearman')} |")
    tables = r.region("\n".join(lines))
    lines = ["| model | mean ablation: edges for `80 %` | for `90 %` | empty circuit recovers | resample ablation: edges for `80 %` | for `90 %` |",
             "|---|---|---|---|---|---|"]
    f = lambda spec, a, k: "–" if ok[spec]["faithfulness"][a][k] is None else r.int(P(spec, "faithfulness", a, k))  # noqa: E731
    for spec, m in ok.items():
        lines.append(f"| `{spec}` | {f(spec, 'mean', 'edges_80')} | {f(spec, 'mean', 'edges_90')} | "
                     f"{r.num(P(spec, 'faithfulness', 'mean', 'empty_recovered'))} | {f(spec, 'resample', 'edges_80')} | "
                     f"{f(spec, 'resample', 'edges_90')} |")
    faith = r.region("\n".join(lines))
    lines = ["| model | EAP s | EAP-IG s | exact s | one forward + backward s |", "|---|---|---|---|---|"]
    for spec in ok:
        t = lambda k: r.num(P(spec, "seconds", k))  # noqa: E731
        lines.append(f"| `{spec}` | {t('eap')} | {t('eap_ig')} | {t('exact')} | {t('forward_backward')} |")
    timing = r.region("\n".join(lines))
    heads = []
    for spec, m in ok.items():
        heads += ["", f"Top heads of `{spec}` (EAP-IG, summed |edge score|):", "",
                  "| head | score | END→IO | END→S1 | END→S2 | duplicate | induction | previous | roles |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for i, h in enumerate(m["top_heads"]):
            v = lambda k: r.num(P(spec, "top_heads", i, k))  # noqa: E731
            heads.append(f"| `{h['head']}` | {v('score')} | {v('end_to_io')} | {v('end_to_s1')} | {v('end_to_s2')} | "
                         f"{v('duplicate')} | {v('induction')} | {v('previous')} | {', '.join(h['roles']) or '–'} |")
    for spec, m in result["models"].items():
        if "refused" in m:
            heads += ["", f"`{spec}`: refused — {m['refused']}"]
    heads = r.region("\n".join(heads).strip())
    lines = ["| model | claim | EAP-IG ρ | EAP ρ | difference [bootstrap interval] | verdict |", "|---|---|---|---|---|---|"]
    for spec, v in result["verdicts"].items():
        base, g = pointer("verdicts", spec), P(spec, "spearman_gap")
        lines.append(f"| `{spec}` | {r.text(base + '/claim_text')} | {r.num(base + '/effect')} | {r.num(base + '/control')} | "
                     f"{r.num(g + '/gap', signed=True)} [{r.num(base + '/diff_ci/0', signed=True)}, "
                     f"{r.num(base + '/diff_ci/1', signed=True)}] | {r.text(base + '/word')} |")
    verdicts = r.region("\n".join(lines))
    return {"run": run, "tables": tables, "faithfulness": faith, "timing": timing, "heads": heads, "verdicts": verdicts}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="docs/circuits_repro.json", help="the study JSON (made by `interp repro circuits --out`)")
    p.add_argument("--doc", default=None, help="a markdown file whose <!-- gen:NAME --> regions are rewritten")
    p.add_argument("--render", action="store_true", help="rewrite --doc from --out (no runs; runs go through `interp repro`)")
    args = p.parse_args(argv)
    if not args.render or not args.doc:
        p.error("pass --render --doc docs/circuits.md (runs: `interp repro circuits --budget B --out F.json`)")
    write_doc(Path(args.doc), json.loads(Path(args.out).read_text()))
    return 0


def write_doc(doc: Path, result: dict[str, Any]) -> Path:
    """Fill the doc's `<!-- gen:NAME -->` regions from `result` (each written atomically)."""
    from interp.studies.docs import write

    return write(doc, regions(result))


if __name__ == "__main__":
    raise SystemExit(main())
