import pytest
import torch

from interp import run
from interp.errors import InterpError
from interp.hooks import hooks
from interp.sites import check_head, check_layer
from interp.interventions import Mask

Z = "blocks.1.attn.hook_z"


@pytest.fixture(scope="module")
def toks(gpt2):
    return gpt2.to_tokens(["the cat sees the dog .", "the keys to the cabinet are"])


def _live_hooks(model):
    unique = {id(hp): hp for hp in model.hook_dict.values()}  # aliases share one HookPoint
    return sum(len(hp.fwd_hooks) + len(hp.bwd_hooks) for hp in unique.values())


def _zero_head0(act, *, hook):
    act = act.clone()
    act[:, :, 0] = 0.0
    return act


def test_hooks_removed_on_exit_and_on_error(gpt2, toks):
    base = run.logits(gpt2, toks)
    with hooks(gpt2, [(Z, _zero_head0)]):
        assert _live_hooks(gpt2) == 1
    assert _live_hooks(gpt2) == 0
    with pytest.raises(RuntimeError, match="boom"):
        with hooks(gpt2, [(Z, _zero_head0)]):
            raise RuntimeError("boom")
    assert _live_hooks(gpt2) == 0
    with pytest.raises(RuntimeError, match="boom"):
        with run.intervened(gpt2, [Mask.ablate(Z, 0, n_heads=4)]):
            assert _live_hooks(gpt2) == 1
            raise RuntimeError("boom")
    assert _live_hooks(gpt2) == 0
    assert torch.equal(run.logits(gpt2, toks), base)


def test_unknown_hook_name_lists_nearest(gpt2):
    with pytest.raises(InterpError, match=r"blocks\.1\.attn\.hook_z"):
        with hooks(gpt2, [("blocks.1.attn.hook_zz", _zero_head0)]):
            pass
    assert _live_hooks(gpt2) == 0


def test_layer_and_head_out_of_range(gpt2, llama):
    with pytest.raises(InterpError, match=r"layers 0\.\.1"):
        check_layer(gpt2, 2)
    with pytest.raises(InterpError, match=r"heads are 0\.\.3"):
        check_head(gpt2, 0, 4)
    with pytest.raises(InterpError, match=r"kv heads are 0\.\.1"):
        check_head(llama, 0, 2, kv=True)
