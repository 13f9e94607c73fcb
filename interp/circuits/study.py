"""The IOI circuit study: EAP, EAP-IG and exact edge patching on the zoo IOI models and SmolLM2.

    python -m interp.circuits.study [--model SPEC ...] [--out docs/circuits_repro.json] [--doc docs/circuits.md]

Per model: edge scores by EAP, EAP-IG (5 steps) and exact edge patching (every edge on the zoo
models, a seeded random sample on SmolLM2), their Pearson and Spearman correlations with the exact
scores, the faithfulness curve of the EAP-IG circuit (mean and resample ablation) with the least
edges recovering 80 / 90 %, and the top heads, each described by what Wang et al. (2022) used to
name the IOI classes: attention from the final position to the indirect object (name movers) and
to the repeated subject S2 (S-inhibition), and the duplicate-token, induction and previous-token
scores of `interp.lens.head_scores`. `render(result)` writes the doc's tables from the JSON.
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
from interp.storage import fill_between, write_text_atomic

__all__ = ["DEFAULT_MODELS", "demo_section", "head_roles", "model_study", "render", "repro", "write_doc"]

DEFAULT_MODELS = ("zoo:lm-gpt2", "zoo:lm-llama", "zoo:lm-qwen2", "zoo:lm-gemma2", "smollm2-135m")
ROLE_THRESHOLD = 0.3  # attention / detector score above which a head is given a Wang et al. role


def _corr(a: Graph, b: Graph) -> dict[str, float]:
    x, y = a.scores.double().numpy(), b.scores.double().numpy()
    return {"pearson": round(float(pearsonr(x, y)[0]), 4), "spearman": round(float(spearmanr(x, y)[0]), 4)}


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
                progress: bool = True) -> dict[str, Any]:
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
    if n_exact is None and zoo:
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
        "faithfulness": {a: _curve(model, task, gi, a, progress) for a in ("mean", "resample")},
        "top_heads": [{"score": round(v, 4), **r} for (w, v), r in
                      zip(top, head_roles(model, task, [(w["layer"], w["head"]) for w, _ in top]))],
        "top_edges": [{"sender": s, "receiver": r, "score": round(float(v), 4)}
                      for s, r, v in zip(top_edges.senders, top_edges.receivers, top_edges.scores)],
    })
    out["total_seconds"] = round(time.perf_counter() - t_start, 1)
    return out


def repro(progress: bool = True, models: list[str] | None = None) -> dict[str, Any]:
    start = time.perf_counter()
    res = {"threshold": ROLE_THRESHOLD, "models": {}}
    for spec in tqdm(list(models or DEFAULT_MODELS), desc="circuit models", disable=not progress):
        res["models"][spec] = model_study(spec, progress=progress)
    res["seconds"] = round(time.perf_counter() - start, 1)
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


def _fmt(x: Any) -> str:
    return "–" if x is None else f"{x:g}" if isinstance(x, (int, float)) else str(x)


def render(result: dict[str, Any]) -> str:
    """The doc's result tables (markdown), every number read from `result`."""
    ok = {k: v for k, v in result["models"].items() if "refused" not in v}
    lines = ["| model | layers × heads (KV) | n | clean | corrupt | edges | exact edges | EAP r / ρ | EAP-IG r / ρ |",
             "|---|---|---|---|---|---|---|---|---|"]
    for spec, m in ok.items():
        c = m["correlation"]
        lines.append(f"| {spec} | {m['n_layers']} × {m['n_heads']} ({m['n_kv_heads']}) | {m['n']} | {_fmt(m['clean_metric'])} "
                     f"| {_fmt(m['corrupt_metric'])} | {m['edges']} | {m['exact_edges']} | {_fmt(c['eap']['pearson'])} / "
                     f"{_fmt(c['eap']['spearman'])} | {_fmt(c['eap_ig']['pearson'])} / {_fmt(c['eap_ig']['spearman'])} |")
    lines += ["", "| model | mean: 80 % | mean: 90 % | mean: empty circuit | resample: 80 % | resample: 90 % |",
              "|---|---|---|---|---|---|"]
    for spec, m in ok.items():
        f, r = m["faithfulness"]["mean"], m["faithfulness"]["resample"]
        lines.append(f"| {spec} | {_fmt(f['edges_80'])} | {_fmt(f['edges_90'])} | {_fmt(f['empty_recovered'])} "
                     f"| {_fmt(r['edges_80'])} | {_fmt(r['edges_90'])} |")
    lines += ["", "| model | EAP s | EAP-IG (5 steps) s | exact s | one forward + backward s |", "|---|---|---|---|---|"]
    for spec, m in ok.items():
        s = m["seconds"]
        lines.append(f"| {spec} | {_fmt(s['eap'])} | {_fmt(s['eap_ig'])} | {_fmt(s['exact'])} | {_fmt(s['forward_backward'])} |")
    for spec, m in ok.items():
        lines += ["", f"Top heads of {spec} (EAP-IG, summed |edge score|):", "",
                  "| head | score | END→IO | END→S1 | END→S2 | duplicate | induction | previous | roles |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for h in m["top_heads"]:
            lines.append(f"| {h['head']} | {_fmt(h['score'])} | {_fmt(h['end_to_io'])} | {_fmt(h['end_to_s1'])} "
                         f"| {_fmt(h['end_to_s2'])} "
                         f"| {_fmt(h['duplicate'])} | {_fmt(h['induction'])} | {_fmt(h['previous'])} "
                         f"| {', '.join(h['roles']) or '–'} |")
    bench = result.get("benchmark")
    if bench:
        lines += ["", f"Benchmarks (`{bench['command']}`, {bench['machine']}, torch {bench['torch']}); seconds are the best "
                  "of the repeats, ratio = TL / interp:", "",
                  "| model | examples × positions | edges | same edges | TL s | interp s | ratio | max abs diff | max abs score |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in bench["versus_tl"]:
            lines.append(f"| {r['model']} | {r['examples']} × {r['positions']} | {r['edges']} | {'yes' if r['same_edges'] else 'no'} "
                         f"| {_fmt(r['tl_s'])} | {_fmt(r['interp_s'])} | {_fmt(r['ratio'])} | {_fmt(r['max_abs_diff'])} "
                         f"| {_fmt(r['max_abs_score'])} |")
        q = bench["gqa"]
        lines += ["", "| model | examples × positions | edges | EAP s | one forward + backward s | ratio |", "|---|---|---|---|---|---|",
                  f"| {q['model']} | {q['examples']} × {q['positions']} | {q['edges']} | {_fmt(q['eap_s'])} "
                  f"| {_fmt(q['forward_backward_s'])} | {_fmt(q['ratio'])} |"]
        lines += ["", "| model | examples | EAP s | EAP-IG (5) s | exact s | EAP r / ρ vs exact | EAP-IG r / ρ vs exact |",
                  "|---|---|---|---|---|---|---|"]
        for r in bench["eap_ig"]:
            lines.append(f"| {r['model']} | {r['examples']} | {_fmt(r['eap_s'])} | {_fmt(r['eap_ig5_s'])} | {_fmt(r['exact_s'])} "
                         f"| {_fmt(r['eap']['pearson'])} / {_fmt(r['eap']['spearman'])} "
                         f"| {_fmt(r['eap_ig']['pearson'])} / {_fmt(r['eap_ig']['spearman'])} |")
    refused = {k: v["refused"] for k, v in result["models"].items() if "refused" in v}
    for spec, why in refused.items():
        lines += ["", f"{spec}: refused — {why}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append", default=None)
    p.add_argument("--out", default="docs/circuits_repro.json")
    p.add_argument("--doc", default=None, help="a markdown file whose text between the RESULTS markers is replaced")
    p.add_argument("--merge", action="store_true", help="add to the models already in --out")
    p.add_argument("--render", action="store_true", help="only rewrite --doc from --out (no runs)")
    p.add_argument("--benchmark", default=None, help="benchmarks/circuits.py's JSON, stored under 'benchmark' in --out")
    args = p.parse_args(argv)
    if args.render and not args.doc:
        p.error("--render rewrites --doc: pass --doc docs/circuits.md")
    out = Path(args.out)
    if args.render:
        res = json.loads(out.read_text())
        if args.benchmark:
            res["benchmark"] = json.loads(Path(args.benchmark).read_text())
            write_text_atomic(out, json.dumps(res, indent=1) + "\n")
        write_doc(Path(args.doc), res)
        return 0
    res = repro(progress=True, models=args.model)
    if args.merge and out.exists():
        old = json.loads(out.read_text())
        old["models"].update(res["models"])
        res = {**old, "seconds": round(old.get("seconds", 0) + res["seconds"], 1)}
    write_text_atomic(out, json.dumps(res, indent=1) + "\n")
    if args.doc:
        write_doc(Path(args.doc), res)
    return 0


def write_doc(doc: Path, result: dict[str, Any]) -> None:
    """Replace the text between `<!-- RESULTS -->` and `<!-- /RESULTS -->` in `doc` by render(result)."""
    fill_between(doc, "<!-- RESULTS -->", "<!-- /RESULTS -->", render(result).removesuffix("\n"))


if __name__ == "__main__":
    raise SystemExit(main())
