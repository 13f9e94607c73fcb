"""MIB's arithmetic, pure (no model), and its circuit-track submission files.

    mib_sizes(479)               [0, 0, 2, 4, 9, 23, 47, 95, 239, 479]: floor(p * N) per fraction
    areas(MIB_FRACTIONS, f)      (area under f, area between f and 1): CPR / CMD of a curve
    to_mib(graph, d_model=768)   -> dict: the submission JSON of an edge Graph (write_mib writes it)
    from_mib(path | dict)        -> Graph: a submission (or MIB's published example) read back

Mueller et al. 2025 (the circuit track's `evaluation.py`): fractions 0.1 % ... 100 % of the scored
edges, and the trapezoid rule over the fractions themselves (x linear, not log), so CPR of a curve at
1 everywhere is 0.999 and its CMD 0. `interp.circuits.scores` runs the model for the curves.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Sequence

import torch

from interp.circuits.graph import CONVENTION, Graph, edge_list, node, sender_nodes
from interp.errors import InterpError
from interp.files.storage import write_text_atomic
from interp.files.validate import field, number, read_json, refuse

__all__ = ["MIB_FRACTIONS", "areas", "from_mib", "mib_name", "mib_sizes", "to_mib", "write_mib"]

MIB_FRACTIONS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def mib_sizes(total: int, fractions: Sequence[float] = MIB_FRACTIONS) -> list[int]:
    """Circuit sizes floor(p * total) for each fraction p, as MIB counts them (`int(pct * n)`)."""
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise InterpError(f"total={total!r} must be a non-negative int (the number of scored edges or heads)")
    if not fractions or any(not 0 < p <= 1 for p in fractions) or list(fractions) != sorted(set(fractions)):
        raise InterpError(f"fractions must rise strictly within (0, 1], got {list(fractions)}")
    return [int(p * total) for p in fractions]


def areas(fractions: Sequence[float], f: Sequence[float]) -> tuple[float, float]:
    """(area under f, area between f and 1) by the trapezoid rule over `fractions` (x linear):
    MIB's CPR of a signed-order curve and CMD of an |score|-order curve. NaN entries end the curve:
    the areas cover the fractions before the first NaN (at least two are needed)."""
    f = [float(v) for v in f]
    if len(f) != len(fractions):
        raise InterpError(f"{len(f)} faithfulness values for {len(fractions)} fractions")
    n = next((i for i, v in enumerate(f) if math.isnan(v)), len(f))
    if n < 2:
        return float("nan"), float("nan")
    under = from_1 = 0.0
    for i in range(n - 1):
        dx = fractions[i + 1] - fractions[i]
        under += dx * (f[i] + f[i + 1]) / 2
        from_1 += dx * (abs(1 - f[i]) + abs(1 - f[i + 1])) / 2
    return under, from_1


# ---- MIB's circuit-track submission files <-> Graph ------------------------------------------
#
# MIB reads a circuit as EAP-IG's Graph JSON (`circuit_loading.load_graph_from_json`):
#     {"cfg": {"n_layers", "n_heads", "parallel_attn_mlp", "d_model"},
#      "nodes": {name: {"in_graph": bool}},
#      "edges": {"sender->receiver": {"score": float, "in_graph": bool}}}
# Nodes are "input", "a{L}.h{H}", "m{L}" and "logits"; an edge into a head names the head's input
# as a suffix ("input->a0.h1<q>"), one per query head for q, k and v alike. A node is in the graph
# when an in-graph edge touches it, the logits always (as EAP-IG's Graph.to_json writes them). MIB's "input" is hook_embed,
# interp's "embed" blocks.0.hook_resid_pre: they differ by the positional embedding, which a clean
# and a corrupt input of one length share, so an edge from either carries the same difference.


def mib_name(sender: str, receiver: str, n_heads: int, n_kv_heads: int) -> str:
    """The MIB name of the edge sender -> receiver (interp node names, `interp.circuits.graph`);
    InterpError for an edge MIB cannot name: a k or v input shared by a KV group of several query
    heads (MIB names k and v per query head)."""
    src, dst = node(sender), node(receiver)
    src_name = "input" if src.role == "embed" else sender
    if dst.role in ("k", "v") and n_kv_heads != n_heads:
        raise InterpError(f"edge {sender} -> {receiver}: MIB names k and v inputs per query head, but this graph scores "
                          f"them per KV group ({n_heads} heads, {n_kv_heads} KV heads); MIB cannot name it")
    if dst.role in ("q", "k", "v"):
        return f"{src_name}->a{dst.layer}.h{dst.index}<{dst.role}>"
    return f"{src_name}->{receiver}"


def _interp_name(name: str) -> tuple[str, str] | None:
    """(sender, receiver) in interp's node names of an MIB edge name (non-GQA), or None."""
    m = re.fullmatch(r"(input|a\d+\.h\d+|m\d+)->(?:a(\d+)\.h(\d+)<([qkv])>|(m\d+|logits))", name)
    if m is None:
        return None
    sender = "embed" if m[1] == "input" else m[1]
    if m[5]:
        return sender, m[5]
    return sender, f"a{m[2]}.h{m[3]}.q" if m[4] == "q" else f"a{m[2]}.g{m[3]}.{m[4]}"


