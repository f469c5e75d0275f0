"""Minimal reproduction: vLLM's CPU fallback of the rejection sampler's `expand` kernel leaves a
floating-point output unwritten (docs/findings/vllm-cpu-expand-batch-to-tokens.md).

    .venv-vllm/bin/python orthrus/engines/vllm_expand_repro.py [--patch cpu-expand-float]

Standalone, as vllm_recipe.py: vLLM and the standard library only, no model. On a CPU without
Triton, vLLM registers C++ fallbacks for its Triton kernels (`CpuPlatform.
register_triton_kernel_overrides`); `expand_batch_to_tokens` (vllm/v1/sample/rejection_sampler.py)
spreads each request's temperature, top-k and top-p over its draft positions into
`x.new_empty(num_tokens)` through one of them, `_expand_kernel_impl` (vllm/utils/cpu_triton_utils.py),
which hands the C++ kernel `_ensure_int64(output)`: for any output but int64 (vLLM's float32
temperature and top-p, its int32 top-k) that is a new int64 copy, so the kernel writes the copy and
the tensor the sampler reads keeps whatever memory `new_empty` returned. An int64 tensor is
expanded right.

Prints one JSON object: vLLM's version, whether Triton is present, the patches applied, and for
each dtype the input, the expected and the returned expansion. `--patch cpu-expand-float` applies
vllm_patches.py's correction of that one function first: every case then comes out right.
"""

from __future__ import annotations

import argparse
import json

try:  # imported from the package (the project's tests)
    from . import vllm_patches
except ImportError:  # run as a script in the engine's environment: its directory is on sys.path
    import vllm_patches


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--patch", action="append", default=[], choices=sorted(vllm_patches.PATCHES))
    args = ap.parse_args(argv)
    import torch
    import vllm
    from vllm.platforms.cpu import CpuPlatform
    from vllm.triton_utils import HAS_TRITON

    patches = vllm_patches.apply(args.patch)
    CpuPlatform.register_triton_kernel_overrides()  # what vLLM's CPU platform does at start-up
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

    out = {"vllm": vllm.__version__, "torch": torch.__version__, "has_triton": bool(HAS_TRITON), "patches": patches}
    out["cases"] = []
    cu_num_tokens = torch.tensor([2, 5])  # request 0 has 2 draft positions, request 1 has 3
    # the dtypes vLLM's input batch holds them in (vllm/v1/worker/gpu_input_batch.py): temperature
    # and top-p float32, top-k int32; an int64 tensor, which the C++ kernel takes as it is, for control
    cases = (
        ("temperature float32", [0.7, 0.5], torch.float32),
        ("top_p float32", [0.9, 0.8], torch.float32),
        ("top_k int32", [50, 3], torch.int32),
        ("top_k int64", [50, 3], torch.int64),
    )
    for name, values, dtype in cases:
        got = expand_batch_to_tokens(torch.tensor(values, dtype=dtype), cu_num_tokens, 5)
        expected = [values[0]] * 2 + [values[1]] * 3
        out["cases"].append(
            {
                "case": name,
                "input": values,
                "expected": expected,
                "got": got.tolist(),
                "correct": torch.allclose(got.double(), torch.tensor(expected, dtype=torch.float64)),
            }
        )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
