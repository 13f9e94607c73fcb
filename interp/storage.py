"""The one file format of every result type, and atomic writes.

`@result` registers a frozen dataclass under a short tag (its class name unless `tag=` says
otherwise); `save(obj, path)` writes its tensors to safetensors and everything else as JSON in the
safetensors header, under one format ("interp/2") with the type's tag (tuples, NaN and nested
results kept); `load(path)` gives the object back, its `__post_init__` checking it again. The tag
does not depend on the module the class lives in, so moving a class does not break saved files:
`HOMES` says which module to import for a tag not yet registered (tests check it against the
source), and files of the first format ("interp/1", keyed by module path) still load. Files and folders are written beside their final name and
renamed into place, so a crash never leaves a half-written one under that name. `cache_dir()` is
where interp keeps what it can rebuild, and `file_sha256` hashes a file once per (path, size,
mtime): the GGUF converter and the processed-weights cache both read them from here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from interp.errors import InterpError

__all__ = ["FORMAT", "atomic_dir", "atomic_path", "cache_dir", "file_sha256", "load", "result", "save", "tag_of", "write_tensors_atomic", "write_text_atomic"]

FORMAT = "interp/2"
_OLD_FORMATS = ("interp/1",)  # tagged by "module.Class"; read by the class name, which is its tag
_REGISTRY: dict[str, type] = {}  # tag -> class

# tag -> the module that registers it, so `load` can import a type nobody has imported yet.
# When a result class moves, change its module here; its files keep loading.
HOMES = {
    "Grid": "interp.results", "Heading": "interp.results",
    "Graph": "interp.circuits.graph", "Faithfulness": "interp.circuits.circuit",
    "HeadMask": "interp.masking.mask", "Study": "interp.masking.subnets", "EffectiveSize": "interp.masking.subnets",
    "SVDSimplifier": "interp.simplify.simplifiers", "KMeansSimplifier": "interp.simplify.simplifiers",
    "OneHotSimplifier": "interp.simplify.simplifiers",
    "Sweep": "interp.simplify.faithfulness", "AttentionComparison": "interp.simplify.faithfulness",
    "WeightScores": "interp.probing.scores", "Probe": "interp.probing.probe",
    "Delta": "interp.grafting.delta", "ExtractiveScores": "interp.grafting.scores",
    "Axis": "interp.steering.axes", "Generation": "interp.steering.axes",
    "Comparison": "interp.studies.steering",
    "Core": "interp.cores.results", "Operator": "interp.cores.results", "Alignment": "interp.cores.results",
    "ValidationBars": "interp.cores.results",
    "Dictionary": "interp.features.dictionary", "TopExamples": "interp.features.sites",
    "AttributionGraph": "interp.features.graph",
}
T = TypeVar("T")


def _save_method(self, path: str | Path) -> Path:
    """`interp.results.save(self, path)`."""
    return save(self, path)


def _load_method(cls, path: str | Path):
    """`interp.results.load(path)`, checked to be of this type."""
    obj = load(path)
    if not isinstance(obj, cls):
        raise InterpError(f"{path} holds a {type(obj).__name__}, not a {cls.__name__}")
    return obj


def result(cls: T | None = None, *, tag: str | None = None) -> T:
    """Register a frozen dataclass as a result type that `save` and `load` know, under `tag` (its
    class name by default; pass the old name when renaming a class), and give it `obj.save(path)`
    and `Type.load(path)` (the same one format for every type). `@result` or `@result(tag="...")`."""
    if cls is None:
        return lambda c: result(c, tag=tag)
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} must be a dataclass to be a result type")
    tag = tag or cls.__name__
    old = _REGISTRY.get(tag)
    if old is not None and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
        raise InterpError(
            f"result tag {tag!r} of {cls.__module__}.{cls.__qualname__} is already taken by "
            f"{old.__module__}.{old.__qualname__}; pass @result(tag=...) with another short name"
        )
    _REGISTRY[tag] = cls
    cls._result_tag = tag
    cls.save = _save_method
    cls.load = classmethod(_load_method)
    return cls


def tag_of(obj: Any) -> str | None:
    """The result tag of `obj`'s type (None for anything not a registered result)."""
    tag = getattr(type(obj), "_result_tag", None)
    return tag if _REGISTRY.get(tag) is type(obj) else None


