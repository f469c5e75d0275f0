"""One shard of the teacher corpus: batched greedy answers of the teacher to distillation prompts.

`orthrus corpus --teacher DIR_OR_HUB_ID --prompts distill.parquet --shard I --num-shards N
 --out shard.parquet [--batch-size B] [--max-new-tokens T] [--dtype fp32|bf16|fp16]
 [--threads K] [--attention eager|sdpa] [--revision REV]`

Shard I takes prompts I, I+N, I+2N, ... of the prompt file (in file order), so the N
shards partition the prompts. Prompts are rendered with `orthrus.chat.render_chat`,
batched in order of domain, then rendered length (answers of one domain have like lengths, and
a batch runs until its longest), LEFT-padded and decoded greedily with
`model.generate(do_sample=False)`. Padding is stripped; `response_ids` end at the first
EOS (included) or after T tokens. A prompt too long for the teacher (`orthrus.data.prompts.
length_error`, the rule every decoder follows too) is not generated: its row has an empty
response, finish_reason "error" and the reason in `error`. Output columns (see
docs/DESIGN.md): `prompt_id, domain, prompt, response, prompt_ids, response_ids,
finish_reason ("eos"|"length"|"error"), error, teacher, dtype, batch_size`, in the shard's
prompt order. The file is written atomically.
The teacher is loaded with safetensors only and never with remote code.

`--message none|empty|system:<text>`: the message format of the training sequences (default
empty). `--dataset ID_OR_DIR [--dataset-split train] [--data-files F...]` instead of
`--prompts`: a ready prompt-response dataset (the authors' corpus) in the same schema, with no
generation; `--teacher` then only supplies the tokenizer (orthrus.data.hf_corpus).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from orthrus.contracts import CORPUS_COLUMNS
from orthrus.data.prompt_set import length_error, read_prompt_set
from orthrus.errors import InputError, MissingInputError
from orthrus.io import write_parquet
from orthrus.models.checkpoint import record_digest
from orthrus.models.hub import is_hub_id, split_revision
from orthrus.models.loading import eos_ids
from orthrus.models.precision import DTYPES, TF32, allow_tf32, parse_dtype
from orthrus.options import DecodeOptions, check_message


def resolve_teacher(teacher: str) -> str:
    """Return `teacher` if it is an existing directory or a hub id (`orthrus.models.loading.is_hub_id`);
    otherwise raise naming it."""
    if Path(teacher).is_dir() or (is_hub_id(teacher) and not Path(teacher).exists()):
        return teacher
    raise MissingInputError(f"teacher model directory not found: {teacher!r}")


def load_teacher(teacher: str, dtype: str = "fp32", attention: str | None = None, revision: str | None = None):
    """(model, tokenizer) through the Auto classes, safetensors only, no remote code."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orthrus.models.files import check_model_files
    from orthrus.models.modeling import load_complete

    src, pinned = split_revision(teacher)
    src, revision = resolve_teacher(src), revision or pinned
    if Path(src).is_dir():
        check_model_files(src)
    kwargs = {"revision": revision} if revision else {}
    try:
        tok = AutoTokenizer.from_pretrained(src, trust_remote_code=False, **kwargs)
        if attention:
            kwargs["attn_implementation"] = attention
        model = load_complete(
            AutoModelForCausalLM, src, dtype=parse_dtype(dtype), use_safetensors=True, trust_remote_code=False, **kwargs
        )
    except (OSError, ValueError) as e:
        if Path(src).is_dir():
            raise
        raise MissingInputError(f"teacher {teacher!r} is neither a local directory nor a loadable hub id: {e}") from e
    model.eval()
    return model, tok


def shard_prompts(df: pd.DataFrame, shard: int, num_shards: int) -> pd.DataFrame:
    """Every `num_shards`-th row starting at `shard` (file order)."""
    if num_shards < 1 or not 0 <= shard < num_shards:
        raise InputError(f"need 0 <= shard < num_shards, got shard={shard}, num_shards={num_shards}")
    return df.iloc[shard::num_shards].reset_index(drop=True)


def generate_responses(
    model,
    tok,
    prompts: list[str],
    batch_size: int = 8,
    max_new_tokens: int = DecodeOptions.max_new_tokens,
    progress: bool = True,
    message: str = DecodeOptions.message,
    groups: list[str] | None = None,
) -> list[dict]:
    """Greedy answers, one dict per prompt (in input order): prompt_ids, response_ids,
    response, finish_reason. Batches are cut from the prompts sorted by `groups` (e.g. their
    domains, whose answers have similar lengths), then by prompt length: a batch runs until its
    longest answer, so answers of like length waste fewer rows."""
    import torch
    from tqdm import tqdm

    from orthrus.chat import render_chat

    eos = eos_ids(model, "generation_config", tokenizer=tok)
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos[0]
    rendered = [render_chat(tok, p, message) for p in prompts]
    out: list[dict | None] = [None] * len(prompts)
    limit = model.config.max_position_embeddings
    for i, ids in enumerate(rendered):
        error = length_error(len(ids), max_new_tokens, limit)
        if error:
            out[i] = {"prompt_ids": ids, "response_ids": [], "response": "", "finish_reason": "error", "error": error}
    group = groups or [""] * len(prompts)
    order = sorted((i for i in range(len(prompts)) if out[i] is None), key=lambda i: (group[i], len(rendered[i])))
    device = next(model.parameters()).device
    batches = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
    for idx in tqdm(batches, desc="corpus", unit="batch", file=sys.stderr, disable=not progress):
        n = max(len(rendered[i]) for i in idx)
        ids = torch.tensor([[pad] * (n - len(rendered[i])) + rendered[i] for i in idx], device=device)
        att = torch.tensor([[0] * (n - len(rendered[i])) + [1] * len(rendered[i]) for i in idx], device=device)
        with torch.no_grad():
            gen = model.generate(
                input_ids=ids,
                attention_mask=att,
                do_sample=False,
                max_new_tokens=max_new_tokens,
                eos_token_id=eos,
                pad_token_id=pad,
                temperature=None,
                top_p=None,
                top_k=None,
            )
        for i, row in zip(idx, gen[:, n:].tolist()):
            cut = next((k for k, t in enumerate(row) if t in eos), None)
            if cut is None:
                resp, reason = row[:max_new_tokens], "length"
            else:
                resp, reason = row[: cut + 1], "eos"
            out[i] = {
                "prompt_ids": rendered[i],
                "response_ids": resp,
                "response": tok.decode(resp, skip_special_tokens=True),
                "finish_reason": reason,
                "error": None,
            }
    return out  # type: ignore[return-value]


