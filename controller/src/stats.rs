//! Statistics for the report: medians with confidence intervals, and comparing two brokers.
//!
//! Each test runs N times (typically 2 to 20), giving one figure per repetition (a median
//! latency, a sustained rate). Such samples are small and often skewed, so everything here is
//! rank- or order-based and assumes no distribution.
//!
//! # Methods and why
//! - [`median`]: the centre of the repetitions, robust to one slow outlier run.
//! - [`order_statistic_median_ci`] (**primary**): the textbook exact, distribution-free
//!   interval `[x(k), x(n-k+1)]`. Its coverage `1 - 2 P(Binom(n, 1/2) <= k-1)` holds for any
//!   continuous distribution at every n (conservative with ties), needs no seed, and is
//!   returned with the interval, so the report states what it actually guarantees. It is
//!   honest about small n: 95 % needs n >= 6, and for n = 6 to 8 the interval is [min, max].
//! - [`bootstrap_median_ci`]: the percentile bootstrap (Efron & Tibshirani 1993, ch. 13),
//!   seeded with a built-in SplitMix64 so reports are reproducible. Kept as a secondary
//!   method: for the median at small n the bootstrap distribution is lumpy (resampled medians
//!   are sample values or midpoints) and the interval too narrow, so it is flagged unreliable
//!   below [`BOOTSTRAP_RELIABLE_MIN_N`] repetitions.
//! - [`mann_whitney_u`]: are two brokers different? The Mann-Whitney U test (1947) needs no
//!   normality. Without ties and with at most [`EXACT_MAX_TOTAL`] values in all, the two-sided
//!   p-value is exact (the null distribution of U counted by Mann & Whitney's recurrence), as
//!   R's `wilcox.test` does; otherwise the normal approximation with tie and continuity
//!   corrections, as R and SciPy do.
//! - [`cliffs_delta`]: by how much? Cliff's delta (Cliff 1993), `P(a > b) - P(a < b)`, is the
//!   effect size that matches U (`delta = 2 U_a / (n_a n_b) - 1`), with the magnitude labels
//!   of Romano et al. (2006) in [`Magnitude`].
//!
//! # Input
//! NaN values are dropped everywhere. Infinities are kept as ordinary ordered values; where
//! two values must be averaged (an even-sized median) and they are -inf and +inf, the result
//! is undefined and the function returns `None`. No function panics.

/// Bootstrap intervals from fewer values than this are flagged unreliable.
pub const BOOTSTRAP_RELIABLE_MIN_N: usize = 5;

/// Resamples beyond this are not drawn (memory and time stay bounded); 1e6 is plenty.
pub const BOOTSTRAP_MAX_RESAMPLES: u32 = 1_000_000;

/// The exact Mann-Whitney p-value is used up to this many values in both samples together
/// (20 + 20 repetitions); its cost grows as `(n_a * n_b)^2 / 4`.
pub const EXACT_MAX_TOTAL: usize = 40;

/// A confidence interval for a median.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
    /// Coverage probability: exact for [`order_statistic_median_ci`], the requested
    /// (nominal) confidence for [`bootstrap_median_ci`].
    pub coverage: f64,
    /// Whether the interval can be quoted at the requested confidence: for the order
    /// statistic, `coverage` reaches it; for the bootstrap, n >= [`BOOTSTRAP_RELIABLE_MIN_N`].
    pub reliable: bool,
}

/// How a Mann-Whitney p-value was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PValueMethod {
    /// Exact null distribution of U (no ties, at most [`EXACT_MAX_TOTAL`] values).
    Exact,
    /// Normal approximation with tie correction and continuity correction.
    Normal,
}

/// The result of a two-sided Mann-Whitney U test of `a` against `b`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MannWhitney {
    /// U for `a`: the pairs with `a_i > b_j`, ties counting one half (R's `W`, SciPy's
    /// `statistic` for `mannwhitneyu(a, b)`).
    pub u_a: f64,
    /// U for `b`: `n_a * n_b - u_a`.
    pub u_b: f64,
    /// Two-sided p-value, in [0, 1].
    pub p_value: f64,
    /// Exact or normal approximation.
    pub method: PValueMethod,
    /// Values of `a` used (NaN dropped).
    pub n_a: usize,
    /// Values of `b` used (NaN dropped).
    pub n_b: usize,
}

/// Magnitude of Cliff's delta, by the thresholds of Romano et al. (2006) on `|delta|`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Magnitude {
    /// `|delta| < 0.147`.
    Negligible,
    /// `0.147 <= |delta| < 0.33`.
    Small,
    /// `0.33 <= |delta| < 0.474`.
    Medium,
    /// `|delta| >= 0.474`.
    Large,
}

impl Magnitude {
    /// The magnitude of a Cliff's delta; `None` for NaN.
    pub fn from_delta(delta: f64) -> Option<Self> {
        let d = delta.abs();
        if d.is_nan() {
            None
        } else if d < 0.147 {
            Some(Self::Negligible)
        } else if d < 0.33 {
            Some(Self::Small)
        } else if d < 0.474 {
            Some(Self::Medium)
        } else {
            Some(Self::Large)
        }
    }

    /// Lower-case label for the report.
    pub fn label(self) -> &'static str {
        match self {
            Self::Negligible => "negligible",
            Self::Small => "small",
            Self::Medium => "medium",
            Self::Large => "large",
        }
    }
}

/// The median of `values` (mean of the two middle values for an even count), NaN ignored.
///
/// `None` when no value is left, or when the two middle values are -inf and +inf.
pub fn median(values: &[f64]) -> Option<f64> {
    median_in_place(&mut clean(values))
}

