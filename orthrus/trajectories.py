"""The decoding stage: every evaluation prompt through one model, one `DecodeOptions` per output file.

`orthrus decode --model-path DIR --model-name NAME --prompts eval.parquet --options JSON... --out F...
 [--draft-path DIR] [--shard I --num-shards N]` decodes one file per options object (one model load
each, one start-up in all); the workflow passes each cell's options whole, built from the config by
`DecodeOptions.from_config`. By hand, `--decoder D --precision P... --attention A... [--max-new-tokens
T] [--message M] [--eos E] [--last-block L] [--prefill-logits P] [--block-size K]
[--prompt-lookup-tokens N] [--no-deterministic]` builds them instead, one per (precision, attention)
pair in precision-major order; a flag left out takes the option's default.

`ar-ref` is the plain model through transformers' `generate()` (the study's reference); `ar`
and `orthrus` load an Orthrus checkpoint and use `orthrus.generate`. `assisted` and
`prompt-lookup` are transformers' own speculative decoders on the plain model, greedy and
lossless in exact arithmetic: `generate(..., assistant_model=draft)` with the draft model of
`--draft-path` (it must share the model's tokenizer) and `generate(...,
prompt_lookup_num_tokens=k)`. A prompt that fails is recorded with its error, never dropped; a
prompt too long for the model (or for the draft) is such an error in every decoder
(`orthrus.prompt_set.length_error`). When more than `--max-error-share` of a run's prompts are
errors (default 0: any), the job fails naming the first ones and writes nothing.

For the transformers decoders a forward hook counts the forwards of the model (and of the
draft) and a streamer records the tokens each step emits, without touching the library's
loop. transformers' assisted loop runs the prefill and the first verification in one forward;
it is counted as the prefill (`n_prefill` 1, `n_verify` = the other forwards), so `tokens /
(n_prefill + n_verify)` is tokens per forward of the model. `accepted` holds each step's
accepted draft tokens (the first step included), `n_diffusion` the draft model's forwards
(0 for prompt lookup).

Every row's `env` holds the numerical environment, the loop that ran (`orthrus.generate` or
`transformers.generate`), the options under "options" (`DecodeOptions.record`) and, for
transformers' speculative decoders, the library settings they ran with.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import pandas as pd
import torch
from tqdm import tqdm

from .chat import render_chat
from .contracts import DECODE_COLUMNS, DECODERS, HF_DECODERS, PRECISIONS
from .decoding import generate
from .io import write_parquet
from .loading import eos_ids, load_draft, load_model, snapshot_commit
from .options import EOS_POLICIES, LAST_BLOCKS, PREFILL_LOGITS, DecodeOptions, OptionsError
from .precision import numerical_env
from .prompt_set import length_error, read_prompt_set


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


def hf_generate(model, ids: torch.Tensor, options: DecodeOptions, draft=None) -> dict:
    """Greedy transformers generate(): plain (`ar-ref`), assisted by `draft`, or with prompt lookup."""
    eos = eos_ids(model, "generation_config")  # what transformers' generate stops on
    pad = model.generation_config.pad_token_id
    speculative = {}
    if options.decoder == "assisted":
        if draft is None:
            raise OptionsError("the assisted decoder needs a draft model")
        speculative["assistant_model"] = draft
    if options.decoder == "prompt-lookup":
        speculative["prompt_lookup_num_tokens"] = options.prompt_lookup_tokens
    steps = _Steps()
    counters = [_count_forwards(m) for m in (model, speculative.get("assistant_model")) if m is not None]
    try:
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids[None], attention_mask=torch.ones_like(ids[None]), do_sample=False,
                                 max_new_tokens=options.max_new_tokens, pad_token_id=pad if pad is not None else eos[0],
                                 streamer=steps, **speculative)
        seconds = time.perf_counter() - t0
    finally:
        for _, hook in counters:
            hook.remove()
    tokens = out[0, len(ids):].tolist()
    forwards = counters[0][0][0]
    return {"tokens": tokens, "accepted": [n - 1 for n in steps.sizes[1:]] if speculative else [], "n_prefill": 1,
            "n_diffusion": counters[1][0][0] if len(counters) > 1 else 0, "n_verify": max(forwards - 1, 0),
            "seconds": seconds, "finish_reason": "eos" if tokens and tokens[-1] in eos else "length"}


def decode_one(model, ids: torch.Tensor, options: DecodeOptions, draft=None) -> dict:
    """One trajectory of `options.decoder`; `draft` is assisted's draft model."""
    if options.decoder in HF_DECODERS:
        return hf_generate(model, ids, options, draft)
    out = generate(model, ids, options)
    s = out.stats
    return {"tokens": out.tokens.tolist(), "accepted": s["accepted"], "n_prefill": s["n_prefill"],
            "n_diffusion": s["n_diffusion"], "n_verify": s["n_verify"], "seconds": s["seconds"],
            "finish_reason": s["finish_reason"]}


