//! Samplers for arrivals, sizes, popularity and the verb mix. Inverse CDFs are
//! written out so that a hashed uniform can drive them (key sizes).

use rand::Rng;
use rand_distr::{Distribution, Zipf};

use crate::config::{Arrival, Mix, Popularity, ValueSize, Verb};

/// Facebook ETC key size: GEV(loc, scale, shape) (mutilate `fb_key`).
pub const ETC_KEY_GEV: (f64, f64, f64) = (30.7984, 8.20449, 0.078688);
/// Facebook ETC value size tail: GPD(loc, scale, shape) (mutilate `fb_value`).
pub const ETC_VALUE_GPD: (f64, f64, f64) = (15.0, 214.476, 0.348238);
/// Facebook ETC value size head: P(size = i) for i in 0..15 (mass 0.44155).
pub const ETC_VALUE_HEAD: [f64; 15] = [
    0.00536, 0.00047, 0.17820, 0.09239, 0.00018, 0.02740, 0.00065, 0.00606, 0.00023, 0.00837,
    0.00837, 0.08989, 0.00092, 0.00326, 0.01980,
];
/// Facebook ETC inter-arrival shape (mutilate `fb_ia`); the scale follows the rate.
pub const ETC_IA_SHAPE: f64 = 0.154971;

/// Generalized Pareto inverse CDF at `u` in (0, 1]: loc + scale (u^-shape - 1) / shape.
pub fn gpd_inv(u: f64, loc: f64, scale: f64, shape: f64) -> f64 {
    if shape == 0.0 {
        loc - scale * u.ln()
    } else {
        loc + scale * (u.powf(-shape) - 1.0) / shape
    }
}

/// Generalized extreme value inverse CDF at `u` in (0, 1): loc + scale ((-ln u)^-shape - 1) / shape.
pub fn gev_inv(u: f64, loc: f64, scale: f64, shape: f64) -> f64 {
    if shape == 0.0 {
        loc - scale * (-u.ln()).ln()
    } else {
        loc + scale * ((-u.ln()).powf(-shape) - 1.0) / shape
    }
}

/// A uniform in (0, 1], never 0 so that logarithms and negative powers stay finite.
#[inline]
pub fn open_unit<R: Rng>(rng: &mut R) -> f64 {
    1.0 - rng.random::<f64>()
}

/// Inter-arrival gaps in nanoseconds for a given rate.
#[derive(Debug, Clone, Copy)]
pub struct ArrivalGen {
    kind: Arrival,
    mean_ns: f64,
    /// GPD scale in ns for ETC so that the mean is `mean_ns`.
    gpd_scale: f64,
}

impl ArrivalGen {
    /// `rate` in requests/s for this stream.
    pub fn new(kind: Arrival, rate: f64) -> Self {
        let mean_ns = 1e9 / rate;
        ArrivalGen {
            kind,
            mean_ns,
            // Mean of GPD(0, s, k) is s / (1 - k) (mutilate set_lambda).
            gpd_scale: mean_ns * (1.0 - ETC_IA_SHAPE),
        }
    }

    pub fn mean_ns(&self) -> f64 {
        self.mean_ns
    }

    #[inline]
    pub fn next_gap<R: Rng>(&self, rng: &mut R) -> f64 {
        match self.kind {
            Arrival::Poisson => -self.mean_ns * open_unit(rng).ln(),
            Arrival::Fixed => self.mean_ns,
            Arrival::Etc => gpd_inv(open_unit(rng), 0.0, self.gpd_scale, ETC_IA_SHAPE),
        }
    }
}

/// Value sizes in bytes, clamped to `max`.
#[derive(Debug, Clone)]
pub struct ValueSizeGen {
    kind: ValueKind,
    max: usize,
}

#[derive(Debug, Clone)]
enum ValueKind {
    Fixed(usize),
    Range(usize, usize),
    /// Cumulative weights (normalised) and sizes.
    List(Vec<f64>, Vec<usize>),
    Etc,
}

