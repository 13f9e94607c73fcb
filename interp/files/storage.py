"""The one file format of every result type, and atomic writes.

`@result` registers a frozen dataclass under a short tag (its class name unless `tag=` says
otherwise); `save(obj, path)` writes its tensors to safetensors and everything else as JSON in the
safetensors header, under one format ("interp/2") with the type's tag (tuples, NaN and nested
results kept); `load(path)` gives the object back, its `__post_init__` checking it again. The tag
does not depend on the module the class lives in, so moving a class does not break saved files: a
tag no imported module has registered yet is looked up in the package's own source
(`interp.registry.declared_in`: the one module whose `@result` declares that tag, and only it, is
imported), and files of the first format ("interp/1", keyed by module path) still load by their
class name. This module holds only the table; no module above it is named here. Files and folders
are written beside their final name and renamed into place, so a crash never leaves a half-written
one under that name. `cache_dir()` is where interp keeps what it can rebuild, and `file_sha256`
hashes a file once per (path, size, mtime): the GGUF converter and the processed-weights cache both
read them from here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import math
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import torch
from safetensors.torch import save_file

from interp.errors import InterpError
from interp.files.validate import digest, read_safetensors, refuse, tensor, tensors_digest
from interp.registry import declared_in

__all__ = ["FORMAT", "atomic_dir", "atomic_path", "cache_dir", "check_replaceable", "check_writable", "encodable", "file_sha256", "load", "result", "save", "sha256_file", "tag_of", "write_tensors_atomic", "write_text_atomic"]

FORMAT = "interp/2"
_OLD_FORMATS = ("interp/1",)  # tagged by "module.Class"; read by the class name, which is its tag
_REGISTRY: dict[str, type] = {}  # tag -> class

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


def _lookup(name: Any, source: Any, where: str) -> type:
    if not isinstance(name, str):
        raise refuse(source, f"{where}.$result", f"is {name!r}", "a result type's name")
    tag = name.rpartition(".")[2]  # an interp/1 file names "module.Class"; the class name is its tag
    home = declared_in("result", tag) if tag not in _REGISTRY else None
    if home is not None:
        importlib.import_module(home)  # registers the type: only the module whose source declares it
    if tag not in _REGISTRY:
        raise InterpError(f"{source}: {where} is of type {name[:60]!r}, which no imported module registers; import "
                          "the module that defines it first (interp's own types load by themselves)")
    return _REGISTRY[tag]


_MARKS = ("$tensor", "$tuple", "$dict", "$float", "$result")


def _decode(value: Any, tensors: dict[str, torch.Tensor], source: Any = "the file", where: str = "result") -> Any:
    """The value a header entry encodes, checked: every mark well formed, every tensor present, every
    result built from exactly its fields; anything else is refused naming `source` and `where`."""
    if isinstance(value, list):
        return [_decode(v, tensors, source, f"{where}.{i}") for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    mark = [m for m in _MARKS if m in value]
    if len(mark) != 1 or set(value) - {mark[0], *(("fields",) if mark[0] == "$result" else ())}:
        raise refuse(source, where, f"has keys {sorted(value)[:5]}", f"exactly one of {', '.join(_MARKS)}")
    body = value[mark[0]]
    if mark[0] == "$tensor":
        if not isinstance(body, str) or body not in tensors:
            raise refuse(source, where, f"names tensor {str(body)[:60]!r}, which the file lacks",
                         f"one of its {len(tensors)} tensors (a file that save() wrote whole)")
        return tensors[body]
    if mark[0] == "$float":
        if body not in ("nan", "inf", "-inf"):
            raise refuse(source, where, f"is {str(body)[:30]!r}", "'nan', 'inf' or '-inf'")
        return float(body)
    if mark[0] == "$tuple":
        if not isinstance(body, list):
            raise refuse(source, where, f"is a {type(body).__name__}", "a list")
        return tuple(_decode(v, tensors, source, f"{where}.{i}") for i, v in enumerate(body))
    if mark[0] == "$dict":
        if not isinstance(body, dict):
            raise refuse(source, where, f"is a {type(body).__name__}", "an object")
        return {k: _decode(v, tensors, source, f"{where}.{k}") for k, v in body.items()}
    return _build(_lookup(body, source, where), value.get("fields"), tensors, source, where)


def _build(cls: type, fields: Any, tensors: dict[str, torch.Tensor], source: Any, where: str) -> Any:
    """A result of type `cls` from its header fields; the class's own checks (`__post_init__`) run."""
    if not isinstance(fields, dict):
        raise refuse(source, f"{where}.fields", f"is a {type(fields).__name__}", f"an object of {cls.__name__}'s fields")
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(fields) - set(known))
    required = [n for n, f in known.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [n for n in required if n not in fields]
    if unknown or missing:
        raise refuse(source, f"{where}.fields", f"has unknown {unknown[:3]} / lacks {missing[:3]}",
                     f"{cls.__name__}'s fields {sorted(known)[:8]}")
    values = {k: _decode(v, tensors, source, f"{where}.{k}") for k, v in fields.items()}
    try:
        obj = cls(**values)
    except InterpError as err:
        raise InterpError(f"{source}: {where}: {str(err)[:200]}") from None
    except (TypeError, ValueError, AttributeError, IndexError, KeyError, RuntimeError) as err:
        raise refuse(source, where, f"does not make a {cls.__name__} ({type(err).__name__}: {str(err)[:80]})",
                     "a file that save() wrote") from None
    for name in getattr(cls, "_finite_fields", ()):  # what a type declares must be finite (a NaN weight)
        if getattr(obj, name) is not None:
            tensor(getattr(obj, name), source, f"{where}.{name}", floating=True)
    return obj


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
    """The result saved at `path`, of whatever registered type it was; a file that is not one whole
    result file (truncated, another format, a header naming a type or tensor it lacks) is refused."""
    meta, tensors = read_safetensors(path, "an interp result file", "one that result.save(path) or interp.results.save wrote")
    if meta.get("format") not in (FORMAT, *_OLD_FORMATS):
        raise InterpError(f"{path} is not an interp result file (format {str(meta.get('format'))[:40]!r}, want {FORMAT!r})")
    try:
        header = json.loads(meta.get("result", ""))
    except (ValueError, RecursionError):
        raise refuse(path, "header field 'result'", "is not JSON", "the JSON that save() writes") from None
    if not isinstance(header, dict) or "$result" not in header:
        raise refuse(path, "header field 'result'", "holds no result", "{'$result': type, 'fields': {...}}")
    try:
        return _decode(header, tensors, path)
    except RecursionError:
        raise refuse(path, "header field 'result'", "is nested too deep", "the JSON that save() writes") from None


@contextmanager
def atomic_path(path: str | Path) -> Iterator[str]:
    """Yield a temp path beside `path`; rename it into place only if the body succeeds.

    So a crash or kill mid-write never leaves a half-written file under the final name. A path
    that names a folder, or lies under a file, is refused before anything is written.
    """
    path = check_writable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        # mkstemp makes 0600, and a writer that recreates the file (safetensors' save_file) makes it
        # 0600 again: the ordinary permissions are given once the body has written it
        os.chmod(tmp, 0o666 & ~umask)
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


def check_writable(path: str | Path, *, folder: bool = False) -> Path:
    """`path`, once it is known that a file (or with `folder`, a folder) can be written there: its
    nearest existing parent is a writable folder, and `path` is not something of the other kind. Call
    it before a long run so a bad --out is refused in a second, not after the work."""
    path = Path(path).expanduser()
    if path.exists() and path.is_dir() != folder:
        raise InterpError(f"{path} is a {'file' if folder else 'folder'}; pass a path where a "
                          f"{'folder' if folder else 'file'} can be written")
    parent = path.parent if not (folder and path.exists()) else path
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise InterpError(f"{path} cannot be written: {parent} is a file, not a folder; pass a path under a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InterpError(f"{path} cannot be written: {parent} is not writable; pass a path in a writable folder")
    return path


def check_replaceable(folder: str | Path, own: Callable[[str], bool], what: str) -> Path:
    """`folder`, once it is known that a folder can be written there and that writing it deletes
    nothing but an earlier `what`: `atomic_dir` replaces a whole folder, so an existing one holding
    an entry `own(name)` does not claim is refused, never emptied."""
    folder = check_writable(folder, folder=True)
    other = sorted(p.name for p in folder.iterdir() if not own(p.name)) if folder.is_dir() else []
    if other:
        raise InterpError(f"{folder} holds {other[:5]}{' ...' * (len(other) > 5)} besides {what}, and writing it would "
                          "delete them; pass a new or empty folder")
    return folder


def write_tensors_atomic(path: str | Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    with atomic_path(path) as tmp:
        save_file(tensors, tmp, metadata=metadata)


def encodable(text: str) -> str:
    """`text` with each lone surrogate (a str that UTF-8 cannot encode, such as a token read from JSON
    "\\ud800") as U+FFFD: what every whole HTML page passes through, so a page showing such a token
    is written and displayed instead of raising UnicodeEncodeError (its embedded JSON escapes them)."""
    return re.sub("[\ud800-\udfff]", "\ufffd", text)


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


def _unflatten(value: Any, tensors: dict[str, torch.Tensor], source: Any = "the file", where: str = "state") -> Any:
    if isinstance(value, list):
        return [_unflatten(v, tensors, source, f"{where}.{i}") for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    if value.keys() == {"$tensor"} and value["$tensor"] in tensors:
        return tensors[value["$tensor"]]
    if value.keys() == {"$float"} and value["$float"] in ("nan", "inf", "-inf"):
        return float(value["$float"])
    items = value.get("$items") if value.keys() == {"$items"} else None
    if not isinstance(items, list) or not all(isinstance(i, list) and len(i) == 2 and isinstance(i[0], (str, int))
                                               for i in items):
        raise refuse(source, where, f"has keys {sorted(value)[:4]} (or names a tensor the file lacks)",
                     "a tensor, a float mark or [key, value] items, as save_state writes")
    return {k: _unflatten(v, tensors, source, f"{where}.{k}") for k, v in items}


def save_state(state: dict[str, Any], path: str | Path) -> Path:
    """Write a training checkpoint (nested dicts, lists and tuples of tensors and numbers; int keys
    allowed, as in an optimizer's state_dict) as safetensors + a JSON header, atomically, so resuming
    never unpickles anything. Tuples read back as lists. Not a result: `load_state` reads it, and
    refuses a file whose header and tensors no longer match the digest written with them."""
    tensors: dict[str, torch.Tensor] = {}
    header = _flatten(state, "state", tensors)
    tensors.setdefault("state.$empty", torch.zeros(0))
    text = json.dumps(header)
    write_tensors_atomic(path, tensors, {"format": _STATE_FORMAT, "state": text, "digest": digest([text, tensors_digest(tensors)])})
    return Path(path)


def load_state(path: str | Path) -> dict[str, Any]:
    """The checkpoint `save_state` wrote at `path` (refused, naming the file, when it is not one whole)."""
    meta, tensors = read_safetensors(path, "an interp state file", "one that save_state wrote")
    if meta.get("format") != _STATE_FORMAT:
        raise InterpError(f"{path} is not an interp state file (format {str(meta.get('format'))[:40]!r}, want {_STATE_FORMAT!r})")
    if "digest" in meta and meta["digest"] != digest([meta.get("state"), tensors_digest(tensors)]):
        raise InterpError(f"{path} fails its checksum (damaged or edited since save_state wrote it); remove it to start over")
    try:
        header = json.loads(meta.get("state", ""))
    except (ValueError, RecursionError):
        raise refuse(path, "header field 'state'", "is not JSON", "the JSON that save_state writes") from None
    try:
        state = _unflatten(header, tensors, path)
    except RecursionError:
        raise refuse(path, "header field 'state'", "is nested too deep", "the JSON that save_state writes") from None
    if not isinstance(state, dict):
        raise refuse(path, "header field 'state'", f"holds a {type(state).__name__}", "a dict of state")
    return state


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
    memo = memo if isinstance(memo, dict) else {}  # a damaged memo only costs a rehash
    entry = memo.get(str(path))
    if (isinstance(entry, dict) and entry.get("size") == stat.st_size and entry.get("mtime_ns") == stat.st_mtime_ns
            and isinstance(entry.get("sha256"), str) and len(entry["sha256"]) == 64
            and set(entry["sha256"]) <= set("0123456789abcdef")):  # else a damaged memo (it names folders): rehash
        return entry["sha256"]
    digest = sha256_file(path)
    memo[str(path)] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
    try:  # a lost update (two writers at once) only costs a later rehash
        write_text_atomic(memo_path, json.dumps(memo, indent=1))
    except OSError:
        pass
    return digest


def sha256_file(path: str | Path) -> str:
    """sha256 of a file's bytes, read in 4 MiB blocks (file_sha256 remembers it for big files)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
