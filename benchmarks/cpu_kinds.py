"""Whether each CPU kind's switches take effect on this machine, and which of them change bytes.

    python benchmarks/cpu_kinds.py [--threads 1 2]

For every kind (orthrus/machine.py) and thread count, `orthrus --cpu-kind KIND machine-probe` in a
process of its own: what ATen, oneDNN and oneMKL say they ran, and the bytes (sha256, first 8 hex
digits) of fixed inputs' bf16 product, fp32 product, fp32 softmax and long fp32 sum. Then each of the
avx2 kind's three switches alone, and MKL_CBWR=COMPATIBLE (oneMKL's reproducible mode, which no kind
sets), on one thread. A kind the CPU cannot do is printed as refused, with the flags it lacks.
docs/MACHINES.md holds this machine's output.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from orthrus.machine import KINDS, RECORDED, switches

COLUMNS = (
    "setting",
    "thr",
    "ATen",
    "oneDNN ISA",
    "bf16 product by",
    "bf16_matmul",
    "fp32_matmul",
    "fp32_softmax",
    "fp32_sum",
)


def probe(prefix: list[str], threads: int, extra_env: dict[str, str] | None = None) -> dict | str:
    """One probe in a fresh process (each library reads its cap once, when it starts); the refusal's
    line where the kind is refused."""
    env = {k: v for k, v in os.environ.items() if k not in RECORDED} | (extra_env or {})
    cmd = [sys.executable, "-m", "orthrus", *prefix, "machine-probe", "--threads", str(threads)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode:
        return done.stderr.strip().splitlines()[-1]
    return json.loads(done.stdout)


def row(setting: str, threads: int, rec: dict | str) -> list[str]:
    if isinstance(rec, str):  # the refusal's line, from "needs" on
        return [setting, str(threads), "refused: " + rec.split("needs ", 1)[-1]]
    d = rec["digests"]
    return [
        setting,
        str(rec["num_threads"]),
        rec["aten_cpu_capability"],
        (rec["onednn_isa"] or "-").replace("Intel ", "").replace(" support", "").replace(" extensions", ""),
        rec["onednn_bf16_matmul"],
        *(d[k][:8] for k in ("bf16_matmul", "fp32_matmul", "fp32_softmax", "fp32_sum")),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    rows = [row(k, t, probe(["--cpu-kind", k], t)) for k in KINDS for t in args.threads]
    for name, value in switches("avx2").items():
        rows.append(row(f"{name}={value} alone", 1, probe([], 1, {name: value})))
    rows.append(row("MKL_CBWR=COMPATIBLE alone", 1, probe([], 1, {"MKL_CBWR": "COMPATIBLE"})))
    first = probe(["--cpu-kind", "native"], 1)
    print(
        f"CPU: {first['cpu_model']}; oneMKL's code path: {first['mkl_code_path']}" if isinstance(first, dict) else first
    )
    widths = [
        max(len(r[i]) for r in [COLUMNS, *rows] if len(r) > i and len(r) == len(COLUMNS)) for i in range(len(COLUMNS))
    ]
    for r in [COLUMNS, *rows]:
        print("  ".join(f"{c:<{w}}" for c, w in zip(r, widths)).rstrip() if len(r) == len(COLUMNS) else "  ".join(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
