"""The sampled loop tested against the probabilities it should sample from, and the samples that test
needs (docs/SAMPLING.md).

The two-sample test (orthrus/audit/two_sample.py) must estimate the AR sampler's distribution from a
second sample; the AR model's own probabilities are known. Under the null (the loop samples the AR
sampler's distribution p), a sampled token's surprisal s = -log p(y) has mean H(p) and variance V(p)
(entropy and varentropy) given the tokens before it, so over N samples of m tokens

    Z = sum (s - H) / sqrt(sum V)

is standard normal in the limit (a martingale central limit theorem). A loop that sharpens or flattens
the distribution, as the planted control does (q at temperature 1 in the ratio: its rows favour the
draft's likely tokens), moves Z by N times its mean shift per sample, E_r[s] - H(p) summed over the m
positions, with r the loop's exact output distribution (orthrus.audit.sampling.step_distribution):
so the N that rejects it with a given probability is known before sampling (`planned_n`). The test is
blind to biases that leave the surprisal's mean alone (a swap of two equally likely tokens): the
two-sample test stays beside it for those.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.stats import norm


def surprisal_moments(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of probabilities (last axis), the surprisal's mean and variance, in float64."""
    p = p.double()
    logp = torch.where(p > 0, p.log(), torch.zeros_like(p))
    h = -(p * logp).sum(-1)
    return h, (p * logp.square()).sum(-1) - h.square()


def shift(p: torch.Tensor, r: torch.Tensor) -> tuple[float, float, float]:
    """Summed over rows: the surprisal's mean shift under r, E_r[-log p] - H(p), its variance under p
    (the null) and under r. A token r draws that p never does counts as p's least likely one."""
    p, r = p.double(), r.double()
    r = r / r.sum(-1, keepdim=True)
    floor = torch.where(p > 0, p, torch.ones_like(p)).amin(-1, keepdim=True)
    s = -torch.where(p > 0, p, floor).log()
    h, v0 = surprisal_moments(p)
    mean_r = (r * s).sum(-1)
    v1 = (r * s.square()).sum(-1) - mean_r.square()
    return float((mean_r - h).sum()), float(v0.sum()), float(v1.clamp_min(0).sum())


def power_at(n: float, delta: float, v0: float, v1: float, alpha: float) -> float:
    """The probability that the two-sided level-alpha test of n samples rejects a loop whose samples
    shift the surprisal by `delta` each (variances v0 under the null, v1 under the loop)."""
    if n <= 0 or delta == 0 or v0 <= 0:
        return alpha
    z = norm.ppf(1 - alpha / 2)
    sd1 = math.sqrt(max(v1, 1e-300))
    return float(norm.cdf((math.sqrt(n) * abs(delta) - z * math.sqrt(v0)) / sd1))


def planned_n(delta: float, v0: float, v1: float, alpha: float, power: float) -> float:
    """The samples at which `power_at` reaches `power` (inf for a loop that does not move the mean)."""
    if delta == 0 or v0 <= 0:
        return math.inf
    z = norm.ppf(1 - alpha / 2) * math.sqrt(v0) + norm.ppf(power) * math.sqrt(max(v1, 0.0))
    return (z / abs(delta)) ** 2


def z_test(s: np.ndarray, h: np.ndarray, v: np.ndarray) -> tuple[float, float]:
    """Z and its two-sided p-value from the sampled tokens' surprisals and their null moments."""
    var = float(np.sum(v))
    if var <= 0:
        return 0.0, 1.0  # every position certain: nothing sampled could differ
    z = float(np.sum(s - h)) / math.sqrt(var)
    return z, float(2 * norm.sf(abs(z)))


def sample_surprisals(model, ids: torch.Tensor, samples: list[list[int]], sampler, batch: int = 32):
    """Per sampled token, its surprisal under the AR sampler (`sampler`, an orthrus.decode.loop.Sampler,
    applied to the model's teacher-forced logits of prompt `ids` and the sample) and that distribution's
    entropy and varentropy: three flat arrays over every sample's tokens (a sample cut by EOS is
    shorter), and the count of tokens the AR sampler gives no mass (its top-p or top-k left them out),
    scored as its least likely token."""
    s_all, h_all, v_all, outside = [], [], [], 0
    m = max((len(x) for x in samples), default=0)
    with torch.inference_mode():
        for i in range(0, len(samples), batch):
            chunk = samples[i : i + batch]
            # prompt + the first m - 1 tokens: the last m positions predict tokens 1..m
            rows = [x + [x[-1] if x else 0] * (m - len(x)) for x in chunk]
            inp = torch.cat([ids[None].expand(len(chunk), -1), torch.tensor(rows, device=ids.device)[:, : m - 1]], 1)
            logits = model(input_ids=inp, use_cache=False, logits_to_keep=m).logits.float()
            p = sampler.probs(logits).double()
            h, v = surprisal_moments(p)
            tok = torch.tensor(rows, device=ids.device)
            py = p.gather(-1, tok[..., None])[..., 0]
            floor = torch.where(p > 0, p, torch.ones_like(p)).amin(-1)
            for j, x in enumerate(chunk):
                k = len(x)
                outside += int((py[j, :k] <= 0).sum())
                s_all.append((-torch.where(py[j, :k] > 0, py[j, :k], floor[j, :k]).log()).cpu().numpy())
                h_all.append(h[j, :k].cpu().numpy())
                v_all.append(v[j, :k].cpu().numpy())
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0)  # noqa: E731
    return cat(s_all), cat(h_all), cat(v_all), outside


def planted_shift(model, ids: torch.Tensor, options, generator: torch.Generator, trajectories: int) -> tuple:
    """The planted control's surprisal shift per sample of `options.max_new_tokens` tokens, and the
    two variances (`shift`), averaged over `trajectories` reference trajectories sampled from the AR
    view: along each, the loop's own blocks teacher-forced (orthrus.audit.sampling.verify_rows) give
    its rows' exact output distributions. An estimate: the samples' own prefixes part from these."""
    from orthrus.audit.sampling import reference_trajectory, row_distributions, verify_rows
    from orthrus.decode.loop import Sampler

    sampler = Sampler(options.temperature, options.top_k, options.top_p)
    sums = np.zeros(3)
    for _ in range(trajectories):
        tokens, single = reference_trajectory(model, ids, options, generator)
        rows = verify_rows(model, ids, tokens, options)
        if rows:
            r, p = row_distributions(single, rows, sampler, planted=True)
            sums += shift(p, r)
    return tuple(float(x) for x in sums / max(trajectories, 1))


def plan_n(model, ids: torch.Tensor, options, ts: dict, n_prompts: int, seed: int) -> dict:
    """A prompt's N: the samples at which the known-probability test rejects the planted control with
    probability `two_sample.power` at Holm's strictest level (alpha / prompts), from the planted
    loop's exact distributions (known_p.planted_shift), within [n_samples, n_samples_max]; the power
    that N reaches (below the target where the cap binds)."""
    alpha = ts["alpha"] / n_prompts
    g = torch.Generator(device=model.device).manual_seed(seed)
    delta, v0, v1 = planted_shift(model, ids, options, g, ts["plan_trajectories"])
    need = planned_n(delta, v0, v1, alpha, ts["power"])
    cap = ts["n_samples_max"] or ts["n_samples"]
    n = int(min(cap, max(ts["n_samples"], math.ceil(need) if math.isfinite(need) else cap)))
    return {
        "n_samples": n,
        "planted_shift": delta,
        "n_planned": need,
        "planned_power": power_at(n, delta, v0, v1, alpha),
    }
