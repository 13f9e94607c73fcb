"""Generation on the HF model without the bridge (interp.model.native, interp.run.decoder): the same
tokens and projections as the bridge's own loop, the same tokens as HF `generate` at strength 0,
a padded batch the same as one prompt at a time; the bridge runs when the native path cannot."""

from __future__ import annotations

import pytest
import torch

import interp
from interp import run
from interp import steering as st
from interp.errors import InterpError
from interp.interventions import Patch
from interp.model.native import native_site, unwrapped
from interp.run.hf_hooks import natively
from interp.steering import Axis, Steer
from interp.tasks import english

PROMPTS = ["the keys to the cabinet", "my dog", "the man that the women like", "his cats near the old tree"]
FAMILIES = ("gpt2", "llama", "gemma2", "qwen2")


@pytest.fixture(scope="module")
def lms(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    return {f: interp.build_tiny(f, root / f, words=english.WORDS, seed=5, d_model=32, n_layers=2) for f in FAMILIES}


def _axis(site: str, seed: int = 0, d: int = 32) -> Axis:
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(d, generator=g)
    return Axis(v / v.norm(), torch.randn(d, generator=g), site, 0.5, 2.0, {"method": "test"})


def _steers():
    return [Steer(_axis("blocks.1.hook_resid_pre", 1), "flip"), Steer(_axis("blocks.0.hook_resid_post", 2), "add", 3.0)]


@pytest.mark.parametrize("family", FAMILIES)
def test_native_equals_the_bridge_steered_sampled_and_greedy(lms, family):
    model = interp.load(lms[family])
    for kw in (dict(), dict(do_sample=True, temperature=1.3, top_p=0.9, seed=3)):
        a = st.generate(model, PROMPTS, _steers(), max_new_tokens=6, **kw)
        b = st.generate(model, PROMPTS, _steers(), max_new_tokens=6, native=False, **kw)
        assert a.meta["native"] and not b.meta["native"]
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.n_generated, b.n_generated)
        torch.testing.assert_close(a.projections, b.projections, atol=1e-4, rtol=1e-4, equal_nan=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_strength_zero_equals_hf_generate_on_a_padded_batch(lms, family):
    from transformers import AutoModelForCausalLM

    model = interp.load(lms[family])
    hf = AutoModelForCausalLM.from_pretrained(lms[family]).eval()
    tokens, mask, _ = st.encode(model, PROMPTS)
    assert len(set(mask.sum(-1).tolist())) > 1
    ref = hf.generate(input_ids=tokens, attention_mask=mask, max_new_tokens=6, do_sample=False,
                      pad_token_id=model.tokenizer.pad_token_id, eos_token_id=None)
    zero = [Steer(_axis("blocks.1.hook_resid_post", 3), "flip", 0.0)]
    ours = st.generate(model, PROMPTS, zero, max_new_tokens=6, stop_at_eos=False)
    assert ours.meta["native"]
    assert torch.equal(ours.tokens, ref)


@pytest.mark.parametrize("family", ("llama", "gpt2"))
def test_padded_batch_equals_one_prompt_at_a_time(lms, family):
    model = interp.load(lms[family])
    batch = st.generate(model, PROMPTS, _steers(), max_new_tokens=5)
    for i, p in enumerate(PROMPTS):
        one = st.generate(model, [p], _steers(), max_new_tokens=5)
        assert one.completions[0] == batch.completions[i]
        n = int(one.n_generated[0])
        assert n == int(batch.n_generated[i])
        torch.testing.assert_close(one.projections[:, 0, :n], batch.projections[:, i, :n], atol=1e-4, rtol=1e-4)


def test_eos_stops_each_row(lms):
    model = interp.load(lms["llama"])
    eos = model.tokenizer.eos_token_id
    plain = st.generate(model, PROMPTS, (), max_new_tokens=8, stop_at_eos=False)
    width = plain.tokens.shape[1] - 8
    # a row "ends" where a big steer makes it emit EOS: compare with the bridge's loop instead
    axis = Axis(model.W_U[:, eos].detach() / model.W_U[:, eos].norm(), torch.zeros(32), "blocks.1.hook_resid_post")
    steer = Steer(axis, "add", 3.0)
    a = st.generate(model, PROMPTS, steer, max_new_tokens=8)
    b = st.generate(model, PROMPTS, steer, max_new_tokens=8, native=False)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.n_generated, b.n_generated)
    assert (a.tokens[:, width:] == eos).any()
    for i in range(len(PROMPTS)):  # after its EOS a row holds padding and records no projection
        n = int(a.n_generated[i])
        assert torch.isnan(a.projections[0, i, n:]).all() and not torch.isnan(a.projections[0, i, :n]).any()


