"""The CPU kind as a setting of the numerical environment: which instruction sets the libraries that
compute the products may use, set before torch loads, and what they then did (docs/MACHINES.md).

    orthrus --cpu-kind avx2 <command> ...          # any command, under the kind's switches
    orthrus --cpu-kind avx2 machine-probe [--threads N] [--out FILE.json]

Three libraries compute the products of a forward on a CPU, and each reads its own documented cap
when it first starts: PyTorch's own kernels (`ATEN_CPU_CAPABILITY`: elementwise, reductions,
softmax, attention, and bf16 products when oneDNN will not take them), oneDNN (`ONEDNN_MAX_CPU_ISA`:
bf16 products) and oneMKL (`MKL_ENABLE_INSTRUCTIONS`: fp32 products; honoured on Intel CPUs only).
A kind caps all three at once (one alone leaves the others on the machine's own code path). A kind
the CPU cannot do is refused before any work, naming the CPU flags it lacks: a cap above the CPU is
silently ignored by the libraries, and the run would carry a name it did not earn.

This module imports no torch at its top: `orthrus/cli.py` applies a kind before the command's
module loads torch. `what_ran()` (torch loaded) is the record `numerical_env` carries.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import platform
import re
import sys
from functools import cache
from pathlib import Path
from typing import NamedTuple

from orthrus.errors import InputError

# the name of the kind a process runs under, for its record and its child processes
KIND_VAR = "ORTHRUS_CPU_KIND"
ATEN, ONEDNN, MKL = "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS"
SWITCHES = (ATEN, ONEDNN, MKL)
# recorded, never set by a kind: MKL_CBWR asks oneMKL for its reproducible mode, another code path
# than any machine runs by default (it changes an fp32 product's bytes even on AMD CPUs)
RECORDED = (*SWITCHES, "MKL_CBWR")


class Kind(NamedTuple):
    aten: str | None  # ATEN_CPU_CAPABILITY: default, avx2, avx512
    onednn: str | None  # ONEDNN_MAX_CPU_ISA
    mkl: str | None  # MKL_ENABLE_INSTRUCTIONS
    flags: tuple[str, ...]  # the /proc/cpuinfo flags the three caps need


# the flags each library tests before it takes a code path (ATen: avx2 with fma; oneDNN's avx512_core:
# F, CD, BW, DQ, VL; its bf16 level adds VNNI and BF16; its AMX level adds the tiles and AVX512-FP16)
_AVX2 = ("avx", "avx2", "fma", "f16c")
_AVX512 = (*_AVX2, "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")
_BF16 = (*_AVX512, "avx512_vnni", "avx512_bf16")
_AMX = (*_BF16, "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")

KINDS: dict[str, Kind] = {
    # the libraries' own choice: every switch taken out of the environment, so an inherited cap
    # cannot run under this name
    "native": Kind(None, None, None, ()),
    "amx": Kind("avx512", "AVX512_CORE_AMX", "AVX512_E4", _AMX),
    "avx512_bf16": Kind("avx512", "AVX512_CORE_BF16", "AVX512_E3", _BF16),
    "avx512": Kind("avx512", "AVX512_CORE", "AVX512", _AVX512),
    "avx2": Kind("avx2", "AVX2", "AVX2", _AVX2),
}
X86 = ("x86_64", "amd64", "i686", "i386")


def switches(kind: str) -> dict[str, str | None]:
    """{environment variable: value} of a kind; None: the variable is taken out."""
    k = _kind(kind)
    return {ATEN: k.aten, ONEDNN: k.onednn, MKL: k.mkl}


def _kind(kind: str) -> Kind:
    if kind not in KINDS:
        raise InputError(f"unknown cpu kind {kind!r}; expected one of {', '.join(KINDS)}")
    return KINDS[kind]


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str] | None:
    """The CPU's feature flags as Linux names them (the first processor's); None where unreadable."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return None
    m = re.search(r"^flags\s*:(.*)$", text, re.MULTILINE)
    return set(m.group(1).split()) if m else None


def cpu_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's model name (platform.processor() is often just `x86_64` on Linux)."""
    try:
        m = re.search(r"^model name\s*:\s*(.*)$", Path(cpuinfo).read_text(), re.MULTILINE)
    except OSError:
        m = None
    return m.group(1).strip() if m else platform.processor() or platform.machine()


def refusal(kind: str, flags: set[str] | None = None, machine: str | None = None) -> str | None:
    """Why this CPU cannot do `kind`, in one line; None where it can. `flags`: the CPU's (read here
    when None); `machine`: platform.machine()."""
    need = _kind(kind).flags
    if not need:
        return None
    machine = (machine or platform.machine()).lower()
    if machine not in X86:
        return f"cpu kind {kind!r} caps x86 instruction sets; this machine is {machine}"
    flags = cpu_flags() if flags is None else flags
    if flags is None:
        return f"cpu kind {kind!r} cannot be checked: the CPU's flags are unreadable (no /proc/cpuinfo)"
    missing = [f for f in need if f not in flags]
    if missing:
        return f"cpu kind {kind!r} needs CPU flag(s) {', '.join(missing)}, which this CPU ({cpu_model()}) lacks"
    return None


def effective(kind: str, flags: set[str] | None = None) -> str:
    """The kind whose code paths `kind` runs on this CPU: native is the highest kind within its flags
    (the libraries take their best path); any other is itself. Unreadable flags: `kind`."""
    if _kind(kind).flags:
        return kind
    flags = cpu_flags() if flags is None else flags
    within = [k for k, v in KINDS.items() if v.flags and flags is not None and set(v.flags) <= flags]
    return max(within, key=lambda k: len(KINDS[k].flags), default=kind)


