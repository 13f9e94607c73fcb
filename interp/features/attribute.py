"""Attribution graphs of one prompt through per-layer or cross-layer transcoders (circuit-tracer's
method), and the replacement model they describe, all run through `interp.run`.

    attribute(model, prompt, transcoders)        -> AttributionGraph (interp.features.graph)
    frozen(model, tokens)                        -> [Hold]: the prompt's attention patterns and
                                                    norm scales put back as constants
    replacement_logits(model, tokens, transcoders, errors=True)
                                                 -> logits of the replacement model
    Hold(site, value, delta=None)                an intervention: the activation at `site` is the
                                                    constant `value` (+ `delta`)
    Skip(site_in, site_out, value, x_value, W_skip, delta=None)
                                                 a Hold of an MLP output that keeps a skip
                                                    transcoder's linear path from the MLP's input

How `attribute` works (Ameisen et al. 2025, "Circuit Tracing"; circuit-tracer's attribution.py):

1. One clean run records each transcoder's input, every layer's true MLP output, every attention
   pattern and norm scale, and the residual entering block 0 (the token nodes' vectors).
2. Features are `dictionary.encode(input)`; a layer's error is its true MLP output minus the
   reconstruction (a layer without a transcoder is all error). A cross-layer transcoder's
   reconstruction at layer m sums the writes of the features of layers 0..m, and a feature's
   direct effect sums its writes to every layer it reaches. Features and errors at a leading
   BOS are dropped (`drop_bos`), as circuit-tracer does: that position's MLP output is a constant.
3. The local replacement model: `Hold`s put the clean patterns and scales back as constants (no
   gradient flows through them), and each layer's clean MLP output (and block 0's input) back as a
   constant plus a zero `delta` that requires grad, so d(anything)/d(delta) is its derivative by
   that MLP output. The model is now affine in the deltas, and a target's input is exactly the sum
   of its direct effects plus a constant (tests/test_features_graph.py checks that sum). A skip
   transcoder's W_skip is kept as a live linear path from the MLP's input to its output (`Skip`),
   as circuit-tracer does: an effect through it is part of the sources' direct effects, and the
   error node is what the features and the skip path together miss.
4. One forward of `batch_size` copies of the prompt; per batch of target nodes, one backward from
   sum_b <v_b, x_b>: row b's activation x_b at its target's input site and position, v_b the
   target's input vector (a feature's encoder column; a logit's unembedding column minus the mean
   column, or minus a baseline token's column). Row b's gradient at each delta, contracted with a
   source's output vector (activation x decoder row, error vector, token embedding), is the
   source's direct effect on target b. The graph is reused for every batch (retain_graph).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from interp import run
from interp.interventions import AtOneSite
from interp.circuits.eap import model_label
from interp.errors import InterpError
from interp.features.clt import CrossLayerTranscoder
from interp.features.dictionary import Dictionary
from interp.features.sites import check_fits
from interp.features.graph import ERROR, FEATURE, LOGIT, TOKEN, AttributionGraph
from interp.metrics import token_ids
from interp.sites import check_hook_names, check_tokens, hook_name, layer_of
from interp.memory import records_peak

__all__ = ["Hold", "Replacement", "Skip", "attribute", "frozen", "replacement", "replacement_logits"]

EMBED = "blocks.0.hook_resid_pre"  # the token nodes' vectors: the residual entering block 0
UNEMBED = "unembed.hook_in"  # the logits' input, after the final norm
NORM_WARNINGS = r".*(hook_scale|hook_normalized).*"  # the bridge notes that a held scale leaves HF's fused norm


@dataclass(frozen=True)
class Hold(AtOneSite):
    """The activation at `site` becomes the constant `value` ([1, ...]: one prompt's activation,
    the same for every row) plus `delta` ([rows, ...] or None). A zero `delta` that requires grad
    makes d/d(delta) the derivative by that activation, while nothing flows into what computed it."""

    site: str
    value: Tensor
    delta: Tensor | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "site", hook_name(self.site))

    def __call__(self, act: Tensor, *, site: str, start: int = 0) -> Tensor:
        if start:
            raise InterpError(f"Hold at {self.site} replaces whole activations; it cannot run on a resumed forward (start={start})")
        if self.value.shape[1:] != act.shape[1:]:
            raise InterpError(f"Hold at {self.site}: value has shape {tuple(self.value.shape)} but the activation has {tuple(act.shape)}")
        out = self.value.to(act.dtype).expand_as(act)
        return out if self.delta is None else out + self.delta.to(act.dtype)


def _frozen_names(model) -> list[str]:
    return [n for n in model.hook_dict if n.endswith(".hook_pattern") or n.endswith(".hook_scale")]


def frozen(model, tokens: Tensor) -> list[Hold]:
    """Holds that freeze every attention pattern and norm scale at their values on `tokens` ([1, pos]):
    under them the model is linear in its residual stream apart from the MLPs."""
    names = _frozen_names(model)
    _, acts = run.cache(model, tokens, names)
    return [Hold(n, acts[n]) for n in names if n in acts]


@dataclass(frozen=True)
class Skip:
    """A Hold of an MLP's output that leaves a transcoder's skip path live: the output at
    `site_out` is `value` + (x - `x_value`) @ W_skip (+ `delta`), x the MLP's input at `site_in` in
    this same forward, which `seen` keeps from the input's hook until the output's (the input's
    hook runs first in every forward). Under it the MLP's output is affine in its input through
    W_skip alone, as circuit-tracer's replacement model makes it (skip(x) + (mlp(x) - skip(x)).detach())."""

    site_in: str
    site_out: str
    value: Tensor
    x_value: Tensor
    W_skip: Tensor
    delta: Tensor | None = None
    seen: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "site_in", hook_name(self.site_in))
        object.__setattr__(self, "site_out", hook_name(self.site_out))

    @property
    def sites(self) -> tuple[str, ...]:
        return (self.site_in, self.site_out)

    @property
    def first_pos(self) -> int:
        return 0

    def __call__(self, act: Tensor, *, site: str, start: int = 0) -> Tensor:
        if start:
            raise InterpError(f"Skip at {self.site_out} replaces whole activations; it cannot run on a resumed forward (start={start})")
        if site == self.site_in:
            self.seen["x"] = act
            return act
        x = self.seen.pop("x")
        skip = (x.float() - self.x_value.float()) @ self.W_skip.to(x.device).float()
        out = self.value.to(act.dtype).expand_as(act) + skip.to(act.dtype)
        return out if self.delta is None else out + self.delta.to(act.dtype)


