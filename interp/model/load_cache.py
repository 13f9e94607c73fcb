"""Fast reloads: the bridge's processed weights cached on disk, and the tokenizer parsed once.

`enable_compatibility_mode` folds layer norms and centres weights (TransformerLens's
`ProcessWeights.process_weights`): seconds on a real model, and the same result every time for the
same weights, TransformerLens version and flags. `processed_weights_cache(folder)` wraps that one
call for the body of a load: the first load writes what it returns to
$INTERP_CACHE/processed/<weights hash>-<dtype>.safetensors (atomically, beside its final name); a
later load maps it (safetensors, memory-mapped, no copy) instead of recomputing; `warm` asks the
kernel to read the file ahead when a load begins. The file's metadata holds the whole
key (the weights' sha256, TransformerLens / transformers / torch versions, the processing flags and
the names, shapes and dtypes handed in) and the digest of its tensors; a file whose key differs
(another TL version, other flags) or whose tensors do not hash to its digest (bits flipped on disk)
is not read: a one-line note says so (`interp.files.validate.note`; loading drops warnings) and it is
rebuilt. The digest is checked once per version of the file (size, mtime, ctime, inode), so a
reload still maps the file without reading it through.

`fast_tokenizer(folder)` builds the tokenizer straight from tokenizer.json with the Rust parser
(as TransformerLens's own fallback does), skipping transformers' Python pass over the same JSON
and its deep copy: on Gemma-3's 33 MB tokenizer.json that is most of the tokenizer's load time.
There is no faster parsed form to cache: the Rust tokenizer's only other serialisation is a pickle,
which interp never loads.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch

from interp.files.storage import cache_dir, file_sha256, write_tensors_atomic, write_text_atomic
from interp.files.validate import field, note, read_object, tensors_digest

__all__ = ["CACHE_MIN_BYTES", "FAST_CLASSES", "fast_tokenizer", "file_sha256", "lean_processing", "processed_path",
           "processed_weights_cache", "release_free_memory", "warm", "weights_bytes"]

# Weights smaller than this are processed in milliseconds: caching them (every tiny test model)
# would only fill the cache folder. `load(..., weights_cache=True)` caches any size.
CACHE_MIN_BYTES = 32 << 20
_FORMAT = "interp-processed/2"  # /2: the file carries the digest of its tensors
_LOCK = threading.RLock()  # one thread's patched ProcessWeights at a time (a load nests two patches)
# TransformerLens's steps that begin with a clone of the whole state dict (and never read their input again)
_CLONING_STEPS = ("fold_layer_norm", "center_unembed", "fold_value_biases", "refactor_factored_attn_matrices")


def _weights_hash(folder: Path) -> str:
    files = sorted(folder.glob("*.safetensors"))
    return hashlib.sha256("".join(f"{f.name}:{file_sha256(f)}" for f in files).encode()).hexdigest()


def weights_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


def processed_path(folder: str | Path, dtype: torch.dtype | None, weights: str | None = None) -> Path:
    """Where the processed weights of the model in `folder`, loaded in `dtype`, are cached."""
    label = str(dtype or "default").removeprefix("torch.")
    weights = weights or _weights_hash(Path(folder))
    return cache_dir() / "processed" / f"{weights[:40]}-{label}.safetensors"


def _versions() -> dict[str, str]:
    return {name: importlib.metadata.version(name) for name in ("transformer-lens", "transformers", "torch")}


def _key(weights: str, inputs: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    shapes = hashlib.sha256(json.dumps(
        [(k, list(v.shape), str(v.dtype)) for k, v in inputs.items()]).encode()).hexdigest()
    return {"format": _FORMAT, "weights": weights, **_versions(), "flags": flags, "inputs": shapes}


def warm(folder: str | Path, dtype: torch.dtype | None) -> None:
    """Ask the kernel to start reading the processed weights cached for the model in `folder` into the
    page cache (posix_fadvise WILLNEED, asynchronous), so the file is there by the time the bridge
    maps it; a no-op where the file or the call is missing."""
    path = processed_path(folder, dtype)
    if not path.exists() or not hasattr(os, "posix_fadvise"):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)


def _read(path: Path, key: dict[str, Any], device: torch.device) -> dict[str, torch.Tensor] | None:
    from safetensors import safe_open
    from safetensors.torch import load_file

    if not path.exists():
        return None
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        found = json.loads(meta.get("key", "null"))
        order = json.loads(meta.get("order", "[]"))
        if not isinstance(found, dict):
            raise ValueError("the key is not a JSON object")
    except Exception as err:  # a damaged file is rebuilt, never half-read
        note(f"processed-weight cache {path.name} is unreadable ({type(err).__name__}); rebuilding")
        return None
    if found != key:
        differ = sorted(k for k in set(key) | set(found) if found.get(k) != key.get(k))
        note(f"processed-weight cache {path.name} was written for other {', '.join(differ)}; rebuilding")
        return None
    if not _intact(path, meta.get("digest")):
        note(f"processed-weight cache {path.name} fails its checksum (damaged on disk); rebuilding")
        return None
    # memory-mapped, not copied: a copy means touching every page of fresh memory, which on a machine
    # short of free memory made a Gemma-3 load 3x slower (9.6 s against 3.2 s); the file is only ever
    # replaced by an atomic rename, so a mapped file never changes under the model
    tensors = load_file(str(path), device=str(device))
    if not isinstance(order, list) or sorted(order) != sorted(tensors):
        note(f"processed-weight cache {path.name} lists other tensors than it holds; rebuilding")
        return None
    return {k: tensors[k] for k in order}


def _identity(path: Path) -> list[int]:
    """What changes whenever the file's bytes do: size, mtime, ctime (no call can set it back), inode."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _intact(path: Path, digest: str | None) -> bool:
    """Whether the tensors in the file at `path` hash to `digest` (tensors_digest). Checked once per
    version of the file: a file whose identity (`_identity`) was seen intact before is not reread."""
    from safetensors import safe_open

    if not isinstance(digest, str):
        return False
    memo_path = cache_dir() / "processed" / "intact.json"
    try:
        memo = json.loads(memo_path.read_text())
        memo = memo if isinstance(memo, dict) else {}
    except (OSError, ValueError):
        memo = {}
    seen, name = [digest, *_identity(path)], str(path.resolve())
    if memo.get(name) == seen:
        return True
    try:
        with safe_open(str(path), framework="pt") as f:
            ok = tensors_digest({k: f.get_tensor(k) for k in f.keys()}) == digest
    except Exception:  # a damaged payload can fail to read as well as to hash
        return False
    if ok:
        memo[name] = seen
        try:  # a lost update (two writers at once) only costs a later recheck
            write_text_atomic(memo_path, json.dumps(memo, indent=1))
        except OSError:
            pass
    return ok


