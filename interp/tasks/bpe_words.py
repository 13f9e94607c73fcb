"""The curated word lists and templates of `interp.tasks.bpe`, before per-tokenizer filtering.

Words are given without their leading space; `bpe` keeps those that are one token (with the space)
in a model's tokenizer. Pairs are (singular, plural).
"""

from __future__ import annotations

__all__ = ["ANIMATE", "IOI_TEMPLATES", "NAMES", "NOUNS", "OBJECTS", "PLACES", "PREPOSITIONS", "TRANSITIVE", "VERBS"]

NAMES: tuple[str, ...] = tuple(
    """Mary John James Anna David Sarah Michael Laura Robert Emma Daniel Kate Thomas Lisa Paul Julia
    Mark Alice Peter Rose George Helen Frank Grace Henry Claire Jack Susan Edward Amy Oliver Nina
    Victor Diana Hugo Irene Simon Lucy Martin Eva William Elizabeth Richard Jennifer Charles Linda
    Joseph Barbara Christopher Jessica Matthew Karen Anthony Nancy Steven Betty Andrew Sandra Joshua
    Ashley Kevin Emily Brian Donna Ryan Michelle Jacob Carol Gary Amanda Eric Melissa Jason Deborah
    Jeffrey Stephanie Scott Rebecca Justin Sharon Brandon Cynthia Benjamin Kathleen Samuel Amy Gregory
    Angela Patrick Anna Alexander Brenda Jonathan Pamela Raymond Nicole Dennis Samantha Tyler Katherine
    Aaron Christine Adam Rachel Nathan Catherine Henry Carolyn Zachary Janet Douglas Maria Peter Heather
    Kyle Diane Walter Olivia Ethan Julie Jeremy Joyce Harold Victoria Keith Kelly Christian Christina
    Roger Lauren Noah Joan Gerald Evelyn Carl Judith Terry Megan Sean Cheryl Austin Andrea Arthur Hannah
    Lawrence Martha Jesse Jacqueline Dylan Frances Bryan Gloria Joe Ann Jordan Teresa Billy Kathryn
    Bruce Sara Albert Janice Willie Jean Gabriel Alice Logan Madison Alan Doris Juan Abigail Wayne Julia
    Roy Judy Ralph Grace Randy Denise Eugene Amber Vincent Marilyn Russell Beverly Elijah Danielle
    Louis Theresa Bobby Sophia Philip Marie Johnny Diana Tom Max Ben Sam Tim Dan Bob Jim Ted Luke
    Leo Ian Ray Ruth Kim Jane Beth Eve Liz Meg Sue Tina Jill Dave Mike Steve Chris Alex Tony""".split()
)
NAMES = tuple(dict.fromkeys(NAMES))  # ordered de-duplication
PLACES: tuple[str, ...] = tuple(
    """store park school office station hospital restaurant beach library museum market church garden
    bank cafe airport hotel theater gym zoo farm mall bakery lake house kitchen shop club party house
    village city forest river beach pool stadium office hall bar""".split()
)
PLACES = tuple(dict.fromkeys(PLACES))
OBJECTS: tuple[str, ...] = tuple(
    """drink ring snack gift ball necklace computer bone book letter key card flower cake hat pen phone
    bag box coin toy apple basket kite ticket watch bottle map camera bicycle sandwich cookie shirt
    jacket candle lamp painting present banana orange pencil cup plate knife guitar picture note
    dress scarf""".split()
)
OBJECTS = tuple(dict.fromkeys(OBJECTS))
# (singular, plural) noun pairs; the first block is animate (usable as a relative-clause subject)
ANIMATE = (
    ("author", "authors"), ("pilot", "pilots"), ("surgeon", "surgeons"), ("farmer", "farmers"),
    ("manager", "managers"), ("customer", "customers"), ("officer", "officers"), ("teacher", "teachers"),
    ("senator", "senators"), ("doctor", "doctors"), ("lawyer", "lawyers"), ("student", "students"),
    ("dancer", "dancers"), ("singer", "singers"), ("soldier", "soldiers"), ("guard", "guards"),
    ("minister", "ministers"), ("parent", "parents"), ("child", "children"), ("man", "men"),
    ("woman", "women"), ("boy", "boys"), ("girl", "girls"), ("friend", "friends"), ("king", "kings"),
    ("nurse", "nurses"), ("driver", "drivers"), ("worker", "workers"), ("player", "players"),
    ("artist", "artists"), ("writer", "writers"), ("leader", "leaders"), ("officer", "officers"),
    ("judge", "judges"), ("chef", "chefs"), ("athlete", "athletes"), ("engineer", "engineers"),
)
_THINGS = (
    ("key", "keys"), ("cabinet", "cabinets"), ("book", "books"), ("table", "tables"), ("door", "doors"),
    ("box", "boxes"), ("car", "cars"), ("tree", "trees"), ("house", "houses"), ("window", "windows"),
    ("chair", "chairs"), ("picture", "pictures"), ("bottle", "bottles"), ("letter", "letters"),
    ("road", "roads"), ("lamp", "lamps"), ("cup", "cups"), ("shoe", "shoes"), ("painting", "paintings"),
    ("bridge", "bridges"), ("building", "buildings"), ("computer", "computers"), ("phone", "phones"),
    ("plate", "plates"), ("report", "reports"), ("machine", "machines"), ("garden", "gardens"),
    ("wall", "walls"), ("bed", "beds"), ("desk", "desks"), ("bag", "bags"), ("engine", "engines"),
)
NOUNS: tuple[tuple[str, str], ...] = tuple(dict.fromkeys(ANIMATE + _THINGS))
ANIMATE = tuple(dict.fromkeys(ANIMATE))
# (singular, plural) verb pairs that can answer an SVA prompt
VERBS: tuple[tuple[str, str], ...] = (
    ("is", "are"), ("was", "were"), ("has", "have"), ("does", "do"), ("seems", "seem"),
    ("runs", "run"), ("walks", "walk"), ("works", "work"), ("looks", "look"), ("remains", "remain"),
    ("stands", "stand"), ("sits", "sit"), ("goes", "go"), ("comes", "come"), ("makes", "make"),
)
# (singular, plural) transitive verb pairs for relative clauses "that the {M} {V}"
TRANSITIVE: tuple[tuple[str, str], ...] = (
    ("likes", "like"), ("sees", "see"), ("needs", "need"), ("wants", "want"), ("knows", "know"),
    ("loves", "love"), ("hates", "hate"), ("admires", "admire"), ("helps", "help"), ("meets", "meet"),
    ("finds", "find"), ("follows", "follow"), ("hears", "hear"), ("trusts", "trust"), ("calls", "call"),
    ("visits", "visit"), ("praises", "praise"), ("thanks", "thank"),
)
PREPOSITIONS: tuple[str, ...] = (
    "near", "behind", "beside", "under", "above", "by", "with", "from", "on", "in", "of", "to", "for",
    "next to", "across from", "in front of", "close to", "opposite",
)

# {A} {B}: the first-clause names in order; {S}: the repeated subject; {P} a place, {O} an object
IOI_TEMPLATES: tuple[str, ...] = (
    "When {A} and {B} went to the {P}, {S} gave a {O} to",
    "After {A} and {B} went to the {P}, {S} gave a {O} to",
    "While {A} and {B} were working at the {P}, {S} gave a {O} to",
    "While {A} and {B} were commuting to the {P}, {S} gave a {O} to",
    "When {A} and {B} got a {O} at the {P}, {S} decided to give it to",
    "Then, {A} and {B} went to the {P}. {S} gave a {O} to",
    "Then, {A} and {B} had a lot of fun at the {P}. {S} gave a {O} to",
    "Then, {A} and {B} were working at the {P}. {S} decided to give a {O} to",
    "Then, {A} and {B} had a long argument, and afterwards {S} said to",
    "After the lunch, {A} and {B} went to the {P}. {S} gave a {O} to",
    "Afterwards, {A} and {B} went to the {P}. {S} gave a {O} to",
    "Friends {A} and {B} found a {O} at the {P}. {S} gave it to",
    "The {P} {A} and {B} went to had a {O}. {S} gave it to",
)
