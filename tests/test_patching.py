import pytest
import torch
from transformer_lens import patching as tlp

import interp
from interp import patching
from interp.errors import InterpError
from interp import run
from interp.hooks import hooks
from interp.metrics import token_ids


def _pair(seed=0, batch=3, pos=7):
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(5, 30, (batch, pos), generator=g)
    clean[:, 0] = 2
    corrupt = clean.clone()
    corrupt[:, 2] = torch.randint(5, 30, (batch,), generator=g)
    corrupt[:, 4] = torch.randint(5, 30, (batch,), generator=g)
    return clean, corrupt


def metric(logits):
    return (logits[:, -1, 7] - logits[:, -1, 8]).mean()


TL_SITES = [
    ("resid_pre", True, tlp.get_act_patch_resid_pre),
    ("resid_mid", True, tlp.get_act_patch_resid_mid),
    ("attn_out", True, tlp.get_act_patch_attn_out),
    ("mlp_out", True, tlp.get_act_patch_mlp_out),
    ("z", True, tlp.get_act_patch_attn_head_out_by_pos),
    ("z", False, tlp.get_act_patch_attn_head_out_all_pos),
    ("q", True, tlp.get_act_patch_attn_head_q_by_pos),
    ("q", False, tlp.get_act_patch_attn_head_q_all_pos),
    ("k", True, tlp.get_act_patch_attn_head_k_by_pos),
    ("k", False, tlp.get_act_patch_attn_head_k_all_pos),
    ("v", True, tlp.get_act_patch_attn_head_v_by_pos),
    ("v", False, tlp.get_act_patch_attn_head_v_all_pos),
    ("pattern", True, tlp.get_act_patch_attn_head_pattern_by_pos),
    ("pattern", False, tlp.get_act_patch_attn_head_pattern_all_pos),
]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("site,by_pos,tl_fn", TL_SITES, ids=[f"{s}-{'pos' if b else 'all'}" for s, b, _ in TL_SITES])
def test_equals_transformer_lens(family, site, by_pos, tl_fn, tiny_models):
    model = tiny_models[family]
    clean, corrupt = _pair()
    _, clean_cache = model.run_with_cache(clean)
    ours = patching.activation_patch(model, clean, corrupt, metric=metric, site=site, by_pos=by_pos, variants_per_forward=5, progress=False)
    theirs = tl_fn(model, corrupt, clean_cache, metric).detach().cpu()
    assert ours.values.shape == theirs.shape
    assert (ours.values - theirs).abs().max() <= 1e-4


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("site,by_pos,tl_fn", TL_SITES, ids=[f"{s}-{'pos' if b else 'all'}" for s, b, _ in TL_SITES])
def test_fine_grained_forwards_equal_transformer_lens(family, site, by_pos, tl_fn, tiny_models, monkeypatch):
    """With no fixed cost per forward, the plan gives nearly every (layer, position) its own forward."""
    monkeypatch.setattr(run.planner, "FORWARD_COST", 0)  # forward_cost reads it there
    model = tiny_models[family]
    clean, corrupt = _pair(3)
    cells = patching.cells(model, site, by_pos, clean.shape[1])[0]
    plans = run.plan_forwards([(c[0], c[1] or 0) for c in cells], 3, clean.shape[1], model.cfg.n_layers, 64, True)
    assert len({(layer, start) for layer, start, _ in plans}) == len({(c[0], c[1] or 0) for c in cells})
    _, clean_cache = model.run_with_cache(clean)
    ours = patching.activation_patch(model, clean, corrupt, metric=metric, site=site, by_pos=by_pos, progress=False)
    theirs = tl_fn(model, corrupt, clean_cache, metric).detach().cpu()
    assert (ours.values - theirs).abs().max() <= 1e-4


