"""The top level reads as the architecture: single-file floors and grouped packages, and every module
that moved still imports from its old name (the very module object, warning once where the old name
was internal)."""

from __future__ import annotations

import json
import subprocess
import sys

import interp

# a fresh interpreter: whether an old name warns depends on its first import
PROBE = """
import importlib, json, sys, warnings
import interp
out = {}
for old, new in interp._MOVED.items():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
        again = importlib.import_module(old)
    out[old] = {"same": module is again is importlib.import_module(new), "spec": module.__spec__.name,
                "warnings": [str(w.message) for w in seen if w.category is DeprecationWarning],
                "where": [w.filename for w in seen], "attr": getattr(interp, old.split(".")[1]) is module}
print(json.dumps(out))
"""


def test_every_moved_module_imports_from_its_old_name_as_the_same_module():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout)
    assert set(seen) == set(interp._MOVED)
    for old, new in interp._MOVED.items():
        got = seen[old]
        assert got["same"] and got["attr"] and got["spec"] == new, (old, got)
        if old in interp._QUIET:  # the names users type
            assert got["warnings"] == [], (old, got)
        else:  # once, with the new name, pointing at the import that used the old one
            assert got["warnings"] == [f"{old} moved to {new}; import it from there"], (old, got)
            assert got["where"] == ["<string>"], (old, got)


def test_an_unknown_name_is_still_an_error():
    import importlib

    import pytest

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("interp.no_such_module")
    with pytest.raises(AttributeError, match="no_such_name"):
        interp.no_such_name


SURFACE_PROBE = """
import importlib, json, warnings
out = []
for package, name, home in NAMES:
    pkg = importlib.import_module(package)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        first, again = getattr(pkg, name), getattr(pkg, name)
    out.append([name in pkg.__all__, first is again is getattr(importlib.import_module(home), name),
                [str(w.message) for w in seen if w.category is DeprecationWarning]])
print(json.dumps(out))
"""


def test_a_name_that_left_a_surface_resolves_with_one_warning_naming_its_module():
    """`interp.model` and `interp.features` list what most users need; their other names are imported
    from the defining modules, and the old spelling still resolves, warning once (a fresh
    interpreter: the warning is said once per process)."""
    names = [("interp.model", n, "interp.model.building") for n in ("DEFAULT_WORDS", "hf_config", "save_model_dir")]
    names += [("interp.model", n, "interp.model.resuming") for n in ("resume", "can_resume", "skipped_blocks")]
    names += [("interp.features", "load_dictionaries", "interp.features.suite"),
              ("interp.features", "replacement_logits", "interp.features.attribute"),
              ("interp.features", "write_neuronpedia", "interp.features.neuronpedia")]
    out = subprocess.run([sys.executable, "-c", f"NAMES = {names!r}\n" + SURFACE_PROBE], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    for (package, name, home), (listed, same, warned) in zip(names, json.loads(out.stdout)):
        assert not listed and same, (package, name)
        assert warned == [f"{package}.{name} is not part of {package}'s surface; import it from {home}"], (name, warned)


def _readme_floors() -> list[set[str]]:
    """The rows of the README's "What is where" table, lowest floor first: the top-level parts of
    interp each row names (`interp.x`, or `x.py` for the command line's modules)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## What is where", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `interp")]
    return [set(re.findall(r"`interp\.([a-z_]+)`", r)) | set(re.findall(r"`([a-z_]+)\.py`", r)) for r in rows]


def test_the_readme_lists_every_top_level_part_in_an_order_every_import_respects():
    """Listing interp/ shows the floors: the README names each top-level module and package once, and
    no part imports one named on a later row (literal imports, inside functions too)."""
    from pathlib import Path

    from test_architecture import import_graph

    root = Path(interp.__file__).parent
    floors = _readme_floors()
    row = {part: i for i, parts in enumerate(floors) for part in parts}
    parts = {p.stem for p in root.glob("*.py") if p.stem != "__init__"} | {
        p.parent.name for p in root.glob("*/__init__.py")}
    assert sum(map(len, floors)) == len(row), "a part named on two rows"
    assert set(row) == parts, f"in interp/ but not the README: {sorted(parts - set(row))}; gone: {sorted(set(row) - parts)}"
    upward = set()
    for module, targets in import_graph(root).items():
        here = module.split(".")[1:2]
        for target in targets:
            there = target.split(".")[1:2]
            if here and there and here != there and row[there[0]] > row[here[0]]:
                upward.add((here[0], there[0]))
    assert not upward, f"imports of a later row (reorder the README's table, or move the code): {sorted(upward)}"
