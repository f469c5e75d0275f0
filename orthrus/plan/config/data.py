"""`prompts` and `corpus`: the evaluation and distillation prompt sets and the training corpus;
`Dataset`, a dataset spec of orthrus/data/prompts.py."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from orthrus.config import OMIT, Int, Message, Name, Num, Section, Sha256, check, opt, unique
from orthrus.contracts import PRECISIONS
from orthrus.world.domains import DOMAINS

Path4k = Annotated[str, Field(min_length=1, max_length=4096)]


class Dataset(Section):
    """A dataset spec of orthrus/data/prompts.py."""

    SPARSE = True

    path: str = Field(min_length=1, description="Hub id or a `datasets` builder (json, parquet, ...).")
    name: str | None = Field(None, description="Dataset configuration name.")
    data_files: (
        Annotated[str, Field(max_length=4096)]
        | Annotated[list[Path4k], Field(max_length=10000)]
        | Annotated[dict[str, str | list[Path4k]], Field(max_length=64)]
        | None
    ) = Field(
        None,
        description="Local files for a builder (a path, a list of paths, or {split: paths}; at most 10,000 paths).",
    )
    revision: str | None = Field(None, description="Hub revision.")
    split: str = Field(None, description="Split (default train).")
    column: str = Field(None, description="The text column (default text).")
    template: str = Field(None, description="A str.format over the row's columns, instead of column.")
    n: Annotated[Int, Field(ge=1)] = Field(None, description="Prompts to take.")
    min_chars: Annotated[Int, Field(ge=0)] = Field(None, description="Overrides prompts.min_chars.")
    max_chars: Annotated[Int, Field(ge=1)] = Field(None, description="Overrides prompts.max_chars.")
    shuffle: bool = Field(None, description="Take rows in a seeded random order (default true).")
    domain: str = Field(None, description="distill only: the domain label (default: path).")


# Pseudo-file systems: their files can be endless (/dev/zero, /dev/urandom) or block (/proc/kmsg).
PSEUDO_ROOTS = ("/dev", "/proc", "/sys")


def local_file_problem(value: str, path: str) -> str | None:
    """None for a regular file outside /dev, /proc and /sys; else the problem."""
    p = Path(os.path.expanduser(path))
    real = os.path.realpath(p)
    if any(real == r or real.startswith(r + "/") for r in PSEUDO_ROOTS):
        return f"{value!r} is a device or kernel file ({real}), which may never end; give a regular file"
    if p.exists() and not p.is_file():
        return f"{value!r} is not a regular file (a directory, named pipe or device never gives a prompt file)"
    if not p.is_file():
        return f"no such file: {value!r}" + ("" if path != value else " (nor an http(s)/file URL)")
    return None


def eval_file_problem(value: str) -> str | None:
    """None for an http(s) URL (the prompts job downloads it within its size cap and timeout), a
    file URL or local path naming a regular file outside /dev, /proc and /sys; else the problem."""
    scheme = value.split("://", 1)[0].lower() if "://" in value else None
    if scheme is None:
        return local_file_problem(value, value)
    if scheme not in ("http", "https", "file"):
        return f"unsupported URL scheme {scheme!r} in {value!r} (http, https or file)"
    if scheme == "file":
        from urllib.parse import unquote, urlsplit

        url = urlsplit(value)
        if url.netloc not in ("", "localhost"):
            return f"file URL {value!r} names host {url.netloc!r}; a file URL is local (file:///path)"
        return local_file_problem(value, unquote(url.path))
    return None


class Prompts(Section):
    """Evaluation and distillation prompt sets."""

    source: Literal["tiny", "hf"] = Field(
        "tiny", description="`tiny`: sampled from the tiny world; `hf`: the study's public datasets via `datasets`."
    )
    eval_per_domain: opt(Int, ge=1, le=100000) = Field(
        20, description="Evaluation prompts per domain (hf with null = each dataset's own count)."
    )
    distill_n: Int = Field(
        1000, ge=1, le=10000000, description="Number of distillation prompts (disjoint from the evaluation prompts)."
    )
    min_chars: Int = Field(1, ge=0, description="Prompts shorter than this are dropped and counted.")
    max_chars: Int = Field(1000, ge=1, description="Prompts longer than this are dropped and counted.")
    domains: opt(unique(Literal[tuple(DOMAINS)], min_length=1)) = Field(
        None, description="tiny only: subset of the world's domains (null = all twelve)."
    )
    eval: Annotated[dict[Name, Dataset], OMIT] = Field(
        None, description="hf only: {domain: dataset spec} (see orthrus/data/prompts.py)."
    )
    distill: Annotated[list[Dataset], OMIT] = Field(
        None, description="hf only: list of dataset specs for distillation prompts, each with its `domain` label."
    )
    eval_file: Annotated[opt(str, min_length=1), OMIT] = Field(
        None,
        description="The evaluation set as a file in the authors' format {domain: [prompt, ...]} (a path or an "
        "http(s)/file URL), its prompts as they stand; replaces the source's evaluation set.",
    )
    eval_file_sha256: Annotated[Sha256 | None, OMIT] = Field(
        None, description="Expected sha256 of `eval_file` (checked after reading or downloading it)."
    )
    eval_file_timeout: Annotated[Annotated[Num, Field(gt=0, le=3600)], OMIT] = Field(
        None,
        description="Seconds a URL `eval_file` may take to download, connecting and reading (code default "
        "120): a server that accepts and never answers, or trickles, fails naming the URL.",
    )
    eval_file_split: opt(Int, ge=1) = Field(
        None,
        description="Split `eval_file`: its first N prompts of each domain evaluate, the rest (deduplicated) are the "
        "distillation prompts, up to `distill_n`; null: the whole file evaluates.",
    )
    eval_duplicates: Annotated[Literal["error", "first"], OMIT] = Field(
        None,
        description="A prompt repeated in `eval_file`: `error` (the default) refuses the file; `first` keeps "
        "the first occurrence, as the authors' trajectory script effectively did (1,200 prompts, 1,190 distinct).",
    )

    @model_validator(mode="after")
    def _rules(self):
        """Filters that drop every prompt; the evaluation file and its companions; hf's evaluation specs."""
        lines = [
            (
                "min_chars",
                f"{self.min_chars} exceeds prompts.max_chars ({self.max_chars}): every prompt would be dropped",
            )
            if self.min_chars > self.max_chars
            else None
        ]
        if self.source == "hf" and not self.eval and not self.eval_file:
            lines.append(("eval", "required (non-empty) when prompts.source is hf without prompts.eval_file"))
        if self.eval_file:
            lines.append(("eval_file", eval_file_problem(self.eval_file)))
        for key in ("eval_file_sha256", "eval_duplicates", "eval_file_timeout", "eval_file_split"):
            if getattr(self, key) is not None and not self.eval_file:
                lines.append((key, "set, but there is no prompts.eval_file for it to apply to"))
        check(lines)
        return self