@pytest.mark.parametrize("site", ["resid_pre", "resid_mid", "attn_out", "mlp_out", "z", "q", "k", "v", "pattern"])
def test_clean_into_clean_and_corrupt_into_corrupt(site, llama):
    clean, corrupt = _pair(1)
    with torch.no_grad():
        clean_value, corrupt_value = float(metric(llama(clean))), float(metric(llama(corrupt)))
    same = patching.activation_patch(llama, clean, clean, metric=metric, site=site, by_pos=True, progress=False)
    assert torch.allclose(same.values, torch.full_like(same.values, clean_value), atol=1e-5)
    noise = patching.activation_patch(llama, corrupt, corrupt, metric=metric, site=site, direction="noise", progress=False)
    assert torch.allclose(noise.values, torch.full_like(noise.values, corrupt_value), atol=1e-5)
    assert same.meta["clean_metric"] == pytest.approx(clean_value)


def test_noise_is_denoise_with_roles_swapped(gpt2):
    clean, corrupt = _pair(2)
    a = patching.activation_patch(gpt2, clean, corrupt, metric=metric, site="z", direction="noise", progress=False)
    b = patching.activation_patch(gpt2, corrupt, clean, metric=metric, site="z", direction="denoise", progress=False)
    assert torch.allclose(a.values, b.values)


def test_attribution_equals_exact_on_a_linear_model(gpt2):
    """Fixing the final LayerNorm's scale (its hook_scale) makes the logits an affine function of
    the last layer's mlp_out; there attribution patching must equal exact patching."""
    clean, corrupt = _pair(3)
    fixed = [("ln_final.hook_scale", lambda act, *, hook: torch.full_like(act, 0.5))]
    with hooks(gpt2, fixed):
        exact = patching.activation_patch(gpt2, clean, corrupt, metric=metric, site="mlp_out", by_pos=True, progress=False)
        approx = patching.attribution_patch(gpt2, clean, corrupt, metric=metric, site="mlp_out", by_pos=True)
    last = exact.values[-1] - exact.meta["corrupt_metric"]
    assert last[-1].abs() > 1e-5  # the metric reads the last position, so only it moves
    assert torch.allclose(approx.values[-1], last, rtol=1e-3, atol=1e-8)


def test_attribution_tracks_exact_on_a_real_model(gpt2):
    clean, corrupt = _pair(4)
    exact = patching.activation_patch(gpt2, clean, corrupt, metric=metric, site="z", progress=False)
    approx = patching.attribution_patch(gpt2, clean, corrupt, metric=metric, site="z")
    delta = exact.values - exact.meta["corrupt_metric"]
    assert approx.axes == exact.axes
    assert torch.corrcoef(torch.stack([delta.flatten(), approx.values.flatten()]))[0, 1] > 0.9


def test_path_patching_matches_a_hand_written_computation(gpt2):
    clean, corrupt = _pair(5)
    _, cc = gpt2.run_with_cache(clean)
    _, kc = gpt2.run_with_cache(corrupt)
    freeze = [  # plain TL hooks, written out by hand
        ("blocks.0.attn.hook_z", lambda act, *, hook: torch.cat([act[:, :, :1], kc["blocks.0.attn.hook_z"][:, :, 1:2], act[:, :, 2:]], 2)),
        ("blocks.1.attn.hook_z", lambda act, *, hook: cc["blocks.1.attn.hook_z"]),
        ("blocks.0.hook_mlp_out", lambda act, *, hook: cc["blocks.0.hook_mlp_out"]),
        ("blocks.1.hook_mlp_out", lambda act, *, hook: cc["blocks.1.hook_mlp_out"]),
    ]
    seen = {}
    with torch.no_grad():
        with hooks(gpt2, freeze + [("blocks.1.attn.hook_q", lambda act, *, hook: seen.setdefault("q", act.clone()))]):
            direct = float(metric(gpt2(clean)))
        q = seen["q"]
        with hooks(gpt2, [("blocks.1.attn.hook_q", lambda act, *, hook: torch.cat([act[:, :, :2], q[:, :, 2:3], act[:, :, 3:]], 2))]):
            via_q = float(metric(gpt2(clean)))
    to_q = patching.path_patch(gpt2, clean, corrupt, metric=metric, senders=[(0, 1), (0, 3)], receivers=[(1, 2, "q")], progress=False)
    assert to_q.values[0, 1].item() == pytest.approx(via_q, abs=1e-6)
    assert torch.isnan(to_q.values[1]).all() and torch.isnan(to_q.values[0, 0])
    to_logits = patching.path_patch(gpt2, clean, corrupt, metric=metric, progress=False)
    assert to_logits.values[0, 1].item() == pytest.approx(direct, abs=1e-6)


