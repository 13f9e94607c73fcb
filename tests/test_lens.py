"""interp.lens: invariants of the logit lens, direct logit attribution, residual decomposition and
head detectors, on the tiny random models and on the zoo's lm-gpt2 with IOI."""

from __future__ import annotations

import pytest
import torch

import interp
from interp import lens, metrics, run
from interp.errors import InterpError
from interp.interventions import Patch
from interp.tasks.base import Task


def random_task(model, n: int = 6, width: int = 9, seed: int = 0) -> Task:
    """Random rows with answer positions that differ by row (exercises per-row gathering)."""
    gen = torch.Generator().manual_seed(seed)
    clean = torch.randint(5, model.cfg.d_vocab, (n, width), generator=gen)
    clean[:, 0] = 2
    answer_pos = torch.randint(3, width, (n,), generator=gen)
    correct = torch.randint(5, model.cfg.d_vocab, (n,), generator=gen)
    incorrect = (correct - 5 + 1) % (model.cfg.d_vocab - 5) + 5
    return Task("random", "test", clean, clean.clone(), correct, incorrect, answer_pos, tuple("x" * n))


@pytest.fixture(scope="module")
def zoo():
    return interp.load("zoo:lm-gpt2")


@pytest.fixture(scope="module")
def ioi():
    return interp.tasks.make("ioi", split="train", n=16)


def actual_logit_diff(model, task) -> float:
    return float(metrics.for_task(task, "logit_diff")(run.logits(model, task.clean)))


# ---------------------------------------------------------------------------------------------
# direct logit attribution and the residual decomposition


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_dla_sums_to_logit_diff_tiny(tiny_models, family):
    model = tiny_models[family]
    task = random_task(model)
    g = lens.direct_logit_attribution(model, task)
    assert g.axes == ("layer", "unit") and g.shape == (model.cfg.n_layers, model.cfg.n_heads + 1)
    assert g.labels[1][-1] == "mlp" and g.meta["chart"] == "heatmap"
    parts = float(g.values.sum()) + sum(g.meta.get(k, 0.0) for k in ("embed", "pos_embed", "bias", "unembed_bias"))
    actual = actual_logit_diff(model, task)
    # folded LayerNorm + the cached final scale: exact up to float32 rounding
    assert parts == pytest.approx(actual, abs=1e-5 + 1e-4 * abs(actual))
    assert g.meta["logit_diff"] == pytest.approx(actual, abs=1e-6)
    assert ("pos_embed" in g.meta) == (family == "gpt2")  # rotary models have no pos_embed


