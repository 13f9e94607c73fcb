"""The runner: many variants side by side equal one forward per variant, on every kind of model."""

import pytest
import torch

from interp import run
from interp.errors import InterpError
from interp.interventions import Mask, Patch, Project, WeightMask


def _pair(model, seed=0, batch=3, pos=7):
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(5, 30, (batch, pos), generator=g)
    clean[:, 0] = 2
    corrupt = clean.clone()
    corrupt[:, 3] = torch.randint(5, 30, (batch,), generator=g)
    return clean, corrupt


def metric(logits):
    return (logits[:, -1, 7] - logits[:, -1, 8]).mean()


def _is_encoder(model) -> bool:
    return "bert" in type(model.original_model).__name__.lower()


def _variants(model, clean, corrupt):
    names = ["blocks.0.attn.hook_z", "blocks.1.hook_resid_pre", "blocks.1.attn.hook_pattern", "blocks.0.hook_mlp_out"]
    _, src = run.cache(model, clean, names)
    d = model.cfg.d_model
    basis = torch.linalg.qr(torch.randn(d, 3, generator=torch.Generator().manual_seed(1)))[0]
    first_param = next(n for n, p in model.named_parameters() if p.ndim == 2 and ".1." in n and ("mlp" in n or "intermediate" in n))
    return [
        [],
        [Patch(names[0], src[names[0]], pos=5, head=1)],
        [Patch(names[1], src[names[1]], pos=3)],
        *([] if _is_encoder(model) else [[Patch(names[2], src[names[2]], pos=6, head=0)]]),  # see below for BERT
        [Patch(names[1], src[names[1]]), Mask.ablate("z", [0, 2], n_heads=model.cfg.n_heads, layer=1)],
        [Project("resid_mid", basis, torch.zeros(d), "core_removed", positions=torch.tensor([6, 4, 5]), layer=1)],
        [Mask("mlp_out", torch.tensor(0.3), layer=0)],
        [WeightMask({first_param: torch.zeros(())})],
        [WeightMask({first_param: torch.zeros(())}), Patch(names[0], src[names[0]], pos=2)],
    ]


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
@pytest.mark.parametrize("size", [1, 4, 64])
def test_evaluate_equals_one_forward_per_variant(tiny_models, family, size):
    model = tiny_models[family]
    clean, corrupt = _pair(model)
    variants = _variants(model, clean, corrupt)
    want = torch.tensor([float(metric(run.logits(model, corrupt, v))) for v in variants])
    got = run.evaluate(model, corrupt, variants, metric, variants_per_forward=size, progress=False)
    assert torch.allclose(got, want, atol=1e-4), (got, want)
    assert len(set(want.tolist())) > 5  # the variants really differ
    both = run.evaluate(model, corrupt, variants, lambda lg: {"m": metric(lg), "top": lg[:, -1].max(-1).values.mean()},
                        variants_per_forward=size, progress=False)
    assert both.shape == (len(variants), 2) and torch.allclose(both[:, 0], want, atol=1e-4)
    # the unembedding at only the positions the metric reads gives the same numbers
    at = torch.tensor([6, 2, 4])
    rows = torch.arange(3)

    def read_at(logits):
        return (logits[rows, at, 7] - logits[rows, at, 8]).mean()

    full = torch.tensor([float(read_at(run.logits(model, corrupt, v))) for v in variants])
    sparse = run.evaluate(model, corrupt, variants, read_at, answer_pos=at, variants_per_forward=size, progress=False)
    assert torch.allclose(sparse, full, atol=1e-4), (sparse, full)
    with pytest.raises(InterpError, match="does the metric read another one"):
        run.evaluate(model, corrupt, variants[1:3], metric, answer_pos=at, progress=False)


