"""interp.files.storage's training-state files (checkpoints that resume without unpickling)."""

import pytest
import torch

from interp.errors import InterpError


def test_a_training_state_round_trips_without_pickle(tmp_path):
    from interp.files.storage import load_state, save_state

    p = torch.nn.Parameter(torch.randn(3))
    opt = torch.optim.AdamW([p], lr=0.1)
    p.sum().backward()
    opt.step()
    gen = torch.Generator().manual_seed(3)
    state = {"opt": opt.state_dict(), "gen": gen.get_state(), "history": [(0, torch.ones(2))], "nan": float("nan"), "fp": {"seeds": [0, 1]}}
    path = save_state(state, tmp_path / "s.safetensors")
    back = load_state(path)
    other = torch.optim.AdamW([torch.nn.Parameter(p.detach().clone())], lr=0.1)
    other.load_state_dict(back["opt"])  # int parameter keys survive
    assert torch.equal(other.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    assert torch.equal(torch.Generator().set_state(back["gen"]).get_state(), gen.get_state())
    assert back["history"][0][0] == 0 and torch.equal(back["history"][0][1], torch.ones(2)) and back["fp"] == {"seeds": [0, 1]}
    assert back["nan"] != back["nan"]
    with pytest.raises(InterpError, match="neither str nor int"):
        save_state({"bad": {(1, 2): 3}}, tmp_path / "t.safetensors")
    assert not (tmp_path / "t.safetensors").exists()
    (tmp_path / "r.safetensors").write_bytes(b"not a state")
    with pytest.raises(InterpError, match="state file"):
        load_state(tmp_path / "r.safetensors")


def test_atomic_writes_leave_ordinary_permissions_and_nothing_on_an_interrupted_write(tmp_path):
    """A result file gets the permissions any file written here gets (the umask's), whichever writer
    filled it; a write interrupted mid-way (Ctrl-C) leaves neither the file nor its temp file."""
    import os

    from interp import Grid
    from interp.files.storage import atomic_path, write_text_atomic

    umask = os.umask(0o022)
    try:
        Grid(torch.zeros(2), ("layer",)).save(tmp_path / "g.safetensors")
        write_text_atomic(tmp_path / "t.json", "{}")
        with pytest.raises(KeyboardInterrupt):
            with atomic_path(tmp_path / "half.safetensors") as tmp:
                with open(tmp, "wb") as f:
                    f.write(b"half of a file")
                raise KeyboardInterrupt
    finally:
        os.umask(umask)
    assert (tmp_path / "g.safetensors").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "t.json").stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.safetensors", "t.json"]


def test_saving_a_model_refuses_a_folder_holding_other_files(tmp_path):
    from interp.model.building import DEFAULT_WORDS, hf_config, hf_model_class, save_model_dir
    from interp.tasks.base import word_tokenizer

    tok = word_tokenizer(DEFAULT_WORDS)
    cfg = hf_config("gpt2", vocab_size=len(tok), d_model=16, n_layers=1, n_heads=2)
    model = hf_model_class("gpt2")(cfg)
    folder = save_model_dir(model, tok, tmp_path / "m")
    save_model_dir(model, tok, folder)  # a save over its own earlier save is fine
    (folder / "thesis.tex").write_text("years of work")
    with pytest.raises(InterpError, match=r"thesis\.tex.*besides a saved model"):
        save_model_dir(model, tok, folder)
    assert (folder / "thesis.tex").read_text() == "years of work" and (folder / "config.json").exists()
