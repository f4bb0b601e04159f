//! Keys are zero-padded decimal indices. A key's length is fixed, or drawn from
//! the ETC GEV with a uniform hashed from the index (mutilate's FNV trick), so a
//! key has the same size on every request and in every run.

use super::dist::{ETC_KEY_GEV, gev_inv};
use crate::config::KeySize;

/// FNV-1a 64 over the index's 8 little-endian bytes.
pub fn fnv1a64(index: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in index.to_le_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Turns key indices into key bytes.
#[derive(Debug, Clone)]
pub struct KeyFormat {
    /// A trace's length of each key index.
    per_key: Option<std::sync::Arc<Vec<u16>>>,
    fixed: Option<usize>,
    /// A weighted list of lengths: cumulative weights and lengths.
    list: Option<(Vec<f64>, Vec<usize>)>,
    min: usize,
    max: usize,
}

impl KeyFormat {
    /// `min` is the shortest length holding every index; `max` the protocol limit.
    pub fn new(size: &KeySize, min: usize, max: usize) -> Self {
        match size {
            KeySize::Fixed(n) => KeyFormat {
                per_key: None,
                fixed: Some((*n).max(min)),
                list: None,
                min,
                max,
            },
            KeySize::Etc => KeyFormat {
                per_key: None,
                fixed: None,
                list: None,
                min,
                max,
            },
            KeySize::List(l) => {
                let total: f64 = l.iter().map(|i| i.1).sum();
                let mut acc = 0.0;
                let cum = l
                    .iter()
                    .map(|i| {
                        acc += i.1 / total;
                        acc
                    })
                    .collect();
                KeyFormat {
                    per_key: None,
                    fixed: None,
                    list: Some((cum, l.iter().map(|i| i.0).collect())),
                    min,
                    max,
                }
            }
        }
    }

    /// Each key index its own length (a trace's), within `min..=max`.
    pub fn per_key(lens: Vec<u16>, min: usize, max: usize) -> Self {
        KeyFormat {
            per_key: Some(std::sync::Arc::new(lens)),
            fixed: None,
            list: None,
            min,
            max,
        }
    }

    /// The length of key `index` in bytes.
    #[inline]
    pub fn len(&self, index: u64) -> usize {
        if let Some(l) = &self.per_key {
            let n = l.get(index as usize).copied().unwrap_or(0) as usize;
            return n.clamp(self.min, self.max);
        }
        if let Some(n) = self.fixed {
            return n;
        }
        // (h + 0.5) / 2^64 lies strictly inside (0, 1).
        let u = ((fnv1a64(index) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        if let Some((cum, lens)) = &self.list {
            let i = cum.partition_point(|&c| c <= u).min(lens.len() - 1);
            return lens[i].clamp(self.min, self.max);
        }
        let (loc, scale, shape) = ETC_KEY_GEV;
        let g = gev_inv(u, loc, scale, shape).round();
        (g.max(0.0) as usize).clamp(self.min, self.max)
    }

    /// Appends key `index` to `buf`.
    #[inline]
    pub fn write(&self, index: u64, buf: &mut Vec<u8>) {
        let len = self.len(index);
        let mut digits = [0u8; 20];
        let mut n = index;
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let d = &digits[i..];
        buf.extend(std::iter::repeat_n(b'0', len.saturating_sub(d.len())));
        buf.extend_from_slice(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_padded_and_stable() {
        let f = KeyFormat::new(&KeySize::Fixed(8), 4, 250);
        let mut b = Vec::new();
        f.write(42, &mut b);
        assert_eq!(b, b"00000042");
        let e = KeyFormat::new(&KeySize::Etc, 5, 250);
        for i in 0..1000 {
            let l = e.len(i);
            assert_eq!(l, e.len(i));
            assert!((5..=250).contains(&l));
            let mut b = Vec::new();
            e.write(i, &mut b);
            assert_eq!(b.len(), l);
        }
        let mean = (0..100_000).map(|i| e.len(i) as f64).sum::<f64>() / 100_000.0;
        assert!((mean - 36.2).abs() < 0.5, "mean key length {mean}");
    }

    #[test]
    fn listed_lengths_follow_their_weights_and_stay_per_key() {
        let f = KeyFormat::new(&KeySize::List(vec![(10, 1.0), (40, 3.0)]), 5, 250);
        let n = 100_000;
        let long = (0..n).filter(|&i| f.len(i) == 40).count() as f64 / n as f64;
        assert!((long - 0.75).abs() < 0.01, "share of 40-byte keys {long}");
        assert!((0..n).all(|i| f.len(i) == 10 || f.len(i) == 40));
        assert_eq!(f.len(77), f.len(77));
        // Lengths shorter than the indices need are raised to hold them.
        let g = KeyFormat::new(&KeySize::List(vec![(2, 1.0)]), 6, 250);
        let mut b = Vec::new();
        g.write(123_456, &mut b);
        assert_eq!(b, b"123456");
    }
}
