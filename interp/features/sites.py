"""Features as sites: read a dictionary's feature activations and intervene on chosen features
through the one runner (`interp.run`), with the error term kept.

    feature_acts(model, tokens, d)        [batch, pos, n_features], read through run.cache
    FeatureEdit(d, features, mode, ...)   an intervention at d.site_out (the protocol of
                                          interp.interventions): ablate, patch or steer features
    feature_edit(model, tokens, d, ...)   a FeatureEdit ready for `tokens` (for a transcoder it
                                          records the MLP's input first; see below)
    top_examples(model, tokens, d, ...)   the top-activating contexts of each feature (TopExamples;
                                          interp.plot draws it as a browser dashboard)

A FeatureEdit replaces the activation a at site_out by decode(f') + (a - decode(f)): the edited
features f' rebuilt, plus the dictionary's error on this input, so an edit that changes no
feature changes nothing. It is computed as a + (f' - f) W_dec over the chosen features (the same
number, without the rounding of rebuilding a whole activation). f is read from a itself for an
SAE; a transcoder's features are a function of the MLP's *input* (site_in), which the runner's
hook at site_out does not see, so the edit carries that input (`inputs`, recorded from the same
tokens under the same upstream interventions by `feature_edit`). The edit's own layer never
changes its own input, so this is exact for edits at one layer; edits at several layers at once
each need `inputs` recorded under the earlier ones.
"""

from __future__ import annotations

import math

import operator
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch import Tensor

from interp.errors import InterpError
from interp.features.dictionary import Dictionary
from interp.run import Variant, cache
from interp.sites import check_position, check_tokens, kind_of
from interp.files.storage import result

__all__ = ["EDITS", "FeatureEdit", "TopExamples", "check_fits", "feature_acts", "feature_edit", "top_examples"]

EDITS = ("ablate", "patch", "steer")


def _width(model, site: str) -> int | None:
    """The width of `site`'s activation when the model's config says it (residual-width sites and
    norm outputs), else None (checked when the activation arrives)."""
    return model.cfg.d_model if kind_of(site) == "resid" or site.endswith("hook_normalized") else None


def check_fits(model, dictionary: Dictionary) -> None:
    """InterpError unless `dictionary` reads and writes the widths of `model`'s sites."""
    if not isinstance(dictionary, Dictionary):
        raise InterpError(f"dictionary is a {type(dictionary).__name__}; pass an interp.features.Dictionary")
    for site, width, side in ((dictionary.site_in, dictionary.W_enc.shape[0], "reads"),
                              (dictionary.site_out, dictionary.W_dec.shape[1], "writes")):
        want = _width(model, site)
        if want is not None and want != width:
            raise InterpError(f"the dictionary {side} width {width} at {site}, but this model's activation there has "
                              f"width {want}; pass a dictionary trained on this model")


def feature_acts(model, tokens: Tensor, dictionary: Dictionary, interventions: Variant = ()) -> Tensor:
    """Feature activations [batch, pos, n_features] of `tokens` under `interventions`."""
    check_fits(model, dictionary)
    check_tokens(tokens, model=model)
    _, acts = cache(model, tokens.to(model.cfg.device), [dictionary.site_in], interventions)
    return dictionary.encode(acts[dictionary.site_in].float())


def _feature_ids(features, n: int) -> tuple[int, ...]:
    """`features` (one id or several; Python, numpy or torch integers) as a tuple of ints, each in
    0..n-1: a float id is refused, not truncated to another feature."""
    if isinstance(features, Tensor):
        items = features.flatten().tolist()
    else:
        items = list(features) if hasattr(features, "__iter__") and not isinstance(features, str) else [features]
    try:
        feats = tuple(operator.index(f) for f in items)
    except TypeError:
        feats = ()
    if not feats or any(isinstance(f, bool) for f in items) or not all(0 <= f < n for f in feats):
        raise InterpError(f"features {items[:8]!r} must be a non-empty list of int indices in 0..{n - 1}")
    return feats


