"""The decoding stage: every evaluation prompt through one (model, decoder, precision, attention).

`orthrus decode --decoder ar-ref|ar|orthrus|assisted|prompt-lookup --model-path DIR --model-name NAME --precision bf16 fp32
 --attention eager sdpa --prompts eval.parquet --max-new-tokens 128 [--shard I --num-shards N] --out F...`
decodes every (precision, attention) pair in one process (one model load each, one start-up in
all) and writes one file per pair, in the order precision-major, attention-minor.

`ar-ref` is the plain model through transformers' `generate()` (the study's reference); `ar`
and `orthrus` load an Orthrus checkpoint and use `orthrus.generate`. `assisted` and
`prompt-lookup` are transformers' own speculative decoders on the plain model, greedy and
lossless in exact arithmetic: `generate(..., assistant_model=draft)` with the draft model of
`--draft-path` (it must share the model's tokenizer) and `generate(...,
prompt_lookup_num_tokens=k)`. A prompt that fails is recorded with its error, never dropped; a
prompt too long for the model (or for the draft) is such an error in every decoder
(`orthrus.prompts.length_error`). When more than `--max-error-share` of a run's prompts are
errors (default 0: any), the job fails naming the first ones and writes nothing.

For the transformers decoders a forward hook counts the forwards of the model (and of the
draft) and a streamer records the tokens each step emits, without touching the library's
loop. transformers' assisted loop runs the prefill and the first verification in one forward;
it is counted as the prefill (`n_prefill` 1, `n_verify` = the other forwards), so `tokens /
(n_prefill + n_verify)` is tokens per forward of the model. `accepted` holds each step's
accepted draft tokens (the first step included), `n_diffusion` the draft model's forwards
(0 for prompt lookup).

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

from .contracts import DECODE_COLUMNS, DECODERS, HF_DECODERS, PRECISIONS
from .decoding import EOS_POLICIES, LAST_BLOCKS, PREFILL_LOGITS, generate
from .io import env_setting, write_parquet
from .modeling import OrthrusForCausalLM
from .precision import check_attention, configure, numerical_env
from .chat import check_message, render_chat
from .prompts import length_error, read_prompt_set

DEFAULT_PROMPT_LOOKUP_TOKENS = 10
# orthrus.generate's parity options and their defaults (this project's behaviour)
DEFAULT_OPTIONS = {"eos": "generation_config", "last_block": "full", "prefill_logits": "last"}


def row_message(env) -> str:
    """The message format a decoding row's prompt was rendered with (its `env` record), so
    that later stages (perplexity, forensics) render the same prompt tokens."""
    return env_setting(env, "message", "empty")


def load(decoder: str, path: str, precision: str, attention: str, device: str = "cpu", deterministic: bool = True):
    """(model, tokenizer) for a decoder; never runs checkpoint code, never unpickles."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .modeling import check_finite, resolve_checkpoint

    path = resolve_checkpoint(path)
    dtype = configure(precision, deterministic=deterministic)
    check_attention(attention)
    if decoder in HF_DECODERS:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attention, use_safetensors=True)
        check_finite(model, path)
    else:
        model = OrthrusForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attention)
    tokenizer = AutoTokenizer.from_pretrained(path)
    return model.to(device).eval(), tokenizer


