"""Property-based fuzzing of the public entry points with careless in-memory inputs: random shapes,
ranks and dtypes, NaN and inf, empty batches, positions and ids out of range, on the tiny models.

Each generated case ends one of two ways: an InterpError (a refusal that names what was wrong),
or a correct result, checked against a plain forward or an invariant where that is cheap (a patch of
a run into itself, an all-ones mask, a steer or feature edit of strength 0, a full-rank SVD change
nothing). Where the test can tell, it also asserts which of the two the input deserves. A hang
(SIGALRM after LIMIT_S) or any other exception fails. Fixed seed (derandomize), so CI sees the
same cases every run."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import interp
from interp import circuits, lens, masking, patching, run, simplify, steering, tasks
from interp.errors import InterpError
from interp.features import Dictionary, attribute, feature_acts, feature_edit
from interp.interventions import Patch
from interp.masking import HeadMask
from test_fuzz_files import no_hang  # the SIGALRM guard: a case past LIMIT_S fails instead of hanging

features_train = importlib.import_module("interp.features.train")  # the module (interp.features.train is its function)

LIMIT_S = 30  # one case past this is a hang


def fuzz(cases: int):
    """A fixed-seed run of `cases` generated cases."""
    return settings(max_examples=cases, derandomize=True, deadline=timedelta(seconds=LIMIT_S), database=None,
                    print_blob=False, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

MODELS = ("gpt2", "llama")


def outcome(call):
    """(True, result), or (False, error) for an InterpError; anything else (a hang too) propagates."""
    with no_hang(LIMIT_S):
        try:
            out = call()
        except InterpError as err:
            assert 0 < len(str(err)) < 400, f"a refusal of {len(str(err))} characters: {err}"
            event("refused")  # --hypothesis-show-statistics counts both ends
            return False, err
    event("ran")
    return True, out


@pytest.fixture(scope="module", autouse=True)
def as_a_user_calls_it():
    """The entry points as a user meets them: without the jaxtyping checks the tests run under
    (a wrong shape would otherwise fail there, before the entry point's own check)."""
    from jaxtyping import config

    before = config.jaxtyping_disable
    config.update("jaxtyping_disable", True)
    yield
    config.update("jaxtyping_disable", before)


def close(a, b, tol=1e-4) -> bool:
    return a.shape == b.shape and torch.allclose(a.float(), b.float(), atol=tol, rtol=tol, equal_nan=False)


class Zoo(tuple):
    """(models by family, task); shown in a failing case's report by name only."""

    def __repr__(self) -> str:
        return "zoo"


@pytest.fixture(scope="module")
def zoo(english_dirs):
    """The tiny English models, loaded once, and a small IOI task that fits both."""
    models = {f: interp.load(english_dirs[f]) for f in MODELS}
    return Zoo((models, tasks.make("ioi", split="test", n=3, seed=0)))


# ---------------------------------------------------------------------------------------------
# token rows: run.logits / cache / with_grad / evaluate / reference


# a careless input is a sound one with at most one fault; "none" is drawn about half the time
TOKEN_FAULTS = ("none",) * 10 + ("rank3", "empty_batch", "empty_pos", "too_long", "negative", "past_vocab", "float",
                                 "nan", "bool", "int16", "uint8")
SOUND_VARIANTS = ("rank1", "int32", "at_ctx", "one_token")  # unusual but sound


@st.composite
def token_tensors(draw, d_vocab: int, n_ctx: int):
    """(tokens, fault): token ids of a random size, with one fault or none ("none" or a sound variant)."""
    fault = draw(st.sampled_from(TOKEN_FAULTS + SOUND_VARIANTS))
    batch, n_pos = draw(st.integers(1, 3)), draw(st.integers(2, 12))
    n_pos = {"too_long": n_ctx + 1, "at_ctx": n_ctx, "empty_pos": 0, "one_token": 1}.get(fault, n_pos)
    batch = 0 if fault == "empty_batch" else batch
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    t = torch.randint(0, min(d_vocab, 255), (batch, n_pos), generator=gen)
    if fault == "negative":
        t[-1, -1] = -1
    if fault == "past_vocab":
        t[0, 0] = d_vocab + draw(st.integers(0, 10))
    t = {"rank3": t[None], "rank1": t[0], "float": t.float(), "nan": t.float().fill_(float("nan")), "bool": t.bool(),
         "int16": t.short(), "uint8": t.to(torch.uint8), "int32": t.int()}.get(fault, t)
    return t, fault


def _plain(model, tokens):
    rows = tokens.long().view(-1, tokens.shape[-1])
    with torch.no_grad():
        return model(rows)


@fuzz(60)
@given(data=st.data(), family=st.sampled_from(MODELS),
       entry=st.sampled_from(["logits", "cache", "with_grad", "evaluate", "reference"]))
def test_token_rows_are_refused_or_run_like_a_plain_forward(zoo, data, family, entry):
    model = zoo[0][family]
    tokens, fault = data.draw(token_tensors(model.cfg.d_vocab, model.cfg.n_ctx))
    valid = fault == "none" or fault in SOUND_VARIANTS
    metric = lambda logits: logits[:, -1, :3].sum()  # noqa: E731
    calls = {
        "logits": lambda: run.logits(model, tokens),
        "cache": lambda: run.cache(model, tokens, ["blocks.0.hook_resid_post"])[0],
        "with_grad": lambda: run.with_grad(model, tokens, ["blocks.0.hook_resid_post"])[0].detach(),
        "evaluate": lambda: run.evaluate(model, tokens, [[]], metric, progress=False),
        "reference": lambda: run.reference(model, ["blocks.0.hook_resid_post"], "mean", tokens),
    }
    ok, out = outcome(calls[entry])
    valid = valid and (entry not in ("evaluate", "reference") or tokens.ndim == 2)
    assert ok == valid, f"{entry} of {fault} {tokens.dtype} {tuple(tokens.shape)}: {'ran' if ok else out}"
    if not ok:
        return
    plain = _plain(model, tokens)
    if entry == "evaluate":
        assert close(out, metric(plain).reshape(1))
    elif entry == "reference":
        assert out["blocks.0.hook_resid_post"].values.shape == (tokens.shape[1], model.cfg.d_model)
    else:
        assert close(out.reshape(plain.shape), plain)


def faults(*names: str, sound: int = 1):
    """One of `names` (each a fault), or "none" about as often as all of them together."""
    return st.sampled_from(("none",) * max(sound, len(names)) + names)


@fuzz(20)
@given(data=st.data(), family=st.sampled_from(MODELS), entry=st.sampled_from(["cache", "evaluate"]),
       fault=faults("float", "bool", "short", "negative", "past", "2d"))
def test_answer_positions_are_refused_or_read_where_they_point(zoo, data, family, entry, fault):
    model, task = zoo[0][family], zoo[1]
    tokens = task.clean
    batch, n_pos = tokens.shape
    read = torch.tensor(data.draw(st.lists(st.integers(0, n_pos - 1), min_size=batch, max_size=batch)))
    pos = {"none": read, "float": read.float(), "bool": read > 0, "short": read[:-1], "negative": read - n_pos,
           "past": read + n_pos, "2d": read[None]}[fault]
    metric = lambda logits: logits[torch.arange(batch), read, :3].sum()  # noqa: E731
    if entry == "cache":
        ok, out = outcome(lambda: run.cache(model, tokens, [], answer_pos=pos)[0])
    else:
        ok, out = outcome(lambda: run.evaluate(model, tokens, [[]], metric, answer_pos=pos, progress=False))
    assert ok == (fault == "none"), f"answer_pos {fault}: {'ran' if ok else out}"
    plain = _plain(model, tokens)
    rows = torch.arange(batch)
    if ok and entry == "cache":
        assert close(out[rows, read], plain[rows, read])
    elif ok:
        assert close(out, metric(plain).reshape(1))


# ---------------------------------------------------------------------------------------------
# interventions: patches and head masks


@fuzz(30)
@given(family=st.sampled_from(MODELS), site=st.sampled_from(["z", "resid_pre", "pattern", "mlp_out"]),
       layer=st.integers(0, 1), pos=st.one_of(st.none(), st.integers(-12, 12)), head=st.one_of(st.none(), st.integers(0, 3)),
       fault=faults("site", "layer", "pos_past", "pos_before", "head", "short_source", "source_rank"))
def test_a_patch_of_a_run_into_itself_changes_nothing_or_is_refused(zoo, family, site, layer, pos, head, fault):
    model, task = zoo[0][family], zoo[1]
    tokens = task.clean
    n_pos = tokens.shape[1]
    name = interp.sites.hook_name(site, layer)
    kind = interp.sites.kind_of(name)
    _, acts = run.cache(model, tokens, [name])
    src = acts[name]
    head = head if kind in ("head", "pattern") else None
    if fault == "site":
        name = name.replace("hook_", "hook_x")
    elif fault == "layer":
        name = interp.sites.hook_name(site, model.cfg.n_layers)
    elif fault == "pos_past":
        pos = n_pos + abs(pos or 0)
    elif fault == "pos_before":
        pos = -n_pos - 1 - abs(pos or 0)
    elif fault == "head":
        head = model.cfg.n_heads + (head or 0)
        name = interp.sites.hook_name("z", layer)
        src = run.cache(model, tokens, [name])[1][name]
    elif fault == "short_source":
        src = src[:, :-1] if kind != "pattern" else src[..., :-1, :-1]
    elif fault == "source_rank":
        src = src[0]
    ok, out = outcome(lambda: run.logits(model, tokens, [Patch(name, src, pos=pos, head=head)]))
    assert ok == (fault == "none"), f"{fault}: patch {name} pos={pos} head={head}: {'ran' if ok else out}"
    if ok:
        assert close(out, _plain(model, tokens)), "a run patched into itself changed"


@fuzz(20)
@given(family=st.sampled_from(MODELS), fill=st.sampled_from(["ones", "random"]), mlps=st.booleans(),
       ablation=st.sampled_from(["zero", "mean", "resample"]),
       fault=faults("rows", "cols", "rank1", "nan", "inf", "above_one", "negative", "mlps_short", "mlps_nan"))
def test_a_head_mask_is_refused_or_all_ones_changes_nothing(zoo, family, fill, mlps, ablation, fault):
    model, task = zoo[0][family], zoo[1]
    L, H = model.cfg.n_layers, model.cfg.n_heads
    heads = torch.ones(L, H) if fill == "ones" else torch.rand(L, H, generator=torch.Generator().manual_seed(0))
    mlp = torch.ones(L) if mlps or fault.startswith("mlps") else None
    heads = {"rows": heads[:-1], "cols": torch.ones(L, H + 1), "rank1": heads.flatten(), "nan": heads.index_fill(0, torch.tensor([0]), float("nan")),
             "inf": heads.index_fill(0, torch.tensor([0]), float("inf")), "above_one": heads + 1,
             "negative": heads - 2}.get(fault, heads)
    mlp = {"mlps_short": torch.ones(L - 1), "mlps_nan": torch.full((L,), float("nan"))}.get(fault, mlp)
    reference = {"zero": None, "mean": task.clean, "resample": task.corrupt}[ablation]

    def call():
        with masking.apply(model, HeadMask(heads, mlp), ablation=ablation, reference=reference):
            return run.logits(model, task.clean)

    ok, out = outcome(call)
    assert ok == (fault == "none"), f"{fault} mask {tuple(heads.shape)}: {'ran' if ok else out}"
    if ok and fill == "ones":
        assert close(out, _plain(model, task.clean))


# ---------------------------------------------------------------------------------------------
# patching, attribution, EAP and circuit scores on careless tasks


def careless_task(task, fault: str):
    """`task` with one fault, built as a user would (the Task checks what it can)."""
    t = task[[0]] if fault == "one_row" else task[[]] if fault == "empty" else task
    clean, corrupt = t.clean, t.corrupt
    clean, corrupt = {"float": (clean.float(), corrupt.float()), "3d": (clean[None], corrupt[None]),
                      "same": (clean, clean), "past_vocab": (clean + 10_000, corrupt)}.get(fault, (clean, corrupt))
    return interp.Task(t.name, t.split, clean, corrupt, t.correct, t.incorrect, t.answer_pos, t.text)


@fuzz(20)
@given(family=st.sampled_from(MODELS), site=st.sampled_from(["z", "resid_pre", "pattern"]), by_pos=st.booleans(),
       method=st.sampled_from(["activation", "attribution"]),
       fault=faults("empty", "float", "3d", "past_vocab", "site", "mismatch", sound=6) | st.sampled_from(["same", "one_row"]))
def test_patching_refuses_careless_tokens_and_patches_a_run_into_itself_to_its_metric(zoo, family, site, by_pos, method,
                                                                                       fault):
    model, task = zoo[0][family], zoo[1]
    ok_task, t = outcome(lambda: careless_task(task, fault))
    if not ok_task:
        return
    clean, corrupt = t.clean, (t.corrupt[:, :-1] if fault == "mismatch" else t.corrupt)
    rows = torch.arange(len(t))
    metric = lambda logits: logits[rows, t.answer_pos, 0].mean()  # noqa: E731
    fn = patching.activation_patch if method == "activation" else patching.attribution_patch
    kw = {"progress": False} if method == "activation" else {}
    site = "zz" if fault == "site" else site
    ok, grid = outcome(lambda: fn(model, clean, corrupt, site=site, metric=metric, by_pos=by_pos, **kw))
    assert ok == (fault in ("none", "same", "one_row")), f"{fault}, {site}: {'ran' if ok else grid}"
    if ok and fault == "same":  # clean patched into clean: every cell is the clean metric (attribution: no change)
        want = grid.meta["clean_metric"] if method == "activation" else 0.0
        assert torch.allclose(grid.values, torch.full_like(grid.values, want), atol=1e-4)


@fuzz(12)
@given(family=st.sampled_from(MODELS), method=st.sampled_from(["eap", "eap-ig"]),
       fault=faults("empty", "float", "3d", "past_vocab", "steps", "batch_size") | st.just("one_row"))
def test_edge_attribution_refuses_careless_tasks(zoo, family, method, fault):
    model, task = zoo[0][family], zoo[1]
    ok_task, t = outcome(lambda: careless_task(task, fault))
    if not ok_task:
        return
    kw = {"batch_size": 0 if fault == "batch_size" else 32, "progress": False}
    call = (lambda: circuits.eap(model, t, **kw)) if method == "eap" else \
        (lambda: circuits.eap_ig(model, t, steps=0 if fault == "steps" else 2, **kw))
    ok, graph = outcome(call)
    sound = fault in ("none", "one_row") or (fault == "steps" and method == "eap")
    assert ok == sound, f"{method} with {fault}: {'ran' if ok else graph}"
    if ok:
        assert len(graph) and torch.isfinite(graph.scores).all()


@pytest.fixture(scope="module")
def scored(zoo):
    model, task = zoo[0]["gpt2"], zoo[1]
    return circuits.eap(model, task, progress=False)


@fuzz(10)
@given(k=st.integers(1, 40), random=st.sampled_from([0, 1]),
       fault=faults("empty", "nan", "inf", "another_model", "random", "fraction"))
def test_circuit_scores_refuse_graphs_with_nothing_to_rank(zoo, scored, k, random, fault):
    model, task = zoo[0]["gpt2"], zoo[1]
    g = scored.top(k)
    if fault in ("nan", "inf"):
        scores = g.scores.clone()
        scores[-1] = float(fault)
        g = type(g)(g.senders, g.receivers, scores, g.meta)
    elif fault == "empty":
        g = type(g)((), (), torch.zeros(0), g.meta)
    elif fault == "another_model":
        g = circuits.eap(zoo[0]["llama"], task, progress=False).top(k)
    fractions = (0.1, 2.0) if fault == "fraction" else (0.1, 1.0)
    ok, grid = outcome(lambda: circuits.circuit_scores(model, task, {"g": g}, random=-1 if fault == "random" else random,
                                                       fractions=fractions, progress=False))
    assert ok == (fault == "none"), f"{fault}: {'ran' if ok else grid}"
    if ok:
        assert "g" in grid.meta["cpr"]


# ---------------------------------------------------------------------------------------------
# steering generation and attention simplifiers


@fuzz(20)
@given(family=st.sampled_from(MODELS), n_words=st.lists(st.integers(1, 8), min_size=1, max_size=3),
       max_new=st.integers(1, 4), strength=st.sampled_from([0.0, 1.0]),
       fault=faults("no_prompts", "empty_prompt", "too_long", "tensor", "max_new", "past_context", "nan", "inf"))
def test_generate_refuses_careless_prompts_and_a_zero_steer_changes_nothing(zoo, family, n_words, max_new, strength,
                                                                           fault):
    model = zoo[0][family]
    prompts = [" ".join(["the", "cat", "gave"] * 3)[: 4 * n] for n in n_words]
    prompts = {"no_prompts": [], "empty_prompt": [""], "too_long": [" ".join(["the"] * (model.cfg.n_ctx + 1))],
               "tensor": model.to_tokens(prompts[0])}.get(fault, prompts)
    max_new = {"max_new": 0, "past_context": model.cfg.n_ctx}.get(fault, max_new)
    strength = {"nan": float("nan"), "inf": float("inf")}.get(fault, strength)

    def call():
        axis = steering.axis_from_vector(torch.randn(model.cfg.d_model, generator=torch.Generator().manual_seed(0)),
                                         site="resid_post", layer=0)
        steer = steering.Steer(axis, "add", strength)
        return (steering.generate(model, prompts, steer, max_new_tokens=max_new, record=False),
                steering.generate(model, prompts, (), max_new_tokens=max_new, record=False))

    ok, out = outcome(call)
    assert ok == (fault in ("none", "empty_prompt")), f"{fault}: {'ran' if ok else out}"
    if ok:
        steered, plain = out
        assert len(steered.completions) == len(prompts)
        if strength == 0.0:
            assert steered.completions == plain.completions


@fuzz(12)
@given(family=st.sampled_from(MODELS), heads=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 3)), min_size=1,
                                                        max_size=3), full=st.booleans(),
       fault=faults("no_heads", "layer", "head", "rank0", "rank_big", "rank_float", "no_rows"))
