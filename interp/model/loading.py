"""Loading a model spec as a TransformerLens bridge: resolving the spec (hub name, local folder,
zoo:NAME, GGUF file, real model name) and booting it in eval and compatibility mode.
"""

from __future__ import annotations

import functools
import logging
import socket
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

import torch

from interp.model import load_cache
from interp.errors import InterpError
from interp.model.building import family_of
from interp.files.storage import cache_dir
from interp.files.validate import field, read_object

__all__ = ["ZOO_DIR", "ModelNotFoundError", "describe", "input_device", "load", "name_of", "placement", "quiet_loading", "resolve",
           "user_zoo_dir", "zoo_dirs", "zoo_path"]


# The shipped zoo: package data, so a wheel carries it. Nothing writes here at run time; models
# trained with `interp zoo train` go to user_zoo_dir(), which `zoo:NAME` searches first.
ZOO_DIR = Path(__file__).resolve().parents[1] / "data" / "zoo"

# Tokenizer classes that mean "use tokenizer.json as it is"; transformers 5 otherwise picks a
# class from the model type (Qwen2Tokenizer for qwen2), which mangles a word-level vocabulary.
_PLAIN_TOKENIZERS = {"PreTrainedTokenizerFast", "TokenizersBackend"}
# The files a tokenizer is read from; a folder with none of them boots with an empty vocabulary
# that maps every word to token 0, so it is refused.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model", "sentencepiece.bpe.model")


class ModelNotFoundError(InterpError, FileNotFoundError):
    """A model spec that names nothing loadable here (an InterpError like all bad input, and a
    FileNotFoundError for code that catches that)."""


def user_zoo_dir() -> Path:
    """Where `interp zoo train` writes by default: $INTERP_CACHE/zoo (default ~/.cache/interp/zoo)."""
    return cache_dir() / "zoo"


def zoo_dirs() -> tuple[Path, ...]:
    """The folders `zoo:NAME` is looked up in, first match wins: the user zoo, then the shipped one."""
    return (user_zoo_dir(), ZOO_DIR)


def zoo_path(name: str) -> Path | None:
    """The folder of zoo model `name` (the user zoo before the shipped one), or None."""
    for root in zoo_dirs():
        if (root / name / "config.json").exists():
            return root / name
    return None


def _hub_reachable(timeout: float = 2.0) -> bool:
    from huggingface_hub import constants

    host = urlparse(constants.ENDPOINT).hostname or ""
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _hub_offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it (any of its truthy spellings: 1, true, yes, on)."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _hub_cached(name: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(name, "config.json"), str)


def resolve(spec: str | Path) -> str:
    """Turn a spec into what `boot_transformers` takes: a local directory path or a hub name.

    A `.gguf` file and a real model's name (`interp.model.gguf.REAL_MODELS`) resolve to their HF folder
    in the cache, dequantized on first use."""
    from interp.model import gguf

    spec_str = str(spec)
    if spec_str in gguf.REAL_MODELS:
        return str(gguf.convert(gguf.real_model_file(spec_str)))
    if spec_str.lower().endswith(".gguf"):  # MODEL.GGUF too: the suffix names the format, not its case
        if not Path(spec_str).expanduser().exists():
            raise ModelNotFoundError(f"GGUF file {spec_str!r} does not exist")
        return str(gguf.convert(spec_str))
    if spec_str.startswith("zoo:"):
        name = spec_str[4:]
        if "/" in name or "\\" in name or name in (".", ".."):  # a zoo name, never a path out of the zoo
            raise ModelNotFoundError(f"zoo model {name!r} is not a zoo name (it holds '/' or is '..'); pass a local "
                                     "folder by its path, without 'zoo:'")
        path = zoo_path(name) if name else None
        if path is None:
            have = sorted({p.name for root in zoo_dirs() if root.is_dir() for p in root.iterdir() if (p / "config.json").exists()})
            where = " or ".join(str(root) for root in zoo_dirs())
            raise ModelNotFoundError(f"zoo model {name!r} not found in {where}; available: {have or 'none'}")
        return str(path)
    path = Path(spec_str).expanduser()
    if path.exists() or spec_str.startswith((".", "/", "~")):
        if not path.is_dir():
            raise ModelNotFoundError(f"{spec_str!r} is not a directory; pass an HF-format model directory")
        _check_local_dir(path)
        return str(path)
    if spec_str.count("/") > 1 or not spec_str:
        raise ModelNotFoundError(f"{spec_str!r} is neither a local directory, a zoo:NAME, nor a hub name")
    if not _hub_cached(spec_str) and (_hub_offline() or not _hub_reachable()):
        raise ModelNotFoundError(
            f"{spec_str!r} is not in the local Hugging Face cache and the hub cannot be reached. "
            "Pass a local HF-format directory (config.json, model.safetensors, tokenizer files) "
            "or a shipped model such as 'zoo:lm-gpt2' (see `interp zoo list`)."
        )
    return spec_str


