"""QK attribution: which features at the query and at the key drive one attention score.

For head h of layer l, query position q and key position k, the pre-softmax score is

    s = <q_vec, k_vec> * scale,   q_vec = rope_q(W_Q^T norm(r_q)) + its bias   (likewise k_vec)

with r_p the residual entering block l at position p. With the norm's scale frozen at its clean
value (as the attribution graph freezes it), q_vec is affine in r_q: for any split r_q = sum_i c_i,
q_vec = sum_i J c_i + q_0, q_0 being the query of a zero residual (the norm's bias, b_Q). The
residual entering block l splits into parts, each a node of the attribution graph or named here:

    token      the embedding at p (block 0's input: the graph's token node)
    attn       each earlier layer's attention output at p
    feature    each active feature's writes to the earlier layers (a CLT feature's summed)
    error      each earlier layer's error node
    mlp bias   each earlier layer's reconstruction without features (b_dec, + the skip path)
    resid      a dropped BOS position's residual, whole (its features are no graph nodes)

so s = sum_{i,j} <J c_i, J c'_j> * scale over the query's parts and bias and the key's: the terms
sum to the score exactly, and `qk_attribution` checks that sum against the model's own
hook_attn_scores. J c_i comes from the model itself: one forward per layer whose rows hold the
parts as the residual entering block l (norm scale held), read at hook_rot_q / hook_rot_k
(hook_q / hook_k without RoPE) minus the zero row, so RoPE, grouped-query heads and the norm are
the model's own code.

    qk_attribution(model, prompt, transcoders, edges)  -> [QKAttribution], one per (layer, head, q, k)
    attention_edges(model, prompt, n)                  -> the n edges carrying most: pattern x |v W_O|
    with_attention(graph, model, transcoders, n, top)  -> the graph with meta["attention"]: each
                                                          edge and its top query/key pairs
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp import run
from interp.errors import InterpError
from interp.features.attribute import NORM_WARNINGS, EMBED, Hold, Replacement, Transcoders, replacement
from interp.features.graph import ERROR, FEATURE, TOKEN, AttributionGraph
from interp.sites import check_tokens
from interp.files.storage import result

__all__ = ["PARTS", "QKAttribution", "attention_edges", "qk_attribution", "with_attention"]

# a part's kind: the graph's node kinds first (feature, error, token), then the parts that are no node
PARTS: tuple[str, ...] = ("feature", "error", "token", "bias", "attn", "mlp bias", "resid")
BIAS, ATTN, MLP_BIAS, RESID = range(3, 7)


@result
@dataclass(frozen=True)
class QKAttribution:
    """One attention score split into query-part x key-part terms (module docstring).

    terms[i, j]: the score's share from query part i and key part j; sum == score. Parts are rows
    of query_parts / key_parts: (kind: index into PARTS, layer, position, feature or token id, -1
    where none); part 0 of each side is its bias. tokens: the prompt's token strings."""

    layer: int
    head: int
    query: int
    key: int
    score: float
    pattern: float
    terms: Float[Tensor, "query_part key_part"]
    query_parts: Int[Tensor, "query_part 4"]
    key_parts: Int[Tensor, "key_part 4"]
    tokens: tuple[str, ...]
    model: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", tuple(self.tokens))
        want = (self.query_parts.shape[0], self.key_parts.shape[0])
        if tuple(self.terms.shape) != want:
            raise InterpError(f"QKAttribution terms have shape {tuple(self.terms.shape)}; want {list(want)} (query parts x key parts)")

    def label(self, part: Tensor | Sequence[int]) -> str:
        """A readable name: "L0 #12 @3 'cat'", "tok @3 'cat'", "err L0 @3", "attn L0 @3", ..."""
        kind, layer, pos, index = (int(v) for v in part)
        tok = repr(self.tokens[pos]) if 0 <= pos < len(self.tokens) else ""
        return {FEATURE: f"L{layer} #{index} @{pos} {tok}", ERROR: f"err L{layer} @{pos} {tok}", TOKEN: f"tok @{pos} {tok}",
                BIAS: "bias", ATTN: f"attn L{layer} @{pos}", MLP_BIAS: f"mlp bias L{layer} @{pos}",
                RESID: f"resid @{pos} {tok} (whole)"}[kind]

    def top(self, n: int = 10) -> list[tuple[int, int, float]]:
        """The n (query part, key part, term) of largest |term|."""
        flat = self.terms.flatten()
        order = torch.argsort(flat.abs(), descending=True)[:n].tolist()
        width = self.terms.shape[1]
        return [(i // width, i % width, float(flat[i])) for i in order]

    def __repr__(self) -> str:
        return (f"QKAttribution(L{self.layer} H{self.head}, query @{self.query} key @{self.key}: score {self.score:.4g}, "
                f"{self.terms.shape[0]} x {self.terms.shape[1]} parts)")


# ---------------------------------------------------------------------------------------------
# the parts of the residual entering a block


def _parts(clean: dict[str, Tensor], rep: Replacement, layer: int, pos: int, skip: int,
           token: int) -> tuple[list[Tensor], list[tuple[int, int, int, int]]]:
    """The parts (vectors [d_model], keys (kind, layer, pos, index)) of the residual entering block
    `layer` at `pos` (module docstring); they sum to it."""
    embed = clean[EMBED][0, pos].float()
    if pos < skip:
        rest = clean[f"blocks.{layer}.hook_resid_pre"][0, pos].float() - embed
        return [embed, rest], [(TOKEN, -1, pos, token), (RESID, layer, pos, -1)]
    vecs, keys = [embed], [(TOKEN, -1, pos, token)]
    acts = {l: rep.encode(l, clean[rep.sites_in[l]][0, pos:pos + 1]).detach() for l in rep.layers if l < layer}
    for m in range(layer):
        vecs.append(clean[f"blocks.{m}.hook_attn_out"][0, pos].float())
        keys.append((ATTN, m, pos, -1))
    for l, a in acts.items():
        idx = torch.nonzero(a[0]).flatten()
        writes = (rep.decoder(l, idx)[:, :layer - l].sum(1) * a[0, idx, None]).to(embed.device)  # its writes below `layer`
        vecs += list(writes)
        keys += [(FEATURE, l, pos, int(i)) for i in idx.tolist()]
    for m in range(layer):
        out = clean[rep.sites_out[m]][0, pos].float()
        x = clean[rep.sites_in[m]][0, pos:pos + 1] if m in rep.sites_in else None
        recon = rep.output(m, acts, x)
        if recon is None:  # no transcoder at m: its whole output is the error node
            vecs.append(out)
            keys.append((ERROR, m, pos, -1))
            continue
        bias = rep.output(m, {l: torch.zeros_like(a) for l, a in acts.items()}, x)[0]
        vecs += [out - recon[0], bias]
        keys += [(ERROR, m, pos, -1), (MLP_BIAS, m, pos, -1)]
    return vecs, keys


def _qk_sites(model, layer: int) -> tuple[str, str]:
    rot = f"blocks.{layer}.attn.hook_rot_q"
    if rot in model.hook_dict:
        return rot, f"blocks.{layer}.attn.hook_rot_k"
    return f"blocks.{layer}.attn.hook_q", f"blocks.{layer}.attn.hook_k"


def _projected(model, tokens: Tensor, clean: dict[str, Tensor], layer: int,
               parts: dict[int, list[Tensor]]) -> tuple[dict[int, Tensor], dict[int, Tensor]]:
    """{pos: [1 + parts, head, d_head]} queries and keys (row 0: the bias; row i: part i's share)
    of the residual parts at each position, from one forward of the model."""
    n_pos, d = tokens.shape[1], clean[EMBED].shape[-1]
    rows = 1 + max(len(v) for v in parts.values())
    device = clean[EMBED].device
    delta = torch.zeros(rows, n_pos, d, device=device)
    for pos, vecs in parts.items():
        delta[1:1 + len(vecs), pos] = torch.stack(vecs).to(device)
    site, scale = f"blocks.{layer}.hook_resid_pre", f"blocks.{layer}.ln1.hook_scale"
    holds = [Hold(site, torch.zeros_like(clean[site]), delta)]
    if scale in clean:
        holds.append(Hold(scale, clean[scale]))
    q_site, k_site = _qk_sites(model, layer)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=NORM_WARNINGS)
        _, got = run.cache(model, tokens.repeat(rows, 1), [q_site, k_site], holds)
    out_q, out_k = {}, {}
    for pos, vecs in parts.items():
        for out, name in ((out_q, q_site), (out_k, k_site)):
            v = got[name][: 1 + len(vecs), pos].float()  # [1 + parts, head, d_head]
            out[pos] = torch.cat([v[:1], v[1:] - v[:1]])
    return out_q, out_k


def _tokens(model, prompt: str | Tensor) -> Tensor:
    tokens = model.to_tokens(prompt, truncate=False) if isinstance(prompt, str) else prompt
    tokens = tokens[None] if tokens.ndim == 1 else tokens
    check_tokens(tokens, "prompt", model=model)
    if tokens.shape[0] != 1:
        raise InterpError(f"QK attribution takes one prompt, got {tokens.shape[0]} rows")
    return tokens.to(model.cfg.device)


def _skip(model, tokens: Tensor, drop_bos: bool) -> int:
    bos = getattr(getattr(model, "tokenizer", None), "bos_token_id", None)
    return int(bool(drop_bos and bos is not None and int(tokens[0, 0]) == bos))


def _check_edges(model, edges, n_pos: int) -> list[tuple[int, int, int, int]]:
    out = []
    for e in edges:
        if len(e) != 4 or not all(isinstance(v, int) and not isinstance(v, bool) for v in e):
            raise InterpError(f"an attention edge is (layer, head, query position, key position) ints, got {e!r}")
        layer, head, q, k = e
        if not (0 <= layer < model.cfg.n_layers and 0 <= head < model.cfg.n_heads and 0 <= k <= q < n_pos):
            raise InterpError(f"attention edge {e!r}: want 0 <= layer < {model.cfg.n_layers}, 0 <= head < "
                              f"{model.cfg.n_heads}, 0 <= key <= query < {n_pos} (a causal model attends backwards)")
        out.append((layer, head, q, k))
    if not out:
        raise InterpError("no attention edges given; pass (layer, head, query, key) tuples or use attention_edges")
    return out


def qk_attribution(model, prompt: str | Tensor, transcoders: Transcoders, edges: Sequence[tuple[int, int, int, int]],
                   *, drop_bos: bool = True) -> list[QKAttribution]:
    """The QK attribution of each attention edge (layer, head, query position, key position) of
    `prompt`, its parts read through `transcoders` (per-layer or one CLT, as `attribute`). Each
    result's terms sum to the model's pre-softmax score (checked: InterpError where they do not).
    On a model that soft-caps its scores (Gemma-2: c * tanh(s / c)) they sum to s, the score before
    the cap, which is `score`; the capped score the softmax reads is meta["capped_score"] (the cap
    is monotone, so the ranking of pairs is the same)."""
    tokens = _tokens(model, prompt)
    rep = replacement(model, transcoders)
    edges = _check_edges(model, edges, tokens.shape[1])
    skip = _skip(model, tokens, drop_bos)
    L = model.cfg.n_layers
    names = [EMBED, *rep.sites_in.values(), *rep.sites_out.values(), *(f"blocks.{l}.{s}" for l in range(L) for s in (
        "hook_resid_pre", "hook_attn_out", "ln1.hook_scale", "attn.hook_attn_scores", "attn.hook_pattern"))]
    _, clean = run.cache(model, tokens, [n for n in dict.fromkeys(names) if n in model.hook_dict])
    strings = tuple(str(s) for s in model.to_str_tokens(tokens[0]))
    cap = getattr(getattr(model.original_model, "config", None), "attn_logit_softcapping", None)
    tol = 1e-3 if clean[EMBED].dtype == torch.float32 else 3e-2
    out = []
    for layer in sorted({e[0] for e in edges}):
        mine = [e for e in edges if e[0] == layer]
        keys, vecs = {}, {}
        for pos in sorted({p for _, _, q, k in mine for p in (q, k)}):
            vecs[pos], keys[pos] = _parts(clean, rep, layer, pos, skip, int(tokens[0, pos]))
            whole = clean[f"blocks.{layer}.hook_resid_pre"][0, pos].float()
            if not torch.allclose(torch.stack(vecs[pos]).sum(0), whole, atol=tol, rtol=tol):
                raise InterpError(f"the residual entering block {layer} is not the sum of the embedding, the attention "
                                  "and the MLP outputs on this model, so it has no QK attribution by parts")
        qs, ks = _projected(model, tokens, clean, layer, vecs)
        scale = _score_scale(model, layer)
        for _, head, q, k in mine:
            kv = head * ks[k].shape[1] // qs[q].shape[1]  # grouped-query heads share a key head
            terms = qs[q][:, head] @ ks[k][:, kv].T * scale  # [1 + query parts, 1 + key parts]
            score = float(clean[f"blocks.{layer}.attn.hook_attn_scores"][0, head, q, k])  # after the cap, if any
            summed = float(terms.sum())
            rebuilt = cap * math.tanh(summed / cap) if cap else summed
            if abs(rebuilt - score) > tol * (1 + abs(score)):
                raise InterpError(f"L{layer} H{head} @{q}<-{k}: the parts' terms sum to {summed:.6g} but the model's score is "
                                  f"{score:.6g}; the score is not <q, k> * {scale:.4g}" + (f", soft-capped at {cap}," if cap else "")
                                  + " on this model")
            bias = [(BIAS, layer, -1, -1)]
            meta = {"drop_bos": bool(skip), **({"softcap": float(cap), "capped_score": score} if cap else {})}
            out.append(QKAttribution(
                layer, head, q, k, summed if cap else score, float(clean[f"blocks.{layer}.attn.hook_pattern"][0, head, q, k]), terms.cpu(),
                torch.tensor(bias + keys[q]), torch.tensor(bias + keys[k]), strings,  # cpu: a result
                model=getattr(model.cfg, "model_name", "") or "", meta=meta))
    return out


def _score_scale(model, layer: int) -> float:
    """The factor on <q, k> in block `layer`: the Hugging Face attention module's own `scaling`
    (Gemma's query_pre_attn_scalar ** -0.5 need not be d_head ** -0.5), else TL's attn_scale, else
    d_head ** -0.5."""
    for module in model.original_model.modules():
        if getattr(module, "layer_idx", None) == layer and isinstance(getattr(module, "scaling", None), float):
            return module.scaling
    given = getattr(model.cfg, "attn_scale", None)  # TL's divisor of q.k; the bridge may leave it unset (-1)
    return 1.0 / given if isinstance(given, (int, float)) and given > 0 else model.cfg.d_head ** -0.5


def attention_edges(model, prompt: str | Tensor, n: int = 8, *, drop_bos: bool = True) -> list[tuple[int, int, int, int]]:
    """The n attention edges (layer, head, query, key) that move the most: pattern x |v_key W_O|
    (the norm of what the head writes at the query from that key), key before query, and neither
    a dropped BOS (where every head parks its attention)."""
    tokens = _tokens(model, prompt)
    skip = _skip(model, tokens, drop_bos)
    L, n_pos = model.cfg.n_layers, tokens.shape[1]
    _, acts = run.cache(model, tokens, [f"blocks.{l}.attn.{s}" for l in range(L) for s in ("hook_pattern", "hook_v")])
    W_O = model.W_O.detach()  # [layer, head, d_head, d_model]
    scores = []
    for l in range(L):
        A, v = acts[f"blocks.{l}.attn.hook_pattern"][0].float(), acts[f"blocks.{l}.attn.hook_v"][0].float()  # [h, q, k], [k, kv, d]
        v = v.repeat_interleave(A.shape[0] // v.shape[1], 1)  # [k, head, d_head]
        size = torch.einsum("khd,hdm->hkm", v, W_O[l].float()).norm(dim=-1)  # [head, key]
        scores.append(A * size[:, None, :])
    s = torch.stack(scores)  # [layer, head, q, k]
    q_idx = torch.arange(n_pos, device=s.device)
    keep = (q_idx[:, None] > q_idx[None, :]) & (q_idx[None, :] >= skip)  # key strictly before query, past BOS
    s = (s * keep).flatten()
    top = torch.argsort(s, descending=True)[:n]
    H = model.cfg.n_heads
    return [(i // (H * n_pos * n_pos), i // (n_pos * n_pos) % H, i // n_pos % n_pos, i % n_pos) for i in top.tolist() if s[i] > 0]


def with_attention(graph: AttributionGraph, model, transcoders: Transcoders, *, n: int = 8, top: int = 10,
                   edges: Sequence[tuple[int, int, int, int]] | None = None) -> AttributionGraph:
    """`graph` with meta["attention"]: for each attention edge (`edges`, else `attention_edges`'
    top n) its score, pattern and top `top` query/key part pairs (label, the graph node id where
    the part is a node of `graph`, and the term), and what the other pairs add up to."""
    order = graph.of("token")[torch.argsort(graph.pos[graph.of("token")])]
    tokens = graph.index[order][None].to(torch.long)
    drop_bos = bool(graph.meta.get("drop_bos", True))
    edges = attention_edges(model, tokens, n, drop_bos=drop_bos) if edges is None else edges
    found = qk_attribution(model, tokens, transcoders, edges, drop_bos=drop_bos) if edges else []
    ids = {(int(k), int(l), int(p), int(i) if int(k) != ERROR else -1): x for k, l, p, i, x in zip(
        graph.kind, graph.layer, graph.pos, graph.index, graph.ids)}
    rows = []
    for qk in found:
        pairs = []
        for i, j, w in qk.top(top):
            qp, kp = qk.query_parts[i], qk.key_parts[j]
            pairs.append({"query": qk.label(qp), "key": qk.label(kp), "query_node": ids.get(tuple(qp.tolist())),
                          "key_node": ids.get(tuple(kp.tolist())), "weight": w})
        rows.append({"layer": qk.layer, "head": qk.head, "query": qk.query, "key": qk.key, "score": qk.score,
                     "pattern": qk.pattern, "pairs": pairs, "rest": qk.score - sum(p["weight"] for p in pairs)})
    return replace(graph, meta={**graph.meta, "attention": rows})
