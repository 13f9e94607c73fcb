"""The one runner: a model under interventions -> logits, activations, gradients or a metric.

Every capability runs "the model under interventions" through this module, the only place that
turns interventions (`interp.interventions`) into hooks; the hooks are always removed, even on
error, and a model handed in comes back unchanged.

    intervened(model, interventions, start=0)   context: the body runs under them
    logits(model, tokens, interventions)         one forward
    cache(model, tokens, names, interventions)   one forward, recording activations
    observe(model, names, see)                   context: activations streamed to see(name, act)
                                                 as they arrive (reduced by the caller, not kept)
    with_grad(model, tokens, names, interventions)  one forward whose recorded activations are
                                                 in the autograd graph (for attribution)
    natively(model, hf, interventions, record=names)  context: the bridge's HF model without the
                                                 bridge (`interp.native`), the same interventions
                                                 at the same hook names as plain PyTorch hooks
    input_device(model)                          where tokens go (each entry point moves them there)
    reference(model, names, ablation, tokens)    what zero / mean / resample ablation replaces with
    evaluate(model, tokens, variants, metric)    the metric under each of many variants, side by side

`evaluate` is what makes scans cheap: the base input is repeated once per variant along the batch
axis ([variants * batch, pos]) and one hook per site applies each variant's interventions to its
own slice. On a causal decoder each forward also begins where its variants first differ from
the base run: at the earliest intervened block (the residual entering it comes from one recorded
base run; earlier blocks are not run) and at the earliest intervened position (keys and values of
earlier positions come from the base run's KV cache, and their logits are the base run's).
Variants with weight edits run with those weights, each group of equal edits on its own base run.

The package, by role: `runner` (one forward under interventions: `intervened`, `logits`, `cache`,
`with_grad`, `observe`, `reference`), `batched` (`evaluate`: many variants side by side), `planner` (which
variants share a forward: `plan_forwards`, `forward_cost`), `hf_hooks` (`natively`: the same
interventions on the bridge's HF model with no bridge). Import the names from `interp.run`.
"""

from __future__ import annotations

from interp.run.batched import evaluate, scalar
from interp.run.hf_hooks import natively, natively_possible
from interp.run.planner import FORWARD_COST, forward_cost, plan_forwards
from interp.run.runner import Variant, cache, input_device, intervened, logits, observe, reference, with_grad

__all__ = [
    "FORWARD_COST", "Variant", "cache", "evaluate", "forward_cost", "input_device", "intervened", "logits", "natively", "natively_possible", "observe",
    "plan_forwards", "reference", "scalar", "with_grad",
]
