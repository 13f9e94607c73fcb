"""Shared fixtures: tiny random-weight models of every family, built once per session; a study's
quick-budget run, once per test module (the module names its study module as STUDY)."""

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


@pytest.fixture(scope="session")
def english_dirs(tmp_path_factory) -> dict[str, str]:
    """Tiny random models over the synthetic-English vocabulary (so English tasks run on them)."""
    from interp.tasks import english

    root = tmp_path_factory.mktemp("english")
    return {f: str(interp.build_tiny(f, root / f, words=english.WORDS, seed=1)) for f in ("gpt2", "llama")}


@pytest.fixture(scope="session")
def real_cache(tmp_path_factory):
    """A fresh GGUF cache for the session, so every run converts as a fresh machine would."""
    import os

    cache = tmp_path_factory.mktemp("interp-cache")
    before = os.environ.get("INTERP_CACHE")
    os.environ["INTERP_CACHE"] = str(cache)
    yield cache
    if before is None:
        os.environ.pop("INTERP_CACHE", None)
    else:
        os.environ["INTERP_CACHE"] = before


@pytest.fixture(scope="session")
def smollm2(real_cache):
    """SmolLM2-135M-Instruct (LLaMA family), the real model `make test` installs."""
    return interp.load("smollm2-135m")


@pytest.fixture()
def unchecked():
    """The test calls entry points as a user does: without the jaxtyping checks the tests run under,
    which would refuse a wrong-typed argument before the entry point's own check could."""
    from jaxtyping import config

    before = config.jaxtyping_disable
    config.update("jaxtyping_disable", True)
    yield
    config.update("jaxtyping_disable", before)


@pytest.fixture(scope="module")
def units(request, tmp_path_factory):
    """A fresh folder for the stored units of the test module's study."""
    return tmp_path_factory.mktemp(f"{request.module.__name__.rpartition('.')[2]}-units")


@pytest.fixture(scope="module")
def quick(request, units):
    """The quick-budget run of the test module's `STUDY` (a study module), stored under `units`."""
    return request.module.STUDY.repro(progress=False, budget="quick", units=units)


def lane_devices() -> list[str]:
    """The devices the device lane runs on: $INTERP_TEST_DEVICES (comma-separated, e.g. "cuda"),
    else the CPU and whichever of cuda / mps this machine has (`make test-gpu` sets it)."""
    import os

    import torch

    named = os.environ.get("INTERP_TEST_DEVICES", "").strip()
    if named:
        return [d.strip() for d in named.split(",") if d.strip()]
    found = ["cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    return found




def pytest_generate_tests(metafunc):
    """A test (or fixture) that takes `device` runs once per device of `lane_devices()`."""
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", lane_devices(), scope="module")
