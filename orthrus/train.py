"""Distillation of the diffusion view: train only `*_proj_diff` / `*_norm_diff` of an Orthrus model.

`orthrus train --teacher DIR_OR_HUB_ID --corpus SHARD.parquet [SHARD ...] --config CONFIG.yaml
 --model NAME --out DIR [--threads N] [--eval-prompts eval.parquet] [--set key=value ...]
 [--no-progress]`

CONFIG holds `models: {NAME: {settings}}`; the settings override `DEFAULTS` below (unknown
keys are rejected, naming them). In Python: `train(settings, teacher, corpus_files, out_dir)`.
Data parallel: `torchrun --nproc_per_node N -m orthrus.cli train ...` (DDP over the
diffusion parameters; gloo on CPU, nccl on CUDA).

One training step, per sequence `ids = prompt_ids + response_ids` (truncated to `max_len`):

1. One frozen AR forward (no gradients, `use_cache=True`) over the whole sequence gives the
   per-layer keys/values (and, for the KL objective, the AR view's distributions).
2. `blocks_per_seq` anchors `a` are drawn inside the response. Block b is
   `[x_a, M, ..., M]` (K tokens) at positions `a..a+K-1`; all blocks of a sequence go through
   ONE `diffusion_forward` with a block-sparse additive mask: block b sees the AR keys at
   positions `<= a-1` and its own K keys (bidirectionally), nothing else. Slot i is trained to
   predict token `a+i+1` (targets past the end of the sequence are skipped).

Objectives: `ce` (cross-entropy on the teacher's tokens), `kl` (forward KL(p_AR || q_diff)
to the frozen AR view's distribution at the same position), `mix` ((1-kl_weight)*ce +
kl_weight*kl). The loss is the weighted mean over every target token of the global batch
(`batch_size * grad_accum * world_size` sequences), whatever the number of processes.

Outputs: `DIR` (written atomically) holds the `save_pretrained` model and tokenizer,
`train_log.csv` / `train_log.jsonl` (step, loss, lr, tokens, seconds, ...), `eval_log.csv`
(held-out tokens per forward with the real `orthrus.generate` loop) and `train_summary.json`.
Checkpoints (diffusion weights, optimizer, scheduler, RNG, data position) go to
`DIR.ckpt/last/` (safetensors + JSON, no pickle: orthrus/checkpoint.py) every `save_every`
steps; a rerun with the same settings, the same teacher files and the same corpus content
resumes from there (anything else starts afresh, saying what changed), and the directory is
removed after a successful run unless `keep_checkpoint`.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np

DEFAULTS: dict = {
    "description": "",          # free text, copied to the summary
    # --- objective
    "objective": "ce",          # ce | kl | mix
    "kl_weight": 0.5,           # mix only: loss = (1 - kl_weight) * ce + kl_weight * kl
    "offset_weights": None,     # loss weight per block slot: K-1 values (slots used by decoding)
                                # or K (the last slot too); None = 1 for slots 0..K-2, 0 for K-1
    # --- blocks
    "block_size": 8,            # K >= 2
    "blocks_per_seq": 32,       # anchors per sequence, drawn inside the response
    "min_loss_tokens": 1,       # a block needs at least this many weighted targets (authors: 4)
    "mask_token_id": None,      # None: a dedicated new token named `mask_token`; or an existing id
    "mask_token": "<|mask|>",   # name of that new token (authors: <|orthrus_mask|>)
    # --- optimisation (defaults: the follow-up paper's recipe)
    "lr": 2e-4,
    "schedule": "cosine",       # after warmup: cosine (decay to lr * min_lr_ratio) | constant (authors)
    "min_lr_ratio": 0.1,        # cosine decay from lr to lr * min_lr_ratio
    "warmup_steps": 100,
    "weight_decay": 0.0,
    "betas": [0.9, 0.95],
    "grad_clip": 1.0,           # 0 / None = off
    "grad_accum": 1,
    "batch_size": 10,           # sequences per micro-batch per process
    "max_len": 3072,            # prompt + response tokens; longer sequences are truncated (counted)
    "epochs": 1,
    "max_steps": None,          # if set, overrides epochs (cycling through the data as needed)
    "seed": 0,
    "length_bucket_pool": 16,   # sort pools of this many global batches by length before cutting
    # --- numerics / kernels
    "bf16": True,               # bf16 autocast, on CUDA only (CPU always trains in fp32)
    "attention": "sdpa",        # eager | sdpa (training); the saved model loads with eager
    # --- bookkeeping
    "log_every": 10,
    "save_every": 500,          # checkpoint every N optimizer steps (0 = never)
    "keep_checkpoint": False,
    "eval_every": 0,            # held-out TPF every N steps (0 = only at the end); needs eval prompts
    "eval_per_domain": 10,      # prompts per domain for the held-out TPF (0 = no eval)
    "eval_max_new_tokens": 128,
}
OBJECTIVES = ("ce", "kl", "mix")
SCHEDULES = ("cosine", "constant")
REQUIRED_COLUMNS = ("prompt_ids", "response_ids")
LOG_FIELDS = ["step", "loss", "lr", "tokens", "seconds", "loss_tokens", "ce", "kl", "acc",
              "grad_norm"]
EVAL_FIELDS = ["step", "domain", "n", "tpf_verify", "tpf_all", "tpf_authors", "accepted_mean"]
# Settings that do not change the trained weights: a checkpoint stays valid when they change.
_NON_TRAINING = {"description", "log_every", "save_every", "keep_checkpoint", "eval_every",
                 "eval_per_domain", "eval_max_new_tokens"}


def _log(msg: str) -> None:
    if _rank() == 0:
        print(f"[train] {msg}", file=sys.stderr, flush=True)


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _world() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


# --------------------------------------------------------------------------- settings


def resolve_settings(settings: dict | None) -> dict:
    """`DEFAULTS | settings`, validated; raises ValueError naming every problem."""
    settings = dict(settings or {})
    unknown = sorted(set(settings) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown training settings: {unknown}; known: {sorted(DEFAULTS)}")
    s = {**DEFAULTS, **settings}
    errors = []
    if s["objective"] not in OBJECTIVES:
        errors.append(f"objective must be one of {OBJECTIVES}, got {s['objective']!r}")
    K = s["block_size"]
    if not isinstance(K, int) or K < 2:
        errors.append(f"block_size must be an integer >= 2, got {K!r}")
        K = None
    for key in ("blocks_per_seq", "min_loss_tokens", "batch_size", "grad_accum"):
        if not isinstance(s[key], int) or s[key] < 1:
            errors.append(f"{key} must be an integer >= 1, got {s[key]!r}")
    if not isinstance(s["max_len"], int) or s["max_len"] < 2:
        errors.append(f"max_len must be an integer >= 2, got {s['max_len']!r}")
    if s["max_steps"] is None:
        if not isinstance(s["epochs"], int) or s["epochs"] < 1:
            errors.append(f"epochs must be an integer >= 1 (or set max_steps), got {s['epochs']!r}")
    elif not isinstance(s["max_steps"], int) or s["max_steps"] < 1:
        errors.append(f"max_steps must be null or an integer >= 1, got {s['max_steps']!r}")
    if not 0.0 <= float(s["kl_weight"]) <= 1.0:
        errors.append(f"kl_weight must be in [0, 1], got {s['kl_weight']!r}")
    if not float(s["lr"]) > 0:
        errors.append(f"lr must be > 0, got {s['lr']!r}")
    if s["schedule"] not in SCHEDULES:
        errors.append(f"schedule must be one of {SCHEDULES}, got {s['schedule']!r}")
    if not (isinstance(s["mask_token"], str) and s["mask_token"]):
        errors.append(f"mask_token must be a non-empty token name, got {s['mask_token']!r}")
    if not 0.0 <= float(s["min_lr_ratio"]) <= 1.0:
        errors.append(f"min_lr_ratio must be in [0, 1], got {s['min_lr_ratio']!r}")
    for key in ("warmup_steps", "log_every", "save_every", "eval_every", "eval_per_domain",
                "eval_max_new_tokens", "length_bucket_pool"):
        if not isinstance(s[key], int) or s[key] < 0:
            errors.append(f"{key} must be an integer >= 0, got {s[key]!r}")
    if s["mask_token_id"] is not None and (not isinstance(s["mask_token_id"], int) or s["mask_token_id"] < 0):
        errors.append(f"mask_token_id must be null or a token id, got {s['mask_token_id']!r}")
    if s["attention"] not in ("eager", "sdpa"):
        errors.append(f"attention must be 'eager' or 'sdpa', got {s['attention']!r}")
    if not (isinstance(s["betas"], (list, tuple)) and len(s["betas"]) == 2):
        errors.append(f"betas must be a list of two numbers, got {s['betas']!r}")
    if K is not None:
        try:
            w = offset_weights(s["offset_weights"], K)
            if int((w > 0).sum()) < s["min_loss_tokens"]:
                errors.append(f"min_loss_tokens={s['min_loss_tokens']} exceeds the {int((w > 0).sum())} "
                              f"block slots with a positive loss weight")
        except ValueError as e:
            errors.append(str(e))
    if errors:
        raise ValueError("bad training settings: " + "; ".join(errors))
    s["betas"] = [float(b) for b in s["betas"]]
    return s


def offset_weights(weights, K: int) -> np.ndarray:
    """Loss weight of each of the K block slots (slot i predicts token a+i+1)."""
    if weights is None:
        return np.array([1.0] * (K - 1) + [0.0])
    w = [float(x) for x in weights]
    if len(w) == K - 1:
        w = w + [0.0]
    if len(w) != K:
        raise ValueError(f"offset_weights needs K-1={K - 1} or K={K} values, got {len(w)}")
    if any(x < 0 or not math.isfinite(x) for x in w) or sum(w) <= 0:
        raise ValueError(f"offset_weights must be finite, >= 0 and not all zero, got {weights!r}")
    return np.array(w)


def load_model_settings(config_path, name: str) -> dict:
    """`models[name]` of a YAML/JSON config file."""
    from orthrus.config import load_config

    cfg = load_config(config_path)
    models = cfg.get("models")
    if not isinstance(models, dict):
        raise ValueError(f"{config_path}: no `models:` mapping")
    if name not in models:
        raise ValueError(f"{config_path}: no model {name!r} under `models:` (have {sorted(models)})")
    return dict(models[name] or {})


# --------------------------------------------------------------------------- data


class Corpus:
    """Token sequences of the teacher corpus, truncated to `max_len`, with their usable anchors."""

    def __init__(self, files, s: dict, verbose: bool = True):
        import pyarrow.parquet as pq

        files = [str(f) for f in ([files] if isinstance(files, (str, os.PathLike)) else files)]
        if not files:
            raise ValueError("no corpus files given")
        w = offset_weights(s["offset_weights"], s["block_size"])
        pos = np.flatnonzero(w > 0)
        need = int(pos[s["min_loss_tokens"] - 1])  # anchor a usable iff a <= len - 2 - need
        self.ids, self.prompt_len, self.domain, self.last_anchor = [], [], [], []
        self.counts = {"rows": 0, "used": 0, "truncated": 0, "skipped_error": 0, "skipped_empty_response": 0,
                       "skipped_short_response": 0, "skipped_prompt_over_max_len": 0}
        self.skipped_by_domain: dict = {}
        for f in files:
            if not Path(f).is_file():
                raise FileNotFoundError(f"corpus shard not found: {f}")
            cols = set(pq.read_schema(f).names)
            missing = [c for c in REQUIRED_COLUMNS if c not in cols]
            if missing:
                raise ValueError(f"corpus shard {f} lacks column(s) {missing} (has {sorted(cols)})")
            table = pq.read_table(f, columns=[*REQUIRED_COLUMNS] + [c for c in ("domain", "error") if c in cols])
            data = table.to_pydict()
            doms = data.get("domain") or ["-"] * table.num_rows
            errors = data.get("error") or [None] * table.num_rows  # a prompt the corpus stage could not answer
            for p, r, d, e in zip(data["prompt_ids"], data["response_ids"], doms, errors):
                self.counts["rows"] += 1
                p, r = list(p or []), list(r or [])
                reason = None
                if e:
                    reason = "skipped_error"
                elif not r:
                    reason = "skipped_empty_response"
                elif len(p) >= s["max_len"]:
                    reason = "skipped_prompt_over_max_len"
                else:
                    seq = p + r
                    if len(seq) > s["max_len"]:
                        self.counts["truncated"] += 1
                        seq = seq[: s["max_len"]]
                    last = len(seq) - 2 - need
                    if last < len(p):
                        reason = "skipped_short_response"
                if reason:
                    self.counts[reason] += 1
                    self.skipped_by_domain.setdefault(d, {}).setdefault(reason, 0)
                    self.skipped_by_domain[d][reason] += 1
                    continue
                self.ids.append(np.asarray(seq, dtype=np.int64))
                self.prompt_len.append(len(p))
                self.domain.append(d)
                self.last_anchor.append(last)
        self.counts["used"] = len(self.ids)
        self.lengths = np.array([len(x) for x in self.ids], dtype=np.int64)
        self.files = files
        if verbose:
            c = self.counts
            _log(f"corpus: {c['rows']} rows in {len(files)} shard(s), {c['used']} used, "
                 f"{c['truncated']} truncated to max_len={s['max_len']}, skipped: {c['skipped_error']} error rows, "
                 f"{c['skipped_empty_response']} empty response, {c['skipped_short_response']} "
                 f"response too short for one block, {c['skipped_prompt_over_max_len']} prompt >= max_len")
        if not self.ids:
            raise ValueError(f"no usable sequence in the corpus ({self.counts})")

    def __len__(self) -> int:
        return len(self.ids)

    def anchors(self, idx: int, epoch: int, s: dict) -> np.ndarray:
        """Sorted anchor positions of sequence `idx` in `epoch` (a pure function of the seed)."""
        lo, hi = self.prompt_len[idx], self.last_anchor[idx]
        n = hi - lo + 1
        k = min(s["blocks_per_seq"], n)
        rng = np.random.default_rng([int(s["seed"]), int(epoch), int(idx), 7])
        return np.sort(lo + rng.choice(n, size=k, replace=False))


def epoch_batches(lengths: np.ndarray, global_batch: int, epoch: int, seed: int, pool: int) -> list:
    """Length-bucketed global batches of one epoch: shuffle, sort pools of `pool` batches by
    length, cut, shuffle the batches. The incomplete last batch is dropped."""
    rng = np.random.default_rng([int(seed), int(epoch), 1])
    perm = rng.permutation(len(lengths))
    size = global_batch * max(1, pool)
    batches = []
    for s in range(0, len(perm), size):
        chunk = perm[s: s + size]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i: i + global_batch] for i in range(0, len(chunk), global_batch)]
    batches = [b for b in batches if len(b) == global_batch]
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]


def make_batch(seqs: list, anchors: list, K: int, weights: np.ndarray, mask_id: int, pad_id: int):
    """Tensors for one micro-batch (CPU). Shapes: ids (B, L); blocks/pos/targets/w (B, nb*K);
    allowed (B, nb*K, L + nb*K) bool: cache keys at positions < anchor, plus the own block."""
    import torch

    B, L = len(seqs), max(len(x) for x in seqs)
    nb = max(len(a) for a in anchors)
    q = nb * K
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    lens = torch.tensor([len(x) for x in seqs])
    anc = torch.zeros((B, nb), dtype=torch.long)
    real = torch.zeros((B, nb), dtype=torch.bool)
    for b, (x, a) in enumerate(zip(seqs, anchors)):
        ids[b, : len(x)] = torch.from_numpy(x)
        anc[b, : len(a)] = torch.from_numpy(np.asarray(a))
        real[b, : len(a)] = True
    slot = torch.arange(q) % K
    a_q = anc.repeat_interleave(K, dim=1)                                    # (B, q)
    pos = a_q + slot                                                          # (B, q)
    blocks = torch.full((B, q), mask_id, dtype=torch.long)
    blocks[:, ::K] = ids.gather(1, anc)
    tpos = pos + 1
    w_slot = torch.as_tensor(weights, dtype=torch.float32)[slot]
    valid = (tpos < lens[:, None]) & real.repeat_interleave(K, dim=1) & (w_slot > 0)
    targets = ids.gather(1, tpos.clamp(max=L - 1))
    w = torch.where(valid, w_slot.expand(B, q), torch.zeros(()))
    cache_ok = torch.arange(L)[None, None, :] < a_q[:, :, None]              # (B, q, L)
    blk = torch.arange(q) // K
    block_ok = (blk[:, None] == blk[None, :]).expand(B, q, q)
    allowed = torch.cat([cache_ok, block_ok], dim=-1)
    return {"ids": ids, "blocks": blocks, "pos": pos, "targets": targets, "tpos": tpos,
            "w": w, "allowed": allowed}


def additive_mask(allowed, dtype):
    import torch

    m = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return m.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


# --------------------------------------------------------------------------- the step


def block_loss(model, batch: dict, objective: str = "ce", kl_weight: float = 0.5, autocast_dtype=None):
    """Weighted token-loss SUM of one micro-batch, plus sums for logging.

    One frozen AR forward over the whole sequences provides the cache; one diffusion forward
    covers every block with the block-sparse mask. Returns (loss_sum, stats dict of floats).
    """
    import torch
    import torch.nn.functional as F
    from transformers import DynamicCache

    device = next(model.parameters()).device
    b = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    cuda = device.type == "cuda" and autocast_dtype is not None

    def ctx():
        return torch.autocast("cuda", dtype=autocast_dtype) if cuda else contextlib.nullcontext()

    with ctx():
        with torch.no_grad():
            cache = DynamicCache(config=model.config)
            out = model.model(input_ids=b["ids"], past_key_values=cache, use_cache=True)
        mask_dtype = autocast_dtype if cuda else next(model.parameters()).dtype
        mask = additive_mask(b["allowed"], mask_dtype)
        logits = model.diffusion_forward(b["blocks"], b["pos"], out.past_key_values, attention_mask=mask)
    sel = b["w"] > 0
    lg = logits[sel].float()
    w = b["w"][sel]
    tgt = b["targets"][sel]
    logq = F.log_softmax(lg, dim=-1)
    ce = -logq.gather(1, tgt[:, None])[:, 0]
    stats = {"weight": float(w.sum()), "ce": float((ce.detach() * w).sum()),
             "acc": float(((lg.argmax(-1) == tgt).float() * w).sum()), "kl": float("nan")}
    if objective in ("kl", "mix"):
        with torch.no_grad(), ctx():
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


def blockwise_loss(model, batch: dict, objective: str = "ce", kl_weight: float = 0.5):
    """Reference: the same loss SUM, with one diffusion forward per block over only its own
    cache prefix (no mask). Slow; for tests and the benchmark."""
    import torch
    import torch.nn.functional as F
    from transformers import DynamicCache

    K = model.block_size
    B, q = batch["blocks"].shape
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        out = model.model(input_ids=batch["ids"], past_key_values=cache, use_cache=True)
    total = torch.zeros(())
    for s in range(B):
        for blk in range(q // K):
            sl = slice(blk * K, (blk + 1) * K)
            w = batch["w"][s, sl]
            if not (w > 0).any():
                continue
            a = int(batch["pos"][s, sl][0])
            prefix = CachePrefix(out.past_key_values, s, a)
            lg = model.diffusion_forward(batch["blocks"][s: s + 1, sl], batch["pos"][s: s + 1, sl], prefix)[0].float()
            logq = F.log_softmax(lg, -1)
            tok = -logq.gather(1, batch["targets"][s, sl][:, None])[:, 0]
            if objective in ("kl", "mix"):
                with torch.no_grad():
                    idx = (batch["tpos"][s, sl] - 1).clamp(max=out.last_hidden_state.shape[1] - 1)
                    logp = F.log_softmax(model.lm_head(out.last_hidden_state[s, idx]).float(), -1)
                kl = (logp.exp() * (logp - logq)).sum(-1)
                tok = kl if objective == "kl" else (1 - kl_weight) * tok + kl_weight * kl
            total = total + (torch.where(w > 0, tok, torch.zeros(())) * w).sum()
    return total


class CachePrefix:
    """A read-only view of the first `a` cached positions of sequence `s` (what block a sees)."""

    class _Layer:
        def __init__(self, keys, values):
            self.keys, self.values = keys, values

    def __init__(self, cache, s: int, a: int):
        self.layers = [self._Layer(c.keys[s: s + 1, :, :a], c.values[s: s + 1, :, :a]) for c in cache.layers]


def step_module(model, objective: str, kl_weight: float, autocast_dtype):
    """The model wrapped as a module whose forward(batch) is `block_loss` (what DDP wraps)."""
    import torch

    class StepModule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, batch):
            return block_loss(self.model, batch, objective, kl_weight, autocast_dtype)

    return StepModule()


# --------------------------------------------------------------------------- evaluation


def eval_prompt_ids(path, tokenizer, per_domain: int) -> list[tuple[str, list[int]]]:
    """(domain, prompt token ids) of the first `per_domain` prompts of each domain (file order).
    Accepts a prompt set (`prompt`, rendered with the chat template) or a corpus (`prompt_ids`)."""
    import pandas as pd
    import pyarrow.parquet as pq

    from orthrus.chat import render_chat
    from orthrus.prompts import read_prompt_set

    corpus = "prompt_ids" in pq.read_schema(path).names
    df = pd.read_parquet(path) if corpus else read_prompt_set(path)
    if "domain" not in df.columns:
        df = df.assign(domain="-")
    df = df.groupby("domain", sort=True, group_keys=False).head(per_domain)
    out = []
    for r in df.itertuples(index=False):
        ids = list(r.prompt_ids) if "prompt_ids" in df.columns else render_chat(tokenizer, r.prompt)
        out.append((r.domain, ids))
    return out


def evaluate_tpf(model, prompts: list, max_new_tokens: int, step: int) -> list[dict]:
    """Held-out tokens per forward of the real Orthrus loop, per domain and overall ('all')."""
    import torch

    from orthrus.decoding import generate

    device = next(model.parameters()).device
    per: dict = {}
    for dom, ids in prompts:
        out = generate(model, torch.tensor(ids, device=device), mode="orthrus", max_new_tokens=max_new_tokens)
        acc = out.stats["accepted"]
        row = {"tpf_verify": out.stats["tpf_verify"], "tpf_all": out.stats["tpf_all"], "tpf_authors": out.stats["tpf_authors"],
               "accepted_mean": float(np.mean(acc)) if acc else 0.0}
        per.setdefault(dom, []).append(row)
    rows = []
    every = [r for v in per.values() for r in v]
    for dom, rs in [*sorted(per.items()), ("all", every)]:
        rows.append({"step": step, "domain": dom, "n": len(rs),
                     **{k: float(np.mean([r[k] for r in rs])) for k in ("tpf_verify", "tpf_all", "tpf_authors", "accepted_mean")}})
    return rows


# --------------------------------------------------------------------------- training


def _lr_lambda(s: dict, total: int):
    warm, floor = int(s["warmup_steps"]), float(s["min_lr_ratio"])

    def f(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        if s["schedule"] == "constant":
            return 1.0
        frac = min(1.0, (step - warm) / max(1, total - warm))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * frac))

    return f


def _fingerprint(s: dict, corpus: Corpus, teacher_dir, world: int) -> dict:
    """What a checkpoint's weights depend on, by content: a resumed run must see the same."""
    from orthrus.checkpoint import file_digest, model_digests

    return {"settings": {k: v for k, v in s.items() if k not in _NON_TRAINING},
            "teacher": model_digests(teacher_dir), "corpus": [file_digest(f) for f in corpus.files],
            "world": world}


