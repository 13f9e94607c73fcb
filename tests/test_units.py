"""Resumable study units (interp.studies.units) on the sweep's store, budgets, provenance, and a
killed `interp repro` that resumes to the same JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from interp.errors import InterpError
from interp.files.storage import load_state, save_state
from interp.studies import illusions
from interp.studies.units import Units, budget, comparable, provenance
from interp.sweep import Store

BUDGETS = {"quick": {"seeds": [0], "steps": 10, "lr": 0.1, "name": "a"},
           "paper": {"seeds": [0, 1, 2], "steps": 1000, "lr": 0.1, "name": "a"}}


def test_units_store_once_and_read_back(tmp_path):
    units = Units("toy", tmp_path)
    calls = []

    def fn():
        calls.append(1)
        return {"value": (1, 2), "x": 0.5}

    config = {"model": "m", "seed": 0}
    assert not units.done(config) and units.count([config, {"seed": 1}]) == (0, 2)
    first = units.run(config, fn)
    again = Units("toy", tmp_path).run(config, fn)  # a fresh process reads the stored result
    assert first == again == {"value": [1, 2], "x": 0.5} and len(calls) == 1
    assert units.done(config) and units.count([config, {"seed": 1}]) == (1, 2) and units.ran == 1
    # the unit lives in the sweep's store: one JSON entry per key, nothing half-written beside it
    entry = Store(tmp_path, version="toy/1", wrap="unit", study="toy").get(units.key(config))
    assert entry["config"] == config and entry["result"] == first and entry["study"] == "toy"
    assert sorted(p.name for p in (tmp_path / "entries").iterdir()) == [f"{units.key(config)}.json"]
    # the key covers the whole config and the code-version tag
    assert units.key(config) != units.key({**config, "seed": 1})
    assert Units("toy", tmp_path, version=2).key(config) != units.key(config)
    assert Units("other", tmp_path).key(config) != units.key(config)


def test_units_refuse_bad_results_and_store_nothing(tmp_path):
    units = Units("toy", tmp_path)
    with pytest.raises(InterpError, match="must return a dict"):
        units.run({"a": 1}, lambda: [1, 2])
    with pytest.raises(InterpError, match="JSON-able"):
        units.run({"a": 2}, lambda: {"t": torch.zeros(2)})
    with pytest.raises(RuntimeError):
        units.run({"a": 3}, lambda: (_ for _ in ()).throw(RuntimeError("killed")))
    assert units.count([{"a": 1}, {"a": 2}, {"a": 3}]) == (0, 3)
    assert not any((tmp_path / "entries").glob("*")) if (tmp_path / "entries").exists() else True


def test_default_root_follows_interp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "cache"))
    assert Units("illusions").root == tmp_path / "cache" / "studies" / "illusions"


def _long_unit(units: Units, config: dict, steps: int, die_at: int | None, log: list[int]) -> dict:
    """A unit that counts to `steps`, checkpointing every step (atomically); raises at `die_at`."""
    path = units.checkpoint_path(config)
    state = load_state(path) if path.exists() else {"step": 0, "total": 0}
    for step in range(state["step"], steps):
        if step == die_at:
            raise KeyboardInterrupt("killed half-way")
        log.append(step)
        state = {"step": step + 1, "total": state["total"] + step}
        save_state(state, path)
    return {"total": state["total"]}


def test_a_long_unit_killed_half_way_resumes_from_its_checkpoint(tmp_path):
    units, config, log = Units("toy", tmp_path), {"unit": "long"}, []
    with pytest.raises(KeyboardInterrupt):
        units.run(config, lambda: _long_unit(units, config, 10, 6, log))
    assert units.checkpoint_path(config).exists() and not units.done(config)
    result = units.run(config, lambda: _long_unit(units, config, 10, None, log))
    assert log == list(range(10))  # steps 0-5 were not redone
    assert result == {"total": sum(range(10))} and not units.checkpoint_path(config).exists()


def test_budget_resolves_overrides_and_refuses_unknowns():
    assert budget(BUDGETS, "quick", {}) == BUDGETS["quick"]
    got = budget(BUDGETS, "paper", {"seeds": 2, "steps": "20", "lr": "1e-3", "name": "b"})
    assert got == {"seeds": [0, 1], "steps": 20, "lr": 0.001, "name": "b"}
    assert budget(BUDGETS, "quick", {"seeds": "3,5"})["seeds"] == [3, 5]
    assert BUDGETS["paper"]["seeds"] == [0, 1, 2]  # the declared budget is not changed
    with pytest.raises(InterpError, match="budgets: quick, paper"):
        budget(BUDGETS, "full", {})
    with pytest.raises(InterpError, match="no budget key 'rows'; its keys: lr, name, seeds, steps"):
        budget(BUDGETS, "quick", {"rows": 3})
    with pytest.raises(InterpError, match="'steps'"):
        budget(BUDGETS, "quick", {"steps": 2.5})
    with pytest.raises(InterpError, match=">= 1"):
        budget(BUDGETS, "quick", {"seeds": 0})


def test_provenance_records_the_run():
    prov = provenance("quick", {"steps": 10}, 0.25, 12.34, 3, 4, units_run=1)
    assert set(prov) >= {"commit", "date", "machine", "versions", "wall_s", "budget", "units_run"}
    assert prov["budget"] == {"name": "quick", "values": {"steps": 10}, "paper_fraction": 0.25, "units_done": 3, "units_total": 4}
    assert prov["machine"]["torch_threads"] == torch.get_num_threads() and prov["machine"]["device"] in ("cpu", "cuda")
    assert prov["versions"]["torch"] == torch.__version__ and prov["versions"]["transformer_lens"]
    assert prov["commit"] is None or len(prov["commit"].split("+")[0]) == 40
    assert prov["wall_s"] == 12.3
    assert "date" not in comparable({"provenance": prov})["provenance"]


# the smallest illusions budget that still runs every unit kind
TINY = {"rows": 8, "fit": 20, "boot": 10, "ranks": [4], "ks": [2]}


def test_killed_repro_resumes_to_the_same_json(tmp_path, monkeypatch):
    """A run killed inside its second unit resumes (computing only what is missing) and ends with the
    same JSON, provenance timing aside, as an uninterrupted run."""
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "cache"))
    whole = illusions.repro(progress=False, overrides=TINY, units=tmp_path / "whole")
    assert whole["budget"]["units_done"] == whole["budget"]["units_total"] == 4

    real = illusions.k_sweep

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("kill -9 stand-in")

    monkeypatch.setattr(illusions, "k_sweep", killed)
    with pytest.raises(KeyboardInterrupt):
        illusions.repro(progress=False, overrides=TINY, units=tmp_path / "resumed")
    assert len(list((tmp_path / "resumed" / "entries").glob("*.json"))) == 1  # the SVD unit finished
    monkeypatch.setattr(illusions, "k_sweep", real)
    resumed = illusions.repro(progress=False, overrides=TINY, units=tmp_path / "resumed")
    assert resumed["provenance"]["units_run"] == 3  # k-means, one-hot and random one-hot; SVD read back
    assert json.dumps(comparable(resumed), sort_keys=True) == json.dumps(comparable(whole), sort_keys=True)


def test_repro_command_names_every_value_set_otherwise():
    from interp.studies.units import repro_command

    defaults = {"paper": {"models": ["a", "b"], "steps": 10, "layers": "all", "compute": True}}
    same = {"name": "paper", "values": dict(defaults["paper"])}
    assert repro_command("x", same, defaults, out="o.json") == "interp repro x --budget paper --out o.json"
    changed = {"name": "paper", "values": {**defaults["paper"], "models": ["b"], "steps": 20, "layers": [1, 2], "compute": False}}
    assert repro_command("x", changed, defaults, units="u", out="o.json") == (
        "interp repro x --budget paper --model b --set steps=20 --set 'layers=[1,2]' --set compute=false --units u --out o.json")
    # what it prints parses back to the same values (the CLI's --set reader, then the budget)
    import shlex

    from interp.cli import _setting

    words = shlex.split(repro_command("x", changed, defaults, out="my out.json"))
    sets = dict(_setting(words[i + 1]) for i, w in enumerate(words) if w == "--set")
    assert budget(defaults, "paper", sets) == {**changed["values"], "models": ["a", "b"]}
    assert words[-1] == "my out.json" and words[words.index("--model") + 1] == "b"


def _damage_cases():
    """(what, how to damage the stored entry file of unit {"seed": 0} of study "toy")."""
    def edit(change):
        def apply(path):
            entry = json.loads(path.read_text())
            change(entry)
            path.write_text(json.dumps(entry))
        return apply

    return [
        ("cut short", lambda p: p.write_text(p.read_text()[: len(p.read_text()) // 2])),
        ("not a dict", lambda p: p.write_text("[1, 2]")),
        ("config edited", edit(lambda e: e["config"].update(seed=5))),
        ("result edited", edit(lambda e: e["result"].update(value=99))),
        ("another study's", edit(lambda e: e.update(study="other", version="other/1"))),
        ("result not a dict", edit(lambda e: e.update(result=[1]))),
    ]


@pytest.mark.parametrize("what, damage", _damage_cases(), ids=[c[0] for c in _damage_cases()])
def test_a_damaged_or_foreign_unit_entry_is_recomputed_with_a_one_line_note(what, damage, tmp_path, capsys):
    units = Units("toy", tmp_path)
    config = {"seed": 0}
    units.run(config, lambda: {"value": 1})
    path = tmp_path / "entries" / f"{units.key(config)}.json"
    damage(path)
    capsys.readouterr()
    again = Units("toy", tmp_path)
    assert not again.done(config) and again.count([config]) == (0, 1)
    assert again.run(config, lambda: {"value": 2}) == {"value": 2} and again.ran == 1  # recomputed, not used
    note = capsys.readouterr().err.strip().splitlines()
    assert len(note) == 1 and "recomputing" in note[0] and path.name in note[0], note  # one line, once
    assert Units("toy", tmp_path).get(config) == {"value": 2}  # the rewritten entry is sound


def test_an_entry_without_a_digest_is_accepted_when_its_config_gives_its_key(tmp_path, capsys):
    units = Units("toy", tmp_path)
    config = {"seed": 0}
    units.run(config, lambda: {"value": 1})
    path = tmp_path / "entries" / f"{units.key(config)}.json"
    entry = json.loads(path.read_text())
    assert len(entry.pop("digest")) == 64  # what entries looked like before they carried a digest
    path.write_text(json.dumps(entry))
    assert Units("toy", tmp_path).run(config, lambda: {"value": 2}) == {"value": 1}
    assert capsys.readouterr().err == ""
    migrated = json.loads(path.read_text())  # accepted once, then given its digest: an edit now shows
    assert len(migrated["digest"]) == 64
    migrated["result"]["value"] = 3
    path.write_text(json.dumps(migrated))
    assert Units("toy", tmp_path).run(config, lambda: {"value": 2}) == {"value": 2}


COMMITTED = sorted((Path(__file__).parents[1] / "docs").glob("*_units"))


@pytest.mark.parametrize("root", COMMITTED, ids=[p.name for p in COMMITTED])
def test_the_committed_unit_stores_still_load(root, tmp_path, capsys):
    """The docs' unit stores cost CPU-hours: every entry must still read back as stored, unnoted
    (read from a copy: reading gives a digest-less entry its digest)."""
    import shutil

    paths = sorted((root / "entries").glob("*.json"))
    assert paths
    copy = shutil.copytree(root / "entries", tmp_path / "entries")
    for path in paths:
        raw = json.loads(path.read_text())
        study, version = raw["version"].rsplit("/", 1)
        assert study == raw["study"]
        assert Units(study, tmp_path, version=version).get(raw["config"]) == raw["result"], path
        assert "digest" in json.loads((copy / path.name).read_text())
    assert "recomputing" not in capsys.readouterr().err
