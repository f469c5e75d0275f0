"""The decoding stage: every evaluation prompt through one (model, decoder, precision, attention).

`orthrus decode --decoder ar-ref|ar|orthrus --model-path DIR --model-name NAME --precision bf16 fp32
 --attention eager sdpa --prompts eval.parquet --max-new-tokens 128 [--shard I --num-shards N] --out F...`
decodes every (precision, attention) pair in one process (one model load each, one start-up in
all) and writes one file per pair, in the order precision-major, attention-minor.

`ar-ref` is the plain model through transformers' `generate()` (the study's reference); `ar`
and `orthrus` load an Orthrus checkpoint and use `orthrus.generate`. A prompt that fails is
recorded with its error, never dropped; a prompt too long for the model is such an error in
every decoder (`orthrus.prompts.length_error`). When more than `--max-error-share` of a run's
prompts are errors (default 0: any), the job fails naming the first ones and writes nothing.

Protocol options (defaults: this project's; see docs/PAPER-PROTOCOL.md): `--message`
(none | empty | system:<text>, how prompts become chat messages), `--eos`, `--last-block`,
`--prefill-logits` (our loops only; `ar-ref` stops as transformers' generate does) and
`--no-deterministic`. Each is recorded in every row's `env`, beside the numerical environment.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time

import pandas as pd
import torch
from tqdm import tqdm

from .decoding import EOS_POLICIES, LAST_BLOCKS, PREFILL_LOGITS, generate
from .io import write_parquet
from .modeling import OrthrusForCausalLM
from .precision import check_attention, configure, numerical_env
from .prompts import check_message, length_error, read_prompt_set, render_chat

DECODERS = ("ar-ref", "ar", "orthrus")
# orthrus.generate's parity options and their defaults (this project's behaviour)
DEFAULT_OPTIONS = {"eos": "generation_config", "last_block": "full", "prefill_logits": "last"}
COLUMNS = ["model", "decoder", "precision", "attention", "prompt_id", "domain", "prompt_len", "tokens", "accepted",
           "n_prefill", "n_diffusion", "n_verify", "seconds", "finish_reason", "error", "env"]


def row_message(env) -> str:
    """The message format a decoding row's prompt was rendered with (its `env` record), so
    that later stages (perplexity, forensics) render the same prompt tokens."""
    try:
        return json.loads(env).get("message", "empty") if isinstance(env, str) else "empty"
    except json.JSONDecodeError:
        return "empty"


def load(decoder: str, path: str, precision: str, attention: str, device: str = "cpu", deterministic: bool = True):
    """(model, tokenizer) for a decoder; never runs checkpoint code, never unpickles."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .modeling import check_finite, resolve_checkpoint

    path = resolve_checkpoint(path)
    dtype = configure(precision, deterministic=deterministic)
    check_attention(attention)
    if decoder == "ar-ref":
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attention, use_safetensors=True)
        check_finite(model, path)
    else:
        model = OrthrusForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attention)
    tokenizer = AutoTokenizer.from_pretrained(path)
    return model.to(device).eval(), tokenizer


def decode_one(model, decoder: str, ids: torch.Tensor, max_new_tokens: int, options: dict | None = None) -> dict:
    """One trajectory; `options` are `orthrus.generate`'s parity options (eos, last_block,
    prefill_logits), ignored by `ar-ref`."""
    if decoder == "ar-ref":
        eos = model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        pad = model.generation_config.pad_token_id
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids[None], attention_mask=torch.ones_like(ids[None]), do_sample=False,
                                 max_new_tokens=max_new_tokens, pad_token_id=pad if pad is not None else eos[0])
        seconds = time.perf_counter() - t0
        tokens = out[0, len(ids):].tolist()
        return {"tokens": tokens, "accepted": [], "n_prefill": 1, "n_diffusion": 0, "n_verify": max(len(tokens) - 1, 0),
                "seconds": seconds, "finish_reason": "eos" if tokens and tokens[-1] in eos else "length"}
    out = generate(model, ids, mode=decoder, max_new_tokens=max_new_tokens, **(options or {}))
    s = out.stats
    return {"tokens": out.tokens.tolist(), "accepted": s["accepted"], "n_prefill": s["n_prefill"],
            "n_diffusion": s["n_diffusion"], "n_verify": s["n_verify"], "seconds": s["seconds"],
            "finish_reason": s["finish_reason"]}


