"""Every refusal of a main entry point is an InterpError that names what the caller did and what
to do, in under 300 characters: float token ids and other wrong dtypes, degenerate inputs (empty
batches, prompts past the context, positions past the prompt, dictionaries of another width, graphs
with nothing to rank) fail at the entry point, not deep inside the model."""

from __future__ import annotations

import importlib
import inspect
import json

import pytest
import torch

import interp
from interp import circuits, features, masking, patching, run, steering, sweep, tasks
from interp.errors import InterpError
from interp.interventions import Patch
from interp.studies import protocol
from interp.tasks import english

features_train = importlib.import_module("interp.features.train")  # the module (features.train is its function)
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
    # degenerate in-memory inputs: refused at the entry point
    ("logits: 3-D tokens", lambda m, t: run.logits(m["gpt2"], m["task"].clean[None]), "shape"),
    ("logits: empty batch", lambda m, t: run.logits(m["gpt2"], m["task"].clean[:0]), "empty"),
    ("logits: past the context", lambda m, t: run.logits(m["gpt2"], torch.ones(1, 65, dtype=torch.long)), "65 positions"),
    ("logits: id past the vocabulary", lambda m, t: run.logits(m["gpt2"], m["task"].clean + 10_000), "token id"),
    ("logits: int16 ids", lambda m, t: run.logits(m["gpt2"], m["task"].clean.short()), "int16"),
    ("evaluate: empty batch", lambda m, t: run.evaluate(m["gpt2"], m["task"].clean[:0], [[]], lambda x: x.sum()), "empty"),
    ("reference: empty rows", lambda m, t: run.reference(m["gpt2"], ["blocks.0.hook_z"], "mean", m["task"].clean[:0]),
     "empty"),
    ("patch: position past the prompt", lambda m, t: Patch("resid_pre", torch.zeros(4, 18, 32), pos=18, layer=0), "pos=18"),
    ("train: zero rows", lambda m, t: _train(m, m["task"].clean[:0], None, t), "empty"),
    ("train: no trainable position", lambda m, t: _train(m, m["task"].clean, False, t), "no trainable position"),
    ("fit: zero rows", lambda m, t: features_train.fit(torch.zeros(0, 8), site_in="blocks.0.hook_resid_post"), "empty"),
    ("fit: NaN activations", lambda m, t: features_train.fit(torch.full((4, 8), float("nan")), site_in="blocks.0.hook_resid_post"),
     "NaN"),
    ("attribute: an empty prompt", lambda m, t: features.attribute(m["gpt2"], "", [_dictionary(m, transcoder=True)]), "BOS"),
    ("attribute: an empty tensor", lambda m, t: features.attribute(m["gpt2"], torch.zeros(0, dtype=torch.long),
                                                                   [_dictionary(m, transcoder=True)]), "empty"),
    ("circuit scores: no edges", lambda m, t: circuits.circuit_scores(m["gpt2"], m["task"], {"g": _edge_graph(m, "empty")},
                                                                      progress=False), "no edges"),
    ("circuit scores: NaN scores", lambda m, t: circuits.circuit_scores(m["gpt2"], m["task"], {"g": _edge_graph(m, "nan")},
                                                                        progress=False), "NaN"),
    ("feature edit: another width", lambda m, t: features.feature_edit(m["gpt2"], m["task"].clean, _dictionary(m, width=35),
                                                                       [0]), "width 35"),
    ("feature edit: position past the prompt", lambda m, t: features.feature_edit(
        m["gpt2"], m["task"].clean, _dictionary(m), [0], positions=[40]), "position=40"),
    ("generate: past the context", lambda m, t: steering.generate(m["gpt2"], "the cat", max_new_tokens=80), "n_ctx"),
    ("doc: another study's JSON", lambda m, t: protocol.get("steering").write_doc(_json(t, {"study": "illusions"}), t / "d.md"),
     "study illusions"),
    ("doc: not JSON", lambda m, t: protocol.get("steering").write_doc(_json(t, "{bad"), t / "d.md"), "not JSON"),
]


def _train(m, tokens, valid, out):
    mask = torch.ones_like(tokens, dtype=torch.bool) if valid is None else torch.full_like(tokens, valid, dtype=torch.bool)
    recipe = features_train.Recipe(n_features=8, k=2, tokens=40, rows=2)
    return features_train.train(m["gpt2"], ["blocks.0.hook_resid_post"], tokens, mask, out, recipe=recipe, progress=False)


def _dictionary(m, *, width=None, transcoder=False):
    """A small dictionary of the English gpt2 (or of activations `width` wide, another model's)."""
    site_in, site_out = ("blocks.0.ln2.hook_normalized", "blocks.0.hook_mlp_out") if transcoder else ("blocks.0.hook_resid_post",) * 2
    x = torch.randn(64, width or m["gpt2"].cfg.d_model, generator=torch.Generator().manual_seed(0))
    return features_train.fit(x, x if transcoder else None, site_in=site_in, site_out=site_out,
                              recipe=features_train.Recipe(n_features=8, k=2, tokens=64), batch=16)