def test_svd_simplifier_refuses_bad_heads_and_ranks_and_full_rank_changes_nothing(zoo, family, heads, full, fault):
    model, task = zoo[0][family], zoo[1]
    d_head = model.cfg.d_head
    rank = {"rank0": 0, "rank_big": d_head + 1, "rank_float": 1.5}.get(fault, d_head if full else 1)
    heads = {"no_heads": [], "layer": [(model.cfg.n_layers, 0)], "head": [(0, model.cfg.n_heads)]}.get(fault, heads)
    data = task[[]] if fault == "no_rows" else task
    ok, simp = outcome(lambda: simplify.svd(model, heads, data, rank=rank))
    assert ok == (fault == "none"), f"svd of {heads} at rank {rank} ({fault}): {'ran' if ok else simp}"
    if ok:
        logits = run.logits(model, task.clean, [simp])
        assert torch.isfinite(logits).all()
        if full:
            assert close(logits, _plain(model, task.clean), tol=1e-3)


# ---------------------------------------------------------------------------------------------
# dictionaries: fit, encode, train, feature edits, attribution graphs


@fuzz(20)
@given(n=st.integers(2, 40), d=st.integers(1, 12), transcoder=st.booleans(),
       fault=faults("no_rows", "one_row", "no_width", "long", "nan", "inf", "zeros", "rank1", "rank3", "lengths"),
       encode_fault=faults("width", "rank0"))
