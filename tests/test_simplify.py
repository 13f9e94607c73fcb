"""Attention simplifiers: invariants (full rank reproduces, k-means reproduces fitted vectors,
one-hot keeps the argmax), simplifiers as interventions run by interp.run, save/load through
interp.results, clear errors, result shapes and charts."""

from __future__ import annotations

import json

import pytest
import torch

import interp
from interp import results, run
from interp import simplify as S
from interp.errors import InterpError
from interp.simplify.core import qk_site
from interp.studies import illusions
from interp.tasks import dyck


@pytest.fixture(scope="module")
def dyck_dir(tmp_path_factory):
    return interp.build_tiny("gpt2", tmp_path_factory.mktemp("dyck") / "m", words=dyck.words(20), n_layers=2, d_model=32, n_heads=1, d_mlp=64)


@pytest.fixture(scope="module")
def dyck_model(dyck_dir):
    return interp.load(dyck_dir)


@pytest.fixture(scope="module")
def fit():
    return S.dyck_rows(24, split="train", seed=0)


@pytest.fixture(scope="module")
def splits():
    return {s: S.dyck_rows(16, split=s, seed=1) for s in illusions.DYCK_SPLITS}


def _value(grid, metric, quantity="value"):
    return grid.values[:, S.METRICS.index(metric), S.QUANTITIES.index(quantity)]


def _no_hooks(model):
    return all(not hp._forward_hooks and not hp.fwd_hooks for hp in model.hook_dict.values())


# --- the hook sites ---------------------------------------------------------------------------


def test_scores_are_formed_from_hooked_q_and_k(gpt2):
    tokens = gpt2.to_tokens("the cat sees the dog .")
    base, cache = gpt2.run_with_cache(tokens)
    q, k = cache["blocks.1.attn.hook_q"], cache["blocks.1.attn.hook_k"]
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / gpt2.cfg.d_head**0.5
    causal = torch.ones(scores.shape[-1], scores.shape[-1]).tril().bool()
    torch.testing.assert_close(scores[..., causal], cache["blocks.1.attn.hook_attn_scores"][..., causal])
    with interp.hooked(gpt2, [("blocks.1.attn.hook_q", lambda a, hook: a.clone())]):
        same = gpt2(tokens)
    assert torch.equal(same, base)  # replacing q by itself is exact
    with interp.hooked(gpt2, [("blocks.1.attn.hook_q", lambda a, hook: a * 0)]):
        _, zero = gpt2.run_with_cache(tokens)
    uniform = torch.ones(len(causal), len(causal)).tril() / torch.arange(1, len(causal) + 1)[:, None]
    torch.testing.assert_close(zero["blocks.1.attn.hook_pattern"][0, 0], uniform)


def test_rotary_models_simplify_the_rotated_vectors(llama):
    assert qk_site(llama, 0, "q") == "blocks.0.attn.hook_rot_q"
    assert qk_site(llama, 0, "k") == "blocks.0.attn.hook_rot_k"


# --- SVD --------------------------------------------------------------------------------------


@pytest.mark.parametrize("basis", ["separate", "shared"])
def test_full_rank_svd_without_centering_reproduces_attention(dyck_model, fit, splits, basis):
    s = S.svd(dyck_model, (1, 0), fit, rank=dyck_model.cfg.d_head, basis=basis, center=False)
    grid = S.faithfulness(dyck_model, s, splits, n_boot=50)
    assert grid.axes == ("split", "metric", "quantity")
    assert grid.labels[0] == illusions.DYCK_SPLITS
    assert torch.all(_value(grid, "same_prediction") == 1.0)
    assert torch.all(_value(grid, "js") < 1e-6)
    torch.testing.assert_close(_value(grid, "accuracy_simplified"), _value(grid, "accuracy_original"))


def test_full_rank_svd_on_gqa_heads_reproduces_attention(llama):
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(5, llama.cfg.d_vocab, (16, 10), generator=gen)
    targets = torch.randint(5, llama.cfg.d_vocab, (16, 10), generator=gen)
    task = S.Rows(tokens, targets, torch.full((16,), 10), {"split": "random"})
    heads = [(0, 0), (0, 1), (1, 3)]  # heads 0 and 1 share kv head 0 in this GQA model
    s = S.svd(llama, heads, task, rank=llama.cfg.d_head, basis="shared", center=True)
    assert s.kv_heads == ((0, 0), (1, 1))
    assert s.sites == ("blocks.0.attn.hook_rot_q", "blocks.1.attn.hook_rot_q", "blocks.0.attn.hook_rot_k", "blocks.1.attn.hook_rot_k")
    grid = S.faithfulness(llama, s, [task], n_boot=20)
    assert float(_value(grid, "same_prediction")[0]) == 1.0
    assert float(_value(grid, "js")[0]) < 1e-5


