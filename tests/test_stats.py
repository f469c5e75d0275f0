"""orthrus.stats against hand-computed values."""

import functools
import math
import random

import numpy as np
import pytest

from orthrus.stats import (
    common_prefix_len,
    first_divergence,
    levenshtein,
    t_ci,
    t_halfwidth,
    wilson_ci,
)


def test_wilson_45_of_100():
    # p = .45, z = 1.959964, z^2 = 3.841459
    # centre = (p + z^2/2n) / (1 + z^2/n) = 0.4692073 / 1.0384146 = 0.451849
    # half   = z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n) = 1.959964 * 0.0507054 / 1.0384146 = 0.095704
    low, high = wilson_ci(45, 100)
    assert low == pytest.approx(0.451849 - 0.095704, abs=2e-6)
    assert high == pytest.approx(0.451849 + 0.095704, abs=2e-6)


def test_wilson_edges():
    low, high = wilson_ci(0, 10)
    assert low == pytest.approx(0.0, abs=1e-12)
    # z^2/(n+z^2) = 3.841459/13.841459 = 0.277532
    assert high == pytest.approx(0.277532, abs=2e-6)
    low, high = wilson_ci(10, 10)
    assert high == pytest.approx(1.0)
    assert low == pytest.approx(1 - 0.277532, abs=2e-6)
    assert all(math.isnan(v) for v in wilson_ci(0, 0))
    with pytest.raises(ValueError):
        wilson_ci(3, 2)


def test_t_ci_1234():
    # mean 2.5, sd = sqrt(5/3) = 1.290994, sem = 0.645497, t_{.975,3} = 3.182446 -> half 2.054260
    mean, low, high = t_ci([1, 2, 3, 4])
    assert mean == 2.5
    assert low == pytest.approx(2.5 - 2.054260, abs=1e-5)
    assert high == pytest.approx(2.5 + 2.054260, abs=1e-5)
    assert t_halfwidth([1, 2, 3, 4]) == pytest.approx(2.054260, abs=1e-5)


def test_t_ci_edges():
    assert all(math.isnan(v) for v in t_ci([]))
    mean, low, high = t_ci([5.0])
    assert mean == 5.0 and math.isnan(low) and math.isnan(high)
    assert t_ci([2.0, 2.0, 2.0]) == (2.0, 2.0, 2.0)
    mean, low, high = t_ci([1, 2, 3, 4, float("nan")])  # NaNs ignored
    assert mean == 2.5 and low == pytest.approx(0.44574, abs=1e-5)


@pytest.mark.parametrize(
    "a, b, div, cpl",
    [
        ([], [], None, 0),
        ([1, 2, 3], [1, 2, 3], None, 3),
        ([], [7], 0, 0),
        ([7], [], 0, 0),
        ([1, 2], [1, 2, 3], 2, 2),  # prefix of the other: divergence at the shorter length
        ([1, 2, 3, 4], [1, 2], 2, 2),
        ([1, 2, 3], [1, 9, 3], 1, 1),
        ([5, 2, 3], [1, 2, 3], 0, 0),
        (np.array([1, 2, 3]), (1, 2, 4), 2, 2),
    ],
)
def test_first_divergence_and_prefix(a, b, div, cpl):
    assert first_divergence(a, b) == div
    assert first_divergence(b, a) == div
    assert common_prefix_len(a, b) == cpl


@pytest.mark.parametrize(
    "a, b, d",
    [
        ([], [], 0),
        ([1, 2, 3], [], 3),
        ([], [4, 5], 2),
        ([1, 2, 3], [1, 2, 3], 0),
        ([1, 2, 3], [3, 2, 1], 2),
        ([1, 2, 3], [1, 3], 1),  # one deletion
        ([1, 3], [1, 2, 3], 1),  # one insertion
        ([1, 2, 3, 4], [2, 3, 4, 5], 2),  # shift: delete head, insert tail
        # "kitten" -> "sitting" as tokens: k->s, e->i, +g
        (list(b"kitten"), list(b"sitting"), 3),
        (list(b"flaw"), list(b"lawn"), 2),
    ],
)
def test_levenshtein_hand(a, b, d):
    assert levenshtein(a, b) == d
    assert levenshtein(b, a) == d


def _lev_ref(a, b):
    @functools.cache
    def f(i, j):
        if i == 0:
            return j
        if j == 0:
            return i
        return min(f(i - 1, j) + 1, f(i, j - 1) + 1, f(i - 1, j - 1) + (a[i - 1] != b[j - 1]))

    return f(len(a), len(b))


def test_levenshtein_matches_recursive_reference():
    rng = random.Random(0)
    for _ in range(200):
        a = tuple(rng.randrange(4) for _ in range(rng.randrange(9)))
        b = tuple(rng.randrange(4) for _ in range(rng.randrange(9)))
        assert levenshtein(a, b) == _lev_ref(a, b), (a, b)


def test_levenshtein_long_lists_fast():
    rng = random.Random(1)
    a = [rng.randrange(50) for _ in range(300)]
    b = list(a)
    b[100] = -1
    del b[200]
    assert levenshtein(a, b) == 2
    assert levenshtein(a, list(reversed(a))) <= 300


