"""The student: an Orthrus model built from the teacher, and the optimizer of its diffusion view.

Only `*_proj_diff` / `*_norm_diff` train; the backbone stays the teacher's, bit for bit.
"""

from __future__ import annotations

import math

from orthrus.distill.settings import Settings


def load_student(teacher, s: Settings, device=None):
    """(OrthrusForCausalLM in fp32 from the teacher, tokenizer)."""
    import torch
    from transformers import AutoTokenizer

    from orthrus.models.files import resolve_checkpoint
    from orthrus.models.modeling import OrthrusForCausalLM

    path = resolve_checkpoint(teacher)
    tok = AutoTokenizer.from_pretrained(path)
    model = OrthrusForCausalLM.from_base(
        path,
        block_size=s.block_size,
        mask_token_id=s.mask_token_id,
        mask_token=s.mask_token,
        tokenizer=tok,
        dtype=torch.float32,
        attn_implementation=s.attention,
    )
    if device is not None:
        model.to(device)
    model.eval()  # no dropout anywhere; gradients flow regardless
    return model, tok


def make_optimizer(params: list, s: Settings, total: int):
    """(AdamW, LambdaLR) over the diffusion parameters; biases and norms get no weight decay."""
    import torch

    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=s.lr,
        betas=tuple(s.betas),
        eps=1e-8,
    )
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(s, total))


def lr_lambda(s: Settings, total: int):
    """The learning-rate factor of each step: linear warm-up, then constant or cosine decay."""
    warm, floor = int(s.warmup_steps), float(s.min_lr_ratio)

    def f(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        if s.schedule == "constant":
            return 1.0
        frac = min(1.0, (step - warm) / max(1, total - warm))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * frac))

    return f
