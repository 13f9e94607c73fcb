"""Algorithmic cores: ground truth recovered on planted data, invariants, clear errors."""

from __future__ import annotations

import math

import pytest
import torch

import interp
from interp import cores, results, run
from interp.cores import linalg
from interp.cores import analysis
from interp.errors import InterpError
from interp.interventions import Project
from interp.metrics import binary_accuracy, logit_diff
from interp.tasks.base import BOS_ID, Task

D, K = 32, 3
pytestmark = pytest.mark.filterwarnings("ignore:A forward hook edited hook_scale")  # TL notes hooked-LN numerics


def _orthonormal(d: int, k: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(d, k, generator=g, dtype=torch.float64))[0].float()


def _planted(n: int = 2000, seed: int = 0):
    """Activations whose task output depends only on span(B) (k = 3), plus a large-variance
    distractor direction the output ignores, plus isotropic noise. Returns (X, G, B)."""
    g = torch.Generator().manual_seed(seed)
    q = _orthonormal(D, K + 1, seed)
    b, distractor = q[:, :K], q[:, K]
    z = torch.randn(n, K, generator=g)
    x = z @ b.T + 5.0 * torch.randn(n, 1, generator=g) * distractor + 0.05 * torch.randn(n, D, generator=g)
    a = torch.randn(K, 4, generator=g)  # 4 nonlinear outputs tanh(z @ a): their gradients lie in span(B)
    slope = 1 - torch.tanh(z @ a) ** 2  # [n, 4]
    grads = (slope[:, :, None] * (b @ a).T[None]).flatten(0, 1)  # [n * 4, D]
    return x, grads, b


# --- pure tensors -------------------------------------------------------------------------------


def test_planted_subspace_recovered_by_balanced_truncation():
    x, grads, b = _planted()
    basis, spectrum = linalg.balanced_truncation(x, grads)
    k = linalg.choose_k(spectrum)
    assert k == K
    assert float(linalg.principal_angles(basis[:, :k], b).max()) < 1e-3
    assert torch.allclose(basis.T @ basis, torch.eye(D), atol=1e-5)


def test_pca_baseline_is_fooled_by_the_distractor():
    x, _, b = _planted()
    basis, spectrum = linalg.pca(x)
    assert float(linalg.principal_angles(basis[:, :K], b).max()) > 1.0  # top PC is the distractor


def test_choose_k_picks_largest_gap_and_respects_max_k():
    s = torch.tensor([10.0, 9.0, 8.0, 0.1, 0.09, 0.08, 0.07])
    assert linalg.choose_k(s) == 3
    assert linalg.choose_k(s, max_k=2) <= 2
    assert linalg.choose_k(torch.tensor([3.0, 2.0, 1.0, 0.0, 0.0])) == 3  # an exact rank is a gap
    with pytest.raises(ValueError, match="does not depend"):
        linalg.choose_k(torch.zeros(4))


@pytest.mark.parametrize("method", ["procrustes", "ridge", "cca"])
def test_self_alignment_is_identity(method):
    z = torch.randn(500, 4, generator=torch.Generator().manual_seed(1)) * torch.tensor([3.0, 2.0, 1.0, 0.5])
    m, bias, r2, r2_cv, rho = analysis.align_coordinates(z, z, method=method, ridge=1e-9)
    assert torch.allclose(m, torch.eye(4), atol=1e-3)
    assert bias.abs().max() < 1e-3
    assert r2 > 0.999 and r2_cv > 0.999
    assert torch.allclose(rho, torch.ones(4), atol=1e-4)


def test_procrustes_recovers_a_rotation():
    z = torch.randn(400, 5, generator=torch.Generator().manual_seed(2))
    q = _orthonormal(5, 5, 3)
    m, bias, r2, _, _ = analysis.align_coordinates(z, z @ q + 1.0, method="procrustes")
    assert torch.allclose(m, q, atol=1e-4)
    assert torch.allclose(bias, torch.ones(5), atol=1e-4)
    assert r2 > 0.9999


