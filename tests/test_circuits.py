"""interp.circuits: the Graph, EAP / EAP-IG / exact edge scores, circuits and faithfulness, the CLI.

Ground truth: a planted circuit (hand-set weights in which one head copies a name token to the
answer position), parity with TransformerLens's edge attribution, exact patching against a plain
hooked forward, and the faithfulness identities (the full circuit is the clean run; with
resample ablation the empty circuit is the corrupt run).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

import interp
from interp import metrics
from interp.circuits import (
    Faithfulness,
    Graph,
    eap,
    eap_ig,
    edge_list,
    exact,
    faithfulness,
    faithfulness_curve,
    greedy,
    has_path,
)
from interp.circuits.exact import AddTo
from interp.circuits.graph import receiver_nodes, sender_nodes
from interp.circuits.pipeline import summary, task_for, with_example
from interp.circuits.wiring import split_inputs
from interp.errors import InterpError
from interp.model.building import DEFAULT_WORDS, hf_config, hf_model_class, save_model_dir
from interp.tasks.base import Task, word_tokenizer

META = {"n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "method": "eap"}


# ---- the Graph (no model) -----------------------------------------------------------------------


def test_edge_list_counts_and_order():
    # per receiver, every sender that writes before it reads: 2 layers x 4 heads, 2 KV groups
    senders, receivers = edge_list(2, 4, 2)
    assert sender_nodes(2, 4, 2) == ["embed", "a0.h0", "a0.h1", "a0.h2", "a0.h3", "m0",
                                     "a1.h0", "a1.h1", "a1.h2", "a1.h3", "m1"]
    assert receiver_nodes(2, 4, 2)[:6] == ["a0.h0.q", "a0.h1.q", "a0.g0.k", "a0.g0.v", "a0.h2.q", "a0.h3.q"]
    # layer-0 q/k/v (4 + 2 + 2 receivers) read 1 sender, m0 reads 5, layer-1 inputs 6 each, m1 10, logits 11
    assert len(senders) == 8 * 1 + 5 + 8 * 6 + 10 + 11
    assert ("a0.h3", "m0") in set(zip(senders, receivers)) and ("m0", "a0.h0.q") not in set(zip(senders, receivers))


def test_graph_roundtrip_top_heads(tmp_path):
    s, r = edge_list(2, 4, 2)
    scores = torch.linspace(-1, 2, len(s))
    g = Graph(s, r, scores, dict(META))
    assert len(g) == len(s) and "82 edges" in repr(g)
    back = Graph.load(g.save(tmp_path / "g.safetensors"))
    assert back.senders == g.senders and torch.equal(back.scores, g.scores) and back.meta == g.meta
    top = g.top(3)
    assert top.scores.tolist() == pytest.approx([2.0, 2.0 - 3 / 81, 2.0 - 6 / 81], abs=1e-5)
    assert g.score(top.senders[0], top.receivers[0]) == pytest.approx(2.0)
    frame = g.to_frame()
    assert list(frame.columns) == ["sender", "receiver", "score"] and len(frame) == len(g)
    # an edge counts for each head it touches (a head-to-head edge for both); a KV group's k/v
    # score is shared evenly by its two query heads, so the total is kept
    heads = g.heads()
    assert heads.axes == ("layer", "head")
    touching = sum(abs(v) * (a.startswith("a") + b.startswith("a")) for a, b, v in zip(s, r, scores.tolist()))
    assert float(heads.values.sum()) == pytest.approx(touching, rel=1e-5)
    assert g.to_grid().meta["chart"] == "bar" and len(g.to_grid(5)) == 5
    assert g.nodes[0] == "embed" and g.nodes[-1] == "logits" and len(g.nodes) == len(set(g.nodes))


@pytest.mark.parametrize("senders, receivers, match", [
    (("a5.h0",), ("logits",), "unknown sender 'a5.h0'; nearest valid"),
    (("embed",), ("a0.h0.k",), "unknown receiver 'a0.h0.k'"),  # k inputs belong to KV groups
    (("a1.h0",), ("a1.h0.q",), "goes backwards"),
    (("m1",), ("m1",), "goes backwards"),
    (("bogus",), ("logits",), "unknown sender 'bogus'"),
])
def test_graph_rejects_bad_nodes(senders, receivers, match):
    with pytest.raises(InterpError, match=match):
        Graph(senders, receivers, torch.zeros(1), dict(META))


def test_graph_lookup_names_nearest():
    g = Graph(*edge_list(2, 4, 2), torch.zeros(82), dict(META))
    with pytest.raises(InterpError, match="nearest valid: .*a1.h2"):
        g.score("a1.h22", "logits")


def test_has_path_and_greedy():
    s, r = edge_list(2, 4, 2)
    g = Graph(s, r, torch.zeros(len(s)), dict(META))
    at = {e: i for i, e in enumerate(zip(s, r))}
    scores = torch.zeros(len(s))
    for e, v in {("a1.h2", "logits"): -5.0, ("embed", "a1.g1.v"): 4.0, ("embed", "logits"): 0.5, ("m0", "m1"): 3.0}.items():
        scores[at[e]] = v
    g = replace(g, scores=scores)
    assert not has_path(g.select([at["m0", "m1"]]))
    assert not has_path(g.select([at["a1.h2", "logits"]]))
    assert has_path(g.select([at["a1.h2", "logits"], at["embed", "a1.g1.v"]]))  # v of group 1 feeds head 2
    # greedy grows from the logits: m0 -> m1 (3.0) is not reachable until m1 is in the circuit
    chosen = greedy(g, 3)
    assert list(zip(chosen.senders, chosen.receivers)) == [("a1.h2", "logits"), ("embed", "a1.g1.v"), ("embed", "logits")]


# ---- a planted circuit ----------------------------------------------------------------------


def _planted(family: str, directory) -> tuple[str, Task, set]:
    """2 layers, d_model 32, 4 heads (LLaMA: 2 KV groups). Head 1.2 attends uniformly (its query
    weights are zero), its value reads dims 0/1 of the residual and its output writes them back;
    "mary" and "john" embed (and, tied, unembed) on dims 0 and 1. So the name at position 0 or 1
    reaches the answer through embed -> a1.<v of head 2> and a1.h2 -> logits; the rest is random."""
    tok = word_tokenizer(DEFAULT_WORDS)
    kv = 2 if family == "llama" else 4
    cfg = hf_config(family, vocab_size=len(tok), d_model=32, n_layers=2, n_heads=4,
                    n_kv_heads=kv if family == "llama" else None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        m = hf_model_class(family)(cfg)
    mary, john = tok.convert_tokens_to_ids(["mary", "john"])
    dh, head, group, gain = 8, 2, 2 // (4 // kv), 4.0
    with torch.no_grad():
        emb = m.get_input_embeddings().weight
        emb[:, :2] = 0
        emb[mary, 0] = emb[john, 1] = 1.0
        if family == "gpt2":
            w = m.transformer.h[1].attn.c_attn.weight  # [d, 3d] = q | k | v, applied as x @ w
            w[:, head * dh:(head + 1) * dh] = 0
            v0 = 2 * 32 + head * dh
            w[:, v0:v0 + dh] = 0
            w[0, v0] = w[1, v0 + 1] = gain
            o = m.transformer.h[1].attn.c_proj.weight  # [d, d], z @ o
            o[head * dh:(head + 1) * dh] = 0
            o[head * dh, 0] = o[head * dh + 1, 1] = gain
        else:
            a = m.model.layers[1].self_attn
            a.q_proj.weight[head * dh:(head + 1) * dh] = 0
            a.v_proj.weight[group * dh:(group + 1) * dh] = 0
            a.v_proj.weight[group * dh, 0] = a.v_proj.weight[group * dh + 1, 1] = gain
            a.o_proj.weight[:, head * dh:(head + 1) * dh] = 0
            a.o_proj.weight[0, head * dh] = a.o_proj.weight[1, head * dh + 1] = gain
    save_model_dir(m, tok, directory)
    ids = lambda text: tok(text)["input_ids"]
    clean = torch.tensor([ids("mary the cat sees the dog"), ids("a mary dog is the cat")] * 2)
    corrupt = torch.tensor([ids("john the cat sees the dog"), ids("a john dog is the cat")] * 2)
    n = len(clean)
    task = Task("planted", "x", clean, corrupt, torch.full((n,), mary), torch.full((n,), john),
                torch.full((n,), clean.shape[1] - 1), ("",) * n)
    return str(directory), task, {("embed", f"a1.g{group}.v"), ("a1.h2", "logits")}


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def planted(request, tmp_path_factory):
    path, task, edges = _planted(request.param, tmp_path_factory.mktemp(f"planted-{request.param}"))
    return interp.load(path), task, edges


@pytest.mark.parametrize("method", ["eap", "eap-ig", "exact"])
def test_planted_edges_rank_first(planted, method):
    model, task, want = planted
    g = {"eap": lambda: eap(model, task, progress=False), "eap-ig": lambda: eap_ig(model, task, steps=4, progress=False),
         "exact": lambda: exact(model, task, progress=False)}[method]()
    top = g.top(2)
    assert set(zip(top.senders, top.receivers)) == want
    assert (top.scores < 0).all()  # corrupting the name lowers logit(mary) - logit(john)
    # the planted pair dwarfs every other edge
    assert float(g.top(3).scores.abs()[2]) < 0.25 * float(top.scores.abs().min())


def test_planted_circuit_is_faithful(planted):
    model, task, _ = planted
    g = exact(model, task, progress=False)
    assert faithfulness(model, task, g.top(2), ablation="resample") > 0.8
    with pytest.raises(InterpError, match="no path from 'embed' to 'logits'"):
        faithfulness(model, task, g.top(1))


# ---- zoo models: parity, exactness, identities -----------------------------------------------


@pytest.fixture(scope="module")
def gpt2_ioi():
    return interp.load("zoo:lm-gpt2"), interp.tasks.make("ioi", split="train", n=6)


@pytest.fixture(scope="module")
def llama_ioi():
    return interp.load("zoo:lm-llama"), interp.tasks.make("ioi", split="train", n=8)


def _tl_node(n) -> str:
    k = n.kind  # a TransformerLens node, not interp's
    if k == "embed":
        return "embed"
    if k == "attn_head_out":
        return f"a{n.layer}.h{n.head}"
    if k in ("mlp_out", "mlp_in"):
        return f"m{n.layer}"
    if k == "q_input":
        return f"a{n.layer}.h{n.head}.q"
    if k in ("k_input", "v_input"):
        return f"a{n.layer}.g{n.head}.{k[0]}"
    return "logits"


def test_eap_matches_transformer_lens(gpt2_ioi):
    # TL scores (clean - corrupt) . grad on its corrupt run, per position and one example at a time;
    # with clean and corrupt swapped that is our (corrupt - clean) . grad on the clean run
    from transformer_lens.tools.analysis.attribution_patching import (
        EdgeAttributionConfig,
        attribution_patch,
    )

    model, task = gpt2_ioi
    ours = eap(model, task, progress=False)
    calls = [0]

    def metric_fn(logits):  # TL runs example i's clean, then its corrupt forward
        i = calls[0] // 2
        calls[0] += 1
        return metrics.logit_diff(logits, task.correct[i:i + 1], task.incorrect[i:i + 1], task.answer_pos[i:i + 1]).mean()

    res = attribution_patch(model, task.corrupt, task.clean, metric_fn, EdgeAttributionConfig(granularity="edge"))
    theirs: dict = {}
    for (u, v), s in res.edge_scores.items():
        key = (_tl_node(u), _tl_node(v))
        theirs[key] = theirs.get(key, 0.0) + s
    assert set(theirs) == set(zip(ours.senders, ours.receivers))
    want = torch.tensor([theirs[e] for e in zip(ours.senders, ours.receivers)])
    torch.testing.assert_close(ours.scores, want.float(), atol=1e-5 * float(want.abs().max()), rtol=1e-4)


def test_eap_ig_one_step_is_eap_and_steps_checked(llama_ioi):
    model, task = llama_ioi
    a, b = eap(model, task, progress=False), eap_ig(model, task, steps=1, progress=False)
    torch.testing.assert_close(a.scores, b.scores)
    assert a.meta["n_kv_heads"] == 2 and sum(r.endswith(".k") for r in set(a.receivers)) == 4 * 2  # KV groups, natively
    for steps in (0, -1):
        with pytest.raises(InterpError, match="steps"):
            eap_ig(model, task, steps=steps, progress=False)


def test_exact_matches_a_plain_hooked_forward(llama_ioi):
    model, task = llama_ioi
    edges = [("a0.h1", "a2.g1.k"), ("m1", "logits"), ("embed", "m0")]
    g = exact(model, task, edges, progress=False)
    assert list(zip(g.senders, g.receivers)) == edges
    metric = metrics.for_task(task)
    names = ["blocks.0.attn.hook_z", "blocks.1.hook_mlp_out", "blocks.0.hook_resid_pre"]
    with split_inputs(model):
        _, clean = interp.run.cache(model, task.clean, names)
        _, corrupt = interp.run.cache(model, task.corrupt, names)
        W_O = model.blocks[0].attn.W_O.detach()
        deltas = [(corrupt[names[0]][:, :, 1] - clean[names[0]][:, :, 1]) @ W_O[1],
                  corrupt[names[1]] - clean[names[1]], corrupt[names[2]] - clean[names[2]]]
        sites = [("blocks.2.attn.hook_k_input", 1), ("blocks.3.hook_resid_post", None), ("blocks.0.hook_mlp_in", None)]
        base = float(metric(interp.run.logits(model, task.clean)))
        for (site, slot), delta, got in zip(sites, deltas, g.scores.tolist()):
            def add(act, *, hook, delta=delta, slot=slot):
                out = act.clone()
                if slot is None:
                    return out + delta
                out[:, :, slot] += delta
                return out

            with torch.no_grad(), interp.hooked(model, [(site, add)]):
                want = float(metric(model(task.clean))) - base
            assert got == pytest.approx(want, abs=1e-4)
    assert g.meta["clean_metric"] == pytest.approx(base, abs=1e-5)
    with pytest.raises(InterpError, match="reads before"):
        exact(model, task, [("m2", "a1.h0.q")], progress=False)
    with pytest.raises(InterpError, match="unknown receiver 'a0.g3.k'"):
        exact(model, task, [("embed", "a0.g3.k")], progress=False)


def test_faithfulness_identities(llama_ioi, tmp_path):
    model, task = llama_ioi
    g = eap(model, task, progress=False)
    sizes = [0, 20, 40, 60, 80, 120, len(g)]
    curve = faithfulness_curve(model, task, g, ablation="resample", sizes=sizes, progress=False)
    at = dict(zip(curve.edges.tolist(), curve.recovered.tolist()))
    assert set(sizes) <= set(at) and curve.edges.tolist() == sorted(at)  # the sizes, plus bisection points
    # nothing kept: every receiver reads the corrupt run's senders, so it is the corrupt run
    assert at[0] == pytest.approx(0.0, abs=1e-4)
    assert at[len(g)] == pytest.approx(1.0, abs=1e-4)  # everything kept: the clean run
    e80, e90 = curve.meta["edges_80"], curve.meta["edges_90"]
    assert 0 < e80 <= e90 <= len(g) and at[e80] >= 0.8 and at[e90] >= 0.9
    assert at[e80 - 1] < 0.8 and at[e90 - 1] < 0.9  # the least such counts (first crossing)
    mean = faithfulness_curve(model, task, g, ablation="mean", sizes=[0, len(g)], targets=(), progress=False)
    assert mean.edges.tolist() == [0, len(g)] and mean.meta["edges_80"] is None
    assert dict(zip(mean.edges.tolist(), mean.recovered.tolist()))[len(g)] == pytest.approx(1.0, abs=1e-4)
    assert mean.meta["empty_recovered"] == pytest.approx(float(mean.recovered[0]))
    assert Faithfulness.load(curve.save(tmp_path / "f.safetensors")).meta == curve.meta
    assert curve.to_grid().axes == ("edges", "series")
    with pytest.raises(InterpError, match="ablation"):
        faithfulness_curve(model, task, g, ablation="zero", progress=False)


def test_model_comes_back_unchanged(llama_ioi):
    model, task = llama_ioi
    before = (model.cfg.use_split_qkv_input, model.cfg.use_hook_mlp_in, len(model.hook_dict))
    logits = interp.run.logits(model, task.clean)
    eap_ig(model, task, steps=2, progress=False)
    exact(model, task, [("embed", "logits")], progress=False)
    assert (model.cfg.use_split_qkv_input, model.cfg.use_hook_mlp_in, len(model.hook_dict)) == before
    torch.testing.assert_close(interp.run.logits(model, task.clean), logits)


def test_bad_tasks_and_models(llama_ioi, tiny_models):
    model, task = llama_ioi
    same = replace(task, corrupt=task.clean)
    with pytest.raises(InterpError, match="clean metric .* equals its corrupt metric"):
        eap(model, same, progress=False)
    bert = tiny_models["bert"]  # an encoder: no per-head inputs in TL, and post-LN blocks
    toks = torch.tensor([[2, 5, 6, 7], [2, 6, 5, 7]])
    t = Task("t", "x", toks, toks.flip(0), torch.tensor([5, 6]), torch.tensor([6, 5]), torch.tensor([3, 3]), ("", ""))
    with pytest.raises(InterpError, match="circuits were asked of a .* use a decoder") as err:
        eap(bert, t, progress=False)
    with pytest.raises(InterpError, match="circuits were asked of a .* use a decoder"):
        exact(bert, t, [("embed", "logits")], progress=False)
    assert len(str(err.value)) < 300  # leads with what the user did and what to do, not TL internals
    assert not bert.cfg.use_split_qkv_input


def test_gemma_post_norms_keep_edges_additive():
    # Gemma normalises attention and MLP outputs before the residual add; a head's write is its
    # share of the normed sum at the run's own scale, so every identity still holds exactly
    model, task = interp.load("zoo:lm-gemma2"), interp.tasks.make("ioi", split="train", n=6)
    g = eap(model, task, progress=False)
    curve = faithfulness_curve(model, task, g, ablation="resample", sizes=[0, len(g)], targets=(), progress=False)
    at = dict(zip(curve.edges.tolist(), curve.recovered.tolist()))
    assert at[0] == pytest.approx(0.0, abs=1e-4) and at[len(g)] == pytest.approx(1.0, abs=1e-4)
    x = exact(model, task, g.top(5), progress=False)
    assert (torch.sign(x.scores) == torch.sign(g.top(5).scores)).all()


def test_addto_checks_shapes():
    a = AddTo("blocks.0.hook_mlp_in", torch.zeros(2, 5, 4).index_fill_(1, torch.tensor([3]), 1.0))
    assert a.first_pos == 3
    with pytest.raises(InterpError, match="does not fit"):
        a(torch.zeros(2, 5, 8), site=a.site)


# ---- the pipeline, the CLI, and a real model ----------------------------------------------------


def test_cli_circuit_writes_graph_curve_and_view(tmp_path, capsys):
    from interp.cli import main

    out = tmp_path / "c"
    assert main(["circuit", "zoo:lm-llama", "--method", "eap", "--n", "6", "--ablation", "resample",
                 "--out", str(out), "--json"]) == 0
    digest = json.loads(capsys.readouterr().out)
    g = Graph.load(out / "graph.safetensors")
    assert g.meta["model"] == "zoo:lm-llama" and g.patterns is not None and g.patterns.shape[:2] == (4, 4)
    assert len(g.meta["example"]["tokens"]) == g.patterns.shape[-1]
    assert json.loads((out / "faithfulness.json").read_text())["faithfulness"]["edges_80"] == digest["faithfulness"]["edges_80"]
    assert Faithfulness.load(out / "faithfulness.safetensors").meta["ablation"] == "resample"
    assert (out / "circuit.html").read_text().lstrip().lower().startswith("<!doctype html")
    assert main(["circuit", "zoo:lm-llama", "--method", "eap-ig", "--steps", "0", "--out", str(tmp_path / "x")]) == 2
    assert "--steps 0 must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_smollm2_eap_on_bpe_ioi(smollm2):
    task = task_for(smollm2, "ioi", n=4)
    g = eap(smollm2, task, progress=False)
    assert (g.meta["n_layers"], g.meta["n_heads"], g.meta["n_kv_heads"]) == (30, 9, 3)
    assert len(g) == len(edge_list(30, 9, 3)[0]) and torch.isfinite(g.scores).all()
    # exact effects of the three largest edges have the sign EAP gives them
    top = g.top(3)
    x = exact(smollm2, task, top, progress=False)
    assert (torch.sign(x.scores) == torch.sign(top.scores)).sum() >= 2
    s = summary(with_example(smollm2, task, top))
    assert len(s["top_edges"]) == 3 and s["top_heads"][0]["head"].startswith("a")


def test_check_additive_refuses_non_additive_blocks(llama_ioi):
    from interp.circuits.wiring import Wiring

    model, task = llama_ioi
    w = Wiring(model)
    with split_inputs(model):
        _, acts = interp.run.cache(model, task.clean, w.check_hooks)
    w.check_additive(model, acts)  # a pre-norm decoder passes
    L = w.n_layers - 1
    broken = {**acts, f"blocks.{L}.hook_resid_mid": acts[f"blocks.{L}.hook_resid_mid"] * 1.5}  # as if normed after the add
    with pytest.raises(InterpError, match="do not add up per edge \\(resid_mid = resid_pre \\+ sum of head writes is off") as err:
        w.check_additive(model, broken)
    assert str(err.value).startswith("circuits were asked of a ") and len(str(err.value)) < 300


def test_graph_rejects_repeated_edges():
    with pytest.raises(InterpError, match="edge embed -> logits appears twice"):
        Graph(("embed", "a0.h1", "embed"), ("logits", "logits", "logits"), torch.zeros(3), dict(META))


def test_a_real_model_is_named_not_by_its_cache_folders_sha256(tmp_path):
    """A dequantized GGUF lives in a folder named by its sha256; meta, repr and view title name the model."""
    import json
    from types import SimpleNamespace

    from interp.views.circuit import view
    from interp.circuits.eap import model_label

    folder = tmp_path / ("ab" * 32)
    folder.mkdir()
    (folder / "interp-gguf.json").write_text(json.dumps({"source": "SmolLM2-135M-Instruct.Q4_1.gguf"}))
    model = SimpleNamespace(cfg=SimpleNamespace(model_name=str(folder)))
    assert model_label(model) == "smollm2-135m"
    (folder / "interp-gguf.json").write_text(json.dumps({"source": "other-model.Q8_0.gguf"}))
    assert model_label(model) == "other-model.Q8_0"
    plain = tmp_path / "lm-gpt2"
    plain.mkdir()
    assert model_label(SimpleNamespace(cfg=SimpleNamespace(model_name=str(plain)))) == "lm-gpt2"
    g = Graph(("embed",), ("logits",), torch.tensor([1.0]),
              {"n_layers": 1, "n_heads": 1, "n_kv_heads": 1, "method": "eap", "model": model_label(model)})
    assert "other-model.Q8_0" in repr(g) and "abab" not in repr(g)
    assert "other-model.Q8_0" in view(g).heading()


# ---- memory: chunks change nothing; bf16 is judged at bf16's rounding ---------------------------


def test_memory_knobs_change_nothing_and_peak_is_recorded(llama_ioi):
    model, task = llama_ioi
    for method in (lambda **kw: eap(model, task, progress=False, **kw),
                   lambda **kw: eap_ig(model, task, steps=3, progress=False, **kw)):
        big = method()
        small = method(batch_size=3, pos_chunk=2)  # 3 forwards over 8 examples, 2 positions per product
        torch.testing.assert_close(small.scores, big.scores, rtol=1e-5, atol=1e-6 * float(big.scores.abs().max()))
        for g in (big, small):
            seen = g.meta["peak_memory"]
            assert seen["device"] == "cpu" and seen["bytes"] > 0 and seen["what"]
        assert small.meta["pos_chunk"] == 2 and small.meta["batch_size"] == 3
        assert big.meta["pos_chunk"] >= task.clean.shape[1]  # the default: one chunk for short prompts
    with pytest.raises(InterpError, match="pos_chunk=0 must be an int >= 1"):
        eap(model, task, pos_chunk=0, progress=False)
    x = exact(model, task, [("embed", "logits")], progress=False)
    assert x.meta["peak_memory"]["bytes"] > 0


@pytest.fixture(scope="module")
def smol_widths_bf16(tmp_path_factory):
    """A 2-layer random-weight LLaMA of SmolLM2-135M's widths (576 wide, 9 heads, 3 KV heads,
    MLP 1536), in bf16, and a name-swap task over its word tokenizer."""
    path = interp.build_tiny("llama", tmp_path_factory.mktemp("smol-widths") / "m", d_model=576, n_layers=2,
                             n_heads=9, n_kv_heads=3, d_mlp=1536, seed=0)
    tok = word_tokenizer(DEFAULT_WORDS)
    ids = lambda text: tok(text)["input_ids"]
    clean = torch.tensor([ids("mary the cat sees the dog"), ids("a mary dog is the cat")])
    corrupt = torch.tensor([ids("john the cat sees the dog"), ids("a john dog is the cat")])
    mary, john = tok.convert_tokens_to_ids(["mary", "john"])
    task = Task("names", "x", clean, corrupt, torch.full((2,), mary), torch.full((2,), john),
                torch.full((2,), clean.shape[1] - 1), ("",) * 2)
    return str(path), task


def test_bf16_eap_ig_passes_the_additivity_check_at_bf16_rounding(smol_widths_bf16):
    # was refused ("blocks do not add up per edge ... off by 0.0042"): a float32 tolerance on bf16 sums
    path, task = smol_widths_bf16
    model = interp.load(path, dtype=torch.bfloat16)
    g = eap_ig(model, task, steps=3, progress=False)
    assert torch.isfinite(g.scores).all() and g.meta["peak_memory"]["bytes"] > 0
    ref = eap_ig(interp.load(path), task, steps=3, progress=False)  # the same weights in float32
    cos = torch.nn.functional.cosine_similarity(g.scores.double(), ref.scores.double(), dim=0)
    assert cos > 0.99  # measured 0.99994
    # a block that does not add up is still refused in bf16 (off by far more than bf16's rounding)
    from interp.circuits.wiring import Wiring

    w = Wiring(model)
    with split_inputs(model):
        _, acts = interp.run.cache(model, task.clean, [*w.check_hooks, *w.split_check_hooks])
    w.check_additive(model, acts)
    L = w.n_layers - 1
    for hook, factor in ((f"blocks.{L}.hook_resid_mid", 1.5), (f"blocks.{L}.attn.hook_v", 1.2)):
        broken = {**acts, hook: acts[hook] * factor}
        with pytest.raises(InterpError, match="do not add up per edge"):
            w.check_additive(model, broken)


def test_bf16_post_ln_encoder_is_still_refused(tiny_dirs):
    bert = interp.load(tiny_dirs["bert"], dtype=torch.bfloat16)  # its blocks add up to 0.015: within bf16's 0.031
    toks = torch.tensor([[2, 5, 6, 7], [2, 6, 5, 7]])
    t = Task("t", "x", toks, toks.flip(0), torch.tensor([5, 6]), torch.tensor([6, 5]), torch.tensor([3, 3]), ("", ""))
    for method in (eap, eap_ig):
        with pytest.raises(InterpError, match="circuits were asked of a .* use a decoder"):
            method(bert, t, progress=False)
