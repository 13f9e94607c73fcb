"""Features as sites: edits through the one runner keep the error term (a no-op edit changes
nothing), change the site by exactly the decoder's direction, move the logits as the decoder and
the model's gradient predict, run side by side in run.evaluate; top examples and the dashboard."""

from __future__ import annotations

import pytest
import torch

import interp
from interp import run
from interp.views import plot
from interp.errors import InterpError
from interp.features import Dictionary, FeatureEdit, feature_acts, feature_edit, top_examples
from interp.features.dashboard import dashboard_html
from interp.features.sites import TopExamples
from interp.features.train import mlp_sites

LAST = "blocks.3.hook_resid_post"


@pytest.fixture(scope="module")
def zoo():
    return interp.load("zoo:lm-gpt2")


@pytest.fixture(scope="module")
def tokens(zoo):
    from interp.features.corpus import token_rows

    rows, _ = token_rows(zoo, "zoo", max_rows=6, seed=3)
    return rows


def _dictionary(site_in, site_out, d=128, n=64, seed=0):
    """A random dictionary whose features fire often (low thresholds): its reconstruction is poor,
    so its error term is large, which is what the no-op tests need."""
    g = torch.Generator().manual_seed(seed)
    return Dictionary(torch.randn(d, n, generator=g) / d ** 0.5, torch.zeros(n), torch.randn(n, d, generator=g) / 4,
                      torch.zeros(d), site_in, site_out, torch.full((n,), 0.05), model="zoo:lm-gpt2")


SAE = _dictionary(LAST, LAST)
TRANSCODER = _dictionary(*mlp_sites(1), seed=1)


@pytest.mark.parametrize("d", [SAE, TRANSCODER], ids=["sae", "transcoder"])
def test_no_op_edits_change_nothing(zoo, tokens, d):
    clean = run.logits(zoo, tokens)
    f = feature_acts(zoo, tokens, d)
    feats = [int(i) for i in f[0].sum(0).topk(3).indices]  # features that fire
    err = (run.cache(zoo, tokens, [d.site_out])[1][d.site_out] - d(run.cache(zoo, tokens, [d.site_in])[1][d.site_in])).norm()
    assert err > 1.0  # the dictionary misses a lot: without its error term the model would change
    same = [feature_edit(zoo, tokens, d, feats, "patch", f[..., feats]), FeatureEdit(d, feats, "steer", 0.0)]
    for edit in same:
        torch.testing.assert_close(run.logits(zoo, tokens, [edit]), clean, atol=1e-5, rtol=0)
    # control: ablating the same features does change the logits
    assert (run.logits(zoo, tokens, [feature_edit(zoo, tokens, d, feats, "ablate")]) - clean).abs().max() > 1e-3


def test_ablation_moves_the_site_by_the_decoder_direction(zoo, tokens):
    for d in (SAE, TRANSCODER):
        f = feature_acts(zoo, tokens, d)
        i = int(f[:, -1].sum(0).argmax())
        _, before = run.cache(zoo, tokens, [d.site_out])
        edit = feature_edit(zoo, tokens, d, [i], "ablate", positions=[-1])
        _, after = run.cache(zoo, tokens, [d.site_out], [edit])
        moved = after[d.site_out] - before[d.site_out]
        torch.testing.assert_close(moved[:, -1], -f[:, -1, i, None] * d.W_dec[i], atol=1e-5, rtol=1e-4)
        assert moved[:, :-1].abs().max() == 0  # other positions untouched


def test_steering_moves_the_logit_as_the_gradient_predicts(zoo, tokens):
    """d logit / d (feature i) = grad_site(logit) . W_dec[i]: steering by eps moves the logit by eps
    times that (first order; eps small)."""
    eps, i, target = 1e-2, 3, int(tokens[0, 2])
    clean, acts = run.with_grad(zoo, tokens, [LAST])
    grad, = torch.autograd.grad(clean[0, -1, target], acts[LAST])
    predicted = eps * float(grad[0, -1] @ SAE.W_dec[i])
    got = run.logits(zoo, tokens, [FeatureEdit(SAE, [i], "steer", eps, positions=[-1])])[0, -1, target] - clean[0, -1, target].detach()
    assert abs(predicted) > 1e-4
    assert float(got) == pytest.approx(predicted, rel=0.05)


def test_edits_run_side_by_side_in_evaluate(zoo, tokens):
    edits = [[FeatureEdit(SAE, [1, 2], "steer", 2.0)], [feature_edit(zoo, tokens, TRANSCODER, [5], "ablate")], []]
    metric = lambda logits: logits[:, -1, 7].mean()
    together = run.evaluate(zoo, tokens, edits, metric, progress=False)
    alone = torch.stack([metric(run.logits(zoo, tokens, e)) for e in edits])
    torch.testing.assert_close(together, alone, atol=1e-4, rtol=1e-4)


def test_bad_edits_say_what_is_wrong():
    with pytest.raises(InterpError, match="0..63"):
        FeatureEdit(SAE, [64])
    with pytest.raises(InterpError, match="mode"):
        FeatureEdit(SAE, [1], "clamp")
    with pytest.raises(InterpError, match="needs `inputs`"):
        FeatureEdit(TRANSCODER, [1], "ablate")
    for value in (float("nan"), float("inf"), "a lot", torch.tensor([[[float("nan")]]])):  # they turned every logit into NaN
        with pytest.raises(InterpError, match="must be a finite number"):
            FeatureEdit(SAE, [1], "steer", value)


def test_top_examples_refuses_what_it_cannot_index(zoo, tokens):
    """A feature past the dictionary (it was an IndexError), `valid` of another shape (it was
    broadcast silently) and k=0 (an empty result) say what is wrong."""
    with pytest.raises(InterpError, match=r"features \[64\] must be .* in 0..63"):
        top_examples(zoo, tokens, SAE, features=[64])
    with pytest.raises(InterpError, match="valid must be a bool tensor shaped like tokens"):
        top_examples(zoo, tokens, SAE, valid=torch.ones(1, 1, dtype=torch.bool))
    with pytest.raises(InterpError, match="k=0 must be an int >= 1"):
        top_examples(zoo, tokens, SAE, k=0)


def test_top_examples_and_an_escaped_dashboard(zoo, tokens, tmp_path):
    shown = lambda ids: ["<script>alert(1)</script>" if i == int(tokens[0, 1]) else f"w{i}&" for i in ids]
    top = top_examples(zoo, tokens, SAE, features=[0, 5], k=3, token_strings=shown)
    acts = feature_acts(zoo, tokens, SAE)
    assert top.values.shape == (2, 3)
    torch.testing.assert_close(top.values[1, 0], acts[..., 5].max())  # the top example is the maximum
    r, p = int(top.rows[1, 0]), int(top.positions[1, 0])
    assert float(top.context_acts[1, 0, top.center]) == pytest.approx(float(acts[r, p, 5]))
    page = dashboard_html(top)
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&amp;" in page
    assert type(plot.view_of(top)).__name__ == "FeatureDashboard"
    top.save(tmp_path / "top.safetensors")
    back = TopExamples.load(tmp_path / "top.safetensors")
    assert back.contexts == top.contexts and back.values.equal(top.values)
