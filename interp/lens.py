"""Residual-stream tools as labelled results: logit lens, direct logit attribution, residual
decomposition, and attention-head detectors.

    from interp import lens
    lens.logit_lens(model, task)                  # [layer, quantity] "lines": logit diff per layer
    lens.lens_top_tokens(model, "a b c", k=5)     # DataFrame: the top-k tokens per layer, one prompt
    lens.direct_logit_attribution(model, task)    # [layer, unit] heatmap: h0..hN and "mlp"
    lens.residual_decomposition(model, task)      # [unit, metric] bars: embed, pos_embed, L_attn_out, ...
    lens.head_scores(model, None, "induction")    # [layer, head] heatmap on repeated random tokens

Three layers, as in `interp.patching`: pure tensor functions (`answer_directions`, `project`,
`at_positions`, `detection_target`, `pattern_scores`, `repeated_tokens`), then `residual_components`
(the cache's decomposition at each example's answer position), then the analyses that run the
model and return a Grid.

The residual-stream arithmetic is TransformerLens's: the cache is recorded by `interp.run.cache`
(an observation, with no interventions) and wrapped in TL's ActivationCache for its methods, and
`accumulated_resid`, `get_full_resid_decomposition`, `decompose_resid`, `apply_ln_to_stack`
(the cached final-LayerNorm scale) and `model.tokens_to_residual_directions` do the work; the
logit lens reads each state through `transformer_lens.tools.analysis.logit_lens.logit_readout`
(the real final norm with recomputed statistics, W_U, b_U and the adapter's output transform).
Attention patterns for the head detectors go through `interp.run.cache`, so they accept
interventions. Compatibility-mode bridges fold the LayerNorm weights into W_U and the following
layers, so with the cached scale direct logit attribution sums exactly (to float rounding) to the
model's logit difference.
"""

from __future__ import annotations

from typing import Literal, Sequence

import torch
from torch import Tensor

from interp import run
from interp.errors import InterpError
from interp.interventions import Intervention
from interp.metrics import logit_diff as _logit_diff
from interp.results import Grid
from interp.sites import check_position, check_tokens
from interp.tasks.base import Task, pad_id
from interp.memory import records_peak

__all__ = [
    "HEAD_KINDS", "LENS_METRICS", "answer_directions", "at_positions", "detection_target", "direct_logit_attribution",
    "head_scores", "lens_top_tokens", "logit_lens", "pattern_scores", "project", "repeated_tokens",
    "residual_components", "residual_decomposition",
]

LENS_METRICS: tuple[str, ...] = ("logit_diff", "prob", "rank")
HEAD_KINDS: tuple[str, ...] = ("previous_token", "duplicate_token", "induction")


# ---------------------------------------------------------------------------------------------
# pure tensor functions


def at_positions(x: Tensor, pos: Tensor) -> Tensor:
    """x[..., b, pos[b], :] for each row b: [..., batch, pos, d] -> [..., batch, d]."""
    if x.ndim < 3:
        raise InterpError(f"x must be [..., batch, pos, d], got shape {tuple(x.shape)}")
    if pos.shape != (x.shape[-3],):
        raise InterpError(f"positions {tuple(pos.shape)} must be one per row of {tuple(x.shape)}")
    rows = torch.arange(x.shape[-3], device=x.device)
    return x[..., rows, pos.to(x.device), :]


def answer_directions(model, correct: Tensor, incorrect: Tensor | None = None) -> Tensor:
    """Unembedding directions [batch, d_model]: W_U[:, correct] - W_U[:, incorrect] (or W_U[:, correct])."""
    d = model.tokens_to_residual_directions(correct.to(model.cfg.device).reshape(-1))
    d = d.reshape(-1, model.cfg.d_model)
    if incorrect is not None:
        d = d - model.tokens_to_residual_directions(incorrect.to(model.cfg.device).reshape(-1)).reshape(-1, model.cfg.d_model)
    return d.detach()


