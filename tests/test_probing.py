"""Parameter probing: weight-activation scores, overlap, greedy group pruning, controls, domain tasks.

Invariants: an all-ones WeightMask is the identity; running under a mask leaves the model bit for
bit as it was; a weight whose input is always zero scores zero; on a planted model where the
output depends only on one MLP, probing keeps that MLP and prunes the rest.
"""

from __future__ import annotations

import pytest
import torch

import interp
from interp import probing, run
from interp.errors import InterpError
from interp.interventions import WeightMask
from interp.probing.probe import levels
from interp.probing.overlap import top_fraction
from interp.files.storage import load_state
from interp.tasks import domains, multidomain


@pytest.fixture()
def own_llama(tmp_path):
    """A tiny LLaMA (GQA: 4 heads, 2 KV heads) that this test may edit in place."""
    return interp.load(interp.build_tiny("llama", tmp_path / "llama", seed=3, n_layers=2, d_model=32, d_mlp=64))


def _tokens(model, batch=8, pos=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(5, model.cfg.d_vocab, (batch, pos), generator=gen)


def _state(model):
    return {n: (id(p), p.detach().clone()) for n, p in model.named_parameters()}


# ---------------------------------------------------------------------------------------------
# the intervention invariants


def test_all_ones_mask_is_identity_and_model_is_restored_bit_for_bit(llama):
    tokens = _tokens(llama)
    before = _state(llama)
    plain = run.logits(llama, tokens)
    lins = probing.linears(llama)
    ones = WeightMask({n: torch.ones(l.shape, dtype=torch.bool) for n, l in lins.items()})
    assert torch.equal(run.logits(llama, tokens, [ones]), plain)
    zeros = WeightMask({n: torch.zeros(l.shape, dtype=torch.bool) for n, l in list(lins.items())[:3]})
    assert not torch.equal(run.logits(llama, tokens, [zeros]), plain)
    after = _state(llama)
    assert list(after) == list(before)  # same names, same order
    for n, (pid, value) in before.items():
        assert after[n][0] == pid and torch.equal(after[n][1], value), n
    assert torch.equal(run.logits(llama, tokens), plain)


def test_linears_and_their_input_hooks_match_the_forward(llama):
    """linear(hook input) == the projection's output, for every scored weight (GQA K/V included)."""
    lins = probing.linears(llama)
    assert len(lins) == 7 * llama.cfg.n_layers
    kinds = {l.kind: l.shape for l in lins.values() if l.layer == 0}
    assert kinds["attn.k"][0] == kinds["attn.q"][0] // 2  # 2 KV heads for 4 query heads
    outs = {n: f"blocks.{l.layer}.{l.kind}.hook_out" for n, l in lins.items()}
    _, acts = run.cache(llama, _tokens(llama), sorted({l.hook for l in lins.values()} | set(outs.values())))
    for n, l in lins.items():
        x, y = acts[l.hook].flatten(2), acts[outs[n]].flatten(2)
        torch.testing.assert_close(torch.nn.functional.linear(x, llama.get_parameter(n)), y, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# scores


def test_input_norms_match_a_cache_and_skip_padding(llama):
    tokens = _tokens(llama, batch=6, pos=7)
    answer_pos = torch.tensor([6, 3, 4, 6, 2, 5])
    scores = probing.input_norms(llama, tokens, answer_pos=answer_pos, chunk=4)  # two forwards, each row once
    lins = probing.linears(llama)
    _, acts = run.cache(llama, tokens, sorted({l.hook for l in lins.values()}))
    valid = (torch.arange(7)[None, :] <= answer_pos[:, None]).float()[..., None]
    for n, l in lins.items():
        x = acts[l.hook].flatten(2)
        torch.testing.assert_close(scores.norms[n], (x * x * valid).sum((0, 1)).sqrt(), rtol=1e-4, atol=1e-6)
        w = llama.get_parameter(n).detach()
        torch.testing.assert_close(scores.matrix(llama, n), w.abs() * scores.norms[n][None, :])
    assert scores.meta["examples"] == 6 and scores.meta["tokens"] == int(valid.sum())


def test_input_norms_refuse_careless_tokens_and_chunks(llama):
    tokens = _tokens(llama, batch=2, pos=5)
    with pytest.raises(InterpError, match="token ids must be integers"):
        probing.input_norms(llama, tokens.float())
    with pytest.raises(InterpError, match="outside the model's vocabulary"):
        probing.input_norms(llama, tokens + llama.cfg.d_vocab)
    with pytest.raises(InterpError, match="chunk=0 must be an int >= 1"):
        probing.input_norms(llama, tokens, chunk=0)


def test_weights_whose_input_is_always_zero_score_zero(own_llama):
    m = own_llama
    lins = probing.linears(m)
    name = {l.kind: n for n, l in lins.items() if l.layer == 0}
    with torch.no_grad():  # MLP neuron 5 and KV head 1 of block 0 always output 0
        m.get_parameter(name["mlp.gate"])[5] = 0
        m.get_parameter(name["mlp.in"])[5] = 0
        d_head = m.cfg.d_head
        m.get_parameter(name["attn.v"])[d_head : 2 * d_head] = 0
    scores = probing.input_norms(m, _tokens(m, batch=16))
    down = scores.matrix(m, name["mlp.out"])  # [d_model, d_mlp]
    assert torch.equal(down[:, 5], torch.zeros(down.shape[0])) and bool((down[:, :5] > 0).all())
    o = scores.matrix(m, name["attn.o"])  # [d_model, heads * d_head]; heads 2, 3 read KV head 1
    assert torch.equal(o[:, 2 * d_head :], torch.zeros(o.shape[0], 2 * d_head))
    assert bool((o[:, : 2 * d_head] > 0).all())
    assert torch.equal(probing.wanda(torch.ones(2, 3), torch.tensor([1.0, 0.0, 2.0])), torch.tensor([[1.0, 0, 2]] * 2))


# ---------------------------------------------------------------------------------------------
# groups, overlap, controls


def test_levels_are_quantile_groups_ordered_by_score():
    score = torch.rand(5, 40, generator=torch.Generator().manual_seed(0))
    g = levels(score, 4, "row")
    assert g.dtype == torch.uint8 and all(torch.equal(torch.bincount(r.long()), torch.full((4,), 10)) for r in g)
    for r in range(5):  # a higher group never holds a lower score than a lower group
        for q in range(3):
            assert score[r][g[r] == q].max() < score[r][g[r] == q + 1].min()
    gm = levels(score, 8, "matrix")
    assert torch.equal(torch.bincount(gm.flatten().long()), torch.full((8,), 25))
    with pytest.raises(InterpError, match="grouping"):
        levels(score, 4, "column")


def test_overlap_grid_jaccard_invariants(llama):
    lins = probing.linears(llama)
    a = probing.input_norms(llama, _tokens(llama, seed=1))
    b = probing.input_norms(llama, _tokens(llama, seed=2))
    mag = probing.magnitude(llama)
    assert probing.jaccard(llama, a, a) == 1.0
    assert probing.jaccard(llama, a, b) == probing.jaccard(llama, b, a)
    grid = probing.overlap(llama, {"x": a, "y": b, "m": mag}, {"x": "d1", "y": "d1", "m": "d2"}, k=0.2)
    assert grid.axes == ("task_a", "task_b") and grid.shape == (3, 3)
    assert torch.equal(grid.values, grid.values.T) and torch.equal(grid.values.diag(), torch.ones(3))
    assert grid.meta["within"] == pytest.approx(float(grid.values[0, 1]))
    assert grid.meta["across"] == pytest.approx(float(grid.values[2, :2].mean()))
    top = top_fraction(torch.arange(10.0), 0.3)
    assert top.tolist() == [False] * 7 + [True] * 3
    assert len(lins) == len(a.norms)


# ---------------------------------------------------------------------------------------------
# probing


def _planted(m):
    """Block 1's MLP carries the output: every other linear weight scaled by 1e-3; that MLP's
    weights are +-3/sqrt(fan_in) (random signs), so it dominates the residual stream and every
    weight of it matters about as much as any other (no group of it is negligible)."""
    lins = probing.linears(m)
    block = {n for n, l in lins.items() if l.layer == 1 and l.kind.startswith("mlp.")}
    with torch.no_grad():
        for n, l in lins.items():
            w = m.get_parameter(n)
            if n in block:
                w.copy_(torch.randn(w.shape, generator=torch.Generator().manual_seed(len(n))).sign() / l.shape[1] ** 0.5 * 3)
            else:
                w.mul_(1e-3)
    return block


def _top_logit_metric(model, tokens):
    """The full model's top token at the last position, its logit above the mean logit."""
    top = run.logits(model, tokens)[:, -1].argmax(-1)

    def metric(logits):
        last = logits[:, -1]
        return (last.gather(1, top[:, None])[:, 0] - last.mean(-1)).mean()

    return metric


def test_probing_keeps_the_planted_block_and_prunes_the_rest(own_llama):
    m = own_llama
    block = _planted(m)
    tokens = _tokens(m, batch=32)
    metric = _top_logit_metric(m, tokens)
    scores = probing.input_norms(m, tokens)
    # pruning the lowest tenth of one of the block's matrices costs 0.2-4 % of the metric, of any
    # other matrix under 0.01 %: a tolerance of 0.1 % separates them
    p = probing.probe(m, tokens, metric, scores, tolerance=0.001, n_groups=10, progress=False)
    assert all(p.sparsity[n] == 0.0 for n in block), {n: p.sparsity[n] for n in block}
    rest = [s for n, s in p.sparsity.items() if n not in block]
    assert min(rest) >= 0.85, rest
    assert p.meta["checks"] == len(p.history) <= 64
    grid = p.to_grid()  # [layer, matrix]: the planted block's three matrices at 0
    assert grid.axes == ("layer", "matrix") and grid.shape == (2, 7)
    assert grid.sel(layer=1, matrix="mlp.out").values.item() == 0.0
    value = float(metric(run.logits(m, tokens, [p.mask(m)])))
    assert value >= p.meta["threshold"]
    # the controls prune as many weights per row of each matrix
    for c in (probing.random_like(p, seed=1), probing.magnitude_like(m, p)):
        for n, mask in c.masks.items():
            assert torch.equal(mask.sum(1), p.masks[n].sum(1)), n
    # and a target stops the probe there
    q = probing.probe(m, tokens, metric, scores, tolerance=0.001, sparsity=0.3, progress=False)
    assert 0.3 <= q.total_sparsity < 0.4 and q.meta["stop"] == "target sparsity reached"


def test_probe_result_saves_and_loads(tmp_path, llama):
    tokens = _tokens(llama, batch=32)
    p = probing.probe(llama, tokens, _top_logit_metric(llama, tokens), probing.input_norms(llama, tokens),
                      tolerance=0.5, sparsity=0.2, n_groups=5, progress=False)
    back = probing.Probe.load(p.save(tmp_path / "probe.safetensors"))
    assert back.sparsity == p.sparsity and back.history == p.history
    assert all(torch.equal(back.masks[n], p.masks[n]) for n in p.masks)
    assert torch.equal(run.logits(llama, tokens, [back.mask(llama)]), run.logits(llama, tokens, [p.mask(llama)]))


class _Killed(Exception):
    pass


def test_a_killed_probe_resumes_from_its_checkpoint_to_the_same_mask(tmp_path, own_llama):
    m = own_llama
    tokens = _tokens(m, batch=32)
    metric, scores = _top_logit_metric(m, tokens), probing.random_scores(m, seed=3)
    kw = dict(tolerance=0.001, n_groups=10, max_checks=None, progress=False)
    whole = probing.probe(m, tokens, metric, scores, **kw)
    assert whole.meta["checks"] >= 6
    calls = []

    def dies_after(n):
        def f(logits):
            if len(calls) == n:
                raise _Killed
            calls.append(1)
            return metric(logits)
        return f

    path = tmp_path / "probe.safetensors"
    with pytest.raises(_Killed):
        probing.probe(m, tokens, dies_after(4), scores, checkpoint=path, **kw)
    assert len(load_state(path)["values"]) == 4  # the full model and three checks, recorded
    calls.clear()
    again = probing.probe(m, tokens, dies_after(10 ** 6), scores, checkpoint=path, **kw)
    assert len(calls) == whole.meta["checks"] + 1 - 4  # only the checks not recorded ran
    assert again.history == whole.history and again.meta["stop"] == whole.meta["stop"]
    assert all(torch.equal(again.masks[n], whole.masks[n]) for n in whole.masks)
    # a record longer than the search needs replays its prefix: a capped probe runs no check at all
    capped = probing.probe(m, tokens, metric, scores, **{**kw, "max_checks": 3})
    calls.clear()
    replayed = probing.probe(m, tokens, dies_after(10 ** 6), scores, checkpoint=path, **{**kw, "max_checks": 3})
    assert calls == [] and replayed.history == capped.history
    # a checkpoint of another probe is refused, not replayed
    with pytest.raises(InterpError, match="another probe.*tolerance"):
        probing.probe(m, tokens, metric, scores, checkpoint=path, **{**kw, "tolerance": 0.01})
    with pytest.raises(InterpError, match="another probe.*inputs"):  # the same shapes, other rows
        probing.probe(m, tokens.flip(0), metric, scores, checkpoint=path, **kw)
    path.write_text("{not json")
    with pytest.raises(InterpError, match="not a probe's record"):
        probing.probe(m, tokens, metric, scores, checkpoint=path, **kw)


# ---------------------------------------------------------------------------------------------
# bad input: one clear error each


def test_bad_input(llama, own_llama):
    tokens = _tokens(llama, batch=32)
    metric = _top_logit_metric(llama, tokens)
    scores = probing.input_norms(llama, tokens)
    with pytest.raises(InterpError, match="has only 40 val examples, but 64 were asked"):
        multidomain.task("counting", "up", split="val", n=64)
    with pytest.raises(InterpError, match="validation set has 8 examples but at least 32"):
        probing.probe(llama, tokens[:8], metric, scores, progress=False)
    for tol in (-0.1, 1.5):
        with pytest.raises(InterpError, match=r"tolerance=.* must be a number in \[0, 1\]"):
            probing.probe(llama, tokens, metric, scores, tolerance=tol, progress=False)
    with pytest.raises(InterpError, match="cannot be reached: with n_groups=10 the probe prunes at most 0.900"):
        probing.probe(llama, tokens, metric, scores, sparsity=0.95, progress=False)
    p = probing.probe(llama, tokens, metric, scores, tolerance=1.0, sparsity=0.1, progress=False)
    with pytest.raises(InterpError, match="another model"):
        p.mask(own_llama)  # another tiny LLaMA: different shapes
    other = interp.load(interp.build_tiny("llama", _tmp(own_llama), seed=9))  # same architecture, other weights
    with pytest.raises(InterpError, match="probed on another model"):
        p.mask(other)
    with pytest.raises(InterpError, match="do not cover this model"):
        probing.probe(own_llama, _tokens(own_llama, batch=32), metric, scores, progress=False)
    with pytest.raises(InterpError, match="unknown domain"):
        multidomain.task("poetry", "rhyme")


def _tmp(model):
    import tempfile

    return tempfile.mkdtemp(prefix="interp-probing-")


# ---------------------------------------------------------------------------------------------
# domain tasks


def test_multidomain_tasks_split_items_and_score_options():
    for d, names in multidomain.DOMAINS.items():
        for name in names:
            val, test = (multidomain.task(d, name, split=s, n=32) for s in ("val", "test"))
            assert val.meta["domain"] == d and len(val) == 32
            assert set(val.correct.tolist()) <= set(val.meta["options"])
            if d != "grammar":  # items (a run of digits, a country) never cross splits
                assert not {t.rsplit(" ", 1)[0] for t in val.text} & {t.rsplit(" ", 1)[0] for t in test.text}
    t = multidomain.task("facts", "capital", n=4)
    logits = torch.zeros(4, t.clean.shape[1], len(multidomain.WORDS) + 5)
    logits[torch.arange(4), t.answer_pos, t.correct] = 1.0
    assert domains.option_scores(logits, t).tolist() == [1.0] * 4
    logits[0, t.answer_pos[0], t.incorrect[0]] = 2.0
    assert domains.option_accuracy(t)(logits) == 0.75


def test_bpe_domains_on_smollm2(smollm2):
    """Every domain builds on SmolLM2's tokenizer: one-token answers among the options, val and
    test items disjoint; too many rows asked is one clear error."""
    suite = domains.suite(smollm2, split="val", n=16)
    test = domains.suite(smollm2, split="test", n=16)
    assert set(suite) == {"arithmetic", "grammar", "facts", "code"} and all(len(t) >= 2 for t in suite.values())
    for d, tasks in suite.items():
        for name, t in tasks.items():
            assert set(t.correct.tolist()) <= set(t.meta["options"]), (d, name)
            if d in ("facts", "code"):  # the question (a country; a function or parameter) is never in both
                last = (lambda x: x.split("\n")[-1]) if d == "facts" else (lambda x: x)
                assert not {last(x) for x in t.text} & {last(x) for x in test[d][name].text}, (d, name)
    with pytest.raises(InterpError, match="has only 42 val examples, but 64 were asked"):
        domains.task(smollm2, "facts", "capital", n=64)
    lins = probing.linears(smollm2)
    assert len(lins) == 7 * 30
    # format-matched prompts: one Q/A frame; a split asked for more rows than it has items repeats its
    # items under other solved examples, each row naming its item
    m = domains.task(smollm2, "facts", "capital", split="test", n=64, fmt="matched", repeat=True)
    assert len(m) == 64 and m.meta["format"] == "matched" and len(set(m.meta["keys"])) < 64
    assert all(x.split("\n")[-2].startswith("Q: the capital of ") for x in m.text)
    assert len(set(m.text)) == 64  # the repeats differ in their solved example


def test_random_scores_are_seeded_noise_and_the_check_cap_can_be_lifted(own_llama):
    """Random scores are the same for one seed and differ across seeds; max_checks=None runs the
    search with no cap (tests/test_specialization.py shows the random-score search both stopping short
    of and reaching its target on the zoo model: a control that can fail)."""
    m = own_llama
    tokens = _tokens(m, batch=32)
    metric = _top_logit_metric(m, tokens)
    p = probing.probe(m, tokens, metric, probing.random_scores(m, seed=0), tolerance=0.05, sparsity=0.5,
                      max_checks=None, progress=False)
    assert "max_checks" not in p.meta["stop"] and p.meta["scores"]["kind"] == "random"
    name = next(iter(probing.linears(m)))
    a, b = probing.random_scores(m, seed=0), probing.random_scores(m, seed=1)
    assert torch.equal(a.matrix(m, name), probing.random_scores(m, seed=0).matrix(m, name))
    assert not torch.equal(a.matrix(m, name), b.matrix(m, name))
    with pytest.raises(InterpError, match="or None for no cap"):
        probing.probe(m, tokens, metric, a, max_checks=0, progress=False)


def test_zoo_multidomain_model_solves_its_domains():
    """The shipped multi-domain model answers every task's held-out items (accuracy among options)."""
    model = interp.load("zoo:multidomain")
    for d, tasks in multidomain.suite(split="test", n=32).items():
        for name, t in tasks.items():
            acc = float(domains.option_accuracy(t)(run.logits(model, t.clean)))
            assert acc >= 0.9, (d, name, acc)
