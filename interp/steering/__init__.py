"""Axes and the steering generator: add, flip, remove or set a direction while generating.

    axis = steering.axis_from_contrast(model, singular, plural, site="resid_pre", layer=2)
    gen = steering.generate(model, prompts, [steering.Steer(axis, "flip")], max_new_tokens=8)
    gen.completions, gen.projections        # texts, and (h - mean) . u at every step
    grid = steering.curve(model, task, axis, [0, 0.5, 1], mode="flip")   # dose-response Grid

Vocabulary, fixed once (h: the activation at the axis's site, a [d_model] vector per position):

    u          the axis direction, a unit vector (or exactly zero: a null axis, every mode is then
               the identity)
    mean (mu)  the reference point the axis is centred on; for a difference of class means it is
               the midpoint of the two class means
    c          the projection (h - mu) . u; `proj_mean` and `proj_std` are its mean and standard
               deviation over the reference set the axis was built from
    strength s add:          h + s u                       (s in residual-stream units)
               flip:         h - 2 s c u                   (s=1 reflects h through the plane c=0)
               project_out:  h - s c u                     (s=1 puts h on the plane c=0)
               set:          h + (proj_mean + s proj_std - c) u   (s in natural standard deviations)
    strength 0 is the identity for add, flip and project_out.

Sites use the one vocabulary of `interp.sites`: a short name with a layer ("resid_pre", 2) or a
full hook name ("blocks.2.hook_resid_pre"); steering acts on residual-width sites only.

Layers, as everywhere in interp: `apply` and `projection` are pure tensor functions; `Steer`
(an axis, a mode, a strength and optionally the [batch, pos] positions to steer) is a frozen
intervention on the protocol of `interp.interventions`, so `interp.run` applies it like any other;
`generate` / `curve` / `axis_from_contrast` run the model. `Axis` and `Generation` are results
(`interp.results.save` / `load`). Files: `axes.py` (data and pure functions), `generate.py`
(generator and model-running analyses). The SVA study behind `interp repro steering` lives in
`interp.studies.steering`.

The generator keeps its own greedy/sampling loop over the bridge's forward pass with a Hugging
Face KV cache: the prompt runs once, then each step feeds one new token per row, each forward under
`interp.run.intervened` with Steers built for that step (`start` = the new token's position).
Prompts of different lengths are left-padded, with an attention mask and explicit position ids, so
a row's positions (and so its outputs) are the same as when it runs alone. TransformerLens 4.3's
bridge looks for the cache under `past_key_values` / `layer_past`, but transformers 5 hands it to
the attention layers as `cache`; `TransformerBridge.generate` therefore decodes with an empty cache
here (its cached output differs from its uncached output). `interp.model.resuming.kv_cache_kwargs` passes
the cache under both names, and `generate` checks after the prompt step that the cache really
holds the prompt.
"""

from interp.steering.axes import (
    MODES, Axis, Generation, Steer, apply, axis_from_core, axis_from_vector, projection, random_axis,
)
from interp.steering.generate import POSITIONS, axis_from_contrast, curve, encode, generate, last_activations

__all__ = [
    "MODES", "POSITIONS", "Axis", "Generation", "Steer", "apply", "axis_from_contrast", "axis_from_core",
    "axis_from_vector", "curve", "encode", "generate", "last_activations", "projection", "random_axis",
]
