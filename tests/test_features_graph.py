"""Attribution graphs (interp.features.attribute / graph / neuronpedia / graph_view).

The planted model: a GPT-2-family model with ReLU MLPs, so each MLP *is* a transcoder (encoder =
the norm's weight times c_fc, decoder = c_proj): its transcoders are exact and every error node is
zero. In its last layer one neuron is planted to fire at the last position only and to write the
answer's unembedding direction: that feature is known to carry the answer.

Invariants checked: with error nodes the replacement model reproduces the model's logits, without
them it does not; every target's input (a feature's pre-activation, a logit) is the sum of its
direct effects plus what the model gives with every source removed; an edge equals the change a
runner ablation of its source makes to its target in the frozen model; ablating the planted
feature in the real model moves the answer logit by what the graph predicts.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import interp
from interp import results, run
from interp.views import plot
from interp.errors import InterpError
from interp.features import Dictionary
from interp.features.attribute import EMBED, UNEMBED, Hold, attribute, frozen, replacement_logits
from interp.features.graph import AttributionGraph, cumulative, influence, normalized, threshold_of
from interp.features.graph_view import graph_html, view
from interp.features.neuronpedia import from_neuronpedia, to_neuronpedia, write_neuronpedia
from interp.interventions import Patch
from test_circuit_view import Page, browser  # noqa: F401  (the shared Chromium fixture and page wrapper)

PROMPT, ANSWER, NEURON = "the keys to the", "cabinet", 7
EVIL = "<script>alert(1)</script>"
# the bridge notes that a held norm scale leaves its fused path (the numbers are the same)
pytestmark = pytest.mark.filterwarnings("ignore:A forward hook edited hook_scale")


def exact_transcoders(model) -> list[Dictionary]:
    """A ReLU GPT-2 MLP as a transcoder reading ln2's normalised input: no error at all."""
    out = []
    for layer in range(model.cfg.n_layers):
        hf = model.original_model.transformer.h[layer]
        g, b = hf.ln_2.weight.detach(), hf.ln_2.bias.detach()
        w_fc, b_fc = hf.mlp.c_fc.weight.detach(), hf.mlp.c_fc.bias.detach()
        out.append(Dictionary(W_enc=g[:, None] * w_fc, b_enc=b @ w_fc + b_fc, W_dec=hf.mlp.c_proj.weight.detach().clone(),
                              b_dec=hf.mlp.c_proj.bias.detach().clone(), site_in=f"blocks.{layer}.ln2.hook_normalized",
                              site_out=f"blocks.{layer}.hook_mlp_out", model="planted"))
    return out


def random_transcoders(model, n: int = 64, seed: int = 0) -> list[Dictionary]:
    g = torch.Generator().manual_seed(seed)
    d = model.cfg.d_model
    return [Dictionary(W_enc=torch.randn(d, n, generator=g) / d**0.5, b_enc=torch.randn(n, generator=g) * 0.1,
                       W_dec=torch.randn(n, d, generator=g) * 0.1, b_dec=torch.randn(d, generator=g) * 0.01,
                       site_in=f"blocks.{l}.ln2.hook_normalized", site_out=f"blocks.{l}.hook_mlp_out")
            for l in range(model.cfg.n_layers)]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """(model, exact transcoders, answer id): neuron NEURON of layer 1 fires (0.5) at the last
    position only and writes the answer's demeaned unembedding direction."""
    from interp.model.building import DEFAULT_WORDS, hf_config, hf_model_class, save_model_dir
    from interp.tasks.base import word_tokenizer

    tok = word_tokenizer(DEFAULT_WORDS)
    cfg = hf_config("gpt2", vocab_size=len(tok), d_model=32, n_layers=2, n_heads=4)
    cfg.activation_function = "relu"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        hf = hf_model_class("gpt2")(cfg).eval()
    ids = torch.tensor([[tok.bos_token_id] + tok(PROMPT, add_special_tokens=False).input_ids])
    with torch.no_grad():
        seen = {}
        handle = hf.transformer.h[1].ln_2.register_forward_hook(lambda m, i, o: seen.setdefault("u", o[0]))
        hf(ids)
        handle.remove()
        u = seen["u"]  # the last MLP's input at each position
        w = u[-1] / u[-1].norm()
        proj = u @ w  # largest at the last position (Cauchy-Schwarz)
        margin = float(proj[-1] - proj[:-1].max())
        hf.transformer.h[1].mlp.c_fc.weight[:, NEURON] = w / margin
        hf.transformer.h[1].mlp.c_fc.bias[NEURON] = -(float(proj[:-1].max()) + 0.5 * margin) / margin
        answer = tok.convert_tokens_to_ids(ANSWER)
        direction = hf.lm_head.weight[answer] - hf.lm_head.weight.mean(0)
        hf.transformer.h[1].mlp.c_proj.weight[NEURON] = 0.2 * direction / direction.norm()  # small beside the residual, so the final norm barely moves
    model = interp.load(str(save_model_dir(hf, tok, tmp_path_factory.mktemp("planted") / "planted")))
    return model, exact_transcoders(model), answer


