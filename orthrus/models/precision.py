"""Numerical precision in one place: dtype, TF32, attention kernel, determinism, and their record.

The numerics are the subject of the study, so every decoding result carries `numerical_env()`.
"""

from __future__ import annotations

import platform

import torch

from orthrus.contracts import ATTENTIONS, PRECISIONS
from orthrus.errors import InputError

DTYPES = dict(zip(PRECISIONS, (torch.bfloat16, torch.float16, torch.float32)))


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    aliases = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
    key = aliases.get(name, name)
    if key not in DTYPES:
        raise InputError(f"unknown precision {name!r}; expected one of {sorted(DTYPES)}")
    return DTYPES[key]


def dtype_name(dtype: torch.dtype) -> str:
    return {v: k for k, v in DTYPES.items()}[dtype]


def check_attention(name: str) -> str:
    if name not in ATTENTIONS:
        raise InputError(f"unknown attention implementation {name!r}; expected one of {ATTENTIONS}")
    if name == "flash_attention_2":
        import importlib.util

        if importlib.util.find_spec("flash_attn") is None or not torch.cuda.is_available():
            raise InputError("attention 'flash_attention_2' needs the flash_attn package and a CUDA GPU")
    return name


def configure(dtype: str | torch.dtype = "fp32", deterministic: bool = True, threads: int | None = None) -> torch.dtype:
    """Set the process-wide numerical flags for a run and return the torch dtype.

    TF32 is always off: the study compares exact fp32 against reduced precision, and TF32
    would silently turn "fp32" matmuls into 10-bit-mantissa ones on Ampere and later GPUs.
    """
    dtype = parse_dtype(dtype)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
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
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "fill_uninitialized_memory": torch.utils.deterministic.fill_uninitialized_memory,
        "num_threads": torch.get_num_threads(),
    }
    return env
