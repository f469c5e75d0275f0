"""`orthrus export-prompts`: the evaluation set as an engine outside this package needs it.

    orthrus export-prompts --model-path DIR --prompts eval.parquet --options JSON --out prompts.jsonl
    orthrus export-prompts --model-path DIR --prompts eval.parquet --max-new-tokens N [--message M] --out ...
    orthrus export-prompts --model-path DIR --prompts eval.parquet --options JSON --sampling JSON --out sampled.jsonl

`--options` is the study's DecodeOptions JSON (the workflow passes the one `orthrus ingest` checks the
engine's file against, so the export's token budget and message format cannot differ from the
study's); by hand, `--max-new-tokens` is required instead (no default: a default that is not the
study's budget made files that ingest then refused, issue 32).

One JSON object per line and prompt (docs/DESIGN.md, "Exported prompts"): the prompt id and domain,
the raw prompt, its chat messages, the chat-rendered text and its token ids under the study's message
format (`orthrus.chat.render_chat`, the rendering every stage uses), and the study's generation
settings: greedy, `max_new_tokens`, the stop ids transformers' generate stops on for this model (its
generation config's EOS ids, which the `ar-ref` reference stops on) and the message format. An engine
fed `prompt_token_ids` with these settings runs the study's experiment; docs/EXTERNAL.md does it with
vLLM and SGLang, and `decode.external` reads the trajectories back (`orthrus ingest`).

With `--sampling` (the sampling.two_sample section as JSON, checked by its model) it writes the sampled export
instead: the two-sample test's prompts only, each with the test's sampling settings (`temperature`,
`top_p`, `top_k`, `n_samples`, and `max_new_tokens` its m), for engines whose sampled files
`orthrus engine-samples` tests (sampling.engines).

`--model-path` is the reference model (the teacher): only its tokenizer and configs are read.
"""

from __future__ import annotations

import argparse
import json
import sys
from types import SimpleNamespace

import pandas as pd

from orthrus.audit.settings import TwoSample
from orthrus.chat import chat_messages, render_chat
from orthrus.config import read_section
from orthrus.data.prompt_set import read_prompt_set
from orthrus.io import atomic_path
from orthrus.models.loading import eos_ids
from orthrus.options import DecodeOptions, check_message


def stop_ids(path) -> list[int]:
    """The ids transformers' generate stops on for the model at `path` (a local directory): its
    generation_config.json's EOS ids, or, without one, those of its config.json (what
    `from_pretrained` builds the generation config from)."""
    from transformers import AutoConfig, GenerationConfig

    try:
        generation = GenerationConfig.from_pretrained(path)
    except OSError:
        generation = GenerationConfig.from_model_config(AutoConfig.from_pretrained(path))
    return eos_ids(SimpleNamespace(generation_config=generation), "generation_config")


def export_records(tokenizer, prompts, stop: list[int], max_new_tokens: int, message: str) -> list[dict]:
    """One record (`orthrus.engines.formats.EXPORT_FIELDS`) per prompt of `prompts`, in the prompt set's order."""
    check_message(message)
    records = []
    for pid, domain, prompt in zip(prompts["prompt_id"], prompts["domain"], prompts["prompt"]):
        messages = chat_messages(prompt, message)
        ids = render_chat(tokenizer, prompt, message)
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
        )
        records.append(
            {
                "prompt_id": pid,
                "domain": domain,
                "prompt": prompt,
                "messages": messages,
                "prompt_text": text,
                "prompt_token_ids": [int(t) for t in ids],
                "max_new_tokens": int(max_new_tokens),
                "stop_token_ids": [int(t) for t in stop],
                "temperature": 0.0,
                "message": message,
            }
        )
    return records


def sampled_records(records: list[dict], two_sample: TwoSample) -> list[dict]:
    """The sampled export: the records of the two-sample test's prompts (`two_sample`: the
    sampling.two_sample section), each with its sampling settings and `max_new_tokens` its m."""
    from orthrus.audit.two_sample import two_sample_prompts

    ids = set(two_sample_prompts(pd.DataFrame(records), two_sample)["prompt_id"])
    settings = {
        "max_new_tokens": two_sample.m,
        "temperature": float(two_sample.temperature),
        "top_p": two_sample.top_p,
        "top_k": two_sample.top_k,
        "n_samples": two_sample.n_samples,
    }
    return [r | settings for r in records if r["prompt_id"] in ids]


def write_jsonl(path, records: list[dict]) -> None:
    """Records as JSON Lines (UTF-8, one object per line), atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoTokenizer

    from orthrus.models.files import resolve_checkpoint

    ap = argparse.ArgumentParser(prog="orthrus export-prompts", description=__doc__.split("\n")[0])
    ap.add_argument("--model-path", required=True, help="the reference model (teacher): its tokenizer and configs")
    ap.add_argument("--prompts", required=True, help="evaluation prompts (Parquet: prompt_id, domain, prompt)")
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--options", help="the study's DecodeOptions JSON: its max_new_tokens and message")
    source.add_argument("--max-new-tokens", type=int, help="by hand: the study's decode.max_new_tokens")
    ap.add_argument(
        "--message", help=f"with --max-new-tokens: none | empty | system:<text> (default {DecodeOptions.message})"
    )
    ap.add_argument(
        "--sampling",
        help="the sampling.two_sample section as JSON (orthrus/audit/settings.py): export its prompts sampled",
    )
    ap.add_argument("--out", required=True, help="the JSON Lines file to write")
    args = ap.parse_args(argv)
    if args.options is not None:
        if args.message is not None:
            ap.error("--message: the --options give the message format")
        options = DecodeOptions.from_json(args.options)
    else:  # checks both
        options = DecodeOptions(
            decoder="external",
            max_new_tokens=args.max_new_tokens,
            message=args.message if args.message is not None else DecodeOptions.message,
        )
    two_sample = None
    if args.sampling is not None:  # checked before any model loads
        two_sample = read_section(TwoSample, args.sampling, "--sampling (sampling.two_sample)")
    path = resolve_checkpoint(args.model_path)
    records = export_records(
        AutoTokenizer.from_pretrained(path),
        read_prompt_set(args.prompts),
        stop_ids(path),
        options.max_new_tokens,
        options.message,
    )
    if two_sample is not None:
        records = sampled_records(records, two_sample)
    write_jsonl(args.out, records)
    print(f"[export-prompts] {len(records)} prompts -> {args.out}", file=sys.stderr)
    return 0