def speculative_settings(options: DecodeOptions, model, draft, draft_name: str | None) -> dict:
    """The library settings a transformers speculative decoder ran with (its defaults unless the
    model's generation config sets them), for the rows' `env`."""
    from transformers import GenerationConfig

    if options.decoder == "assisted":
        keys = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
        defaults = GenerationConfig._get_default_generation_params()
        given = draft.generation_config
        return {"draft": draft_name, "draft_commit": snapshot_commit(draft.name_or_path),
                "draft_parameters": sum(p.numel() for p in draft.parameters())} | {
            k: getattr(given, k, None) if getattr(given, k, None) is not None else defaults[k] for k in keys}
    if options.decoder == "prompt-lookup":
        # transformers' PromptLookupCandidateGenerator takes `max_matching_ngram_size or 2`
        return {"max_matching_ngram_size": getattr(model.generation_config, "max_matching_ngram_size", None) or 2}
    return {}


def decode_prompts(model, tokenizer, prompts: pd.DataFrame, options: DecodeOptions, model_name: str,
                   progress: bool = True, draft=None, draft_name: str | None = None) -> pd.DataFrame:
    """One row per prompt of `options`' trajectory (docs/DESIGN.md, "Decoding result")."""
    loop = "transformers.generate" if options.decoder in HF_DECODERS else "orthrus.generate"
    # provenance: the model as read (a hub snapshot's commit, pinned by the config's `revisions` or not)
    run = ({"loop": loop, "options": options.record(), "model_path": str(model.name_or_path),
            "model_commit": snapshot_commit(model.name_or_path)}
           | speculative_settings(options, model, draft, draft_name))
    env = json.dumps(numerical_env(model) | run, sort_keys=True)
    # the positions a prompt and its answer may take: the model's, and the draft's when it is shorter
    positions = model.config.max_position_embeddings
    if draft is not None:
        positions = min(positions, getattr(draft.config, "max_position_embeddings", positions))
    o = options
    rows = []
    for row in tqdm(prompts.itertuples(), total=len(prompts), desc=f"{model_name}/{o.decoder}/{o.precision}/{o.attention}",
                    disable=not progress, file=sys.stderr):
        ids = torch.tensor(render_chat(tokenizer, row.prompt, o.message), dtype=torch.long, device=model.device)
        base = {"model": model_name, "decoder": o.decoder, "precision": o.precision, "attention": o.attention,
                "prompt_id": row.prompt_id, "domain": row.domain, "prompt_len": len(ids), "env": env, "error": None}
        error = length_error(len(ids), o.max_new_tokens, positions)
        try:
            if error is None:
                rows.append(base | decode_one(model, ids, o, draft))
        except Exception as e:  # recorded, not dropped: a failing prompt is a result too
            error = f"{type(e).__name__}: {e}"
        if error is not None:
            rows.append(base | {"tokens": [], "accepted": [], "n_prefill": 0, "n_diffusion": 0, "n_verify": 0,
                                "seconds": float("nan"), "finish_reason": "error", "error": error})
    return pd.DataFrame(rows, columns=DECODE_COLUMNS)


# the flags that build options by hand (each sets the DecodeOptions field of its name)
_OPTION_FLAGS = ("decoder", "max_new_tokens", "block_size", "message", "eos", "last_block", "prefill_logits",
                 "deterministic", "prompt_lookup_tokens")