def _check_local_dir(path: Path) -> None:
    config = path / "config.json"
    if not config.exists():
        raise ModelNotFoundError(f"{path} has no config.json; an HF-format model directory needs one")
    read_object(config, "a model's config.json", "the config.json save_pretrained wrote")
    weights = list(path.glob("*.safetensors"))
    if not weights:
        pickled = [p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt", ".pkl")]
        if pickled:
            raise InterpError(
                f"{path} holds only pickle checkpoints {pickled}; interp loads weights from "
                "safetensors only, since unpickling can run arbitrary code. Convert them with "
                "transformers' save_pretrained(..., safe_serialization=True) in a trusted environment."
            )
        raise ModelNotFoundError(f"{path} has no *.safetensors weights")
    if not any((path / name).is_file() for name in _TOKENIZER_FILES):  # else transformers makes an empty vocabulary
        raise ModelNotFoundError(f"{path} has no tokenizer (none of {', '.join(_TOKENIZER_FILES)}); save one beside "
                                 "the weights with tokenizer.save_pretrained(folder)")


def _tokenizer(path: Path) -> tuple[Any, bool]:
    """(the tokenizer a local folder's model boots with, whether it is the zoo's word-level one); None
    lets transformers pick it. A damaged tokenizer file is refused by name, not a JSONDecodeError."""
    try:
        zoo = _local_tokenizer(path)
        return (zoo, True) if zoo is not None else (load_cache.fast_tokenizer(path), False)
    except InterpError:
        raise
    except Exception as err:
        raise InterpError(f"cannot read the tokenizer in {path} ({type(err).__name__}: {str(err)[:120]}); pass a "
                          "folder whose tokenizer files tokenizer.save_pretrained wrote") from None


def _local_tokenizer(path: Path):
    """The word-level zoo tokenizer, loaded as-is when the directory asks for it; else None."""
    cfg = path / "tokenizer_config.json"
    if not cfg.exists() or not (path / "tokenizer.json").exists():
        return None
    if field(read_object(cfg, "a tokenizer_config.json"), "tokenizer_class", str, cfg, default=None) not in _PLAIN_TOKENIZERS:
        return None
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(path), add_bos_token=True)


