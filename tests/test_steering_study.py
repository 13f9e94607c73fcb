"""The steering study (interp.studies.steering, interp.studies.steer_real): the word-list judge on
hand-written continuations, the framed prompts and their splits, the lever rule, the unit-driven
repro on a zoo model (quick budget, resumed), and docs/steering.md bound to its JSON."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from interp.errors import InterpError
from interp.studies import steer_real
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


@pytest.mark.parametrize("flip, unsteered, randoms, want", [
    (0.9, 0.0, [0.1, 0.2], "lever"),
    (0.3, 0.0, [0.1, 0.2], "weak"),
    (0.9, 0.0, [0.1, 0.95], "not a lever"),  # a random direction of the same norm flips as often
    (0.6, 0.7, [0.0], "not a lever"),  # the unsteered model already "flips" that often
])
def test_lever_rule(flip, unsteered, randoms, want):
    assert study.lever(flip, unsteered, randoms) == want


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
    over = {"layers": [2, 3], "n_dev": 4, "n_test": 6, "dev_tokens": 4, "gap_strengths": [2.0]}
    out = study.repro(progress=False, models=["zoo:lm-gpt2"], budget="quick", overrides=over, units=tmp_path)
    v = out["models"]["zoo:lm-gpt2"]
    assert set(v["dev_verb_flip"]["core"]) == {"2", "3"} and v["layer"]["core"] in (2, 3)
    assert v["runs"]["unsteered"]["judged"] >= 0.8 and v["runs"]["core"]["judged"] >= 0.0
    assert v["random_core"]["verb_flip"]["n"] == 2 and v["core_verdict"] in ("lever", "weak", "not a lever")
    assert set(v["gap"]["random"]) == {"1", "2"} and v["gap"]["layer"] == 2 and out["budget"]["units_done"] == out["budget"]["units_total"]
    again = study.repro(progress=False, models=["zoo:lm-gpt2"], budget="quick", overrides=over, units=tmp_path)
    assert again["provenance"]["units_run"] == 0  # every unit read back
    assert again["models"] == json.loads(json.dumps(out["models"]))
    with pytest.raises(InterpError, match="layers"):
        study.repro(progress=False, models=["zoo:lm-gpt2"], budget="quick", overrides={"layers": [9]}, units=tmp_path)


def _leaves(x, path=()):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _leaves(v, (*path, i))
    elif isinstance(x, float) and x != 0.0:
        yield path


def _reported(path) -> bool:
    """Whether docs/steering.md reports the JSON leaf models.SPEC.<path> (spreads: mean, std and max of
    the random flips, min and max of their judged fractions; the zoo's gap runs: their flip rate)."""
    key = path[1:]
    if key[0].startswith("random_"):
        return key[1:] in (("verb_flip", "mean"), ("verb_flip", "std"), ("verb_flip", "max"), ("judged", "min"),
                           ("judged", "max"))
    if key[0] == "gap" and key[1] == "random":
        return key[-1] == "max"
    return key[0] != "examples"


def _set(x, path, value):
    for k in path[:-1]:
        x = x[k]
    x[path[-1]] = value


def test_doc_holds_what_its_json_renders_and_every_number_is_bound():
    result = json.loads((DOCS / "steering_repro.json").read_text())
    md = (DOCS / "steering.md").read_text()
    tables = steer_real.doc_tables(result)
    for name, body in tables.items():
        assert f"<!-- table:{name} -->\n{body}\n<!-- /table -->" in md, name
    # every non-zero number of the JSON's models reaches the doc: moved by 1 %, the doc no longer matches
    for path in filter(_reported, _leaves(result["models"])):
        changed = copy.deepcopy(result)
        value = changed["models"]
        for k in path:
            value = value[k]
        _set(changed["models"], path, value * 1.01)
        assert steer_real.doc_tables(changed) != tables, f"models.{'.'.join(map(str, path))} is not in the doc"


def test_all_layer_ace_cores_equal_extract_per_layer():
    import torch

    import interp
    from interp import cores
    from interp.tasks import english

    model = interp.load("zoo:lm-qwen2")
    task = english.sva(40, split="sva_id", seed=3)
    sites = [f"blocks.{l}.hook_resid_post" for l in range(model.cfg.n_layers)]
    got = steer_real.ace_cores(model, task, sites, batch_size=16)
    for s in sites:
        want = cores.extract(model, task, site=s, k=1, method="ace", batch_size=16)
        torch.testing.assert_close(got[s].basis, want.basis, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(got[s].mean, want.mean)
