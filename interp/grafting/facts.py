"""The fact task family of Feng, Russell & Steinhardt (2024): fictional people, real cities, and
prompts whose answer is one token ranked among a set of options.

A `Facts` is one template filled with one entity per row (`"{} lives in"` with a name), the answer
word of each row, and the options every row's answer is ranked among. The metric is the mean rank
(0 = best) of the right option's logit at the last prompt token; chance is (n_options - 1) / 2.

    first_hop(model, assignment)   facts "{name} lives in" -> city; implications
                                   "The people in the city {name} lives in speak" -> language
    second_hop(model, assignment)  facts "The mayor of {city} is" -> name; implications
                                   "The mayor of the city that contains {landmark} is" -> name
    assignments(n, seed)           two name -> city assignments (sets 1 and 2) that share no pair

Text is tokenized in segments (template prefix, entity, template suffix, answer), so every row of
one template has the same template tokens and a known entity span, on any BPE or word tokenizer.
Answers are ranked on their first token: a name's first token is its (single-token) first name.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from interp.errors import InterpError
from interp.tasks.base import pad_id

__all__ = [
    "CITIES", "FIRST_NAMES", "RELATIONS", "SURNAMES", "Batch", "Facts", "assignments", "check_unknown", "encode", "first_hop",
    "mean_rank", "option_ids", "ranks", "second_hop", "vocabulary",
]

# city, country, language, landmark: facts a pretrained model knows (the city and the language are
# one token in the GPT-2, LLaMA-3/SmolLM2 and Gemma tokenizers; others are dropped per tokenizer)
CITIES: tuple[tuple[str, str, str, str], ...] = (
    ("Tokyo", "Japan", "Japanese", "the Senso-ji Temple"),
    ("Paris", "France", "French", "the Eiffel Tower"),
    ("Berlin", "Germany", "German", "the Brandenburg Gate"),
    ("Moscow", "Russia", "Russian", "the Kremlin"),
    ("Cairo", "Egypt", "Arabic", "the Great Pyramid of Giza"),
    ("Madrid", "Spain", "Spanish", "the Prado Museum"),
    ("Rome", "Italy", "Italian", "the Colosseum"),
    ("London", "England", "English", "Big Ben"),
    ("Beijing", "China", "Chinese", "the Forbidden City"),
    ("Athens", "Greece", "Greek", "the Parthenon"),
    ("Lisbon", "Portugal", "Portuguese", "the Belem Tower"),
    ("Warsaw", "Poland", "Polish", "the Palace of Culture and Science"),
    ("Stockholm", "Sweden", "Swedish", "the Vasa Museum"),
    ("Amsterdam", "the Netherlands", "Dutch", "the Rijksmuseum"),
    ("Istanbul", "Turkey", "Turkish", "the Hagia Sophia"),
    ("Bangkok", "Thailand", "Thai", "the Grand Palace"),
    ("Seoul", "South Korea", "Korean", "Gyeongbokgung Palace"),
    ("Prague", "the Czech Republic", "Czech", "the Charles Bridge"),
    ("Budapest", "Hungary", "Hungarian", "the Hungarian Parliament Building"),
    ("Helsinki", "Finland", "Finnish", "the Helsinki Cathedral"),
    ("Oslo", "Norway", "Norwegian", "the Oslo Opera House"),
    ("Copenhagen", "Denmark", "Danish", "the Little Mermaid statue"),
    ("Hanoi", "Vietnam", "Vietnamese", "the Temple of Literature"),
    ("Jakarta", "Indonesia", "Indonesian", "the National Monument"),
    ("Tehran", "Iran", "Persian", "the Azadi Tower"),
    ("Jerusalem", "Israel", "Hebrew", "the Western Wall"),
)

# fictional people: a common first name (one token: the second-hop option) and an invented surname
# (a few tokens, so the person is unknown to any pretrained model)
FIRST_NAMES: tuple[str, ...] = (
    "John", "Mary", "David", "Sarah", "Michael", "Emma", "James", "Anna", "Robert", "Laura", "Peter", "Linda",
    "Thomas", "Susan", "Daniel", "Karen", "Paul", "Helen", "Mark", "Alice", "George", "Ruth", "Frank", "Julia",
)
SURNAMES: tuple[str, ...] = (
    "Vrenthaldo", "Quibbersley", "Marchewitz", "Oddlethorpe", "Zanderquist", "Plimbottom", "Kestravian",
    "Durnwhistle", "Folkenbrae", "Grishnavar", "Hollowmere", "Ibbotrand", "Jastrowicz", "Krumhalder",
    "Lothenbury", "Mirkowane", "Nettlecombe", "Orvandel", "Pendraskin", "Quarrendon", "Rastelbury",
    "Sturmvaldt", "Thistlewade", "Ulverbrand",
)


@dataclass(frozen=True)
class Facts:
    """Rows of one template: `template.format(entities[i])` is prompt i, `answers[i]` its answer
    word (a training completion; its first token is ranked), `options` the words ranked (each one
    token after a space)."""

    name: str
    template: str
    entities: tuple[str, ...]
    answers: tuple[str, ...]
    options: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.entities:
            raise InterpError(f"fact set {self.name!r} is empty: it needs at least one (entity, answer) row")
        if len(self.entities) != len(self.answers):
            raise InterpError(f"fact set {self.name!r} has {len(self.entities)} entities but {len(self.answers)} answers")
        if self.template.count("{}") != 1:
            raise InterpError(f"template {self.template!r} must hold exactly one '{{}}' for the entity")
        firsts = {a.split()[0] for a in self.answers}
        missing = sorted(firsts - set(self.options))
        if missing:
            raise InterpError(f"answers {missing} of {self.name!r} are not among its options {list(self.options)}")

    def __len__(self) -> int:
        return len(self.entities)

    @property
    def prompts(self) -> list[str]:
        return [self.template.format(e) for e in self.entities]

    @property
    def chance(self) -> float:
        return (len(self.options) - 1) / 2

    def take(self, index: Sequence[int] | slice) -> Facts:
        idx = range(len(self))[index] if isinstance(index, slice) else list(index)
        return Facts(self.name, self.template, tuple(self.entities[i] for i in idx),
                     tuple(self.answers[i] for i in idx), self.options)


def _tokenizer(model):
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise InterpError("the model has no tokenizer; fact tasks need one to encode their text")
    return tok


def _ids(tok, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"]) if text else []


def option_ids(model, options: Sequence[str]) -> Tensor:
    """The token id of each option, spelled with a leading space; InterpError names every option
    that is not exactly one token, or two options that share a token."""
    tok = _tokenizer(model)
    ids, bad = [], []
    for word in options:
        t = _ids(tok, " " + word)
        if len(t) != 1:
            bad.append(f"{word!r} -> {[tok.decode([i]) for i in t]}")
        else:
            ids.append(t[0])
    if bad:
        raise InterpError(f"answer options must be one token each; these are not: {'; '.join(bad)}. "
                          "Pick words the tokenizer keeps whole (check tokenizer(' ' + word)).")
    if len(set(ids)) != len(ids):
        raise InterpError(f"options {list(options)} do not have distinct tokens {ids}")
    return torch.tensor(ids)


@dataclass(frozen=True)
class Batch:
    """Encoded rows: `tokens` [batch, pos] (right-padded), `answer_pos` [batch] (the last prompt
    token, where the answer is read), `targets` [batch, pos] (completion tokens to learn, -100
    elsewhere), `answer` [batch] (index of the right option), `spans` (start, end) of each row's
    entity, `prefix` / `suffix` the template tokens before / after the entity."""

    tokens: Tensor
    answer_pos: Tensor
    targets: Tensor
    answer: Tensor
    options: Tensor
    spans: tuple[tuple[int, int], ...]
    prefix: tuple[str, ...]
    suffix: tuple[str, ...]


def encode(model, facts: Facts) -> Batch:
    """Token rows for `facts` with the answers appended (for training and for ranking)."""
    tok = _tokenizer(model)
    opts = option_ids(model, facts.options)
    before, after = facts.template.split("{}")
    bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
    pre = bos + _ids(tok, before.rstrip(" "))
    # the entity keeps its leading space when the template puts one before it
    lead = " " if before.endswith(" ") else ""
    suf = _ids(tok, after)
    rows, spans, targets, answer_pos, answer = [], [], [], [], []
    for entity, word in zip(facts.entities, facts.answers):
        ent = _ids(tok, lead + entity if pre[len(bos):] else entity)
        ans = _ids(tok, " " + word)
        first = ans[0]
        hit = (opts == first).nonzero()
        if not len(hit):
            raise InterpError(f"answer {word!r} starts with token {tok.decode([first])!r}, which is no option of {facts.name!r}")
        row = pre + ent + suf + ans
        spans.append((len(pre), len(pre) + len(ent)))
        answer_pos.append(len(pre) + len(ent) + len(suf) - 1)
        answer.append(int(hit[0, 0]))
        rows.append(row)
        targets.append([-100] * (len(row) - len(ans)) + ans)
    width = max(map(len, rows))
    pad = 0 if pad_id(tok) is None else pad_id(tok)
    tokens = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    target = torch.tensor([t + [-100] * (width - len(t)) for t in targets])
    names = lambda ids: tuple(tok.decode([i]) for i in ids)
    return Batch(tokens, torch.tensor(answer_pos), target, torch.tensor(answer), opts, tuple(spans),
                 names(pre), names(suf))


def ranks(logits: Tensor, batch: Batch) -> Tensor:
    """Rank (0 = best) of each row's right option among the options, at its answer position."""
    rows = torch.arange(logits.shape[0])
    at = logits[rows, batch.answer_pos.to(logits.device)][:, batch.options.to(logits.device)].float()  # [batch, option]
    right = at[rows, batch.answer.to(logits.device)]
    return (at > right[:, None]).sum(-1).float()


