"""QK attribution (interp.features.qk) and attention edges in attribution graphs.

The planted model: a 2-layer GPT-2-family model whose layer-0 MLP has two neurons, one firing on
the token "mary" and writing direction u, one firing on "john" and writing w (every other layer-0
MLP weight and the layer-0 attention output are zero). Head 0 of layer 1 reads u in its query and
w in its key, so a "mary" query attends to the "john" key, and its value / output write the
answer's unembedding direction: attention carries the answer. A cross-layer transcoder is trained
on the model (seconds); the QK attribution of that attention edge must put the "mary" feature at
the query and the "john" feature at the key on top, and a random head of the same layer (the
control) must not.

Invariants: on the zoo's gpt2- and llama-family tiny models (RoPE, grouped-query heads), with
per-layer transcoders and with a CLT, the terms of every edge sum to the model's own
hook_attn_scores.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
import torch

import interp
from interp import results, run
from interp.errors import InterpError
from interp.features.attribute import attribute
from interp.features.clt import activations, fit_clt
from interp.features.graph_view import graph_html, view
from interp.features.qk import FEATURE, QKAttribution, attention_edges, qk_attribution, with_attention
from interp.features.train import Recipe
from test_features_clt import random_clt
from test_features_graph import random_transcoders
from test_circuit_view import Page, browser  # noqa: F401  (the shared Chromium fixture and page wrapper)

QUERY_WORD, KEY_WORD, ANSWER = "mary", "john", "cabinet"
PROMPT = "the john sees a dog , mary"
pytestmark = pytest.mark.filterwarnings("ignore:A forward hook edited hook_scale")


def _unit(d: int, i: int, j: int) -> torch.Tensor:
    """(e_i - e_j) / sqrt 2: a unit direction with zero mean, which LayerNorm's centring keeps."""
    v = torch.zeros(d)
    v[i], v[j] = 2**-0.5, -(2**-0.5)
    return v


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """(model, tokenizer, u, w): the model of the module docstring."""
    from interp.model.building import DEFAULT_WORDS, hf_config, hf_model_class, save_model_dir
    from interp.tasks.base import word_tokenizer

    tok = word_tokenizer(DEFAULT_WORDS)
    cfg = hf_config("gpt2", vocab_size=len(tok), d_model=32, n_layers=2, n_heads=4)
    cfg.activation_function = "relu"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        hf = hf_model_class("gpt2")(cfg).eval()
    d, t = 32, hf.transformer
    e_q, e_k, u, w = _unit(d, 0, 1), _unit(d, 2, 3), _unit(d, 4, 5), _unit(d, 6, 7)
    r = torch.ones(8) / 8**0.5  # head 0's query and key read along r of its 8 dims
    with torch.no_grad():
        t.wte.weight[tok.convert_tokens_to_ids(QUERY_WORD)] += e_q
        t.wte.weight[tok.convert_tokens_to_ids(KEY_WORD)] += e_k
        t.h[0].attn.c_proj.weight.zero_()
        t.h[0].attn.c_proj.bias.zero_()
        mlp = t.h[0].mlp
        mlp.c_proj.weight.zero_()
        mlp.c_proj.bias.zero_()
        for neuron, read, write in ((0, e_q, u), (1, e_k, w)):  # ln(x) . read is about 5.7 on its token, below 3.5 elsewhere
            mlp.c_fc.weight[:, neuron] = read
            mlp.c_fc.bias[neuron] = -3.5
            mlp.c_proj.weight[neuron] = 3 * write
        attn = t.h[1].attn
        attn.c_attn.weight[:, 0:8] = torch.outer(u, r)  # head 0's query reads u
        attn.c_attn.weight[:, d:d + 8] = torch.outer(w, r)  # its key reads w
        attn.c_attn.weight[:, 2 * d:2 * d + 8] = torch.outer(w, r)  # its value too
        attn.c_attn.bias[: 3 * d].zero_()
        answer = tok.convert_tokens_to_ids(ANSWER)
        direction = hf.lm_head.weight[answer] - hf.lm_head.weight.mean(0)
        attn.c_proj.weight[0:8] = torch.outer(r, direction / direction.norm())  # ... and its output writes the answer
    model = interp.load(str(save_model_dir(hf, tok, tmp_path_factory.mktemp("qk") / "planted")))
    return model, tok, u, w