def load_draft(path: str, model, tokenizer, model_path: str):
    """The draft model of `assisted`, in the model's dtype, attention and device; refused,
    naming both, unless it has the model's tokenizer (same vocabulary and special tokens)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .modeling import check_finite, resolve_checkpoint

    path_ = resolve_checkpoint(path)
    check_same_tokenizer(tokenizer, AutoTokenizer.from_pretrained(path_), model_path, path)
    draft = AutoModelForCausalLM.from_pretrained(path_, dtype=model.dtype, use_safetensors=True,
                                                 attn_implementation=model.config._attn_implementation)
    check_finite(draft, path_)
    return draft.to(model.device).eval()


def check_same_tokenizer(tok, draft_tok, model_path: str, draft_path: str) -> None:
    def spec(t):
        return t.get_vocab(), t.eos_token_id, t.pad_token_id

    if spec(tok) != spec(draft_tok):
        raise ValueError(f"the draft model {draft_path} does not share the tokenizer of the model {model_path} "
                         f"({len(draft_tok)} vs {len(tok)} tokens, eos {draft_tok.eos_token_id} vs {tok.eos_token_id}); "
                         "assisted decoding needs one token space")


class _Steps:
    """A generate() streamer that records how many tokens each put carries: the prompt first,
    then the tokens of every decoding step."""

    def __init__(self):
        self.sizes = []

    def put(self, value):
        self.sizes.append(int(value.numel()))

    def end(self):
        pass


def _count_forwards(module) -> tuple[list[int], object]:
    n = [0]
    return n, module.register_forward_hook(lambda *_: n.__setitem__(0, n[0] + 1))


def hf_generate(model, ids: torch.Tensor, max_new_tokens: int, draft=None, prompt_lookup_tokens: int | None = None) -> dict:
    """Greedy transformers generate(): plain, assisted by `draft`, or with prompt lookup."""
    eos = model.generation_config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    pad = model.generation_config.pad_token_id
    speculative = {"assistant_model": draft} if draft is not None else {}
    if prompt_lookup_tokens:
        speculative["prompt_lookup_num_tokens"] = prompt_lookup_tokens
    steps = _Steps()
    counters = [_count_forwards(m) for m in (model, draft) if m is not None]
    try:
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids[None], attention_mask=torch.ones_like(ids[None]), do_sample=False,
                                 max_new_tokens=max_new_tokens, pad_token_id=pad if pad is not None else eos[0],
                                 streamer=steps, **speculative)
        seconds = time.perf_counter() - t0
    finally:
        for _, hook in counters:
            hook.remove()
    tokens = out[0, len(ids):].tolist()
    forwards = counters[0][0][0]
    return {"tokens": tokens, "accepted": [n - 1 for n in steps.sizes[1:]] if speculative else [], "n_prefill": 1,
            "n_diffusion": counters[1][0][0] if draft is not None else 0, "n_verify": max(forwards - 1, 0),
            "seconds": seconds, "finish_reason": "eos" if tokens and tokens[-1] in eos else "length"}


def decode_one(model, decoder: str, ids: torch.Tensor, max_new_tokens: int, options: dict | None = None,
               draft=None, prompt_lookup_tokens: int = DEFAULT_PROMPT_LOOKUP_TOKENS) -> dict:
    """One trajectory; `options` are `orthrus.generate`'s parity options (eos, last_block,
    prefill_logits), ignored by the transformers decoders; `draft` is assisted's draft model."""
    if decoder in HF_DECODERS:
        if decoder == "assisted" and draft is None:
            raise ValueError("the assisted decoder needs a draft model")
        return hf_generate(model, ids, max_new_tokens, draft=draft if decoder == "assisted" else None,
                           prompt_lookup_tokens=prompt_lookup_tokens if decoder == "prompt-lookup" else None)
    out = generate(model, ids, mode=decoder, max_new_tokens=max_new_tokens, **(options or {}))
    s = out.stats
    return {"tokens": out.tokens.tolist(), "accepted": s["accepted"], "n_prefill": s["n_prefill"],
            "n_diffusion": s["n_diffusion"], "n_verify": s["n_verify"], "seconds": s["seconds"],
            "finish_reason": s["finish_reason"]}


def speculative_settings(decoder: str, model, draft, draft_name: str | None, prompt_lookup_tokens: int) -> dict:
    """The library settings a transformers speculative decoder ran with (its defaults unless the
    model's generation config sets them), for the rows' `env`."""
    from transformers import GenerationConfig

    if decoder == "assisted":
        keys = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
        defaults = GenerationConfig._get_default_generation_params()
        given = draft.generation_config
        return {"draft": draft_name, "draft_parameters": sum(p.numel() for p in draft.parameters())} | {
            k: getattr(given, k, None) if getattr(given, k, None) is not None else defaults[k] for k in keys}
    if decoder == "prompt-lookup":
        # transformers' PromptLookupCandidateGenerator takes `max_matching_ngram_size or 2`
        return {"prompt_lookup_num_tokens": prompt_lookup_tokens,
                "max_matching_ngram_size": getattr(model.generation_config, "max_matching_ngram_size", None) or 2}
    return {}


