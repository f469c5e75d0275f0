"""The sampled loop tested against the probabilities it should sample from, and the samples that test
needs (docs/SAMPLING.md).

The two-sample test (orthrus/audit/two_sample.py) compares the loop's samples with a second sample,
of plain AR sampling; but the AR model's probabilities are known. `stratified_gof` is that test's
one-sample twin: at each position, within each stratum of samples sharing the tokens before it,
Pearson's goodness of fit of the next token's counts to the AR sampler's own probabilities after that
prefix, summed over strata and positions. Its expected counts are exact where the two-sample test
estimates them from N more samples, so it needs fewer samples for the same power, and its power
against a loop whose exact output distribution is known (the planted control,
orthrus.audit.distributions.step_distribution) follows before sampling: a noncentral chi-square whose
noncentrality is each stratum's size times the chi-square divergence of the loop's row from p
(`plan_n`, from reference trajectories sampled from the AR view).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.stats import chi2, ncx2

from orthrus.audit.settings import TwoSample

MIN_EXPECTED = 5.0  # Pearson's rule: categories expected fewer times are pooled
MIN_STRATUM = 10  # as the two-sample test's strata


def categories(expected: np.ndarray, min_expected: float = MIN_EXPECTED) -> tuple[np.ndarray, int]:
    """Each token's category: its own where its expected count reaches `min_expected`, else one pooled
    category (merged into the smallest of the others while it is itself too rare). (map, count)."""
    big = np.flatnonzero(expected >= min_expected)
    big = big[np.argsort(-expected[big], kind="stable")]
    group = np.full(len(expected), len(big))
    group[big] = np.arange(len(big))
    if len(big) and expected[group == len(big)].sum() < min_expected:
        group[group == len(big)] = len(big) - 1
    return group, int(group.max()) + 1


def gof(tokens: list[int], p: np.ndarray, min_expected: float = MIN_EXPECTED) -> tuple[float, int]:
    """Pearson's statistic and degrees of freedom of `tokens` against the distribution p; a token p
    gives no mass at all is impossible under the null: infinite (a top-k or top-p boundary that
    rounding moves could do that to an honest loop; the study's test samples without them)."""
    n = len(tokens)
    if (p[np.asarray(tokens)] <= 0).any():
        return np.inf, max(1, int((p > 0).sum()) - 1)
    group, k = categories(n * p, min_expected)
    if k < 2:
        return 0.0, 0
    exp = np.bincount(group, weights=n * p, minlength=k)
    obs = np.bincount(group[np.asarray(tokens)], minlength=k).astype(np.float64)
    return float(((obs - exp) ** 2 / exp).sum()), k - 1


def strata(samples: list[list[int]], m: int, min_stratum: int = MIN_STRATUM) -> dict[tuple, list[int]]:
    """Per prefix of the first m positions shared by at least `min_stratum` samples, the tokens those
    samples drew next (a sample cut by EOS has no token after it)."""
    out: dict[tuple, list[int]] = {}
    for j in range(m):
        for s in samples:
            if len(s) > j:
                out.setdefault(tuple(s[:j]), []).append(s[j])
    return {k: v for k, v in out.items() if len(v) >= min_stratum}


def stratified_gof(groups: dict[tuple, list[int]], probs: dict[tuple, np.ndarray]) -> tuple[float, int, float]:
    """The test that every stratum's next tokens (`strata`) follow the AR sampler's probabilities after
    its prefix (`probs`): Pearson's statistics and degrees of freedom summed over strata (under the
    null the conditional tests are asymptotically independent). (statistic, dof, p)."""
    stat, dof = 0.0, 0
    for prefix, tokens in groups.items():
        st, d = gof(tokens, probs[prefix])
        stat, dof = stat + st, dof + d
    return stat, dof, float(chi2.sf(stat, dof)) if dof else 1.0


def prefix_probs(model, ids: torch.Tensor, prefixes, sampler, batch: int = 16) -> dict[tuple, np.ndarray]:
    """The AR sampler's next-token distribution (`sampler`, an orthrus.decode.loop.Sampler, on the
    model's logits) after the prompt `ids` and each prefix, in float64, batched by prefix length."""
    out = {}
    by_len: dict[int, list[tuple]] = {}
    for x in prefixes:
        by_len.setdefault(len(x), []).append(x)
    with torch.inference_mode():
        for length, group in by_len.items():
            for i in range(0, len(group), batch):
                chunk = group[i : i + batch]
                tail = torch.tensor(chunk, dtype=torch.long, device=ids.device).reshape(len(chunk), length)
                inp = torch.cat([ids[None].expand(len(chunk), -1), tail], 1)
                logits = model(input_ids=inp, use_cache=False, logits_to_keep=1).logits[:, -1].float()
                p = sampler.probs(logits).double().cpu().numpy()  # the model's device may be a GPU
                out.update(zip(chunk, p))
    return out


def known_p_test(model, ids: torch.Tensor, samples: list[list[int]], m: int, sampler) -> tuple[float, int, float]:
    """One loop's samples of a prompt against the AR sampler's probabilities (`stratified_gof`)."""
    groups = strata(samples, m)
    return stratified_gof(groups, prefix_probs(model, ids, list(groups), sampler))


# ---- the plan: the N at which the test rejects the planted control


def divergence(r: np.ndarray, p: np.ndarray, n: float) -> tuple[float, int]:
    """The chi-square divergence of r from p over the categories a stratum of n samples is tested in,
    and their degrees of freedom."""
    group, k = categories(n * p)
    if k < 2:
        return 0.0, 0
    pc, rc = np.bincount(group, weights=p, minlength=k), np.bincount(group, weights=r / r.sum(), minlength=k)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(pc > 0, (rc - pc) ** 2 / pc, 0.0)
    return float(terms.sum()), k - 1


def power_at(n: int, paths, alpha: float) -> float:
    """The probability that the test of n samples rejects at level alpha a loop whose rows along
    trajectories it sampled (`paths`) are known: per path, per position, (the prefix's probability
    under the loop, the loop's distribution r, the AR sampler's p). A stratum of n R(prefix) samples
    adds n R(prefix) times r's chi-square divergence from p to the noncentrality; the sums over every
    stratum large enough to test are estimated from the paths (each stratum one reaches weighted by one
    over its probability for the degrees of freedom)."""
    lam = dof = 0.0
    for path in paths:
        for prob, r, p in path:
            if n * prob >= MIN_STRATUM:
                d, k = divergence(r, p, n * prob)
                lam, dof = lam + n * d, dof + k / prob
    lam, dof = lam / len(paths), max(1, round(dof / len(paths)))
    return float(ncx2.sf(chi2.isf(alpha, dof), dof, lam)) if lam > 0 else alpha


def planted_paths(model, ids: torch.Tensor, options, generator: torch.Generator, trajectories: int) -> list:
    """`trajectories` runs of the planted loop (`options.max_new_tokens` tokens each), and along each, per
    position, (its prefix's probability under the loop, the loop's exact output distribution there, the
    AR sampler's): the loop's own blocks teacher-forced over the run's tokens
    (orthrus.audit.distributions.verify_rows) and the AR view's logits over the same tokens; the first token
    is the prefill's, the same in both."""
    from orthrus.audit.distributions import row_distributions, verify_rows
    from orthrus.decode.loop import Sampler, generate
    from orthrus.decoders import PLANTED

    sampler = Sampler(options.temperature, options.top_k, options.top_p)
    paths = []
    for _ in range(trajectories):
        tokens = generate(model, ids, options.replace(decoder=PLANTED), generator=generator).tokens.tolist()
        inp = torch.cat([ids, torch.tensor(tokens[:-1], dtype=torch.long, device=ids.device)])
        with torch.inference_mode():
            single = model(input_ids=inp[None], use_cache=False, logits_to_keep=len(tokens)).logits[0].float()
        p = sampler.probs(single).double().cpu().numpy()
        r = p.copy()
        rows = verify_rows(model, ids, tokens, options)
        if rows:
            out, _ = row_distributions(single, rows, sampler, planted=True)
            r[[t for t, *_ in rows]] = out.cpu().numpy()
        r /= r.sum(-1, keepdims=True)
        prob = np.concatenate([[1.0], np.cumprod([r[j, tok] for j, tok in enumerate(tokens)])])
        paths.append([(float(prob[j]), r[j], p[j]) for j in range(len(tokens))])
    return paths


def plan_n(model, ids: torch.Tensor, options, ts: TwoSample, n_prompts: int, seed: int) -> dict:
    """A prompt's N: the fewest samples, within [n_samples, n_samples_max] (`two_sample`), at which the
    test rejects the planted control with probability `two_sample.power` at Holm's strictest level
    (alpha / prompts), or the cap where none does; the power that N reaches."""
    alpha = ts.alpha / n_prompts
    g = torch.Generator(device=model.device).manual_seed(seed)
    paths = planted_paths(model, ids, options, g, ts.plan_trajectories)
    low, cap = ts.n_samples, ts.n_samples_max or ts.n_samples
    step = max(1, math.ceil((cap - low) / 50))
    planned = ((n, power_at(n, paths, alpha)) for n in [*range(low, cap, step), cap])
    n, power = next(((n, pw) for n, pw in planned if pw >= ts.power or n == cap))
    return {"n_samples": n, "planned_power": power}


def plan_table(
    model, tokenizer, prompts, options, ts: TwoSample, seed: int, sizes=(50, 100, 200, 300, 600, 1000)
) -> list[dict]:
    """`orthrus sampling plan`: per prompt (the first of each domain in `prompts`), the test's power
    against the planted control at each N of `sizes`, at Holm's strictest level over
    `len(ts.domains or prompts)` prompts: where the planted bias can be seen, to choose
    `sampling.two_sample.domains` from."""
    from orthrus.audit.distributions import prompt_ids

    n_tested = len(ts.domains or prompts)
    rows = []
    for rank, r in enumerate(prompts.itertuples()):
        ids = prompt_ids(tokenizer, r.prompt, options, model.device)
        g = torch.Generator(device=model.device).manual_seed(seed * 100_003 + rank)
        paths = planted_paths(model, ids, options, g, ts.plan_trajectories)
        rows += [
            {
                "prompt_id": r.prompt_id,
                "domain": r.domain,
                "n_samples": n,
                "power": power_at(n, paths, ts.alpha / n_tested),
            }
            for n in sizes
        ]
    return rows