@dataclass(frozen=True)
class Replacement:
    """The MLPs' replacement, per-layer transcoders or one cross-layer transcoder alike: layer l's
    features read `sites_in[l]` and write to the outputs of layers l .. l + n_out - 1 (n_out = 1 for
    a per-layer transcoder, every later layer for a CLT); `sites_out` names every layer's output."""

    sites_in: dict[int, str]
    sites_out: dict[int, str]
    dicts: dict[int, Dictionary]
    clt: CrossLayerTranscoder | None = None

    @property
    def layers(self) -> list[int]:
        """The layers that have features."""
        return sorted(self.sites_in)

    def encode(self, layer: int, x: Tensor) -> Tensor:
        if self.clt is not None:
            return self.clt.activation(self.clt.pre(x.float(), layer), layer)
        return self.dicts[layer].encode(x.float())

    def encoder(self, layer: int, idx: Tensor) -> Tensor:
        """Encoder columns [k, d_in] of layer `layer`'s features `idx`."""
        W = self.clt.W_enc[layer] if self.clt is not None else self.dicts[layer].W_enc
        return W.detach().float()[:, idx].T

    def decoder(self, layer: int, idx: Tensor) -> Tensor:
        """Decoder rows [k, n_out, d_out]: the writes of layer `layer`'s features `idx` to layers layer, layer + 1, ..."""
        if self.clt is not None:
            return self.clt.W_dec[layer].detach().float()[idx]
        return self.dicts[layer].W_dec.detach().float()[idx][:, None]

    def skip(self, layer: int) -> Tensor | None:
        """W_skip [d_in, d_out] of `layer`'s MLP (None: no skip path)."""
        if self.clt is not None:
            return None if self.clt.W_skip is None else self.clt.W_skip[layer].detach()
        return getattr(self.dicts.get(layer), "W_skip", None)

    def output(self, layer: int, features: Mapping[int, Tensor], x: Tensor | None) -> Tensor | None:
        """Layer `layer`'s reconstructed MLP output from the features of the layers up to it
        ({layer: [pos, n]}) and its own MLP input `x` (for a skip path); None: no transcoder there."""
        if self.clt is None and layer not in self.dicts:
            return None
        if self.clt is not None:
            c = self.clt
            out = c.b_dec[layer].float() + sum(features[l] @ c.W_dec[l][:, layer - l].float() for l in range(layer + 1))
        else:
            d = self.dicts[layer]
            out = features[layer] @ d.W_dec.float() + d.b_dec.float()
        W_skip = self.skip(layer)
        return out if W_skip is None else out + x.float() @ W_skip.float()