def test_projection_is_identity_at_full_rank_and_idempotent():
    x = torch.randn(50, 8)
    v, sv, mean = S.svd_basis(x, center=True)
    torch.testing.assert_close(S.project(x, v, mean), x, atol=1e-5, rtol=1e-5)
    once = S.project(x, v[:, :3], mean)
    torch.testing.assert_close(S.project(once, v[:, :3], mean), once, atol=1e-5, rtol=1e-5)
    assert torch.all(sv[:-1] >= sv[1:])
    v_few, sv_few, _ = S.svd_basis(x[:3], center=False)  # fewer vectors than dimensions
    assert v_few.shape == (8, 8) and torch.allclose(v_few.T @ v_few, torch.eye(8), atol=1e-5)


def test_low_rank_svd_changes_attention(dyck_model, fit, splits):
    grid = S.faithfulness(dyck_model, S.svd(dyck_model, (1, 0), fit, rank=1), splits, n_boot=20)
    assert torch.all(_value(grid, "js") > 0)


# --- k-means ----------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [5, 7])
def test_kmeans_with_enough_clusters_reproduces_fitted_vectors(k):
    distinct = torch.randn(5, 8)
    x = distinct[torch.arange(40) % 5]
    c = S.kmeans_centroids(x, k, seed=0)
    assert c.shape == (k, 8)
    torch.testing.assert_close(S.nearest(x, c), x)


def test_kmeans_with_k_equal_to_fitted_vectors_reproduces_attention(dyck_model):
    row = S.dyck_rows(1, split="seen_struct", seed=4)
    n = int(row.lengths[0])
    s = S.kmeans(dyck_model, (1, 0), row, k=n, seed=0)
    assert s.meta["n_vectors"] == n and s.q_centroids.shape == (1, n, dyck_model.cfg.d_head)
    grid = S.faithfulness(dyck_model, s, {"fitted": row}, n_boot=20)
    assert float(_value(grid, "same_prediction")[0]) == 1.0
    assert float(_value(grid, "js")[0]) < 1e-6


def test_nearest_breaks_ties_towards_the_first_centroid():
    c = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    assert torch.equal(S.nearest(torch.zeros(3, 2), c), c[[0, 0, 0]])


# --- one-hot ----------------------------------------------------------------------------------


def _patterns(model, tokens, extra=()):
    with interp.hooked(model, list(extra)):
        _, cache = model.run_with_cache(tokens)
    return cache


@pytest.mark.parametrize("heads", [[(0, 1)], [(1, 0), (1, 2)]])
def test_onehot_preserves_each_rows_argmax(gpt2, heads):
    tokens = gpt2.to_tokens("the keys to the cabinet are on the table .")
    orig = _patterns(gpt2, tokens)
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(gpt2.cfg.n_layers)]
    _, simp = run.cache(gpt2, tokens, names, [S.onehot(gpt2, heads)])
    for layer, head in heads:
        scores = orig[f"blocks.{layer}.attn.hook_attn_scores"][0, head]
        pattern = simp[f"blocks.{layer}.attn.hook_pattern"][0, head]
        assert torch.equal(pattern.argmax(-1), scores.argmax(-1))
        assert torch.equal(pattern, torch.nn.functional.one_hot(scores.argmax(-1), pattern.shape[-1]).float())
    # an unsimplified head of a simplified layer keeps its soft attention
    layer = heads[0][0]
    torch.testing.assert_close(simp[f"blocks.{layer}.attn.hook_pattern"][0, 3], orig[f"blocks.{layer}.attn.hook_pattern"][0, 3])


def test_head_lists_are_checked_not_coerced(unchecked):
    from interp.simplify.simplifiers import OneHotSimplifier

    assert OneHotSimplifier(heads=[(0, torch.tensor(1))]).heads == ((0, 1),)  # 0-d tensors are ints
    with pytest.raises(InterpError, match="pairs of ints"):
        OneHotSimplifier(heads=[(0, 1.5)])  # int() would have truncated it to head 1
    with pytest.raises(InterpError, match="got 'all'"):
        OneHotSimplifier(heads="all")
    with pytest.raises(InterpError, match=r"\(0,\) is not one"):
        OneHotSimplifier(heads=[(0,)])