def _write(path: Path, key: dict[str, Any], state: dict[str, torch.Tensor]) -> None:
    seen: set[tuple[int, int]] = set()
    out = {}
    for k, v in state.items():
        v = v.detach().to("cpu").contiguous()
        ident = (v.untyped_storage().data_ptr(), v.storage_offset())
        out[k] = v.clone() if ident in seen else v  # safetensors refuses tensors that share memory
        seen.add(ident)
    meta = {"key": json.dumps(key), "order": json.dumps(list(state)), "digest": tensors_digest(out)}
    try:
        write_tensors_atomic(path, out, meta)
    except OSError as err:  # a read-only or full cache folder costs speed, not the load
        note(f"could not write the processed-weight cache {path} ({err})")


@contextmanager
def processed_weights_cache(folder: str | Path, dtype: torch.dtype | None) -> Iterator[None]:
    """For the body, TransformerLens's weight processing reads its result from the cache when the
    key matches, and writes it there when it does not (see the module docstring)."""
    from transformer_lens.weight_processing import ProcessWeights

    weights = _weights_hash(Path(folder))
    path = processed_path(folder, dtype, weights)
    original = ProcessWeights.__dict__["process_weights"]
    signature = inspect.signature(original.__func__)

    def cached(state_dict, cfg, *args, **kwargs):
        bound = signature.bind(state_dict, cfg, *args, **kwargs)
        bound.apply_defaults()
        flags = {k: v for k, v in bound.arguments.items() if isinstance(v, (bool, int, float, str, type(None)))}
        tensors = all(isinstance(v, torch.Tensor) for v in state_dict.values())
        if not tensors or not state_dict:
            return original.__func__(state_dict, cfg, *args, **kwargs)
        key = _key(weights, state_dict, flags)
        device = next(iter(state_dict.values())).device
        hit = _read(path, key, device)
        if hit is not None:
            return hit
        out = original.__func__(state_dict, cfg, *args, **kwargs)
        if all(isinstance(v, torch.Tensor) for v in out.values()):
            _write(path, key, out)
        return out

    with _LOCK:
        ProcessWeights.process_weights = staticmethod(cached)
        try:
            yield
        finally:
            ProcessWeights.process_weights = original


