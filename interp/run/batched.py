"""`evaluate`: the metric of one input under many variants, side by side in batched forwards that
begin where the variants first differ from the base run (see `interp.run`'s docstring), on the engine
the variants and the model qualify for (`engine_of`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp.errors import InterpError
from interp.hooks import hooks
from interp.interventions import Intervention
from interp.metrics import Metric
from interp.model.resuming import cached_keys_values, can_resume, kv_cache_kwargs, new_kv_cache, resume
from interp.run import heads, packed
from interp.run.hf_hooks import forward
from interp.run.planner import forward_cost, plan_forwards, start_of, variants_that_fit
from interp.run.runner import Variant, checked_answer_pos, edited, gather_hook, input_device, measure, split_items, spread
from interp.sites import check_tokens

__all__ = ["ENGINES", "engine_of", "evaluate"]

# the engines `evaluate` chooses among, by the name `engine_of` gives; the first that takes every
# variant runs them (each is checked to compute the bridge's function once per model and dtype)
_FAST = {"native packed": packed, "native": heads}
ENGINES: tuple[str, ...] = (*_FAST, "runner")


def engine_of(model, tokens: Tensor, variants: Sequence[Variant]) -> str:
    """Which engine `evaluate` runs `variants` on `tokens` [batch, pos] with, one of `ENGINES`:
    "native packed" (each variant's interventions all sit at the residual entering one block:
    `interp.run.packed`), "native" (each variant's all sit at one block's head outputs, hook_z:
    `interp.run.heads`), else "runner" (batched forwards on the bridge, resumed where they can be)."""
    for name, engine in _FAST.items():
        if engine.cells(model, tokens, variants) is not None:
            return name
    return "runner"


@dataclass(frozen=True)
class _BaseRun:
    """What every resumed forward shares with the unintervened base run, recorded once."""

    logits: Tensor  # [batch, pos, d_vocab]
    resid: list[Tensor]  # per layer: hook_resid_pre [batch, pos, d_model]
    keys_values: list[tuple[Tensor, Tensor]]  # per layer: [batch, kv_head, pos, d_head]


def _base_run(model, tokens: Tensor) -> _BaseRun:
    names = [f"blocks.{l}.hook_resid_pre" for l in range(model.cfg.n_layers)]
    kv = new_kv_cache(model)
    found: dict[str, Tensor] = {}

    def keep(name: str) -> Callable:
        def hook_fn(act: Tensor, *, hook) -> None:
            found[name] = act.detach().clone()

        return hook_fn

    with torch.no_grad(), hooks(model, [(n, keep(n)) for n in names]):
        out = model(tokens, **kv_cache_kwargs(model, kv))
    return _BaseRun(out, [found[n] for n in names], cached_keys_values(kv))


def _plain_logits(model, tokens: Tensor, answer_pos: Tensor | None) -> Tensor:
    """The model's logits on `tokens` (under the weight edits in place), unembedded only at
    `answer_pos` when given (NaN elsewhere); natively where it can (`hf_hooks.forward`)."""
    if answer_pos is None:
        return forward(model, tokens)
    keep, index = answer_pos.unique(return_inverse=True)  # positions the batch shares
    logits = forward(model, tokens, keep)
    at = logits[torch.arange(tokens.shape[0], device=logits.device), index.to(logits.device)]
    return spread(at, answer_pos, tokens.shape[1])


def _batched_hooks(members: list[list[Intervention]], batch: int, start: int) -> list[tuple[str, Callable]]:
    by_site: dict[str, list[tuple[int, Intervention]]] = {}
    for j, ivs in enumerate(members):
        for iv in ivs:
            for site in iv.sites:
                by_site.setdefault(site, []).append((j, iv))
    n = len(members)

    def at(site: str, touched: list[tuple[int, Intervention]]) -> Callable:
        def hook_fn(act: Tensor, *, hook) -> Tensor:
            view = act.unflatten(0, (n, batch))  # [variant, batch, ...]
            out = view.clone()
            for j, iv in touched:
                out[j] = iv(out[j], site=site, start=start)
            return out.flatten(0, 1)

        return hook_fn

    return [(site, at(site, touched)) for site, touched in by_site.items()]


def _check_sources(members: Sequence[Intervention], batch: int) -> None:
    for iv in members:
        source = getattr(iv, "source", None)
        if isinstance(source, Tensor) and source.shape[0] != batch:
            raise InterpError(f"{type(iv).__name__} at {iv.sites} has a source of {source.shape[0]} rows "
                              f"but the input has {batch}; sources must come from inputs of the same shape")


def _plan_logits(model, tokens: Tensor, base, acts: list, layer0: int, start: int, answer_pos: Tensor | None) -> Tensor:
    """The logits of one planned forward: `len(acts)` copies of the batch side by side, each under its
    interventions, resumed from the base run at (layer0, start) where there is one."""
    n, batch = len(acts), tokens.shape[0]
    fwd = _batched_hooks(acts, batch, start)
    if answer_pos is not None:
        fwd.append(("unembed.hook_in", gather_hook(answer_pos.repeat(n) - start)))
    with hooks(model, fwd):
        if base is None or (layer0 == 0 and start == 0):
            return model(tokens.repeat(n, 1))
        tail = resume(
            model, tokens.repeat(n, 1), layer=layer0, start=start,
            residual=base.resid[layer0][:, start:].repeat(n, 1, 1),
            keys_values=[(k[:, :, :start].repeat(n, 1, 1, 1), v[:, :, :start].repeat(n, 1, 1, 1))
                         for k, v in base.keys_values],
        )
    # positions before `start` are the base run's; the metric sees whole logits
    return tail if answer_pos is not None else torch.cat([base.logits[:, :start].repeat(n, 1, 1), tail], 1)


def evaluate(
    model,
    tokens: Tensor,
    variants: Sequence[Variant],
    metric: Metric,
    *,
    variants_per_forward: int | None = None,
    answer_pos: Tensor | None = None,
    progress: bool = True,
    desc: str = "variants",
) -> Tensor:
    """The metric of `tokens` [batch, pos] run under each variant (a list of interventions).

    Returns [variants] for a metric that returns a scalar tensor, or [variants, m] for one that
    returns a dict of m named scalars ({"logit_diff": ..., "accuracy": ...}, in that order), so
    one pass gives all of them.
    `answer_pos` [batch]: the one position per row the metric reads (a task's answer positions).
    Then the unembedding runs only there, and the metric's logits hold NaN elsewhere; on a large
    vocabulary that is a large part of every forward's work.
    An empty variant is the base run. See the module docstring for how forwards are shared.
    """
    check_tokens(tokens, model=model)
    if tokens.ndim != 2:
        raise InterpError(f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}")
    tokens = tokens.to(input_device(model))
    batch, n_pos = tokens.shape
    answer_pos = checked_answer_pos(tokens, answer_pos)
    split = [split_items(v) for v in variants]
    if variants_per_forward is not None:
        variants_that_fit(model, batch, n_pos, variants_per_forward)  # a bad value fails on every engine
    for engine in _FAST.values():
        todo = engine.cells(model, tokens, variants)
        if todo is not None:
            values = engine.evaluate(model, tokens, todo, metric, answer_pos, cap=variants_per_forward,
                                     progress=progress, desc=desc)
            return _stacked(values)
    return _stacked(_on_the_runner(model, tokens, split, metric, answer_pos, variants_per_forward, progress, desc))


def _stacked(values: list[Tensor]) -> Tensor:
    shapes = {tuple(v.shape) for v in values}
    if len(shapes) > 1:
        raise InterpError(f"the metric returned values of different shapes {sorted(shapes)} for different variants")
    return torch.stack(values) if values else torch.empty(0)  # cpu: an empty result


def _on_the_runner(model, tokens: Tensor, split: list, metric: Metric, answer_pos: Tensor | None,
                   variants_per_forward: int | None, progress: bool, desc: str) -> list[Tensor]:
    """The metric under each variant ((interventions, weight edits) pairs) on the bridge."""
    batch, n_pos = tokens.shape
    found: dict[int, Tensor] = {}
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (_, edits) in enumerate(split):
        groups.setdefault(tuple(id(e) for e in edits), []).append(i)
    size = variants_that_fit(model, batch, n_pos, variants_per_forward)
    resumable = can_resume(model)
    for indices in groups.values():
        edits = split[indices[0]][1]
        acts = [split[i][0] for i in indices]
        for ivs in acts:
            _check_sources(ivs, batch)
        starts = [start_of(model, ivs, n_pos) for ivs in acts]
        with torch.no_grad(), edited(model, edits):
            if all(s[0] >= model.cfg.n_layers for s in starts):  # weight edits only: one forward, nothing to resume
                logits = _plain_logits(model, tokens, answer_pos)
                for i in indices:
                    found[i] = measure(metric, logits, "base")
                continue
            base = _base_run(model, tokens) if resumable else None
            base_logits = base.logits if base is not None else model(tokens)
            plain = [k for k, s in enumerate(starts) if s[0] >= model.cfg.n_layers]
            for k in plain:
                found[indices[k]] = measure(metric, base_logits, "base")
            rest = [k for k in range(len(acts)) if k not in set(plain)]
            plans = plan_forwards([starts[k] for k in rest], batch, n_pos, model.cfg.n_layers, size, resumable,
                                  forward_cost(model))
            for layer0, start, members in tqdm(plans, desc=desc, disable=not progress or len(plans) < 2):
                chosen = [rest[m] for m in members]
                result = _plan_logits(model, tokens, base, [acts[k] for k in chosen], layer0, start, answer_pos)
                for j, k in enumerate(chosen):
                    rows = result[j * batch : (j + 1) * batch]
                    if answer_pos is not None:
                        rows = spread(rows[:, 0], answer_pos, n_pos, start, base_logits)
                    found[indices[k]] = measure(metric, rows, "intervened")
    return [found[i] for i in range(len(split))]
