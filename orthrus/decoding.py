"""AR and Orthrus decoding, batch size 1, as a few small functions (prefill, AR step, consensus step).

Greedy Orthrus emits, at every step, the AR view's argmax after the longest prefix of diffusion
proposals that the AR view agrees with: in exact arithmetic it is the AR trajectory. Whether
that survives finite precision is what this project measures.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache


@dataclass
class Sampler:
    """Greedy when `temperature == 0`; otherwise temperature, then top-k, then top-p (as transformers)."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    generator: torch.Generator | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.float() / self.temperature
        if self.top_k:
            kth = torch.topk(logits, min(self.top_k, logits.shape[-1]), dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p is not None and self.top_p < 1:
            sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
            cum = sorted_logits.softmax(-1).cumsum(-1)
            drop = cum - sorted_logits.softmax(-1) >= self.top_p  # keep the smallest set reaching top_p
            logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
        return logits.softmax(-1)

    def sample(self, probs: torch.Tensor) -> torch.Tensor:
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)

    def pick(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1) if self.greedy else self.sample(self.probs(logits))


@dataclass
class GenerateOutput:
    tokens: torch.Tensor  # generated ids only, 1-D, EOS included when reached
    stats: dict = field(default_factory=dict)


def tpf_authors(accepted) -> float:
    """The follow-up paper's tokens per forward (`my_generate` in the authors'
    eval/eval_speed_orthrus.py): (1 + sum of accepted draft lengths) / (1 + verify passes).

    The prefill counts one token and one forward; each consensus step counts its accepted
    proposals but not the AR correction/bonus token it also emits, so this comes out about one
    lower than `tpf_verify`. The one place it is computed: from the recorded accepted lengths.
    """
    accepted = [int(a) for a in accepted]
    return (1 + sum(accepted)) / (1 + len(accepted))


def tokens_per_forward(n_tokens: int, n_prefill: float, n_diffusion: float, n_verify: float, accepted=None,
                       undefined: float = math.nan) -> dict[str, float]:
    """One response's tokens per forward from its recorded counts; the one place they are computed
    (`generate`'s stats and `orthrus analyze`'s TPF tables).

    `tpf_verify`: tokens / the model's forwards (prefill + verify); `tpf_all`: tokens / every
    forward, the proposer's too (Orthrus's diffusion passes, an assisted draft model's);
    `tpf_authors`: `tpf_authors(accepted)`, only where `accepted` is given and the loop had a
    separate prefill (Orthrus's; transformers' assisted loop merges it into its first verification).
    A value whose forwards are zero (or unrecorded, NaN) is `undefined`.
    """
    model_forwards = n_prefill + n_verify
    all_forwards = model_forwards + n_diffusion
    return {"tpf_verify": n_tokens / model_forwards if model_forwards > 0 else undefined,
            "tpf_all": n_tokens / all_forwards if all_forwards > 0 else undefined,
            "tpf_authors": tpf_authors(accepted) if accepted is not None and n_prefill > 0 else undefined}


EOS_POLICIES = ("generation_config", "config")
LAST_BLOCKS = ("full", "shorten")
PREFILL_LOGITS = ("last", "all")


def eos_ids(model, policy: str = "generation_config") -> set[int]:
    """The ids that end a trajectory: every id of `generation_config.eos_token_id` (what
    transformers' generate stops on; Qwen3 lists two) or only `config.eos_token_id` (what the
    released Orthrus loop stops on)."""
    if policy not in EOS_POLICIES:
        raise ValueError(f"eos policy must be one of {EOS_POLICIES}, got {policy!r}")
    src = model.generation_config if policy == "generation_config" else model.config
    eos = getattr(src, "eos_token_id", None)
    return set([eos] if isinstance(eos, int) else (eos or []))


def ar_forward(model, ids: torch.Tensor, cache, last_only: bool = False) -> torch.Tensor:
    """One causal forward of the AR view over `ids` (1-D), appending them to `cache`.

    `last_only` computes the LM head for the last position only; the released loop computes
    it at every prompt position, which can change the bits of the last row on some kernels."""
    out = model(input_ids=ids[None], past_key_values=cache, use_cache=True, logits_to_keep=1 if last_only else 0)
    return out.logits[0]