@pytest.fixture(scope="module")
def planted_graph(planted):
    model, tcs, answer = planted
    return attribute(model, PROMPT, tcs, targets=[ANSWER], progress=False)


@pytest.fixture(scope="module")
def llama_graph(llama):
    tcs = random_transcoders(llama)
    return tcs, attribute(llama, "the keys to the cabinet", tcs, progress=False, batch_size=16)


# ---------------------------------------------------------------------------------------------
# the replacement model and the direct effects


def test_replacement_model_with_errors_reproduces_the_logits(llama, planted):
    tokens = llama.to_tokens("the keys to the cabinet")
    tcs = random_transcoders(llama)
    true = run.logits(llama, tokens)
    assert torch.allclose(replacement_logits(llama, tokens, tcs), true, atol=1e-4, rtol=1e-4)
    assert (replacement_logits(llama, tokens, tcs, errors=False) - true).abs().max() > 1e-2  # the control
    model, exact, _ = planted
    tokens = model.to_tokens(PROMPT)
    assert torch.allclose(replacement_logits(model, tokens, exact, errors=False), run.logits(model, tokens), atol=1e-4)


def _values_and_constants(model, tokens, tcs, graph):
    """(value, constant) of each target node: its input on the clean run, and in the frozen model
    with every source removed (MLP outputs at the decoder bias, the BOS position's kept whole, and
    no token embedding)."""
    names = [UNEMBED] + [t.site_in for t in tcs]
    _, clean = run.cache(model, tokens, names + [t.site_out for t in tcs] + [EMBED])
    holds = frozen(model, tokens)
    for t in tcs:
        const = t.b_dec.expand_as(clean[t.site_out]).clone()
        const[:, 0] = clean[t.site_out][:, 0]  # a dropped BOS: its MLP output is a constant
        holds.append(Hold(t.site_out, const))
    holds.append(Hold(EMBED, torch.zeros_like(clean[EMBED])))
    _, base = run.cache(model, tokens, names, holds)
    return target_inputs(model, graph, clean, base, lambda layer, index: (tcs[layer].W_enc[:, index], tcs[layer].site_in))


def target_inputs(model, graph, clean, base, encoder):
    """(node, value, constant) of each feature and logit node: its input vector (`encoder(layer,
    feature)` -> (encoder column, input site) for a feature; the demeaned unembedding column for a
    logit) read on the `clean` and `base` activations."""
    W_U = model.W_U.detach()
    out = []
    for i in range(len(graph)):
        kind = int(graph.kind[i])
        if kind == 3:
            v, site, pos = W_U[:, int(graph.index[i])] - W_U.mean(1), UNEMBED, -1
        elif kind == 0:
            (v, site), pos = encoder(int(graph.layer[i]), int(graph.index[i])), int(graph.pos[i])
        else:
            continue
        out.append((i, float(clean[site][0, pos] @ v), float(base[site][0, pos] @ v)))
    return out


@pytest.mark.parametrize("which", ["llama", "planted"])
def test_each_target_is_the_sum_of_its_direct_effects(which, llama, llama_graph, planted, planted_graph):
    """The frozen model is affine in its sources: input = sum of the row + the sources-removed constant."""
    if which == "llama":
        model, (tcs, graph) = llama, llama_graph
        tokens = model.to_tokens("the keys to the cabinet")
    else:
        (model, tcs, _), graph = planted, planted_graph
        tokens = model.to_tokens(PROMPT)
    rows = _values_and_constants(model, tokens, tcs, graph)
    assert len(rows) == int((graph.kind == 0).sum() + (graph.kind == 3).sum()) > 100
    for i, value, const in rows:
        assert abs(float(graph.adjacency[i].sum()) - (value - const)) <= 1e-4 + 1e-3 * abs(value - const), graph.describe(i)


