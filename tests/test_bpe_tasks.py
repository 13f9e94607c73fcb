"""IOI and SVA over a real BPE tokenizer (`interp.tasks.bpe`), checked on SmolLM2-135M."""

from __future__ import annotations

import pytest
import torch

import interp
from interp import tasks
from interp.errors import InterpError
from interp.tasks import bpe


@pytest.fixture(scope="module")
def model(smollm2):
    return smollm2  # the session's SmolLM2-135M-Instruct (tests/conftest.py)


@pytest.fixture(scope="module")
def ioi_tasks(model):
    return {s: bpe.ioi(model, 16, split=s, seed=0) for s in bpe.SPLITS_IOI}


@pytest.fixture(scope="module")
def sva_tasks(model):
    return {s: bpe.sva(model, 16, split=s, seed=0) for s in bpe.SPLITS_SVA}


def _logit_diffs(model, tasks_):
    """correct - incorrect logit at answer_pos, for the clean and the corrupt rows of each task
    (tasks of one row length), in one forward pass."""
    rows = torch.cat([t.clean for t in tasks_] + [t.corrupt for t in tasks_])
    correct = torch.cat([t.correct for t in tasks_] * 2)
    incorrect = torch.cat([t.incorrect for t in tasks_] * 2)
    with torch.no_grad():
        logits = model(rows)[:, -1]
    diff = (logits.gather(1, correct[:, None]) - logits.gather(1, incorrect[:, None]))[:, 0]
    sizes = [len(t) for t in tasks_] * 2
    parts = diff.split(sizes)
    return parts[: len(tasks_)], parts[len(tasks_):]


def _check_shape(model, task):
    tok = model.tokenizer
    n, width = task.clean.shape
    assert task.corrupt.shape == (n, width)
    assert (task.answer_pos == width - 1).all()
    assert task.metric == "logit_diff"
    if tok.pad_token_id is not None and tok.pad_token_id != tok.bos_token_id:
        assert not (task.clean == tok.pad_token_id).any() and not (task.corrupt == tok.pad_token_id).any()
    bos = model.to_tokens("x")[0, 0].item()
    assert (task.clean[:, 0] == bos).all() and (task.clean[:, 1:] != bos).all()
    for i, text in enumerate(task.text):  # the row is exactly the model's tokenization of its text
        assert model.to_tokens(text)[0].tolist() == task.clean[i].tolist()


def test_vocabulary_filtering(model):
    v = bpe.vocabulary(model)
    assert len(v["names_train"]) >= 40 and len(v["names_heldout"]) >= 10
    assert len(v["places"]) >= 10 and len(v["objects"]) >= 10 and len(v["nouns"]) >= 20
    assert not set(v["names_train"]) & set(v["names_heldout"])
    for w in v["names"] + v["places"]:
        assert len(model.tokenizer.encode(" " + w, add_special_tokens=False)) == 1
    assert "Mary" in v["names"]


@pytest.mark.parametrize("split", bpe.SPLITS_IOI)
def test_ioi_rows(model, ioi_tasks, split):
    task = ioi_tasks[split]
    _check_shape(model, task)
    tok = model.tokenizer
    for i in range(len(task)):
        io, s = task.meta["io"][i], task.meta["s"][i]
        assert tok.decode([task.correct[i].item()]) == " " + io
        assert tok.decode([task.incorrect[i].item()]) == " " + s
        a, b, s2 = task.meta["a_pos"][i], task.meta["b_pos"][i], task.meta["s2_pos"][i]
        first = (io, s) if task.meta["order"][i] == "ABBA" else (s, io)
        assert tok.decode(task.clean[i, [a, b]]) == f" {first[0]} {first[1]}"
        assert task.clean[i, s2] == task.incorrect[i]
        diff = (task.clean[i] != task.corrupt[i]).nonzero()[:, 0].tolist()
        assert diff == sorted([a, b])  # ABC: only the first-clause names change
        swapped = {tok.decode([t]).strip() for t in task.corrupt[i, [a, b]].tolist()}
        assert not swapped & {io, s} and len(swapped) == 2
    if split.startswith(("abba", "baba")):
        assert set(task.meta["order"]) == {split[:4].upper()}
    else:
        assert set(task.meta["order"]) == {"ABBA", "BABA"}


