"""The settings of the prompt sets, stated once: their defaults, types, descriptions and rules.

`Prompts` is the study config's `prompts` section (orthrus/plan/config/) and what `orthrus prompts`
reads its settings with (orthrus/config.py's `read_section`), so a direct call and the workflow get the same defaults;
`Dataset` is one dataset spec of its `hf` source."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from orthrus.config import OMIT, Int, Name, Num, Section, Sha256, check, opt, unique
from orthrus.data.prompt_file import TIMEOUT
from orthrus.world.domains import DOMAINS

Path4k = Annotated[str, Field(min_length=1, max_length=4096)]
EVAL_PER_DOMAIN = 20  # prompts.eval_per_domain's default, and a tiny source's where it is null
HF_EVAL_N, HF_DISTILL_N = 100, 1000  # an hf spec's prompts where neither it nor eval_per_domain says


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
    split: str = Field("train", min_length=1, description="Split.")
    column: str = Field("text", min_length=1, description="The text column.")
    template: str = Field(None, description="A str.format over the row's columns, instead of column.")
    n: Annotated[Int, Field(ge=1)] = Field(
        None,
        description=f"Prompts to take (left out: eval, prompts.eval_per_domain, else {HF_EVAL_N}; distill, "
        f"{HF_DISTILL_N}).",
    )
    min_chars: Annotated[Int, Field(ge=0)] = Field(None, description="Overrides prompts.min_chars.")
    max_chars: Annotated[Int, Field(ge=1)] = Field(None, description="Overrides prompts.max_chars.")
    shuffle: bool = Field(True, description="Take rows in a seeded random order.")
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
        EVAL_PER_DOMAIN,
        description=f"Evaluation prompts per domain (hf with null: each spec's `n`, else {HF_EVAL_N}; tiny with "
        f"null: {EVAL_PER_DOMAIN}).",
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
        TIMEOUT,
        description="Seconds a URL `eval_file` may take to download, connecting and reading: a server that "
        "accepts and never answers, or trickles, fails naming the URL.",
    )
    eval_file_split: opt(Int, ge=1) = Field(
        None,
        description="Split `eval_file`: its first N prompts of each domain evaluate, the rest (deduplicated) are the "
        "distillation prompts, up to `distill_n`; null: the whole file evaluates.",
    )
    eval_duplicates: Annotated[Literal["error", "first"], OMIT] = Field(
        "error",
        description="A prompt repeated in `eval_file`: `error` refuses the file; `first` keeps "
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
            if key in self.model_fields_set and getattr(self, key) is not None and not self.eval_file:
                lines.append((key, "set, but there is no prompts.eval_file for it to apply to"))
        check(lines)
        return self
