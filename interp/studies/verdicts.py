"""The one set of rules that turns an effect, its control and the paper's claim into a verdict word.

Every study and the README's study table use these words and only through these functions, so a word
never goes further than the numbers beside it:

- "not run": no effect was measured.
- "no control": what the effect is compared with is not a null that could have produced it (the full
  model, say, which random units of the same size also fall short of), or a random null with fewer than
  `MIN_DRAWS` draws or an interval of zero width: such a comparison cannot fail, so it earns no word
  beyond this one (it may stay in the JSON as description).
- "forced": the effect cannot be told from a control that the set-up alone produces (a random plane of
  the same dimension, a code size imposed in training): the number says nothing about the model.
- "not distinguishable from control": the effect cannot be told from an ordinary control.
- "not reproduced": told apart from the control, but on the side opposite to the paper's claim.
- "partly": on the paper's side, but the margin over the control is under `min_share` of the paper's own
  margin (when the paper gives one).
- "reproduced": on the paper's side, told apart from the control, with (if the paper gives one) at least
  `min_share` of the paper's margin.

"Told apart": when `diff_ci` (an interval of effect - control) is given, it excludes 0; else when
intervals of the effect and/or the control are given (a bootstrap interval, the min-max of random draws),
they do not overlap. With no interval at all, two numbers are never told apart, however far apart they
are (`tol` is kept in old results but decides nothing): "reproduced" and "partly" always rest on an interval.

Every `judge` dict states the widths of the intervals it used (`interval_widths`) and `mde`, the smallest
margin over the control that those intervals could have told apart (their half-widths, added when effect
and control each have one); beside the paper's own margin (`paper_margin`) it says whether the sample was
large enough to see the paper's effect at all.

`judge(...)` returns the inputs and the word as a dict for the JSON, and `rejudge(data)` finds every such
dict in a result and recomputes its word, so tests/test_docs.py fails when a word and its numbers disagree.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Iterator, Sequence

from interp.errors import InterpError

__all__ = ["WORDS", "NOT_RUN", "FORCED", "CONTROL", "NOT_REPRODUCED", "PARTLY", "REPRODUCED", "NO_CONTROL", "NULLS",
           "RANDOM_NULLS", "MIN_DRAWS",
           "verdict", "judge", "resolution", "rejudge", "dicts_in", "against_all", "combine"]

NOT_RUN, FORCED, CONTROL = "not run", "forced", "not distinguishable from control"
NOT_REPRODUCED, PARTLY, REPRODUCED = "not reproduced", "partly", "reproduced"
NO_CONTROL = "no control"
# worst first: a claim checked against several controls takes the worst word (it must beat them all)
WORDS = (NOT_RUN, NOT_REPRODUCED, NO_CONTROL, FORCED, CONTROL, PARTLY, REPRODUCED)
CLAIMS = ("greater", "less")
# what a control may be: the same statistic under a null that could have produced the effect. Random
# nulls need MIN_DRAWS draws and an interval of non-zero width; "method" is another method the claim
# itself names ("EAP-IG beats EAP"); "setup" a value the set-up imposes (its verdict is "forced");
# "threshold" a level the paper's claim itself states ("near 100 %"); "baseline" the other side of a
# comparison the claim itself makes, measured the same way (the model before fine-tuning, the other
# training order, the in-distribution split, a graft without the transferred structure) -- unlike the
# full model beside a subset, which every subset of that size falls short of.
RANDOM_NULLS = ("random units", "random directions", "random subspaces", "random masks", "random circuits",
                "random scores", "random layers", "shuffled labels", "shuffled rows", "permutation")
NULLS = RANDOM_NULLS + ("identity map", "method", "setup", "threshold", "baseline")
NOT_NULLS = ("full model",)  # a comparison, not a control: judged "no control"
MIN_DRAWS = 10


def _interval(x: Sequence[float] | None, name: str) -> tuple[float, float] | None:
    if x is None:
        return None
    lo, hi = (float(v) for v in x)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        raise InterpError(f"{name} must be a finite (low, high) interval with low <= high, got {x!r}")
    return lo, hi


def verdict(effect: float | int | None, control: float | int | None, claim: str = "greater", *,
            effect_ci: Sequence[float] | None = None, control_ci: Sequence[float] | None = None,
            diff_ci: Sequence[float] | None = None, tol: float | int = 0.0, paper: float | int | None = None,
            paper_control: float | int | None = None, min_share: float = 0.5, setup_control: bool = False,
            null: str | None = None, draws: int | None = None) -> str:
    """The verdict word for `effect` against `control` under the paper's `claim` ("greater": the paper says
    the effect exceeds the control; "less": it is below, e.g. a rank). `null` names what the control is
    (one of NULLS, or NOT_NULLS), `draws` how many random draws made it. See the module doc for the rules."""
    if claim not in CLAIMS:
        raise InterpError(f"claim must be one of {CLAIMS}, got {claim!r}")
    if null is not None and null not in NULLS + NOT_NULLS:
        raise InterpError(f"null {null!r} is not a known control; use one of {NULLS} (or {NOT_NULLS}, judged 'no control')")
    if effect is None or (isinstance(effect, float) and math.isnan(effect)):
        return NOT_RUN
    if control is None:
        raise InterpError("a verdict needs the control that could have produced the same number; got none")
    effect, control = float(effect), float(control)
    sign = 1.0 if claim == "greater" else -1.0
    d_ci, e_ci, c_ci = (_interval(diff_ci, "diff_ci"), _interval(effect_ci, "effect_ci"),
                        _interval(control_ci, "control_ci"))
    if null in NOT_NULLS:
        return NO_CONTROL
    if null in RANDOM_NULLS:
        spread = d_ci if d_ci is not None else c_ci
        if draws is None or draws < MIN_DRAWS or spread is None or spread[1] - spread[0] <= 0:
            return NO_CONTROL  # a random null needs enough draws and an interval that shows their spread
    if d_ci is not None:
        apart = d_ci[0] > 0 or d_ci[1] < 0
    elif e_ci is not None or c_ci is not None:
        e_lo, e_hi = e_ci or (effect, effect)
        c_lo, c_hi = c_ci or (control, control)
        apart = e_lo > c_hi or e_hi < c_lo
    else:
        apart = False  # no interval: nothing says how far apart two numbers must be to differ
    if not apart:
        return FORCED if setup_control else CONTROL
    margin = sign * (effect - control)
    if margin < 0:
        return NOT_REPRODUCED
    if paper is not None and paper_control is not None:
        paper_margin = sign * (float(paper) - float(paper_control))
        if paper_margin > 0 and margin < min_share * paper_margin:
            return PARTLY
    return REPRODUCED


def judge(claim_text: str, effect: float | int | None, control: float | int | None, claim: str = "greater", *,
          claim_id: str | None = None, **rule: Any) -> dict:
    """verdict(...) with its inputs, as the dict a study stores in its JSON (`rejudge` recomputes it);
    `claim_id` names the paper's claim it judges (`interp.studies.claims`)."""
    word = verdict(effect, control, claim, **rule)
    clean = {k: (list(v) if isinstance(v, tuple) else v) for k, v in rule.items() if v is not None}
    ident = {"claim_id": claim_id} if claim_id is not None else {}
    return {"claim_text": claim_text, **ident, "effect": effect, "control": control, "claim": claim, **clean,
            **resolution(effect, control, claim, **rule), "word": word}


