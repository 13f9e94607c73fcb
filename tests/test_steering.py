"""interp.steering: tables of invariants for the pure functions, the generator, the runner protocol,
the CLI, and the SVA study (interp.studies.steering)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest
import torch

import interp
from interp import results, run
from interp import steering as st
from interp.errors import InterpError
from interp.steering import Axis, Steer
from interp.studies import steering as study
from interp.tasks import english

PROMPTS = ["the keys to the cabinet", "my dog", "the man that the women like", "his cats near the old tree"]
FAMILIES = ("gpt2", "llama", "gemma2", "qwen2")


@pytest.fixture(scope="module")
def lms(tmp_path_factory):
    """Small random models over the English vocabulary, one per decoder family (GQA on llama/qwen2)."""
    root = tmp_path_factory.mktemp("steer")
    return {f: interp.load(interp.build_tiny(f, root / f, words=english.WORDS, seed=3, d_model=32, n_layers=2))
            for f in FAMILIES}


def _axis(d: int = 32, site: str = "blocks.1.hook_resid_pre", seed: int = 0) -> Axis:
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(d, generator=g)
    return Axis(v / v.norm(), torch.randn(d, generator=g), site, 0.5, 2.0, {"method": "test"})


# --- pure functions -----------------------------------------------------------------------------


def test_flip_twice_is_identity_and_strength_zero_changes_nothing():
    axis, h = _axis(), torch.randn(3, 5, 32)
    flip = Steer(axis, "flip")
    torch.testing.assert_close(st.apply(st.apply(h, flip), flip), h, atol=1e-5, rtol=0)
    torch.testing.assert_close(st.projection(st.apply(h, flip), axis), -st.projection(h, axis), atol=1e-5, rtol=0)
    for mode in ("add", "flip", "project_out"):
        assert torch.equal(st.apply(h, Steer(axis, mode, 0.0)), h)


def test_modes_move_only_the_projection():
    axis, h = _axis(), torch.randn(7, 32)
    out = st.apply(h, Steer(axis, "project_out"))
    torch.testing.assert_close(st.projection(out, axis), torch.zeros(7), atol=1e-5, rtol=0)
    out = st.apply(h, Steer(axis, "set", 1.5))
    torch.testing.assert_close(st.projection(out, axis), torch.full((7,), 0.5 + 1.5 * 2.0), atol=1e-5, rtol=0)
    out = st.apply(h, Steer(axis, "add", 3.0))
    torch.testing.assert_close(st.projection(out, axis) - st.projection(h, axis), torch.full((7,), 3.0), atol=1e-5, rtol=0)
    for mode, s in (("flip", 1.0), ("project_out", 1.0), ("set", -1.0), ("add", 2.0)):
        moved = st.apply(h, Steer(axis, mode, s)) - h  # every change lies along u
        torch.testing.assert_close(moved - (moved @ axis.direction)[:, None] * axis.direction, torch.zeros_like(h), atol=1e-5, rtol=0)


def test_null_axis_is_identity_in_every_mode():
    null = st.axis_from_vector(torch.zeros(32), site="resid_pre", layer=1, proj_mean=0.0, proj_std=1.0)
    h = torch.randn(2, 3, 32)
    for mode in ("add", "flip", "project_out", "set"):
        assert torch.equal(st.apply(h, Steer(null, mode, 5.0)), h)


def test_axis_save_load_roundtrip(tmp_path):
    axis = _axis()
    back = Axis.load(axis.save(tmp_path / "a.safetensors"))
    assert torch.equal(back.direction, axis.direction) and torch.equal(back.mean, axis.mean)
    assert (back.site, back.proj_mean, back.proj_std, back.meta) == (axis.site, axis.proj_mean, axis.proj_std, axis.meta)
    interp.Grid(torch.zeros(2), ("strength",)).save(tmp_path / "g.safetensors")
    with pytest.raises(InterpError, match="holds a Grid, not a Axis"):
        Axis.load(tmp_path / "g.safetensors")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(InterpError, match="interp result file"):
        Axis.load(tmp_path / "x.json")


def test_axis_and_generation_roundtrip_through_results(tmp_path, lms):
    axis = st.axis_from_vector(torch.randn(32), site="resid_post", layer=0, meta={"note": "x"})
    back = results.load(results.save(axis, tmp_path / "axis.safetensors"))
    assert isinstance(back, Axis) and torch.equal(back.direction, axis.direction) and torch.equal(back.mean, axis.mean)
    assert (back.site, back.layer, back.meta) == ("blocks.0.hook_resid_post", 0, axis.meta)
    assert math.isnan(back.proj_mean) and math.isnan(back.proj_std)
    gen = st.generate(lms["gpt2"], PROMPTS[:2], Steer(_axis(), "flip"), max_new_tokens=3, stop_at_eos=False)
    again = results.load(results.save(gen, tmp_path / "gen.safetensors"))
    assert isinstance(again, st.Generation) and again.prompts == gen.prompts and again.completions == gen.completions
    assert torch.equal(again.tokens, gen.tokens) and torch.equal(again.n_generated, gen.n_generated)
    torch.testing.assert_close(again.projections, gen.projections, equal_nan=True)
    assert again.meta == gen.meta
    plain = st.generate(lms["gpt2"], PROMPTS[:1], (), max_new_tokens=2)
    assert results.load(results.save(plain, tmp_path / "plain.safetensors")).projections is None


def test_axis_and_intervention_validation():
    with pytest.raises(InterpError, match="norm"):
        Axis(torch.ones(4), torch.zeros(4), "blocks.0.hook_resid_pre")
    with pytest.raises((ValueError, TypeError)):  # jaxtyping's TypeCheckError in tests, InterpError otherwise
        Axis(torch.tensor([1.0, 0.0]), torch.zeros(3), "x")
    assert Axis(torch.tensor([1.0, 0.0]), torch.zeros(2), "resid_pre", layer=2).site == "blocks.2.hook_resid_pre"
    assert Axis(torch.tensor([1.0, 0.0]), torch.zeros(2), "blocks.2.hook_resid_pre").layer == 2
    with pytest.raises(InterpError, match="layer"):  # an int alone is no longer a site
        Axis(torch.tensor([1.0, 0.0]), torch.zeros(2), "resid_pre")
    with pytest.raises(InterpError, match="in layer 2"):
        Axis(torch.tensor([1.0, 0.0]), torch.zeros(2), "blocks.2.hook_resid_pre", layer=1)
    with pytest.raises(InterpError, match="finite"):
        Steer(_axis(), "add", float("nan"))
    with pytest.raises(InterpError, match="mode"):
        Steer(_axis(), "rotate")
    with pytest.raises(InterpError, match="natural std"):
        Steer(st.axis_from_vector(torch.ones(4), site="resid_pre", layer=0), "set", 1.0)
    with pytest.raises(InterpError, match="where"):
        Steer(_axis(), "flip", 1.0, torch.ones(2, 3))


def test_reading_activations_of_no_prompts_is_refused(lms):
    with pytest.raises(InterpError, match="no prompts given"):
        st.last_activations(lms["gpt2"], [], site="resid_pre", layer=0)


@dataclass(frozen=True)
class _Core:  # stands in for interp.cores.Core
    basis: torch.Tensor
    mean: torch.Tensor
    site: str
    method: str = "pca"


def test_axis_from_core():
    q, _ = torch.linalg.qr(torch.randn(32, 2))
    axis = st.axis_from_core(_Core(q[:, :1], torch.ones(32), "blocks.1.hook_resid_post"))
    torch.testing.assert_close(axis.direction, q[:, 0])
    assert axis.site == "blocks.1.hook_resid_post" and axis.meta["method"] == "core:pca"
    with pytest.raises(InterpError, match="1-D core"):
        st.axis_from_core(_Core(q, torch.ones(32), "blocks.1.hook_resid_post"))


def test_judge_continuation():
    j = study.judge_continuation("the keys to the cabinet", "are red . [EOS]")
    assert j["agree"] and not j["flipped"] and j["terminated"] and j["pairs"] == [("keys", "are", True)]
    j = study.judge_continuation("the key that the men like", "are red .")
    assert j["flipped"] and j["pairs"] == [("key", "are", False)]  # the prompt's own RC verb is not counted
    j = study.judge_continuation("the key", "gave a drink")
    assert not j["agree"] and not j["flipped"] and not j["terminated"]


# --- the generator ------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_cache_matches_no_cache_under_steering(lms, family):
    model = lms[family]
    ivs = [Steer(_axis(seed=1), "flip"), Steer(_axis(site="blocks.0.hook_resid_post", seed=2), "add", 4.0)]
    a = st.generate(model, PROMPTS, ivs, max_new_tokens=6, stop_at_eos=False)
    b = st.generate(model, PROMPTS, ivs, max_new_tokens=6, stop_at_eos=False, use_cache=False)
    assert torch.equal(a.tokens, b.tokens)
    torch.testing.assert_close(a.projections, b.projections, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_batch_of_mixed_lengths_matches_one_at_a_time(lms, family):
    model = lms[family]
    ivs = [Steer(_axis(seed=4), "flip")]
    batch = st.generate(model, PROMPTS, ivs, max_new_tokens=5, stop_at_eos=False)
    assert len(set(batch.prompt_len.tolist())) > 1
    for i, p in enumerate(PROMPTS):
        one = st.generate(model, [p], ivs, max_new_tokens=5, stop_at_eos=False)
        assert one.completions[0] == batch.completions[i]
        torch.testing.assert_close(one.projections[0, 0], batch.projections[0, i], atol=1e-4, rtol=1e-4)


def test_strength_zero_and_zero_vector_change_nothing(lms):
    model = lms["llama"]
    plain = st.generate(model, PROMPTS, (), max_new_tokens=6)
    zero_vec = st.axis_from_vector(torch.zeros(32), site="resid_pre", layer=1)
    for ivs in ([Steer(_axis(), m, 0.0) for m in ("add", "flip", "project_out")],
                [Steer(zero_vec, "add", 10.0)]):
        assert torch.equal(st.generate(model, PROMPTS, ivs, max_new_tokens=6).tokens, plain.tokens)
    assert plain.projections is None


def test_unsteered_greedy_matches_plain_transformer_lens(lms):
    """Parity: our loop (with its KV cache) against the bridge's own uncached greedy generate."""
    for family in ("gpt2", "llama"):
        model = lms[family]
        tokens = model.to_tokens(PROMPTS[0])
        ref = model.generate(tokens, max_new_tokens=6, do_sample=False, verbose=False,
                             use_past_kv_cache=False, stop_at_eos=False)
        ours = st.generate(model, PROMPTS[0], (), max_new_tokens=6, stop_at_eos=False)
        assert torch.equal(ours.tokens, ref.cpu())


