"""The steering generator (own greedy/sampling loop with a KV cache) and the analyses that run the
model: axis_from_contrast, curve, last_activations.

Every forward runs under `interp.run.intervened` with frozen `Steer` interventions built for that
step (their `where` mask is data). See interp.steering for the vocabulary and for why the cache is
passed under two names.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp import run
from interp.errors import InterpError
from interp.metrics import logit_diff
from interp.model import input_device, name_of
from interp.results import Grid
from interp.sites import check_hook_names, hook_name, kind_of
from interp.tasks.base import pad_id
from interp.steering.axes import Axis, Generation, Steer, projection
from interp.memory import records_peak

__all__ = ["POSITIONS", "axis_from_contrast", "curve", "encode", "generate", "last_activations"]

POSITIONS: tuple[str, ...] = ("all", "prompt", "generated")


def _pad_id(model) -> int:
    pad = pad_id(model)  # none: EOS, else 0 (the attention mask hides pads either way)
    return pad if pad is not None else (_eos_id(model) or 0)


def _eos_id(model) -> int | None:
    tok = getattr(model, "tokenizer", None)
    return None if getattr(tok, "eos_token_id", None) is None else int(tok.eos_token_id)


def encode(model, prompts: str | Sequence[str]) -> tuple[Int[Tensor, "batch pos"], Int[Tensor, "batch pos"], Int[Tensor, "batch pos"]]:
    """Left-padded tokens, attention mask (1 = real) and position ids (0.. per row) of `prompts`.

    Each prompt is tokenized alone (with the model's BOS policy), so padding cannot change it.
    """
    if isinstance(prompts, str):
        prompts = [prompts]
    if not prompts:
        raise InterpError("no prompts given")
    rows = [model.to_tokens(p, move_to_device=False, truncate=False)[0] for p in prompts]  # too long: refused by generate
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), _pad_id(model), dtype=torch.long)  # cpu: prompts; moved at generation
    mask = torch.zeros(len(rows), width, dtype=torch.long)  # cpu: prompts; moved at generation
    for i, r in enumerate(rows):
        tokens[i, width - len(r):] = r
        mask[i, width - len(r):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # pads get 0; they are masked out anyway
    dev = input_device(model)
    return tokens.to(dev), mask.to(dev), positions.to(dev)


def _check_steers(model, steers: Sequence[Steer]) -> None:
    for iv in steers:
        if not isinstance(iv, Steer):
            raise InterpError(f"steering takes Steer interventions, got {type(iv).__name__}")
    check_hook_names(model, [iv.axis.site for iv in steers])
    d = model.cfg.d_model
    for iv in steers:
        if kind_of(iv.axis.site) != "resid":
            raise InterpError(f"site {iv.axis.site!r} is not a residual-stream-width activation; steer at "
                              "resid_pre, resid_mid, resid_post, attn_out or mlp_out of a layer")
        if iv.axis.d_model != d:
            raise InterpError(f"the axis at {iv.axis.site} has {iv.axis.d_model} dims but the model has d_model={d}")


def _sample(logits: Float[Tensor, "batch d_vocab"], do_sample: bool, temperature: float, top_p: float | None,
            generator: torch.Generator) -> Int[Tensor, " batch"]:
    if not do_sample:
        return logits.argmax(-1)
    probs = (logits.float() / temperature).softmax(-1)
    if top_p is not None and top_p < 1.0:
        sorted_p, order = probs.sort(-1, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p  # always keeps the most likely token
        sorted_p = sorted_p * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def _projections_before(steers: Sequence[Steer], found: dict[str, Tensor], start: int) -> list[Tensor]:
    """Each steer's projection on the captured last-position activation of its site ([batch]),
    read before it acts: earlier steers at the same site are applied first, in list order."""
    out: list[Tensor] = []
    current = dict(found)  # site -> [batch, 1, d_model]
    for iv in steers:
        h = current[iv.axis.site]
        out.append(projection(h[:, 0], iv.axis).float())
        current[iv.axis.site] = iv(h, site=iv.axis.site, start=start)
    return out


@records_peak
def generate(
    model,
    prompts: str | Sequence[str],
    interventions: Steer | Sequence[Steer] = (),
    *,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float | int = 1.0,
    top_p: float | int | None = None,
    seed: int = 0,
    positions: str = "all",  # one of POSITIONS
    stop_at_eos: bool = True,
    use_cache: bool = True,
    record: bool = True,
    native: bool | None = None,
) -> Generation:
    """Generate continuations of `prompts` with the `Steer` interventions applied at every forward.

    positions: "all" steers every real position, "prompt" only prompt tokens, "generated" only
    tokens the model generated (so the first new token is predicted unsteered); a Steer given here
    has no `where` of its own (generate builds it). Greedy unless `do_sample`; sampling draws from a
    torch.Generator seeded with `seed`. `use_cache=False` reruns the whole sequence each step (the
    reference the cached path must match token for token). `record` captures the activation at
    each steer's site, at the position that predicts each step, and stores its projections.

    `native`: run the HF model under the bridge without the bridge's wrappers (`interp.run.decoder`:
    plain PyTorch hooks at the steers' sites only, HF's KV cache and SDPA attention), which costs
    what HF `generate` costs. None (default) does so whenever it can: cached, every site the
    residual stream entering or leaving a block, and no hook of the caller's on the bridge; else
    the bridge runs every forward. True requires it; False never.
    """
    prompts, steers = _checked(model, prompts, interventions, max_new_tokens, positions, do_sample, temperature, top_p)
    sites = sorted({iv.axis.site for iv in steers})
    step_forward = run.decoder(model, sites, cached=use_cache, native=native)

    dev = input_device(model)
    tokens, mask, _ = encode(model, prompts)
    (batch, width), prompt_len = tokens.shape, mask.sum(-1)
    _check_context(model, width, max_new_tokens)
    generator = torch.Generator(device=dev).manual_seed(seed)
    eos, pad = _eos_id(model) if stop_at_eos else None, _pad_id(model)
    record = record and bool(steers)
    finished, n_generated = torch.zeros(batch, dtype=torch.bool, device=dev), torch.zeros(batch, dtype=torch.long, device=dev)
    # per step: which rows were still generating, one [batch] projection per steer, the new tokens
    alive, recorded, new = [], [], []
    kv = step_forward.new_cache()
    cache_kw = step_forward.cache_kwargs(kv)

    for step in range(max_new_tokens):
        full_mask = torch.cat([mask, torch.ones(batch, step, dtype=mask.dtype, device=dev)], 1)
        where = _steered(full_mask.bool(), width, positions)
        step_steers = [replace(iv, where=where) for iv in steers]  # frozen, built for this step
        if kv is None or step == 0:  # the whole sequence so far
            seq = torch.cat([tokens, *[t[:, None] for t in new]], 1) if new else tokens
            ids, start = (full_mask.cumsum(-1) - 1).clamp(min=0), 0
        else:  # one new token per row, attending to the cache
            seq, ids, start = new[-1][:, None], (prompt_len + step - 1)[:, None], width + step - 1
        logits, seen = step_forward(step_steers, seq, start=start, record=sites if record else (),
                                    attention_mask=full_mask, position_ids=ids, **cache_kw)
        found = {site: act[:, -1:] for site, act in seen.items()}  # the position that predicts this step
        if kv is not None and step == 0:
            _check_filled(kv, width)
        if record:
            recorded.append(_projections_before(step_steers, found, width + step - 1))
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
    completions = _decoded(model, out, width, n_generated)
    meta = {"interventions": [str(iv) for iv in steers], "positions": positions, "do_sample": do_sample,
            "seed": seed, "use_cache": use_cache, "native": step_forward.native, "model": name_of(model)}
    projections = _projections(alive, recorded) if record else None
    return Generation(tuple(prompts), completions, out.cpu(), prompt_len.cpu(), n_generated.cpu(), projections, meta)


def _check_context(model, width: int, max_new_tokens: int) -> None:
    if model.cfg.n_ctx and width + max_new_tokens - 1 > model.cfg.n_ctx:  # the last forward reads that many positions
        raise InterpError(f"a prompt of {width} tokens and max_new_tokens={max_new_tokens} run past the model's context "
                          f"(n_ctx={model.cfg.n_ctx}); pass at most {max(0, model.cfg.n_ctx + 1 - width)} new tokens "
                          "or a shorter prompt")


def _decoded(model, out: Tensor, width: int, n_generated: Tensor) -> tuple[str, ...]:
    """Each row's generated tokens (after the padded prompt width), decoded."""
    return tuple(model.tokenizer.decode(out[i, width: width + int(n_generated[i])], skip_special_tokens=True).strip()
                 for i in range(out.shape[0]))


