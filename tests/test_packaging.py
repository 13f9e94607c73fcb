"""A built wheel is self-contained: installed into a fresh environment, outside the repository,
it carries the zoo and runs the offline demo."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _run(cmd, **kwargs):
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


@pytest.mark.slow
def test_wheel_installs_and_runs_the_demo_outside_the_repo(tmp_path):
    start = time.perf_counter()
    # Build from a copy of the sources, so the build leaves nothing (build/, egg-info) in the tree.
    src = tmp_path / "src"
    shutil.copytree(REPO / "interp", src / "interp", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "MANIFEST.in"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, src / name)
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", src, "--no-deps", "--no-build-isolation", "-q", "-w", dist])
    (wheel,) = dist.glob("interp-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "interp/data/zoo/lm-gpt2/model.safetensors" in names and "interp/data/zoo/modadd/card.json" in names

    # A fresh venv that reuses this environment's torch, transformers, ... through a .pth line (a
    # venv's --system-site-packages would see the base interpreter's packages, not this venv's).
    # .pth files in that folder are not run, so the repository's editable install stays out.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    py = venv / "bin" / "python"
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (site / "_reuse_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "-q", wheel])

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "INTERP_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    where = _run([py, "-c", "import interp, interp.model as m; print(interp.__file__); print(m.ZOO_DIR)"],
                 cwd=work, env=env).stdout.split()
    assert all(Path(p).is_relative_to(site) for p in where), where  # the wheel's copy, not the repo's
    _run([venv / "bin" / "interp", "demo", "--out", work / "out"], cwd=work, env=env)
    report = (work / "out" / "report.html").read_text()
    for name in ("lm-gpt2", "lm-llama", "modadd"):
        assert name in report, f"report.html does not mention zoo model {name}"
    assert not (tmp_path / "cache" / "zoo").exists()  # the demo trains nothing
    print(f"wheel build + install + demo: {time.perf_counter() - start:.0f} s")