def decode_prompts(model, tokenizer, prompts: pd.DataFrame, decoder: str, model_name: str, precision: str,
                   attention: str, max_new_tokens: int, progress: bool = True, message: str = "empty",
                   options: dict | None = None, draft=None, draft_name: str | None = None,
                   prompt_lookup_tokens: int = DEFAULT_PROMPT_LOOKUP_TOKENS) -> pd.DataFrame:
    options = dict(options or {})
    # the run's protocol beside its numerics; transformers' loop ignores our loop's options, so they are not claimed
    run = {"message": message, "max_new_tokens": max_new_tokens}
    if decoder in HF_DECODERS:
        run["loop"] = "transformers.generate"
        run |= speculative_settings(decoder, model, draft, draft_name, prompt_lookup_tokens)
    else:
        run |= {"loop": "orthrus.generate"} | {k: options.get(k, v) for k, v in DEFAULT_OPTIONS.items()}
    env = json.dumps(numerical_env(model) | run, sort_keys=True)
    # the positions a prompt and its answer may take: the model's, and the draft's when it is shorter
    positions = model.config.max_position_embeddings
    if draft is not None:
        positions = min(positions, getattr(draft.config, "max_position_embeddings", positions))
    rows = []
    for row in tqdm(prompts.itertuples(), total=len(prompts), desc=f"{model_name}/{decoder}/{precision}/{attention}",
                    disable=not progress, file=sys.stderr):
        ids = torch.tensor(render_chat(tokenizer, row.prompt, message), dtype=torch.long, device=model.device)
        base = {"model": model_name, "decoder": decoder, "precision": precision, "attention": attention,
                "prompt_id": row.prompt_id, "domain": row.domain, "prompt_len": len(ids), "env": env, "error": None}
        error = length_error(len(ids), max_new_tokens, positions)
        try:
            if error is None:
                rows.append(base | decode_one(model, decoder, ids, max_new_tokens, options, draft, prompt_lookup_tokens))
        except Exception as e:  # recorded, not dropped: a failing prompt is a result too
            error = f"{type(e).__name__}: {e}"
        if error is not None:
            rows.append(base | {"tokens": [], "accepted": [], "n_prefill": 0, "n_diffusion": 0, "n_verify": 0,
                                "seconds": float("nan"), "finish_reason": "error", "error": error})
    return pd.DataFrame(rows, columns=DECODE_COLUMNS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus decode", description=__doc__.split("\n")[0])
    ap.add_argument("--decoder", choices=DECODERS, required=True)
    ap.add_argument("--model-path", required=True,
                    help="Orthrus checkpoint (ar, orthrus) or plain causal LM (ar-ref, assisted, prompt-lookup)")
    ap.add_argument("--draft-path", help="assisted: the draft model (hub id or directory), same tokenizer")
    ap.add_argument("--prompt-lookup-tokens", type=int, default=DEFAULT_PROMPT_LOOKUP_TOKENS,
                    help=f"prompt-lookup: prompt_lookup_num_tokens (default {DEFAULT_PROMPT_LOOKUP_TOKENS})")
    ap.add_argument("--model-name", required=True)
    ap.add_argument("--precision", nargs="+", choices=PRECISIONS, required=True)
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
    if (args.decoder == "assisted") != bool(args.draft_path):
        ap.error("--draft-path goes with --decoder assisted, and only with it")
    if args.prompt_lookup_tokens < 1:
        ap.error(f"--prompt-lookup-tokens {args.prompt_lookup_tokens}: needs at least 1")
    if not 0 <= args.shard < args.num_shards:
        ap.error(f"--shard {args.shard} outside 0..{args.num_shards - 1}")
    torch.set_num_threads(args.threads)
    check_message(args.message)
    options = {"eos": args.eos, "last_block": args.last_block, "prefill_logits": args.prefill_logits}
    prompts = read_prompt_set(args.prompts).iloc[args.shard :: args.num_shards]
    for (precision, attention), out in zip(pairs, args.out):
        model, tokenizer = load(args.decoder, args.model_path, precision, attention, args.device, args.deterministic)
        draft = load_draft(args.draft_path, model, tokenizer, args.model_path) if args.draft_path else None
        df = decode_prompts(model, tokenizer, prompts, args.decoder, args.model_name, precision, attention,
                            args.max_new_tokens, progress=not args.no_progress, message=args.message,
                            options=options, draft=draft, draft_name=args.draft_path,
                            prompt_lookup_tokens=args.prompt_lookup_tokens)
        failed = df[df["finish_reason"] == "error"]
        if len(failed) > args.max_error_share * len(df):
            first = "; ".join(f"{r.prompt_id}: {r.error}" for r in failed.head(3).itertuples())
            print(f"orthrus decode: {precision}/{attention}: {len(failed)} of {len(df)} prompts failed, more than "
                  f"--max-error-share {args.max_error_share}; first: {first}", file=sys.stderr)
            return 1
        write_parquet(out, df)
        print(f"[decode] {precision}/{attention}: {len(df)} prompts ({len(failed)} errors) -> {out}", file=sys.stderr)
    return 0