def test_dla_sums_to_logit_diff_zoo_ioi(zoo, ioi):
    g = lens.direct_logit_attribution(zoo, ioi)
    actual = actual_logit_diff(zoo, ioi)
    assert actual > 5  # the zoo model does IOI
    assert g.meta["total"] == pytest.approx(actual, rel=1e-4, abs=1e-4)
    # most of the logit difference is written directly by heads and MLPs, not by the embeddings
    assert float(g.values.sum()) > 0.9 * actual
    top = g.top(3)
    assert top[0][1] > 1.0


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("by", ["layer", "head"])
def test_residual_components_sum_to_resid_post(tiny_models, family, by):
    model = tiny_models[family]
    task = random_task(model, seed=1)
    stack, labels, final = lens.residual_components(model, task.clean, task.answer_pos, by=by)
    assert stack.shape == (len(labels), len(task), model.cfg.d_model)
    _, acts = run.cache(model, task.clean, [f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"])
    resid = lens.at_positions(next(iter(acts.values())), task.answer_pos)
    torch.testing.assert_close(final, resid)
    torch.testing.assert_close(stack.sum(0), resid, atol=1e-5, rtol=1e-4)


def test_residual_decomposition_grid(zoo, ioi):
    g = lens.residual_decomposition(zoo, ioi)
    L = zoo.cfg.n_layers
    assert g.axes == ("unit", "metric") and g.labels[1] == ("projection", "direct_effect", "norm")
    assert g.labels[0] == ("embed", "pos_embed", *[f"{l}_{s}" for l in range(L) for s in ("attn_out", "mlp_out")])
    assert g.meta["residual_error"] < 1e-4
    assert float(g.values[:, 0].sum()) == pytest.approx(g.meta["resid_projection"], rel=1e-4, abs=1e-4)
    # with the final LayerNorm scale the layer components are the direct logit attribution
    dla = lens.direct_logit_attribution(zoo, ioi)
    direct = float(g.values[:, 1].sum()) + dla.meta["unembed_bias"]
    assert direct == pytest.approx(dla.meta["logit_diff"], rel=1e-4, abs=1e-4)
    torch.testing.assert_close(g.values[3::2, 1], dla.values[:, -1], atol=1e-4, rtol=1e-4)  # mlp_out rows


# ---------------------------------------------------------------------------------------------
# logit lens


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_logit_lens_last_layer_is_the_model(tiny_models, family):
    model = tiny_models[family]
    task = random_task(model, seed=2)
    g = lens.logit_lens(model, task)
    L = model.cfg.n_layers
    assert g.axes == ("layer", "quantity") and g.labels[1] == ("value", "std")
    assert g.labels[0][0] == "0_pre" and g.labels[0][1] == "0_mid" and g.labels[0][-1] == "final_post"
    assert g.shape[0] == 2 * L + 1 and g.meta["chart"] == "lines"
    assert float(g.values[-1, 0]) == pytest.approx(actual_logit_diff(model, task), abs=1e-5)
    logits = run.logits(model, task.clean)
    p = lens.logit_lens(model, task, metric="prob")
    assert float(p.values[-1, 0]) == pytest.approx(float(metrics.prob(logits, task.correct, task.answer_pos).mean()), abs=1e-6)
    r = lens.logit_lens(model, task, metric="rank")
    at = metrics.answer_logits(logits, task.answer_pos)
    ranks = (at > at.gather(1, task.correct[:, None])).sum(1).float()
    assert float(r.values[-1, 0]) == pytest.approx(float(ranks.mean()))


def test_logit_lens_zoo_ioi(zoo, ioi):
    g = lens.logit_lens(zoo, ioi)
    assert float(g.values[-1, 0]) == pytest.approx(actual_logit_diff(zoo, ioi), rel=1e-5)
    assert float(g.values[0, 0]) < 1.0 < float(g.values[-1, 0])  # the answer appears in the blocks
    top = lens.lens_top_tokens(zoo, ioi.text[0], k=3)
    assert list(top.columns) == ["layer", "rank", "token", "token_id", "prob", "logit"]
    assert len(top) == 3 * (2 * zoo.cfg.n_layers + 1)
    last = top[top.layer == "final_post"]
    logits = run.logits(zoo, zoo.to_tokens(ioi.text[0]))[0, -1]
    assert int(last.token_id.iloc[0]) == int(logits.argmax())


# ---------------------------------------------------------------------------------------------
# head detectors


def test_detection_targets_match_transformer_lens():
    import transformer_lens.head_detector as hd

    row = torch.tensor([[2, 7, 8, 9, 7, 8, 9, 10]])
    for kind in lens.HEAD_KINDS:
        want = getattr(hd, f"get_{kind}_head_detection_pattern")(row)
        torch.testing.assert_close(lens.detection_target(row, kind)[0], want.float())


def _perfect(target: torch.Tensor, n_heads: int, head: int, base: torch.Tensor) -> torch.Tensor:
    """base pattern with `head` replaced by a head that puts all its mass on the target (its
    first target where there are several; on itself where there is none)."""
    out = base.clone()
    b, n, _ = target.shape
    idx = torch.where(target.sum(-1) > 0, target.argmax(-1), torch.arange(n).expand(b, n))
    out[:, head] = torch.nn.functional.one_hot(idx, n).to(base)
    return out


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_planted_heads_score_one(tiny_models, family):
    model = tiny_models[family]
    tokens = lens.repeated_tokens(model, n=4, length=8, seed=3)
    name = "blocks.1.attn.hook_pattern"
    _, acts = run.cache(model, tokens, [name])
    for kind, head in (("previous_token", 1), ("induction", 2)):
        planted = _perfect(lens.detection_target(tokens, kind), model.cfg.n_heads, head, acts[name])
        g = lens.head_scores(model, tokens, kind, interventions=[Patch(name, planted)])
        assert g.axes == ("layer", "head") and g.shape == (model.cfg.n_layers, model.cfg.n_heads)
        assert float(g.values[1, head]) == pytest.approx(1.0, abs=1e-6)
        others = torch.cat([g.values[0], g.values[1, :head], g.values[1, head + 1:]])
        assert float(others.max()) < 0.9  # random heads are far from perfect


def test_head_scores_match_detect_head(zoo, ioi):
    from transformer_lens.head_detector import detect_head

    prompt = ioi.text[3]
    tokens = zoo.to_tokens(prompt)
    for kind in lens.HEAD_KINDS:
        for excl in (False, True):
            ours = lens.head_scores(zoo, tokens, kind, average="all", exclude_bos=excl, exclude_current_token=excl)
            theirs = detect_head(zoo, prompt, f"{kind}_head", exclude_bos=excl, exclude_current_token=excl)
            torch.testing.assert_close(ours.values, theirs.float(), atol=1e-5, rtol=1e-4)


def test_head_scores_on_zoo(zoo, ioi):
    # IOI rows repeat names: duplicate-token scores exist; padding is left out of the rows
    g = lens.head_scores(zoo, ioi, "duplicate_token")
    assert g.meta["task"] == "ioi" and bool(((g.values >= 0) & (g.values <= 1)).all())
    prev = lens.head_scores(zoo, ioi, "previous_token")
    assert float(prev.values.max()) > float(prev.values.mean())


def test_repeated_tokens_seeded(gpt2):
    a = lens.repeated_tokens(gpt2, n=3, length=5, seed=7)
    assert a.shape == (3, 11) and bool((a[:, 0] == gpt2.tokenizer.bos_token_id).all())
    torch.testing.assert_close(a[:, 1:6], a[:, 6:])
    assert torch.equal(a, lens.repeated_tokens(gpt2, n=3, length=5, seed=7))
    assert not torch.equal(a, lens.repeated_tokens(gpt2, n=3, length=5, seed=8))
    assert not set(a[:, 1:].flatten().tolist()) & set(gpt2.tokenizer.all_special_ids)


# ---------------------------------------------------------------------------------------------
# errors, rendering, saving


def test_bad_input(gpt2):
    task = random_task(gpt2)
    with pytest.raises(InterpError, match="unknown head kind"):
        lens.head_scores(gpt2, None, "copying")
    with pytest.raises(InterpError, match="metric"):
        lens.logit_lens(gpt2, task, metric="kl")
    with pytest.raises(InterpError, match="no examples"):
        lens.direct_logit_attribution(gpt2, task[[]])
    with pytest.raises(InterpError, match="vocabulary"):
        lens.logit_lens(gpt2, Task("t", "s", task.clean + 1000, task.clean + 1000, task.correct, task.incorrect,
                                   task.answer_pos, task.text))
    with pytest.raises(InterpError, match=r"\[batch, pos\]"):
        lens.head_scores(gpt2, torch.tensor([1, 2, 3]), "induction")
    with pytest.raises(InterpError, match="exceeds the context"):
        lens.repeated_tokens(gpt2, length=100)
    with pytest.raises(InterpError, match="one prompt"):
        lens.lens_top_tokens(gpt2, task.clean)
    with pytest.raises(InterpError, match="no destination"):
        lens.head_scores(gpt2, torch.tensor([[2, 5, 6, 7, 8]]), "induction")


def test_render_and_save(gpt2, tmp_path):
    from interp.views import plot
    from interp.results import load

    task = random_task(gpt2)
    grids = [lens.logit_lens(gpt2, task), lens.direct_logit_attribution(gpt2, task),
             lens.residual_decomposition(gpt2, task), lens.head_scores(gpt2, None, "induction", n=2, length=5)]
    for i, g in enumerate(grids):
        assert plot.render(g) is not None
        back = load(g.save(tmp_path / f"g{i}.safetensors"))
        torch.testing.assert_close(back.values, g.values)
        assert back.meta == g.meta
    assert plot.render(lens.lens_top_tokens(gpt2, task.clean[:1], k=2)) is not None