@dataclass(frozen=True)
class FeatureEdit:
    """Edit features `features` of `dictionary` at its site_out, at `positions` (absolute; negative
    counts from the end; None: all).

    mode "ablate": the features become 0. "steer": `value` is added to each feature's activation
    (a multiple of its decoder direction is added). "patch": the features become `value`, a
    number or a tensor [batch, pos, len(features)] (e.g. `feature_acts` of another input, sliced).
    `inputs` [batch, pos, d_in]: a transcoder's site_in activations of this input (needed to
    ablate or patch; `feature_edit` records them)."""

    dictionary: Dictionary
    features: Sequence[int] | int  # held as a tuple
    mode: str = "ablate"
    value: Any = 0.0
    positions: Sequence[int] | int | None = None  # held as a tuple
    inputs: Tensor | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        feats = _feature_ids(self.features, self.dictionary.n_features)
        object.__setattr__(self, "features", feats)
        if self.mode not in EDITS:
            raise InterpError(f"mode={self.mode!r} is not one of {EDITS}")
        if isinstance(self.value, Tensor):
            finite = (self.value.is_floating_point() or self.value.dtype in (torch.int32, torch.int64)) and bool(torch.isfinite(self.value).all())
        else:
            finite = isinstance(self.value, (int, float)) and not isinstance(self.value, bool) and math.isfinite(self.value)
        if not finite:
            raise InterpError(f"value={self.value!r:.60} must be a finite number or a tensor of finite numbers")
        if isinstance(self.value, Tensor) and self.value.ndim and self.value.shape[-1] != len(feats):
            raise InterpError(f"value has shape {tuple(self.value.shape)}; want [batch, pos, {len(feats)}] (one per feature)")
        if self.positions is not None:
            object.__setattr__(self, "positions", tuple(int(p) for p in (
                [self.positions] if isinstance(self.positions, int) else self.positions)))
        if self.dictionary.kind == "transcoder" and self.mode != "steer" and self.inputs is None:
            raise InterpError(f"{self.mode} on a transcoder's features needs `inputs`, its {self.dictionary.site_in} "
                              "activations of this input; build the edit with interp.features.feature_edit(model, tokens, ...)")

    @property
    def sites(self) -> tuple[str, ...]:
        return (self.dictionary.site_out,)

    @property
    def first_pos(self) -> int:
        if self.positions is None or any(p < 0 for p in self.positions):
            return 0
        return min(self.positions)

    def _current(self, act: Tensor, start: int, idx: Tensor) -> Tensor:
        """The chosen features' activations at act's positions, [batch, pos, k]."""
        d = self.dictionary.to(act.device)
        x = act if d.kind == "sae" else self.inputs.narrow(1, start, self.inputs.shape[1] - start)
        if x.shape[:2] != act.shape[:2]:
            raise InterpError(f"inputs {tuple(self.inputs.shape)} do not match the activation at {d.site_out} "
                              f"{tuple(act.shape)} (from position {start}); record them from the same tokens")
        if d.k is not None:  # a TopK dictionary's choice of features needs them all
            return d.encode(x)[..., idx]
        return d.activation(d.pre(x, idx), idx)

    def __call__(self, act: Tensor, *, site: str, start: int = 0) -> Tensor:
        d = self.dictionary.to(act.device)
        idx = torch.tensor(self.features, device=d.W_enc.device)
        n_pos, shape, act = act.shape[1], act.shape, d.flat(act, "out")  # hook_z: [b, p, heads, d_head] -> [b, p, d]
        if act.shape[-1] != d.W_dec.shape[1]:
            raise InterpError(f"the activation at {site} has width {act.shape[-1]}, but the dictionary writes width "
                              f"{d.W_dec.shape[1]}; pass a dictionary trained on this model")
        if self.mode == "steer":
            delta = torch.as_tensor(self.value, dtype=d.W_dec.dtype, device=act.device).expand(*act.shape[:2], len(self.features))
        else:
            f = self._current(act, start, idx)
            if self.mode == "ablate":
                delta = -f
            else:
                target = torch.as_tensor(self.value, dtype=f.dtype, device=f.device)
                if target.ndim == 3:
                    target = target.narrow(1, start, target.shape[1] - start)
                delta = target.to(f.device) - f
        if self.positions is not None:
            absolute = torch.arange(start, start + n_pos, device=act.device)
            total = start + n_pos
            chosen = torch.tensor([p if p >= 0 else total + p for p in self.positions], device=act.device)
            on = torch.isin(absolute, chosen).to(delta)
            delta = delta * on[None, :, None]
        return (act + (delta.to(d.W_dec) @ d.W_dec[idx]).to(act.dtype)).reshape(shape)


def feature_edit(model, tokens: Tensor, dictionary: Dictionary, features, mode: str = "ablate", value: Any = 0.0,
                 positions=None, interventions: Variant = ()) -> FeatureEdit:
    """A FeatureEdit for `tokens`: for a transcoder (ablate, patch) its site_in activations are
    recorded first, under `interventions` (the other edits this run applies upstream)."""
    check_fits(model, dictionary)
    check_tokens(tokens, model=model)
    if positions is not None:
        n_pos = tokens.shape[-1]
        positions = [check_position(p, n_pos, "feature_edit position")
                     for p in ([positions] if isinstance(positions, int) else positions)]
    inputs = None
    if dictionary.kind == "transcoder" and mode != "steer":
        _, acts = cache(model, tokens.to(model.cfg.device), [dictionary.site_in], interventions)
        inputs = acts[dictionary.site_in]
    return FeatureEdit(dictionary, features, mode, value, positions, inputs)