def _check_filled(kv, width: int) -> None:
    if kv.get_seq_length() != width:
        raise InterpError(f"the KV cache holds {kv.get_seq_length()} positions after a {width}-token prompt: "
                          "this TransformerLens/transformers pair does not fill the cache; pass use_cache=False")


def _steered(real: Tensor, width: int, positions: str) -> Tensor:
    """[batch, pos] which positions a step steers: real ones, all or only the prompt's / generated."""
    if positions == "all":
        return real
    is_gen = torch.arange(real.shape[1], device=real.device)[None].expand(real.shape[0], -1) >= width
    return real & (is_gen if positions == "generated" else ~is_gen)


def _checked(model, prompts, interventions, max_new_tokens, positions, do_sample, temperature, top_p):
    """(prompts as a list of str, steers as a list): generate's arguments, checked before any forward."""
    given = prompts
    prompts = [prompts] if isinstance(prompts, str) else [] if isinstance(prompts, torch.Tensor) else list(prompts)
    if not prompts or not all(isinstance(p, str) for p in prompts):  # token ids fail here, not in the tokenizer
        raise InterpError(f"prompts is a {type(given).__name__}; pass text (a str or a non-empty list of str): "
                          "generate tokenizes it itself")
    steers = [interventions] if isinstance(interventions, Steer) else list(interventions)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise InterpError(f"max_new_tokens={max_new_tokens!r} must be an integer >= 1")
    if positions not in POSITIONS:
        raise InterpError(f"positions={positions!r} is not one of {POSITIONS}")
    if do_sample and not (temperature > 0 and math.isfinite(temperature)):
        raise InterpError(f"temperature={temperature} must be a positive number when sampling")
    if top_p is not None and not 0 < top_p <= 1:
        raise InterpError(f"top_p={top_p} must lie in (0, 1]")
    _check_steers(model, steers)
    if any(iv.where is not None for iv in steers):
        raise InterpError("generate chooses the steered positions itself (positions=...); pass Steer without `where`")
    return prompts, steers