def project(stack: Tensor, directions: Tensor) -> Tensor:
    """Each component along each row's direction: [..., batch, d] . [batch, d] -> [..., batch]."""
    if stack.shape[-2:] != directions.shape:
        raise InterpError(f"stack {tuple(stack.shape)} must end in the directions' shape {tuple(directions.shape)}")
    return (stack * directions.to(stack)).sum(-1)


def detection_target(tokens: Tensor, kind: str) -> Tensor:
    """The ideal attention map of a head kind: [batch, dest, src] of 0/1, lower triangular.

    previous_token: dest attends to dest - 1. duplicate_token: to earlier positions holding the
    same token. induction: to the position after an earlier copy of the current token. These are
    TransformerLens's `head_detector` patterns, row by row.
    """
    kind = _kind(kind)
    if tokens.ndim != 2:
        raise InterpError(f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}")
    b, n = tokens.shape
    tokens = tokens.cpu()
    if kind == "previous_token":
        return torch.diag(torch.ones(n - 1), -1).expand(b, n, n).clone()
    same = (tokens[:, :, None] == tokens[:, None, :]).float().tril(-1)  # [batch, dest, src], src < dest
    if kind == "duplicate_token":
        return same
    out = torch.zeros_like(same)
    out[:, :, 1:] = same[:, :, :-1]  # attend one past the earlier copy
    return out.tril()


def pattern_scores(pattern: Tensor, target: Tensor, *, valid: Tensor | None = None, exclude_bos: bool = False,
                   exclude_current_token: bool = False, average: Literal["targets", "all"] = "targets") -> Tensor:
    """Attention mass on the target positions, per head: [batch, head, dest, src] -> [head].

    average="targets": the mean, over (row, destination) pairs that have a target, of the
    attention mass on the targets (a perfect head scores 1). average="all": TransformerLens's
    `detect_head(error_measure="mul")`, per row sum(pattern * target) / sum(pattern) over every
    destination, then the mean over rows. `valid` [batch, pos] marks real (non-padding) tokens;
    padded destinations and sources are left out. exclude_bos / exclude_current_token drop
    source position 0 / the diagonal, as in `detect_head`.
    """
    if pattern.ndim != 4 or pattern.shape[-1] != pattern.shape[-2]:
        raise InterpError(f"pattern must be [batch, head, dest, src], got shape {tuple(pattern.shape)}")
    b, _, n, _ = pattern.shape
    if target.shape != (b, n, n):
        raise InterpError(f"target {tuple(target.shape)} must be [batch, dest, src] = {(b, n, n)}")
    if average not in ("targets", "all"):
        raise InterpError(f"average={average!r} must be 'targets' or 'all'")
    p, t = pattern.float(), target.to(pattern.device).float().clone()
    keep = torch.ones(b, n, n, device=p.device)
    if valid is not None:
        v = valid.to(p.device).float()
        keep = v[:, :, None] * v[:, None, :]
    if exclude_bos:
        keep[:, :, 0] = 0
    if exclude_current_token:
        keep = keep * (1 - torch.eye(n, device=p.device))
    t = t * keep
    p = p * keep[:, None]
    if average == "all":
        return ((p * t[:, None]).sum((2, 3)) / p.sum((2, 3)).clamp_min(1e-12)).mean(0)
    rows = (t.sum(-1) > 0).float()  # [batch, dest]: destinations that have a target
    if rows.sum() == 0:
        raise InterpError("no destination position has a target on these tokens (e.g. no repeated token for a "
                          "duplicate-token or induction score); use repeated tokens")
    mass = (p * t[:, None]).sum(-1)  # [batch, head, dest]
    return (mass * rows[:, None]).sum((0, 2)) / rows.sum()


