"""Small statistics helpers shared by the analysis and figure stages.

Intervals: Wilson score intervals for match rates (as in the study's Tables 3, 4, 8) and
Student-t intervals for means (tokens per forward, perplexity). Standard errors of a score
difference, paired and independent (the benchmark agreement table), the paired equivalence
test (TOST) and Welch's test from summary statistics (the claims table). Trajectory comparison:
first divergence, common prefix length and token-level Levenshtein distance.

Perplexity itself is computed elsewhere (`orthrus.analysis.perplexity`) from log-probs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = [
    "wilson_ci",
    "t_ci",
    "t_halfwidth",
    "paired_stderr",
    "combined_stderr",
    "Tost",
    "tost",
    "tost_paired",
    "welch",
    "Pilot",
    "power",
    "needed_n",
    "first_divergence",
    "common_prefix_len",
    "levenshtein",
    "as_token_list",
]


def wilson_ci(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval for k successes out of n trials; (nan, nan) when n == 0."""
    from statsmodels.stats.proportion import proportion_confint

    k, n = int(k), int(n)
    if n <= 0:
        return (math.nan, math.nan)
    if not 0 <= k <= n:
        raise ValueError(f"wilson_ci: need 0 <= k <= n, got k={k}, n={n}")
    low, high = proportion_confint(k, n, alpha=alpha, method="wilson")
    return (float(low), float(high))


def t_ci(values, alpha: float = 0.05) -> tuple[float, float, float]:
    """(mean, low, high): Student-t confidence interval for the mean of `values`.

    NaNs are ignored. With no values everything is NaN; with one value the bounds are NaN;
    with zero spread the interval collapses onto the mean.
    """
    x = np.asarray(values, dtype=float).ravel()
    x = x[~np.isnan(x)]
    n = x.size
    if n == 0:
        return (math.nan, math.nan, math.nan)
    mean = float(x.mean())
    half = t_halfwidth(x, alpha)
    return (mean, mean - half, mean + half)


def t_halfwidth(values, alpha: float = 0.05) -> float:
    """Half-width of the Student-t confidence interval for the mean (NaN if fewer than 2 values)."""
    from scipy import stats as _st

    x = np.asarray(values, dtype=float).ravel()
    x = x[~np.isnan(x)]
    n = x.size
    if n < 2:
        return math.nan
    sem = float(x.std(ddof=1)) / math.sqrt(n)
    if sem == 0.0 or np.all(x == x[0]):
        return 0.0
    return float(_st.t.ppf(1.0 - alpha / 2.0, n - 1) * sem)


def paired_stderr(a, b) -> float:
    """Standard error of the mean paired difference, mean(a_i - b_i): sqrt(var(d) / n), with
    the sample variance (n - 1).

    Pairs in which either value is NaN are dropped; with fewer than two pairs left the result
    is NaN. Summed in plain Python, in order (not numpy's pairwise sums), so tables written
    with it keep their digits.
    """
    pairs = [(float(x), float(y)) for x, y in zip(a, b, strict=True)]
    diffs = [x - y for x, y in pairs if not (math.isnan(x) or math.isnan(y))]
    n = len(diffs)
    if n < 2:
        return math.nan
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1)
    return math.sqrt(var / n)


def combined_stderr(se_a: float, se_b: float) -> float:
    """Standard error of the difference of two independent estimates: sqrt(se_a^2 + se_b^2);
    NaN if either is NaN."""
    se_a, se_b = float(se_a), float(se_b)
    if math.isnan(se_a) or math.isnan(se_b):
        return math.nan
    return math.sqrt(se_a**2 + se_b**2)


class Tost(NamedTuple):
    """A two one-sided tests (TOST) result: the mean difference, its (1 - 2 alpha) interval (the one
    that lies inside the margins exactly when the test rejects), the larger of the two one-sided
    p-values, the two t statistics (H0: mean <= low; H0: mean >= high) and the degrees of freedom."""

    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    t_low: float
    t_high: float
    df: float


def tost(mean: float, se: float, n: int, low: float, high: float, alpha: float = 0.05) -> Tost:
    """TOST of a mean difference against the equivalence bounds (low, high), from its mean, standard
    error and number of pairs (t with n - 1 degrees of freedom): equivalent at `alpha` when
    `p_value < alpha`. With zero spread (every pair differs by the same amount, e.g. all scores
    equal) the difference is known exactly: p is 0 inside the bounds and 1 outside. Fewer than two
    pairs, or a NaN input: every field NaN."""
    from scipy import stats as _st

    mean, se, n = float(mean), float(se), int(n)
    nan = Tost(math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan)
    if n < 2 or math.isnan(mean) or math.isnan(se) or se < 0 or not low < high:
        return nan
    df = float(n - 1)
    if se == 0.0:

        def t(x):
            return math.copysign(math.inf, x) if x else 0.0

        return Tost(mean, mean, mean, 0.0 if low < mean < high else 1.0, t(mean - low), t(mean - high), df)
    t_low, t_high = (mean - low) / se, (mean - high) / se
    p = max(float(_st.t.sf(t_low, df)), float(_st.t.cdf(t_high, df)))
    half = float(_st.t.ppf(1.0 - alpha, df)) * se
    return Tost(mean, mean - half, mean + half, p, t_low, t_high, df)


