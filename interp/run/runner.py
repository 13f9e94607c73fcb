"""The runner's one-forward entry points: a model under interventions -> logits, activations or
gradients, and the references ablations replace activations with (see `interp.run`).

Words: an *intervention* transforms activations at its sites (`interp.interventions`); a
*weight edit* replaces parameters for one forward; a *variant* is a list of both, what one
side-by-side run of `interp.run.evaluate` applies.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence, Union

import torch
from torch import Tensor

from interp.errors import InterpError
from interp.hooks import hooks
from interp.interventions import AblationStyle, Intervention, Reference, WeightEdit
from interp.metrics import Metric
from interp.model import input_device
from interp.sites import check_tokens, position_axis
from interp.tasks.base import pad_id

__all__ = ["Item", "Variant", "applied", "at_one_site", "cache", "checked_answer_pos", "edited", "gather_hook", "intervened", "logits",
           "measure", "observe", "reference", "scalar", "split_items", "spread", "with_grad"]

Item = Union[Intervention, WeightEdit]
Variant = Sequence[Item]  # what one side-by-side run applies


def split_items(items: Sequence[Item]) -> tuple[list[Intervention], list[WeightEdit]]:
    acts, edits = [], []
    for item in items:
        if isinstance(item, Intervention):
            acts.append(item)
        elif isinstance(item, WeightEdit):
            edits.append(item)
        else:
            raise InterpError(f"{type(item).__name__} is not an intervention: it needs sites, first_pos and "
                              "__call__(act, *, site, start), or params and weight(name, value)")
    return acts, edits


def at_one_site(variants: Sequence[Variant], site: re.Pattern) -> list[tuple[int, list[Intervention]]] | None:
    """(block, interventions) of each variant when every one holds only interventions (no weight
    edit), at least one, all at one site that `site` matches (its group 1: the block); None when
    any does not, or there are none."""
    out = []
    for variant in variants:
        acts, edits = split_items(variant)
        sites = {s for iv in acts for s in iv.sites}
        found = site.match(next(iter(sites))) if len(sites) == 1 and not edits else None
        if found is None:
            return None
        out.append((int(found.group(1)), acts))
    return out or None


def applied(interventions: Sequence[Intervention], act: Tensor, site: str) -> Tensor:
    """`act` (the whole activation at `site`, every position) under `interventions`, in order, as
    the runner's hook there applies them."""
    for iv in interventions:
        act = iv(act, site=site, start=0)
    return act


def _hook_list(interventions: Sequence[Intervention], start: int) -> list[tuple[str, Callable]]:
    by_site: dict[str, list[Intervention]] = {}
    for iv in interventions:
        for site in iv.sites:
            by_site.setdefault(site, []).append(iv)

    def at(site: str, ivs: list[Intervention]) -> Callable:
        def hook_fn(act: Tensor, *, hook) -> Tensor:
            for iv in ivs:
                act = iv(act, site=site, start=start)
            return act

        return hook_fn

    return [(site, at(site, ivs)) for site, ivs in by_site.items()]