def test_operator_recovers_planted_dynamics():
    g = torch.Generator().manual_seed(4)
    a = torch.tensor([[0.5, -0.3], [0.3, 0.5]])  # eigenvalues 0.5 ± 0.3i
    x = torch.randn(3000, 2, generator=g)
    y = x @ a + 0.2 + 0.01 * torch.randn(3000, 2, generator=g)
    op = analysis.operator_from(x, y, source="s", target="s")
    assert torch.allclose(op.matrix, a, atol=0.01)
    ev = sorted(op.eigenvalues.tolist(), key=lambda c: c.imag)
    assert abs(ev[0] - complex(0.5, -0.3)) < 0.01 and abs(ev[1] - complex(0.5, 0.3)) < 0.01
    assert op.r2 > 0.99


def test_transfer_through_identity_alignments_keeps_the_operator():
    x = torch.randn(200, 3, generator=torch.Generator().manual_seed(5))
    op = analysis.operator_from(x, x @ _orthonormal(3, 3, 6), source="a", target="b")
    eye = cores.Alignment(torch.eye(3), torch.zeros(3), "procrustes", 1.0, 1.0, torch.ones(3), torch.zeros(3),
                          torch.eye(3), torch.eye(3))
    moved = cores.transfer(op, eye, eye)
    assert torch.allclose(moved.matrix, op.matrix, atol=1e-5) and torch.allclose(moved.bias, op.bias, atol=1e-5)


def test_fourier_power_finds_the_planted_frequency():
    p = 13
    r = torch.arange(p).repeat(20)
    vals = torch.stack([torch.cos(2 * math.pi * 4 * r / p), torch.sin(2 * math.pi * 4 * r / p)], 1)
    power = cores.fourier_power(vals, r, p)
    assert int(power.argmax()) + 1 == 4


def test_results_save_and_load(tmp_path):
    """Core, Operator and Alignment round-trip through the one save/load (interp.results)."""
    core = cores.Core(_orthonormal(8, 2, 0), torch.randn(8), torch.rand(8), "blocks.0.hook_resid_post", "ace", {"n": 3})
    again = results.load(results.save(core, tmp_path / "core.safetensors"))
    assert isinstance(again, cores.Core)
    assert torch.equal(again.basis, core.basis) and torch.equal(again.mean, core.mean) and torch.equal(again.spectrum, core.spectrum)
    assert again.site == core.site and again.method == "ace" and again.meta == {"n": 3}
    op = analysis.operator_from(torch.randn(50, 2), torch.randn(50, 2), source="a", target="b", meta={"reference": [[0.5, 0.1]]})
    op2 = results.load(results.save(op, tmp_path / "op.safetensors"))
    assert isinstance(op2, cores.Operator)
    assert torch.equal(op2.eigenvalues, op.eigenvalues) and torch.equal(op2.matrix, op.matrix) and op2.r2 == op.r2
    assert op2.meta == op.meta and (op2.source, op2.target) == ("a", "b")
    unscored = cores.Operator(torch.eye(2), torch.zeros(2), torch.ones(2), torch.zeros(2), float("nan"), "a", "b")
    assert math.isnan(results.load(results.save(unscored, tmp_path / "nan.safetensors")).r2)
    al = cores.Alignment(torch.eye(2), torch.zeros(2), "cca", 0.5, 0.4, torch.ones(2), torch.zeros(0), torch.eye(2), torch.eye(2), {"x": 1})
    al2 = results.load(results.save(al, tmp_path / "al.safetensors"))
    assert isinstance(al2, cores.Alignment)
    assert al2.angles.shape == (0,) and al2.meta == {"x": 1} and al2.r2_heldout == 0.4 and al2.method == "cca"
    assert torch.equal(al2.map, al.map) and torch.equal(al2.basis_b, al.basis_b)
    # the thin methods delegate to the same format, and check the type
    assert torch.equal(cores.Core.load(core.save(tmp_path / "c2.safetensors")).basis, core.basis)
    axis = core.truncated(1)
    assert axis.k == 1 and axis.meta["truncated_from_k"] == 2 and torch.equal(axis.basis[:, 0], core.basis[:, 0])
    with pytest.raises(InterpError, match="not a Core"):
        cores.Core.load(tmp_path / "op.safetensors")


