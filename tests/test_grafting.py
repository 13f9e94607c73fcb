"""interp.grafting: ground truth on a tiny model (zero delta, bit-for-bit restore, one-layer
informative scores, finite differences, fine-tuning lowers ranks, resume), and bad input."""

from __future__ import annotations

import pytest
import torch

import interp
from interp import grafting, run
from interp.grafting import delta as delta_ops, facts as fact_ops
from interp.errors import InterpError
from interp.grafting.scores import _option_loss
from interp.interventions import Patch

PEOPLE = ("alice", "bob", "carol", "dave")
CITIES = ("paris", "rome", "oslo", "cairo")
LANGS = ("french", "italian", "norwegian", "arabic")
WORDS = PEOPLE + CITIES + LANGS + ("lives", "in", "the", "people", "city", "speak")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = interp.build_tiny("llama", tmp_path_factory.mktemp("grafting") / "llama", words=WORDS, seed=0, n_layers=2)
    return interp.load(path)


@pytest.fixture(scope="module")
def facts():
    return grafting.Facts("facts", "{} lives in", PEOPLE, CITIES, CITIES)


@pytest.fixture(scope="module")
def implications():
    return grafting.Facts("implications", "the people in the city {} lives in speak", PEOPLE, LANGS, LANGS)


@pytest.fixture(scope="module")
def delta(tiny, facts):
    return grafting.finetune(tiny, facts, epochs=30, lr=3e-3, progress=False)


def _loss(model, batch, interventions=()):
    return float(_option_loss(run.logits(model, batch.tokens, interventions), batch).mean())


def test_finetuning_lowers_the_rank_of_a_fact(tiny, facts, delta):
    before = grafting.mean_rank(tiny, facts)
    after = grafting.mean_rank(tiny, facts, [delta.intervention(tiny)])
    assert before > 0.5 and after == 0.0
    assert delta.provenance["losses"][-1] < delta.provenance["losses"][0]


def test_zero_delta_changes_nothing_and_apply_restores_bit_for_bit(tiny, facts, delta):
    tokens = grafting.encode(tiny, facts).tokens
    state = {n: (p, p.detach().clone()) for n, p in tiny.named_parameters()}
    base = run.logits(tiny, tokens)
    zero = grafting.Delta.zeros(tiny, grafting.parameters(tiny))
    assert torch.equal(run.logits(tiny, tokens, [zero.intervention(tiny)]), base)
    assert not torch.equal(run.logits(tiny, tokens, [delta.intervention(tiny)]), base)
    after = dict(tiny.named_parameters())
    for name, (param, value) in state.items():
        assert after[name] is param and torch.equal(param, value) and param.grad is None
    assert torch.equal(run.logits(tiny, tokens), base)


def test_delta_algebra_and_file_round_trip(tiny, delta, tmp_path):
    half = delta * 0.5
    for name, t in ((half + half) - delta).deltas.items():
        assert torch.allclose(t, torch.zeros_like(t), atol=1e-7), name
    one = delta.restrict(layers=[1], components=["mlp"])
    assert one.deltas and all(delta_ops.layer_of(n) == 1 and delta_ops.component_of(n) == "mlp" for n in one.deltas)
    back = grafting.Delta.load(delta.save(tmp_path / "d.safetensors"))
    assert back.model == delta.model and back.provenance["lr"] == delta.provenance["lr"]
    assert all(torch.equal(back.deltas[n], t) for n, t in delta.deltas.items())


def test_batched_informative_scores_equal_one_backward_per_component_and_finite_differences(tiny, delta, implications):
    batched = grafting.informative_by_component(tiny, delta, implications)
    assert torch.allclose(batched, grafting.per_component_backward(tiny, delta, implications), atol=1e-6)
    batch = grafting.encode(tiny, implications)
    eps = 1e-3
    for layer in range(2):
        for comp, value in (("mlp", batched[layer, 0]), ("attn", batched[layer, 1:].sum())):
            part = delta.restrict(layers=[layer], components=[comp])
            fd = -(_loss(tiny, batch, [part.intervention(tiny, eps)]) - _loss(tiny, batch, [part.intervention(tiny, -eps)])) / (2 * eps)
            assert abs(fd - float(value)) < 1e-3 * max(1.0, abs(fd)), (layer, comp, fd, float(value))