def _edge_graph(m, how):
    g = circuits.eap(m["gpt2"], m["task"], progress=False).top(5)
    if how == "empty":
        return type(g)((), (), torch.zeros(0), g.meta)
    return type(g)(g.senders, g.receivers, torch.full((len(g),), float("nan")), g.meta)


def _json(tmp, content):
    path = tmp / "study.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


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


# -- files: every file boundary refuses a hostile or damaged file with the file, the field and what is right


def _result_file(t, change):
    """A dictionary saved to t/d.safetensors, then `change(meta, tensors)` applied and written back."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from test_fuzz_files import tiny_dictionary

    path = tiny_dictionary().save(t / "d.safetensors")
    with safe_open(str(path), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    change(meta, tensors)
    save_file(tensors, str(path), metadata=meta)
    return interp.results.load(path)


def _retyped(name):
    return lambda meta, tensors: meta.update(result=meta["result"].replace('"Dictionary"', json.dumps(name)))


def _saelens(t, change_cfg=None, cfg_text=None):
    from interp.features import load_saelens, save_saelens
    from test_fuzz_files import tiny_dictionary

    folder = save_saelens(tiny_dictionary(), t / "sae")
    cfg = json.loads((folder / "cfg.json").read_text())
    if change_cfg:
        change_cfg(cfg)
    (folder / "cfg.json").write_text(cfg_text if cfg_text is not None else json.dumps(cfg))
    return load_saelens(folder)


def _traversal(cfg):
    cfg["hook_name"] = cfg["metadata"]["hook_name"] = "../../../etc/passwd"


def _graph(t, change):
    from interp.features import from_neuronpedia
    from test_fuzz_files import graph_json

    data = graph_json()
    change(data)
    (t / "g.json").write_text(json.dumps(data))
    return from_neuronpedia(t / "g.json")


def _state(t):
    from interp.files.storage import load_state, save_state

    path = save_state({"w": torch.arange(64.0)}, t / "s.safetensors")
    data = bytearray(path.read_bytes())
    data[-3] ^= 4  # one bit of the tensor's bytes: same size, header intact
    path.write_bytes(bytes(data))
    return load_state(path)


def _model_dir(m, t):
    import shutil

    folder = shutil.copytree(m["dir"], t / "model")
    (folder / "config.json").write_text("{not json")
    return interp.load(folder)


def _sweep_results(t):
    (t / "sw").mkdir()
    (t / "sw" / "results.json").write_text(json.dumps({"complete": True, "jobs": [{"job": "a", "file": "../../x"}]}))
    return sweep.load(t / "sw")


def _out_under_a_file(t):
    from interp.files.storage import check_writable

    (t / "f").write_text("x")
    return check_writable(t / "f" / "out.json")


FILE_CASES = [
    ("result: a tensor the file lacks", lambda m, t: _result_file(t, lambda meta, ts: ts.pop("root.W_dec")), "W_dec"),
    ("result: header names os.system", lambda m, t: _result_file(t, _retyped("os.system")), "os.system"),
    ("result: a module that does not exist", lambda m, t: _result_file(t, _retyped("no.such.Module")), "no.such.Module"),
    ("dictionary: NaN thresholds", lambda m, t: _result_file(t, lambda meta, ts: ts["root.threshold"].fill_(float("nan"))),
     "threshold"),
    ("saelens: cfg.json not JSON", lambda m, t: _saelens(t, cfg_text="{not json"), "cfg.json"),
    ("saelens: d_in disagrees", lambda m, t: _saelens(t, lambda cfg: cfg.update(d_in=7)), "d_in"),
    ("saelens: hook_name a path", lambda m, t: _saelens(t, _traversal), "hook_name"),
    ("neuronpedia: position 10**30", lambda m, t: _graph(t, lambda d: d["nodes"][0].update(ctx_idx=10**30)), "ctx_idx"),
    ("neuronpedia: weight 'heavy'", lambda m, t: _graph(t, lambda d: d["links"][0].update(weight="heavy")), "weight"),
    ("neuronpedia: nodes a string", lambda m, t: _graph(t, lambda d: d.update(nodes="abc")), "nodes"),
    ("neuronpedia: infinite weight", lambda m, t: _graph(t, lambda d: d["links"][0].update(weight=float("inf"))), "weight"),
    ("neuronpedia: node past the prompt", lambda m, t: _graph(t, lambda d: d["nodes"][0].update(ctx_idx=9)), "ctx_idx"),
    ("state: flipped bits", lambda m, t: _state(t), "s.safetensors"),
    ("model: config.json not JSON", _model_dir, "config.json"),
    ("sweep: results.json names a file elsewhere", lambda m, t: _sweep_results(t), "results.json"),
    ("output: under a regular file", lambda m, t: _out_under_a_file(t), "out.json"),
]


@pytest.mark.parametrize("case, call, named", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_a_hostile_file_is_refused_naming_the_file_the_field_and_what_is_right(case, call, named, english_dirs, tmp_path):
    with pytest.raises(InterpError) as info:
        call({"dir": english_dirs["gpt2"]}, tmp_path)
    message = str(info.value)
    assert len(message) < 300, f"{len(message)} characters: {message}"
    assert named in message[:160], f"the message does not lead with {named!r}: {message}"
    assert any(w in message.lower() for w in FIX_WORDS), f"the message says nothing about what to do: {message}"
