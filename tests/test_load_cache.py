"""Fast reloads (interp.model.load_cache): a second load reads the processed weights from the cache and
equals an uncached load; a cache written for another TransformerLens version or other flags is
rebuilt with a one-line note, never read."""

import json
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import interp
from interp.model import load_cache

PROMPT = "when mary and john went to the store , john gave a drink to"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def folds(monkeypatch):
    """Counts TransformerLens's layer-norm folds: the work a cached load skips."""
    from transformer_lens.weight_processing import ProcessWeights

    calls = []
    original = ProcessWeights.__dict__["fold_layer_norm"].__func__

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(ProcessWeights, "fold_layer_norm", staticmethod(counted))
    return calls


def _same(a, b):
    tokens = a.to_tokens(PROMPT)
    with torch.no_grad():
        assert torch.equal(a(tokens), b(tokens))
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_second_load_reads_the_cache_and_equals_an_uncached_load(family, tmp_path, cache, folds):
    folder = interp.build_tiny(family, tmp_path / family, seed=3)
    plain = interp.load(folder, weights_cache=False)
    assert len(folds) == 1 and not (cache / "processed").exists()
    first = interp.load(folder, weights_cache=True)
    assert len(folds) == 2
    path = load_cache.processed_path(folder, None)
    assert path.exists() and not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp left
    second = interp.load(folder, weights_cache=True)
    assert len(folds) == 2  # read, not recomputed
    _same(plain, first)
    _same(plain, second)


def test_tiny_models_are_not_cached_by_default(tmp_path, cache):
    folder = interp.build_tiny("llama", tmp_path / "m")
    interp.load(folder)
    assert not (cache / "processed").exists()


def _rewrite_key(path, change):
    with safe_open(str(path), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    key = json.loads(meta["key"])
    change(key)
    meta["key"] = json.dumps(key)
    save_file(tensors, str(path), metadata=meta)


@pytest.mark.parametrize("change", [
    lambda key: key.update({"transformer-lens": "3.0.0"}),
    lambda key: key["flags"].update({"center_unembed": False}),
    lambda key: key.update({"weights": "0" * 64}),
])
def test_a_foreign_cache_is_rebuilt_with_a_note(change, tmp_path, cache, folds, capsys):
    folder = interp.build_tiny("llama", tmp_path / "m", seed=4)
    plain = interp.load(folder, weights_cache=True)
    path = load_cache.processed_path(folder, None)
    _rewrite_key(path, change)
    # a foreign file's tensors must not be read: poison them, keeping the (foreign) key
    with safe_open(str(path), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) * 0 + 7 for k in f.keys()}
    save_file(tensors, str(path), metadata=meta)
    capsys.readouterr()
    again = interp.load(folder, weights_cache=True)
    note = capsys.readouterr().err.strip().splitlines()
    assert len(note) == 1 and "rebuilding" in note[0] and path.name in note[0]
    assert len(folds) == 2
    _same(plain, again)
    third = interp.load(folder, weights_cache=True)  # the rebuilt file is read
    assert len(folds) == 2
    _same(plain, third)


def test_a_damaged_cache_is_rebuilt(tmp_path, cache, capsys):
    folder = interp.build_tiny("llama", tmp_path / "m", seed=5)
    plain = interp.load(folder, weights_cache=True)
    path = load_cache.processed_path(folder, None)
    path.write_bytes(path.read_bytes()[:100])
    again = interp.load(folder, weights_cache=True)
    assert "rebuilding" in capsys.readouterr().err
    _same(plain, again)


def test_file_hash_is_remembered_and_notices_a_change(tmp_path, cache):
    f = tmp_path / "w.bin"
    f.write_bytes(b"abc")
    first = load_cache.file_sha256(f)
    assert json.loads((cache / "hashes.json").read_text())[str(f.resolve())]["sha256"] == first
    f.write_bytes(b"abcd")
    second = load_cache.file_sha256(f)
    assert second != first
    memo = json.loads((cache / "hashes.json").read_text())
    for damaged in ({}, {"sha256": None}, {"sha256": "../" * 21 + "x"}):  # the file's size and mtime, but no sound hash: rehashed
        entry = {k: v for k, v in memo[str(f.resolve())].items() if k != "sha256"}
        (cache / "hashes.json").write_text(json.dumps({str(f.resolve()): {**entry, **damaged}}))
        assert load_cache.file_sha256(f) == second


