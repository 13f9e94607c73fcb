"""The one shape of a study and the table of studies that `interp repro` / `interp doc`, the README's
study table and the tests read.

A study is a folder of interp.studies (one per paper) whose package module has `BUDGETS` (at least
"quick", what the tests run, and "paper"), `repro(progress, models, budget, overrides, units) -> dict`,
`departures(budget_values)` and `regions(result) -> {region name: body}` (its doc's generated regions,
rendered with `interp.studies.docs.Render`), and registers itself where `repro` is defined:

    @study("steering")
    def repro(progress=True, models=None, budget="quick", overrides=None, units=None): ...

A doc bound to a JSON that no `repro` writes registers its renderer in one line:

    bound_doc("features", regions, json_name="features.json")

`REGISTRY` is only the table: its first read imports every folder of interp.studies, whose
registrations fill it, so nothing here names a study. Output paths always come from the caller.

    s = get("steering")
    result = s.repro(budget="quick")           # s.BUDGETS, s.NAME
    s.write_doc("docs/steering_repro.json", "docs/steering.md")
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from collections import UserDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from interp.errors import InterpError

__all__ = ["REPRO_PARAMETERS", "REGISTRY", "Entry", "StudyProtocol", "add_departures", "bound_doc", "get", "problems",
           "require_clean", "runnable", "study", "study_json"]

# repro's parameters, in order, each with a default (so `repro()` runs the quick budget)
REPRO_PARAMETERS = ("progress", "models", "budget", "overrides", "units")

Regions = Callable[[dict], dict]


class StudyProtocol(Protocol):
    """What every registered study offers (an `Entry` does; `problems` checks one)."""

    NAME: str
    BUDGETS: Mapping[str, Mapping[str, Any]]

    def repro(self, progress: bool = True, models: Sequence[str] | None = None, budget: str = "quick",
              overrides: dict[str, Any] | None = None, units: str | Path | None = None) -> dict[str, Any]: ...

    def write_doc(self, json_path: str | Path, doc_path: str | Path) -> Path: ...


@dataclass(frozen=True)
class Entry:
    """One registered study or bound doc: `module` is the module that registered it (a study's holds
    BUDGETS, repro, departures and regions); `regions` renders the doc's generated regions from the
    loaded JSON (None: the module's `regions`); `runs` is False for a doc whose JSON no `repro` writes (it gets no claims and departures
    regions); `json_name` / `doc_name` are its committed files under docs/."""

    NAME: str
    module: str
    regions: Regions | None = None
    runs: bool = True
    json_name: str = ""
    doc_name: str = ""

    def load(self):
        return importlib.import_module(self.module)

    @property
    def BUDGETS(self) -> Mapping[str, Mapping[str, Any]]:  # noqa: N802 (the modules' own name for it)
        return self.load().BUDGETS

    def repro(self, progress: bool = True, models: Sequence[str] | None = None, budget: str = "quick",
              overrides: dict[str, Any] | None = None, units: str | Path | None = None) -> dict[str, Any]:
        """The study's result, with every claim of its paper listed under "paper_claims" with its word
        (`interp.studies.claims.ledger`: "not run" and what it needs where no verdict names it)."""
        from interp.studies.claims import ledger
        from interp.studies.docs import LEDGER_KEY

        if not self.runs:
            raise InterpError(f"{self.NAME} is a doc bound to docs/{self.json_name}, which `interp repro` does not make; "
                              f"give one of: {', '.join(runnable())}")
        module = self.load()
        result = module.repro(progress=progress, models=models, budget=budget, overrides=overrides, units=units)
        result.setdefault("study", self.NAME)  # whose JSON this is: `write_doc` refuses another study's
        entries = ledger(self.NAME, result)
        if entries:
            result[LEDGER_KEY] = entries
        add_departures(module, result)
        return result

    def write_doc(self, json_path: str | Path, doc_path: str | Path) -> Path:
        """Refill the generated regions of the markdown at `doc_path` from the JSON at `json_path`
        (refused for a study JSON made from a tree with uncommitted changes: `require_clean`)."""
        from interp.studies.docs import write, write_common

        data = study_json(json_path, self.NAME)
        if self.runs:
            require_clean(data, json_path)
        try:
            bodies = (self.regions or self.load().regions)(data)
        except (KeyError, IndexError, TypeError, AttributeError) as err:  # a JSON of another shape than this study's
            raise InterpError(f"{json_path}: the {self.NAME} doc needs a field this JSON lacks or holds otherwise "
                              f"({type(err).__name__}: {err}); give the JSON `interp repro {self.NAME} --out` wrote") from err
        out = write(doc_path, bodies)
        if self.runs:
            write_common(doc_path, data)
        return out


class _Table(UserDict):
    """name -> Entry. The first read imports every study folder of interp.studies (each registers itself
    on import; every folder on the package's `__path__`), so the table is whole whoever reads it first."""

    _filled = False

    def _fill(self) -> None:
        if not _Table._filled:
            _Table._filled = True
            for found in pkgutil.iter_modules(importlib.import_module(__package__).__path__):
                if found.ispkg:
                    importlib.import_module(f"{__package__}.{found.name}")

    def __getitem__(self, key: str) -> Entry:
        self._fill()
        return self.data[key]

    def __contains__(self, key: object) -> bool:
        self._fill()
        return key in self.data

    def __iter__(self):
        self._fill()
        return iter(sorted(self.data))

    def __len__(self) -> int:
        self._fill()
        return len(self.data)


REGISTRY: _Table = _Table()


def _add(entry: Entry) -> Entry:
    stem = entry.NAME.replace("-", "_")
    entry = Entry(entry.NAME, entry.module, entry.regions, entry.runs,
                  entry.json_name or f"{stem}_repro.json", entry.doc_name or f"{stem}.md")
    old = REGISTRY.data.get(entry.NAME)
    if old is not None and old.module != entry.module:
        raise InterpError(f"study {entry.NAME!r} is registered by {old.module} already; {entry.module} needs another name")
    REGISTRY.data[entry.NAME] = entry
    return entry


def study(name: str) -> Callable[[Callable], Callable]:
    """Register the study whose `repro` this decorates as `interp repro NAME`: its module (the package of
    the paper's folder) holds BUDGETS, departures and regions beside it."""
    def register(repro: Callable) -> Callable:
        _add(Entry(name, repro.__module__))
        return repro

    return register


def bound_doc(name: str, regions: Regions, *, json_name: str = "", doc_name: str = "") -> Entry:
    """Register docs/`doc_name` (default NAME.md, hyphens as underscores) as bound to docs/`json_name`
    (default NAME.json), refilled by `interp doc NAME` from `regions(data)`; no `repro` makes its JSON."""
    stem = name.replace("-", "_")
    return _add(Entry(name, regions.__module__, regions, False, json_name or f"{stem}.json", doc_name or f"{stem}.md"))


def runnable() -> list[str]:
    """The names `interp repro` runs (the registered studies, not the bound docs)."""
    return [n for n in REGISTRY if REGISTRY[n].runs]


def study_json(json_path: str | Path, study: str) -> dict[str, Any]:
    """The study JSON at `json_path`, refused (InterpError) when it is not JSON, not an object, or
    names another study: its "study" field, else the study of the paper claims its verdicts name."""
    from interp.studies.claims import CLAIMS
    from interp.studies.verdicts import dicts_in

    try:
        data = json.loads(Path(json_path).read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise InterpError(f"{json_path}: cannot read it ({err}); give the JSON `interp repro {study} --out` wrote") from err
    except json.JSONDecodeError as err:
        raise InterpError(f"{json_path} is not JSON ({err.msg} at line {err.lineno}, column {err.colno}); "
                          f"give the JSON `interp repro {study} --out` wrote") from err
    if not isinstance(data, dict):
        raise InterpError(f"{json_path} holds a JSON {type(data).__name__}, not a study's object; "
                          f"give the JSON `interp repro {study} --out` wrote")
    owner = {c.id: c.study for c in CLAIMS}
    named = {data["study"]} if isinstance(data.get("study"), str) else {
        owner[d["claim_id"]] for _, d in dicts_in(data) if owner.get(d.get("claim_id")) is not None}
    if named and study not in named:
        raise InterpError(f"{json_path} is the JSON of study {', '.join(sorted(named))}, not {study}; "
                          f"use `interp doc {sorted(named)[0]}`, or give {study}'s JSON")
    return data


DEPARTURE_KEYS = ("what", "ours", "paper", "why")


def add_departures(module: Any, result: dict[str, Any]) -> None:
    """Put `module.departures(values)` -- each way the run's budget differs from the paper's set-up, with
    both values and why -- into the result's budget block ("budget"), so no single fraction hides one."""
    prov = result.get("provenance") if isinstance(result.get("provenance"), dict) else {}
    block = result.get("budget") if isinstance(result.get("budget"), dict) else dict(prov.get("budget") or {})
    values = block.get("values")
    if not isinstance(values, dict):
        raise InterpError(f"study {getattr(module, '__name__', module)} gave no budget values to compare with the paper's")
    rows = module.departures(values)
    for r in rows:
        if not isinstance(r, dict) or set(r) != set(DEPARTURE_KEYS):
            raise InterpError(f"a departure must be a dict with exactly {DEPARTURE_KEYS}, got {r!r}")
    block["departures"] = rows
    result["budget"] = block


def require_clean(data: dict[str, Any], json_path: str | Path) -> None:
    """Refuse a study JSON whose provenance commit is unknown or ends in "+dirty" (made from a tree with
    uncommitted changes, so no commit reproduces it); the same for the commit its verdicts were redone at."""
    prov = data.get("provenance") if isinstance(data, dict) else None
    commits = {"provenance commit": prov.get("commit") if isinstance(prov, dict) else None}
    if isinstance(prov, dict) and isinstance(prov.get("verdicts"), dict):
        commits["verdicts commit"] = prov["verdicts"].get("commit")
    for what, commit in commits.items():
        if not isinstance(commit, str) or not commit or commit.endswith("+dirty"):
            raise InterpError(f"{json_path}: its {what} is {commit!r}, not a clean commit, so no commit reproduces it; "
                              "commit, then rerun the aggregation (a clean checkout, e.g. `git worktree add --detach`)")


def get(name: str) -> Entry:
    """The registered study (or bound doc) behind `interp repro NAME` / `interp doc NAME`."""
    if name not in REGISTRY:
        raise InterpError(f"no study {name!r}; give one of: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def _signature_problems(what: str, fn: Callable, names: Sequence[str], defaults: bool) -> list[str]:
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    got = [p.name for p in params][:len(names)]
    out = [] if got == list(names) else [f"{what} takes {got}, not {list(names)}"]
    missing = [p.name for p in params[:len(names)] if defaults and p.default is inspect.Parameter.empty]
    out += [f"{what}: {', '.join(missing)} need defaults"] * bool(missing)
    extra = [p.name for p in params[len(names):] if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return out + [f"{what} requires more arguments: {', '.join(extra)}"] * bool(extra)


def problems(s: Any) -> list[str]:
    """What keeps `s` from being a study (empty when it is one): its NAME, BUDGETS with quick and
    paper, repro with REPRO_PARAMETERS (all defaulted), write_doc(json_path, doc_path) and, for an `Entry`,
    its module's `departures(budget_values) -> [{what, ours, paper, why}]` and `regions(result)`."""
    out = []
    if not isinstance(getattr(s, "NAME", None), str) or not s.NAME:
        out.append("no NAME")
    budgets = getattr(s, "BUDGETS", None)
    if not isinstance(budgets, Mapping) or not {"quick", "paper"} <= set(budgets):
        out.append(f"BUDGETS must include 'quick' and 'paper', has {sorted(budgets or ())}")
    for attr, names, defaults in (("repro", REPRO_PARAMETERS, True), ("write_doc", ("json_path", "doc_path"), False)):
        fn = getattr(s, attr, None)
        out += [f"no {attr}"] if not callable(fn) else _signature_problems(attr, fn, names, defaults)
    if isinstance(s, Entry):  # the module underneath: the wrapper must reach real functions
        module = s.load()
        repro = getattr(module, "repro", None)
        out += [f"{s.module} has no repro"] if not callable(repro) else \
            _signature_problems(f"{s.module}.repro", repro, REPRO_PARAMETERS, True)
        if not callable(getattr(module, "departures", None)):
            out.append(f"{s.module} has no departures(budget_values): the ways its budgets differ from the paper's")
        regions = getattr(module, "regions", None)
        if not callable(regions) or len(inspect.signature(regions).parameters) != 1:
            out.append(f"{s.module} has no regions(result): its doc's generated regions from its JSON")
    return out