def decode_prompts(model, tokenizer, prompts: pd.DataFrame, decoder: str, model_name: str, precision: str,
                   attention: str, max_new_tokens: int, progress: bool = True, message: str = "empty",
                   options: dict | None = None) -> pd.DataFrame:
    options = dict(options or {})
    # the run's protocol beside its numerics; ar-ref ignores our loop's options, so they are not claimed
    run = {"message": message, "max_new_tokens": max_new_tokens}
    if decoder == "ar-ref":
        run["loop"] = "transformers.generate"
    else:
        run |= {"loop": "orthrus.generate"} | {k: options.get(k, v) for k, v in DEFAULT_OPTIONS.items()}
    env = json.dumps(numerical_env(model) | run, sort_keys=True)
    rows = []
    for row in tqdm(prompts.itertuples(), total=len(prompts), desc=f"{model_name}/{decoder}/{precision}/{attention}",
                    disable=not progress, file=sys.stderr):
        ids = torch.tensor(render_chat(tokenizer, row.prompt, message), dtype=torch.long, device=model.device)
        base = {"model": model_name, "decoder": decoder, "precision": precision, "attention": attention,
                "prompt_id": row.prompt_id, "domain": row.domain, "prompt_len": len(ids), "env": env, "error": None}
        error = length_error(len(ids), max_new_tokens, model.config.max_position_embeddings)
        try:
            if error is None:
                rows.append(base | decode_one(model, decoder, ids, max_new_tokens, options))
        except Exception as e:  # recorded, not dropped: a failing prompt is a result too
            error = f"{type(e).__name__}: {e}"
        if error is not None:
            rows.append(base | {"tokens": [], "accepted": [], "n_prefill": 0, "n_diffusion": 0, "n_verify": 0,
                                "seconds": float("nan"), "finish_reason": "error", "error": error})
    return pd.DataFrame(rows, columns=COLUMNS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus decode", description=__doc__.split("\n")[0])
    ap.add_argument("--decoder", choices=DECODERS, required=True)
    ap.add_argument("--model-path", required=True, help="Orthrus checkpoint (ar, orthrus) or plain causal LM (ar-ref)")
    ap.add_argument("--model-name", required=True)
    ap.add_argument("--precision", nargs="+", choices=["bf16", "fp16", "fp32"], required=True)
    ap.add_argument("--attention", nargs="+", default=["eager"])
    ap.add_argument("--prompts", required=True, help="evaluation prompts (Parquet: prompt_id, domain, prompt)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--num-shards", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--max-error-share", type=float, default=0.0,
                    help="fail when more than this share of the prompts end in an error row (default 0)")
    ap.add_argument("--message", default="empty", help="none | empty | system:<text> (default empty)")
    ap.add_argument("--eos", choices=EOS_POLICIES, default="generation_config")
    ap.add_argument("--last-block", choices=LAST_BLOCKS, default="full")
    ap.add_argument("--prefill-logits", choices=PREFILL_LOGITS, default="last")
    ap.add_argument("--no-deterministic", dest="deterministic", action="store_false",
                    help="leave torch's determinism flags at their defaults")
    ap.add_argument("--out", nargs="+", required=True, help="one file per (precision, attention) pair")
    args = ap.parse_args(argv)
    pairs = list(itertools.product(args.precision, args.attention))
    if len(args.out) != len(pairs):
        ap.error(f"{len(pairs)} (precision, attention) pairs need as many --out files, got {len(args.out)}")
    if not 0 <= args.shard < args.num_shards:
        ap.error(f"--shard {args.shard} outside 0..{args.num_shards - 1}")
    torch.set_num_threads(args.threads)
    check_message(args.message)
    options = {"eos": args.eos, "last_block": args.last_block, "prefill_logits": args.prefill_logits}
    prompts = read_prompt_set(args.prompts).iloc[args.shard :: args.num_shards]
    for (precision, attention), out in zip(pairs, args.out):
        model, tokenizer = load(args.decoder, args.model_path, precision, attention, args.device, args.deterministic)
        df = decode_prompts(model, tokenizer, prompts, args.decoder, args.model_name, precision, attention,
                            args.max_new_tokens, progress=not args.no_progress, message=args.message,
                            options=options)
        failed = df[df["finish_reason"] == "error"]
        if len(failed) > args.max_error_share * len(df):
            first = "; ".join(f"{r.prompt_id}: {r.error}" for r in failed.head(3).itertuples())
            print(f"orthrus decode: {precision}/{attention}: {len(failed)} of {len(df)} prompts failed, more than "
                  f"--max-error-share {args.max_error_share}; first: {first}", file=sys.stderr)
            return 1
        write_parquet(out, df)
        print(f"[decode] {precision}/{attention}: {len(df)} prompts ({len(failed)} errors) -> {out}", file=sys.stderr)
    return 0