def replacement(model, transcoders) -> Replacement:
    """Per-layer transcoders (a list or {layer: Dictionary}) or one CrossLayerTranscoder, checked against `model`."""
    n_layers, device = model.cfg.n_layers, model.cfg.device
    if isinstance(transcoders, CrossLayerTranscoder):
        clt = transcoders
        if clt.n_layers != n_layers:
            raise InterpError(f"{clt!r} spans {clt.n_layers} layers but the model has {n_layers}")
        check_hook_names(model, [*clt.sites_in, *clt.sites_out])
        width = model.cfg.d_model
        if clt.W_enc.shape[1] != width or clt.b_dec.shape[1] != width:
            raise InterpError(f"{clt!r} reads width {clt.W_enc.shape[1]} and writes {clt.b_dec.shape[1]}; the model's "
                              f"MLP inputs and outputs are {width} wide")
        return Replacement(dict(enumerate(clt.sites_in)), dict(enumerate(clt.sites_out)), {}, clt.to(device))
    by_layer = _by_layer(model, transcoders)
    outs = {l: by_layer[l].site_out if l in by_layer else hook_name("mlp_out", l) for l in range(n_layers)}
    return Replacement({l: d.site_in for l, d in by_layer.items()}, outs, by_layer)


def _by_layer(model, transcoders: Sequence[Dictionary] | Mapping[int, Dictionary]) -> dict[int, Dictionary]:
    if not isinstance(transcoders, (Mapping, list, tuple)):
        raise InterpError(f"transcoders must be a list of Dictionary (one per layer), a {{layer: Dictionary}} or a "
                          f"CrossLayerTranscoder, got a {type(transcoders).__name__}" + " (pass [it])" * isinstance(transcoders, Dictionary))
    items = list(transcoders.items()) if isinstance(transcoders, Mapping) else [(None, d) for d in transcoders]
    out: dict[int, Dictionary] = {}
    for key, d in items:
        if not isinstance(d, Dictionary) or d.kind != "transcoder":
            raise InterpError(f"attribution graphs need transcoders (interp.features.Dictionary reading an MLP's input and "
                              f"rebuilding its output), got {d!r}")
        layer = layer_of(d.site_out)
        if layer is None or layer_of(d.site_in) != layer:
            raise InterpError(f"{d!r}: a per-layer transcoder reads and writes inside one block (blocks.L....), "
                              f"e.g. blocks.L.ln2.hook_normalized -> blocks.L.hook_mlp_out")
        if key is not None and key != layer:
            raise InterpError(f"transcoders[{key!r}] is {d!r}, which sits at layer {layer}; key each by its own layer")
        check_fits(model, d)
        if layer in out:
            raise InterpError(f"two transcoders for layer {layer}: {out[layer]!r} and {d!r}; pass one per layer")
        out[layer] = d.to(model.cfg.device)
    if not out:
        raise InterpError("no transcoders given; pass one interp.features.Dictionary per layer (a list or {layer: dictionary})")
    if max(out) >= model.cfg.n_layers:
        raise InterpError(f"a transcoder sits at layer {max(out)} but the model has layers 0..{model.cfg.n_layers - 1}")
    check_hook_names(model, [n for d in out.values() for n in (d.site_in, d.site_out)])
    return out


