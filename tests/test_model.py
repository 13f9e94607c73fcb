import json
import os
from pathlib import Path

import pytest
import torch

import interp
from interp import run
from interp.hooks import hooks
from interp.interventions import Mask
from interp.model import FAMILIES, ModelNotFoundError, resolve

PROMPT = "when mary and john went to the store , john gave a drink to"


@pytest.mark.parametrize("family", FAMILIES)
def test_load_cache_shapes_and_head_ablation(family, tiny_models):
    model = tiny_models[family]
    tokens = model.to_tokens(PROMPT)
    n_pos = tokens.shape[1]
    assert n_pos == len(PROMPT.split()) + 1  # one BOS, one token per word
    logits, cache = model.run_with_cache(tokens)
    cfg = model.cfg
    for layer in range(cfg.n_layers):
        assert cache[f"blocks.{layer}.attn.hook_z"].shape == (1, n_pos, cfg.n_heads, cfg.d_head)
        assert cache[f"blocks.{layer}.attn.hook_pattern"].shape == (1, cfg.n_heads, n_pos, n_pos)
    base = run.logits(model, tokens)
    unchanged = run.logits(model, tokens, [Mask.ablate("z", [], n_heads=cfg.n_heads, layer=0)])
    ablated = run.logits(model, tokens, [Mask.ablate("z", [1], n_heads=cfg.n_heads, layer=0)])
    assert torch.equal(base, unchanged)
    assert (base - ablated).abs().max() > 1e-4


@pytest.mark.parametrize("family", FAMILIES)
def test_parity_with_plain_bridge(family, tiny_dirs, tiny_models):
    from transformer_lens.model_bridge import TransformerBridge

    plain = TransformerBridge.boot_transformers(tiny_dirs[family], device="cpu")
    plain.enable_compatibility_mode(disable_warnings=True)
    tokens = torch.tensor([[2, 5, 6, 7, 8, 9, 10, 11]])
    with torch.no_grad():
        assert torch.allclose(tiny_models[family](tokens), plain(tokens), atol=1e-5, rtol=0)


@pytest.mark.parametrize("family,kv", [("llama", 2), ("qwen2", 2), ("gemma2", 2), ("gpt2", 4)])
def test_grouped_query_attention_shapes(family, kv, tiny_models):
    model = tiny_models[family]
    assert interp.hooks.n_kv_heads(model) == kv
    _, cache = model.run_with_cache(model.to_tokens("the cat sees the dog"))
    assert cache["blocks.0.attn.hook_k"].shape[2] == kv
    assert cache["blocks.0.attn.hook_q"].shape[2] == model.cfg.n_heads
    assert [interp.hooks.kv_head_of(model, h) for h in range(4)] == ([0, 0, 1, 1] if kv == 2 else [0, 1, 2, 3])


def test_describe_and_zoo_prefix(tiny_models):
    info = interp.describe(tiny_models["llama"])
    assert info["family"] == "llama" and info["n_kv_heads"] == 2 and info["n_heads"] == 4
    assert interp.describe(tiny_models["bert"])["is_causal"] is False
    with pytest.raises(ModelNotFoundError, match="zoo model 'no-such-model' not found"):
        resolve("zoo:no-such-model")


def test_missing_directory(tmp_path):
    with pytest.raises(ModelNotFoundError, match="not a directory"):
        interp.load(tmp_path / "nothing-here")
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        interp.load(tmp_path)


