"""The zoo: small trained models shipped in data/zoo/, one HF-format directory each, with cards.

`interp.load("zoo:NAME")` loads one; `entries()` lists them with their recorded accuracies;
`interp zoo train NAME` (interp.train) retrains one from scratch.
"""

from __future__ import annotations

import json
from typing import Any

from interp.model import ZOO_DIR

__all__ = ["card", "entries", "table"]


def card(name: str) -> dict[str, Any]:
    path = ZOO_DIR / name / "card.json"
    if not path.exists():
        have = [e["name"] for e in entries()]
        raise FileNotFoundError(f"zoo model {name!r} has no card at {path}; available: {have or 'none'}")
    return json.loads(path.read_text())


def entries() -> list[dict[str, Any]]:
    """Every shipped model's card, sorted by name."""
    if not ZOO_DIR.exists():
        return []
    return [json.loads(p.read_text()) for p in sorted(ZOO_DIR.glob("*/card.json"))]


def table() -> list[dict[str, Any]]:
    """One flat row per model: name, family, task, sizes, training seconds, accuracy per split."""
    rows = []
    for c in entries():
        sizes = c["sizes"]
        rows.append({
            "name": c["name"],
            "family": c["family"],
            "task": c["task"],
            "layers": sizes["n_layers"],
            "d_model": sizes["d_model"],
            "heads": sizes["n_heads"],
            "kv_heads": sizes.get("n_kv_heads", sizes["n_heads"]),
            "train_s": c["training"]["seconds"],
            **{k: round(v, 4) for k, v in c.get("accuracy", {}).items()},
        })
    return rows