class Corpus(Section):
    """The training corpus: the teacher's greedy answers to the distillation prompts (source generate), or a
    ready prompt-response dataset (source hf)."""

    shards: Int = Field(
        2,
        ge=1,
        le=4096,
        description="Number of corpus jobs (scatter), at most the number of distillation prompts "
        "(more would leave shards empty); override with --set-scatter corpus=N (1 to 4096, checked like this key).",
    )
    batch_size: Int = Field(16, ge=1, description="Batched generation with left padding (recorded in the corpus).")
    max_new_tokens: Int = Field(128, ge=1, le=32768, description="Response length cap.")
    precision: Literal[PRECISIONS] = Field("fp32", description="Teacher precision for the corpus.")
    source: Literal["generate", "hf"] = Field(
        "generate",
        description="`generate`: the teacher answers the distillation prompts; `hf`: a ready prompt-response dataset "
        "(`dataset`), sharded the same way.",
    )
    dataset: opt(str, min_length=1) = Field(
        None,
        description="source hf: hub id (e.g. ai-forever/ZaryaOrthrusDataset-1.7B), local directory or builder"
        " name (json).",
    )
    split: str = Field("train", min_length=1, description="source hf: the split to read.")
    data_files: opt(list[Path4k], max_length=10000) = Field(
        None, description="source hf: data files of `dataset` (e.g. with dataset: json); at most 10,000 paths."
    )
    expected_rows: opt(Int, ge=1) = Field(
        None,
        description="source hf: the split's record count, checked by every corpus job when it reads the split "
        "(a different revision, or a dataset whose sharded copies were read beside its full file, fails naming the "
        "dataset and both counts).",
    )
    message: Message = Field(
        "empty",
        description="Message format of the training sequences' prompts: `empty` (empty system message, then "
        "the user turn), `none` (user turn only, the authors' training data) or `system:<text>`.",
    )

    @model_validator(mode="after")
    def _rules(self):
        if self.source == "hf" and not self.dataset:
            check([("dataset", "required when corpus.source is hf")])
        if (
            self.source == "hf"
            and re.search(r"[*?\[\]{}]", self.dataset)
            and Path(os.path.expanduser(self.dataset)).exists()
        ):
            check(
                [
                    (
                        "dataset",
                        f"the local path {self.dataset!r} has glob characters (* ? [ ] {{ }}), which "
                        "datasets reads as a pattern; rename or link the directory",
                    )
                ]
            )
        return self
