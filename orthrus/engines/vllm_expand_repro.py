"""Minimal reproduction: vLLM's CPU fallback of the rejection sampler's `expand` kernel leaves a
floating-point output unwritten (docs/findings/vllm-cpu-expand-batch-to-tokens.md).

    .venv-vllm/bin/python orthrus/engines/vllm_expand_repro.py

Standalone, as vllm_recipe.py: vLLM and the standard library only, no model. On a CPU without
Triton, vLLM registers C++ fallbacks for its Triton kernels (`CpuPlatform.
register_triton_kernel_overrides`); `expand_batch_to_tokens` (vllm/v1/sample/rejection_sampler.py)
spreads each request's temperature, top-k and top-p over its draft positions into
`x.new_empty(num_tokens)` through one of them, `_expand_kernel_impl` (vllm/utils/cpu_triton_utils.py),
which hands the C++ kernel `_ensure_int64(output)`: for a float32 output that is a new int64 copy, so
the kernel writes the copy and the float32 tensor the sampler reads keeps whatever memory
`new_empty` returned. The int64 top-k is expanded right.

Prints one JSON object: vLLM's version, whether Triton is present, and for each dtype the input,
the expected and the returned expansion.
"""

from __future__ import annotations

import json


def main() -> int:
    import torch
    import vllm
    from vllm.platforms.cpu import CpuPlatform
    from vllm.triton_utils import HAS_TRITON

    CpuPlatform.register_triton_kernel_overrides()  # what vLLM's CPU platform does at start-up
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

    cu_num_tokens = torch.tensor([2, 5])  # request 0 has 2 draft positions, request 1 has 3
    out = {"vllm": vllm.__version__, "torch": torch.__version__, "has_triton": bool(HAS_TRITON), "cases": []}
    for name, values in (("temperature float32", [0.7, 0.5]), ("top_k int64", [5, 3])):
        x = torch.tensor(values, dtype=torch.float32 if isinstance(values[0], float) else torch.int64)
        got = expand_batch_to_tokens(x, cu_num_tokens, 5)
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
