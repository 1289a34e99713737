//! Reconnect backoff: exponential, capped, with jitter drawn from a seeded generator so that
//! runs are reproducible and a fleet of sinks does not reconnect in lockstep.

use std::time::Duration;

use crate::config::RetryPolicy;

/// SplitMix64: the core's only randomness, seeded from the configuration.
#[derive(Clone, Debug)]
pub(crate) struct Jitter(u64);

impl Jitter {
    pub(crate) fn new(seed: u64) -> Jitter {
        Jitter(seed)
    }

    fn next_unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The delay before attempt `attempt` (1 = the first retry): `initial * multiplier^(attempt
    /// - 1)`, capped at `max`, then scaled by a factor drawn uniformly from `[1 - jitter, 1]`.
    pub(crate) fn delay(&mut self, policy: &RetryPolicy, attempt: u32) -> Duration {
        let exp = policy
            .multiplier
            .max(1.0)
            .powi(i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX));
        let base =
            (policy.initial_backoff.as_secs_f64() * exp).min(policy.max_backoff.as_secs_f64());
        let jitter = policy.jitter.clamp(0.0, 1.0);
        let factor = 1.0 - jitter * self.next_unit();
        Duration::try_from_secs_f64(base * factor).unwrap_or(policy.max_backoff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_are_capped_jittered_and_reproducible() {
        let policy = RetryPolicy::default();
        let mut a = Jitter::new(7);
        let mut b = Jitter::new(7);
        let delays: Vec<Duration> = (1..=8).map(|n| a.delay(&policy, n)).collect();
        assert_eq!(
            delays,
            (1..=8).map(|n| b.delay(&policy, n)).collect::<Vec<_>>()
        );
        for (n, d) in delays.iter().enumerate() {
            let base = (policy.initial_backoff.as_secs_f64() * 2f64.powi(n as i32))
                .min(policy.max_backoff.as_secs_f64());
            assert!(
                d.as_secs_f64() <= base + 1e-9
                    && d.as_secs_f64() >= base * (1.0 - policy.jitter) - 1e-9,
                "{n}: {d:?}"
            );
        }
        assert!(delays[7] <= policy.max_backoff);
        let odd = RetryPolicy {
            multiplier: f64::NAN,
            jitter: 7.0,
            ..policy
        };
        assert!(Jitter::new(1).delay(&odd, u32::MAX) <= policy.max_backoff);
    }
}
