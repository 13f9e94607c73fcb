"""Docs whose numbers are bound to their JSON: a renderer that names each number's key, and the check.

A study doc `docs/X.md` holds generated regions between `<!-- gen:NAME -->` and `<!-- /gen:NAME -->`.
Each region is rendered from `docs/X_repro.json` by a `Render`: every number in it comes from
`Render.num(...)` / `.pct(...)` / `.int(...)`, which formats the value at one JSON pointer
(RFC 6901, e.g. "/models/smollm2-135m/overlap/within") and records that pointer. The region ends
with one comment naming its pointers in the order their numbers appear:
``<!-- keys: ["/a/b", "/c/0"] -->``. So a table cell or a sentence says where its number lives.

`check(markdown, data)` re-reads each region: the numbers (outside code spans and comments) must be
as many as its keys, and each must equal the value at its key at the precision shown (an integer
shown must be that integer exactly; a decimal must round to it; "95.5 %" is 0.955). Floats are
always rendered with >= 3 significant digits and at least one decimal, so changing any reported
value by 1 % changes what it would render to, and the check fails (tests/test_docs.py does exactly
that for every key of every doc).

`prose_numbers(markdown, data)` lists the numbers of hand-written text (outside regions, code spans,
comments and headings' anchors) that are not tied to a key: allowed are years, reference numbers
("Table 2", "Figure 3", "claim 1", "§4") and numbers found under the JSON's non-result
blocks ("paper": the paper's own numbers; "budget": the run's configuration).

    r = Render(result)
    body = f"| model | within | across |\\n|---|---|---|\\n| SmolLM2 | {r.num('/overlap/within')} | ... |"
    write(Path("docs/specialization.md"), {"overlap": r.region(body)})
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Iterable

from interp.errors import InterpError
from interp.files.storage import fill_between, write_text_atomic
from interp.studies.verdicts import dicts_in

__all__ = ["COMMON_REGIONS", "Checker", "Render", "check", "common_regions", "write_common", "get", "headline_verdicts", "keys_of", "numbers_in", "pointer", "prose_numbers", "regions", "set_at", "write",
           "ALLOWED_BLOCKS"]

# a number not glued to a word or a hyphenated name ("h0", "L3H2", "Gemma-3", "4-layer" are labels),
# optionally a percentage
NUMBER = re.compile(r"(?<![\w.\-−])([-−]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?![\w.\-]*[A-Za-z_])(\s?%)?")
CODE = re.compile(r"`[^`\n]*`")
COMMENT = re.compile(r"<!--.*?-->", re.S)
REGION = re.compile(r"<!-- gen:([\w.-]+) -->\n(.*?)\n<!-- /gen:\1 -->", re.S)
KEYS = re.compile(r"<!-- keys: (\[.*?\]) -->", re.S)
# a number that refers to a place, not a result: "Table 2", "Fig. 3", "claim 1", "§4"
REFERENCE = re.compile(r"(?:table|tables|fig\.?|figure|figures|section|sec\.|§|eq\.?|equation|appendix|"
                       r"claim|claims|step|item|bullet|part|hop|arxiv|iclr|neurips|icml)\s*$", re.I)
ALLOWED_BLOCKS = ("paper", "budget")


def pointer(*parts: Any) -> str:
    """The JSON pointer of a path of keys / list indices: pointer("a", "0.7", 2) == "/a/0.7/2"."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _parts(ptr: str) -> list[str]:
    if not ptr.startswith("/"):
        raise InterpError(f"a JSON pointer starts with '/', got {ptr!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in ptr[1:].split("/")]


def get(data: Any, ptr: str) -> Any:
    """The value at JSON pointer `ptr` in `data`; InterpError naming the first missing step."""
    node = data
    for i, part in enumerate(_parts(ptr)):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise InterpError(f"{ptr}: no key {part!r} at /{'/'.join(_parts(ptr)[:i])} "
                              f"(there: {sorted(node)[:12] if isinstance(node, dict) else type(node).__name__})")
    return node


def set_at(data: Any, ptr: str, value: Any) -> None:
    """Set the value at `ptr` (which must exist) in place."""
    *head, last = _parts(ptr)
    parent = get(data, pointer(*head)) if head else data
    parent[int(last) if isinstance(parent, list) else last] = value


def _decimals_for(value: float, digits: int) -> int:
    """Decimals that show `value` with >= `digits` significant digits and at least one decimal."""
    if value == 0 or not math.isfinite(value):
        return max(1, digits - 1)
    return max(1, digits - 1 - math.floor(math.log10(abs(value))))


_MARK = re.compile("\x02(\\d+)\x03")


class Render:
    """Formats numbers of one result, each tagged with its JSON pointer; `region` closes a block.

    Each formatted number carries an invisible tag until `region` reads the tags in the order the
    numbers stand in the text (so the order of the calls does not matter, and a number formatted but
    not used names no key), then strips them."""

    def __init__(self, data: dict, *, digits: int = 3):
        self.data, self.digits, self._keys = data, digits, []

    def _tag(self, ptr: str, text: str) -> str:
        self._keys.append(ptr)
        return f"\x02{len(self._keys) - 1}\x03{text}"

    def _value(self, ptr: str) -> Any:
        value = get(self.data, ptr)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InterpError(f"{ptr} is {value!r}, not a number: a doc renders only numbers from keys")
        return value

    def num(self, ptr: str, *, digits: int | None = None, signed: bool = False) -> str:
        """The value at `ptr`: an int as is, a float with >= `digits` significant digits."""
        value = self._value(ptr)
        if isinstance(value, int):
            return self._tag(ptr, f"{value:+d}" if signed else str(value))
        if not math.isfinite(value):
            raise InterpError(f"{ptr} is {value}: a doc cannot state a non-finite number")
        decimals = _decimals_for(value, digits or self.digits)
        return self._tag(ptr, f"{value:+.{decimals}f}" if signed else f"{value:.{decimals}f}")

    def int(self, ptr: str) -> str:
        value = self._value(ptr)
        if not (isinstance(value, int) or float(value).is_integer()):
            raise InterpError(f"{ptr} is {value}, not an integer")
        return self._tag(ptr, str(int(value)))

    def pct(self, ptr: str, *, digits: int | None = None) -> str:
        """The fraction at `ptr` as a percentage ("95.5 %")."""
        value = float(self._value(ptr)) * 100
        return self._tag(ptr, f"{value:.{_decimals_for(value, digits or self.digits)}f} %")

    def text(self, ptr: str) -> str:
        """A string at `ptr` (a verdict word, a model name); not a number, so not recorded."""
        value = get(self.data, ptr)
        if not isinstance(value, str):
            raise InterpError(f"{ptr} is {value!r}, not a string")
        if numbers_in(value):
            raise InterpError(f"{ptr} = {value!r} holds numbers; render them with num() so they are bound")
        return value

    def region(self, body: str) -> str:
        """`body` with the comment naming the keys of its numbers; starts a fresh key list."""
        pending, self._keys = self._keys, []
        keys = [pending[int(i)] for i in _MARK.findall(body)]
        body = _MARK.sub("", body)
        found = numbers_in(body)
        if len(found) != len(keys):
            raise InterpError(f"a region has {len(found)} numbers but {len(keys)} were rendered from keys: "
                              f"write other numbers through num()/int()/pct(), or in a code span if a label")
        return f"{body}\n<!-- keys: {json.dumps(keys)} -->"


def write(doc: str | Path, bodies: dict[str, str]) -> Path:
    """Fill each `<!-- gen:NAME -->` region of `doc` with bodies[NAME] (a `Render.region` result)."""
    for name, body in bodies.items():
        if "<!-- keys: " not in body:
            raise InterpError(f"region {name!r} was not made by Render.region (no keys comment)")
        fill_between(doc, f"<!-- gen:{name} -->", f"<!-- /gen:{name} -->", body)
    return Path(doc)


def _scan(text: str) -> list[tuple[str, float, float, bool]]:
    """(token, value, half a unit of its last digit, shown as an integer) per number in `text`."""
    out = []
    for m in NUMBER.finditer(CODE.sub(" ", COMMENT.sub(" ", text))):
        token, percent = m.group(1).replace("−", "-"), m.group(2)
        mantissa, _, exp = token.lower().partition("e")
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        value, half = float(token), 0.5 * 10.0 ** -decimals * (10.0 ** int(exp) if exp else 1.0)
        if percent:
            value, half = value / 100, half / 100
        out.append((m.group(0).strip(), value, half, decimals == 0 and not exp and not percent))
    return out


def numbers_in(text: str) -> list[str]:
    """The number tokens of `text` the check reads (code spans and comments skipped)."""
    return [t for t, *_ in _scan(text)]


def regions(markdown: str) -> list[tuple[str, str, list[str]]]:
    """(name, body without its keys comment, keys) per generated region."""
    out = []
    for m in REGION.finditer(markdown):
        body = m.group(2)
        keys = KEYS.findall(body)
        if len(keys) != 1:
            raise InterpError(f"region {m.group(1)!r} has {len(keys)} keys comments, needs exactly one")
        out.append((m.group(1), KEYS.sub("", body), json.loads(keys[0])))
    return out


def _matches(value: Any, shown: float, half: float, integer: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    if integer:
        return float(value).is_integer() and value == shown
    return abs(value - shown) <= half + 1e-9 * max(1.0, abs(shown))


def check(markdown: str, data: dict) -> list[str]:
    """Problems of the generated regions of `markdown` against `data` (empty: every number bound)."""
    return Checker(markdown).check(data)


class Checker:
    """`check` with the markdown parsed once (the 1 % test checks one doc against many JSONs)."""

    def __init__(self, markdown: str):
        self.parsed = [(name, _scan(body), keys) for name, body, keys in regions(markdown)]

    def check(self, data: dict) -> list[str]:
        return _check(self.parsed, data)


def _check(parsed: list, data: dict) -> list[str]:
    bad = []
    for name, found, keys in parsed:
        if len(found) != len(keys):
            bad.append(f"region {name}: {len(found)} numbers, {len(keys)} keys")
            continue
        for (token, shown, half, integer), ptr in zip(found, keys):
            try:
                value = get(data, ptr)
            except InterpError as e:
                bad.append(f"region {name}: {token}: {e}")
                continue
            if not _matches(value, shown, half, integer):
                bad.append(f"region {name}: {token} but {ptr} = {value!r}")
    return bad


def _allowed_numbers(data: dict) -> list[float]:
    out: list[float] = []

    def walk(x: Any) -> None:
        if isinstance(x, bool) or x is None:
            return
        if isinstance(x, (int, float)):
            out.append(float(x))
        elif isinstance(x, str):
            try:
                out.append(float(x))
            except ValueError:
                pass
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(k)
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for block in ALLOWED_BLOCKS:
        walk(data.get(block))
    return out


def prose_numbers(markdown: str, data: dict) -> list[str]:
    """Numbers of the hand-written text not tied to a key ("line N: token"): outside generated regions,
    code blocks, code spans and comments; years, references and values of the JSON's "paper" / "budget"
    blocks allowed."""
    allowed = _allowed_numbers(data)
    text = REGION.sub(lambda m: "\n" * m.group(0).count("\n"), markdown)
    text = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
    text = COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    bad = []
    for i, line in enumerate(text.splitlines(), 1):
        clean = CODE.sub(lambda m: " " * len(m.group(0)), line)
        for m in NUMBER.finditer(clean):
            (token, value, half, integer), = _scan(m.group(0))
            if integer and 1900 <= value <= 2100 or REFERENCE.search(clean[:m.start()]):
                continue
            if any(_matches(a, value, half, integer) for a in allowed):
                continue
            bad.append(f"line {i}: {token}")
    return bad


def keys_of(markdown: str) -> Iterable[str]:
    """Every JSON pointer a doc's regions name (each once)."""
    return list(dict.fromkeys(k for _, _, keys in regions(markdown) for k in keys))


# ---------------------------------------------------------------------------------------------
# the README's study table: each study's headline verdict words, read from its committed JSON


def headline_verdicts(data: Any, path: str = "") -> list[tuple[str, str, str]]:
    """(path, label, word) of the outermost verdict dicts of a study JSON (a dict with a "word" that
    no other such dict contains): a claim's word, not the per-seed or per-domain words under it."""

    def has_word(d: dict) -> bool:
        return isinstance(d.get("word"), str)

    return [(where, str(d.get("label") or d.get("claim_text") or where.rsplit("/", 1)[-1]), d["word"])
            for where, d in dicts_in(data, path, walk_into=lambda d: not has_word(d))
            if has_word(d) and not where.startswith(f"{path}/{LEDGER_KEY}")]


LEDGER_KEY = "paper_claims"  # a study JSON's list of its paper's claims (interp.studies.claims.ledger)
# Two regions every study doc carries, filled from its JSON by `interp.studies.protocol.Entry.write_doc`
# after the study's own writer: its paper's claims with their words, and its budget's departures.
COMMON_REGIONS = {LEDGER_KEY: "Every claim of the paper", "departures": "How this budget departs from the paper"}


def _label(value: Any) -> str:
    """A value as a code span: a label, not a reported number (configuration, not a measurement)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return "`" + text.replace("`", "'") + "`"


def _plain(text: str) -> str:
    """Prose with each token that holds a digit put in a code span (a label, e.g. "8 epochs" in a reason)."""
    return re.sub(r"[^\s`|]*\d[^\s`|]*", lambda m: f"`{m.group(0)}`", text.replace("|", "/"))


def _judged(r: Render, data: dict, path: str) -> str:
    """The verdicts at `path` (a judge dict, or one holding several) as "`where`: word [lo, hi] (width); mde"."""
    out = []
    for where, d in dicts_in(get(data, path) if path else data, path):
        if "interval_widths" not in d or not isinstance(d.get("word"), str):
            continue
        parts = []
        for key, name in (("diff_ci", "effect - control"), ("effect_ci", "effect"), ("control_ci", "control")):
            if name in d["interval_widths"] and isinstance(d.get(key), list):
                parts.append(f"{name} [{r.num(f'{where}/{key}/0')}, {r.num(f'{where}/{key}/1')}] "
                             f"({r.num(pointer(*_parts(where), 'interval_widths', name))})")
        mde = f"; detects {r.num(where + '/mde')}" if isinstance(d.get("mde"), (int, float)) else ""
        out.append(f"`{where}` {d['word']}: " + (", ".join(parts) or "no interval") + mde)
    return "; ".join(out) or f"`{path}`"


def common_regions(data: dict) -> dict[str, str]:
    """The bodies of COMMON_REGIONS for a study JSON: its "paper_claims" (word, and what a claim not run
    would need) and its budget block's "departures" (ours beside the paper's, and why)."""
    r = Render(data)
    claims = ["| claim | word | its judgements: interval of effect - control, or of effect and control (width); "
              "smallest margin it could detect / what it would need |", "|---|---|---|"]
    for e in data.get(LEDGER_KEY) or []:
        where = "; ".join(_judged(r, data, v) for v in e.get("verdicts", [])) or _plain(e.get("needs", ""))
        claims.append(f"| `{e['id']}`: {_plain(e['text'])} | **{e['word']}** | {where} |")
    if len(claims) == 2:
        claims = ["No claim of the five papers is judged by this study."]
    rows = (data.get("budget") or {}).get("departures")
    deps = ["| what | ours | the paper's | why |", "|---|---|---|---|"]
    deps += [f"| {_plain(d['what'])} | {_label(d['ours'])} | {_label(d['paper'])} | {_plain(d['why'])} |" for d in rows or []]
    if rows is None:
        deps = ["This JSON lists no departures: it was made before studies listed them; rerun its aggregation."]
    elif not rows:
        deps = ["None: this budget is the paper's set-up."]
    return {LEDGER_KEY: r.region("\n".join(claims)), "departures": r.region("\n".join(deps))}


def write_common(doc: str | Path, data: dict) -> Path:
    """Fill COMMON_REGIONS in `doc`, first appending a section for each region it lacks."""
    path = Path(doc)
    text = path.read_text()
    missing = [n for n in COMMON_REGIONS if f"<!-- gen:{n} -->" not in text]
    if missing:
        text = text.rstrip("\n") + "".join(f"\n\n## {COMMON_REGIONS[n]}\n\n<!-- gen:{n} -->\n<!-- /gen:{n} -->" for n in missing) + "\n"
        write_text_atomic(path, text)
    return write(path, common_regions(data))