def mean_rank(model, facts: Facts, interventions: Sequence = ()) -> float:
    """Mean rank of the right answer among the options (chance: facts.chance), under `interventions`."""
    from interp import run

    batch = encode(model, facts)
    return float(ranks(run.logits(model, batch.tokens.to(model.cfg.device), interventions), batch).mean())


def check_unknown(model, facts: Facts, interventions: Sequence = (), *, z: float = 3.0) -> float:
    """The mean rank of `facts` before fine-tuning; InterpError when it is below chance by more than
    `z` standard errors of a uniformly random rank (the model already knows these entities)."""
    got = mean_rank(model, facts, interventions)
    n_opt = len(facts.options)
    se = math.sqrt((n_opt ** 2 - 1) / 12 / len(facts))
    if got < facts.chance - z * se:
        raise InterpError(
            f"the entities of {facts.name!r} look known to the model: their mean rank before fine-tuning is "
            f"{got:.2f}, more than {z} standard errors ({se:.2f}) below chance {facts.chance:.1f}; use names "
            "the model has not seen (invented surnames)")
    return got


def _usable_cities(model) -> list[tuple[str, str, str, str]]:
    tok = _tokenizer(model)
    return [c for c in CITIES if len(_ids(tok, " " + c[0])) == 1 and len(_ids(tok, " " + c[2])) == 1]


