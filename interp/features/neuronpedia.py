"""Neuronpedia's attribution-graph JSON (what circuit-tracer's `create_graph_files` writes), both ways.

    to_neuronpedia(graph, slug=...)       -> dict {metadata, qParams, nodes, links} of the pruned graph
    write_neuronpedia(graph, path, ...)   the same, written atomically; returns the path
    from_neuronpedia(data | path)         -> AttributionGraph (equal to the graph that was written)

Nodes as circuit-tracer's frontend models them: a feature "{layer}_{feature}_{pos}" (feature_type
"cross layer transcoder", `feature` the Cantor pairing of layer and feature id), an error
"0_{layer}_{pos}" ("mlp reconstruction error";
"err_{layer}_{pos}" where that id is a layer-0 feature's), a token "E_{vocab id}_{pos}" ("embedding", layer
"E"), a logit "{n_layers + 1}_{vocab id}_{pos}" ("logit", `token_prob`, `is_target_logit` on the most
probable one). Each node's `influence` is its cumulative influence (`AttributionGraph.prune`),
`clerp` a feature's label. Links are {source, target, weight}: every non-zero edge of the graph.

interp's own fields travel in `metadata["info"]["interp"]` (the graph's meta, its raw token strings,
the model name), so a file this module wrote loads back to an equal graph; a file from
circuit-tracer or Neuronpedia loads from the standard fields alone.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from interp.errors import InterpError
from interp.features.graph import ERROR, FEATURE, KINDS, LOGIT, TOKEN, AttributionGraph, cumulative
from interp.storage import write_text_atomic

__all__ = ["from_neuronpedia", "to_neuronpedia", "write_neuronpedia"]

TYPES = {FEATURE: "cross layer transcoder", ERROR: "mlp reconstruction error", TOKEN: "embedding", LOGIT: "logit"}
_KIND_OF = {v: k for k, v in TYPES.items()}


def _cantor(x: int, y: int) -> int:
    return (x + y) * (x + y + 1) // 2 + y


def _shown(token: str) -> str:
    """circuit-tracer's process_token: newline, tab and carriage return as visible marks."""
    return token.replace("\n", "⏎").replace("\t", "→").replace("\r", "↵")


def _node(g: AttributionGraph, i: int, target: int) -> dict[str, Any]:
    kind, layer, pos, idx = int(g.kind[i]), int(g.layer[i]), int(g.pos[i]), int(g.index[i])
    node_id = g.ids[i]
    out = {"node_id": node_id, "feature": -1, "layer": str(layer), "ctx_idx": pos, "feature_type": TYPES[kind],
           "token_prob": 0.0, "is_target_logit": False, "run_idx": 0, "reverse_ctx_idx": 0, "jsNodeId": node_id,
           "clerp": g.labels.get(node_id, ""), "influence": float(g.influence[i]), "activation": None}
    if kind == FEATURE:
        out.update(feature=_cantor(layer, idx), jsNodeId=f"{layer}_{idx}-0", activation=float(g.activation[i]))
    elif kind == ERROR:
        out.update(jsNodeId=f"{layer}_{pos}-0")
    elif kind == TOKEN:
        out.update(feature=pos, layer="E", jsNodeId=f"E_{idx}-{pos}")
    else:
        token = g.meta.get("logit_tokens", {}).get(str(idx), str(idx))
        prob = float(g.prob[i])
        out.update(feature=idx, layer=str(layer + 1), token_prob=prob, is_target_logit=i == target, jsNodeId=f"L_{idx}-{pos}",
                   clerp=g.labels.get(node_id) or f'Output "{_shown(token)}" (p={prob:.3f})')
    return out


def to_neuronpedia(graph: AttributionGraph, *, slug: str, scan: str | None = None, node_threshold: float = 0.8,
                   edge_threshold: float = 0.98, prune: bool = True) -> dict[str, Any]:
    """The Neuronpedia graph JSON of `graph` pruned at the thresholds (as create_graph_files does),
    or of `graph` as it is with `prune=False`. `scan` names the transcoder set (default: the model's
    name + "-transcoders")."""
    if not isinstance(slug, str) or not slug:
        raise InterpError(f"slug must be a non-empty string naming the graph, got {slug!r}")
    g = graph.prune(node_threshold, edge_threshold) if prune else graph
    if g.influence is None:
        g = replace(g, influence=cumulative(g.node_influence()))
    logits = g.of("logit")
    target = int(logits[g.prob[logits].argmax()]) if len(logits) else -1
    nodes = [_node(g, i, target) for i in range(len(g))]
    t, s = torch.nonzero(g.adjacency, as_tuple=True)
    links = [{"source": g.ids[a], "target": g.ids[b], "weight": float(w)}
             for a, b, w in zip(s.tolist(), t.tolist(), g.adjacency[t, s].tolist())]
    meta = {
        "slug": slug, "scan": scan or f"{g.model or 'model'}-transcoders", "transcoder_list": [],
        "prompt_tokens": [_shown(x) for x in g.tokens], "prompt": g.meta.get("prompt", "".join(g.tokens)),
        "node_threshold": g.meta.get("node_threshold"), "schema_version": 1,
        "pruning_settings": {"node_threshold": g.meta.get("node_threshold"), "edge_threshold": g.meta.get("edge_threshold")},
        "info": {"generator": {"name": "interp"}, "interp": {"model": g.model, "tokens": list(g.tokens), "meta": g.meta}},
    }
    qparams = {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""}
    return {"metadata": meta, "qParams": qparams, "nodes": nodes, "links": links}