def test_dictionary_fit_and_encode_refuse_degenerate_activations(n, d, transcoder, fault, encode_fault):
    gen = torch.Generator().manual_seed(n * 100 + d)
    x, y = torch.randn(n, d, generator=gen), torch.randn(n, d + 1, generator=gen) if transcoder else None
    x = {"no_rows": x[:0], "one_row": x[:1], "no_width": x[:, :0], "long": x.long(), "nan": x.index_fill(0, torch.tensor([0]), float("nan")),
         "inf": x.index_fill(1, torch.tensor([0]), float("inf")), "zeros": torch.zeros_like(x), "rank1": x.flatten(),
         "rank3": x[None]}.get(fault, x)
    if fault == "lengths":
        y = torch.randn(n + 1, d, generator=gen)
    elif fault == "one_row" and y is not None:
        y = y[:1]
    recipe = features_train.Recipe(n_features=8, k=2, tokens=64)
    ok, dic = outcome(lambda: features_train.fit(x, y, site_in="blocks.0.hook_resid_post", recipe=recipe, batch=16))
    assert ok == (fault == "none"), f"fit on {fault} {tuple(x.shape)}: {'ran' if ok else dic}"
    if not ok:
        return
    probe = {"width": torch.randn(3, d + 1), "rank0": torch.tensor(1.0)}.get(encode_fault, torch.randn(2, 3, d))
    ok, f = outcome(lambda: dic.encode(probe))
    assert ok == (encode_fault == "none"), f"encode {encode_fault}: {'ran' if ok else f}"
    if ok:
        assert f.shape == (2, 3, 8) and torch.isfinite(f).all()
        assert close(f, dic.encode(probe.flatten(0, 1)).view(2, 3, 8))


