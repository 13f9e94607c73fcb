"""Analyses that run the model: activations and batched output gradients at a site, core
extraction, causal validation, operators, alignment across models and transfer.

Activations are read at one position per example: a Task's `answer_pos` (the position whose
logits are scored), or the last token of each prompt string. Interventions act at those
positions only.
"""

from __future__ import annotations

from typing import Callable, Literal, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp import run
from interp.cores import linalg
from interp.cores.results import Alignment, Core, Operator
from interp.errors import InterpError
from interp.interventions import Project
from interp.model import input_device
from interp.metrics import answer_logits, binary_accuracy, logit_diff
from interp.results import Grid
from interp.sites import check_hook_names, hook_name
from interp.tasks.base import Task, pad_id
from interp.memory import records_peak

__all__ = [
    "INTERVENTIONS", "activations", "align", "align_coordinates", "both_metrics", "extract", "fit_operator", "fourier_power", "gradients",
    "matched_activations", "operator_from", "resolve_site", "score_operator", "sequence_coordinates", "transfer", "validate",
]

Method = Literal["ace", "pca", "diff_means", "das"]
Output = Literal["metric", "candidates"]
INTERVENTIONS = ("full", "core_only", "core_removed", "core_flipped")
BATCH = 256


def resolve_site(model, site: str, layer: int | None = None) -> str:
    """The full hook name of `site` (a short name with `layer`, or a full hook name) in `model`;
    InterpError naming the nearest valid ones otherwise."""
    name = hook_name(site, layer)
    check_hook_names(model, [name])
    return name


def _rows(n: int) -> Int[Tensor, " n"]:
    return torch.arange(n)


def _candidates(task: Task) -> Int[Tensor, " c"]:
    """The task's answer tokens: every token that is a correct or incorrect answer somewhere."""
    return torch.unique(torch.cat([task.correct, task.incorrect]))


def _outputs(logits: Tensor, task: Task, output: Output, cands: Tensor) -> Float[Tensor, "batch c"]:
    """Per-example task outputs: [batch, 1] metric values, or [batch, c] centred candidate logits."""
    if output == "metric":
        return logit_diff(logits, task.correct, task.incorrect, task.answer_pos)[:, None]
    if output == "candidates":
        at = answer_logits(logits, task.answer_pos)[:, cands.to(logits.device)]
        return at - at.mean(-1, keepdim=True)
    raise InterpError(f"output={output!r} is not 'metric' or 'candidates'")


def activations(
    model, task: Task, site: str, *, layer: int | None = None, batch_size: int = BATCH
) -> Float[Tensor, "batch d_model"]:
    """Activations at `site` (a short name with `layer`, or a full hook name) at each example's
    answer position, on the CPU."""
    site = resolve_site(model, site, layer)
    out = []
    for start in range(0, len(task), batch_size):
        part = task[start : start + batch_size].to(input_device(model))
        _, acts = run.cache(model, part.clean, [site], answer_pos=part.answer_pos)  # unembed at answer_pos only
        act = acts[site]
        _check_width(act, site)
        out.append(act[_rows(len(part)).to(act.device), part.answer_pos.to(act.device)].float().cpu())
    return torch.cat(out)


def _check_width(act: Tensor, site: str) -> None:
    if act.ndim != 3:
        raise InterpError(f"site {site} has activations {tuple(act.shape)}; a core needs a [batch, pos, d] site such as a residual hook")


def gradients(
    model, task: Task, site: str, *, layer: int | None = None, output: Output = "metric", batch_size: int = BATCH
) -> tuple[Float[Tensor, "batch d_model"], Float[Tensor, "m d_model"]]:
    """(activations [n, d], output gradients [n * c, d]) at `site` and each example's answer position.

    Batched: one forward per batch (`interp.run.with_grad`, the site's activation in the autograd
    graph), then one backward per output dimension over the whole batch. Examples do not interact,
    so the gradient of the sum of per-example outputs is each example's own gradient in its row.
    Gradient rows are ordered example-major (example i's c outputs are rows i*c .. i*c+c-1).
    """
    site = resolve_site(model, site, layer)
    cands = _candidates(task)
    acts, grads = [], []
    for start in range(0, len(task), batch_size):
        part = task[start : start + batch_size].to(input_device(model))
        with torch.enable_grad():
            logits, found = run.with_grad(model, part.clean, [site], answer_pos=part.answer_pos)  # outputs read only there
            act = found[site]
            _check_width(act, site)
            outs = _outputs(logits, part, output, cands)  # [b, c]
            rows, pos = _rows(len(part)).to(act.device), part.answer_pos.to(act.device)
            per_output = []
            for c in range(outs.shape[1]):
                (g,) = torch.autograd.grad(outs[:, c].sum(), act, retain_graph=c + 1 < outs.shape[1])
                per_output.append(g[rows, pos].detach().float().cpu())  # [b, d]
        acts.append(act[rows, pos].detach().float().cpu())
        grads.append(torch.stack(per_output, 1).flatten(0, 1))  # [b * c, d]
    return torch.cat(acts), torch.cat(grads)


