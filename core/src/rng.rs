//! A small seeded generator: the only source of choice in the core (the worker's jitter,
//! every choice of the sim), so a seed replays a run.

/// splitmix64: tiny, fast, and good enough to pick latencies and outcomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix {
    state: u64,
}

impl SplitMix {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// A number in `lo..=hi` (`lo` when the range is empty).
    pub fn between(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = hi.abs_diff(lo).saturating_add(1);
        lo.wrapping_add(self.below(span) as i64)
    }

    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        self.below(1000) < u64::from(per_mille)
    }

    /// A float in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix;

    #[test]
    fn same_seed_same_numbers_and_ranges_hold() {
        let (mut a, mut b) = (SplitMix::new(7), SplitMix::new(7));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        for _ in 0..100 {
            let x = a.between(-3, 5);
            assert!((-3..=5).contains(&x));
            assert!(a.below(10) < 10);
            assert!((0.0..1.0).contains(&a.unit()));
        }
        assert_eq!(a.below(0), 0);
        assert_eq!(a.between(5, 5), 5);
        let _ = a.between(i64::MIN, i64::MAX);
    }
}
