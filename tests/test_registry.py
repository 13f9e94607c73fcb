"""Registries that point down (interp.registry): entries are found where they are declared, and a
lookup that misses imports exactly the module whose source declares the entry, nothing else."""

from __future__ import annotations

import subprocess
import sys

import pytest

from interp import registry
from interp.errors import InterpError


@pytest.mark.parametrize("decorator, name, module", [
    ("result", "Grid", "interp.results"),
    ("result", "HeadMask", "interp.masking.mask"),
    ("result", "Dictionary", "interp.features.dictionary"),
    ("view", "Graph", "interp.views.circuit"),
    ("view", "TopExamples", "interp.features.dashboard"),
    ("result", "NoSuchType", None),
    ("view", "Grid", None),  # a Grid is drawn by plotly, not by a view
])
def test_declared_in_finds_the_declaring_module(decorator, name, module):
    assert registry.declared_in(decorator, name) == module


def test_the_declaration_pattern_reads_every_form():
    pattern = registry._declarations("result")
    text = ('@result\nclass A:\n    pass\n\n@result(tag="Old")\nclass New:\n    pass\n\n'
            '@storage.result  # why\n@dataclass(frozen=True)\nclass B:\n    pass\n\n'
            '    @result\n    class Nested:\n        pass\n\nx = "@result"\n')
    assert [(m.group(1) or m.group(2)) for m in pattern.finditer(text)] == ["A", "Old", "B"]


def test_a_view_is_imported_when_first_needed_and_only_it():
    code = ("import sys\nfrom interp import registry\n"
            "assert 'interp.views.circuit' not in sys.modules\n"
            "draw = registry.view_for('Graph')\n"
            "assert draw.__module__ == 'interp.views.circuit' and 'interp.features.dashboard' not in sys.modules\n"
            "assert registry.view_for('NoSuchType') is None and registry.view_for(None) is None\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]


def test_two_views_of_one_tag_are_refused():
    def one(x):
        return x

    def other(x):
        return x

    registry.view("PlantedTag")(one)
    try:
        registry.view("PlantedTag")(one)  # the same function again (a module reloaded) is fine
        with pytest.raises(InterpError, match="already"):
            registry.view("PlantedTag")(other)
    finally:
        registry.VIEWS.pop("PlantedTag")
