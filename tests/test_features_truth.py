"""The ground-truth suite: its cases hold the features they say, its scores read 1 for the truth and
chance for random rows, and the suite runs end to end at a small size with every architecture
ahead of the random control where the features are plain to find. And the architectures it
compares: each trains, saves as a Dictionary (TopK keeps its k), exports to SAELens or refuses."""

from __future__ import annotations

import math

import pytest
import torch

from interp.errors import InterpError
from interp.features import Dictionary, load_saelens, save_saelens
from interp.features.train import ARCHITECTURES, Recipe, fit, fit_each
from interp.features.truth import CASES, combined, interval, matching, max_cosine, run, sample


@pytest.mark.parametrize("case", sorted(CASES))
def test_cases_are_sparse_sums_of_their_directions(case):
    x, dirs = sample(case, 4000, 32, seed=0)
    assert x.shape == (4000, 32) and dirs.shape[1] == 32
    torch.testing.assert_close(dirs.norm(dim=1), torch.ones(len(dirs)))
    again, same = sample(case, 4000, 32, seed=0)
    assert torch.equal(x, again) and torch.equal(dirs, same)  # a seed is one draw
    coef = torch.linalg.lstsq(dirs.T, x.T).solution.T if len(dirs) <= 32 else None  # [n, m] when identifiable
    if coef is not None:
        active = (coef.abs() > 1e-3).sum(1).float().mean()
        assert abs(active - CASES[case].l0) < 0.25 * CASES[case].l0, active  # as sparse as the case says
        assert coef.min() > -1e-3  # features add, never subtract
    if case == "planted":  # exactly one token, one position, one previous token
        assert torch.equal((coef > 0.5).sum(1), torch.full((4000,), 3))
    sizes = {"independent": 32, "correlated": 32, "hierarchical": 40, "superposition": 128, "planted": 20}
    assert len(dirs) == sizes[case]  # hierarchical: 8 parents and their 32 children; planted: 8 + 4 + 8 one-hots


def test_scores_read_one_for_the_truth_and_chance_for_random_rows():
    _, dirs = sample("superposition", 8, 16, seed=1)
    shuffled = torch.cat([dirs[torch.randperm(len(dirs))] * 3, torch.randn(5, 16)])  # any order, any norm, extra rows
    assert max_cosine(dirs, shuffled).min() > 1 - 1e-6 and matching(dirs, shuffled) > 1 - 1e-6
    one = torch.cat([dirs[:1], -dirs[:1].expand(len(dirs) - 1, -1)])  # +d0 once, -d0 for the rest: the best row of
    assert matching(dirs, one) < max_cosine(dirs, one).mean() - 0.05  # many directions is d0, which a matching uses once
    rand = torch.randn(2 * len(dirs), 16, generator=torch.Generator().manual_seed(0))
    assert max_cosine(dirs, rand).mean() < 0.7 and matching(dirs, rand) <= max_cosine(dirs, rand).mean() + 1e-6
    iv = interval([0.5, 0.6, 0.7])
    assert iv["mean"] == pytest.approx(0.6) and iv["seeds"] == [0.5, 0.6, 0.7]
    assert iv["hi"] - iv["mean"] == pytest.approx(4.302653 * 0.1 / math.sqrt(3), rel=1e-5)  # t(0.975, 2 dof) * sd / sqrt(n)
    assert iv["mean"] - iv["lo"] == pytest.approx(iv["hi"] - iv["mean"])


def test_refusals():
    with pytest.raises(InterpError, match="not one of"):
        sample("nope", 10, 16, 0)
    with pytest.raises(InterpError, match="multiple of 8"):
        sample("independent", 10, 12, 0)
    with pytest.raises(InterpError, match="budget"):
        run("huge")