def test_fast_tokenizer_equals_the_auto_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    folder = interp.build_tiny("llama", tmp_path / "m")
    copy = tmp_path / "backend"
    shutil.copytree(folder, copy)
    cfg = json.loads((copy / "tokenizer_config.json").read_text())
    cfg["tokenizer_class"] = "TokenizersBackend"
    (copy / "tokenizer_config.json").write_text(json.dumps(cfg))
    fast, auto = load_cache.fast_tokenizer(copy), AutoTokenizer.from_pretrained(str(copy), add_bos_token=True)
    for text in (PROMPT, "the cat", ""):
        assert fast(text).input_ids == auto(text).input_ids
        assert fast.decode(auto(text).input_ids) == auto.decode(auto(text).input_ids)
    assert (fast.bos_token_id, fast.eos_token_id, fast.pad_token_id) == (auto.bos_token_id, auto.eos_token_id, auto.pad_token_id)
    cfg["tokenizer_class"] = "BertTokenizer"  # behaviour outside tokenizer.json: not built this way
    (copy / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert load_cache.fast_tokenizer(copy) is None


@pytest.mark.real
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_real_model_reload_equals_an_uncached_load(name, real_cache):
    from transformers import AutoTokenizer

    uncached = interp.load(name, weights_cache=False)
    interp.load(name)  # writes the cache
    cached = interp.load(name)  # reads it
    _same(uncached, cached)
    folder = interp.model.resolve(name)
    auto = AutoTokenizer.from_pretrained(folder, add_bos_token=True)
    for text in (PROMPT, "When Mary and John went to the store, John gave a drink to", " émigré 東京\n\nx", ""):
        assert cached.tokenizer(text).input_ids == auto(text).input_ids
        assert torch.equal(cached.to_tokens(text), uncached.to_tokens(text))
    assert cached.tokenizer.padding_side == auto.padding_side



def test_writing_a_cached_models_weights_leaves_the_cache_as_it_was(tmp_path, cache):
    """The cached weights are memory-mapped copy-on-write: training a loaded model in place must not
    reach the file the next load reads."""
    folder = interp.build_tiny("llama", tmp_path / "m", seed=6)
    plain = interp.load(folder, weights_cache=False)
    interp.load(folder, weights_cache=True)  # writes the cache
    mapped = interp.load(folder, weights_cache=True)
    with torch.no_grad():
        for p in mapped.parameters():
            p.add_(1.0)
    _same(plain, interp.load(folder, weights_cache=True))


def test_warm_is_a_no_op_without_a_cache_file(tmp_path, cache):
    folder = interp.build_tiny("llama", tmp_path / "m", seed=7)
    load_cache.warm(folder, None)  # nothing cached yet: no error, nothing written
    assert not (cache / "processed").exists()


@pytest.mark.parametrize("family,dtype", [("llama", None), ("gpt2", None), ("qwen2", None), ("gemma2", None),
                                          ("llama", torch.bfloat16)])
def test_lean_processing_equals_transformerlens_own_processing(family, dtype, tmp_path, cache):
    """interp.load hands each weight-processing step its input one tensor at a time
    (load_cache.lean_processing); the weights it gives are exactly TransformerLens's own."""
    from transformer_lens.model_bridge import TransformerBridge

    from interp.model.loading import quiet_loading

    folder = interp.build_tiny(family, tmp_path / family, seed=8)
    ours = interp.load(folder, weights_cache=False, dtype=dtype)
    with quiet_loading():
        theirs = TransformerBridge.boot_transformers(str(folder), tokenizer=ours.tokenizer, **({"dtype": dtype} if dtype else {}))
        theirs.enable_compatibility_mode(disable_warnings=True)
    theirs.eval()
    _same(ours, theirs)


def test_lean_processing_frees_each_input_and_restores_the_steps():
    from transformer_lens.weight_processing import ProcessWeights

    before = {n: ProcessWeights.__dict__[n] for n in load_cache._CLONING_STEPS}
    given = {"a": torch.ones(2), "b": torch.zeros(3)}
    seen = []

    def step(state_dict, cfg):
        out = {}
        for k, v in state_dict.items():
            out[k] = v.clone()
            seen.append(len(state_dict))  # entries still held while cloning
        return out

    with load_cache.lean_processing():
        out = load_cache._handing_over(step)(given, None)
    assert seen == [1, 0] and given == {} and torch.equal(out["a"], torch.ones(2)) and torch.equal(out["b"], torch.zeros(3))
    assert {n: ProcessWeights.__dict__[n] for n in load_cache._CLONING_STEPS} == before


def test_a_cache_with_flipped_bits_is_rebuilt_with_a_note(tmp_path, cache, folds, capsys):
    """Same size, header intact, one payload byte flipped: the digest notices, the file is rebuilt."""
    folder = interp.build_tiny("llama", tmp_path / "m", seed=8)
    plain = interp.load(folder, weights_cache=True)  # writes the cache
    interp.load(folder, weights_cache=True)  # reads it, checked once
    path = load_cache.processed_path(folder, None)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x10  # inside the last tensor's bytes
    path.write_bytes(bytes(data))
    capsys.readouterr()
    again = interp.load(folder, weights_cache=True)
    note = capsys.readouterr().err.strip().splitlines()
    assert len(note) == 1 and "checksum" in note[0] and path.name in note[0], note
    assert len(folds) == 2  # processed twice: the first load and the rebuild (the read in between processed nothing)
    _same(plain, again)
