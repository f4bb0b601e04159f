//! What belongs to a key: its value size and its TTL, per popularity bucket
//! (`key_buckets` of a workload file). A key's popularity rank is the inverse of the
//! key generator's scramble, so the hottest keys of a Zipf or a table are the keys of
//! the first bucket; each key draws its size and TTL once from its bucket, with a
//! uniform hashed from its index, so it has the same size on every set, in the
//! preload and in every run (as a real key does, and as key lengths are).

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use super::dist::{ValueSizeGen, scramble_params};
use super::keys::fnv1a64;
use crate::config::KeyBucket;
use crate::config::spec::MAX_RELATIVE_TTL;

/// Salts of the per-key draws (a size and a TTL are independent).
const SIZE_SALT: u64 = 0x5157_e5a1_7b1c_9e01;
const TTL_SALT: u64 = 0x77e1_d00d_4c3b_a211;

/// Sizes and TTLs per key of a keyspace of `n` keys.
#[derive(Debug, Clone)]
pub struct PerKey {
    n: u64,
    /// The inverse of the scramble's multiplier modulo `n`, and its offset.
    inv: u64,
    add: u64,
    /// The end rank (exclusive) of each bucket, scaled to `n`.
    ends: Vec<u64>,
    values: Vec<Option<ValueSizeGen>>,
    ttls: Vec<Option<ValueSizeGen>>,
}

fn mod_inverse(a: u64, n: u64) -> u64 {
    // Extended Euclid; gcd(a, n) = 1 by the scramble's construction.
    let (mut t, mut new_t) = (0i128, 1i128);
    let (mut r, mut new_r) = (n as i128, a as i128);
    while new_r != 0 {
        let q = r / new_r;
        (t, new_t) = (new_t, t - q * new_t);
        (r, new_r) = (new_r, r - q * new_r);
    }
    t.rem_euclid(n as i128) as u64
}

impl PerKey {
    /// `value_cap` clamps sizes as the phase's own sizes are clamped.
    pub fn new(buckets: &[KeyBucket], n: u64, value_cap: usize) -> Self {
        let (mul, add) = scramble_params(n);
        let total: u64 = buckets.iter().map(|b| b.keys).sum::<u64>().max(1);
        let (mut ends, mut values, mut ttls) = (Vec::new(), Vec::new(), Vec::new());
        let (mut k, mut last) = (0u64, 0u64);
        for b in buckets {
            k += b.keys;
            let end = ((k as u128 * n as u128 + total as u128 / 2) / total as u128) as u64;
            if end <= last {
                continue; // scaled to no key
            }
            ends.push(end);
            values.push(
                b.value_size
                    .as_ref()
                    .map(|v| ValueSizeGen::new(v, value_cap)),
            );
            ttls.push(
                b.ttl
                    .as_ref()
                    .map(|t| ValueSizeGen::new(&t.as_sizes(), MAX_RELATIVE_TTL)),
            );
            last = end;
        }
        if let Some(e) = ends.last_mut() {
            *e = n;
        }
        PerKey {
            n,
            inv: if n <= 2 { 1 } else { mod_inverse(mul, n) },
            add,
            ends,
            values,
            ttls,
        }
    }

    /// The popularity rank of key `index` (0 = hottest), the inverse of `KeyGen::scramble`.
    #[inline]
    pub fn rank(&self, index: u64) -> u64 {
        if self.n <= 2 {
            return index;
        }
        let shifted =
            (index as u128 + self.n as u128 - self.add as u128 % self.n as u128) % self.n as u128;
        ((shifted * self.inv as u128) % self.n as u128) as u64
    }

    #[inline]
    fn bucket(&self, index: u64) -> Option<usize> {
        if self.ends.is_empty() {
            return None;
        }
        let r = self.rank(index);
        Some(
            self.ends
                .partition_point(|&e| e <= r)
                .min(self.ends.len() - 1),
        )
    }

    /// The value size of key `index`, None when its bucket gives none.
    #[inline]
    pub fn value_len(&self, index: u64) -> Option<usize> {
        let g = self.values[self.bucket(index)?].as_ref()?;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(fnv1a64(index ^ SIZE_SALT));
        Some(g.sample(&mut rng))
    }

    /// The TTL of key `index` in seconds, None when its bucket gives none.
    #[inline]
    pub fn ttl(&self, index: u64) -> Option<u32> {
        let g = self.ttls[self.bucket(index)?].as_ref()?;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(fnv1a64(index ^ TTL_SALT));
        Some(g.sample(&mut rng) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Popularity, Ttl, ValueSize};
    use crate::workload::KeyGen;

    fn buckets() -> Vec<KeyBucket> {
        vec![
            KeyBucket {
                keys: 10,
                value_size: Some(ValueSize::Fixed(8000)),
                ttl: Some(Ttl::Fixed(60)),
            },
            KeyBucket {
                keys: 990,
                value_size: Some(ValueSize::parse("list:100:3,1000:1").unwrap()),
                ttl: None,
            },
        ]
    }

    #[test]
    fn rank_inverts_the_scramble() {
        for n in [1u64, 2, 3, 10, 1000, 99_991, 1 << 20] {
            let kg = KeyGen::new(&Popularity::Zipf(1.0), n);
            let pk = PerKey::new(&buckets(), n, 1 << 20);
            for rank in (0..n).step_by((n as usize / 500).max(1)) {
                assert_eq!(pk.rank(kg.scramble(rank)), rank, "n {n} rank {rank}");
            }
        }
    }

    #[test]
    fn hot_keys_get_their_buckets_sizes_and_keep_them() {
        let n = 2000; // the buckets' 1000 keys scaled to 2000: 20 hot keys
        let kg = KeyGen::new(&Popularity::Zipf(1.0), n);
        let pk = PerKey::new(&buckets(), n, 1 << 20);
        for rank in 0..20 {
            let k = kg.scramble(rank);
            assert_eq!(pk.value_len(k), Some(8000));
            assert_eq!(pk.ttl(k), Some(60));
        }
        let cold: Vec<u64> = (20..n).map(|r| kg.scramble(r)).collect();
        assert!(cold.iter().all(|&k| pk.ttl(k).is_none()));
        let big = cold
            .iter()
            .filter(|&&k| pk.value_len(k) == Some(1000))
            .count() as f64
            / cold.len() as f64;
        assert!((big - 0.25).abs() < 0.03, "share of 1000-byte keys {big}");
        // The same key, the same size, every time.
        assert!(cold.iter().all(|&k| pk.value_len(k) == pk.value_len(k)));
        // Sizes are clamped like the phase's.
        let small = PerKey::new(&buckets(), n, 500);
        assert_eq!(small.value_len(kg.scramble(0)), Some(500));
    }
}