@result
@dataclass(frozen=True)
class TopExamples:
    """The top-activating contexts of chosen features: for feature features[i], example j sits at
    (rows[i, j], positions[i, j]) with activation values[i, j]; its context's tokens are
    contexts[i][j] (strings, the activating token at index `center`) with each token's activation
    of that feature in context_acts[i, j]."""

    features: Tensor  # [F]
    values: Tensor  # [F, k]
    rows: Tensor  # [F, k]
    positions: Tensor  # [F, k]
    contexts: list  # F lists of k lists of token strings, each of `window` tokens ("" past the ends)
    context_acts: Tensor  # [F, k, window]
    center: int
    dictionary: str = ""
    model: str = ""
    meta: dict = field(default_factory=dict)

    def to_grid(self):
        """The top activations as a Grid [feature, example] (the dashboard's static chart)."""
        from interp.results import Grid

        return Grid(self.values, ("feature", "example"),
                    (tuple(f"f{int(f)}" for f in self.features), tuple(range(self.values.shape[1]))),
                    {"title": f"top activations: {self.dictionary}", "model": self.model})


def _token_strings(model, ids: Sequence[int]) -> list[str]:
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        return [str(int(i)) for i in ids]
    parts = [tok.decode([int(i)]) for i in ids]
    if len(parts) > 1 and "".join(parts) != tok.decode([int(i) for i in ids]) == " ".join(parts):
        return [p + " " for p in parts]  # a word-level tokenizer: decoding puts spaces between tokens
    return parts


def top_examples(model, tokens: Tensor, dictionary: Dictionary, *, valid: Tensor | None = None,
                 features: Sequence[int] | None = None, k: int = 8, before: int = 8, after: int = 3,
                 rows_per_forward: int = 16, token_strings=None) -> TopExamples:
    """The `k` top-activating positions of each feature (default: every feature that fires) over
    `tokens` [rows, pos] (only where `valid`), with `before` / `after` tokens of context.
    `token_strings(ids) -> list[str]`: how a token id is shown (default: the model's tokenizer)."""
    check_tokens(tokens, model=model)
    if tokens.ndim != 2:
        raise InterpError(f"tokens must be [rows, pos], got shape {tuple(tokens.shape)}")
    valid = torch.ones_like(tokens, dtype=torch.bool) if valid is None else valid
    if not isinstance(valid, Tensor) or valid.dtype != torch.bool or valid.shape != tokens.shape:
        raise InterpError(f"valid must be a bool tensor shaped like tokens {tuple(tokens.shape)}, got "
                          f"{getattr(valid, 'dtype', type(valid).__name__)} {tuple(getattr(valid, 'shape', ()))}")
    for name, count, lo in (("k", k, 1), ("before", before, 0), ("after", after, 0), ("rows_per_forward", rows_per_forward, 1)):
        if isinstance(count, bool) or not isinstance(count, int) or count < lo:
            raise InterpError(f"top_examples {name}={count!r} must be an int >= {lo}")
    if features is not None:
        features = _feature_ids(features, dictionary.n_features)
    acts = torch.cat([feature_acts(model, tokens[i : i + rows_per_forward], dictionary).cpu()
                      for i in range(0, len(tokens), rows_per_forward)])  # [rows, pos, n]
    acts = acts.masked_fill(~valid[..., None], 0.0)
    if features is None:
        features = torch.nonzero(acts.amax((0, 1)) > 0).flatten().tolist()
    feats = torch.tensor(list(features), dtype=torch.long)  # cpu: a host table
    flat = acts[..., feats].flatten(0, 1).T  # [F, rows * pos]
    kk = min(k, flat.shape[1])
    top = flat.topk(kk, dim=1)
    rows, pos = top.indices // tokens.shape[1], top.indices % tokens.shape[1]
    show = token_strings or (lambda ids: _token_strings(model, ids))
    window = before + 1 + after
    contexts, cacts = [], torch.zeros(len(feats), kk, window)  # cpu: a host table
    for i, f in enumerate(feats.tolist()):
        per = []
        for j in range(kk):
            r, p = int(rows[i, j]), int(pos[i, j])
            lo, hi = max(0, p - before), min(tokens.shape[1], p + after + 1)
            words = show(tokens[r, lo:hi].tolist())
            pad_l = before - (p - lo)
            per.append([""] * pad_l + words + [""] * (window - pad_l - len(words)))
            cacts[i, j, pad_l : pad_l + hi - lo] = acts[r, lo:hi, f]
        contexts.append(per)
    return TopExamples(feats, top.values, rows, pos, contexts, cacts, before, repr(dictionary), dictionary.model,
                       {"rows": int(tokens.shape[0]), "positions": int(valid.sum())})