def test_suite_runs_small_and_beats_its_control():
    data = run("quick", progress=False)
    res = data["results"]["independent"]
    for arch in ARCHITECTURES:
        for key in ("mmc", "mcc", "fve", "l0"):
            iv = res[arch][key]
            assert iv["lo"] <= iv["mean"] <= iv["hi"] and len(iv["seeds"]) == data["budget"]["seeds"]
        assert res[arch]["mmc"]["mean"] > res["random"]["mmc"]["hi"] + 0.2  # far above chance
        assert res[arch]["mcc"]["mean"] <= res[arch]["mmc"]["mean"] + 1e-6  # float32 cosines
    assert res["topk"]["l0"]["mean"] <= 4 + 1e-6  # TopK keeps k at inference
    assert data["choice"]["best"] in ARCHITECTURES and set(data["results"]) == {"independent", "planted"}
    from interp.studies import docs as bound
    from interp.studies.features.truth import regions

    body = regions(data)  # docs/dictionary_truth.md's regions: every number bound to its key
    doc = "".join(f"<!-- gen:{k} -->\n{v}\n<!-- /gen:{k} -->\n" for k, v in body.items())
    assert set(body) == {"choice", "budget", "table-independent", "table-planted"} and bound.check(doc, data) == []
    planted = data["results"]["planted"]["relu"]["mcc"]["mean"]
    bound.set_at(data, "/results/planted/relu/mcc/mean", planted * 1.01 + 0.01)
    assert bound.check(doc, data)  # a changed number no longer checks


# the architectures the suite compares: each trains, saves as a Dictionary and exports honestly

def _data(seed=0):
    x, dirs = sample("independent", 12_000, 16, seed)
    return x, dirs


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_architecture_trains_and_saves(arch, tmp_path):
    x, dirs = _data()
    recipe = Recipe(n_features=32, k=4, tokens=12_000, lr=3e-3, dead_after=3000, architecture=arch, l0_coefficient=3e-2)
    d = fit(x, site_in="blocks.0.hook_resid_post", recipe=recipe, batch=256)
    assert d.meta["trainer"] == f"interp {arch}" and d.meta["recipe"]["architecture"] == arch
    assert max_cosine(dirs, d.W_dec).mean() > 0.8  # it learned the directions, not noise
    assert (d.threshold is None) == (arch in ("relu", "topk")) and (d.k == 4) == (arch == "topk")
    if arch == "jumprelu":  # thresholds of its own per feature; BatchTopK's one global threshold
        assert d.threshold.unique().numel() > 1 and (d.threshold > 0).all()
    if arch in ("batchtopk", "matryoshka"):
        assert d.threshold.unique().numel() == 1
    if arch != "relu":  # unit decoder rows (in scaled units): only ReLU + L1 leaves their norms free
        norms = d.W_dec.norm(dim=1)
        torch.testing.assert_close(norms, norms[:1].expand_as(norms))
    back = Dictionary.load(d.save(tmp_path / "d.safetensors"))
    assert back.k == d.k and torch.equal(back(x[:64]), d(x[:64]))
    if arch == "topk":
        assert ((d.encode(x) > 0).sum(-1) <= 4).all()  # k kept at inference, per token
        with pytest.raises(InterpError, match="encode"):
            d.activation(d.pre(x[:2], torch.tensor([0, 1])), torch.tensor([0, 1]))
    try:  # SAELens holds it exactly, or the export says why not
        save_saelens(d, tmp_path / "sae")
    except InterpError as err:
        assert arch == "topk" and "top 4" in str(err)
    else:
        torch.testing.assert_close(load_saelens(tmp_path / "sae")(x[:64]), d(x[:64]))


def test_recipes_fitted_together_equal_each_fitted_alone():
    x, _ = _data(1)
    a = Recipe(n_features=32, k=4, tokens=3000, architecture="jumprelu")
    b = Recipe(n_features=24, k=2, tokens=3000, architecture="matryoshka", prefixes=(6, 12, 24))
    both = fit_each(x, site_in="blocks.0.hook_resid_post", recipes=[a, b], batch=256)
    for r, d in zip((a, b), both):
        alone = fit(x, site_in="blocks.0.hook_resid_post", recipe=r, batch=256)
        assert torch.equal(alone.W_dec, d.W_dec) and alone.meta["history"] == d.meta["history"]
    with pytest.raises(InterpError, match="share the data"):
        fit_each(x, site_in="blocks.0.hook_resid_post", recipes=[a, Recipe(tokens=10)])


def test_sparsity_penalties_set_sparsity():
    """A larger L1 (ReLU) or L0 (JumpReLU) coefficient gives fewer active features."""
    x, _ = _data(2)
    recipes = [Recipe(n_features=32, tokens=12_000, lr=1e-2, architecture="relu", l1_coefficient=c) for c in (0.3, 3.0)]
    recipes += [Recipe(n_features=32, tokens=12_000, lr=1e-2, architecture="jumprelu", l0_coefficient=c) for c in (1e-4, 0.3)]
    l0 = [float((d.encode(x) > 0).sum(-1).float().mean())
          for d in fit_each(x, site_in="blocks.0.hook_resid_post", recipes=recipes, batch=256)]
    assert l0[0] > 1.5 * l0[1] and l0[2] > 1.5 * l0[3], l0


