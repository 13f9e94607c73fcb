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
