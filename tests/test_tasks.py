"""Invariants of the task generators: determinism, disjoint splits, well-formed rows, errors."""

from __future__ import annotations

import dataclasses
from functools import partial

import pytest
import torch

from interp import tasks
from interp.tasks import BOS_ID, PAD_ID, dyck, english, markov, modular
from interp.tasks.base import SPECIALS

CHAIN = markov.random_chain(4, seed=0)
DYCK = dict(k=6, m=4, pool_size=300, max_len=20)  # small settings keep the tests fast
MARKOV = dict(chain=CHAIN, length=8)
SVA_CASES = [(s, m) for s in english.SPLITS_SVA for m in (False, True)]

# case -> (family, build(seed=...) -> Task); the family picks the tokenizer and the vocabulary size
CASES = {
    **{f"dyck/{s}": ("dyck", partial(dyck.dyck, 24, split=s, **DYCK)) for s in dyck.SPLITS},
    **{f"modular/{s}": ("modular", partial(modular.modular_addition, p=13, split=s)) for s in modular.SPLITS},
    **{f"markov/{s}": ("markov", partial(markov.markov, 24, split=s, **MARKOV)) for s in markov.SPLITS},
    **{f"sva/{s}/{m}": ("english", partial(english.sva, 24, split=s, masked=m)) for s, m in SVA_CASES},
    **{f"ioi/{s}": ("english", partial(english.ioi, 24, split=s)) for s in english.SPLITS_IOI},
}
TOKENIZERS = {
    "dyck": lambda: dyck.tokenizer(6),
    "modular": lambda: modular.tokenizer(13),
    "markov": lambda: markov.tokenizer(4),
    "english": english.tokenizer,
}
VOCAB = {"dyck": 5 + 12, "modular": 5 + 14, "markov": 5 + 4, "english": 5 + len(english.WORDS)}


@pytest.fixture(scope="module")
def tokenizers():
    return {}


def _rows(t: torch.Tensor) -> list[list[int]]:
    """Rows without their right padding."""
    return [[x for x in r if x != PAD_ID] for r in t.tolist()]


