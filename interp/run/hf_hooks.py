"""The runner's native path: the same interventions at the same hook names, as plain PyTorch hooks
on the bridge's Hugging Face model (`interp.native.unwrapped(model)`), with no bridge in the
forward. Generation uses it where it can (`natively_possible`).
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import torch
from torch import Tensor

from interp.errors import InterpError
from interp.interventions import Intervention
from interp.model.resuming import can_resume
from interp.run.runner import input_device, split_items

__all__ = ["forward", "natively", "natively_possible"]


def natively_possible(model, names: Sequence[str]) -> bool:
    """Whether `natively` can run `names` on this model: a causal decoder on one device, every name
    with an exact place in the HF module tree, and no hook of the caller's on the bridge (the
    native run would not fire it)."""
    from interp.native import native_site

    if not can_resume(model) or getattr(model.original_model, "hf_device_map", None):
        return False
    if not all(native_site(n) for n in names):
        return False
    return not any(hp.has_hooks() for hp in model.hook_dict.values()) and native_agrees(model)


_AGREES: "weakref.WeakKeyDictionary[torch.nn.Module, dict[torch.dtype, bool]]" = weakref.WeakKeyDictionary()


def native_agrees(model) -> bool:
    """Whether the bridge's HF modules, run on their own, compute the bridge's function; checked
    once per model and dtype on a short sequence. Not always so: TL 4.3 folds GPT-2's layer norms
    into weights its own attention reads, so GPT-2's HF blocks alone are a different model.

    In float32 the two logits must agree to 1e-3 of the largest. In a coarser dtype rounding grows
    with depth and the two paths round differently (HF's norms upcast to float32, the bridge's do
    not: SmolLM2-135M's logits in bf16 differ by 14 % / 60 % from its float32 logits on the native /
    bridge path), so no end-to-end tolerance separates noise from another function. There each
    stage is compared on its own, fed the bridge's input: every native block against the bridge's
    block, and the final norm and unembedding against the bridge's logits, to
    `interp.tensors.tolerance(dtype)` of the output's norm (GPT-2's folded blocks differ by 9 %)."""
    p = next(model.parameters(), None)  # none while a weight edit has swapped them out
    dtype = p.dtype if p is not None else model.cfg.dtype
    seen = _AGREES.setdefault(model, {})
    if dtype not in seen:
        tokens = torch.arange(1, 9, device=input_device(model)).remainder(model.cfg.d_vocab_out)[None]
        with torch.no_grad():
            seen[dtype] = _logits_agree(model, tokens, dtype) if dtype in (torch.float32, torch.float64) \
                else _stages_agree(model, tokens, dtype)
    return seen[dtype]


def _logits_agree(model, tokens: Tensor, dtype: torch.dtype) -> bool:
    from interp.native import unwrapped
    from interp.tensors import tolerance

    ours = model(tokens).float()
    theirs = unwrapped(model)(tokens).logits.float().to(ours.device)
    ours, theirs = ours - ours.mean(-1, keepdim=True), theirs - theirs.mean(-1, keepdim=True)
    return bool(((ours - theirs).abs().max() <= tolerance(dtype, 1e-3) * (1 + ours.abs().max())).item())


def _stages_agree(model, tokens: Tensor, dtype: torch.dtype) -> bool:
    from dataclasses import replace

    from interp.native import packed_mask, run_blocks, stack_of, unembed, unwrapped
    from interp.run.runner import cache
    from interp.tensors import tolerance

    def close(a: Tensor, b: Tensor) -> bool:  # relative to the norm: a systematic difference, not one rounding
        a, b = a.float(), b.float().to(a.device)
        return bool((a - b).norm() <= tolerance(dtype, 1e-3) * b.norm())

    L, n_pos = model.cfg.n_layers, tokens.shape[1]
    names = [f"blocks.{l}.hook_resid_pre" for l in range(L)] + [f"blocks.{L - 1}.hook_resid_post"]
    logits, acts = cache(model, tokens, names)
    hf = unwrapped(model)
    stack = stack_of(hf, L)
    if stack is None:  # no stack to feed block by block (GPT-2): the first block, from the embedding on
        with natively(model, hf, record=["blocks.0.hook_resid_post"]) as found:
            hf(tokens)
        return close(found["blocks.0.hook_resid_post"], acts[names[1] if L > 1 else names[-1]])
    device = acts[names[0]].device
    positions = torch.arange(n_pos, device=device)
    for l in range(L):
        kind = stack.layer_types[l]
        mask = {kind: packed_mask([0], 0, n_pos, stack.window if kind == "sliding_attention" else None, dtype, device)[0]}
        one = replace(stack, blocks=stack.blocks[l : l + 1], layer_types=(kind,))
        out, _, _ = run_blocks(one, 0, acts[names[l]], positions, mask)
        if not close(out, acts[names[l + 1]]):
            return False
    return close(unembed(stack, acts[names[-1]]), logits)


@contextmanager
def natively(model, hf: torch.nn.Module, interventions: Sequence[Intervention] = (), *, start: int = 0,
             record: Sequence[str] = ()) -> Iterator[dict[str, Tensor]]:
    """The body runs `hf` (`interp.native.unwrapped(model)`) with `interventions` applied as plain
    PyTorch hooks at their sites, each a bridge hook name with a native place (`natively_possible`).
    Yields {name: activation} for the `record` names, kept as they arrive, before any intervention
    there. Hooks are removed on exit, even on error. `start` as in `intervened`."""
    from interp.native import block_list, native_site

    acts, edits = split_items(interventions)
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


def forward(model, tokens: Tensor, keep: Tensor | None = None) -> Tensor:
    """The model's logits [batch, pos, vocab] on `tokens` under whatever weights are swapped in now
    (`run.intervened` / the runner's weight edits), with no activation intervention: the HF model
    under the bridge runs on its own where it computes the bridge's logits (`natively_possible`),
    so a loop of weight-only forwards (a probe's checks, a fine-tune) costs what plain torch does;
    else the bridge. `keep` [k]: unembed only these positions (logits [batch, k, vocab])."""
    if natively_possible(model, ()):
        from interp.native import unwrapped

        # built here, not cached: a copy made before the weights were swapped would not see them
        return unwrapped(model)(input_ids=tokens, **({} if keep is None else {"logits_to_keep": keep})).logits
    if keep is None:
        return model(tokens)
    from interp.hooks import hooks

    def gather(act: Tensor, *, hook) -> Tensor:
        return act[:, keep.to(act.device)]

    with hooks(model, [("unembed.hook_in", gather)]):
        return model(tokens)
