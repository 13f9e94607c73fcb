"""The hard-concrete schedule as one frozen recipe (`masking.HardConcrete`): the same masks as the
options given one by one, a checkpoint written by either resumes under the other, and an unknown
option is refused by name."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import interp
from interp import masking, tasks
from interp.errors import InterpError


@pytest.fixture(scope="module")
def model_task(english_dirs):
    return interp.load(english_dirs["gpt2"]), tasks.make("sva", split="sva_id", n=16, seed=0)


def test_a_recipe_learns_what_its_fields_given_by_name_learn(model_task, tmp_path):
    model, task = model_task
    recipe = masking.HardConcrete(steps=6, include_mlps=False, lr=0.5, warmup=0.5, batch_size=8)
    assert dataclasses.is_dataclass(recipe) and recipe.optimizer == "adam"
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.steps = 7
    by_recipe = masking.learn_masks(model, task, sparsity=0.5, seeds=[0, 1], recipe=recipe, progress=False)
    by_name = masking.learn_masks(model, task, sparsity=0.5, seeds=[0, 1], steps=6, include_mlps=False, lr=0.5,
                                  warmup=0.5, batch_size=8, progress=False)
    for a, b in zip(by_recipe, by_name):
        assert torch.equal(a.heads, b.heads) and a.mlps is None and b.mlps is None
        assert a.meta["log_alpha"] == b.meta["log_alpha"] and a.meta["steps"] == 6
    # a field given by name replaces the recipe's; the checkpoint of one resumes under the other
    ckpt = tmp_path / "ckpt.safetensors"
    half = masking.learn_mask(model, task, sparsity=0.5, seed=0, recipe=recipe, checkpoint=ckpt, checkpoint_every=3,
                              progress=False)
    assert ckpt.exists()  # written at step 3 of 6 and left for the caller
    again = masking.learn_mask(model, task, sparsity=0.5, seed=0, recipe=dataclasses.replace(recipe, steps=1), steps=6,
                               checkpoint=ckpt, progress=False)
    assert again.meta["log_alpha"] == half.meta["log_alpha"] == by_recipe[0].meta["log_alpha"]


def test_an_unknown_option_is_refused_by_name(model_task):
    model, task = model_task
    with pytest.raises(InterpError, match=r"unknown option\(s\) \['stpes'\]"):
        masking.learn_mask(model, task, sparsity=0.5, stpes=5, progress=False)
