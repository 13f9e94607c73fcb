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

Gradients need no split inputs (which keep a copy of the residual per head and KV group, and
its norm, in the autograd graph): a head's q input reaches the metric only through its own
query, q[:, :, H] = ln1(resid_pre) @ W_Q[H] (+ b_Q), so d metric / d (its input) is ln1's
vector-Jacobian product at resid_pre of (d metric / d hook_q[:, :, H]) @ W_Q[H]^T, taken per
layer and chunk of positions after the backward (`receiver_grads`); likewise k and v per KV
group. The MLP's input gradient is the one at `ln2.hook_in`, which only the MLP's norm reads.
`check_additive` checks both identities on every run.
"""

from __future__ import annotations

import torch
from torch import Tensor

from interp.circuits.graph import receiver_nodes, sender_nodes
from interp.errors import InterpError
from interp.sites import check_tokens, n_kv_heads
from interp.tensors import tolerance
from interp.tasks.base import Task
from interp.hooks import split_inputs  # the model modes circuits need; switched only in interp.hooks

__all__ = ["Wiring", "check_task", "split_inputs"]


def check_task(model, task: Task) -> None:
    """InterpError unless `task` is a Task whose clean and corrupt token ids fit `model`."""
    if not isinstance(task, Task):
        raise InterpError(f"circuit discovery takes a Task (clean and corrupt tokens, answers), got {type(task).__name__}")
    check_tokens(task.clean, "task.clean", model=model)
    check_tokens(task.corrupt, "task.corrupt", model=model)
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
        self.d_model = int(cfg.d_model)  # in the graph's meta: what MIB's submission format asks for
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
        # what a gradient run records: per layer the block input (what ln1 reads), d metric / d
        # hook_q/k/v ([b, p, head | kv_head, d_head]) and / d ln2.hook_in (the MLP's input path)
        self.block_inputs = [f"blocks.{l}.hook_resid_pre" for l in L]
        self.grad_hooks = [*(f"blocks.{l}.attn.hook_{x}" for l in L for x in "qkv"),
                           *(f"blocks.{l}.ln2.hook_in" for l in L), f"blocks.{self.n_layers - 1}.hook_resid_post"]

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
        return {"n_layers": self.n_layers, "n_heads": self.n_heads, "n_kv_heads": self.n_kv, "d_model": self.d_model}

    def head_out(self, layer: int, z: Tensor) -> Tensor:
        """Per-head writes [..., head, d_model] from z [..., head, d_head]."""
        return torch.einsum("...he,hed->...hd", z, self.W_O[layer].to(z))

    def post_scaled(self, layer: int, writes: Tensor, scale: Tensor) -> Tensor:
        """Head writes [b, p, head, d] through Gemma's post-attention norm at this run's scale [b, p, 1]."""
        return writes / scale[:, :, None].to(writes) * self.post_gain[layer].to(writes)

    def head_inputs(self, layer: int, acts: dict[str, Tensor]) -> Tensor:
        """What each head's write is linear in: z [batch, pos, head, d_head], over the run's own
        post-attention norm scale on Gemma (so a difference of two runs' writes is `head_writes_from`
        of the difference of their head inputs)."""
        z = acts[f"blocks.{layer}.attn.hook_z"]
        if self.post_norm:
            z = z / acts[f"blocks.{layer}.ln1_post.hook_scale"][:, :, None].to(z)
        return z

    def head_writes_from(self, layer: int, z: Tensor) -> Tensor:
        """Per-head writes [..., head, d_model] from head inputs [..., head, d_head] (`head_inputs`)."""
        out = self.head_out(layer, z)
        return out * self.post_gain[layer].to(out) if self.post_norm else out

    def head_writes(self, layer: int, acts: dict[str, Tensor]) -> Tensor:
        """Each head's write into the residual stream [batch, pos, head, d_model]."""
        return self.head_writes_from(layer, self.head_inputs(layer, acts))

    def sender_outputs(self, acts: dict[str, Tensor]) -> Tensor:
        """All senders' outputs [batch, pos, sender, d_model] in `self.senders` order."""
        parts = [acts["blocks.0.hook_resid_pre"][:, :, None]]
        for l in range(self.n_layers):
            parts += [self.head_writes(l, acts), acts[f"blocks.{l}.hook_mlp_out"][:, :, None]]
        return torch.cat(parts, 2)

    def sender_deltas(self, corrupt: dict[str, Tensor], clean: dict[str, Tensor]) -> list[Tensor]:
        """Corrupt minus clean, compactly, in the senders' order: the embeddings' [batch, pos,
        d_model], then per layer the head inputs' ([batch, pos, head, d_head], see `head_inputs`)
        and the MLP's [batch, pos, d_model]. `expand` turns a slice of positions into outputs."""
        out = [corrupt["blocks.0.hook_resid_pre"] - clean["blocks.0.hook_resid_pre"]]
        for l in range(self.n_layers):
            out += [self.head_inputs(l, corrupt) - self.head_inputs(l, clean),
                    corrupt[f"blocks.{l}.hook_mlp_out"] - clean[f"blocks.{l}.hook_mlp_out"]]
        return out

    def expand(self, deltas: list[Tensor], start: int, stop: int, dtype: torch.dtype = torch.float32) -> Tensor:
        """Every sender's output delta at positions start:stop, [sender, batch, pos, d_model] in
        `dtype`, from `sender_deltas` (sender-major: the upstream senders of a receiver are a prefix);
        the head writes are computed in float32."""
        embed = deltas[0][:, start:stop]
        b, p, d = embed.shape
        out = torch.empty(len(self.senders), b, p, d, dtype=dtype, device=embed.device)
        out[0] = embed
        i = 1
        for l in range(self.n_layers):
            z = deltas[1 + 2 * l][:, start:stop].float()
            out[i:i + self.n_heads] = self.head_writes_from(l, z).permute(2, 0, 1, 3)  # [head, b, p, d]
            out[i + self.n_heads] = deltas[2 + 2 * l][:, start:stop]
            i += self.n_heads + 1
        return out

    def attn_slots(self, layer: int) -> list[int]:
        """Indices into `self.receivers` of layer `layer`'s q, k, v receivers in `receiver_grads` order."""
        return [i for x in "qkv" for i in self.slots(f"blocks.{layer}.attn.hook_{x}_input")]

    def receiver_grads(self, model, layer: int, grads: dict[str, Tensor], inputs: dict[str, Tensor],
                       start: int, stop: int) -> Tensor:
        """d metric / d (each q, k, v receiver's input of layer `layer`) at positions start:stop,
        [receiver, batch, pos, d_model] in `attn_slots` order (float32), from the gradients at
        hook_q/k/v (`grads`) and the block's input (`inputs`, the run's hook_resid_pre): each is
        ln1's vector-Jacobian product at the block input of (d metric / d its projection) @ W^T."""
        attn = model.blocks[layer].attn
        parts = []
        for x in "qkv":
            g = grads[f"blocks.{layer}.attn.hook_{x}"][:, start:stop]  # [b, p, head | kv_head, d_head]
            W = getattr(attn, f"W_{x.upper()}").detach()  # [head | kv_head, d_model, d_head]
            parts.append(torch.einsum("bphe,hde->bphd", g, W.to(g)))
        u = torch.cat(parts, 2)  # [b, p, n, d_model]
        b, p, n, d = u.shape
        x = inputs[f"blocks.{layer}.hook_resid_pre"][:, start:stop].detach()
        # every receiver reads its own copy of the block input: one norm over [b, p * n, d]
        rep = x[:, :, None].expand(b, p, n, d).reshape(b, p * n, d).requires_grad_(True)
        with torch.enable_grad():
            y = model.blocks[layer].ln1(rep)
            (g,) = torch.autograd.grad(y, rep, u.reshape(b, p * n, d).to(y.dtype))
        return g.reshape(b, p, n, d).permute(2, 0, 1, 3).float()

    @property
    def check_hooks(self) -> list[str]:
        """What `check_additive` reads (of the last block), recorded in a clean forward anyway; under
        `split_inputs` add `split_check_hooks`."""
        L = self.n_layers - 1
        names = [f"blocks.{L}.hook_resid_mid", f"blocks.{L}.hook_resid_pre", f"blocks.{L}.attn.hook_z",
                 f"blocks.{L}.hook_mlp_out", f"blocks.{L}.hook_resid_post",
                 *(f"blocks.{L}.attn.hook_{x}" for x in "qkv")]
        return names + ([f"blocks.{L}.ln1_post.hook_scale"] if self.post_norm else [])

    @property
    def split_check_hooks(self) -> list[str]:
        """The split inputs `check_additive` also reads when they are recorded (under `split_inputs`)."""
        L = self.n_layers - 1
        return [f"blocks.{L}.hook_mlp_in", f"blocks.{L}.attn.hook_q_input"]

    def check_additive(self, model, acts: dict[str, Tensor]) -> None:
        """InterpError unless every receiver's input is the sum of its senders' outputs (+ biases)
        in `acts` (a forward recorded with `check_hooks`, and `split_check_hooks` where split), and
        each head's q, k, v are ln1(block input) @ W (+ b): true of pre-norm blocks (and Gemma's).
        The sums are taken in float32; the tolerance is `interp.tensors.tolerance(dtype, 1e-3)`
        for the activations' dtype (a bf16 model's blocks add up only to bf16's rounding)."""
        L = self.n_layers - 1
        f = {k: v.float() for k, v in acts.items()}
        tol = tolerance(acts[f"blocks.{L}.hook_resid_mid"].dtype, 1e-3)
        b_O = model.blocks[L].attn.b_O
        attn = self.head_writes(L, f).sum(2) + (0 if b_O is None else b_O.detach().float())
        pairs = [
            ("resid_mid = resid_pre + sum of head writes", f[f"blocks.{L}.hook_resid_mid"], f[f"blocks.{L}.hook_resid_pre"] + attn),
            ("resid_post = resid_mid + mlp_out", f[f"blocks.{L}.hook_resid_post"], f[f"blocks.{L}.hook_resid_mid"] + f[f"blocks.{L}.hook_mlp_out"]),
        ]
        if f"blocks.{L}.hook_mlp_in" in f:
            pairs.append(("mlp_in = resid_mid", f[f"blocks.{L}.hook_mlp_in"], f[f"blocks.{L}.hook_resid_mid"]))
        if f"blocks.{L}.attn.hook_q_input" in f:
            pairs.append(("q_input = resid_pre", f[f"blocks.{L}.attn.hook_q_input"][:, :, 0], f[f"blocks.{L}.hook_resid_pre"]))
        if f"blocks.{L}.attn.hook_q" in f:
            with torch.no_grad():
                normed = model.blocks[L].ln1(acts[f"blocks.{L}.hook_resid_pre"]).float()
            for x in "qkv":
                attn_L = model.blocks[L].attn
                W, b = getattr(attn_L, f"W_{x.upper()}").detach().float(), getattr(attn_L, f"b_{x.upper()}", None)
                want = torch.einsum("bpd,hde->bphe", normed, W) + (0 if b is None else b.detach().float())
                pairs.append((f"{x} = ln1(resid_pre) @ W_{x.upper()}", f[f"blocks.{L}.attn.hook_{x}"], want))
        for what, got, want in pairs:
            scale = want.abs().max().clamp_min(1e-6)
            err = float((got - want).abs().max() / scale)
            if not err <= tol:
                arch = getattr(model.cfg, "architecture", None) or getattr(model.cfg, "original_architecture", None) or type(model).__name__
                raise InterpError(
                    f"circuits were asked of a {arch} model, whose blocks do not add up per edge ({what} is off by "
                    f"{err:.2g}, e.g. post-LN); use a pre-norm decoder: GPT-2, LLaMA, Qwen2 or Gemma."
                )