def tost_paired(a, b, margin: float, alpha: float = 0.05) -> Tost:
    """Paired TOST of mean(a_i - b_i) against (-margin, margin) (`statsmodels.stats.weightstats.
    ttost_paired(a, b, -margin, margin)`); pairs with a NaN are dropped."""
    pairs = [(float(x), float(y)) for x, y in zip(a, b, strict=True)]
    d = [x - y for x, y in pairs if not (math.isnan(x) or math.isnan(y))]
    mean = sum(d) / len(d) if d else math.nan
    return tost(mean, paired_stderr([x for x, _ in pairs], [y for _, y in pairs]), len(d), -margin, margin, alpha)


def welch(
    mean_a: float, se_a: float, n_a: int, mean_b: float, se_b: float, n_b: int, alpha: float = 0.05
) -> tuple[float, float, float, float]:
    """Welch's test of mean_a - mean_b from each group's mean, standard error and size:
    (difference, its two-sided (1 - alpha) interval, two-sided p-value); NaN where a group has
    fewer than two values or an input is NaN."""
    from scipy import stats as _st

    vals = [float(v) for v in (mean_a, se_a, mean_b, se_b)]
    if min(int(n_a), int(n_b)) < 2 or any(math.isnan(v) for v in vals):
        return (math.nan, math.nan, math.nan, math.nan)
    mean_a, se_a, mean_b, se_b = vals
    diff = mean_a - mean_b
    var = se_a**2 + se_b**2
    if var == 0.0:
        return (diff, diff, diff, 1.0 if diff == 0 else 0.0)
    df = var**2 / (se_a**4 / (int(n_a) - 1) + se_b**4 / (int(n_b) - 1))
    se = math.sqrt(var)
    half = float(_st.t.ppf(1.0 - alpha / 2.0, df)) * se
    return (diff, diff - half, diff + half, float(2.0 * _st.t.sf(abs(diff) / se, df)))


def as_token_list(x) -> list[int]:
    """Tokens as a plain list of ints (accepts lists, tuples, numpy arrays, Arrow-backed values)."""
    if x is None:
        return []
    if isinstance(x, float) and math.isnan(x):
        return []
    return [int(t) for t in x]


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first position where `a` and `b` differ; None if they are identical.

    A length difference counts as a divergence at the shorter length (one trajectory
    stopped, the other went on).
    """
    a = as_token_list(a)
    b = as_token_list(b)
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    if len(a) != len(b):
        return n
    return None


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading tokens `a` and `b` share."""
    a = as_token_list(a)
    b = as_token_list(b)
    d = first_divergence(a, b)
    return len(a) if d is None else d


def levenshtein(a: Sequence[int], b: Sequence[int]) -> int:
    """Token-level edit distance (insertions, deletions, substitutions, each of cost 1)."""
    a = as_token_list(a)
    b = as_token_list(b)
    # Common prefix and suffix never change the distance; strip them first.
    p = 0
    while p < len(a) and p < len(b) and a[p] == b[p]:
        p += 1
    a, b = a[p:], b[p:]
    s = 0
    while s < len(a) and s < len(b) and a[-1 - s] == b[-1 - s]:
        s += 1
    if s:
        a, b = a[:-s], b[:-s]
    if not a:
        return len(b)
    if not b:
        return len(a)
    if len(a) < len(b):
        a, b = b, a
    bb = np.asarray(b, dtype=np.int64)
    m = bb.size
    idx = np.arange(m + 1, dtype=np.int64)
    prev = idx.copy()
    for i, ta in enumerate(a, start=1):
        # substitution (diagonal) and deletion (from above), vectorised
        cur = np.empty(m + 1, dtype=np.int64)
        cur[0] = i
        cur[1:] = np.minimum(prev[:-1] + (bb != ta), prev[1:] + 1)
        # insertion (from the left): cur[j] = min_k<=j cur[k] + (j - k)
        cur = np.minimum.accumulate(cur - idx) + idx
        prev = cur
    return int(prev[-1])


# ---- power planned before a run (orthrus/report/claims/power.py, orthrus/power.py)


@dataclass(frozen=True)
class Pilot:
    """A claim's test as a pilot run measured it: the power of the same test at another n follows, its
    standard error shrinking as 1 / sqrt(n)."""

    effect: float  # the pilot's estimate
    se: float  # its standard error
    n: int  # the prompts it rested on

    def z(self, n: int) -> float:
        """The effect over its standard error at n prompts."""
        return abs(self.effect) / (self.se * math.sqrt(self.n / n)) if n > 0 else 0.0


def power(pilot: Pilot, n: int, alpha: float) -> float:
    """The probability that a two-sided level-alpha test of the pilot's effect rejects at n prompts
    (the normal approximation; the far tail left out)."""
    from scipy.stats import norm

    return float(norm.cdf(pilot.z(n) - norm.ppf(1 - alpha / 2)))


def needed_n(pilot: Pilot, alpha: float, target: float) -> int:
    """The fewest prompts at which `power` reaches `target`."""
    from scipy.stats import norm

    z = norm.ppf(1 - alpha / 2) + norm.ppf(target)
    return math.ceil(pilot.n * (z * pilot.se / abs(pilot.effect)) ** 2)