@pytest.mark.parametrize("case", CASES)
def test_deterministic_and_seeded(case):
    build = CASES[case][1]
    a, b, c = build(seed=0), build(seed=0), build(seed=1)
    for field in ("clean", "corrupt", "correct", "incorrect", "answer_pos"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    assert a.text == b.text
    assert a.text != c.text


@pytest.mark.parametrize("case", CASES)
def test_rows_well_formed(case):
    family, build = CASES[case]
    t, vocab = build(seed=0), VOCAB[family]
    assert t.clean.shape == t.corrupt.shape
    assert (t.clean[:, 0] == BOS_ID).all() and (t.corrupt[:, 0] == BOS_ID).all()
    assert (t.correct != t.incorrect).all()
    assert not any(torch.equal(x, y) for x, y in zip(t.clean, t.corrupt))
    assert int(t.clean.max()) < vocab and int(t.correct.max()) < vocab and int(t.incorrect.max()) < vocab
    for row, pos in zip(t.clean.tolist(), t.answer_pos.tolist()):
        assert row[pos] != PAD_ID
        first_pad = row.index(PAD_ID) if PAD_ID in row else len(row)
        assert all(x == PAD_ID for x in row[first_pad:])  # right padding only


@pytest.mark.parametrize("case", CASES)
def test_tokenizer_round_trip(case, tokenizers):
    family, build = CASES[case]
    if family not in tokenizers:
        tokenizers[family] = TOKENIZERS[family]()
    tok, t = tokenizers[family], build(seed=0)
    for row, text in zip(_rows(t.clean), t.text):
        assert tok.encode(text) == row[1:]  # text is the row after BOS
        assert tok.decode(row) == "[BOS] " + text


# --- dyck -------------------------------------------------------------------------------------

def _stack_answer(prefix: list[int]) -> int:
    stack = []
    for t in prefix[1:]:
        if t == PAD_ID:
            break
        if dyck.is_open(t):
            stack.append(t)
        else:
            assert stack and stack.pop() + 1 == t, "closer does not match its opener"
    return stack[-1] + 1  # the closer of the innermost open bracket


def test_dyck_answers_follow_the_stack():
    for split in dyck.SPLITS:
        t = dyck.dyck(64, split=split, **DYCK)
        for clean, corrupt, ok, bad in zip(t.clean.tolist(), t.corrupt.tolist(), t.correct, t.incorrect):
            assert _stack_answer(clean) == ok and _stack_answer(corrupt) == bad


def test_dyck_splits_are_disjoint():
    pool = dyck.pool(m=4, seed=0, pool_size=300, max_len=20)
    seqs = {s: dyck.sequences(600, split=s, **DYCK) for s in dyck.SPLITS}
    skel = {s: {dyck.skeleton(r) for r in rows} for s, rows in seqs.items()}
    assert skel["train"] <= pool and skel["seen_struct"] <= pool
    assert not skel["unseen_struct"] & pool
    assert max(map(dyck.max_depth, skel["unseen_struct"])) <= 4
    train_depth = max(map(dyck.max_depth, pool))
    assert min(map(dyck.max_depth, skel["unseen_depth"])) > train_depth
    train = {tuple(r) for r in dyck.sequences(3000, split="train", **DYCK)}
    assert not train & {tuple(r) for r in seqs["seen_struct"]}
    # unseen_depth examples all need a stack deeper than m
    assert min(dyck.dyck(64, split="unseen_depth", **DYCK).meta["depth"]) > 4


def test_dyck_unseen_struct_draws_only_held_out_families():
    """No family (depth, peaks) of a training skeleton appears in unseen_struct, at the zoo's
    settings and at the small ones; held-out families cover every depth, as seen ones do."""
    for kw in (DYCK, {}):
        pool = dyck.pool(**{k: v for k, v in kw.items() if k != "k"})
        train_families = {dyck.family(s) for s in pool}
        unseen = {dyck.skeleton(r) for r in dyck.sequences(400, split="unseen_struct", seed=3, **kw)}
        unseen_families = {dyck.family(s) for s in unseen}
        assert unseen_families and not unseen_families & train_families
        assert all(dyck.held_out_family(f) for f in unseen_families)
        assert not any(dyck.held_out_family(f) for f in train_families)
        m = kw.get("m", 10)
        assert {d for d, _ in unseen_families} == {d for d, _ in train_families} == set(range(1, m + 1))
    assert dyck.family("(()(()))") == (3, 2) and dyck.family("()()()") == (1, 3)
    assert dyck.held_out_family((1, 3)) and not dyck.held_out_family((3, 2))
    with pytest.raises(ValueError, match="non-empty string"):
        dyck.family("(x)")


def test_dyck_sequences_and_closing_targets():
    rows = dyck.sequences(50, split="train", **DYCK)
    assert all(r[0] == BOS_ID and r[-1] == tasks.EOS_ID and len(r) <= 22 for r in rows)
    tokens = tasks.pad_rows(rows)
    targets = dyck.closing_targets(tokens)
    for b, row in enumerate(tokens.tolist()):
        for p in range(len(row)):
            nxt = row[p + 1] if p + 1 < len(row) else PAD_ID
            assert targets[b, p] == (nxt if dyck.is_close(nxt) else dyck.IGNORE)
    row = [BOS_ID, dyck.open_id(3), dyck.open_id(0), dyck.close_id(0), dyck.close_id(3), tasks.EOS_ID]
    assert dyck.skeleton(row) == "(())" and dyck.max_depth("(())()") == 2


# --- modular ----------------------------------------------------------------------------------


def test_modular_splits_cover_all_pairs_disjointly():
    train = modular.split_pairs(p=13, split="train", seed=3)
    test = modular.split_pairs(p=13, split="test", seed=3)
    assert not set(train) & set(test)
    assert set(train) | set(test) == {(a, b) for a in range(13) for b in range(13)}
    assert len(train) == round(0.3 * 169)


def test_modular_answers():
    t = modular.modular_addition(p=13, split="test", seed=0)
    for row, bad, ok, wrong in zip(t.clean.tolist(), t.corrupt.tolist(), t.correct, t.incorrect):
        a, b = row[1] - 5, row[2] - 5
        assert ok == modular.number_id(13, (a + b) % 13)
        assert wrong == modular.number_id(13, (bad[1] - 5 + b) % 13) and bad[2] == row[2]
    assert len(modular.modular_addition(p=13, n=7)) == 7


# --- markov -----------------------------------------------------------------------------------


def test_markov_chain_properties():
    p = CHAIN.transition
    assert p.dtype == torch.float64 and torch.allclose(p.sum(-1), torch.ones(4, dtype=torch.float64))
    pi = CHAIN.stationary
    assert torch.allclose(pi @ p, pi) and abs(float(pi.sum()) - 1) < 1e-9
    ev = CHAIN.eigenvalues
    assert abs(ev[0] - 1) < 1e-9 and (ev.abs()[:-1] >= ev.abs()[1:] - 1e-12).all()
    assert len(CHAIN.nonunit_eigenvalues) == 3 and CHAIN.nonunit_eigenvalues.abs().max() >= 0.3


def test_markov_true_next_dist_and_splits():
    t = markov.markov(32, chain=CHAIN, length=8, split="train")
    dist = markov.true_next_dist(CHAIN, t.clean)
    assert dist.shape == (32, 9, 4) and torch.allclose(dist.sum(-1), torch.ones(32, 9, dtype=torch.float64))
    assert torch.allclose(dist[:, 0], CHAIN.stationary.expand(32, 4))
    assert torch.allclose(dist[0, 3], CHAIN.transition[t.clean[0, 3] - 5])
    test = markov.markov(32, chain=CHAIN, length=8, split="test")
    assert not {tuple(r) for r in t.clean.tolist()} & {tuple(r) for r in test.clean.tolist()}
    assert t.meta["transition"] == CHAIN.transition.tolist()
    rows = markov.sample(CHAIN, 5, 6, seed=0)
    assert rows == markov.sample(CHAIN, 5, 6, seed=0) and all(len(r) == 7 and r[0] == BOS_ID for r in rows)


# --- english ----------------------------------------------------------------------------------


def test_ioi_test_names_never_in_a_training_ioi_sentence():
    sentences = english.corpus(3000, seed=0)
    ioi_like = [s for s in sentences if {"gave", "give", "went", "got", "said", "found"} & set(s.split())]
    assert len(ioi_like) > 300
    assert not {w for s in ioi_like for w in s.split()} & set(english.TEST_NAMES)
    # but the held-out names are trained tokens, as subjects of filler sentences
    assert {w for s in sentences for w in s.split()} & set(english.TEST_NAMES)
    test_words = {w for s in english.ioi(64, split="test").text for w in s.split()}
    assert test_words & set(english.TEST_NAMES) and not test_words & set(english.TRAIN_NAMES)


def test_corpus_is_grammatical_and_tempting():
    sentences = english.corpus(3000, seed=1)
    assert all(english.agreement_errors(s) == 0 for s in sentences)
    assert max(len(s.split()) for s in sentences + english.filler(2000)) <= english.MAX_WORDS
    match = []
    for s in sentences:  # PP-attractor sentences: "det noun prep det [adj] noun verb ..."
        w = s.split()
        if w[0] in english.DETERMINERS and english.noun_number(w[1]) and w[2] in english.PREPOSITIONS:
            attractor = next(x for x in w[3:] if english.noun_number(x))
            match.append(english.noun_number(attractor) == english.noun_number(w[1]))
    assert len(match) > 200 and abs(sum(match) / len(match) - 0.85) < 0.07


def test_judge_finds_errors():
    assert english.judge("the key to the cabinets are red .")["errors"] == 1
    assert english.judge("the keys that the man like are red .")["errors"] == 1  # inner verb
    assert english.judge("mary and john runs .")["errors"] == 1
    ok = english.judge("today , the keys are red and mary sees the dogs .")
    assert ok["checked"] == 2 and ok["errors"] == 0


def test_sva_corrupt_flips_the_answer():
    for split in english.SPLITS_SVA:
        t = english.sva(64, split=split)
        for clean, corrupt, ok, bad in zip(t.text, t.corrupt.tolist(), t.correct, t.incorrect):
            head = clean.split()[1]
            flipped = english.WORDS[corrupt[2] - 5]
            assert {english.noun_number(head), english.noun_number(flipped)} == {"sg", "pl"}
            assert english.verb_number(english.WORDS[ok - 5]) == english.noun_number(head)
            assert english.verb_number(english.WORDS[bad - 5]) == english.noun_number(flipped)


def test_sva_splits_disjoint_and_held_out():
    ident, mismatch = english.sva(400, split="sva_id"), english.sva(400, split="sva_attractor_mismatch")
    assert not set(ident.text) & set(mismatch.text)
    assert set(mismatch.meta["kind"]) == {"pp", "rc"} and "none" in ident.meta["kind"]
    corpus = english.corpus(3000, seed=0)
    kinds = ident.meta["kind"] + mismatch.meta["kind"]
    phrases = [t for t, k in zip(ident.text + mismatch.text, kinds) if k != "none"]
    phrases += english.prefixes(200)
    starts = {" ".join(s.split()[:n]) for s in corpus for n in (5, 6, 7)}
    assert not set(phrases) & starts


@pytest.mark.parametrize("masked", [False, True])
def test_sva_id_is_a_third_each_and_the_nearest_noun_baseline(masked):
    """sva_id: a third each of none / PP / RC, as documented; the nearest-noun heuristic is right on
    the attractor-free rows and the matching attractors (0.85 of them), and never on mismatch."""
    from collections import Counter

    t = tasks.make("sva", split="sva_id", n=512, seed=2, masked=masked)
    assert Counter(t.meta["kind"]) == {"none": 171, "pp": 171, "rc": 170}
    agrees = english.nearest_noun_agrees(t)
    kinds = t.meta["kind"]
    assert all(a for a, k in zip(agrees.tolist(), kinds) if k == "none")
    attractor_rows = [a for a, k in zip(agrees.tolist(), kinds) if k != "none"]
    assert abs(sum(attractor_rows) / len(attractor_rows) - 0.85) < 0.06
    assert 0.85 < float(agrees.float().mean()) < 0.95  # not the ~0.98 of a split with few attractors
    mismatch = tasks.make("sva", split="sva_attractor_mismatch", n=256, seed=2, masked=masked)
    assert Counter(mismatch.meta["kind"]) == {"pp": 128, "rc": 128}
    assert not english.nearest_noun_agrees(mismatch).any()
    # by hand: the last noun of the subject phrase (the words before the verb) against the head noun
    for text, kind, agree in zip(t.text, kinds, agrees.tolist()):
        subject = text.split(" [MASK]")[0].split()
        nouns = [w for w in subject if english.noun_number(w)]
        assert agree == (english.noun_number(nouns[-1]) == english.noun_number(subject[1]))
        assert (len(nouns) == 1) == (kind == "none")
    with pytest.raises(ValueError, match="sva task"):
        english.nearest_noun_agrees(english.ioi(4))


def test_masked_sva_marks_the_verb():
    t = english.sva(16, masked=True)
    assert t.meta["masked"] and (t.clean[torch.arange(16), t.answer_pos] == tasks.MASK_ID).all()


def test_encode_matches_tokenizer(tokenizers):
    tok = tokenizers.get("english") or english.tokenizer()
    for s in english.corpus(20, seed=2):
        assert english.encode([s])[0] == [BOS_ID, *tok.encode(s), tasks.EOS_ID]


# --- registry and errors ----------------------------------------------------------------------


@pytest.mark.parametrize("name", tasks.SPLITS)
def test_make_builds_every_split(name):
    kwargs = {"dyck": DYCK, "modular": {"p": 13}}.get(name, {})
    for split in tasks.SPLITS[name]:
        t = tasks.make(name, split=split, n=8, seed=0, **kwargs)
        assert len(t) == 8 and t.split == split


ERRORS = [
    (lambda: dyck.dyck(4, k=0), r"k=0"),
    (lambda: dyck.dyck(4, m=0), r"m=0"),
    (lambda: dyck.dyck(0), r"n=0"),
    (lambda: dyck.sequences(4, split="bogus"), r"split='bogus'.*unseen_depth"),
    (lambda: modular.modular_addition(p=12), r"p=12 is not prime"),
    (lambda: modular.modular_addition(p=2), r"p=2"),
    (lambda: modular.modular_addition(p=13, train_frac=1.0), r"train_frac=1.0"),
    (lambda: modular.modular_addition(p=13, split="val"), r"split='val'.*train, test"),
    (lambda: markov.random_chain(1), r"n=1"),
    (lambda: markov.markov(4, chain=CHAIN, length=1), r"length=1"),
    (lambda: markov.MarkovChain(torch.ones(3, 3, dtype=torch.float64)), r"row-stochastic"),
    (lambda: english.sva(4, split="test"), r"split='test'.*sva_id"),
    (lambda: english.ioi(4, split="dev"), r"split='dev'.*train, test"),
    (lambda: english.corpus(4, mix=(0.5, 0.5, 0.5)), r"mix="),
    (lambda: english.encode(["the zebra is red ."]), r"'zebra'"),
    (lambda: tasks.make("nope", split="train"), r"'nope'.*dyck.*ioi"),
    (lambda: tasks.make("ioi", split="sva_id"), r"split='sva_id'.*train, test"),
]


@pytest.mark.parametrize("call,message", ERRORS)
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---- named positions and the Task's repr -------------------------------------------------------


def _word(t: torch.Tensor) -> str:
    vocab = (*SPECIALS, *english.WORDS)
    return vocab[int(t)]


@pytest.mark.parametrize("split", english.SPLITS_IOI)
def test_ioi_named_positions_match_the_tokens(split):
    t = english.ioi(24, split=split, seed=2)
    assert list(t.positions) == ["IO", "S1", "S2", "END"]
    for i in range(len(t)):
        at = {k: int(v[i]) for k, v in t.positions.items()}
        row = t.clean[i]
        assert row[at["IO"]] == t.correct[i] and row[at["S1"]] == t.incorrect[i] and row[at["S2"]] == t.incorrect[i]
        assert at["IO"] < at["S2"] and at["S1"] < at["S2"]
        assert at["END"] == int(t.answer_pos[i]) and _word(row[at["END"]]) == "to"
        assert t.corrupt[i, at["S2"]] != t.incorrect[i]  # the corruption replaces S2 ...
        assert torch.equal(t.corrupt[i, : at["S2"]], row[: at["S2"]])  # ... and nothing before it
    assert t.aligned_positions() is None  # eight templates of different lengths


@pytest.mark.parametrize("split,masked", SVA_CASES)
def test_sva_named_positions_match_the_tokens(split, masked):
    t = english.sva(24, split=split, masked=masked)
    last = "verb" if masked else "END"
    want = ["subject", "attractor", last] if split == "sva_attractor_mismatch" else ["subject", last]
    assert list(t.positions) == want
    for i in range(len(t)):
        row = t.clean[i]
        subject = row[int(t.positions["subject"][i])]
        assert english.noun_number(_word(subject)) is not None
        assert t.corrupt[i, int(t.positions["subject"][i])] != subject  # the corruption flips the head noun
        assert int(t.positions[last][i]) == int(t.answer_pos[i])
        if masked:
            assert int(row[int(t.positions["verb"][i])]) == tasks.MASK_ID
        if "attractor" in t.positions:
            attractor = _word(row[int(t.positions["attractor"][i])])
            assert english.noun_number(attractor) not in (None, english.noun_number(_word(subject)))  # mismatch


def test_slicing_and_to_keep_named_positions():
    t = english.ioi(10, seed=1)
    part = t[[7, 2]]
    for k, v in t.positions.items():
        assert torch.equal(part.positions[k], v[[7, 2]])
    assert torch.equal(t[3].positions["S2"], t.positions["S2"][3:4])
    assert torch.equal(t[2:5].positions["IO"], t.positions["IO"][2:5])
    assert t.to("cpu").positions.keys() == t.positions.keys()
    single = t[[0]]
    assert single.aligned_positions() == {k: int(v[0]) for k, v in t.positions.items()}


def test_positions_are_validated():
    t = english.ioi(4)
    with pytest.raises(ValueError, match=r"positions\['IO'\] must be a \(4,\) tensor"):
        dataclasses.replace(t, positions={"IO": torch.zeros(3, dtype=torch.long)})
    with pytest.raises(ValueError, match=r"positions\['END'\] has indices outside"):
        dataclasses.replace(t, positions={"END": torch.full((4,), 99)})


def test_task_repr_is_concise():
    t = english.ioi(300, seed=0)
    text = repr(t)
    assert text.startswith(f"Task(ioi/train, n=300, width={t.clean.shape[1]}, metric='logit_diff', positions=[IO, S1, S2, END], e.g. ")
    assert "tensor" not in text and len(text) < 200
    assert "positions" not in repr(modular.modular_addition(p=13, split="train"))