def test_informative_score_of_a_one_layer_delta_is_zero_elsewhere(tiny, delta, implications):
    scores = grafting.extractive_scores(tiny, delta.restrict(layers=[1], components=["attn"]), implications)
    info = scores.informative
    assert info.axes == ("layer", "unit", "pos") and info.labels[1][0] == "mlp"
    assert info.values[0].abs().max() == 0 and info.values[1, 0].abs().max() == 0  # layer 0; layer 1's MLP
    assert info.values[1, 1:].abs().max() > 0
    # strict downstream: only a component after the change sees changed inputs (layer 1's MLP)
    down = scores.downstream.values
    assert down[0].abs().max() == 0 and down[1, 1:].abs().max() == 0 and down[1, 0].abs().max() > 0


def _site_out(model, tokens, site, interventions=()):
    return run.cache(model, tokens, [site], interventions)[1][site]


def test_downstream_and_upstream_scores_match_finite_differences(tiny, delta, implications):
    batch = grafting.encode(tiny, implications)
    scores = grafting.extractive_scores(tiny, delta, implications)
    cf = grafting.encode(tiny, grafting.Facts("cf", implications.template, PEOPLE[1:] + PEOPLE[:1], LANGS[1:] + LANGS[:1], LANGS))
    iv = delta.intervention(tiny)
    eps = 1e-3
    for layer, comp, site, head in ((1, "mlp", "blocks.1.hook_mlp_out", None), (1, "attn", "blocks.1.attn.hook_z", 2)):
        unit = "mlp" if head is None else f"head {head}"
        # n: the component's base weights on the inputs of the fine-tuned model (its own delta removed)
        own = delta.restrict(layers=[layer], components=[comp])
        o = _site_out(tiny, batch.tokens, site)
        n = _site_out(tiny, batch.tokens, site, [(delta - own).intervention(tiny)])
        fd = -(_loss(tiny, batch, [Patch(site, o + eps * (n - o), head=head)])
               - _loss(tiny, batch, [Patch(site, o - eps * (n - o), head=head)])) / (2 * eps)
        got = float(scores.downstream.sel(layer=layer, unit=unit).sum())
        assert abs(fd - got) < 1e-3 * max(1.0, abs(fd)), ("downstream", unit, fd, got)
        # upstream: d/de of the loss when o moves toward the counterfactual output, new minus old
        o_cf = _site_out(tiny, cf.tokens, site)
        new = _site_out(tiny, batch.tokens, site, [iv])
        d_old = (_loss(tiny, batch, [Patch(site, o + eps * (o_cf - o), head=head)])
                 - _loss(tiny, batch, [Patch(site, o - eps * (o_cf - o), head=head)])) / (2 * eps)
        d_new = (_loss(tiny, batch, [iv, Patch(site, new + eps * (o_cf - o), head=head)])
                 - _loss(tiny, batch, [iv, Patch(site, new - eps * (o_cf - o), head=head)])) / (2 * eps)
        got = float(scores.upstream.sel(layer=layer, unit=unit).sum())
        assert abs((d_new - d_old) - got) < 1e-3 * max(1.0, abs(got)), ("upstream", unit, d_new - d_old, got)


def test_upstream_over_several_counterfactual_people_is_the_mean_of_each(tiny, delta, implications):
    rot = lambda k: grafting.Facts(f"cf{k}", implications.template, PEOPLE[k:] + PEOPLE[:k], LANGS[k:] + LANGS[:k], LANGS)  # noqa: E731
    each = [grafting.extractive_scores(tiny, delta, implications, counterfactual=rot(k)) for k in (1, 2, 3)]
    both = grafting.extractive_scores(tiny, delta, implications, counterfactuals=3)
    mean = sum(s.upstream.values for s in each) / 3
    assert torch.allclose(both.upstream.values, mean, atol=1e-5) and both.upstream.meta["counterfactuals"] == 3
    assert torch.allclose(both.informative.values, each[0].informative.values)  # only the upstream score reads them
    assert not torch.allclose(each[0].upstream.values, each[1].upstream.values)
    with pytest.raises(InterpError, match="counterfactual people"):
        grafting.extractive_scores(tiny, delta, implications, counterfactuals=len(PEOPLE))


