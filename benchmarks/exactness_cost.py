"""The price of exactness: what each setting that can restore the AR trajectory costs, side by side.

    python benchmarks/exactness_cost.py [--results results] [--model ce-k8] [--prompts-per-domain 4]
                                        [--guards 0.0625 0.125 0.25 0.5] [--precisions bf16 fp16 fp32]
                                        [--threads 1] [--out exactness_cost.csv]

On a finished run's Orthrus model and prompts, decodes the same prompts with the Orthrus loop in
every setting that could make it exact - each precision (bf16, fp16, fp32) and attention kernel
(eager, sdpa), and bf16 sdpa (the cell that diverges on CPU) with the guarded verify at a few TAU
(`DecodeOptions.verify_guard`) - and compares each with the model's own AR view in the same
precision and kernel (the study's reference: the same weights, one token per forward). Prints
and writes one row per setting: the match rate with its Wilson interval, tokens per forward
(prefill and verify forwards), and the wall time per token relative to the unguarded bf16 sdpa
loop, all measured in this one run. The question it answers: the cheapest setting
that makes the decoder exact on these prompts. The loop options (message, budget, EOS, blocks)
are the ones the run's decoding rows recorded.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from orthrus.chat import render_chat
from orthrus.decoding import generate
from orthrus.forensics import row_options
from orthrus.loading import load_model
from orthrus.prompt_set import read_prompt_set
from orthrus.stats import wilson_ci

BASE = ("bf16", "sdpa", 0.0)


def settings(guards, precisions=("bf16", "fp16", "fp32")) -> list[tuple[str, str, float]]:
    grid = [(p, a, 0.0) for p in precisions for a in ("eager", "sdpa")]
    return grid + [("bf16", "sdpa", g) for g in guards]


def measure(path: str, options, prompts: list[str], precision: str, attention: str, guard: float) -> dict:
    cell = options.replace(precision=precision, attention=attention)
    model, tokenizer = load_model(path, cell)
    ids = [torch.tensor(render_chat(tokenizer, p, cell.message)) for p in prompts]
    matched, tokens, forwards, seconds = 0, 0, 0, 0.0
    for x in ids:
        ar = generate(model, x, cell.replace(decoder="ar")).tokens.tolist()
        t0 = time.perf_counter()
        out = generate(model, x, cell.replace(verify_guard=guard))
        seconds += time.perf_counter() - t0
        matched += out.tokens.tolist() == ar
        tokens += len(out.tokens)
        forwards += out.stats["n_prefill"] + out.stats["n_verify"]
    low, high = wilson_ci(matched, len(ids))
    return {"precision": precision, "attention": attention, "verify_guard": guard, "n": len(ids),
            "match_rate": matched / len(ids), "ci_low": low, "ci_high": high, "tpf_verify": tokens / forwards,
            "seconds_per_token": seconds / tokens}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default="results", type=Path)
    ap.add_argument("--model", default="ce-k8")
    ap.add_argument("--prompts-per-domain", type=int, default=4)
    ap.add_argument("--guards", type=float, nargs="+", default=[0.0625, 0.125, 0.25, 0.5])
    ap.add_argument("--precisions", nargs="+", default=["bf16", "fp16", "fp32"],
                    help="fp16 matmuls are slow on many CPUs: leave it out there")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="exactness_cost.csv")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    decoded = args.results / "decode" / args.model / "orthrus-bf16-sdpa.parquet"
    if not decoded.exists():
        sys.exit(f"{decoded} does not exist: run the study first (snakemake --cores 2)")
    options = row_options(next(pd.read_parquet(decoded).itertuples()))
    prompts = read_prompt_set(args.results / "prompts" / "eval.parquet")
    prompts = prompts.groupby("domain", sort=True).head(args.prompts_per_domain)["prompt"].tolist()
    path = str(args.results / "models" / args.model)
    if "bf16" not in args.precisions:
        sys.exit("--precisions must include bf16: the times are relative to the bf16 sdpa loop")
    rows = [measure(path, options, prompts, p, a, g) for p, a, g in settings(args.guards, args.precisions)]
    df = pd.DataFrame(rows)
    base = df[(df.precision == BASE[0]) & (df.attention == BASE[1]) & (df.verify_guard == BASE[2])]
    df["time_vs_bf16_sdpa"] = df["seconds_per_token"] / float(base["seconds_per_token"].iloc[0])
    df.to_csv(args.out, index=False)
    print(df.round(3).to_string(index=False))
    exact = df[df.match_rate == 1].sort_values("time_vs_bf16_sdpa")
    print("\ncheapest exact setting on these prompts: " + (
        "none" if exact.empty else
        f"{exact.iloc[0].precision} {exact.iloc[0].attention} guard {exact.iloc[0].verify_guard:g} "
        f"({exact.iloc[0].time_vs_bf16_sdpa:.2f}x the bf16 sdpa loop's time per token)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