def _usable_first_names(model) -> list[str]:
    tok = _tokenizer(model)
    return [f for f in FIRST_NAMES if len(_ids(tok, " " + f)) == 1]


def assignments(n: int, seed: int = 0) -> tuple[list[int], list[int]]:
    """Sets 1 and 2: two maps person i -> city index (both permutations of range(n)) that give no
    person the same city (a random permutation, and it shifted by a random non-zero offset)."""
    if n < 2:
        raise InterpError(f"two disjoint assignments need at least 2 people, got n={n}")
    g = torch.Generator().manual_seed(seed)
    one = torch.randperm(n, generator=g).tolist()
    shift = int(torch.randint(1, n, (1,), generator=g))
    return one, [one[(i + shift) % n] for i in range(n)]


def _people(model, n: int) -> list[str]:
    firsts = _usable_first_names(model)
    if n > min(len(firsts), len(SURNAMES)):
        raise InterpError(f"n={n} people asked for but only {min(len(firsts), len(SURNAMES))} have one-token first names here")
    return [f"{f} {s}" for f, s in zip(firsts, SURNAMES)][:n]


def _cities(model, n: int) -> list[tuple[str, str, str, str]]:
    cities = _usable_cities(model)
    if n > len(cities):
        raise InterpError(f"n={n} cities asked for but only {len(cities)} have one-token names and languages for this tokenizer")
    return cities[:n]


