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
