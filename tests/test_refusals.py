"""Every refusal of a main entry point is an InterpError that names what the caller did and what
to do, in under 300 characters (issue 29, item 7): float token ids and other wrong dtypes fail at
the entry point, not deep inside the model."""

from __future__ import annotations

import inspect

import pytest
import torch

import interp
from interp import circuits, masking, patching, run, steering, sweep, tasks
from interp.errors import InterpError
from interp.tasks import english

FIX_WORDS = ("pass", "use", "give", "one of", "valid", "must", "need", "nearest", "e.g.", "install", "leave")


@pytest.fixture(scope="module")
def english_model(english_dirs):
    return interp.load(english_dirs["gpt2"])


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return interp.load(interp.build_tiny("bert", tmp_path_factory.mktemp("bert") / "b", words=english.WORDS, seed=1))


def user(fn):
    """`fn` as a user calls it: without the jaxtyping checks the tests wrap every function in."""
    return inspect.unwrap(fn)


def _float(task):
    return torch.zeros(task.clean.shape)


# (case, call(models, tmp_path), a word the message names near its start: what was wrong)
CASES = [
    ("load: no such folder", lambda m, t: interp.load("./no/such/model/dir"), "./no/such/model/dir"),
    ("load: dtype name", lambda m, t: interp.load(m["dir"], dtype="float33"), "float33"),
    ("load: device and device_map", lambda m, t: interp.load(m["dir"], device="cpu", device_map="auto"), "device"),
    ("logits: float ids", lambda m, t: run.logits(m["gpt2"], _float(m["task"])), "float32"),
    ("logits: a list", lambda m, t: user(run.logits)(m["gpt2"], [[1, 2, 3]]), "list"),
    ("cache: hook name", lambda m, t: run.cache(m["gpt2"], m["task"].clean, ["blocks.0.hook_zz"]), "blocks.0.hook_zz"),
    ("cache: float answer_pos", lambda m, t: run.cache(m["gpt2"], m["task"].clean, [], answer_pos=torch.zeros(4)),
     "answer_pos"),
    ("evaluate: float ids", lambda m, t: run.evaluate(m["gpt2"], _float(m["task"]), [[]], lambda x: x.sum()), "float32"),
    ("reference: ablation", lambda m, t: run.reference(m["gpt2"], ["blocks.0.hook_z"], "median", m["task"].clean),
     "median"),
    ("patch: float ids", lambda m, t: patching.activation_patch(m["gpt2"], _float(m["task"]), _float(m["task"]),
                                                                site="z", metric=lambda x: x.sum()), "float32"),
    ("patch: site", lambda m, t: patching.activation_patch(m["gpt2"], m["task"], site="zz"), "zz"),
    ("tasks: family", lambda m, t: tasks.make("nope", split="test"), "nope"),
    ("tasks: split", lambda m, t: tasks.make("sva", split="nope"), "nope"),
    ("mask: sparsity", lambda m, t: masking.learn_mask(m["gpt2"], m["task"], sparsity=1.5, steps=1, progress=False),
     "sparsity"),
    ("circuits: BERT", lambda m, t: circuits.eap_ig(m["bert"], m["task"], steps=2), "Bert"),
    ("generate: token ids", lambda m, t: user(steering.generate)(m["gpt2"], m["task"].clean, max_new_tokens=2), "Tensor"),
    ("generate: max_new_tokens", lambda m, t: steering.generate(m["gpt2"], "the cat", max_new_tokens=0),
     "max_new_tokens"),
    ("sweep: executor", lambda m, t: sweep.run(t / "none.toml", t / "out", executor="slurm"), "slurm"),
    ("results: no file", lambda m, t: interp.results.load(t / "nothing.safetensors"), "nothing.safetensors"),
]


@pytest.mark.parametrize("case, call, named", CASES, ids=[c[0] for c in CASES])
def test_a_refusal_names_what_was_wrong_and_what_to_do_in_under_300_characters(case, call, named, english_model,
                                                                               english_dirs, bert, tmp_path):
    models = {"gpt2": english_model, "dir": english_dirs["gpt2"], "bert": bert,
              "task": tasks.make("ioi", split="test", n=4, seed=0)}
    with pytest.raises(InterpError) as info:
        call(models, tmp_path)
    message = str(info.value)
    assert len(message) < 300, f"{len(message)} characters: {message}"
    assert named in message[:120], f"the message does not lead with {named!r}: {message}"
    assert any(w in message.lower() for w in FIX_WORDS), f"the message says nothing about what to do: {message}"
