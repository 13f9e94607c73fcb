import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from interp import Grid
from interp.errors import InterpError
from interp.sweep import ConfigError, Store, SweepError, load, load_config, run

CONFIG = """
[[experiment]]
name = "heads"
kind = "activation"
models = ["{gpt2}", "{llama}"]
task = "ioi"
split = "test"
n = 4
site = "z"

[[experiment]]
name = "attr"
kind = "attribution"
model = "{gpt2}"
task = "sva"
split = "sva_id"
n = 4
site = "resid_pre"
by_pos = true
positions = "named"

[[experiment]]
name = "paths"
kind = "path"
model = "{llama}"
task = "ioi"
split = "test"
n = 4
receivers = [[1, 0, "q"], [1, 1, "k"]]

[[experiment]]
name = "resid"
kind = "activation"
models = ["{gpt2}", "{llama}"]
task = "sva"
split = "sva_attractor_mismatch"
n = 6
site = "resid_pre"
by_pos = true
positions = "named"
"""


# a job that raises on every try (a receiver in a layer the model lacks)
BROKEN = """
[[experiment]]
name = "broken"
kind = "path"
model = "{model}"
task = "ioi"
split = "test"
n = 2
receivers = [[9, 0, "q"]]
"""


@pytest.fixture
def config(tmp_path, english_dirs):
    path = tmp_path / "sweep.toml"
    path.write_text(CONFIG.format(**english_dirs))
    return path


def _grids(folder: Path) -> dict[str, Grid]:
    return {p.name: Grid.load(p) for p in sorted((folder / "grids").glob("*.safetensors"))}


def _without_seconds(summary):
    return [{k: v for k, v in job.items() if k != "seconds"} for job in summary["jobs"]]


def test_sweep_writes_results_and_report(config, tmp_path):
    summary = run(config, tmp_path / "out", progress=False)
    assert summary["complete"] and len(summary["jobs"]) == 6
    assert (tmp_path / "out" / "report.html").exists()
    grids = _grids(tmp_path / "out")
    assert len(grids) == 6 and all(g.meta["model"] for g in grids.values())
    assert not [p for p in (tmp_path / "out").rglob(".*") if p.is_file()]  # no temp files left


def test_sweep_resumes_after_kill_9(config, tmp_path):
    reference = run(config, tmp_path / "ref", progress=False)
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "interp.cli", "sweep", str(config), "--out", str(out), "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and not (out / "results.json").exists():
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = json.loads((out / "results.json").read_text())
    assert 1 <= len(partial["jobs"]) < 6 and not partial["complete"]
    done_before = {j["job"]: (out / j["file"]).stat().st_mtime_ns for j in partial["jobs"]}
    resumed = subprocess.run(cmd, capture_output=True, text=True, check=True)
    summary = json.loads(resumed.stdout)
    assert summary["complete"] and _without_seconds(summary) == _without_seconds(reference)
    for job, mtime in done_before.items():  # finished work was not recomputed
        assert (out / "grids" / f"{job}.safetensors").stat().st_mtime_ns == mtime
    ref, got = _grids(tmp_path / "ref"), _grids(out)
    assert ref.keys() == got.keys()
    for name in ref:
        assert torch.equal(ref[name].values.nan_to_num(-1), got[name].values.nan_to_num(-1)), name


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda c: c.replace('kind = "attribution"', 'kind = "magic"'), "key 'kind'"),
        (lambda c: c.replace('site = "z"', 'site = "zz"'), "key 'site'"),
        (lambda c: c.replace("n = 4\nsite", "n = 4\nsight = 1\nsite", 1), "key 'sight'"),
        (lambda c: c.replace('split = "sva_id"', 'split = "nope"'), "key 'split'"),
        (lambda c: c.replace('name = "attr"', 'name = "heads"'), "used twice"),
        (lambda c: c.replace("n = 6", 'n = "six"'), "key 'n'"),
        (lambda c: c + "\n[[experiment]]\nname='x'\nkind='path'\nmodel='/no/such/dir'\ntask='ioi'\nsplit='test'\n", "key 'models'"),
        (lambda c: c + "\nbroken = [", "not valid TOML"),
        (lambda c: re.sub(r'models = \["([^"]+)", "[^"]+"\]', r'models = ["\1", "\1"]', c, count=1),
         "key 'models': lists .* more than once"),
        (lambda c: c.replace('receivers = [[1, 0, "q"], [1, 1, "k"]]', "receivers = []"), "key 'receivers': must be a non-empty"),
        (lambda c: c.replace('receivers = [[1, 0, "q"], [1, 1, "k"]]', 'receivers = [[1.5, 0, "q"]]'), "key 'receivers'"),
        (lambda c: c.replace('receivers = [[1, 0, "q"], [1, 1, "k"]]', 'senders = [[0, "h1"]]'), "key 'senders'"),
        (lambda c: c.replace('positions = "named"', 'positions = "by name"', 1), "key 'positions'"),
        (lambda c: c.replace("by_pos = true\npositions", "by_pos = false\npositions", 1), "key 'positions': applies to a by-position"),
        (lambda c: "experiment = [1, 2]\n", "key 'experiment'"),
        (lambda c: c + "\n[[experiment]]\nname='m'\nkind='mask'\nmodel='zoo:lm-gpt2'\ntask='ioi'\nsplit='test'\nlr=inf\n",
         "key 'lr'"),
    ],
)
def test_malformed_config_fails_before_any_model_loads(edit, message, config, monkeypatch):
    import interp.model

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before validation finished")

    monkeypatch.setattr(interp.model, "load", refuse)
    config.write_text(edit(config.read_text()))
    with pytest.raises(ConfigError, match=message):
        load_config(config)