def test_onehot_is_the_identity_on_an_already_one_hot_head(dyck_model):
    tokens = S.dyck_rows(4, split="seen_struct", seed=2).tokens
    def to_self(scores, hook):  # each row attends to its own position only
        return scores + 1e4 * torch.eye(scores.shape[-1])

    sharpen = [("blocks.1.attn.hook_attn_scores", to_self)]
    cache = _patterns(dyck_model, tokens, sharpen)
    pattern = cache["blocks.1.attn.hook_pattern"]
    assert torch.all((pattern == 0) | (pattern == 1))  # the head is already one-hot
    with interp.hooked(dyck_model, sharpen):
        base = dyck_model(tokens)
    with interp.hooked(dyck_model, sharpen):
        again = run.logits(dyck_model, tokens, [S.onehot(dyck_model, (1, 0))])
    assert torch.equal(again, base)


def test_onehot_ties_go_to_the_first_source():
    scores = torch.tensor([[0.5, 2.0, 2.0, float("-inf")], [1.0, 1.0, 1.0, 1.0]])
    assert torch.equal(S.onehot_scores(scores).softmax(-1), torch.tensor([[0.0, 1, 0, 0], [1.0, 0, 0, 0]]))


def test_js_divergence_bounds():
    p = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    torch.testing.assert_close(S.js_divergence(p, p), torch.zeros(2))
    torch.testing.assert_close(S.js_divergence(p[:1], torch.tensor([[0.0, 1.0]])), torch.ones(1))


# --- simplifiers as interventions, save/load ---------------------------------------------------


def test_simplifiers_are_interventions_whose_hooks_are_removed_even_on_error(dyck_model, fit):
    from interp.interventions import Intervention

    tokens = fit.tokens[:2]
    base = dyck_model(tokens)
    s = S.kmeans(dyck_model, (1, 0), fit, k=3)
    assert isinstance(s, Intervention) and s.sites == ("blocks.1.attn.hook_q", "blocks.1.attn.hook_k") and s.first_pos == 0
    with run.intervened(dyck_model, [s]):
        assert not torch.equal(dyck_model(tokens), base)
    assert _no_hooks(dyck_model)
    with pytest.raises(RuntimeError, match="boom"):
        with run.intervened(dyck_model, [S.onehot(dyck_model, (1, 0))]):
            raise RuntimeError("boom")
    assert _no_hooks(dyck_model)
    assert torch.equal(dyck_model(tokens), base)


def test_simplifiers_run_side_by_side_in_one_batched_forward(dyck_model, fit):
    tokens = fit.tokens[:4]
    made = [S.svd(dyck_model, (1, 0), fit, rank=2), S.kmeans(dyck_model, (1, 0), fit, k=4), S.onehot(dyck_model, (1, 0))]
    metric = lambda logits: logits[:, -1].logsumexp(-1).mean()  # noqa: E731
    together = run.evaluate(dyck_model, tokens, [[s] for s in made] + [[]], metric, progress=False)
    one_by_one = torch.stack([metric(run.logits(dyck_model, tokens, [s])) for s in made] + [metric(dyck_model(tokens))])
    torch.testing.assert_close(together, one_by_one.float(), atol=1e-4, rtol=1e-4)


def test_simplifiers_and_sweeps_save_load_through_interp_results(dyck_model, fit, splits, tmp_path):
    tokens = fit.tokens[:3]
    made = [
        S.svd(dyck_model, (1, 0), fit, rank=2, basis="shared"),
        S.kmeans(dyck_model, [(0, 0), (1, 0)], fit, k=4, seed=1),
        S.onehot(dyck_model, (1, 0)),
    ]
    assert made[0].meta["split"] == "train" and made[0].meta["rows"] == 24
    assert made[1].meta["n_vectors"] == int(fit.lengths.sum())
    for i, s in enumerate(made):
        back = results.load(results.save(s, tmp_path / f"{i}.safetensors"))
        assert type(back) is type(s) and back.heads == s.heads and back.meta == s.meta and back.sites == s.sites
        assert torch.equal(run.logits(dyck_model, tokens, [back]), run.logits(dyck_model, tokens, [s]))
    sweep = S.rank_sweep(dyck_model, (1, 0), fit, splits, ranks=[1, 32], n_boot=10, progress=False)
    back = results.load(results.save(sweep, tmp_path / "sweep.safetensors"))
    assert type(back) is S.Sweep and back.grid.labels == sweep.grid.labels and back.meta == sweep.meta
    assert torch.equal(back.values.nan_to_num(-1), sweep.values.nan_to_num(-1))
    view = S.compare_attention(dyck_model, made[2], fit.tokens[0, : int(fit.lengths[0])], (1, 0))
    back = results.load(results.save(view, tmp_path / "view.safetensors"))
    assert back.tokens == view.tokens and back.names == view.names and torch.equal(back.patterns, view.patterns)