def test_paired_stderr_by_hand():
    from orthrus.stats import paired_stderr

    # d = [0, 0, 0, 1]: mean 0.25, sample variance (3 * 0.0625 + 0.5625) / 3 = 0.25, se = sqrt(0.25 / 4)
    assert paired_stderr([1, 1, 0, 1], [1, 1, 0, 0]) == pytest.approx(0.25)
    # d = [1, 2, 3, 4]: sample variance 5/3
    assert paired_stderr([2, 4, 6, 8], [1, 2, 3, 4]) == pytest.approx(math.sqrt(5 / 3 / 4))
    # a pair with a NaN is dropped, not the whole estimate
    assert paired_stderr([2, 4, math.nan, 6, 8], [1, 2, 0, 3, 4]) == pytest.approx(math.sqrt(5 / 3 / 4))
    assert paired_stderr([0.5, 0.5, 0.5], [0.2, 0.2, 0.2]) == 0.0  # identical differences
    assert math.isnan(paired_stderr([1.0], [0.0]))
    assert math.isnan(paired_stderr([1.0, math.nan], [0.0, 1.0]))
    assert math.isnan(paired_stderr([], []))
    with pytest.raises(ValueError):
        paired_stderr([1.0, 2.0], [1.0])


def test_combined_stderr():
    from orthrus.stats import combined_stderr

    assert combined_stderr(0.3, 0.4) == pytest.approx(0.5)
    assert combined_stderr(0.0, 0.0) == 0.0
    assert math.isnan(combined_stderr(math.nan, 0.1)) and math.isnan(combined_stderr(0.1, math.nan))


def test_tost_paired_hand_computed():
    """Differences 0, .1, .2 against a margin of .5: mean .1, sd .1, se .1/sqrt(3), df 2.
    t_high = (.1 - .5) / se = -4 sqrt(3); with 2 degrees of freedom the t CDF is
    1/2 + t / (2 sqrt(2 + t^2)), so p_high = 1/2 - 4 sqrt(3) / (2 sqrt(50)) = 1/2 - 0.4 sqrt(1.5);
    t_low = .6 / se = 6 sqrt(3), p_low = 1/2 - 6 sqrt(3) / (2 sqrt(110)) is the smaller one.
    The 90% interval is .1 +- t_.95,2 se = .1 +- 2.919986 * .057735."""
    from orthrus.stats import tost_paired

    r = tost_paired([0.1, 0.3, 0.5], [0.1, 0.2, 0.3], 0.5)
    assert r.diff == pytest.approx(0.1)
    assert r.t_high == pytest.approx(-4 * math.sqrt(3)) and r.t_low == pytest.approx(6 * math.sqrt(3))
    assert r.p_value == pytest.approx(0.5 - 0.4 * math.sqrt(1.5), abs=1e-12)
    assert r.df == 2
    assert (r.ci_low, r.ci_high) == pytest.approx(
        (0.1 - 2.919986 * 0.1 / math.sqrt(3), 0.1 + 2.919986 * 0.1 / math.sqrt(3)), abs=1e-6
    )
    assert r.p_value < 0.05  # equivalent at 5%
    assert tost_paired([0.1, 0.3, 0.5], [0.1, 0.2, 0.3], 0.15).p_value > 0.05  # not within a tighter margin


@pytest.mark.parametrize("seed", range(5))
def test_tost_paired_is_statsmodels_ttost_paired(seed):
    from statsmodels.stats.weightstats import ttost_paired

    from orthrus.stats import tost_paired

    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, 40).astype(float)
    b = np.where(rng.random(40) < 0.2, 1 - a, a)
    margin = [0.02, 0.1, 0.2, 0.3, 0.5][seed]
    p, (t1, p1, df1), (t2, p2, df2) = ttost_paired(a, b, -margin, margin)
    r = tost_paired(a, b, margin)
    assert r.p_value == pytest.approx(p, rel=1e-9) and (r.t_low, r.t_high, r.df) == pytest.approx((t1, t2, df1))


def test_tost_edges():
    from orthrus.stats import tost, tost_paired

    same = tost_paired([1.0, 0.0, 1.0], [1.0, 0.0, 1.0], 0.02)  # identical scores: no difference, exactly
    assert same.p_value == 0.0 and same.diff == same.ci_low == same.ci_high == 0.0
    assert tost_paired([1.0, 1.0], [0.0, 0.0], 0.5).p_value == 1.0  # a constant difference outside the margin
    assert math.isnan(tost(0.1, 0.01, 1, -1, 1).p_value)  # one pair
    assert math.isnan(tost(0.1, math.nan, 10, -1, 1).p_value)
    assert math.isnan(tost_paired([1.0, math.nan], [0.0, 1.0], 0.5).p_value)  # one pair left


def test_welch_from_summaries_is_scipy_welch():
    from scipy.stats import ttest_ind

    from orthrus.stats import welch

    rng = np.random.default_rng(3)
    a, b = rng.normal(2.0, 0.5, 30), rng.normal(1.7, 0.3, 150)
    se = lambda x: x.std(ddof=1) / math.sqrt(x.size)
    diff, low, high, p = welch(a.mean(), se(a), a.size, b.mean(), se(b), b.size)
    ref = ttest_ind(a, b, equal_var=False)
    assert diff == pytest.approx(a.mean() - b.mean()) and p == pytest.approx(ref.pvalue, rel=1e-9)
    ci = ref.confidence_interval(0.95)
    assert (low, high) == pytest.approx((ci.low, ci.high), rel=1e-9)
    assert all(math.isnan(v) for v in welch(1.0, 0.1, 1, 0.5, 0.1, 10))