# ---------------------------------------------------------------------------------------------
# extraction


def _check_k(k: int | None, d: int, site: str) -> None:
    if k is not None and not (isinstance(k, int) and 1 <= k <= d):
        raise InterpError(f"k={k!r} must be an integer in 1..d_model={d} at {site}; a core cannot be wider than the site")


@records_peak
def extract(
    model,
    task: Task,
    *,
    site: str,
    layer: int | None = None,
    k: int | None = None,
    method: Method = "ace",
    output: Output = "metric",
    labels: Sequence | None = None,
    max_k: int | None = 16,
    das_epochs: int = 10,
    batch_size: int = BATCH,
    seed: int = 0,
) -> Core:
    """The task's core at `site` (a short name with `layer`, or a full hook name), read at each
    example's answer position.

    method:
      * "ace": balanced truncation of the activation covariance (reachability) and the expected
        outer product of task-output gradients (observability); `output` picks the task output:
        "metric" (the per-example logit difference) or "candidates" (the centred logits of every
        answer token, for tasks whose answer is one of several classes). Spectrum: Hankel
        singular values.
      * "pca": top principal directions of the activations (spectrum: their singular values).
      * "diff_means": the span of the centred class means of the activations
        (TransformerLens's `mean_difference_basis`); `labels` per example, default the correct
        answer token. k <= classes - 1; spectrum: singular values of the centred means.
      * "das": distributed alignment search (TransformerLens's `fit_das`) trained so that
        interchanging the subspace from the corrupt row makes the model give the corrupt answer
        (`task.incorrect`) among the task's answer tokens. Needs k; spectrum: final loss.

    With k=None the dimension is the largest spectral gap (linalg.choose_k) among k <= `max_k`
    (16 by default: a core is compact, and far down a d_model-long spectrum the ratios of tiny
    singular values make spurious gaps; pass max_k=None to search the whole spectrum).
    """
    site = resolve_site(model, site, layer)
    d = model.cfg.d_model
    _check_k(k, d, site)
    if method not in ("ace", "pca", "diff_means", "das"):
        raise InterpError(f"method={method!r} is not one of 'ace', 'pca', 'diff_means', 'das'")
    meta = {"task": task.name, "split": task.split, "n": len(task), "positions": "answer_pos",
                  "model": getattr(model.cfg, "model_name", ""), "output": output if method == "ace" else None, "seed": seed}
    if method == "ace":
        x, g = gradients(model, task, site, output=output, batch_size=batch_size)
        ordered, spectrum = linalg.balanced_truncation(x, g)
    elif method == "pca":
        x = activations(model, task, site, batch_size=batch_size)
        ordered, spectrum = linalg.pca(x)
    elif method == "diff_means":
        x = activations(model, task, site, batch_size=batch_size)
        return _diff_means(x, task, site, k, labels, meta)
    else:
        x = activations(model, task, site, batch_size=batch_size)
        return _das(model, task, site, k, x, meta, das_epochs, seed)
    if x.shape[1] != d:
        raise InterpError(f"site {site} has width {x.shape[1]}, not d_model={d}; use a residual-stream site")
    chosen = k if k is not None else linalg.choose_k(spectrum, max_k=max_k)
    meta["k_rule"] = "given" if k is not None else "largest spectral gap"
    return Core(ordered[:, :chosen], x.mean(0), spectrum, site, method, meta)


