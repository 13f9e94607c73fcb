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
(`from interp.model.resuming import resume`); the old names stay importable from here.
"""

from __future__ import annotations

from interp.model.building import (  # noqa: F401  (importable here for existing callers)
    DECODER_FAMILIES,
    DEFAULT_WORDS,
    FAMILIES,
    build_tiny,
    family_of,
    hf_config,
    hf_model_class,
    save_model_dir,
)
from interp.model.loading import (
    ZOO_DIR,
    ModelNotFoundError,
    describe,
    load,
    name_of,
    placement,
    quiet_loading,
    resolve,
    user_zoo_dir,
    zoo_dirs,
    zoo_path,
)
from interp.model.resuming import (  # noqa: F401  (importable here for existing callers)
    RESUMABLE_FAMILIES,
    cached_keys_values,
    can_resume,
    kv_cache_kwargs,
    new_kv_cache,
    prefilled_kv_cache,
    resume,
    skipped_blocks,
)

__all__ = ["DECODER_FAMILIES", "FAMILIES", "ZOO_DIR", "ModelNotFoundError", "build_tiny", "describe", "load", "name_of", "placement",
           "quiet_loading", "resolve", "user_zoo_dir", "zoo_dirs", "zoo_path"]
