"""The one context manager that adds TransformerLens hooks and always removes them, and the
checks of hook names, layers and heads.

Interventions are data (`interp.interventions`) applied by `interp.run`, which goes through
`hooks` below; use `hooks` directly for your own hook functions in a notebook.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

from torch import Tensor

from interp.errors import InterpError
from interp.sites import check_hook_names

__all__ = ["check_head", "check_hook_names", "check_layer", "hook_names", "hooks", "kv_head_of", "n_kv_heads"]

HookFn = Callable[..., Tensor | None]
HookList = Sequence[tuple[str, HookFn]]


def hook_names(model) -> list[str]:
    return list(model.hook_dict)


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
    with model.hooks(fwd_hooks=list(fwd), bwd_hooks=list(bwd)):
        yield model