def _type_name(obj: Any) -> str:
    return getattr(type(obj), "_result_tag", "")


def _encode(value: Any, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        tensors[key] = value.detach().cpu().contiguous()
        return {"$tensor": key}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if _REGISTRY.get(_type_name(value)) is not type(value):
            raise InterpError(f"{type(value).__name__} is not a registered result type (decorate it with interp.results.result)")
        fields = {f.name: _encode(getattr(value, f.name), f"{key}.{f.name}", tensors) for f in dataclasses.fields(value)}
        return {"$result": _type_name(value), "fields": fields}
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v, f"{key}.{i}", tensors) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{key}.{i}", tensors) for i, v in enumerate(value)]
    if isinstance(value, dict):
        for k in value:
            if not isinstance(k, str):
                raise InterpError(f"{key} has a non-string key {k!r}; result dicts need string keys to be saved")
        return {"$dict": {k: _encode(v, f"{key}.{k}", tensors) for k, v in value.items()}}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise InterpError(f"{key} holds a {type(value).__name__}, which a result cannot save; use tensors, numbers, strings, lists, tuples and dicts")


def _lookup(name: str) -> type:
    tag = name.rpartition(".")[2]  # an interp/1 file names "module.Class"; the class name is its tag
    if tag not in _REGISTRY and tag in HOMES:
        importlib.import_module(HOMES[tag])  # registers the type
    if tag not in _REGISTRY:
        raise InterpError(f"the file holds a result of type {name!r}, which no imported module registers; import the "
                          "module that defines it first (interp's own types load by themselves: interp.storage.HOMES)")
    return _REGISTRY[tag]