def _init_distributed():
    """Join the process group when launched by torchrun; returns (device, started_here)."""
    import torch
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        started = True
    else:
        started = False
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    return device, started


def load_student(teacher, s: dict, device=None):
    """(OrthrusForCausalLM in fp32 from the teacher, tokenizer)."""
    import torch
    from transformers import AutoTokenizer

    from orthrus.modeling import OrthrusForCausalLM, resolve_checkpoint

    path = resolve_checkpoint(teacher)
    tok = AutoTokenizer.from_pretrained(path)
    model = OrthrusForCausalLM.from_base(path, block_size=s["block_size"], mask_token_id=s["mask_token_id"],
                                         mask_token=s["mask_token"], tokenizer=tok, dtype=torch.float32, attn_implementation=s["attention"])
    if device is not None:
        model.to(device)
    model.eval()  # no dropout anywhere; gradients flow regardless
    return model, tok


def train(settings: dict, teacher, corpus_files, out_dir, eval_prompts=None, threads: int | None = None,
          progress: bool = True, on_step=None) -> dict:
    """Train the diffusion view of `teacher` on the corpus; write the model to `out_dir`.

    `on_step(step, row)` is called after every optimizer step (and after its checkpoint);
    raising from it interrupts the run (used to test resumption). Returns the summary dict.
    """
    import torch
    import torch.distributed as dist
    from tqdm import tqdm

    from orthrus import checkpoint
    from orthrus.io import atomic_path, write_json
    from orthrus.modeling import resolve_checkpoint

    s = resolve_settings(settings)
    if threads:
        torch.set_num_threads(int(threads))
    t_start = time.perf_counter()
    device, started_pg = _init_distributed()
    rank, world = _rank(), _world()
    out_dir = Path(out_dir)
    ckpt_dir = out_dir.with_name(out_dir.name + ".ckpt")
    ckpt_path = ckpt_dir / "last"
    try:
        corpus = Corpus(corpus_files, s, verbose=True)
        if eval_prompts is not None and not Path(eval_prompts).is_file():
            raise FileNotFoundError(f"eval prompts not found: {eval_prompts}")
        torch.manual_seed(s["seed"])
        teacher_dir = resolve_checkpoint(teacher)
        model, tok = load_student(teacher_dir, s, device)
        K, mask_id = model.block_size, model.mask_token_id
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
        weights = offset_weights(s["offset_weights"], K)
        params = model.diffusion_parameters()
        n_train = sum(p.numel() for p in params)
        n_all = sum(p.numel() for p in model.parameters())
        _log(f"student: {n_all / 1e6:.2f}M parameters, {n_train / 1e6:.2f}M trainable "
             f"({100 * n_train / n_all:.1f}%), K={K}, mask token {mask_id}, device {device}, world {world}")

        G = s["batch_size"] * s["grad_accum"] * world
        spe = len(epoch_batches(corpus.lengths, G, 0, s["seed"], s["length_bucket_pool"]))
        if spe == 0:
            raise ValueError(f"the corpus has {len(corpus)} usable sequences, fewer than one global batch "
                             f"(batch_size {s['batch_size']} x grad_accum {s['grad_accum']} x world {world} = {G})")
        total = int(s["max_steps"]) if s["max_steps"] is not None else spe * int(s["epochs"])
        _log(f"{total} optimizer steps ({spe} per epoch, global batch {G} sequences)")

        decay = [p for p in params if p.ndim >= 2]
        no_decay = [p for p in params if p.ndim < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": s["weight_decay"]},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=s["lr"], betas=tuple(s["betas"]), eps=1e-8)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(s, total))
        autocast_dtype = torch.bfloat16 if (device.type == "cuda" and s["bf16"]) else None
        step_mod = step_module(model, s["objective"], float(s["kl_weight"]), autocast_dtype)
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            runner = DDP(step_mod, device_ids=[device.index] if device.type == "cuda" else None)
        else:
            runner = step_mod

        fp = _fingerprint(s, corpus, teacher_dir, world)
        state = {"step": 0, "elapsed": 0.0, "tokens": 0, "loss_tokens": 0.0, "log": [], "eval": []}
        if (ckpt_dir / "last.pt").exists():
            _log(f"ignoring {ckpt_dir / 'last.pt'}: pickled checkpoints are no longer read")
        if (ckpt_path / "state.json").is_file():
            ck = checkpoint.load(ckpt_path)
            changed = [k for k in fp if ck["fingerprint"].get(k) != fp[k]]
            if not changed and ck["step"] <= total:
                own = dict(model.named_parameters())
                with torch.no_grad():
                    for k, v in ck["diffusion"].items():
                        own[k].copy_(v)
                opt.load_state_dict(ck["optimizer"])
                sched.load_state_dict(ck["scheduler"])
                torch.set_rng_state(ck["rng"]["torch"])
                np.random.set_state(ck["rng"]["numpy"])
                random.setstate(ck["rng"]["python"])
                if torch.cuda.is_available() and ck["rng"].get("cuda") is not None and device.type == "cuda":
                    torch.cuda.set_rng_state(ck["rng"]["cuda"], device)
                state = ck["state"]
                _log(f"resumed from {ckpt_path} at step {state['step']}")
            else:
                why = f"changed: {', '.join(changed)}" if changed else f"its step {ck['step']} is past {total}"
                _log(f"fresh start: checkpoint {ckpt_path} does not fit this run ({why})")

        eval_set = None
        if eval_prompts is not None and s["eval_per_domain"] > 0 and rank == 0:
            eval_set = eval_prompt_ids(eval_prompts, tok, s["eval_per_domain"])

        def run_eval(step):
            if eval_set is not None:
                rows = evaluate_tpf(model, eval_set, s["eval_max_new_tokens"], step)
                state["eval"] += rows
                overall = rows[-1]
                _log(f"eval step {step}: tpf_verify {overall['tpf_verify']:.3f} over {overall['n']} prompts; "
                     + ", ".join(f"{r['domain']} {r['tpf_verify']:.2f}" for r in rows[:-1]))
            if world > 1:
                dist.barrier()

        def save_ckpt():
            if rank == 0:
                ck = {"fingerprint": fp, "step": state["step"], "state": state,
                      "diffusion": {n: p.detach().cpu().clone() for n, p in model.named_parameters()
                                    if model.is_diffusion_parameter(n)},
                      "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                      "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                              "python": random.getstate(),
                              "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}}
                checkpoint.save(ckpt_path, ck)
            if world > 1:
                dist.barrier()

        live_log = ckpt_dir / "train_log.jsonl"  # follows the run; rewritten from the checkpoint on resume
        if rank == 0 and ckpt_dir.is_dir():
            live_log.write_text("".join(json.dumps(r) + "\n" for r in state["log"]))
        bar = tqdm(total=total, initial=state["step"], desc="train", unit="step", file=sys.stderr,
                   disable=not progress or rank != 0, dynamic_ncols=True)
        cached_epoch, batches = None, None
        t_seg = time.perf_counter()
        while state["step"] < total:
            step = state["step"]
            epoch, bi = divmod(step, spe)
            if epoch != cached_epoch:
                batches, cached_epoch = epoch_batches(corpus.lengths, G, epoch, s["seed"], s["length_bucket_pool"]), epoch
            gb = batches[bi]
            plan = [corpus.anchors(int(i), epoch, s) for i in gb]
            w_global = sum(_n_weighted(corpus.lengths[i], a, weights) for i, a in zip(gb, plan))
            sums = torch.zeros(5, dtype=torch.float64)  # loss, weight, ce, kl, acc
            n_tok = 0
            for acc_i in range(s["grad_accum"]):
                m = acc_i * world + rank
                sel = slice(m * s["batch_size"], (m + 1) * s["batch_size"])
                idx = gb[sel]
                batch = make_batch([corpus.ids[i] for i in idx], plan[sel], K, weights, mask_id, pad_id)
                sync = acc_i == s["grad_accum"] - 1 or world == 1
                ctx = runner.no_sync() if (world > 1 and not sync) else contextlib.nullcontext()
                with ctx:
                    loss_sum, st = runner(batch)
                    (loss_sum * (world / w_global)).backward()
                sums += torch.tensor([float(loss_sum.detach()), st["weight"], st["ce"], st["kl"], st["acc"]], dtype=torch.float64)
                n_tok += int(sum(len(corpus.ids[i]) for i in idx))
            if world > 1:
                red = torch.cat([sums, torch.tensor([n_tok], dtype=torch.float64)])
                dist.all_reduce(red)
                sums, n_tok = red[:5], int(red[5])
            gnorm = float("nan")
            if s["grad_clip"]:
                gnorm = float(torch.nn.utils.clip_grad_norm_(params, s["grad_clip"]))
            lr = opt.param_groups[0]["lr"]
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            now = time.perf_counter()
            state["elapsed"] += now - t_seg
            t_seg = now
            state["step"] = step + 1
            state["tokens"] += n_tok
            state["loss_tokens"] += float(sums[1])
            W = float(sums[1])
            row = {"step": step + 1, "loss": float(sums[0]) / W, "lr": lr, "tokens": state["tokens"],
                   "seconds": round(state["elapsed"], 3), "loss_tokens": state["loss_tokens"],
                   "ce": float(sums[2]) / W, "kl": float(sums[3]) / W, "acc": float(sums[4]) / W,
                   "grad_norm": gnorm}
            if step == 0 or (step + 1) % max(1, s["log_every"]) == 0 or step + 1 == total:
                state["log"].append(row)
                if rank == 0:
                    ckpt_dir.mkdir(parents=True, exist_ok=True)
                    with open(live_log, "a") as f:
                        f.write(json.dumps(row) + "\n")
                bar.set_postfix(loss=f"{row['loss']:.3f}", acc=f"{row['acc']:.2f}", lr=f"{lr:.1e}")
            bar.update(1)
            if s["eval_every"] and (step + 1) % s["eval_every"] == 0 and step + 1 < total:
                run_eval(step + 1)
                t_seg = time.perf_counter()  # evaluation time is not training time
            if s["save_every"] and (step + 1) % s["save_every"] == 0 and step + 1 < total:
                save_ckpt()
                t_seg = time.perf_counter()
            if on_step is not None:
                on_step(step + 1, row)
        bar.close()
        train_seconds = state["elapsed"]
        if not state["eval"] or state["eval"][-1]["step"] != total:
            run_eval(total)

        summary = {
            "settings": s, "teacher": str(teacher), "corpus": [str(f) for f in corpus.files],
            "counts": corpus.counts, "skipped_by_domain": corpus.skipped_by_domain,
            "world_size": world, "global_batch": G, "steps": total, "steps_per_epoch": spe,
            "train_seconds": round(train_seconds, 2),
            "wall_seconds": round(time.perf_counter() - t_start, 2),
            "tokens": state["tokens"], "loss_tokens": state["loss_tokens"],
            "loss_tokens_per_second": state["loss_tokens"] / train_seconds if train_seconds else None,
            "final": state["log"][-1] if state["log"] else None,
            "parameters": n_all, "trainable_parameters": n_train, "block_size": K, "mask_token_id": mask_id,
            "device": str(device),
            "eval": [r for r in state["eval"] if r["step"] == total],
        }
        if rank == 0:
            with atomic_path(out_dir) as tmp:
                tmp.mkdir()
                model.save_pretrained(str(tmp), safe_serialization=True)
                _write_csv(tmp / "train_log.csv", state["log"], LOG_FIELDS)
                (tmp / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in state["log"]))
                if state["eval"]:
                    _write_csv(tmp / "eval_log.csv", state["eval"], EVAL_FIELDS)
                write_json(tmp / "train_summary.json", summary)
            if not s["keep_checkpoint"]:
                shutil.rmtree(ckpt_dir, ignore_errors=True)
            _log(f"saved {out_dir} after {total} steps, {train_seconds:.1f}s training "
                 f"({summary['loss_tokens_per_second'] or 0:.0f} loss tokens/s)")
        if world > 1:
            dist.barrier()
        return summary
    finally:
        if started_pg:
            dist.destroy_process_group()


def _n_weighted(length: int, anchors: np.ndarray, weights: np.ndarray) -> float:
    """Sum of loss weights of the blocks at `anchors` in a sequence of `length` tokens."""
    K = len(weights)
    t = anchors[:, None] + np.arange(K)[None, :] + 1
    return float((weights[None, :] * (t < length)).sum())


def _write_csv(path, rows, fields) -> None:
    with open(path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        wr.writeheader()
        wr.writerows(rows)


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus train", description="Distil the diffusion view of an Orthrus model.")
    ap.add_argument("--teacher", required=True, help="teacher (Qwen3) directory or hub id")
    ap.add_argument("--corpus", required=True, nargs="+", help="teacher corpus shard(s) (Parquet)")
    ap.add_argument("--config", help="YAML/JSON with `models: {NAME: {settings}}`")
    ap.add_argument("--model", help="the variant NAME under `models:`")
    ap.add_argument("--out", required=True, help="output model directory (written atomically)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads per process")
    ap.add_argument("--eval-prompts", default=None, help="held-out prompt set for TPF (Parquet)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help=f"override a setting; keys: {', '.join(DEFAULTS)}")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    if args.no_progress:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    try:
        if args.config and not args.model:
            raise ValueError("--config needs --model NAME")
        settings = load_model_settings(args.config, args.model) if args.config else {}
        from orthrus.config import apply_sets

        apply_sets(settings, args.set)
        train(settings, args.teacher, args.corpus, args.out, eval_prompts=args.eval_prompts,
              threads=args.threads, progress=not args.no_progress)
    except (ValueError, FileNotFoundError) as e:
        print(f"orthrus train: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