def test_an_edge_is_the_runner_ablation_of_its_source(llama, llama_graph):
    """Remove one layer-0 feature's output through the runner in the frozen model (later MLP outputs
    held): a layer-1 feature's pre-activation moves by minus the edge."""
    tcs, g = llama_graph
    tokens = llama.to_tokens("the keys to the cabinet")
    t0, t1 = tcs
    feats1 = g.of("feature")[g.layer[g.of("feature")] == 1]
    target = int(feats1[0])
    row = g.adjacency[target]
    source = int(torch.argmax(row.abs() * (g.layer == 0) * (g.kind == 0)))
    s_pos, s_idx = int(g.pos[source]), int(g.index[source])
    _, clean = run.cache(llama, tokens, [t0.site_out, t1.site_out, t1.site_in])
    ablated = clean[t0.site_out].clone()
    ablated[0, s_pos] -= float(g.activation[source]) * t0.W_dec[s_idx]
    holds = frozen(llama, tokens) + [Hold(t1.site_out, clean[t1.site_out]), Patch(t0.site_out, ablated)]
    _, after = run.cache(llama, tokens, [t1.site_in], holds)
    v = t1.W_enc[:, int(g.index[target])]
    pos = int(g.pos[target])
    change = float((after[t1.site_in][0, pos] - clean[t1.site_in][0, pos]) @ v)
    assert abs(change + float(row[source])) <= 1e-5 + 1e-4 * abs(float(row[source]))
    assert abs(float(row[source])) > 1e-3  # a real edge, not two zeros


# ---------------------------------------------------------------------------------------------
# the planted feature


def test_the_top_path_to_the_answer_goes_through_the_planted_feature(planted, planted_graph):
    model, _, answer = planted
    g = planted_graph
    planted_node = g.feature(1, NEURON, len(g.tokens) - 1)
    assert float(g.activation[planted_node]) == pytest.approx(0.5, abs=1e-4)
    path = g.path()
    assert path[1:] == [planted_node, int(g.of("logit")[0])] and int(g.kind[path[0]]) == 2
    assert int(g.index[path[-1]]) == answer
    # exact transcoders: no error reaches anything beyond float32 round-off
    assert g.scores() == pytest.approx({"replacement": 1.0, "completeness": 1.0}, abs=1e-5)
    # the control: a random dictionary in layer 1 has no such path, and its errors carry the answer
    model_, exact, _ = planted
    noisy = attribute(model, PROMPT, [exact[0], random_transcoders(model)[1]], targets=[ANSWER], progress=False)
    assert all(not (int(noisy.layer[i]) == 1 and int(noisy.index[i]) == NEURON and int(noisy.kind[i]) == 0)
               for i in noisy.path())
    assert noisy.scores()["replacement"] < 0.99


def test_ablating_the_planted_feature_moves_the_logit_as_the_graph_predicts(planted, planted_graph):
    model, tcs, answer = planted
    g = planted_graph
    tokens = model.to_tokens(PROMPT)
    node = g.feature(1, NEURON, len(g.tokens) - 1)
    predicted = -float(g.adjacency[g.of("logit")[0], node])
    site = tcs[1].site_out
    _, clean = run.cache(model, tokens, [site])
    ablated = clean[site].clone()
    ablated[0, -1] -= float(g.activation[node]) * tcs[1].W_dec[NEURON]
    W_U = model.W_U.detach()

    def answer_logit(logits):  # the graph's logit node: the answer's logit minus the mean logit
        return float(logits[0, -1, answer] - logits[0, -1].mean())

    base = answer_logit(run.logits(model, tokens))
    frozen_change = answer_logit(run.logits(model, tokens, frozen(model, tokens) + [Patch(site, ablated, pos=-1)])) - base
    real_change = answer_logit(run.logits(model, tokens, [Patch(site, ablated, pos=-1)])) - base
    assert abs(predicted) > 0.2 and W_U.shape[1] == model.cfg.d_vocab
    assert frozen_change == pytest.approx(predicted, rel=1e-4, abs=1e-5)  # exact in the replacement model
    assert real_change == pytest.approx(predicted, rel=0.05)  # the final norm's scale moves a little


# ---------------------------------------------------------------------------------------------
# influence, scores, pruning (hand-checked numbers)