def _decode(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if "$tensor" in value:
        return tensors[value["$tensor"]]
    if "$tuple" in value:
        return tuple(_decode(v, tensors) for v in value["$tuple"])
    if "$dict" in value:
        return {k: _decode(v, tensors) for k, v in value["$dict"].items()}
    if "$float" in value:
        return float(value["$float"])
    if "$result" in value:
        cls = _lookup(value["$result"])
        return cls(**{k: _decode(v, tensors) for k, v in value["fields"].items()})
    raise InterpError(f"unreadable value in the file header: {sorted(value)}")


def save(obj: Any, path: str | Path) -> Path:
    """Write any registered result to `path` (safetensors + JSON header), atomically."""
    tensors: dict[str, torch.Tensor] = {}
    header = _encode(obj, "root", tensors)
    if not isinstance(header, dict) or "$result" not in header:
        raise InterpError(f"save() takes a result object, got {type(obj).__name__}")
    if not tensors:  # safetensors needs at least one tensor to carry the header
        tensors["root.$empty"] = torch.zeros(0)
    write_tensors_atomic(path, tensors, {"format": FORMAT, "type": header["$result"], "result": json.dumps(header)})
    return Path(path)


def load(path: str | Path) -> Any:
    """The result saved at `path`, of whatever registered type it was."""
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if meta.get("format") not in (FORMAT, *_OLD_FORMATS):
                raise InterpError(f"{path} is not an interp result file (format {meta.get('format')!r}, want {FORMAT!r})")
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except InterpError:
        raise
    except Exception as err:  # missing file, or not safetensors at all (safetensors has its own error type)
        why = "no such file" if not Path(path).exists() else f"{type(err).__name__}: {err}"
        raise InterpError(f"cannot read {path} as an interp result file ({why}); pass one that result.save(path) "
                          "or interp.results.save wrote") from None
    return _decode(json.loads(meta["result"]), tensors)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[str]:
    """Yield a temp path beside `path`; rename it into place only if the body succeeds.

    So a crash or kill mid-write never leaves a half-written file under the final name.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file ordinary permissions
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


@contextmanager
def atomic_dir(path: str | Path, *, complete: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Yield a temp folder beside `path`; it replaces `path` only if the body succeeds, else it is
    removed, so a crash or kill mid-write never leaves a half-written folder under the final name.

    `complete(path)`: for content-addressed folders (a cache) that any finished writer fills the
    same way. When another process has already put a complete folder at `path`, that one is kept
    (readers may be using it) and this one is discarded, instead of deleting it under them."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    tmp.chmod(0o755)  # mkdtemp makes 0700; the final folder should be readable like any other
    try:
        yield tmp
        if complete is not None and complete(path):
            return  # another writer finished first (the finally removes ours)
        if path.exists():
            shutil.rmtree(path)
        try:
            os.replace(tmp, path)
        except OSError:  # a concurrent writer renamed its folder into place between the two steps
            if complete is None or not complete(path):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_tensors_atomic(path: str | Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    with atomic_path(path) as tmp:
        save_file(tensors, tmp, metadata=metadata)


def write_text_atomic(path: str | Path, text: str) -> Path:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")
    return Path(path)


def fill_between(path: str | Path, begin: str, end: str, body: str) -> Path:
    """Replace the text between the markers `begin` and `end` in the file at `path` with
    "\n" + body + "\n" (atomically): how the docs' generated tables are refreshed from their JSON."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if begin not in text or end not in text.split(begin, 1)[1]:
        raise InterpError(f"{path} has no {begin} ... {end} block to fill")
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    return write_text_atomic(path, f"{head}{begin}\n{body}\n{end}{tail}")


_STATE_FORMAT = "interp-state/1"


def _flatten(value: Any, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        tensors[key] = value.detach().cpu().contiguous()
        return {"$tensor": key}
    if isinstance(value, (list, tuple)):
        return [_flatten(v, f"{key}.{i}", tensors) for i, v in enumerate(value)]
    if isinstance(value, dict):  # an optimizer's state_dict keys its parameters by int
        items = [[k, _flatten(v, f"{key}.{k}", tensors)] for k, v in value.items()]
        if any(not isinstance(k, (str, int)) or isinstance(k, bool) for k, _ in items):
            raise InterpError(f"{key} has a key that is neither str nor int; a state file cannot hold it")
        return {"$items": items}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise InterpError(f"{key} holds a {type(value).__name__}, which a state file cannot save")


def _unflatten(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, list):
        return [_unflatten(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if "$tensor" in value:
        return tensors[value["$tensor"]]
    if "$float" in value:
        return float(value["$float"])
    return {k: _unflatten(v, tensors) for k, v in value["$items"]}


def save_state(state: dict[str, Any], path: str | Path) -> Path:
    """Write a training checkpoint (nested dicts, lists and tuples of tensors and numbers; int keys
    allowed, as in an optimizer's state_dict) as safetensors + a JSON header, atomically, so resuming
    never unpickles anything. Tuples read back as lists. Not a result: `load_state` reads it."""
    tensors: dict[str, torch.Tensor] = {}
    header = _flatten(state, "state", tensors)
    tensors.setdefault("state.$empty", torch.zeros(0))
    write_tensors_atomic(path, tensors, {"format": _STATE_FORMAT, "state": json.dumps(header)})
    return Path(path)


def load_state(path: str | Path) -> dict[str, Any]:
    """The checkpoint `save_state` wrote at `path`."""
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as err:
        raise InterpError(f"cannot read {path} as an interp state file: {err}") from None
    if meta.get("format") != _STATE_FORMAT:
        raise InterpError(f"{path} is not an interp state file (format {meta.get('format')!r}, want {_STATE_FORMAT!r})")
    return _unflatten(json.loads(meta["state"]), tensors)


def cache_dir() -> Path:
    """Where interp keeps what it can rebuild (converted GGUFs, processed weights, the zoo's
    checkpoints, study units): $INTERP_CACHE, default ~/.cache/interp."""
    return Path(os.environ.get("INTERP_CACHE", Path.home() / ".cache" / "interp")).expanduser()


def file_sha256(path: str | Path) -> str:
    """sha256 of a file, remembered in $INTERP_CACHE/hashes.json by (path, size, mtime), so a
    reload does not read gigabytes to find a hash it already knows."""
    path = Path(path).resolve()
    stat = path.stat()
    memo_path = cache_dir() / "hashes.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    entry = memo.get(str(path))
    if isinstance(entry, dict) and entry.get("size") == stat.st_size and entry.get("mtime_ns") == stat.st_mtime_ns:
        return str(entry["sha256"])
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    memo[str(path)] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest.hexdigest()}
    try:  # a lost update (two writers at once) only costs a later rehash
        write_text_atomic(memo_path, json.dumps(memo, indent=1))
    except OSError:
        pass
    return digest.hexdigest()
