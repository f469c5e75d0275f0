"""`orthrus engine-standin`: an engine outside the study's decoders, played by transformers.

    orthrus engine-standin --model-path TEACHER --prompts results/export/prompts.jsonl --options JSON
                           [--device cpu] [--threads N] --out TRAJ.jsonl

What an engine does with the exported prompts (docs/EXTERNAL.md), with transformers' `generate` as
the engine: each prompt's `prompt_token_ids` decoded greedily for its `max_new_tokens`, stopping at its
`stop_token_ids`, plain (options decoder `ar-ref`) or with prompt lookup (`prompt-lookup`), and one
trajectory record per prompt written as an engine's file (docs/DESIGN.md, "External trajectory
file"), with the forwards it ran and, for prompt lookup, the accepted draft tokens per step. The
workflow runs it for a decode.external entry with `stand_in` (the smoke study's external files), so
the way in for engines runs end to end without one; it reads nothing of the study but the export.

On a sampled export (`orthrus export-prompts --sampling`) it samples instead: `n_samples` samples of
each prompt at the export's settings, one sampled record per prompt, the seed in `env` (`--seed`:
the first prompt's), for a sampling.engines entry with `stand_in`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def run(model, tokenizer, exported: list[dict], options, device: str) -> list[dict]:
    """One trajectory record per exported prompt (see the module docstring)."""
    import torch
    import transformers

    from orthrus.decode.stage import GENERATE_ARGS, StepSizes, count_forwards

    lookup = GENERATE_ARGS.get(options.decoder, lambda o, d: {})(options, None)
    env = {
        "engine": "transformers (orthrus engine-standin)",
        "version": transformers.__version__,
        "dtype": options.precision,
        "kernel": options.attention,
        "batch_size": 1,
        "device": device,
        "speculative": "prompt-lookup" if lookup else None,
    }
    forwards, hook = count_forwards(model)
    records = []
    try:
        for r in exported:
            ids = torch.tensor([r["prompt_token_ids"]], dtype=torch.long, device=device)
            stop = r["stop_token_ids"]
            steps, forwards[0] = StepSizes(), 0
            t0 = time.perf_counter()
            with torch.inference_mode():
                out = model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    do_sample=False,
                    max_new_tokens=r["max_new_tokens"],
                    eos_token_id=stop,
                    pad_token_id=stop[0],
                    streamer=steps,
                    **lookup,
                )
            tokens = out[0, ids.shape[1] :].tolist()
            records.append(
                {
                    "prompt_id": r["prompt_id"],
                    "token_ids": tokens,
                    "text": tokenizer.decode(tokens, skip_special_tokens=True),
                    "finish_reason": "stop" if tokens and tokens[-1] in stop else "length",
                    "prompt_token_ids": r["prompt_token_ids"],
                    "forwards": forwards[0],
                    **({"accepted": [n - 1 for n in steps.sizes[1:]]} if lookup else {}),
                    "seconds": time.perf_counter() - t0,
                    "env": env,
                    # the export's generation settings, echoed: ingest checks them against the study's
                    "settings": {
                        k: r[k] for k in ("max_new_tokens", "stop_token_ids", "message", "temperature") if k in r
                    },
                }
            )
    finally:
        hook.remove()
    return records


def run_sampled(model, exported: list[dict], options, device: str, seed: int) -> list[dict]:
    """One sampled record per prompt of a sampled export (docs/DESIGN.md, "Sampled engine file"):
    its `n_samples` samples of `max_new_tokens`, at its temperature, top-p and top-k, each cut
    after its first stop id; plain AR sampling in one batch of n_samples, prompt lookup one sample
    at a time (transformers' prompt lookup decodes a batch of one). The prompt of rank i is sampled
    from torch's generator seeded with seed + i, recorded in env."""
    import torch
    import transformers

    from orthrus.decode.stage import GENERATE_ARGS

    lookup = GENERATE_ARGS.get(options.decoder, lambda o, d: {})(options, None)
    records = []
    for rank, r in enumerate(exported):
        ids = torch.tensor([r["prompt_token_ids"]], dtype=torch.long, device=device)
        stop, n = r["stop_token_ids"], r["n_samples"]
        settings = {
            "do_sample": True,
            "temperature": r["temperature"],
            "top_p": 1.0 if r["top_p"] is None else r["top_p"],
            "top_k": 0 if r["top_k"] is None else r["top_k"],  # 0: none (the generation config may set 50)
            "max_new_tokens": r["max_new_tokens"],
            "eos_token_id": stop,
            "pad_token_id": stop[0],
        }
        torch.manual_seed(seed + rank)
        with torch.inference_mode():
            if lookup:
                rows = [
                    model.generate(ids, attention_mask=torch.ones_like(ids), **settings, **lookup)[0] for _ in range(n)
                ]
            else:
                batch = ids.expand(n, -1)
                rows = list(model.generate(batch, attention_mask=torch.ones_like(batch), **settings))
        samples = []
        for row in rows:
            tokens = row[ids.shape[1] :].tolist()
            end = next((i + 1 for i, t in enumerate(tokens) if t in stop), len(tokens))
            samples.append(tokens[:end])
        env = {
            "engine": "transformers (orthrus engine-standin)",
            "version": transformers.__version__,
            "dtype": options.precision,
            "kernel": options.attention,
            "device": device,
            "speculative": "prompt-lookup" if lookup else None,
            "seed": seed + rank,
            "temperature": r["temperature"],
            "top_p": r["top_p"],
            "top_k": r["top_k"],
        }
        records.append({"prompt_id": r["prompt_id"], "samples": samples, "env": env})
    return records


def main(argv: list[str] | None = None) -> int:
    import torch

    from orthrus.engines.export_prompts import write_jsonl
    from orthrus.models.loading import load_model
    from orthrus.options import DecodeOptions, OptionsError

    ap = argparse.ArgumentParser(prog="orthrus engine-standin", description=__doc__.split("\n")[0])
    ap.add_argument("--model-path", required=True, help="the model the stand-in engine serves (the teacher)")
    ap.add_argument("--prompts", required=True, help="the exported prompts (orthrus export-prompts)")
    ap.add_argument("--options", required=True, help="DecodeOptions JSON: decoder ar-ref or prompt-lookup, its cell")
    ap.add_argument("--seed", type=int, default=0, help="a sampled export: the first prompt's seed (then +1 each)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    options = DecodeOptions.from_json(args.options)
    if options.decoder not in ("ar-ref", "prompt-lookup"):
        raise OptionsError(f"the stand-in engine runs ar-ref or prompt-lookup, got {options.decoder}")
    torch.set_num_threads(args.threads)
    with open(args.prompts, encoding="utf-8") as f:
        exported = [json.loads(line) for line in f if line.strip()]
    model, tokenizer = load_model(args.model_path, options, args.device)
    sampled = bool(exported) and "n_samples" in exported[0]
    if sampled:
        records = run_sampled(model, exported, options, args.device, args.seed)
    else:
        records = run(model, tokenizer, exported, options, args.device)
    write_jsonl(args.out, records)
    print(
        f"[engine-standin] {options.decoder} {options.precision}/{options.attention}: {len(records)} prompts"
        f"{' sampled' if sampled else ''} -> "
        f"{args.out}",
        file=sys.stderr,
    )
    return 0