def test_a_simplifier_refuses_a_model_it_does_not_fit(dyck_model, gpt2, fit):
    s = S.svd(dyck_model, (1, 0), fit, rank=2)
    with pytest.raises(InterpError, match="d_head"):
        run.logits(gpt2, gpt2.to_tokens("the cat"), [s])
    assert _no_hooks(gpt2)


# --- errors -----------------------------------------------------------------------------------


def test_bad_inputs_get_clear_errors(dyck_model, fit):
    d_head = dyck_model.cfg.d_head
    for rank in (0, d_head + 1):
        with pytest.raises(ValueError, match=f"rank={rank}.*1..d_head={d_head}"):
            S.svd(dyck_model, (1, 0), fit, rank=rank)
    n = int(fit.lengths.sum())
    for k in (0, n + 1):
        with pytest.raises(ValueError, match=f"k={k}"):
            S.kmeans(dyck_model, (1, 0), fit, k=k)
    with pytest.raises(InterpError, match="layer 2 is out of range"):
        S.onehot(dyck_model, (2, 0))
    with pytest.raises(InterpError, match="head 1 is out of range"):
        S.svd(dyck_model, [(1, 1)], fit, rank=1)
    unscored = torch.full_like(fit.targets[:2], S.IGNORE)
    empty = S.Rows(fit.tokens[:2], unscored, torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="at or after its row's length"):
        S.Rows(fit.tokens[:2], fit.targets[:2], torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="fit data is empty"):
        S.svd(dyck_model, (1, 0), empty, rank=1)
    with pytest.raises(ValueError, match="fit data is empty"):
        S.kmeans(dyck_model, (1, 0), empty, k=1)
    with pytest.raises(ValueError, match="basis"):
        S.svd(dyck_model, (1, 0), fit, rank=1, basis="joint")
    with pytest.raises(ValueError, match="no heads"):
        S.onehot(dyck_model, [])
    with pytest.raises(ValueError, match="no scored positions"):
        S.faithfulness(dyck_model, S.onehot(dyck_model, (1, 0)), {"x": S.Rows(fit.tokens[:2], unscored, fit.lengths[:2])})
    one = S.dyck_rows(1, split="train")
    with pytest.raises(ValueError, match=rf"k=99 is out of range: choose 1..{int(one.lengths[0])}"):
        S.k_sweep(dyck_model, (1, 0), one, {"a": fit}, ks=[99])


# --- faithfulness statistics and sweeps -------------------------------------------------------


def test_faithfulness_reports_intervals_and_paired_gap_tests(dyck_model, fit, splits):
    grid = S.faithfulness(dyck_model, S.onehot(dyck_model, (1, 0)), splits, reference="seen_struct", n_boot=100)
    assert grid.labels[1] == S.METRICS and grid.labels[2] == S.QUANTITIES
    v = grid.values
    lo, val, hi = (v[:, :, S.QUANTITIES.index(q)] for q in ("ci_low", "value", "ci_high"))
    keep = ~torch.isnan(lo)
    assert torch.all(lo[keep] <= val[keep] + 1e-6) and torch.all(val[keep] <= hi[keep] + 1e-6)
    torch.testing.assert_close(_value(grid, "delta"), _value(grid, "accuracy_simplified") - _value(grid, "accuracy_original"))
    gaps = _value(grid, "delta_gap")
    assert float(gaps[0]) == 0.0 and torch.isnan(_value(grid, "delta_gap", "p_value")[0])
    p = _value(grid, "delta_gap", "p_value")[1:]
    assert torch.all((p > 0) & (p <= 1))
    assert set(grid.to_dataframe().columns) == {"split", "metric", "quantity", "value"}
    json.dumps(grid.meta)


