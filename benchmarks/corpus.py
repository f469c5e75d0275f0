"""Teacher corpus: batched greedy generation vs batch size 1, side by side in one run.

    python benchmarks/corpus.py --teacher results/teacher --prompts results/prompts/distill.parquet

Prints generated tokens per second for each batch size and the ratio to batch size 1
(target: at least 10x at the default batch size), plus peak memory. Batches are cut as the
corpus stage cuts them (prompts grouped by domain, then by length); `--ungrouped` adds the same
batch sizes cut by length alone, to show what the grouping buys. The default `--n` is one shard
of the default study (1000 distillation prompts in 2 shards).
"""

from __future__ import annotations

import argparse
import resource
import time

import pandas as pd
import torch

from orthrus.data.corpus import generate_responses, load_teacher


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--teacher", default="results/teacher")
    ap.add_argument("--prompts", default="results/prompts/distill.parquet")
    ap.add_argument("--n", type=int, default=500, help="prompts per measurement")
    ap.add_argument("--ungrouped", action="store_true", help="also batches cut by prompt length alone")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32, 128])
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_teacher(args.teacher)
    df = pd.read_parquet(args.prompts).head(args.n)
    prompts, domains = df["prompt"].tolist(), df["domain"].tolist()
    generate_responses(model, tok, prompts[:2], batch_size=2, max_new_tokens=8, progress=False)  # warm-up
    base = None
    runs = [(bs, True) for bs in args.batch_sizes] + [
        (bs, False) for bs in args.batch_sizes if args.ungrouped and bs > 1
    ]
    print(f"{'batch':>5} {'grouped':>8} {'tokens':>7} {'seconds':>8} {'tokens/s':>9} {'vs batch 1':>10}")
    for bs, grouped in runs:
        t0 = time.perf_counter()
        out = generate_responses(
            model,
            tok,
            prompts,
            batch_size=bs,
            max_new_tokens=args.max_new_tokens,
            progress=False,
            groups=domains if grouped else None,
        )
        seconds = time.perf_counter() - t0
        tokens = sum(len(o["response_ids"]) for o in out)
        rate = tokens / seconds
        base = base or rate
        print(
            f"{bs:>5} {'domain' if grouped else 'no':>8} {tokens:>7} {seconds:>8.2f} {rate:>9.0f} {rate / base:>9.1f}x"
        )
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