def _toy(adjacency, kinds, prob) -> AttributionGraph:
    n = len(kinds)
    return AttributionGraph(adjacency=torch.tensor(adjacency, dtype=torch.float), kind=torch.tensor(kinds),
                            layer=torch.tensor([{0: 0, 1: 0, 2: -1, 3: 1}[k] for k in kinds]),
                            pos=torch.zeros(n, dtype=torch.long), index=torch.arange(n),
                            activation=torch.ones(n), prob=torch.tensor(prob), tokens=("a",), meta={"n_layers": 1})


def test_influence_and_scores_by_hand():
    # nodes: feature f, error e, token t, logit L. f <- t (2), L <- f (3), L <- e (-1), L <- t (0)
    a = [[0, 0, 2, 0], [0, 0, 0, 0], [0, 0, 0, 0], [3, -1, 0, 0]]
    g = _toy(a, [0, 1, 2, 3], [0, 0, 0, 1.0])
    norm = normalized(g.adjacency)
    assert torch.allclose(norm[3], torch.tensor([0.75, 0.25, 0, 0]))
    inf = influence(norm, g.prob)
    assert torch.allclose(inf, torch.tensor([0.75, 0.25, 0.75, 0.0]))
    s = g.scores()
    assert s["replacement"] == pytest.approx(0.75 / (0.75 + 0.25))
    # completeness: non-error input shares (f 1, e 1, t 1, L 0.75) weighted by influence + prob (0.75, 0.25, 0.75, 1)
    assert s["completeness"] == pytest.approx((0.75 + 0.25 + 0.75 + 0.75) / 2.75)
    assert torch.allclose(cumulative(torch.tensor([0.25, 0.5, 0.25])), torch.tensor([0.75, 0.5, 1.0]))
    assert threshold_of(torch.tensor([4.0, 3.0, 2.0, 1.0]), 0.6) == 3.0  # 4 + 3 = 70 % >= 60 %
    with pytest.raises(InterpError, match="cycle"):
        influence(normalized(torch.tensor([[0.0, 1.0], [1.0, 0.0]])), torch.tensor([1.0, 0.0]), max_iter=10)


def test_pruning_keeps_influence_tokens_and_logits(llama_graph):
    _, g = llama_graph
    small = g.prune(0.5, 0.9)
    big = g.prune(0.9, 0.99)
    assert len(small) < len(big) < len(g)
    for p in (small, big):
        assert int((p.kind == 2).sum()) == len(g.tokens) and int((p.kind == 3).sum()) == int((g.kind == 3).sum())
        inner = (p.kind == 0) | (p.kind == 1)
        assert bool((p.adjacency != 0).any(0)[inner].all())  # every kept feature and error feeds something
        assert bool((p.adjacency[p.kind == 0] != 0).any(1).all())  # every kept feature has an input
        assert p.influence is not None and float(p.influence.max()) <= 1.0 + 1e-6
    assert set(small.ids) <= set(big.ids)
    full = g.scores()
    assert 0 < full["replacement"] < 1 and 0 < full["completeness"] < 1
    with pytest.raises(InterpError, match="fraction"):
        g.prune(1.5)


def test_max_feature_nodes_keeps_the_most_influential_rows(llama, llama_graph):
    tcs, g = llama_graph
    part = attribute(llama, "the keys to the cabinet", tcs, progress=False, max_feature_nodes=40, batch_size=8)
    assert int((part.kind == 0).sum()) == 40 and int((part.kind == 1).sum()) == int((g.kind == 1).sum())
    where = {x: i for i, x in enumerate(g.ids)}
    cols = torch.tensor([where[x] for x in part.ids])
    for i in part.of("feature").tolist()[:10]:  # the same rows as the full graph's, over the kept columns
        assert torch.allclose(part.adjacency[i], g.adjacency[where[part.ids[i]], cols], atol=1e-5)


# ---------------------------------------------------------------------------------------------
# saving, Neuronpedia JSON, bad input


def test_saves_and_loads(tmp_path, llama_graph):
    _, g = llama_graph
    assert results.load(results.save(g, tmp_path / "g.safetensors")) == g
    assert g.model == "tiny_llama" or "sha" not in g.model and "/" not in g.model
    assert "AttributionGraph(" in repr(g) and g.model in repr(g)