impl ValueSizeGen {
    pub fn new(spec: &ValueSize, max: usize) -> Self {
        let kind = match spec {
            ValueSize::Fixed(n) => ValueKind::Fixed(*n),
            ValueSize::Range(a, b) => ValueKind::Range(*a, *b),
            ValueSize::List(l) => {
                let total: f64 = l.iter().map(|i| i.1).sum();
                let mut acc = 0.0;
                let cum = l
                    .iter()
                    .map(|i| {
                        acc += i.1 / total;
                        acc
                    })
                    .collect();
                ValueKind::List(cum, l.iter().map(|i| i.0).collect())
            }
            ValueSize::Etc => ValueKind::Etc,
        };
        ValueSizeGen { kind, max }
    }

    #[inline]
    pub fn sample<R: Rng>(&self, rng: &mut R) -> usize {
        let v = match &self.kind {
            ValueKind::Fixed(n) => *n,
            ValueKind::Range(a, b) => rng.random_range(*a..=*b),
            ValueKind::List(cum, sizes) => {
                let u: f64 = rng.random();
                let i = cum.partition_point(|&c| c <= u).min(sizes.len() - 1);
                sizes[i]
            }
            ValueKind::Etc => etc_value(rng),
        };
        v.min(self.max)
    }
}

/// One Facebook ETC value size: walk the discrete head, else draw the GPD tail
/// with a fresh uniform (as mutilate's `Discrete` generator does).
pub fn etc_value<R: Rng>(rng: &mut R) -> usize {
    let u: f64 = rng.random();
    let mut acc = 0.0;
    for (size, p) in ETC_VALUE_HEAD.iter().enumerate() {
        acc += p;
        if u < acc {
            return size;
        }
    }
    let (loc, scale, shape) = ETC_VALUE_GPD;
    let v = gpd_inv(open_unit(rng), loc, scale, shape).round();
    if v >= usize::MAX as f64 {
        usize::MAX
    } else {
        v as usize
    }
}

/// Key indices in `0..n`.
#[derive(Debug, Clone)]
pub struct KeyGen {
    n: u64,
    kind: KeyKind,
    /// Rank scrambling: index = (rank * mul + add) mod n, a permutation since gcd(mul, n) = 1.
    mul: u64,
    add: u64,
}

#[derive(Debug, Clone)]
enum KeyKind {
    Uniform,
    Zipf(Zipf<f64>),
    HotSet {
        hot: u64,
        p: f64,
    },
    /// Cumulative request mass and the end rank (exclusive) of each bucket.
    Table {
        cum: Vec<f64>,
        ends: Vec<u64>,
    },
}

impl KeyGen {
    pub fn new(spec: &Popularity, n: u64) -> Self {
        let kind = match *spec {
            Popularity::Uniform => KeyKind::Uniform,
            Popularity::Zipf(s) => match Zipf::new(n as f64, s) {
                Ok(z) => KeyKind::Zipf(z),
                Err(_) => KeyKind::Uniform,
            },
            Popularity::HotSet { keys, requests } => KeyKind::HotSet {
                hot: ((n as f64 * keys).round() as u64).clamp(1, n),
                p: requests,
            },
            Popularity::Table(ref t) => table(t, n),
        };
        let (mul, add) = scramble_params(n);
        KeyGen { n, kind, mul, add }
    }

    /// Maps a popularity rank (0 = hottest) to a key index.
    #[inline]
    pub fn scramble(&self, rank: u64) -> u64 {
        ((rank as u128 * self.mul as u128 + self.add as u128) % self.n as u128) as u64
    }

    #[inline]
    pub fn sample<R: Rng>(&self, rng: &mut R) -> u64 {
        match &self.kind {
            KeyKind::Uniform => rng.random_range(0..self.n),
            KeyKind::Zipf(z) => {
                let rank = (z.sample(rng) as u64).clamp(1, self.n) - 1;
                self.scramble(rank)
            }
            KeyKind::Table { cum, ends } => {
                let u: f64 = rng.random();
                let i = cum.partition_point(|&c| c <= u).min(ends.len() - 1);
                let start = if i == 0 { 0 } else { ends[i - 1] };
                self.scramble(rng.random_range(start..ends[i]))
            }
            KeyKind::HotSet { hot, p } => {
                let rank = if *hot >= self.n || rng.random::<f64>() < *p {
                    rng.random_range(0..*hot)
                } else {
                    rng.random_range(*hot..self.n)
                };
                self.scramble(rank)
            }
        }
    }
}

