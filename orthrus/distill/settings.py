"""The settings of one distillation run: their defaults, types and checks.

`Settings` is the single source of the defaults; `DEFAULTS` (the same as a plain dict) is what
the config schema is checked against and what `--set` lists. The checks mirror the schema's
`models.*` properties, so a file that `snakemake -n` accepts also passes here, and a direct
`orthrus train` call gets the same answers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from orthrus.errors import InputError

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


@dataclass(frozen=True)
class Settings:
    # The field order is the order of `train_summary.json`'s settings and of the checkpoint's
    # fingerprint: keep it.
    description: str = ""  # free text, copied to the summary
    # --- objective
    objective: str = "ce"  # ce | kl | mix
    kl_weight: float = 0.5  # mix only: loss = (1 - kl_weight) * ce + kl_weight * kl
    offset_weights: list | None = None  # loss weight per block slot: K-1 values (slots used by
    # decoding) or K (the last slot too); None = 1 for slots 0..K-2, 0 for K-1
    # --- blocks
    block_size: int = 8  # K >= 2
    blocks_per_seq: int = 32  # anchors per sequence, drawn inside the response
    min_loss_tokens: int = 1  # a block needs at least this many weighted targets (authors: 4)
    mask_token_id: int | None = None  # None: a dedicated new token named `mask_token`; or an existing id
    mask_token: str = "<|mask|>"  # name of that new token (authors: <|orthrus_mask|>)
    # --- optimisation (defaults: the follow-up paper's recipe)
    lr: float = 2e-4
    schedule: str = "cosine"  # after warmup: cosine (decay to lr * min_lr_ratio) | constant (authors)
    min_lr_ratio: float = 0.1  # cosine decay from lr to lr * min_lr_ratio
    warmup_steps: int = 100
    weight_decay: float = 0.0
    betas: list = field(default_factory=lambda: [0.9, 0.95])
    grad_clip: float | None = 1.0  # 0 / None = off
    grad_accum: int = 1
    batch_size: int = 10  # sequences per micro-batch per process
    max_len: int = 3072  # prompt + response tokens; longer sequences are truncated (counted)
    epochs: int = 1
    max_steps: int | None = None  # if set, overrides epochs (cycling through the data as needed)
    seed: int = 0
    length_bucket_pool: int = 16  # sort pools of this many global batches by length before cutting
    # --- numerics / kernels
    bf16: bool = True  # bf16 autocast, on CUDA only (CPU always trains in fp32)
    attention: str = "sdpa"  # eager | sdpa (training); the saved model loads with eager
    # --- bookkeeping
    log_every: int = 10
    save_every: int = 500  # checkpoint every N optimizer steps (0 = never)
    keep_checkpoint: bool = False
    eval_every: int = 0  # held-out TPF every N steps (0 = only at the end); needs eval prompts
    eval_per_domain: int = 10  # prompts per domain for the held-out TPF (0 = no eval)
    eval_max_new_tokens: int = 128

    def __post_init__(self):
        errors = problems(self)
        if errors:
            raise InputError("bad training settings: " + "; ".join(errors))
        # YAML may give integers; the optimizer and the fingerprint see floats
        object.__setattr__(self, "betas", [float(b) for b in self.betas])

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def training_dict(self) -> dict:
        """The settings the trained weights depend on (what a checkpoint must match)."""
        return {k: v for k, v in self.as_dict().items() if k not in NON_TRAINING}


DEFAULTS: dict = {
    f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    for f in dataclasses.fields(Settings)
}

# integer settings and their least value (bool counts as an integer here, as it always did)
MIN_INT = {
    "block_size": 2,
    "blocks_per_seq": 1,
    "min_loss_tokens": 1,
    "batch_size": 1,
    "grad_accum": 1,
    "max_len": 2,
    "warmup_steps": 0,
    "log_every": 0,
    "save_every": 0,
    "eval_every": 0,
    "eval_per_domain": 0,
    "eval_max_new_tokens": 0,
    "length_bucket_pool": 0,
}
CHOICES = {"objective": OBJECTIVES, "schedule": SCHEDULES, "attention": ATTENTIONS}
MAX_LR = 1.0  # above it, every AdamW step overwrites the weights (the schema's maximum)
SEED_MAX = 2**64 - 1  # torch.manual_seed's largest; numpy's generators take any seed >= 0


def resolve_settings(settings: dict | Settings | None) -> Settings:
    """`DEFAULTS | settings`, checked; raises ValueError naming every problem (unknown keys first)."""
    if isinstance(settings, Settings):
        return settings
    settings = dict(settings or {})
    unknown = sorted(set(settings) - set(DEFAULTS))
    if unknown:
        raise InputError(f"unknown training settings: {unknown}; known: {sorted(DEFAULTS)}")
    return Settings(**settings)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def problems(s: Settings) -> list[str]:
    """Every problem of `s`, one message each: "<key> must be <rule>, got <value>"."""
    errors = []
    for key, choices in CHOICES.items():
        if getattr(s, key) not in choices:
            errors.append(f"{key} must be one of {choices}, got {getattr(s, key)!r}")
    for key, least in MIN_INT.items():
        v = getattr(s, key)
        if not isinstance(v, int) or v < least:
            errors.append(f"{key} must be an integer >= {least}, got {v!r}")
    if s.max_steps is None:
        if not isinstance(s.epochs, int) or s.epochs < 1:
            errors.append(f"epochs must be an integer >= 1 (or set max_steps), got {s.epochs!r}")
    elif not isinstance(s.max_steps, int) or s.max_steps < 1:
        errors.append(f"max_steps must be null or an integer >= 1, got {s.max_steps!r}")
    if not isinstance(s.seed, int) or isinstance(s.seed, bool) or not 0 <= s.seed <= SEED_MAX:
        errors.append(f"seed must be an integer in 0..2^64-1 (torch's range), got {s.seed!r}")
    for key in ("kl_weight", "min_lr_ratio"):
        if not (_number(getattr(s, key)) and 0.0 <= getattr(s, key) <= 1.0):
            errors.append(f"{key} must be in [0, 1], got {getattr(s, key)!r}")
    if not (_number(s.lr) and 0 < s.lr <= MAX_LR):
        errors.append(f"lr must be in (0, {MAX_LR:g}] (AdamW moves every weight by about lr per step), got {s.lr!r}")
    if not (_number(s.weight_decay) and s.weight_decay >= 0):
        errors.append(f"weight_decay must be a number >= 0, got {s.weight_decay!r}")
    if not (s.grad_clip is None or (_number(s.grad_clip) and s.grad_clip >= 0)):
        errors.append(f"grad_clip must be null or a number >= 0, got {s.grad_clip!r}")
    if not (isinstance(s.betas, (list, tuple)) and len(s.betas) == 2 and all(_number(b) for b in s.betas)):
        errors.append(f"betas must be a list of two numbers, got {s.betas!r}")
    if not (isinstance(s.mask_token, str) and s.mask_token):
        errors.append(f"mask_token must be a non-empty token name, got {s.mask_token!r}")
    if s.mask_token_id is not None and (not isinstance(s.mask_token_id, int) or s.mask_token_id < 0):
        errors.append(f"mask_token_id must be null or a token id, got {s.mask_token_id!r}")
    for key in ("bf16", "keep_checkpoint"):
        if not isinstance(getattr(s, key), bool):
            errors.append(f"{key} must be true or false, got {getattr(s, key)!r}")
    if not isinstance(s.description, str):
        errors.append(f"description must be a string, got {s.description!r}")
    if (
        isinstance(s.block_size, int)
        and isinstance(s.max_len, int)
        and s.block_size >= 2
        and s.max_len >= 2
        and s.block_size >= s.max_len
    ):
        errors.append(
            f"block_size={s.block_size} must be below max_len={s.max_len} (a sequence holds a prompt token "
            "and a whole block)"
        )
    if (
        isinstance(s.max_steps, int)
        and isinstance(s.warmup_steps, int)
        and s.max_steps >= 1
        and 0 < s.warmup_steps >= s.max_steps
    ):
        errors.append(
            f"warmup_steps={s.warmup_steps} must be below max_steps={s.max_steps} (the learning rate would "
            "never leave warm-up)"
        )
    return errors + _slot_problems(s)


def _slot_problems(s: Settings) -> list[str]:
    """offset_weights against block_size, and min_loss_tokens against the weighted slots."""
    if not isinstance(s.block_size, int) or s.block_size < 2:
        return []  # reported above; the weights cannot be checked without K
    try:
        w = offset_weights(s.offset_weights, s.block_size)
    except ValueError as e:
        return [str(e)]
    positive = int((w > 0).sum())
    if isinstance(s.min_loss_tokens, int) and positive < s.min_loss_tokens:
        return [f"min_loss_tokens={s.min_loss_tokens} exceeds the {positive} block slots with a positive loss weight"]
    return []


def offset_weights(weights, K: int) -> np.ndarray:
    """Loss weight of each of the K block slots (slot i predicts token a+i+1)."""
    if weights is None:
        return np.array([1.0] * (K - 1) + [0.0])
    if not isinstance(weights, (list, tuple, np.ndarray)) or not all(_number(x) for x in weights):
        raise InputError(f"offset_weights must be null or a list of numbers, got {weights!r}")
    w = [float(x) for x in weights]
    if len(w) == K - 1:
        w = w + [0.0]
    if len(w) != K:
        raise InputError(f"offset_weights needs K-1={K - 1} or K={K} values, got {len(w)}")
    if any(x < 0 or not math.isfinite(x) for x in w) or sum(w) <= 0:
        raise InputError(f"offset_weights must be finite, >= 0 and not all zero, got {weights!r}")
    return np.array(w)