@fuzz(8)
@given(rows=st.integers(1, 3), fault=faults("no_rows", "none_valid", "some_rows_empty", "int_valid", "shape", "float_tokens"))
def test_dictionary_training_refuses_rows_with_nothing_to_train_on(zoo, tmp_path_factory, rows, fault):
    model, task = zoo[0]["gpt2"], zoo[1]
    tokens = task.clean[: 0 if fault == "no_rows" else rows]
    valid = torch.ones_like(tokens, dtype=torch.bool)
    valid = {"none_valid": ~valid, "some_rows_empty": valid.index_fill(0, torch.tensor([0]), False),
             "int_valid": valid.long(), "shape": valid[:, :-1]}.get(fault, valid)
    tokens = tokens.float() if fault == "float_tokens" else tokens
    recipe = features_train.Recipe(n_features=8, k=2, tokens=40, rows=2, checkpoint_every=100)
    out = tmp_path_factory.mktemp("dict")
    ok, dicts = outcome(lambda: features_train.train(model, ["blocks.0.hook_resid_post"], tokens, valid, out,
                                                     recipe=recipe, progress=False))
    sound = fault == "none" or (fault == "some_rows_empty" and rows > 1)
    assert ok == sound, f"{rows} rows, {fault}: {'ran' if ok else dicts}"
    if ok:
        (d,) = dicts.values()
        assert torch.isfinite(d.W_dec).all() and torch.isfinite(d.threshold).all()
    else:
        assert not list(out.iterdir()), "a refused training left files behind"


