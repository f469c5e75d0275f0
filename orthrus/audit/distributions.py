"""The distributions a sampled speculative loop emits, exactly: one row's output distribution from the
loop's own p and q (`step_distribution`), the loop's verify rows teacher-forced over given tokens, total
variation and its bounds over a sequence, and the AR view's reference trajectories and plain samples.
The sampling audit (orthrus/audit/sampling.py) and the known-probability test (known_p.py) both build
on it; it imports neither.
"""

from __future__ import annotations

import numpy as np
import torch

from orthrus.decoders import DECODER, PLANTED, names

(VIEW,) = names(model="orthrus", role="view")  # the loop's own AR view, one token per forward

# a sampling cell: what the tables group by
CELL = ["model", "decoder", "precision", "attention", "temperature", "top_p"]


def step_distribution(p: torch.Tensor, q: torch.Tensor, q_ratio: torch.Tensor | None = None) -> torch.Tensor:
    """The exact distribution of the token one speculative row emits, in float64, from the
    probabilities the loop computed (`orthrus.decoding.consensus`): a draft drawn from q (as
    torch.multinomial draws it: q renormalised), accepted with probability min(1, p/q_ratio),
    else a draw from the residual max(0, p - q_ratio), renormalised.

    `q_ratio` is q for an honest loop; the planted control computes it at another temperature.
    The result is min(p, q) + (1 - sum min(p, q)) * normalize(max(0, p - q)) for the honest
    loop, which is p when p and q are distributions. The acceptance test `u < p/q` with u from
    torch.rand (a 24-bit grid) differs from min(1, p/q) by less than 2^-24 per row: left out."""
    p, q = p.double(), q.double()
    qr = q if q_ratio is None else q_ratio.double()
    draw = q / q.sum(-1, keepdim=True)
    # a draft the loop never draws (q = 0) contributes nothing, whatever its ratio
    accept = torch.where(draw > 0, torch.clamp(p / qr, max=1.0).nan_to_num(nan=0.0), torch.zeros_like(p))
    kept = draw * accept
    rejected = (1 - kept.sum(-1, keepdim=True)).clamp_min(0)
    residual = (p - qr).clamp_min(0)
    mass = residual.sum(-1, keepdim=True)
    # p == q_ratio everywhere: nothing is rejected in exact arithmetic, and the residual is empty
    resampled = torch.where(mass > 0, residual / mass.clamp_min(torch.finfo(torch.float64).tiny), torch.zeros_like(p))
    return kept + rejected * resampled


