"""What a user checks first about a trained dictionary, on held-out tokens:

    fve          fraction of variance explained: 1 - sum |y - y_hat|^2 / sum |y - mean y|^2
    l0           mean number of active features per token
    dead         fraction of features that never fire on these tokens
    ce_clean     next-token cross-entropy of the model as it is
    ce_spliced   ... with the dictionary's output in place of the site's activation
    ce_zero      ... with the site's activation zeroed
    ce_mean      ... with the site's activation replaced by its mean over these tokens
    ce_recovered (ce_zero - ce_spliced) / (ce_zero - ce_clean): 1 = as good as the model, 0 = as
                 bad as zero ablation; ce_recovered_mean the same against mean ablation
    fve_control  the same FVE from a dense baseline fitted on other tokens (`fit_tokens`): for a
                 transcoder the best affine map of the MLP's input to its output (least squares:
                 what a linear MLP would do), for an SAE the top round(l0) principal components
                 (a dense code as wide as the sparse one's active set)
    fve_random   the same FVE from random features of the same width and L0 (`random_control`):
                 a random Gaussian encoder, each token's top round(L0) features (L0 of the
                 dictionary on the fit tokens), each feature's output direction the mean target
                 (minus its mean) over the fit tokens that fire it, weighted by the activation,
                 and one least-squares scale; what a dictionary of this size and sparsity gives
                 with a readout fitted but no features learned. ce_random and ce_recovered_random
                 are its splice's numbers (with `fit_tokens` and ce)

Every replacement acts on the trainable positions only (not BOS, not padding), the positions the
dictionary was trained on; BOS keeps its own activation in all four runs. The spliced run reads
the site's input from the clean run: splicing one layer does not change that layer's input.
Everything runs through `interp.run` (`cache` for the activations, `Patch` for the splices).
`scores(..., ce=False)` skips the three spliced runs per dictionary (and the ce_* numbers): FVE, L0
and dead from the clean forwards alone.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp.errors import InterpError
from interp.features.dictionary import Dictionary
from interp.interventions import Patch
from interp.run import cache, evaluate

__all__ = ["ce_loss", "random_control", "scores"]


def ce_loss(logits_: Tensor, tokens: Tensor, valid: Tensor) -> float:
    """Mean next-token cross-entropy over positions whose next token is a trainable position."""
    target = tokens[:, 1:]
    keep = valid[:, 1:].to(logits_.device)
    lp = torch.log_softmax(logits_[:, :-1].float(), -1)
    nll = -lp.gather(-1, target.unsqueeze(-1).to(lp.device)).squeeze(-1)
    return float(nll[keep].mean())


def scores(model, dictionaries: Sequence[Dictionary], tokens: Tensor, valid: Tensor, *,
           rows_per_forward: int = 16, progress: bool = False, fit_tokens: Tensor | None = None,
           fit_valid: Tensor | None = None, ce: bool = True) -> list[dict[str, float]]:
    """The numbers above for each of `dictionaries` on `tokens` [rows, pos] (trainable where
    `valid`). One clean forward per chunk of rows serves every dictionary; the three replaced runs
    of each dictionary run side by side through `interp.run.evaluate` (resumed at its layer);
    `ce=False` leaves them (and the ce_* numbers) out."""
    if tokens.shape != valid.shape or tokens.ndim != 2:
        raise InterpError(f"tokens {tuple(tokens.shape)} and valid {tuple(valid.shape)} must be the same [rows, pos]")
    if not int(valid.sum()):
        raise InterpError("no trainable positions in the evaluation tokens")
    names = list(dict.fromkeys(n for d in dictionaries for n in (d.site_in, d.site_out)))
    chunks = []
    with torch.no_grad():
        for i in range(0, len(tokens), rows_per_forward):
            t, v = tokens[i : i + rows_per_forward], valid[i : i + rows_per_forward]
            lg, acts = cache(model, t.to(model.cfg.device), names)
            chunks.append((t, v, ce_loss(lg, t, v), {n: a.float().cpu() for n, a in acts.items()}))
    fit = None
    if fit_tokens is not None:
        fit = {n: [] for n in names}
        with torch.no_grad():
            for i in range(0, len(fit_tokens), rows_per_forward):
                t, v = fit_tokens[i : i + rows_per_forward], fit_valid[i : i + rows_per_forward]
                _, acts = cache(model, t.to(model.cfg.device), names)
                for n in names:
                    fit[n].append(acts[n].float().cpu()[v])
        fit = {n: torch.cat(a) for n, a in fit.items()}
    out = []
    for d in tqdm(dictionaries, desc="scoring", disable=not progress):
        control = None
        if fit is not None:
            fit_l0 = float((d.encode(fit[d.site_in]) > 0).sum(-1).float().mean())
            control = random_control(d.n_features, max(1, round(fit_l0)), fit[d.site_in], fit[d.site_out])
        row = _one(model, d, chunks, ce, control)
        if fit is not None:
            x = torch.cat([a[d.site_in][v] for _, v, _, a in chunks])
            y = torch.cat([a[d.site_out][v] for _, v, _, a in chunks])
            row["fve_control"] = _control_fve(d, fit[d.site_in], fit[d.site_out], x, y, row["l0"])
        out.append(row)
    return out


def _fve(y: Tensor, y_hat: Tensor) -> float:
    return 1 - float((y - y_hat).pow(2).sum() / (y - y.mean(0)).pow(2).sum())


def _control_fve(d: Dictionary, x_fit: Tensor, y_fit: Tensor, x: Tensor, y: Tensor, l0: float) -> float:
    """The dense baseline's FVE on the held-out (x, y) (see the module docstring)."""
    x_fit, y_fit, x, y = (t.double() for t in (x_fit, y_fit, x, y))
    if d.kind == "transcoder":
        a = torch.cat([x_fit, torch.ones(len(x_fit), 1, dtype=x_fit.dtype)], 1)
        w = torch.linalg.lstsq(a, y_fit, rcond=None).solution
        return _fve(y, torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1) @ w)
    mean = y_fit.mean(0)
    r = max(1, round(l0))
    basis = torch.linalg.svd(y_fit - mean, full_matrices=False).Vh[:r].T  # [d, r]
    return _fve(y, mean + ((y - mean) @ basis) @ basis.T)


