"""Loading models as TransformerLens 4.x bridges; the one place that knows TL boot details.

`load(spec)` accepts a Hugging Face hub name, a local HF-format directory, or `zoo:NAME` (a model
shipped in interp/data/zoo, or trained into the user zoo, `user_zoo_dir()`). It returns a `TransformerBridge` in eval mode with
`enable_compatibility_mode()` applied, so HookedTransformer hook names and numerics hold.

`build_tiny(family, directory)` writes a small random-weight model of one of the five supported
families (with a local word-level tokenizer) for quick experiments and tests.
"""

from __future__ import annotations

import functools
import json
import logging
import socket
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

import torch

from interp import load_cache
from interp.errors import InterpError
from interp.results import atomic_dir
from interp.tasks.base import BOS_ID, EOS_ID, PAD_ID, word_tokenizer

__all__ = ["FAMILIES", "DECODER_FAMILIES", "RESUMABLE_FAMILIES", "ZOO_DIR", "ModelNotFoundError", "build_tiny", "can_resume", "cached_keys_values", "describe", "family_of", "hf_config", "hf_model_class", "kv_cache_kwargs", "load", "new_kv_cache", "prefilled_kv_cache", "quiet_loading", "resolve", "resume", "save_model_dir", "skipped_blocks", "user_zoo_dir", "zoo_dirs", "zoo_path"]

FAMILIES = ("gpt2", "llama", "gemma2", "qwen2", "bert")
DECODER_FAMILIES = FAMILIES[:4]
# causal decoders a forward may resume in: the zoo's, and those the real models add (loaded, not
# built by build_tiny or trained in the zoo)
RESUMABLE_FAMILIES = (*DECODER_FAMILIES, "gemma3", "gemma3_text")
# The shipped zoo: package data, so a wheel carries it. Nothing writes here at run time; models
# trained with `interp zoo train` go to user_zoo_dir(), which `zoo:NAME` searches first.
ZOO_DIR = Path(__file__).resolve().parent / "data" / "zoo"
_ARCHITECTURES = {
    "GPT2LMHeadModel": "gpt2",
    "LlamaForCausalLM": "llama",
    "Gemma2ForCausalLM": "gemma2",
    "Qwen2ForCausalLM": "qwen2",
    "BertForMaskedLM": "bert",
    "BertModel": "bert",
    "Gemma3ForCausalLM": "gemma3",
}
# Tokenizer classes that mean "use tokenizer.json as it is"; transformers 5 otherwise picks a
# class from the model type (Qwen2Tokenizer for qwen2), which mangles a word-level vocabulary.
_PLAIN_TOKENIZERS = {"PreTrainedTokenizerFast", "TokenizersBackend"}


def family_of(config: dict[str, Any]) -> str:
    """The interp family name ('gpt2', 'llama', ...) of an HF config dict."""
    for arch in config.get("architectures") or []:
        if arch in _ARCHITECTURES:
            return _ARCHITECTURES[arch]
    model_type = config.get("model_type", "")
    return model_type if model_type in FAMILIES else model_type or "unknown"


def hf_config(
    family: str,
    *,
    vocab_size: int,
    d_model: int = 32,
    n_layers: int = 2,
    n_heads: int = 4,
    n_kv_heads: int | None = None,
    d_mlp: int | None = None,
    n_ctx: int = 64,
    tie: int = 1,
):
    """An HF config for one of FAMILIES with interp's sizes; n_kv_heads < n_heads gives GQA.

    `tie` (1 or 0) ties the unembedding to the embedding (decoders only).
    """
    import transformers as hf

    if family not in FAMILIES:
        raise InterpError(f"family {family!r} is not one of {FAMILIES}")
    if d_model % n_heads:
        raise InterpError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    if n_heads % n_kv:
        raise InterpError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv}")
    if family in ("gpt2", "bert") and n_kv != n_heads:
        raise InterpError(f"{family} has no grouped-query attention: n_kv_heads must equal n_heads")
    d_mlp = 4 * d_model if d_mlp is None else d_mlp
    ids = dict(bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)
    if family == "gpt2":
        return hf.GPT2Config(
            vocab_size=vocab_size, n_positions=n_ctx, n_embd=d_model, n_layer=n_layers,
            n_head=n_heads, n_inner=d_mlp, tie_word_embeddings=bool(tie), **ids,
        )
    if family == "bert":
        return hf.BertConfig(
            vocab_size=vocab_size, hidden_size=d_model, num_hidden_layers=n_layers,
            num_attention_heads=n_heads, intermediate_size=d_mlp, max_position_embeddings=n_ctx,
            pad_token_id=PAD_ID,
        )
    # Embeddings are tied, as in GPT-2 and the small Gemma/Qwen/LLaMA releases: a copying circuit
    # (IOI's name movers) then generalises to names it never copied in training.
    common = dict(
        vocab_size=vocab_size, hidden_size=d_model, intermediate_size=d_mlp,
        num_hidden_layers=n_layers, num_attention_heads=n_heads, num_key_value_heads=n_kv,
        max_position_embeddings=n_ctx, tie_word_embeddings=bool(tie), **ids,
    )
    if family == "llama":
        return hf.LlamaConfig(**common)
    if family == "qwen2":
        return hf.Qwen2Config(**common)
    return hf.Gemma2Config(
        **common, head_dim=d_model // n_heads, sliding_window=n_ctx, query_pre_attn_scalar=d_model // n_heads
    )