def _param_aliases(model) -> dict[str, list[str]]:
    """Every name of each parameter, by its first name (tied embeddings share one tensor)."""
    first: dict[int, str] = {}
    aliases: dict[str, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        key = first.setdefault(id(p), name)
        aliases.setdefault(key, []).append(name)
    return {alias: names for names in aliases.values() for alias in names}


@contextmanager
def edited(model, edits: Sequence[WeightEdit]) -> Iterator[None]:
    """Parameters replaced by their edited values for the body; the model's own tensors are never
    written, and the originals are back on exit, even on error."""
    if not edits:
        yield
        return
    aliases = _param_aliases(model)
    new: dict[str, Tensor] = {}
    for edit in edits:
        for name in edit.params:
            if name not in aliases:
                import difflib

                near = difflib.get_close_matches(name, list(aliases), n=5, cutoff=0.5)
                raise InterpError(f"unknown parameter {name!r}; nearest: {near or 'none'} (see model.named_parameters())")
            current = new.get(name, model.get_parameter(name))
            new[name] = edit.weight(name, current)
    # one swap per (module, attribute) that holds the parameter: a module can be reached by
    # several paths, and a tied parameter sits in several modules
    swaps: dict[tuple[int, str], tuple[torch.nn.Module, str, Tensor]] = {}
    for name, value in new.items():
        for alias in aliases[name]:
            path, _, attr = alias.rpartition(".")
            module = model.get_submodule(path)
            swaps[(id(module), attr)] = (module, attr, value)
    done: list[tuple[torch.nn.Module, str, torch.nn.Parameter]] = []
    # each module's parameter order, restored on exit (named_parameters / state_dict order)
    order = {id(module): (module, list(module._parameters)) for module, _, _ in swaps.values()}
    try:
        for module, attr, value in swaps.values():
            done.append((module, attr, module._parameters.pop(attr)))
            setattr(module, attr, value)
        yield
    finally:
        for module, attr, original in reversed(done):
            if attr in module.__dict__:
                del module.__dict__[attr]
            module._parameters[attr] = original
        for module, names in order.values():
            items = [(k, module._parameters[k]) for k in names if k in module._parameters]
            module._parameters.clear()
            module._parameters.update(items)


@contextmanager
def intervened(model, interventions: Variant = (), *, start: int = 0, record: Sequence[str] = (),
               logits_at: int | Tensor | None = None) -> Iterator[dict[str, Tensor]]:
    """Run the body with `interventions` applied (hooks and weight edits), all removed on exit.

    `start` is the absolute position of the first position the body's forwards compute (non-zero
    only for a forward over new tokens on a KV cache, as a generator runs). Yields {name:
    activation} for the `record` names, kept as they arrive, before any intervention there.
    `logits_at`: unembed only one position per row (the logits are [batch, 1, d_vocab]): an int for
    every row, or [batch] positions (a loss that reads only the answer position)."""
    acts, edits = split_items(interventions)
    found: dict[str, Tensor] = {}

    def keep(name: str) -> Callable:
        def hook_fn(act: Tensor, *, hook) -> None:
            found[name] = act.detach()

        return hook_fn

    # the records come first in the list, so each reads its site before any intervention there
    with edited(model, edits), hooks(model, [(n, keep(n)) for n in record] + _hook_list(acts, start)
                                     + _unembed_at(logits_at)):
        yield found


def _unembed_at(logits_at: int | Tensor | None) -> list[tuple[str, Callable]]:
    """The unembed.hook_in hook that keeps one position per row (none for None)."""
    if logits_at is None:
        return []
    if isinstance(logits_at, int):
        return [("unembed.hook_in", lambda act, *, hook: act[:, logits_at : logits_at + 1])]
    return [("unembed.hook_in", gather_hook(logits_at))]


@contextmanager
def observe(model, names: Sequence[str], see: Callable[[str, Tensor], None], *, logits_at: int | None = None) -> Iterator[None]:
    """The body's forwards hand every activation at `names` to `see(name, activation)` as it
    arrives (detached), so a caller can reduce activations as they stream past (sums, norms)
    instead of keeping them; all hooks are removed on exit, even on error.

    `logits_at`: unembed only that position of each row (the logits are [batch, 1, d_vocab]), for
    a pass that reads no logits: on a large vocabulary the unembedding costs as much as the blocks."""

    def watch(name: str) -> Callable:
        def hook_fn(act: Tensor, *, hook) -> None:
            see(name, act.detach())

        return hook_fn

    with hooks(model, [(n, watch(n)) for n in names] + _unembed_at(logits_at)):
        yield


def logits(model, tokens: Tensor, interventions: Variant = ()) -> Tensor:
    """Logits [batch, pos, d_vocab] of one forward on `tokens` under `interventions` (no grad)."""
    check_tokens(tokens, model=model)
    with torch.no_grad(), intervened(model, interventions):
        return model(tokens.to(input_device(model)))


def checked_answer_pos(tokens: Tensor, answer_pos: Tensor | None) -> Tensor | None:
    check_tokens(tokens)  # every entry point passes here: float ids fail now, not in the embedding
    if answer_pos is None:
        return None
    batch, n_pos = tokens.shape
    answer_pos = torch.as_tensor(answer_pos).to(tokens.device)  # cpu: moved on the same line
    if answer_pos.dtype.is_floating_point or answer_pos.dtype.is_complex or answer_pos.dtype == torch.bool:
        raise InterpError(f"answer_pos must hold integer positions, got dtype {answer_pos.dtype}")
    if answer_pos.shape != (batch,) or answer_pos.min() < 0 or answer_pos.max() >= n_pos:
        raise InterpError(f"answer_pos must be one index in [0, {n_pos}) per row ({batch} rows), got "
                          f"{tuple(answer_pos.shape)} {answer_pos.tolist()[:8]}")
    return answer_pos


def cache(model, tokens: Tensor, names: Sequence[str], interventions: Variant = (), *,
          answer_pos: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """(logits, {name: activation}) of one forward; activations are recorded after interventions.

    `answer_pos` [batch]: compute logits only at one position per row (NaN elsewhere), as
    `evaluate` does; the activations are the same."""
    found: dict[str, Tensor] = {}

    def keep(name: str) -> Callable:
        def hook_fn(act: Tensor, *, hook) -> None:
            found[name] = act.detach()

        return hook_fn

    check_tokens(tokens, model=model)
    tokens = tokens.to(input_device(model))
    answer_pos = checked_answer_pos(tokens, answer_pos)
    fwd = [(n, keep(n)) for n in names]
    if answer_pos is not None:
        fwd.append(("unembed.hook_in", gather_hook(answer_pos)))
    with torch.no_grad(), intervened(model, interventions), hooks(model, fwd):
        out = model(tokens)
    return (out if answer_pos is None else spread(out[:, 0], answer_pos, tokens.shape[1])), found


def with_grad(model, tokens: Tensor, names: Sequence[str], interventions: Variant = (), *,
              answer_pos: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """(logits, {name: activation}) of one forward with autograd on: each activation is in the
    graph, so `torch.autograd.grad(f(logits), acts)` gives d f / d activation at every name at once.
    With frozen weights the graph starts at the embeddings. `answer_pos` as in `cache`."""
    found: dict[str, Tensor] = {}

    def keep(name: str) -> Callable:
        def hook_fn(act: Tensor, *, hook) -> Tensor:
            found[name] = act.view_as(act)  # a fresh view that the forward continues from
            return found[name]

        return hook_fn

    check_tokens(tokens, model=model)
    tokens = tokens.to(input_device(model))
    answer_pos = checked_answer_pos(tokens, answer_pos)
    fwd = [(n, keep(n)) for n in names]
    if not any(p.requires_grad for p in model.parameters()):
        fwd.insert(0, ("hook_embed", lambda act, *, hook: act.detach().requires_grad_(True)))
    if answer_pos is not None:
        fwd.append(("unembed.hook_in", gather_hook(answer_pos)))
    with torch.enable_grad(), intervened(model, interventions), hooks(model, fwd):
        out = model(tokens)
        if answer_pos is not None:
            out = spread(out[:, 0], answer_pos, tokens.shape[1])
    missing = [n for n in names if n not in found]
    if missing:
        raise InterpError(f"{missing} did not run in this forward")
    return out, found


def reference(model, names: Sequence[str], ablation: str, tokens: Tensor | None = None, *, chunk: int = 256) -> dict[str, Reference]:
    """One `Reference` per hook name, built by the registered ablation style `ablation`
    (`interp.interventions.AblationStyle`) from the activations of `tokens` rows: zero (no tokens),
    mean over `tokens` rows (per position, padding excluded, pooled over positions past their width),
    or resample (the activations of `tokens`, which must have the shape of the input the interventions
    will see)."""
    style = AblationStyle.of(ablation)
    if style.reads is None:
        if tokens is not None:
            raise InterpError(f"{ablation} ablation takes no reference tokens")
        return {n: style.build(None, None, position_axis(n)) for n in names}
    if tokens is None:
        raise InterpError(f"{ablation} ablation needs reference token rows [batch, pos] (e.g. task.clean)")
    check_tokens(tokens, "reference tokens", model=model)
    if tokens.ndim != 2:
        raise InterpError(f"reference tokens must be [batch, pos], got shape {tuple(tokens.shape)}")
    parts: dict[str, list[Tensor]] = {n: [] for n in names}
    for i in range(0, tokens.shape[0], chunk):
        _, acts = cache(model, tokens[i : i + chunk], names)
        for n in names:
            parts[n].append(acts[n])
    pad = pad_id(model)
    valid = torch.ones(tokens.shape, dtype=torch.bool) if pad is None else (tokens != pad).cpu()  # cpu: the style moves it beside the activations
    valid[:, 0] = True  # a row is never all padding
    return {n: style.build(torch.cat(parts[n], 0), valid, position_axis(n)) for n in names}  # [batch, pos, ...] each


def gather_hook(index: Tensor) -> Callable:
    """unembed.hook_in: keep one position per row (`index` into the computed positions, clamped:
    rows whose position lies before the forward's start take the base run's logits instead)."""

    def hook_fn(act: Tensor, *, hook) -> Tensor:
        rows = torch.arange(act.shape[0], device=act.device)
        return act[rows, index.to(act.device).clamp(min=0)][:, None]

    return hook_fn


def spread(at: Tensor, answer_pos: Tensor, n_pos: int, start: int = 0, base_logits: Tensor | None = None) -> Tensor:
    """Logits [batch, pos, d_vocab] holding `at` [batch, d_vocab] at each row's position (the base
    run's where that position lies before `start`) and NaN everywhere else, so a metric that reads
    another position fails loudly instead of reading a number that was never computed."""
    rows = torch.arange(at.shape[0], device=at.device)
    out = torch.full((at.shape[0], n_pos, at.shape[-1]), float("nan"), dtype=at.dtype, device=at.device)
    if start:
        early = answer_pos < start
        at = torch.where(early[:, None], base_logits[rows, answer_pos].to(at.dtype), at)
    out[rows, answer_pos] = at
    return out


def scalar(metric: Metric, logits: Tensor, what: str) -> float:
    """`metric(logits)` as a float; InterpError if it is not a scalar or is NaN."""
    value = metric(logits)
    if not isinstance(value, Tensor) or value.numel() != 1:
        shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise InterpError(f"the metric must return a scalar tensor, got {shape} on the {what} run; reduce with .mean()")
    value = float(value)
    if value != value:
        raise InterpError(f"the metric returned NaN on the {what} run (with `answer_pos`, logits exist only "
                          "at those positions: does the metric read another one?)")
    return value


def measure(metric: Callable, logits: Tensor, what: str) -> Tensor:
    """`metric(logits)` as a 0-d tensor, or a [m] tensor when it returns m named scalars (a dict)."""
    value = metric(logits)
    if isinstance(value, dict):
        return torch.tensor([scalar(lambda _: v, logits, f"{what} ({name})") for name, v in value.items()])  # cpu: host floats
    return torch.tensor(scalar(lambda _: value, logits, what))  # cpu: a host float