def test_path_patching_handles_gqa(llama):
    clean, corrupt = _pair(6)
    g = patching.path_patch(llama, clean, corrupt, metric=metric, receivers=[(1, 1, "k"), (1, 0, "v"), (1, 3, "q")], progress=False)
    assert g.axes == ("layer", "head") and torch.isfinite(g.values[0]).all()
    with pytest.raises(ValueError, match="kv head 3"):
        patching.path_patch(llama, clean, corrupt, metric=metric, receivers=[(1, 3, "k")])


def test_accepts_tasks(tiny_models):
    model = tiny_models["gpt2"]
    task = interp.Task(
        name="toy", split="test", clean=_pair()[0], corrupt=_pair()[1],
        correct=torch.tensor([7, 7, 7]), incorrect=torch.tensor([8, 8, 8]), answer_pos=torch.tensor([6, 6, 6]),
        text=("a", "b", "c"),
    )
    g = patching.activation_patch(model, task, site="resid_pre", progress=False)
    raw = patching.activation_patch(model, task.clean, task.corrupt, metric=metric, site="resid_pre", progress=False)
    assert torch.allclose(g.values, raw.values) and g.meta["task"] == "toy"
    assert patching.attribution_patch(model, task, site="z").axes == ("layer", "head")


def test_bad_input_errors(gpt2):
    clean, corrupt = _pair()
    with pytest.raises(ValueError, match=r"\(3, 7\).*\(3, 6\)"):
        patching.activation_patch(gpt2, clean, corrupt[:, :6], metric=metric, site="z")
    with pytest.raises(ValueError, match="unknown site 'zz'.*resid_pre"):
        patching.activation_patch(gpt2, clean, corrupt, metric=metric, site="zz")
    with pytest.raises(ValueError, match="scalar"):
        patching.activation_patch(gpt2, clean, corrupt, metric=lambda lg: lg[:, -1, 7], site="z")
    with pytest.raises(ValueError, match="NaN"):
        patching.activation_patch(gpt2, clean, corrupt, metric=lambda lg: lg.sum() * float("nan"), site="z")
    with pytest.raises(ValueError, match="layer 5"):
        patching.path_patch(gpt2, clean, corrupt, metric=metric, senders=[(5, 0)])
    with pytest.raises(ValueError, match="head 9"):
        patching.path_patch(gpt2, clean, corrupt, metric=metric, senders=[(0, 9)])
    with pytest.raises(ValueError, match="'cabinet door' is not a single token"):
        token_ids(gpt2, ["cabinet", "cabinet door"])
    assert token_ids(gpt2, ["cabinet", "mary"]).tolist() == [gpt2.to_single_token("cabinet"), gpt2.to_single_token("mary")]


def test_malformed_senders_receivers_and_metrics_are_refused(gpt2, unchecked):
    clean, corrupt = _pair()
    with pytest.raises(InterpError, match=r"senders must be a list of \(layer, head\) tuples; \(0,\) is not one"):
        patching.path_patch(gpt2, clean, corrupt, metric=metric, senders=[(0,)])
    with pytest.raises(InterpError, match="senders is empty"):  # not a grid of NaN
        patching.path_patch(gpt2, clean, corrupt, metric=metric, senders=[])
    with pytest.raises(InterpError, match="receivers .* got 'logit'"):  # a typo of "logits", not a bare unpack error
        patching.path_patch(gpt2, clean, corrupt, metric=metric, senders=[(0, 0)], receivers="logit")
    with pytest.raises(InterpError, match="receivers .*; 1 is not one"):  # one triple, not a list of them
        patching.path_patch(gpt2, clean, corrupt, metric=metric, senders=[(0, 0)], receivers=(1, 0, "q"))
    with pytest.raises(InterpError, match="does not depend on the logits"):  # not autograd's "does not require grad"
        patching.attribution_patch(gpt2, clean, corrupt, metric=lambda lg: torch.tensor(1.0), site="z")