class _DropBelowError(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


@contextmanager
def quiet_loading() -> Iterator[None]:
    """Silence what loading prints that a user cannot act on, for the body only; every setting
    touched is restored on exit, even on error.

    Python warnings; transformers' log below ERROR and its per-weight "Loading weights" bar;
    transformer_lens's log below ERROR; and records below ERROR sent straight to the root logger
    (TransformerLens's "center_unembed=True is incompatible with logit softcapping" for Gemma),
    without `logging.warning` installing a root handler behind the caller's back. Hub download
    bars stay: a download is long and should show progress.
    """
    from transformers.utils import logging as hf_logging

    root, tl_logger = logging.getLogger(), logging.getLogger("transformer_lens")
    verbosity, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    tl_level = tl_logger.level
    guard, drop = logging.NullHandler(), _DropBelowError()
    # logging.warning() calls basicConfig() when the root logger has no handler; one that swallows
    # nothing (the filter below decides) keeps it from adding a permanent stderr handler.
    added_guard = not root.handlers
    if added_guard:
        root.addHandler(guard)
    root.addFilter(drop)
    try:
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        tl_logger.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.removeFilter(drop)
        if added_guard:
            root.removeHandler(guard)
        tl_logger.setLevel(tl_level)
        hf_logging.set_verbosity(verbosity)
        if bar:
            hf_logging.enable_progress_bar()


# TransformerLens 4.3's generate hands the HF model `past_key_values`, which transformers 5
# deprecates in favour of `cache` with a FutureWarning on every call: TL's doing, not the caller's.
_GENERATE_NOISE = r"`past_key_values` is deprecated"


def _quiet_generate(bridge) -> None:
    """Give this bridge (only) a `generate` that drops the deprecation warning above."""
    original = bridge.generate

    @functools.wraps(original)
    def generate(*args: Any, **kwargs: Any):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_GENERATE_NOISE, category=FutureWarning)
            return original(*args, **kwargs)

    object.__setattr__(bridge, "generate", generate)


def load(
    spec: str | Path,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    trust_remote_code: bool = False,
    device_map: str | dict[str, Any] | None = None,
    max_memory: dict[Any, Any] | None = None,
    weights_cache: bool | None = None,
):
    """Load `spec` (hub name, local directory, or zoo:NAME) as a bridge in compatibility mode.

    `weights_cache`: keep TransformerLens's processed weights of a local model in $INTERP_CACHE so
    a reload skips the processing (`interp.model.load_cache`); None caches weights of 32 MiB and more
    (a real model, not a tiny test model). Never with a device_map.

    Placement passes through to `TransformerBridge.boot_transformers`: `device` (one device), or
    `device_map` ("auto", "balanced", or {module: device}, accelerate-dispatched across GPUs)
    with an optional `max_memory` ({0: "70GiB", 1: "70GiB", "cpu": "200GiB"}); `dtype` a torch
    dtype or its name ("bfloat16"). `describe(model)["placement"]` says where each block landed.
    """
    from transformer_lens.model_bridge import TransformerBridge

    target = resolve(spec)
    local = Path(target) if Path(target).is_dir() else None
    kwargs: dict[str, Any] = dict(trust_remote_code=trust_remote_code)
    if device is not None and device_map is not None:
        raise InterpError("give device or device_map, not both")
    if max_memory is not None and device_map is None:
        raise InterpError("max_memory budgets a device_map: pass device_map='auto' (or a map) with it")
    if device is not None:
        kwargs["device"] = device
    if isinstance(dtype, str):
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise InterpError(f"dtype {dtype!r} is not a torch dtype name (e.g. 'float32', 'bfloat16')")
        dtype = getattr(torch, dtype)
    if dtype is not None:
        kwargs["dtype"] = dtype
    if device_map is not None:
        kwargs["device_map"] = device_map
    if max_memory is not None:
        kwargs["max_memory"] = max_memory
    if weights_cache is None:
        weights_cache = local is not None and load_cache.weights_bytes(local) >= load_cache.CACHE_MIN_BYTES
    cached = local is not None and weights_cache and device_map is None
    if cached:
        load_cache.warm(local, dtype)  # the kernel reads the file ahead while the tokenizer and bridge are built
    zoo_tokenizer = False
    if local is not None:
        tokenizer, zoo_tokenizer = _tokenizer(local)
        if tokenizer is not None:
            kwargs["tokenizer"] = tokenizer
    try:
        with quiet_loading():
            bridge = TransformerBridge.boot_transformers(target, **kwargs)
            with load_cache.lean_processing(), load_cache.processed_weights_cache(local, dtype) if cached else nullcontext():
                bridge.enable_compatibility_mode(disable_warnings=True)
        load_cache.release_free_memory()
    except ModelNotFoundError:
        raise
    except Exception as err:
        raise InterpError(f"could not load {spec!s} ({target}): {type(err).__name__}: {err}") from err
    if zoo_tokenizer:
        # Zoo models are trained on BOS-prefixed rows in every family; keep to_tokens consistent.
        bridge.cfg.default_prepend_bos = True
    _quiet_generate(bridge)
    bridge.cfg.interp_spec = str(spec)  # what name_of shows (cfg.model_name is the folder it booted from)
    bridge.eval()
    return bridge


