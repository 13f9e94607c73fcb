"""Every ```python block of README.md runs, in order, in one namespace (a fresh interpreter), on
the zoo models (offline). Shell examples are ```bash blocks and are not run here."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(text: str) -> list[str]:
    return BLOCK.findall(text)


RUNNER = textwrap.dedent('''
    import re, sys, time, traceback
    text = open(sys.argv[1], encoding="utf-8").read()
    blocks = re.compile(r"^```python\\n(.*?)^```", re.S | re.M).findall(text)
    namespace = {"__name__": "__readme__"}
    for i, block in enumerate(blocks, 1):
        start = time.perf_counter()
        try:
            exec(compile(block, f"README.md python block {i}", "exec"), namespace)
        except Exception:
            first = block.strip().splitlines()[0]
            print(f"README python block {i} ({first!r}) failed:", file=sys.stderr)
            traceback.print_exc()
            sys.exit(1)
        print(f"block {i}: {time.perf_counter() - start:.1f} s")
''')


def test_readme_has_python_blocks():
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 4, "README.md lost its python examples"
    for block in blocks:
        assert not re.search(r"^\s*(make|interp|pip|\.venv/bin)\s", block, re.M), f"a shell line in a python block:\n{block}"


def test_readme_python_blocks_run(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", RUNNER, str(README)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-4000:]


def test_readme_layernorm_claim():
    """README: after interp.load the HookedTransformer numerics hold (folded LayerNorm, centred weights)."""
    import torch

    import interp

    assert "folded LayerNorm, centred weights" in README.read_text(encoding="utf-8")
    model = interp.load("zoo:lm-gpt2")
    ln = model.blocks[0].ln1
    assert torch.equal(ln.weight, torch.ones_like(ln.weight)) and torch.equal(ln.bias, torch.zeros_like(ln.bias))
    assert model.W_U.mean(-1).abs().max() < 1e-5  # centred unembedding
    assert model.blocks[0].attn.W_O.mean(-1).abs().max() < 1e-5  # centred writing weights