def test_core_rejects_non_orthonormal_basis():
    with pytest.raises(InterpError, match="orthonormal"):
        cores.Core(torch.ones(4, 2), torch.zeros(4), torch.zeros(4), "x", "ace")


# --- planted model: a tiny LLaMA whose answer logits read only a planted subspace ----------------

PLANT_SITE = "ln_final.hook_normalized"
PAIRS = ((10, 11), (12, 13))  # (a, b) token pairs: logit[a] - logit[b] = s * <h, B[:, j]>


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A random tiny LLaMA (RMSNorm weights 1, untied unembedding) whose unembedding rows obey
    W[a_j] - W[b_j] = 4 B[:, j]: the logit difference of pair j reads only span(B), k = 2, at
    ln_final.hook_normalized (the unembedding's input). Task labels are the model's own answers,
    balanced per pair, so removing the core should leave chance (0.5)."""
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("planted")
    path = interp.build_tiny("llama", root / "base", seed=3)
    hf = AutoModelForCausalLM.from_pretrained(path)
    d = hf.config.hidden_size
    basis = _orthonormal(d, 2, 11)
    with torch.no_grad():
        w = hf.lm_head.weight
        for j, (a, b) in enumerate(PAIRS):
            w[b] = w[a] - 4.0 * basis[:, j]
    planted_dir = root / "planted"
    from interp.model.building import save_model_dir
    from interp.tasks.base import word_tokenizer
    from interp.model.building import DEFAULT_WORDS

    save_model_dir(hf, word_tokenizer(DEFAULT_WORDS), planted_dir)
    model = interp.load(planted_dir)
    g = torch.Generator().manual_seed(0)
    rows = torch.cat([torch.full((1200, 1), BOS_ID), torch.randint(5, model.cfg.d_vocab, (1200, 7), generator=g)], 1)
    pair = torch.arange(1200) % 2
    a = torch.tensor([PAIRS[j][0] for j in pair.tolist()])
    b = torch.tensor([PAIRS[j][1] for j in pair.tolist()])
    with torch.no_grad():
        last = model(rows)[:, -1]
    ld = last[torch.arange(1200), a] - last[torch.arange(1200), b]
    keep = []
    for j in (0, 1):  # as many positive as negative labels in each pair
        pos = ((pair == j) & (ld > 0)).nonzero().flatten()
        neg = ((pair == j) & (ld < 0)).nonzero().flatten()
        m = min(len(pos), len(neg), 150)
        keep += pos[:m].tolist() + neg[:m].tolist()
    keep = torch.tensor(sorted(keep))
    correct = torch.where(ld > 0, a, b)[keep]
    incorrect = torch.where(ld > 0, b, a)[keep]
    task = Task("planted", "test", rows[keep], rows[keep], correct, incorrect, torch.full((len(keep),), 7),
                tuple(str(i) for i in keep.tolist()))
    return model, task, basis


def test_planted_model_core_has_the_planted_span(planted):
    model, task, basis = planted
    core = cores.extract(model, task, site=PLANT_SITE)
    assert core.k == 2
    assert float(linalg.principal_angles(core.basis, basis).max()) < 0.02
    assert core.meta["k_rule"] == "largest spectral gap"


def test_planted_core_removal_drops_to_chance_but_random_does_not(planted):
    model, task, basis = planted
    core = cores.extract(model, task, site=PLANT_SITE)
    grid = cores.validate(model, core, task, n_random=4, progress=False)
    acc = grid.values[:, :, 1]  # [method, quantity] binary accuracy
    full, only, removed, flipped = (cores.INTERVENTIONS.index(m) for m in ("full", "core_only", "core_removed", "core_flipped"))
    assert acc[full, 0] == 1.0
    assert acc[only, 0] > 0.97  # sufficiency
    assert abs(acc[removed, 0] - 0.5) < 0.05  # necessity: chance
    assert acc[removed, 1] > 0.85  # the random control of the same k keeps the task
    assert acc[flipped, 0] < 0.3  # reflected about the mean: below chance
    assert grid.axes == ("method", "quantity", "metric")


def test_batched_gradients_equal_one_backward_per_example(planted):
    model, task, _ = planted
    sub = task[:6]
    x, g = cores.gradients(model, sub, PLANT_SITE, batch_size=4)
    for i in range(len(sub)):
        _, gi = cores.gradients(model, sub[[i]], PLANT_SITE, batch_size=1)
        assert torch.allclose(g[i], gi[0], atol=1e-5)
    assert x.shape == (6, model.cfg.d_model)


def test_baseline_methods(planted):
    model, task, basis = planted
    labels = [int(c) for c in task.correct]
    dm = cores.extract(model, task, site=PLANT_SITE, method="diff_means", labels=labels)
    assert dm.k >= 1 and dm.method == "diff_means"
    pc = cores.extract(model, task, site=PLANT_SITE, method="pca", k=2)
    assert pc.k == 2 and torch.allclose(pc.basis.T @ pc.basis, torch.eye(2), atol=1e-4)
    das = cores.extract(model, task[:64], site=PLANT_SITE, method="das", k=2, das_epochs=2)
    assert das.k == 2 and len(das.meta["das_losses"]) == 2
    with pytest.raises(ValueError, match="pass k"):
        cores.extract(model, task, site=PLANT_SITE, method="das")


def test_self_alignment_on_a_model(planted):
    model, task, _ = planted
    core = cores.extract(model, task, site=PLANT_SITE)
    prompts = [" ".join(["cat", "dog", "the", "key", "is"][i % 5:] + ["runs"] * (i % 4)) for i in range(40)]
    al = cores.align(model, core, model, core, prompts)
    assert torch.allclose(al.map, torch.eye(core.k), atol=1e-4) and al.r2 > 0.9999
    assert float(al.angles.max()) < 1e-3


def test_rotated_copy_alignment_recovers_the_rotation(tmp_path):
    """A LLaMA whose residual basis is rotated by Q (writers W -> Q.T W, readers W -> W Q; its
    RMSNorm weights are 1, so the model computes the same function) aligned on the full residual
    at blocks.0.hook_resid_post recovers Q."""
    from transformers import AutoModelForCausalLM

    path = interp.build_tiny("llama", tmp_path / "a", seed=4, n_layers=1)
    hf = AutoModelForCausalLM.from_pretrained(path)
    d = hf.config.hidden_size
    q = _orthonormal(d, d, 9)
    with torch.no_grad():
        hf.model.embed_tokens.weight.copy_(hf.model.embed_tokens.weight @ q)
        for layer in hf.model.layers:
            for lin in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.mlp.gate_proj, layer.mlp.up_proj):
                lin.weight.copy_(lin.weight @ q)
            for lin in (layer.self_attn.o_proj, layer.mlp.down_proj):
                lin.weight.copy_(q.T @ lin.weight)
        if hf.lm_head.weight.data_ptr() != hf.model.embed_tokens.weight.data_ptr():  # tied: already rotated
            hf.lm_head.weight.copy_(hf.lm_head.weight @ q)
    from interp.model.building import DEFAULT_WORDS, save_model_dir
    from interp.tasks.base import word_tokenizer

    save_model_dir(hf, word_tokenizer(DEFAULT_WORDS), tmp_path / "b")
    ma, mb = interp.load(path), interp.load(tmp_path / "b")
    site = "blocks.0.hook_resid_post"
    words = list(DEFAULT_WORDS)
    g = torch.Generator().manual_seed(0)
    prompts = [" ".join(words[int(i)] for i in torch.randint(len(words), (5,), generator=g)) for _ in range(200)]
    xa, xb = analysis.matched_activations(ma, mb, prompts, site, site)
    assert torch.allclose(xa @ q, xb, atol=1e-4)  # the copy really is rotated
    full = lambda m, x: cores.Core(torch.eye(d), x.mean(0), torch.ones(d), site, "identity")  # noqa: E731
    al = cores.align(ma, full(ma, xa), mb, full(mb, xb), prompts, method="procrustes")
    assert torch.allclose(al.map, q, atol=1e-3)
    assert al.r2 > 0.9999


# --- clear errors ---------------------------------------------------------------------------------


def test_k_larger_than_d_model_is_an_error(planted):
    model, task, _ = planted
    with pytest.raises(ValueError, match="d_model"):
        cores.extract(model, task, site=PLANT_SITE, k=model.cfg.d_model + 1)


def test_unknown_site_names_nearest(planted):
    model, task, _ = planted
    with pytest.raises(InterpError, match="nearest valid names"):
        cores.extract(model, task, site="blocks.0.hook_resid_pots")
    with pytest.raises(InterpError, match="valid short names"):
        cores.extract(model, task, site="resid_pots", layer=0)
    with pytest.raises(InterpError, match="give its layer"):
        cores.extract(model, task, site="resid_post")
    with pytest.raises(InterpError, match="n_random"):
        cores.validate(model, cores.extract(model, task, site=PLANT_SITE), task, n_random=0)


def test_site_as_short_name_and_layer(planted):
    model, task, _ = planted
    short = cores.extract(model, task, site="resid_post", layer=0)
    full = cores.extract(model, task, site="blocks.0.hook_resid_post")
    assert short.site == full.site == "blocks.0.hook_resid_post"
    assert torch.equal(short.basis, full.basis) and torch.equal(short.spectrum, full.spectrum)
    assert torch.equal(cores.activations(model, task, "resid_post", layer=0), cores.activations(model, task, "blocks.0.hook_resid_post"))


def _task_metrics(logits: torch.Tensor, task: Task) -> list[float]:
    return [float(logit_diff(logits, task.correct, task.incorrect, task.answer_pos).mean()),
            float(binary_accuracy(logits, task.correct, task.incorrect, task.answer_pos).mean())]


def test_batched_validation_equals_one_forward_per_basis(planted):
    """validate runs every (intervention, basis) variant side by side; here each one gets its own
    forward under run.intervened, and the projection is checked against the formula by hand."""
    from interp.hooks import hooks

    model, task, _ = planted
    core = cores.extract(model, task, site=PLANT_SITE)
    n_random, seed = 3, 5
    grid = cores.validate(model, core, task, n_random=n_random, seed=seed, variants_per_forward=4, progress=False)

    def one(variant) -> list[float]:
        with torch.no_grad(), run.intervened(model, variant):
            return _task_metrics(model(task.clean), task)

    full = torch.tensor(one([]))
    assert torch.allclose(grid.values[0, :2], full, atol=1e-5)
    assert torch.all(grid.values[0, 2] == 0)
    bases = [linalg.random_basis(core.d_model, core.k, seed + i) for i in range(n_random)]
    rows = torch.arange(len(task))
    for i, mode in enumerate(cores.INTERVENTIONS[1:], start=1):
        def at(b):
            return [Project(core.site, b, core.mean, mode, positions=task.answer_pos)]

        own = torch.tensor(one(at(core.basis)))
        rand = torch.tensor([one(at(b)) for b in bases])  # [n_random, metric]
        assert torch.allclose(grid.values[i, 0], own, atol=1e-5), mode
        assert torch.allclose(grid.values[i, 1], rand.mean(0), atol=1e-5), mode
        assert torch.allclose(grid.values[i, 2], rand.std(0), atol=1e-5), mode

        def by_hand(act, *, hook, mode=mode):  # mu + P(h - mu) / h - P(h - mu) / h - 2 P(h - mu) at the answer positions
            h = act[rows, task.answer_pos]
            inside = (h - core.mean) @ core.basis @ core.basis.T
            new = {"core_only": core.mean + inside, "core_removed": h - inside, "core_flipped": h - 2 * inside}[mode]
            out = act.clone()
            out[rows, task.answer_pos] = new
            return out

        with torch.no_grad(), hooks(model, [(core.site, by_hand)]):
            assert torch.allclose(own, torch.tensor(_task_metrics(model(task.clean), task)), atol=1e-5), mode


def test_prompts_of_different_token_lengths_across_models(planted, tmp_path):
    model, task, _ = planted
    other = interp.load(interp.build_tiny("gpt2", tmp_path / "g", seed=0))
    other.cfg.default_prepend_bos = False  # this copy tokenizes without BOS: one token fewer per prompt
    core = cores.extract(model, task, site=PLANT_SITE)
    other_core = cores.Core(torch.eye(other.cfg.d_model)[:, :2], torch.zeros(other.cfg.d_model), torch.ones(2),
                            "blocks.0.hook_resid_post", "identity")
    with pytest.raises(ValueError, match="tokenizes to 4 tokens in model A .* but 3 in model B .*matched positions"):
        cores.align(model, core, other, other_core, ["the cat runs", "the dog sees the key"])


def test_operators_on_a_model_and_transfer_through_self_alignment(planted):
    model, task, _ = planted
    core = cores.extract(model, task, site=PLANT_SITE)
    op = cores.fit_operator(model, core, task, target=core)  # a site onto itself: the identity
    assert torch.allclose(op.matrix, torch.eye(core.k), atol=1e-4) and op.r2 > 0.9999
    assert op.meta["kind"] == "site"
    al = cores.align(model, core, model, core, _prompts(40))
    moved = cores.transfer(op, al, al)
    assert cores.score_operator(model, moved, core, core, task) > 0.9999
    over_time = cores.fit_operator(model, core, task.clean, start=1)
    assert over_time.matrix.shape == (core.k, core.k) and over_time.eigenvalues.shape == (core.k,)
    with pytest.raises(ValueError, match="lag"):
        cores.fit_operator(model, core, task.clean, lag=20)


def _prompts(n: int) -> list[str]:
    words = list(interp.model.building.DEFAULT_WORDS)
    g = torch.Generator().manual_seed(1)
    return [" ".join(words[int(i)] for i in torch.randint(len(words), (6,), generator=g)) for _ in range(n)]


def test_results_render(planted, tmp_path):
    from interp.views import plot

    model, task, _ = planted
    core = cores.extract(model, task, site=PLANT_SITE)
    grid = cores.validate(model, core, task, n_random=2, progress=False)
    bars = cores.ValidationBars(grid)
    fig = plot.render(bars)
    assert len(fig.data) == 2  # the core beside the random control
    assert list(fig.data[0].y) == pytest.approx(grid.values[:, 0, 1].tolist())
    assert list(fig.data[1].error_y.array) == pytest.approx(grid.values[:, 2, 1].tolist())
    again = results.load(results.save(bars, tmp_path / "bars.safetensors"))
    assert torch.equal(again.grid.values, grid.values) and again.metric == "binary_accuracy"
    assert len(plot.render(core).data) == 1
    op = analysis.operator_from(torch.randn(40, 2), torch.randn(40, 2), source="s", target="s", meta={"reference": [[0.5, 0.1]]})
    assert len(plot.render(op).data) == 3  # unit circle, reference, operator
