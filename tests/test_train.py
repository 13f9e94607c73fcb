"""Each training recipe runs end to end for a few dozen steps; training is deterministic."""

from dataclasses import replace

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


@pytest.mark.parametrize("family, tie", [("gpt2", 1), ("llama", 0)])
def test_name_codes_keep_names_exchangeable(family, tie):
    """After any optimiser step, every name row is one shared vector plus its fixed code, in the
    embedding and (untied) the unembedding; other rows train freely."""
    from interp.model import hf_config, hf_model_class
    from interp.tasks import english
    from interp.train import _name_codes

    recipe = replace(RECIPES[f"lm-{family}"], name_codes=6, name_scale=2.0)
    sizes = dict(d_model=16, n_layers=1, n_heads=2, d_mlp=32, n_ctx=32, tie=tie)
    model = hf_model_class(family)(hf_config(family, vocab_size=len(english.tokenizer()), **sizes))
    codes = _name_codes(model, recipe)
    assert len(codes.weights) == (1 if tie else 2)
    ids = codes.ids
    assert torch.allclose(codes.codes.norm(dim=1), torch.full((len(ids),), 2.0))
    assert torch.linalg.matrix_rank(codes.codes).item() == 6  # spans exactly its subspace
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    rows = torch.tensor([english.encode(["when mary and john went to the store , john gave a drink to mary ."])[0]])
    before = model.get_input_embeddings().weight.detach().clone()
    for _ in range(3):
        loss = model(input_ids=rows, labels=rows).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        codes.apply()
    for w in codes.weights:
        shared = w.detach()[ids] - codes.codes
        assert torch.allclose(shared, shared[:1].expand_as(shared), atol=1e-5)
    after = model.get_input_embeddings().weight.detach()
    assert not torch.allclose(after[ids], before[ids])  # the shared part learns
    unnamed = torch.ones(len(after), dtype=torch.bool)
    unnamed[ids] = False
    assert not torch.allclose(after[unnamed], before[unnamed])


def test_name_codes_reject_bad_dimensions():
    from interp.model import hf_config, hf_model_class
    from interp.tasks import english
    from interp.train import _name_codes

    model = hf_model_class("gpt2")(hf_config("gpt2", vocab_size=len(english.tokenizer()), d_model=16, n_layers=1,
                                             n_heads=2, d_mlp=32, n_ctx=32))
    with pytest.raises(ValueError, match="name_codes=17 must be in 1..16"):
        _name_codes(model, replace(RECIPES["lm-gpt2"], name_codes=17))