def input_device(model) -> torch.device:
    """Where the model reads its input: its embedding's device (the first block's under a
    device_map); every entry point moves tokens there, wherever the caller keeps them. While a
    weight edit has swapped the parameters out (none are registered), the config's device (the CPU
    for a module with neither)."""
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device(getattr(getattr(model, "cfg", None), "device", None) or "cpu")


def name_of(model) -> str:
    """The model's name for results and titles: the spec `load` was given ("smollm2-135m",
    "zoo:lm-gpt2", or a local folder's name), never the cache folder a real model boots from (its
    sha256); for a model `load` did not make, the last part of the config's model name."""
    spec = getattr(model.cfg, "interp_spec", None)
    if spec is None:
        return Path(str(getattr(model.cfg, "model_name", "") or type(model).__name__)).name
    if spec.startswith("zoo:") or not Path(spec).expanduser().is_dir():
        return spec
    return Path(spec).expanduser().resolve().name


def describe(model) -> dict[str, Any]:
    """Family and sizes of a loaded bridge, for `interp info` and model cards."""
    cfg = model.cfg
    n_kv = getattr(cfg, "n_key_value_heads", None) or cfg.n_heads
    hf_cfg = getattr(model.original_model, "config", None)
    family = family_of(hf_cfg.to_dict()) if hf_cfg is not None else "unknown"
    return {
        "family": family,
        "n_layers": cfg.n_layers,
        "n_heads": cfg.n_heads,
        "n_kv_heads": n_kv,
        "d_model": cfg.d_model,
        "d_head": cfg.d_head,
        "d_mlp": getattr(cfg, "d_mlp", None),
        "d_vocab": cfg.d_vocab,
        "n_ctx": cfg.n_ctx,
        "is_causal": family != "bert",
        "placement": placement(model),
    }


def _ranges(indices: list[int]) -> str:
    parts, start = [], None
    for i, n in enumerate(indices):
        start = n if start is None else start
        if i + 1 == len(indices) or indices[i + 1] != n + 1:
            parts.append(f"{start}" if start == n else f"{start}-{n}")
            start = None
    return ",".join(parts)


def placement(model) -> dict[str, Any]:
    """Where the model lives: its dtype, and the device(s) of the embedding, of each run of
    blocks and of the unembedding, e.g. {"dtype": "bfloat16", "embed": "cuda:0",
    "blocks": {"cuda:0": "0-39", "cuda:1": "40-79"}, "unembed": "cuda:1"}. A weight that
    accelerate offloaded (meta on the module) shows as the device in the HF device map."""
    hf = getattr(model, "original_model", None)
    hf_map = dict(getattr(hf, "hf_device_map", None) or {})

    def where(module, name_hint: str = "") -> str:
        devices = sorted({str(p.device) for p in module.parameters()})
        if devices == ["meta"] and hf_map:
            hits = [str(v) for k, v in hf_map.items() if name_hint and (k == name_hint or k.endswith(name_hint))]
            return hits[0] if hits else "offloaded"
        return "+".join(devices) if devices else "none"

    by_device: dict[str, list[int]] = {}
    for i, block in enumerate(model.blocks):
        by_device.setdefault(where(block, f"layers.{i}"), []).append(i)
    params = list(model.parameters())
    out: dict[str, Any] = {"dtype": str(params[0].dtype).removeprefix("torch.") if params else "none"}
    for part in ("embed", "unembed"):
        module = getattr(model, part, None)
        if module is not None:
            out[part] = where(module)
    out["blocks"] = {dev: _ranges(idx) for dev, idx in by_device.items()}
    if hf_map:
        out["device_map"] = "accelerate"
    return out
