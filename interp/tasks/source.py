"""How task rows are encoded for a model: the one reader of a bridge's or tokenizer's ids that the
BPE task builders (interp.tasks.bpe, interp.tasks.domains) share."""

from __future__ import annotations

from typing import Any

from interp.errors import InterpError

__all__ = ["Source"]


class Source:
    """Encodes text the way rows are built: bridge.to_tokens, or BOS + tokenizer.encode."""

    def __init__(self, model: Any, prepend_bos: bool | None):
        if model is None:
            raise InterpError("pass a loaded model (bridge) or a Hugging Face tokenizer")
        if hasattr(model, "to_tokens") and getattr(model, "tokenizer", None) is not None:
            self.bridge, self.tok = model, model.tokenizer
        elif callable(getattr(model, "encode", None)) and callable(getattr(model, "decode", None)):
            self.bridge, self.tok = None, model
        else:
            raise InterpError(
                f"{type(model).__name__} is neither a bridge with a tokenizer nor a tokenizer with encode/decode"
            )
        self.prepend_bos = prepend_bos
        self._cache: dict[str, tuple[int, ...]] = {}

    def raw(self, text: str) -> tuple[int, ...]:
        """Token ids of `text` alone, no special tokens."""
        if text not in self._cache:
            self._cache[text] = tuple(self.tok.encode(text, add_special_tokens=False))
        return self._cache[text]

    def row(self, text: str) -> list[int]:
        """The model's input row for `text` (BOS policy of the bridge, or of the tokenizer)."""
        if self.bridge is not None:
            return self.bridge.to_tokens(text, prepend_bos=self.prepend_bos, truncate=False)[0].tolist()
        bos = getattr(self.tok, "bos_token_id", None)
        use_bos = (bos is not None) if self.prepend_bos is None else self.prepend_bos
        if use_bos and bos is None:
            raise InterpError("prepend_bos=True but the tokenizer has no bos_token_id")
        return ([bos] if use_bos else []) + list(self.raw(text))

    def word(self, word: str) -> int | None:
        ids = self.raw(" " + word)
        return ids[0] if len(ids) == 1 else None

    def splits_as(self, word: str) -> str:
        return " + ".join(repr(self.tok.decode([i])) for i in self.raw(" " + word))
