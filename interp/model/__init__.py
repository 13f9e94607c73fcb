"""Loading models as TransformerLens 4.x bridges; the one place that knows TL boot details.

`load(spec)` accepts a Hugging Face hub name, a local HF-format directory, or `zoo:NAME` (a model
shipped in interp/data/zoo, or trained into the user zoo, `user_zoo_dir()`). It returns a `TransformerBridge` in eval mode with
`enable_compatibility_mode()` applied, so HookedTransformer hook names and numerics hold.

`build_tiny(family, directory)` writes a small random-weight model of one of the five supported
families (with a local word-level tokenizer) for quick experiments and tests.

The package, by role: `loading` (specs, the zoo's folders, `load`, `describe`), `building` (HF
configs of the five families, `build_tiny`, `save_model_dir`) and `resuming` (KV caches and a
forward that begins at a later block or position, for `interp.run`), and the loading's files:
`gguf` (GGUF files and the real models by name, as HF folders that boot) and `load_cache` (processed
weights cached on disk, the tokenizer parsed once). `__all__` lists what most
users need; the building and resuming helpers are imported from their modules
(`from interp.model.resuming import resume`); their old names here still import, with one
DeprecationWarning naming the module.
"""

from __future__ import annotations

from interp.errors import outside_surface
from interp.model.building import DECODER_FAMILIES, FAMILIES, build_tiny
from interp.model.loading import (
    ZOO_DIR,
    ModelNotFoundError,
    describe,
    input_device,
    load,
    name_of,
    placement,
    quiet_loading,
    resolve,
    user_zoo_dir,
    zoo_dirs,
    zoo_path,
)

__all__ = ["DECODER_FAMILIES", "FAMILIES", "ZOO_DIR", "ModelNotFoundError", "build_tiny", "describe", "input_device", "load", "name_of", "placement",
           "quiet_loading", "resolve", "user_zoo_dir", "zoo_dirs", "zoo_path"]

# names that left the surface: they still import from here, with one DeprecationWarning naming their module
__getattr__ = outside_surface(__name__, {
    **dict.fromkeys(["DEFAULT_WORDS", "family_of", "hf_config", "hf_model_class", "save_model_dir"], "interp.model.building"),
    **dict.fromkeys(["RESUMABLE_FAMILIES", "cached_keys_values", "can_resume", "kv_cache_kwargs", "new_kv_cache",
                     "prefilled_kv_cache", "resume", "skipped_blocks"], "interp.model.resuming"),
})
