"""The one runner: a model under interventions -> logits, activations, gradients or a metric.

Every capability runs "the model under interventions" through this module, the only place that
turns interventions (`interp.interventions`) into hooks; the hooks are always removed, even on
error, and a model handed in comes back unchanged.

    intervened(model, interventions, start=0)   context: the body runs under them
    logits(model, tokens, interventions)         one forward
    cache(model, tokens, names, interventions)   one forward, recording activations
    with_grad(model, tokens, names, interventions)  one forward whose recorded activations are
                                                 in the autograd graph (for attribution)
    natively(model, hf, interventions, record=names)  context: the bridge's HF model without the
                                                 bridge (`interp.native`), the same interventions
                                                 at the same hook names as plain PyTorch hooks
    reference(model, names, ablation, tokens)    what zero / mean / resample ablation replaces with
    evaluate(model, tokens, variants, metric)    the metric under each of many variants, side by side

`evaluate` is what makes scans cheap: the base input is repeated once per variant along the batch
axis ([variants * batch, pos]) and one hook per site applies each variant's interventions to its
own slice. On a causal decoder each forward also begins where its variants first differ from
the base run: at the earliest intervened block (the residual entering it comes from one recorded
base run; earlier blocks are not run) and at the earliest intervened position (keys and values of
earlier positions come from the base run's KV cache, and their logits are the base run's).
Variants with weight edits run with those weights, each group of equal edits on its own base run.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence, Union

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp.errors import InterpError
from interp.hooks import hooks
from interp.interventions import ABLATIONS, Intervention, Reference, WeightEdit
from interp.metrics import Metric
from interp.model import cached_keys_values, can_resume, kv_cache_kwargs, new_kv_cache, resume
from interp.sites import check_tokens, layer_of, position_axis

__all__ = [
    "Variant", "cache", "evaluate", "forward_cost", "intervened", "logits", "natively", "natively_possible", "plan_forwards",
    "reference", "scalar", "with_grad",
]

Item = Union[Intervention, WeightEdit]
Variant = Sequence[Item]  # what one side-by-side run applies


def _split(items: Sequence[Item]) -> tuple[list[Intervention], list[WeightEdit]]:
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
def _edited(model, edits: Sequence[WeightEdit]) -> Iterator[None]:
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
def intervened(model, interventions: Variant = (), *, start: int = 0,
               record: Sequence[str] = ()) -> Iterator[dict[str, Tensor]]:
    """Run the body with `interventions` applied (hooks and weight edits), all removed on exit.

    `start` is the absolute position of the first position the body's forwards compute (non-zero
    only for a forward over new tokens on a KV cache, as a generator runs). Yields {name:
    activation} for the `record` names, kept as they arrive, before any intervention there."""
    acts, edits = _split(interventions)
    found: dict[str, Tensor] = {}

    def keep(name: str) -> Callable:
        def hook_fn(act: Tensor, *, hook) -> None:
            found[name] = act.detach()

        return hook_fn

    # the records come first in the list, so each reads its site before any intervention there
    with _edited(model, edits), hooks(model, [(n, keep(n)) for n in record] + _hook_list(acts, start)):
        yield found


def natively_possible(model, names: Sequence[str]) -> bool:
    """Whether `natively` can run `names` on this model: a causal decoder on one device, every name
    with an exact place in the HF module tree, and no hook of the caller's on the bridge (the
    native run would not fire it)."""
    from interp.native import native_site

    if not can_resume(model) or getattr(model.original_model, "hf_device_map", None):
        return False
    if not all(native_site(n) for n in names):
        return False
    return not any(hp.has_hooks() for hp in model.hook_dict.values())


@contextmanager
def natively(model, hf: torch.nn.Module, interventions: Sequence[Intervention] = (), *, start: int = 0,
             record: Sequence[str] = ()) -> Iterator[dict[str, Tensor]]:
    """The body runs `hf` (`interp.native.unwrapped(model)`) with `interventions` applied as plain
    PyTorch hooks at their sites, each a bridge hook name with a native place (`natively_possible`).
    Yields {name: activation} for the `record` names, kept as they arrive, before any intervention
    there. Hooks are removed on exit, even on error. `start` as in `intervened`."""
    from interp.native import block_list, native_site

    acts, edits = _split(interventions)
    if edits:
        raise InterpError("weight edits do not run natively; use interp.run.intervened")
    blocks = block_list(hf, model.cfg.n_layers)
    by_site: dict[str, list[Intervention]] = {}
    for iv in acts:
        for site in iv.sites:
            by_site.setdefault(site, []).append(iv)
    names = list(dict.fromkeys([*record, *by_site]))
    bad = [n for n in names if native_site(n) is None]
    if bad or blocks is None:
        raise InterpError(f"{bad or names} have no native place; use interp.run.intervened")
    found: dict[str, Tensor] = {}

    def apply(name: str, act: Tensor) -> Tensor:
        if name in record:
            found[name] = act.detach()
        for iv in by_site.get(name, ()):
            act = iv(act, site=name, start=start)
        return act

    def pre(name: str) -> Callable:
        def hook_fn(module, args, kwargs):
            if args:
                return (apply(name, args[0]), *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": apply(name, kwargs["hidden_states"])}

        return hook_fn

    def post(name: str) -> Callable:
        def hook_fn(module, args, out):
            if isinstance(out, Tensor):
                return apply(name, out)
            return (apply(name, out[0]), *out[1:])

        return hook_fn

    handles = []
    try:
        for name in names:
            layer, where = native_site(name)
            block = blocks[layer]
            handles.append(block.register_forward_pre_hook(pre(name), with_kwargs=True) if where == "input"
                           else block.register_forward_hook(post(name)))
        yield found
    finally:
        for handle in handles:
            handle.remove()


def logits(model, tokens: Tensor, interventions: Variant = ()) -> Tensor:
    """Logits [batch, pos, d_vocab] of one forward on `tokens` under `interventions` (no grad)."""
    check_tokens(tokens)
    with torch.no_grad(), intervened(model, interventions):
        return model(tokens)


def _checked_answer_pos(tokens: Tensor, answer_pos: Tensor | None) -> Tensor | None:
    check_tokens(tokens)  # every entry point passes here: float ids fail now, not in the embedding
    if answer_pos is None:
        return None
    batch, n_pos = tokens.shape
    answer_pos = torch.as_tensor(answer_pos).to(tokens.device)
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

    answer_pos = _checked_answer_pos(tokens, answer_pos)
    fwd = [(n, keep(n)) for n in names]
    if answer_pos is not None:
        fwd.append(("unembed.hook_in", _gather_hook(answer_pos)))
    with torch.no_grad(), intervened(model, interventions), hooks(model, fwd):
        out = model(tokens)
    return (out if answer_pos is None else _spread(out[:, 0], answer_pos, tokens.shape[1])), found


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

    answer_pos = _checked_answer_pos(tokens, answer_pos)
    fwd = [(n, keep(n)) for n in names]
    if not any(p.requires_grad for p in model.parameters()):
        fwd.insert(0, ("hook_embed", lambda act, *, hook: act.detach().requires_grad_(True)))
    if answer_pos is not None:
        fwd.append(("unembed.hook_in", _gather_hook(answer_pos)))
    with torch.enable_grad(), intervened(model, interventions), hooks(model, fwd):
        out = model(tokens)
        if answer_pos is not None:
            out = _spread(out[:, 0], answer_pos, tokens.shape[1])
    missing = [n for n in names if n not in found]
    if missing:
        raise InterpError(f"{missing} did not run in this forward")
    return out, found


def _pad_id(model) -> int | None:
    tok = getattr(model, "tokenizer", None)
    return getattr(tok, "pad_token_id", None) if tok is not None else None


def reference(model, names: Sequence[str], ablation: str, tokens: Tensor | None = None, *, chunk: int = 256) -> dict[str, Reference]:
    """One `Reference` per hook name: zero (no tokens), mean over `tokens` rows (per position,
    padding excluded, pooled over positions past their width), or resample (the activations of
    `tokens`, which must have the shape of the input the interventions will see)."""
    if ablation not in ABLATIONS:
        raise InterpError(f"ablation {ablation!r} is not one of {ABLATIONS}")
    if ablation == "zero":
        if tokens is not None:
            raise InterpError("zero ablation takes no reference tokens")
        return {n: Reference("zero", torch.zeros(())) for n in names}
    if tokens is None:
        raise InterpError(f"{ablation} ablation needs reference token rows [batch, pos] (e.g. task.clean)")
    if tokens.ndim != 2:
        raise InterpError(f"reference tokens must be [batch, pos], got shape {tuple(tokens.shape)}")
    parts: dict[str, list[Tensor]] = {n: [] for n in names}
    for i in range(0, tokens.shape[0], chunk):
        _, acts = cache(model, tokens[i : i + chunk].to(model.cfg.device), names)
        for n in names:
            parts[n].append(acts[n])
    pad = _pad_id(model)
    valid = torch.ones(tokens.shape, dtype=torch.bool) if pad is None else (tokens != pad).cpu()
    valid[:, 0] = True  # a row is never all padding
    out = {}
    for n in names:
        a = torch.cat(parts[n], 0)  # [batch, pos, ...]
        if ablation == "resample":
            out[n] = Reference("resample", a)
            continue
        ax = position_axis(n)  # 2 (dest) for attention maps
        shape = [1] * a.ndim
        shape[0], shape[ax] = valid.shape
        w = valid.to(a).view(shape)  # [batch, 1.., pos, 1...]
        pooled = (a * w).sum((0, ax)) / w.sum((0, ax))
        count = w.sum(0)  # [1.., pos, 1...]
        per_pos = torch.where(count > 0, (a * w).sum(0) / count.clamp_min(1), pooled.unsqueeze(ax - 1))
        out[n] = Reference("mean", per_pos, pooled)
    return out


# ---------------------------------------------------------------------------------------------
# many variants side by side


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


def _measure(metric: Callable, logits: Tensor, what: str) -> Tensor:
    """`metric(logits)` as a 0-d tensor, or a [m] tensor when it returns m named scalars (a dict)."""
    value = metric(logits)
    if isinstance(value, dict):
        return torch.tensor([scalar(lambda _: v, logits, f"{what} ({name})") for name, v in value.items()])
    return torch.tensor(scalar(lambda _: value, logits, what))


def _variants_per_forward(model, batch: int, pos: int, requested: int | None) -> int:
    """Variants per forward: a user value, else what fits comfortably in memory (at most 64)."""
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise InterpError(f"variants_per_forward={requested!r} must be an int >= 1")
        return requested
    cfg = model.cfg
    # floats kept per row: residual-sized activations (~16 per layer) and attention maps (~4 per head)
    per_row = 4 * pos * cfg.n_layers * (16 * cfg.d_model + 4 * cfg.n_heads * pos) + 4 * pos * cfg.d_vocab
    if str(cfg.device).startswith("cuda"):
        free = torch.cuda.mem_get_info()[0] * 0.5
    else:
        import psutil  # portable: os.sysconf's page counts exist on Linux only

        free = psutil.virtual_memory().available * 0.25
    return int(max(1, min(64, free // max(1, per_row * batch))))


# A forward's fixed cost, in row-positions through every block: what one forward of a 4-layer,
# d_model-128 model costs beyond its arithmetic on this project's CPU (benchmarks/RESULTS.md).
FORWARD_COST = 128
# That model's weights per block as forward_cost counts them (the bridge's 2-D parameters: GPT-2's
# fused and split attention 7 d^2, MLP 2 d * 4d, d = 128). The fixed cost
# grows with the number of modules run (per block) and the arithmetic with the weights per block,
# so a model with b weights per block has a fixed cost of FORWARD_COST * _REF_BLOCK / b
# row-positions: about 9 on SmolLM2-135M, where a forward's fixed cost is a small part.
_REF_BLOCK = 245_760


def forward_cost(model) -> float:
    """The fixed cost of one forward of `model` in row-positions through every block (see above)."""
    per_block = sum(p.numel() for p in model.blocks[0].parameters() if p.ndim == 2)
    return FORWARD_COST * _REF_BLOCK / max(per_block, 1)


def plan_forwards(starts: Sequence[tuple[int, int]], batch: int, n_pos: int, n_layers: int, size: int,
                  resumable: bool, cost: float | None = None) -> list[tuple[int, int, list[int]]]:
    """Group variants into forwards of at most `size`: [(first block, first position, variant indices)].

    `starts[i]` is variant i's (first intervened block, first intervened position). It leaves every
    block before it, and (causal attention) every position before it, as in the base run, so its
    forward may begin there; variants sharing a forward begin at the earliest among them. With
    variants in (block, position) order, the split minimises the total work, counting each
    forward's fixed cost as `cost` row-positions (default `FORWARD_COST`; `forward_cost(model)` for
    a model) by dynamic programming over split points.
    """
    cost = FORWARD_COST if cost is None else cost
    if not resumable:
        return [(0, 0, list(range(i, min(i + size, len(starts))))) for i in range(0, len(starts), size)]
    order = sorted(range(len(starts)), key=lambda i: starts[i])
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: least cost of the first j variants in order
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        layer, start = n_layers, n_pos
        for i in range(j - 1, max(-1, j - 1 - size), -1):  # the last forward holds order[i:j]
            layer, start = min(layer, starts[order[i]][0]), min(start, starts[order[i]][1])
            total = best[i] + cost + (j - i) * batch * (n_pos - start) * (n_layers - layer) / n_layers
            if total < best[j]:
                best[j], cut[j] = total, i
    plans, j = [], n
    while j:
        members = order[cut[j]:j]
        plans.append((min(starts[m][0] for m in members), min(starts[m][1] for m in members), members))
        j = cut[j]
    return plans[::-1]


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


def _start_of(model, interventions: Sequence[Intervention], n_pos: int) -> tuple[int, int]:
    """(first block, first position) that the interventions can change; (n_layers, 0), the base
    run, when they change nothing. A negative first_pos counts from the end (Patch(pos=-1)), so
    it is taken as 0; one at or past `n_pos` changes nothing in this input."""
    layers = [layer_of(site) or 0 for iv in interventions for site in iv.sites]
    first = min((iv.first_pos for iv in interventions if iv.sites), default=n_pos)
    if not layers or first >= n_pos:
        return model.cfg.n_layers, 0
    return min(layers), max(0, first)


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


def _gather_hook(index: Tensor) -> Callable:
    """unembed.hook_in: keep one position per row (`index` into the computed positions, clamped:
    rows whose position lies before the forward's start take the base run's logits instead)."""

    def hook_fn(act: Tensor, *, hook) -> Tensor:
        rows = torch.arange(act.shape[0], device=act.device)
        return act[rows, index.clamp(min=0)][:, None]

    return hook_fn


def _spread(at: Tensor, answer_pos: Tensor, n_pos: int, start: int = 0, base_logits: Tensor | None = None) -> Tensor:
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


def _check_sources(members: Sequence[Intervention], batch: int) -> None:
    for iv in members:
        source = getattr(iv, "source", None)
        if isinstance(source, Tensor) and source.shape[0] != batch:
            raise InterpError(f"{type(iv).__name__} at {iv.sites} has a source of {source.shape[0]} rows "
                              f"but the input has {batch}; sources must come from inputs of the same shape")


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
    if tokens.ndim != 2:
        raise InterpError(f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}")
    tokens = tokens.to(model.cfg.device)
    batch, n_pos = tokens.shape
    answer_pos = _checked_answer_pos(tokens, answer_pos)
    split = [_split(v) for v in variants]
    found: dict[int, Tensor] = {}
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (_, edits) in enumerate(split):
        groups.setdefault(tuple(id(e) for e in edits), []).append(i)
    size = _variants_per_forward(model, batch, n_pos, variants_per_forward)
    resumable = can_resume(model)
    for indices in groups.values():
        edits = split[indices[0]][1]
        acts = [split[i][0] for i in indices]
        for ivs in acts:
            _check_sources(ivs, batch)
        starts = [_start_of(model, ivs, n_pos) for ivs in acts]
        with torch.no_grad(), _edited(model, edits):
            base = _base_run(model, tokens) if resumable else None
            base_logits = base.logits if base is not None else model(tokens)
            plain = [k for k, s in enumerate(starts) if s[0] >= model.cfg.n_layers]
            for k in plain:
                found[indices[k]] = _measure(metric, base_logits, "base")
            rest = [k for k in range(len(acts)) if k not in set(plain)]
            plans = plan_forwards([starts[k] for k in rest], batch, n_pos, model.cfg.n_layers, size, resumable,
                                  forward_cost(model))
            for layer0, start, members in tqdm(plans, desc=desc, disable=not progress or len(plans) < 2):
                chosen = [rest[m] for m in members]
                n = len(chosen)
                fwd = _batched_hooks([acts[k] for k in chosen], batch, start)
                if answer_pos is not None:
                    fwd.append(("unembed.hook_in", _gather_hook(answer_pos.repeat(n) - start)))
                with hooks(model, fwd):
                    if base is None or (layer0 == 0 and start == 0):
                        result = model(tokens.repeat(n, 1))
                    else:
                        tail = resume(
                            model, tokens.repeat(n, 1), layer=layer0, start=start,
                            residual=base.resid[layer0][:, start:].repeat(n, 1, 1),
                            keys_values=[(k[:, :, :start].repeat(n, 1, 1, 1), v[:, :, :start].repeat(n, 1, 1, 1))
                                         for k, v in base.keys_values],
                        )
                        # positions before `start` are the base run's; the metric sees whole logits
                        result = tail if answer_pos is not None else torch.cat([base.logits[:, :start].repeat(n, 1, 1), tail], 1)
                for j, k in enumerate(chosen):
                    rows = result[j * batch : (j + 1) * batch]
                    if answer_pos is not None:
                        rows = _spread(rows[:, 0], answer_pos, n_pos, start, base_logits)
                    found[indices[k]] = _measure(metric, rows, "intervened")
    shapes = {tuple(v.shape) for v in found.values()}
    if len(shapes) > 1:
        raise InterpError(f"the metric returned values of different shapes {sorted(shapes)} for different variants")
    return torch.stack([found[i] for i in range(len(variants))]) if variants else torch.empty(0)