def _prompt_tokens(model, prompt: str | Tensor) -> Tensor:
    """[1, pos] token ids of one prompt that has a token besides BOS (the graph's target is the
    logit after its last token, attributed to the tokens before it)."""
    if isinstance(prompt, str):
        tokens = model.to_tokens(prompt, truncate=False)  # a prompt past the context is refused, not cut
    else:
        check_tokens(prompt, "prompt", model=model)
        tokens = prompt if prompt.ndim == 2 else prompt[None]
        if tokens.shape[0] != 1:
            raise InterpError(f"an attribution graph is of one prompt: pass a string or token ids [pos] or [1, pos], got "
                              f"shape {tuple(prompt.shape)}")
    check_tokens(tokens, "prompt", model=model)
    bos = getattr(getattr(model, "tokenizer", None), "bos_token_id", None)
    if bos is not None and bool((tokens == bos).all()):
        raise InterpError(f"prompt {prompt if isinstance(prompt, str) else tokens[0].tolist()!r} has no token besides "
                          "BOS, so the graph would have nothing to attribute; pass a prompt of at least one word")
    return tokens.to(model.cfg.device)


Transcoders = Sequence[Dictionary] | Mapping[int, Dictionary] | CrossLayerTranscoder


def replacement_logits(model, tokens: Tensor, transcoders: Transcoders, *,
                       errors: bool = True) -> Float[Tensor, "batch pos d_vocab"]:
    """Logits of the prompt's replacement model: patterns and scales frozen, the transcoders'
    reconstruction (recomputed from their inputs in this forward, layer by layer: a cross-layer
    transcoder's layer m sums the writes of the features of layers 0..m) in place of each MLP's
    output, plus the clean error when `errors` (then it reproduces the model's logits exactly).
    One forward per transcoder layer, each under the outputs already replaced."""
    tokens = _prompt_tokens(model, tokens)
    rep = replacement(model, transcoders)
    _, clean = run.cache(model, tokens, [*rep.sites_in.values(), *(rep.sites_out[l] for l in rep.layers)])
    xs = {l: clean[site] for l, site in rep.sites_in.items()}
    true = {l: rep.output(l, {k: rep.encode(k, x) for k, x in xs.items()}, xs.get(l)) for l in rep.layers}
    holds, features = frozen(model, tokens), {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=NORM_WARNINGS)
        for layer in rep.layers:
            _, now = run.cache(model, tokens, [rep.sites_in[layer]], holds)
            x = now[rep.sites_in[layer]]
            features[layer] = rep.encode(layer, x)
            out = rep.output(layer, features, x)
            error = clean[rep.sites_out[layer]].float() - true[layer] if errors else 0.0
            holds.append(Hold(rep.sites_out[layer], out + error))
        return run.logits(model, tokens, holds)


def _target_list(targets) -> list:
    """`targets` as a list; a lone string (whose characters would each become a target) or a
    non-sequence is refused."""
    if isinstance(targets, Tensor):
        targets = targets.tolist()
    if isinstance(targets, (str, bytes)) or not isinstance(targets, (list, tuple)):
        raise InterpError(f"targets must be a list of answer strings or vocab ids, got {targets!r:.60}; "
                          "for one answer pass [answer]")
    return list(targets)