def test_ioi_orders_differ(ioi_tasks):
    abba, baba = ioi_tasks["abba"], ioi_tasks["baba"]
    for task, io_first in ((abba, True), (baba, False)):
        for i in range(len(task)):
            a = task.clean[i, task.meta["a_pos"][i]]
            assert (a == task.correct[i]).item() is io_first


def test_ioi_name_splits_disjoint(model):
    train = bpe.ioi(model, 64, split="mixed", seed=1)
    held = bpe.ioi(model, 64, split="mixed_heldout", seed=1)
    _, heldout_names = bpe.name_split(bpe.single_token_words(model, bpe.NAMES))
    ids = lambda names: {model.tokenizer.encode(" " + w, add_special_tokens=False)[0] for w in names}
    held_ids, train_ids = ids(heldout_names), ids(train.meta["names"])
    assert set(held.meta["names"]) == set(heldout_names)
    assert not set(torch.cat([train.clean, train.corrupt]).flatten().tolist()) & held_ids
    assert not set(torch.cat([held.clean, held.corrupt]).flatten().tolist()) & train_ids


def test_deterministic_and_make(model):
    a = bpe.ioi(model, 8, split="abba", seed=3)
    b = tasks.make("ioi", split="abba", n=8, seed=3, model=model)
    assert torch.equal(a.clean, b.clean) and a.text == b.text
    assert not torch.equal(a.clean, bpe.ioi(model, 8, split="abba", seed=4).clean)
    c = tasks.make("sva", split="pp_mismatch", n=8, tokenizer=model.tokenizer)  # raw tokenizer: BOS + encode
    assert torch.equal(c.clean, bpe.sva(model, 8, split="pp_mismatch").clean)
    assert tasks.make("ioi", split="train", n=4).clean.shape[0] == 4  # the zoo is unchanged
    with pytest.raises(InterpError, match="split='train'"):
        tasks.make("ioi", split="train", n=4, model=model)
    with pytest.raises(InterpError, match="dyck"):
        tasks.make("dyck", split="id", model=model)


@pytest.mark.parametrize("split", bpe.SPLITS_SVA)
def test_sva_rows(model, sva_tasks, split):
    task = sva_tasks[split]
    _check_shape(model, task)
    tok = model.tokenizer
    kind = split.split("_")[0]
    assert set(task.meta["kind"]) == {kind}
    for i in range(len(task)):
        number = task.meta["number"][i]
        assert tok.decode([task.correct[i].item()]) == (" is" if number == "sg" else " are")
        assert tok.decode([task.incorrect[i].item()]) == (" are" if number == "sg" else " is")
        p = task.meta["subject_pos"][i]
        diff = (task.clean[i] != task.corrupt[i]).nonzero()[:, 0].tolist()
        assert diff == [p]  # only the subject's number flips
        head, flipped = tok.decode([task.clean[i, p].item()]), tok.decode([task.corrupt[i, p].item()])
        pair = next(pr for pr in bpe.NOUNS if " " + pr[number == "pl"] == head)
        assert flipped == " " + pair[number == "sg"]
        att = task.meta["attractor_number"][i]
        if kind == "none":
            assert att is None and task.clean.shape[1] == 3
        else:
            assert (att == number) == split.endswith("_match")


def test_real_model_solves_ioi(model, ioi_tasks):
    splits = ("abba", "baba", "mixed_heldout")
    cleans, corrupts = _logit_diffs(model, [ioi_tasks[s] for s in splits])
    # measured on 16 rows each (seed 0): 0.81 / 1.00 / 0.88 of rows with IO - S > 0 (0.90 pooled)
    assert (torch.cat(cleans) > 0).float().mean() >= 0.8
    for split, clean, corrupt in zip(splits, cleans, corrupts):
        assert (clean > 0).float().mean() >= 0.7, (split, clean)
        assert clean.mean() > corrupt.mean() + 2, split  # measured gap ~5-7 nats


