"""The README's study table, from the registered studies' committed JSONs (interp.studies.protocol):
each study's headline verdict words as its JSON stores them, and per paper how many of its claims carry
each word (interp.studies.claims).

    write_readme("README.md", "docs")   # refills the region between README_BEGIN and README_END
"""

from __future__ import annotations

import json
from pathlib import Path

from interp.files.storage import fill_between
from interp.studies.docs import LEDGER_KEY, headline_verdicts
from interp.studies.protocol import REGISTRY, runnable

__all__ = ["README_BEGIN", "README_END", "paper_ledger", "papers_table", "readme_table", "write_readme"]

STALE = "was made before its verdicts named their claims: rerun its aggregation"


def _committed(docs_dir: str | Path) -> list[tuple[str, Path]]:
    """(name, its JSON) for each registered study whose JSON is committed in `docs_dir`, in the table's order."""
    return [(n, p) for n in runnable() if (p := Path(docs_dir) / REGISTRY[n].json_name).exists()]


def paper_ledger(docs_dir: str | Path) -> list[dict]:
    """Every claim of the five papers with its word: from each committed JSON's "paper_claims" list (or,
    for a JSON made before it had one, claims.ledger on it), and claims.unassigned() for the rest."""
    from interp.studies.claims import CLAIMS, ledger, unassigned

    by_study: dict[str, list[dict]] = {}
    for name, path in _committed(docs_dir):
        data = json.loads(path.read_text())
        entries = data.get(LEDGER_KEY)
        if entries is None:
            entries = ledger(name, data)
            for e in entries:
                if e["word"] == "not run" and e.get("needs", "").startswith("its verdict is not in"):
                    e["needs"] = f"{path.name} {STALE}"
        by_study[name] = entries
    out = [e for entries in by_study.values() for e in entries] + unassigned()
    seen = {e["id"] for e in out}
    for c in CLAIMS:  # a claim whose study has no committed JSON
        if c.id not in seen:
            out.append({"id": c.id, "paper": c.paper, "text": c.text, "word": "not run",
                        "needs": f"no committed JSON of study {c.study!r}"})
    return out


def readme_table(docs_dir: str | Path) -> str:
    """The README's study table: per registered study's committed JSON, its headline verdicts
    (interp.studies.verdicts words as stored, so the README never says more than a JSON) and their
    combination."""
    from interp.studies.verdicts import combine

    lines = ["| study | its claims, as its JSON words them | overall |", "|---|---|---|"]
    for name, data in _committed(docs_dir):
        doc = REGISTRY[name].doc_name
        found = headline_verdicts(json.loads(data.read_text()))
        if not found:
            lines.append(f"| `docs/{doc}` | no verdict words in `{data.name}` yet: read the doc | |")
            continue
        claims = "; ".join(f"{label}: **{word}**" for _, label, word in found)
        lines.append(f"| `docs/{doc}` | {claims} | {combine(w for _, _, w in found)} |")
    return "\n".join(lines + ["", papers_table(docs_dir)])


def papers_table(docs_dir: str | Path) -> str:
    """Per paper, how many of its headline claims (interp.studies.claims, the ones no study runs
    included) carry each verdict word, from the committed JSONs."""
    from interp.studies.claims import PAPERS, counts
    from interp.studies.verdicts import WORDS

    order = list(reversed(WORDS))  # best first: reproduced, partly, ..., not run
    entries = paper_ledger(docs_dir)
    lines = ["| paper | " + " | ".join(order) + " | claims |", "|---|" + "---|" * (len(order) + 1)]
    for key, title in PAPERS.items():
        mine = [e for e in entries if e["paper"] == key]
        n = counts(mine)
        lines.append(f"| {title} | " + " | ".join(str(n[w]) for w in order) + f" | {len(mine)} |")
    stale: dict[str, list[str]] = {}
    for e in entries:
        if e["word"] == "not run" and e.get("needs", "").endswith(STALE):
            stale.setdefault(e["needs"].split(" ", 1)[0], []).append(f"`{e['id']}`")
    if stale:
        lines.append("\nCounted \"not run\" because the study's committed JSON was made before its verdicts named "
                     "their claims (its words are in the row above; rerun its aggregation to count them): "
                     + "; ".join(f"`docs/{f}`: {', '.join(ids)}" for f, ids in stale.items()) + ".")
    return "\n".join(lines)


README_BEGIN, README_END = "<!-- gen:studies -->", "<!-- /gen:studies -->"


def write_readme(readme: str | Path, docs_dir: str | Path) -> Path:
    """Refill the README's study table from the committed JSONs."""
    return fill_between(readme, README_BEGIN, README_END, readme_table(docs_dir))