def random_control(n_features: int, l0: int, x_fit: Tensor, y_fit: Tensor, *, seed: int = 0,
                   chunk: int = 1024) -> Callable[[Tensor], Tensor]:
    """x [..., d_in] -> y_hat [..., d_out] of random features fitted as the module docstring says
    (fve_random), on the fit activations x_fit [tokens, d_in], y_fit [tokens, d_out]."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(x_fit.shape[-1], n_features, generator=gen).to(x_fit.device, x_fit.dtype)  # drawn on the CPU: one seed, one control

    def code(x: Tensor) -> Tensor:  # [tokens, n_features], each row's top l0 of relu(x w)
        h = torch.relu(x @ w)
        top = h.topk(l0, dim=-1)
        return torch.zeros_like(h).scatter(-1, top.indices, top.values)

    mean = y_fit.mean(0)
    num = torch.zeros(n_features, y_fit.shape[-1], device=y_fit.device, dtype=y_fit.dtype)
    den = torch.zeros(n_features, device=y_fit.device, dtype=y_fit.dtype)
    for i in range(0, len(x_fit), chunk):  # chunks: [chunk, n_features] codes, never all the fit tokens' at once
        f = code(x_fit[i : i + chunk])
        num += f.T @ (y_fit[i : i + chunk] - mean)
        den += f.sum(0)
    dec = num / den.clamp_min(1e-12)[:, None]  # a silent feature's direction is zero
    z = torch.cat([code(x_fit[i : i + chunk]) @ dec for i in range(0, len(x_fit), chunk)])
    scale = float((z * (y_fit - mean)).sum() / (z * z).sum().clamp_min(1e-12))

    def apply(x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.shape[-1])
        out = torch.cat([code(flat[i : i + chunk]) @ dec for i in range(0, len(flat), chunk)])
        return (mean + scale * out).reshape(*x.shape[:-1], -1)

    return apply


def _one(model, d: Dictionary, chunks, with_ce: bool, control: Callable | None = None) -> dict[str, float]:
    n = sum(int(v.sum()) for _, v, _, _ in chunks)
    ys = torch.cat([a[d.site_out][v] for _, v, _, a in chunks])  # [tokens, d_out]
    mean = ys.mean(0)
    err, err_random, l0, fired = 0.0, 0.0, 0.0, torch.zeros(d.n_features, dtype=torch.bool, device=ys.device)
    keys = ("ce_spliced", "ce_zero", "ce_mean") + (("ce_random",) if control is not None else ())
    ce = dict.fromkeys(("ce_clean",) + keys, 0.0)
    weight = 0
    for t, v, clean, acts in chunks:
        x, y = acts[d.site_in], acts[d.site_out]
        f = d.encode(x)
        y_hat = d.decode(f, x)
        err += float((y - y_hat)[v].pow(2).sum())
        l0 += float((f[v] > 0).sum())
        fired |= (f[v] > 0).any(0)
        replacements = [y_hat, torch.zeros_like(y), mean.expand_as(y)]
        if control is not None:
            replacements.append(control(x))
            err_random += float((y - replacements[-1])[v].pow(2).sum())
        if not with_ce:
            continue
        keep = v[..., None]
        sources = [torch.where(keep, new, y).to(model.cfg.dtype).to(model.cfg.device) for new in replacements]
        rows = t.to(model.cfg.device)
        metric = lambda logits, rows=rows, v=v: torch.tensor(ce_loss(logits, rows, v))
        out = evaluate(model, rows, [[Patch(d.site_out, s)] for s in sources], metric, progress=False)
        w = int(v[:, 1:].sum())
        weight += w
        ce["ce_clean"] += clean * w
        for key, value in zip(keys, out.tolist()):
            ce[key] += value * w
    total = float((ys - mean).pow(2).sum())
    row = {"fve": 1 - err / total, "l0": l0 / n, "dead": float((~fired).float().mean())}
    if control is not None:
        row["fve_random"] = 1 - err_random / total
    if with_ce:
        ce = {k: v / weight for k, v in ce.items()}
        recovered = lambda spliced, floor: (ce[floor] - ce[spliced]) / (ce[floor] - ce["ce_clean"])
        row.update(ce, ce_recovered=recovered("ce_spliced", "ce_zero"), ce_recovered_mean=recovered("ce_spliced", "ce_mean"))
        if control is not None:
            row["ce_recovered_random"] = recovered("ce_random", "ce_zero")
    return {**row, "tokens": n}
