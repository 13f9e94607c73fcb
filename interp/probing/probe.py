"""Parameter probing: sort and group weight-activation scores, prune the lowest groups greedily
while a validation metric stays within a tolerance; no fine-tuning. The result is a `WeightMask`.

    levels(score, n_groups, grouping)   pure: each weight's quantile group 0..G-1 (0 = lowest)
    probe(model, tokens, metric, scores, ...)  -> Probe (mask, sparsity per matrix, history)
    random_like(probe) / magnitude_like(model, probe)  the controls at the same sparsity per matrix

Groups. Each weight matrix's scores are cut into `n_groups` (G) quantile groups, per output row
(`grouping="row"`: the weights feeding one output feature compete, as in Wanda) or over the whole
matrix (`grouping="matrix"`). A unit of pruning is (matrix, group): pruning group q of a matrix
removes its weights in groups 0..q. The top group of a matrix is never pruned, so a probe can
reach at most (G-1)/G of the weights.

Greedy. Level by level (q = 0, 1, ..., G-2): try pruning group q in every matrix still in play at
once; if the validation metric stays within the tolerance, keep it; if not, split the matrices
into halves (in order of the group's mean score relative to its matrix's, lowest first) and try
each half on top of what is kept so far, down to single matrices. A matrix whose group q alone
breaks the tolerance is kept from then on (its higher groups score higher still). The probe stops
at `sparsity` (the target: the last level prunes only as many matrices, lowest first, as reach
it), when no matrix is left in play, or after `max_checks` validation runs (None: no cap, so a
probe stops only at its target or when every matrix broke the tolerance). Each validation run
is `interp.run.evaluate` with the candidate `WeightMask`; the model's weights are never written.

Tolerance: a candidate is kept when metric >= full - tolerance * |full|, full being the
unpruned model's metric on the same validation rows (tolerance 0.05: at most a 5 % drop).

Resuming. The search is deterministic given its check values, so `checkpoint=PATH` records each
value as it is measured (atomically) and a later call with the same path replays the recorded ones
instead of running them (a safetensors state file, interp.files.storage.save_state): a probe killed half-way resumes where it stopped and ends with the same
mask and history as an uninterrupted one. The file names the model, the scores and the search's
settings; a file made for other ones is refused, never replayed.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp.errors import InterpError
from interp.interventions import WeightMask
from interp.files.storage import load_state, save_state
from interp.results import Grid, result
from interp.run import evaluate
from interp.model import name_of
from interp.memory import records_peak

from .scores import KINDS, WeightScores, fingerprint, linears

__all__ = ["GROUPINGS", "Probe", "check_model", "levels", "magnitude_like", "per_matrix", "probe", "random_like", "sparsity_of"]

GROUPINGS = ("row", "matrix")


def levels(score: Tensor, n_groups: int, grouping: str = "row") -> Tensor:
    """Each weight's quantile group (uint8, 0 = lowest scores) of a [out, in] score map: by rank
    within its row ("row") or within the whole matrix ("matrix"); groups differ in size by at
    most one weight (per row, or per matrix)."""
    _check_groups(n_groups, grouping)
    if score.ndim != 2:
        raise InterpError(f"a score map is [out, in], got shape {tuple(score.shape)}")
    flat = score if grouping == "row" else score.reshape(1, -1)
    ranks = flat.argsort(dim=1, stable=True).argsort(dim=1)  # 0 = lowest score of its row / matrix
    return (ranks * n_groups // flat.shape[1]).to(torch.uint8).reshape(score.shape)


def _check_groups(n_groups: int, grouping: str) -> None:
    if isinstance(n_groups, bool) or not isinstance(n_groups, int) or not 2 <= n_groups <= 255:
        raise InterpError(f"n_groups={n_groups!r} must be an int in 2..255")
    if grouping not in GROUPINGS:
        raise InterpError(f"grouping={grouping!r} is not one of {GROUPINGS}")


@result
@dataclass(frozen=True)
class Probe:
    """A probed subnetwork: `masks[param]` (bool, True = kept) for every scored weight matrix,
    `sparsity[param]` (pruned fraction), `history` (one entry per validation run: level, matrices
    tried, sparsity, metric, kept) and `meta` (model, fingerprint, full metric, settings)."""

    masks: dict[str, Tensor]
    sparsity: dict[str, float]
    history: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if set(self.masks) != set(self.sparsity):
            raise InterpError("Probe: masks and sparsity must name the same weights")

    @property
    def total_sparsity(self) -> float:
        """The pruned fraction of all scored weights."""
        return sparsity_of(self.masks)

    def to_grid(self) -> Grid:
        """Grid [layer, matrix] of the pruned fraction of each weight matrix (NaN: not scored)."""
        labels = self.meta.get("labels", {})
        cells = [(int(labels[n].split(".", 1)[0][1:]), labels[n].split(".", 1)[1], s)
                 for n, s in self.sparsity.items() if n in labels]
        if not cells:
            raise InterpError("this Probe has no matrix labels (meta['labels']) to lay out")
        layers = sorted({c[0] for c in cells})
        kinds = [k for k in KINDS if any(c[1] == k for c in cells)]
        values = torch.full((len(layers), len(kinds)), float("nan"))
        for layer, kind, s in cells:
            values[layers.index(layer), kinds.index(kind)] = s
        return Grid(values, ("layer", "matrix"), {"layer": layers, "matrix": kinds},
                    {"metric": "sparsity", "title": f"pruned fraction per matrix (total {self.total_sparsity:.3f})",
                     "model": self.meta.get("model")})

    def mask(self, model=None) -> WeightMask:
        """The `WeightMask` to run under (`interp.run`); with `model`, checked to be the model it
        was probed on (names, shapes and weights' fingerprint)."""
        if model is not None:
            check_model(model, self.masks, self.meta)
        return WeightMask({n: m for n, m in self.masks.items()})


def sparsity_of(masks: dict[str, Tensor]) -> float:
    total = sum(m.numel() for m in masks.values())
    return 1.0 - sum(int(m.sum()) for m in masks.values()) / max(1, total)


def check_model(model, masks: dict[str, Tensor], meta: dict[str, Any]) -> None:
    """InterpError unless `masks` fit `model`: the same weight names and shapes, and (when the
    probe recorded one) the same weights' fingerprint."""
    params = dict(model.named_parameters())
    wrong = [n for n in masks if n not in params or tuple(params[n].shape) != tuple(masks[n].shape)]
    if wrong:
        n = wrong[0]
        have = tuple(params[n].shape) if n in params else "no such weight"
        raise InterpError(f"this mask is from another model ({meta.get('model', '?')}): {len(wrong)} of its "
                          f"{len(masks)} weights do not fit {model.cfg.model_name}, e.g. {n} {tuple(masks[n].shape)} vs {have}")
    if meta.get("fingerprint") and meta["fingerprint"] != fingerprint(model):
        raise InterpError(f"this mask was probed on another model ({meta.get('model', '?')}, weights "
                          f"{meta['fingerprint']}); {model.cfg.model_name} has weights {fingerprint(model)}")


@records_peak
def probe(model, tokens: Tensor, metric: Callable[[Tensor], Tensor], scores: WeightScores, *,
          answer_pos: Tensor | None = None, tolerance: float = 0.05, sparsity: float | None = None, n_groups: int = 10,
          grouping: str = "row", max_checks: int | None = 64, min_examples: int = 32, progress: bool = True,
          checkpoint: str | Path | None = None) -> Probe:
    """Probe the subnetwork that keeps `metric` (logits -> scalar, higher is better) on the
    validation rows `tokens` [batch, pos] within `tolerance`, pruning the lowest `scores` groups
    (see the module docstring). `sparsity`: stop at this pruned fraction (None: as far as the
    tolerance allows). `min_examples`: refuse a validation set smaller than this. `checkpoint`: a
    file recording each check's value, replayed by a later call (see "Resuming")."""
    start = time.time()
    _check_probe(tokens, tolerance, sparsity, n_groups, grouping, max_checks, min_examples)
    lins = linears(model)
    _check_covers(scores, lins)
    names = list(lins)
    group = {n: levels(scores.matrix(model, n), n_groups, grouping) for n in tqdm(names, desc="groups", disable=not progress)}
    rel = {n: _relative_group_scores(scores.matrix(model, n), group[n], n_groups) for n in names}
    sizes = {n: torch.bincount(group[n].flatten().long(), minlength=n_groups) for n in names}
    total = sum(g.numel() for g in group.values())

    def masks_for(pruned: dict[str, int]) -> dict[str, Tensor]:
        return {n: group[n] >= pruned[n] for n in names}

    def pruned_count(pruned: dict[str, int]) -> int:
        return sum(int(sizes[n][: pruned[n]].sum()) for n in names)

    record = _Record(checkpoint, _ident(model, scores, tokens, answer_pos, [group[n] for n in names], checkpoint is not None,
                                        tolerance=tolerance, sparsity=sparsity, n_groups=n_groups, grouping=grouping), start)

    def run_check(pruned: dict[str, int], desc: str) -> float:
        mask = WeightMask({n: m for n, m in masks_for(pruned).items() if pruned[n]})
        return record.value(lambda: float(evaluate(model, tokens, [[mask]], metric, answer_pos=answer_pos, progress=False, desc=desc)[0]))

    full = record.value(lambda: float(evaluate(model, tokens, [[]], metric, answer_pos=answer_pos, progress=False)[0]))
    threshold = full - tolerance * abs(full)
    pruned = {n: 0 for n in names}
    kept_whole: set[str] = set()  # matrices that broke the tolerance: no further groups pruned
    history: list[dict[str, Any]] = []
    stop = "all levels tried"
    bar = tqdm(total=max_checks, desc="probe checks", disable=not progress)
    for q in range(n_groups - 1):
        # every matrix in play (one left behind by a target's cut at an earlier level catches up)
        active = sorted((n for n in names if n not in kept_whole and pruned[n] <= q), key=lambda n: float(rel[n][q]))
        if sparsity is not None:  # the lowest-scoring matrices first, only as many as reach the target
            active = _enough(active, sparsity * total - pruned_count(pruned), {n: int(sizes[n][pruned[n]: q + 1].sum())
                                                                                for n in active})
        queue = [active] if active else []
        while queue and (max_checks is None or len(history) < max_checks):
            part = queue.pop(0)
            candidate = {**pruned, **{n: q + 1 for n in part}}
            value = run_check(candidate, f"level {q}")
            ok = value >= threshold
            history.append({"level": q, "matrices": len(part), "sparsity": pruned_count(candidate) / total,
                            "metric": value, "kept": ok})
            bar.update(1)
            if ok:
                pruned = candidate
            elif len(part) == 1:
                kept_whole.update(part)
            else:
                half = len(part) // 2
                queue = [part[:half], part[half:], *queue]
        if queue:
            stop = f"max_checks={max_checks} reached"
            break
        if sparsity is not None and pruned_count(pruned) >= sparsity * total:
            stop = "target sparsity reached"
            break
        if all(n in kept_whole for n in names):
            stop = "every matrix broke the tolerance"
            break
    bar.close()
    masks = masks_for(pruned)
    meta = {
        "model": record.ident["model"], "fingerprint": record.ident["fingerprint"], "full": full, "threshold": threshold,
        "tolerance": tolerance, "target": sparsity, "n_groups": n_groups, "grouping": grouping,
        "examples": int(tokens.shape[0]), "checks": len(history), "stop": stop, "scores": dict(scores.meta),
        "labels": {n: lins[n].label for n in names}, "seconds": round(record.before + time.time() - start, 2),
    }
    return Probe(masks, {n: 1.0 - float(m.float().mean()) for n, m in masks.items()}, history, meta)


def _ident(model, scores: WeightScores, tokens: Tensor, answer_pos: Tensor | None, groups: list[Tensor], digests: bool,
           **settings: Any) -> dict[str, Any]:
    """What names one probe's search in its checkpoint; with `digests`, also its rows and every
    weight's group (scores can move in low bits between machines)."""
    out = {"model": name_of(model), "fingerprint": fingerprint(model), "scores": dict(scores.meta), "tokens": list(tokens.shape),
           **settings}
    if digests:
        out["inputs"] = _digest([tokens] + ([] if answer_pos is None else [answer_pos]))
        out["groups"] = _digest(groups)
    return out


class _Record:
    """A probe's check values: replayed from `path` while it has them, else computed and recorded."""

    def __init__(self, path: str | Path | None, ident: dict[str, Any], start: float):
        self.path, self.ident, self.start = path, ident, start
        self.replay, self.before = _read_checkpoint(path, ident)
        self.done = list(self.replay)

    def value(self, compute: Callable[[], float]) -> float:
        if self.replay:
            return self.replay.pop(0)
        value = compute()
        if self.path is not None:  # atomically (save_state), so a kill mid-write keeps the previous record
            self.done.append(value)
            save_state({"ident": json.dumps(self.ident, sort_keys=True), "values": torch.tensor(self.done, dtype=torch.float64),
                        "seconds": self.before + time.time() - self.start}, self.path)
        return value


def _digest(tensors: list[Tensor]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for t in tensors:
        h.update(str((t.dtype, tuple(t.shape))).encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _read_checkpoint(path: str | Path | None, ident: dict[str, Any]) -> tuple[list[float], float]:
    """The check values a probe recorded at `path` and the seconds it had run (none if there is no
    file), refusing a record of another probe."""
    if path is None or not Path(path).exists():
        return [], 0.0
    try:
        state = load_state(path)
        saved, values = json.loads(state["ident"]), [float(v) for v in state["values"]]
        seconds = float(state.get("seconds", 0.0))
        if not isinstance(saved, dict):
            raise ValueError("its identity is not a JSON object")
    except (InterpError, ValueError, KeyError, TypeError) as e:
        raise InterpError(f"probe checkpoint {path} is not a probe's record ({e}); remove it to start over") from e
    ident = json.loads(json.dumps(ident))  # as it reads back (tuples as lists)
    if saved != ident:
        diff = sorted(k for k in set(saved) | set(ident) if saved.get(k) != ident.get(k))
        raise InterpError(f"probe checkpoint {path} was made by another probe (differs in {', '.join(diff)}); "
                          "remove it or give another path")
    return values, seconds


def _check_probe(tokens: Tensor, tolerance, sparsity, n_groups: int, grouping: str, max_checks, min_examples: int) -> None:
    """`probe`'s options, checked before any forward."""
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or not 0.0 <= tolerance <= 1.0:
        raise InterpError(f"tolerance={tolerance!r} must be a number in [0, 1] (the allowed relative drop of the metric)")
    _check_groups(n_groups, grouping)
    if tokens.ndim != 2:
        raise InterpError(f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}")
    if tokens.shape[0] < min_examples:
        raise InterpError(f"the validation set has {tokens.shape[0]} examples but at least {min_examples} are asked "
                          "(min_examples); pass more validation rows or lower min_examples")
    reach = (n_groups - 1) / n_groups
    if sparsity is not None and (isinstance(sparsity, bool) or not 0.0 < sparsity <= reach + 1e-9):
        raise InterpError(f"sparsity={sparsity!r} cannot be reached: with n_groups={n_groups} the probe prunes at "
                          f"most {reach:.3f} of the weights (every matrix keeps its top group); pass a target in "
                          f"(0, {reach:.3f}] or more groups")
    if max_checks is not None and (isinstance(max_checks, bool) or not isinstance(max_checks, int) or max_checks < 1):
        raise InterpError(f"max_checks={max_checks!r} must be an int >= 1, or None for no cap (the probe runs to its target)")


def _check_covers(scores: WeightScores, lins: dict) -> None:
    missing = [n for n, l in lins.items() if n not in scores.norms or scores.norms[n].shape != (l.shape[1],)]
    if missing:
        raise InterpError(f"the scores do not cover this model: {len(missing)} of its {len(lins)} weights have no "
                          f"norms of their input width, e.g. {missing[0]} (were they computed on another model?)")


def _enough(names: list[str], need: float, adds: dict[str, int]) -> list[str]:
    """The first of `names` (in order) whose added weights `adds` reach `need`."""
    have, take = 0, []
    for n in names:
        if have >= need:
            break
        take.append(n)
        have += adds[n]
    return take


def _relative_group_scores(score: Tensor, group: Tensor, n_groups: int) -> Tensor:
    """[G] mean score of each group over the matrix's mean score (comparable across matrices)."""
    flat, g = score.flatten().float(), group.flatten().long()
    sums = torch.zeros(n_groups, device=flat.device).index_add_(0, g, flat)
    counts = torch.bincount(g, minlength=n_groups).clamp_min(1)
    return (sums / counts) / flat.mean().clamp_min(1e-30)


# ---------------------------------------------------------------------------------------------
# controls at the same sparsity per matrix


def random_like(p: Probe, *, seed: int = 0) -> Probe:
    """A mask that prunes as many weights of each matrix as `p` does, chosen uniformly at random
    (per row when `p` was grouped per row, so every row loses as many as it did in `p`)."""
    gen = torch.Generator().manual_seed(seed)
    masks = {}
    for n, m in p.masks.items():
        rows = m if p.meta.get("grouping", "row") == "row" else m.reshape(1, -1)
        keep_per_row = rows.sum(1, keepdim=True)  # [rows, 1]
        # drawn on the CPU (one seed gives the same mask on any device), compared where the mask lives
        order = torch.rand(rows.shape, generator=gen).argsort(1).argsort(1).to(m.device)
        masks[n] = (order >= rows.shape[1] - keep_per_row).reshape(m.shape)  # keep that many, at random
    return _control(p, masks, {"control": "random", "seed": seed})


def magnitude_like(model, p: Probe) -> Probe:
    """A mask that prunes as many weights of each matrix (per row when `p` was grouped per row) as
    `p` does, the smallest |W| first: magnitude pruning at `p`'s sparsity."""
    check_model(model, p.masks, p.meta)
    masks = {}
    for n, m in p.masks.items():
        w = model.get_parameter(n).detach().abs().float()
        rows_w, rows_m = (w, m) if p.meta.get("grouping", "row") == "row" else (w.reshape(1, -1), m.reshape(1, -1))
        keep = rows_m.sum(1, keepdim=True)
        rank = rows_w.argsort(dim=1, stable=True).argsort(dim=1)  # 0 = smallest
        masks[n] = (rank >= rows_w.shape[1] - keep).reshape(m.shape)
    return _control(p, masks, {"control": "magnitude"})


def _control(p: Probe, masks: dict[str, Tensor], extra: dict[str, Any]) -> Probe:
    return Probe(masks, {n: 1.0 - float(m.float().mean()) for n, m in masks.items()}, [],
                 {**{k: v for k, v in p.meta.items() if k in ("model", "fingerprint", "grouping", "n_groups", "labels")},
                  **extra})


def per_matrix(p: Probe) -> dict[str, float]:
    """{"L3.mlp.out": sparsity, ...}: the sparsity per matrix under its short label."""
    labels = p.meta.get("labels", {})
    return {labels.get(n, n): round(s, 4) for n, s in p.sparsity.items()}
