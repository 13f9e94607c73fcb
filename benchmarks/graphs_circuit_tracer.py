"""interp's attribution graph against circuit-tracer 0.5's, on the same model and transcoders.

circuit-tracer cannot be installed beside interp (it needs TransformerLens 2.x's HookedTransformer and
transformers <= 4.57; interp runs on TransformerLens 4 and transformers >= 5.9), so this runs in two
interpreters:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/graphs_circuit_tracer.py export out/xc
    # a venv that borrows torch & co. from interp's and shadows the three old packages:
    python3 -m venv /tmp/ctvenv && echo "$PWD/.venv/lib/python3.11/site-packages" > \\
        /tmp/ctvenv/lib/python3.11/site-packages/zz_interp.pth && /tmp/ctvenv/bin/pip install --no-deps \\
        circuit-tracer==0.5.0 transformer-lens==2.16.1 transformers==4.57.3 "huggingface-hub<1.0" \\
        "tokenizers<0.23" datasets==3.6.0 fancy_einsum better_abc transformers_stream_generator
    OMP_NUM_THREADS=1 PYTHONPATH=$PWD /tmp/ctvenv/bin/python benchmarks/graphs_circuit_tracer.py compare out/xc [--json F]

The model: a random GPT-2-family model (2 layers, d_model 32, ReLU MLPs) over the zoo's word
vocabulary; the transcoders: random ReLU dictionaries of 64 features per layer (so error nodes are
large and many features fire). Compared: every edge whose source is a feature, an error or a
logit's input, node for node. Token columns differ by definition: circuit-tracer's token node is
the token embedding alone (the position embedding is a constant it does not attribute), interp's is
the residual entering the first block (token + position embedding). Pruning is compared on one
adjacency (circuit-tracer's): interp's `AttributionGraph.prune` against circuit-tracer's `prune_graph`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

PROMPT = "the keys to the"


def export(folder: Path) -> None:
    import interp
    from interp.features import Dictionary, attribute
    from interp.model.building import DEFAULT_WORDS, hf_config, hf_model_class, save_model_dir
    from interp.tasks.base import word_tokenizer

    tok = word_tokenizer(DEFAULT_WORDS)
    cfg = hf_config("gpt2", vocab_size=len(tok), d_model=32, n_layers=2, n_heads=4)
    cfg.activation_function = "relu"
    torch.manual_seed(0)
    model = interp.load(str(save_model_dir(hf_model_class("gpt2")(cfg).eval(), tok, folder / "model")))
    g = torch.Generator().manual_seed(3)
    d, n = model.cfg.d_model, 64
    tcs = [Dictionary(torch.randn(d, n, generator=g) / d**0.5, torch.randn(n, generator=g) * 0.1,
                      torch.randn(n, d, generator=g) * 0.1, torch.randn(d, generator=g) * 0.01,
                      f"blocks.{l}.ln2.hook_normalized", f"blocks.{l}.hook_mlp_out") for l in range(2)]
    tokens = model.to_tokens(PROMPT)
    answer = int(tok.convert_tokens_to_ids("cabinet"))
    graph = attribute(model, tokens, tcs, targets=[answer], progress=False)
    torch.save({"tokens": tokens[0], "answer": answer, "adjacency": graph.adjacency, "kind": graph.kind,
                "layer": graph.layer, "pos": graph.pos, "index": graph.index, "scores": graph.scores(),
                "tc": [{k: getattr(t, k) for k in ("W_enc", "b_enc", "W_dec", "b_dec")} for t in tcs]}, folder / "interp.pt")
    print(graph, graph.scores())


def _circuit_tracer_graph(folder: Path, data: dict):
    from circuit_tracer.attribution.attribute import attribute
    from circuit_tracer.replacement_model.replacement_model_transformerlens import TransformerLensReplacementModel
    from circuit_tracer.transcoder.single_layer_transcoder import SingleLayerTranscoder, TranscoderSet
    from transformer_lens import HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights
    from transformers import AutoTokenizer, GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(folder / "model").eval()
    c = hf.config
    cfg = HookedTransformerConfig(n_layers=c.n_layer, d_model=c.n_embd, n_ctx=c.n_positions, d_head=c.n_embd // c.n_head,
                                  n_heads=c.n_head, d_mlp=c.n_inner, act_fn="relu", d_vocab=c.vocab_size,
                                  normalization_type="LN", positional_embedding_type="standard", eps=c.layer_norm_epsilon,
                                  original_architecture="GPT2LMHeadModel", dtype=torch.float32, device="cpu")
    tcs = {}
    for layer, t in enumerate(data["tc"]):
        s = SingleLayerTranscoder(cfg.d_model, t["W_enc"].shape[1], torch.relu, layer, device=torch.device("cpu"),
                                  dtype=torch.float32)
        with torch.no_grad():
            s.W_enc.copy_(t["W_enc"].T), s.b_enc.copy_(t["b_enc"]), s.W_dec.copy_(t["W_dec"]), s.b_dec.copy_(t["b_dec"])
        tcs[layer] = s
    rm = TransformerLensReplacementModel.from_config(cfg, TranscoderSet(tcs, feature_input_hook="ln2.hook_normalized",
                                                                         feature_output_hook="hook_mlp_out"))
    weights = {(k.replace(".mlp.", ".mlp.old_mlp.") if ".mlp." in k else k.replace("unembed.", "unembed.old_unembed.")): v
               for k, v in convert_gpt2_weights(hf, cfg).items()}
    rm.load_state_dict(weights, strict=False)  # GPT-2 has no unembedding bias: b_U stays zero in both
    rm.set_tokenizer(AutoTokenizer.from_pretrained(folder / "model"))
    return attribute(data["tokens"], rm, attribution_targets=torch.tensor([data["answer"]]), batch_size=64), cfg


def _pruning(g, theirs, idx, keys, data) -> dict:
    """Both prunings of the same (circuit-tracer's) adjacency: interp's AttributionGraph.prune and
    circuit-tracer's prune_graph at 0.8 / 0.98; the kept nodes and edges compared (needs interp on
    PYTHONPATH)."""
    from circuit_tracer.graph import prune_graph
    from interp.features.graph import AttributionGraph

    n = len(keys)
    prob = torch.zeros(n)
    prob[-1] = float(g.logit_probabilities[0])
    same = AttributionGraph(adjacency=theirs, kind=data["kind"], layer=data["layer"], pos=data["pos"], index=data["index"],
                            activation=torch.zeros(n), prob=prob, tokens=tuple(str(int(t)) for t in data["tokens"]),
                            meta={"n_layers": 2})
    ours = same.prune(0.8, 0.98)
    node_mask, edge_mask, cumulative = prune_graph(g, 0.8, 0.98)
    kept_theirs = {keys[i] for i in range(n) if bool(node_mask[idx[i]])}
    where = {x: i for i, x in enumerate(same.ids)}
    kept_ours = {keys[where[x]] for x in ours.ids}
    t, s = torch.nonzero(ours.adjacency, as_tuple=True)
    edges_ours = {(ours.ids[a], ours.ids[b]) for a, b in zip(t.tolist(), s.tolist())}
    em = edge_mask[idx][:, idx] & node_mask[idx][:, None] & node_mask[idx][None, :] & (theirs != 0)
    t, s = torch.nonzero(em, as_tuple=True)
    edges_theirs = {(same.ids[a], same.ids[b]) for a, b in zip(t.tolist(), s.tolist())}
    inf = torch.tensor([float(cumulative[idx[where[x]]]) for x in ours.ids])
    return {"kept_nodes": len(kept_ours), "same_nodes": kept_ours == kept_theirs, "kept_edges": len(edges_ours),
            "same_edges": edges_ours == edges_theirs, "max_influence_diff": float((inf - ours.influence).abs().max())}


def compare(folder: Path, out: str | None) -> None:
    from circuit_tracer.graph import compute_graph_scores

    data = torch.load(folder / "interp.pt", weights_only=False)
    g, cfg = _circuit_tracer_graph(folder, data)
    n_feat, n_pos = len(g.selected_features), len(data["tokens"])
    where = {("f", *map(int, lpf)): j for j, lpf in enumerate(g.active_features[g.selected_features].tolist())}
    where.update({("e", l, p): n_feat + l * n_pos + p for l in range(cfg.n_layers) for p in range(n_pos)})
    where.update({("t", p): n_feat + cfg.n_layers * n_pos + p for p in range(n_pos)})
    where[("L",)] = g.adjacency_matrix.shape[0] - 1
    keys = [(("f", l, p, i), ("e", l, p), ("t", p), ("L",))[k][: (4, 3, 2, 1)[k]] for k, l, p, i in
            zip(data["kind"].tolist(), data["layer"].tolist(), data["pos"].tolist(), data["index"].tolist())]
    idx = torch.tensor([where[k] for k in keys])
    theirs, ours = g.adjacency_matrix[idx][:, idx].float(), data["adjacency"]
    sources = torch.tensor([k[0] != "t" for k in keys])
    diff = (theirs - ours)[:, sources].abs()
    result = {"nodes": len(keys), "same_nodes": len(keys) == g.adjacency_matrix.shape[0],
              "max_abs_diff": float(diff.max()), "max_abs_entry": float(ours[:, sources].abs().max()),
              "relative_l1_diff": float(diff.sum() / ours[:, sources].abs().sum()),
              "token_columns_max_abs_diff": float((theirs - ours)[:, ~sources].abs().max()),
              "circuit_tracer_scores": dict(zip(("replacement", "completeness"), compute_graph_scores(g))),
              "interp_scores": data["scores"], "pruning": _pruning(g, theirs, idx, keys, data)}
    print(json.dumps(result, indent=1))
    if out:
        Path(out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    what, folder = sys.argv[1], Path(sys.argv[2])
    folder.mkdir(parents=True, exist_ok=True)
    if what == "export":
        export(folder)
    else:
        compare(folder, sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None)