def test_attribution_equals_transformer_lens_node_scores(gpt2):
    from transformer_lens.tools.analysis import attribution_patching as tl_attr

    clean, corrupt = _pair(7)
    ours = patching.attribution_patch(gpt2, clean, corrupt, metric=metric, site="z")
    theirs = tl_attr.attribution_patch(gpt2, clean, corrupt, metric)
    heads = torch.zeros_like(ours.values)
    for node, score in theirs.node_scores.items():  # TL scores each head per position
        if node.kind == "attn_head_out":
            heads[node.layer, node.head] += score
    assert (heads - ours.values).abs().max() < 1e-6
    assert ours.values.abs().max() > 1e-5


@pytest.mark.parametrize("resumable", [True, False])
def test_plan_forwards_covers_every_cell_once_from_an_early_enough_start(resumable):
    cells = [(l, p, h) for l in range(3) for p in range(6) for h in range(2)] + [(l, None, 0) for l in range(3)]
    plans = run.plan_forwards([(c[0], c[1] or 0) for c in cells], batch=4, n_pos=6, n_layers=3, size=5, resumable=resumable)
    seen = sorted(i for _, _, members in plans for i in members)
    assert seen == list(range(len(cells)))
    for layer, start, members in plans:
        assert 1 <= len(members) <= 5
        for i in members:  # a forward may begin no later than any of its cells
            assert layer <= cells[i][0] and start <= (cells[i][1] or 0)
        if not resumable:
            assert (layer, start) == (0, 0)
    if resumable:  # and it does skip work: some forwards begin past block 0 and past position 0
        assert any(l > 0 for l, _, _ in plans) and any(s > 0 for _, s, _ in plans)


def test_bert_patching_runs_whole_forwards_and_equals_transformer_lens(tiny_models):
    """BERT attends both ways: no forward may skip positions, and the numbers are TL's."""
    from interp.model.resuming import can_resume

    bert = tiny_models["bert"]
    assert not can_resume(bert)
    clean, corrupt = _pair(2)
    cells = patching.cells(bert, "z", True, clean.shape[1])[0]
    plans = run.plan_forwards([(c[0], c[1] or 0) for c in cells], 3, clean.shape[1], bert.cfg.n_layers, 5, can_resume(bert))
    assert all((layer, start) == (0, 0) for layer, start, _ in plans)
    _, clean_cache = bert.run_with_cache(clean)
    ours = patching.activation_patch(bert, clean, corrupt, metric=metric, site="z", by_pos=True, progress=False)
    theirs = tlp.get_act_patch_attn_head_out_by_pos(bert, corrupt, clean_cache, metric).detach().cpu()
    assert (ours.values - theirs).abs().max() <= 1e-4 and ours.values.std() > 0

# ---- units, normalisation, named positions ---------------------------------------------------


def logit_gap(logits):
    return (logits[:, -1, 7] - logits[:, -1, 8]).mean()


def test_every_result_names_its_metric_and_both_baselines(gpt2):
    clean, corrupt = _pair(8)
    with torch.no_grad():
        clean_value, corrupt_value = float(logit_gap(gpt2(clean))), float(logit_gap(gpt2(corrupt)))
    results = [
        patching.activation_patch(gpt2, clean, corrupt, metric=logit_gap, site="z", progress=False),
        patching.attribution_patch(gpt2, clean, corrupt, metric=logit_gap, site="z"),
        patching.path_patch(gpt2, clean, corrupt, metric=logit_gap, progress=False),
    ]
    for g in results:
        assert g.meta["metric"] == "logit_gap" and g.meta["normalized"] is False
        assert g.meta["clean_metric"] == pytest.approx(clean_value, abs=1e-5)
        assert g.meta["corrupt_metric"] == pytest.approx(corrupt_value, abs=1e-5)
    unnamed = patching.activation_patch(gpt2, clean, corrupt, metric=lambda lg: logit_gap(lg), site="resid_pre", progress=False)
    assert unnamed.meta["metric"] == "metric"


