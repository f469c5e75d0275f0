"""The training data: corpus sequences with their usable anchors, length-bucketed global
batches, and the tensors of one micro-batch (blocks, targets, weights, block-sparse mask)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from orthrus.distill.dist import log
from orthrus.distill.settings import Settings, offset_weights
from orthrus.errors import InputError, MissingInputError

REQUIRED_COLUMNS = ("prompt_ids", "response_ids")


class Corpus:
    """Token sequences of the teacher corpus, truncated to `max_len`, with their usable anchors."""

    def __init__(self, files, s: Settings, verbose: bool = True):
        files = [str(f) for f in ([files] if isinstance(files, (str, os.PathLike)) else files)]
        if not files:
            raise InputError("no corpus files given")
        w = offset_weights(s.offset_weights, s.block_size)
        # an anchor a is usable iff a <= len - 2 - need: its block then has min_loss_tokens targets
        self.need = int(np.flatnonzero(w > 0)[s.min_loss_tokens - 1])
        self.max_len = s.max_len
        self.ids, self.prompt_len, self.domain, self.last_anchor = [], [], [], []
        self.counts = {
            "rows": 0,
            "used": 0,
            "truncated": 0,
            "skipped_error": 0,
            "skipped_empty_response": 0,
            "skipped_short_response": 0,
            "skipped_prompt_over_max_len": 0,
        }
        self.skipped_by_domain: dict = {}
        for f in files:
            for p, r, d, e in _read_shard(f):
                self._add(list(p or []), list(r or []), d, e)
        self.counts["used"] = len(self.ids)
        self.lengths = np.array([len(x) for x in self.ids], dtype=np.int64)
        self.files = files
        if verbose:
            c = self.counts
            log(
                f"corpus: {c['rows']} rows in {len(files)} shard(s), {c['used']} used, "
                f"{c['truncated']} truncated to max_len={s.max_len}, skipped: {c['skipped_error']} error rows, "
                f"{c['skipped_empty_response']} empty response, {c['skipped_short_response']} "
                f"response too short for one block, {c['skipped_prompt_over_max_len']} prompt >= max_len"
            )
        if not self.ids:
            raise InputError(f"no usable sequence in the corpus ({self.counts})")

    def _add(self, p: list, r: list, domain, error) -> None:
        """Keep one corpus row, or count why not."""
        self.counts["rows"] += 1
        reason = None
        if error:  # a prompt the corpus stage could not answer
            reason = "skipped_error"
        elif not r:
            reason = "skipped_empty_response"
        elif len(p) >= self.max_len:
            reason = "skipped_prompt_over_max_len"
        else:
            seq = p + r
            if len(seq) > self.max_len:
                self.counts["truncated"] += 1
                seq = seq[: self.max_len]
            last = len(seq) - 2 - self.need
            if last < len(p):
                reason = "skipped_short_response"
        if reason:
            self.counts[reason] += 1
            self.skipped_by_domain.setdefault(domain, {}).setdefault(reason, 0)
            self.skipped_by_domain[domain][reason] += 1
            return
        self.ids.append(np.asarray(seq, dtype=np.int64))
        self.prompt_len.append(len(p))
        self.domain.append(domain)
        self.last_anchor.append(last)

    def __len__(self) -> int:
        return len(self.ids)

    def anchors(self, idx: int, epoch: int, s: Settings) -> np.ndarray:
        """Sorted anchor positions of sequence `idx` in `epoch` (a pure function of the seed)."""
        lo, hi = self.prompt_len[idx], self.last_anchor[idx]
        n = hi - lo + 1
        k = min(s.blocks_per_seq, n)
        rng = np.random.default_rng([int(s.seed), int(epoch), int(idx), 7])
        return np.sort(lo + rng.choice(n, size=k, replace=False))


def _read_shard(f: str):
    """(prompt_ids, response_ids, domain, error) of every row of one corpus shard."""
    import pyarrow.parquet as pq

    if not Path(f).is_file():
        raise MissingInputError(f"corpus shard not found: {f}")
    cols = set(pq.read_schema(f).names)
    missing = [c for c in REQUIRED_COLUMNS if c not in cols]
    if missing:
        raise InputError(f"corpus shard {f} lacks column(s) {missing} (has {sorted(cols)})")
    table = pq.read_table(f, columns=[*REQUIRED_COLUMNS] + [c for c in ("domain", "error") if c in cols])
    data = table.to_pydict()
    domains = data.get("domain") or ["-"] * table.num_rows
    errors = data.get("error") or [None] * table.num_rows
    return zip(data["prompt_ids"], data["response_ids"], domains, errors)


def epoch_batches(lengths: np.ndarray, global_batch: int, epoch: int, seed: int, pool: int) -> list:
    """Length-bucketed global batches of one epoch: shuffle, sort pools of `pool` batches by
    length, cut, shuffle the batches. The incomplete last batch is dropped."""
    rng = np.random.default_rng([int(seed), int(epoch), 1])
    perm = rng.permutation(len(lengths))
    size = global_batch * max(1, pool)
    batches = []
    for s in range(0, len(perm), size):
        chunk = perm[s : s + size]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i : i + global_batch] for i in range(0, len(chunk), global_batch)]
    batches = [b for b in batches if len(b) == global_batch]
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]


def n_weighted(length: int, anchors: np.ndarray, weights: np.ndarray) -> float:
    """Sum of loss weights of the blocks at `anchors` in a sequence of `length` tokens."""
    K = len(weights)
    t = anchors[:, None] + np.arange(K)[None, :] + 1
    return float((weights[None, :] * (t < length)).sum())


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
    real = torch.zeros((B, nb), dtype=torch.bool)  # sequences with fewer blocks are padded
    for b, (x, a) in enumerate(zip(seqs, anchors)):
        ids[b, : len(x)] = torch.from_numpy(x)
        anc[b, : len(a)] = torch.from_numpy(np.asarray(a))
        real[b, : len(a)] = True
    slot = torch.arange(q) % K
    a_q = anc.repeat_interleave(K, dim=1)  # (B, q)
    pos = a_q + slot  # (B, q)
    blocks = torch.full((B, q), mask_id, dtype=torch.long)
    blocks[:, ::K] = ids.gather(1, anc)
    tpos = pos + 1
    w_slot = torch.as_tensor(weights, dtype=torch.float32)[slot]
    valid = (tpos < lens[:, None]) & real.repeat_interleave(K, dim=1) & (w_slot > 0)
    targets = ids.gather(1, tpos.clamp(max=L - 1))
    w = torch.where(valid, w_slot.expand(B, q), torch.zeros(()))
    cache_ok = torch.arange(L)[None, None, :] < a_q[:, :, None]  # (B, q, L)
    blk = torch.arange(q) // K
    block_ok = (blk[:, None] == blk[None, :]).expand(B, q, q)
    allowed = torch.cat([cache_ok, block_ok], dim=-1)
    return {"ids": ids, "blocks": blocks, "pos": pos, "targets": targets, "tpos": tpos, "w": w, "allowed": allowed}


class GlobalBatches:
    """The run's global batches, step after step: epochs follow each other, each cut once (on
    its first step) by `epoch_batches`."""

    def __init__(self, corpus: Corpus, global_batch: int, s: Settings):
        self.lengths, self.size, self.seed, self.pool = corpus.lengths, global_batch, s.seed, s.length_bucket_pool
        self.per_epoch = len(epoch_batches(self.lengths, global_batch, 0, self.seed, self.pool))
        self._epoch, self._batches = None, None

    def __getitem__(self, step: int) -> tuple[int, np.ndarray]:
        """(epoch, corpus indices of the global batch) of optimizer step `step` (0-based)."""
        epoch, i = divmod(step, self.per_epoch)
        if epoch != self._epoch:
            self._batches, self._epoch = epoch_batches(self.lengths, self.size, epoch, self.seed, self.pool), epoch
        return epoch, self._batches[i]