def test_corrupt_directory(tiny_dirs, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(tiny_dirs["gpt2"], bad)
    (bad / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(ValueError, match="could not load"):
        interp.load(bad)
    (bad / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        interp.load(bad)


def test_pickle_only_checkpoint_is_refused(tiny_dirs, tmp_path):
    import shutil

    d = tmp_path / "pickled"
    shutil.copytree(tiny_dirs["gpt2"], d)
    (d / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(1)}, d / "pytorch_model.bin")
    with pytest.raises(ValueError, match="safetensors only"):
        interp.load(d)


def test_hub_name_offline_fails_at_once(monkeypatch):
    from huggingface_hub import constants

    # offline mode as huggingface_hub reads it (HF_HUB_OFFLINE=1/true/yes/on, TRANSFORMERS_OFFLINE)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(interp.model.loading, "_hub_reachable", lambda timeout=2.0: pytest.fail("network checked while offline"))
    with pytest.raises(ModelNotFoundError, match="local HF-format directory"):
        interp.load("some-org/some-model-that-is-not-cached")


def test_hub_name_without_network_fails_cleanly(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(interp.model.loading, "_hub_reachable", lambda timeout=2.0: False)
    with pytest.raises(ModelNotFoundError, match="cannot be reached"):
        interp.load("gpt2-not-cached-anywhere")


def test_trust_remote_code_is_off_by_default(tiny_dirs, tmp_path):
    import inspect
    import shutil

    assert inspect.signature(interp.load).parameters["trust_remote_code"].default is False
    # a folder whose config and tokenizer config ask for code of their own: it loads as the plain
    # architecture, and the folder's Python never runs
    d = tmp_path / "remote"
    shutil.copytree(tiny_dirs["gpt2"], d)
    ran = tmp_path / "ran"
    (d / "evil.py").write_text(f"open({str(ran)!r}, 'w').close()\nfrom transformers import GPT2Config as C, GPT2LMHeadModel as M\n")
    for name, key, entry in (("config.json", "AutoModelForCausalLM", "evil.M"), ("tokenizer_config.json", "AutoTokenizer", ["evil.M", None])):
        cfg = json.loads((d / name).read_text())
        (d / name).write_text(json.dumps({**cfg, "trust_remote_code": True, "auto_map": {key: entry, "AutoConfig": "evil.C"}}))
    model = interp.load(d)
    assert not ran.exists() and model.cfg.n_layers == interp.load(tiny_dirs["gpt2"]).cfg.n_layers


def test_a_folder_without_a_tokenizer_or_with_a_damaged_one_is_refused(tiny_dirs, tmp_path):
    import shutil

    d = tmp_path / "m"
    shutil.copytree(tiny_dirs["gpt2"], d)
    (d / "tokenizer.json").write_text('{"version": ')  # cut short
    with pytest.raises(interp.InterpError, match=r"cannot read the tokenizer in .*JSONDecodeError"):
        interp.load(d)
    (d / "tokenizer.json").unlink()  # no tokenizer at all: transformers would make an empty vocabulary
    with pytest.raises(ModelNotFoundError, match="has no tokenizer"):
        interp.load(d)


def test_a_zoo_name_is_never_a_path_out_of_the_zoo():
    for name in ("../lm-gpt2", "lm-gpt2/../lm-llama", "..", "/tmp"):
        with pytest.raises(ModelNotFoundError, match="is not a zoo name"):
            resolve(f"zoo:{name}")


def test_build_tiny_rejects_bad_sizes(tmp_path):
    with pytest.raises(ValueError, match="family 'mamba'"):
        interp.build_tiny("mamba", tmp_path / "m")
    with pytest.raises(ValueError, match="not divisible"):
        interp.build_tiny("gpt2", tmp_path / "m", d_model=30, n_heads=4)
    assert not (tmp_path / "m").exists()
    assert [p for p in tmp_path.iterdir()] == []  # nothing half-written left behind


def test_saved_directory_is_safetensors_with_plain_tokenizer(tiny_dirs):
    files = set(os.listdir(tiny_dirs["qwen2"]))
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= files
    assert not any(f.endswith(".bin") for f in files)
    tok_cfg = json.loads(open(os.path.join(tiny_dirs["qwen2"], "tokenizer_config.json")).read())
    assert tok_cfg["tokenizer_class"] == "PreTrainedTokenizerFast"


@pytest.mark.parametrize("family", interp.model.DECODER_FAMILIES)
def test_resume_equals_the_full_forward(family, tiny_models):
    """Starting at any block and position, from what the base run recorded, gives its logits."""
    from interp.model.resuming import cached_keys_values, can_resume, kv_cache_kwargs, new_kv_cache, resume

    model = tiny_models[family]
    assert can_resume(model)
    tokens = torch.randint(5, 25, (2, 9), generator=torch.Generator().manual_seed(0))
    resid, cache = {}, new_kv_cache(model)
    keep = lambda l: lambda act, *, hook: resid.__setitem__(l, act.clone())  # noqa: E731
    with torch.no_grad(), hooks(model, [(f"blocks.{l}.hook_resid_pre", keep(l)) for l in range(model.cfg.n_layers)]):
        full = model(tokens, **kv_cache_kwargs(model, cache))
    kv = cached_keys_values(cache)
    for layer in range(model.cfg.n_layers):
        for start in (0, 1, 4, 8):
            with torch.no_grad():
                out = resume(model, tokens, layer=layer, start=start, residual=resid[layer][:, start:],
                             keys_values=[(k[:, :, :start], v[:, :, :start]) for k, v in kv])
            assert out.shape == (2, 9 - start, model.cfg.d_vocab)
            assert (out - full[:, start:]).abs().max() < 1e-4, (layer, start)


def test_resume_refuses_what_it_cannot_do_and_restores_blocks(gpt2, tiny_models):
    from interp.model.resuming import can_resume, resume, skipped_blocks

    assert not can_resume(tiny_models["bert"])  # attends both ways: no position can be skipped
    tokens = torch.randint(5, 25, (1, 6))
    with pytest.raises(ValueError, match="start=6"):
        resume(gpt2, tokens, start=6)
    with pytest.raises(ValueError, match="residual"):
        resume(gpt2, tokens, layer=1)
    with pytest.raises(ValueError, match="keys and values"):
        resume(gpt2, tokens, start=2)
    blocks = list(gpt2.original_model.transformer.h)
    with pytest.raises(RuntimeError, match="boom"), skipped_blocks(gpt2, 1):
        assert gpt2.original_model.transformer.h[0] is not blocks[0]
        raise RuntimeError("boom")
    assert list(gpt2.original_model.transformer.h) == blocks


def test_build_tiny_leaves_the_callers_rng_alone(tmp_path):
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    interp.build_tiny("gpt2", tmp_path / "m", seed=0)
    assert torch.equal(torch.rand(3), want)


def test_zoo_ships_inside_the_package():
    from interp.model import ZOO_DIR

    assert ZOO_DIR == Path(interp.__file__).resolve().parent / "data" / "zoo"
    assert (ZOO_DIR / "lm-gpt2" / "config.json").exists()


def test_user_zoo_is_searched_first(tmp_path, monkeypatch, tiny_dirs):
    """`interp zoo train` writes to $INTERP_CACHE/zoo; zoo:NAME finds it there before the shipped one."""
    import shutil

    from interp import zoo
    from interp.model import ZOO_DIR, user_zoo_dir, zoo_path

    monkeypatch.setenv("INTERP_CACHE", str(tmp_path / "cache"))
    assert user_zoo_dir() == tmp_path / "cache" / "zoo"
    assert resolve("zoo:lm-gpt2") == str(ZOO_DIR / "lm-gpt2")  # nothing trained yet: the shipped one
    shipped = zoo.card("lm-gpt2")
    mine = user_zoo_dir() / "lm-gpt2"
    shutil.copytree(tiny_dirs["gpt2"], mine)
    (mine / "card.json").write_text(json.dumps({**shipped, "task": "mine"}))
    assert zoo_path("lm-gpt2") == mine and resolve("zoo:lm-gpt2") == str(mine)
    assert zoo.card("lm-gpt2")["task"] == "mine"
    listed = {e["name"]: e for e in zoo.entries()}
    assert listed["lm-gpt2"]["zoo"] == "user" and "zoo" not in listed["lm-llama"]
    with pytest.raises(ModelNotFoundError, match="available: .*lm-gpt2"):
        resolve("zoo:no-such-model")


def test_train_writes_to_the_user_zoo_by_default(monkeypatch, tmp_path):
    from interp.zoo import train as train_module

    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    recipe = train_module.RECIPES["markov-s1"]
    card = train_module.train(recipe, steps=1, progress=False, evaluate_after=False)
    assert (tmp_path / "zoo" / "markov-s1" / "config.json").exists() and card["name"] == "markov-s1"
