import pytest

from interp.errors import InterpError
from interp.sites import SITES, hook_name, kind_of, layer_of, position_axis

# (site, layer) -> full name; the same site written both ways names the same hook
TABLE = [
    ("resid_pre", 0, "blocks.0.hook_resid_pre"),
    ("resid_post", 2, "blocks.2.hook_resid_post"),
    ("mlp_out", 1, "blocks.1.hook_mlp_out"),
    ("z", 3, "blocks.3.attn.hook_z"),
    ("k", 1, "blocks.1.attn.hook_k"),
    ("pattern", 0, "blocks.0.attn.hook_pattern"),
]


@pytest.mark.parametrize("site,layer,full", TABLE)
def test_short_and_full_names_agree(site, layer, full):
    assert hook_name(site, layer) == full
    assert hook_name(full) == full == hook_name(full, layer)
    assert layer_of(full) == layer
    assert kind_of(full) == SITES[site].kind


def test_kinds_and_position_axes():
    assert kind_of("hook_embed") == "other" and layer_of("hook_embed") is None
    assert position_axis("blocks.0.attn.hook_pattern") == 2
    assert position_axis("blocks.0.hook_resid_pre") == 1 and position_axis("blocks.0.attn.hook_z") == 1


def test_errors_say_what_would_be_right():
    with pytest.raises(InterpError, match="give its layer"):
        hook_name("z")
    with pytest.raises(InterpError, match="did you mean resid_pre"):
        hook_name("resid_pr", 0)
    with pytest.raises(InterpError, match="in layer 1 but layer=2"):
        hook_name("blocks.1.attn.hook_z", 2)
    with pytest.raises((InterpError, TypeError), match="site"):  # under the suite's runtime type checks, TypeError
        hook_name(3)
    assert issubclass(InterpError, ValueError)


def test_float_token_ids_fail_at_the_entry_point_saying_what_to_do(gpt2):
    import torch

    from interp import patching, run
    from interp.sites import check_tokens

    good = torch.tensor([[1, 2, 3], [3, 2, 1]])
    bad = good.float()
    calls = [
        lambda: run.logits(gpt2, bad),
        lambda: run.cache(gpt2, bad, ["blocks.0.hook_resid_pre"]),
        lambda: run.with_grad(gpt2, bad, ["blocks.0.hook_resid_pre"]),
        lambda: run.evaluate(gpt2, bad, [[]], lambda logits: logits[:, -1, 0].mean(), progress=False),
        lambda: patching.activation_patch(gpt2, bad, good, site="resid_pre",
                                          metric=lambda logits: logits[:, -1, 0].mean(), progress=False),
    ]
    for call in calls:
        with pytest.raises(InterpError, match=r"dtype torch.float32; token ids must be integers: pass .*\.long\(\)") as err:
            call()
        assert len(str(err.value)) < 300
    for bad_input in (good.bool(), [[1, 2]]):
        with pytest.raises(InterpError, match="token ids"):
            check_tokens(bad_input)
    check_tokens(good)
    check_tokens(good.int())


def test_layers_and_heads_of_the_wrong_type_are_named_as_such(gpt2, unchecked):
    from interp.sites import check_head, check_layer

    with pytest.raises(InterpError, match=r"layer 0\.0 must be an int"):
        check_layer(gpt2, 0.0)
    with pytest.raises(InterpError, match="layer 99 is out of range"):
        check_layer(gpt2, 99)
    with pytest.raises(InterpError, match=r"head 1\.0 must be an int"):
        check_head(gpt2, 0, 1.0)
    check_head(gpt2, 0, gpt2.cfg.n_heads - 1)
