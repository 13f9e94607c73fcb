"""The one context manager that adds TransformerLens hooks and always removes them, and the one
that switches the model modes an analysis needs (`split_inputs`) and always restores them.

Interventions are data (`interp.interventions`) applied by `interp.run`, which goes through
`hooks` below; use `hooks` directly for your own hook functions in a notebook. Library code
outside `interp.run` does not: tests/test_architecture.py says who may. The checks of layers and
heads are in `interp.sites`.
"""

from __future__ import annotations

import functools
import re
import warnings
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import torch
from torch import Tensor

from interp.errors import InterpError
from interp.sites import check_head, check_hook_names, check_layer, kv_head_of, n_kv_heads  # noqa: F401 (moved to sites)

# The shape checks live in interp.sites; importing them from here still works for callers not yet
# moved, but only hook work belongs here (tests/test_architecture.py enforces who may import it).
__all__ = ["hook_groups", "hook_names", "hooks", "split_inputs"]

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


@contextmanager
def hooks(model, fwd: HookList = (), bwd: HookList = ()) -> Iterator[object]:
    """Add forward/backward hooks for the body; they are removed on exit, even when it raises.

    Names are validated before anything is added, so a typo fails before the model runs.
    """
    check_hook_names(model, [n for n, _ in fwd] + [n for n, _ in bwd])
    with warnings.catch_warnings():
        # TL 4.3 only warns when an attention run inside the HF module (BERT's) drops a hook's edit:
        # a silently unchanged result is worse than no result
        warnings.filterwarnings("error", message=_DISCARDED, category=UserWarning)
        try:
            with model.hooks(fwd_hooks=[(n, _naming(n, f)) for n, f in fwd], bwd_hooks=[(n, _naming(n, f)) for n, f in bwd]):
                yield model
        except UserWarning as err:
            if re.match(_DISCARDED, str(err)) is None:
                raise
            kind = str(err).split()[3].rsplit(".", 1)[-1]  # TL names the hook without its layer
            where = ", ".join(dict.fromkeys(n for n, _ in fwd if n.endswith(kind))) or kind
            raise InterpError(f"an edit at {where} would be ignored: on this model TransformerLens runs that attention inside "
                              "the Hugging Face module, which never reads the edited tensor; edit blocks.L.attn.hook_z or the "
                              "residual stream instead") from None


_DISCARDED = r"A hook on \S+ returned a modified tensor, but .*discarded"


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


@contextmanager
def split_inputs(model) -> Iterator[None]:
    """Turn on the bridge's per-receiver input hooks (split q/k/v inputs, MLP input) for the body
    and restore the caller's flags after, even on error: the model comes back unchanged."""
    cfg = model.cfg
    saved = (bool(cfg.use_split_qkv_input), bool(cfg.use_hook_mlp_in), bool(getattr(cfg, "use_attn_in", False)))
    try:
        if saved[2]:
            model.set_use_attn_in(False)  # exclusive with split q/k/v inputs
        try:
            model.set_use_split_qkv_input(True)
        except NotImplementedError:  # TL has no per-head inputs for this attention (BERT's)
            arch = getattr(cfg, "architecture", None) or type(model).__name__
            raise InterpError(
                f"circuits were asked of a {arch} model, which has no per-head inputs (and post-LN has no per-edge "
                "sum); use a decoder: GPT-2, LLaMA, Qwen2 or Gemma."
            ) from None
        model.set_use_hook_mlp_in(True)
        yield
    finally:
        model.set_use_split_qkv_input(saved[0])
        model.set_use_hook_mlp_in(saved[1])
        if saved[2]:
            model.set_use_attn_in(True)
