import json
import subprocess
import sys

import pytest

from interp.cli import main
from interp.model import FAMILIES


@pytest.mark.parametrize("family", FAMILIES)
def test_info_json_on_local_directories(family, tiny_dirs, capsys):
    assert main(["info", tiny_dirs[family], "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["family"] == family
    assert (info["n_layers"], info["n_heads"], info["d_model"], info["d_head"]) == (2, 4, 32, 8)
    assert info["n_kv_heads"] == (2 if family in ("llama", "qwen2", "gemma2") else 4)
    assert "blocks.1.attn.hook_z" in info["hook_names"] and info["d_vocab"] > 20


def test_info_text_and_errors(tiny_dirs, capsys, tmp_path):
    assert main(["info", tiny_dirs["llama"]]) == 0
    out = capsys.readouterr().out
    assert "n_kv_heads: 2" in out and "attn.hook_z" in out
    assert main(["info", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_help_runs_as_console_script():
    out = subprocess.run([sys.executable, "-m", "interp.cli", "--help"], capture_output=True, text=True, check=True)
    assert "demo" in out.stdout and "info" in out.stdout


def test_import_is_light_and_offline():
    code = (
        "import socket, sys\n"
        "def refuse(*a, **k): raise AssertionError('network touched')\n"
        "socket.socket.connect = refuse; socket.create_connection = refuse\n"
        "import interp\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('plotly', 'circuitsvis')]\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_demo_writes_a_report(tmp_path):
    from interp.demo import run_demo

    path = run_demo(tmp_path)
    text = path.read_text()
    assert path.name == "report.html" and "CircuitsVis.render(" in text and "Plotly.newPlot" in text
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())


def test_bare_interp_prints_help_and_succeeds(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "usage: interp" in out and "steer" in out and "zoo" in out


def test_info_groups_aliases_and_lists_only_hooks_that_fire(tiny_dirs, capsys):
    assert main(["info", tiny_dirs["llama"]]) == 0
    out = capsys.readouterr().out
    assert "hook_resid_pre (= hook_in)" in out  # one line per hook point, aliases folded into it
    assert "hook_pos_embed" not in out  # rotary: the alias exists but never fires
    assert "attn.hook_result" not in out  # gated off until set_use_attn_result(True)
    assert main(["info", tiny_dirs["gpt2"]]) == 0
    assert "hook_pos_embed" in capsys.readouterr().out  # learned positions: it fires
    assert main(["info", tiny_dirs["llama"], "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert "hook_pos_embed" in info["hook_names"]  # the full machine-readable list keeps every name
    assert "hook_pos_embed" not in info["hooks"]
    assert info["hooks"]["blocks.0.hook_resid_pre"] == ["blocks.0.hook_in"]


def test_json_output_is_json_only(tmp_path):
    """stdout of --json is one JSON document: no progress bar, no warning (stderr may say more)."""
    import os

    env = {**os.environ, "INTERP_CACHE": str(tmp_path)}
    for argv in (["info", "zoo:lm-gemma2", "--json"], ["zoo", "list", "--json"]):
        out = subprocess.run([sys.executable, "-m", "interp.cli", *argv], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        json.loads(out.stdout)
        assert "Loading weights" not in out.stderr and "center_unembed" not in out.stderr, out.stderr


def test_zoo_list_drops_empty_columns(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    assert main(["zoo", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # no model trained into the user zoo: no "zoo" column; each task's splits in one "scores" column
    assert lines[0].split() == ["name", "family", "task", "layers", "d_model", "heads", "kv_heads", "train_s", "scores"]
    markov = next(line for line in lines if line.startswith("markov-s0"))
    assert markov.split()[-2:] == ["kl_to_true", markov.split()[-1]] and "ioi" not in markov


def test_repro_budget_options_reach_the_study(monkeypatch, tmp_path, capsys):
    """--budget, the named overrides, --set, --units and --out travel to the study's repro; the
    JSON lands whole at --out."""
    import types

    from interp.studies import protocol

    seen = {}

    def repro(progress=True, models=None, budget="quick", overrides=None, units=None):
        seen.update(progress=progress, models=models, budget=budget, overrides=overrides, units=units)
        return {"budget": {"name": budget, "units_done": 2, "units_total": 3}, "x": 1}

    monkeypatch.setattr(protocol, "get", lambda name: types.SimpleNamespace(repro=repro))
    out = tmp_path / "run.json"
    argv = ["repro", "illusions", "--budget", "paper", "--steps", "5", "--seeds", "0,2", "--rows", "7", "--lr", "0.5",
            "--set", "boot=20", "--set", "ks=[2, 4]", "--set", "note=abc", "--units", str(tmp_path / "u"),
            "--out", str(out), "--model", "zoo:dyck"]
    assert main(argv) == 0
    assert seen == {"progress": True, "models": ["zoo:dyck"], "budget": "paper", "units": str(tmp_path / "u"),
                    "overrides": {"steps": 5, "seeds": [0, 2], "rows": 7, "lr": 0.5, "boot": 20, "ks": [2, 4], "note": "abc"}}
    assert json.loads(out.read_text())["x"] == 1 and "2/3 units" in capsys.readouterr().out
    assert main(["repro", "illusions", "--seeds", "3", "--json"]) == 0
    assert seen["overrides"] == {"seeds": 3} and seen["budget"] == "quick" and not seen["progress"]
    assert main(["repro", "illusions", "--steps", "3", "--set", "steps=4"]) == 2
    assert "given twice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["repro", "illusions", "--seeds", "a,b"])
    with pytest.raises(SystemExit):
        main(["repro", "illusions", "--set", "novalue"])


def test_repro_illusions_bad_budget_is_an_error(capsys):
    assert main(["repro", "illusions", "--budget", "huge", "--json"]) == 2
    assert "budgets: quick, paper" in capsys.readouterr().err
    assert main(["repro", "illusions", "--rows", "5", "--set", "ranks=[8]", "--json"]) == 2
    assert "include 4" in capsys.readouterr().err
    assert main(["repro", "illusions", "--set", "depth=3", "--json"]) == 2
    assert "no budget key 'depth'" in capsys.readouterr().err


def test_errors_are_one_line_with_an_exit_code_and_a_traceback_only_with_debug(monkeypatch, tmp_path, capsys):
    """Refused input exits 2 with one `interp: error:` line, before any work: --out below a regular
    file, a --set value that is not a finite number, another study's JSON or a file that is not JSON
    given to `interp doc`. A run that fails for another reason exits 1, also in one line; --debug
    (before or after the command) shows the traceback instead."""
    import types

    from interp.studies import protocol

    ran = []

    def repro(**kw):
        ran.append(kw)
        raise RuntimeError("boom\nsecond line")

    real_get = protocol.get
    monkeypatch.setattr(protocol, "get", lambda name: types.SimpleNamespace(repro=repro, write_doc=real_get(name).write_doc))
    afile = tmp_path / "afile"
    afile.write_text("x")
    not_json = tmp_path / "bad.json"
    not_json.write_text("{bad")
    doc = tmp_path / "steering.md"
    doc.write_text("# doc\n")
    illusions = json.dumps({"study": "illusions", "provenance": {"commit": "abc"}})
    other = tmp_path / "illusions.json"
    other.write_text(illusions)
    refused = [
        (["repro", "illusions", "--out", str(afile / "run.json")], "is a file, not a folder"),
        (["repro", "illusions", "--units", str(afile / "u")], "is a file, not a folder"),
        (["doc", "steering", "--json", str(not_json), "--doc", str(doc)], "is not JSON"),
        (["doc", "steering", "--json", str(other), "--doc", str(doc)], "study illusions, not steering"),
        (["doc", "steering", "--json", str(other), "--doc", str(tmp_path)], "a folder, not a file"),
        (["circuit", "zoo:nope", "--out", str(afile)], "is a file"),
    ]
    for argv, said in refused:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("interp: error: ") and said in err and err.count("\n") == 1, err
    assert not ran, "a refused command started its run"
    for value in ("1e999", "NaN", "-Infinity", str(10**30), "[1, 1e999]"):
        with pytest.raises(SystemExit) as info:
            main(["repro", "illusions", "--set", f"fit={value}"])
        err = capsys.readouterr().err
        assert info.value.code == 2 and err.startswith("interp: error: ") and err.count("\n") == 1, err
    assert main(["repro", "illusions"]) == 1
    err = capsys.readouterr().err
    assert err == "interp: error: the run failed: RuntimeError: boom second line (rerun with --debug for the traceback)\n"
    for argv in (["--debug", "repro", "illusions"], ["repro", "illusions", "--debug"]):
        with pytest.raises(RuntimeError, match="boom"):
            main(argv)


def test_an_interrupted_circuit_write_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    """The four files of `interp circuit` replace earlier ones together or not at all: Ctrl-C while
    they are written leaves the earlier run's files whole and no new or temporary file beside them."""
    from interp.circuits import Faithfulness

    names = ("graph.safetensors", "faithfulness.safetensors", "faithfulness.json", "circuit.html")
    out = tmp_path / "c"
    out.mkdir()
    for name in names:
        (out / name).write_text(f"earlier {name}")

    def interrupted(self, path):  # the graph is written by now; the curve is not
        raise KeyboardInterrupt

    monkeypatch.setattr(Faithfulness, "save", interrupted)
    assert main(["circuit", "zoo:lm-gpt2", "--method", "eap", "--n", "4", "--out", str(out), "--json"]) == 130
    assert sorted(p.name for p in out.iterdir()) == sorted(names)
    assert all((out / name).read_text() == f"earlier {name}" for name in names)


def test_a_reader_that_stops_early_gets_no_error_line():
    """`interp zoo list --json | head -1`: the pipe closes before interp writes; it exits without
    the 'run failed: BrokenPipeError' line (or Python's 'Exception ignored' at exit)."""
    proc = subprocess.Popen([sys.executable, "-m", "interp.cli", "zoo", "list", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # long before interp has imported and printed
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err
