"""MIB circuit-track submission files: the export names every edge as MIB's loader does, and MIB's
published example reads back edge for edge.

The fixture is an excerpt of MIB's published example circuit (hannamw/MIB-circuit-track,
circuits/ioi-eap-ig.json at b759df3: EAP-IG on IOI, GPT-2 small): its cfg, all 158 nodes, all 756
in-graph edges and every 256th of the other edges, as the file holds them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from interp.circuits import Graph, edge_list
from interp.circuits.mib import from_mib, mib_name, to_mib, write_mib
from interp.errors import InterpError

EXAMPLE = Path(__file__).parent / "data" / "mib_ioi_eap_ig_excerpt.json"
EXAMPLE_EDGES = 32491  # edges in the published file (all of GPT-2 small's graph)


def mib_names(n_layers: int, n_heads: int) -> tuple[list[str], list[str]]:
    """(nodes, edges) of MIB's graph of a sequential model, built the way EAP-IG's Graph.from_model
    grows it: the residual stream starts with the input; each layer's heads read every earlier node
    through q, k and v, then its MLP reads every earlier node and the layer's heads; the logits read
    everything."""
    stream, nodes, edges = ["input"], ["input"], []
    for layer in range(n_layers):
        heads = [f"a{layer}.h{h}" for h in range(n_heads)]
        edges += [f"{s}->{h}<{x}>" for s in stream for h in heads for x in "qkv"]
        stream += heads
        edges += [f"{s}->m{layer}" for s in stream]
        stream.append(f"m{layer}")
        nodes += [*heads, f"m{layer}"]
    edges += [f"{s}->logits" for s in stream]
    return nodes + ["logits"], edges


def _graph(n_layers=2, n_heads=3, n_kv=None, seed=0):
    s, r = edge_list(n_layers, n_heads, n_kv or n_heads)
    scores = torch.randn(len(s), generator=torch.Generator().manual_seed(seed))
    return Graph(s, r, scores, {"n_layers": n_layers, "n_heads": n_heads, "n_kv_heads": n_kv or n_heads, "d_model": 16})


@pytest.mark.parametrize("n_layers, n_heads", [(1, 1), (2, 3), (12, 12)])
def test_export_names_every_edge_as_mib_does(n_layers, n_heads):
    g = _graph(n_layers, n_heads)
    data = to_mib(g.top(7))
    nodes, edges = mib_names(n_layers, n_heads)
    assert list(data["nodes"]) == nodes and set(data["edges"]) == set(edges) and len(data["edges"]) == len(edges)
    assert data["cfg"] == {"n_layers": n_layers, "n_heads": n_heads, "parallel_attn_mlp": False, "d_model": 16}
    assert sum(e["in_graph"] for e in data["edges"].values()) == min(7, len(g))
    assert all(set(e) == {"score", "in_graph"} and isinstance(e["score"], float) for e in data["edges"].values())
    # a node is in the graph exactly when an in-graph edge touches it; the logits always are
    touched = {p.split("<")[0] for k, e in data["edges"].items() if e["in_graph"] for p in k.split("->")} | {"logits"}
    assert {n for n, v in data["nodes"].items() if v["in_graph"]} == touched
    if n_layers == 12:
        assert len(edges) == EXAMPLE_EDGES


def test_the_published_example_reads_back_edge_for_edge(tmp_path):
    example = json.loads(EXAMPLE.read_text())
    nodes, edges = mib_names(12, 12)
    assert list(example["nodes"]) == nodes and set(example["edges"]) <= set(edges)  # our reading of MIB's names
    g, circuit = from_mib(EXAMPLE), from_mib(EXAMPLE, circuit=True)
    assert len(g) == len(example["edges"]) and len(circuit) == 756 == sum(e["in_graph"] for e in example["edges"].values())
    for s, r, score in zip(g.senders, g.receivers, g.scores.tolist()):
        assert example["edges"][mib_name(s, r, 12, 12)]["score"] == score  # float32 scores, exact
    back = to_mib(g, circuit=circuit)
    assert back["cfg"] == example["cfg"] and back["nodes"] == example["nodes"]
    assert {k: back["edges"][k] for k in example["edges"]} == example["edges"]
    assert all(not e["in_graph"] and e["score"] == 0.0 for k, e in back["edges"].items() if k not in example["edges"])
    path = write_mib(g, tmp_path / "sub.json", circuit=circuit)
    assert json.loads(path.read_text()) == back


def test_round_trip_of_a_graph_here():
    g = _graph(3, 2, seed=1)
    back = from_mib(to_mib(g))
    assert back.senders == g.senders and back.receivers == g.receivers and torch.equal(back.scores, g.scores)
    assert back.meta["d_model"] == 16 and back.meta["method"] == "mib"
    top = g.top(5)
    assert set(zip(*(lambda c: (c.senders, c.receivers))(from_mib(to_mib(g, circuit=top), circuit=True)))) == \
        set(zip(top.senders, top.receivers))


def _edit(change):
    data = json.loads(EXAMPLE.read_text())
    change(data)
    return data


@pytest.mark.parametrize("change, says", [
    (lambda d: d.pop("edges"), "lacks cfg, nodes or edges"),
    (lambda d: d["nodes"].update({"a12.h0": {"in_graph": True}}), "not a node of this model"),
    (lambda d: d["edges"].update({"m3->a2.h0<q>": {"score": 0.1, "in_graph": False}}), "not an edge"),
    (lambda d: d["edges"].update({"input->a0.h0<x>": {"score": 0.1, "in_graph": False}}), "not an edge"),
    (lambda d: d["edges"]["m11->logits"].update(score="high"), "score"),
    (lambda d: d["edges"]["m11->logits"].update(score=float("nan")), "score"),
    (lambda d: d["edges"]["m11->logits"].pop("in_graph"), "in_graph"),
    (lambda d: d["cfg"].update(parallel_attn_mlp=True), "parallel_attn_mlp"),
    (lambda d: d["cfg"].update(n_heads=0), "n_heads"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_files_are_refused(change, says):
    with pytest.raises(InterpError, match=says):
        from_mib(_edit(change))


def test_edges_mib_cannot_name_are_refused():
    g = _graph(2, 4, n_kv=2)
    with pytest.raises(InterpError, match="per KV group"):
        to_mib(g)
    assert mib_name("a0.h1", "a1.h3.q", 4, 2) == "a0.h1->a1.h3<q>"  # a query input is one head's, even on GQA
    with pytest.raises(InterpError, match="does not unpickle"):
        from_mib("circuit.pt")
    with pytest.raises(InterpError, match="d_model"):
        to_mib(Graph((), (), torch.zeros(0), {"n_layers": 1, "n_heads": 1, "n_kv_heads": 1}))
    with pytest.raises(InterpError, match="same model"):
        to_mib(_graph(2, 3), circuit=_graph(3, 3))


def test_a_nan_score_is_refused_not_written_as_bare_nan(tmp_path):
    """json.dumps writes a NaN score as `NaN`, which no JSON parser (MIB's included) reads."""
    g = _graph(2, 3)
    scores = g.scores.clone()
    scores[4] = float("nan")
    with pytest.raises(InterpError, match=r"1 edge scores are not finite, e.g. .*: nan"):
        write_mib(Graph(g.senders, g.receivers, scores, g.meta), tmp_path / "sub.json")
    assert list(tmp_path.iterdir()) == []


def test_a_graph_from_edge_attribution_exports_without_being_told_the_width():
    """eap's Graph carries the model's width in its meta, so to_mib needs no d_model=; every edge of the
    model's graph is named as MIB's loader names it."""
    import interp
    from interp.circuits import eap

    model = interp.load("zoo:lm-gpt2")
    g = eap(model, interp.tasks.make("ioi", split="train", n=4), progress=False)
    data = to_mib(g)
    assert data["cfg"]["d_model"] == model.cfg.d_model == g.meta["d_model"]
    assert set(data["edges"]) == set(mib_names(model.cfg.n_layers, model.cfg.n_heads)[1])
