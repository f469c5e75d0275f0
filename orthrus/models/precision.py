"""Numerical precision in one place: dtype, TF32, attention kernel, determinism, and their record.

The numerics are the subject of the study, so every decoding result carries `numerical_env()`.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections import Counter

import torch

from orthrus.contracts import ATTENTIONS, PRECISIONS
from orthrus.errors import InputError
from orthrus.machine import what_ran

DTYPES = dict(zip(PRECISIONS, (torch.bfloat16, torch.float16, torch.float32, torch.float32)))
# the precisions whose matrix products may use TF32 (CUDA's 10-bit-mantissa inputs, fp32 sums)
TF32 = ("tf32",)


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    aliases = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
    key = aliases.get(name, name)
    if key not in DTYPES:
        raise InputError(f"unknown precision {name!r}; expected one of {sorted(DTYPES)}")
    return DTYPES[key]


def dtype_name(dtype: torch.dtype) -> str:
    """The precision of a torch dtype (float32 is fp32: TF32 is a flag, not a dtype)."""
    return {v: k for k, v in reversed(DTYPES.items())}[dtype]


def check_attention(name: str) -> str:
    if name not in ATTENTIONS:
        raise InputError(f"unknown attention implementation {name!r}; expected one of {ATTENTIONS}")
    if name == "flash_attention_2":
        import importlib.util

        if importlib.util.find_spec("flash_attn") is None or not torch.cuda.is_available():
            raise InputError("attention 'flash_attention_2' needs the flash_attn package and a CUDA GPU")
    return name


def allow_tf32(on: bool) -> None:
    """TF32 products on (the `tf32` precision) or off (every other), for cuBLAS and cuDNN alike."""
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    torch.set_float32_matmul_precision("high" if on else "highest")


def configure(dtype: str | torch.dtype = "fp32", deterministic: bool = True, threads: int | None = None) -> torch.dtype:
    """Set the process-wide numerical flags for a run and return the torch dtype.

    TF32 is off except for the precision `tf32`: the study compares exact fp32 against reduced
    precision, and TF32 silently turns "fp32" matmuls into 10-bit-mantissa ones on Ampere and later
    GPUs, so it is a precision of its own (set, like the others, explicitly every time: these flags
    are process-wide).
    """
    allow_tf32(dtype in TF32)
    dtype = parse_dtype(dtype)
    if deterministic and torch.cuda.is_available() and not torch.cuda.is_initialized():
        # cuBLAS is deterministic only with a fixed workspace, else every matmul warns (warn_only) and
        # may vary between runs; torch reads the setting at its first cuBLAS call, so it is set before
        # CUDA starts, unless the caller chose one (numerical_env records it). Set later it would
        # silence the warning without fixing the workspace: torch's warning is left to say so.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # deterministic=False restores torch's own defaults (what the authors' scripts ran with),
    # explicitly, since these flags are process-wide and a previous run may have set them.
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    # deterministic mode also fills every new tensor with NaN, a debugging aid that never changes a
    # correct computation's bits and costs a tenth of a small model's forward on CPU
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = deterministic
    if threads:
        torch.set_num_threads(threads)
    return dtype


# torch.nn.attention.SDPBackend's values, by name (its enum is not iterable in every release)
SDPA_BACKENDS = {0: "math", 1: "flash_attention", 2: "efficient_attention", 3: "cudnn_attention", 4: "overrideable"}


@contextlib.contextmanager
def sdpa_backends():
    """Count, by backend, the scaled-dot-product-attention calls made inside the block: the kernel
    torch actually dispatched to (its own choice for the call's device, dtype, shapes and mask,
    `torch._fused_sdp_choice`), which decides the bits of an `sdpa` cell and differs between CPU and
    GPU, and on a GPU between shapes. Yields the Counter; the choice is asked once per kind of call
    (device, dtype, query length, head width, mask), not per call: the count costs about 2 us a call
    on a CPU core, against about a millisecond for a forward of the shipped teacher."""
    import torch.nn.functional as F

    counts: Counter = Counter()
    seen: dict = {}
    original = F.scaled_dot_product_attention

    def counted(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        mask = None if attn_mask is None else (attn_mask.dtype, attn_mask.dim())
        kind = (query.device, query.dtype, tuple(query.shape[-2:]), key.shape[-3], mask, is_causal, enable_gqa)
        if kind not in seen:
            choice = torch._fused_sdp_choice(
                query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
            )
            seen[kind] = SDPA_BACKENDS.get(int(choice), str(choice))
        counts[seen[kind]] += 1
        return original(
            query,
            key,
            value,
            attn_mask=attn_mask,
            dropout_p=dropout_p,
            is_causal=is_causal,
            scale=scale,
            enable_gqa=enable_gqa,
        )

    F.scaled_dot_product_attention = counted
    try:
        yield counts
    finally:
        F.scaled_dot_product_attention = original


def with_sdpa(env: str, counts: Counter) -> str:
    """A JSON `env` record with the SDPA kernels its cell's calls dispatched to (`sdpa_backends`)."""
    import json

    return json.dumps(json.loads(env) | {"sdpa_backends": dict(sorted(counts.items()))}, sort_keys=True)


def numerical_env(model=None, dtype: torch.dtype | None = None, attention: str | None = None) -> dict:
    """Everything that decides the bits of a logit, as a JSON-able dict."""
    import transformers

    device = "cpu"
    if dtype is not None:
        dtype = parse_dtype(dtype)  # "bf16" as well as torch.bfloat16
    if model is not None:
        p = next(model.parameters())
        device, dtype = str(p.device), dtype or p.dtype
        attention = attention or model.config._attn_implementation
    env = {
        "dtype": dtype_name(dtype) if dtype is not None else None,
        "attention": attention,
        "device": device,
        "device_name": torch.cuda.get_device_name()
        if device.startswith("cuda")
        else platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "python": platform.python_version(),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        # cuBLAS may sum bf16 / fp16 products in reduced precision (torch's default: allowed), and
        # its workspace setting decides whether deterministic mode can hold (CUBLAS_WORKSPACE_CONFIG)
        "reduced_precision_reduction": {
            "bf16": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
            "fp16": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        },
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        # which SDPA kernels torch may pick (the one it did pick: `sdpa_backends`, in a cell's record)
        "sdpa_enabled": {
            "flash": torch.backends.cuda.flash_sdp_enabled(),
            "efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
            "math": torch.backends.cuda.math_sdp_enabled(),
        },
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "fill_uninitialized_memory": torch.utils.deterministic.fill_uninitialized_memory,
        "num_threads": torch.get_num_threads(),
    }
    if device == "cpu":
        # the CPU kind asked for and what ATen, oneDNN and oneMKL say they ran (orthrus/machine.py);
        # beside, never instead of, the fields above, so records from before stay comparable
        env |= what_ran()
    return env