@pytest.fixture(scope="module")
def dictionaries(zoo):
    model = zoo[0]["gpt2"]
    names = ["blocks.0.hook_resid_post", "blocks.0.ln2.hook_normalized", "blocks.0.hook_mlp_out"]
    flat = {n: a.flatten(0, 1) for n, a in run.cache(model, zoo[1].clean, names)[1].items()}
    recipe = features_train.Recipe(n_features=8, k=2, tokens=64)
    sae = features_train.fit(flat[names[0]], site_in=names[0], recipe=recipe, batch=16)
    wide = features_train.fit(torch.randn(40, model.cfg.d_model + 3), site_in=names[0], recipe=recipe, batch=16)
    tc = features_train.fit(flat[names[1]], flat[names[2]], site_in=names[1], site_out=names[2], recipe=recipe, batch=16)
    return {"sae": sae, "wide": wide, "transcoder": tc}


@fuzz(20)
@given(which=st.sampled_from(["sae", "transcoder"]), features=st.lists(st.integers(0, 7), min_size=1, max_size=3),
       mode=st.sampled_from(["steer", "ablate", "patch"]), positions=st.one_of(st.none(), st.integers(-12, 12)),
       fault=faults("wide", "feature", "no_features", "mode", "pos_past", "3d", "float", "empty"))