def resolution(effect: float | int | None, control: float | int | None, claim: str = "greater", *,
               effect_ci: Sequence[float] | None = None, control_ci: Sequence[float] | None = None,
               diff_ci: Sequence[float] | None = None, paper: float | int | None = None,
               paper_control: float | int | None = None, **_: Any) -> dict:
    """What a judgement could see: the width of each interval it used, `mde` (the smallest margin over
    the control those intervals tell apart: the diff interval's half-width, else the effect's and the
    control's half-widths added; None with no interval) and the paper's own margin when it gives one."""
    out: dict[str, Any] = {}
    d, e, c = (_interval(diff_ci, "diff_ci"), _interval(effect_ci, "effect_ci"), _interval(control_ci, "control_ci"))
    if d is not None:
        out["interval_widths"] = {"effect - control": d[1] - d[0]}
        out["mde"] = (d[1] - d[0]) / 2
    elif e is not None or c is not None:
        out["interval_widths"] = {k: v[1] - v[0] for k, v in (("effect", e), ("control", c)) if v is not None}
        out["mde"] = sum(w / 2 for w in out["interval_widths"].values())
    else:
        out["interval_widths"], out["mde"] = {}, None
    if paper is not None and paper_control is not None:
        out["paper_margin"] = (1.0 if claim == "greater" else -1.0) * (float(paper) - float(paper_control))
    return out


def against_all(words: Iterable[str]) -> str:
    """One claim checked against several controls: the worst word (it must beat every control)."""
    words = list(words)
    if not words:
        raise InterpError("against_all needs at least one word")
    for w in words:
        if w not in WORDS:
            raise InterpError(f"{w!r} is not a verdict word ({WORDS})")
    return min(words, key=WORDS.index)


def combine(words: Iterable[str]) -> str:
    """A study's word from its claims' words: all reproduced -> reproduced; some reproduced or partly ->
    partly; none run -> not run; otherwise the worst of the rest."""
    words = [w for w in words]
    if not words:
        raise InterpError("combine needs at least one word")
    against_all(words)  # validates
    if all(w == REPRODUCED for w in words):
        return REPRODUCED
    if any(w in (REPRODUCED, PARTLY) for w in words):
        return PARTLY
    if all(w == NOT_RUN for w in words):
        return NOT_RUN
    return against_all(w for w in words if w != NOT_RUN)


_RULE_KEYS = ("effect_ci", "control_ci", "diff_ci", "tol", "paper", "paper_control", "min_share", "setup_control", "null",
              "draws")


def dicts_in(data: Any, path: str = "", *, walk_into: Callable[[dict], bool] = lambda d: True) -> Iterator[tuple[str, dict]]:
    """(path, dict) for every dict in a study JSON, outer before inner, paths like "/claims/0";
    a dict for which `walk_into` is False is given but what it holds is not walked."""
    if isinstance(data, dict):
        yield path, data
        if not walk_into(data):
            return
        items: Iterable = data.items()
    elif isinstance(data, list):
        items = enumerate(data)
    else:
        return
    for k, v in items:
        yield from dicts_in(v, f"{path}/{k}", walk_into=walk_into)


def rejudge(data: Any, path: str = "") -> list[str]:
    """Every `judge` dict inside `data` whose stored word differs from the word its numbers give now."""
    bad = []
    for where, d in dicts_in(data, path):
        if {"claim_text", "effect", "control", "claim", "word"} <= set(d):
            rule = {k: d[k] for k in _RULE_KEYS if k in d}
            try:
                word = verdict(d["effect"], d["control"], d["claim"], **rule)
            except InterpError as e:
                word = f"error: {e}"
            if word != d["word"]:
                bad.append(f"{where or '/'}: says {d['word']!r}, its numbers give {word!r}")
    return bad