def test_a_config_that_is_not_utf8_text_or_is_a_folder_is_refused(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'[[experiment]]\nname = "\xff"\n')
    for path, why in ((bad, "UnicodeDecodeError"), (tmp_path, "IsADirectoryError")):
        with pytest.raises(ConfigError, match=f"cannot read config file .*{why}"):
            load_config(path)


@pytest.mark.slow
def test_shipped_example_runs_on_the_zoo(tmp_path):
    example = Path(__file__).parent.parent / "examples" / "ioi_patching.toml"
    summary = run(example, tmp_path / "ex", progress=False)
    assert summary["complete"] and len(summary["jobs"]) == 6


def _mtimes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (folder / "grids").glob("*.safetensors")}


def test_editing_one_experiment_reruns_only_that_job(config, tmp_path):
    out = tmp_path / "out"
    first = run(config, out, progress=False)
    for job in first["jobs"]:  # the configuration and both baselines sit beside each result
        assert job["config"]["n"] in (4, 6) and job["config"]["model"] == job["model"]
        assert isinstance(job["clean_metric"], float) and isinstance(job["corrupt_metric"], float)
    grid = Grid.load(out / first["jobs"][0]["file"])
    assert grid.meta["config"] == first["jobs"][0]["config"] and "clean_metric" in grid.meta
    before = _mtimes(out)
    config.write_text(config.read_text().replace("n = 4\nsite = \"resid_pre\"", "n = 5\nsite = \"resid_pre\""))
    logged = []
    second = run(config, out, progress=False, log=logged.append)
    assert second["complete"] and len(second["jobs"]) == 6
    after = _mtimes(out)
    changed = {j["job"] for j in second["jobs"]} - {j["job"] for j in first["jobs"]}
    assert len(changed) == 1 and next(iter(changed)).startswith("attr__")
    assert second["recomputed"] == [f"attr on {first['jobs'][2]['model']}: n 4 -> 5"] and logged == [
        f"recomputing {second['recomputed'][0]}"]
    kept = {name: t for name, t in before.items() if not name.startswith("attr__")}
    assert {name: after[name] for name in kept} == kept  # the other five were not recomputed
    assert len(after) == 6  # the stale attr result is gone
    third = run(config, out, progress=False)  # nothing changed: nothing runs, nothing recomputed
    assert "recomputed" not in third and _mtimes(out) == after
    # every job is one entry of the sweep's Store (the store study units use too); the stale one left
    store = Store(out)
    assert sorted(store.keys()) == sorted(j["key"] for j in third["jobs"])
    assert all(store.get(j["key"])["result"] == j and store.get(j["key"])["config"] == j["config"] for j in third["jobs"])
    (out / "results.json").unlink()  # the index is rebuilt from the store: still nothing reruns
    fourth = run(config, out, progress=False)
    assert _mtimes(out) == after and fourth["jobs"] == third["jobs"]


