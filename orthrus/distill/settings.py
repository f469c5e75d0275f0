"""The settings of one distillation run: their defaults, types, descriptions and rules, stated once.

`Settings` is a section of the study's config model (`models.<name>`, orthrus/plan/config/) and what
`orthrus train` resolves its settings with (`resolve_settings`), so a direct call and the workflow get
the same answers; `DEFAULTS` is the same as a plain dict (what `--set` lists).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from orthrus.config import Int, Num, Section, check, opt, read_section
from orthrus.errors import InputError
from orthrus.world.settings import LR, SEED_MAX

OBJECTIVES = ("ce", "kl", "mix")
SCHEDULES = ("cosine", "constant")
ATTENTIONS = ("eager", "sdpa")
# Settings that do not change the trained weights: a checkpoint stays valid when they change.
NON_TRAINING = {
    "description",
    "log_every",
    "save_every",
    "keep_checkpoint",
    "eval_every",
    "eval_per_domain",
    "eval_max_new_tokens",
}
MAX_LR = 1.0  # above it, every AdamW step overwrites the weights


class Settings(Section):
    """A variant's settings (`orthrus train`); in a config a setting left out takes its default here.

    The field order is the order of `train_summary.json`'s settings and of the checkpoint's
    fingerprint: keep it."""

    SPARSE = True
    description: str = Field("", description="Free text, copied to the training summary.")
    # --- objective
    objective: Literal[OBJECTIVES] = Field(
        "ce", description="ce: cross-entropy on the teacher's tokens; kl: forward KL to the frozen AR view; mix: both."
    )
    kl_weight: Num = Field(0.5, ge=0, le=1, description="mix only: loss = (1 - kl_weight) * ce + kl_weight * kl.")
    offset_weights: opt(list[Annotated[Num, Field(ge=0)]], min_length=1) = Field(
        None,
        description="Loss weight per block slot, K-1 or K values, not all 0 (null = 1 for slots 0..K-2, 0 for the last).",
    )
    # --- blocks
    block_size: Int = Field(
        8,
        ge=2,
        description="Block size K (one anchor plus K-1 proposals), below max_len (a sequence holds a prompt token "
        "and a whole block).",
    )
    blocks_per_seq: Int = Field(32, ge=1, description="Anchors per sequence, drawn inside the response.")
    min_loss_tokens: Int = Field(
        1, ge=1, description="A block needs at least this many weighted targets (the authors: 4)."
    )
    mask_token_id: opt(Int, ge=0) = Field(
        None,
        description="null: a dedicated new token named `mask_token`; or an existing token id, inside the teacher's "
        "vocabulary (checked before any job where the vocabulary is known: a tiny, shipped or local teacher).",
    )
    mask_token: str = Field(
        "<|mask|>", min_length=1, description="Name of that new mask token (the authors: <|orthrus_mask|>)."
    )
    # --- optimisation (defaults: the follow-up paper's recipe)
    lr: Num = Field(2e-4, gt=0, le=MAX_LR, description=LR)
    schedule: Literal[SCHEDULES] = Field(
        "cosine", description="After warm-up: cosine decay to lr * min_lr_ratio, or constant (the authors)."
    )
    min_lr_ratio: Num = Field(0.1, ge=0, le=1, description="Cosine decay from lr to lr * min_lr_ratio.")
    warmup_steps: Int = Field(
        100,
        ge=0,
        description="Linear warm-up steps, fewer than the run's optimizer steps (else the rate never leaves "
        "warm-up): below max_steps when it is set; else below epochs x (distillation prompts // global batch), "
        "checked before any job where the prompt count is known, and by `orthrus train` on the corpus it reads.",
    )
    weight_decay: Num = Field(0.0, ge=0, description="AdamW weight decay (matrices only).")
    betas: list[Annotated[Num, Field(ge=0, lt=1)]] = Field(
        [0.9, 0.95], min_length=2, max_length=2, description="AdamW betas."
    )
    grad_clip: opt(Num, ge=0) = Field(1.0, description="Gradient norm clip (0 or null = off).")
    grad_accum: Int = Field(1, ge=1, description="Micro-batches per optimizer step.")
    batch_size: Int = Field(10, ge=1, description="Sequences per micro-batch per process.")
    max_len: Int = Field(3072, ge=2, description="Prompt + response tokens; longer sequences are truncated (counted).")
    epochs: Int = Field(1, ge=1, description="Passes over the corpus (unless max_steps is set).")
    max_steps: opt(Int, ge=1) = Field(
        None, description="If set, overrides epochs (cycling through the data as needed)."
    )
    seed: Int = Field(
        0,
        ge=0,
        le=SEED_MAX,
        description="Seed of the initialisation order, batches and anchors; the rule adds the global seed (the sum "
        "at most 2^64 - 1, torch's range).",
    )
    length_bucket_pool: Int = Field(
        16, ge=0, description="Sort pools of this many global batches by length before cutting."
    )
    # --- numerics / kernels
    bf16: bool = Field(True, description="bf16 autocast on CUDA (CPU always trains in fp32).")
    attention: Literal[ATTENTIONS] = Field(
        "sdpa", description="Attention kernel for training (the saved model loads with eager)."
    )
    # --- bookkeeping
    log_every: Int = Field(10, ge=0, description="Log a training row every N steps.")
    save_every: Int = Field(500, ge=0, description="Checkpoint every N optimizer steps (0 = never).")
    keep_checkpoint: bool = Field(False, description="Keep the checkpoint directory after a successful run.")
    eval_every: Int = Field(0, ge=0, description="Held-out tokens per forward every N steps (0 = only at the end).")
    eval_per_domain: Int = Field(10, ge=0, description="Prompts per domain for the held-out TPF (0 = no eval).")
    eval_max_new_tokens: Int = Field(128, ge=0, description="Tokens per held-out TPF prompt.")

    @model_validator(mode="after")
    def _rules(self):
        """Settings that would train nothing: a block as long as a sequence, a warm-up that outlasts
        max_steps, offset weights of the wrong length or all 0, fewer weighted slots than min_loss_tokens."""
        k, warm, steps = self.block_size, self.warmup_steps, self.max_steps
        lines = [
            (
                "block_size",
                f"{k} is not below max_len ({self.max_len}): a training sequence holds a prompt token "
                "and a whole block only when block_size < max_len",
            )
            if k >= self.max_len
            else None,
            (
                "warmup_steps",
                f"{warm} is not below max_steps ({steps}): the learning rate would never leave warm-up; lower it",
            )
            if steps is not None and 0 < warm >= steps
            else None,
        ]
        try:
            positive = int((offset_weights(self.offset_weights, k) > 0).sum())
        except InputError as e:
            lines.append(("offset_weights", str(e)))
        else:
            if positive < self.min_loss_tokens:
                lines.append(
                    (
                        "min_loss_tokens",
                        f"{self.min_loss_tokens} exceeds the {positive} block slots with a positive loss weight",
                    )
                )
        check(lines)
        return self

    def as_dict(self) -> dict:
        """Every setting, in field order (the betas as floats, as the optimizer and the fingerprint see them)."""
        out = {k: getattr(self, k) for k in type(self).model_fields}
        return out | {"betas": [float(b) for b in self.betas]}

    def training_dict(self) -> dict:
        """The settings the trained weights depend on (what a checkpoint must match)."""
        return {k: v for k, v in self.as_dict().items() if k not in NON_TRAINING}


DEFAULTS: dict = {k: f.get_default(call_default_factory=True) for k, f in Settings.model_fields.items()}


def resolve_settings(settings: dict | Settings | None) -> Settings:
    """`DEFAULTS | settings`, checked; raises InputError naming every problem (unknown keys first)."""
    if isinstance(settings, Settings):
        return settings
    settings = dict(settings or {})
    unknown = sorted(set(settings) - set(DEFAULTS))
    if unknown:
        raise InputError(f"unknown training settings: {unknown}; known: {sorted(DEFAULTS)}")
    return read_section(Settings, settings, "training settings")


def offset_weights(weights, K: int) -> np.ndarray:
    """Loss weight of each of the K block slots (slot i predicts token a+i+1)."""
    if weights is None:
        return np.array([1.0] * (K - 1) + [0.0])
    w = [float(x) for x in weights]
    if len(w) == K - 1:
        w = w + [0.0]
    if len(w) != K:
        raise InputError(f"needs block_size-1 = {K - 1} or block_size = {K} values, got {len(w)}")
    if any(x < 0 or not math.isfinite(x) for x in w) or sum(w) <= 0:
        raise InputError(
            f"every weight is 0 (they must be >= 0, not all zero): no block slot has a loss, got {weights!r}"
        )
    return np.array(w)
