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
    forward(model, tokens)                       logits under the weights swapped in now (weight edits),
                                                 with autograd as the caller has it; natively where it can
    decoder(model, sites, cached=True)           one decoding step's forward, on the engine it qualifies for
    input_device(model)                          where tokens go (each entry point moves them there)
    reference(model, names, ablation, tokens)    what zero / mean / resample (any registered style) replaces with
    evaluate(model, tokens, variants, metric)    the metric under each of many variants, side by side
    engine_of(model, tokens, variants)           which engine `evaluate` runs them on

`evaluate` is what makes scans cheap: the base input is repeated once per variant along the batch
axis ([variants * batch, pos]) and one hook per site applies each variant's interventions to its
own slice. On a causal decoder each forward also begins where its variants first differ from
the base run: at the earliest intervened block (the residual entering it comes from one recorded
base run; earlier blocks are not run) and at the earliest intervened position (keys and values of
earlier positions come from the base run's KV cache, and their logits are the base run's).
Variants with weight edits run with those weights, each group of equal edits on its own base run.

The runner owns every engine, and chooses: callers say what to compute (interventions, variants, a
metric), never how. `evaluate` runs on the first engine that takes every variant, each checked once per
model and dtype to compute the bridge's function (`hf_hooks`): `packed` (each variant intervenes on
the residual entering one block only: resumed at that block and its first position on the native
blocks, a block's variants packed into one forward), `heads` (each intervenes on one block's head
outputs only: resumed at that block's o_proj, natively), else the bridge as above. Generation's steps run natively
(`decoder`) where their sites have a native place.

The package, by role: `runner` (one forward under interventions: `intervened`, `logits`, `cache`,
`with_grad`, `observe`, `reference`), `batched` (`evaluate` and its choice of engine), `planner` (which
variants share a forward: `plan_forwards`, `forward_cost`), `hf_hooks` (the same interventions on the
bridge's HF model with no bridge; the equivalence checks), `packed` and `heads` (the native resumed
engines), `decode` (generation's step). Import the names from `interp.run`; capabilities never import
its modules.
"""

from __future__ import annotations

from interp.run.batched import engine_of, evaluate
from interp.run.decode import decoder
from interp.run.hf_hooks import forward
from interp.run.planner import forward_cost, plan_forwards
from interp.run.runner import Variant, cache, input_device, intervened, logits, observe, reference, scalar, with_grad

__all__ = [
    "Variant", "cache", "decoder", "engine_of", "evaluate", "forward", "forward_cost", "input_device", "intervened", "logits",
    "observe", "plan_forwards", "reference", "scalar", "with_grad",
]
