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
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from interp.errors import InterpError
from interp.features.graph import ERROR, FEATURE, KINDS, LOGIT, TOKEN, AttributionGraph, cumulative
from interp.files.storage import write_text_atomic
from interp.files.validate import field, number, read_json, refuse

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
        "schema_version": 1,
        "info": {"generator": {"name": "interp"}, "interp": {"model": g.model, "tokens": list(g.tokens), "meta": g.meta}},
    }
    # the schema types both as numbers: an unpruned graph (prune=False) leaves them out, never null
    pruning = {k: float(g.meta[k]) for k in ("node_threshold", "edge_threshold") if isinstance(g.meta.get(k), (int, float))}
    if pruning:
        meta["pruning_settings"] = pruning
    if "node_threshold" in pruning:
        meta["node_threshold"] = pruning["node_threshold"]
    qparams = {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""}
    return {"metadata": meta, "qParams": qparams, "nodes": nodes, "links": links}


def write_neuronpedia(graph: AttributionGraph, path: str | Path, *, slug: str | None = None, **kwargs: Any) -> Path:
    """Write `to_neuronpedia(graph, ...)` to `path` atomically (slug: the file's stem by default)."""
    path = Path(path)
    data = to_neuronpedia(graph, slug=slug or path.stem, **kwargs)
    try:  # strict JSON (a NaN in the graph's meta would be written as NaN, which no JSON parser reads) in UTF-8
        text = json.dumps(data, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
    except ValueError as err:  # UnicodeEncodeError (a lone surrogate in a token) is one too
        raise InterpError(f"{graph!r:.80} has no Neuronpedia JSON ({str(err)[:80]}): its meta, tokens and labels must "
                          "be finite numbers and UTF-8 strings; nothing was written") from None
    return write_text_atomic(path, text)


_MAX_ID = 2**62  # ids, positions and layers beyond any real model (and the int64 the graph stores them in)


def _read(data: dict | str | Path) -> tuple[dict, str]:
    if isinstance(data, dict):
        return data, "the graph"
    return read_json(data, "a Neuronpedia graph JSON", "the JSON circuit-tracer or write_neuronpedia wrote"), str(data)


def from_neuronpedia(data: dict | str | Path) -> AttributionGraph:
    """The AttributionGraph of a Neuronpedia graph JSON (a dict, or a path to one), its schema checked:
    every field of the type it should be, every number finite, ids that parse, positions inside the
    prompt, links between nodes the file holds."""
    data, src = _read(data)
    if not isinstance(data, dict):
        raise refuse(src, "the file", f"is a {type(data).__name__}", "an object with metadata, nodes and links")
    missing = [k for k in ("metadata", "nodes", "links") if k not in data]
    if missing:
        raise InterpError(f"{src}: a Neuronpedia graph JSON has metadata, nodes and links; this one lacks {missing}")
    metadata, nodes, links = field(data, "metadata", dict, src), field(data, "nodes", list, src), field(data, "links", list, src)
    for i, n in enumerate(nodes):
        field(n, "node_id", str, src, where=f"nodes.{i}")  # (refuses a node that is not an object too)
    nodes = sorted(nodes, key=lambda n: _kind(n, src))  # stable: file order within a kind
    info = field(field(metadata, "info", dict, src, where="metadata", default={}), "interp", dict, src,
                 where="metadata.info", default={})
    tokens = field(info, "tokens", list, src, where="metadata.info.interp", default=None)
    if tokens is None:
        tokens = field(metadata, "prompt_tokens", list, src, where="metadata", default=[])
    if not all(isinstance(t, str) for t in tokens):
        raise refuse(src, "metadata.prompt_tokens", "holds a non-string", "the prompt's tokens as strings")
    meta = field(info, "meta", dict, src, where="metadata.info.interp", default=None) or _meta(nodes, metadata, src)
    n_layers = number(field(meta, "n_layers", int, src, where="meta"), src, "meta.n_layers", integer=True, lo=0, hi=10**6)
    rows = [_parsed(n, n_layers, len(tokens), src) for n in nodes]
    ids = [n["node_id"] for n in nodes]
    where = {x: i for i, x in enumerate(ids)}
    if len(where) != len(ids):
        raise refuse(src, "nodes", "repeat a node_id", "one node per id")
    adjacency = torch.zeros(len(nodes), len(nodes))
    for i, link in enumerate(links):
        at = f"links.{i}"
        source, target = field(link, "source", str, src, where=at), field(link, "target", str, src, where=at)
        if source not in where or target not in where:
            raise InterpError(f"{src}: link {source[:40]} -> {target[:40]} names a node the file does not hold")
        adjacency[where[target], where[source]] = field(link, "weight", float, src, where=at)
    col = lambda k, dtype: torch.tensor([r[k] for r in rows], dtype=dtype)  # noqa: E731
    labels = {n["node_id"]: n["clerp"] for n in nodes if isinstance(n.get("clerp"), str) and n["clerp"] and _kind(n, src) == FEATURE}
    influence = [field(n, "influence", float, src, where=f"node {n['node_id'][:30]}", default=0.0) for n in nodes]
    model = field(info, "model", str, src, where="metadata.info.interp", default=None)
    try:
        return AttributionGraph(
            adjacency=adjacency, kind=col("kind", torch.long), layer=col("layer", torch.long), pos=col("pos", torch.long),
            index=col("index", torch.long), activation=col("activation", torch.float), prob=col("prob", torch.float),
            tokens=tuple(tokens), model=model if model is not None else field(metadata, "scan", str, src, default=""),
            influence=torch.tensor(influence, device="cpu"), labels=labels, meta=meta,
        )
    except InterpError as err:
        raise InterpError(f"{src}: {str(err)[:220]}") from None


def _meta(nodes: list[dict], metadata: dict, src: str) -> dict[str, Any]:
    """The graph's meta from a file of circuit-tracer's (no interp block): n_layers from the logit
    nodes' layer (one above the last), else from the deepest feature or error, and the prompt."""
    logit_layers = {_int(n.get("layer"), src, f"node {n['node_id'][:30]}.layer") for n in nodes if _kind(n, src) == LOGIT}
    if len(logit_layers) > 1:
        raise refuse(src, "logit nodes' layer", f"takes {len(logit_layers)} values", "one value (n_layers + 1)")
    inner = [_int(n.get("layer"), src, f"node {n['node_id'][:30]}.layer") for n in nodes if _kind(n, src) in (FEATURE, ERROR)]
    n_layers = (logit_layers.pop() - 1) if logit_layers else max(inner, default=-1) + 1
    return {"n_layers": n_layers, "prompt": field(metadata, "prompt", str, src, where="metadata", default="")}


def _int(value: Any, src: str, name: str, lo: int = -1) -> int:
    """An id, layer or position given as an int or a string of one, within [lo, 2**62)."""
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,19}", value):
        value = int(value)
    return number(value, src, name, integer=True, lo=lo, hi=_MAX_ID)