@pytest.fixture(scope="module")
def trained(planted):
    """A CLT trained on the planted model: random rows of words, "mary" and "john" in many."""
    from interp.model.building import DEFAULT_WORDS

    model, tok, _, _ = planted
    g = torch.Generator().manual_seed(0)
    words = torch.tensor([tok.convert_tokens_to_ids(x) for x in DEFAULT_WORDS])
    rows = words[torch.randint(len(words), (400, 8), generator=g)]
    rows[torch.rand(rows.shape, generator=g) < 0.15] = tok.convert_tokens_to_ids(QUERY_WORD)
    rows[torch.rand(rows.shape, generator=g) < 0.15] = tok.convert_tokens_to_ids(KEY_WORD)
    tokens = torch.cat([torch.full((400, 1), tok.bos_token_id), rows], 1)
    x, y = activations(model, tokens)
    return fit_clt(x, y, recipe=Recipe(n_features=32, k=1, tokens=40_000, lr=1e-2, checkpoint_every=20), batch=256)


def _planted_features(clt, u, w) -> tuple[int, int]:
    """The CLT's layer-0 features whose layer-0 writes point most along u and along w."""
    dec = torch.nn.functional.normalize(clt.W_dec[0][:, 0], dim=-1)
    return int((dec @ u).argmax()), int((dec @ w).argmax())


def test_the_planted_pair_tops_the_qk_attribution(planted, trained):
    model, tok, u, w = planted
    clt = trained
    f_q, f_k = _planted_features(clt, u, w)
    dec = torch.nn.functional.normalize(clt.W_dec[0][:, 0], dim=-1)
    assert float(dec[f_q] @ u) > 0.9 and float(dec[f_k] @ w) > 0.9  # training found the planted neurons
    tokens = model.to_tokens(PROMPT)
    strings = model.to_str_tokens(tokens[0])
    q, k = len(strings) - 1, strings.index(KEY_WORD)
    planted_edge, control = qk_attribution(model, tokens, clt, [(1, 0, q, k), (1, 1, q, k)])
    for qk in (planted_edge, control):  # the terms sum to the model's score
        _, cache = run.cache(model, tokens, ["blocks.1.attn.hook_attn_scores"])
        assert float(qk.terms.sum()) == pytest.approx(float(cache["blocks.1.attn.hook_attn_scores"][0, qk.head, q, k]), abs=1e-4)
    i, j, top = planted_edge.top(1)[0]
    assert planted_edge.query_parts[i].tolist() == [FEATURE, 0, q, f_q]
    assert planted_edge.key_parts[j].tolist() == [FEATURE, 0, k, f_k]
    assert top > 0.2 * planted_edge.score and planted_edge.pattern > 0.9  # "john" splits over a few features

    def share(qk):  # the planted pair's share of all |terms|
        qi = [p.tolist() for p in qk.query_parts].index([FEATURE, 0, q, f_q])
        kj = [p.tolist() for p in qk.key_parts].index([FEATURE, 0, k, f_k])
        return abs(float(qk.terms[qi, kj])) / float(qk.terms.abs().sum())

    assert share(planted_edge) > 0.2
    # the control, a head of the same layer left at its random start: the planted pair does not drive it
    ci, cj, _ = control.top(1)[0]
    assert (control.query_parts[ci].tolist(), control.key_parts[cj].tolist()) != ([FEATURE, 0, q, f_q], [FEATURE, 0, k, f_k])
    assert "L0" in planted_edge.label(planted_edge.query_parts[i]) and repr(QUERY_WORD) in planted_edge.label(planted_edge.query_parts[i])