def repeated_tokens(model, n: int = 16, length: int = 20, *, seed: int = 0) -> Tensor:
    """[n, 1 + 2 * length] rows: BOS (when the tokenizer has one), then `length` random tokens
    (no special tokens), then the same `length` again. Seeded with its own torch.Generator."""
    for name, v in (("n", n), ("length", length)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InterpError(f"{name}={v!r} must be an int >= 1")
    tok = getattr(model, "tokenizer", None)
    special = set(getattr(tok, "all_special_ids", None) or []) if tok is not None else set()
    bos = getattr(tok, "bos_token_id", None) if tok is not None else None
    ids = torch.tensor([i for i in range(model.cfg.d_vocab) if i not in special])
    width = 2 * length + (bos is not None)
    if width > model.cfg.n_ctx:
        raise InterpError(f"2 * length{' + 1 (BOS)' if bos is not None else ''} = {width} exceeds the context n_ctx={model.cfg.n_ctx}")
    gen = torch.Generator().manual_seed(seed)
    half = ids[torch.randint(len(ids), (n, length), generator=gen)]
    rows = torch.cat([half, half], 1)
    if bos is not None:
        rows = torch.cat([torch.full((n, 1), bos, dtype=rows.dtype), rows], 1)
    return rows


# ---------------------------------------------------------------------------------------------
# inputs and the cache


def _kind(kind: str) -> str:
    k = str(kind).replace("-", "_").removesuffix("_head")
    if k not in HEAD_KINDS:
        raise InterpError(f"unknown head kind {kind!r}; valid kinds: {', '.join(HEAD_KINDS)}")
    return k


def _task(model, task: Task, need_incorrect: bool) -> tuple[Tensor, Tensor, Tensor | None, Tensor, dict]:
    if not isinstance(task, Task):
        raise InterpError(f"expected an interp Task (clean rows, answers, answer_pos), got {type(task).__name__}")
    if len(task) == 0:
        raise InterpError(f"task {task.name}/{task.split} has no examples")
    top = int(task.clean.max())
    if top >= model.cfg.d_vocab:
        raise InterpError(f"token id {top} is outside the model's vocabulary (d_vocab={model.cfg.d_vocab}); "
                          "was this task made for another model's tokenizer?")
    if int(task.clean.shape[1]) > model.cfg.n_ctx:
        raise InterpError(f"task rows have {task.clean.shape[1]} positions, more than the context n_ctx={model.cfg.n_ctx}")
    info = {"task": task.name, "split": task.split, "n": len(task)}
    dev = model.cfg.device
    return (task.clean.to(dev), task.correct.to(dev), task.incorrect.to(dev) if need_incorrect else None,
            task.answer_pos.to(dev), info)


def _tokens(model, tokens) -> Tensor:
    if isinstance(tokens, str):
        tokens = model.to_tokens(tokens, truncate=False)  # a prompt past the context is refused, not cut
    check_tokens(tokens, model=model)
    if tokens.ndim != 2 or tokens.shape[1] < 2:
        raise InterpError("tokens must be a [batch, pos] tensor with pos >= 2 (or a prompt string)")
    return tokens.to(model.cfg.device)


_DECOMPOSED = {"hook_embed", "hook_pos_embed", "hook_resid_pre", "hook_resid_mid", "hook_resid_post",
               "hook_attn_out", "hook_mlp_out", "hook_z", "hook_scale"}


def _run_cache(model, tokens: Tensor, names: Sequence[str] | None = None):
    """(logits, ActivationCache) of one plain forward, recorded through `interp.run.cache` (the one
    runner); TL's decomposition methods need its ActivationCache, so the recorded dict is wrapped.
    `names=None` records what TL's decompositions read: embeddings, residual states, attention and
    MLP outputs, per-head z and the norms' scales (aliases included, as TL's cache keys them)."""
    from transformer_lens import ActivationCache

    every = list(model.hook_dict)
    if names is None:
        wanted = [n for n in every if n.rsplit(".", 1)[-1] in _DECOMPOSED]
    else:
        wanted = [n for n in every if n in names or n.endswith("hook_scale") or n in ("hook_embed", "hook_pos_embed")]
    logits, acts = run.cache(model, tokens, wanted)
    return logits, ActivationCache(acts, model)


def _resid_names(model) -> list[str]:
    L = model.cfg.n_layers
    return [f"blocks.{l}.hook_{s}" for l in range(L) for s in ("resid_pre", "resid_mid", "resid_post")]


def residual_components(model, tokens: Tensor, answer_pos: Tensor, *, by: Literal["layer", "head"] = "layer",
                        apply_ln: bool = False, cache=None) -> tuple[Tensor, list[str], Tensor]:
    """The residual stream at each row's answer position, split into what wrote it.

    by="layer": `cache.decompose_resid` (embed, pos_embed, L_attn_out, L_mlp_out; attention
    biases sit in attn_out). by="head": `cache.get_full_resid_decomposition` (LxHy per head,
    L_mlp_out, embed, pos_embed, bias = the summed attention output biases). Returns
    (stack [component, batch, d_model], labels, resid_post [batch, d_model]); the components sum
    to the final resid_post. apply_ln divides each component by the cached final-LayerNorm
    scale (centring it first for LayerNorm), as TransformerLens's `apply_ln_to_stack` does.
    """
    if by not in ("layer", "head"):
        raise InterpError(f"by={by!r} must be 'layer' or 'head'")
    tokens = _tokens(model, tokens)
    if answer_pos.shape != (tokens.shape[0],):
        raise InterpError(f"answer_pos {tuple(answer_pos.shape)} must be one per row of tokens {tuple(tokens.shape)}")
    if cache is None:
        _, cache = _run_cache(model, tokens)
    answer_pos = answer_pos.to(tokens.device)
    final = at_positions(cache[f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"], answer_pos)
    stack, labels = None, None
    # one pass per distinct answer position, so only [component, batch, d_model] is ever held
    for p in answer_pos.unique().tolist():
        rows = (answer_pos == p).nonzero()[:, 0]
        if by == "layer":
            part, labels = cache.decompose_resid(layer=None, mode="all", incl_embeds=True, pos_slice=p, return_labels=True)
        else:
            part, labels = cache.get_full_resid_decomposition(layer=None, expand_neurons=False, pos_slice=p, return_labels=True)
        if apply_ln:  # slices the stack's batch axis and the cached scale alike
            part = cache.apply_ln_to_stack(part, layer=None, pos_slice=p, batch_slice=rows.tolist())
        else:
            part = part[:, rows]
        if stack is None:
            stack = part.new_zeros(part.shape[0], tokens.shape[0], part.shape[-1])
        stack[:, rows] = part
    return stack, list(labels), final


# ---------------------------------------------------------------------------------------------
# analyses -> Grid


@records_peak
def logit_lens(model, task: Task, *, metric: str = "logit_diff") -> Grid:
    """Layer-by-layer predictions at the answer position, averaged over the task.

    Each residual state (TL's `accumulated_resid(incl_mid=True)`: 0_pre, 0_mid, 1_pre, ...,
    final_post) is read through the final norm (recomputed statistics) and unembedding
    (`logit_readout`), and scored by `metric`: "logit_diff" (correct - incorrect), "prob" (of the
    correct token) or "rank" (of the correct token over the full vocabulary, 0 = top). The
    final_post entry is the model's own value. Grid [layer, quantity] (value, std over examples),
    drawn as lines; layer labels are TL's.
    """
    from transformer_lens.tools.analysis.logit_lens import logit_readout

    if metric not in LENS_METRICS:
        raise InterpError(f"metric {metric!r} is not one of {LENS_METRICS}")
    tokens, correct, incorrect, pos, info = _task(model, task, metric == "logit_diff")
    _, cache = _run_cache(model, tokens, _resid_names(model))
    acc, labels = cache.accumulated_resid(layer=None, incl_mid=True, apply_ln=False, return_labels=True)
    states = at_positions(acc, pos)  # [layer, batch, d_model]
    kind = "probs" if metric == "prob" else "logits"
    read = logit_readout(model, states, targets=correct, return_type=kind)
    if metric == "rank":
        per = read.target_ranks[..., 0].float()
    else:
        per = read.values[..., 0].float()
        if metric == "logit_diff":
            per = per - logit_readout(model, states, targets=incorrect).values[..., 0].float()
    values = torch.stack([per.mean(1), per.std(1) if per.shape[1] > 1 else torch.zeros(per.shape[0])], 1)
    return Grid(values, ("layer", "quantity"), (tuple(labels), ("value", "std")),
                {"method": "logit_lens", "metric": metric, "chart": "lines", **info})


def lens_top_tokens(model, tokens, *, k: int = 5, pos: int = -1):
    """The top-k tokens the logit lens reads at one position of one prompt, per layer.

    `tokens` is a prompt string or one row [1, pos]. Returns a pandas DataFrame (one row per
    layer and rank: layer, rank, token, token_id, prob, logit) that `interp.plot.render` draws
    as a table.
    """
    import pandas as pd
    from transformer_lens.tools.analysis.logit_lens import logit_readout

    tokens = _tokens(model, tokens)
    if tokens.shape[0] != 1:
        raise InterpError(f"lens_top_tokens reads one prompt; got {tokens.shape[0]} rows")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= model.cfg.d_vocab:
        raise InterpError(f"k={k!r} must be an int in 1..{model.cfg.d_vocab}")
    pos = check_position(pos, tokens.shape[1], "pos")
    _, cache = _run_cache(model, tokens, _resid_names(model))
    acc, labels = cache.accumulated_resid(layer=None, incl_mid=True, apply_ln=False, return_labels=True)
    states = acc[:, 0, pos]  # [layer, d_model]
    logits = logit_readout(model, states, top_k=k)
    probs = logit_readout(model, states, top_k=k, return_type="probs")
    rows = []
    for i, label in enumerate(labels):
        for r in range(k):
            tid = int(logits.top_ids[i, r])
            rows.append((label, r, model.to_string(torch.tensor([tid])), tid, float(probs.values[i, r]),
                         float(logits.values[i, r])))
    return pd.DataFrame(rows, columns=["layer", "rank", "token", "token_id", "prob", "logit"])


@records_peak
def direct_logit_attribution(model, task: Task) -> Grid:
    """Each head's and each MLP's direct contribution to the logit difference, mean over the task.

    The residual stream at the answer position is split per head (hook_result) and per MLP
    (hook_mlp_out), each scaled by the cached final-LayerNorm scale (`apply_ln_to_stack`) and
    projected on W_U[correct] - W_U[incorrect]. Grid [layer, unit], units h0..h{H-1} and "mlp".
    meta holds the rest of the sum: embed, pos_embed (absent on rotary models), bias (attention
    output biases), unembed_bias (b_U[correct] - b_U[incorrect]); with them the components sum to
    meta["logit_diff"], the model's own mean logit difference (exact to float rounding for a model
    with folded LayerNorm, as compatibility-mode bridges are).
    """
    tokens, correct, incorrect, pos, info = _task(model, task, True)
    logits, cache = _run_cache(model, tokens)
    stack, labels, _ = residual_components(model, tokens, pos, by="head", apply_ln=True, cache=cache)
    attrs = project(stack, answer_directions(model, correct, incorrect)).mean(1)  # [component]
    L, H = model.cfg.n_layers, model.cfg.n_heads
    by = dict(zip(labels, attrs.tolist()))
    values = torch.tensor([[by[f"L{l}H{h}"] for h in range(H)] + [by.get(f"{l}_mlp_out", 0.0)] for l in range(L)])
    b_u = getattr(model, "b_U", None)
    unembed_bias = 0.0 if b_u is None else float((b_u[correct] - b_u[incorrect]).detach().mean())
    actual = float(_logit_diff(logits, correct, incorrect, pos).mean())
    rest = {k: by[k] for k in ("embed", "pos_embed", "bias") if k in by}
    return Grid(values, ("layer", "unit"), (tuple(range(L)), tuple(f"h{h}" for h in range(H)) + ("mlp",)),
                {"method": "direct_logit_attribution", "metric": "logit_diff", "chart": "heatmap", **rest,
                 "unembed_bias": unembed_bias, "total": float(values.sum()) + sum(rest.values()) + unembed_bias,
                 "logit_diff": actual, **info})


@records_peak
def residual_decomposition(model, task: Task) -> Grid:
    """The residual stream at the answer position split into embed, pos_embed (absolute
    positions only), each layer's attn_out and mlp_out (TL's `decompose_resid`), mean over the task.

    Grid [unit, metric], drawn as grouped bars. metrics: "projection" (the component . (W_U[correct]
    - W_U[incorrect]), no LayerNorm), "direct_effect" (the same after the cached final-LayerNorm
    scale: its direct logit attribution) and "norm" (the component's L2 norm). The components sum
    to the final resid_post; meta["resid_projection"] is resid_post's own projection, which the
    "projection" column sums to.
    """
    tokens, correct, incorrect, pos, info = _task(model, task, True)
    _, cache = _run_cache(model, tokens)
    raw, labels, final = residual_components(model, tokens, pos, by="layer", cache=cache)
    scaled, _, _ = residual_components(model, tokens, pos, by="layer", apply_ln=True, cache=cache)
    d = answer_directions(model, correct, incorrect)
    values = torch.stack([project(raw, d).mean(1), project(scaled, d).mean(1), raw.norm(dim=-1).mean(1)], 1)
    return Grid(values, ("unit", "metric"), (tuple(labels), ("projection", "direct_effect", "norm")),
                {"method": "residual_decomposition", "metric": "logit_diff direction", "chart": "bars",
                 "resid_projection": float(project(final, d).mean()),
                 "residual_error": float((raw.sum(0) - final).abs().max()), **info})


@records_peak
def head_scores(model, tokens: Tensor | Task | None = None, kind: str = "previous_token", *,
                interventions: Sequence[Intervention] = (), exclude_bos: bool = False,
                exclude_current_token: bool = False, average: Literal["targets", "all"] = "targets",
                n: int = 16, length: int = 20, seed: int = 0) -> Grid:
    """Attention-head detector scores [layer, head]: previous_token, duplicate_token or induction.

    `tokens` is [batch, pos], a Task (its clean rows; padding is left out) or None: `n` rows of
    `repeated_tokens(model, n, length, seed=seed)` (random tokens, then the same again), where
    all three kinds have targets. The score is `pattern_scores` of each head's attention map
    (hook_pattern, recorded by `interp.run.cache` under `interventions`) against
    `detection_target(tokens, kind)`; average="all" with no padding is TransformerLens's
    `detect_head(..., error_measure="mul")`.
    """
    kind = _kind(kind)
    info: dict = {}
    if tokens is None:
        tokens = repeated_tokens(model, n, length, seed=seed)
        info = {"tokens": "repeated_random", "n": n, "length": length, "seed": seed}
    elif isinstance(tokens, Task):
        info = {"task": tokens.name, "split": tokens.split, "n": len(tokens)}
        tokens = tokens.clean
    tokens = _tokens(model, tokens)
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(model.cfg.n_layers)]
    _, acts = run.cache(model, tokens, names, interventions)
    tok = getattr(model, "tokenizer", None)
    pad = pad_id(model)
    valid = None
    if pad is not None and pad != getattr(tok, "bos_token_id", None):
        valid = tokens != pad
        valid[:, 0] = True
    target = detection_target(tokens, kind)
    if valid is not None:
        target = target * (valid.cpu()[:, :, None] & valid.cpu()[:, None, :])
    values = torch.stack([pattern_scores(acts[nm], target, valid=valid, exclude_bos=exclude_bos,
                                         exclude_current_token=exclude_current_token, average=average).cpu()
                          for nm in names])
    return Grid(values, ("layer", "head"),
                meta={"method": "head_scores", "metric": f"{kind} score", "kind": kind, "average": average,
                      "exclude_bos": exclude_bos, "exclude_current_token": exclude_current_token,
                      "chart": "heatmap", **info})