class _Handover(dict):
    """A state dict whose `items()` hands each entry over once: the entry leaves the dict as it is
    handed out, so a step that clones every tensor holds one input tensor at a time, not all."""

    def items(self):  # type: ignore[override]
        for k in list(self.keys()):
            yield k, dict.pop(self, k)


def _handing_over(step):
    def lean(state_dict, *args, **kwargs):
        if type(state_dict) is not dict:
            return step(state_dict, *args, **kwargs)
        given = _Handover(state_dict)
        state_dict.clear()  # the caller's reference: ProcessWeights rebinds it to the step's result
        return step(given, *args, **kwargs)

    return lean


@contextmanager
def lean_processing() -> Iterator[None]:
    """For the body, TransformerLens's weight processing holds one copy of the weights beside the
    model's, not three.

    `ProcessWeights.process_weights` runs fold_layer_norm, center_unembed, fold_value_biases (and
    refactor_factored_attn_matrices), each of which begins by cloning every tensor of the state
    dict it is given and returns the clone; the caller rebinds its state dict to the result. So
    while center_unembed clones, the model's own weights, fold_layer_norm's copy and
    center_unembed's copy are all alive: three times the weights (a 1.2B float32 model passed
    14 GiB just to load). Here each of those steps receives the entries of its input dict handed
    over one at a time (`_Handover`), and the caller's dict is emptied (it is rebound to the step's
    result and never read again), so an input tensor is freed as soon as its clone exists. The
    steps compute exactly what they computed: only when their inputs are freed changes."""
    from transformer_lens.weight_processing import ProcessWeights

    with _LOCK:
        originals = {name: ProcessWeights.__dict__[name] for name in _CLONING_STEPS if name in ProcessWeights.__dict__}
        try:
            for name, original in originals.items():
                setattr(ProcessWeights, name, staticmethod(_handing_over(original.__func__)))
            yield
        finally:
            for name, original in originals.items():
                setattr(ProcessWeights, name, original)


def release_free_memory() -> None:
    """Hand the heap memory the C allocator keeps after freeing back to the system (glibc's
    malloc_trim; a no-op elsewhere). A load frees about a copy of the weights in pieces too small
    for glibc to return on its own (0.39 of SmolLM2's 0.61 GiB stayed resident)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)
    except OSError:
        pass


# keys of tokenizer_config.json that describe the file, not the tokenizer
_NOT_INIT = {"tokenizer_class", "backend", "is_local", "local_files_only", "auto_map", "added_tokens_decoder"}
# tokenizer classes whose behaviour is all in tokenizer.json (checked against AutoTokenizer in
# tests/test_model.py and, for the real models, tests/test_real.py)
FAST_CLASSES = {"GemmaTokenizer", "GemmaTokenizerFast", "TokenizersBackend", "PreTrainedTokenizerFast"}


def fast_tokenizer(folder: str | Path):
    """The tokenizer of `folder` built from its tokenizer.json by the Rust parser alone, with the
    settings of tokenizer_config.json and BOS added as TransformerLens asks; None when the folder's
    tokenizer class is not one known to keep all its behaviour in tokenizer.json."""
    folder = Path(folder)
    cfg_path, file = folder / "tokenizer_config.json", folder / "tokenizer.json"
    if not (cfg_path.exists() and file.exists()):
        return None
    config = read_object(cfg_path, "a tokenizer_config.json")
    if field(config, "tokenizer_class", str, cfg_path, default=None) not in FAST_CLASSES:
        return None
    import transformers
    from transformers import PreTrainedTokenizerFast

    kwargs = {k: v for k, v in config.items() if k not in _NOT_INIT}
    named = getattr(transformers, config["tokenizer_class"], None)  # its class defaults (Gemma pads left)
    for attr in ("padding_side", "truncation_side"):
        if named is not None and isinstance(getattr(named, attr, None), str):
            kwargs.setdefault(attr, getattr(named, attr))
    template = folder / "chat_template.jinja"
    if template.exists() and "chat_template" not in kwargs:
        kwargs["chat_template"] = template.read_text()
    kwargs.update(add_bos_token=True, name_or_path=str(folder))
    return PreTrainedTokenizerFast(tokenizer_file=str(file), **kwargs)