def test_the_graph_over_the_clt_carries_the_attention_edge(planted, trained, tmp_path):
    model, tok, u, w = planted
    clt = trained
    f_q, f_k = _planted_features(clt, u, w)
    g = attribute(model, PROMPT, clt, targets=[ANSWER], progress=False)
    q, k = len(g.tokens) - 1, list(g.tokens).index(KEY_WORD)
    logit = int(g.of("logit")[0])
    feats = g.of("feature")
    strongest = int(feats[g.adjacency[logit, feats].abs().argmax()])
    assert (int(g.layer[strongest]), int(g.index[strongest]), int(g.pos[strongest])) == (0, f_k, k)  # the key's feature, via head 0
    assert attention_edges(model, PROMPT, 1)[0] == (1, 0, q, k)  # the edge that moves most
    annotated = with_attention(g, model, clt, n=3, top=5)
    edge = annotated.meta["attention"][0]
    assert (edge["layer"], edge["head"], edge["query"], edge["key"]) == (1, 0, q, k)
    assert edge["pairs"][0]["query_node"] == f"0_{f_q}_{q}" and edge["pairs"][0]["key_node"] == f"0_{f_k}_{k}"
    assert sum(p["weight"] for p in edge["pairs"]) + edge["rest"] == pytest.approx(edge["score"], abs=1e-5)
    assert results.load(results.save(annotated, tmp_path / "g.safetensors")) == annotated


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("kind", ["per-layer", "clt"])
def test_terms_sum_to_the_score_on_the_zoo_families(tiny_models, family, kind):
    model = tiny_models[family]
    tcs = random_transcoders(model) if kind == "per-layer" else random_clt(model.cfg.n_layers, model.cfg.d_model, skip=True)
    tokens = model.to_tokens("the keys to the cabinet")
    edges = attention_edges(model, tokens, 6) + [(1, 1, 5, 0), (0, 2, 3, 3)]  # a BOS key and a self edge too
    found = qk_attribution(model, tokens, tcs, edges)
    _, cache = run.cache(model, tokens, [f"blocks.{l}.attn.hook_attn_scores" for l in range(model.cfg.n_layers)])
    assert sorted((x.layer, x.head, x.query, x.key) for x in found) == sorted(edges)
    for x in found:
        want = float(cache[f"blocks.{x.layer}.attn.hook_attn_scores"][0, x.head, x.query, x.key])
        assert float(x.terms.sum()) == pytest.approx(want, abs=1e-4, rel=1e-4)
        assert x.score == pytest.approx(want, abs=1e-6)
    assert any(x.layer == 1 and (x.query_parts[:, 0] == FEATURE).any() for x in found)  # features take part


def test_a_soft_capped_score_with_its_own_scale_is_attributed_before_the_cap(tmp_path):
    """Gemma-2 soft-caps scores (c * tanh(s / c)) and scales <q, k> by query_pre_attn_scalar ** -0.5,
    not d_head ** -0.5: with a scalar of 2 (d_head 8) and queries and keys scaled up until the cap
    bends the scores, the terms sum to the score before the cap and the cap of that sum is the model's."""
    import json as _json

    folder = interp.build_tiny("gemma2", tmp_path / "g2", seed=0)
    cfg_file = folder / "config.json"
    cfg = _json.loads(cfg_file.read_text())
    cfg["query_pre_attn_scalar"] = 2
    cfg_file.write_text(_json.dumps(cfg))
    model = interp.load(str(folder))
    with torch.no_grad():
        for name, w in model.original_model.named_parameters():
            if "q_proj" in name or "k_proj" in name:
                w.mul_(30)
    tokens = model.to_tokens("the keys to the cabinet")
    found = qk_attribution(model, tokens, random_transcoders(model), [(1, 0, 4, 1), (1, 1, 3, 0), (0, 2, 5, 2)])
    _, cache = run.cache(model, tokens, [f"blocks.{l}.attn.hook_attn_scores" for l in range(2)])
    cap = cfg["attn_logit_softcapping"]
    bent = 0
    for x in found:
        capped = float(cache[f"blocks.{x.layer}.attn.hook_attn_scores"][0, x.head, x.query, x.key])
        assert float(x.terms.sum()) == pytest.approx(x.score, abs=1e-5)
        assert cap * torch.tanh(torch.tensor(x.score / cap)).item() == pytest.approx(capped, abs=1e-3, rel=1e-4)
        assert x.meta["softcap"] == cap and x.meta["capped_score"] == pytest.approx(capped, abs=1e-6)
        bent += abs(x.score - capped) > 1e-2  # the cap matters here: the sum is not the capped score
    assert bent >= 1


