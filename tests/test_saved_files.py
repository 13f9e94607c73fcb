"""Files saved by an earlier release still load (tests/data/saved_v1 was written by the code at
commit 12a6631, before result tags stopped depending on module paths)."""

import math
from pathlib import Path

import pytest
import torch

from interp.results import Grid, Heading, load

V1 = Path(__file__).parent / "data" / "saved_v1"


def test_v1_files_load_with_their_values():
    g = load(V1 / "grid.safetensors")
    assert isinstance(g, Grid) and g.axes == ("layer", "head") and g.labels[1] == ("h0", "h1", "h2")
    assert torch.equal(g.values[0, :2], torch.tensor([1.0, 2.0])) and math.isnan(float(g.values[0, 2]))
    assert g.meta["ops"] == ("x",) and g.meta["inf"] == math.inf and g.meta["model"] == "zoo:demo"
    assert load(V1 / "heading.safetensors") == Heading("a section", 3)
    graph = load(V1 / "graph.safetensors")
    assert type(graph).__name__ == "Graph" and graph.senders == ("embed", "a0.h0")
    assert torch.equal(graph.scores, torch.tensor([0.5, -0.25]))
    mask = load(V1 / "headmask.safetensors")
    assert type(mask).__name__ == "HeadMask" and torch.equal(mask.mlps, torch.tensor([1.0, 0.0]))
    assert mask.meta == {"seed": 3}


def _registered_in_source() -> dict[str, str]:
    """tag -> module for every `@result` class in interp's source (read with ast, nothing imported)."""
    import ast

    root = Path(__file__).parents[1] / "interp"
    found = {}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            for d in node.decorator_list:
                call = d if isinstance(d, ast.Call) else None
                name = (call.func if call else d)
                if isinstance(name, ast.Name) and name.id == "result":
                    tag = next((k.value.value for k in (call.keywords if call else []) if k.arg == "tag"), node.name)
                    parts = path.relative_to(root.parent).with_suffix("").parts
                    module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)  # a package is its folder
                    assert tag not in found, f"result tag {tag!r} used twice ({found[tag]}, {module})"
                    found[tag] = module
    return found


def test_every_result_tag_is_found_where_it_is_declared():
    from interp.registry import declared_in

    declared = _registered_in_source()
    assert len(declared) > 20
    assert {tag: declared_in("result", tag) for tag in declared} == declared


def test_a_file_loads_in_a_fresh_interpreter_importing_only_its_types_module(tmp_path):
    """`load` imports the module that declares the file's type, and nothing else of interp's capabilities."""
    import subprocess
    import sys

    from interp.masking.mask import HeadMask

    path = HeadMask(torch.ones(2, 3), torch.tensor([1.0, 0.0]), {"seed": 3}).save(tmp_path / "m.safetensors")
    code = ("import sys\nfrom interp.files import storage\n"
            f"obj = storage.load({str(path)!r})\n"
            "assert type(obj).__module__ == 'interp.masking.mask', type(obj).__module__\n"
            "assert not [m for m in sys.modules if m.startswith(('interp.circuits', 'interp.features', 'interp.studies'))]\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]


def test_new_files_carry_the_short_tag_and_a_moved_class_still_loads(tmp_path):
    from dataclasses import dataclass

    from safetensors import safe_open

    from interp.files import storage
    from interp.errors import InterpError

    path = storage.save(Heading("x"), tmp_path / "h.safetensors")
    meta = safe_open(str(path), "pt").metadata()
    assert meta["format"] == "interp/2" and meta["type"] == "Heading" and "interp." not in meta["result"]

    @storage.result(tag="PlantedPoint")
    @dataclass(frozen=True)
    class Point:
        x: int

    storage.save(Point(3), tmp_path / "p.safetensors")
    try:
        # the class "moves" (another module, another name) but keeps its tag: the file still loads
        @dataclass(frozen=True)
        class Point2:
            x: int

        del storage._REGISTRY["PlantedPoint"]
        Point2.__module__ = "interp.elsewhere"
        storage.result(Point2, tag="PlantedPoint")
        assert storage.load(tmp_path / "p.safetensors") == Point2(3)

        @dataclass(frozen=True)
        class Other:
            y: int

        with pytest.raises(InterpError, match="already taken"):
            storage.result(Other, tag="PlantedPoint")
    finally:
        storage._REGISTRY.pop("PlantedPoint", None)


def test_an_unknown_type_is_refused_in_a_short_sentence(tmp_path):
    from dataclasses import dataclass

    from interp.files import storage
    from interp.errors import InterpError

    @storage.result(tag="PlantedGone")
    @dataclass(frozen=True)
    class Gone:
        x: int

    storage.save(Gone(1), tmp_path / "g.safetensors")
    del storage._REGISTRY["PlantedGone"]
    with pytest.raises(InterpError, match="type 'PlantedGone', which no imported module registers; import") as err:
        storage.load(tmp_path / "g.safetensors")
    assert len(str(err.value)) < 300