def _projections(alive: list[Tensor], recorded: list[list[Tensor]]) -> Tensor:
    """[n_steer, batch, step] projections recorded at each step, NaN where a row had stopped."""
    live = torch.stack(alive, 1)  # [batch, step]
    projections = torch.stack([torch.stack(per_step, 1) for per_step in zip(*recorded)])  # [n_steer, batch, step]
    return torch.where(live[None].to(projections.device), projections, torch.nan).cpu()


def _stop_layer(model, site: str) -> int | None:
    """Run only the blocks up to `site` when it is inside a block (saves the rest of the forward)."""
    parts = site.split(".")
    if parts[0] == "blocks" and parts[1].isdigit() and int(parts[1]) + 1 < model.cfg.n_layers:
        return int(parts[1]) + 1
    return None


def last_activations(model, prompts: Sequence[str], *, site: str, layer: int | None = None,
                     batch_size: int = 64) -> Float[Tensor, "n d"]:
    """The activation at `site` on the last token of each prompt ([n, width], float32, CPU);
    prompts run left-padded in batches, with an attention mask and per-row position ids."""
    site = hook_name(site, layer)
    prompts = [prompts] if isinstance(prompts, str) else list(prompts)
    if not prompts:
        raise InterpError("no prompts given; pass a str or a non-empty list of str")
    out: list[Tensor] = []
    for start in range(0, len(prompts), batch_size):
        tokens, mask, ids = encode(model, prompts[start: start + batch_size])
        with torch.no_grad(), run.intervened(model, (), record=[site]) as seen:
            model(tokens, attention_mask=mask, position_ids=ids, stop_at_layer=_stop_layer(model, site))
        out.append(seen[site][:, -1].float().cpu())
    return torch.cat(out)


