"""Why trajectories diverge: the reference's logit margin and the layer where the bits part.

At each first divergence t between an Orthrus trajectory and the AR reference, the token
Orthrus emitted came from a multi-token verify block, and the reference token from a
one-token-per-forward step. This module recomputes both at that position:

- token by token: prefill the prompt, then feed the shared prefix one token at a time;
- block verify: replay the Orthrus run's exact sequence of verify blocks (their lengths follow
  from the recorded accepted lengths), so the cache is built the same way as in the run. Only
  rows up to the divergence matter, and they are causal, so rejected proposals (not recorded)
  are replaced by the mask token.

It records the reference's top-1/top-2 margin in its own precision and in fp32, and the
largest hidden-state difference between the two computations after every layer.

transformers' speculative decoders (`assisted`, `prompt-lookup`) run on the teacher itself; for
them the model is the teacher and only the margins are recorded (reference margin in its own
precision and in fp32, margin of the same step-by-step row): the block replay needs each
verify block's length, which transformers' loop does not expose (its draft lengths vary with
the draft's confidence or the n-gram found), so `verify_margin`, `first_layer_diverging` and
the hidden-state differences are Orthrus-only and empty for them. Column `orthrus_token` holds
the compared decoder's token.

`orthrus forensics --model-path DIR --prompts eval.parquet --decoded DEC.parquet... --reference
 REF.parquet... --max-new-tokens T --out F`: decoded and reference files pair up in order; each pair
is one (decoder, precision, attention), read from the files; `--model-path` is the Orthrus model
for `orthrus` files, the teacher for the transformers decoders. A model is loaded only where there
is a divergence.
"""
from __future__ import annotations

import argparse
import sys

import pandas as pd
import torch
from tqdm import tqdm
from transformers import DynamicCache

from .contracts import FORENSICS_COLUMNS
from .io import write_parquet
from .chat import render_chat
from .prompts import read_prompt_set
from .stats import first_divergence
from .trajectories import load, row_message



def margin(logits: torch.Tensor) -> float:
    top = torch.topk(logits.float(), 2).values
    return float(top[0] - top[1])


def _forward(model, ids, cache):
    out = model(input_ids=torch.tensor(ids, device=model.device)[None], past_key_values=cache, use_cache=True,
                output_hidden_states=True)
    return out.logits[0], [h[0] for h in out.hidden_states]


@torch.inference_mode()
def stepwise(model, prompt: list[int], prefix: list[int]):
    """Logits and per-layer hidden states at the last position, one token per forward."""
    cache = DynamicCache(config=model.config)
    logits, hidden = _forward(model, prompt, cache)
    for tok in prefix:
        logits, hidden = _forward(model, [tok], cache)
    return logits[-1], [h[-1] for h in hidden]


@torch.inference_mode()
def replay_verify(model, prompt: list[int], tokens: list[int], accepted: list[int], t: int, max_new: int):
    """Logits and hidden states of the verify-block row that produced generated token `t`."""
    K, mask = model.block_size, model.mask_token_id
    cache = DynamicCache(config=model.config)
    logits, hidden = _forward(model, prompt, cache)
    if t == 0:
        return logits[-1], [h[-1] for h in hidden]
    s, step = 1, 0  # generated tokens so far, Orthrus steps replayed
    while True:
        remaining = max_new - s
        if remaining > 1:  # a consensus step; the loop's last token comes from a plain AR step
            n, n_draft = accepted[step], min(K - 1, remaining - 1)
            step += 1
        else:
            n, n_draft = 0, 0
        logits, hidden = _forward(model, [tokens[s - 1]] + tokens[s : s + n] + [mask] * (n_draft - n), cache)
        if t <= s + n:
            return logits[t - s], [h[t - s] for h in hidden]
        if n_draft > n:
            cache.crop(n - n_draft)
        s += n + 1


