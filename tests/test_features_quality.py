"""The random control of `interp.features.quality`: random features at the same L0 with a fitted
readout explain what a sparse sum of fitted directions can, and no more; a trained dictionary is
scored beside it."""

from __future__ import annotations

import pytest
import torch

import interp
from interp.features.corpus import token_rows
from interp.features.quality import random_control, scores
from interp.features.train import Recipe, mlp_sites, train_dictionaries


def _fve(y, y_hat):
    return 1 - float((y - y_hat).pow(2).sum() / (y - y.mean(0)).pow(2).sum())


def test_random_control_fits_a_readout_and_is_deterministic():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4000, 16, generator=g)
    y = x @ torch.randn(16, 8, generator=g)  # a linear target: random features recover part of it
    ctl = random_control(256, 8, x[:3000], y[:3000])
    held = ctl(x[3000:])
    assert held.shape == (1000, 8) and 0.2 < _fve(y[3000:], held) < 1
    assert torch.equal(held, random_control(256, 8, x[:3000], y[:3000])(x[3000:]))  # one seed, one control
    noise = torch.randn(4000, 8, generator=g)  # a target unrelated to x: nothing to recover
    assert _fve(noise[3000:], random_control(256, 8, x[:3000], noise[:3000])(x[3000:])) < 0.05
    assert ctl(x[3000:].view(10, 100, 16)).shape == (10, 100, 8)


@pytest.fixture(scope="module")
def zoo():
    return interp.load("zoo:lm-gpt2")


def test_a_trained_transcoder_beats_random_features_of_its_l0(zoo, tmp_path):
    rows, valid = token_rows(zoo, "zoo", max_rows=2000, seed=1)
    pair = mlp_sites(0)
    d = train_dictionaries(zoo, [pair], rows, valid, tmp_path, model_name="zoo:lm-gpt2", progress=False,
                           recipe=Recipe(n_features=256, k=8, lr=3e-3, tokens=12_000, rows=16, dead_after=4000))[pair]
    held, held_valid = token_rows(zoo, "zoo", max_rows=64, seed=99)
    s, = scores(zoo, [d], held, held_valid, fit_tokens=rows[:256], fit_valid=valid[:256])
    assert s["fve"] > s["fve_random"] and s["ce_recovered"] > s["ce_recovered_random"], s
    assert s["ce_random"] > s["ce_spliced"] and -1 < s["fve_random"] < 1
    quick, = scores(zoo, [d], held, held_valid, ce=False, fit_tokens=rows[:256], fit_valid=valid[:256])
    assert quick["fve_random"] == pytest.approx(s["fve_random"]) and "ce_random" not in quick