/// The exact distribution-free confidence interval for the median (the primary method).
///
/// With the n values sorted, picks the largest `k` such that `[x(k), x(n-k+1)]` covers the
/// true median with probability `1 - 2 P(Binom(n, 1/2) <= k-1) >= confidence` and returns
/// that coverage. When even `[x(1), x(n)]` falls short (95 %: n <= 5) it is returned with its
/// smaller coverage and `reliable: false`. NaN ignored; `None` for fewer than 2 values or a
/// confidence outside (0, 1). Cost O(n log n).
pub fn order_statistic_median_ci(values: &[f64], confidence: f64) -> Option<Interval> {
    let mut v = clean(values);
    if v.len() < 2 || !valid_confidence(confidence) {
        return None;
    }
    v.sort_unstable_by(f64::total_cmp);
    let n = v.len();
    let (k, coverage) = order_statistic_rank(n, confidence);
    Some(Interval {
        low: *v.get(k.saturating_sub(1))?,
        high: *v.get(n - k)?,
        coverage,
        reliable: coverage >= confidence - COVERAGE_SLACK,
    })
}

/// A percentile-bootstrap confidence interval for the median, deterministic given `seed`.
///
/// Draws `resamples` (at most [`BOOTSTRAP_MAX_RESAMPLES`]) resamples of the n values with
/// replacement, using SplitMix64, and returns the `(1 - confidence) / 2` and
/// `(1 + confidence) / 2` quantiles of their medians (linear interpolation, R type 7).
/// `coverage` is the nominal `confidence`; below [`BOOTSTRAP_RELIABLE_MIN_N`] values the
/// interval is too narrow and `reliable` is false. NaN ignored; `None` for fewer than 2
/// values, no resamples, a confidence outside (0, 1), or an undefined resample median.
pub fn bootstrap_median_ci(
    values: &[f64],
    confidence: f64,
    resamples: u32,
    seed: u64,
) -> Option<Interval> {
    let v = clean(values);
    let n = v.len();
    if n < 2 || resamples == 0 || !valid_confidence(confidence) {
        return None;
    }
    let b = resamples.min(BOOTSTRAP_MAX_RESAMPLES) as usize;
    let mut rng = SplitMix64::new(seed);
    let mut buf = vec![0.0; n];
    let mut medians = Vec::with_capacity(b);
    for _ in 0..b {
        for slot in buf.iter_mut() {
            *slot = *v.get(rng.below(n))?;
        }
        medians.push(median_in_place(&mut buf)?);
    }
    medians.sort_unstable_by(f64::total_cmp);
    let alpha = 1.0 - confidence;
    Some(Interval {
        low: quantile_sorted(&medians, alpha / 2.0)?,
        high: quantile_sorted(&medians, 1.0 - alpha / 2.0)?,
        coverage: confidence,
        reliable: n >= BOOTSTRAP_RELIABLE_MIN_N,
    })
}

/// The Hodges-Lehmann shift of `b` against `a` (the median of all differences `b_j - a_i`)
/// with its distribution-free confidence interval (Lehmann 1975, ch. 2; Bauer 1972): with
/// the m*n differences sorted, `[d(k), d(mn-k+1)]` covers the true shift with probability
/// `1 - 2 P(U <= k-1)` under the Mann-Whitney null distribution (exact up to
/// [`EXACT_MAX_TOTAL`] values, normal beyond). As for the median, the largest `k` that reaches
/// `confidence` is taken, or the widest interval with its smaller coverage and
/// `reliable: false`. Returns the estimate and the interval; `None` for an empty side or a
/// confidence outside (0, 1). NaN ignored.
pub fn shift_ci(a: &[f64], b: &[f64], confidence: f64) -> Option<(f64, Interval)> {
    let (a, b) = (clean(a), clean(b));
    if a.is_empty() || b.is_empty() || !valid_confidence(confidence) {
        return None;
    }
    let mut differences: Vec<f64> = b
        .iter()
        .flat_map(|bj| a.iter().map(move |ai| bj - ai))
        .collect();
    differences.sort_unstable_by(f64::total_cmp);
    let estimate = median_in_place(&mut differences.clone())?;
    let (m, n) = (a.len(), b.len());
    let mn = differences.len();
    // P(U <= u) for u = 0..: exact counts, or the normal approximation.
    let cdf: Box<dyn Fn(usize) -> f64> = if m + n <= EXACT_MAX_TOTAL {
        let counts = u_null_counts(m, n);
        let total: f64 = counts.iter().sum();
        let mut running = Vec::with_capacity(counts.len());
        let mut sum = 0.0;
        for count in counts {
            sum += count;
            running.push(sum / total);
        }
        Box::new(move |u| running.get(u).copied().unwrap_or(1.0))
    } else {
        let (mf, nf) = (m as f64, n as f64);
        let mean = mf * nf / 2.0;
        let sd = (mf * nf * (mf + nf + 1.0) / 12.0).sqrt();
        Box::new(move |u| {
            let z = (u as f64 + 0.5 - mean) / sd;
            erfc(-z / std::f64::consts::SQRT_2) / 2.0
        })
    };
    let mut best = (1, (1.0 - 2.0 * cdf(0)).max(0.0));
    for k in 2..=mn.div_ceil(2) {
        let coverage = (1.0 - 2.0 * cdf(k - 1)).max(0.0);
        if coverage < confidence - COVERAGE_SLACK {
            break;
        }
        best = (k, coverage);
    }
    let (k, coverage) = best;
    Some((
        estimate,
        Interval {
            low: *differences.get(k - 1)?,
            high: *differences.get(mn - k)?,
            coverage,
            reliable: coverage >= confidence - COVERAGE_SLACK,
        },
    ))
}

