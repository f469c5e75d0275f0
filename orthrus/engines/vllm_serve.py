"""vLLM's OpenAI server with the run's patches (vllm_patches.py) in every process that samples.

    ORTHRUS_VLLM_PATCHES=cpu-expand-float python vllm_serve.py --model DIR [vLLM's server arguments]

Standalone, as vllm_recipe.py: vLLM and the standard library only, never `orthrus`. The same server as
`python -m vllm.entrypoints.openai.api_server` (its `main`, the same arguments). That command cannot
carry a patch: the API server process does not sample; vLLM's engine core does, in a process started
with `spawn` (the CPU platform forces it), which re-imports the parent's `__main__` and nothing else of
it. Started from this file, the engine core re-imports this file, so the patches named in
`ORTHRUS_VLLM_PATCHES` are applied there too, before vLLM's worker registers its CPU kernels. With
the variable empty or unset nothing is patched.
"""

from __future__ import annotations

try:  # imported from the package (the project's tests)
    from . import vllm_patches
except ImportError:  # run as a script in the engine's environment: its directory is on sys.path
    import vllm_patches

# the server process and, re-imported as __mp_main__, the engine core it spawns
if vllm_patches.from_env():
    vllm_patches.apply(vllm_patches.from_env())

if __name__ == "__main__":
    from vllm.entrypoints.launchers.api_server.entry import main

    main()
