"""Domain tasks for real BPE models: four domains of two or more tasks each (arithmetic, grammar,
facts, code), generated here and single-token-answered, for parameter probing (`interp.probing`).

    from interp.tasks import domains
    model = interp.load("smollm2-135m")
    suite = domains.suite(model, split="val", n=32)      # {domain: {task: Task}}
    task = domains.task(model, "facts", "capital", split="test", n=48)

A domain task is a `Task` whose `meta` holds `domain`, `options` (the token ids the answer is
chosen among: every answer the task can have) and `items` (how many distinct items the split
had). Its score is accuracy among the options (`option_accuracy`); `incorrect` is the
highest-ranked wrong option of a fixed order (the next item's answer), so `logit_diff` also works.
Rows are BOS + prompt, right-padded with the tokenizer's pad id (or 0); `answer_pos` is each row's
last prompt token, so a causal model never sees the padding before it.

Items split deterministically into "val" (the probe's validation set) and "test" (held out):
each item (a question with its answer) belongs to one split, so a subnetwork is never scored on
the items it was probed on. Asking for more rows than a split has raises an InterpError that says
how many there are. Prompts are few-shot where a 135M model needs the format shown (arithmetic,
facts); every example in a prompt comes from the same split as its question.

The zoo's multi-domain model (`interp.tasks.multidomain`) has its own word-level versions of
these domains.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from interp.errors import InterpError

from .base import Task, pad_id
from .source import Source

__all__ = ["DOMAINS", "MATCHED_DOMAINS", "SPLITS", "check_split", "check_task_name", "split_items", "domain_task", "option_accuracy", "option_scores", "suite", "task"]

SPLITS = ("val", "test")

# ---------------------------------------------------------------------------------------------
# items: (question slots, answer) per task; answers are words that must be one token with a space

_COUNTRIES = [  # (country, capital, language)
    ("France", "Paris", "French"), ("Germany", "Berlin", "German"), ("Italy", "Rome", "Italian"),
    ("Spain", "Madrid", "Spanish"), ("Japan", "Tokyo", "Japanese"), ("China", "Beijing", "Chinese"),
    ("Russia", "Moscow", "Russian"), ("Egypt", "Cairo", "Arabic"), ("Greece", "Athens", "Greek"),
    ("Portugal", "Lisbon", "Portuguese"), ("England", "London", "English"), ("Poland", "Warsaw", "Polish"),
    ("Austria", "Vienna", "German"), ("Sweden", "Stockholm", "Swedish"), ("Norway", "Oslo", "Norwegian"),
    ("Turkey", "Ankara", "Turkish"), ("Ireland", "Dublin", "English"), ("Hungary", "Budapest", "Hungarian"),
    ("Finland", "Helsinki", "Finnish"), ("Denmark", "Copenhagen", "Danish"), ("Korea", "Seoul", "Korean"),
    ("Thailand", "Bangkok", "Thai"), ("Kenya", "Nairobi", "Swahili"), ("Peru", "Lima", "Spanish"),
    ("Cuba", "Havana", "Spanish"), ("Mexico", "Mexico", "Spanish"), ("Brazil", "Brasilia", "Portuguese"),
    ("Argentina", "Buenos", "Spanish"), ("Iran", "Tehran", "Persian"), ("Iraq", "Baghdad", "Arabic"),
    ("India", "Delhi", "Hindi"), ("Canada", "Ottawa", "English"), ("Australia", "Canberra", "English"),
    ("Belgium", "Brussels", "French"), ("Netherlands", "Amsterdam", "Dutch"), ("Switzerland", "Bern", "German"),
    ("Ukraine", "Kyiv", "Ukrainian"), ("Vietnam", "Hanoi", "Vietnamese"), ("Israel", "Jerusalem", "Hebrew"),
    ("Syria", "Damascus", "Arabic"), ("Chile", "Santiago", "Spanish"), ("Colombia", "Bogota", "Spanish"),
]
_EUROPE = {"France", "Germany", "Italy", "Spain", "Russia", "Greece", "Portugal", "England", "Poland", "Austria",
           "Sweden", "Norway", "Ireland", "Hungary", "Finland", "Denmark", "Belgium", "Netherlands", "Switzerland",
           "Ukraine"}
_AFRICA = {"Egypt", "Kenya"}
_AMERICA = {"Peru", "Cuba", "Mexico", "Brazil", "Argentina", "Canada", "Chile", "Colombia"}
_CONTINENT = {c[0]: ("Europe" if c[0] in _EUROPE else "Africa" if c[0] in _AFRICA else "America" if c[0] in _AMERICA
                     else "Oceania" if c[0] == "Australia" else "Asia") for c in _COUNTRIES}
# functions for the code domain: (name, operator)
_OPERATORS = [("add", "+"), ("plus", "+"), ("total", "+"), ("sum_two", "+"), ("subtract", "-"), ("minus", "-"),
              ("difference", "-"), ("diff", "-"), ("multiply", "*"), ("times", "*"), ("product", "*"),
              ("mul", "*"), ("divide", "/"), ("div", "/"), ("ratio", "/"), ("quotient", "/")]
_PARAMS = ["value", "name", "items", "text", "count", "data", "number", "key", "result", "node", "path",
           "size", "index", "line", "word", "user", "price", "score", "total", "length", "width", "height",
           "color", "message", "query", "token", "label", "record", "state", "config", "target", "source"]
_FUNCS = ["identity", "first", "get", "load", "read", "clean", "parse", "show", "check", "keep", "echo", "pass_on"]


def _items(domain: str, name: str) -> list[tuple[str, dict[str, str], str]]:
    """(key, slots, answer) per item; items of one key (a country, a pair of numbers, a function
    or parameter name) always fall in the same split."""
    if domain == "arithmetic":
        op = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "times": lambda a, b: a * b}[name]
        pairs = [(a, b) for a in range(10) for b in range(10) if 0 <= op(a, b) <= 9]  # one-digit answers
        return [(f"{a},{b}", {"a": str(a), "b": str(b)}, str(op(a, b))) for a, b in pairs]
    if domain == "facts" and name == "continent":
        return [(c[0], {"x": c[0]}, _CONTINENT[c[0]]) for c in _COUNTRIES]
    if domain == "facts":
        col = {"capital": 1, "language": 2}[name]
        return [(c[0], {"x": c[0]}, c[col]) for c in _COUNTRIES]
    if domain == "code" and name == "first_arg":
        names = [("a", "b"), ("x", "y"), ("m", "n"), ("left", "right")]
        return [(f, {"f": f, "a": a, "b": b}, a) for f, _ in _OPERATORS for a, b in names]
    if domain == "code" and name == "operator":
        names = [("a", "b"), ("x", "y"), ("m", "n"), ("left", "right")]
        return [(f, {"f": f, "a": a, "b": b}, op) for f, op in _OPERATORS for a, b in names]
    if domain == "code":  # return_arg: each parameter name under three function names
        return [(p, {"f": _FUNCS[(3 * i + j) % len(_FUNCS)], "p": p}, p) for i, p in enumerate(_PARAMS) for j in range(3)]
    raise InterpError(f"no items for {domain}/{name}")


# a prompt is `shots` solved examples (same template, same split) then the question; each item
# is asked in every template of its task
_TEMPLATES: dict[str, dict[str, tuple[tuple[str, ...], int]]] = {
    "arithmetic": {
        "add": (("{a} + {b} = {answer}", "{a} plus {b} is {answer}"), 2),
        "sub": (("{a} - {b} = {answer}", "{a} minus {b} is {answer}"), 2),
    },
    "facts": {
        "capital": (("The capital of {x} is {answer}", "{x}'s capital city is {answer}"), 1),
        "language": (("In {x}, people speak {answer}", "The main language of {x} is {answer}"), 1),
    },
    "code": {
        "operator": (("def {f}({a}, {b}):\n    return {a} {answer}",
                      "def {f}({a}, {b}):\n    result = {a} {answer}"), 0),
        "return_arg": (("def {f}({p}):\n    return {answer}",), 0),
    },
}
# format-matched prompts: one "Q: ...\nA: answer" frame and one solved example for every
# templated domain, so a domain's tasks share no more frame tokens with each other than with another
# domain's. Grammar has no such form (its answer is the next word of a sentence) and is left out.
_MATCHED: dict[str, dict[str, tuple[tuple[str, ...], int]]] = {
    "arithmetic": {"add": (("Q: {a} plus {b}?\nA: {answer}",), 1), "sub": (("Q: {a} minus {b}?\nA: {answer}",), 1),
                   "times": (("Q: {a} times {b}?\nA: {answer}",), 1)},
    "facts": {"capital": (("Q: the capital of {x}?\nA: {answer}",), 1),
              "language": (("Q: the language of {x}?\nA: {answer}",), 1),
              "continent": (("Q: the continent of {x}?\nA: {answer}",), 1)},
    "code": {"operator": (("Q: the operator of {f}({a}, {b})?\nA: {answer}",), 1),
             "return_arg": (("Q: what {f}({p}) returns?\nA: {answer}",), 1),
             "first_arg": (("Q: the first parameter of {f}({a}, {b})?\nA: {answer}",), 1)},
}
# three tasks a domain in the matched format: with two, a permutation test of within- against across-domain
# overlap has only 15 ways to deal six tasks to three domains and cannot go below p = 1/15
MATCHED_DOMAINS: dict[str, tuple[str, ...]] = {d: tuple(ts) for d, ts in _MATCHED.items()}
FORMATS = ("default", "matched")
DOMAINS: dict[str, tuple[str, ...]] = {
    "arithmetic": ("add", "sub"), "grammar": ("sva_none", "sva_pp", "sva_rc"), "facts": ("capital", "language"),
    "code": ("operator", "return_arg"),
}
_SVA = {"sva_none": "none", "sva_pp": "pp_mismatch", "sva_rc": "rc_mismatch"}


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise InterpError(f"split={split!r} is not a domain split; valid: {', '.join(SPLITS)}")


def check_task_name(domains: dict[str, Any], domain: str, name: str) -> None:
    """InterpError unless `name` is a task of `domain` in `domains` (domain -> its tasks)."""
    if domain not in domains:
        raise InterpError(f"unknown domain {domain!r}; valid: {', '.join(domains)}")
    if name not in domains[domain]:
        raise InterpError(f"unknown {domain} task {name!r}; valid: {', '.join(domains[domain])}")


def split_items(items: list, split: str, seed: str) -> list:
    """The items of `split`: items of every other key (their first element), in a fixed shuffle
    seeded by the string `seed`, are validation items, the rest training items."""
    keys = list(dict.fromkeys(it[0] for it in items))
    random.Random(seed).shuffle(keys)
    chosen = {k for j, k in enumerate(keys) if (j % 2 == 0) == (split == "val")}
    return [it for it in items if it[0] in chosen]


def domain_task(name: str, domain: str, split: str, rows: list[list[int]], correct: list[int], options: Sequence[int],
                texts: Sequence[str], pad_id: int, seed: int, items: int) -> Task:
    """A Task from prompt rows and answer ids; `incorrect` is the option after the correct one."""
    options = list(dict.fromkeys(options))
    if len(options) < 2:
        raise InterpError(f"{domain}/{name}: a domain task needs at least two answer options, got {options}")
    place = {t: i for i, t in enumerate(options)}
    incorrect = [options[(place[c] + 1) % len(options)] for c in correct]
    width = max(len(r) for r in rows)
    clean = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        clean[i, : len(r)] = torch.tensor(r)
    return Task(name=name, split=split, clean=clean, corrupt=clean.clone(), correct=torch.tensor(correct),
                incorrect=torch.tensor(incorrect), answer_pos=torch.tensor([len(r) - 1 for r in rows]),
                text=tuple(texts), metric="accuracy", seed=seed,
                meta={"domain": domain, "options": options, "items": items})


def _need(domain: str, name: str, split: str, have: int, n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InterpError(f"n={n!r} must be a positive int")
    if n > have:
        raise InterpError(f"domain {domain!r} task {name!r} has only {have} {split} examples, but {n} were asked; "
                          f"ask for at most {have}")


def task(model: Any, domain: str, name: str, *, split: str = "val", n: int = 32, seed: int = 0,
         fmt: str = "default", repeat: bool = False) -> Task:
    """One domain task for a real model (a loaded bridge or a Hugging Face tokenizer), `n` rows.
    fmt="matched": the one Q/A frame of every domain (not grammar). repeat=True: when the split has
    fewer items than `n`, items are asked again under other solved examples (meta["keys"] names each
    row's item, so a bootstrap can resample items rather than rows); a zero-shot task (code) cannot
    differ on a second asking and gives each of its items once, fewer than `n` rows."""
    from . import bpe

    if fmt not in FORMATS:
        raise InterpError(f"fmt={fmt!r} is not a prompt format; valid: {', '.join(FORMATS)}")
    if fmt == "matched" and domain not in _MATCHED:
        raise InterpError(f"domain {domain!r} has no format-matched prompts; those that do: {', '.join(_MATCHED)}")
    check_task_name(MATCHED_DOMAINS if fmt == "matched" else DOMAINS, domain, name)
    check_split(split)
    if domain == "grammar":  # agreement from the real-model SVA task, made a domain task
        # bpe.sva draws words per seed: seed 0 is val, seed 1 test (few word collisions remain:
        # SVA examples are templated sentences, not memorised items)
        base = bpe.sva(model, n, split=_SVA[name], seed=2 * seed + (split == "test"))
        rows = [r[: int(p) + 1].tolist() for r, p in zip(base.clean, base.answer_pos)]
        opts = sorted(set(base.correct.tolist()) | set(base.incorrect.tolist()))
        out = domain_task(name, domain, split, rows, base.correct.tolist(), opts, base.text, _pad(model), seed, n)
        return _with_incorrect(out, base.incorrect)
    src = Source(model, None)
    templates, shots = (_MATCHED if fmt == "matched" else _TEMPLATES)[domain][name]
    items = [(k, slots, ans, t) for k, slots, ans in _items(domain, name) for t in templates]
    pool = split_items(items, split, f"domains/{domain}/{name}")
    if not repeat:
        _need(domain, name, split, len(pool), n)
    rng = random.Random(f"{domain}/{name}/{split}/{seed}")
    rows, correct, texts, keys, seen = [], [], [], [], set()
    for rnd in range(1 + (n // max(1, len(pool)) + 1 if repeat else 0)):  # later rounds: other solved examples
        for key, slots, ans, template in rng.sample(pool, len(pool)):
            if len(rows) == n:
                break
            others = [it for it in pool if it[0] != key and it[3] == template]
            for _ in range(8):  # a repeated item must come under solved examples it has not had yet
                shown = [template.format(**s, answer=a) for _, s, a, _ in (rng.sample(others, shots) if shots else [])]
                if "\n".join([*shown, template.format(**slots, answer=ans)]) not in seen:
                    break
            else:
                continue
            found = _answer_token(src, template, slots, ans, shown)
            if found is None:  # the answer merges with the prompt in this tokenizer: not a clean item
                continue
            rows.append(found[0])
            correct.append(found[1])
            texts.append("\n".join([*shown, template.format(**slots, answer=ans)]))
            seen.add(texts[-1])
            keys.append(f"{key}|{template}")
        if not shots:
            break  # zero-shot prompts cannot differ on a second round: each item once
    if not (repeat and not shots):
        _need(domain, name, split, len(rows), n)
    options = {found[1] for _, slots, ans, t in items if (found := _answer_token(src, t, slots, ans)) is not None}
    out = domain_task(name, domain, split, rows, correct, sorted(options), texts, _pad(model), seed, len(pool))
    out.meta["keys"] = keys
    out.meta["format"] = fmt
    return out


def _answer_token(src, template: str, slots: dict[str, str], answer: str,
                  shown: Sequence[str] = ()) -> tuple[list[int], int] | None:
    """(prompt row, answer id): the prompt is everything before the answer, and the answer is the
    one token that follows it when the whole line is tokenized at once. The separating space ends
    the prompt where the tokenizer makes it its own token (" 7" is " " + "7" in SmolLM2 and
    Gemma-3), else it starts the answer (" Paris"). None: the answer is not one such token."""
    before = template.format(**slots, answer="\x00").split("\x00")[0]
    head = "\n".join([*shown, ""])
    full = src.row(head + before + answer)
    for prompt in (before.rstrip(" "), before):
        row = src.row(head + prompt)
        if len(full) == len(row) + 1 and full[: len(row)] == row:
            return row, full[-1]
    return None


def _with_incorrect(t: Task, incorrect: Tensor) -> Task:
    from dataclasses import replace

    return replace(t, incorrect=incorrect.clone())


def _pad(model: Any) -> int:
    pad = pad_id(model)
    return 0 if pad is None else pad


def suite(model: Any, *, split: str = "val", n: int = 32, seed: int = 0,
          domains: Sequence[str] | None = None, fmt: str = "default", repeat: bool = False) -> dict[str, dict[str, Task]]:
    """{domain: {task: Task}} for every task of the chosen domains (default: all four; with
    fmt="matched", the three that have format-matched prompts)."""
    chosen = (list(DOMAINS) if fmt != "matched" else list(_MATCHED)) if domains is None else list(domains)
    names = MATCHED_DOMAINS if fmt == "matched" else DOMAINS
    for d in chosen:
        if d not in names:
            raise InterpError(f"unknown domain {d!r} for fmt={fmt!r}; valid: {', '.join(names)}")
    return {d: {name: task(model, d, name, split=split, n=n, seed=seed, fmt=fmt, repeat=repeat) for name in names[d]}
            for d in chosen}


# ---------------------------------------------------------------------------------------------
# scores


def option_scores(logits: Tensor, task: Task) -> Tensor:
    """[batch] 1.0 where the correct answer outranks every other option at the answer position."""
    if logits.ndim != 3 or logits.shape[0] != len(task):
        raise InterpError(f"logits {tuple(logits.shape)} must be [batch, pos, d_vocab] for the task's {len(task)} rows")
    options = task.meta.get("options")
    if not options:
        raise InterpError(f"task {task.name} has no meta['options']; it is not a domain task")
    rows = torch.arange(len(task), device=logits.device)
    at = logits[rows, task.answer_pos.to(logits.device)]  # [batch, d_vocab]
    opts = torch.as_tensor(options, device=logits.device)
    best = opts[at[:, opts].argmax(-1)]
    return (best == task.correct.to(logits.device)).float()


def option_accuracy(task: Task) -> Callable[[Tensor], Tensor]:
    """logits -> the mean accuracy among the task's options (a metric for `interp.run.evaluate`)."""
    return lambda logits: option_scores(logits, task).mean()
