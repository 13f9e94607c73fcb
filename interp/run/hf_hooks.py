"""The runner's native engine: the same interventions at the same hook names, as plain PyTorch hooks
on the bridge's Hugging Face model (`interp.model.native.unwrapped(model)`), with no bridge in the
forward; and the equivalence checks every native engine is chosen by, made once per model and dtype
(`native_agrees` for the HF model's own forward, `stack_agrees` for its blocks run one by one,
`heads_agree` for the second half of each block after its heads).
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from dataclasses import replace
from typing import Callable, Iterator, Sequence

import torch
from torch import Tensor

from interp.errors import InterpError
from interp.hooks import hooks
from interp.interventions import Intervention
from interp.model import native
from interp.model.resuming import can_resume
from interp.run.runner import cache, input_device, split_items
from interp.tensors import tolerance

__all__ = ["forward", "heads_agree", "native_agrees", "natively", "natively_possible", "stack_agrees"]


def natively_possible(model, names: Sequence[str]) -> bool:
    """Whether `natively` can run `names` on this model: a causal decoder on one device, every name
    with an exact place in the HF module tree, and no hook of the caller's on the bridge (the
    native run would not fire it)."""
    if not can_resume(model) or getattr(model.original_model, "hf_device_map", None):
        return False
    if not all(native.native_site(n) for n in names):
        return False
    return not any(hp.has_hooks() for hp in model.hook_dict.values()) and native_agrees(model)


# per model: {(what was checked, dtype): whether it holds}
_AGREES: "weakref.WeakKeyDictionary[torch.nn.Module, dict[tuple[str, torch.dtype], bool]]" = weakref.WeakKeyDictionary()


def _checked(model, what: str, check) -> bool:
    """`check(model, tokens, dtype)` on a short sequence, once per model, dtype and `what`."""
    p = next(model.parameters(), None)  # none while a weight edit has swapped them out
    dtype = p.dtype if p is not None else model.cfg.dtype
    seen = _AGREES.setdefault(model, {})
    if (what, dtype) not in seen:
        tokens = torch.arange(1, 9, device=input_device(model)).remainder(model.cfg.d_vocab_out)[None]
        with torch.no_grad():
            seen[(what, dtype)] = bool(check(model, tokens, dtype))
    return seen[(what, dtype)]


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
    return _checked(model, "model", lambda m, t, d: _logits_agree(m, t, d) if _fine(d) else _stages(m, t, d)[0])


def stack_agrees(model) -> bool:
    """Whether the native blocks run one by one (`interp.model.native.run_blocks`, what resumed and
    packed forwards run) and the final norm and unembedding compute the bridge's stages, each fed the
    bridge's input: in float32 to 1e-5 of the largest value, in a coarser dtype as `native_agrees`."""
    return _checked(model, "stack", lambda m, t, d: _has_stack(m) and _stages(m, t, d)[0])


def heads_agree(model) -> bool:
    """`stack_agrees`, and every block has LLaMA's shape with its second half
    (`interp.model.native.after_attention`, fed the bridge's block input and head outputs) giving the
    bridge's block output."""
    return _checked(model, "heads", lambda m, t, d: _has_stack(m) and all(_stages(m, t, d)))


def _has_stack(model) -> bool:
    return native.stack_of(native.unwrapped(model), model.cfg.n_layers) is not None


def _fine(dtype: torch.dtype) -> bool:
    return dtype in (torch.float32, torch.float64)


def _logits_agree(model, tokens: Tensor, dtype: torch.dtype) -> bool:
    ours = model(tokens).float()
    theirs = native.unwrapped(model)(tokens).logits.float().to(ours.device)
    ours, theirs = ours - ours.mean(-1, keepdim=True), theirs - theirs.mean(-1, keepdim=True)
    return bool(((ours - theirs).abs().max() <= tolerance(dtype, 1e-3) * (1 + ours.abs().max())).item())


