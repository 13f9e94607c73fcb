"""Shared fixtures: tiny random-weight models of every family, built once per session."""

from __future__ import annotations

import pytest

import interp
from interp.model import FAMILIES


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("tiny")
    return {f: str(interp.build_tiny(f, root / f, seed=0)) for f in FAMILIES}


@pytest.fixture(scope="session")
def tiny_models(tiny_dirs):
    return {f: interp.load(d) for f, d in tiny_dirs.items()}


@pytest.fixture(scope="session")
def gpt2(tiny_models):
    return tiny_models["gpt2"]


@pytest.fixture(scope="session")
def llama(tiny_models):
    return tiny_models["llama"]
