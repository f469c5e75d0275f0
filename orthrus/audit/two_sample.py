"""The empirical two-sample test of sampled decoding (docs/SAMPLING.md, "Bugs"): two samples of
m-token prefixes, one prompt's test that they come from one distribution (a stratified chi-square),
Holm's correction over prompts, and the prompts the test runs on. Pure statistics: the in-process
audit (orthrus/audit/sampling.py) and the engines' sampled files (orthrus/engines/engine_samples.py)
both call it."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from orthrus.audit.settings import TwoSample

END = -1  # the label of a position past a sample's end (it stopped at EOS before m tokens)


def chi2_homogeneity(a: list, b: list, min_expected: float = 5.0) -> tuple[float, int, float]:
    """Pearson's chi-square test that two samples of labels come from one distribution: labels
    whose pooled expected count falls below `min_expected` in either sample are merged into one
    category (merged again with the smallest while it is still too rare), so the chi-square
    approximation holds. (statistic, degrees of freedom, p); p = 1 with a single category."""
    from scipy.special import chdtrc

    ca, cb = Counter(a), Counter(b)
    na, nb = len(a), len(b)
    if not na or not nb:
        return 0.0, 0, 1.0
    share = min(na, nb) / (na + nb)
    labels = sorted(set(ca) | set(cb), key=lambda k: -(ca[k] + cb[k]))
    big = [k for k in labels if (ca[k] + cb[k]) * share >= min_expected]
    rare = [k for k in labels if k not in big]
    rows = [(ca[k], cb[k]) for k in big]
    if rare:
        rows.append((sum(ca[k] for k in rare), sum(cb[k] for k in rare)))
    while len(rows) > 1 and sum(rows[-1]) * share < min_expected:  # the merged rare ones are still rare
        last = rows.pop()
        rows[-1] = (rows[-1][0] + last[0], rows[-1][1] + last[1])
    if len(rows) < 2:
        return 0.0, 0, 1.0
    obs = np.array(rows, dtype=np.float64)
    expected = obs.sum(1, keepdims=True) * np.array([[na, nb]]) / (na + nb)
    stat = float(((obs - expected) ** 2 / expected).sum())
    dof = len(rows) - 1
    return stat, dof, float(chdtrc(dof, stat))


def prefix_labels(samples: list[list[int]], m: int) -> list[tuple]:
    """Each sample's first m tokens, padded with END where it stopped earlier."""
    return [tuple(s[:m]) + (END,) * (m - len(s[:m])) for s in samples]


def stratified_chi2(a: list[tuple], b: list[tuple], m: int, min_stratum: int = 10) -> tuple[float, int, float]:
    """The test that two samples of m-token prefixes (END-padded labels) draw each token from one
    distribution given the tokens before it: at each position, a chi-square test of homogeneity
    within each stratum of samples sharing the prefix before it (strata of fewer than
    `min_stratum` samples of both arms together left out), the statistics and degrees of freedom
    summed over strata and positions (the chain rule: under the null the conditional tests are
    asymptotically independent). Where the prefixes still agree it compares like with like, which
    a position's marginal mixes over the earlier tokens. (statistic, degrees of freedom, p)."""
    from scipy.special import chdtrc

    stat, dof = 0.0, 0
    for j in range(m):
        strata: dict[tuple, tuple[list, list]] = {}
        for arm, labels in enumerate((a, b)):
            for s in labels:
                if END not in s[:j]:  # a sample that has stopped has no token j to compare
                    strata.setdefault(s[:j], ([], []))[arm].append(s[j])
        for x, y in strata.values():
            if len(x) + len(y) >= min_stratum:
                st, d, _ = chi2_homogeneity(x, y)
                stat, dof = stat + st, dof + d
    return stat, dof, float(chdtrc(dof, stat)) if dof else 1.0


def two_sample_test(a: list[list[int]], b: list[list[int]], m: int) -> dict:
    """One prompt's test that two decoders sample its first m tokens from one distribution: the
    stratified chi-square (`stratified_chi2`) gives `p_value`; the chi-square tests on the token
    at each position 1..m and on the whole m-token prefix are kept beside it as descriptions (on
    the study's model the stratified test rejects the planted sampler on 3 of 4 prompts at N =
    300 where the smallest of those, Bonferroni-corrected, did on 2)."""
    la, lb = prefix_labels(a, m), prefix_labels(b, m)
    pvals = [chi2_homogeneity([s[j] for s in la], [s[j] for s in lb])[2] for j in range(m)]
    return {"p_positions": pvals, "p_prefix": chi2_homogeneity(la, lb)[2], "p_value": stratified_chi2(la, lb, m)[2]}


def holm(pvalues, alpha: float) -> list[bool]:
    """Holm's step-down rejections at family-wise level `alpha`, in the order given."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    reject = [False] * len(pvalues)
    for rank, i in enumerate(order):
        if pvalues[i] > alpha / (len(pvalues) - rank):
            break
        reject[i] = True
    return reject


def two_sample_prompts(prompts: pd.DataFrame, ts: TwoSample) -> pd.DataFrame:
    """The prompts of the two-sample test (the `sampling.two_sample` section): the first of each
    domain, of its domains where it names them; engines sample the same (export-prompts --sampling)."""
    from orthrus.data.prompt_set import first_per_domain
    from orthrus.errors import InputError

    missing = sorted(set(ts.domains or []) - set(prompts["domain"]))
    if missing:  # a domain the prompt set lacks would be a test of nothing, said nowhere
        raise InputError(
            f"sampling.two_sample.domains: {missing} not among the evaluation prompts' domains "
            f"{sorted(set(prompts['domain']))}"
        )
    out = first_per_domain(prompts, ts.prompts_per_domain)
    return out[out["domain"].isin(ts.domains)] if ts.domains else out