def total_variation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Half the L1 distance over the last axis, in float64 (each side renormalised, as a
    multinomial draw renormalises its weights)."""
    a, b = a.double(), b.double()
    return 0.5 * (a / a.sum(-1, keepdim=True) - b / b.sum(-1, keepdim=True)).abs().sum(-1)


def tv_summary(per_trajectory: list[np.ndarray], length: int) -> dict:
    """Per-position TVs of several trajectories: their mean, 99th percentile and maximum, the
    number of positions, and two bounds on the TV between the speculative decoder's and the AR
    sampler's sequence distributions. By the chain rule TV(P, Q) <= E_{y~P} sum_t TV_t(y_<t)
    (P the AR model, the expectation over its own trajectories): `seq_bound` is that sum's mean
    over the reference trajectories (each capped at 1), `bound_at_length` the mean TV times
    `length` (a response of the study's length)."""
    flat = np.concatenate([np.asarray(t, dtype=np.float64) for t in per_trajectory]) if per_trajectory else np.zeros(0)
    if not len(flat):
        nan = float("nan")
        return {
            "n_trajectories": len(per_trajectory),
            "n_positions": 0,
            "tv_mean": nan,
            "tv_p99": nan,
            "tv_max": nan,
            "seq_bound": nan,
            "bound_at_length": nan,
        }
    sums = [min(1.0, float(np.sum(t))) for t in per_trajectory]
    mean = float(flat.mean())
    return {
        "n_trajectories": len(per_trajectory),
        "n_positions": int(len(flat)),
        "tv_mean": mean,
        "tv_p99": float(np.quantile(flat, 0.99)),
        "tv_max": float(flat.max()),
        "seq_bound": float(np.mean(sums)),
        "bound_at_length": min(1.0, mean * length),
    }


# ---- the model part (torch and transformers imported by the functions that need them)


def reference_trajectory(model, ids: torch.Tensor, options, generator: torch.Generator):
    """A trajectory sampled from the model's AR view (one token per forward, as plain sampling
    runs), and the logits of every single-step forward that chose a token (row t predicts
    token t)."""
    from orthrus.decode.loop import generate

    rows = []

    def keep(forward, tokens):
        rows.append(forward.logits.float())
        return False

    out = generate(model, ids, options.replace(decoder=VIEW), generator=generator, trace=keep)
    tokens = out.tokens.tolist()
    return tokens, torch.cat(rows)[: len(tokens)]


def verify_rows(
    model, ids: torch.Tensor, tokens: list[int], options
) -> list[tuple[int, torch.Tensor, torch.Tensor | None]]:
    """The reference's tokens teacher-forced through the Orthrus loop's own blocks, every draft
    accepted: per generated position t >= 1, (t, the AR row that decides it, the diffusion row
    that drafted it, or None for a bonus row or a single AR step). The blocks are those of
    `orthrus.decoding._orthrus_step` with the reference's tokens as the draft, so every row of
    a verify block appears (a sampled run's blocks start wherever a rejection ends the last)."""
    from transformers import DynamicCache

    from orthrus.decode.loop import ar_forward, diffusion_proposals

    cache = DynamicCache(config=model.config)
    ar_forward(model, ids, cache, last_only=options.prefill_logits == "last")
    K = options.block_size or model.block_size
    shorten = options.last_block == "shorten"
    L, s, rows = len(tokens), 0, []
    with torch.inference_mode():
        while s < L - 1:
            remaining = L - 1 - s
            x = torch.tensor([tokens[s]], dtype=torch.long, device=model.device)
            if remaining == 1 and not shorten:  # the loop's plain AR step over the verify-written cache
                rows.append((s + 1, ar_forward(model, x, cache)[0][-1].float(), None))
                break
            if shorten:
                draft_logits = diffusion_proposals(model, x[0], cache, min(K, remaining + 1))
            else:
                draft_logits = diffusion_proposals(model, x[0], cache, K)[: remaining - 1]
            n = len(draft_logits)
            draft = torch.tensor(tokens[s + 1 : s + 1 + n], dtype=torch.long, device=model.device)
            verify = ar_forward(model, torch.cat([x, draft]), cache)[0].float()
            rows += [(s + 1 + i, verify[i], draft_logits[i].float()) for i in range(n)]
            if s + 1 + n < L:
                rows.append((s + 1 + n, verify[n], None))
            s += n + 1
    return rows


def row_distributions(single_logits: torch.Tensor, rows, sampler, planted: bool = False):
    """Per position of `rows` (verify_rows), the speculative row's exact output distribution and the
    single-step distribution (`sampler` an `orthrus.decode.loop.Sampler`), in float64; `planted`: the
    control whose ratio takes q at temperature 1."""
    from orthrus.decode.loop import Sampler

    t = torch.tensor([r[0] for r in rows], device=single_logits.device)
    p_single = sampler.probs(single_logits[t])
    p_verify = sampler.probs(torch.stack([r[1] for r in rows]))
    out = p_verify.double().clone()
    drafted = [i for i, r in enumerate(rows) if r[2] is not None]
    if drafted:
        logits = torch.stack([rows[i][2] for i in drafted])
        q = sampler.probs(logits)
        ratio_t = DECODER[PLANTED].ratio_temperature  # the planted row's acceptance rule
        q_ratio = Sampler(ratio_t, sampler.top_k, sampler.top_p).probs(logits) if planted else None
        out[drafted] = step_distribution(p_verify[drafted], q, q_ratio)
    return out, p_single


def position_tvs(single_logits: torch.Tensor, rows, sampler, planted: bool = False) -> np.ndarray:
    """Per position, the TV between the speculative row's exact output distribution and the
    single-step distribution (`row_distributions`)."""
    if not rows:
        return np.zeros(0)
    out, p_single = row_distributions(single_logits, rows, sampler, planted)
    return total_variation(out, p_single).cpu().numpy()  # the model's device may be a GPU


def sample_prefixes(model, ids: torch.Tensor, options, n: int, seed: int) -> list[list[int]]:
    """n samples of the first `options.max_new_tokens` tokens from the decoder of `options`,
    each a full run of the loop, from one generator seeded with `seed`."""
    from orthrus.decode.loop import generate

    g = torch.Generator(device=model.device).manual_seed(seed)
    return [generate(model, ids, options, generator=g).tokens.tolist() for _ in range(n)]


def sample_ar(model, ids: torch.Tensor, options, n: int, seed: int, eos: set[int]) -> list[list[int]]:
    """n samples of the first `options.max_new_tokens` tokens by plain AR sampling, the n rows in
    one batch (one forward per token; an independent implementation of what the decoder's
    single steps do, with the same `Sampler`), each cut after its first EOS."""
    from transformers import DynamicCache

    from orthrus.decode.loop import Sampler

    g = torch.Generator(device=model.device).manual_seed(seed)
    sampler = Sampler(options.temperature, options.top_k, options.top_p, g)
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        logits = model(
            input_ids=ids[None].expand(n, -1), past_key_values=cache, use_cache=True, logits_to_keep=1
        ).logits[:, -1]
        steps = []
        for i in range(options.max_new_tokens):
            steps.append(sampler.sample(sampler.probs(logits)))
            if i + 1 < options.max_new_tokens:
                logits = model(input_ids=steps[-1][:, None], past_key_values=cache, use_cache=True).logits[:, -1]
    out = []
    for row in torch.stack(steps, 1).tolist() if steps else [[] for _ in range(n)]:
        end = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        out.append(row[:end])
    return out


def prompt_ids(tokenizer, prompt: str, options, device) -> torch.Tensor:
    """A prompt's token ids as the loop is given them: rendered with the options' chat message."""
    from orthrus.chat import render_chat

    return torch.tensor(render_chat(tokenizer, prompt, options.message), dtype=torch.long, device=device)