/// The two-sided Mann-Whitney U test (Wilcoxon rank-sum test) of `a` against `b`.
///
/// Exact p-value without ties when `n_a + n_b <= EXACT_MAX_TOTAL`, otherwise the normal
/// approximation with tie and continuity corrections (as R's `wilcox.test` and SciPy's
/// `mannwhitneyu(method="asymptotic")`). NaN ignored; `None` if either sample is empty.
pub fn mann_whitney_u(a: &[f64], b: &[f64]) -> Option<MannWhitney> {
    let (a, b) = (clean(a), clean(b));
    let (n_a, n_b) = (a.len(), b.len());
    if n_a == 0 || n_b == 0 {
        return None;
    }
    // Pool with a sample flag, sort, and give each run of equal values its mid-rank.
    let mut pooled: Vec<(f64, bool)> = a
        .iter()
        .map(|&x| (x, true))
        .chain(b.iter().map(|&x| (x, false)))
        .collect();
    pooled.sort_unstable_by(|x, y| x.0.total_cmp(&y.0));
    let mut rank_sum_a = 0.0;
    let mut tie_term = 0.0; // sum of t^3 - t over runs of t equal values
    let mut start = 0;
    for run in pooled.chunk_by(|x, y| x.0 == y.0) {
        let t = run.len();
        let mid_rank = start as f64 + (t as f64 + 1.0) / 2.0;
        let in_a = run.iter().filter(|x| x.1).count();
        rank_sum_a += mid_rank * in_a as f64;
        let tf = t as f64;
        tie_term += tf * tf * tf - tf;
        start += t;
    }
    let (m, n) = (n_a as f64, n_b as f64);
    let u_a = rank_sum_a - m * (m + 1.0) / 2.0;
    let u_b = m * n - u_a;
    let ties = tie_term > 0.0;
    let (p_value, method) = if !ties && n_a + n_b <= EXACT_MAX_TOTAL {
        (exact_p(n_a, n_b, u_a.min(u_b)), PValueMethod::Exact)
    } else {
        (normal_p(m, n, u_a, tie_term), PValueMethod::Normal)
    };
    Some(MannWhitney {
        u_a,
        u_b,
        p_value,
        method,
        n_a,
        n_b,
    })
}

/// Cliff's delta, `P(a > b) - P(a < b)` over all pairs, in [-1, 1]; positive when `a` tends
/// to be larger. NaN ignored; `None` if either sample is empty. Label it with
/// [`Magnitude::from_delta`]. Cost O((n_a + n_b) log n_b).
pub fn cliffs_delta(a: &[f64], b: &[f64]) -> Option<f64> {
    let a = clean(a);
    let mut b = clean(b);
    if a.is_empty() || b.is_empty() {
        return None;
    }
    b.sort_unstable_by(f64::total_cmp);
    let (mut greater, mut less) = (0u128, 0u128);
    for &x in &a {
        let below = b.partition_point(|&y| y < x);
        let not_above = b.partition_point(|&y| y <= x);
        greater += below as u128;
        less += (b.len() - not_above) as u128;
    }
    let pairs = a.len() as f64 * b.len() as f64;
    Some(((greater as f64 - less as f64) / pairs).clamp(-1.0, 1.0))
}

/// Tolerance when comparing a computed coverage with the requested confidence.
const COVERAGE_SLACK: f64 = 1e-12;

/// The values without NaN.
fn clean(values: &[f64]) -> Vec<f64> {
    values.iter().copied().filter(|x| !x.is_nan()).collect()
}

fn valid_confidence(confidence: f64) -> bool {
    confidence > 0.0 && confidence < 1.0
}

/// Median by selection (reorders `v`); `v` holds no NaN.
fn median_in_place(v: &mut [f64]) -> Option<f64> {
    let n = v.len();
    if n == 0 {
        return None;
    }
    let (lower, upper, _) = v.select_nth_unstable_by(n / 2, f64::total_cmp);
    let upper = *upper;
    if n % 2 == 1 {
        return Some(upper);
    }
    let lower = lower.iter().copied().max_by(f64::total_cmp)?;
    lerp(lower, upper, 0.5)
}

/// Interpolates between `a <= b` without overflow; `None` between -inf and +inf.
fn lerp(a: f64, b: f64, t: f64) -> Option<f64> {
    if a == b || t <= 0.0 {
        return Some(a);
    }
    if t >= 1.0 {
        return Some(b);
    }
    if a.is_infinite() && b.is_infinite() {
        return None;
    }
    let d = b - a;
    let v = if d.is_finite() {
        a + d * t
    } else {
        a * (1.0 - t) + b * t
    };
    Some(v.max(a).min(b))
}

/// Quantile `p` of sorted, non-empty `v` (R type 7).
fn quantile_sorted(v: &[f64], p: f64) -> Option<f64> {
    let h = (v.len().checked_sub(1)? as f64) * p.clamp(0.0, 1.0);
    let i = h.floor() as usize;
    let lo = *v.get(i)?;
    let hi = v.get(i + 1).copied().unwrap_or(lo);
    lerp(lo, hi, h - h.floor())
}

