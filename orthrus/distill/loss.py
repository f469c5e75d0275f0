"""The training objective of one micro-batch, in a single pass over all of its blocks.

One frozen AR forward over the whole sequences provides the per-layer keys/values; one
diffusion forward covers every block with a block-sparse additive mask (block b sees the cache
before its anchor and its own K positions). `orthrus.distill.reference` computes the same sum
one block at a time, which the tests and `benchmarks/train.py` compare against.
"""

from __future__ import annotations

import contextlib


def additive_mask(allowed, dtype):
    """The boolean `allowed` (B, q, keys) as an additive attention mask (B, 1, q, keys)."""
    import torch

    m = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return m.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


def block_loss(model, batch: dict, objective: str, kl_weight: float, autocast_dtype=None):
    """Weighted token-loss SUM of one micro-batch, plus sums for logging.

    Returns (loss_sum, stats dict of floats: weight, ce, acc, kl). Sums, not means: the caller
    divides by the weight of the whole global batch, so every process and micro-batch counts
    its tokens alike.
    """
    import torch
    import torch.nn.functional as F
    from transformers import DynamicCache

    from orthrus.models.cache import cache_kwarg

    device = next(model.parameters()).device
    b = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    cuda = device.type == "cuda" and autocast_dtype is not None

    def ctx():
        return torch.autocast("cuda", dtype=autocast_dtype) if cuda else contextlib.nullcontext()

    with ctx():
        with torch.no_grad():
            cache = DynamicCache(config=model.config)
            out = model.model(input_ids=b["ids"], **cache_kwarg(model.model, cache), use_cache=True)
        mask_dtype = autocast_dtype if cuda else next(model.parameters()).dtype
        mask = additive_mask(b["allowed"], mask_dtype)
        logits = model.diffusion_forward(b["blocks"], b["pos"], cache, attention_mask=mask)
    sel = b["w"] > 0
    lg = logits[sel].float()
    w = b["w"][sel]
    tgt = b["targets"][sel]
    logq = F.log_softmax(lg, dim=-1)
    ce = -logq.gather(1, tgt[:, None])[:, 0]
    stats = {
        "weight": float(w.sum()),
        "ce": float((ce.detach() * w).sum()),
        "acc": float(((lg.argmax(-1) == tgt).float() * w).sum()),
        "kl": float("nan"),
    }
    if objective in ("kl", "mix"):
        with torch.no_grad(), ctx():
            # the AR view's distribution for target t comes from its hidden state at t-1
            h = out.last_hidden_state[torch.nonzero(sel, as_tuple=True)[0], b["tpos"][sel] - 1]
            logp = F.log_softmax(model.lm_head(h).float(), dim=-1)
        kl = (logp.exp() * (logp - logq)).sum(-1)
        stats["kl"] = float((kl.detach() * w).sum())
    if objective == "ce":
        tok = ce
    elif objective == "kl":
        tok = kl
    else:
        tok = (1 - kl_weight) * ce + kl_weight * kl
    return (tok * w).sum(), stats


def step_module(model, objective: str, kl_weight: float, autocast_dtype):
    """The model wrapped as a module whose forward(batch) is `block_loss`: DDP hooks a module's
    forward, so the loss has to be one."""
    import torch

    class StepModule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, batch):
            return block_loss(self.model, batch, objective, kl_weight, autocast_dtype)

    return StepModule()