def test_load_gives_every_result_with_its_configuration(config, tmp_path):
    summary = run(config, tmp_path / "out", progress=False)
    frame = load(tmp_path / "out")
    sizes = sum(int(torch.tensor(j["shape"]).prod()) for j in summary["jobs"])
    assert len(frame) == sizes
    for column in ("value", "job", "experiment", "kind", "model", "task", "n", "seed", "metric", "clean_metric",
                   "corrupt_metric", "site"):
        assert column in frame.columns, column
    heads = frame[frame.experiment == "heads"]
    assert set(heads.model) == {j["model"] for j in summary["jobs"] if j["experiment"] == "heads"}
    assert (frame.groupby("job").n.first() > 0).all()


def test_ablation_scan_kind_and_a_failing_job(tmp_path, english_dirs):
    path = tmp_path / "abl.toml"
    path.write_text(f"""
[[experiment]]
name = "scan"
kind = "ablation"
model = "{english_dirs['gpt2']}"
task = "ioi"
split = "test"
n = 4
ablation = "zero"

""" + BROKEN.format(model=english_dirs["gpt2"]))
    with pytest.raises(SweepError, match="layer 9 is out of range"):
        run(path, tmp_path / "out", progress=False)
    summary = json.loads((tmp_path / "out" / "results.json").read_text())
    assert not summary["complete"] and [j["experiment"] for j in summary["jobs"]] == ["scan"]
    assert summary["failed"][0]["experiment"] == "broken"
    scan = summary["jobs"][0]
    assert scan["axes"] == ["layer", "unit"] and isinstance(scan["baseline"], float)
    assert scan["config"]["ablation"] == "zero" and scan["config"]["mlps"] is True


def test_learned_masks_over_seeds(tmp_path, english_dirs):
    """A mask job per seed: each equals learn_mask called directly, at the target sparsity."""
    import interp
    from interp import tasks
    from interp.masking import learn_mask

    path = tmp_path / "masks.toml"
    body = "".join(f"""
[[experiment]]
name = "mask-s{seed}"
kind = "mask"
model = "{english_dirs['gpt2']}"
task = "sva"
split = "sva_id"
n = 16
seed = {seed}
sparsity = 0.5
steps = 20
lr = 1.0
mlps = false
""" for seed in (0, 1))
    path.write_text(body)
    run(path, tmp_path / "out", progress=False)
    summary = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [j["experiment"] for j in summary["jobs"]] == ["mask-s0", "mask-s1"]
    model = interp.load(english_dirs["gpt2"])
    task = tasks.make("sva", split="sva_id", n=16, seed=1)
    want = learn_mask(model, task, sparsity=0.5, seed=1, steps=20, lr=1.0, include_mlps=False, progress=False)
    got = interp.Grid.load(tmp_path / "out" / summary["jobs"][1]["file"])
    assert torch.equal(got.values, want.to_grid().values) and got.axes == ("layer", "unit")
    with pytest.raises(ConfigError, match="sparsity"):
        path.write_text(body.replace("sparsity = 0.5", "sparsity = 1.5"))
        run(path, tmp_path / "out2", progress=False)


