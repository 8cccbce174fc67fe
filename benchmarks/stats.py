"""Every interval and verdict the results pages state, each once, on scipy.stats (tests/test_stats.py holds each
against scipy's own result on a planted case).

    from stats import t_interval, paired, welch, verdict, bootstrap

- t_interval(x): the 95 % Student-t interval of mean(x) (one sample, or the per-seed differences of a pair).
- paired(a, b): a − b seed by seed, its mean and 95 % Student-t interval (scipy's ttest_rel).
- welch(x, mean, sd, n): the 95 % Welch interval of mean(x) − a published mean ± sd, the sd read as that of the
  publication's n seeds; both rows are estimates, so its spread widens the interval as ours does.
- verdict(diff, delta): compare.py's equivalence rule on paired differences: **agree** when the 95 % Student-t
  interval lies within ±δ, **differ** when it excludes 0 and |mean| exceeds δ, **undecided** otherwise or with fewer
  than MIN_SEEDS seeds. A t interval, not the bootstrap: over 3 seeds a percentile bootstrap lies within the seeds'
  range and covers far less than 95 %, which would call too much agreement.
- bootstrap(x): the 95 % percentile bootstrap interval of mean(x), seeds resampled with replacement (the toy's; with
  3 seeds it is the range, not a 95 % interval).
"""

import numpy as np
from scipy import stats

MIN_SEEDS = 3  # below this a verdict is "undecided" whatever the interval
NAN2 = (float("nan"), float("nan"))


def t_interval(x) -> tuple[float, float]:
    """95 % Student-t interval of the mean of x (nan, nan with fewer than 2 values)."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2:
        return NAN2
    if np.ptp(x) == 0:  # scipy gives nan for a zero spread; the interval is the point
        return float(x[0]), float(x[0])
    ci = stats.ttest_1samp(x, 0.0).confidence_interval(0.95)
    return float(ci.low), float(ci.high)


def t_half_width(n: int) -> float:
    """The 95 % Student-t interval's half-width over n values, in standard deviations: t(0.975, n − 1)/√n."""
    return float(stats.t.ppf(0.975, n - 1) / np.sqrt(n))


def paired(a, b) -> tuple[np.ndarray, float, float, float]:
    """(a − b, its mean, the 95 % Student-t interval of the mean): scipy's paired t-test."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff = a - b
    if len(diff) < 2 or np.ptp(diff) == 0:
        return (diff, float(diff.mean()) if len(diff) else float("nan"), *t_interval(diff))
    ci = stats.ttest_rel(a, b).confidence_interval(0.95)
    return diff, float(diff.mean()), float(ci.low), float(ci.high)


def welch(x, mean: float, sd: float, n: int) -> tuple[float, float]:
    """95 % Welch interval of mean(x) − `mean`, a published mean ± `sd` over `n` seeds: scipy's Welch test against the
    n-value sample with exactly that mean and sd (Welch's interval depends on nothing else)."""
    x = np.asarray(x, dtype=float)
    if x.var(ddof=1) == 0 and sd == 0:
        return float(x.mean() - mean), float(x.mean() - mean)
    z = np.linspace(-1.0, 1.0, n)
    ci = stats.ttest_ind(x, mean + sd * z / z.std(ddof=1), equal_var=False).confidence_interval(0.95)
    return float(ci.low), float(ci.high)


def verdict(diff, delta: float) -> tuple[str, float, float]:
    """(agree | differ | undecided, lo, hi) of paired differences against the margin ±delta (module docstring)."""
    diff = np.asarray(diff, dtype=float)
    lo, hi = t_interval(diff)
    if len(diff) < MIN_SEEDS:
        return "undecided", lo, hi
    if -delta <= lo and hi <= delta:
        return "agree", lo, hi
    if (lo > 0 or hi < 0) and abs(diff.mean()) > delta:
        return "differ", lo, hi
    return "undecided", lo, hi


def bootstrap(x, n_resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile bootstrap interval of mean(x) (scipy's bootstrap); the mean twice with fewer than 2 values."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        return float(x.mean()), float(x.mean())
    res = stats.bootstrap((x,), np.mean, n_resamples=n_resamples, method="percentile", rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)