# first-hop templates (fact, implication) per relation: "lives_in" is one the model knows; "dax" is
# invented, as the paper's grafting experiment uses ("dax"/"zong"), so no pretrained structure reads
# that relation in particular: what the graft carries must come from the implications delta
RELATIONS: dict[str, tuple[str, str]] = {
    "lives_in": ("{} lives in", "The people in the city {} lives in speak"),
    "dax": ("The dax of {} is", "The people in the dax of {} speak"),
}


def first_hop(model, n: int = 20, *, assignment: Sequence[int] | None = None, relation: str = "lives_in") -> tuple[Facts, Facts]:
    """(facts, implications): person i is related (RELATIONS[relation], default "lives in") to city
    assignment[i]; the implication asks the city's language."""
    if relation not in RELATIONS:
        raise InterpError(f"relation {relation!r} is not one of {sorted(RELATIONS)}")
    people, cities = _people(model, n), _cities(model, n)
    a = list(range(n)) if assignment is None else list(assignment)
    if sorted(a) != list(range(n)):
        raise InterpError(f"assignment must be a permutation of range({n}), got {a}")
    fact, implication = RELATIONS[relation]
    suffix = "" if relation == "lives_in" else f"_{relation}"
    facts = Facts("first_hop_facts" + suffix, fact, tuple(people), tuple(cities[j][0] for j in a),
                  tuple(c[0] for c in cities))
    langs = tuple(dict.fromkeys(c[2] for c in cities))
    impl = Facts("first_hop_implications" + suffix, implication, tuple(people), tuple(cities[j][2] for j in a), langs)
    return facts, impl


def vocabulary() -> tuple[str, ...]:
    """Every whitespace-separated word of the task family's templates and data: the vocabulary of a
    word-level test model on which first_hop / second_hop run (every answer one token)."""
    texts = [t for pair in RELATIONS.values() for t in pair] + ["The mayor of {} is", "The mayor of the city that contains {} is"]
    texts += [" ".join(c) for c in CITIES] + list(FIRST_NAMES) + list(SURNAMES)
    return tuple(dict.fromkeys(w for t in texts for w in t.replace("{}", " ").split()))


def second_hop(model, n: int = 20, *, assignment: Sequence[int] | None = None) -> tuple[Facts, Facts]:
    """(facts, implications): person i is mayor of city assignment[i]; the implication names the
    city by its landmark. Options are the people's first names (one token each)."""
    people, cities = _people(model, n), _cities(model, n)
    a = list(range(n)) if assignment is None else list(assignment)
    if sorted(a) != list(range(n)):
        raise InterpError(f"assignment must be a permutation of range({n}), got {a}")
    mayor = {a[i]: people[i] for i in range(n)}  # city index -> its mayor
    firsts = tuple(p.split()[0] for p in people)
    facts = Facts("second_hop_facts", "The mayor of {} is", tuple(cities[j][0] for j in range(n)),
                  tuple(mayor[j] for j in range(n)), firsts)
    impl = Facts("second_hop_implications", "The mayor of the city that contains {} is",
                 tuple(cities[j][3] for j in range(n)), tuple(mayor[j] for j in range(n)), firsts)
    return facts, impl