def _diff_means(x: Tensor, task: Task, site: str, k: int | None, labels, meta: dict) -> Core:
    from transformer_lens.tools.analysis.interchange import mean_difference_basis

    labels = list(task.correct.tolist() if labels is None else labels)
    if len(labels) != len(task):
        raise InterpError(f"{len(labels)} labels for {len(task)} examples")
    classes = sorted(set(labels), key=str)
    if k is not None and k > len(classes) - 1:
        raise InterpError(f"k={k}: diff_means over {len(classes)} classes spans at most {len(classes) - 1} directions")
    basis = mean_difference_basis(x, labels)  # [d, classes - 1], ordered by singular value
    means = torch.stack([x[torch.tensor([lab == c for lab in labels])].mean(0) for c in classes])
    spectrum = torch.linalg.svdvals((means - means.mean(0)).double()).float()
    chosen = k if k is not None else linalg.choose_k(spectrum[: len(classes) - 1])
    meta = {**meta, "classes": len(classes), "k_rule": "given" if k is not None else "largest spectral gap"}
    return Core(basis[:, :chosen].float(), x.mean(0), spectrum, site, "diff_means", meta)


def _das(model, task: Task, site: str, k: int | None, x: Tensor, meta: dict, epochs: int, seed: int) -> Core:
    from transformer_lens.tools.analysis.interchange import fit_das

    if k is None:
        raise InterpError("method='das' learns a subspace of a given dimension: pass k")
    cands = _candidates(task)
    index = {int(t): i for i, t in enumerate(cands.tolist())}
    where = {tuple(r.tolist()): int(p) for r, p in zip(task.clean, task.answer_pos)}
    where.update({tuple(r.tolist()): int(p) for r, p in zip(task.corrupt, task.answer_pos)})
    device = input_device(model)

    def task_logits(tokens: Tensor) -> Tensor:  # fit_das passes rows only: look their answer positions up
        pos = torch.tensor([where[tuple(r.tolist())] for r in tokens.cpu()], device=tokens.device)
        return model(tokens)[_rows(len(tokens)).to(tokens.device), pos][:, cands.to(tokens.device)]

    targets = torch.tensor([index[int(t)] for t in task.incorrect])
    result = fit_das(
        model, site, task.clean.to(device), task.corrupt.to(device), targets, task_logits, rank=k,
        base_positions=task.answer_pos, source_positions=task.answer_pos, epochs=epochs, seed=seed,
    )
    basis, _ = torch.linalg.qr(result.basis.detach().double().cpu())
    meta = {**meta, "das_losses": list(result.losses), "k_rule": "given"}
    return Core(basis.float(), x.mean(0), torch.tensor(result.losses[-1:]), site, "das", meta)


# ---------------------------------------------------------------------------------------------
# validation


def both_metrics(task: Task) -> Callable[[Tensor], Tensor]:
    """logits -> {logit_diff, binary_accuracy} means: both from one pass of `run.evaluate`."""
    args = (task.correct, task.incorrect, task.answer_pos)
    return lambda logits: {"logit_diff": logit_diff(logits, *args).float().mean(),
                           "binary_accuracy": binary_accuracy(logits, *args).float().mean()}


@records_peak
def validate(
    model, core: Core, task: Task, *, n_random: int = 5, seed: int = 0, variants_per_forward: int | None = None,
    progress: bool = True,
) -> Grid:
    """Necessity and sufficiency of `core` for `task`, beside random subspaces of the same k.

    Grid [method, quantity, metric]: method = full / core_only (mu + P(h - mu)) / core_removed
    (h - P(h - mu)) / core_flipped (h - 2P(h - mu)), applied at core.site at the answer
    positions; quantity = core / random_mean / random_std (over `n_random` random orthonormal
    bases with the core's mean, `linalg.random_basis(d_model, k, seed + i)`; every draw's value is
    in meta["random_draws"][mode][metric]); metric = logit_diff (mean) / binary_accuracy (chance 0.5).

    Every (intervention, basis) pair is one `Project` variant of `interp.run.evaluate`, so they
    run side by side in batched forwards that begin at the core's block and first answer position.
    """
    resolve_site(model, core.site)
    if core.d_model != model.cfg.d_model:
        raise InterpError(f"core has d_model={core.d_model} but the model has d_model={model.cfg.d_model}")
    if isinstance(n_random, bool) or not isinstance(n_random, int) or n_random < 1:
        raise InterpError(f"n_random={n_random!r} must be an int >= 1")
    task = task.to(input_device(model))
    bases = [core.basis] + [linalg.random_basis(core.d_model, core.k, seed + i) for i in range(n_random)]
    variants = [[]] + [[Project(core.site, b, core.mean, mode, positions=task.answer_pos)]
                       for mode in INTERVENTIONS[1:] for b in bases]
    measured = run.evaluate(model, task.clean, variants, both_metrics(task),
                            variants_per_forward=variants_per_forward, answer_pos=task.answer_pos,
                            progress=progress, desc="validate")
    # measured: [1 + modes * (1 + n_random), metric]
    values = torch.zeros(len(INTERVENTIONS), 3, 2)
    values[0, :2] = measured[0]
    by_mode = measured[1:].view(len(INTERVENTIONS) - 1, 1 + n_random, 2)
    for i in range(1, len(INTERVENTIONS)):
        rand = by_mode[i - 1, 1:].double()  # [n_random, metric]
        values[i, 0] = by_mode[i - 1, 0]
        values[i, 1] = rand.mean(0).float()
        values[i, 2] = rand.std(0).float() if n_random > 1 else 0.0
    # every draw kept (not only mean and std): a control's spread is its range over draws
    draws = {mode: {metric: [float(v) for v in by_mode[i, 1:, m]] for m, metric in enumerate(("logit_diff", "binary_accuracy"))}
             for i, mode in enumerate(INTERVENTIONS[1:])}
    meta = {"site": core.site, "k": core.k, "method": core.method, "task": task.name, "split": task.split,
            "n": len(task), "n_random": n_random, "seed": seed, "chance": {"binary_accuracy": 0.5, "logit_diff": 0.0},
            "random_draws": draws}
    return Grid(values, ("method", "quantity", "metric"),
                (INTERVENTIONS, ("core", "random_mean", "random_std"), ("logit_diff", "binary_accuracy")), meta)


