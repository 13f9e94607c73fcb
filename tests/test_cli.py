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
