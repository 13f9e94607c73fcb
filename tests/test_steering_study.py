"""The steering study (interp.studies.steering, interp.studies.steering.real): the word-list judge on
hand-written continuations, the framed prompts and their splits, the lever rule, the unit-driven
repro on a zoo model (quick budget, resumed), and docs/steering.md bound to its JSON."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from interp.errors import InterpError
from interp.studies.steering import real as steer_real
from interp.studies import steering as study

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize("number, text, verb, pronoun, share", [
    ("pl", " are on the table because they fell.", "pl", "pl", 0.0),
    ("pl", " is broken, and it was old", "sg", "sg", 1.0),
    ("sg", " was there. They left", "sg", "pl", 0.5),  # the whole generation counts, not its first sentence
    ("sg", " sat quietly", None, None, None),  # no number word: not judged
    ("sg", " doesn't work; their owner", "sg", "pl", 0.5),
    ("sg", "\n\nThe keys are here", "pl", None, 1.0),
    ("pl", " I have seen them", None, "pl", 0.0),  # "have" agrees with "I", not with the subject
    ("sg", " will have gone, and we are late", None, None, None),  # after a modal / "we": no number
    ("pl", " were gone. There is a note", "pl", None, 0.0),  # "there is" agrees with the note
    ("sg", "’s name is on it", "sg", "sg", 0.0),  # curly apostrophe: "'s" then "is"
    ("pl", " aren’t ready", "pl", None, 0.0),
])
def test_judge_on_hand_written_continuations(number, text, verb, pronoun, share):
    j = steer_real.judge(number, text)
    assert j["verb"] == verb and j["pronoun"] == pronoun and j["flip_share"] == share
    assert j["verb_agrees"] == (verb == number) and j["verb_flipped"] == (verb is not None and verb != number)


def test_rates_are_over_all_prompts():
    r = steer_real.rates(["sg", "pl", "sg", "pl"], [" is red", " is red", " sat", " they were"])
    assert r == {"judged": 0.75, "verb_agree": 0.5, "verb_flip": 0.25, "pronoun_judged": 0.25, "flip_share": 1 / 3}
    with pytest.raises(InterpError, match="one number per completion"):
        steer_real.rates(["sg"], [])
    with pytest.raises(InterpError, match="'sg' or 'pl'"):
        steer_real.judge("plural", " is")


def _flips(rate: float, n: int = 200) -> list[int]:
    return [1] * round(rate * n) + [0] * (n - round(rate * n))


@pytest.mark.parametrize("flip, randoms, want", [
    (0.9, [0.1, 0.2] * 5, "reproduced"),
    (0.3, [0.1, 0.2] * 5, "partly"),  # its interval excludes 0, but the margin is under half the paper's
    (0.9, [0.8, 0.95] * 5, "not distinguishable from control"),  # random directions of the same norm flip as often
    (0.05, [0.1, 0.2] * 5, "not reproduced"),  # the flip keeps agreement more often than random pushes do
    (0.9, [0.1, 0.2], "no control"),  # two random draws: under verdicts.MIN_DRAWS
    (1.0, [0.0] * 20, "reproduced"),  # every prompt flipped, no random one: the score interval keeps its width
    (0.12, [0.1] * 20, "not distinguishable from control"),  # a margin inside the interval at this n
])
def test_claim_judges_the_flip_by_an_interval_over_prompts_and_directions(flip, randoms, want):
    from interp.studies.verdicts import rejudge

    c = study.claim("m", "core", _flips(flip), [_flips(r) for r in randoms], boot=300)
    assert c["word"] == want and rejudge({"c": c}) == [] and c["draws"] == len(randoms) == c["interval"]["n"] // 200 * len(randoms)
    lo, hi = c["diff_ci"]
    assert lo <= c["effect"] - c["control"] <= hi and hi > lo and c["mde"] == pytest.approx((hi - lo) / 2)
    unreadable = study.claim("m", "diff", _flips(flip), [_flips(r) for r in randoms], judged=[0.0, 0.5], boot=300)
    assert unreadable["word"] == "not run" and unreadable["effect"] is None and rejudge({"c": unreadable}) == []


def test_flip_difference_interval_covers_prompts_and_directions():
    """Directions that differ from each other widen the interval beyond what the prompts alone give."""
    same = study.flip_difference(_flips(0.6), [_flips(0.3)] * 10, boot=500)
    spread = study.flip_difference(_flips(0.6), [_flips(r) for r in (0.0, 0.6) * 5], boot=500)
    assert same["diff"] == pytest.approx(spread["diff"]) == pytest.approx(0.3)
    width = lambda d: d["bootstrap_ci"][1] - d["bootstrap_ci"][0]  # noqa: E731
    assert width(spread) > width(same)
    with pytest.raises(InterpError, match="same prompts"):
        study.flip_difference([1, 0], [[1, 0, 1]], boot=10)


def test_chosen_layer_is_never_the_last():
    assert study.eligible([0, 1, 2, 3], 4) == [0, 1, 2] and study.eligible([3], 4) == []


def test_framed_prompts_split_heads_and_balance_numbers(smollm2):
    splits = steer_real.split_nouns(smollm2)
    heads = {s: {w for p in splits[s] for w in p} for s in ("fit", "dev", "test")}
    assert not heads["fit"] & heads["dev"] and not heads["fit"] & heads["test"] and not heads["dev"] & heads["test"]
    texts, numbers = steer_real.prompts(smollm2, "test", 24)
    assert numbers.count("sg") == numbers.count("pl") == 12
    assert all(t.rsplit(" ", 4)[-4] in heads["test"] for t in texts)
    assert len({t.split("the ")[0] for t in texts}) > 1  # several frames
    task, fit_texts, fit_numbers = steer_real.fit_task(smollm2, 16)
    assert len(fit_texts) == len(task) >= 14 and task.meta["number"] == fit_numbers
    # right padding: each answer position is that row's own last token
    row = smollm2.to_tokens(fit_texts[0], move_to_device=False)[0]
    assert int(task.answer_pos[0]) == len(row) - 1 and task.clean[0, : len(row)].tolist() == row.tolist()


def test_quick_repro_on_a_zoo_model_reports_and_resumes(tmp_path):
    from interp.studies.verdicts import dicts_in

    over = {"layers": [2, 3], "n_dev": 4, "n_test": 6, "dev_tokens": 4, "gap_strengths": [2.0]}
    out = study.repro(progress=False, models=["zoo:lm-gpt2"], budget="quick", overrides=over, units=tmp_path)
    v = out["models"]["zoo:lm-gpt2"]
    assert set(v["dev_verb_flip"]["core"]) == {"2", "3"}  # the last layer is swept on dev ...
    assert v["layer"] == {"core": 2, "diff": 2} and v["eligible_layers"] == [2]  # ... but never chosen
    # the final residual stream is read on test as description: no verdict dict, so no word can rest on it
    assert v["forced"]["layer"] == 3 and v["forced"]["status"] == "forced" and "word" not in v["forced"]
    verdicts = [d for _, d in dicts_in(out) if "word" in d and "claim_text" in d]
    assert verdicts and all(d["claim_text"].startswith("zoo:lm-gpt2: flipping") for d in verdicts)
    assert v["runs"]["unsteered"]["judged"] >= 0.8 and v["runs"]["core"]["judged"] >= 0.0
    # the quick budget's 2 random draws are under verdicts.MIN_DRAWS: its verdict is "no control" by rule
    assert v["random_core"]["verb_flip"]["n"] == 2 and v["core_verdict"]["word"] == "no control"
    assert v["core_verdict"]["null"] == "random directions" and v["core_verdict"]["draws"] == 2
    assert set(v["gap"]["random"]) == {"1", "2"} and v["gap"]["layer"] == 2 and out["budget"]["units_done"] == out["budget"]["units_total"]
    again = study.repro(progress=False, models=["zoo:lm-gpt2"], budget="quick", overrides=over, units=tmp_path)
    assert again["provenance"]["units_run"] == 0  # every unit read back
    assert again["models"] == json.loads(json.dumps(out["models"]))
    with pytest.raises(InterpError, match="layers"):
        study.repro(progress=False, models=["zoo:lm-gpt2"], budget="quick", overrides={"layers": [9]}, units=tmp_path)
    with pytest.raises(InterpError, match="before the last"):  # only the forced layer: nothing may be chosen
        study.repro(progress=False, models=["zoo:lm-gpt2"], budget="quick", overrides={"layers": [3]}, units=tmp_path)


def test_doc_is_bound_to_its_json_and_moves_with_every_number():
    from interp.studies import docs as bound

    result = json.loads((DOCS / "steering_repro.json").read_text())
    md = (DOCS / "steering.md").read_text()
    for name, body in study.regions(result).items():  # the doc holds exactly what the JSON renders
        assert f"<!-- gen:{name} -->\n{body}\n<!-- /gen:{name} -->" in md, name
    assert bound.check(md, result) == [] and bound.prose_numbers(md, result) == []
    keys = list(bound.keys_of(md))
    assert any("/core_verdict" not in k and "/runs/core/verb_flip" in k for k in keys)
    for key in keys:  # every reported number moved by 1 % makes the check fail
        value = bound.get(result, key)
        if value == 0:
            continue
        changed = copy.deepcopy(result)
        bound.set_at(changed, key, value * 1.01)
        assert bound.check(md, changed), f"{key} moved by 1 % and the doc still checks"


def test_committed_words_rest_on_unforced_layers_and_intervals():
    """The committed JSON: no layer chosen at the final residual stream, the forced flip carries no word,
    and every word beyond "no control" rests on an interval of non-zero width from >= 10 random directions."""
    from interp.studies.verdicts import MIN_DRAWS, rejudge

    result = json.loads((DOCS / "steering_repro.json").read_text())
    assert rejudge(result) == []
    for spec, v in result["models"].items():
        assert v["forced_layer"] == v["n_layers"] - 1 and v["forced_layer"] not in v["layer"].values(), spec
        assert "word" not in v.get("forced", {})
        for a in ("core", "diff"):
            c = v[f"{a}_verdict"]
            assert c["draws"] >= MIN_DRAWS and c["diff_ci"][1] > c["diff_ci"][0] and c["mde"] > 0, (spec, a)