def test_invented_relation_and_word_model_vocabulary(tmp_path):
    model = interp.load(interp.build_tiny("llama", tmp_path / "words", words=fact_ops.vocabulary(), seed=0, n_layers=1))
    facts, impl = grafting.first_hop(model, 4, relation="dax")
    assert facts.template == fact_ops.RELATIONS["dax"][0] and impl.answers[0] in impl.options
    assert grafting.encode(model, impl).tokens.ne(1).all()  # no [UNK]: every word is in the vocabulary
    with pytest.raises(InterpError, match="relation"):
        grafting.first_hop(model, 4, relation="zong")


def test_scores_render_and_save(tiny, delta, implications, tmp_path):
    from interp.views import plot

    scores = grafting.extractive_scores(tiny, delta, implications)
    heat = scores.heatmap("informative", "mlp")
    fig = plot.render(heat)
    # the drawn heatmap carries the grid's numbers (rows: layers, columns: positions)
    assert fig.data[0].type == "heatmap"
    assert torch.allclose(torch.tensor(fig.data[0].z, dtype=torch.float32).flatten(), heat.values.float().flatten(), atol=1e-6)
    assert plot.render(scores).data  # the whole result draws through its to_grid()
    back = grafting.ExtractiveScores.load(scores.save(tmp_path / "s.safetensors"))
    assert torch.equal(back.upstream.values, scores.upstream.values)


def test_a_killed_finetune_resumes_from_its_checkpoint(tiny, facts, tmp_path, monkeypatch):
    import interp.grafting.delta as delta_module

    whole = grafting.finetune(tiny, facts, epochs=4, lr=3e-3, batch_size=2, progress=False)
    real, calls = delta_module._loss, {"n": 0}

    def dies(*a, **k):
        calls["n"] += 1
        if calls["n"] > 5:  # two batches per epoch: dies in epoch 3, after 2 checkpointed epochs
            raise KeyboardInterrupt
        return real(*a, **k)

    path = tmp_path / "run.safetensors"
    monkeypatch.setattr(delta_module, "_loss", dies)
    with pytest.raises(KeyboardInterrupt):
        grafting.finetune(tiny, facts, epochs=4, lr=3e-3, batch_size=2, progress=False, checkpoint=path)
    assert grafting.Delta.load(path).provenance["epochs_done"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["run.safetensors"]  # nothing half-written beside it
    monkeypatch.setattr(delta_module, "_loss", real)
    resumed = grafting.finetune(tiny, facts, epochs=4, lr=3e-3, batch_size=2, progress=False, checkpoint=path)
    assert all(torch.allclose(resumed.deltas[n], t, atol=1e-6) for n, t in whole.deltas.items())
    assert resumed.provenance["losses"] == pytest.approx(whole.provenance["losses"], abs=1e-6)


def test_bad_input(tiny, facts, delta, tmp_path):
    with pytest.raises(InterpError, match="empty"):
        grafting.Facts("none", "{} lives in", (), (), CITIES)
    with pytest.raises(InterpError, match="at least one Facts"):
        grafting.finetune(tiny, [], progress=False)
    other = interp.load(interp.build_tiny("llama", tmp_path / "other", words=WORDS, seed=0, n_layers=3))
    with pytest.raises(InterpError, match="learned on"):
        delta.check(other)
    wrong = grafting.Delta({n: t[:1] for n, t in delta.deltas.items()}, delta.model)
    with pytest.raises(InterpError, match="shape"):
        wrong.check(tiny)
    with pytest.raises(InterpError, match="cannot add"):
        delta + grafting.Delta(dict(delta.deltas), "another-model")
    with pytest.raises(InterpError, match="layers"):
        grafting.parameters(tiny, layers=[5])


def test_real_model_options_and_known_entities(smollm2):
    facts, impl = grafting.first_hop(smollm2, 20)
    assert len(facts.options) == 20 and impl.chance == 9.5
    fact_ops.check_unknown(smollm2, facts)  # invented people: near chance before fine-tuning
    with pytest.raises(InterpError, match="one token"):
        fact_ops.option_ids(smollm2, ["Tokyo", "Vrenthaldo"])
    cities = [c for c, *_ in grafting.facts.CITIES[:20]]
    langs = [c[2] for c in grafting.facts.CITIES[:20]]
    known = grafting.Facts("known", "In {}, the people speak", tuple(cities), tuple(langs), tuple(langs))
    with pytest.raises(InterpError, match="known to the model"):
        fact_ops.check_unknown(smollm2, known)