def to_mib(graph: Graph, *, d_model: int | None = None, circuit: Graph | None = None) -> dict[str, Any]:
    """MIB's submission JSON of `graph`: every edge of the model's full graph under its MIB name,
    scored by `graph` (0.0 where `graph` lacks the edge), in the circuit when it is an edge of
    `circuit` (default: of `graph`). `d_model`: the model's width (default: graph.meta["d_model"])."""
    m = graph.meta
    d_model = m.get("d_model") if d_model is None else d_model
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 1:
        raise InterpError(f"d_model={d_model!r}: MIB's cfg needs the model's width as a positive int; pass d_model=")
    circuit = graph if circuit is None else circuit
    if not isinstance(circuit, Graph) or any(circuit.meta[k] != m[k] for k in ("n_layers", "n_heads", "n_kv_heads")):
        raise InterpError("circuit must be a Graph of the same model's edges (same n_layers, n_heads, n_kv_heads)")
    bad = (~torch.isfinite(graph.scores)).nonzero().flatten().tolist()
    if bad:  # json.dumps would write a bare NaN, which MIB's loader (and every JSON parser) refuses
        i = bad[0]
        raise InterpError(f"{len(bad)} edge scores are not finite, e.g. {graph.senders[i]} -> {graph.receivers[i]}: "
                          f"{float(graph.scores[i])}; MIB's JSON holds finite scores only")
    args = (m["n_heads"], m["n_kv_heads"])
    scores = dict(zip(zip(graph.senders, graph.receivers), graph.scores.tolist()))
    chosen = set(zip(circuit.senders, circuit.receivers))
    edges, touched = {}, {"logits"}  # MIB's logits node is always in the graph
    for s, r in zip(*edge_list(m["n_layers"], m["n_heads"], m["n_kv_heads"])):
        name = mib_name(s, r, *args)
        edges[name] = {"score": float(scores.get((s, r), 0.0)), "in_graph": (s, r) in chosen}
        if (s, r) in chosen:
            touched.update(re.sub(r"<[qkv]>$", "", part) for part in name.split("->"))
    names = ["input"] + [n for n in sender_nodes(m["n_layers"], m["n_heads"]) if n != "embed"] + ["logits"]
    cfg = {"n_layers": m["n_layers"], "n_heads": m["n_heads"], "parallel_attn_mlp": False, "d_model": d_model}
    return {"cfg": cfg, "nodes": {n: {"in_graph": n in touched} for n in names}, "edges": edges}


def write_mib(graph: Graph, path: str | Path, **kwargs: Any) -> Path:
    """Write `to_mib(graph, ...)` to `path` atomically; returns the path."""
    return write_text_atomic(path, json.dumps(to_mib(graph, **kwargs)))


def from_mib(data: dict | str | Path, *, circuit: bool = False) -> Graph:
    """The Graph of an MIB submission JSON (a dict, or a path to one): every edge the file scores,
    or with `circuit=True` only its in-graph edges; checked as MIB's loader checks it (cfg, nodes
    and edges present, every name one of the model's) plus types and finite scores."""
    src = "the MIB graph" if isinstance(data, dict) else str(data)
    if not isinstance(data, dict) and str(data).endswith((".pt", ".pth")):
        raise InterpError(f"{src}: MIB's .pt circuits are pickles, which interp does not unpickle; write the circuit "
                          "with MIB's Graph.to_json and read that")
    if not isinstance(data, dict):
        data = read_json(data, "an MIB circuit JSON", "the JSON MIB's Graph.to_json (or write_mib) wrote")
    if not isinstance(data, dict) or any(k not in data for k in ("cfg", "nodes", "edges")):
        raise refuse(src, "the file", "lacks cfg, nodes or edges", "an object with cfg, nodes and edges (MIB's Graph JSON)")
    cfg = field(data, "cfg", dict, src)
    n_layers, n_heads = (number(field(cfg, k, int, src, where="cfg"), src, f"cfg.{k}", integer=True, lo=1, hi=10**4)
                         for k in ("n_layers", "n_heads"))
    if field(cfg, "parallel_attn_mlp", bool, src, where="cfg", default=False):
        raise refuse(src, "cfg.parallel_attn_mlp", "is true", "false: interp's graphs order each layer's MLP after its heads")
    valid = set(sender_nodes(n_layers, n_heads)) - {"embed"} | {"input", "logits"}
    for name, value in field(data, "nodes", dict, src).items():
        field(value, "in_graph", bool, src, where=f"nodes.{name[:40]}")
        if name not in valid:
            raise refuse(src, f"node {name[:40]!r}", "is not a node of this model", f"one of input, a{{L}}.h{{H}}, m{{L}}, logits")
    full = set(zip(*edge_list(n_layers, n_heads)))
    senders, receivers, scores = [], [], []
    for name, value in field(data, "edges", dict, src).items():
        pair = _interp_name(name)
        if pair is None or pair not in full:
            raise refuse(src, f"edge {name[:60]!r}", f"is not an edge of a {n_layers}-layer, {n_heads}-head model",
                         "'sender->receiver' as MIB names it, e.g. 'input->a0.h1<q>' or 'm3->logits'")
        score = field(value, "score", float, src, where=f"edges.{name[:40]}")
        if field(value, "in_graph", bool, src, where=f"edges.{name[:40]}") or not circuit:
            senders.append(pair[0])
            receivers.append(pair[1])
            scores.append(score)
    meta = {"n_layers": n_layers, "n_heads": n_heads, "n_kv_heads": n_heads, "method": "mib", "convention": CONVENTION}
    if isinstance(cfg.get("d_model"), int) and not isinstance(cfg["d_model"], bool):
        meta["d_model"] = cfg["d_model"]
    return Graph(tuple(senders), tuple(receivers), torch.tensor(scores, dtype=torch.float32, device="cpu"), meta)  # cpu: a result
