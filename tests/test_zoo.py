"""Every shipped zoo model loads through interp.load and meets its card on a fresh sample."""

import pytest
import torch

import interp
from interp import zoo
from interp.train import RECIPES, evaluate

# The acceptance thresholds, per recipe kind: (split, bound, "min" | "max").
REQUIRED = {
    "english": [("sva_id", 0.95, "min"), ("ioi_train", 0.90, "min"), ("ioi_test", 0.90, "min")],
    "mlm": [("sva_id", 0.90, "min")],
    "dyck": [("seen_struct", 0.95, "min")],
    "modular": [("test", 0.99, "min")],
    "markov": [("kl_to_true", 0.01, "max")],
}
NAMES = [e["name"] for e in zoo.entries()]


def _kind(recipe):
    return "mlm" if recipe.data.get("masked") else recipe.task


def test_zoo_is_complete_and_small():
    assert set(NAMES) == set(RECIPES), f"missing from data/zoo: {set(RECIPES) - set(NAMES)}"
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
        else:  # a fresh sample of 512: allow 3 standard errors (at least 0.02) of sampling noise
            tolerance = max(0.02, 3 * (recorded * (1 - recorded) / 512) ** 0.5)
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
def test_shipped_names_are_a_shared_vector_plus_a_low_dimensional_code(name):
    """The recipe's NameCodes hold in the shipped weights: the 40 name rows of the embedding and
    the unembedding, minus their mean, span exactly `name_codes` dimensions, the same subspace."""
    from safetensors.torch import load_file

    from interp.tasks import english

    ids = english.encode([" ".join(english.TRAIN_NAMES + english.TEST_NAMES)])[0][1:-1]
    weights = load_file(str(interp.model.ZOO_DIR / name / "model.safetensors"))
    vocab = len(english.tokenizer())
    rows = [w[ids] - w[ids].mean(0) for w in weights.values() if w.ndim == 2 and w.shape[0] == vocab]
    assert len(rows) == (1 if RECIPES[name].sizes.get("tie", 1) else 2)
    k = RECIPES[name].name_codes
    for r in rows:
        assert torch.linalg.matrix_rank(r, atol=1e-4).item() == k
    assert torch.allclose(rows[0], rows[-1], atol=1e-5)  # embedding and unembedding share the codes
