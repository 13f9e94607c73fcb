"""Dictionaries: training recovers planted features, trains on a zoo model at the quick budget,
resumes to the same weights, saves in interp's format and in SAELens's, scores what users check."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from safetensors.torch import save_file

import interp
from interp.errors import InterpError
from interp.features import Dictionary, load_saelens, save_saelens
from interp.features.corpus import token_rows
from interp.features.quality import scores
from interp.features.train import Recipe, fit, from_checkpoint, mlp_sites, train_dictionaries


def _planted(seed=0, d=32, n_true=48, n=20000):
    g = torch.Generator().manual_seed(seed)
    dirs = torch.randn(n_true, d, generator=g)
    dirs /= dirs.norm(dim=1, keepdim=True)
    active = torch.rand(n, n_true, generator=g) < 3 / n_true
    return (active * (1 + torch.rand(n, n_true, generator=g))) @ dirs, dirs


def _best_cos(dirs, W_dec):
    w = W_dec / W_dec.norm(dim=1, keepdim=True)
    return (dirs @ w.T).max(1).values


def test_sae_recovers_planted_directions():
    x, dirs = _planted()
    recipe = Recipe(n_features=96, k=3, tokens=60_000, dead_after=5000, lr=3e-3)
    d = fit(x, site_in="blocks.0.hook_resid_post", recipe=recipe, batch=512)
    untrained = fit(x, site_in="blocks.0.hook_resid_post", recipe=Recipe(n_features=96, k=3, tokens=1), batch=1)
    found = _best_cos(dirs, d.W_dec)
    assert (found > 0.9).float().mean() > 0.95, found  # nearly every planted direction has a feature
    assert (_best_cos(dirs, untrained.W_dec) > 0.9).float().mean() < 0.1  # control: random decoders do not
    fve = 1 - (x - d(x)).pow(2).sum() / (x - x.mean(0)).pow(2).sum()
    assert fve > 0.85
    assert 2 <= (d.encode(x) > 0).sum(1).float().mean() <= 4.5  # L0 near k at inference (JumpReLU threshold)
    h = d.meta["history"]  # per checkpoint_every (50) steps: the means of loss, aux, L0 and dead fraction
    assert [r["step"] for r in h] == [50 * (i + 1) for i in range(len(h) - 1)] + [d.meta["steps"]]
    assert h[-1]["nmse"] < h[0]["nmse"] and all(0 <= r["dead"] <= 1 and r["l0"] <= 3 for r in h)
    grid = d.to_grid()  # drawn by plot.render: one panel per metric over the steps
    assert grid.axes == ("step", "dictionary", "metric") and grid.shape == (len(h), 1, 4)
    assert grid.values[:, 0, 2].tolist() == [r["l0"] for r in h]
    from interp.views import plot

    assert len(plot.render(d).data) == 4
    with pytest.raises(InterpError, match="no training history"):
        _random_dictionary("blocks.0.hook_resid_post", "blocks.0.hook_resid_post").to_grid()


@pytest.mark.parametrize("aux_values, revived", [("signed", True), ("relu", False)])
def test_auxk_reaches_a_feature_whose_pre_activations_fell_below_zero(aux_values, revived):
    """A planted dead feature, its pre-activation far below zero on every token: signed AuxK moves its
    encoder and decoder rows; Gao et al.'s relu'd AuxK gives it no gradient at all, so it stays exactly
    where it was."""
    from interp.features.train import _Trainee

    x, _ = _planted(n=4096)
    r = Recipe(n_features=8, k=1, tokens=10_000, dead_after=1, lr=1e-2, aux_values=aux_values)
    t = _Trainee(32, 32, r, torch.Generator().manual_seed(0), x.mean(0), 1.0, 1.0)
    with torch.no_grad():
        t.b_enc[0] = -1e3  # feature 0: every pre-activation far below zero
    t.since[0] = 10  # already dead; the others fire at the first step
    w_enc, w_dec = t.W_enc[:, 0].detach().clone(), t.W_dec[0].detach().clone()
    for _ in range(5):
        t.step(x[:512], x[:512], r, first=False)
        t.since[0] = 10  # keep it in AuxK's dead set
    moved = (t.W_enc[:, 0] - w_enc).abs().max().item() + (t.W_dec[0] - w_dec).abs().max().item()
    assert (moved > 1e-3) if revived else (moved == 0.0), moved
    with pytest.raises(InterpError, match="aux_values"):
        Recipe(aux_values="exp")


def test_a_checkpoint_with_no_aux_values_reads_back_as_relu_auxk(zoo, tmp_path):
    """A checkpoint whose recipe has no aux_values was written when AuxK always relu'd its values, so
    its dictionary's meta says "relu", not today's default; one that has the key keeps it."""
    from safetensors import safe_open

    from interp.files.storage import write_tensors_atomic

    rows, valid = token_rows(zoo, "zoo", max_rows=64, seed=4)
    site = "blocks.1.hook_resid_post"
    r = Recipe(n_features=32, k=2, tokens=200, rows=16, checkpoint_every=2)
    train_dictionaries(zoo, [site], rows, valid, tmp_path, recipe=r, progress=False)
    assert from_checkpoint(tmp_path)[(site, site)].meta["recipe"]["aux_values"] == "signed"
    ckpt = tmp_path / "checkpoint.safetensors"
    with safe_open(str(ckpt), "pt") as fh:
        meta, saved = fh.metadata(), {k: fh.get_tensor(k) for k in fh.keys()}
    ident = json.loads(meta["identity"])
    del ident["recipe"]["aux_values"]  # one recipe: a dict, as the trainer before the key wrote it
    write_tensors_atomic(ckpt, saved, {**meta, "identity": json.dumps(ident, sort_keys=True)})
    assert from_checkpoint(tmp_path)[(site, site)].meta["recipe"]["aux_values"] == "relu"


def test_the_api_a_user_expects():
    """interp.features exports Recipe, fit, scores and train_dictionaries; `train` is the module
    (its Recipe reachable), and calling it (the old function) still works, with a DeprecationWarning."""
    import interp.features as F
    from interp.features import train

    assert train.Recipe is F.Recipe is Recipe and F.fit is fit and F.scores is scores
    assert F.train_dictionaries is train_dictionaries and isinstance(train.CODE_VERSION, str)
    for call in (train, train.train):
        with pytest.warns(DeprecationWarning, match="train_dictionaries"), pytest.raises(InterpError, match="at least one site"):
            call(None, [], torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2, dtype=torch.bool), "unused")


def test_fit_checks_shapes():
    with pytest.raises(InterpError, match="equal length"):
        fit(torch.zeros(5, 3), torch.zeros(4, 3), site_in="blocks.0.hook_resid_post")
    with pytest.raises(InterpError, match="k=9"):
        Recipe(n_features=4, k=9)


@pytest.mark.parametrize("bad", [
    {"lr": 0.0}, {"lr": -1e-3}, {"lr": float("nan")}, {"lr": float("inf")}, {"l1_coefficient": float("inf")},
    {"threshold_momentum": 1.5}, {"threshold_momentum": -0.1}, {"seed": -1}, {"seed": 2**64},
])
def test_a_recipe_refuses_nonsense(bad):
    """A learning rate that is not a positive finite number, a momentum outside [0, 1] or a seed a
    generator cannot take: refused naming the field, not at the first optimizer step (or never:
    lr=0 trained nothing)."""
    name = next(iter(bad))
    with pytest.raises(InterpError, match=rf"Recipe\.{name}="):
        Recipe(**bad)


def test_fit_refuses_bad_input_before_training(monkeypatch):
    """A site that is no hook name is refused before the first step (the dictionary used to be
    built, and the name checked, only after all of training)."""
    from interp.features import train as train_module

    def trained(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(train_module._Trainee, "step", trained)
    x = torch.randn(64, 8)
    with pytest.raises(InterpError, match="unknown site 'not a site'"):
        fit(x, site_in="not a site", recipe=Recipe(n_features=16, k=4, tokens=64))
    with pytest.raises(InterpError, match="unknown site"):
        fit(x, site_in="blocks.0.hook_resid_post", site_out="nowhere", recipe=Recipe(n_features=16, k=4, tokens=64))


@pytest.mark.parametrize("write,match", [
    (lambda p: p.write_bytes(b"not safetensors"), "as a training checkpoint"),
    (lambda p: save_file({"a": torch.zeros(1)}, str(p)), r"lacks \['identity', 'step', 'tokens'\]"),
    (lambda p: save_file({"a": torch.zeros(1)}, str(p), metadata={"identity": "{}", "step": "1", "tokens": "9"}),
     "is not a train_dictionaries checkpoint"),
], ids=["garbage", "no-metadata", "no-recipe"])
def test_from_checkpoint_refuses_a_file_no_trainer_wrote(tmp_path, write, match):
    write(tmp_path / "checkpoint.safetensors")
    with pytest.raises(InterpError, match=match):
        from_checkpoint(tmp_path)


@pytest.fixture(scope="module")
def zoo():
    return interp.load("zoo:lm-gpt2")


QUICK = Recipe(n_features=256, k=8, lr=3e-3, tokens=12_000, rows=16, dead_after=4000, checkpoint_every=50)


def test_zoo_transcoder_quick_budget(zoo, tmp_path):
    rows, valid = token_rows(zoo, "zoo", max_rows=2000, seed=1)
    pair = mlp_sites(0)
    d = train_dictionaries(zoo, [pair], rows, valid, tmp_path, recipe=QUICK, model_name="zoo:lm-gpt2", progress=False)[pair]
    assert d.kind == "transcoder" and d.site_in == "blocks.0.ln2.hook_normalized"
    held, held_valid = token_rows(zoo, "zoo", max_rows=64, seed=99)
    s, = scores(zoo, [d], held, held_valid)
    assert s["fve"] > 0.5, s  # layer 0's MLP, 12k tokens
    assert s["ce_spliced"] < s["ce_zero"] and s["ce_recovered"] > 0.5, s  # the splice beats ablating the MLP
    assert s["l0"] < 3 * QUICK.k and 0 <= s["dead"] < 1
    assert Dictionary.load(tmp_path / "0.safetensors").W_enc.equal(d.W_enc)  # saved in interp's format
    assert Dictionary.load(tmp_path / "0.safetensors").meta["history"] == d.meta["history"] != []
    quick, = scores(zoo, [d], held, held_valid, ce=False)  # without the spliced runs
    assert quick == {k: v for k, v in s.items() if not k.startswith("ce_")}


def test_training_resumes_to_the_same_weights(zoo, tmp_path, monkeypatch):
    """A run stopped halfway and resumed ends as the uninterrupted run, history included; a
    finished run is not reused for other tokens of the same shape, another recipe or changed code."""
    import interp.features.train as training

    rows, valid = token_rows(zoo, "zoo", max_rows=600, seed=1)
    site = "blocks.1.hook_resid_post"
    small = Recipe(n_features=64, k=4, tokens=2000, rows=32, checkpoint_every=2)
    run = lambda out, recipe, rows=rows: train_dictionaries(zoo, [site], rows, valid, tmp_path / out, recipe=recipe,  # noqa: E731
                                                            progress=False)
    whole = run("a", small)[(site, site)]
    half = Recipe(**{**small.__dict__, "tokens": 1000})
    stop = run("b", half)[(site, site)].meta["steps"]
    resumed = run("b", small)[(site, site)]
    assert resumed.meta["steps"] == whole.meta["steps"]
    torch.testing.assert_close(resumed.W_dec, whole.W_dec)
    torch.testing.assert_close(resumed.threshold, whole.threshold)
    # the history: one row per checkpoint_every (2) steps and one where each run stopped
    h, hr = whole.meta["history"], resumed.meta["history"]
    assert [r["step"] for r in h] == sorted({*range(2, whole.meta["steps"], 2), whole.meta["steps"]})
    assert [r["step"] for r in hr] == sorted({r["step"] for r in h} | {stop}) and hr[0] == h[0] and hr[-1] == h[-1]
    back = from_checkpoint(tmp_path / "b")[(site, site)]
    torch.testing.assert_close(back.W_enc, whole.W_enc)
    assert back.meta["history"] == hr
    with pytest.raises(InterpError, match="another run"):
        run("b", Recipe(**{**small.__dict__, "k": 5}))
    other = rows.clone()
    other[valid] = rows[valid].roll(1)  # the same shape, other tokens
    with pytest.raises(InterpError, match="tokens"):
        run("b", small, other)
    # a checkpoint written before digests (identity without tokens_digest and code) resumes, with a warning
    from safetensors import safe_open

    from interp.files.storage import write_tensors_atomic

    ckpt = tmp_path / "a" / "checkpoint.safetensors"
    with safe_open(str(ckpt), "pt") as fh:
        meta, saved = fh.metadata(), {k: fh.get_tensor(k) for k in fh.keys()}
    old = {k: v for k, v in json.loads(meta["identity"]).items() if k not in ("tokens_digest", "code")}
    write_tensors_atomic(ckpt, saved, {**meta, "identity": json.dumps(old, sort_keys=True)})
    with pytest.warns(UserWarning, match="predates token digests"):
        torch.testing.assert_close(run("a", small)[(site, site)].W_dec, whole.W_dec)
    monkeypatch.setattr(training, "CODE_VERSION", "changed")
    with pytest.raises(InterpError, match="changed"):
        run("b", small)


def test_several_widths_and_ks_train_in_one_pass(zoo, tmp_path):
    """Recipes of other widths, k and lr train side by side from the same forwards, each dictionary
    equal to the one its recipe trains alone; recipes that read other data are refused."""
    rows, valid = token_rows(zoo, "zoo", max_rows=300, seed=2)
    pairs = ["blocks.1.hook_resid_post", mlp_sites(0)]
    a = Recipe(n_features=64, k=4, tokens=800, rows=32, checkpoint_every=3)
    b = Recipe(**{**a.__dict__, "n_features": 32, "k": 2, "lr": 2e-3})
    both = train_dictionaries(zoo, pairs, rows, valid, tmp_path / "ab", recipe=[a, b], progress=False)
    assert len(both) == 4 and sorted((d.n_features, d.meta["recipe"]["k"]) for d in both.values()) == [(32, 2)] * 2 + [(64, 4)] * 2
    for r in (a, b):
        alone = train_dictionaries(zoo, pairs, rows, valid, tmp_path / f"{r.k}", recipe=r, progress=False)
        for (site_in, site_out), d in alone.items():
            together = both[(site_in, site_out, r)]
            torch.testing.assert_close(together.W_dec, d.W_dec, rtol=0, atol=0)
            torch.testing.assert_close(together.threshold, d.threshold, rtol=0, atol=0)
            assert together.meta["history"] == d.meta["history"]
    back = from_checkpoint(tmp_path / "ab")  # keyed by the recipes with the tokens seen
    assert [k[:2] + (k[2].k,) for k in back] == [k[:2] + (k[2].k,) for k in both]
    assert all(x.W_enc.equal(y.W_enc) for x, y in zip(back.values(), both.values()))
    with pytest.raises(InterpError, match="rows differ"):
        train_dictionaries(zoo, pairs, rows, valid, tmp_path / "x", recipe=[a, Recipe(**{**a.__dict__, "rows": 16})])


def _random_dictionary(site_in, site_out, d_in=8, d_out=8, n=16, threshold=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    return Dictionary(torch.randn(d_in, n, generator=g), torch.randn(n, generator=g), torch.randn(n, d_out, generator=g),
                      torch.randn(d_out, generator=g), site_in, site_out,
                      torch.rand(n, generator=g) if threshold else None, model="m")


@pytest.mark.parametrize("pair,threshold", [
    (("blocks.1.hook_resid_post", "blocks.1.hook_resid_post"), False),
    (("blocks.1.hook_resid_post", "blocks.1.hook_resid_post"), True),
    (("blocks.2.ln2.hook_normalized", "blocks.2.hook_mlp_out"), False),
    (("blocks.2.ln2.hook_normalized", "blocks.2.hook_mlp_out"), True),
])
def test_saelens_round_trip(tmp_path, pair, threshold):
    d = _random_dictionary(*pair, threshold=threshold)
    save_saelens(d, tmp_path / "sae")
    cfg = json.loads((tmp_path / "sae" / "cfg.json").read_text())
    arch = {("sae", False): "standard", ("sae", True): "jumprelu", ("transcoder", False): "transcoder",
            ("transcoder", True): "jumprelu_transcoder"}[d.kind, threshold]
    assert cfg["architecture"] == arch and cfg["metadata"]["hook_name"] == pair[0] and cfg["d_sae"] == 16
    back = load_saelens(tmp_path / "sae")
    assert (back.site_in, back.site_out, back.model) == pair + ("m",)
    x = torch.randn(5, 8)
    torch.testing.assert_close(back(x), d(x))
    torch.testing.assert_close(back.W_dec, d.W_dec)


def test_writers_refuse_paths_they_would_damage(tmp_path):
    """save_saelens replaces a whole folder, so a folder holding anything but a SAELens dictionary is
    refused and left as it was (an earlier SAELens folder is replaced); a file in the way, or a
    folder where a file goes, is an InterpError naming the path, and nothing half-written stays."""
    d = _random_dictionary("blocks.1.hook_resid_post", "blocks.1.hook_resid_post")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "notes.txt").write_text("keep me")
    with pytest.raises(InterpError, match=r"holds \['notes.txt'\] besides a SAELens dictionary"):
        save_saelens(d, tmp_path / "work")
    assert (tmp_path / "work" / "notes.txt").read_text() == "keep me"
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(InterpError, match="a_file is a file"):
        save_saelens(d, tmp_path / "a_file")
    with pytest.raises(InterpError, match="a_file is a file, not a folder"):
        save_saelens(d, tmp_path / "a_file" / "sae")
    with pytest.raises(InterpError, match="work is a folder"):
        d.save(tmp_path / "work")
    save_saelens(d, tmp_path / "sae")
    save_saelens(replace(d, model="again"), tmp_path / "sae")
    assert load_saelens(tmp_path / "sae").model == "again"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "sae", "work"]


def test_loads_a_file_in_saelens_layout(tmp_path):
    """A folder as SAELens 6 writes a standard SAE: hook under "metadata", and the encoder reads
    x - b_dec (apply_b_dec_to_input), which loading folds into b_enc."""
    g = torch.Generator().manual_seed(1)
    w = {"W_enc": torch.randn(8, 12, generator=g), "b_enc": torch.randn(12, generator=g),
         "W_dec": torch.randn(12, 8, generator=g), "b_dec": torch.randn(8, generator=g)}
    (tmp_path / "s").mkdir()
    save_file(w, str(tmp_path / "s" / "sae_weights.safetensors"))
    cfg = {"architecture": "standard", "d_in": 8, "d_sae": 12, "dtype": "float32", "device": "cpu",
           "apply_b_dec_to_input": True, "normalize_activations": "none",
           "metadata": {"model_name": "gpt2", "hook_name": "blocks.3.hook_resid_pre", "hook_layer": 3}}
    (tmp_path / "s" / "cfg.json").write_text(json.dumps(cfg))
    d = load_saelens(tmp_path / "s")
    x = torch.randn(4, 8, generator=g)
    f = torch.relu((x - w["b_dec"]) @ w["W_enc"] + w["b_enc"])  # SAELens's standard encode
    torch.testing.assert_close(d.encode(x), f)
    torch.testing.assert_close(d(x), f @ w["W_dec"] + w["b_dec"])
    assert d.site_in == "blocks.3.hook_resid_pre" and d.kind == "sae" and d.model == "gpt2"
    cfg["architecture"] = "topk"
    (tmp_path / "s" / "cfg.json").write_text(json.dumps(cfg))
    with pytest.raises(InterpError, match="topk"):
        load_saelens(tmp_path / "s")
    with pytest.raises(InterpError, match="cfg.json"):
        load_saelens(tmp_path)


def test_suite_trains_scores_and_renders_its_doc(tmp_path, monkeypatch):
    """The committed pipeline end to end at a tiny budget: train (into $INTERP_CACHE), score into one
    JSON, render docs/features.md's zoo regions from it, every number bound to its key."""
    from dataclasses import replace

    from interp.features import suite
    from interp.studies import docs as bound
    from interp.studies.features import bodies

    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    tiny = replace(suite.SUITES["zoo"], budgets={"quick": Recipe(n_features=64, k=4, lr=3e-3, tokens=1500, rows=16)},
                   zoo_rows=400, eval_rows=32, fit_rows=200)
    monkeypatch.setitem(suite.SUITES, "zoo", tiny)
    suite.train_suite("zoo", "quick", progress=False)
    assert len(suite.load_dictionaries("zoo", "quick")) == 5 and suite.folder("zoo", "quick").is_relative_to(tmp_path)
    data = suite.score_all(["zoo"], "quick")
    rows = data["zoo"]["dictionaries"]
    assert [r["layer"] for r in rows] == [0, 1, 2, 3, 1] and [r["kind"] for r in rows][-1] == "sae"
    assert all(-1 <= r["fve_control"] <= 1 for r in rows)
    assert rows[0]["ce_zero"] > rows[0]["ce_clean"] + 1 and rows[-1]["ce_zero"] > rows[-1]["ce_clean"] + 1  # layer 0's MLP, the residual
    assert data["budget"]["zoo"]["tokens"] == 1500 and data["zoo"]["trained"]["finished"]
    regions = bodies(data)
    doc = "".join(f"<!-- gen:{k} -->\n{v}\n<!-- /gen:{k} -->\n" for k, v in regions.items())
    assert set(regions) == {"zoo-summary", "zoo-table"} and bound.check(doc, data) == []
    bound.set_at(data, "/zoo/dictionaries/0/fve", rows[0]["fve"] * 1.01 + 0.01)
    assert bound.check(doc, data)  # a changed number no longer checks
