"""The one context manager that adds TransformerLens hooks and always removes them, and the
checks of hook names, layers and heads.

Interventions are data (`interp.interventions`) applied by `interp.run`, which goes through
`hooks` below; use `hooks` directly for your own hook functions in a notebook.
"""

from __future__ import annotations

import functools
import warnings
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import torch
from torch import Tensor

from interp.errors import InterpError
from interp.sites import check_hook_names

__all__ = ["check_head", "check_hook_names", "check_layer", "hook_groups", "hook_names", "hooks", "kv_head_of", "n_kv_heads"]

HookFn = Callable[..., Tensor | None]
HookList = Sequence[tuple[str, HookFn]]


def hook_names(model) -> list[str]:
    """Every hook name the model accepts, aliases included (TransformerBridge names several hook
    points twice: `blocks.0.hook_resid_pre` is `blocks.0.hook_in`)."""
    return list(model.hook_dict)


def _fired(model) -> set[int] | None:
    """ids of the hook points that one tiny forward reaches; None when that forward fails."""
    seen: set[int] = set()

    def record(act, hook):
        seen.add(id(hook))

    tokens = torch.zeros(1, 2, dtype=torch.long, device=model.cfg.device)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # TL warns about the gated-off names the filter matches
            model.run_with_hooks(tokens, fwd_hooks=[(lambda name: True, record)])
    except Exception:  # a model that cannot run bare tokens: list every hook point
        return None
    return seen


def hook_groups(model, *, fired_only: bool = True) -> dict[str, list[str]]:
    """One entry per hook point: its canonical name -> its other names (aliases).

    The canonical name is the interp.sites name where there is one (`blocks.0.hook_resid_pre`,
    not the bridge's `blocks.0.hook_in`), else the hook point's own name. With `fired_only`, only
    hook points that a forward pass reaches are listed (no `hook_pos_embed` on a rotary model, no
    `attn.hook_result` until `set_use_attn_result(True)`); `hook_names` lists every name.
    """
    from interp.sites import SITES

    site_hooks = {spec.hook.split("{layer}.")[1] for spec in SITES.values()}
    groups: dict[int, list[str]] = {}
    points = {}
    for name, point in model.hook_dict.items():
        groups.setdefault(id(point), []).append(name)
        points[id(point)] = point
    fired = _fired(model) if fired_only else None
    out: dict[str, list[str]] = {}
    for key, names in groups.items():
        if fired is not None and key not in fired:
            continue
        own = getattr(points[key], "name", None)
        known = [n for n in names if n.split(".", 2)[-1] in site_hooks and n.startswith("blocks.")]
        canonical = known[0] if known else own if own in names else names[0]
        out[canonical] = [n for n in names if n != canonical]
    return out


def check_layer(model, layer: int) -> None:
    n = model.cfg.n_layers
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n:
        raise InterpError(f"layer {layer!r} is out of range: this model has layers 0..{n - 1}")


def n_kv_heads(model) -> int:
    return getattr(model.cfg, "n_key_value_heads", None) or model.cfg.n_heads


def check_head(model, layer: int, head: int, *, kv: bool = False) -> None:
    check_layer(model, layer)
    n = n_kv_heads(model) if kv else model.cfg.n_heads
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < n:
        kind = "kv head" if kv else "head"
        raise InterpError(f"{kind} {head!r} is out of range in layer {layer}: valid {kind}s are 0..{n - 1}")


def kv_head_of(model, head: int) -> int:
    """The key/value head that query head `head` reads under grouped-query attention."""
    check_head(model, 0, head)
    return head // (model.cfg.n_heads // n_kv_heads(model))


@contextmanager
def hooks(model, fwd: HookList = (), bwd: HookList = ()) -> Iterator[object]:
    """Add forward/backward hooks for the body; they are removed on exit, even when it raises.

    Names are validated before anything is added, so a typo fails before the model runs.
    """
    check_hook_names(model, [n for n, _ in fwd] + [n for n, _ in bwd])
    with model.hooks(fwd_hooks=[(n, _naming(n, f)) for n, f in fwd], bwd_hooks=[(n, _naming(n, f)) for n, f in bwd]):
        yield model


def _naming(name: str, fn: HookFn) -> HookFn:
    """`fn`, with an IndexError it raises (a head or position out of range) re-raised as an
    InterpError that names the hook and the activation's shape, instead of a bare index error
    from deep inside the forward pass."""

    @functools.wraps(fn)
    def hook_fn(act, *args, **kwargs):
        try:
            return fn(act, *args, **kwargs)
        except IndexError as err:
            shape = tuple(act.shape) if isinstance(act, Tensor) else "?"
            raise InterpError(f"hook {name} (activation shape {shape}): {err}") from err

    return hook_fn
