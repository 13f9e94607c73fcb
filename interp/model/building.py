"""Building models from nothing: an HF config of one of interp's families with interp's sizes, and
a small random-weight model with a word-level tokenizer written as an HF folder (`build_tiny`).

Words: a *family* is an architecture interp supports (`FAMILIES`); `family_of` names the family
of any HF config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from interp.errors import InterpError
from interp.files.storage import atomic_dir, check_replaceable
from interp.tasks.base import BOS_ID, EOS_ID, PAD_ID, word_tokenizer

__all__ = ["DECODER_FAMILIES", "DEFAULT_WORDS", "FAMILIES", "build_tiny", "family_of", "hf_config", "hf_model_class",
           "save_model_dir"]


FAMILIES = ("gpt2", "llama", "gemma2", "qwen2", "bert")

DECODER_FAMILIES = FAMILIES[:4]

_ARCHITECTURES = {
    "GPT2LMHeadModel": "gpt2",
    "LlamaForCausalLM": "llama",
    "Gemma2ForCausalLM": "gemma2",
    "Qwen2ForCausalLM": "qwen2",
    "BertForMaskedLM": "bert",
    "BertModel": "bert",
    "Gemma3ForCausalLM": "gemma3",
}


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
    """Write an HF model + tokenizer as safetensors atomically: a temp dir renamed into place. An
    existing `directory` holding files this save does not write is refused, never emptied."""
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
        check_replaceable(directory, lambda name: (tmp / name).exists(), "a saved model")
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