def hf_model_class(family: str):
    import transformers as hf

    classes = {
        "gpt2": hf.GPT2LMHeadModel,
        "llama": hf.LlamaForCausalLM,
        "gemma2": hf.Gemma2ForCausalLM,
        "qwen2": hf.Qwen2ForCausalLM,
        "bert": hf.BertForMaskedLM,
    }
    return classes[family]


DEFAULT_WORDS = tuple(
    "the a cat cats dog dogs key keys cabinet cabinets is are runs run sees see to of that "
    "mary john anna tom went store gave drink , .".split()
)


def save_model_dir(model, tokenizer, directory: str | Path, extra_files: dict[str, str] | None = None) -> Path:
    """Write an HF model + tokenizer as safetensors atomically: a temp dir renamed into place."""
    directory = Path(directory)
    with atomic_dir(directory) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        cfg_path = tmp / "tokenizer_config.json"
        tok_cfg = json.loads(cfg_path.read_text())
        tok_cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
        cfg_path.write_text(json.dumps(tok_cfg, indent=2))
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)
    return directory


def build_tiny(
    family: str,
    directory: str | Path,
    *,
    words: tuple[str, ...] = DEFAULT_WORDS,
    seed: int = 0,
    **sizes: Any,
) -> Path:
    """Write a random-weight model of `family` with a word-level tokenizer into `directory`.

    `sizes` are hf_config's keywords (d_model, n_layers, n_heads, n_kv_heads, d_mlp, n_ctx).
    LLaMA and Qwen2 default to grouped-query attention (2 KV heads for 4 query heads).
    """
    tokenizer = word_tokenizer(words)
    if family in ("llama", "qwen2", "gemma2"):
        sizes.setdefault("n_kv_heads", max(1, sizes.get("n_heads", 4) // 2))
    config = hf_config(family, vocab_size=len(tokenizer), **sizes)
    with torch.random.fork_rng(devices=[]):  # the caller's global RNG state is left as it was
        torch.manual_seed(seed)
        model = hf_model_class(family)(config)
    return save_model_dir(model, tokenizer, directory)


class ModelNotFoundError(InterpError, FileNotFoundError):
    """A model spec that names nothing loadable here (an InterpError like all bad input, and a
    FileNotFoundError for code that catches that)."""


def user_zoo_dir() -> Path:
    """Where `interp zoo train` writes by default: $INTERP_CACHE/zoo (default ~/.cache/interp/zoo)."""
    from interp.gguf import cache_dir

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

    A `.gguf` file and a real model's name (`interp.gguf.REAL_MODELS`) resolve to their HF folder
    in the cache, dequantized on first use."""
    from interp import gguf

    spec_str = str(spec)
    if spec_str in gguf.REAL_MODELS:
        return str(gguf.convert(gguf.real_model_file(spec_str)))
    if spec_str.endswith(".gguf"):
        if not Path(spec_str).expanduser().exists():
            raise ModelNotFoundError(f"GGUF file {spec_str!r} does not exist")
        return str(gguf.convert(spec_str))
    if spec_str.startswith("zoo:"):
        name = spec_str[4:]
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
    try:
        json.loads(config.read_text())
    except json.JSONDecodeError as err:
        raise InterpError(f"{config} is not valid JSON ({err})") from None
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


def _local_tokenizer(path: Path):
    """The word-level zoo tokenizer, loaded as-is when the directory asks for it; else None."""
    cfg = path / "tokenizer_config.json"
    if not cfg.exists() or not (path / "tokenizer.json").exists():
        return None
    if json.loads(cfg.read_text()).get("tokenizer_class") not in _PLAIN_TOKENIZERS:
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
    a reload skips the processing (`interp.load_cache`); None caches weights of 32 MiB and more
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
    zoo_tokenizer = False
    if local is not None:
        tokenizer = _local_tokenizer(local)
        zoo_tokenizer = tokenizer is not None
        if tokenizer is None:
            tokenizer = load_cache.fast_tokenizer(local)
        if tokenizer is not None:
            kwargs["tokenizer"] = tokenizer
    if weights_cache is None:
        weights_cache = local is not None and load_cache.weights_bytes(local) >= load_cache.CACHE_MIN_BYTES
    cached = local is not None and weights_cache and device_map is None
    try:
        with quiet_loading():
            bridge = TransformerBridge.boot_transformers(target, **kwargs)
            with load_cache.processed_weights_cache(local, dtype) if cached else nullcontext():
                bridge.enable_compatibility_mode(disable_warnings=True)
    except ModelNotFoundError:
        raise
    except Exception as err:
        raise InterpError(f"could not load {spec!s} ({target}): {type(err).__name__}: {err}") from err
    if zoo_tokenizer:
        # Zoo models are trained on BOS-prefixed rows in every family; keep to_tokens consistent.
        bridge.cfg.default_prepend_bos = True
    _quiet_generate(bridge)
    bridge.eval()
    return bridge


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


# ---------------------------------------------------------------------------------------------
# resuming a forward pass: a KV cache of earlier positions, and blocks that need not run


def new_kv_cache(model):
    """An empty Hugging Face KV cache for `model`."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.original_model.config)
    except TypeError:  # transformers < 4.56
        return DynamicCache()


def kv_cache_kwargs(model, cache) -> dict[str, Any]:
    """Forward kwargs that hand `cache` to the bridge: under the HF model's own name and as
    `layer_past`, where TL 4.3's attention looks (transformers 5 passes it on as `cache`)."""
    import inspect

    params = inspect.signature(model.original_model.forward).parameters
    return {"cache" if "cache" in params else "past_key_values": cache, "layer_past": cache, "use_cache": True}


def cached_keys_values(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (keys, values) [batch, kv_head, pos, d_head] held by a filled HF cache."""
    if hasattr(cache, "layers"):  # transformers >= 4.56
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


def prefilled_kv_cache(model, keys_values: list[tuple[torch.Tensor, torch.Tensor]]):
    """A cache that already holds `keys_values` (one pair per layer), as if those positions ran."""
    cache = new_kv_cache(model)
    for layer, (keys, values) in enumerate(keys_values):
        cache.update(keys, values, layer)
    return cache


def can_resume(model) -> bool:
    """Whether `resume` may skip work on this model: a causal decoder of a supported family
    (BERT attends both ways, so a later position can change an earlier one)."""
    hf_cfg = getattr(model.original_model, "config", None)
    return hf_cfg is not None and family_of(hf_cfg.to_dict()) in RESUMABLE_FAMILIES and _hf_block_list(model) is not None


class _SkippedBlock(torch.nn.Module):
    """Stands in for a block whose output is discarded: hands its input on, computes nothing."""

    def forward(self, hidden_states, *args, **kwargs):
        return hidden_states


def _hf_block_list(model) -> torch.nn.ModuleList | None:
    """The HF ModuleList that holds the bridge's blocks (transformer.h, model.layers, ...)."""
    first = model.blocks[0]
    for module in model.original_model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == len(model.blocks) and module[0] is first:
            return module
    return None


@contextmanager
def skipped_blocks(model, n: int) -> Iterator[None]:
    """Blocks 0..n-1 do nothing inside the context (restored on exit, even on error).

    Only for a forward that starts at block n (`start_at_layer=n`), which discards their output
    anyway: TL 4.3's bridge still runs them, and this is what it would cost."""
    if n == 0:
        yield
        return
    blocks = _hf_block_list(model)
    if blocks is None:
        raise RuntimeError("cannot find the Hugging Face module list that holds the model's blocks")
    originals = [blocks[i] for i in range(n)]
    try:
        for i in range(n):
            blocks[i] = _SkippedBlock()
        yield
    finally:
        for i, block in enumerate(originals):
            blocks[i] = block


def resume(
    model,
    tokens: torch.Tensor,
    *,
    layer: int = 0,
    start: int = 0,
    residual: torch.Tensor | None = None,
    keys_values: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> torch.Tensor:
    """Logits [batch, pos - start, d_vocab] of a forward that begins at block `layer` and position
    `start` of `tokens` [batch, pos], on a causal decoder (`can_resume`).

    What is skipped must be supplied, as a run that did compute it recorded it: `residual`, the
    input of block `layer` (its hook_resid_pre) at positions start.., when layer > 0; and
    `keys_values`, every layer's keys and values at positions < start, when start > 0. Hooks
    fire only where work is done, on activations that span positions start.. only.
    """
    n_pos = tokens.shape[1]
    if not 0 <= start < n_pos:
        raise InterpError(f"start={start} must lie in [0, {n_pos}) for {n_pos} positions")
    if layer and residual is None:
        raise InterpError(f"layer={layer} needs the residual entering that block")
    if start and keys_values is None:
        raise InterpError(f"start={start} needs the keys and values of positions 0..{start - 1}")
    kwargs: dict[str, Any] = {}
    if start:
        kwargs = kv_cache_kwargs(model, prefilled_kv_cache(model, keys_values))
        kwargs["position_ids"] = torch.arange(start, n_pos, device=tokens.device).expand(tokens.shape[0], -1)
    with skipped_blocks(model, layer):
        if layer:
            return model(residual, start_at_layer=layer, **kwargs)
        return model(tokens[:, start:], **kwargs)