def test_hooks_see_only_new_positions_with_the_cache(lms):
    model = lms["gpt2"]
    shapes = []
    with interp.hooked(model, [("blocks.1.hook_resid_pre", lambda act, hook: shapes.append(tuple(act.shape)))]):
        st.generate(model, PROMPTS, Steer(_axis(), "flip"), max_new_tokens=3, stop_at_eos=False)
    width = model.to_tokens(PROMPTS[3]).shape[1]
    assert shapes == [(4, width, 32), (4, 1, 32), (4, 1, 32)]


def test_positions_generated_leaves_the_first_token_unsteered(lms):
    model = lms["gpt2"]
    plain = st.generate(model, PROMPTS, (), max_new_tokens=4, stop_at_eos=False)
    big = Steer(_axis(), "add", 50.0)
    gen = st.generate(model, PROMPTS, big, max_new_tokens=4, stop_at_eos=False, positions="generated")
    width = plain.tokens.shape[1] - 4
    assert torch.equal(gen.tokens[:, width], plain.tokens[:, width])
    prompt_only = st.generate(model, PROMPTS, big, max_new_tokens=4, stop_at_eos=False, positions="prompt")
    assert gen.projections.shape == prompt_only.projections.shape == (1, 4, 4)


def test_seeded_sampling_is_reproducible(lms):
    model = lms["qwen2"]
    kw = dict(max_new_tokens=8, do_sample=True, temperature=1.5, top_p=0.95, stop_at_eos=False)
    iv = Steer(_axis(), "flip")
    a, b = (st.generate(model, PROMPTS, iv, seed=7, **kw) for _ in range(2))
    assert torch.equal(a.tokens, b.tokens)
    c = st.generate(model, PROMPTS, iv, seed=8, **kw)
    assert not torch.equal(a.tokens, c.tokens)


