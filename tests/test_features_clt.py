"""Cross-layer and skip transcoders (interp.features.clt) and attribution graphs over them.

Files are built here to the published layouts (circuit-tracer's CLT folder: W_enc_{l} [n, d_in],
b_enc_{l}, b_dec_{l}, threshold_{l} in W_enc_{l}.safetensors, W_dec_{l} [n, n_layers - l, d_out]
in W_dec_{l}.safetensors; GemmaScope-2's per-layer w_enc [d_in, n], w_dec [n, n_layers, d_out],
b_enc, b_dec, threshold, affine_skip_connection) and read back against the function written
out here on the raw tensors. Graph invariants as for per-layer transcoders: with errors the
replacement model reproduces the logits; each target is the sum of its direct effects plus the
sources-removed constant; an edge is the runner ablation of its source.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from safetensors.torch import save_file

from interp import results, run
from interp.errors import InterpError
from interp.features.attribute import EMBED, UNEMBED, Hold, Skip, attribute, frozen, replacement_logits
from interp.features.clt import (CrossLayerTranscoder, fit_clt, load_circuit_tracer, load_gemmascope2,
                                 save_circuit_tracer)
from interp.features.train import Recipe, mlp_sites
from test_features_graph import target_inputs

PROMPT = "the keys to the cabinet"
pytestmark = pytest.mark.filterwarnings("ignore:A forward hook edited hook_scale")


def random_clt(n_layers: int, d: int, n: int = 48, seed: int = 0, skip: bool = False, bias: float = 0.0) -> CrossLayerTranscoder:
    g = torch.Generator().manual_seed(seed)
    return CrossLayerTranscoder(
        W_enc=torch.randn(n_layers, d, n, generator=g) / d**0.5, b_enc=torch.randn(n_layers, n, generator=g) * 0.1 + bias,
        W_dec=tuple(torch.randn(n, n_layers - l, d, generator=g) * 0.1 for l in range(n_layers)),
        b_dec=torch.randn(n_layers, d, generator=g) * 0.01, sites_in=[mlp_sites(l)[0] for l in range(n_layers)],
        sites_out=[mlp_sites(l)[1] for l in range(n_layers)],
        W_skip=torch.randn(n_layers, d, d, generator=g) * 0.05 if skip else None)


def reference(x: torch.Tensor, W_enc, b_enc, W_dec, b_dec, threshold=None, W_skip=None) -> torch.Tensor:
    """The published CLT function on raw tensors: W_enc [L, n, d] (circuit-tracer's orientation),
    W_dec[l] [n, L - l, d], JumpReLU h * (h > t)."""
    L = W_enc.shape[0]
    h = torch.einsum("tld,lnd->tln", x, W_enc) + b_enc
    f = h * (h > threshold) if threshold is not None else torch.relu(h)
    y = b_dec.expand(x.shape[0], -1, -1).clone()
    for l in range(L):
        for m in range(l, L):
            y[:, m] += f[:, l] @ W_dec[l][:, m - l]
    return y + torch.einsum("tli,lio->tlo", x, W_skip) if W_skip is not None else y


# ---------------------------------------------------------------------------------------------
# the published layouts


def test_circuit_tracer_folder_reads_and_writes_the_published_layout(tmp_path):
    g = torch.Generator().manual_seed(1)
    L, d, n = 3, 8, 12
    W_enc = torch.randn(L, n, d, generator=g)
    b_enc, b_dec, thr = torch.randn(L, n, generator=g), torch.randn(L, d, generator=g), torch.rand(L, n, generator=g)
    W_dec = [torch.randn(n, L - l, d, generator=g) for l in range(L)]
    folder = tmp_path / "clt"
    folder.mkdir()
    for l in range(L):
        save_file({f"W_enc_{l}": W_enc[l], f"b_enc_{l}": b_enc[l], f"b_dec_{l}": b_dec[l], f"threshold_{l}": thr[l]},
                  str(folder / f"W_enc_{l}.safetensors"))
        save_file({f"W_dec_{l}": W_dec[l]}, str(folder / f"W_dec_{l}.safetensors"))
    clt = load_circuit_tracer(folder)
    x = torch.randn(50, L, d, generator=g)
    assert torch.allclose(clt(x), reference(x, W_enc, b_enc, W_dec, b_dec, thr), atol=1e-5)
    assert clt.sites_in[1] == "blocks.1.ln2.hook_normalized" and clt.sites_out[2] == "blocks.2.hook_mlp_out"
    # written back: the same keys and shapes, the same function
    out = save_circuit_tracer(clt, tmp_path / "again")
    from safetensors import safe_open

    for l in range(L):
        with safe_open(str(out / f"W_enc_{l}.safetensors"), "pt") as fh:
            assert set(fh.keys()) == {f"W_enc_{l}", f"b_enc_{l}", f"b_dec_{l}", f"threshold_{l}"}
            assert torch.equal(fh.get_tensor(f"W_enc_{l}"), W_enc[l])
        with safe_open(str(out / f"W_dec_{l}.safetensors"), "pt") as fh:
            assert list(fh.keys()) == [f"W_dec_{l}"] and torch.equal(fh.get_tensor(f"W_dec_{l}"), W_dec[l])
    assert torch.equal(load_circuit_tracer(out)(x), clt(x))
    # negative thresholds mean something else there (h * (h > t) passes negatives): refused
    save_file({"W_enc_0": W_enc[0], "b_enc_0": b_enc[0], "b_dec_0": b_dec[0], "threshold_0": -thr[0]},
              str(folder / "W_enc_0.safetensors"))
    with pytest.raises(InterpError, match="negative"):
        load_circuit_tracer(folder)
    with pytest.raises(InterpError, match="skip"):
        save_circuit_tracer(random_clt(2, 4, skip=True), tmp_path / "skip")
    with pytest.raises(InterpError, match="W_enc_<layer>"):
        load_circuit_tracer(tmp_path)


def _break_layer(folder, layer: int, file: str, change) -> None:
    """Rewrite one layer's W_enc_/W_dec_ file of a saved CLT folder with `change` applied to its tensors."""
    from safetensors.torch import load_file

    path = folder / f"{file}_{layer}.safetensors"
    tensors = load_file(str(path))
    change(tensors)
    save_file(tensors, str(path))


@pytest.mark.parametrize("damage,match", [
    (lambda f: (f / "W_enc_1.safetensors").write_bytes((f / "W_enc_1.safetensors").read_bytes()[:40]), "W_enc_1.safetensors.*Safetensor"),
    (lambda f: (f / "W_dec_2.safetensors").write_bytes(b""), "W_dec_2.safetensors"),
    (lambda f: (f / "W_dec_1.safetensors").unlink(), "W_dec_1.safetensors.*no such file"),
    (lambda f: (f / "interp.json").write_text("{"), "interp.json.*not JSON"),
    (lambda f: (f / "interp.json").write_text("{}"), "interp.json: sites_in is missing"),
    (lambda f: (f / "interp.json").write_text("[1]"), "interp.json.*a JSON object"),
    (lambda f: _break_layer(f, 1, "W_enc", lambda t: t.update(W_enc_1=torch.randn(6, 5))), r"W_enc_<layer> has shape \[6, 4\] at layer 0 but \[6, 5\] at layer 1"),
    (lambda f: _break_layer(f, 1, "W_enc", lambda t: t.pop("threshold_1")), "threshold_<layer> .* None at layer 1"),
    (lambda f: _break_layer(f, 0, "W_enc", lambda t: t.pop("threshold_0")), "threshold_<layer> has shape None at layer 0"),
    (lambda f: _break_layer(f, 2, "W_dec", lambda t: t["W_dec_2"].fill_(float("nan"))), "W_dec_2 holds .* NaN"),
    (lambda f: _break_layer(f, 0, "W_enc", lambda t: t.update(W_enc_0=t["W_enc_0"].long())), "W_enc_0 has dtype torch.int64"),
], ids=["truncated", "empty", "layer-missing", "bad-json", "json-no-sites", "json-list", "shapes-differ",
        "threshold-missing-at-1", "threshold-missing-at-0", "nan-decoder", "integer-encoder"])
def test_a_damaged_circuit_tracer_folder_is_refused_naming_what_is_wrong(tmp_path, damage, match):
    """Each damage to a written folder is an InterpError naming the file or field, never a
    SafetensorError, KeyError or torch.stack error; a threshold missing from one layer is refused,
    not read as a ReLU transcoder."""
    clt = replace(random_clt(3, 4, n=6), threshold=torch.rand(3, 6))
    folder = save_circuit_tracer(clt, tmp_path / "clt")
    load_circuit_tracer(folder)  # whole, it loads
    damage(folder)
    with pytest.raises(InterpError, match=match):
        load_circuit_tracer(folder)


def test_fit_clt_refuses_bad_sites_and_outputs_before_training(tmp_path, monkeypatch):
    """Sites that are not one per layer, an `out` that is a file and a checkpoint no trainer wrote
    are refused before the first step (sites were checked only once training had finished)."""
    from interp.features import clt as clt_module

    def trained(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(clt_module._CLTTrainee, "step", trained)
    x = torch.randn(64, 2, 4)
    recipe = Recipe(n_features=8, k=2, tokens=64)
    with pytest.raises(InterpError, match="sites_in must name one site in each of blocks 0..1"):
        fit_clt(x, x, recipe=recipe, sites_in=[mlp_sites(0)[0]])
    with pytest.raises(InterpError, match="unknown site"):
        fit_clt(x, x, recipe=recipe, sites_out=["blocks.0.hook_mlp_out", "not a site"])
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(InterpError, match="a_file is a file"):
        fit_clt(x, x, recipe=recipe, out=tmp_path / "a_file")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint.safetensors").write_bytes(b"cut short")
    with pytest.raises(InterpError, match="checkpoint.safetensors as a training checkpoint"):
        fit_clt(x, x, recipe=recipe, out=tmp_path / "run")


def test_gemmascope2_refuses_one_path_and_files_that_disagree(tmp_path):
    d, n = 4, 6
    good = {"w_enc": torch.randn(d, n), "b_enc": torch.zeros(n), "b_dec": torch.zeros(d), "threshold": torch.rand(n),
            "w_dec": torch.randn(n, 2, d)}
    save_file(good, str(tmp_path / "0.safetensors"))
    save_file({**good, "w_enc": torch.randn(d + 1, n)}, str(tmp_path / "wide.safetensors"))
    save_file({**good, "affine_skip_connection": torch.zeros(d, d)}, str(tmp_path / "skip.safetensors"))
    (tmp_path / "cut.safetensors").write_bytes(b"abc")
    with pytest.raises(InterpError, match="list of per-layer files"):
        load_gemmascope2(str(tmp_path))  # a string is a sequence too: not read as one file per character
    with pytest.raises(InterpError, match=r"w_enc has shape \[4, 6\] at layer 0 but \[5, 6\] at layer 1"):
        load_gemmascope2([tmp_path / "0.safetensors", tmp_path / "wide.safetensors"])
    with pytest.raises(InterpError, match="affine_skip_connection has shape None at layer 0"):
        load_gemmascope2([tmp_path / "0.safetensors", tmp_path / "skip.safetensors"])
    with pytest.raises(InterpError, match="cut.safetensors.*header"):
        load_gemmascope2([tmp_path / "0.safetensors", tmp_path / "cut.safetensors"])


def test_save_circuit_tracer_replaces_only_a_clt_folder(tmp_path):
    """Writing replaces a whole folder: one holding anything but a CLT's files is refused and left
    as it was; a file in the way is refused; an earlier CLT folder is replaced."""
    clt = random_clt(2, 4, n=6)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "draft.txt").write_text("keep me")
    with pytest.raises(InterpError, match=r"holds \['draft.txt'\]"):
        save_circuit_tracer(clt, tmp_path / "notes")
    assert (tmp_path / "notes" / "draft.txt").read_text() == "keep me"
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(InterpError, match="is a file"):
        save_circuit_tracer(clt, tmp_path / "a_file")
    folder = save_circuit_tracer(random_clt(3, 4, n=6), tmp_path / "clt")
    save_circuit_tracer(clt, folder)  # the 3-layer folder's files are its own: replaced whole
    assert load_circuit_tracer(folder).n_layers == 2 and sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_gemmascope2_files_read_with_their_skip_connection(tmp_path):
    g = torch.Generator().manual_seed(2)
    L, d, n = 3, 8, 10
    raw = [{"w_enc": torch.randn(d, n, generator=g), "b_enc": torch.randn(n, generator=g), "b_dec": torch.randn(d, generator=g),
            "threshold": torch.rand(n, generator=g), "w_dec": torch.randn(n, L, d, generator=g),
            "affine_skip_connection": torch.randn(d, d, generator=g) * 0.1} for _ in range(L)]
    paths = []
    for l, r in enumerate(raw):
        paths.append(tmp_path / f"layer_{l}.safetensors")
        save_file(r, str(paths[-1]))
    clt = load_gemmascope2(paths)
    x = torch.randn(40, L, d, generator=g)
    want = reference(x, torch.stack([r["w_enc"].T for r in raw]), torch.stack([r["b_enc"] for r in raw]),
                     [r["w_dec"][:, l:] for l, r in enumerate(raw)], torch.stack([r["b_dec"] for r in raw]),
                     torch.stack([r["threshold"] for r in raw]), torch.stack([r["affine_skip_connection"] for r in raw]))
    assert torch.allclose(clt(x), want, atol=1e-5)
    assert results.load(results.save(clt, tmp_path / "clt.safetensors"))(x).equal(clt(x))  # interp's own format


def test_shapes_are_checked():
    clt = random_clt(2, 4)
    with pytest.raises(InterpError, match="W_dec"):
        CrossLayerTranscoder(clt.W_enc, clt.b_enc, (clt.W_dec[0], clt.W_dec[0]), clt.b_dec, clt.sites_in, clt.sites_out)
    with pytest.raises(InterpError, match="sites_in"):
        CrossLayerTranscoder(clt.W_enc, clt.b_enc, clt.W_dec, clt.b_dec, clt.sites_in[::-1], clt.sites_out)


# ---------------------------------------------------------------------------------------------
# training


@pytest.mark.parametrize("architecture,floor", [("batchtopk", 0.85), ("jumprelu", 0.75)])
def test_fit_clt_finds_planted_cross_layer_features(architecture, floor):
    """Each layer's MLP input is a sparse sum of known directions, and each of those features
    writes to its layer's output and every later one's: the trained CLT's decoders match the
    planted ones (mean max cosine over the first layer's, which write to both layers), far above a
    CLT of the same recipe trained with the outputs' rows shuffled (the control)."""
    g = torch.Generator().manual_seed(0)
    T, L, d, n = 6000, 2, 24, 12
    c = (torch.rand(T, L, n, generator=g) < 0.06) * (1 + torch.rand(T, L, n, generator=g))
    directions = torch.nn.functional.normalize(torch.randn(L, n, d, generator=g), dim=-1)
    x = torch.einsum("tln,lnd->tld", c, directions) + 0.01 * torch.randn(T, L, d, generator=g)
    true = [torch.randn(n, L - l, d, generator=g) for l in range(L)]
    y = torch.zeros(T, L, d)
    for l in range(L):
        y[:, l:] += torch.einsum("tn,nmd->tmd", c[:, l], true[l])
    recipe = Recipe(n_features=16, k=1, tokens=60_000, lr=1e-2, checkpoint_every=20, architecture=architecture,
                    l0_coefficient=1e-2)

    def match(clt):
        got = torch.nn.functional.normalize(clt.W_dec[0].flatten(1), dim=1)
        want = torch.nn.functional.normalize(true[0].flatten(1), dim=1)
        return float((want @ got.T).max(1).values.mean())

    clt = fit_clt(x, y, recipe=recipe, batch=256)
    control = fit_clt(x, y[torch.randperm(T, generator=g)], recipe=recipe, batch=256)
    fvu = float((clt(x) - y).pow(2).sum() / (y - y.mean(0)).pow(2).sum())
    l0 = clt.meta["history"][-1]["l0"]  # per token and layer; the truth's is 0.72
    assert fvu < 0.02 and (l0 == pytest.approx(1.0, abs=0.2) if architecture == "batchtopk" else l0 < 2.5)
    assert match(clt) > floor and match(control) < 0.5
    with pytest.raises((InterpError, TypeError), match="d_in"):  # jaxtyping's check in tests, ours outside
        fit_clt(x[:, 0], y)


# ---------------------------------------------------------------------------------------------
# graphs over CLTs and skip transcoders


@pytest.fixture(scope="module", params=["clt", "skip"])
def clt_graph(request, llama):
    clt = random_clt(llama.cfg.n_layers, llama.cfg.d_model, skip=request.param == "skip", seed=3)
    return clt, attribute(llama, PROMPT, clt, progress=False, batch_size=16)


def test_clt_replacement_model_with_errors_reproduces_the_logits(llama):
    tokens = llama.to_tokens(PROMPT)
    true = run.logits(llama, tokens)
    for skip in (False, True):
        clt = random_clt(llama.cfg.n_layers, llama.cfg.d_model, skip=skip)
        assert torch.allclose(replacement_logits(llama, tokens, clt), true, atol=1e-4, rtol=1e-4)
        assert (replacement_logits(llama, tokens, clt, errors=False) - true).abs().max() > 1e-2  # the control


def _constants(model, tokens, clt, graph):
    """(node, value, constant) of each target: its input on the clean run and in the frozen model
    with every source removed (MLP outputs at the decoder bias (+ the skip path, which stays live),
    the BOS position's kept whole, no token embedding)."""
    L = clt.n_layers
    names = [UNEMBED, *clt.sites_in]
    _, clean = run.cache(model, tokens, [*names, *clt.sites_out, EMBED])
    holds = frozen(model, tokens)
    for l in range(L):
        const = clt.b_dec[l].expand_as(clean[clt.sites_out[l]]).clone()
        if clt.W_skip is None:
            const[:, 0] = clean[clt.sites_out[l]][:, 0]
            holds.append(Hold(clt.sites_out[l], const))
        else:  # value + (x - x_value) @ W_skip with x_value = 0: b_dec + x @ W_skip, BOS whole
            x0 = clean[clt.sites_in[l]].clone()
            const[:, 0] = clean[clt.sites_out[l]][:, 0] - x0[:, 0] @ clt.W_skip[l]
            holds.append(Skip(clt.sites_in[l], clt.sites_out[l], const, torch.zeros_like(x0), clt.W_skip[l]))
    holds.append(Hold(EMBED, torch.zeros_like(clean[EMBED])))
    _, base = run.cache(model, tokens, names, holds)
    return target_inputs(model, graph, clean, base, lambda layer, index: (clt.W_enc[layer][:, index], clt.sites_in[layer]))


def test_each_clt_target_is_the_sum_of_its_direct_effects(llama, clt_graph):
    clt, graph = clt_graph
    rows = _constants(llama, llama.to_tokens(PROMPT), clt, graph)
    assert len(rows) > 20 and graph.meta["transcoder"] == "cross-layer"
    for i, value, const in rows:
        assert abs(float(graph.adjacency[i].sum()) - (value - const)) <= 1e-4 + 1e-3 * abs(value - const), graph.describe(i)


def test_a_clt_edge_is_the_runner_ablation_of_its_source(llama, clt_graph):
    """Remove one layer-0 feature's writes (to layers 0 and 1) through the runner in the frozen
    model, every MLP output otherwise held (skip paths live, as in the graph): the answer logit
    moves by minus the edge. Removing only its layer-0 write (the control) moves it by another
    amount: the write to the later layer is part of the edge."""
    clt, g = clt_graph
    tokens = llama.to_tokens(PROMPT)
    logit = int(g.of("logit")[0])
    row = g.adjacency[logit]
    source = int(torch.argmax(row.abs() * (g.layer == 0) * (g.kind == 0)))
    s_pos, s_idx, a = int(g.pos[source]), int(g.index[source]), float(g.activation[source])
    _, clean = run.cache(llama, tokens, [*clt.sites_out, *clt.sites_in])
    W_U = llama.W_U.detach()
    v = W_U[:, int(g.index[logit])] - W_U.mean(1)

    def moved(layers) -> float:
        holds = frozen(llama, tokens)
        for l in range(clt.n_layers):
            out = clean[clt.sites_out[l]].clone()
            if l in layers:
                out[0, s_pos] -= a * clt.W_dec[0][s_idx, l]
            holds.append(Hold(clt.sites_out[l], out) if clt.W_skip is None else
                         Skip(clt.sites_in[l], clt.sites_out[l], out, clean[clt.sites_in[l]], clt.W_skip[l]))
        _, after = run.cache(llama, tokens, [UNEMBED], holds)
        _, before = run.cache(llama, tokens, [UNEMBED])
        return float((after[UNEMBED][0, -1] - before[UNEMBED][0, -1]) @ v)

    edge = float(row[source])
    assert abs(edge) > 1e-3
    assert moved({0, 1}) == pytest.approx(-edge, rel=1e-3, abs=1e-5)
    assert abs(moved({0}) + edge) > 1e-3 * abs(edge)


def test_bad_transcoders_are_refused(llama):
    with pytest.raises(InterpError, match="spans 3 layers"):
        attribute(llama, PROMPT, random_clt(3, llama.cfg.d_model), progress=False)
    with pytest.raises(InterpError, match="wide"):
        attribute(llama, PROMPT, random_clt(llama.cfg.n_layers, 8), progress=False)


def test_per_layer_skip_transcoders_are_a_clt_without_cross_layer_writes(llama):
    """Per-layer skip transcoders (Dictionary with W_skip) and the CLT with the same weights whose
    writes to later layers are zero are one replacement model: the same graph, edge for edge; and
    with errors the replacement logits are the model's."""
    from interp.features import Dictionary

    full = random_clt(llama.cfg.n_layers, llama.cfg.d_model, skip=True, seed=5)
    diagonal = tuple(torch.cat([w[:, :1], torch.zeros_like(w[:, 1:])], 1) for w in full.W_dec)
    clt = CrossLayerTranscoder(full.W_enc, full.b_enc, diagonal, full.b_dec, full.sites_in, full.sites_out, W_skip=full.W_skip)
    dicts = [Dictionary(clt.W_enc[l], clt.b_enc[l], clt.W_dec[l][:, 0], clt.b_dec[l], clt.sites_in[l], clt.sites_out[l],
                        W_skip=clt.W_skip[l]) for l in range(clt.n_layers)]
    a = attribute(llama, PROMPT, clt, progress=False, batch_size=16)
    b = attribute(llama, PROMPT, dicts, progress=False, batch_size=16)
    assert a.ids == b.ids and torch.allclose(a.adjacency, b.adjacency, atol=1e-5)
    tokens = llama.to_tokens(PROMPT)
    assert torch.allclose(replacement_logits(llama, tokens, dicts), run.logits(llama, tokens), atol=1e-4, rtol=1e-4)
    no_skip = [replace(d, W_skip=None) for d in dicts]  # the control: without the skip path the graph differs
    assert not torch.allclose(attribute(llama, PROMPT, no_skip, progress=False, batch_size=16).adjacency, b.adjacency, atol=1e-3)


def test_fit_clt_resumes_from_its_checkpoint(tmp_path):
    """A run stopped halfway and resumed ends where an uninterrupted run ends (weights, history);
    other activations in the same folder are refused."""
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(500, 2, 8, generator=g), torch.randn(500, 2, 8, generator=g)
    whole = fit_clt(x, y, recipe=Recipe(n_features=16, k=2, tokens=4096, checkpoint_every=4), batch=128)
    half = fit_clt(x, y, recipe=Recipe(n_features=16, k=2, tokens=2048, checkpoint_every=4), batch=128, out=tmp_path)
    assert half.meta["tokens"] == 2048
    resumed = fit_clt(x, y, recipe=Recipe(n_features=16, k=2, tokens=4096, checkpoint_every=4), batch=128, out=tmp_path)
    assert resumed.meta["history"] == whole.meta["history"]
    assert all(torch.equal(a, b) for a, b in zip(resumed.W_dec, whole.W_dec)) and torch.equal(resumed.W_enc, whole.W_enc)
    with pytest.raises(InterpError, match="another run"):
        fit_clt(x * 2, y, recipe=Recipe(n_features=16, k=2, tokens=4096, checkpoint_every=4), batch=128, out=tmp_path)