def cell_options(args) -> list[DecodeOptions]:
    """The options of each output file: `--options` as given, or built from the flags."""
    flags = {f: getattr(args, f) for f in _OPTION_FLAGS if getattr(args, f) is not None}
    if args.options:
        extra = [*flags, *(["precision"] if args.precision else []), *(["attention"] if args.attention else [])]
        if extra:
            raise OptionsError(f"--options holds the whole setting; drop {', '.join('--' + k.replace('_', '-') for k in extra)}")
        return [DecodeOptions.from_json(j) for j in args.options]
    if "decoder" not in flags or not args.precision:
        raise OptionsError("give --options JSON..., or --decoder and --precision (and --attention, default eager)")
    return [DecodeOptions(precision=p, attention=a, **flags) for p in args.precision for a in args.attention or ["eager"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus decode", description=__doc__.split("\n")[0])
    ap.add_argument("--model-path", required=True,
                    help="Orthrus checkpoint (ar, orthrus) or plain causal LM (ar-ref, assisted, prompt-lookup)")
    ap.add_argument("--model-name", required=True)
    ap.add_argument("--prompts", required=True, help="evaluation prompts (Parquet: prompt_id, domain, prompt)")
    ap.add_argument("--options", nargs="+", help="one DecodeOptions JSON object per --out file (orthrus/options.py)")
    ap.add_argument("--draft-path", help="assisted: the draft model (hub id or directory), same tokenizer")
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--num-shards", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--max-error-share", type=float, default=0.0,
                    help="fail when more than this share of the prompts end in an error row (default 0)")
    hand = ap.add_argument_group("options by hand (instead of --options; a flag left out takes the option's default)")
    hand.add_argument("--decoder", choices=DECODERS)
    hand.add_argument("--precision", nargs="+", choices=PRECISIONS)
    hand.add_argument("--attention", nargs="+")
    hand.add_argument("--max-new-tokens", type=int)
    hand.add_argument("--block-size", type=int)
    hand.add_argument("--message", help="none | empty | system:<text>")
    hand.add_argument("--eos", choices=EOS_POLICIES)
    hand.add_argument("--last-block", choices=LAST_BLOCKS)
    hand.add_argument("--prefill-logits", choices=PREFILL_LOGITS)
    hand.add_argument("--prompt-lookup-tokens", type=int)
    hand.add_argument("--no-deterministic", dest="deterministic", action="store_false", default=None,
                      help="leave torch's determinism flags at their defaults")
    ap.add_argument("--out", nargs="+", required=True, help="one file per options object")
    args = ap.parse_args(argv)
    cells = cell_options(args)
    if len(args.out) != len(cells):
        ap.error(f"{len(cells)} decoding settings need as many --out files, got {len(args.out)}")
    if any(o.decoder == "assisted" for o in cells) != bool(args.draft_path):
        ap.error("--draft-path goes with the assisted decoder, and only with it")
    if not 0 <= args.shard < args.num_shards:
        ap.error(f"--shard {args.shard} outside 0..{args.num_shards - 1}")
    torch.set_num_threads(args.threads)
    prompts = read_prompt_set(args.prompts).iloc[args.shard :: args.num_shards]
    for options, out in zip(cells, args.out):
        model, tokenizer = load_model(args.model_path, options, args.device)
        draft = load_draft(args.draft_path, model, tokenizer, args.model_path) if options.decoder == "assisted" else None
        df = decode_prompts(model, tokenizer, prompts, options, args.model_name, progress=not args.no_progress,
                            draft=draft, draft_name=args.draft_path)
        failed = df[df["finish_reason"] == "error"]
        cell = f"{options.decoder}/{options.precision}/{options.attention}"
        if len(failed) > args.max_error_share * len(df):
            first = "; ".join(f"{r.prompt_id}: {r.error}" for r in failed.head(3).itertuples())
            print(f"orthrus decode: {cell}: {len(failed)} of {len(df)} prompts failed, more than "
                  f"--max-error-share {args.max_error_share}; first: {first}", file=sys.stderr)
            return 1
        write_parquet(out, df)
        print(f"[decode] {cell}: {len(df)} prompts ({len(failed)} errors) -> {out}", file=sys.stderr)
    return 0
