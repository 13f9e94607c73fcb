"""The `Task` record every task family yields, and the word-level tokenizer the zoo uses.

A task is a batch of examples. Example `i` is the token row `clean[i]`; the model's logits at
position `answer_pos[i]` should rank `correct[i]` above `incorrect[i]`. `corrupt[i]` is the same
row under the family's standard corruption (same length, and the corrupt answer is usually
`incorrect[i]`), which is what patching contrasts against. Rows are right-padded with PAD_ID,
so a causal model's activations before `answer_pos` are unaffected by padding.

Templated tasks also name positions: `positions[name][i]` is row i's index of that named token
(IOI: "IO", "S1", "S2", "END"; SVA: "subject", "attractor" where every row has one, "END" or, for
masked rows, "verb"). Rows of one template share those indices; rows of mixed templates may not,
which `interp.patching` checks before a by-position sweep (see `aligned_positions`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import torch
from jaxtyping import Int
from torch import Tensor

from interp.errors import InterpError

__all__ = ["BOS_ID", "EOS_ID", "MASK_ID", "PAD_ID", "SPECIALS", "UNK_ID", "Task", "pad_id", "pad_rows", "word_tokenizer"]

SPECIALS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]", "[MASK]")
PAD_ID, UNK_ID, BOS_ID, EOS_ID, MASK_ID = range(len(SPECIALS))


@dataclass(frozen=True)
class Task:
    name: str
    split: str
    clean: Int[Tensor, "batch pos"]
    corrupt: Int[Tensor, "batch pos"]
    correct: Int[Tensor, " batch"]
    incorrect: Int[Tensor, " batch"]
    answer_pos: Int[Tensor, " batch"]
    text: tuple[str, ...]
    metric: str = "logit_diff"
    seed: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    positions: dict[str, Tensor] = field(default_factory=dict)  # name -> [batch] row indices

    def __post_init__(self) -> None:
        if self.clean.shape != self.corrupt.shape:
            raise InterpError(
                f"Task {self.name}/{self.split}: clean {tuple(self.clean.shape)} and corrupt "
                f"{tuple(self.corrupt.shape)} must have the same shape [batch, pos]"
            )
        n = self.clean.shape[0]
        for what in ("correct", "incorrect", "answer_pos"):
            got = getattr(self, what)
            if got.shape != (n,):
                raise InterpError(
                    f"Task {self.name}/{self.split}: {what} has shape {tuple(got.shape)}, "
                    f"expected ({n},) to match clean {tuple(self.clean.shape)}"
                )
        if len(self.text) != n:
            raise InterpError(f"Task {self.name}/{self.split}: {len(self.text)} texts for {n} rows")
        if n and int(self.answer_pos.max()) >= self.clean.shape[1]:
            raise InterpError(
                f"Task {self.name}/{self.split}: answer_pos {int(self.answer_pos.max())} is past "
                f"the last position {self.clean.shape[1] - 1}"
            )
        for key, where in self.positions.items():
            if not isinstance(key, str) or not isinstance(where, Tensor) or where.shape != (n,):
                raise InterpError(
                    f"Task {self.name}/{self.split}: positions[{key!r}] must be a ({n},) tensor of row indices, "
                    f"got {tuple(where.shape) if isinstance(where, Tensor) else type(where).__name__}"
                )
            if n and not (0 <= int(where.min()) and int(where.max()) < self.clean.shape[1]):
                raise InterpError(
                    f"Task {self.name}/{self.split}: positions[{key!r}] has indices outside 0..{self.clean.shape[1] - 1}"
                )

    def __repr__(self) -> str:
        n, width = self.clean.shape
        names = f", positions=[{', '.join(self.positions)}]" if self.positions else ""
        sample = self.text[0] if self.text else ""
        sample = sample if len(sample) <= 60 else sample[:57] + "..."
        return (f"Task({self.name}/{self.split}, n={n}, width={width}, metric={self.metric!r}{names}, "
                f"e.g. {sample!r})")

    def aligned_positions(self) -> dict[str, int] | None:
        """{name: index} when every row has each named position at the same index, else None."""
        out = {}
        for key, where in self.positions.items():
            if len(where) and bool((where != where[0]).any()):
                return None
            if len(where):
                out[key] = int(where[0])
        return out

    def __len__(self) -> int:
        return self.clean.shape[0]

    def __getitem__(self, index: int | slice | Sequence[int] | Tensor) -> Task:
        """Select rows; the result is a Task over those rows."""
        if isinstance(index, int):
            index = [index]
        rows = torch.arange(len(self))[index]
        return replace(
            self,
            clean=self.clean[rows],
            corrupt=self.corrupt[rows],
            correct=self.correct[rows],
            incorrect=self.incorrect[rows],
            answer_pos=self.answer_pos[rows],
            text=tuple(self.text[i] for i in rows.tolist()),
            positions={k: v[rows.to(v.device)] for k, v in self.positions.items()},
        )

    def to(self, device: str | torch.device) -> Task:
        return replace(
            self,
            clean=self.clean.to(device),
            corrupt=self.corrupt.to(device),
            correct=self.correct.to(device),
            incorrect=self.incorrect.to(device),
            answer_pos=self.answer_pos.to(device),
            positions={k: v.to(device) for k, v in self.positions.items()},
        )


def pad_id(model) -> int | None:
    """The pad token id of a model's tokenizer (or of `model` itself, a tokenizer), None when it has
    none. The one place interp reads it: what a caller pads with when there is none is the caller's
    choice (generation pads with EOS, a task's rows with 0: masked or scored away either way), and
    the runner excludes padding from its means only where a pad token exists."""
    tok = getattr(model, "tokenizer", model)
    value = getattr(tok, "pad_token_id", None)
    return None if value is None else int(value)


def pad_rows(rows: Sequence[Sequence[int]], length: int | None = None) -> Int[Tensor, "batch pos"]:
    """Right-pad token rows with PAD_ID into one [batch, pos] tensor."""
    width = max((len(r) for r in rows), default=0) if length is None else length
    out = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
    for i, r in enumerate(rows):
        if len(r) > width:
            raise InterpError(f"row {i} has {len(r)} tokens, longer than the pad length {width}")
        out[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
    return out


def word_tokenizer(words: Sequence[str]):
    """A Hugging Face fast tokenizer over a fixed word list, split on whitespace.

    Ids 0..4 are the specials [PAD] [UNK] [BOS] [EOS] [MASK]; `words` follow in order. The
    result saves as tokenizer.json with `save_pretrained` and reloads with no network.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {s: i for i, s in enumerate(SPECIALS)}
    for w in words:
        if w in vocab:
            raise InterpError(f"word {w!r} appears twice in the vocabulary (or is a special token)")
        if not w or any(c.isspace() for c in w):
            raise InterpError(f"word {w!r} is empty or contains whitespace")
        vocab[w] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="[PAD]",
        unk_token="[UNK]",
        bos_token="[BOS]",
        eos_token="[EOS]",
        mask_token="[MASK]",
        cls_token="[BOS]",
        sep_token="[EOS]",
    )