def write_neuronpedia(graph: AttributionGraph, path: str | Path, *, slug: str | None = None, **kwargs: Any) -> Path:
    """Write `to_neuronpedia(graph, ...)` to `path` atomically (slug: the file's stem by default)."""
    path = Path(path)
    data = to_neuronpedia(graph, slug=slug or path.stem, **kwargs)
    return write_text_atomic(path, json.dumps(data, ensure_ascii=False))


def _read(data: dict | str | Path) -> dict:
    if isinstance(data, dict):
        return data
    try:
        return json.loads(Path(data).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InterpError(f"cannot read {data} as a Neuronpedia graph JSON: {err}") from None


def from_neuronpedia(data: dict | str | Path) -> AttributionGraph:
    """The AttributionGraph of a Neuronpedia graph JSON (a dict, or a path to one)."""
    data = _read(data)
    missing = [k for k in ("metadata", "nodes", "links") if k not in data]
    if missing:
        raise InterpError(f"a Neuronpedia graph JSON has metadata, nodes and links; this one lacks {missing}")
    nodes = sorted(data["nodes"], key=lambda n: _kind(n))  # stable: file order within a kind
    info = (data["metadata"].get("info") or {}).get("interp") or {}
    logit_layers = {int(n["layer"]) for n in nodes if _kind(n) == LOGIT}
    meta = info.get("meta") or {"n_layers": (logit_layers.pop() - 1) if logit_layers else
                                max([int(n["layer"]) for n in nodes if _kind(n) in (FEATURE, ERROR)], default=-1) + 1,
                                "prompt": data["metadata"].get("prompt", "")}
    n_layers = meta["n_layers"]
    rows = [_parsed(n, n_layers) for n in nodes]
    ids = [n["node_id"] for n in nodes]
    where = {x: i for i, x in enumerate(ids)}
    adjacency = torch.zeros(len(nodes), len(nodes))
    for link in data["links"]:
        if link["source"] not in where or link["target"] not in where:
            raise InterpError(f"link {link['source']} -> {link['target']} names a node the file does not hold")
        adjacency[where[link["target"]], where[link["source"]]] = float(link["weight"])
    col = lambda k, dtype: torch.tensor([r[k] for r in rows], dtype=dtype)  # noqa: E731
    labels = {n["node_id"]: n["clerp"] for n in nodes if n.get("clerp") and _kind(n) == FEATURE}
    return AttributionGraph(
        adjacency=adjacency, kind=col("kind", torch.long), layer=col("layer", torch.long), pos=col("pos", torch.long),
        index=col("index", torch.long), activation=col("activation", torch.float), prob=col("prob", torch.float),
        tokens=tuple(info.get("tokens") or data["metadata"].get("prompt_tokens", [])),
        model=info.get("model", data["metadata"].get("scan", "")),
        influence=torch.tensor([float(n.get("influence") or 0.0) for n in nodes]), labels=labels, meta=meta,
    )


def _kind(node: dict) -> int:
    kind = _KIND_OF.get(node.get("feature_type"))
    if kind is None:
        raise InterpError(f"node {node.get('node_id')!r} has feature_type {node.get('feature_type')!r}; "
                          f"this reader knows {sorted(_KIND_OF)} ({', '.join(KINDS)})")
    return kind


def _parsed(node: dict, n_layers: int) -> dict[str, Any]:
    """kind, layer, pos, index, activation, prob of one node, from its id and fields."""
    kind, parts, pos = _kind(node), node["node_id"].split("_"), int(node["ctx_idx"])
    row = {"kind": kind, "pos": pos, "activation": 0.0, "prob": 0.0}
    if kind == FEATURE:
        row.update(layer=int(parts[0]), index=int(parts[1]), activation=float(node.get("activation") or 0.0))
    elif kind == ERROR:
        row.update(layer=int(node["layer"]), index=-1)
    elif kind == TOKEN:
        row.update(layer=-1, index=int(parts[1]))
    else:
        row.update(layer=n_layers, index=int(parts[1]), prob=float(node.get("token_prob") or 0.0))
    return row