def diffusion_proposals(model, x: torch.Tensor, cache, block_size: int) -> torch.Tensor:
    """Logits of the diffusion view for the block [x, M, ..., M] (`block_size` tokens) right after
    the cache; slots 0..block_size-2."""
    start = cache.get_seq_length()
    block = torch.full((1, block_size), model.mask_token_id, dtype=torch.long, device=x.device)
    block[0, 0] = x
    positions = torch.arange(start, start + block_size, device=x.device)[None]
    return model.diffusion_forward(block, positions, cache)[0, :-1]


def consensus(draft: torch.Tensor, draft_logits: torch.Tensor, verify_logits: torch.Tensor, sampler: Sampler):
    """Accepted draft length n and the next token (AR correction or bonus) for one step.

    `verify_logits[i]` is the AR view's prediction for the token after draft position i-1
    (row 0 follows the anchor), so there is one more verify row than draft tokens.
    """
    if sampler.greedy:
        target = verify_logits.argmax(-1)
        n = int((draft == target[:-1]).long().cumprod(0).sum())
        return n, target[n]
    p = sampler.probs(verify_logits)
    q = sampler.probs(draft_logits)
    idx = torch.arange(len(draft), device=draft.device)
    ratio = p[idx, draft] / q[idx, draft]
    u = torch.rand(len(draft), generator=sampler.generator, device=draft.device)
    n = int((u < ratio).long().cumprod(0).sum())
    if n == len(draft):
        return n, sampler.sample(p[n])
    residual = (p[n] - q[n]).clamp_min(0)
    return n, sampler.sample(residual / residual.sum())