/// A rank-frequency table's buckets scaled to `n` keys. A bucket scaled to no key
/// gives its mass to the next one, so that every bucket kept holds a key.
fn table(t: &[(u64, f64)], n: u64) -> KeyKind {
    let keys: u64 = t.iter().map(|i| i.0).sum();
    let mass: f64 = t.iter().map(|i| i.1).sum();
    let (mut cum, mut ends) = (Vec::new(), Vec::new());
    let (mut k, mut m, mut last) = (0u64, 0.0, 0u64);
    for &(bk, bm) in t {
        k += bk;
        m += bm / mass;
        let end = ((k as u128 * n as u128 + keys as u128 / 2) / keys as u128) as u64;
        if end > last {
            cum.push(m);
            ends.push(end);
            last = end;
        }
    }
    if ends.is_empty() {
        return KeyKind::Uniform;
    }
    *ends.last_mut().unwrap() = n;
    *cum.last_mut().unwrap() = f64::INFINITY;
    KeyKind::Table { cum, ends }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The rank scramble of a keyspace of `n` keys: index = (rank * mul + add) mod n.
pub(crate) fn scramble_params(n: u64) -> (u64, u64) {
    if n <= 2 {
        return (1, 0);
    }
    // A multiplier near n / golden ratio spreads consecutive ranks across the keyspace.
    let mut mul = ((n as f64 * 0.618_033_988_749_895) as u64).max(1);
    while gcd(mul, n) != 1 {
        mul += 1;
    }
    (mul, n / 3)
}

/// The weighted verb mix.
#[derive(Debug, Clone)]
pub struct MixGen {
    cum: [f64; 4],
}

impl MixGen {
    pub fn new(mix: &Mix) -> Self {
        let total: f64 = mix.weights.iter().sum();
        let mut cum = [0.0; 4];
        let mut acc = 0.0;
        for (i, w) in mix.weights.iter().enumerate() {
            acc += w / total;
            cum[i] = acc;
        }
        // The last verb with a positive weight absorbs rounding.
        if let Some(last) = mix.weights.iter().rposition(|&w| w > 0.0) {
            for c in cum.iter_mut().skip(last) {
                *c = f64::INFINITY;
            }
        }
        MixGen { cum }
    }

    #[inline]
    pub fn sample<R: Rng>(&self, rng: &mut R) -> Verb {
        let u: f64 = rng.random();
        for (i, c) in self.cum.iter().enumerate() {
            if u < *c {
                return Verb::ALL[i];
            }
        }
        Verb::Get
    }
}

#[cfg(test)]
mod tests {
    //! Statistical checks with fixed seeds; each can fail if a formula is wrong.
    use super::*;
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;

    fn rng(seed: u64) -> Xoshiro256PlusPlus {
        Xoshiro256PlusPlus::seed_from_u64(seed)
    }

    /// Kolmogorov-Smirnov statistic of `xs` (sorted in place) against `cdf`.
    pub fn ks_stat(xs: &mut [f64], cdf: impl Fn(f64) -> f64) -> f64 {
        xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let n = xs.len() as f64;
        let mut d: f64 = 0.0;
        for (i, &x) in xs.iter().enumerate() {
            let f = cdf(x);
            d = d.max((i as f64 + 1.0) / n - f).max(f - i as f64 / n);
        }
        d
    }

    fn quantile(xs: &mut [f64], q: f64) -> f64 {
        xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
        xs[((xs.len() as f64 - 1.0) * q).round() as usize]
    }

    #[test]
    fn poisson_interarrivals_pass_ks_against_exponential() {
        let g = ArrivalGen::new(Arrival::Poisson, 100_000.0);
        let mut r = rng(7);
        let mut xs: Vec<f64> = (0..50_000).map(|_| g.next_gap(&mut r)).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((mean / 10_000.0 - 1.0).abs() < 0.02, "mean {mean}");
        let d = ks_stat(&mut xs, |x| 1.0 - (-x / 10_000.0).exp());
        // Critical value at alpha = 0.001 is 1.95 / sqrt(n).
        assert!(d < 1.95 / (50_000f64).sqrt(), "KS D = {d}");
        // And the same sample must fail against a wrong rate.
        let d_wrong = ks_stat(&mut xs, |x| 1.0 - (-x / 11_000.0).exp());
        assert!(d_wrong > 1.95 / (50_000f64).sqrt(), "KS D = {d_wrong}");
    }

    #[test]
    fn etc_interarrivals_have_requested_mean_and_gpd_shape() {
        let rate = 50_000.0;
        let g = ArrivalGen::new(Arrival::Etc, rate);
        let mut r = rng(11);
        let mut xs: Vec<f64> = (0..200_000).map(|_| g.next_gap(&mut r)).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((mean / 20_000.0 - 1.0).abs() < 0.03, "mean {mean}");
        let scale = 20_000.0 * (1.0 - ETC_IA_SHAPE);
        let cdf = |x: f64| 1.0 - (1.0 + ETC_IA_SHAPE * x / scale).powf(-1.0 / ETC_IA_SHAPE);
        let d = ks_stat(&mut xs, cdf);
        assert!(d < 1.95 / (200_000f64).sqrt(), "KS D = {d}");
        // Squared coefficient of variation 1/(1-2k) = 1.45 (burstier than Poisson).
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        let cv2 = var / (mean * mean);
        assert!(
            (cv2 - 1.0 / (1.0 - 2.0 * ETC_IA_SHAPE)).abs() < 0.12,
            "cv2 {cv2}"
        );
    }

    #[test]
    fn fixed_interarrivals_are_constant() {
        let g = ArrivalGen::new(Arrival::Fixed, 1000.0);
        let mut r = rng(1);
        assert_eq!(g.next_gap(&mut r), 1e6);
    }

    #[test]
    fn etc_value_sizes_match_reference_quantiles() {
        let mut r = rng(3);
        let mut xs: Vec<f64> = (0..400_000).map(|_| etc_value(&mut r) as f64).collect();
        let head = xs.iter().filter(|&&x| x < 15.0).count() as f64 / xs.len() as f64;
        assert!((head - 0.44155).abs() < 0.005, "head mass {head}");
        let size2 = xs.iter().filter(|&&x| x == 2.0).count() as f64 / xs.len() as f64;
        assert!((size2 - 0.17820).abs() < 0.004, "P(2) {size2}");
        // Reference (load-generators.md section 3): p50 39, p90 523, p99 1906.
        for (q, want, tol) in [(0.5, 39.0, 0.06), (0.9, 523.0, 0.04), (0.99, 1906.0, 0.06)] {
            let got = quantile(&mut xs, q);
            assert!((got / want - 1.0).abs() < tol, "p{q}: {got} vs {want}");
        }
    }

    #[test]
    fn etc_key_sizes_match_reference_quantiles() {
        let (loc, scale, shape) = ETC_KEY_GEV;
        let mut r = rng(5);
        let mut xs: Vec<f64> = (0..200_000)
            .map(|_| gev_inv(open_unit(&mut r), loc, scale, shape))
            .collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((mean - 36.22).abs() < 0.3, "mean {mean}");
        for (q, want) in [(0.5, 33.9), (0.99, 76.4)] {
            let got = quantile(&mut xs, q);
            assert!((got / want - 1.0).abs() < 0.03, "p{q}: {got} vs {want}");
        }
    }

    #[test]
    fn zipf_rank_frequencies_follow_the_power_law_and_are_scrambled() {
        let n = 1000u64;
        let s = 1.0;
        let kg = KeyGen::new(&Popularity::Zipf(s), n);
        let mut r = rng(9);
        let draws = 500_000;
        let mut counts = vec![0u64; n as usize];
        for _ in 0..draws {
            counts[kg.sample(&mut r) as usize] += 1;
        }
        let h: f64 = (1..=n).map(|k| (k as f64).powf(-s)).sum();
        // Chi-square over the 20 hottest ranks plus the rest.
        let mut chi2 = 0.0;
        let mut rest_obs = draws as f64;
        let mut rest_exp = draws as f64;
        for rank in 0..20u64 {
            let exp = draws as f64 * ((rank + 1) as f64).powf(-s) / h;
            let obs = counts[kg.scramble(rank) as usize] as f64;
            chi2 += (obs - exp).powi(2) / exp;
            rest_obs -= obs;
            rest_exp -= exp;
        }
        chi2 += (rest_obs - rest_exp).powi(2) / rest_exp;
        // 20 degrees of freedom: p = 0.001 at 45.3.
        assert!(chi2 < 45.3, "chi2 {chi2}");
        // The hottest ranks are not adjacent indices.
        let hot: Vec<u64> = (0..5).map(|r| kg.scramble(r)).collect();
        assert!(hot.windows(2).all(|w| w[0].abs_diff(w[1]) > 1), "{hot:?}");
        // The scramble is a permutation.
        let mut seen = vec![false; n as usize];
        for rank in 0..n {
            seen[kg.scramble(rank) as usize] = true;
        }
        assert!(seen.iter().all(|&b| b));
    }

    #[test]
    fn hotset_sends_the_requested_fraction_to_hot_keys() {
        let n = 10_000;
        let kg = KeyGen::new(
            &Popularity::HotSet {
                keys: 0.1,
                requests: 0.9,
            },
            n,
        );
        let hot: std::collections::HashSet<u64> = (0..1000).map(|r| kg.scramble(r)).collect();
        let mut r = rng(13);
        let hits = (0..100_000)
            .filter(|_| hot.contains(&kg.sample(&mut r)))
            .count();
        assert!((hits as f64 / 100_000.0 - 0.9).abs() < 0.01, "{hits}");
    }

    #[test]
    fn a_popularity_table_gives_each_bucket_its_mass_scaled_to_the_keyspace() {
        // 10 keys with half the requests, 90 with 30%, 900 with 20%.
        let t = Popularity::parse("table:10:0.5,90:0.3,900:0.2").unwrap();
        assert_eq!(t.table_keys(), Some(1000));
        for n in [1000u64, 2000] {
            let kg = KeyGen::new(&t, n);
            let f = n / 1000;
            let mut r = rng(19);
            let mut bucket = [0u64; 3];
            let draws = 200_000;
            let rank_of: std::collections::HashMap<u64, u64> =
                (0..n).map(|rank| (kg.scramble(rank), rank)).collect();
            for _ in 0..draws {
                let rank = rank_of[&kg.sample(&mut r)];
                bucket[if rank < 10 * f {
                    0
                } else if rank < 100 * f {
                    1
                } else {
                    2
                }] += 1;
            }
            for (got, want) in bucket.iter().zip([0.5, 0.3, 0.2]) {
                let share = *got as f64 / draws as f64;
                assert!((share - want).abs() < 0.005, "n {n}: {bucket:?}");
            }
        }
        // Buckets scaled below one key pass their mass on; every draw stays in range.
        let small = KeyGen::new(&t, 10);
        let mut r = rng(23);
        assert!((0..10_000).all(|_| small.sample(&mut r) < 10));
        assert!(Popularity::parse("table:0:1").is_err());
        assert!(Popularity::parse("table:5:0").is_err());
    }

    #[test]
    fn mix_and_list_weights() {
        let m = MixGen::new(&Mix::parse("get:9,set:1").unwrap());
        let mut r = rng(17);
        let sets = (0..100_000)
            .filter(|_| m.sample(&mut r) == Verb::Set)
            .count();
        assert!((sets as f64 / 100_000.0 - 0.1).abs() < 0.005, "{sets}");
        let v = ValueSizeGen::new(&ValueSize::parse("list:100:3,1000:1").unwrap(), 1 << 20);
        let big = (0..100_000).filter(|_| v.sample(&mut r) == 1000).count();
        assert!((big as f64 / 100_000.0 - 0.25).abs() < 0.006, "{big}");
        let v = ValueSizeGen::new(&ValueSize::Etc, 5000);
        assert!((0..100_000).all(|_| v.sample(&mut r) <= 5000));
    }
}