def test_normalize_means_zero_at_corrupt_and_one_at_clean(gpt2):
    clean, corrupt = _pair(9)  # rows differ at positions 2 and 4 only
    kw = dict(metric=logit_gap, site="resid_pre", progress=False)
    whole = patching.activation_patch(gpt2, clean, corrupt, normalize=True, **kw)
    assert whole.meta["normalized"] == patching.NORMALIZED
    assert whole.values[0].item() == pytest.approx(1.0, abs=1e-5)  # all of layer 0's input is the clean run
    noise = patching.activation_patch(gpt2, clean, corrupt, normalize=True, direction="noise", **kw)
    assert noise.values[0].item() == pytest.approx(0.0, abs=1e-5)  # ... or all of it the corrupt run
    by_pos = patching.activation_patch(gpt2, clean, corrupt, normalize=True, by_pos=True, **kw)
    assert torch.allclose(by_pos.values[0, [0, 1, 3, 5, 6]], torch.zeros(5, dtype=by_pos.values.dtype), atol=1e-5)
    raw = patching.activation_patch(gpt2, clean, corrupt, by_pos=True, **kw)
    c, k = raw.meta["clean_metric"], raw.meta["corrupt_metric"]
    assert torch.allclose(by_pos.values, (raw.values - k) / (c - k), atol=1e-5)
    attr = patching.attribution_patch(gpt2, clean, corrupt, metric=logit_gap, site="z")
    attr_n = patching.attribution_patch(gpt2, clean, corrupt, metric=logit_gap, site="z", normalize=True)
    assert torch.allclose(attr_n.values, attr.values / (c - k), atol=1e-6)  # a change: divided only
    path = patching.path_patch(gpt2, clean, corrupt, metric=logit_gap, progress=False)
    path_n = patching.path_patch(gpt2, clean, corrupt, metric=logit_gap, progress=False, normalize=True)
    assert torch.allclose(path_n.values, (path.values - k) / (c - k), atol=1e-5)
    with pytest.raises(ValueError, match="finite and different"):
        patching.activation_patch(gpt2, clean, clean, normalize=True, **kw)


@pytest.fixture(scope="module")
def english_gpt2(english_dirs):
    return interp.load(english_dirs["gpt2"])


@pytest.fixture(scope="module")
def mixed_ioi():
    from interp.tasks import english

    return english.ioi(24, seed=3)


def test_misaligned_named_positions_refuse_a_by_index_sweep(english_gpt2, mixed_ioi):
    assert mixed_ioi.aligned_positions() is None
    with pytest.raises(ValueError, match="do not share their named positions.*positions='named'.*positions='mean'"):
        patching.activation_patch(english_gpt2, mixed_ioi, site="resid_pre", by_pos=True, progress=False)
    with pytest.raises(ValueError, match="do not share"):
        patching.attribution_patch(english_gpt2, mixed_ioi, site="z", by_pos=True)
    with pytest.raises(ValueError, match="pass by_pos=True"):
        patching.activation_patch(english_gpt2, mixed_ioi, site="resid_pre", positions="named", progress=False)
    clean, corrupt = _pair()
    with pytest.raises(ValueError, match="needs a Task with named positions"):
        patching.activation_patch(english_gpt2, clean, corrupt, metric=metric, site="resid_pre", by_pos=True, positions="named")
    mean = patching.activation_patch(english_gpt2, mixed_ioi, site="resid_pre", by_pos=True, positions="mean", progress=False)
    assert mean.meta["positions"] == "mean" and mean.shape[1] == mixed_ioi.clean.shape[1]


