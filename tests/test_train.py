"""Each training recipe runs end to end for a few dozen steps; training is deterministic."""

from dataclasses import replace

import pytest
import torch

import interp
from interp.model.building import hf_config, hf_model_class
from interp.tasks import english
from interp.zoo.train import RECIPES, grokking_steps, train

KINDS = ["lm-gpt2", "lm-llama", "lm-gemma2", "lm-qwen2", "mlm-bert", "dyck", "modadd", "markov-s0", "multidomain"]


@pytest.mark.slow
@pytest.mark.parametrize("name", KINDS)
def test_quick_train_smoke(name, tmp_path):
    card = train(RECIPES[name], tmp_path / name, steps=12, progress=False)
    model = interp.load(tmp_path / name)
    assert model.cfg.n_layers == RECIPES[name].sizes["n_layers"]
    assert card["accuracy"] and all(0.0 <= v for v in card["accuracy"].values())
    assert (tmp_path / name / "card.json").exists() and (tmp_path / name / "README.md").exists()
    if name == "modadd":
        assert (tmp_path / name / "checkpoints" / "after" / "model.safetensors").exists()


def test_training_is_deterministic(tmp_path):
    a = train(RECIPES["markov-s1"], tmp_path / "a", steps=15, progress=False)
    b = train(RECIPES["markov-s1"], tmp_path / "b", steps=15, progress=False)
    assert a["accuracy"] == b["accuracy"]
    ma, mb = interp.load(tmp_path / "a"), interp.load(tmp_path / "b")
    toks = torch.tensor([[2, 5, 6, 7, 8, 5]])
    assert torch.equal(ma(toks), mb(toks))


def test_grokking_steps_picks_before_at_after():
    hist = [{"step": s, "test": t} for s, t in [(0, 0.0), (50, 0.1), (100, 0.3), (150, 0.95), (200, 1.0)]]
    assert grokking_steps(hist) == {"before": 100, "at": 150, "after": 200}


def test_unknown_recipe_is_a_clear_error(capsys):
    from interp.cli import main

    assert main(["zoo", "train", "no-such-model"]) == 2
    assert "recipes: lm-gpt2" in capsys.readouterr().err


def _tiny_lm(family: str, tie: int = 1):
    sizes = dict(d_model=16, n_layers=1, n_heads=2, d_mlp=32, n_ctx=32, tie=tie)
    return hf_model_class(family)(hf_config(family, vocab_size=len(english.tokenizer()), **sizes))


@pytest.mark.parametrize("family, tie", [("gpt2", 1), ("llama", 0)])
def test_name_codes_project_onto_shared_vector_plus_code(family, tie):
    """apply() sets every name row to mean(rows - codes) + its code, in the embedding and (untied)
    the unembedding, is idempotent, and leaves other rows to the optimiser."""
    from interp.zoo.train import _name_codes

    recipe = replace(RECIPES[f"lm-{family}"], name_codes=6, name_scale=2.0)
    model = _tiny_lm(family, tie)
    codes = _name_codes(model, recipe)
    assert len(codes.weights) == (1 if tie else 2)
    ids = codes.ids
    assert torch.allclose(codes.codes.norm(dim=1), torch.full((len(ids),), 2.0))
    assert torch.linalg.matrix_rank(codes.codes).item() == 6  # spans exactly its subspace
    assert codes.violation() > 0.1  # a fresh model's name rows are not coded yet
    codes.apply()
    assert codes.violation() < 1e-5
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.0)
    sentence = "when mary and john went to the store , john gave a drink to mary ."
    rows = torch.tensor([english.encode([sentence])[0]])
    glue = torch.tensor(english.encode(["when went store"])[0][1:-1])
    before = model.get_input_embeddings().weight.detach().clone()
    for _ in range(3):
        loss = model(input_ids=rows, labels=rows).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        pre = [w.detach()[ids].clone() for w in codes.weights]
        assert codes.violation() > 1e-4  # the optimiser step moved names apart
        codes.apply()
        for w, p in zip(codes.weights, pre):
            expected = (p - codes.codes).mean(0) + codes.codes
            assert torch.allclose(w.detach()[ids], expected, atol=1e-6)
        snapshot = [w.detach().clone() for w in codes.weights]
        codes.apply()  # idempotent
        assert all(torch.allclose(w.detach(), s, atol=1e-6) for w, s in zip(codes.weights, snapshot))
    after = model.get_input_embeddings().weight.detach()
    assert not torch.allclose(after[ids], before[ids])  # the shared part learns
    assert not torch.allclose(after[glue], before[glue])  # other words train freely


def test_training_keeps_the_name_codes_through_both_phases(tmp_path):
    from safetensors.torch import load_file

    from interp.zoo.train import _name_codes

    recipe = replace(RECIPES["lm-llama"], sizes={**RECIPES["lm-llama"].sizes, "d_model": 32, "d_mlp": 64},
                     data={"sentences": 200})
    train(recipe, tmp_path / "m", steps=3, progress=False, evaluate_after=False)
    model = hf_model_class("llama")(hf_config("llama", vocab_size=len(english.tokenizer()), **recipe.sizes))
    model.load_state_dict(load_file(str(tmp_path / "m" / "model.safetensors")), strict=False)
    codes = _name_codes(model, recipe)
    assert codes.violation() < 1e-5
    other = replace(recipe, name="lm-other")  # another recipe draws other codes
    assert _name_codes(model, other).violation() > 0.1
    with pytest.raises(ValueError, match="do not carry this recipe's name codes"):
        train(other, tmp_path / "o", steps=1, progress=False, evaluate_after=False, phase1_from=tmp_path / "m")
    assert not (tmp_path / "o").exists()


def test_name_codes_reject_bad_dimensions():
    from interp.zoo.train import _name_codes

    model = _tiny_lm("gpt2")
    with pytest.raises(ValueError, match="name_codes=17 must be in 1..16"):
        _name_codes(model, replace(RECIPES["lm-gpt2"], name_codes=17))
    with pytest.raises(ValueError, match="name_scale=0.0 must be > 0"):
        _name_codes(model, replace(RECIPES["lm-gpt2"], name_codes=4, name_scale=0.0))
    with pytest.raises(ValueError, match="is for the english task"):
        _name_codes(model, replace(RECIPES["dyck"], name_codes=4))
