"""Metrics: logits -> one value per example. Reduce with `.mean()` for a scalar metric.

Each metric reads the logits at `answer_pos` (one position per example). A `Task` carries the
answer tokens and positions; `for_task(task)` binds them into a logits -> scalar function, which is
what patching and masking take.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from interp.errors import InterpError
from interp.tensors import PerExample

__all__ = ["TASK_METRICS", "Metric", "accuracy", "answer_logits", "binary_accuracy", "for_task", "kl", "logit_diff", "normalized", "prob", "token_ids"]

Metric = Callable[[Tensor], Tensor]
# the metrics a task names (`Task.metric`, `for_task(task, name)`, a sweep's `metric` key)
TASK_METRICS: tuple[str, ...] = ("logit_diff", "prob", "accuracy", "binary_accuracy")


def answer_logits(
    logits: Float[Tensor, "batch pos d_vocab"], answer_pos: Int[Tensor, " batch"]
) -> Float[Tensor, "batch d_vocab"]:
    if logits.ndim != 3:
        raise InterpError(f"logits must be [batch, pos, d_vocab], got shape {tuple(logits.shape)}")
    if answer_pos.shape != (logits.shape[0],):
        raise InterpError(f"answer_pos has shape {tuple(answer_pos.shape)}, expected ({logits.shape[0]},) for logits {tuple(logits.shape)}")
    rows = torch.arange(logits.shape[0], device=logits.device)
    return logits[rows, answer_pos.to(logits.device)]


def logit_diff(logits: Tensor, correct: Tensor, incorrect: Tensor, answer_pos: Tensor) -> PerExample:
    """logit[correct] - logit[incorrect] at each example's answer position."""
    at = answer_logits(logits, answer_pos)
    return at.gather(1, correct[:, None].to(at.device))[:, 0] - at.gather(1, incorrect[:, None].to(at.device))[:, 0]


def prob(logits: Tensor, correct: Tensor, answer_pos: Tensor) -> PerExample:
    """Softmax probability of the correct token at the answer position."""
    at = answer_logits(logits, answer_pos).float().softmax(-1)
    return at.gather(1, correct[:, None].to(at.device))[:, 0]


def accuracy(logits: Tensor, correct: Tensor, answer_pos: Tensor, candidates: Tensor | None = None) -> PerExample:
    """1.0 where the correct token is the argmax (over `candidates` token ids if given)."""
    at = answer_logits(logits, answer_pos)
    if candidates is not None:
        cand = candidates.to(at.device)
        pred = cand[at[:, cand].argmax(-1)]
    else:
        pred = at.argmax(-1)
    return (pred == correct.to(at.device)).float()


def binary_accuracy(logits: Tensor, correct: Tensor, incorrect: Tensor, answer_pos: Tensor) -> PerExample:
    """1.0 where the correct token outscores the incorrect one (two-way choice, e.g. is/are)."""
    return (logit_diff(logits, correct, incorrect, answer_pos) > 0).float()


def kl(logits: Tensor, reference_logits: Tensor, answer_pos: Tensor) -> PerExample:
    """KL(reference || model) of next-token distributions at the answer position, in nats."""
    p_log = answer_logits(reference_logits, answer_pos).float().log_softmax(-1)
    q_log = answer_logits(logits, answer_pos).float().log_softmax(-1)
    return F.kl_div(q_log, p_log, log_target=True, reduction="none").sum(-1)


def normalized(value: Tensor | float, corrupt_value: float, clean_value: float) -> Tensor:
    """Rescale a metric so corrupt = 0 and clean = 1."""
    span = clean_value - corrupt_value
    if abs(span) < 1e-12:
        raise InterpError(f"clean ({clean_value}) and corrupt ({corrupt_value}) metrics are equal; cannot normalise")
    return (torch.as_tensor(value) - corrupt_value) / span


def for_task(task, name: str | None = None) -> Metric:
    """Bind a task's answers: returns logits -> scalar (mean over examples) for metric `name`.

    `name` defaults to the task's own metric: 'logit_diff', 'prob', 'accuracy' or 'binary_accuracy'.
    """
    name = name or task.metric
    c, i, p = task.correct, task.incorrect, task.answer_pos
    per_example: dict[str, Metric] = {
        "logit_diff": lambda lg: logit_diff(lg, c, i, p),
        "prob": lambda lg: prob(lg, c, p),
        "accuracy": lambda lg: accuracy(lg, c, p),
        "binary_accuracy": lambda lg: binary_accuracy(lg, c, i, p),
    }
    if name not in per_example:
        raise InterpError(f"metric {name!r} is not one of {TASK_METRICS}")
    fn = per_example[name]
    return lambda logits: fn(logits).mean()


def token_ids(model, words: list[str] | tuple[str, ...]) -> Tensor:
    """The single token id of each word (as the model's tokenizer splits it, no BOS).

    Raises ValueError naming a word that is not exactly one token, since a logit difference
    over a multi-token answer is not one logit.
    """
    ids = []
    for word in words:
        toks = model.to_tokens(word, prepend_bos=False)[0].tolist()
        if len(toks) != 1:
            pieces = model.to_str_tokens(word, prepend_bos=False)
            raise InterpError(f"answer {word!r} is not a single token: it splits into {len(toks)} tokens {pieces}")
        ids.append(toks[0])
    return torch.tensor(ids)