# ---------------------------------------------------------------------------------------------
# operators


def operator_from(
    x: Float[Tensor, "n k_in"], y: Float[Tensor, "n k_out"], *, source: str, target: str, ridge: float = 0.0, meta: dict | None = None
) -> Operator:
    """Least-squares y ≈ x @ A + b, with A's eigenvalues when square (pure tensors)."""
    if x.shape[0] != y.shape[0]:
        raise InterpError(f"operator inputs {tuple(x.shape)} and targets {tuple(y.shape)} need the same number of rows")
    m, b = linalg.lstsq_map(x, y, ridge=ridge)
    r2 = linalg.r2_score(x.float() @ m + b, y)
    if m.shape[0] == m.shape[1]:
        ev = torch.linalg.eigvals(m.double().T)
        ev = ev[torch.argsort(ev.abs(), descending=True, stable=True)]
    else:
        ev = torch.zeros(0, dtype=torch.complex128)
    return Operator(m, b, ev.real.float(), ev.imag.float(), r2, source, target, {"n": x.shape[0], "ridge": ridge, **(meta or {})})


def sequence_coordinates(
    model, core: Core, tokens: Int[Tensor, "batch pos"], *, batch_size: int = BATCH
) -> Float[Tensor, "batch pos k"]:
    """Core coordinates at every position of `tokens` (all rows the same length, no padding)."""
    site = resolve_site(model, core.site)
    out = []
    for start in range(0, tokens.shape[0], batch_size):
        _, acts = run.cache(model, tokens[start : start + batch_size].to(input_device(model)), [site])
        out.append(core.coordinates(acts[site]))
    return torch.cat(out)


@records_peak
def fit_operator(
    model, core: Core, data: Task | Tensor, *, target: Core | None = None, lag: int = 1, start: int = 1, ridge: float = 0.0
) -> Operator:
    """A least-squares linear map between core coordinates, with its eigenvalues.

    Over time steps (target=None): `data` is a [batch, pos] token tensor (or a Task, whose clean
    rows are used) without padding; the map sends the coordinates at position t to those at
    t + lag, pooled over rows and positions t >= `start`. From site to site (target a Core):
    `data` is a Task and the map sends `core`'s coordinates at each answer position to
    `target`'s there.
    """
    if target is None:
        tokens = data.clean if isinstance(data, Task) else data
        if lag < 1 or start < 0 or start + lag >= tokens.shape[1]:
            raise InterpError(f"lag={lag}, start={start}: need 1 <= lag and start + lag < pos={tokens.shape[1]}")
        z = sequence_coordinates(model, core, tokens)  # [batch, pos, k]
        x, y = z[:, start : z.shape[1] - lag].flatten(0, 1), z[:, start + lag :].flatten(0, 1)
        return operator_from(x, y, source=core.site, target=core.site, ridge=ridge, meta={"kind": "time", "lag": lag, "start": start})
    if not isinstance(data, Task):
        raise InterpError("a site-to-site operator needs a Task (its answer positions)")
    x = core.coordinates(activations(model, data, core.site))
    y = target.coordinates(activations(model, data, target.site))
    return operator_from(x, y, source=core.site, target=target.site, ridge=ridge, meta={"kind": "site"})


