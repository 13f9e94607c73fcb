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