def test_feature_edits_refuse_other_widths_and_positions_and_a_zero_steer_changes_nothing(zoo, dictionaries, which,
                                                                                         features, mode, positions,
                                                                                         fault):
    model, task = zoo[0]["gpt2"], zoo[1]
    d = dictionaries["wide" if fault == "wide" else which]
    tokens = {"3d": task.clean[None], "float": task.clean.float(), "empty": task.clean[:0]}.get(fault, task.clean)
    n_pos = task.clean.shape[1]
    features = {"feature": [8], "no_features": []}.get(fault, features)
    mode = "boost" if fault == "mode" else mode
    positions = n_pos + abs(positions or 0) if fault == "pos_past" else positions

    def call():
        return run.logits(model, tokens, [feature_edit(model, tokens, d, features, mode, 0.0, positions)])

    ok, out = outcome(call)
    assert ok == (fault == "none"), f"{which} {features} {mode} at {positions}, {fault}: {'ran' if ok else out}"
    if ok and mode == "steer":
        assert close(out, _plain(model, task.clean))
    ok, acts = outcome(lambda: feature_acts(model, tokens, d))
    assert ok == (fault not in ("wide", "3d", "float", "empty"))
    if ok:
        assert acts.shape == (*tokens.shape, 8)


@fuzz(8)
@given(prompt=st.one_of(st.sampled_from(["", " ", "the cat", "mary gave a"]), st.lists(st.integers(-1, 300), max_size=5)),
       layers=st.sampled_from([(0,), (0,), (0, 0), ()]))