def test_neuronpedia_json_round_trip(tmp_path, llama_graph):
    _, g = llama_graph
    data = to_neuronpedia(g, slug="llama-keys")
    assert set(data) == {"metadata", "qParams", "nodes", "links"}
    m = data["metadata"]
    assert m["slug"] == "llama-keys" and m["prompt_tokens"] == list(g.tokens) and m["node_threshold"] == 0.8
    types = {n["feature_type"] for n in data["nodes"]}
    assert types == {"cross layer transcoder", "mlp reconstruction error", "embedding", "logit"}
    node = next(n for n in data["nodes"] if n["feature_type"] == "cross layer transcoder")
    layer, feat, pos = map(int, node["node_id"].split("_"))
    assert node["layer"] == str(layer) and node["ctx_idx"] == pos
    assert node["feature"] == (layer + feat) * (layer + feat + 1) // 2 + feat  # circuit-tracer's Cantor pairing
    logits = [n for n in data["nodes"] if n["feature_type"] == "logit"]
    assert sum(n["is_target_logit"] for n in logits) == 1 and logits[0]["layer"] == str(g.meta["n_layers"] + 1)
    assert all({"source", "target", "weight"} == set(link) for link in data["links"])
    back = from_neuronpedia(json.loads(json.dumps(data)))
    assert back == g.prune()
    assert back != g.prune(0.5)  # equality can fail
    path = write_neuronpedia(g, tmp_path / "keys.json")
    assert from_neuronpedia(path) == back and json.loads(path.read_text())["metadata"]["slug"] == "keys"
    # a file without interp's own fields (as circuit-tracer writes it) still loads, by its standard fields
    del data["metadata"]["info"]
    plain = from_neuronpedia(data)
    assert plain.ids == back.ids and torch.equal(plain.adjacency, back.adjacency) and plain.meta["n_layers"] == 2
    with pytest.raises(InterpError, match="lacks"):
        from_neuronpedia({"nodes": []})


SCHEMA = Path(__file__).parent / "data" / "neuronpedia_graph_schema.json"  # Neuronpedia's published graph schema
# (hijohnnylin/neuronpedia apps/webapp/app/api/graph/graph-schema.json at ebb8426f, August 2026)


@pytest.mark.parametrize("options", [{}, {"prune": False}, {"prune": False, "scan": "gpt2-small"},
                                     {"node_threshold": 0.5, "edge_threshold": 0.9}, {"node_threshold": 1.0, "edge_threshold": 1.0},
                                     {"prune": False, "pruned_first": True}], ids=str)
def test_neuronpedia_export_is_valid_under_the_published_schema(llama_graph, options):
    """Every option of to_neuronpedia writes a file Neuronpedia's schema accepts (required fields,
    their types; no null where it wants a number), and it loads back to the graph exported."""
    import jsonschema

    _, g = llama_graph
    options = dict(options)
    if options.pop("pruned_first", False):
        g = g.prune(0.7, 0.95)
    data = json.loads(json.dumps(to_neuronpedia(g, slug="s", **options)))
    jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).validate(data)
    m = data["metadata"]
    assert None not in (m.get("node_threshold", 0), *m.get("pruning_settings", {}).values())
    if options.get("prune", True):
        assert m["node_threshold"] == options.get("node_threshold", 0.8) == m["pruning_settings"]["node_threshold"]
    elif "node_threshold" not in g.meta:
        assert "node_threshold" not in m and "pruning_settings" not in m
    want = g.prune(options.get("node_threshold", 0.8), options.get("edge_threshold", 0.98)) if options.get("prune", True) else g
    back = from_neuronpedia(data)
    assert back.ids == want.ids and torch.equal(back.adjacency, want.adjacency)


def test_neuronpedia_json_is_strict_with_odd_tokens_and_refuses_nan(llama_graph, tmp_path):
    """Token strings with quotes, newlines, HTML, emoji and line separators make strict JSON (no
    NaN) that reads back to the same tokens; a NaN in the graph's meta (written as a bare NaN
    before, which JSON parsers refuse) or a lone surrogate is refused and nothing is written."""
    _, g = llama_graph
    odd = ('"q" \\ \'s\'', "a\nb\r\tc", "</script><b>&amp;", "é😀\u2028\u2029\x00")
    assert len(g.tokens) > len(odd)
    g = replace(g, tokens=odd + g.tokens[len(odd):])
    path = write_neuronpedia(g, tmp_path / "odd.json")

    def no_constants(name):
        raise AssertionError(f"{name} is not JSON")

    data = json.loads(path.read_text(encoding="utf-8"), parse_constant=no_constants)
    assert from_neuronpedia(data).tokens == g.tokens
    for bad in (replace(g, meta={**g.meta, "seconds": float("nan")}), replace(g, tokens=("\ud800",) + g.tokens[1:])):
        with pytest.raises(InterpError, match="has no Neuronpedia JSON"):
            write_neuronpedia(bad, tmp_path / "bad.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd.json"]