def _logit_targets(model, last: Tensor, targets, baseline, max_logits: int, logit_prob: float):
    probs = torch.softmax(last.float(), -1)
    if targets is None:
        top_p, top_i = probs.topk(min(max_logits, probs.shape[0]))
        cut = int(torch.searchsorted(torch.cumsum(top_p, 0), torch.tensor(logit_prob, device=top_p.device))) + 1
        ids = top_i[:cut]
    else:
        targets = _target_list(targets)
        ints = [isinstance(t, int) and not isinstance(t, bool) for t in targets]
        if not all(ints) and (any(ints) or not all(isinstance(t, str) for t in targets)):
            raise InterpError(f"targets must be all vocab ids or all answer strings, got {list(targets)[:8]!r}")
        ids = torch.tensor(targets if all(ints) else token_ids(model, targets).tolist(), dtype=torch.long)  # cpu: indices, any device's
        if not len(ids) or int(ids.min()) < 0 or int(ids.max()) >= probs.shape[0]:
            raise InterpError(f"targets must be answer strings or vocab ids in [0, {probs.shape[0]}), got {targets!r}")
    W_U = model.W_U.detach().float()  # [d_model, d_vocab]
    if baseline == "mean":
        vecs = W_U[:, ids].T - W_U.mean(1)
    else:
        base = token_ids(model, [baseline])[0] if isinstance(baseline, str) else int(baseline)
        vecs = W_U[:, ids].T - W_U[:, base]
    return ids.cpu(), probs[ids].cpu(), vecs


@dataclass
class _Sources:
    """The graph's source nodes of one prompt: active features (layer, position, feature order),
    errors [layer, pos, d_model] and token vectors [pos, d_model], with each feature's output
    vectors (activation x decoder rows, one per layer it writes) and input vector (encoder
    column), grouped by layer."""

    layer: Tensor
    pos: Tensor
    index: Tensor
    act: Tensor
    dec: dict[int, tuple[Tensor, Tensor]]  # layer -> (positions [k], activation x decoder rows [k, n_out, d_model])
    enc: dict[int, Tensor]  # layer -> encoder columns [k, d_in]
    errors: Tensor
    embed: Tensor

    @property
    def n_features(self) -> int:
        return len(self.layer)

    def input_vector(self, i: int) -> Tensor:
        layer = int(self.layer[i])
        return self.enc[layer][i - int((self.layer < layer).sum())]


def _sources(clean: dict[str, Tensor], rep: Replacement, skip: int) -> _Sources:
    """Features and errors from the clean run; positions before `skip` (a BOS) are no nodes."""
    layers, pos_, idx_, act_, dec, enc, acts = [], [], [], [], {}, {}, {}
    for layer in rep.layers:
        a = rep.encode(layer, clean[rep.sites_in[layer]][0]).detach()
        a[:skip] = 0
        pos, idx = torch.nonzero(a, as_tuple=True)
        layers += [layer] * len(pos)
        pos_.append(pos)
        idx_.append(idx)
        act_.append(a[pos, idx])
        dec[layer] = (pos, rep.decoder(layer, idx) * a[pos, idx][:, None, None])
        enc[layer] = rep.encoder(layer, idx)
        acts[layer] = a
    errors = []
    for layer, site in rep.sites_out.items():
        out = clean[site][0].float()
        x = clean[rep.sites_in[layer]][0] if layer in rep.sites_in else None
        recon = rep.output(layer, acts, x)
        if recon is not None:
            out = out - recon.detach()
        out[:skip] = 0
        errors.append(out)
    cat = lambda xs, dtype: torch.cat(xs).cpu() if xs else torch.zeros(0, dtype=dtype)  # cpu: host-side node table; noqa: E731
    return _Sources(torch.tensor(layers, dtype=torch.long), cat(pos_, torch.long), cat(idx_, torch.long),  # cpu: host-side node table
                    cat(act_, torch.float), dec, enc, torch.stack(errors), clean[EMBED][0].float())


