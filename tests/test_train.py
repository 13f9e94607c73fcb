"""Each training recipe runs end to end for a few dozen steps; training is deterministic."""

import pytest
import torch

import interp
from interp.train import RECIPES, grokking_steps, train

KINDS = ["lm-gpt2", "lm-llama", "lm-gemma2", "lm-qwen2", "mlm-bert", "dyck", "modadd", "markov-s0"]


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
