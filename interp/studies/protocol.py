"""The one shape of a study and the registry `interp repro NAME` dispatches through.

A study is a module of interp.studies with `BUDGETS` (at least "quick", what the tests run, and
"paper") and `repro(progress, models, budget, overrides, units) -> dict`; its doc is written by
`write_doc(json_path, doc_path) -> Path` (the study's JSON in, its markdown's generated regions
refilled). The studies grew their doc writers with different argument orders (doc first, the JSON
first, the loaded dict); `REGISTRY` wraps each in that one signature, so callers (the CLI, tests)
never special-case a study. Output paths always come from the caller: nothing here names docs/.

    from interp.studies.protocol import get
    s = get("steering")
    result = s.repro(budget="quick")           # s.BUDGETS, s.NAME
    s.write_doc("docs/steering_repro.json", "docs/steering.md")

Nothing is imported until a study is asked for (the CLI's --help stays torch-free).
"""

from __future__ import annotations

import importlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from interp.errors import InterpError

__all__ = ["REPRO_PARAMETERS", "REGISTRY", "Entry", "StudyProtocol", "add_departures", "get", "problems", "require_clean", "study_json"]

# repro's parameters, in order, each with a default (so `repro()` runs the quick budget)
REPRO_PARAMETERS = ("progress", "models", "budget", "overrides", "units")


class StudyProtocol(Protocol):
    """What every registered study offers (an `Entry` does; `problems` checks one)."""

    NAME: str
    BUDGETS: Mapping[str, Mapping[str, Any]]

    def repro(self, progress: bool = True, models: Sequence[str] | None = None, budget: str = "quick",
              overrides: dict[str, Any] | None = None, units: str | Path | None = None) -> dict[str, Any]: ...

    def write_doc(self, json_path: str | Path, doc_path: str | Path) -> Path: ...


@dataclass(frozen=True)
class Entry:
    """One registered study: `module` holds BUDGETS and repro; `doc` is the doc writer as
    "module:function" and `order` the arguments that function takes ("doc,json": the two paths,
    doc first; "json,doc"; "result,doc" / "doc,result": the loaded JSON dict instead of its path)."""

    NAME: str
    module: str
    doc: str
    order: str = "json,doc"

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

        module = self.load()
        result = module.repro(progress=progress, models=models, budget=budget, overrides=overrides, units=units)
        result.setdefault("study", self.NAME)  # whose JSON this is: `write_doc` refuses another study's
        entries = ledger(self.NAME, result)
        if entries:
            result[LEDGER_KEY] = entries
        add_departures(module, result)
        return result

    def write_doc(self, json_path: str | Path, doc_path: str | Path) -> Path:
        """Refill the generated regions of the markdown at `doc_path` from the study JSON at `json_path`
        (refused for a JSON made from a tree with uncommitted changes: `require_clean`)."""
        module, _, name = self.doc.partition(":")
        given: dict[str, Any] = {"json": Path(json_path), "doc": Path(doc_path)}
        data = study_json(json_path, self.NAME)
        require_clean(data, json_path)
        if "result" in self.order:
            given["result"] = data
        from interp.studies.docs import write_common

        try:
            out = Path(getattr(importlib.import_module(module), name)(*(given[a] for a in self.order.split(","))))
        except (KeyError, IndexError, TypeError, AttributeError) as err:  # a JSON of another shape than this study's
            raise InterpError(f"{json_path}: the {self.NAME} doc needs a field this JSON lacks or holds otherwise "
                              f"({type(err).__name__}: {err}); give the JSON `interp repro {self.NAME} --out` wrote") from err
        write_common(doc_path, data)
        return out


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


REGISTRY: dict[str, Entry] = {s.NAME: s for s in (
    Entry("circuits", "interp.studies.circuits", "interp.studies.circuits:write_doc", "doc,result"),
    Entry("cores", "interp.studies.cores", "interp.studies.ace_docs:update", "doc,json"),
    Entry("extractive", "interp.studies.extractive", "interp.studies.extractive_doc:write_doc", "doc,json"),
    Entry("grokking", "interp.studies.grokking", "interp.studies.grokking:write_doc", "doc,json"),
    Entry("heuristic-core", "interp.studies.heuristic_core", "interp.studies.heuristic_core_doc:write_doc", "doc,json"),
    Entry("illusions", "interp.studies.illusions", "interp.studies.illusions:write_doc", "doc,json"),
    Entry("specialization", "interp.studies.specialization", "interp.studies.specialization:write_doc", "result,doc"),
    Entry("steering", "interp.studies.steering", "interp.studies.steering:write_doc", "json,doc"),
)}


def get(name: str) -> Entry:
    """The registered study behind `interp repro NAME`."""
    if name not in REGISTRY:
        raise InterpError(f"no study {name!r}; give one of: {', '.join(sorted(REGISTRY))}")
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
    its module's `departures(budget_values) -> [{what, ours, paper, why}]`."""
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
        out += _signature_problems(f"{s.module}.repro", module.repro, REPRO_PARAMETERS, True)
        if not callable(getattr(module, "departures", None)):
            out.append(f"{s.module} has no departures(budget_values): the ways its budgets differ from the paper's")
        doc_module, _, doc_fn = s.doc.partition(":")
        fn = getattr(importlib.import_module(doc_module), doc_fn, None)
        n = len(s.order.split(","))
        if fn is None or len(inspect.signature(fn).parameters) < n:
            out.append(f"{s.doc} is not a function of {n} arguments ({s.order})")
    return out