def test_bad_edges_are_refused(llama):
    tcs = random_transcoders(llama)
    with pytest.raises(InterpError, match="key <= query"):
        qk_attribution(llama, "the keys to", tcs, [(0, 0, 1, 2)])
    with pytest.raises((InterpError, TypeError), match="int"):  # jaxtyping's check in tests, ours outside
        qk_attribution(llama, "the keys to", tcs, [(0, 0, 1, 1.5)])
    with pytest.raises(InterpError, match="no attention edges"):
        qk_attribution(llama, "the keys to", tcs, [])
    qk = qk_attribution(llama, "the keys to", tcs, [(1, 0, 2, 1)])[0]
    assert isinstance(qk, QKAttribution) and "L1 H0" in repr(qk)


# ---------------------------------------------------------------------------------------------
# the view


EVIL = "<script>alert(1)</script>"


def test_the_view_lists_attention_edges_and_escapes(llama):
    tcs = random_transcoders(llama)
    g = with_attention(attribute(llama, "the keys to the cabinet", tcs, progress=False, batch_size=16), llama, tcs, n=3, top=4)
    rows = g.meta["attention"]
    rows[0]["pairs"][0]["query"] = EVIL  # a part's label carries a token string
    g = replace(g, tokens=(EVIL,) + g.tokens[1:], meta={**g.meta, "attention": rows})
    text = view(g.prune()).html()
    assert EVIL not in text and "&lt;script&gt;" in text  # the arcs' and the list's labels, escaped
    data = json.loads(re.search(r'<script type="application/json" id="[^"]+-data">(.*?)</script>', text).group(1))
    assert len(data["attention"]) == 3 and len(data["attention"][0]["pairs"]) == 4
    assert text.count('class="attn-edge"') == 3


@pytest.mark.browser
def test_selecting_an_attention_edge_shows_its_pairs(browser, planted, trained, tmp_path):
    """In Chromium: the first edge's pairs show on load; clicking another arc (or choosing it in
    the list) shows that edge's pairs, as text (a label holding markup stays text)."""
    model, _, _, _ = planted
    g = with_attention(attribute(model, PROMPT, trained, targets=[ANSWER], progress=False), model, trained, n=3, top=4)
    rows = g.meta["attention"]
    rows[1]["pairs"][0]["key"] = EVIL
    path = tmp_path / "qk.html"
    path.write_text(graph_html(replace(g, meta={**g.meta, "attention": rows})))
    page = Page(browser, path)
    pg = page.page
    cells = lambda: pg.locator("tbody[id$=-pairs] td").all_inner_texts()  # noqa: E731
    first = cells()
    assert len(first) == 12 and first[0] == rows[0]["pairs"][0]["query"] and first[1] == rows[0]["pairs"][0]["key"]
    pg.locator('g.attn-edge[data-a="1"] path.hit').dispatch_event("click")
    assert cells()[1] == EVIL and pg.locator("tbody[id$=-pairs] script").count() == 0
    assert pg.locator("select[id$=-attn]").input_value() == "1"
    assert pg.locator('g.attn-edge.on').get_attribute("data-a") == "1"
    pg.locator("select[id$=-attn]").select_option("2")
    assert cells()[0] == rows[2]["pairs"][0]["query"]
    assert "score" in pg.locator("[id$=-rest]").inner_text()
    page.clean()
