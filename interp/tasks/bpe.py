"""IOI and SVA for real pretrained models with any BPE tokenizer (SmolLM2, Gemma-3, GPT-2, ...).

    import interp
    from interp import tasks
    model = interp.load("smollm2-135m")
    task = tasks.bpe.ioi(model, n=32, split="abba")          # or tasks.make("ioi", split="abba", model=model)
    task = tasks.bpe.sva(model, n=32, split="pp_mismatch")   # or tasks.make("sva", split=..., model=model)

`model` is a loaded bridge (rows come from `model.to_tokens(text)`, so they follow the model's
BOS policy: SmolLM2 and Gemma-3 get BOS prepended) or a Hugging Face tokenizer (rows are
``[bos_token_id] + tokenizer.encode(text, add_special_tokens=False)``; `prepend_bos=False`, or a
tokenizer without a BOS token, drops the BOS).

Words. The curated lists below (`NAMES`, `PLACES`, `OBJECTS`, `NOUNS`, `VERBS`, `TRANSITIVE`,
`PREPOSITIONS`) are filtered per tokenizer to the words whose ``" " + word`` is exactly one token
(`single_token_words`, `vocabulary`). Words the caller passes explicitly (``names=[...]``) must
all be single tokens, or an InterpError names the word and how it splits.

Rows. A template such as ``"When {A} and {B} went to the {P}, {S} gave a {O} to"`` is split into
literal pieces and slots (a slot is always preceded by a space and filled by one token). The
expected row is BOS + the pieces' tokens with one token per slot; a row is kept only when the
whole prompt, tokenized at once, gives exactly that row, so no word merges with its neighbours
and every slot sits at a known position. All rows of one Task come from templates of one token
length, so the batch has no padding and `answer_pos` is the last position of every row.
Templates of another length are left out (`meta["templates"]` lists those used).

IOI (Wang et al. 2022): correct = " {IO}", incorrect = " {S}". Order "ABBA" = IO first
(``When Mary and John ..., John gave a drink to``), "BABA" = S first. Corrupt ("abc", the
default) = the two first-clause names replaced by two other names of the same pool, so the
prompt no longer says who the IO is; ``corruption="s2"`` instead replaces the second S mention
by a third name (the zoo's `english.ioi` corruption). Names split deterministically: every 4th
name of the curated list (or of the caller's `names`) is held out (`name_split`); the plain
splits use only training names, the ``*_heldout`` splits only held-out names.

SVA (Linzen et al. 2016; Marvin & Linzen 2018): ``The {N}`` ("none"), ``The {N} {prep} the
{M}`` ("pp") and ``The {N} that the {M} {V}`` ("rc", the inner verb agreeing with M); correct =
the verb form agreeing with N (" is" / " are" by default), incorrect = the other form; corrupt =
the same row with N's number flipped (" key" <-> " keys", both single tokens). Splits: "none",
"pp_match", "pp_mismatch", "rc_match", "rc_mismatch" (attractor M of the same / other number).

`from_prompts` builds a Task from the caller's own prompts and raises when their token lengths
differ. All sampling uses ``random.Random`` seeded from (family, split, seed), never global RNG.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch

from interp.errors import InterpError

from .base import Task
from .source import Source

# The surface (`from interp.tasks.bpe import *`, the docs): at most 15 names; the word lists and helpers
# below it stay importable by name.
__all__ = [
    "NAMES", "NOUNS", "SPLITS", "SPLITS_IOI", "SPLITS_SVA", "from_prompts", "ioi", "name_split",
    "single_token_words", "sva", "vocabulary"
]

SPLITS_IOI = ("mixed", "abba", "baba", "mixed_heldout", "abba_heldout", "baba_heldout")
SPLITS_SVA = ("none", "pp_match", "pp_mismatch", "rc_match", "rc_mismatch")
SPLITS: dict[str, tuple[str, ...]] = {"ioi": SPLITS_IOI, "sva": SPLITS_SVA}
_HELDOUT_EVERY = 4  # names at curated index i with i % 4 == 3 are held out

from interp.tasks.bpe_words import (  # noqa: E402  (the curated word lists and templates)
    ANIMATE, IOI_TEMPLATES, NAMES, NOUNS, OBJECTS, PLACES, PREPOSITIONS, TRANSITIVE, VERBS,
)

_SLOT = re.compile(r" \{([A-Z])\}")
_MAX_TRIES = 50  # resamples per row before giving up on a row that will not tokenize cleanly


# ---------------------------------------------------------------------------------------------
# tokenizer access


def single_token_words(model: Any, words: Sequence[str]) -> tuple[str, ...]:
    """The words of `words` whose " word" is exactly one token for this model / tokenizer."""
    src = Source(model, None)
    return tuple(w for w in words if src.word(w) is not None)


def _require_single(src: Source, words: Sequence[str], what: str) -> tuple[str, ...]:
    words = tuple(dict.fromkeys(words))
    for w in words:
        if not isinstance(w, str) or not w or w != w.strip():
            raise InterpError(f"{what}: {w!r} must be a non-empty word without surrounding spaces")
        if src.word(w) is None:
            raise InterpError(
                f"{what}: {w!r} is not a single token with its leading space in this tokenizer; "
                f"' {w}' splits as {src.splits_as(w)}"
            )
    return words


def _require_pairs(src: Source, pairs: Sequence[Sequence[str]], what: str) -> tuple[tuple[str, str], ...]:
    out = []
    for p in pairs:
        if isinstance(p, str) or len(p) != 2:
            raise InterpError(f"{what}: {p!r} must be a (singular, plural) pair of words")
        out.append(tuple(_require_single(src, p, what)))
        if len(out[-1]) != 2:
            raise InterpError(f"{what}: {p!r} has the same word twice")
    return tuple(out)


def _pairs(src: Source, pairs: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple(p for p in pairs if src.word(p[0]) is not None and src.word(p[1]) is not None)


def vocabulary(model: Any) -> dict[str, tuple]:
    """Every curated list filtered to this tokenizer's single-token words (pairs: both forms)."""
    src = Source(model, None)
    train, heldout = name_split(single_token_words(model, NAMES))
    return {
        "names": tuple(w for w in NAMES if src.word(w) is not None),
        "names_train": train,
        "names_heldout": heldout,
        "places": tuple(w for w in PLACES if src.word(w) is not None),
        "objects": tuple(w for w in OBJECTS if src.word(w) is not None),
        "nouns": _pairs(src, NOUNS),
        "animate_nouns": _pairs(src, ANIMATE),
        "verbs": _pairs(src, VERBS),
        "transitive": _pairs(src, TRANSITIVE),
        "prepositions": tuple(p for p in PREPOSITIONS if all(src.word(w) is not None for w in p.split())),
    }


