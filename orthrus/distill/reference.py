"""The distillation loss computed one block at a time, each over only its own cache prefix.

Slow, and no part of training: it is the plain reading of the objective that the single-pass
`orthrus.distill.loss.block_loss` must equal (tests) and beat (`benchmarks/train.py`).
"""

from __future__ import annotations


class CachePrefix:
    """A read-only view of the first `a` cached positions of sequence `s` (what block a sees)."""

    class _Layer:
        def __init__(self, keys, values):
            self.keys, self.values = keys, values

    def __init__(self, cache, s: int, a: int):
        self.layers = [self._Layer(c.keys[s : s + 1, :, :a], c.values[s : s + 1, :, :a]) for c in cache.layers]


def blockwise_loss(model, batch: dict, objective: str, kl_weight: float):
    """The same loss SUM as `block_loss`, with one diffusion forward per block and no mask."""
    import torch
    import torch.nn.functional as F
    from transformers import DynamicCache

    from orthrus.models.cache import cache_kwarg

    K = model.block_size
    B, q = batch["blocks"].shape
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        out = model.model(input_ids=batch["ids"], **cache_kwarg(model.model, cache), use_cache=True)
    total = torch.zeros((), device=batch["w"].device)
    for s in range(B):
        for blk in range(q // K):
            sl = slice(blk * K, (blk + 1) * K)
            w = batch["w"][s, sl]
            if not (w > 0).any():
                continue
            a = int(batch["pos"][s, sl][0])
            prefix = CachePrefix(cache, s, a)
            lg = model.diffusion_forward(batch["blocks"][s : s + 1, sl], batch["pos"][s : s + 1, sl], prefix)[0].float()
            logq = F.log_softmax(lg, -1)
            tok = -logq.gather(1, batch["targets"][s, sl][:, None])[:, 0]
            if objective in ("kl", "mix"):
                with torch.no_grad():
                    idx = (batch["tpos"][s, sl] - 1).clamp(max=out.last_hidden_state.shape[1] - 1)
                    logp = F.log_softmax(model.lm_head(out.last_hidden_state[s, idx]).float(), -1)
                kl = (logp.exp() * (logp - logq)).sum(-1)
                tok = kl if objective == "kl" else (1 - kl_weight) * tok + kl_weight * kl
            total = total + (torch.where(w > 0, tok, torch.zeros((), device=w.device)) * w).sum()
    return total
