"""The architecture's rules as a test, read from the source with ast (nothing is imported):

- the one-runner rule: only `interp.run` (all its modules) and `interp.hooks` add hooks or switch
  model flags (`interp.model` sets its flags while it builds the model); everyone else intervenes and
  observes through `interp.run`, and takes shape checks from `interp.sites`;
- no import cycles between interp's modules (imports inside functions, literal
  `importlib.import_module("interp.x")` calls, registry strings that name a module -- "interp.x.y",
  "interp.x.y:attr" -- and the package `__init__` an import runs all count: a lower module's table
  that names a higher one points up, and the higher one imports it back),
  nor between its parts (a subpackage with all its modules, or a top-level module);
- no module uses another module's private (`_name`) names;
- no function over 80 lines outside the studies (`interp.studies`, one file per paper);
- no capability (a subpackage, or a task family in `interp.tasks`) exports more than 15 names in
  `__all__`; rarely used names stay importable from their modules;
- the runner owns every engine: no module outside `interp.run` imports one of its modules (only the
  package, `interp.run`) or the block internals its engines call (`interp.model.native`,
  `interp.model.resuming`; the model package aside), nor tests an engine's name (a comparison with a name in the runner's
  `ENGINES`): capabilities say what to compute, never how.

Each rule is proven on a planted violation (a small package written to tmp_path). What still
breaks a rule today sits in ONE allowlist below, each entry naming the file's owner and why;
remove an entry when its file is fixed (the test fails on entries that no longer apply).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1] / "interp"
RUNNER = {"interp.run", "interp.hooks"}
BUILDERS = {"interp.model"}  # sets the loaded bridge's flags (default_prepend_bos) as it builds it

# Violations that remain, in files other engineers own. Key: (module, what).
ALLOWED: set[tuple[str, str]] = set()
# Not checked by ast, listed so a reader sees them: interp.circuits.circuit.AblateOutside keeps
# per-forward scratch in a `state` dict on a frozen dataclass (the runner has no per-forward
# scratch space for interventions yet).

HOOK_CALLS = {
    "register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook", "register_backward_hook",
    "register_full_backward_pre_hook", "add_hook", "add_perma_hook", "run_with_hooks", "run_with_cache", "hooks",
    "reset_hooks", "remove_all_hook_fns",
}
HOOKS_MODULE_QUERIES = {"hook_names", "hook_groups", "split_inputs"}
# a string literal that names a module (or a name in one): an edge of the import graph, as a registry
# that imports it on lookup makes it (the root package alone does not count: every module runs it)
REGISTRY_STRING = re.compile(r"^[a-z_]+(\.[A-Za-z_]\w*)+(:[A-Za-z_]\w*)?$")


def modules(root: Path) -> dict[str, Path]:
    """dotted module name -> file, for the package at `root` (its folder name is the package name)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _runtime_nodes(tree: ast.AST):
    """Every node except those under `if TYPE_CHECKING:` (imports there never run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def _imports(name: str, path: Path, mods: dict[str, Path], tree: ast.AST):
    """(node, module imported, names it takes) for each import of a module in `mods`, anywhere in
    the file (inside functions too). `from pkg import sub` counts as importing pkg.sub."""
    pkg = name if _is_package(path) else name.rpartition(".")[0]
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in mods:
                    yield node, a.name, (a.asname or a.name, None)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = pkg.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                if sub in mods:
                    yield node, sub, (a.asname or a.name, None)
                elif base in mods:
                    yield node, base, (a.asname or a.name, a.name)
        elif (isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "import_module")
              and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in mods):
            yield node, node.args[0].value, (node.args[0].value, None)  # a literal dynamic import
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _named_module(node.value, mods):
            yield node, _named_module(node.value, mods), (None, None)  # a registry string: imported when looked up


def _named_module(text: str, mods: dict[str, Path]) -> str | None:
    """The module a registry string names ("pkg.x.y", "pkg.x.y:attr" or "pkg.x.Name"), else None."""
    if not REGISTRY_STRING.match(text):
        return None
    module = text.partition(":")[0]
    for candidate in (module, module.rpartition(".")[0]):
        if "." in candidate and candidate in mods:  # the root package is no edge: every module runs it
            return candidate
    return None


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules it imports (at any depth of the file). Importing `pkg.a.b` also runs
    `pkg/a/__init__.py`, so it counts as importing `pkg.a` too, unless the importer sits inside
    `pkg.a` (its package is already being imported). The root package is left out: every module
    runs it first."""
    mods = modules(root)
    graph = {m: set() for m in mods}
    for name, path in mods.items():
        mine = set(_parents(name)) | {name}
        for _, target, _ in _imports(name, path, mods, ast.parse(path.read_text(encoding="utf-8"))):
            graph[name] |= {t for t in [*_parents(target)[1:], target] if t not in mine and t in mods}
    return graph