def divergences(orth: pd.DataFrame, ref: pd.DataFrame):
    """(Orthrus row, reference tokens, Orthrus tokens, first divergence) for every diverging prompt."""
    ref = ref[ref.finish_reason != "error"].set_index("prompt_id")
    for o in orth[orth.finish_reason != "error"].itertuples():
        if o.prompt_id not in ref.index:
            continue
        r_tokens = [int(x) for x in ref.at[o.prompt_id, "tokens"]]
        o_tokens = [int(x) for x in o.tokens]
        t = first_divergence(r_tokens, o_tokens)
        if t is not None and t < min(len(r_tokens), len(o_tokens)):
            yield o, r_tokens, o_tokens, t


def analyse(model, model32, tokenizer, prompts, cases, max_new: int) -> list[dict]:
    """One row per case; the block replay for Orthrus rows only (see the module docstring)."""
    text = prompts.set_index("prompt_id")["prompt"]
    rows = []
    for o, r_tokens, o_tokens, t in tqdm(cases, desc="forensics", file=sys.stderr):
        prompt = render_chat(tokenizer, text[o.prompt_id], row_message(getattr(o, "env", None)))
        step_logits, step_hidden = stepwise(model, prompt, r_tokens[:t])
        step32, _ = stepwise(model32, prompt, r_tokens[:t])
        row = {"model": o.model, "decoder": o.decoder, "precision": o.precision, "attention": o.attention,
               "prompt_id": o.prompt_id, "domain": o.domain, "position": t,
               "ref_token": r_tokens[t], "orthrus_token": o_tokens[t],
               "margin_native": margin(step_logits), "margin_fp32": margin(step32), "verify_margin": None,
               "first_layer_diverging": None, "max_abs_hidden_diff": [],
               "replay_consistent": int(step_logits.argmax()) == r_tokens[t]}
        if o.decoder == "orthrus":
            ver_logits, ver_hidden = replay_verify(model, prompt, o_tokens, [int(a) for a in o.accepted], t, max_new)
            diffs = [float((a.float() - b.float()).abs().max()) for a, b in zip(step_hidden, ver_hidden)]
            row |= {"verify_margin": margin(ver_logits), "max_abs_hidden_diff": diffs,
                    "first_layer_diverging": next((i for i, d in enumerate(diffs) if d > 0), None),
                    # the replay reproduces the run when each computation picks the token its run emitted
                    "replay_consistent": row["replay_consistent"] and int(ver_logits.argmax()) == o_tokens[t]}
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus forensics", description=__doc__.split("\n")[0])
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--decoded", nargs="+", required=True,
                    help="decoding results to explain: the Orthrus decoder's, or transformers' speculative decoders'")
    ap.add_argument("--reference", nargs="+", required=True, help="the AR reference's, same order")
    ap.add_argument("--max-new-tokens", type=int, required=True, help="as in the decoding run (sets draft lengths)")
    ap.add_argument("--max-cases", type=int, default=1000, help="per (precision, attention)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if len(args.decoded) != len(args.reference):
        ap.error("--decoded and --reference need the same number of files")
    torch.set_num_threads(args.threads)
    prompts = read_prompt_set(args.prompts)
    rows = []
    for dec_file, ref_file in zip(args.decoded, args.reference):
        dec, ref = pd.read_parquet(dec_file), pd.read_parquet(ref_file)
        cases = list(divergences(dec, ref))[: args.max_cases]
        if not cases:
            continue
        decoder, precision, attention = dec.decoder.iloc[0], dec.precision.iloc[0], dec.attention.iloc[0]
        kind = "orthrus" if decoder == "orthrus" else "ar-ref"  # transformers' decoders: the teacher itself
        model, tokenizer = load(kind, args.model_path, precision, attention, args.device)
        model32, _ = load(kind, args.model_path, "fp32", attention, args.device)
        rows += analyse(model, model32, tokenizer, prompts, cases, args.max_new_tokens)
    df = pd.DataFrame(rows, columns=FORENSICS_COLUMNS)
    write_parquet(args.out, df)
    print(f"[forensics] {len(df)} divergences, replay consistent on {int(df['replay_consistent'].sum())}", file=sys.stderr)
    return 0