class _Backward:
    """The frozen replacement model run once on `rows` copies of the prompt; `rows_of(targets)`
    gives the direct effects of every source on up to `rows` targets with one backward."""

    def __init__(self, model, tokens: Tensor, clean: dict[str, Tensor], holds: list[Hold], rep: Replacement,
                 sites: list[str], src: _Sources, rows: int):
        n_pos, device = tokens.shape[1], clean[EMBED].device
        self.src, self.seconds = src, 0.0
        self.deltas = [torch.zeros(rows, n_pos, src.errors.shape[-1], device=device, requires_grad=True) for _ in rep.sites_out]
        self.deltas.append(torch.zeros(rows, *clean[EMBED].shape[1:], device=device, requires_grad=True))
        for l, site in rep.sites_out.items():
            W_skip = rep.skip(l)
            holds = holds + [Hold(site, clean[site], self.deltas[l]) if W_skip is None else
                             Skip(rep.sites_in[l], site, clean[site], clean[rep.sites_in[l]], W_skip, self.deltas[l])]
        holds.append(Hold(EMBED, clean[EMBED], self.deltas[-1]))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=NORM_WARNINGS)
            _, self.found = run.with_grad(model, tokens.repeat(rows, 1), sites, holds)

    def rows_of(self, targets: list[tuple[str, int, Tensor]]) -> Tensor:
        """Targets (site, position, input vector) -> [len, sources]: features, errors (layer-major), tokens."""
        t, src = time.perf_counter(), self.src
        loss = torch.zeros((), device=self.deltas[0].device)
        for site in dict.fromkeys(s for s, _, _ in targets):
            r = [i for i, (s, _, _) in enumerate(targets) if s == site]
            p = torch.tensor([targets[i][1] for i in r])  # cpu: indices, any device's
            act = self.found[site]
            v = torch.stack([targets[i][2] for i in r]).to(act.device)
            loss = loss + (act[torch.tensor(r), p].float() * v).sum()  # cpu: indices, any device's
        grads = torch.autograd.grad(loss, self.deltas, retain_graph=True, allow_unused=True)
        grads = [torch.zeros_like(x) if g is None else g.float() for g, x in zip(grads, self.deltas)]
        cols = []
        for layer, (pos, vecs) in src.dec.items():  # a feature's effect: the sum over the layers it writes
            diagonal = torch.arange(len(pos), device=pos.device)
            cols.append(sum((grads[layer + j] @ vecs[:, j].T)[:, pos, diagonal] for j in range(vecs.shape[1])))  # [rows, k]
        cols.append(torch.einsum("lpd,blpd->blp", src.errors, torch.stack(grads[:-1], 1)).flatten(1))
        cols.append((grads[-1] * src.embed).sum(-1))
        self.seconds += time.perf_counter() - t
        return torch.cat([c.to(cols[-1].device) for c in cols], 1)[: len(targets)].cpu()


def _feature_rows(bwd: _Backward, logit_rows: Tensor, probs: Tensor, sites: dict[int, str], budget: int,
                  batch: int, progress: bool, rank_every: int = 4) -> tuple[Tensor, Tensor, float]:  # cpu: host-side, on rows_of's host rows
    """(rows [features, sources], chosen [features], seconds ranking): all features' rows, or
    `budget` of them taken most influential first through the rows known so far, the ranking redone
    every `rank_every` batches (circuit-tracer's order and its update interval)."""
    src = bwd.src
    n_feat, n_src = src.n_features, logit_rows.shape[1]
    rows, chosen = torch.zeros(n_feat, n_src), torch.zeros(n_feat, dtype=torch.bool)
    ranking = 0.0
    bar = tqdm(total=budget, desc="feature rows", disable=not progress or budget <= batch)
    while int(chosen.sum()) < budget:
        if budget == n_feat:
            queue = torch.nonzero(~chosen).flatten()
        else:
            t = time.perf_counter()
            known = torch.nonzero(chosen).flatten()
            row_node = torch.cat([torch.arange(n_src, n_src + len(probs)), known])
            inf = _partial_influence(torch.cat([logit_rows, rows[known]]), row_node, probs, n_src + len(probs))
            order = torch.argsort(inf[:n_feat], descending=True)
            queue = order[~chosen[order]][: min(rank_every * batch, budget - int(chosen.sum()))]
            ranking += time.perf_counter() - t
        for todo in queue.split(batch):
            rows[todo] = bwd.rows_of([(sites[int(src.layer[i])], int(src.pos[i]), src.input_vector(i)) for i in todo.tolist()])
            chosen[todo] = True
            bar.update(len(todo))
    bar.close()
    return rows, chosen, ranking