def test_load_passes_placement_through_and_info_shows_it(tiny_dirs, monkeypatch, capsys):
    """CPU pass-through of device_map / max_memory / dtype to boot_transformers; describe and
    `interp info` say where each block lives."""
    import interp
    from interp.cli import main
    from transformer_lens.model_bridge import TransformerBridge

    seen = {}
    boot = TransformerBridge.boot_transformers

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return boot(*args, **kwargs)

    monkeypatch.setattr(TransformerBridge, "boot_transformers", spy)
    model = interp.load(tiny_dirs["llama"], device_map="auto", max_memory={"cpu": "2GiB"}, dtype="bfloat16")
    assert seen["device_map"] == "auto" and seen["max_memory"]["cpu"] in ("2GiB", 2 * 2**30) and seen["dtype"] == torch.bfloat16
    where = interp.describe(model)["placement"]
    assert where["dtype"] == "bfloat16" and where["blocks"] == {"cpu": f"0-{model.cfg.n_layers - 1}"}
    assert where["embed"] == where["unembed"] == "cpu"
    with pytest.raises(interp.InterpError, match="not both"):
        interp.load(tiny_dirs["llama"], device="cpu", device_map="auto")
    with pytest.raises(interp.InterpError, match="max_memory"):
        interp.load(tiny_dirs["llama"], max_memory={"cpu": "1GiB"})
    assert main(["info", tiny_dirs["gpt2"]]) == 0
    assert "placement: float32; embed on cpu; blocks 0-1 on cpu; unembed on cpu" in capsys.readouterr().out


def test_a_grid_damaged_on_disk_is_recomputed_with_a_note(config, tmp_path, capsys):
    out = tmp_path / "out"
    first = run(config, out, progress=False)
    path = out / first["jobs"][0]["file"]
    data = bytearray(path.read_bytes())
    data[-3] ^= 1  # same size, header intact: one bit of the values
    path.write_bytes(bytes(data))
    before = _mtimes(out)
    capsys.readouterr()
    second = run(config, out, progress=False)
    note = [line for line in capsys.readouterr().err.splitlines() if "checksum" in line]
    assert len(note) == 1 and path.name in note[0], note
    after = _mtimes(out)
    assert [name for name in before if before[name] != after[name]] == [path.name]  # that one job reran, alone
    assert _without_seconds(second) == _without_seconds(first)


def test_a_damaged_entry_is_recomputed_and_files_not_the_sweeps_are_kept(config, tmp_path, capsys):
    """An entry cut short (its job still listed in results.json) is recomputed and rewritten, as its
    note says; a file in the store's folders that is not one of its entries is left alone."""
    out = tmp_path / "out"
    first = run(config, out, progress=False)
    entry = out / "entries" / f"{first['jobs'][0]['key']}.json"
    entry.write_text(entry.read_text()[:40])
    (out / "entries" / "notes.json").write_text("{}")
    (out / "files" / "notes").mkdir(parents=True)
    before = _mtimes(out)
    capsys.readouterr()
    second = run(config, out, progress=False)
    assert "cut short" in capsys.readouterr().err
    after = _mtimes(out)
    assert [name for name in before if before[name] != after[name]] == [first["jobs"][0]["file"].split("/")[1]]
    assert Store(out).get(first["jobs"][0]["key"]) is not None  # whole again
    assert (out / "entries" / "notes.json").read_text() == "{}" and (out / "files" / "notes").is_dir()
    assert _without_seconds(second) == _without_seconds(first)


def test_a_results_json_or_report_another_program_wrote_is_refused_not_overwritten(config, tmp_path, monkeypatch):
    import interp.sweep as sweep

    monkeypatch.setattr(sweep, "load_config", lambda c: pytest.fail("the refusal came after the config was read"))
    for i, (name, text, said) in enumerate((("results.json", '{"accuracy": 0.9}', 'no "jobs" list'),
                             ("results.json", "epoch,loss\n1,0.3\n", "not readable UTF-8 JSON"),
                             ("report.html", "<p>my paper's figures</p>", "holds no sweep"))):
        out = tmp_path / str(i)
        out.mkdir(parents=True)
        (out / name).write_text(text)
        with pytest.raises(InterpError, match=said):
            run(config, out, progress=False)
        assert (out / name).read_text() == text and [p.name for p in out.iterdir()] == [name]
