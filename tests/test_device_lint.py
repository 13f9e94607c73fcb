"""Device mismatches caught on the CPU: in the modules that compute beside a model's activations,
every tensor made by a torch factory says where it lives: `device=`, a CPU `generator=` (its
draws are moved by the caller), or a `# cpu: why` comment on its line or on its function's `def`
(a result, a host-side table, an index, a 0-dim scalar: things that may stay on the CPU when the
model is on a GPU). A tensor made without one is the bug the first GPU user meets
("Expected all tensors to be on the same device")."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
FACTORIES = {"zeros", "ones", "empty", "full", "arange", "randn", "rand", "randint", "tensor", "eye", "linspace",
             "randperm", "as_tensor", "normal", "logspace"}
COMPUTE = [
    "interp/run", "interp/circuits", "interp/masking/learn.py", "interp/features/train.py", "interp/features/attribute.py",
    "interp/features/sites.py", "interp/features/dictionary.py", "interp/features/clt.py", "interp/features/qk.py",
    "interp/model/native.py",
    "interp/steering/generate.py", "interp/interventions.py", "interp/patching.py",
]


def unplaced(path: Path) -> list[str]:
    """`path:line: call` for each torch factory call that does not say where its tensor lives."""
    lines = path.read_text().splitlines()
    tree = ast.parse("\n".join(lines))
    exempt: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            head = range(fn.lineno, (fn.body[0].lineno if fn.body else fn.lineno))
            if any("# cpu:" in lines[i - 1] for i in head):
                exempt |= set(range(fn.lineno, fn.end_lineno + 1))
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "torch" and node.func.attr in FACTORIES):
            continue
        if {k.arg for k in node.keywords} & {"device", "generator"} or node.lineno in exempt:
            continue
        if any("# cpu:" in lines[i - 1] for i in (node.lineno, node.end_lineno)):
            continue
        found.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{node.lineno}: "
                     f"torch.{node.func.attr}(...) without device=")
    return found


def _files(entry: str) -> list[Path]:
    p = ROOT / entry
    return sorted(p.rglob("*.py")) if p.is_dir() else [p]


def test_compute_modules_place_every_tensor():
    bad = [hit for entry in COMPUTE for f in _files(entry) for hit in unplaced(f)]
    assert not bad, "tensors made without a device (add device=..., or '# cpu: why' where the CPU is meant):\n" + "\n".join(bad)


@pytest.mark.parametrize("code, n_bad", [
    ("import torch\ndef f(x):\n    return x + torch.zeros(3)\n", 1),
    ("import torch\ndef f(x):\n    return x + torch.zeros(3, device=x.device)\n", 0),
    ("import torch\ndef f(x):\n    return torch.arange(3)  # cpu: a result\n", 0),
    ("import torch\ndef f(x):  # cpu: host-side table\n    return torch.tensor([1]), torch.ones(2)\n", 0),
    ("import torch\ndef f(g):\n    return torch.randn(3, generator=g)\n", 0),
    ("import torch\ndef f(x):\n    y = torch.full(\n        (2,), 1.0)\n    return torch.randperm(4)\n", 2),
])
def test_a_planted_unplaced_tensor_is_found(tmp_path, code, n_bad):
    f = tmp_path / "m.py"
    f.write_text(code)
    assert len(unplaced(f)) == n_bad