def test_bad_input_errors(lms):
    model = lms["gpt2"]
    with pytest.raises(InterpError, match="d_model=32"):
        st.generate(model, PROMPTS, Steer(_axis(d=16), "flip"), max_new_tokens=2)
    with pytest.raises(InterpError, match="nearest valid names"):
        st.generate(model, PROMPTS, Steer(_axis(site="blocks.1.hook_resid_pree"), "flip"), max_new_tokens=2)
    with pytest.raises(InterpError, match="residual-stream"):
        st.generate(model, PROMPTS, Steer(_axis(site="blocks.1.attn.hook_z"), "flip"), max_new_tokens=2)
    with pytest.raises(InterpError, match="finite"):
        st.generate(model, PROMPTS, Steer(_axis(), "add", math.nan), max_new_tokens=2)
    for bad in (0, -1):
        with pytest.raises(InterpError, match="max_new_tokens"):
            st.generate(model, PROMPTS, (), max_new_tokens=bad)
    with pytest.raises(InterpError, match="positions"):
        st.generate(model, PROMPTS, (), max_new_tokens=2, positions="middle")
    with pytest.raises((InterpError, TypeError)):  # jaxtyping's TypeCheckError in tests, InterpError otherwise
        st.generate(model, PROMPTS, [object()], max_new_tokens=2)
    with pytest.raises(InterpError, match="where"):
        st.generate(model, PROMPTS, Steer(_axis(), "flip", 1.0, torch.ones(4, 9, dtype=torch.bool)), max_new_tokens=2)


