"""Adding to interp touches the places docs/extending.md counts, proven by doing it: each section's
code is taken from that doc as written (so the doc cannot drift from the API), put in a module of its
own, and checked against the same edit made by hand (a plain TransformerLens hook, a reference
computed from a cache, the registry's own listings)."""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import interp
from interp import interventions, registry, run
from interp.files import storage
from interp.metrics import for_task

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def example(first_line: str) -> str:
    """The code block of docs/extending.md whose first line is `first_line` (a comment naming its file)."""
    blocks = re.findall(r"^```(?:python)?\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.S | re.M)
    found = [b for b in blocks if b.splitlines()[0] == first_line]
    assert len(found) == 1, f"docs/extending.md has {len(found)} blocks starting {first_line!r}"
    return found[0]


@pytest.fixture
def module_of(tmp_path, monkeypatch):
    """Import a doc example as a module of its own (`name`.py in tmp_path); forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names = []

    def load(name: str):
        (tmp_path / f"{name}.py").write_text(example(f"# {name}.py"))
        names.append(name)
        return importlib.import_module(name)

    yield load
    for name in names:
        sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def zoo():
    return interp.load("zoo:lm-llama"), interp.tasks.make("ioi", split="train", n=8)


def _scaled(factor: float, pos: int):
    def hook(act, hook):
        out = act.clone()
        out[:, pos:] = act[:, pos:] * factor
        return out

    return hook


def test_a_new_intervention_is_one_module_and_every_engine_takes_it(module_of, zoo):
    """The doc's `Scale`, defined in its own module and named nowhere else, runs through
    `run.evaluate` on each engine (chosen by its sites alone) and gives what a plain hook gives."""
    scale = module_of("my_interventions").Scale
    model, task = zoo
    metric = for_task(task)
    with torch.no_grad():
        base = float(metric(model(task.clean)))
    by_engine = {"native packed": [scale("resid_pre", 0.5, pos=p, layer=2) for p in (0, 5, 12)],
                 "native": [scale("z", f, layer=1) for f in (0.0, 3.0)],
                 "runner": [scale("mlp_out", 0.25, pos=3, layer=0)]}
    for engine, ivs in by_engine.items():
        variants = [[iv] for iv in ivs]
        assert run.engine_of(model, task.clean, variants) == engine
        got = run.evaluate(model, task.clean, variants, metric, answer_pos=task.answer_pos, progress=False)
        for iv, value in zip(ivs, got.tolist()):
            with torch.no_grad():
                want = float(metric(model.run_with_hooks(task.clean, fwd_hooks=[(iv.site, _scaled(iv.factor, iv.pos))])))
            assert value == pytest.approx(want, abs=1e-4), (engine, iv.site, iv.pos)
            assert abs(value - base) > 1e-3, (engine, iv.site, iv.pos)  # the edit is not a no-op


@pytest.fixture
def median(module_of):
    """The doc's median ablation, registered for one test."""
    module = module_of("my_ablations")
    yield module.MedianAblation
    interventions.ABLATION_STYLES.pop("median")


def _cli_choices(command: str, option: str) -> list:
    from interp.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return list(next(a for a in sub._actions if option in a.option_strings).choices)


def test_a_new_ablation_style_is_one_module_and_every_ablation_takes_it(median, zoo):
    """Registered in its module, "median" is a reference, a head mask's ablation, a scan and a sweep
    value; each number equals the head's output replaced by a median computed from a cache by hand.
    The command line's list of circuit ablations is the one other place that would name it."""
    from interp.circuits import circuit
    from interp.masking import HeadMask, ablation_scan, apply
    from interp.sweep import jobs

    model, task = zoo
    site, head = "blocks.1.attn.hook_z", 2
    with torch.no_grad():
        _, acts = model.run_with_cache(task.clean)
    by_hand = acts[site].median(0).values  # [pos, head, d_head]
    assert torch.equal(run.reference(model, [site], "median", task.clean)[site].values, by_hand)

    def replaced(act, hook):
        out = act.clone()
        out[:, :, head] = by_hand[:, head]
        return out

    metric = for_task(task)
    with torch.no_grad():
        want_logits = model.run_with_hooks(task.clean, fwd_hooks=[(site, replaced)])
    mask = HeadMask.full(model, mlps=False)
    mask.heads[1, head] = 0.0
    with torch.no_grad(), apply(model, mask, ablation="median", reference=task.clean):
        assert torch.allclose(model(task.clean), want_logits, atol=1e-4)
    scan = ablation_scan(model, task, ablation="median", mlps=False, progress=False)
    mean_scan = ablation_scan(model, task, ablation="mean", mlps=False, progress=False)
    assert float(scan.values[1, head]) == pytest.approx(float(metric(want_logits)), abs=1e-4)
    assert abs(float(scan.values[1, head]) - float(mean_scan.values[1, head])) > 1e-4  # not the mean under another name

    assert jobs.KINDS["ablation"].check({"ablation": "median"}) is None
    assert jobs.KINDS["ablation"].check({"ablation": "medain"}) == ("ablation", "must be one of zero, mean, resample, median")
    assert list(circuit.ABLATIONS) == _cli_choices("circuit", "--ablation") + ["median"]


STUDY_PROBE = """
import contextlib, io, json, sys
import interp.studies
interp.studies.__path__.append(sys.argv[1])  # beside interp/studies' own folders, found the same way
from interp.cli import main
from interp.studies import protocol
from interp.studies.readme import readme_table

docs = sys.argv[2]
out = {"problems": protocol.problems(protocol.get("toy"))}
shown = io.StringIO()
with contextlib.redirect_stdout(shown), contextlib.suppress(SystemExit):
    main(["repro", "--help"])
out["help"] = " ".join(shown.getvalue().split())
out["repro"] = main(["repro", "toy", "--out", docs + "/toy_repro.json"])
data = json.load(open(docs + "/toy_repro.json"))
data["provenance"]["commit"] = "0123abc"  # the doc writer refuses a dirty tree's JSON; this tree may be dirty
json.dump(data, open(docs + "/toy_repro.json", "w"))
out["doc"] = main(["doc", "toy", "--json", docs + "/toy_repro.json", "--doc", docs + "/toy.md"])
out["table"] = readme_table(docs)
print("RESULT " + json.dumps(out))
"""


def test_a_new_study_is_one_folder_and_its_doc(tmp_path, zoo):
    """The doc's toy study, dropped in as a folder of the studies package with nothing else edited, is
    listed by `interp repro --help`, runs, fills its doc and gets its row in the README's table; its
    numbers are the metric of a plain forward and of one with layer 1's heads zeroed by a hook."""
    from interp.studies.docs import check

    folder = tmp_path / "studies" / "toy"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(example("# interp/studies/toy/__init__.py"))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "toy.md").write_text(example("# Toy"))
    proc = subprocess.run([sys.executable, "-c", STUDY_PROBE, str(folder.parent), str(docs)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert out["problems"] == [] and out["repro"] == 0 and out["doc"] == 0
    assert "circuits, cores" in out["help"] and "toy" in out["help"].split("studies: ", 1)[1]
    data = json.loads((docs / "toy_repro.json").read_text())
    model, task = zoo
    metric = for_task(task)
    with torch.no_grad():
        clean = float(metric(model(task.clean)))
        ablated = float(metric(model.run_with_hooks(task.clean, fwd_hooks=[("blocks.1.attn.hook_z", _scaled(0.0, 0))])))
    assert data["clean"] == pytest.approx(clean, abs=1e-4) and data["ablated"] == pytest.approx(ablated, abs=1e-4)
    text = (docs / "toy.md").read_text()
    assert "Logit difference " in text and check(text, data) == [] and "<!-- gen:departures -->" in text
    assert out["table"].splitlines()[2].startswith("| `docs/toy.md` |")


def test_a_new_view_is_one_module_and_the_shared_layer_draws_it(module_of, tmp_path):
    """The doc's `TokenScores` and its view, registered in their module, are drawn by `plot.render`
    and embedded by `report` (tokens escaped), also after a save and load; without the
    registration the same object has no renderer."""
    from interp.results import load, save
    from interp.views import plot, report

    module = module_of("my_views")
    scores = module.TokenScores(("When", "<Mary>", "and"), (0.1, 0.9, 0.0))
    try:
        view = plot.render(scores)
        assert isinstance(view, module.TokenScoresView) and view.shown == scores
        page = report.to_html([scores])
        assert view.html() in page and "&lt;Mary&gt;" in page and "<Mary>" not in page
        assert 'title="0.9" style="background: rgba(255, 120, 0, 0.90)"' in page
        again = load(save(scores, tmp_path / "scores"))
        assert again == scores and plot.render(again).html() == view.html()
    finally:
        registry.VIEWS.pop("TokenScores", None)
        storage._REGISTRY.pop("TokenScores", None)
    with pytest.raises(TypeError, match="no renderer for TokenScores"):
        plot.render(scores)
