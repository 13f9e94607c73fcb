"""data/tasks (the zoo's task sets as JSON Lines) is what interp.tasks.export writes today."""

import json
from pathlib import Path

import pytest

from interp import tasks
from interp.errors import InterpError
from interp.tasks import export

COMMITTED = Path(__file__).parent.parent / "data" / "tasks"


def test_the_committed_task_sets_are_what_export_writes(tmp_path):
    out = export.write(tmp_path / "tasks")
    ours = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert ours == sorted(p.relative_to(COMMITTED) for p in COMMITTED.rglob("*") if p.is_file())
    for rel in ours:
        assert (out / rel).read_bytes() == (COMMITTED / rel).read_bytes(), f"data/tasks/{rel} is stale: rerun python -m interp.tasks.export data/tasks"
    assert len(ours) == 1 + sum(len(s) for s in tasks.SPLITS.values())


def test_a_row_reads_back_as_the_task_it_came_from():
    task = tasks.make("ioi", split="test", n=export.ROWS, seed=0)
    rows = [json.loads(line) for line in (COMMITTED / "ioi" / "test.jsonl").read_text().splitlines()]
    assert len(rows) == len(task) and rows[3]["clean"] == task.clean[3].tolist() and rows[3]["text"] == task.text[3]
    assert rows[3]["correct"] == int(task.correct[3]) and rows[3]["positions"]["IO"] == int(task.positions["IO"][3])


def test_export_refuses_a_bad_row_count_and_leaves_nothing(tmp_path):
    with pytest.raises(InterpError, match="rows=0"):
        export.write(tmp_path / "t", rows=0)
    assert not (tmp_path / "t").exists()


def test_export_refuses_a_folder_holding_other_files_and_leaves_them(tmp_path):
    root = export.write(tmp_path / "t", rows=2)
    (root / "ioi" / "test.jsonl").write_text("stale\n")
    assert export.write(root, rows=2) == root  # its own earlier files are replaced
    assert (root / "ioi" / "test.jsonl").read_text() != "stale\n"
    (root / "notes.txt").write_text("mine")
    with pytest.raises(InterpError, match=r"notes\.txt.*besides task sets"):
        export.write(root, rows=3)
    assert (root / "notes.txt").read_text() == "mine" and len((root / "ioi" / "test.jsonl").read_text().splitlines()) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["t"]  # no temp folder left beside it
