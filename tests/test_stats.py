"""benchmarks/stats.py: each interval and the verdict held against scipy's own result (or the textbook formula) on a
planted case."""

import numpy as np
import pytest
from scipy import stats as sp

from conftest import load_module

stats = load_module("benchmarks/stats.py", "stats_under_test")


def test_the_student_t_interval_is_scipys_one_sample_interval_and_the_formula():
    x = np.array([10.0, 20.0, 30.0])
    lo, hi = stats.t_interval(x)
    ci = sp.ttest_1samp(x, 0.0).confidence_interval()
    assert (lo, hi) == pytest.approx((ci.low, ci.high))
    assert (lo, hi) == pytest.approx((20 - 4.303 * 10 / np.sqrt(3), 20 + 4.303 * 10 / np.sqrt(3)), abs=0.01)
    assert stats.t_half_width(3) == pytest.approx(2.484, abs=1e-3)
    assert np.isnan(stats.t_interval([5.0])[0]) and stats.t_interval([4.0, 4.0]) == (4.0, 4.0)


def test_the_paired_interval_is_scipys_paired_t_test():
    a, b = np.array([11.0, 22.0, 33.0, 41.0]), np.array([10.0, 20.0, 30.0, 40.0])
    diff, mean, lo, hi = stats.paired(a, b)
    ci = sp.ttest_rel(a, b).confidence_interval()
    assert list(diff) == [1.0, 2.0, 3.0, 1.0] and mean == 1.75
    assert (lo, hi) == pytest.approx((ci.low, ci.high)) and (lo, hi) == pytest.approx(stats.t_interval(diff))


def test_the_welch_interval_is_scipys_welch_test_on_the_papers_seeds():
    """The paper's mean ± sd over n seeds stands for its seeds: the interval equals scipy's Welch test of our values
    against any n values with that mean and sd (here: planted seeds), and is wider than our own t interval."""
    x = np.array([5100.0, 5150.0, 5200.0, 5320.0])
    theirs = np.array([4400.0, 4700.0, 4900.0, 5000.0, 5339.5])
    ci = sp.ttest_ind(x, theirs, equal_var=False).confidence_interval()
    got = stats.welch(x, theirs.mean(), theirs.std(ddof=1), len(theirs))
    assert got == pytest.approx((ci.low, ci.high))
    own = stats.t_interval(x - theirs.mean())
    assert got[0] < own[0] and got[1] > own[1]


@pytest.mark.parametrize(
    "diff, verdict",
    [
        ([1.0, -1.0, 0.5], "agree"),  # the interval [-2.4, +2.7] lies within ±5
        ([20.0, 21.0, 22.0], "differ"),  # excludes 0, mean 21 > 5
        ([2.0, 3.0, 4.0], "undecided"),  # excludes 0 but the mean is inside ±5, and the interval is not
        ([1.0, -1.0], "undecided"),  # fewer than 3 seeds
        ([20.0, -20.0, 5.0], "undecided"),  # contains 0, wider than ±5
    ],
)
def test_the_verdict_is_the_equivalence_rule_on_scipys_interval(diff, verdict):
    got, lo, hi = stats.verdict(np.array(diff), 5.0)
    ci = sp.ttest_1samp(diff, 0.0).confidence_interval()
    assert got == verdict and (lo, hi) == pytest.approx((ci.low, ci.high))


def test_the_bootstrap_is_scipys_percentile_bootstrap():
    v = np.array([0.0, 0.0, 0.0, 0.0, 10.0, 3.0])
    res = sp.bootstrap((v,), np.mean, n_resamples=10_000, method="percentile", rng=np.random.default_rng(0))
    assert stats.bootstrap(v) == pytest.approx((res.confidence_interval.low, res.confidence_interval.high))
    assert stats.bootstrap([4.0, 4.0, 4.0]) == (4.0, 4.0) and stats.bootstrap([2.0]) == (2.0, 2.0)
    # many seeds: the resampled mean is close to normal, so the interval is mean ± 1.96·σ/√n (90 % would be ± 1.64)
    v = np.arange(20.0)
    half = 1.96 * v.std() / np.sqrt(len(v))
    lo, hi = stats.bootstrap(v)
    assert lo == pytest.approx(v.mean() - half, abs=0.2) and hi == pytest.approx(v.mean() + half, abs=0.2)