def test_bad_input_is_refused(llama):
    tcs = random_transcoders(llama)
    sae = replace(tcs[0], site_out=tcs[0].site_in)
    with pytest.raises(InterpError, match="transcoders"):
        attribute(llama, "the keys", [sae])
    with pytest.raises(InterpError, match="two transcoders"):
        attribute(llama, "the keys", [tcs[0], tcs[0]])
    with pytest.raises(InterpError, match="one prompt"):
        attribute(llama, llama.to_tokens(["the keys", "the cat"]), tcs)
    with pytest.raises(InterpError, match="single token"):
        attribute(llama, "the keys", tcs, targets=["the keys"])
    with pytest.raises(InterpError, match="no transcoders"):
        attribute(llama, "the keys", [])


@pytest.mark.parametrize("options,match", [
    ({"baseline": 10**6}, r"baseline must be .* a vocab id in \[0, "),
    ({"baseline": -5}, "baseline must be"),  # it used to count from the end of the vocabulary
    ({"max_logits": 0}, "max_logits must be an int >= 1"),
    ({"logit_prob": 2.0}, r"logit_prob must be a probability in \(0, 1\]"),
    ({"logit_prob": float("nan")}, "logit_prob must be"),
    ({"batch_size": True}, "batch_size must be an int"),
    ({"max_feature_nodes": -3}, "max_feature_nodes must be an int >= 0"),
    ({"targets": "keys"}, r"targets must be a list .* pass \[answer\]"),  # not one target per character
    ({"targets": ["keys", 3]}, "all vocab ids or all answer strings"),
    ({"targets": [True]}, "all vocab ids or all answer strings"),
], ids=["baseline-past-vocab", "baseline-negative", "no-logits", "prob-above-1", "prob-nan", "batch-bool",
        "negative-budget", "targets-string", "targets-mixed", "targets-bool"])
def test_attribute_refuses_nonsense_options(llama, options, match):
    with pytest.raises(InterpError, match=match):
        attribute(llama, "the keys", random_transcoders(llama), progress=False, **options)


def test_transcoders_keyed_by_the_wrong_layer_are_refused(llama):
    tcs = random_transcoders(llama)
    with pytest.raises(InterpError, match=r"transcoders\[1\] is .* at layer 0; key each by its own layer"):
        attribute(llama, "the keys", {1: tcs[0]}, progress=False)


# ---------------------------------------------------------------------------------------------
# the view


def _evil(g: AttributionGraph) -> AttributionGraph:
    tokens = (EVIL,) + g.tokens[1:]
    node = g.ids[int(g.of("feature")[0])]
    return replace(g, tokens=tokens, labels={node: EVIL})


def test_view_html_escapes_and_registers(llama_graph):
    _, g = llama_graph
    p = _evil(g.prune())
    v = plot.render(p)
    assert type(v).__name__ == "GraphView"
    text = v.html()
    assert EVIL not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert text.count('class="gnode"') == len(p)  # a pruned graph's nodes all carry an edge (or are tokens, logits)
    with pytest.raises((InterpError, TypeError), match="AttributionGraph"):  # jaxtyping's check in tests, ours outside
        view("not a graph")


