"""A ready prompt-response corpus from the hub (or local files) as corpus shards: no generation.

The follow-up paper's authors publish their 1.7B distillation corpus as the hub dataset
`ai-forever/ZaryaOrthrusDataset-1.7B` (JSONL, train/test splits). Their training script
(`train/train_orthrus_fused_v42.py`, `OrthrusTrainDataset`) reads two fields per record,
`prompt` and `response`, and builds each training sequence as

    chat template over [user: prompt] (no system message), generation prompt, thinking off
    + tokenizer.encode(response + "<|im_end|>")

i.e. the response closed by the chat end token. This module turns such a dataset into this
project's corpus shard schema (`orthrus.contracts.CORPUS_COLUMNS`) with the same rule: `prompt_ids` from
`orthrus.chat.render_chat` with the configured message format (`none` for theirs), and
`response_ids` = the response text followed by the tokenizer's EOS token, tokenized together
without added special tokens. Shard I of N takes records I, I+N, I+2N, ... of the split, as
`orthrus corpus` does with prompts, so the shards partition the split. A record's id is
`<split>-<index>`; its domain is the dataset's `domain` field when it has one, else `hf`.
A record with an empty prompt or no response (the authors' loader skips these) becomes an error
row (finish_reason "error", the reason in `error`, no ids), which training counts and skips, as
it does the corpus stage's over-length prompts.

`datasets.load_dataset` does the reading, so `dataset` is a hub id (`ai-forever/...`), a local
directory, or a builder name (`json`) with `data_files`. A split without the two fields fails
naming the missing ones.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from orthrus.errors import InputError

REQUIRED_FIELDS = ("prompt", "response")


class CorpusLayoutError(InputError):
    """The dataset does not have the fields the corpus needs."""


def load_split(
    dataset: str,
    split: str = "train",
    data_files=None,
    revision: str | None = None,
    expected_rows: int | None = None,
    cache_dir=None,
):
    import datasets

    from orthrus.models.hub import split_revision

    dataset, pinned = split_revision(dataset)
    revision = revision or pinned
    if re.search(r"[*?\[\]{}]", dataset) and Path(dataset).expanduser().exists():
        # datasets reads a local path as a glob pattern and fails deep inside
        raise CorpusLayoutError(
            f"dataset {dataset!r}: a local path with glob characters (* ? [ ] {{ }}), which "
            "datasets reads as a pattern; rename or link the directory"
        )
    kwargs = {
        k: v for k, v in (("data_files", data_files), ("revision", revision), ("cache_dir", cache_dir)) if v is not None
    }
    ds = datasets.load_dataset(dataset, split=split, **kwargs)
    if expected_rows is not None and len(ds) != expected_rows:
        raise CorpusLayoutError(
            f"dataset {dataset!r} split {split!r}: {len(ds)} records, expected {expected_rows} (corpus.expected_rows); "
            "a different revision, or files read twice (a dataset with sharded copies beside its full file: "
            "name the files with corpus.data_files)"
        )
    missing = [f for f in REQUIRED_FIELDS if f not in ds.column_names]
    if missing:
        raise CorpusLayoutError(
            f"dataset {dataset!r} split {split!r}: missing field(s) {missing} "
            f"(has {ds.column_names}; the authors' layout has {list(REQUIRED_FIELDS)})"
        )
    return ds


def build_hf_shard(
    dataset: str,
    tokenizer,
    shard: int,
    num_shards: int,
    split: str = "train",
    data_files=None,
    revision: str | None = None,
    message: str = "none",
    expected_rows: int | None = None,
    cache_dir=None,
) -> pd.DataFrame:
    """One corpus shard (orthrus.contracts.CORPUS_COLUMNS) from the records shard, shard+N, ... of the split."""
    from orthrus.chat import render_chat
    from orthrus.contracts import CORPUS_COLUMNS
    from orthrus.data.prompt_set import control_token, visible

    if num_shards < 1 or not 0 <= shard < num_shards:
        raise InputError(f"need 0 <= shard < num_shards, got shard={shard}, num_shards={num_shards}")
    ds = load_split(dataset, split, data_files, revision, expected_rows, cache_dir)
    part = ds.shard(num_shards=num_shards, index=shard, contiguous=False)  # rows shard, shard+N, ...
    eos = tokenizer.eos_token
    if eos is None:
        raise CorpusLayoutError("the tokenizer has no EOS token to close the responses with")
    rows = []
    for k, rec in enumerate(part):
        prompt, response = rec["prompt"], rec["response"]
        row = {
            "prompt_id": f"{split}-{shard + k * num_shards}",
            "domain": rec.get("domain") or "hf",
            "teacher": dataset,
            "dtype": "dataset",
            "batch_size": 0,
        }
        bad = not isinstance(prompt, str) or not visible(prompt) or not isinstance(response, str)
        token = None if bad else control_token(prompt) or control_token(response)
        if bad or token:
            # the authors' loader skips these; here they are error rows (counted, skipped by training)
            what = (
                "empty or missing prompt"
                if not isinstance(prompt, str) or not visible(prompt)
                else "missing response"
                if not isinstance(response, str)
                else f"chat control token {token!r} (it would become a real one)"
            )
            rows.append(
                {
                    **row,
                    "prompt": prompt if isinstance(prompt, str) else "",
                    "response": response if isinstance(response, str) else "",
                    "prompt_ids": [],
                    "response_ids": [],
                    "finish_reason": "error",
                    "error": f"{what} in dataset record {row['prompt_id']}",
                }
            )
            continue
        rows.append(
            {
                **row,
                "prompt": prompt,
                "response": response,
                "prompt_ids": render_chat(tokenizer, prompt, message),
                "response_ids": tokenizer(response + eos, add_special_tokens=False)["input_ids"],
                "finish_reason": "eos",
                "error": None,
            }
        )
    return pd.DataFrame(rows, columns=CORPUS_COLUMNS)
