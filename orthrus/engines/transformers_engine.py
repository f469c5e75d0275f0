"""transformers as an engine of the workflow (orthrus/engines/engine.py): the stand-in that plays an
engine outside the study's decoders, so the way in for engines runs end to end without one.

What an engine does with the exported prompts (docs/EXTERNAL.md), with transformers' `generate` on the
teacher as the engine: each prompt's `prompt_token_ids` decoded greedily for its `max_new_tokens`,
stopping at its `stop_token_ids`, plain (speculative `none`: decoder `ar-ref`) or with prompt lookup
(`ngram`: `prompt-lookup`), and one trajectory record per prompt written as an engine's file
(docs/DESIGN.md, "External trajectory file"), with the forwards it ran and, for prompt lookup, the
accepted draft tokens per step. On a sampled export (`orthrus export-prompts --sampling`) it samples
instead: `n_samples` samples of each prompt at the export's settings, one sampled record per prompt,
the run's seed (then + 1 per prompt) in `env`. It reads nothing of the study but the export.

The workflow runs it for a decode.external or sampling.engines entry with `stand_in` (the plan makes it
this engine's entry) as for any engine, `orthrus engine-run --engine transformers`: one job, in this
package's own process (no program), the model loaded once per cell.
"""

from __future__ import annotations

import json
import sys
import time

from orthrus.engines.engine import Engine

ENGINE_NAME = "transformers (the workflow's stand-in engine)"
# an entry's speculative method as the decoder that runs it
DECODERS = {"none": "ar-ref", "ngram": "prompt-lookup"}


def run(model, tokenizer, exported: list[dict], options, device: str) -> list[dict]:
    """One trajectory record per exported prompt (see the module docstring)."""
    import torch
    import transformers

    from orthrus.decode.transformers_decoders import GENERATE_ARGS, StepSizes, count_forwards

    lookup = GENERATE_ARGS.get(options.decoder, lambda o, d: {})(options, None)
    env = {
        "engine": ENGINE_NAME,
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

    from orthrus.decode.transformers_decoders import GENERATE_ARGS

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
            "engine": ENGINE_NAME,
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


def decode_export(model_path: str, prompts: str, runs: list[dict], threads: int) -> None:
    """Each run's file: the export greedy or sampled (as its records say), the model loaded once per cell."""
    import torch

    from orthrus.engines.export_prompts import write_jsonl
    from orthrus.models.loading import load_model
    from orthrus.options import DecodeOptions, OptionsError

    torch.set_num_threads(threads)
    with open(prompts, encoding="utf-8") as f:
        exported = [json.loads(line) for line in f if line.strip()]
    sampled = bool(exported) and "n_samples" in exported[0]
    loaded = {}
    for r in runs:
        options = DecodeOptions.from_json(r["options"])
        if options.decoder not in DECODERS.values():
            raise OptionsError(
                f"run {r['name']}: the stand-in engine runs {' or '.join(DECODERS.values())}, got {options.decoder}"
            )
        cell = (options.precision, options.attention)
        if cell not in loaded:
            loaded = {cell: load_model(model_path, options, r["device"])}  # one cell's model held at a time
        model, tokenizer = loaded[cell]
        if sampled:
            records = run_sampled(model, exported, options, r["device"], r["seed"])
        else:
            records = run(model, tokenizer, exported, options, r["device"])
        write_jsonl(r["out"], records)
        print(
            f"[engine transformers] {r['name']}: {options.decoder} {options.precision}/{options.attention}, "
            f"{len(records)} prompts{' sampled' if sampled else ''} -> {r['out']}",
            file=sys.stderr,
        )


class Transformers(Engine):
    """The stand-in: runs in this package's process, so it has no program to find or build."""

    name = "transformers"
    speculative = tuple(DECODERS)
    stand_in = True

    def program(self, config) -> str | None:
        return ""

    def problem(self, config, users: list[str], entries: list[dict]) -> str | None:
        return None

    def run(self, name: str, entry: dict, out: str, precision: str, seed: int, config, **where) -> dict:
        """The run decodes at the entry's cell (its attention, else the first of decode.attentions) with the
        study's decoding setting, the entry's method as its decoder."""
        from orthrus.options import DecodeOptions

        decode = config.decode
        attention = entry.get("attention") or decode.attentions[0]
        decoder = DECODERS[entry.get("speculative", "none")]
        options = DecodeOptions.from_config(decode.model_dump(), decoder, precision, attention)
        return super().run(name, entry, out, precision, seed, config) | {
            "options": options.to_json(),
            "device": decode.device,
        }

    def model_path(self, teacher: str) -> str:
        return teacher

    def execute(self, program: str, model_path: str, prompts: str, runs: list[dict], threads: int) -> None:
        decode_export(model_path, prompts, runs, threads)
