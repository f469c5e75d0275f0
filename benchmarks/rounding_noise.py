"""How far a verify block's logits sit from single steps' on the same tokens, in each precision's ulps.

    python benchmarks/rounding_noise.py [--model orthrus/world/subject/teacher] [--prompts 24] [--tokens 128]

The verdicts (`orthrus.audit.verdict`) call a first divergence `rounding` when the reference ranks its
token above the decoder's by at most `analysis.rounding_ulps` ulps of the precision at the logits'
magnitude. This measures the scale that bound must cover: for each precision and kernel, greedy AR
trajectories of the teacher step by step, then the same tokens re-read in blocks of K (a verify
pass's shape); at every position the largest |block - step| logit difference over the vocabulary,
in ulps of that precision at the row's largest logit. Printed per cell: the median, the 99th
percentile and the largest, and the share of positions where the two passes agree bit for bit.
bf16 and fp16 logits are rounded to their storage format at the end, so their differences are a
few ulps; fp32 keeps every accumulated rounding of the network's sums, so its spread in ulps is wider.
The verdicts' default bound per precision is twice the largest, rounded up to a power of two
(orthrus/audit/verdict.py, ROUNDING_ULPS).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from transformers import DynamicCache

from orthrus.audit.verdict import ulp
from orthrus.chat import render_chat
from orthrus.data.prompts import tiny_prompts
from orthrus.decode.loop import ar_forward
from orthrus.models.loading import load_model
from orthrus.options import DecodeOptions


@torch.inference_mode()
def noise(model, prompt: list[int], tokens: int, k: int, precision: str) -> list[float]:
    """Per position: max |block - step| over the vocabulary, in ulps at the step row's largest logit."""
    cache = DynamicCache(config=model.config)
    logits, _ = ar_forward(model, torch.tensor(prompt), cache, last_only=True)
    rows, ids = [], []
    for _ in range(tokens):
        tok = int(logits[-1].argmax())
        ids.append(tok)
        logits, _ = ar_forward(model, torch.tensor([tok]), cache)
        rows.append(logits[-1].float())
    # the same tokens read back K at a time, as a verify pass reads its block
    cache = DynamicCache(config=model.config)
    ar_forward(model, torch.tensor(prompt), cache, last_only=True)
    block_rows = []
    for i in range(0, tokens, k):
        out, _ = ar_forward(model, torch.tensor(ids[i : i + k]), cache)
        block_rows += list(out.float())
    return [float((b - s).abs().max()) / ulp(float(s.abs().max()), precision) for s, b in zip(rows, block_rows)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="orthrus/world/subject/teacher")
    ap.add_argument(
        "--prompts", type=int, default=24, help="the first of the tiny world's eval prompts, spread over its domains"
    )
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--precisions", nargs="+", default=["bf16", "fp16", "fp32"])
    ap.add_argument("--attentions", nargs="+", default=["sdpa", "eager"])
    args = ap.parse_args()
    torch.set_num_threads(1)
    evals, _, _ = tiny_prompts(seed=0, eval_per_domain=-(-args.prompts // 12), distill_n=1)
    texts = list(evals["prompt"])[: args.prompts]
    print(
        f"{'precision':<9} {'attention':<9} {'positions':>9} {'bit-equal':>9} {'median':>8} {'p99':>8} {'max':>8}  (ulps)"
    )
    for precision in args.precisions:
        for attention in args.attentions:
            options = DecodeOptions(decoder="ar", precision=precision, attention=attention)
            model, tok = load_model(args.model, options)
            d = np.array(
                [
                    x
                    for text in texts
                    for x in noise(model, render_chat(tok, text, options.message), args.tokens, args.block, precision)
                ]
            )
            print(
                f"{precision:<9} {attention:<9} {len(d):>9} {np.mean(d == 0):>9.3f} {np.median(d):>8.2f} "
                f"{np.percentile(d, 99):>8.2f} {d.max():>8.2f}"
            )


if __name__ == "__main__":
    main()
