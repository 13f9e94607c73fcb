"""A small synthetic English: subject-verb agreement (SVA), indirect-object identification (IOI)
and filler sentences over a fixed lowercase word vocabulary (`WORDS`, every word one token).

Sentences (words separated by single spaces, ending in " ."):

* SVA: ``SUBJECT PREDICATE .`` where SUBJECT is ``the key`` (no attractor), ``the key to the
  cabinets`` (prepositional-phrase attractor) or ``the key that the men like`` (relative-clause
  attractor; the inner verb agrees with the inner noun). The predicate's first word is the main
  verb and agrees with the head noun. In the training corpus the attractor has the head's number
  with probability `attractor_match`, so "copy the nearest noun" is tempting but not enough.
* IOI: eight templates after Wang et al. 2022, e.g. ``when mary and john went to the store ,
  john gave a drink to mary .``, with both name orders (ABBA and BABA).
* Filler: simple, compound (``and``/``but``/``because``) and adverb-led clauses with noun or name
  subjects and agreeing verbs, no subject attractors.

How the splits are made:

* Subject phrases with an attractor are partitioned by a stable hash of their words (no seed):
  1/8 appear only in ``sva_attractor_mismatch`` rows, 1/8 only in ``sva_id`` rows and `prefixes`,
  6/8 only in the training `corpus`. So no evaluation prompt with an attractor is ever a training
  subject, and the two SVA splits share no sentence.
* ``sva_id``: a third each of no attractor, PP and RC (the kind is drawn first, then a phrase of
  that kind until its hash bucket fits), the attractor matching the head's number with
  probability 0.85, as in the corpus. So "agree with the nearest noun" scores about
  1/3 + 2/3 * 0.85 = 0.90 on it (`nearest_noun_agrees`), and 0 on ``sva_attractor_mismatch``:
  always a PP or RC attractor of the other number, half each.
* The training `corpus` draws the kind before the bucket check and keeps every attractor-free
  subject, so its SVA sentences are about 40 % none, 30 % PP, 30 % RC (kept as trained).
* Names: `TRAIN_NAMES` (30) appear in the corpus's IOI sentences and ``ioi`` ``train``;
  `TEST_NAMES` (10) appear in ``ioi`` ``test`` and, outside any IOI context, in the corpus's
  filler sentences. The zoo's language models keep every name's embedding at a shared learned
  vector plus a fixed random code (`interp.zoo.train.NameCodes`): a held-out name differs from a
  training name only in its code, and that code never took part in an IOI training sentence.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any, Sequence

import torch

from interp.errors import InterpError

from .base import BOS_ID, EOS_ID, MASK_ID, SPECIALS, Task, pad_rows, word_tokenizer

# The surface (`from interp.tasks.english import *`, the docs): at most 15 names; the word lists and helpers
# below it stay importable by name.
__all__ = [
    "SPLITS_IOI", "SPLITS_SVA", "TEST_NAMES", "WORDS", "corpus", "encode", "ioi", "judge", "nearest_noun_agrees",
    "noun_number", "prefixes", "sva", "tokenizer", "verb_number"
]

SPLITS_SVA = ("sva_id", "sva_attractor_mismatch")
SPLITS_IOI = ("train", "test")
MAX_WORDS = 24  # longest sentence the grammar makes (two 11-word clauses, a conjunction, "."), no BOS/EOS

_ANIMATE = (
    "man men woman women child children dog dogs cat cats teacher teachers student students doctor doctors "
    "farmer farmers bird birds boy boys girl girls friend friends author authors pilot pilots lawyer lawyers "
    "horse horses officer officers singer singers baker bakers neighbor neighbors king kings nurse nurses"
).split()
_THINGS = (
    "key keys cabinet cabinets book books table tables door doors box boxes car cars tree trees house houses "
    "window windows chair chairs picture pictures bottle bottles letter letters garden gardens road roads "
    "river rivers lamp lamps cup cups shoe shoes apple apples flower flowers painting paintings"
).split()
_COPULA = "is are was were has have".split()
_INTRANS = (
    "runs run walks walk sleeps sleep sings sing smiles smile waits wait laughs laugh swims swim talks talk "
    "works work"
).split()
_TRANS = (
    "likes like sees see needs need wants want finds find knows know carries carry loves love holds hold "
    "opens open visits visit remembers remember watches watch follows follow helps help"
).split()
_ANY_INTRANS = "falls fall breaks break shines shine stays stay moves move".split()
_ADJ_ANIMATE = "happy tired young hungry busy".split()
_ADJ_THING = "red blue green heavy broken clean bright cold new empty".split()
_ADJ_BOTH = "old big small brown tall".split()
DETERMINERS = tuple("the my your our his her their".split())
PREPOSITIONS = tuple("of to near behind beside under with on by from at".split())
ADVERBS = tuple("often always never today here there again slowly quietly now afterwards".split())
TRAIN_NAMES = tuple(
    "mary john james anna david sarah michael laura robert emma daniel kate thomas lisa paul julia mark "
    "alice peter rose george helen frank grace henry claire jack susan edward amy".split()
)
TEST_NAMES = tuple("oliver nina victor diana hugo irene simon lucy martin eva".split())
_PLACES = "store park school office station hospital restaurant beach".split()
_OBJECTS = "drink ring snack gift ball necklace computer bone".split()
_IOI_TEMPLATES = (  # {A} {B}: the two names in first-mention order; {S}: the repeated subject
    "when {A} and {B} went to the {P} , {S} gave a {O} to",
    "then , {A} and {B} went to the {P} . {S} gave a {O} to",
    "after {A} and {B} went to the {P} , {S} gave a {O} to",
    "while {A} and {B} were working at the {P} , {S} gave a {O} to",
    "when {A} and {B} got a {O} at the {P} , {S} decided to give it to",
    "friends {A} and {B} found a {O} at the {P} . {S} gave it to",
    "{A} and {B} had a long argument , and afterwards {S} said to",
    "after the lunch , {A} and {B} went to the {P} . {S} gave a {O} to",
)
_IOI_WORDS = (
    "when then after while went gave a got decided give it friends found had long argument said lunch working"
).split()
_GLUE = ". , that and but because".split()

WORDS: tuple[str, ...] = tuple(
    dict.fromkeys(  # ordered de-duplication ("to", "at", "the" are shared between groups)
        [*_GLUE, *DETERMINERS, *PREPOSITIONS, *ADVERBS, *_ANIMATE, *_THINGS, *_COPULA, *_INTRANS, *_TRANS,
         *_ANY_INTRANS, *_ADJ_ANIMATE, *_ADJ_THING, *_ADJ_BOTH, *_PLACES, *_OBJECTS, *_IOI_WORDS,
         *TRAIN_NAMES, *TEST_NAMES]
    )
)
_ID = {w: i + 5 for i, w in enumerate(WORDS)}
_NOUNS, _VERBS = _ANIMATE + _THINGS, _COPULA + _INTRANS + _TRANS + _ANY_INTRANS  # (singular, plural) pairs
_NOUN_NUMBER = {w: ("sg", "pl")[i % 2] for i, w in enumerate(_NOUNS)}
_VERB_NUMBER = {w: ("sg", "pl")[i % 2] for i, w in enumerate(_VERBS)}
_FLIP = {w: ws[i ^ 1] for ws in (_NOUNS, _VERBS) for i, w in enumerate(ws)}  # key <-> keys, is <-> are
_NAMES = frozenset(TRAIN_NAMES + TEST_NAMES)
_FLIP_NUMBER = {"sg": "pl", "pl": "sg"}
_ADJECTIVES = frozenset(_ADJ_ANIMATE + _ADJ_THING + _ADJ_BOTH)
_BOUNDARY = frozenset(". , and but because when while after then".split())


def words() -> tuple[str, ...]:
    return WORDS


def tokenizer():
    return word_tokenizer(WORDS)


def noun_number(word: str) -> str | None:
    return _NOUN_NUMBER.get(word)


def verb_number(word: str) -> str | None:
    """"sg" / "pl" for a present-tense verb with two forms ("is", "run"), else None ("went")."""
    return _VERB_NUMBER.get(word)


def encode(sentences: Sequence[str]) -> list[list[int]]:
    """BOS + word ids + EOS per sentence; an unknown word is an error, not [UNK]."""
    out = []
    for s in sentences:
        unknown = [w for w in s.split() if w not in _ID]
        if unknown:
            raise InterpError(f"word {unknown[0]!r} in {s!r} is not in the vocabulary (english.WORDS)")
        out.append([BOS_ID, *(_ID[w] for w in s.split()), EOS_ID])
    return out


# ---------------------------------------------------------------------------------------------
# grammar: every helper takes the rng and returns a list of words


def _noun(rng: random.Random, number: str, animate: bool | None = None) -> str:
    pool = _ANIMATE if animate else _THINGS if animate is False else rng.choice((_ANIMATE, _THINGS))
    return rng.choice(pool[0::2] if number == "sg" else pool[1::2])


def _np(rng: random.Random, number: str, animate: bool | None = None) -> list[str]:
    noun = _noun(rng, number, animate)
    adj = _ADJ_BOTH + (_ADJ_ANIMATE if noun in _ANIMATE else _ADJ_THING)
    return [rng.choice(DETERMINERS), *([rng.choice(adj)] if rng.random() < 0.25 else []), noun]


def _form(forms: list[str], i: int, number: str) -> str:
    """The `number` form of the i-th (singular, plural) pair in a flat list of forms."""
    return forms[2 * i + (number == "pl")]


def _predicate(rng: random.Random, number: str, animate: bool) -> list[str]:
    """A verb phrase whose first word is the verb agreeing with `number`."""
    kinds = ["copula", "has", "any"] + (["intrans", "trans", "trans"] if animate else [])
    kind = rng.choice(kinds)
    if kind == "copula":
        adj = _ADJ_BOTH + (_ADJ_ANIMATE if animate else _ADJ_THING)
        return [_form(_COPULA, rng.randrange(2), number), rng.choice(adj)]
    if kind == "has":
        return [_form(_COPULA, 2, number), *_np(rng, rng.choice(("sg", "pl")))]
    if kind in ("intrans", "any"):
        verbs = _INTRANS if kind == "intrans" else _ANY_INTRANS
        tail = [rng.choice(ADVERBS[:9])] if rng.random() < 0.4 else []  # not "now" / "afterwards" at the end
        return [_form(verbs, rng.randrange(len(verbs) // 2), number), *tail]
    obj = _np(rng, rng.choice(("sg", "pl")))
    pp = [rng.choice(PREPOSITIONS), *_np(rng, rng.choice(("sg", "pl")))] if rng.random() < 0.3 else []
    return [_form(_TRANS, rng.randrange(len(_TRANS) // 2), number), *obj, *pp]


def _subject(rng: random.Random, number: str, kind: str, attractor: str) -> list[str]:
    """An SVA subject phrase: kind "none", "pp" or "rc"; `attractor` is the attractor's number."""
    head = [rng.choice(DETERMINERS), _noun(rng, number)]
    if kind == "none":
        return head
    if kind == "pp":
        return [*head, rng.choice(PREPOSITIONS[:-1]), *_np(rng, attractor)]  # no "at": "the key at the ..."
    inner_verb = _form(_TRANS, rng.randrange(len(_TRANS) // 2), attractor)
    return [*head, "that", *_np(rng, attractor, animate=True), inner_verb]


def _bucket(phrase: list[str]) -> str:
    """Which data may use this attractor phrase: "mismatch", "id" or "train" (see module doc)."""
    h = int.from_bytes(hashlib.blake2b(" ".join(phrase).encode(), digest_size=8).digest(), "little") % 8
    return "mismatch" if h == 0 else "id" if h == 1 else "train"


def _sva_subject(
    rng: random.Random, split: str, match: float, kinds: tuple[str, ...]
) -> tuple[list[str], str, str]:
    """(subject words, head number, kind) drawn until its hash bucket belongs to `split`."""
    while True:
        number, kind = rng.choice(("sg", "pl")), rng.choice(kinds)
        same = split != "mismatch" and rng.random() < match
        attractor = number if same else _FLIP_NUMBER[number]
        phrase = _subject(rng, number, kind, attractor)
        if kind == "none" or _bucket(phrase) == split:
            return phrase, number, kind


def _sva_subject_of_kind(rng: random.Random, split: str, match: float, kind: str) -> tuple[list[str], str]:
    """(subject words, head number) of the given kind, redrawn until its hash bucket belongs to
    `split`, so the kinds keep the proportions they are asked for."""
    while True:
        number = rng.choice(("sg", "pl"))
        same = split != "mismatch" and rng.random() < match
        phrase = _subject(rng, number, kind, number if same else _FLIP_NUMBER[number])
        if kind == "none" or _bucket(phrase) == split:
            return phrase, number


def _clause(rng: random.Random, names: Sequence[str]) -> list[str]:
    """A filler clause: a noun or name subject (no attractor) and an agreeing predicate."""
    r = rng.random()
    if r < 0.6:
        number = rng.choice(("sg", "pl"))
        subject = _np(rng, number)
        animate = subject[-1] in _ANIMATE
    elif r < 0.8:
        subject, number, animate = [rng.choice(names)], "sg", True
    else:
        a, b = rng.sample(list(names), 2)
        subject, number, animate = [a, "and", b], "pl", True
    return [*subject, *_predicate(rng, number, animate)]


def _filler(rng: random.Random, names: Sequence[str]) -> str:
    r = rng.random()
    if r < 0.5:
        out = _clause(rng, names)
    elif r < 0.65:
        out = [rng.choice(("today", "now", "again", "afterwards")), ",", *_clause(rng, names)]
    else:
        out = [*_clause(rng, names), rng.choice(("and", "but", "because")), *_clause(rng, names)]
    return " ".join([*out, "."])


def _ioi(rng: random.Random, names: Sequence[str]) -> tuple[str, str, str, str]:
    """(prompt ending before the indirect object, IO, S, a third name C)."""
    io, s, c = rng.sample(list(names), 3)
    a, b = (io, s) if rng.random() < 0.5 else (s, io)  # ABBA or BABA
    prompt = rng.choice(_IOI_TEMPLATES).format(A=a, B=b, S=s, P=rng.choice(_PLACES), O=rng.choice(_OBJECTS))
    return prompt, io, s, c


# ---------------------------------------------------------------------------------------------
# public generators


def corpus(
    n: int, *, seed: int = 0, attractor_match: float = 0.85, mix: Sequence[float] = (0.4, 0.2, 0.4)
) -> list[str]:
    """`n` training sentences; `mix` = fractions of (SVA, IOI, filler).

    IOI sentences use TRAIN_NAMES only. Filler sentences use every name, so the held-out
    TEST_NAMES occur in training (as subjects) but never in an IOI context: the `ioi` `test`
    split asks whether the IOI mechanism generalises to names it was not trained on."""
    _check_n(n)
    if not 0 <= attractor_match <= 1:
        raise InterpError(f"attractor_match={attractor_match} must lie in [0, 1]")
    if len(mix) != 3 or min(mix) < 0 or abs(sum(mix) - 1) > 1e-6:
        raise InterpError(f"mix={mix} must be three non-negative fractions (sva, ioi, filler) summing to 1")
    rng = random.Random(f"english/corpus/{seed}")
    out = []
    for _ in range(n):
        kind = rng.choices(("sva", "ioi", "filler"), weights=mix)[0]
        if kind == "sva":
            phrase, number, _ = _sva_subject(rng, "train", attractor_match, ("none", "pp", "rc"))
            out.append(" ".join([*phrase, *_predicate(rng, number, phrase[1] in _ANIMATE), "."]))
        elif kind == "ioi":
            prompt, io, _, _ = _ioi(rng, TRAIN_NAMES)
            out.append(f"{prompt} {io} .")
        else:
            out.append(_filler(rng, TRAIN_NAMES + TEST_NAMES))
    return out


def filler(n: int, *, seed: int = 0) -> list[str]:
    """`n` filler sentences (training names only)."""
    _check_n(n)
    rng = random.Random(f"english/filler/{seed}")
    return [_filler(rng, TRAIN_NAMES) for _ in range(n)]


def prefixes(n: int, *, seed: int = 0) -> list[str]:
    """`n` held-out subject phrases with a PP or RC attractor ("the keys to the cabinet"), never
    a subject in `corpus`; head and attractor numbers are independent and uniform."""
    _check_n(n)
    rng = random.Random(f"english/prefixes/{seed}")
    return [" ".join(_sva_subject(rng, "id", 0.5, ("pp", "rc"))[0]) for _ in range(n)]


def sva(n: int, *, split: str = "sva_id", seed: int = 0, masked: bool = False) -> Task:
    """Subject-verb agreement. correct = the agreeing form of a verb the grammar allows after the
    subject ("is"), incorrect = its other form ("are"); corrupt = the same row with the head noun's
    number flipped ("key" -> "keys"), whose answer is `incorrect`.

    Causal (masked=False): row = BOS + subject phrase; logits at answer_pos (the last position)
    predict the verb. Masked (masked=True, for a BERT-style model): row = BOS + the whole sentence
    with the verb replaced by [MASK] + EOS, and the logits AT answer_pos (the [MASK]) predict the
    verb; `meta["masked"]` records which. `meta["kind"]` is "none" / "pp" / "rc" per row.
    """
    _check_n(n)
    if split not in SPLITS_SVA:
        raise InterpError(f"split={split!r} is not an sva split; valid: {', '.join(SPLITS_SVA)}")
    rng = random.Random(f"english/sva/{split}/{seed}")
    bucket, kinds = ("id", ("none", "pp", "rc")) if split == "sva_id" else ("mismatch", ("pp", "rc"))
    rows, kind_of, attractor = [], [], []
    for _ in range(n):
        kind = kinds[len(rows) % len(kinds)]  # exact thirds (halves on mismatch), in a fixed rotation
        phrase, number = _sva_subject_of_kind(rng, bucket, 0.85, kind)
        # with BOS at 0: the head noun is at 2; the attractor noun ends a PP, precedes the RC's verb
        attractor.append(None if kind == "none" else len(phrase) if kind == "pp" else len(phrase) - 1)
        verb, *rest = _predicate(rng, number, phrase[1] in _ANIMATE)
        row = [BOS_ID, *(_ID[w] for w in phrase)]
        if masked:  # the whole sentence, the verb hidden
            row += [MASK_ID, *(_ID[w] for w in rest), _ID["."], EOS_ID]
        flipped = [*row[:2], _ID[_FLIP[phrase[1]]], *row[3:]]  # row = BOS, determiner, head noun, ...
        rows.append((row, flipped, _ID[verb], _ID[_FLIP[verb]], len(phrase) + masked))
        kind_of.append(kind)
    positions = {"subject": [2] * n}
    if all(a is not None for a in attractor):
        positions["attractor"] = attractor
    positions["verb" if masked else "END"] = [r[-1] for r in rows]
    return _task("sva", split, seed, rows, {"masked": masked, "kind": kind_of}, positions)


def nearest_noun_agrees(task: Task) -> torch.Tensor:
    """Per row of an ``sva`` task: does "agree with the nearest noun before the verb" give the
    right verb? (The baseline a heuristic reaches with no syntax: right on attractor-free rows and
    on attractors of the head's number, wrong on the others.)"""
    if task.name != "sva":
        raise InterpError(f"nearest_noun_agrees needs an sva task, got {task.name!r}")
    vocab = (*SPECIALS, *WORDS)
    out = []
    for row, pos, correct in zip(task.clean.tolist(), task.answer_pos.tolist(), task.correct.tolist()):
        before = row[: pos + (not task.meta.get("masked", False))]  # causal: the verb follows answer_pos
        nouns = [vocab[t] for t in before if vocab[t] in _NOUN_NUMBER]
        out.append(_NOUN_NUMBER[nouns[-1]] == _VERB_NUMBER[vocab[correct]])
    return torch.tensor(out)


def ioi(n: int, *, split: str = "train", seed: int = 0) -> Task:
    """Indirect-object identification. clean = BOS + a template prompt ending in "to"; correct =
    the indirect object (IO), incorrect = the subject (S). corrupt (ABC) = the same row with the
    second S mention replaced by a third name C from the same name set. `train` uses TRAIN_NAMES,
    `test` only TEST_NAMES. `positions`: "IO" and "S1" (first mentions), "S2" (the repeated
    subject), "END" (the final "to", answer_pos); templates differ in length, so rows of one
    batch generally put them at different indices."""
    _check_n(n)
    if split not in SPLITS_IOI:
        raise InterpError(f"split={split!r} is not an ioi split; valid: {', '.join(SPLITS_IOI)}")
    names = TRAIN_NAMES if split == "train" else TEST_NAMES
    rng = random.Random(f"english/ioi/{split}/{seed}")
    rows, positions = [], {"IO": [], "S1": [], "S2": [], "END": []}
    for _ in range(n):
        prompt, io, s, c = _ioi(rng, names)
        ws = prompt.split()
        s2 = max(i for i, w in enumerate(ws) if w == s)  # the repeated subject is the last S mention
        clean = [BOS_ID, *(_ID[w] for w in ws)]
        corrupt = [BOS_ID, *(_ID[c if i == s2 else w] for i, w in enumerate(ws))]
        rows.append((clean, corrupt, _ID[io], _ID[s], len(ws)))
        for key, at in (("IO", ws.index(io)), ("S1", ws.index(s)), ("S2", s2), ("END", len(ws) - 1)):
            positions[key].append(at + 1)  # + 1 for BOS
    return _task("ioi", split, seed, rows, {}, positions)


def _task(name: str, split: str, seed: int, rows: list, meta: dict[str, Any],
          positions: dict[str, list[int]] | None = None) -> Task:
    """Task from (clean ids, corrupt ids, correct id, incorrect id, answer_pos) per example;
    the text of a row is its words after BOS; `positions` names token indices per row."""
    clean, corrupt, correct, incorrect, pos = zip(*rows)
    vocab = (*SPECIALS, *WORDS)
    text = tuple(" ".join(vocab[t] for t in r[1:]) for r in clean)
    return Task(name=name, split=split, clean=pad_rows(clean), corrupt=pad_rows(corrupt),
                correct=torch.tensor(correct), incorrect=torch.tensor(incorrect),
                answer_pos=torch.tensor(pos), text=text, metric="logit_diff", seed=seed, meta=meta,
                positions={k: torch.tensor(v, dtype=torch.long) for k, v in (positions or {}).items()})


# ---------------------------------------------------------------------------------------------
# judging generated text


def judge(sentence: str) -> dict[str, Any]:
    """Find each clause's subject (``the [adj] noun`` with PP / RC modifiers, a name, or ``name
    and name``) and the present-tense verb right after it (adverbs skipped), and check agreement.
    Relative-clause verbs are checked against their own subject too. Clauses with no such subject
    or verb (IOI past tense, free-form text) are skipped, not counted as errors.

    Returns {"checked": pairs found, "errors": disagreeing pairs, "pairs": [(subject, verb, ok)]}.
    """
    ws = [*sentence.split(), "."]  # the sentinel ends every scan below
    pairs: list[tuple[str, str, bool]] = []
    i, start = 0, True
    while i < len(ws):
        if ws[i] in _BOUNDARY or (start and ws[i] in ADVERBS):
            start, i = True, i + 1
            continue
        if start and ws[i] in _NAMES:  # "mary" or "mary and john"
            n = 3 if ws[i + 1] == "and" and ws[i + 2] in _NAMES else 1
            i = _agree(ws, i + n, " ".join(ws[i : i + n]), "pl" if n == 3 else "sg", pairs)
        elif start and (j := _np_end(ws, i)):
            head = ws[j - 1]
            while True:  # skip PP attractors; check and skip RC attractors
                if ws[j] in PREPOSITIONS and (after := _np_end(ws, j + 1)):
                    j = after
                elif ws[j] == "that" and (after := _np_end(ws, j + 1)):
                    j = _agree(ws, after, ws[after - 1], _NOUN_NUMBER[ws[after - 1]], pairs)
                else:
                    break
            i = _agree(ws, j, head, _NOUN_NUMBER[head], pairs)
        else:
            i += 1
        start = False
    return {"checked": len(pairs), "errors": sum(not ok for _, _, ok in pairs), "pairs": pairs}


def _np_end(ws: list[str], j: int) -> int:
    """Index just after ``det adj* noun`` starting at j, or 0 if there is none."""
    if ws[j] not in DETERMINERS:
        return 0
    j += 1
    while ws[j] in _ADJECTIVES:
        j += 1
    return j + 1 if ws[j] in _NOUN_NUMBER else 0


def _agree(ws: list[str], j: int, subject: str, number: str, pairs: list) -> int:
    """Record whether the verb at j (after adverbs) has `number`; return the index after it."""
    while ws[j] in ADVERBS:
        j += 1
    if ws[j] in _VERB_NUMBER:
        pairs.append((subject, ws[j], _VERB_NUMBER[ws[j]] == number))
        return j + 1
    return j


def agreement_errors(sentence: str) -> int:
    return judge(sentence)["errors"]


def _check_n(n: int) -> None:
    if n < 1:
        raise InterpError(f"n={n} must be >= 1")