@pytest.mark.parametrize("bad,match", [
    ({"architecture": "gated"}, "architecture"), ({"prefixes": (8, 4, 32)}, "prefixes"),
    ({"prefixes": (4, 16)}, "ending at"), ({"bandwidth": 0.0}, "bandwidth"), ({"l1_coefficient": -1.0}, "l1_coefficient"),
])
def test_recipe_refusals(bad, match):
    with pytest.raises(InterpError, match=match):
        Recipe(n_features=32, **bad)
    assert Recipe(n_features=32).nested == (4, 8, 16, 32) and Recipe(**{**Recipe().__dict__, "prefixes": [256, 2048]}).prefixes == (256, 2048)


def test_combined_counts_rows_that_mix_two_directions():
    _, dirs = sample("planted", 8, 32, seed=0)  # orthonormal
    rows = torch.cat([dirs[:4], dirs[4:8] + dirs[8:12], dirs[12:14] + 0.1 * dirs[14:16]])  # 4 pure, 4 mixed, 2 nearly pure
    assert combined(dirs, rows) == pytest.approx(0.4)
    assert combined(dirs, dirs) == 0.0


def test_the_default_architecture_is_the_suites_choice():
    """Recipe's default architecture is the one docs/dictionary_truth.json found best, and it finds
    the independent features (mean max cosine >= 0.92, the interval's low end too)."""
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).parents[1] / "docs" / "dictionary_truth.json").read_text())
    best = data["choice"]["best"]
    assert Recipe().architecture == best
    assert data["results"]["independent"][best]["mmc"]["lo"] >= 0.92


def test_architectures_train_side_by_side_on_a_model_and_read_back_from_a_checkpoint(tmp_path):
    """Recipes of every architecture train from the same forwards of a zoo model; the checkpoint
    gives back the same dictionaries, thresholds and k (a checkpoint with no architecture in its
    recipes was written by the BatchTopK-only trainer and reads back as BatchTopK)."""
    import json as _json

    import interp
    from safetensors import safe_open

    from interp.features.corpus import token_rows
    from interp.features.train import from_checkpoint, train_dictionaries
    from interp.files.storage import write_tensors_atomic

    zoo = interp.load("zoo:lm-gpt2")
    rows, valid = token_rows(zoo, "zoo", max_rows=200, seed=3)
    recipes = [Recipe(n_features=32, k=4, tokens=600, rows=32, checkpoint_every=5, architecture=a) for a in ARCHITECTURES]
    trained = train_dictionaries(zoo, ["blocks.1.hook_resid_post"], rows, valid, tmp_path, recipe=recipes, progress=False)
    back = from_checkpoint(tmp_path)
    assert [k[2].architecture for k in back] == list(ARCHITECTURES)
    for d, e in zip(trained.values(), back.values()):
        assert d.W_enc.equal(e.W_enc) and d.k == e.k and d.meta["trainer"] == e.meta["trainer"]
        assert (d.threshold is None and e.threshold is None) or d.threshold.equal(e.threshold)
    ckpt = tmp_path / "checkpoint.safetensors"
    with safe_open(str(ckpt), "pt") as fh:
        meta, tensors = fh.metadata(), {k: fh.get_tensor(k) for k in fh.keys()}
    ident = _json.loads(meta["identity"])
    i = ARCHITECTURES.index("batchtopk")  # keep its trainee alone, its recipe as the old trainer wrote it
    ident["recipe"] = [{k: v for k, v in ident["recipe"][i].items() if k != "architecture"}]
    old = {k.split(".", 1)[1]: v for k, v in tensors.items() if k.startswith(f"{i}.")}
    write_tensors_atomic(ckpt, {f"0.{k}": v for k, v in old.items()}, {**meta, "identity": _json.dumps(ident),
                                                                         "history": _json.dumps([_json.loads(meta["history"])[i]])})
    (only,) = from_checkpoint(tmp_path).values()
    assert only.meta["recipe"]["architecture"] == "batchtopk" and only.threshold.equal(list(trained.values())[i].threshold)
