"""Each vocabulary is defined once: the CLI writes out the option lists argparse checks, and this
test holds every copy to its definition; the CLI's study names are read from the study registry."""

from __future__ import annotations

import argparse

import pytest

from interp import metrics, sweep, tasks
from interp.circuits import circuit
from interp.cli import build_parser
from interp.errors import InterpError
from interp.interventions import ABLATIONS
from interp.steering import axes
from interp.steering.generate import POSITIONS  # (interp.steering.generate is also the function)


def _choices(command: str, option: str) -> list:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return list(next(a for a in sub._actions if option in a.option_strings or a.dest == option).choices)


@pytest.mark.parametrize("command, option, vocabulary", [
    ("sweep", "--executor", list(sweep.EXECUTORS)),
    ("steer", "--mode", list(axes.MODES)),
    ("steer", "--positions", list(POSITIONS)),
    ("circuit", "--ablation", list(circuit.ABLATIONS)),
])
def test_the_cli_offers_exactly_the_vocabulary(command, option, vocabulary):
    assert _choices(command, option) == vocabulary


def test_sweeps_read_the_one_list_of_ablations_metrics_and_kinds(english_dirs):
    from interp.sweep import jobs as sweep_jobs

    assert sweep_jobs.ABLATIONS is ABLATIONS and sweep_jobs.METRICS is metrics.TASK_METRICS
    assert sweep.KINDS is sweep_jobs.KINDS
    task = tasks.make("ioi", split="test", n=2, seed=0)
    for name in metrics.TASK_METRICS:
        assert callable(metrics.for_task(task, name))
    with pytest.raises(InterpError, match="is not one of"):
        metrics.for_task(task, "rank")
