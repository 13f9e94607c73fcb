"""The one checked reading of the files interp reads, and the digests of the files it writes.

Every loader (result files, dictionaries, SAELens folders, Neuronpedia graphs, unit entries, the
processed-weight cache, configs, checkpoints) reads through these few functions, so a truncated,
bit-flipped or crafted file is refused the same way: an `InterpError` that names the file, the field
and what would be right, never a KeyError or JSONDecodeError from deep inside.

    read_json(path, what)          the parsed JSON of a file (read_object: one that must be an object)
    read_safetensors(path, what)   (metadata, tensors) of a safetensors file (safetensors parses the header)
    field(data, key, kind, source) data[key], checked to be a `kind` (ints are not bools; numbers finite)
    number(value, source, name)    a finite int/float, optionally in [lo, hi]
    tensor(t, source, name)        a tensor of the wanted shape, floating and finite where asked
    hook(name, source, name)       a hook name: dot-separated identifiers, nothing a path could escape with
    refuse(source, name, got, want) the InterpError all of them raise

What interp writes itself carries a digest so a reader can tell it is whole and its own:
`digest(obj)` is the sha256 of an object's canonical JSON, `tensors_digest(tensors)` of tensors'
names, dtypes, shapes and bytes. A mismatch is not an error: the reader recomputes and says so in
one line (`note`).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any, Mapping

import torch

from interp.errors import InterpError

__all__ = ["digest", "field", "hook", "note", "number", "read_json", "read_object", "read_safetensors", "refuse", "tensor",
           "tensors_digest"]

_MISSING = object()
_NAMES = {bool: "true/false", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object"}


def _short(value: Any, n: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def refuse(source: Any, name: str, got: str, want: str) -> InterpError:
    """The error of a file that does not hold what it should: "{source}: {name} {got}; it must be {want}"."""
    return InterpError(f"{source}: {name} {got}; it must be {want}")


def note(text: str) -> None:
    """One line on stderr ("interp: ..."): what a reader did instead of trusting a file (recomputed,
    rebuilt). Written through tqdm so an open progress bar stays whole."""
    from tqdm.auto import tqdm

    tqdm.write(f"interp: {text}", file=sys.stderr)


def _unreadable(path: Any, what: str, why: str, fix: str) -> InterpError:
    return InterpError(f"cannot read {path} as {what} ({why}); pass {fix}")


def read_json(path: str | Path, what: str, fix: str = "a readable UTF-8 JSON file") -> Any:
    """The JSON in the file at `path` (`what` names the kind of file and `fix` what to pass instead, in
    the refusal)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _unreadable(path, what, "no such file", fix) from None
    except (OSError, UnicodeDecodeError) as err:
        raise _unreadable(path, what, type(err).__name__, fix) from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise _unreadable(path, what, f"not JSON: {_short(str(err), 60)}", fix) from None


def read_object(path: str | Path, what: str, fix: str = "a readable UTF-8 JSON file") -> dict[str, Any]:
    """`read_json`, refusing anything but a JSON object (what every config and card is)."""
    data = read_json(path, what, fix)
    if not isinstance(data, dict):
        raise refuse(path, "the file", f"holds a {type(data).__name__}", f"a JSON object ({what})")
    return data


def read_safetensors(path: str | Path, what: str, fix: str) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """(metadata, tensors) of the safetensors file at `path`, read on the CPU. safetensors checks the
    header (its length, offsets and dtypes against the file's size); any failure is an InterpError."""
    from safetensors import safe_open

    if not Path(path).is_file():
        raise _unreadable(path, what, "no such file", fix)
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = dict(f.metadata() or {})
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as err:  # safetensors' own error type, OSError, a header its parser rejects
        raise _unreadable(path, what, f"{type(err).__name__}: {_short(str(err), 80)}", fix) from None
    return meta, tensors


def number(value: Any, source: Any, name: str, *, integer: bool = False, lo: int | float | None = None,
           hi: int | float | None = None) -> Any:
    """`value` if it is a finite number (an int when `integer`; never a bool) within [lo, hi]."""
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or (isinstance(value, float) and not math.isfinite(value)):
        raise refuse(source, name, f"is {_short(value)}", "a finite " + ("integer" if integer else "number"))
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise refuse(source, name, f"is {_short(value)}", f"a number in [{lo}, {hi}]")
    if not integer and isinstance(value, int):  # a float field: as a float, or refused if no float holds it
        if abs(value) > 1e300:
            raise refuse(source, name, f"is {_short(value)}", "a finite number a float can hold")
        return float(value)
    return value


def field(data: Any, key: str, kind: type | tuple[type, ...], source: Any, *, where: str = "",
          default: Any = _MISSING) -> Any:
    """data[key] checked to be a `kind` (int never a bool; float accepts an int, and must be finite).
    Absent (or null) gives `default` when one is given, else a refusal."""
    name = f"{where}.{key}" if where else key
    if not isinstance(data, dict):
        raise refuse(source, where or "the file", f"is a {type(data).__name__}", "a JSON object")
    value = data.get(key)
    if value is None:
        if default is _MISSING:
            raise refuse(source, name, "is missing", " or ".join(_NAMES.get(k, k.__name__) for k in _tuple(kind)))
        return default
    kinds = _tuple(kind)
    if float in kinds or int in kinds:
        if not isinstance(value, bool) and isinstance(value, (int, float)) and (float in kinds or isinstance(value, int)):
            return number(value, source, name, integer=float not in kinds)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok:
        raise refuse(source, name, f"is {_short(value)}", " or ".join(_NAMES.get(k, k.__name__) for k in kinds))
    return value


def _tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def tensor(t: Any, source: Any, name: str, *, shape: tuple[int, ...] | None = None, floating: bool = False,
           finite: bool = True) -> torch.Tensor:
    """`t` if it is a tensor of `shape` (when given), of a floating dtype (when asked) and, if
    floating, holding no NaN or infinity (unless finite=False)."""
    if not isinstance(t, torch.Tensor):
        raise refuse(source, name, f"is a {type(t).__name__}", "a tensor")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise refuse(source, name, f"has shape {list(t.shape)}", f"of shape {list(shape)}")
    if floating and not t.is_floating_point():
        raise refuse(source, name, f"has dtype {t.dtype}", "a floating dtype")
    if finite and t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).sum())
        raise refuse(source, name, f"holds {bad} NaN or infinite values", "finite (no NaN or infinity)")
    return t


def hook(name: Any, source: Any, what: str) -> str:
    """`name` if it is a well-formed full hook name (interp.sites.hook_name's check: dot-separated
    identifiers, so nothing in a file can name a path or a module outside the model)."""
    from interp.sites import hook_name

    try:
        if not isinstance(name, str):
            raise InterpError("not a string")
        return hook_name(name)
    except InterpError:
        raise refuse(source, what, f"is {_short(name, 40)}",
                     "a hook name: dot-separated identifiers like 'blocks.0.hook_resid_pre'") from None


def digest(obj: Any) -> str:
    """sha256 of `obj`'s canonical JSON (sorted keys, no spaces; NaN as NaN): equal for equal JSON values."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tensors_digest(tensors: Mapping[str, torch.Tensor]) -> str:
    """sha256 of tensors' names, dtypes, shapes and bytes (by name), on whatever device they are."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach()
        h.update(json.dumps([name, str(t.dtype), list(t.shape)]).encode())
        flat = t.to("cpu").contiguous().reshape(-1)
        if flat.numel():
            h.update(memoryview(flat.view(torch.uint8).numpy()))
    return h.hexdigest()
