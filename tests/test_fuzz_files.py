"""Every loader against hostile files, property-based (hypothesis, fixed seed): truncated and
bit-flipped files, crafted headers and fields, NaN and infinity, wrong shapes. Each generated case
ends in an InterpError or a correct load (for what interp wrote itself and checksums: the original,
or a recomputation), never a foreign exception and never a hang."""

from __future__ import annotations

import copy
import json
import math
import signal
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from interp.files import storage
from interp.model import load_cache
from interp.errors import InterpError
from interp.features.dictionary import Dictionary
from interp.features.graph import AttributionGraph
from interp.features.neuronpedia import from_neuronpedia, to_neuronpedia
from interp.features.saelens import load_saelens, save_saelens
from interp.results import Grid
from interp.studies.units import Units
from interp.files.validate import read_object

FUZZ = settings(derandomize=True, deadline=5000, max_examples=30, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# -- the files the fuzzing starts from (the refusal tests use them too)


def tiny_dictionary() -> Dictionary:
    g = torch.Generator().manual_seed(0)
    return Dictionary(torch.randn(4, 3, generator=g), torch.zeros(3), torch.randn(3, 4, generator=g), torch.zeros(4),
                      "blocks.0.hook_resid_pre", "blocks.0.hook_resid_pre", threshold=torch.full((3,), 0.1))


def tiny_graph() -> AttributionGraph:
    """feature (L0 #3 @1), error (L0 @1), tokens @0 and @1, logit @1: a two-token prompt's graph."""
    adjacency = torch.zeros(5, 5)
    adjacency[0, 3], adjacency[4, 0], adjacency[4, 1], adjacency[4, 2] = 0.5, 1.0, 0.25, 0.1
    return AttributionGraph(adjacency=adjacency, kind=torch.tensor([0, 1, 2, 2, 3]), layer=torch.tensor([0, 0, -1, -1, 1]),
                            pos=torch.tensor([1, 1, 0, 1, 1]), index=torch.tensor([3, -1, 5, 6, 7]),
                            activation=torch.tensor([2.0, 0, 0, 0, 0]), prob=torch.tensor([0, 0, 0, 0, 1.0]),
                            tokens=("a", "b"), model="tiny", meta={"n_layers": 1, "prompt": "ab"})


def graph_json() -> dict:
    return to_neuronpedia(tiny_graph(), slug="g", prune=False)


@contextmanager
def no_hang(seconds: int = 120):
    """Fail instead of hanging: SIGALRM after `seconds`."""
    def stop(*_):
        raise TimeoutError(f"a loader ran past {seconds} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def loads_or_refuses(load, *args):
    """load(*args), or None when it is refused with an InterpError; any other exception fails."""
    try:
        return load(*args)
    except InterpError as err:
        assert str(err), "an empty refusal"
        return None


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    storage.save(tiny_dictionary(), root / "dict.safetensors")
    storage.save(tiny_graph(), root / "graph.safetensors")
    storage.save(Grid(torch.arange(6.0).reshape(2, 3), ("layer", "head"), meta={"metric": "logit_diff"}), root / "grid.safetensors")
    storage.save_state({"step": 3, "w": torch.arange(6.0), "nested": [{"a": torch.ones(2)}]}, root / "state.safetensors")
    save_saelens(tiny_dictionary(), root / "sae")
    return root


def _mutated(data: bytes, cut: int | None, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(data[:cut] if cut is not None else data)
    for pos, bit in flips:
        if out:
            out[pos % len(out)] ^= 1 << bit
    return bytes(out)


damage = st.tuples(st.one_of(st.none(), st.integers(0, 4000)),
                   st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), max_size=4))
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
              st.text(max_size=12), st.sampled_from(["../../etc/passwd", "os.system", "blocks.0.hook_z", "NaN", "1e999",
                                                     10**30, -10**400, 2**63])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8)


# -- result files (interp.results.load) and training states (load_state)


@FUZZ
@given(which=st.sampled_from(["dict", "graph", "grid"]), hurt=damage)
def test_result_files_truncated_or_bit_flipped(base, which, hurt):
    path = Path(tempfile.mkdtemp(dir=base)) / "f.safetensors"
    path.write_bytes(_mutated((base / f"{which}.safetensors").read_bytes(), *hurt))
    with no_hang():
        got = loads_or_refuses(storage.load, path)
    assert got is None or isinstance(got, (Dictionary, AttributionGraph, Grid))


