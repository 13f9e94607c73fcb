"""Where the graph's nodes live in a TransformerLens bridge: the hooks of senders and receivers.

Senders write into the residual stream; their outputs, [batch, pos, d_model] each:

    embed      blocks.0.hook_resid_pre                  (token + positional embeddings)
    a{L}.h{H}  blocks.L.attn.hook_z[:, :, H] @ W_O[L, H] (the head's own write; b_O is shared by
                                                         clean and corrupt runs, so it never moves)
    m{L}       blocks.L.hook_mlp_out

Receivers read it; each has its own copy of the residual (the bridge's split inputs, so one
receiver's input can be read or changed without touching its neighbours'):

    a{L}.h{H}.q   blocks.L.attn.hook_q_input[:, :, H]      [batch, pos, head, d_model]
    a{L}.g{G}.k   blocks.L.attn.hook_k_input[:, :, G]      [batch, pos, kv_head, d_model]: on GQA
    a{L}.g{G}.v   blocks.L.attn.hook_v_input[:, :, G]      models the bridge splits by KV head
    m{L}          blocks.L.hook_mlp_in
    logits        blocks.{n_layers-1}.hook_resid_post      (what the final norm reads)

A receiver's input is the sum of every upstream sender's output (plus biases): that is what
makes an edge well defined. Gemma's norms after attention and MLP sit before the residual add:
its MLP output hook is after the norm, and a head's write is its share of the normed sum at the
run's own norm scale (`post_scaled`), so the sum still holds exactly. BERT's post-LN normalises
the residual stream itself, which no per-edge decomposition survives; `check_additive` refuses it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from interp.circuits.graph import receiver_nodes, sender_nodes
from interp.errors import InterpError
from interp.sites import check_tokens, n_kv_heads
from interp.tasks.base import Task
from interp.hooks import split_inputs  # the model modes circuits need; switched only in interp.hooks

__all__ = ["Wiring", "check_task", "split_inputs"]


def check_task(model, task: Task) -> None:
    """InterpError unless `task` is a Task whose clean and corrupt token ids fit `model`."""
    if not isinstance(task, Task):
        raise InterpError(f"circuit discovery takes a Task (clean and corrupt tokens, answers), got {type(task).__name__}")
    check_tokens(task.clean, "task.clean")
    check_tokens(task.corrupt, "task.corrupt")
    if task.clean.shape != task.corrupt.shape:
        raise InterpError(f"clean {tuple(task.clean.shape)} and corrupt {tuple(task.corrupt.shape)} tokens must have one shape")
    top = int(max(task.clean.max(), task.corrupt.max()))
    if top >= model.cfg.d_vocab:
        raise InterpError(f"token id {top} is outside the model's vocabulary (d_vocab={model.cfg.d_vocab}); "
                          "was the task built for another model?")


class Wiring:
    """The hook names of one model's senders and receivers, and how to read their values."""

    def __init__(self, model):
        cfg = model.cfg
        self.n_layers, self.n_heads, self.n_kv = int(cfg.n_layers), int(cfg.n_heads), n_kv_heads(model)
        self.senders = sender_nodes(self.n_layers, self.n_heads, self.n_kv)
        self.receivers = receiver_nodes(self.n_layers, self.n_heads, self.n_kv)
        L = range(self.n_layers)
        self.sender_hooks = ["blocks.0.hook_resid_pre", *(f"blocks.{l}.attn.hook_z" for l in L),
                             *(f"blocks.{l}.hook_mlp_out" for l in L)]
        self.receiver_hooks = [*(f"blocks.{l}.attn.hook_{x}_input" for l in L for x in "qkv"),
                               *(f"blocks.{l}.hook_mlp_in" for l in L), f"blocks.{self.n_layers - 1}.hook_resid_post"]
        # the hooks holding the senders' writes, in forward order (the senders' order)
        self.write_hooks = ["blocks.0.hook_resid_pre"]
        for l in L:
            self.write_hooks += [f"blocks.{l}.attn.hook_z", f"blocks.{l}.hook_mlp_out"]
        self._slots: dict[str, list[int]] = {}
        # W_O per layer [head, d_head, d_model], detached: senders' outputs need no weight gradient
        self.W_O = [model.blocks[l].attn.W_O.detach() for l in L]
        # Gemma's RMSNorm after attention: out = (sum of head writes) / scale * (1 + w). With each
        # run's own scale (hook_scale) a head's write is its share of that sum, exactly additive.
        self.post_norm = "blocks.0.ln1_post.hook_scale" in model.hook_dict
        self.post_gain = [1.0 + model.blocks[l].ln1_post.weight.detach() for l in L] if self.post_norm else None
        if self.post_norm:
            self.sender_hooks += [f"blocks.{l}.ln1_post.hook_scale" for l in L]

    def receiver_site(self, name: str) -> tuple[str, int | None]:
        """(hook name, index along its head / KV-head axis or None) of a receiver's input."""
        from interp.circuits.graph import node

        r = node(name)
        if r.role in ("q", "k", "v"):
            return f"blocks.{r.layer}.attn.hook_{r.role}_input", r.index
        if r.role == "mlp":
            return f"blocks.{r.layer}.hook_mlp_in", None
        if r.role == "logits":
            return f"blocks.{self.n_layers - 1}.hook_resid_post", None
        raise InterpError(f"{name!r} is a sender, not a receiver")

    def slots(self, site: str) -> list[int]:
        """Indices into `self.receivers` of the receivers whose input is `site` (its head axis order)."""
        if site not in self._slots:
            at = {r: i for i, r in enumerate(self.receivers)}
            layer = int(site.split(".")[1])
            if site.endswith("q_input"):
                names = [f"a{layer}.h{h}.q" for h in range(self.n_heads)]
            elif site.endswith(("k_input", "v_input")):
                names = [f"a{layer}.g{g}.{site.split('hook_')[-1][0]}" for g in range(self.n_kv)]
            elif site.endswith("hook_mlp_in"):
                names = [f"m{layer}"]
            else:
                names = ["logits"]
            self._slots[site] = [at[n] for n in names]
        return self._slots[site]

    def meta(self) -> dict:
        return {"n_layers": self.n_layers, "n_heads": self.n_heads, "n_kv_heads": self.n_kv}

    def head_out(self, layer: int, z: Tensor) -> Tensor:
        """Per-head writes [..., head, d_model] from z [..., head, d_head]."""
        return torch.einsum("...he,hed->...hd", z, self.W_O[layer].to(z))

    def post_scaled(self, layer: int, writes: Tensor, scale: Tensor) -> Tensor:
        """Head writes [b, p, head, d] through Gemma's post-attention norm at this run's scale [b, p, 1]."""
        return writes / scale[:, :, None].to(writes) * self.post_gain[layer].to(writes)

    def head_writes(self, layer: int, acts: dict[str, Tensor]) -> Tensor:
        """Each head's write into the residual stream [batch, pos, head, d_model]."""
        out = self.head_out(layer, acts[f"blocks.{layer}.attn.hook_z"])
        if self.post_norm:
            out = self.post_scaled(layer, out, acts[f"blocks.{layer}.ln1_post.hook_scale"])
        return out

    def sender_outputs(self, acts: dict[str, Tensor]) -> Tensor:
        """All senders' outputs [batch, pos, sender, d_model] in `self.senders` order."""
        parts = [acts["blocks.0.hook_resid_pre"][:, :, None]]
        for l in range(self.n_layers):
            parts += [self.head_writes(l, acts), acts[f"blocks.{l}.hook_mlp_out"][:, :, None]]
        return torch.cat(parts, 2)

    def receiver_values(self, acts: dict[str, Tensor]) -> Tensor:
        """All receivers' inputs (or their gradients) [batch, pos, receiver, d_model], in
        `self.receivers` order: per layer and KV group the q of its heads, then k, v; the MLP."""
        per = self.n_heads // self.n_kv
        parts = []
        for l in range(self.n_layers):
            q, k, v = (acts[f"blocks.{l}.attn.hook_{x}_input"] for x in "qkv")
            for g in range(self.n_kv):
                parts += [q[:, :, g * per:(g + 1) * per], k[:, :, g:g + 1], v[:, :, g:g + 1]]
            parts.append(acts[f"blocks.{l}.hook_mlp_in"][:, :, None])
        parts.append(acts[f"blocks.{self.n_layers - 1}.hook_resid_post"][:, :, None])
        return torch.cat(parts, 2)

    @property
    def check_hooks(self) -> list[str]:
        """What `check_additive` reads (of the last block), recorded in a clean forward anyway."""
        L = self.n_layers - 1
        names = [f"blocks.{L}.hook_resid_mid", f"blocks.{L}.hook_resid_pre", f"blocks.{L}.attn.hook_z",
                 f"blocks.{L}.hook_mlp_in", f"blocks.{L}.hook_mlp_out", f"blocks.{L}.hook_resid_post",
                 f"blocks.{L}.attn.hook_q_input"]
        return names + ([f"blocks.{L}.ln1_post.hook_scale"] if self.post_norm else [])

    def check_additive(self, model, acts: dict[str, Tensor]) -> None:
        """InterpError unless every receiver's input is the sum of its senders' outputs (+ biases)
        in `acts` (a forward recorded with `check_hooks`): true of pre-norm blocks (and Gemma's)."""
        L = self.n_layers - 1
        b_O = model.blocks[L].attn.b_O
        attn = self.head_writes(L, acts).sum(2) + (0 if b_O is None else b_O.detach())
        pairs = [
            ("resid_mid = resid_pre + sum of head writes", acts[f"blocks.{L}.hook_resid_mid"], acts[f"blocks.{L}.hook_resid_pre"] + attn),
            ("resid_post = resid_mid + mlp_out", acts[f"blocks.{L}.hook_resid_post"], acts[f"blocks.{L}.hook_resid_mid"] + acts[f"blocks.{L}.hook_mlp_out"]),
            ("mlp_in = resid_mid", acts[f"blocks.{L}.hook_mlp_in"], acts[f"blocks.{L}.hook_resid_mid"]),
            ("q_input = resid_pre", acts[f"blocks.{L}.attn.hook_q_input"][:, :, 0], acts[f"blocks.{L}.hook_resid_pre"]),
        ]
        for what, got, want in pairs:
            scale = want.abs().max().clamp_min(1e-6)
            if float((got - want).abs().max() / scale) > 1e-3:
                arch = getattr(model.cfg, "architecture", None) or getattr(model.cfg, "original_architecture", None) or type(model).__name__
                err = float((got - want).abs().max() / scale)
                raise InterpError(
                    f"circuits were asked of a {arch} model, whose blocks do not add up per edge ({what} is off by "
                    f"{err:.2g}, e.g. post-LN); use a pre-norm decoder: GPT-2, LLaMA, Qwen2 or Gemma."
                )