@pytest.mark.parametrize("resumable", [True, False])
def test_plan_covers_every_variant_once_from_an_early_enough_start(resumable):
    starts = [(l, p) for l in range(3) for p in range(6) for _ in range(2)] + [(l, 0) for l in range(3)]
    plans = run.plan_forwards(starts, batch=4, n_pos=6, n_layers=3, size=5, resumable=resumable)
    assert sorted(i for _, _, m in plans for i in m) == list(range(len(starts)))
    for layer, start, members in plans:
        assert 1 <= len(members) <= 5
        assert all(layer <= starts[i][0] and start <= starts[i][1] for i in members)
        if not resumable:
            assert (layer, start) == (0, 0)
    if resumable:
        assert any(l > 0 for l, _, _ in plans) and any(s > 0 for _, s, _ in plans)


def test_reference_means_skip_padding(gpt2):
    tokens = torch.tensor([[2, 7, 8, 9], [2, 10, 0, 0]])  # id 0 is [PAD] in the word tokenizer
    name = "blocks.0.hook_resid_pre"
    ref = run.reference(gpt2, [name], "mean", tokens)[name]
    acts = run.cache(gpt2, tokens, [name])[1][name]
    assert torch.allclose(ref.values[1], acts[:, 1].mean(0), atol=1e-6)
    assert torch.allclose(ref.values[2], acts[0, 2], atol=1e-6)  # only the unpadded row counts
    assert ref.like(torch.zeros(1, 6, gpt2.cfg.d_model)).shape == (6, gpt2.cfg.d_model)  # pooled past the width


def test_errors(gpt2):
    clean, corrupt = _pair(gpt2)
    _, src = run.cache(gpt2, clean[:2], ["blocks.0.attn.hook_z"])
    with pytest.raises(InterpError, match="2 rows but the input has 3"):
        run.evaluate(gpt2, corrupt, [[Patch("z", src["blocks.0.attn.hook_z"], layer=0)]], metric)
    with pytest.raises(InterpError, match="scalar"):
        run.evaluate(gpt2, corrupt, [[]], lambda lg: lg[:, -1, 0])
    with pytest.raises(InterpError, match=r"scalar.*\(acc\)"):
        run.evaluate(gpt2, corrupt, [[]], lambda lg: {"ld": metric(lg), "acc": lg[:, -1, 0]})
    with pytest.raises(InterpError, match="variants_per_forward"):
        run.evaluate(gpt2, corrupt, [[]], metric, variants_per_forward=0)