@records_peak
def score_operator(model, operator: Operator, core_in: Core, core_out: Core, task: Task) -> float:
    """R² of `operator` predicting core_out's coordinates from core_in's on `task` in `model`."""
    x = core_in.coordinates(activations(model, task, core_in.site))
    y = core_out.coordinates(activations(model, task, core_out.site))
    if x.shape[1] != operator.matrix.shape[0] or y.shape[1] != operator.matrix.shape[1]:
        raise InterpError(f"operator {tuple(operator.matrix.shape)} does not fit cores of k={x.shape[1]} -> {y.shape[1]}")
    return linalg.r2_score(operator(x), y)


def transfer(operator: Operator, alignment_in: Alignment, alignment_out: Alignment) -> Operator:
    """Carry a site-to-site operator fitted in model A over to model B.

    `alignment_in` and `alignment_out` map A's core coordinates to B's at the operator's input
    and output sites (as `align(model_a, .., model_b, ..)` returns them). The transferred map is
    z_in^B -> (pseudo-inverse of alignment_in) -> operator -> alignment_out; score it in B with
    `score_operator`. Its r2 is NaN until scored.
    """
    ka_in, kb_in = alignment_in.map.shape
    if operator.matrix.shape[0] != ka_in or operator.matrix.shape[1] != alignment_out.map.shape[0]:
        raise InterpError(
            f"operator {tuple(operator.matrix.shape)} does not chain with alignments {tuple(alignment_in.map.shape)} (in) "
            f"and {tuple(alignment_out.map.shape)} (out)"
        )
    inv = torch.linalg.pinv(alignment_in.map.double())  # [kb_in, ka_in]: z_A = (z_B - c) @ inv
    m = inv @ operator.matrix.double() @ alignment_out.map.double()
    b = (-alignment_in.bias.double() @ inv) @ operator.matrix.double() @ alignment_out.map.double() \
        + operator.bias.double() @ alignment_out.map.double() + alignment_out.bias.double()
    if m.shape[0] == m.shape[1]:
        ev = torch.linalg.eigvals(m.T)
        ev = ev[torch.argsort(ev.abs(), descending=True, stable=True)]
    else:
        ev = torch.zeros(0, dtype=torch.complex128)
    return Operator(m.float(), b.float(), ev.real.float(), ev.imag.float(), float("nan"), operator.source, operator.target,
                    {**operator.meta, "transferred": True, "from": alignment_in.meta.get("model_a"), "to": alignment_in.meta.get("model_b")})


# ---------------------------------------------------------------------------------------------
# alignment


