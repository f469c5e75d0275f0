"""Where a decoding job's time goes, measured side by side in one run.

    python benchmarks/decode_profile.py --model results/teacher [--precision bf16] [--attention sdpa]

Prints: the process start-up (importing the decode stage, against a bare interpreter), loading the
model, one single-token forward of the model with a cache (and how many aten ops it runs), what
transformers' generate adds per token on top of that forward, and what deterministic mode's
NaN-filling of new tensors would cost (`orthrus.configure` turns it off). On a 1M-parameter model
every forward costs about the same whatever its length: the time is the library's per-op overhead,
so a study's decoding time is its number of forwards times this.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import torch


def seconds(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t0


def forwards(model, n: int) -> float:
    """Seconds per single-token forward after a 32-token prefill, with a DynamicCache."""
    from transformers import DynamicCache

    from orthrus.models.cache import cache_kwarg

    ids = torch.arange(2, 34)[None]
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=ids, **cache_kwarg(model, cache), use_cache=True)
        t0 = time.perf_counter()
        for _ in range(n):
            model(input_ids=ids[:, -1:], **cache_kwarg(model, cache), use_cache=True)
    return (time.perf_counter() - t0) / n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="results/teacher", help="a plain causal LM directory (the teacher)")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--attention", default="sdpa")
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args(argv)
    from orthrus.models.loading import load_model
    from orthrus.options import DecodeOptions

    bare = seconds([sys.executable, "-c", "pass"])
    imports = seconds([sys.executable, "-c", "import orthrus.decode.stage, transformers.models.qwen3.modeling_qwen3"])
    torch.set_num_threads(1)
    opts = DecodeOptions(
        decoder="ar-ref", precision=args.precision, attention=args.attention, max_new_tokens=args.steps
    )
    t0 = time.perf_counter()
    model, _ = load_model(args.model, opts)
    load = time.perf_counter() - t0
    forwards(model, 20)  # warm-up
    per_forward = {True: 0.0, False: 0.0}
    for _ in range(3):  # interleaved, so a change of load falls on both
        for fill in (True, False):
            torch.utils.deterministic.fill_uninitialized_memory = fill
            per_forward[fill] += forwards(model, args.steps) / 3
    from torch.profiler import profile

    with profile() as prof:
        forwards(model, 10)
    ops = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::")) / 11  # the prefill counts once
    ids = torch.arange(2, 34)
    with torch.inference_mode():
        t0 = time.perf_counter()
        out = model.generate(
            ids[None],
            attention_mask=torch.ones_like(ids[None]),
            do_sample=False,
            min_new_tokens=args.steps,
            max_new_tokens=args.steps,
            pad_token_id=0,
        )
        gen = (time.perf_counter() - t0) / (out.shape[1] - len(ids))
    fwd = per_forward[False]
    print(
        f"model {args.model} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters), "
        f"{args.precision} {args.attention}, 1 thread"
    )
    print(f"start-up: imports {imports:.2f} s (a bare interpreter {bare:.2f} s); model load {load:.2f} s")
    print(f"one single-token forward: {fwd * 1e3:.2f} ms, {ops:.0f} aten ops ({fwd / ops * 1e6:.1f} us per op)")
    print(f"transformers generate per token: {gen * 1e3:.2f} ms = {gen / fwd:.2f}x the forward")
    print(f"NaN-filling new tensors (deterministic mode's default): {per_forward[True] / fwd:.2f}x the forward")
    print(f"start-up + load = {(imports + load) / fwd:.0f} forwards")
    return 0


if __name__ == "__main__":
    sys.exit(main())
