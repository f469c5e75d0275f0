"""Teacher corpus: batched greedy generation vs batch size 1, side by side in one run.

    python benchmarks/corpus.py --teacher results/teacher --prompts results/prompts/distill.parquet

Prints generated tokens per second for each batch size and the ratio to batch size 1
(target: at least 10x at the default batch size), plus peak memory.
"""
from __future__ import annotations

import argparse
import resource
import time

import pandas as pd
import torch

from orthrus.corpus import generate_responses, load_teacher


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--teacher", default="results/teacher")
    ap.add_argument("--prompts", default="results/prompts/distill.parquet")
    ap.add_argument("--n", type=int, default=128, help="prompts per measurement")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32, 128])
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_teacher(args.teacher)
    prompts = pd.read_parquet(args.prompts)["prompt"].tolist()[: args.n]
    generate_responses(model, tok, prompts[:2], batch_size=2, max_new_tokens=8, progress=False)  # warm-up
    base = None
    print(f"{'batch':>5} {'tokens':>7} {'seconds':>8} {'tokens/s':>9} {'vs batch 1':>10}")
    for bs in args.batch_sizes:
        t0 = time.perf_counter()
        out = generate_responses(model, tok, prompts, batch_size=bs, max_new_tokens=args.max_new_tokens, progress=False)
        seconds = time.perf_counter() - t0
        tokens = sum(len(o["response_ids"]) for o in out)
        rate = tokens / seconds
        base = base or rate
        print(f"{bs:>5} {tokens:>7} {seconds:>8.2f} {rate:>9.0f} {rate / base:>9.1f}x")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
