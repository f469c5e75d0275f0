"""The tiny teacher's settings (`orthrus train-teacher`; the config's `teacher.tiny` and `teacher.draft.tiny`),
each default stated once, on its field."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from orthrus.config import Int, Num, Section, check, read_section
from orthrus.world.domains import DOMAINS

SEED_MAX = 2**64 - 1  # torch.manual_seed's largest; numpy's generators take any seed >= 0
LR = (
    "Peak learning rate, at most 1 (AdamW moves every weight by about lr per step: above 1 each step overwrites "
    "the weights)."
)


class TinyTeacher(Section):
    """Settings of `orthrus train-teacher` (source tiny); a key left out takes its default (shown here)."""

    SPARSE = True
    seed: Int = Field(
        0,
        description="Seed of the teacher's initialisation and data, 0 to 2^64 - 1 (the rule passes the global seed "
        "instead).",
        ge=0,
        le=SEED_MAX,
    )
    threads: Int = Field(
        1,
        description="torch threads (the rule passes teacher.threads instead; teacher.draft.threads for the draft).",
        ge=1,
    )
    vocab_size: Int = Field(
        768,
        description="Byte-level BPE vocabulary including the special tokens (not for the draft, which takes the "
        "teacher's tokenizer).",
        ge=64,
    )
    hidden_size: Int = Field(128, description="Model width.", ge=1)
    num_layers: Int = Field(3, description="Transformer layers.", ge=1, le=64)
    num_heads: Int = Field(4, description="Attention heads (a multiple of num_kv_heads).", ge=1)
    num_kv_heads: Int = Field(2, description="Key/value heads.", ge=1)
    head_dim: Int = Field(32, description="Width of one head (even, for rotary embeddings).", ge=2, multiple_of=2)
    intermediate_size: Int = Field(384, description="MLP width.", ge=1)
    max_len: Int = Field(
        256, description="Training sequence length cap (the model gets 2x, at least 512, positions).", ge=2
    )
    steps: Int = Field(600, description="Optimizer steps.", ge=1)
    batch_size: Int = Field(16, description="Sequences per step.", ge=1)
    length_buckets: Int = Field(
        4, description="Batches of similar length are cut from a pool of this many batches.", ge=1
    )
    lr: Num = Field(5e-3, description=LR, gt=0, le=1)
    min_lr_ratio: Num = Field(0.05, description="Cosine decay floor as a fraction of lr.", ge=0, le=1)
    warmup_steps: Int = Field(
        30, description="Linear warm-up steps, fewer than steps (else the rate never leaves warm-up).", ge=0
    )
    weight_decay: Num = Field(0.05, description="AdamW weight decay.", ge=0)
    grad_clip: Num = Field(1.0, description="Gradient norm clip (0 = off).", ge=0)
    domain_weights: dict[Literal[tuple(DOMAINS)], Annotated[Num, Field(ge=0)]] | None = Field(
        None, description="{domain: sampling weight} (null = uniform; a domain left out weighs 1)."
    )
    eval_per_domain: Int = Field(10, description="Held-out greedy check per domain at the end (0 = skip).", ge=0)
    eval_max_new_tokens: Int = Field(128, description="Tokens per held-out answer.", ge=1)
    log_every: Int = Field(10, description="Log a training row every N steps.", ge=1)

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


DEFAULTS: dict = {k: f.get_default() for k, f in TinyTeacher.model_fields.items()}


def resolve(settings: dict | TinyTeacher | None) -> TinyTeacher:
    """`settings` (data: a config's section, a record's settings) checked, each key left out at its default;
    raises InputError naming every wrong key."""
    if isinstance(settings, TinyTeacher):
        return settings
    return read_section(TinyTeacher, dict(settings or {}), "teacher settings")


def as_dict(settings: TinyTeacher) -> dict:
    """Every setting, in field order: what teacher_config.json records."""
    return {k: getattr(settings, k) for k in TinyTeacher.model_fields}
