"""`prompts` and `corpus`: the evaluation and distillation prompt sets (their section is the prompts
stage's own settings, orthrus/data/settings.py) and the training corpus."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from orthrus.config import Int, Message, Section, check, opt
from orthrus.contracts import PRECISIONS
from orthrus.data.settings import Path4k, Prompts

__all__ = ["Corpus", "Prompts"]


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