def apply_kind(kind: str, environ=None, flags: set[str] | None = None) -> dict[str, str | None]:
    """Set `kind`'s switches in `environ` (this process's environment) and return them; InputError
    when the CPU cannot do it, or when torch is already loaded here and the switches would change
    (each library reads its cap once, when it starts)."""
    environ = os.environ if environ is None else environ
    why = refusal(kind, flags)
    if why:
        raise InputError(why)
    want = switches(kind)
    if environ is os.environ and "torch" in sys.modules and any(environ.get(k) != v for k, v in want.items()):
        raise InputError(f"cpu kind {kind!r} must be set before torch loads; this process has loaded it")
    for name, value in want.items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    environ[KIND_VAR] = kind
    return want


def _digest(t) -> str:
    return hashlib.sha256(t.float().contiguous().cpu().numpy().tobytes()).hexdigest()[:16]


def product_digests() -> dict[str, str]:
    """The bytes (sha256, 16 hex digits) of fixed inputs' bf16 and fp32 products (oneDNN's and
    oneMKL's), an fp32 softmax (ATen's vectorised kernels) and a long fp32 sum (ATen's reduction,
    split between threads): which arithmetic this process does. The products' shapes take each
    library's blocked kernel (torch keeps too small a product in its own loops)."""
    import torch

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 256, generator=g), torch.randn(256, 64, generator=g)
    rows, long = torch.randn(64, 1000, generator=g), torch.randn(1 << 16, generator=g)
    with torch.no_grad():
        return {
            "bf16_matmul": _digest(a.bfloat16() @ b.bfloat16()),
            "fp32_matmul": _digest(a @ b),
            "fp32_softmax": _digest(torch.softmax(rows, -1)),
            "fp32_sum": _digest(long.sum().reshape(1)),
        }


def _captured(fn) -> str:
    """What `fn` writes to file descriptor 1 (the C libraries' verbose lines), flushed."""
    import tempfile

    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 1)
        try:
            fn()
        finally:
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
        f.seek(0)
        return f.read().decode(errors="replace")


class _MKLVersion(ctypes.Structure):
    """oneMKL's MKLVersion record (mkl_types.h): `Processor` names the code path it dispatches to."""

    _fields_ = [
        ("major", ctypes.c_int),
        ("minor", ctypes.c_int),
        ("update", ctypes.c_int),
        ("status", ctypes.c_char_p),
        ("build", ctypes.c_char_p),
        ("processor", ctypes.c_char_p),
        ("platform", ctypes.c_char_p),
    ]


def _mkl_code_path(torch) -> str | None:
    """oneMKL's own `MKL_Get_Version` record's processor, the line its verbose banner prints, in
    microseconds (the banner costs most of a second: it measures the clock). PyTorch's Linux wheels
    link oneMKL into libtorch_cpu and export the function under its internal name only."""
    lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
    for name in ("MKL_Get_Version", "mkl_serv_get_version"):
        fn = getattr(lib, name, None)
        if fn is not None:
            v = _MKLVersion()
            fn(ctypes.byref(v))
            return v.processor.decode(errors="replace").strip() if v.processor else None
    return None


@cache
def library_paths() -> dict[str, str | None]:
    """What oneDNN and oneMKL say they run on (read once per process: both choose their code path
    once, when they start). oneDNN, from its verbose lines for one small bf16 product and one copy
    into its layout: the ISA it detects under its cap, and the kernel it ran the product with, or
    `aten` where torch kept the product (torch gives oneDNN bf16 products only where oneDNN's ISA
    has AVX-512). oneMKL: its version record's processor, its code path (on a non-Intel CPU a
    generic name: oneMKL honours its switch on Intel CPUs only). None where a library says nothing."""
    import torch

    out = {"onednn_isa": None, "onednn_bf16_matmul": None, "mkl_code_path": None}
    a = torch.ones(64, 64)
    try:
        if torch.backends.mkldnn.is_available():
            with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                # the copy is a oneDNN primitive whatever torch did with the product, so oneDNN's
                # banner (the ISA) prints either way
                text = _captured(lambda: (a.bfloat16() @ a.bfloat16(), a.to_mkldnn()))
            isa = re.search(r"onednn_verbose,.*?,info,cpu,isa:(.*)", text)
            ran = re.search(r"onednn_verbose,.*?,exec,cpu,(?:matmul|inner_product),([^,]+)", text)
            out["onednn_isa"] = isa.group(1).strip() if isa else None
            out["onednn_bf16_matmul"] = ran.group(1) if ran else "aten"
        if torch.backends.mkl.is_available():
            out["mkl_code_path"] = _mkl_code_path(torch)
    except (OSError, AttributeError, RuntimeError):
        pass  # a platform without these libraries or without fd 1: recorded as unknown
    return out


def what_ran() -> dict:
    """The CPU side of `numerical_env`: the kind asked for (None: none was), the switches as this
    process has them, the CPU, and what each library says it ran."""
    import torch

    return {
        "cpu_kind": os.environ.get(KIND_VAR),
        "cpu_switches": {k: os.environ.get(k) for k in RECORDED},
        "cpu_model": cpu_model(),
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **library_paths(),
    }


def main(argv=None) -> int:
    """`orthrus machine-probe`: this process's CPU record and product digests, as JSON."""
    ap = argparse.ArgumentParser(prog="orthrus machine-probe", description=main.__doc__)
    ap.add_argument("--threads", type=int, default=1, help="torch's CPU threads")
    ap.add_argument("--out", help="write the JSON here (default: stdout)")
    args = ap.parse_args(argv)
    if args.threads < 1:
        raise InputError(f"--threads must be >= 1, got {args.threads}")
    import torch

    torch.set_num_threads(args.threads)
    record = what_ran() | {"num_threads": torch.get_num_threads(), "digests": product_digests()}
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
