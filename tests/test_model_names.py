"""Results name the model as the user named it: the spec given to `interp.load`
("zoo:lm-gpt2", "smollm2-135m", a folder's name), never the cache folder a real model boots from."""

from __future__ import annotations

from types import SimpleNamespace

import interp
from interp import probing, steering
from interp.model import name_of


def test_results_carry_the_name_load_was_given(tiny_dirs):
    zoo = interp.load("zoo:lm-gpt2")
    assert name_of(zoo) == "zoo:lm-gpt2" and zoo.cfg.model_name.endswith("lm-gpt2")  # the boot folder stays
    gen = steering.generate(zoo, ["the keys to the cabinet"], max_new_tokens=1)
    assert gen.meta["model"] == "zoo:lm-gpt2"
    assert probing.magnitude(zoo).meta["model"] == "zoo:lm-gpt2"
    assert name_of(interp.load(tiny_dirs["gpt2"])) == "gpt2"  # a local folder: its name, not its path


def test_a_real_model_is_named_by_its_name_not_its_cache_sha():
    sha = "/root/.cache/interp/hf/" + "ab" * 32
    real = SimpleNamespace(cfg=SimpleNamespace(model_name=sha, interp_spec="smollm2-135m"))
    assert name_of(real) == "smollm2-135m"
    assert name_of(SimpleNamespace(cfg=SimpleNamespace(model_name="/some/where/lm-llama"))) == "lm-llama"  # not loaded by interp
