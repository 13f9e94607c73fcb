"""The steering generator (own greedy/sampling loop with a KV cache), the hook it installs, and
the analyses that run the model: axis_from_contrast, curve.

See interp.steering for the vocabulary and for why the cache is passed under two names.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from interp.hooks import check_hook_names, hooks
from interp.model import kv_cache_kwargs, new_kv_cache
from interp.results import Grid
from interp.steering.axes import Axis, Generation, Intervention, projection, apply, site_name

POSITIONS: tuple[str, ...] = ("all", "prompt", "generated")
_RESID_SUFFIXES = ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out", "hook_mlp_out")


class _Plan:
    """Per-forward state the steering hooks read: where to steer, and where projections go.

    Created by one `generate` / `curve` call and dropped when it returns (no global state).
    """

    def __init__(self, n_interventions: int, record: bool) -> None:
        self.where: Tensor | None = None  # [batch, pos] bool for the forward about to run
        self.record = record
        self.rows: list[list[Tensor]] = [[] for _ in range(n_interventions)]  # per step: [batch]


def steering_hook(interventions: Sequence[tuple[int, Intervention]], plan: _Plan):
    """A hook applying (index, intervention) pairs in order at one site, where `plan.where` is True.

    Records each intervention's projection at the last position (before it acts) into plan.rows.
    """

    def hook_fn(act: Float[Tensor, "batch pos d_model"], *, hook) -> Tensor:
        where = plan.where
        if where is None or where.shape != act.shape[:2]:
            raise RuntimeError(f"steering plan {None if where is None else tuple(where.shape)} does not match "
                               f"the activation {tuple(act.shape)} at {hook.name}")
        mask = where[..., None]  # [batch, pos, 1]
        for i, iv in interventions:
            if plan.record:
                plan.rows[i].append(projection(act[:, -1], iv.axis).detach().float())
            act = torch.where(mask, apply(act, iv), act)
        return act

    return hook_fn


# ---------------------------------------------------------------------------------------------
# layer 3: running the model


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _pad_id(model) -> int:
    tok = getattr(model, "tokenizer", None)
    for name in ("pad_token_id", "eos_token_id"):
        value = getattr(tok, name, None)
        if value is not None:
            return int(value)
    return 0


def _eos_id(model) -> int | None:
    tok = getattr(model, "tokenizer", None)
    return None if getattr(tok, "eos_token_id", None) is None else int(tok.eos_token_id)


def encode(model, prompts: Sequence[str]) -> tuple[Int[Tensor, "batch pos"], Int[Tensor, "batch pos"], Int[Tensor, "batch pos"]]:
    """Left-padded tokens, attention mask (1 = real) and position ids (0.. per row) of `prompts`.

    Each prompt is tokenized alone (with the model's BOS policy), so padding cannot change it.
    """
    if isinstance(prompts, str):
        prompts = [prompts]
    if not prompts:
        raise ValueError("no prompts given")
    rows = [model.to_tokens(p, move_to_device=False)[0] for p in prompts]
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), _pad_id(model), dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        tokens[i, width - len(r):] = r
        mask[i, width - len(r):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # pads get 0; they are masked out anyway
    dev = _device(model)
    return tokens.to(dev), mask.to(dev), positions.to(dev)


def _check_sites(model, interventions: Sequence[Intervention]) -> None:
    check_hook_names(model, [iv.axis.site for iv in interventions])
    d = model.cfg.d_model
    for iv in interventions:
        if not iv.axis.site.endswith(_RESID_SUFFIXES):
            raise ValueError(f"site {iv.axis.site!r} is not a residual-stream-width activation; steer at one of "
                             f"blocks.L.{{{', '.join(_RESID_SUFFIXES)}}}")
        if iv.axis.d_model != d:
            raise ValueError(f"the axis at {iv.axis.site} has {iv.axis.d_model} dims but the model has d_model={d}")


def _steering_hooks(interventions: Sequence[Intervention], plan: _Plan) -> list[tuple[str, Any]]:
    by_site: dict[str, list[tuple[int, Intervention]]] = {}
    for i, iv in enumerate(interventions):
        by_site.setdefault(iv.axis.site, []).append((i, iv))
    return [(site, steering_hook(ivs, plan)) for site, ivs in by_site.items()]


def _sample(logits: Float[Tensor, "batch d_vocab"], do_sample: bool, temperature: float, top_p: float | None,
            generator: torch.Generator | None) -> Int[Tensor, " batch"]:
    if not do_sample:
        return logits.argmax(-1)
    probs = (logits.float() / temperature).softmax(-1)
    if top_p is not None and top_p < 1.0:
        sorted_p, order = probs.sort(-1, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p  # always keeps the most likely token
        sorted_p = sorted_p * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def generate(
    model,
    prompts: str | Sequence[str],
    interventions: Intervention | Sequence[Intervention] = (),
    *,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float | int = 1.0,
    top_p: float | int | None = None,
    seed: int | None = None,
    positions: str = "all",  # one of POSITIONS
    stop_at_eos: bool = True,
    use_cache: bool = True,
    record: bool = True,
) -> Generation:
    """Generate continuations of `prompts` with `interventions` applied at every forward pass.

    positions: "all" steers every real position, "prompt" only prompt tokens, "generated" only
    tokens the model generated (so the first new token is predicted unsteered). Greedy unless
    `do_sample`; `seed` makes sampling reproducible. `use_cache=False` reruns the whole sequence
    each step (the reference the cached path must match token for token).
    """
    prompts = [prompts] if isinstance(prompts, str) else list(prompts)
    interventions = [interventions] if isinstance(interventions, Intervention) else list(interventions)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens!r} must be an integer >= 1")
    if positions not in POSITIONS:
        raise ValueError(f"positions={positions!r} is not one of {POSITIONS}")
    if do_sample and not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature={temperature} must be a positive number when sampling")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p={top_p} must lie in (0, 1]")
    for iv in interventions:
        if not isinstance(iv, Intervention):
            raise TypeError(f"interventions must be Intervention objects, got {type(iv).__name__}")
    _check_sites(model, interventions)

    dev = _device(model)
    tokens, mask, pos_ids = encode(model, prompts)
    batch, width = tokens.shape
    prompt_len = mask.sum(-1)
    generator = torch.Generator(device=dev).manual_seed(seed) if seed is not None else None
    eos = _eos_id(model) if stop_at_eos else None
    pad = _pad_id(model)
    plan = _Plan(len(interventions), record and bool(interventions))
    finished = torch.zeros(batch, dtype=torch.bool, device=dev)
    n_generated = torch.zeros(batch, dtype=torch.long, device=dev)
    alive: list[Tensor] = []  # per step: which rows were still generating
    cache = new_kv_cache(model) if use_cache else None
    cache_kw = kv_cache_kwargs(model, cache) if cache is not None else {}
    new: list[Tensor] = []

    def where_for(is_generated: Bool[Tensor, "batch pos"], real: Tensor) -> Tensor:
        if positions == "all":
            return real
        return real & (is_generated if positions == "generated" else ~is_generated)

    with torch.no_grad(), hooks(model, _steering_hooks(interventions, plan)):
        for step in range(max_new_tokens):
            if cache is None or step == 0:  # the whole sequence so far
                seq = torch.cat([tokens, *[t[:, None] for t in new]], 1) if new else tokens
                full_mask = torch.cat([mask, torch.ones(batch, step, dtype=mask.dtype, device=dev)], 1)
                ids = (full_mask.cumsum(-1) - 1).clamp(min=0)
                is_gen = torch.arange(seq.shape[1], device=dev)[None].expand(batch, -1) >= width
                plan.where = where_for(is_gen, full_mask.bool())
                logits = model(seq, attention_mask=full_mask, position_ids=ids, **cache_kw)
                if cache is not None and cache.get_seq_length() != width:
                    raise RuntimeError(
                        f"the KV cache holds {cache.get_seq_length()} positions after a {width}-token prompt: "
                        "this TransformerLens/transformers pair does not fill the cache; pass use_cache=False")
            else:  # one new token per row, attending to the cache
                full_mask = torch.cat([mask, torch.ones(batch, step, dtype=mask.dtype, device=dev)], 1)
                ids = (prompt_len + step - 1)[:, None]  # [batch, 1]
                plan.where = where_for(torch.ones(batch, 1, dtype=torch.bool, device=dev),
                                       torch.ones(batch, 1, dtype=torch.bool, device=dev))
                logits = model(new[-1][:, None], attention_mask=full_mask, position_ids=ids, **cache_kw)
            nxt = _sample(logits[:, -1], do_sample, temperature, top_p, generator)
            alive.append(~finished)
            nxt = torch.where(finished, torch.full_like(nxt, pad), nxt)
            n_generated += (~finished).long()
            new.append(nxt)
            if eos is not None:
                finished = finished | (nxt == eos)
                if bool(finished.all()):
                    break

    out = torch.cat([tokens, torch.stack(new, 1)], 1)
    completions = tuple(
        model.tokenizer.decode(out[i, width: width + int(n_generated[i])], skip_special_tokens=True).strip()
        for i in range(batch)
    )
    projections = None
    if plan.record:
        live = torch.stack(alive, 1)  # [batch, step]
        # one record per forward; a site runs once per forward, so rows[i] has one entry per step
        projections = torch.stack([torch.stack(r, 1) for r in plan.rows])  # [n_int, batch, step]
        projections = torch.where(live[None].to(projections.device), projections, torch.nan).cpu()
    meta = {"interventions": [f"{iv.mode}({iv.strength:g}) at {iv.axis.site}" for iv in interventions],
            "positions": positions, "do_sample": do_sample, "seed": seed, "use_cache": use_cache,
            "model": getattr(model.cfg, "model_name", "")}
    return Generation(tuple(prompts), completions, out.cpu(), prompt_len.cpu(), n_generated.cpu(), projections, meta)


def _last_activations(model, prompts: Sequence[str], site: str, batch_size: int = 64) -> Float[Tensor, "n d_model"]:
    """The activation at `site` on the last token of each prompt (left padding, masked)."""
    check_hook_names(model, [site])
    out: list[Tensor] = []

    def grab(act: Tensor, *, hook) -> None:
        out.append(act[:, -1].detach().float().cpu())

    with torch.no_grad(), hooks(model, [(site, grab)]):
        for start in range(0, len(prompts), batch_size):
            tokens, mask, ids = encode(model, prompts[start: start + batch_size])
            model(tokens, attention_mask=mask, position_ids=ids, stop_at_layer=_stop_layer(model, site))
    return torch.cat(out)


def _stop_layer(model, site: str) -> int | None:
    """Run only the blocks up to `site` when it is inside a block (saves the rest of the forward)."""
    parts = site.split(".")
    if parts[0] == "blocks" and parts[1].isdigit() and int(parts[1]) + 1 < model.cfg.n_layers:
        return int(parts[1]) + 1
    return None


def axis_from_contrast(model, positive: Sequence[str], negative: Sequence[str], *, site: str | int) -> Axis:
    """Difference-of-means axis at `site`, read at the last token of each prompt.

    u = normalise(mean(positive) - mean(negative)); mu = the midpoint of the two means, so a flip
    maps one class mean onto the other. proj_mean/proj_std are over positive and negative together.
    """
    site = site_name(site)
    if len(positive) < 1 or len(negative) < 1:
        raise ValueError(f"need at least one prompt per class, got {len(positive)} positive and {len(negative)} negative")
    check_hook_names(model, [site])
    x_pos, x_neg = _last_activations(model, list(positive), site), _last_activations(model, list(negative), site)
    if x_pos.shape[1] != model.cfg.d_model:
        raise ValueError(f"site {site} has width {x_pos.shape[1]}, not d_model={model.cfg.d_model}; use a residual-stream site")
    m_pos, m_neg = x_pos.mean(0), x_neg.mean(0)
    diff = m_pos - m_neg
    if float(diff.norm()) == 0.0:
        raise ValueError("the two classes have identical mean activations; there is no direction between them")
    mean = (m_pos + m_neg) / 2
    axis = Axis(diff / diff.norm(), mean, site)
    c = projection(torch.cat([x_pos, x_neg]), axis)
    meta = {"method": "diff_means", "n_positive": len(positive), "n_negative": len(negative),
            "separation": float(diff.norm()), "positive_mean": float(projection(x_pos, axis).mean()),
            "negative_mean": float(projection(x_neg, axis).mean()), "model": getattr(model.cfg, "model_name", "")}
    return Axis(axis.direction, mean, site, float(c.mean()), float(c.std()), meta)


def curve(model, task, axis: Axis, strengths: Sequence[float | int], *, mode: str = "flip") -> Grid:
    """Dose-response: the task metric with `Intervention(axis, mode, s)` for each strength s.

    The intervention acts at every real position up to each example's answer position. Returns a
    Grid (strength, metric) with metrics "logit_diff" (correct minus incorrect, mean) and
    "accuracy" (fraction where correct beats incorrect).
    """
    if not len(strengths):
        raise ValueError("give at least one strength")
    ivs = [Intervention(axis, mode, float(s)) for s in strengths]
    _check_sites(model, ivs[:1])
    dev = _device(model)
    t = task.to(dev)
    batch, width = t.clean.shape
    where = torch.arange(width, device=dev)[None] <= t.answer_pos[:, None]  # [batch, pos]
    rows = torch.arange(batch, device=dev)
    values = torch.zeros(len(ivs), 2)
    plan = _Plan(1, record=False)
    plan.where = where
    with torch.no_grad():
        for k, iv in enumerate(ivs):
            with hooks(model, [(axis.site, steering_hook([(0, iv)], plan))]):
                logits = model(t.clean)[rows, t.answer_pos]  # [batch, d_vocab]
            diff = logits[rows, t.correct] - logits[rows, t.incorrect]
            values[k] = torch.stack([diff.mean(), (diff > 0).float().mean()]).cpu()
    return Grid(values, ("strength", "metric"), (tuple(float(s) for s in strengths), ("logit_diff", "accuracy")),
                {"task": task.name, "split": task.split, "mode": mode, "site": axis.site, "method": f"steer {mode}",
                 "metric": "task metric", "model": getattr(model.cfg, "model_name", "")})
