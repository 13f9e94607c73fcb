"""Attribution graphs on trained transcoders: scores, controls, a check against the real model, and
the time of one graph with its share in the model's forward and backward.

    OMP_NUM_THREADS=1 python benchmarks/graphs.py [--models smollm2,zoo] [--budget cpu]
        [--max-feature-nodes 4096] [--out docs/attribution_graphs.json] [--html-dir out/graphs]
    python benchmarks/graphs.py --doc          # only re-render docs/attribution_graphs.md from the JSON

Per model and prompt (a capital-city prompt and an IOI prompt on SmolLM2-135M; an IOI prompt of
the zoo's task on zoo:lm-gpt2), with the per-layer transcoders of `interp.features.suite`:

- the graph (`interp.features.attribute`, the most probable next tokens as logit nodes), its
  replacement and completeness scores, unpruned and pruned (0.8 / 0.98, circuit-tracer's defaults);
- the control: the same graph through random dictionaries of the same shapes whose thresholds keep
  the same number of active features per position (they explain nothing, so their scores say what
  the numbers are worth);
- the features with the largest direct effect on the top logit: that effect beside the change
  of the same (demeaned) logit when the feature is removed from its MLP output through the runner
  in the real model (direct + indirect effects, with attention and norms free);
- the Neuronpedia JSON written and loaded back (equal or not), the view written as HTML (the
  browser test renders the same view; `--html-dir`).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings
from pathlib import Path

import torch

import interp
from interp import run
from interp.features import Dictionary, attribute, from_neuronpedia, to_neuronpedia
from interp.features.attribute import Hold, frozen
from interp.features.graph_view import graph_html
from interp.features.suite import SUITES, load_dictionaries
from interp.interventions import Patch
from interp.sites import layer_of
from interp.files.storage import write_text_atomic

DOC = Path(__file__).resolve().parents[1] / "docs" / "attribution_graphs.md"
JSON = DOC.with_suffix(".json")
PROMPTS = {
    "smollm2": {"capital": ("The capital of France is", " Paris"),
                "ioi": ("When Mary and John went to the store, John gave a drink to", " Mary")},
    "zoo": {"ioi": None},  # the zoo task's first test prompt (its word tokenizer)
}


def transcoders_of(name: str, budget: str) -> list[Dictionary]:
    ds = load_dictionaries(name, budget)
    return sorted((d for d in ds.values() if d.kind == "transcoder"), key=lambda d: layer_of(d.site_out))  # by layer, not name


def random_like(model, tokens: torch.Tensor, tcs: list[Dictionary], seed: int = 0) -> list[Dictionary]:
    """Random dictionaries of the trained ones' shapes, thresholds set so that as many features fire
    per position on `tokens` as the trained ones fire (the L0-matched control)."""
    _, acts = run.cache(model, tokens, [d.site_in for d in tcs])
    g = torch.Generator().manual_seed(seed)
    out = []
    for d in tcs:
        x = acts[d.site_in][0, 1:].float()  # past the BOS (graphs drop it; its activations are outliers)
        l0 = float((d.encode(x) > 0).sum(-1).float().mean())
        w_enc = torch.randn(d.W_enc.shape, generator=g) / d.W_enc.shape[0] ** 0.5
        w_dec = torch.randn(d.W_dec.shape, generator=g)
        w_dec = w_dec / w_dec.norm(dim=1, keepdim=True) * d.W_dec.norm(dim=1).mean()
        pre = x @ w_enc
        thr = float(pre.flatten().quantile(1 - l0 / pre.shape[1]))
        out.append(Dictionary(w_enc, torch.zeros(d.n_features), w_dec, d.b_dec.clone(), d.site_in, d.site_out,
                              threshold=torch.full((d.n_features,), thr), model=d.model, meta={"control": "random, L0-matched"}))
    return out


def ablation_check(model, tokens: torch.Tensor, tcs: list[Dictionary], graph, top: int = 5) -> list[dict]:
    """The top features by |direct effect| on the most probable logit: that effect, the change of the
    same demeaned logit when the feature's output is removed in the replacement model (patterns,
    scales and the other MLP outputs held: it must be minus the effect), and in the real model."""
    logit = int(graph.of("logit")[graph.prob[graph.of("logit")].argmax()])
    vocab = int(graph.index[logit])
    row = graph.adjacency[logit] * (graph.kind == 0)
    by_site = {d.site_out: d for d in tcs}
    _, clean = run.cache(model, tokens, list(by_site))
    out_of = lambda logits: float(logits[0, -1, vocab] - logits[0, -1].mean())  # noqa: E731
    base = out_of(run.logits(model, tokens))
    held = frozen(model, tokens) + [Hold(site, clean[site]) for site in by_site]  # the replacement model, MLPs held
    rows = []
    for i in torch.argsort(row.abs(), descending=True)[:top].tolist():
        layer, pos, f = int(graph.layer[i]), int(graph.pos[i]), int(graph.index[i])
        d = tcs[layer]
        edited = clean[d.site_out].clone()
        edited[0, pos] -= float(graph.activation[i]) * d.W_dec[f].to(edited)
        change = out_of(run.logits(model, tokens, [Patch(d.site_out, edited, pos=pos)])) - base
        in_frozen = out_of(run.logits(model, tokens, held + [Patch(d.site_out, edited, pos=pos)])) - base
        rows.append({"layer": layer, "feature": f, "pos": pos, "activation": float(graph.activation[i]),
                     "direct_effect": float(row[i]), "frozen_change": in_frozen, "ablation_change": change})
    return rows


def one_graph(model, tokens: torch.Tensor, answer: int, tcs: list[Dictionary], args, slug: str) -> dict:
    """Everything the doc reports of one prompt ([1, pos] token ids; `answer` the expected next token)."""
    prompt = model.tokenizer.decode(tokens[0], skip_special_tokens=True)
    graph = attribute(model, tokens, tcs, max_feature_nodes=args.max_feature_nodes, batch_size=args.batch_size,
                      progress=False)
    pruned = graph.prune(args.node_threshold, args.edge_threshold)
    data = to_neuronpedia(graph, slug=slug, node_threshold=args.node_threshold, edge_threshold=args.edge_threshold)
    round_trip = from_neuronpedia(json.loads(json.dumps(data))) == pruned
    if args.html_dir:
        Path(args.html_dir).mkdir(parents=True, exist_ok=True)
        write_text_atomic(Path(args.html_dir) / f"{slug}.html", graph_html(pruned))
        write_text_atomic(Path(args.html_dir) / f"{slug}.json", json.dumps(data))
    control = attribute(model, tokens, random_like(model, tokens, tcs), max_feature_nodes=args.max_feature_nodes,
                        batch_size=args.batch_size, progress=False)
    probs = torch.softmax(run.logits(model, tokens)[0, -1].float(), -1)
    path = pruned.path()
    count = lambda g, k: int((g.kind == ("feature", "error", "token", "logit").index(k)).sum())  # noqa: E731
    return {
        "prompt": prompt, "answer": model.tokenizer.decode([answer]), "answer_prob": float(probs[answer]),
        "answer_rank": int((probs > probs[answer]).sum()) + 1,
        "n_tokens": len(graph.tokens), "n_active_features": graph.meta["n_active_features"],
        "feature_nodes": count(graph, "feature"), "logit_nodes": count(graph, "logit"),
        "edges": int((graph.adjacency != 0).sum()), "scores": graph.scores(),
        "pruned": {"features": count(pruned, "feature"), "errors": count(pruned, "error"),
                   "edges": int((pruned.adjacency != 0).sum()), "scores": pruned.scores()},
        "control_random": {"n_active_features": control.meta["n_active_features"], "scores": control.scores()},
        "top_path": [{"kind": ("feature", "error", "token", "logit")[int(pruned.kind[i])], "layer": int(pruned.layer[i]),
                      "pos": int(pruned.pos[i]), "index": int(pruned.index[i])} for i in path],
        "ablation": ablation_check(model, tokens, tcs, graph),
        "neuronpedia": {"nodes": len(data["nodes"]), "links": len(data["links"]), "loads_back_equal": bool(round_trip)},
        "seconds": graph.meta["seconds"],
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="smollm2,zoo")
    p.add_argument("--budget", default="cpu")
    p.add_argument("--max-feature-nodes", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--node-threshold", type=float, default=0.8)
    p.add_argument("--edge-threshold", type=float, default=0.98)
    p.add_argument("--out", default=str(JSON))
    p.add_argument("--html-dir", default="out/graphs")
    p.add_argument("--doc", action="store_true", help="only render the doc from the JSON")
    p.add_argument("--cross-check", default=None, help="the JSON of benchmarks/graphs_circuit_tracer.py compare, merged in")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore", message=".*hook_scale.*")  # the bridge's note on held norm scales
    if not args.doc:
        out = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {"models": {}}
        out["budget"] = {"dictionaries": args.budget, "max_feature_nodes": args.max_feature_nodes,
                         "batch_size": args.batch_size, "node_threshold": args.node_threshold,
                         "edge_threshold": args.edge_threshold}
        out["paper"] = {"circuit_tracer_version": "0.5", "circuit_tracer_transformers_max": "4.57",
                        "interp_transformers_min": "5.9"}
        out["machine"] = {"platform": platform.platform(), "torch": torch.__version__,
                          "threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        for name in args.models.split(","):
            suite = SUITES[name]
            model = interp.load(suite.model)
            tcs = transcoders_of(name, args.budget)
            entry = {"model": suite.model, "transcoders": len(tcs), "n_features": tcs[0].n_features,
                     "trained_tokens": tcs[0].meta.get("tokens"), "prompts": {}}
            for key, pa in PROMPTS[name].items():
                if pa is None:  # the zoo task's first test prompt, up to its answer position
                    from interp.circuits.pipeline import task_for

                    task = task_for(model, "ioi", n=1)
                    tokens, answer = task.clean[:1, : int(task.answer_pos[0]) + 1], int(task.correct[0])
                else:
                    tokens, answer = model.to_tokens(pa[0]), int(model.to_tokens(pa[1], prepend_bos=False)[0, 0])
                entry["prompts"][key] = one_graph(model, tokens, answer, tcs, args, f"{name}-{key}")
                print(name, key, json.dumps(entry["prompts"][key]["scores"]), flush=True)
            out["models"][suite.model] = entry
            write_text_atomic(args.out, json.dumps(out, indent=1) + "\n")
    if args.cross_check:
        out = json.loads(Path(args.out).read_text())
        out["circuit_tracer_check"] = json.loads(Path(args.cross_check).read_text())
        write_text_atomic(args.out, json.dumps(out, indent=1) + "\n")
    if Path(args.out).resolve() == JSON:
        write_doc(json.loads(JSON.read_text()), DOC)


# ---------------------------------------------------------------------------------------------
# the doc: every number rendered from the JSON (interp.studies.docs)


def write_doc(data: dict, doc: Path) -> Path:
    """Fill the generated regions of docs/attribution_graphs.md from `data` (one Render per region:
    a region takes the keys of the numbers rendered since the last one)."""
    from interp.studies.docs import Render, pointer, write

    rs = {k: Render(data) for k in ("setup", "scores", "ablation", "paths", "timing", "export", "crosscheck")}
    setup = ["| model | transcoders | features each | trained on (tokens) |", "|---|---|---|---|"]
    r = rs["setup"]
    for m in data["models"]:
        at = lambda *k: pointer("models", m, *k)  # noqa: E731
        setup.append(f"| `{m}` | {r.int(at('transcoders'))} | {r.int(at('n_features'))} | {r.int(at('trained_tokens'))} |")
    scores = ["| model | prompt | answer p (rank) | active features | feature nodes | edges | replacement | completeness "
              "| pruned: features / errors / edges | pruned replacement | pruned completeness | random dictionaries: "
              "replacement | random: completeness |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ablation = ["| model | prompt | layer | feature | position | activation | direct effect (graph) | change when removed: "
                "replacement model | real model |", "|---|---|---|---|---|---|---|---|---|"]
    timing = ["| model | prompt | total (s) | forward (s) | backward (s) | ranking (s) |", "|---|---|---|---|---|---|"]
    paths, export = [], []
    for m, entry in data["models"].items():
        for k, e in entry["prompts"].items():
            at = lambda *x: pointer("models", m, "prompts", k, *x)  # noqa: E731
            r = rs["scores"]
            scores.append(
                f"| `{m}` | {k}: {e['prompt']!r} | {r.num(at('answer_prob'))} ({r.int(at('answer_rank'))}) | "
                f"{r.int(at('n_active_features'))} | {r.int(at('feature_nodes'))} | {r.int(at('edges'))} | "
                f"{r.num(at('scores', 'replacement'))} | {r.num(at('scores', 'completeness'))} | "
                f"{r.int(at('pruned', 'features'))} / {r.int(at('pruned', 'errors'))} / {r.int(at('pruned', 'edges'))} | "
                f"{r.num(at('pruned', 'scores', 'replacement'))} | {r.num(at('pruned', 'scores', 'completeness'))} | "
                f"{r.num(at('control_random', 'scores', 'replacement'))} | "
                f"{r.num(at('control_random', 'scores', 'completeness'))} |")
            r = rs["ablation"]
            for j in range(len(e["ablation"])):
                ab = lambda x: at("ablation", j, x)  # noqa: E731
                ablation.append(f"| `{m}` | {k} | {r.int(ab('layer'))} | {r.int(ab('feature'))} | {r.int(ab('pos'))} | "
                                f"{r.num(ab('activation'))} | {r.num(ab('direct_effect'), signed=True)} | "
                                f"{r.num(ab('frozen_change'), signed=True)} | {r.num(ab('ablation_change'), signed=True)} |")
            r, steps = rs["paths"], []
            for j, n in enumerate(e["top_path"]):
                pt = lambda x: at("top_path", j, x)  # noqa: E731
                if n["kind"] == "feature":
                    steps.append(f"feature #{r.int(pt('index'))} of layer {r.int(pt('layer'))} at position {r.int(pt('pos'))}")
                elif n["kind"] == "error":
                    steps.append(f"the error of layer {r.int(pt('layer'))} at position {r.int(pt('pos'))}")
                elif n["kind"] == "token":
                    steps.append(f"the token at position {r.int(pt('pos'))}")
                else:
                    steps.append("the top logit")
            paths.append(f"- `{m}`, {k}: " + " → ".join(steps))
            r = rs["timing"]
            timing.append(f"| `{m}` | {k} | {r.num(at('seconds', 'total'))} | {r.num(at('seconds', 'forward'))} | "
                          f"{r.num(at('seconds', 'backward'))} | {r.num(at('seconds', 'ranking'))} |")
            r = rs["export"]
            equal = "equal" if e["neuronpedia"]["loads_back_equal"] else "NOT equal"
            export.append(f"- `{m}`, {k}: {r.int(at('neuronpedia', 'nodes'))} nodes, "
                          f"{r.int(at('neuronpedia', 'links'))} links; loaded back: {equal} to the pruned graph")
    bodies = {"setup": setup, "scores": scores, "ablation": ablation, "paths": paths, "timing": timing, "export": export}
    if "circuit_tracer_check" in data:
        r, at = rs["crosscheck"], lambda *k: pointer("circuit_tracer_check", *k)  # noqa: E731
        bodies["crosscheck"] = [
            f"On {r.int(at('nodes'))} nodes (the same nodes in both graphs), the largest difference of an edge from a feature, "
            f"an error or into a logit is {r.num(at('max_abs_diff'))} (largest edge {r.num(at('max_abs_entry'))}; relative L1 "
            f"difference {r.num(at('relative_l1_diff'))}). Scores: circuit-tracer {r.num(at('circuit_tracer_scores', 'replacement'))} "
            f"/ {r.num(at('circuit_tracer_scores', 'completeness'))}, interp {r.num(at('interp_scores', 'replacement'))} / "
            f"{r.num(at('interp_scores', 'completeness'))} (replacement / completeness); token columns differ by up to "
            f"{r.num(at('token_columns_max_abs_diff'))}, by definition (below).",
            "",
            f"Pruned at the budget's thresholds, one adjacency (circuit-tracer's) gives "
            f"{'the same' if data['circuit_tracer_check']['pruning']['same_nodes'] else 'DIFFERENT'} "
            f"{r.int(at('pruning', 'kept_nodes'))} nodes and "
            f"{'the same' if data['circuit_tracer_check']['pruning']['same_edges'] else 'DIFFERENT'} "
            f"{r.int(at('pruning', 'kept_edges'))} edges through interp's `prune` and circuit-tracer's `prune_graph`, "
            f"with cumulative influences that differ by at most {r.num(at('pruning', 'max_influence_diff'))}."]
    return write(doc, {k: rs[k].region("\n".join(v)) for k, v in bodies.items()})


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    main()
