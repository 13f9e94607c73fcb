"""Every shipped zoo model loads through interp.load and meets its card on a fresh sample."""

import pytest

import interp
from interp import zoo
from interp.zoo.train import RECIPES, evaluate

# The acceptance thresholds, per recipe kind: (split, bound, "min" | "max").
REQUIRED = {
    "english": [("sva_id", 0.95, "min"), ("ioi_train", 0.90, "min"), ("ioi_test", 0.90, "min")],
    "mlm": [("sva_id", 0.90, "min")],
    "dyck": [("seen_struct", 0.95, "min")],
    "modular": [("test", 0.99, "min")],
    "markov": [("kl_to_true", 0.01, "max")],
    "domains": [("counting_up", 0.9, "min"), ("grammar_agree", 0.9, "min"), ("facts_capital", 0.9, "min")],
}
NAMES = [e["name"] for e in zoo.entries()]


def _kind(recipe):
    return "mlm" if recipe.data.get("masked") else recipe.task


def test_zoo_is_complete_and_small():
    assert set(NAMES) == set(RECIPES), f"missing from interp/data/zoo: {set(RECIPES) - set(NAMES)}"
    size = sum(p.stat().st_size for p in interp.model.ZOO_DIR.rglob("*") if p.is_file())
    assert size < 30 * 2**20, f"zoo is {size / 2**20:.1f} MB"
    families = {zoo.card(n)["family"] for n in NAMES if n.startswith("lm-")}
    assert families == {"gpt2", "llama", "gemma2", "qwen2"}


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_model_meets_its_card_on_a_fresh_sample(name):
    card = zoo.card(name)
    recipe = RECIPES[name]
    got = evaluate(recipe, interp.load(f"zoo:{name}"), seed=777)
    for split, recorded in card["accuracy"].items():
        if split == "kl_to_true":
            assert got[split] <= recorded + 0.005, (split, got[split], recorded)
        else:  # two samples of 512: a two-proportion test at 3 standard errors (pooled p), at least 0.02
            pooled = (got[split] + recorded) / 2
            tolerance = max(0.02, 3 * (2 * pooled * (1 - pooled) / 512) ** 0.5)
            assert got[split] >= recorded - tolerance, (split, got[split], recorded)
    for split, bound, how in REQUIRED[_kind(recipe)]:
        assert (got[split] >= bound) if how == "min" else (got[split] <= bound), (split, got[split], bound)


def test_grokking_checkpoints_bracket_the_jump():
    import json

    marks = {}
    for label in ("before", "at", "after"):
        d = interp.model.ZOO_DIR / "modadd" / "checkpoints" / label
        marks[label] = json.loads((d / "checkpoint.json").read_text())
    assert marks["before"]["step"] < marks["at"]["step"] < marks["after"]["step"]
    assert marks["before"]["test"] < 0.5 <= 0.9 <= marks["at"]["test"]
    assert marks["after"]["test"] >= 0.99 and marks["before"]["train"] > marks["before"]["test"]


def test_zoo_cli_lists_models(capsys):
    from interp.cli import main

    assert main(["zoo", "list"]) == 0
    out = capsys.readouterr().out
    assert all(n in out for n in NAMES)
    assert main(["zoo", "list", "--json"]) == 0
    assert "accuracy" in capsys.readouterr().out


@pytest.mark.parametrize("name", [n for n in NAMES if RECIPES[n].name_codes])
def test_shipped_names_carry_their_recipes_codes(name):
    """The shipped weights hold the recipe's NameCodes: every name row of the embedding (and the
    unembedding) is one shared vector plus the code the recipe draws; other families' codes differ."""
    from safetensors.torch import load_file

    from interp.model.building import hf_config, hf_model_class
    from interp.tasks import english
    from interp.zoo.train import _name_codes

    recipe = RECIPES[name]
    model = hf_model_class(recipe.family)(hf_config(recipe.family, vocab_size=len(english.tokenizer()), **recipe.sizes))
    missing, _ = model.load_state_dict(load_file(str(interp.model.ZOO_DIR / name / "model.safetensors")), strict=False)
    model.tie_weights()
    assert set(missing) <= {"lm_head.weight"}
    assert _name_codes(model, recipe).violation() < 1e-4
    other = next(n for n in NAMES if RECIPES[n].name_codes and n != name)
    assert _name_codes(model, RECIPES[other]).violation() > 0.1


def test_a_user_zoo_card_lacking_what_the_list_shows_is_refused_by_name(tmp_path, monkeypatch, capsys):
    from interp.cli import main
    from interp.errors import InterpError

    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    folder = tmp_path / "zoo" / "mine"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "card.json").write_text('{"name": "mine", "family": "gpt2", "task": "ioi"}')  # no sizes (it was a KeyError)
    with pytest.raises(InterpError, match=r"mine/card.json: sizes is missing"):
        zoo.table()
    assert main(["zoo", "list"]) == 2
    assert "card.json: sizes is missing" in capsys.readouterr().err