def _prompt_tokens(model, prompts: Sequence[str]) -> tuple[Int[Tensor, "batch pos"], Int[Tensor, " batch"]]:
    """Each prompt tokenized alone (BOS as the model does), right-padded; and each last position."""
    rows = [model.to_tokens(p)[0].cpu() for p in prompts]
    width = max(len(r) for r in rows)
    pad = 0 if pad_id(model) is None else pad_id(model)
    tokens = torch.full((len(rows), width), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = r
    return tokens, torch.tensor([len(r) - 1 for r in rows])


def _prompt_task(tokens: Tensor, last: Tensor, texts: Sequence[str]) -> Task:
    """A metric-free Task wrapper over prompt rows (answers unused), for `activations`."""
    zeros = torch.zeros(len(texts), dtype=torch.long)
    return Task(name="prompts", split="-", clean=tokens, corrupt=tokens, correct=zeros, incorrect=zeros,
                answer_pos=last, text=tuple(texts))


def matched_activations(
    model_a, model_b, prompts: Task | Sequence[str], site_a: str, site_b: str
) -> tuple[Float[Tensor, "n d_a"], Float[Tensor, "n d_b"]]:
    """Activations of both models at the last token of each prompt; every prompt must tokenize
    to the same length in both (so positions match)."""
    texts = list(prompts.text) if isinstance(prompts, Task) else list(prompts)
    if not texts:
        raise InterpError("align needs at least one prompt")
    ta, la = _prompt_tokens(model_a, texts)
    tb, lb = _prompt_tokens(model_b, texts)
    bad = (la != lb).nonzero().flatten()
    if len(bad):
        i = int(bad[0])
        raise InterpError(
            f"prompt {texts[i]!r} tokenizes to {int(la[i]) + 1} tokens in model A {model_a.to_str_tokens(texts[i])} but "
            f"{int(lb[i]) + 1} in model B {model_b.to_str_tokens(texts[i])}; alignment needs matched positions, so use "
            f"prompts whose tokens line up in both models ({len(bad)} of {len(texts)} prompts differ)"
        )
    xa = activations(model_a, _prompt_task(ta, la, texts), site_a)
    xb = activations(model_b, _prompt_task(tb, lb, texts), site_b)
    return xa, xb


def align_coordinates(
    za: Float[Tensor, "n ka"], zb: Float[Tensor, "n kb"], *, method: str = "procrustes", ridge: float = 1e-3
) -> tuple[Tensor, Tensor, float, float, Tensor]:
    """(map, bias, r2, r2_heldout, canonical correlations) from za to zb (pure tensors)."""
    fits = {
        "procrustes": lambda a, b: linalg.procrustes_map(a, b),
        "ridge": lambda a, b: linalg.lstsq_map(a, b, ridge=ridge),
        "cca": lambda a, b: linalg.cca_map(a, b),
    }
    if method not in fits:
        raise InterpError(f"method={method!r} is not one of {sorted(fits)}")
    if za.shape[0] != zb.shape[0] or za.shape[0] < 4:
        raise InterpError(f"need the same number (>= 4) of matched rows, got {za.shape[0]} and {zb.shape[0]}")
    m, b = fits[method](za, zb)
    r2 = linalg.r2_score(za.float() @ m + b, zb)
    half = torch.arange(za.shape[0]) % 2 == 0
    folds = []
    for train in (half, ~half):
        mm, bb = fits[method](za[train], zb[train])
        folds.append(linalg.r2_score(za[~train].float() @ mm + bb, zb[~train]))
    rho, _, _ = linalg.cca(za, zb)
    return m, b, r2, float(sum(folds) / 2), rho


def align(
    model_a, core_a: Core, model_b, core_b: Core, prompts: Task | Sequence[str], *,
    method: Literal["procrustes", "cca", "ridge"] = "procrustes", ridge: float = 1e-3,
) -> Alignment:
    """Map model A's core coordinates to model B's on matched prompts (last token of each).

    Works across widths and families: only the k-dimensional coordinates are mapped. Reports
    R² (in sample and two-fold held out), canonical correlations, and principal angles between
    the bases when the two models have the same width.
    """
    resolve_site(model_a, core_a.site)
    resolve_site(model_b, core_b.site)
    xa, xb = matched_activations(model_a, model_b, prompts, core_a.site, core_b.site)
    za, zb = core_a.coordinates(xa), core_b.coordinates(xb)
    m, b, r2, r2_cv, rho = align_coordinates(za, zb, method=method, ridge=ridge)
    angles = linalg.principal_angles(core_a.basis, core_b.basis) if core_a.d_model == core_b.d_model else torch.zeros(0)
    meta = {"site_a": core_a.site, "site_b": core_b.site, "n": xa.shape[0], "ridge": ridge if method == "ridge" else None,
            "model_a": getattr(model_a.cfg, "model_name", ""), "model_b": getattr(model_b.cfg, "model_name", "")}
    return Alignment(m, b, method, r2, r2_cv, rho, angles, core_a.basis, core_b.basis, meta)


def fourier_power(values: Float[Tensor, "n k"], residues: Int[Tensor, " n"], p: int) -> Float[Tensor, " freq"]:
    """Power of core coordinates as a function of a residue mod p, per frequency 1..(p-1)/2:
    average the coordinates over rows sharing a residue, take the DFT over residues, sum |.|²
    over frequencies f and p - f and over the k coordinates."""
    means = torch.zeros(p, values.shape[1], dtype=torch.float64)
    counts = torch.zeros(p, dtype=torch.float64)
    means.index_add_(0, residues, values.double())
    counts.index_add_(0, residues, torch.ones(len(residues), dtype=torch.float64))
    means = means / counts.clamp(min=1)[:, None]
    spec = torch.fft.fft(means - means.mean(0), dim=0).abs() ** 2  # [p, k]
    half = (p - 1) // 2
    power = spec[1 : half + 1] + spec[p - half :].flip(0)
    return power.sum(1).float()