def test_named_positions_equal_hand_built_patching(english_gpt2, mixed_ioi):
    from interp.metrics import for_task

    model, task = english_gpt2, mixed_ioi
    g = patching.activation_patch(model, task, site="resid_pre", by_pos=True, positions="named", progress=False)
    assert g.axes == ("layer", "pos") and g.labels[1] == ("IO", "S1", "S2", "END") and g.meta["positions"] == "named"
    _, cc = model.run_with_cache(task.clean)
    rows, where, score = torch.arange(len(task)), task.positions["S2"], for_task(task)
    for layer in range(model.cfg.n_layers):
        name = f"blocks.{layer}.hook_resid_pre"

        def put(act, *, hook, name=name):
            act = act.clone()
            act[rows, where] = cc[name][rows, where]
            return act

        with torch.no_grad(), hooks(model, [(name, put)]):
            want = float(score(model(task.corrupt)))
        assert g.sel(layer=layer, pos="S2").item() == pytest.approx(want, abs=1e-5)
    z = patching.activation_patch(model, task, site="z", by_pos=True, positions="named", progress=False)
    assert z.axes == ("layer", "pos", "head") and z.labels[1] == ("IO", "S1", "S2", "END")
    pattern = patching.activation_patch(model, task, site="pattern", by_pos=True, positions="named", progress=False)
    assert pattern.axes == ("layer", "head", "dest") and pattern.labels[2] == ("IO", "S1", "S2", "END")


def test_aligned_rows_label_positions_and_named_equals_by_index(english_gpt2, mixed_ioi):
    first = mixed_ioi.positions
    same = [i for i in range(len(mixed_ioi)) if all(int(v[i]) == int(v[0]) for v in first.values())
            and int((mixed_ioi.clean[i] != 0).sum()) == int((mixed_ioi.clean[0] != 0).sum())]
    assert len(same) >= 2
    task = mixed_ioi[same]
    at = task.aligned_positions()
    assert at is not None and set(at) == {"IO", "S1", "S2", "END"}
    for site in ("resid_pre", "z"):
        by_index = patching.activation_patch(english_gpt2, task, site=site, by_pos=True, progress=False)
        named = patching.activation_patch(english_gpt2, task, site=site, by_pos=True, positions="named", progress=False)
        for key, index in at.items():
            assert by_index.labels[1][index] == key  # ticks carry the names
            assert torch.allclose(by_index.sel(pos=key).values, named.sel(pos=key).values, atol=1e-5)
        attr_index = patching.attribution_patch(english_gpt2, task, site=site, by_pos=True)
        attr_named = patching.attribution_patch(english_gpt2, task, site=site, by_pos=True, positions="named")
        for key in at:
            assert torch.allclose(attr_index.sel(pos=key).values, attr_named.sel(pos=key).values, atol=1e-6)
    pattern_index = patching.attribution_patch(english_gpt2, task, site="pattern", by_pos=True)
    pattern_named = patching.attribution_patch(english_gpt2, task, site="pattern", by_pos=True, positions="named")
    assert torch.allclose(pattern_index.sel(dest="S2").values, pattern_named.sel(dest="S2").values, atol=1e-6)


@pytest.mark.parametrize("site, by_pos, positions", [("z", False, None), ("resid_pre", True, "mean"),
                                                      ("z", True, "named"), ("pattern", False, None)])
def test_attribution_in_chunks_equals_one_batch(english_gpt2, mixed_ioi, site, by_pos, positions):
    whole = patching.attribution_patch(english_gpt2, mixed_ioi, site=site, by_pos=by_pos, positions=positions)
    parts = patching.attribution_patch(english_gpt2, mixed_ioi, site=site, by_pos=by_pos, positions=positions, batch_size=5)
    assert parts.shape == whole.shape and parts.labels == whole.labels
    assert torch.allclose(parts.values, whole.values, atol=1e-5 * (1 + float(whole.values.abs().max())))
    for key in ("clean_metric", "corrupt_metric"):
        assert parts.meta[key] == pytest.approx(whole.meta[key], abs=1e-5)
    assert parts.meta["peak_memory"]["bytes"] > 0


def test_attribution_chunks_need_a_tasks_own_metric(english_gpt2, mixed_ioi):
    clean, corrupt = _pair()
    with pytest.raises(ValueError, match="batch_size splits a Task's rows"):
        patching.attribution_patch(english_gpt2, clean, corrupt, metric=metric, site="z", batch_size=2)
    with pytest.raises(ValueError, match="must be an int >= 1"):
        patching.attribution_patch(english_gpt2, mixed_ioi, site="z", batch_size=0)
