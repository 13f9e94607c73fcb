"""The zoo: small trained models shipped in interp/data/zoo/ (package data, so a wheel carries
them), one HF-format directory each, with cards.

`interp.load("zoo:NAME")` loads one; `entries()` lists them with their recorded accuracies;
`interp zoo train NAME` (`interp.zoo.train`, the recipes) retrains one from scratch into the user zoo
(`interp.model.user_zoo_dir()`, $INTERP_CACHE/zoo), which `zoo:NAME` searches first.
"""

from __future__ import annotations

from typing import Any

from interp.model import ZOO_DIR, user_zoo_dir, zoo_dirs, zoo_path
from interp.files.validate import field, read_object

__all__ = ["card", "entries", "table"]


def card(name: str) -> dict[str, Any]:
    """The card of zoo model `name`: the user zoo's copy if there is one, else the shipped one."""
    folder = zoo_path(name)
    path = (folder or ZOO_DIR / name) / "card.json"
    if not path.exists():
        have = [e["name"] for e in entries()]
        raise FileNotFoundError(f"zoo model {name!r} has no card at {path}; available: {have or 'none'}")
    return read_object(path, "a zoo model's card.json", "the folder interp zoo train wrote")


def entries() -> list[dict[str, Any]]:
    """Every zoo model's card, sorted by name; a model in the user zoo hides the shipped one of
    that name, and its card carries "zoo": "user" (its folder in "path")."""
    found: dict[str, dict[str, Any]] = {}
    user = user_zoo_dir()
    for root in reversed(zoo_dirs()):  # the shipped zoo first, so the user zoo overrides it
        if not root.is_dir():
            continue
        for p in sorted(root.glob("*/card.json")):
            if not (p.parent / "config.json").exists():
                continue
            c = _checked(read_object(p, "a zoo model's card.json", "the folder interp zoo train wrote"), p)
            if root == user:
                c = {**c, "zoo": "user", "path": str(p.parent)}
            found[p.parent.name] = c
    return [found[k] for k in sorted(found)]


def _checked(c: dict[str, Any], path) -> dict[str, Any]:
    """A card with the fields `table` reads, each of its kind (a card edited by hand or from an
    older interp is refused by name, not a KeyError)."""
    for key in ("name", "family", "task"):
        field(c, key, str, path)
    for key in ("n_layers", "d_model", "n_heads"):
        field(field(c, "sizes", dict, path), key, int, path, where="sizes")
    field(field(c, "training", dict, path), "seconds", float, path, where="training")
    for split in field(c, "accuracy", dict, path, default={}):
        field(c["accuracy"], split, float, path, where="accuracy")
    return c


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
            "zoo": c.get("zoo"),  # "user" for a model trained here; the column is dropped when none is
            **{k: round(v, 4) for k, v in c.get("accuracy", {}).items()},
        })
    return rows
