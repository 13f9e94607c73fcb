"""The illusions study's code experiment and one-hot control: repeated-word positions, random one-hot
attention, and the code verdicts on planted counts (no model trained here)."""

from __future__ import annotations

import pytest
import torch

from interp.studies import illusions
from interp.studies.illusions import code
from interp.studies.protocol import DEPARTURE_KEYS


def test_repeated_word_positions_are_the_characters_after_the_first_of_a_word_seen_before():
    text = "foo(x) + foo_b + foo"
    mask = code.repeated(code.encode(text))
    # the second "foo" is foo_b (a new word): nothing; the third "foo" (at 17) repeats the first:
    # positions 17 and 18 predict its second and third characters
    assert mask.nonzero().flatten().tolist() == [17, 18]
    tokens, targets, rep = code.rows(code.encode(text)[None])
    assert rep[0, 17] and targets[0, -1] == code.IGNORE and (tokens == code.encode(text)[None]).all()


def test_encode_maps_every_character_outside_the_vocabulary_to_unk():
    ids = code.encode("a\n\té")
    assert ids.tolist()[:3] == [code.FIRST_ID + code.CHARS.index(c) for c in "a\n\t"] and ids[3] == code.UNK


def test_random_onehot_rows_are_one_hot_on_allowed_sources_and_fixed_by_the_seed():
    scores = torch.randn(3, 2, 6, 6).masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    site = "blocks.1.attn.hook_attn_scores"
    out = illusions.RandomOneHot(((1, 1),), seed=0)(scores, site=site)
    probs = out[:, 1].softmax(-1)
    assert torch.equal(out[:, 0], scores[:, 0])  # the other head is untouched
    assert torch.allclose(probs.sum(-1), torch.ones(3, 6)) and ((probs == 0) | (probs == 1)).all()
    assert (probs * torch.isinf(scores[:, 1])).sum() == 0  # never a masked source
    again, other = (illusions.RandomOneHot(((1, 1),), seed=s)(scores, site=site) for s in (0, 1))
    assert torch.equal(out, again) and not torch.equal(out, other)


def _counts(same: float, same_rep: float, n: int = 1000, n_rep: int = 100) -> dict[str, int]:
    return {"n": n, "same": round(same * (n - n_rep) + same_rep * n_rep), "n_rep": n_rep, "same_rep": round(same_rep * n_rep)}


def _eval(ood_svd: float, ood_rep: float, draws: int = 10, heads: int = 8) -> dict:
    """Planted counts: SVD keeps 0.95 everywhere on Python and `ood_*` elsewhere; random projections
    lose the same on every language (0.8), with a little spread between heads."""
    rows = []
    for h in range(heads):
        noise = 0.003 * (-1) ** h * (h % 3 + 1)  # heads differ, in both directions
        svd = {lang: _counts(0.95, 0.95) if lang == code.ID_LANG else _counts(ood_svd + noise, ood_rep + noise)
               for lang in code.LANGS}
        rand = [{lang: _counts(0.8 + noise * (d % 3), 0.8) for lang in code.LANGS} for d in range(draws)]
        rows.append({"head": [h // 4, h % 4], "svd": svd, "random": rand})
    return {"heads": rows}


@pytest.mark.parametrize("ood_svd, ood_rep, draws, gap_word, rep_word", [
    (0.85, 0.6, 10, "reproduced", "reproduced"),        # a gap, largest at repeated words, beyond the random control
    (0.95, 0.95, 10, "not distinguishable from control", "not distinguishable from control"),  # no gap
    (0.85, 0.6, 3, "no control", "no control"),         # too few random draws: no control, whatever the gap
])
def test_code_verdicts_on_planted_counts(ood_svd, ood_rep, draws, gap_word, rep_word):
    out = code.judge_code(_eval(ood_svd, ood_rep, draws), rank=4, draws=draws)
    for lang in code.LANGS[1:]:
        assert out["verdicts"]["gap"][lang]["word"] == gap_word
        assert out["verdicts"]["repeated_word"][lang]["word"] == rep_word
    claims = illusions.code_claims(out["verdicts"])
    assert claims["code_java_vs_unseen"]["word"] == gap_word and claims["code_repeated_word"]["claim_id"] == "il.code_repeated_word"


@pytest.mark.parametrize("name", ["quick", "paper"])
def test_departures_name_both_sides_of_every_difference(name):
    rows = illusions.departures(illusions.BUDGETS[name])
    assert rows and all(set(r) == set(DEPARTURE_KEYS) and all(r[k] for k in DEPARTURE_KEYS) for r in rows)
    assert any(r["what"].startswith("code") for r in rows)