def name_split(names: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(training, held-out) names. Held out: every 4th name of the CURATED list `NAMES` (by its
    index there, so the split does not depend on the tokenizer); names not in `NAMES` are held
    out by their own index in `names` (every 4th)."""
    index = {w: i for i, w in enumerate(NAMES)}
    held = [w for j, w in enumerate(names) if index.get(w, j) % _HELDOUT_EVERY == _HELDOUT_EVERY - 1]
    return tuple(w for w in names if w not in held), tuple(held)


# ---------------------------------------------------------------------------------------------
# templates: literal pieces + one-token slots


class _Frame:
    """A template cut into literal pieces and slots, with each slot's token position."""

    def __init__(self, src: Source, template: str):
        self.template = template
        parts = _SLOT.split(template)  # [piece, slot, piece, slot, ..., piece]
        if "{" in "".join(parts[0::2]) or "}" in "".join(parts[0::2]):
            raise InterpError(
                f"template {template!r}: every slot must be written ' {{X}}' (a space, then one capital letter)"
            )
        self.pieces, self.slots = parts[0::2], parts[1::2]
        self.positions: list[int] = []  # slot i's position in the row, without BOS
        pos = 0
        for i, slot in enumerate(self.slots):
            pos += len(src.raw(self.pieces[i]))
            self.positions.append(pos)
            pos += 1
        self.length = pos + len(src.raw(self.pieces[-1]))  # tokens without BOS

    def expected(self, src: Source, fill: dict[str, str]) -> list[int]:
        out: list[int] = []
        for i, slot in enumerate(self.slots):
            out += src.raw(self.pieces[i])
            out.append(src.word(fill[slot]))
        return out + list(src.raw(self.pieces[-1]))

    def text(self, fill: dict[str, str]) -> str:
        return self.template.format(**fill)


def _encode_row(src: Source, frame: _Frame, fill: dict[str, str]) -> tuple[list[int], int] | None:
    """(row, prefix length) when the whole prompt tokenizes as pieces + one token per slot."""
    row = src.row(frame.text(fill))
    want = frame.expected(src, fill)
    if len(row) < len(want) or row[len(row) - len(want):] != want:
        return None
    return row, len(row) - len(want)


def _one_length(src: Source, templates: Sequence[str], given: bool, what: str) -> tuple[list[_Frame], list[int]]:
    """The frames of the most common token length (given=True: all must share one length)."""
    frames = [_Frame(src, t) for t in templates]
    counts = Counter(f.length for f in frames)
    if given and len(counts) > 1:
        lengths = ", ".join(f"{f.template!r}: {f.length}" for f in frames)
        raise InterpError(f"{what} must all have the same token length (no padding); got {lengths}")
    best = max(counts, key=lambda L: (counts[L], -L))
    keep = [i for i, f in enumerate(frames) if f.length == best]
    return [frames[i] for i in keep], keep


def _task(name: str, split: str, seed: int, rows: list[dict], meta: dict[str, Any]) -> Task:
    lengths = sorted({len(r["clean"]) for r in rows} | {len(r["corrupt"]) for r in rows})
    if len(lengths) != 1:  # cannot happen: every frame kept has one length
        raise InterpError(f"{name}/{split}: rows have token lengths {lengths}; one length is required")
    width = lengths[0]
    for key in rows[0].get("meta", {}):
        meta[key] = [r["meta"][key] for r in rows]
    positions = {k: torch.tensor([r["positions"][k] for r in rows], dtype=torch.long)
                 for k in rows[0].get("positions", {})}
    return Task(
        name=name,
        split=split,
        clean=torch.tensor([r["clean"] for r in rows], dtype=torch.long),
        corrupt=torch.tensor([r["corrupt"] for r in rows], dtype=torch.long),
        correct=torch.tensor([r["correct"] for r in rows], dtype=torch.long),
        incorrect=torch.tensor([r["incorrect"] for r in rows], dtype=torch.long),
        answer_pos=torch.full((len(rows),), width - 1, dtype=torch.long),
        text=tuple(r["text"] for r in rows),
        metric="logit_diff",
        seed=seed,
        meta=meta,
        positions=positions,
    )


def _check_n(n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InterpError(f"n={n!r} must be an integer >= 1")


def _templates_arg(templates: Sequence[str | int] | None, default: Sequence[str], what: str) -> tuple[list[str], bool]:
    if templates is None:
        return list(default), False
    if isinstance(templates, (str, int)):
        templates = [templates]
    out = []
    for t in templates:
        if isinstance(t, int):
            if not 0 <= t < len(default):
                raise InterpError(f"{what} index {t} is out of range 0..{len(default) - 1}")
            out.append(default[t])
        else:
            out.append(t)
    if not out:
        raise InterpError(f"{what} is empty")
    return out, True


# ---------------------------------------------------------------------------------------------
# IOI


def _ioi_fillers(model, src: Source, places, objects) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The single-token places and objects of an ioi task (given, or the defaults this tokenizer has)."""
    places = single_token_words(model, PLACES) if places is None else _require_single(src, places, "places")
    objects = single_token_words(model, OBJECTS) if objects is None else _require_single(src, objects, "objects")
    if not places or not objects:
        raise InterpError("no single-token places or objects for this tokenizer")
    return places, objects


def _check_ioi_slots(texts: Sequence[str]) -> None:
    for t in texts:
        missing = {"A", "B", "S"} - set(_SLOT.findall(t))
        if missing or set(_SLOT.findall(t)) - {"A", "B", "S", "P", "O"}:
            raise InterpError(f"template {t!r} needs slots ' {{A}}', ' {{B}}', ' {{S}}' (optional ' {{P}}', ' {{O}}')")


def ioi(
    model: Any,
    n: int = 32,
    *,
    split: str = "mixed",
    seed: int = 0,
    names: Sequence[str] | None = None,
    places: Sequence[str] | None = None,
    objects: Sequence[str] | None = None,
    templates: Sequence[str | int] | None = None,
    corruption: str = "abc",
    prepend_bos: bool | None = None,
) -> Task:
    """Indirect-object identification on a real tokenizer (see the module doc).

    `templates`: indices into `IOI_TEMPLATES` or template strings with slots {A} {B} {S} {P}
    {O}; by default the largest group of `IOI_TEMPLATES` sharing one token length (passed
    templates must share one length). meta: "order" (ABBA/BABA), "template" (index into
    meta["templates"]), "io", "s", the per-row token positions "a_pos", "b_pos", "s2_pos" (with
    BOS), "names" (the pool), "corruption". `positions`: "IO", "S1", "S2", "END" per row (with
    BOS); templates of one token length may still place the names differently.
    """
    _check_n(n)
    if split not in SPLITS_IOI:
        raise InterpError(f"split={split!r} is not a bpe ioi split; valid: {', '.join(SPLITS_IOI)}")
    if corruption not in ("abc", "s2"):
        raise InterpError(f"corruption={corruption!r}: valid are 'abc' (first-clause names) and 's2'")
    src = Source(model, prepend_bos)
    if names is None:
        pool = single_token_words(model, NAMES)
    else:
        pool = _require_single(src, names, "names")
    train, heldout = name_split(pool)
    pool = heldout if split.endswith("_heldout") else train
    need = 4 if corruption == "abc" else 3
    if len(pool) < need:
        raise InterpError(
            f"split {split!r} has {len(pool)} single-token names ({', '.join(pool) or 'none'}); "
            f"it needs at least {need}"
        )
    places, objects = _ioi_fillers(model, src, places, objects)
    texts, given = _templates_arg(templates, IOI_TEMPLATES, "templates")
    _check_ioi_slots(texts)
    frames, _ = _one_length(src, texts, given, "templates")
    orders = {"abba": ("ABBA",), "baba": ("BABA",)}.get(split.removesuffix("_heldout"), ("ABBA", "BABA"))
    rng = random.Random(f"bpe/ioi/{split}/{seed}")
    rows = []
    for i in range(n):
        for _ in range(_MAX_TRIES):
            f = rng.randrange(len(frames))
            frame = frames[f]
            order = rng.choice(orders)
            io, s, c, d = rng.sample(list(pool), 4) if need == 4 else (*rng.sample(list(pool), 3), None)
            a, b = (io, s) if order == "ABBA" else (s, io)
            fill = {"A": a, "B": b, "S": s, "P": rng.choice(places), "O": rng.choice(objects)}
            bad = fill | ({"A": c, "B": d} if corruption == "abc" else {"S": c})
            clean, corrupt = _encode_row(src, frame, fill), _encode_row(src, frame, bad)
            if clean is None or corrupt is None or clean[1] != corrupt[1]:
                continue
            off = clean[1]
            pos = {k: off + p for k, p in zip(frame.slots, frame.positions)}
            rows.append({
                "clean": clean[0], "corrupt": corrupt[0], "correct": src.word(io), "incorrect": src.word(s),
                "text": frame.text(fill),
                "meta": {"order": order, "template": f, "io": io, "s": s,
                         "a_pos": pos["A"], "b_pos": pos["B"], "s2_pos": pos["S"]},
                "positions": {"IO": pos["A"] if order == "ABBA" else pos["B"],
                              "S1": pos["B"] if order == "ABBA" else pos["A"],
                              "S2": pos["S"], "END": len(clean[0]) - 1},
            })
            break
        else:
            raise InterpError(
                f"ioi: no prompt of template {frame.template!r} tokenized as one token per name after "
                f"{_MAX_TRIES} tries; check the names / places / objects"
            )
    meta = {"templates": [fr.template for fr in frames], "names": tuple(pool), "corruption": corruption}
    return _task("ioi", split, seed, rows, meta)


# ---------------------------------------------------------------------------------------------
# SVA


def _sva_frames(src: Source, kind: str, prepositions, transitive):
    """(frames of one token length, a label per frame (its preposition), inner verb pairs) of an
    sva construction: "none" (The N), "pp" (The N PREP the M), "rc" (The N that the M V)."""
    inner: tuple[tuple[str, str], ...] = ()
    if kind == "none":
        frames, _ = _one_length(src, ["The {N}"], True, "sva")
        return frames, [None], inner
    if kind == "pp":
        preps, given = (list(PREPOSITIONS), False) if prepositions is None else (list(prepositions), True)
        if given and (bad := [p for p in preps if not p or "{" in p or p != p.strip()]):
            raise InterpError(f"prepositions: {bad[0]!r} must be a non-empty phrase without braces or outer spaces")
        frames, keep = _one_length(src, [f"The {{N}} {p} the {{M}}" for p in preps], given, "prepositions")
        return frames, [preps[i] for i in keep], inner
    inner = _pairs(src, TRANSITIVE) if transitive is None else _require_pairs(src, transitive, "transitive")
    if not inner:
        raise InterpError("sva: no single-token transitive verb pairs for this tokenizer")
    frames, _ = _one_length(src, ["The {N} that the {M} {V}"], True, "sva")
    return frames, [None], inner


def sva(
    model: Any,
    n: int = 32,
    *,
    split: str = "none",
    seed: int = 0,
    nouns: Sequence[tuple[str, str]] | None = None,
    verbs: Sequence[tuple[str, str]] | None = None,
    prepositions: Sequence[str] | None = None,
    transitive: Sequence[tuple[str, str]] | None = None,
    prepend_bos: bool | None = None,
) -> Task:
    """Subject-verb agreement on a real tokenizer (see the module doc).

    `nouns`: (singular, plural) pairs (default: `NOUNS`, relative-clause attractors from the
    animate ones); `verbs`: (singular, plural) answer pairs, one drawn per row (default
    ``[("is", "are")]``); `prepositions`: for "pp" splits (default: the largest group of
    `PREPOSITIONS` sharing one token length); `transitive`: the inner verb pairs of "rc" splits.
    meta: "kind", "number" (of the subject), "attractor_number" (None for "none"), "verb",
    per-row "subject_pos" / "attractor_pos" (with BOS; attractor_pos None for "none").
    `positions`: "subject", "attractor" (pp / rc splits), "END".
    """
    _check_n(n)
    if split not in SPLITS_SVA:
        raise InterpError(f"split={split!r} is not a bpe sva split; valid: {', '.join(SPLITS_SVA)}")
    src = Source(model, prepend_bos)
    kind = split.split("_")[0]
    if nouns is None:
        heads, animate = _pairs(src, NOUNS), _pairs(src, ANIMATE)
    else:
        heads = animate = _require_pairs(src, nouns, "nouns")
    verb_pairs = _require_pairs(src, [("is", "are")] if verbs is None else verbs, "verbs")
    attractors = animate if kind == "rc" else heads
    if len(heads) < 2 or len(attractors) < 2:
        raise InterpError(f"sva: only {len(heads)} single-token noun pairs for this tokenizer; need at least 2")
    frames, labels, inner = _sva_frames(src, kind, prepositions, transitive)
    match = split.endswith("_match")
    rng = random.Random(f"bpe/sva/{split}/{seed}")
    rows = []
    for i in range(n):
        for _ in range(_MAX_TRIES):
            f = rng.randrange(len(frames))
            frame = frames[f]
            number = rng.choice(("sg", "pl"))
            num = number == "pl"
            head = rng.choice(heads)
            fill = {"N": head[num]}
            att_number = None
            if kind != "none":
                att_number = number if match else ("pl" if number == "sg" else "sg")
                att = rng.choice([p for p in attractors if p != head])
                fill["M"] = att[att_number == "pl"]
                if kind == "rc":
                    fill["V"] = rng.choice(inner)[att_number == "pl"]
            verb = rng.choice(verb_pairs)
            clean = _encode_row(src, frame, fill)
            corrupt = _encode_row(src, frame, fill | {"N": head[not num]})
            if clean is None or corrupt is None or clean[1] != corrupt[1]:
                continue
            off = clean[1]
            pos = {k: off + p for k, p in zip(frame.slots, frame.positions)}
            rows.append({
                "clean": clean[0], "corrupt": corrupt[0],
                "correct": src.word(verb[num]), "incorrect": src.word(verb[not num]),
                "text": frame.text(fill),
                "meta": {"kind": kind, "number": number, "attractor_number": att_number,
                         "verb": verb[num], "preposition": labels[f],
                         "subject_pos": pos["N"], "attractor_pos": pos.get("M")},
                "positions": {"subject": pos["N"], **({"attractor": pos["M"]} if "M" in pos else {}),
                              "END": len(clean[0]) - 1},
            })
            break
        else:
            raise InterpError(f"sva: no prompt of template {frame.template!r} tokenized cleanly after {_MAX_TRIES} tries")
    meta = {"templates": [fr.template for fr in frames], "attractor": kind, "nouns": heads, "verbs": verb_pairs}
    return _task("sva", split, seed, rows, meta)


# ---------------------------------------------------------------------------------------------
# the caller's own prompts


def from_prompts(
    model: Any,
    clean: Sequence[str],
    corrupt: Sequence[str],
    correct: Sequence[str],
    incorrect: Sequence[str],
    *,
    name: str = "custom",
    split: str = "custom",
    seed: int = 0,
    meta: dict[str, Any] | None = None,
    prepend_bos: bool | None = None,
) -> Task:
    """A Task from prompt strings: every clean and corrupt prompt must have the same token length
    (no padding), and each answer (e.g. " Mary", with its leading space) must be one token."""
    src = Source(model, prepend_bos)
    k = len(clean)
    if k == 0 or not (len(corrupt) == len(correct) == len(incorrect) == k):
        raise InterpError(
            f"from_prompts: clean, corrupt, correct, incorrect must be non-empty and of one length; got "
            f"{len(clean)}, {len(corrupt)}, {len(correct)}, {len(incorrect)}"
        )
    rows_c = [src.row(t) for t in clean]
    rows_x = [src.row(t) for t in corrupt]
    lengths = Counter(len(r) for r in rows_c + rows_x)
    if len(lengths) > 1:
        detail = ", ".join(
            f"{what}[{i}] {t!r}: {len(r)}"
            for what, texts, rows in (("clean", clean, rows_c), ("corrupt", corrupt, rows_x))
            for i, (t, r) in enumerate(zip(texts, rows))
        )
        raise InterpError(
            f"from_prompts: prompts must all have the same token length (no padding); "
            f"got lengths {sorted(lengths)}: {detail}"
        )

    def answer(a: str, what: str) -> int:
        ids = src.raw(a)
        if len(ids) != 1:
            raise InterpError(f"{what} answer {a!r} is {len(ids)} tokens ({' + '.join(repr(src.tok.decode([t])) for t in ids)}); it must be one")
        return ids[0]

    rows = [
        {"clean": c, "corrupt": x, "correct": answer(a, "correct"), "incorrect": answer(b, "incorrect"), "text": t}
        for c, x, a, b, t in zip(rows_c, rows_x, correct, incorrect, clean)
    ]
    return _task(name, split, seed, rows, dict(meta or {}))