FIELDS = {"dict": ["W_enc", "b_enc", "threshold", "site_in", "meta", "W_dec"], "grid": ["values", "axes", "labels", "meta"]}


@settings(FUZZ, max_examples=60)
@given(which=st.sampled_from(["dict", "grid"]), data=st.data(), value=json_values)
def test_result_headers_crafted(base, which, data, value):
    """A header field replaced by any JSON value (types, tensors it lacks, other result types, NaN)."""
    from safetensors import safe_open

    where = data.draw(st.lists(st.sampled_from(FIELDS[which] + ["$result", "fields"]), min_size=1, max_size=2))
    with safe_open(str(base / f"{which}.safetensors"), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    header = json.loads(meta["result"])
    for key in where:
        if key in ("$result", "fields"):
            header[key] = copy.deepcopy(value)
        elif isinstance(header.get("fields"), dict):
            header["fields"][key] = copy.deepcopy(value)
    path = Path(tempfile.mkdtemp(dir=base)) / "f.safetensors"
    save_file(tensors, str(path), metadata={**meta, "result": json.dumps(header)})
    with no_hang():
        got = loads_or_refuses(storage.load, path)
    assert got is None or isinstance(got, (Dictionary, Grid))


@FUZZ
@given(name=st.sampled_from(["root.W_enc", "root.threshold", "root.W_dec"]),
       fill=st.sampled_from([math.nan, math.inf, -math.inf, 1.0]), shape=st.sampled_from([None, (2,), (3, 3), (0,)]))
def test_dictionary_files_with_nan_or_wrong_shapes(base, name, fill, shape):
    from safetensors import safe_open

    with safe_open(str(base / "dict.safetensors"), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    tensors[name] = torch.full(shape or tuple(tensors[name].shape), fill)
    path = Path(tempfile.mkdtemp(dir=base)) / "f.safetensors"
    save_file(tensors, str(path), metadata=meta)
    got = loads_or_refuses(storage.load, path)
    assert (got is not None) == (fill == 1.0 and shape is None)  # only finite, well-shaped weights load


@FUZZ
@given(hurt=damage)
def test_training_states_truncated_or_bit_flipped_load_whole_or_not_at_all(base, hurt):
    data = (base / "state.safetensors").read_bytes()
    path = Path(tempfile.mkdtemp(dir=base)) / "s.safetensors"
    path.write_bytes(_mutated(data, *hurt))
    with no_hang():
        got = loads_or_refuses(storage.load_state, path)
    if got is not None:  # the digest covers header and tensors: what loads is what was written
        assert got["step"] == 3 and torch.equal(got["w"], torch.arange(6.0))


# -- SAELens folders


@FUZZ
@given(key=st.sampled_from(["d_in", "d_sae", "hook_name", "architecture", "apply_b_dec_to_input", "normalize_activations",
                            "metadata", "model_name"]), value=json_values)
def test_saelens_configs_crafted(base, key, value):
    folder = Path(tempfile.mkdtemp(dir=base))
    cfg = json.loads((base / "sae" / "cfg.json").read_text())
    cfg[key] = value
    if key == "hook_name":
        cfg["metadata"]["hook_name"] = value
    (folder / "cfg.json").write_text(json.dumps(cfg))
    (folder / "sae_weights.safetensors").write_bytes((base / "sae" / "sae_weights.safetensors").read_bytes())
    got = loads_or_refuses(load_saelens, folder)
    assert got is None or (isinstance(got, Dictionary) and got.W_enc.shape == (4, 3))


@FUZZ
@given(hurt=damage, cfg_cut=st.one_of(st.none(), st.integers(0, 300)))
def test_saelens_files_truncated_or_bit_flipped(base, hurt, cfg_cut):
    folder = Path(tempfile.mkdtemp(dir=base))
    (folder / "cfg.json").write_bytes((base / "sae" / "cfg.json").read_bytes()[:cfg_cut])
    (folder / "sae_weights.safetensors").write_bytes(_mutated((base / "sae" / "sae_weights.safetensors").read_bytes(), *hurt))
    with no_hang():
        got = loads_or_refuses(load_saelens, folder)
    assert got is None or isinstance(got, Dictionary)


# -- Neuronpedia graphs


def _paths(data, prefix=()):
    """Every (path, value) inside a JSON value (paths into dicts and lists)."""
    yield prefix, data
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        yield from _paths(v, prefix + (k,))


GRAPH_PATHS = [p for p, _ in _paths(graph_json()) if p and p[0] in ("nodes", "links", "metadata")]


@settings(FUZZ, max_examples=100)
@given(at=st.lists(st.sampled_from(GRAPH_PATHS), min_size=1, max_size=3), value=json_values)
def test_neuronpedia_graphs_crafted(at, value):
    """Any field of a graph (a node's position, a link's weight, nodes itself...) set to any JSON value."""
    data = graph_json()
    for path in at:
        target = data
        try:
            for k in path[:-1]:
                target = target[k]
            target[path[-1]] = copy.deepcopy(value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier replacement removed this path
    with no_hang():
        got = loads_or_refuses(from_neuronpedia, data)
    if got is not None:
        assert len(got) == len(data["nodes"])
        assert bool(torch.isfinite(got.adjacency).all()) and int(got.pos.max()) < max(len(got.tokens), 1) or not got.tokens
        got.describe(len(got) - 1), got.node_influence()  # what a view reads works


@FUZZ
@given(cut=st.integers(0, 5000))
def test_neuronpedia_files_cut_short(base, cut):
    text = json.dumps(graph_json())
    path = Path(tempfile.mkdtemp(dir=base)) / "g.json"
    path.write_text(text[:cut])
    got = loads_or_refuses(from_neuronpedia, path)
    assert got is None or cut >= len(text)


# -- unit entries and the processed-weight cache: damage means recompute, never use


@FUZZ
@given(hurt=damage, crafted=st.one_of(st.none(), json_values))
def test_unit_entries_damaged_are_recomputed(base, hurt, crafted, capsys):
    root = Path(tempfile.mkdtemp(dir=base))
    units = Units("toy", root)
    units.run({"seed": 0}, lambda: {"value": 1.5, "list": [1, 2]})
    path = root / "entries" / f"{units.key({'seed': 0})}.json"
    data = path.read_bytes()
    path.write_bytes(_mutated(data, *hurt) if crafted is None else json.dumps(crafted).encode())
    got = Units("toy", root).run({"seed": 0}, lambda: {"value": 2.5})
    if got != {"value": 1.5, "list": [1, 2]}:  # used only when whole and its own; else recomputed, said in one line
        assert got == {"value": 2.5} and "recomputing" in capsys.readouterr().err
    else:
        assert path.read_bytes() == data or json.loads(path.read_text())["result"] == got


@FUZZ
@given(hurt=damage)
def test_processed_weight_caches_damaged_are_rebuilt(base, hurt, monkeypatch):
    monkeypatch.setenv("INTERP_CACHE", str(base / "cache"))
    state = {"a.weight": torch.arange(12.0).reshape(3, 4), "b.bias": torch.ones(3)}
    key = {"format": "test", "weights": "w"}
    path = Path(tempfile.mkdtemp(dir=base)) / "p.safetensors"
    load_cache._write(path, key, state)
    data = path.read_bytes()
    path.write_bytes(_mutated(data, *hurt))
    with no_hang():
        got = load_cache._read(path, key, torch.device("cpu"))
    assert got is None or all(torch.equal(got[k], state[k]) for k in state)  # whole and right, or rebuilt


@FUZZ
@given(text=st.one_of(st.binary(max_size=40).map(lambda b: b.decode("latin-1")), json_values.map(json.dumps)))
def test_configs_and_cards_are_json_objects_or_refused(base, text):
    path = Path(tempfile.mkdtemp(dir=base)) / "card.json"
    path.write_text(text, encoding="utf-8")
    got = loads_or_refuses(read_object, path, "a card")
    assert got is None or isinstance(got, dict)


@FUZZ
@given(hurt=damage)
def test_probe_checkpoints_damaged_are_refused_or_replayed_whole(base, hurt):
    from interp.probing.probe import _read_checkpoint
    from interp.files.storage import save_state

    ident = {"model": "m", "tolerance": 0.1}
    path = Path(tempfile.mkdtemp(dir=base)) / "probe.safetensors"
    save_state({"ident": json.dumps(ident, sort_keys=True), "values": torch.tensor([0.5, 0.25], dtype=torch.float64),
                "seconds": 2.0}, path)
    path.write_bytes(_mutated(path.read_bytes(), *hurt))
    got = loads_or_refuses(_read_checkpoint, path, ident)
    assert got is None or got == ([0.5, 0.25], 2.0)