def build_shard(
    teacher: str,
    prompts_path,
    shard: int,
    num_shards: int,
    batch_size: int = 8,
    max_new_tokens: int = DecodeOptions.max_new_tokens,
    dtype: str = "fp32",
    threads: int | None = 1,
    attention: str | None = None,
    revision: str | None = None,
    progress: bool = True,
    message: str = DecodeOptions.message,
    device: str = "cpu",
) -> pd.DataFrame:
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    allow_tf32(dtype in TF32)  # corpus.precision tf32: fp32 weights, TF32 products
    torch.manual_seed(0)
    df = read_prompt_set(prompts_path)
    part = shard_prompts(df, shard, num_shards)
    model, tok = load_teacher(teacher, dtype=dtype, attention=attention, revision=revision)
    model.to(device)
    res = generate_responses(
        model,
        tok,
        list(part["prompt"]),
        batch_size=batch_size,
        max_new_tokens=max_new_tokens,
        progress=progress,
        message=message,
        groups=list(part["domain"]),
    )
    rows = [
        {
            "prompt_id": r.prompt_id,
            "domain": r.domain,
            "prompt": r.prompt,
            **g,
            "teacher": teacher,
            "dtype": dtype,
            "batch_size": int(batch_size),
        }
        for r, g in zip(part.itertuples(index=False), res)
    ]
    return pd.DataFrame(rows, columns=CORPUS_COLUMNS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus corpus", description="One shard of the teacher corpus (greedy).")
    ap.add_argument("--teacher", required=True, help="local HF directory or hub id")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompts", help="distillation prompts (Parquet): the teacher answers them")
    src.add_argument("--dataset", help="a prompt-response dataset (hub id, directory or builder name): no generation")
    ap.add_argument("--dataset-split", default="train")
    ap.add_argument("--data-files", nargs="*", help="data files of --dataset (e.g. with --dataset json)")
    ap.add_argument("--message", default=DecodeOptions.message, help="none | empty | system:<text>")
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--num-shards", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=DecodeOptions.max_new_tokens)
    ap.add_argument("--dtype", choices=list(DTYPES), default="fp32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--attention", choices=["eager", "sdpa"], default=None, help="attention kernel (default: transformers' choice)"
    )
    ap.add_argument("--revision", default=None, help="hub revision of the teacher (or give it as ID@REV)")
    ap.add_argument("--expected-rows", type=int, help="--dataset: the split's record count, checked when it is read")
    ap.add_argument(
        "--datasets-cache",
        help="--dataset: the datasets cache directory (default: datasets' own, "
        "~/.cache/huggingface/datasets; the workflow passes results/cache/datasets)",
    )
    ap.add_argument("--device", default="cpu", help="torch device of the teacher's generation (cpu, cuda, cuda:N)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    check_message(args.message)
    if args.dataset:
        from transformers import AutoTokenizer

        from orthrus.data.hf_corpus import build_hf_shard

        teacher, pinned = split_revision(args.teacher)
        tok = AutoTokenizer.from_pretrained(resolve_teacher(teacher), revision=args.revision or pinned)
        df = build_hf_shard(
            args.dataset,
            tok,
            args.shard,
            args.num_shards,
            split=args.dataset_split,
            data_files=args.data_files or None,
            message=args.message,
            expected_rows=args.expected_rows,
            cache_dir=args.datasets_cache,
        )
    else:
        df = build_shard(
            args.teacher,
            args.prompts,
            args.shard,
            args.num_shards,
            batch_size=args.batch_size,
            max_new_tokens=args.max_new_tokens,
            dtype=args.dtype,
            threads=args.threads,
            attention=args.attention,
            revision=args.revision,
            progress=not args.no_progress,
            message=args.message,
            device=args.device,
        )
    write_parquet(args.out, df)
    record_digest(args.out)  # hashed once, here: training fingerprints read the record
    n = df["finish_reason"].value_counts()
    print(
        f"[corpus] shard {args.shard}/{args.num_shards}: {len(df)} responses ({n.get('eos', 0)} eos, "
        f"{n.get('length', 0)} length, {n.get('error', 0)} errors) -> {args.out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