/// For n >= 2: the largest rank `k` whose interval `[x(k), x(n-k+1)]` reaches `confidence`,
/// or 1 if none does, and its coverage `1 - 2 P(X <= k-1)`, X ~ Binom(n, 1/2).
/// The binomial terms are carried in logs so that large n does not underflow.
fn order_statistic_rank(n: usize, confidence: f64) -> (usize, f64) {
    let nf = n as f64;
    let mut ln_pmf = -nf * std::f64::consts::LN_2; // ln P(X = 0)
    let mut cdf = 0.0;
    let mut best = (1, 0.0);
    for k in 1..=n.div_ceil(2) {
        cdf += ln_pmf.exp(); // now P(X <= k-1)
        let coverage = (1.0 - 2.0 * cdf).max(0.0);
        let reached = coverage >= confidence - COVERAGE_SLACK;
        if reached || k == 1 {
            best = (k, coverage); // k = 1 is kept even when short: the widest interval
        }
        if !reached {
            break;
        }
        // P(X = k) = P(X = k-1) * (n - k + 1) / k
        ln_pmf += ((nf - k as f64 + 1.0) / k as f64).ln();
    }
    best
}

/// Exact two-sided p-value `min(1, 2 P(U <= u_min))` for sample sizes `m`, `n` without ties.
fn exact_p(m: usize, n: usize, u_min: f64) -> f64 {
    let counts = u_null_counts(m, n);
    let total: f64 = counts.iter().sum();
    // u_min is an integer without ties; `as` saturates, so this cannot go wrong.
    let upto = u_min.round().max(0.0) as usize;
    let tail: f64 = counts.iter().take(upto.saturating_add(1)).sum();
    if total > 0.0 {
        (2.0 * tail / total).min(1.0)
    } else {
        1.0
    }
}

/// How many of the C(m+n, m) orderings give each U = 0..=m*n, by Mann & Whitney's (1947)
/// recurrence on the largest value: `f(i, j; u) = f(i-1, j; u-j) + f(i, j-1; u)`.
/// Counts stay below C(40, 20) < 2^53 within [`EXACT_MAX_TOTAL`], so they are exact in f64.
fn u_null_counts(m: usize, n: usize) -> Vec<f64> {
    // prev[j] = f(i-1, j; .), starting from f(0, j) = [1].
    let mut prev: Vec<Vec<f64>> = vec![vec![1.0]; n + 1];
    for i in 1..=m {
        let mut cur: Vec<Vec<f64>> = Vec::with_capacity(n + 1);
        cur.push(vec![1.0]); // f(i, 0)
        for (j, above) in prev.iter().enumerate().skip(1) {
            let mut f = vec![0.0; i * j + 1];
            // The largest value is from the first sample: it beats all j of the second.
            for (dst, src) in f.iter_mut().skip(j).zip(above) {
                *dst += src;
            }
            // The largest value is from the second sample.
            if let Some(left) = cur.last() {
                for (dst, src) in f.iter_mut().zip(left) {
                    *dst += src;
                }
            }
            cur.push(f);
        }
        prev = cur;
    }
    prev.pop().unwrap_or_default()
}

/// Two-sided normal-approximation p-value with tie and continuity corrections.
fn normal_p(m: f64, n: f64, u_a: f64, tie_term: f64) -> f64 {
    let total = m + n;
    let mean = m * n / 2.0;
    let var = m * n / 12.0 * ((total + 1.0) - tie_term / (total * (total - 1.0)));
    if !(var > 0.0 && var.is_finite()) {
        return 1.0; // all values tied: no evidence of a difference
    }
    let z = ((u_a - mean).abs() - 0.5).max(0.0) / var.sqrt();
    erfc(z / std::f64::consts::SQRT_2).min(1.0)
}

/// The complementary error function: a positive-term series for erf below 1, a continued
/// fraction (modified Lentz) above; within 1e-14 relative of SciPy up to x = 26.
fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    if x >= 27.0 {
        return 0.0; // below 5e-319
    }
    let x2 = x * x;
    if x < 1.0 {
        // erf(x) = 2/sqrt(pi) e^(-x^2) sum_k (2x^2)^k x / (1*3*...*(2k+1))
        let (mut term, mut sum) = (x, x);
        for k in 1..200 {
            term *= 2.0 * x2 / (2 * k + 1) as f64;
            sum += term;
            if term < sum * 1e-17 {
                break;
            }
        }
        1.0 - std::f64::consts::FRAC_2_SQRT_PI * (-x2).exp() * sum
    } else {
        // erfc(x) = e^(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))
        let tiny = 1e-300;
        let (mut f, mut c, mut d) = (x, x, 0.0);
        for k in 1..1000 {
            let a = k as f64 / 2.0;
            d = x + a * d;
            if d.abs() < tiny {
                d = tiny;
            }
            c = x + a / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        (-x2).exp() / (f * std::f64::consts::PI.sqrt())
    }
}