def test_rank_and_k_sweeps(dyck_model, fit, splits, tmp_path):
    sweep = S.rank_sweep(dyck_model, (1, 0), fit, splits, ranks=[1, 32], center=False, n_boot=20, progress=False)
    assert sweep.grid.axes == ("rank", "split", "metric", "quantity") and sweep.grid.shape[:2] == (2, 3)
    same = sweep.metric("same_prediction")
    assert same.axes == ("rank", "split") and torch.all(same.values[1] == 1.0)
    frame = sweep.to_dataframe()
    assert {"rank", "split", "metric", "value", "ci_low", "ci_high", "p_value"} <= set(frame.columns) and len(frame) == 2 * 3 * len(S.METRICS)
    ks = S.k_sweep(dyck_model, (1, 0), fit, splits, ks=[2, 8], n_boot=20, progress=False)
    assert ks.grid.axes[0] == "k" and ks.grid.labels[0] == (2, 8)
    with pytest.raises(ValueError, match="rank=33"):
        S.rank_sweep(dyck_model, (1, 0), fit, splits, ranks=[33])


def test_tasks_are_scored_at_their_answer_position(dyck_model):
    task = interp.tasks.make("dyck", split="unseen_depth", n=8, seed=0)
    rows = S.Rows.of(task)
    assert int((rows.targets != S.IGNORE).sum()) == 8 and torch.equal(rows.lengths, task.answer_pos + 1)
    grid = S.faithfulness(dyck_model, S.onehot(dyck_model, (1, 0)), [task], n_boot=20)
    acc = float(interp.metrics.accuracy(dyck_model(task.clean), task.correct, task.answer_pos).mean())
    assert grid.labels[0] == ("unseen_depth",) and float(_value(grid, "accuracy_original")[0]) == pytest.approx(acc)


def test_renderers_draw_sweeps_and_attention_comparisons(dyck_model, fit, splits):
    from interp.views import plot

    sweep = S.rank_sweep(dyck_model, (1, 0), fit, splits, ranks=[1, 2], n_boot=10, progress=False)
    chart = sweep.to_grid()
    assert chart.meta["chart"] == "lines" and chart.meta["log_x"] and chart.axes == ("rank", "split", "metric", "quantity")
    assert chart.labels[1] == (*illusions.DYCK_SPLITS, *(f"{s} original" for s in illusions.DYCK_SPLITS))
    assert chart.labels[2] == ("accuracy", "same prediction", "attention JS (bits)")
    assert torch.equal(chart.values[:, 3:, 0, 0], sweep.metric("accuracy_original").values)  # the original's line
    assert torch.isnan(chart.values[:, 3:, 1:]).all()  # ... drawn in the accuracy panel only
    assert len(plot.render(sweep).data) == 6 * 3  # (3 splits + 3 originals' lines) x 3 panels
    view = S.compare_attention(dyck_model, S.onehot(dyck_model, (1, 0)), fit.tokens[0, : int(fit.lengths[0])], (1, 0))
    assert view.patterns.shape[0] == 2 and view.names[0] == "original"
    grid = view.to_grid()
    assert grid.axes == ("method", "dest", "src") and grid.labels[0] == view.names and len(set(grid.labels[1])) == len(view.tokens)
    plot.render(view)
    plot.attention(view.patterns, view.tokens, head_names=view.names)


@pytest.mark.slow
def test_repro_is_json_serialisable(dyck_dir, tmp_path):
    out = illusions.repro(progress=False, models=[str(dyck_dir)], overrides={"fit": 8, "rows": 8, "boot": 10, "ks": [8]},
                          units=tmp_path)
    text = json.loads(json.dumps(out))["models"][str(dyck_dir)]
    assert set(text["findings"]) == {"unseen_struct", "unseen_depth", "unseen_depth_deep"}
    assert set(text) >= {"original", "simplified", "training"}
    assert set(text["original"]) == {*illusions.DYCK_SPLITS, "unseen_depth_deep"}
    methods = {(r["method"], r["rank"], r["k"]) for r in text["simplified"]}
    assert ("svd", 4, None) in methods and ("onehot", None, None) in methods and ("kmeans", None, 8) in methods


@pytest.mark.slow
def test_demo_section(tmp_path):
    items = illusions.demo_section(tmp_path)
    assert any(isinstance(i, S.Sweep) for i in items) and any(isinstance(i, S.AttentionComparison) for i in items)