# --- axes from the model, curves, rendering, CLI ----------------------------------------------------


def test_contrast_axis_flip_maps_one_class_mean_onto_the_other(lms):
    model = lms["llama"]
    sg, pl = study.sva_contrast(64, set(), seed=0)
    axis = st.axis_from_contrast(model, sg, pl, site="resid_pre", layer=1)
    assert axis.meta["method"] == "diff_means" and axis.meta["n_positive"] == len(sg)
    assert axis.meta["positive_mean"] == pytest.approx(-axis.meta["negative_mean"], abs=1e-3)
    assert axis.meta["positive_mean"] == pytest.approx(axis.meta["separation"] / 2, rel=1e-4)
    with pytest.raises(InterpError, match="nearest valid names"):
        st.axis_from_contrast(model, sg, pl, site="blocks.9.hook_resid_pre")
    with pytest.raises(InterpError, match="layer"):  # a short name needs its layer
        st.axis_from_contrast(model, sg, pl, site="resid_pre")
    with pytest.raises((InterpError, TypeError)):  # an int alone is no longer a site (TypeCheckError in tests)
        st.axis_from_contrast(model, sg, pl, site=1)


def test_curve_strength_zero_is_the_clean_metric(lms):
    model = lms["gpt2"]
    task = english.sva(16, seed=0)
    grid = st.curve(model, task, _axis(), [0.0, 1.0], mode="flip", progress=False)
    assert grid.axes == ("strength", "metric") and grid.labels[1] == ("logit_diff", "accuracy")
    with torch.no_grad():
        logits = model(task.clean)
    clean = interp.metrics.logit_diff(logits, task.correct, task.incorrect, task.answer_pos).mean()
    assert float(grid.values[0, 0]) == pytest.approx(float(clean), abs=1e-4)


def test_curve_batched_equals_one_forward_per_strength(lms):
    """curve runs the strengths side by side through run.evaluate; each equals its own forward."""
    task = english.sva(12, seed=1)
    strengths = [0.0, 0.5, 1.0, 2.0]
    for family in ("gpt2", "llama"):
        model = lms[family]
        for mode in ("flip", "add"):
            grid = st.curve(model, task, _axis(seed=5), strengths, mode=mode, progress=False)
            where = torch.arange(task.clean.shape[1])[None] <= task.answer_pos[:, None]
            for k, s in enumerate(strengths):
                with torch.no_grad(), run.intervened(model, [Steer(_axis(seed=5), mode, s, where)]):
                    logits = model(task.clean)
                diff = interp.metrics.logit_diff(logits, task.correct, task.incorrect, task.answer_pos)
                assert float(grid.values[k, 0]) == pytest.approx(float(diff.mean()), abs=1e-4)
                assert float(grid.values[k, 1]) == pytest.approx(float((diff > 0).float().mean()), abs=1e-6)


def test_steer_on_the_protocol(lms):
    """Steer is an interp.interventions.Intervention: strength 0 is the identity under the runner,
    `where` limits the change to its positions (absolute, sliced with `start`)."""
    from interp.interventions import Intervention as Protocol

    model = lms["gpt2"]
    tokens = model.to_tokens(PROMPTS[0])
    assert isinstance(Steer(_axis(), "flip"), Protocol)
    base = run.logits(model, tokens)
    for mode in ("add", "flip", "project_out"):
        assert torch.equal(run.logits(model, tokens, [Steer(_axis(), mode, 0.0)]), base)
    site = "blocks.1.hook_resid_pre"
    where = torch.zeros(1, tokens.shape[1], dtype=torch.bool)
    where[0, 2:] = True
    _, plain = run.cache(model, tokens, [site])
    _, steered = run.cache(model, tokens, [site], [Steer(_axis(), "add", 3.0, where)])
    assert torch.equal(steered[site][:, :2], plain[site][:, :2])
    torch.testing.assert_close(steered[site][:, 2:], plain[site][:, 2:] + 3.0 * _axis().direction, atol=1e-5, rtol=0)
    assert Steer(_axis(), "add", 3.0, where).first_pos == 2
    act = plain[site][:, 3:]  # a forward that starts at position 3
    out = Steer(_axis(), "add", 3.0, where)(act, site=site, start=3)
    torch.testing.assert_close(out, act + 3.0 * _axis().direction, atol=1e-5, rtol=0)
    with pytest.raises(InterpError, match="do not cover"):
        Steer(_axis(), "add", 3.0, where)(plain[site], site=site, start=1)


