"""Response-conditional perplexity of reference trajectories under the teacher.

PPL(y|x) = exp(-1/|y| * sum_t log p(y_t | x, y_<t)), one teacher forward per prompt, in the
scoring precision (fp32 by default), whatever precision produced the trajectory. The same
forward gives the teacher's uncertainty along the path: the mean entropy of its next-token
distribution and, per step, the top-1/top-2 logit margin (the near-ties where a greedy
choice can flip in reduced precision).

`orthrus perplexity --teacher DIR --prompts eval.parquet --decode REF.parquet... --precision fp32 --out F`
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd
import torch
from tqdm import tqdm

from orthrus.chat import render_chat
from orthrus.contracts import PPL_COLUMNS
from orthrus.data.prompt_set import read_prompt_set
from orthrus.io import write_parquet
from orthrus.models.loading import load_model
from orthrus.options import DecodeOptions


@torch.inference_mode()
def response_scores(model, prompt_ids: list[int], response: list[int]) -> dict:
    """PPL of `response`, mean next-token entropy (nats) and per-step top-1/top-2 margins."""
    if not response:
        return {"ppl": float("nan"), "entropy": float("nan"), "margins": []}
    ids = torch.tensor(prompt_ids + response, device=model.device)[None]
    logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    logp = torch.log_softmax(logits, -1)
    nll = -logp.gather(-1, torch.tensor(response, device=model.device)[:, None]).mean()
    entropy = -(logp.exp() * logp).sum(-1).mean()
    top = logits.topk(2, dim=-1).values
    return {"ppl": float(torch.exp(nll)), "entropy": float(entropy), "margins": (top[:, 0] - top[:, 1]).tolist()}


def score(model, tokenizer, prompts: pd.DataFrame, decoded: pd.DataFrame, precision: str) -> pd.DataFrame:
    text = prompts.set_index("prompt_id")["prompt"]
    rows = []
    for r in tqdm(decoded.itertuples(), total=len(decoded), desc="perplexity", file=sys.stderr):
        if r.finish_reason == "error":
            continue
        tokens = [int(t) for t in r.tokens]
        # the prompt as the run rendered it (the message format its options record)
        message = DecodeOptions.from_row(getattr(r, "env", None), r.decoder, r.precision, r.attention).message
        rows.append(
            {
                "model": r.model,
                "precision": r.precision,
                "attention": r.attention,
                "prompt_id": r.prompt_id,
                "domain": r.domain,
                **response_scores(model, render_chat(tokenizer, text[r.prompt_id], message), tokens),
                "n_tokens": len(tokens),
                "scorer_precision": precision,
            }
        )
    return pd.DataFrame(rows, columns=PPL_COLUMNS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus perplexity", description=__doc__.split("\n")[0])
    ap.add_argument("--teacher", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--decode", nargs="+", required=True, help="reference decoding results (decoder ar-ref)")
    ap.add_argument("--precision", default=DecodeOptions.precision)
    ap.add_argument("--attention", default=DecodeOptions.attention)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    scorer = DecodeOptions(decoder="ar-ref", precision=args.precision, attention=args.attention)
    model, tokenizer = load_model(args.teacher, scorer, args.device)
    decoded = pd.concat([pd.read_parquet(f) for f in args.decode], ignore_index=True)
    write_parquet(args.out, score(model, tokenizer, read_prompt_set(args.prompts), decoded, args.precision))
    return 0