def test_evaluate_edge_starts_pattern_means_and_param_order(gpt2):
    from interp.steering.axes import Axis, Steer

    clean, corrupt = _pair(gpt2)
    names = ["hook_embed", "blocks.1.hook_resid_pre", "blocks.0.attn.hook_pattern"]
    _, src = run.cache(gpt2, clean, names)
    d = gpt2.cfg.d_model
    axis = Axis(torch.nn.functional.normalize(torch.randn(d, generator=torch.Generator().manual_seed(2)), dim=0),
                torch.zeros(d), names[1])
    late = torch.zeros(clean.shape, dtype=torch.bool)
    late[:, 5] = True
    ref = run.reference(gpt2, [names[2]], "mean", clean)[names[2]]  # attention maps: per destination position
    variants = [
        [Patch(names[0], src[names[0]], pos=3)],  # outside the blocks, resumed at position 3
        [Patch(names[1], src[names[1]], pos=-1)],  # counts from the end
        [Patch(names[1], src[names[1]], pos=4)],
        [Steer(axis, "add", 3.0, where=torch.zeros(clean.shape, dtype=torch.bool))],  # steers nothing
        [Steer(axis, "add", 3.0, where=late)],
        [Mask(names[2], torch.zeros(gpt2.cfg.n_heads), ref)],
    ]
    want = torch.tensor([float(metric(run.logits(gpt2, corrupt, v))) for v in variants])
    for size in (1, 64):
        got = run.evaluate(gpt2, corrupt, variants, metric, variants_per_forward=size, progress=False)
        assert torch.allclose(got, want, atol=1e-4), (size, got, want)
    base = float(metric(run.logits(gpt2, corrupt)))
    assert want[3] == base and all(float(w) != base for w in (want[0], want[1], want[2], want[4], want[5]))
    assert torch.allclose(ref.like(src[names[2]][:, :, 4:], 4, axis=2), ref.values[:, 4:])
    before = [n for n, _ in gpt2.named_parameters()]
    param = next(n for n, p in gpt2.named_parameters() if p.ndim == 2 and ".1." in n and "mlp" in n)
    run.logits(gpt2, corrupt, [WeightMask({param: torch.zeros(())})])
    assert [n for n, _ in gpt2.named_parameters()] == before  # the model comes back in its own order


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_cache_and_grad_at_answer_positions_only(tiny_models, family):
    """Logits only at the answer positions: the same numbers there, NaN elsewhere, the same
    activations and the same gradients of a metric that reads them."""
    model = tiny_models[family]
    clean, _ = _pair(model)
    at = torch.tensor([6, 2, 4])
    names = ["blocks.0.hook_resid_pre", "blocks.1.attn.hook_z"]
    full, acts = run.cache(model, clean, names)
    sparse, sparse_acts = run.cache(model, clean, names, answer_pos=at)
    rows = torch.arange(3)
    assert torch.allclose(sparse[rows, at], full[rows, at], atol=1e-5)
    assert torch.isnan(sparse[0, 0]).all() and sparse.shape == full.shape
    assert all(torch.equal(acts[n], sparse_acts[n]) for n in names)

    def read(logits):
        return (logits[rows, at, 7] - logits[rows, at, 8]).mean()

    grads = []
    for pos in (None, at):
        logits, live = run.with_grad(model, clean, names, answer_pos=pos)
        grads.append(torch.autograd.grad(read(logits), [live[n] for n in names]))
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-6) and a.abs().max() > 0


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_observe_streams_what_cache_records_and_leaves_no_hook(family, tiny_models):
    model = tiny_models[family]
    clean, _ = _pair(model)
    names = ["blocks.0.hook_resid_pre", "blocks.1.attn.hook_z"]
    logits, acts = run.cache(model, clean, names)
    seen: dict[str, list] = {}
    with torch.no_grad(), run.observe(model, names, lambda n, a: seen.setdefault(n, []).append(a), logits_at=2):
        first = model(clean)
    assert sorted(seen) == names and all(len(v) == 1 for v in seen.values())
    for n in names:
        assert torch.equal(seen[n][0], acts[n])
    assert first.shape == (clean.shape[0], 1, logits.shape[-1])  # only position 2 was unembedded
    assert torch.allclose(first[:, 0], logits[:, 2], atol=1e-5)
    assert not any(hp.has_hooks() for hp in model.hook_dict.values())
    at = torch.tensor([1, 4, 6][: clean.shape[0]])  # one position per row, as a loss reads the answer
    with torch.no_grad(), run.intervened(model, (), logits_at=at):
        per_row = model(clean)
    assert torch.allclose(per_row[:, 0], logits[torch.arange(clean.shape[0]), at], atol=1e-5)
    with pytest.raises(RuntimeError), run.observe(model, names, lambda n, a: None):
        raise RuntimeError("a failing body")
    assert not any(hp.has_hooks() for hp in model.hook_dict.values())  # removed even on error


def test_an_edit_the_model_would_ignore_is_refused(tiny_models):
    # TL 4.3 runs BERT's attention inside the HF module: an edited pattern would change nothing
    model = tiny_models["bert"]
    clean, _ = _pair(model)
    name = "blocks.1.attn.hook_pattern"
    _, src = run.cache(model, clean, [name])
    with pytest.raises(InterpError, match="an edit at blocks.1.attn.hook_pattern would be ignored"):
        run.logits(model, clean, [Patch(name, torch.zeros_like(src[name]))])
    assert torch.equal(run.logits(model, clean), run.logits(model, clean))  # nothing left behind
    gpt2 = tiny_models["gpt2"]  # where the edit is read, it changes the logits
    _, src = run.cache(gpt2, clean, [name])
    assert not torch.allclose(run.logits(gpt2, clean, [Patch(name, torch.zeros_like(src[name]))]), run.logits(gpt2, clean))