@pytest.mark.browser
def test_graph_view_in_chromium(browser, llama_graph, tmp_path):
    _, g = llama_graph
    p = _evil(g.prune())
    feature = int(p.of("feature")[0])
    key = (int(p.layer[feature]), int(p.index[feature]))
    path = tmp_path / "graph.html"
    path.write_text(graph_html(p, shown=5, examples={key: ["an <b>example</b> text"]}))
    page = Page(browser, path)
    pg = page.page
    assert pg.locator("g.gnode").count() == len(p)
    assert page.visible_edges() == 5
    pg.locator("input[type=number]").fill("2")
    assert page.visible_edges() == 2 and pg.locator("input[type=range]").input_value() == "2"
    edges = sorted(zip(*torch.nonzero(p.adjacency, as_tuple=True)), key=lambda ts: -abs(float(p.adjacency[ts])))[:2]
    touched = {p.ids[int(x)] for ts in edges for x in ts}
    lit = pg.evaluate("Array.from(document.querySelectorAll('g.gnode:not(.dim)')).map(e => e.getAttribute('data-keys'))")
    assert set(lit) == touched
    # hovering a feature shows what it is, its label and its dashboard examples, all as text
    pg.locator(f'g.gnode[data-i="{feature}"]').hover()
    tip = pg.locator("[id$=-tip]")
    assert tip.is_visible()
    text = tip.inner_text()
    assert f"L{key[0]} #{key[1]}" in text and EVIL in text and "an <b>example</b> text" in text
    assert tip.locator("b").count() == 0 and tip.locator("script").count() == 0
    pg.mouse.move(2, 2)
    assert not tip.is_visible()
    assert EVIL in pg.locator(".example").inner_text()
    assert pg.evaluate("Array.from(document.scripts).every(s => s.text.trim() !== 'alert(1)')")
    page.clean()


# ---------------------------------------------------------------------------------------------
# SmolLM2: an IOI and a capital-city graph, rendered, exported and read back (the doc's numbers come
# from trained transcoders, benchmarks/graphs.py; here hand-made ones keep the test fast)


def _matched(model, tokens, layers, n=256, k=8, seed=0) -> list[Dictionary]:
    """Random transcoders at `layers` whose thresholds let about k features fire per position."""
    sites = [f"blocks.{l}.ln2.hook_normalized" for l in layers]
    _, acts = run.cache(model, tokens, sites)
    g = torch.Generator().manual_seed(seed)
    d = model.cfg.d_model
    out = []
    for layer, site in zip(layers, sites):
        w = torch.randn(d, n, generator=g) / d**0.5
        thr = float((acts[site][0, 1:].float() @ w).flatten().quantile(1 - k / n))
        out.append(Dictionary(w, torch.zeros(n), torch.randn(n, d, generator=g) * 0.05, torch.zeros(d), site,
                              f"blocks.{layer}.hook_mlp_out", threshold=torch.full((n,), thr), model="smollm2-135m"))
    return out


@pytest.mark.browser
@pytest.mark.parametrize("prompt,answer", [("The capital of France is", " Paris"),
                                           ("When Mary and John went to the store, John gave a drink to", " Mary")])
def test_smollm2_graphs_render_export_and_load_back(smollm2, browser, tmp_path, prompt, answer):
    tokens = smollm2.to_tokens(prompt)
    tcs = _matched(smollm2, tokens, [3, 20])
    g = attribute(smollm2, prompt, tcs, targets=[answer], max_feature_nodes=48, batch_size=32, progress=False)
    assert g.model == "smollm2-135m" and int((g.kind == 0).sum()) == 48 and g.tokens[-1] == smollm2.to_str_tokens(tokens[0])[-1]
    assert g.meta["logit_tokens"] == {str(int(g.index[-1])): answer} and g.meta["drop_bos"]
    pruned = g.prune()
    assert from_neuronpedia(json.loads(json.dumps(to_neuronpedia(g, slug="smollm2")))) == pruned
    path = tmp_path / "smollm2.html"
    path.write_text(graph_html(pruned))
    page = Page(browser, path)
    assert page.page.locator("g.gnode").count() == len(pruned) and page.visible_edges() >= 1
    shown = page.page.evaluate("document.querySelector('.example').textContent")  # raw text, spaces kept
    assert shown == "prompt: " + " | ".join(pruned.tokens)
    page.clean()


def test_hover_examples_come_from_the_feature_dashboard(llama, llama_graph):
    from interp.features import top_examples
    from interp.features.graph_view import examples_of

    tcs, g = llama_graph
    p = g.prune()
    feature = int(p.of("feature")[0])
    layer, index = int(p.layer[feature]), int(p.index[feature])
    rows = llama.to_tokens(["the keys to the cabinet", "the cat sees the dog", "mary gave a drink to john"])
    tops = top_examples(llama, rows, tcs[layer], features=[index], k=2, before=2, after=1)
    found = examples_of({layer: tops})[(layer, index)]
    assert found and all("[[" in t and "]]" in t for t in found)
    html_text = view(p, examples=examples_of({layer: tops})).html()
    import re

    data = json.loads(re.search(r'<script type="application/json" id="[^"]+-data">(.*?)</script>', html_text).group(1))
    assert data["nodes"][str(feature)]["examples"] == found[:5]
