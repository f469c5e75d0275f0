"""Opt-in corrections of vLLM functions, for fix-controlled experiments (docs/findings/).

Standalone, as vllm_recipe.py: vLLM, torch and the standard library only, never `orthrus`. A patch
replaces one function and nothing else, so a verdict that changes with it changed with that function
alone. The recipe applies the run's patches in its own process and names them in
`ORTHRUS_VLLM_PATCHES` (comma-separated) before it starts an engine; vLLM's engine core starts with
`spawn`, which imports the recipe, and so this module, again, and applies them there too, before
vLLM's worker registers its CPU kernels. Each patched function says once on stderr that it ran, so
the run's log shows the patch reached the process that samples.

Patches:
  cpu-expand-float  vllm.utils.cpu_triton_utils._expand_kernel_impl, the CPU fallback of the
                    rejection sampler's `expand` kernel, which passes `_ensure_int64(output)` to its
                    C++ kernel: for a float32 output (the per-position temperature and top-p) that
                    is a new int64 copy, and the tensor the sampler reads stays unwritten. Corrected:
                    a non-int64 output is expanded in its own dtype with torch (the Triton kernel's
                    semantics: each request's value, `replace_from` replaced by `replace_to`, over its
                    positions); int64 outputs still go to the C++ kernel.
"""

from __future__ import annotations

import os
import sys

ENV = "ORTHRUS_VLLM_PATCHES"
_ORIGINAL: dict = {}


def _expand_float(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
    import torch

    if output.dtype == torch.int64:
        return _ORIGINAL["cpu-expand-float"](output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS)
    if not _expand_float.said:
        _expand_float.said = True
        print(
            f"[vllm_patches] cpu-expand-float: a {output.dtype} expansion written in place (pid {os.getpid()})",
            file=sys.stderr,
            flush=True,
        )
    ends = cu_num_tokens.to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    values = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
    output[: int(ends[-1])] = values.repeat_interleave(counts).to(output.dtype)


_expand_float.said = False

# name -> (module, attribute, replacement)
PATCHES = {"cpu-expand-float": ("vllm.utils.cpu_triton_utils", "_expand_kernel_impl", _expand_float)}


def apply(names) -> list[str]:
    """Patch exactly `names` (others restored to vLLM's own); the names applied, sorted."""
    import importlib

    unknown = sorted(set(names) - set(PATCHES))
    if unknown:
        raise ValueError(f"unknown vLLM patch {unknown[0]!r} (known: {', '.join(PATCHES)})")
    for name, (module, attr, fixed) in PATCHES.items():
        mod = importlib.import_module(module)
        _ORIGINAL.setdefault(name, getattr(mod, attr))
        setattr(mod, attr, fixed if name in names else _ORIGINAL[name])
    return sorted(names)


def from_env() -> list[str]:
    return [n for n in os.environ.get(ENV, "").split(",") if n]