def test_recorded_projection_is_read_before_the_steer_acts(lms):
    """The projection recorded at step 0 is that of the unsteered activation (a capture, not a side
    effect of the steer); a second steer at the same site reads the activation after the first."""
    model = lms["llama"]
    axis = _axis(seed=6)
    gen = st.generate(model, PROMPTS, [Steer(axis, "flip"), Steer(axis, "flip", 0.5)], max_new_tokens=3, stop_at_eos=False)
    before = st.projection(st.last_activations(model, PROMPTS, site=axis.site), axis)  # unsteered
    torch.testing.assert_close(gen.projections[0, :, 0], before, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(gen.projections[1, :, 0], -before, atol=1e-4, rtol=1e-4)


def test_render_results(lms, tmp_path):
    from interp.views import plot

    model = lms["gpt2"]
    comp = study.compare(model, PROMPTS[:2], Steer(_axis(), "flip"), max_new_tokens=3)
    assert len(comp.steered_tags) == 2
    table = comp.to_dataframe()
    assert list(table.columns) == ["prompt", "unsteered", "steered"] and len(table) == 2
    assert "<" not in "".join(table.to_numpy().ravel())  # no raw HTML in results
    assert plot.render(table).data
    tagged = study.Comparison(("the keys",), ("are red",), ("is red",), (("agree", ""),), (("flip", ""),)).to_dataframe()
    assert tagged.loc[0, "unsteered"] == "are[agree] red" and tagged.loc[0, "steered"] == "is[flip] red"
    back = results.load(results.save(comp, tmp_path / "comp.safetensors"))
    assert back.steered_tags == comp.steered_tags and back.prompts == comp.prompts
    gen = st.generate(model, PROMPTS[:2], Steer(_axis(), "flip"), max_new_tokens=3)
    grid = gen.to_grid()
    assert grid.axes == ("step", "batch", "unit") and grid.meta["chart"] == "lines" and grid.labels[1] == tuple(PROMPTS[:2])
    assert len(plot.render(gen).data) == 2


def test_cli_steer(lms, tmp_path, capsys):
    from interp.cli import main

    model_dir = interp.build_tiny("gpt2", tmp_path / "m", words=english.WORDS, seed=3, d_model=32, n_layers=2)
    path = _axis().save(tmp_path / "axis.safetensors")
    assert main(["steer", "--model", str(model_dir), "--axis", str(path), "--mode", "flip",
                 "--max-new-tokens", "3", "--json", "the keys", "my dog"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["prompt"] for r in out["rows"]] == ["the keys", "my dog"] and out["mode"] == "flip"
    assert main(["steer", "--model", str(model_dir), "--axis", str(tmp_path / "m" / "config.json"), "x"]) == 2


def test_core_axis_is_the_ace_core(lms):
    from interp import cores

    axis = study.core_axis(lms["gpt2"], "blocks.1.hook_resid_pre", set())
    task = english.sva(256, split="sva_id", seed=11)
    core = cores.extract(lms["gpt2"], task, site="blocks.1.hook_resid_pre", k=1, method="ace")
    torch.testing.assert_close(axis.direction, core.basis[:, 0] / core.basis[:, 0].norm())
    assert axis.meta["method"] == "core:ace" and float(axis.direction.norm()) == pytest.approx(1.0, abs=1e-5)


def test_last_token_activations_match_run_with_cache(lms):
    model = lms["qwen2"]
    for site in ("blocks.0.hook_resid_pre", "blocks.1.hook_resid_post"):
        got = st.last_activations(model, PROMPTS, site=site)  # one left-padded batch, stopped early
        want = torch.stack([model.run_with_cache(model.to_tokens(p))[1][site][0, -1] for p in PROMPTS])
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_dev_prefixes_are_disjoint_from_the_held_out_ones():
    held = english.prefixes(128, seed=0)
    dev = study.dev_prefixes(held, 128, seed=3)
    assert len(dev) == 128 and not set(dev) & set(held)
    same_draws = english.prefixes(10, seed=3)  # held-out prefixes that the dev draw would repeat
    dev = study.dev_prefixes(same_draws, 20, seed=3)
    assert len(dev) == 20 and not set(dev) & set(same_draws)