def test_attribution_graphs_refuse_empty_prompts(zoo, dictionaries, prompt, layers):
    model = zoo[0]["gpt2"]
    given_prompt = prompt if isinstance(prompt, str) else torch.tensor(prompt, dtype=torch.long)
    ok, g = outcome(lambda: attribute(model, given_prompt, [dictionaries["transcoder"] for _ in layers],
                                      max_feature_nodes=4, progress=False))
    bos = model.tokenizer.bos_token_id
    ids = model.to_tokens(prompt)[0].tolist() if isinstance(prompt, str) else prompt
    sound = len(layers) == 1 and ids and all(0 <= i < model.cfg.d_vocab for i in ids) and set(ids) != {bos}
    assert ok == bool(sound), f"graph of {prompt!r} with {len(layers)} transcoders: {'ran' if ok else g}"
    if ok:
        assert len(g) > 0


# ---------------------------------------------------------------------------------------------
# lens


@fuzz(15)
@given(family=st.sampled_from(MODELS), entry=st.sampled_from(["logit_lens", "dla", "top"]), k=st.integers(1, 5),
       pos=st.integers(-5, 5), fault=faults("no_rows", "k", "pos", "3d", "float"))
def test_lens_refuses_careless_inputs(zoo, family, entry, k, pos, fault):
    model, task = zoo[0][family], zoo[1]
    if entry == "top":
        tokens = {"3d": task.clean[None, :1], "float": task.clean[:1].float(), "no_rows": task.clean[:0]}.get(
            fault, task.clean[:1])
        k = {"k": 0}.get(fault, k)
        pos = {"pos": task.clean.shape[1] + pos % 5}.get(fault, pos)
        ok, out = outcome(lambda: lens.lens_top_tokens(model, tokens, k=k, pos=pos))
        assert ok == (fault == "none"), f"top tokens, {fault}: {'ran' if ok else out}"
        if ok:
            assert len(out) == k * (2 * model.cfg.n_layers + 1)
        return
    ok_task, t = outcome(lambda: careless_task(task, "empty" if fault == "no_rows" else fault))
    if not ok_task:
        return
    fn = lens.logit_lens if entry == "logit_lens" else lens.direct_logit_attribution
    ok, grid = outcome(lambda: fn(model, t))
    assert ok == (fault in ("none", "k", "pos")), f"{entry} with {fault}: {'ran' if ok else grid}"
    if ok:
        assert torch.isfinite(grid.values).all()