def _strongly_connected(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Each group of two or more nodes that reach each other (sorted names)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):  # Tarjan's algorithm
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(tuple(sorted(group)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def cycles(root: Path) -> list[tuple[str, ...]]:
    """Each group of modules that import each other, directly or through other modules."""
    return _strongly_connected(import_graph(root))


def package_cycles(root: Path) -> list[tuple[str, ...]]:
    """Each group of the root's parts (a subpackage with everything in it, or a top-level module)
    that import each other: `circuits.study` importing `studies.units` while `studies.circuits`
    imports `circuits.study` is no module cycle, but it ties the two capabilities together both ways."""
    top = {m: ".".join(m.split(".")[:2]) for m in modules(root) if "." in m}
    graph: dict[str, set[str]] = {t: set() for t in top.values()}
    for name, targets in import_graph(root).items():
        if name in top:
            graph[top[name]] |= {top[t] for t in targets if t in top and top[t] != top[name]}
    return _strongly_connected(graph)


def _private(attr: str) -> bool:
    return attr.startswith("_") and not (attr.startswith("__") and attr.endswith("__"))


def private_uses(root: Path) -> list[tuple[str, str]]:
    """(module, "other.module._name") for each private name of another module that a module uses."""
    mods = modules(root)
    found = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {}  # local name -> the module it is
        for node, target, (local, taken) in _imports(name, path, mods, tree):
            if local is None:  # a registry string binds no name
                continue
            if taken is None:
                aliases[local.split(".")[0] if "." in local and local == target else local] = (
                    target.split(".")[0] if "." in local and local == target else target)
            elif target != name and _private(taken):
                found.append((name, f"{target}.{taken}"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                chain = ast.unparse(node.value)
                head, _, rest = chain.partition(".")
                if head in aliases:
                    owner = ".".join([aliases[head], *([rest] if rest else [])])
                    if owner in mods and owner != name:
                        found.append((name, f"{owner}.{node.attr}"))
    return sorted(set(found))


def hook_uses(root: Path, allowed: set[str]) -> list[tuple[str, str]]:
    """(module, what) for each module outside `allowed` that adds hooks (a hook-adding call, or
    taking `hooks` or a shape check from the hooks module: the checks live in sites), or switches
    model flags (set_use_*, assigning a cfg field). Queries of hook names and the `split_inputs`
    mode switcher (which restores the flags) may be imported from the hooks module."""
    mods = modules(root)
    hooks_mod = f"{root.name}.hooks"
    found = []
    for name, path in mods.items():
        if any(name == a or name.startswith(a + ".") for a in allowed):  # a runner package's modules too
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node, target, (local, taken) in _imports(name, path, mods, tree):
            if local is not None and target == hooks_mod and taken not in HOOKS_MODULE_QUERIES:
                found.append((name, f"imports {hooks_mod}" + (f".{taken}" if taken else "")))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                attr = node.func.attr
                if attr in HOOK_CALLS:
                    found.append((name, f"calls .{attr}()"))
                elif attr.startswith("set_use_"):
                    found.append((name, f"sets a model flag: .{attr}()"))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and node.args:
                if ast.unparse(node.args[0]).endswith(".cfg"):
                    found.append((name, f"sets a model flag: {ast.unparse(node)}"))
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Attribute) and t.value.attr == "cfg":
                    found.append((name, f"sets a model flag: {ast.unparse(t)} ="))
    return sorted(set(found))


def long_functions(root: Path, limit: int = 80) -> list[tuple[str, str]]:
    """(module, "function NAME over 80 lines") for each function longer than `limit` lines,
    decorators and docstring included, outside the package's studies."""
    found = []
    for name, path in modules(root).items():
        if name.split(".")[1:2] == ["studies"]:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit:
                found.append((name, f"function {node.name} over {limit} lines"))
    return sorted(set(found))


def capabilities(root: Path) -> list[str]:
    """The package's capabilities: each subpackage (but the studies, which sit at the edge) and each
    task family module in `tasks` (its shared `base` aside)."""
    mods = modules(root)
    pkg = root.name
    return sorted(m for m, path in mods.items() if
                  (m.count(".") == 1 and _is_package(path) and m != f"{pkg}.studies")
                  or (m.startswith(f"{pkg}.tasks.") and m.count(".") == 2 and m != f"{pkg}.tasks.base"))


def surfaces(root: Path, limit: int = 15) -> list[tuple[str, str]]:
    """(capability, "exports N names (over 15)") for each capability whose `__all__` is longer than
    `limit`: what a newcomer sees in `from interp.X import *` and the docs. Rarely used names stay
    importable from their module."""
    found = []
    mods = modules(root)
    for name in capabilities(root):
        count = 0  # `__all__ = [...]` resets, `__all__ += [...]` adds (a module may grow it section by section)
        for node in ast.parse(mods[name].read_text(encoding="utf-8")).body:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
            if getattr(target, "id", None) == "__all__" and isinstance(node.value, (ast.List, ast.Tuple)):
                count = (count if isinstance(node, ast.AugAssign) else 0) + len(node.value.elts)
        if count > limit:
            found.append((name, f"exports {count} names (over {limit})"))
    return found


# the model's internals that only the runner's engines (and the model package) call
ENGINE_INTERNALS = ("model.native", "model.resuming")


def engine_names(root: Path) -> set[str]:
    """The runner's engine names: the strings of every `ENGINES = (...)` in its modules."""
    names = set()
    for name, path in modules(root).items():
        if name == f"{root.name}.run" or name.startswith(f"{root.name}.run."):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
                if getattr(target, "id", None) == "ENGINES" and isinstance(node.value, (ast.Tuple, ast.List)):
                    names |= {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return names


def engine_branches(root: Path) -> list[tuple[str, str]]:
    """(module, what) for each module outside the runner that imports one of the runner's modules
    (the package itself is the interface) or compares a value with an engine's name."""
    run = f"{root.name}.run"
    internals = {f"{root.name}.{m}" for m in ENGINE_INTERNALS}
    engines = engine_names(root)
    mods = modules(root)
    found = []
    for name, path in mods.items():
        if name == run or name.startswith(run + "."):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for _, target, _ in _imports(name, path, mods, tree):
            if target.startswith(run + "."):
                found.append((name, f"imports engine module {target}"))
            elif target in internals and not (name == f"{root.name}.model" or name.startswith(f"{root.name}.model.")):
                found.append((name, f"imports the engines' block internals {target}"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                for side in [node.left, *node.comparators]:
                    if isinstance(side, ast.Constant) and side.value in engines:
                        found.append((name, f"tests engine name {side.value!r}"))
    return sorted(set(found))


def violations(root: Path) -> set[tuple[str, str]]:
    """Every rule broken in the package at `root`, as (module, what)."""
    pkg = root.name
    found = {(m, w) for m, w in hook_uses(root, {f"{pkg}.run", f"{pkg}.hooks"})
             if not ((m == f"{pkg}.model" or m.startswith(f"{pkg}.model.")) and w.startswith("sets a model flag"))}
    found |= {(c[0], "cycle " + ", ".join(c)) for c in cycles(root)}
    found |= {(c[0], "package cycle " + ", ".join(c)) for c in package_cycles(root)}
    found |= {(m, f"private {what}") for m, what in private_uses(root)}
    found |= set(long_functions(root))
    found |= set(surfaces(root))
    found |= set(engine_branches(root))
    # the package re-exports interp.hooks for notebooks (`interp.hooks`, `interp.hooked`)
    return {(m, w) for m, w in found if not (m == pkg and w.startswith(f"imports {pkg}.hooks"))}


def test_interp_keeps_the_rules():
    found = violations(ROOT)
    assert not found - ALLOWED, "new violations (fix them; see this file's docstring):\n" + "\n".join(
        map(str, sorted(found - ALLOWED)))
    assert not ALLOWED - found, f"allowlist entries that no longer apply (remove them): {sorted(ALLOWED - found)}"


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", "run.py": "", "hooks.py": "def hooks(model): pass\n", **files}.items():
        if text is None:  # left out (the runner as a package instead of run.py)
            continue
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


CLEAN = {"sites.py": "def check_head(model, layer, head):\n    pass\n",
         "cap/__init__.py": "",
         "cap/a.py": "from pkg import run\nfrom pkg.sites import check_head\n\ndef f(model):\n    return run\n"}


def test_a_clean_planted_package_passes(tmp_path):
    assert violations(_plant(tmp_path, CLEAN)) == set()


@pytest.mark.parametrize("code, what", [
    ("def f(model):\n    model.blocks[0].register_forward_hook(print)\n", "calls .register_forward_hook()"),
    ("def f(model):\n    model.add_hook('blocks.0.hook_z', print)\n", "calls .add_hook()"),
    ("def f(model, t):\n    return model.run_with_cache(t)\n", "calls .run_with_cache()"),
    ("from pkg.hooks import hooks\n\ndef f(model):\n    with hooks(model):\n        pass\n", "imports pkg.hooks.hooks"),
    ("def f(model):\n    from pkg import hooks\n", "imports pkg.hooks"),
    ("def f(model):\n    model.set_use_split_qkv_input(True)\n", "sets a model flag: .set_use_split_qkv_input()"),
    ("def f(model):\n    model.cfg.use_attn_result = True\n", "sets a model flag: model.cfg.use_attn_result ="),
    ("def f(model):\n    setattr(model.cfg, 'x', 1)\n", "sets a model flag: setattr(model.cfg, 'x', 1)"),
])
def test_a_planted_hook_or_flag_outside_the_runner_fails(tmp_path, code, what):
    root = _plant(tmp_path, {**CLEAN, "cap/b.py": code})
    assert violations(root) == {("pkg.cap.b", what)}
    assert violations(_plant(tmp_path / "ok", {**CLEAN, "run.py": code})) == set()  # the runner may


def test_a_planted_cycle_fails_even_through_a_function_level_import(tmp_path):
    root = _plant(tmp_path, {**CLEAN, "cap/b.py": "from pkg.cap import a\n",
                             "cap/a.py": "def f():\n    from pkg.cap.b import x\n"})
    assert violations(root) == {("pkg.cap.a", "cycle pkg.cap.a, pkg.cap.b")}
    typing_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.cap.b import x\n"
    assert violations(_plant(tmp_path / "t", {**CLEAN, "cap/b.py": "from pkg.cap import a\n", "cap/a.py": typing_only})) == set()


def test_a_planted_package_cycle_fails_with_no_module_cycle(tmp_path):
    """circuits <-> studies as it stood: capability's `study` imported the studies' `units`, and the
    studies' `circuits` imported the capability's `study`. No module imports itself back, but the
    two packages depend on each other, and a module in a package runs that package's __init__."""
    files = {"cap/study.py": "from pkg.studies.units import Units\n", "studies/__init__.py": "",
             "studies/units.py": "class Units:\n    pass\n", "studies/cap.py": "from pkg.cap.study import f\n"}
    assert violations(_plant(tmp_path, {**CLEAN, **files})) == {("pkg.cap", "package cycle pkg.cap, pkg.studies")}
    # through a package's __init__: cap.a needs studies.units, whose package imports studies.cap, which needs cap.a
    files = {"studies/__init__.py": "from pkg.studies import cap\n", "studies/units.py": "",
             "studies/cap.py": "def g():\n    from pkg.cap.a import f\n",
             "cap/a.py": "import importlib\n\ndef f():\n    return importlib.import_module('pkg.studies.units')\n"}
    found = violations(_plant(tmp_path / "init", {**CLEAN, **files}))
    assert ("pkg.cap.a", "cycle pkg.cap.a, pkg.studies, pkg.studies.cap") in found
    # siblings inside one package do not count their own package's __init__
    files = {"cap/__init__.py": "from pkg.cap.a import f\n", "cap/a.py": "from pkg.cap.b import g\n\ndef f():\n    pass\n",
             "cap/b.py": "def g():\n    pass\n"}
    assert violations(_plant(tmp_path / "ok", {**CLEAN, **files})) == set()


@pytest.mark.parametrize("code", [
    "from pkg.cap.a import _helper\n",
    "from pkg.cap import a\n\ndef f():\n    return a._helper()\n",
    "import pkg.cap.a\n\ndef f():\n    return pkg.cap.a._helper()\n",
    "from . import a as other\n\ndef f():\n    other._STATE['x'] = 1\n",
])
def test_a_planted_private_import_fails(tmp_path, code):
    root = _plant(tmp_path, {**CLEAN, "cap/b.py": code})
    (found,) = violations(root)
    assert found[0] == "pkg.cap.b" and found[1].startswith("private pkg.cap.a._")
    public = "from pkg.cap import a\n\ndef f():\n    return a.helper(), a.__name__\n"
    assert violations(_plant(tmp_path / "ok", {**CLEAN, "cap/b.py": public})) == set()


def test_every_submodule_the_readme_names_is_an_attribute_and_plotly_waits():
    """`import interp; interp.plot.render(g)` as the README writes it; importing interp alone
    imports no plotly (a fresh interpreter, so other tests' imports do not count)."""
    import re
    import subprocess
    import sys

    import importlib.util

    readme = (ROOT.parent / "README.md").read_text(encoding="utf-8")
    # a module or package of interp, or an old name that still imports (interp.plot is interp.views.plot)
    named = sorted({m for m in re.findall(r"\binterp\.([a-z_]+)\b", readme) if importlib.util.find_spec(f"interp.{m}")})
    code = ("import sys, interp\nassert 'plotly' not in sys.modules\n"
            f"missing = [n for n in {named!r} if not hasattr(interp, n)]\nassert not missing, missing\n"
            "assert callable(interp.plot.render) and callable(interp.report.write)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert {"plot", "report", "run", "tasks"} <= set(named)


def test_a_planted_long_function_fails_outside_the_studies(tmp_path):
    long = "def f():\n" + "    x = 1\n" * 80
    assert violations(_plant(tmp_path, {**CLEAN, "cap/b.py": long})) == {("pkg.cap.b", "function f over 80 lines")}
    assert violations(_plant(tmp_path / "s", {**CLEAN, "studies/__init__.py": "", "studies/paper.py": long})) == set()
    assert violations(_plant(tmp_path / "ok", {**CLEAN, "cap/b.py": "def f():\n" + "    x = 1\n" * 79})) == set()


def test_a_planted_capability_with_over_15_names_fails(tmp_path):
    def names(n):
        return "__all__ = [" + ", ".join(f"'f{i}'" for i in range(n)) + "]\n"

    files = {**CLEAN, "cap/__init__.py": names(16), "tasks/__init__.py": names(20), "tasks/base.py": names(20),
             "tasks/family.py": names(16), "cap/inner.py": names(30), "studies/__init__.py": names(30)}
    assert violations(_plant(tmp_path, files)) == {("pkg.cap", "exports 16 names (over 15)"),
                                                   ("pkg.tasks", "exports 20 names (over 15)"),
                                                   ("pkg.tasks.family", "exports 16 names (over 15)")}
    files = {**CLEAN, "cap/__init__.py": names(15), "tasks/__init__.py": names(3), "tasks/family.py": names(15)}
    assert violations(_plant(tmp_path / "ok", files)) == set()
    grown = names(10) + "__all__ += ['g0', 'g1', 'g2', 'g3', 'g4', 'g5']\n"  # 16, added section by section
    assert violations(_plant(tmp_path / "grown", {**CLEAN, "cap/__init__.py": grown})) == {
        ("pkg.cap", "exports 16 names (over 15)")}


RUNNER_PACKAGE = {"run.py": None, "run/__init__.py": "from pkg.run.engine import evaluate\n", "model/__init__.py": "",
                  "model/native.py": "", "model/resuming.py": "from pkg.model import native\n",
                  "run/engine.py": "ENGINES = ('runner', 'native packed')\n\ndef evaluate(v):\n    return v\n"}


@pytest.mark.parametrize("code, what", [
    ("from pkg.run.engine import evaluate\n", "imports engine module pkg.run.engine"),
    ("def f():\n    from pkg.run import engine\n", "imports engine module pkg.run.engine"),
    ("def f(meta):\n    return 1 if meta['path'] == 'native packed' else 2\n", "tests engine name 'native packed'"),
    ("def f(path):\n    return 'runner' != path\n", "tests engine name 'runner'"),
    ("from pkg.model import native\n", "imports the engines' block internals pkg.model.native"),
    ("def f():\n    from pkg.model.resuming import resume\n", "imports the engines' block internals pkg.model.resuming"),
])
def test_a_planted_engine_branch_outside_the_runner_fails(tmp_path, code, what):
    root = _plant(tmp_path, {**CLEAN, **RUNNER_PACKAGE, "cap/b.py": code})
    assert violations(root) == {("pkg.cap.b", what)}
    inside = {**CLEAN, **RUNNER_PACKAGE, "run/other.py": code}
    assert violations(_plant(tmp_path / "ok", inside)) == set()  # the runner may
    public = "from pkg import run\n\ndef f(v):\n    return run.evaluate(v), {'path': 'native packed'}\n"
    assert violations(_plant(tmp_path / "pub", {**CLEAN, **RUNNER_PACKAGE, "cap/b.py": public})) == set()


@pytest.mark.parametrize("table", ['HOMES = {"Thing": "pkg.cap.a"}\n', 'VIEWS = {"Thing": "pkg.cap.a:view"}\n',
                                   'NAMES = ("pkg.cap.a.Thing",)\n'])
def test_a_planted_registry_string_pointing_up_fails(tmp_path, table):
    """A table in a lower module that names a higher module as a string is an import edge (the
    registry imports it on lookup): with the higher module importing the lower one, a cycle."""
    files = {**CLEAN, "low.py": table, "cap/a.py": "from pkg import low\n\ndef view(x):\n    return low, x\n"}
    found = violations(_plant(tmp_path, files))
    assert found == {("pkg.cap.a", "cycle pkg.cap.a, pkg.low"), ("pkg.cap", "package cycle pkg.cap, pkg.low")}
    downward = {**CLEAN, "low.py": "X = 1\n", "cap/a.py": f"from pkg import low\n{table}"}  # naming itself/below
    assert violations(_plant(tmp_path / "ok", downward)) == set()
    prose = {**CLEAN, "low.py": 'DOC = "see pkg.cap.a for how"\nFILE = "pkg.json"\n', "cap/a.py": "from pkg import low\n"}
    assert violations(_plant(tmp_path / "prose", prose)) == set()  # only a whole string naming a module counts