def _close(dtype: torch.dtype):
    """Whether two outputs of one stage agree: in float32 to 1e-5 of the largest value; in a
    coarser dtype relative to the norm (a systematic difference, not one rounding)."""
    def close(a: Tensor, b: Tensor) -> bool:
        a, b = a.float(), b.float().to(a.device)
        if _fine(dtype):
            return bool((a - b).abs().max() <= tolerance(dtype, 1e-5) * max(1.0, float(b.abs().max())))
        return bool((a - b).norm() <= tolerance(dtype, 1e-3) * b.norm())

    return close


def _stages(model, tokens: Tensor, dtype: torch.dtype) -> tuple[bool, bool]:
    """(every native block and the unembedding agree with the bridge's, each fed the bridge's input;
    so does each block's second half after its heads), as `stack_agrees` and `heads_agree` judge."""
    close = _close(dtype)
    L, n_pos = model.cfg.n_layers, tokens.shape[1]
    pre = [f"blocks.{l}.hook_resid_pre" for l in range(L)] + [f"blocks.{L - 1}.hook_resid_post"]
    z = [f"blocks.{l}.attn.hook_z" for l in range(L)]
    logits, acts = cache(model, tokens, pre + z)
    hf = native.unwrapped(model)
    stack = native.stack_of(hf, L)
    if stack is None:  # no stack to feed block by block (GPT-2): the first block, from the embedding on
        with natively(model, hf, record=["blocks.0.hook_resid_post"]) as found:
            hf(tokens)
        return close(found["blocks.0.hook_resid_post"], acts[pre[1]]), False
    device = acts[pre[0]].device
    positions = torch.arange(n_pos, device=device)
    for l in range(L):
        kind = stack.layer_types[l]
        mask = {kind: native.packed_mask([0], 0, n_pos, stack.window if kind == "sliding_attention" else None, dtype,
                                         device)[0]}
        one = replace(stack, blocks=stack.blocks[l : l + 1], layer_types=(kind,))
        out, _, _ = native.run_blocks(one, 0, acts[pre[l]], positions, mask)
        if not close(out, acts[pre[l + 1]]):
            return False, False
    if not close(native.unembed(stack, acts[pre[-1]]), logits):
        return False, False
    heads = native.plain_blocks(stack) and all(
        close(native.after_attention(stack.blocks[l], acts[pre[l]], acts[z[l]]), acts[pre[l + 1]]) for l in range(L))
    return True, heads


@contextmanager
def natively(model, hf: torch.nn.Module, interventions: Sequence[Intervention] = (), *, start: int = 0,
             record: Sequence[str] = ()) -> Iterator[dict[str, Tensor]]:
    """The body runs `hf` (`interp.model.native.unwrapped(model)`) with `interventions` applied as plain
    PyTorch hooks at their sites, each a bridge hook name with a native place (`natively_possible`).
    Yields {name: activation} for the `record` names, kept as they arrive, before any intervention
    there. Hooks are removed on exit, even on error. `start` as in `intervened`."""
    acts, edits = split_items(interventions)
    if edits:
        raise InterpError("weight edits do not run natively; use interp.run.intervened")
    blocks = native.block_list(hf, model.cfg.n_layers)
    by_site: dict[str, list[Intervention]] = {}
    for iv in acts:
        for site in iv.sites:
            by_site.setdefault(site, []).append(iv)
    names = list(dict.fromkeys([*record, *by_site]))
    bad = [n for n in names if native.native_site(n) is None]
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
            layer, where = native.native_site(name)
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
        # built here, not cached: a copy made before the weights were swapped would not see them
        return native.unwrapped(model)(input_ids=tokens, **({} if keep is None else {"logits_to_keep": keep})).logits
    if keep is None:
        return model(tokens)
    def gather(act: Tensor, *, hook) -> Tensor:
        return act[:, keep.to(act.device)]

    with hooks(model, [("unembed.hook_in", gather)]):
        return model(tokens)