def test_the_bridge_runs_when_the_native_path_cannot(lms):
    model = interp.load(lms["gpt2"])
    seen = []
    with interp.hooked(model, [("blocks.1.hook_resid_pre", lambda act, hook: seen.append(act.shape))]):
        g = st.generate(model, PROMPTS, (), max_new_tokens=2)
    assert not g.meta["native"] and seen  # a caller's bridge hook still fires
    mid = Steer(_axis("blocks.1.hook_resid_mid", 1), "flip")  # inside a block: no native place
    assert not st.generate(model, PROMPTS, mid, max_new_tokens=2).meta["native"]
    with pytest.raises(InterpError, match="native=True"):
        st.generate(model, PROMPTS, mid, max_new_tokens=2, native=True)
    with pytest.raises(InterpError, match="native=True"):
        st.generate(model, PROMPTS, (), max_new_tokens=2, native=True, use_cache=False)


def test_natively_records_before_and_matches_the_runner(lms):
    model = interp.load(lms["llama"])
    tokens = model.to_tokens(PROMPTS[0])
    source = torch.randn(1, tokens.shape[1], 32)
    patch = [Patch("blocks.1.hook_resid_pre", source)]
    ref_logits, ref_acts = run.cache(model, tokens, ["blocks.1.hook_resid_pre", "blocks.1.hook_resid_post"], patch)
    hf = unwrapped(model)
    with torch.no_grad(), natively(model, hf, patch, record=["blocks.1.hook_resid_pre", "blocks.1.hook_resid_post"]) as seen:
        logits = hf(tokens).logits
    torch.testing.assert_close(logits - logits.mean(-1, keepdim=True), ref_logits - ref_logits.mean(-1, keepdim=True),
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(seen["blocks.1.hook_resid_post"], ref_acts["blocks.1.hook_resid_post"], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(seen["blocks.1.hook_resid_pre"], source)  # recorded before the patch acts
    assert not any(hp.has_hooks() for hp in model.hook_dict.values())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in hf.modules())  # all removed
    assert native_site("blocks.3.hook_resid_post") == (3, "output") and native_site("blocks.3.attn.hook_z") is None


def _pad(model) -> int:  # what steering.encode pads with
    tok = model.tokenizer
    return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id


@pytest.mark.real
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_real_model_strength_zero_equals_hf_generate(name, real_cache):
    from transformers import AutoModelForCausalLM

    model = interp.load(name)
    hf = AutoModelForCausalLM.from_pretrained(interp.model.resolve(name)).eval()
    prompts = ["The capital of France is", "Once upon a time, in a small village by the sea, there lived",
               "def fibonacci(n):"]
    tokens, mask, _ = st.encode(model, prompts)
    ref = hf.generate(input_ids=tokens, attention_mask=mask, max_new_tokens=12, do_sample=False,
                      pad_token_id=_pad(model), eos_token_id=None)
    d = model.cfg.d_model
    zero = Steer(Axis(torch.ones(d) / d ** 0.5, torch.zeros(d), f"blocks.{model.cfg.n_layers // 2}.hook_resid_post"),
                 "flip", 0.0)
    ours = st.generate(model, prompts, zero, max_new_tokens=12, stop_at_eos=False)
    assert ours.meta["native"] and torch.equal(ours.tokens, ref)
    steered = Steer(zero.axis, "add", 8.0)
    batch = st.generate(model, prompts, steered, max_new_tokens=6)
    for i, p in enumerate(prompts):
        assert st.generate(model, [p], steered, max_new_tokens=6).completions[0] == batch.completions[i]


def test_a_native_model_that_computes_something_else_is_not_used():
    # TL 4.3 folds a trained GPT-2's layer norms into weights only its own attention reads: the HF
    # blocks alone give other logits (a tiny untrained model, LN weights 1, cannot show this)
    from interp.run.hf_hooks import native_agrees

    gpt2, llama = interp.load("zoo:lm-gpt2"), interp.load("zoo:lm-llama")
    assert not native_agrees(gpt2) and native_agrees(llama)
    g = st.generate(gpt2, PROMPTS[:2], (), max_new_tokens=6)
    bridge = st.generate(gpt2, PROMPTS[:2], (), max_new_tokens=6, native=False)
    assert not g.meta["native"] and g.completions == bridge.completions
    with pytest.raises(InterpError, match="native=True cannot run here"):
        st.generate(gpt2, PROMPTS[:2], (), max_new_tokens=2, native=True)