/// SplitMix64 (Steele, Lea & Flood 2014): tiny, fast, passes BigCrush; ample for resampling.
struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0) by Lemire's multiply-shift; bias below n / 2^64.
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Relative closeness (absolute near zero).
    fn close(got: f64, want: f64, rel: f64) -> bool {
        (got - want).abs() <= rel * want.abs().max(1e-300)
    }

    fn assert_close(got: f64, want: f64, rel: f64) {
        assert!(close(got, want, rel), "got {got:e}, want {want:e}");
    }

    /// Deterministic N(0, 1) values by Box-Muller.
    fn normal_sample(n: usize, seed: u64) -> Vec<f64> {
        let mut rng = SplitMix64::new(seed);
        let mut unit = || ((rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64; // (0, 1]
        (0..n)
            .map(|_| {
                let (u, v) = (unit(), unit());
                (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
            })
            .collect()
    }

    #[test]
    fn splitmix64_matches_the_reference_output() {
        // Rosetta Code, "Pseudo-random numbers/Splitmix64": the first five outputs for seed 1234567.
        let mut rng = SplitMix64::new(1234567);
        for want in [
            6457827717110365317,
            3203168211198807973,
            9817491932198370423,
            4593380528125082431,
            16408922859458223821,
        ] {
            assert_eq!(rng.next_u64(), want);
        }
    }

    #[test]
    fn erfc_matches_scipy() {
        // scipy.special.erfc, SciPy 1.17.1.
        for (x, want) in [
            (0.1, 0.8875370839817152),
            (1.0, 0.15729920705028516),
            (2.0, 0.004677734981047266),
            (2.5, 0.00040695201744495886),
            (3.0, 2.2090496998585445e-05),
            (6.0, 2.1519736712498913e-17),
            (20.0, 5.395865611607901e-176),
        ] {
            assert_close(erfc(x), want, 1e-13);
        }
        assert_close(erfc(-1.0), 2.0 - 0.15729920705028516, 1e-15);
        assert_eq!(erfc(0.0), 1.0);
        assert_eq!(erfc(f64::INFINITY), 0.0);
        assert_eq!(erfc(f64::NEG_INFINITY), 2.0);
    }

    #[test]
    fn median_of_odd_even_and_edge_cases() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[7.5]), Some(7.5));
        assert_eq!(median(&[2.0, 2.0, 2.0, 2.0]), Some(2.0));
        assert_eq!(median(&[f64::NAN, 3.0, f64::NAN, 1.0]), Some(2.0));
        assert_eq!(median(&[f64::NAN, f64::NAN]), None);
        assert_eq!(median(&[f64::NEG_INFINITY, 1.0, f64::INFINITY]), Some(1.0));
        assert_eq!(median(&[1.0, f64::INFINITY]), Some(f64::INFINITY));
        assert_eq!(median(&[f64::NEG_INFINITY, f64::INFINITY]), None);
        assert_eq!(median(&[f64::MAX, f64::MAX]), Some(f64::MAX));
        assert_eq!(median(&[-f64::MAX, f64::MAX]), Some(0.0));
    }

    #[test]
    fn order_statistic_ranks_and_coverage_match_scipy_binom() {
        // (n, k, 1 - 2 * scipy.stats.binom.cdf(k - 1, n, 0.5)) for the largest k reaching 95 %,
        // SciPy 1.17.1. n = 10 -> [x(2), x(9)] and n = 20 -> [x(6), x(15)] are also the
        // entries of the classic tables (e.g. Conover, Practical Nonparametric Statistics).
        for (n, k, coverage) in [
            (6, 1, 0.96875),
            (7, 1, 0.984375),
            (10, 2, 0.978515625),
            (15, 4, 0.96484375),
            (20, 6, 0.9586105346679688),
            (50, 18, 0.9671608624357315),
            (100, 40, 0.9647997997822951),
            (1000, 469, 0.9537088026395019),
        ] {
            let values: Vec<f64> = (1..=n).rev().map(f64::from).collect();
            let ci = order_statistic_median_ci(&values, 0.95).unwrap();
            assert_eq!(ci.low, f64::from(k), "n = {n}");
            assert_eq!(ci.high, f64::from(n - k + 1), "n = {n}");
            assert_close(ci.coverage, coverage, 1e-12);
            assert!(ci.reliable);
        }
        // 90 % with n = 10: k = 3 gives 0.890625 < 0.9, so k = 2 (0.978515625) again.
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        let ci = order_statistic_median_ci(&ten, 0.90).unwrap();
        assert_eq!((ci.low, ci.high), (2.0, 9.0));
    }

    #[test]
    fn order_statistic_ci_when_the_confidence_is_out_of_reach() {
        // n = 5: even [x(1), x(5)] only covers 1 - 2/32 = 0.9375 < 0.95.
        let ci = order_statistic_median_ci(&[5.0, 1.0, 4.0, 2.0, 3.0], 0.95).unwrap();
        assert_eq!((ci.low, ci.high), (1.0, 5.0));
        assert_eq!(ci.coverage, 0.9375);
        assert!(!ci.reliable);
        // ... but 0.9375 itself is reachable.
        assert!(
            order_statistic_median_ci(&[5.0, 1.0, 4.0, 2.0, 3.0], 0.9375)
                .unwrap()
                .reliable
        );
        let two = order_statistic_median_ci(&[2.0, 1.0], 0.95).unwrap();
        assert_eq!((two.low, two.high, two.coverage), (1.0, 2.0, 0.5));
        assert_eq!(order_statistic_median_ci(&[1.0], 0.95), None);
        assert_eq!(order_statistic_median_ci(&[], 0.95), None);
        assert_eq!(order_statistic_median_ci(&[1.0, f64::NAN], 0.95), None);
        for bad in [0.0, 1.0, 1.5, -0.5, f64::NAN] {
            assert_eq!(order_statistic_median_ci(&[1.0, 2.0, 3.0], bad), None);
        }
        let tied = order_statistic_median_ci(&[4.0; 8], 0.95).unwrap();
        assert_eq!((tied.low, tied.high), (4.0, 4.0));
    }

    #[test]
    fn bootstrap_is_deterministic_and_contains_the_median() {
        let runs = [812.0, 790.0, 845.0, 803.0, 799.0, 1210.0, 808.0, 795.0];
        let a = bootstrap_median_ci(&runs, 0.95, 2000, 42).unwrap();
        let b = bootstrap_median_ci(&runs, 0.95, 2000, 42).unwrap();
        assert_eq!(a, b);
        let m = median(&runs).unwrap();
        assert!(a.low <= m && m <= a.high, "{a:?} vs {m}");
        assert_eq!(a.coverage, 0.95);
        assert!(a.reliable);
        // NaN values change nothing.
        let mut with_nan = runs.to_vec();
        with_nan.insert(3, f64::NAN);
        assert_eq!(bootstrap_median_ci(&with_nan, 0.95, 2000, 42), Some(a));
    }

    #[test]
    fn bootstrap_edge_cases() {
        assert_eq!(bootstrap_median_ci(&[], 0.95, 100, 1), None);
        assert_eq!(bootstrap_median_ci(&[1.0], 0.95, 100, 1), None);
        assert_eq!(bootstrap_median_ci(&[1.0, 2.0], 0.95, 0, 1), None);
        assert_eq!(bootstrap_median_ci(&[1.0, 2.0], 1.0, 100, 1), None);
        assert_eq!(bootstrap_median_ci(&[1.0, 2.0], f64::NAN, 100, 1), None);
        let few = bootstrap_median_ci(&[1.0, 2.0, 3.0, 4.0], 0.95, 500, 1).unwrap();
        assert!(!few.reliable, "n < 5 is flagged");
        let tied = bootstrap_median_ci(&[3.0; 6], 0.95, 500, 1).unwrap();
        assert_eq!((tied.low, tied.high), (3.0, 3.0));
        // Resamples are capped, so u32::MAX costs no more than the cap.
        let capped = bootstrap_median_ci(&[1.0, 2.0, 3.0], 0.95, u32::MAX, 9);
        assert_eq!(
            capped,
            bootstrap_median_ci(&[1.0, 2.0, 3.0], 0.95, BOOTSTRAP_MAX_RESAMPLES, 9)
        );
        // Some resamples of {-inf, +inf} have no median.
        let inf = [f64::NEG_INFINITY, f64::INFINITY];
        assert_eq!(bootstrap_median_ci(&inf, 0.95, 100, 1), None);
    }

    #[test]
    fn bootstrap_and_exact_ci_agree_with_the_asymptotic_one_on_a_large_sample() {
        // For N(0, 1) the sample median has standard error sqrt(pi / 2) / sqrt(n), so the 95 %
        // interval is median +- 1.96 * 1.2533 / sqrt(n), half-width 0.0777 for n = 1000.
        let n = 1000;
        let x = normal_sample(n, 2024);
        let m = median(&x).unwrap();
        let half = 1.959964 * (std::f64::consts::FRAC_PI_2).sqrt() / (n as f64).sqrt();
        let boot = bootstrap_median_ci(&x, 0.95, 2000, 7).unwrap();
        let exact = order_statistic_median_ci(&x, 0.95).unwrap();
        for ci in [boot, exact] {
            let ratio = (ci.high - ci.low) / (2.0 * half);
            assert!((0.7..1.4).contains(&ratio), "{ci:?}: width ratio {ratio}");
            assert!(
                ((ci.low + ci.high) / 2.0 - m).abs() < 0.3 * half,
                "{ci:?} vs {m}"
            );
            assert!(ci.low <= m && m <= ci.high);
        }
    }

    #[test]
    fn u_null_counts_small_cases() {
        // m = n = 2: the 6 orderings give U = 0, 1, 2, 2, 3, 4.
        assert_eq!(u_null_counts(2, 2), vec![1.0, 1.0, 2.0, 1.0, 1.0]);
        let six = u_null_counts(6, 6);
        assert_eq!(six.iter().sum::<f64>(), 924.0); // C(12, 6)
        assert!(six.iter().eq(six.iter().rev()), "symmetric");
        assert_eq!(u_null_counts(20, 20).iter().sum::<f64>(), 137_846_528_820.0); // C(40, 20)
        assert_eq!(u_null_counts(1, 3), vec![1.0; 4]);
    }

    #[test]
    fn mann_whitney_tortoise_and_hare() {
        // Wikipedia, "Mann-Whitney U test", illustration: finishing order T H H H H H T T T T T H
        // gives U_T = 11 (hares beaten by tortoises) and U_H = 25. With finishing positions as
        // times, u_a (tortoise slower than hare) is 25. Exact two-sided p = 2 * 143 / 924 =
        // 0.30952380952380953 (scipy.stats.mannwhitneyu(method="exact"), SciPy 1.17.1);
        // Wikipedia's table value U = 5 at 5 % two-sided is consistent with non-significance.
        let tortoises = [1.0, 7.0, 8.0, 9.0, 10.0, 11.0];
        let hares = [2.0, 3.0, 4.0, 5.0, 6.0, 12.0];
        let r = mann_whitney_u(&tortoises, &hares).unwrap();
        assert_eq!((r.u_a, r.u_b), (25.0, 11.0));
        assert_eq!(r.method, PValueMethod::Exact);
        assert_close(r.p_value, 286.0 / 924.0, 1e-14);
        assert_close(r.p_value, 0.30952380952380953, 1e-14);
        let swapped = mann_whitney_u(&hares, &tortoises).unwrap();
        assert_eq!((swapped.u_a, swapped.u_b), (11.0, 25.0));
        assert_eq!(swapped.p_value, r.p_value);
    }

    #[test]
    fn mann_whitney_exact_matches_r_and_scipy() {
        // R's ?wilcox.test example (Hollander & Wolfe 1973, p. 69): wilcox.test(x, y,
        // alternative = "g") prints "W = 35, p-value = 0.1272". Two-sided is twice that:
        // 0.2544122544122544 (SciPy 1.17.1, method="exact"; one-sided 0.1272061272061272).
        let x = [0.80, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46];
        let y = [1.15, 0.88, 0.90, 0.74, 1.21];
        let r = mann_whitney_u(&x, &y).unwrap();
        assert_eq!((r.u_a, r.u_b, r.n_a, r.n_b), (35.0, 15.0, 10, 5));
        assert_eq!(r.method, PValueMethod::Exact);
        assert_close(r.p_value, 0.2544122544122544, 1e-13);
        assert!((r.p_value / 2.0 - 0.1272).abs() < 5e-5);

        // Complete separation of 3 and 4 values: p = 2 / C(7, 3) = 2 / 35.
        let sep = mann_whitney_u(&[1.1, 2.2, 3.3], &[4.4, 5.5, 6.6, 7.7]).unwrap();
        assert_eq!((sep.u_a, sep.method), (0.0, PValueMethod::Exact));
        assert_close(sep.p_value, 2.0 / 35.0, 1e-14);

        // SciPy 1.17.1, mannwhitneyu(a, b, alternative="two-sided", method="exact"):
        // 3 against 30 values (unbalanced) ...
        let b: Vec<f64> = (1..=30).map(f64::from).collect();
        let r = mann_whitney_u(&[10.5, 31.5, 47.5], &b).unwrap();
        assert_eq!((r.u_a, r.method), (70.0, PValueMethod::Exact));
        assert_close(r.p_value, 0.1312316715542522, 1e-12);
        // ... and 20 against 20, the largest exact case.
        let a: Vec<f64> = (0..20).map(|i| f64::from(2 * i)).collect();
        let b: Vec<f64> = (0..20).map(|i| f64::from(2 * i + 7)).collect();
        let r = mann_whitney_u(&a, &b).unwrap();
        assert_eq!((r.u_a, r.method), (136.0, PValueMethod::Exact));
        assert_close(r.p_value, 0.0859140199856938, 1e-12);
    }

    #[test]
    fn mann_whitney_normal_approximation_matches_r_and_scipy() {
        // R's ?wilcox.test: wilcox.test(Ozone ~ Month, data = airquality, subset = Month %in%
        // c(5, 8)) prints "W = 127.5, p-value = 0.0001208" (ties: normal approximation with
        // continuity correction). SciPy 1.17.1 (method="asymptotic"): 0.00012080783076877434.
        // Ozone for May and August 1973 without the NA days, from R's `airquality`.
        let may = [
            41.0, 36.0, 12.0, 18.0, 28.0, 23.0, 19.0, 8.0, 7.0, 16.0, 11.0, 14.0, 18.0, 14.0, 34.0,
            6.0, 30.0, 11.0, 1.0, 11.0, 4.0, 32.0, 23.0, 45.0, 115.0, 37.0,
        ];
        let aug = [
            39.0, 9.0, 16.0, 78.0, 35.0, 66.0, 122.0, 89.0, 110.0, 44.0, 28.0, 65.0, 22.0, 59.0,
            23.0, 31.0, 44.0, 21.0, 9.0, 45.0, 168.0, 73.0, 76.0, 118.0, 84.0, 85.0,
        ];
        let r = mann_whitney_u(&may, &aug).unwrap();
        assert_eq!((r.u_a, r.method), (127.5, PValueMethod::Normal));
        assert_close(r.p_value, 0.00012080783076877434, 1e-12);
        assert!((r.p_value - 0.0001208).abs() < 5e-8);

        // R's ?wilcox.test: wilcox.test(extra ~ group, data = sleep) prints "W = 25.5,
        // p-value = 0.06933"; SciPy 1.17.1: 0.06932757543362658. Student's (1908) sleep data.
        let g1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0];
        let g2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4];
        let r = mann_whitney_u(&g1, &g2).unwrap();
        assert_eq!((r.u_a, r.method), (25.5, PValueMethod::Normal));
        assert_close(r.p_value, 0.06932757543362658, 1e-12);

        // No ties but 50 values, beyond the exact cap. SciPy 1.17.1 asymptotic: 0.11603618751300343.
        let a: Vec<f64> = (0..25).map(|i| f64::from(3 * i)).collect();
        let b: Vec<f64> = (0..25).map(|i| f64::from(3 * i + 10) + 0.5).collect();
        let r = mann_whitney_u(&a, &b).unwrap();
        assert_eq!((r.u_a, r.method), (231.0, PValueMethod::Normal));
        assert_close(r.p_value, 0.11603618751300343, 1e-12);
    }

    #[test]
    fn mann_whitney_edge_cases() {
        assert_eq!(mann_whitney_u(&[], &[1.0]), None);
        assert_eq!(mann_whitney_u(&[1.0], &[]), None);
        assert_eq!(mann_whitney_u(&[f64::NAN], &[1.0]), None);
        let one = mann_whitney_u(&[1.0], &[2.0]).unwrap();
        assert_eq!(
            (one.u_a, one.p_value, one.method),
            (0.0, 1.0, PValueMethod::Exact)
        );
        // All values tied: no variance, no evidence.
        let tied = mann_whitney_u(&[5.0; 4], &[5.0; 3]).unwrap();
        assert_eq!((tied.u_a, tied.u_b, tied.p_value), (6.0, 6.0, 1.0));
        assert_eq!(tied.method, PValueMethod::Normal);
        // NaN dropped: same as the tortoise and hare without it.
        let r = mann_whitney_u(
            &[1.0, 7.0, f64::NAN, 8.0, 9.0, 10.0, 11.0],
            &[2.0, 3.0, 4.0, 5.0, 6.0, 12.0, f64::NAN],
        )
        .unwrap();
        assert_eq!((r.u_a, r.n_a, r.n_b), (25.0, 6, 6));
        // Infinities are ordinary extreme values.
        let inf = mann_whitney_u(&[f64::NEG_INFINITY, 1.0], &[2.0, f64::INFINITY]).unwrap();
        assert_eq!(inf.u_a, 0.0);
        // Large samples: the normal approximation, quickly, and p in [0, 1].
        let a: Vec<f64> = (0..20_000).map(f64::from).collect();
        let b: Vec<f64> = (0..20_000).map(|i| f64::from(i) + 0.25).collect();
        let big = mann_whitney_u(&a, &b).unwrap();
        assert_eq!(big.method, PValueMethod::Normal);
        assert!((0.0..=1.0).contains(&big.p_value));
    }

    #[test]
    fn cliffs_delta_by_hand_and_extremes() {
        // a = {1, 2, 3}, b = {2, 4}: of the 6 pairs, a > b once (3 > 2), a < b four times
        // (1 < 2, 1 < 4, 2 < 4, 3 < 4), one tie (2 = 2): delta = (1 - 4) / 6 = -0.5.
        let d = cliffs_delta(&[1.0, 2.0, 3.0], &[2.0, 4.0]).unwrap();
        assert_eq!(d, -0.5);
        assert_eq!(Magnitude::from_delta(d), Some(Magnitude::Large));
        assert_eq!(cliffs_delta(&[5.0, 6.0], &[1.0, 2.0, 3.0]), Some(1.0));
        assert_eq!(cliffs_delta(&[1.0, 2.0, 3.0], &[5.0, 6.0]), Some(-1.0));
        assert_eq!(cliffs_delta(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), Some(0.0));
        assert_eq!(cliffs_delta(&[4.0; 3], &[4.0; 5]), Some(0.0));
        assert_eq!(cliffs_delta(&[], &[1.0]), None);
        assert_eq!(cliffs_delta(&[1.0], &[f64::NAN]), None);
        assert_eq!(cliffs_delta(&[0.0], &[-0.0]), Some(0.0));
        assert_eq!(
            cliffs_delta(&[f64::INFINITY], &[f64::MAX, f64::NAN]),
            Some(1.0)
        );
    }

    #[test]
    fn cliffs_delta_agrees_with_u() {
        // delta = 2 u_a / (n_a n_b) - 1, here on the tortoise and hare: 2 * 25 / 36 - 1.
        let t = [1.0, 7.0, 8.0, 9.0, 10.0, 11.0];
        let h = [2.0, 3.0, 4.0, 5.0, 6.0, 12.0];
        let d = cliffs_delta(&t, &h).unwrap();
        assert_close(d, 2.0 * 25.0 / 36.0 - 1.0, 1e-15);
        // With ties (the sleep data, u_a = 25.5).
        let g1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0];
        let g2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4];
        assert_close(
            cliffs_delta(&g1, &g2).unwrap(),
            2.0 * 25.5 / 100.0 - 1.0,
            1e-15,
        );
    }

    #[test]
    fn magnitude_thresholds_of_romano_et_al() {
        // Romano et al. (2006): negligible < 0.147 <= small < 0.33 <= medium < 0.474 <= large.
        for (d, want) in [
            (0.0, Magnitude::Negligible),
            (0.146, Magnitude::Negligible),
            (0.147, Magnitude::Small),
            (-0.2, Magnitude::Small),
            (0.329, Magnitude::Small),
            (0.33, Magnitude::Medium),
            (-0.473, Magnitude::Medium),
            (0.474, Magnitude::Large),
            (-1.0, Magnitude::Large),
        ] {
            assert_eq!(Magnitude::from_delta(d), Some(want), "delta {d}");
        }
        assert_eq!(Magnitude::from_delta(f64::NAN), None);
        assert_eq!(Magnitude::Medium.label(), "medium");
    }

    #[test]
    fn the_shift_and_its_interval_follow_the_mann_whitney_null_distribution() {
        // 5 against 5 without ties: P(U <= 2) = 4/252 and P(U <= 3) = 7/252, so k = 3 is the
        // last rank to reach 0.95 (1 - 8/252 = 0.968; k = 4 gives 0.944), and the interval is
        // [d(3), d(23)] of the 25 differences, as R's wilcox.test(conf.int = TRUE) reports.
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        let b = [11.0, 12.0, 13.0, 14.0, 15.0];
        let (estimate, interval) = shift_ci(&a, &b, 0.95).expect("values");
        assert_eq!(estimate, 10.0);
        assert_eq!((interval.low, interval.high), (7.0, 13.0));
        assert!(
            (interval.coverage - (1.0 - 8.0 / 252.0)).abs() < 1e-12,
            "{interval:?}"
        );
        assert!(interval.reliable);
        // Two against two: the widest interval covers only 1 - 2/6.
        let (_, few) = shift_ci(&[1.0, 2.0], &[5.0, 7.0], 0.95).expect("values");
        assert_eq!((few.low, few.high), (3.0, 6.0));
        assert!((few.coverage - (1.0 - 2.0 / 6.0)).abs() < 1e-12);
        assert!(!few.reliable);
        assert_eq!(shift_ci(&[], &[1.0], 0.95), None);
        // Beyond the exact range the normal approximation stays close to the exact one.
        let many_a: Vec<f64> = (0..30).map(f64::from).collect();
        let many_b: Vec<f64> = (0..30).map(|i| f64::from(i) + 5.0).collect();
        let (estimate, wide) = shift_ci(&many_a, &many_b, 0.95).expect("values");
        assert_eq!(estimate, 5.0);
        assert!(
            wide.low < 5.0 && wide.high > 5.0 && wide.coverage >= 0.95,
            "{wide:?}"
        );
    }
}