def _kind(node: dict, src: str = "the graph") -> int:
    kind = _KIND_OF.get(node.get("feature_type")) if isinstance(node.get("feature_type"), str) else None
    if kind is None:
        raise InterpError(f"{src}: node {str(node.get('node_id'))[:40]!r} has feature_type {str(node.get('feature_type'))[:40]!r}; "
                          f"this reader knows {sorted(_KIND_OF)} ({', '.join(KINDS)})")
    return kind


def _parsed(node: dict, n_layers: int, n_tokens: int, src: str) -> dict[str, Any]:
    """kind, layer, pos, index, activation, prob of one node, from its id and fields, each checked."""
    name = f"node {node['node_id'][:30]}"
    kind, parts = _kind(node, src), node["node_id"].split("_")
    pos = _int(node.get("ctx_idx"), src, f"{name}.ctx_idx", lo=0)
    if n_tokens and pos >= n_tokens:
        raise refuse(src, f"{name}.ctx_idx", f"is {pos}", f"a position inside the prompt's {n_tokens} tokens")
    if len(parts) != 3:
        raise refuse(src, f"{name}.node_id", "does not have three '_'-separated parts", "like '3_120_5' or 'E_11_0'")
    row = {"kind": kind, "pos": pos, "activation": 0.0, "prob": 0.0}
    if kind == FEATURE:
        row.update(layer=_int(parts[0], src, f"{name} layer", lo=0), index=_int(parts[1], src, f"{name} feature", lo=0),
                   activation=field(node, "activation", float, src, where=name, default=0.0))
    elif kind == ERROR:
        row.update(layer=_int(node.get("layer"), src, f"{name}.layer", lo=0), index=-1)
    elif kind == TOKEN:
        row.update(layer=-1, index=_int(parts[1], src, f"{name} vocab id", lo=0))
    else:
        row.update(layer=n_layers, index=_int(parts[1], src, f"{name} vocab id", lo=0),
                   prob=number(field(node, "token_prob", float, src, where=name, default=0.0), src,
                               f"{name}.token_prob", lo=0.0, hi=1.0))
    return row