def _count(value, name: str, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise InterpError(f"{name} must be an int >= {lo}, got {value!r}")


def _check_options(model, baseline, max_logits, logit_prob, max_feature_nodes, batch_size) -> None:
    """attribute's options, refused before any forward: a vocab id outside the vocabulary (it
    indexed W_U, and a negative one silently counted from the end), no logits, a probability
    outside (0, 1], a flag where a count goes."""
    d_vocab = model.cfg.d_vocab
    if isinstance(baseline, bool) or (baseline != "mean" and not isinstance(baseline, (str, int))) \
            or (isinstance(baseline, int) and not 0 <= baseline < d_vocab):
        raise InterpError(f"baseline must be 'mean', a token string or a vocab id in [0, {d_vocab}), got {baseline!r}")
    _count(max_logits, "max_logits", 1)
    _count(batch_size, "batch_size", 1)
    if max_feature_nodes is not None:
        _count(max_feature_nodes, "max_feature_nodes", 0)
    if isinstance(logit_prob, bool) or not isinstance(logit_prob, (int, float)) or not 0 < logit_prob <= 1:
        raise InterpError(f"logit_prob must be a probability in (0, 1], got {logit_prob!r}")


@records_peak
def attribute(
    model,
    prompt: str | Tensor,
    transcoders: Transcoders,
    *,
    targets: Sequence[str | int] | None = None,
    baseline: str | int = "mean",
    max_logits: int = 10,
    logit_prob: float = 0.95,
    max_feature_nodes: int | None = None,
    batch_size: int = 32,
    drop_bos: bool = True,
    progress: bool = True,
) -> AttributionGraph:
    """The attribution graph of `prompt` (a string or token ids) through `transcoders`: one
    Dictionary per layer (a layer without one is all error), or one CrossLayerTranscoder (a feature
    writes to its layer's MLP output and every later one's). A skip path (W_skip) stays a live
    linear path from the MLP's input to its output (`Skip`). Logit nodes: `targets` (answer strings
    or vocab ids), else the most probable next tokens until `logit_prob` of the probability (at most
    `max_logits`). `baseline`: "mean" (each logit minus the vocabulary's mean logit, circuit-tracer)
    or a token (each logit minus that token's: a logit difference). `max_feature_nodes`: attribute
    only that many features, chosen by their influence so far (circuit-tracer's ranking); None: all.
    `batch_size` target rows share one backward. See the module docstring for the method."""
    _check_options(model, baseline, max_logits, logit_prob, max_feature_nodes, batch_size)
    t0 = time.perf_counter()
    tokens = _prompt_tokens(model, prompt)
    rep = replacement(model, transcoders)
    n_layers, n_pos = model.cfg.n_layers, tokens.shape[1]
    freeze = _frozen_names(model)
    logits, clean = run.cache(model, tokens, list(dict.fromkeys(
        [*rep.sites_in.values(), *rep.sites_out.values(), EMBED, UNEMBED, *freeze])))
    bos = getattr(getattr(model, "tokenizer", None), "bos_token_id", None)
    skip = int(bool(drop_bos and bos is not None and int(tokens[0, 0]) == bos))
    src = _sources(clean, rep, skip)
    ids, probs, logit_vecs = _logit_targets(model, logits[0, -1], targets, baseline, max_logits, logit_prob)
    sites = {l: rep.sites_in[l] for l in src.enc}
    t_fwd = time.perf_counter()
    bwd = _Backward(model, tokens, clean, [Hold(n, clean[n]) for n in freeze if n in clean], rep,
                    list(dict.fromkeys([*sites.values(), UNEMBED])), src, batch_size)
    t_fwd = time.perf_counter() - t0
    logit_rows = torch.cat([bwd.rows_of([(UNEMBED, n_pos - 1, v) for v in logit_vecs[i:i + batch_size]])
                            for i in range(0, len(ids), batch_size)])
    n_feat = src.n_features
    budget = n_feat if max_feature_nodes is None else max(0, min(int(max_feature_nodes), n_feat))
    feat_rows, chosen, ranking = _feature_rows(bwd, logit_rows, probs, sites, budget, batch_size, progress)
    strings = [str(s) for s in model.to_str_tokens(tokens[0])]
    meta = {
        "n_layers": n_layers, "prompt": prompt if isinstance(prompt, str) else model.tokenizer.decode(tokens[0].tolist()),
        "baseline": baseline, "drop_bos": bool(skip), "transcoder_layers": rep.layers,
        "transcoder": "cross-layer" if rep.clt is not None else "per-layer",
        "n_active_features": n_feat, "max_feature_nodes": max_feature_nodes, "batch_size": batch_size,
        "logit_tokens": {str(int(i)): str(model.tokenizer.decode([int(i)])) for i in ids},
        "seconds": {"total": time.perf_counter() - t0, "forward": t_fwd, "backward": bwd.seconds, "ranking": ranking},
    }
    return _assemble(src, feat_rows, chosen, logit_rows, ids, probs, tokens[0].cpu(), strings, model_label(model), meta)


def _assemble(src: _Sources, feat_rows: Tensor, chosen: Tensor, logit_rows: Tensor, ids: Tensor, probs: Tensor,
              token_ids: Tensor, strings: list[str], model: str, meta: dict) -> AttributionGraph:  # cpu: host-side, on rows_of's host rows
    """The graph of the chosen features, every error and token, and the logits (circuit-tracer's order)."""
    n_feat, (n_layers, n_pos, _) = src.n_features, src.errors.shape
    keep = torch.cat([torch.nonzero(chosen).flatten(), torch.arange(n_feat, logit_rows.shape[1])])
    k, n_logit = int(chosen.sum()), len(ids)
    n = len(keep) + n_logit
    adjacency = torch.zeros(n, n)
    adjacency[:k, : len(keep)] = feat_rows[chosen][:, keep]
    adjacency[len(keep):, : len(keep)] = logit_rows[:, keep]
    n_err = n_layers * n_pos
    return AttributionGraph(
        adjacency=adjacency,
        kind=torch.cat([torch.full((k,), FEATURE), torch.full((n_err,), ERROR), torch.full((n_pos,), TOKEN),
                        torch.full((n_logit,), LOGIT)]),
        layer=torch.cat([src.layer[chosen], torch.arange(n_layers).repeat_interleave(n_pos), torch.full((n_pos,), -1),
                         torch.full((n_logit,), n_layers)]),
        pos=torch.cat([src.pos[chosen], torch.arange(n_pos).repeat(n_layers), torch.arange(n_pos),
                       torch.full((n_logit,), n_pos - 1)]),
        index=torch.cat([src.index[chosen], torch.full((n_err,), -1), token_ids, ids]),
        activation=torch.cat([src.act[chosen], torch.zeros(n_err + n_pos + n_logit)]),
        prob=torch.cat([torch.zeros(len(keep)), probs.float()]),
        tokens=tuple(strings), model=model, meta=meta,
    )


def _partial_influence(rows: Tensor, row_node: Tensor, probs: Tensor, n: int, max_iter: int = 1000) -> Tensor:  # cpu: host-side, on rows_of's host rows
    """Influence of every node on the logits through the rows known so far (circuit-tracer's
    ranking for `max_feature_nodes`): rows [r, sources] are the normalised inputs of nodes row_node."""
    norm = rows.abs()
    norm = norm / norm.sum(1, keepdim=True).clamp(min=1e-10)
    weight = torch.zeros(n)
    weight[-len(probs):] = probs
    total = torch.zeros(rows.shape[1])
    step = weight
    for _ in range(max_iter):
        step = step[row_node] @ norm  # [sources]
        if not bool(step.any()):
            return total
        total += step
        step = torch.cat([step, torch.zeros(n - len(step))])
    raise InterpError("feature ranking did not converge: the rows form a cycle")