@torch.inference_mode()
def generate(
    model,
    input_ids: torch.Tensor,
    mode: str = "orthrus",
    max_new_tokens: int = 128,
    eos_token_id: int | list[int] | None = None,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    block_size: int | None = None,
    eos: str = "generation_config",
    last_block: str = "full",
    prefill_logits: str = "last",
) -> GenerateOutput:
    """Decode one prompt with the AR view (`mode="ar"`) or the Orthrus consensus loop.

    Parity options with the released reference loop (defaults: this project's behaviour):
    `eos` which ids stop (see `eos_ids`; an explicit `eos_token_id` wins); `last_block`
    "full" runs every diffusion block at K tokens and uses only the proposals that fit the
    budget, "shorten" runs the last blocks at min(K, remaining + 1) tokens as the reference
    does (bidirectional attention inside the block makes the two differ numerically);
    `prefill_logits` "last" or "all" prompt positions through the LM head."""
    ids = _check_args(model, input_ids, mode, max_new_tokens, temperature, top_k, top_p, block_size)
    for name, value, allowed in (("eos policy", eos, EOS_POLICIES), ("last_block", last_block, LAST_BLOCKS),
                                 ("prefill_logits", prefill_logits, PREFILL_LOGITS)):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    K = (block_size or model.block_size) if mode == "orthrus" else 1
    if eos_token_id is None:
        eos = eos_ids(model, eos)
    else:
        eos = set([eos_token_id] if isinstance(eos_token_id, int) else eos_token_id)
    sampler = Sampler(temperature, top_k, top_p, generator)

    stats = {"mode": mode, "block_size": K if mode == "orthrus" else 1, "n_prefill": 0, "n_diffusion": 0, "n_verify": 0, "accepted": []}
    tokens: list[int] = []
    t0 = time.perf_counter()
    if max_new_tokens > 0:
        cache = DynamicCache(config=model.config)
        x = sampler.pick(ar_forward(model, ids, cache, last_only=prefill_logits == "last")[-1])
        stats["n_prefill"] = 1
        tokens.append(int(x))
        step = _orthrus_step if mode == "orthrus" else _ar_step
        while len(tokens) < max_new_tokens and tokens[-1] not in eos:
            remaining = max_new_tokens - len(tokens)
            new = step(model, x, cache, K, sampler, remaining, stats, last_block == "shorten")
            x = new[-1]
            new = new.tolist()[:remaining]  # a shortened last block may end one past the budget
            for t in new:
                tokens.append(t)
                if t in eos:
                    break
    stats["seconds"] = time.perf_counter() - t0
    stats["n_tokens"] = len(tokens)
    stats["finish_reason"] = "eos" if tokens and tokens[-1] in eos else "length"
    stats.update(tokens_per_forward(len(tokens), stats["n_prefill"], stats["n_diffusion"], stats["n_verify"],
                                    stats["accepted"], undefined=0.0))
    return GenerateOutput(torch.tensor(tokens, dtype=torch.long), stats)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_args(model, input_ids, mode, max_new_tokens, temperature, top_k, top_p, block_size) -> torch.Tensor:
    """The prompt as 1-D ids on the model's device; a ValueError saying in one line what is wrong."""
    if mode not in ("ar", "orthrus"):
        raise ValueError(f"mode must be 'ar' or 'orthrus', got {mode!r}")
    if (not isinstance(input_ids, torch.Tensor) or input_ids.dtype == torch.bool or input_ids.is_floating_point()
            or input_ids.is_complex()):
        raise ValueError(f"input_ids must be an integer tensor of token ids, got {getattr(input_ids, 'dtype', type(input_ids))}")
    if not (input_ids.dim() == 1 or (input_ids.dim() == 2 and input_ids.shape[0] == 1)):
        raise ValueError(f"batch size 1 only; got input_ids of shape {tuple(input_ids.shape)}")
    ids = input_ids.reshape(-1).to(device=model.device, dtype=torch.long)
    if ids.numel() == 0:
        raise ValueError("empty prompt: at least one token is needed")
    vocab = model.config.vocab_size
    if int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise ValueError(f"input_ids must lie in [0, {vocab}), got values from {int(ids.min())} to {int(ids.max())}")
    if not _is_int(max_new_tokens) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < math.inf:
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
    if top_k is not None and (not _is_int(top_k) or top_k < 0):
        raise ValueError(f"top_k must be None or an integer >= 0 (0 = off), got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be None or a number in (0, 1], got {top_p!r}")
    if block_size is not None and (not _is_int(block_size) or block_size < 2):
        raise ValueError(f"block_size must be None (the model's) or an integer >= 2, got {block_size!r}")
    limit = model.config.max_position_embeddings
    if ids.numel() + max_new_tokens > limit:
        raise ValueError(f"prompt ({ids.numel()} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's {limit} positions")
    return ids


def _ar_step(model, x, cache, K, sampler, remaining, stats, shorten=False) -> torch.Tensor:
    stats["n_verify"] += 1
    return sampler.pick(ar_forward(model, x.reshape(1), cache)[-1]).reshape(1)


def _orthrus_step(model, x, cache, K, sampler, remaining, stats, shorten=False) -> torch.Tensor:
    """Propose with the diffusion view, verify with the AR view, keep the agreeing prefix.

    Full blocks: never proposes more than `remaining - 1` tokens, so a step never emits more
    than asked. Shortened blocks (the reference loop): a block of min(K, remaining + 1) tokens
    proposes up to `remaining`; the caller drops what passes the budget.
    """
    if remaining == 1 and not shorten:  # nothing left to propose: a plain AR step
        return _ar_step(model, x, cache, K, sampler, remaining, stats)
    if shorten:
        draft_logits = diffusion_proposals(model, x, cache, min(K, remaining + 1))
    else:
        draft_logits = diffusion_proposals(model, x, cache, K)[: remaining - 1]
    draft = sampler.pick(draft_logits)
    verify_logits = ar_forward(model, torch.cat([x.reshape(1), draft]), cache)
    n, nxt = consensus(draft, draft_logits, verify_logits, sampler)
    rejected = len(draft) - n
    if rejected:
        cache.crop(-rejected)  # the cache keeps the anchor and the accepted proposals only
    stats["n_diffusion"] += 1
    stats["n_verify"] += 1
    stats["accepted"].append(n)
    return torch.cat([draft[:n], nxt.reshape(1)])