def axis_from_contrast(model, positive: Sequence[str], negative: Sequence[str], *, site: str,
                       layer: int | None = None) -> Axis:
    """Difference-of-means axis at `site` (short name with `layer`, or a hook name), read at the
    last token of each prompt.

    u = normalise(mean(positive) - mean(negative)); mu = the midpoint of the two means, so a flip
    maps one class mean onto the other. proj_mean/proj_std are over positive and negative together.
    """
    site = hook_name(site, layer)
    if len(positive) < 1 or len(negative) < 1:
        raise InterpError(f"need at least one prompt per class, got {len(positive)} positive and {len(negative)} negative")
    check_hook_names(model, [site])
    x_pos, x_neg = last_activations(model, list(positive), site=site), last_activations(model, list(negative), site=site)
    if x_pos.shape[1] != model.cfg.d_model:
        raise InterpError(f"site {site} has width {x_pos.shape[1]}, not d_model={model.cfg.d_model}; use a residual-stream site")
    m_pos, m_neg = x_pos.mean(0), x_neg.mean(0)
    diff = m_pos - m_neg
    if float(diff.norm()) == 0.0:
        raise InterpError("the two classes have identical mean activations; there is no direction between them")
    mean = (m_pos + m_neg) / 2
    axis = Axis(diff / diff.norm(), mean, site)
    c = projection(torch.cat([x_pos, x_neg]), axis)
    meta = {"method": "diff_means", "n_positive": len(positive), "n_negative": len(negative),
            "separation": float(diff.norm()), "positive_mean": float(projection(x_pos, axis).mean()),
            "negative_mean": float(projection(x_neg, axis).mean()), "model": name_of(model)}
    return Axis(axis.direction, mean, site, float(c.mean()), float(c.std()), meta)


@records_peak
def curve(model, task, axis: Axis, strengths: Sequence[float | int], *, mode: str = "flip",
          variants_per_forward: int | None = None, progress: bool = True) -> Grid:
    """Dose-response: the task metric with `Steer(axis, mode, s)` for each strength s.

    The steer acts at every position up to each example's answer position. The strengths are
    variants of one `interp.run.evaluate` (batched side by side, both metrics in one pass). Returns a Grid
    (strength, metric) with metrics "logit_diff" (correct minus incorrect, mean) and "accuracy"
    (fraction where correct beats incorrect).
    """
    if not len(strengths):
        raise InterpError("give at least one strength")
    dev = input_device(model)
    t = task.to(dev)
    batch, width = t.clean.shape
    where = torch.arange(width, device=dev)[None] <= t.answer_pos[:, None]  # [batch, pos]
    variants = [[Steer(axis, mode, float(s), where)] for s in strengths]
    _check_steers(model, variants[0])

    def diff(logits: Tensor) -> Tensor:
        return logit_diff(logits, t.correct, t.incorrect, t.answer_pos)  # [batch]

    values = run.evaluate(model, t.clean, variants,
                          lambda logits: {"logit_diff": diff(logits).mean(), "accuracy": (diff(logits) > 0).float().mean()},
                          variants_per_forward=variants_per_forward, answer_pos=t.answer_pos, progress=progress,
                          desc="strengths")
    return Grid(values, ("strength", "metric"), (tuple(float(s) for s in strengths), ("logit_diff", "accuracy")),
                {"task": task.name, "split": task.split, "mode": mode, "site": axis.site, "method": f"steer {mode}",
                 "metric": "task metric", "chart": "lines",
                 "model": name_of(model)})