def test_real_model_agrees_without_attractor(model, sva_tasks):
    (clean,), (corrupt,) = _logit_diffs(model, [sva_tasks["none"]])
    assert (clean > 0).float().mean() >= 0.8, clean  # measured 0.94 (15 of 16 rows)
    assert (corrupt < 0).float().mean() >= 0.8  # the flipped subject prefers the other verb


def test_bad_input(model):
    with pytest.raises(InterpError, match="Supercalifragilistic"):
        bpe.ioi(model, 4, names=["Mary", "John", "Supercalifragilistic", "Anna"])
    with pytest.raises(InterpError, match="needs at least 4"):
        bpe.ioi(model, 4, split="mixed_heldout", names=["Mary", "John", "Anna", "David"])
    with pytest.raises(InterpError, match="nouns"):
        bpe.sva(model, 4, nouns=[("key", "keys"), ("hippopotamus", "hippopotami")])
    with pytest.raises(InterpError, match="same token length"):
        bpe.ioi(model, 4, templates=[0, 2])  # 14 vs 15 tokens
    with pytest.raises(InterpError, match=r"same token length.*\[\d+, \d+\]"):
        bpe.from_prompts(model, ["The key", "The keys to the"], ["The keys", "The key to the"], [" is", " are"],
                         [" are", " is"])
    with pytest.raises(InterpError, match="one"):
        bpe.from_prompts(model, ["The key"], ["The keys"], [" isn't"], [" are"])
    with pytest.raises(InterpError, match="split="):
        bpe.sva(model, 4, split="pp")
    ok = bpe.from_prompts(model, ["The key", "The dog"], ["The keys", "The dogs"], [" is", " is"], [" are", " are"])
    assert ok.clean.shape == (2, 3) and (ok.answer_pos == 2).all()


@pytest.mark.real
def test_gemma3_tasks():
    gemma = interp.load("gemma3-270m")
    assert len(bpe.vocabulary(gemma)["names_train"]) >= 40
    ioi, sva = bpe.ioi(gemma, 8, split="mixed", seed=0), bpe.sva(gemma, 8, split="none", seed=0)
    for task in (ioi, sva):
        _check_shape(gemma, task)
        assert (task.clean[:, 0] == gemma.tokenizer.bos_token_id).all()
    (ioi_clean,), _ = _logit_diffs(gemma, [ioi])
    (sva_clean,), _ = _logit_diffs(gemma, [sva])
    assert (ioi_clean > 0).float().mean() >= 0.75  # measured 1.00 on 32 rows of every ioi split
    assert (sva_clean > 0).float().mean() >= 0.75  # measured 1.00 on 32 rows


def test_named_positions_match_the_tokens(model, ioi_tasks, sva_tasks):
    for split, t in ioi_tasks.items():
        assert list(t.positions) == ["IO", "S1", "S2", "END"], split
        rows = torch.arange(len(t))
        assert torch.equal(t.clean[rows, t.positions["IO"]], t.correct)
        assert torch.equal(t.clean[rows, t.positions["S1"]], t.incorrect)
        assert torch.equal(t.clean[rows, t.positions["S2"]], t.incorrect)
        assert (t.positions["END"] == t.answer_pos).all()
        assert torch.equal(t.positions["S2"], torch.tensor(t.meta["s2_pos"]))
        if split.startswith("abba"):
            assert torch.equal(t.positions["IO"], torch.tensor(t.meta["a_pos"]))
    for split, t in sva_tasks.items():
        want = ["subject", "END"] if split == "none" else ["subject", "attractor", "END"]
        assert list(t.positions) == want, split
        rows = torch.arange(len(t))
        subject = t.clean[rows, t.positions["subject"]]
        assert (subject != t.corrupt[rows, t.positions["subject"]]).all()  # the corruption flips the head noun
        assert torch.equal(t.positions["subject"], torch.tensor(t.meta["subject_pos"]))
        if "attractor" in t.positions:
            assert torch.equal(t.positions["attractor"], torch.tensor(t.meta["attractor_pos"]))
    sliced = ioi_tasks["mixed"][[3, 1]]
    assert torch.equal(sliced.positions["S2"], ioi_tasks["mixed"].positions["S2"][[3, 1]])
    assert "positions=[IO, S1, S2, END]" in repr(ioi_tasks["mixed"])
