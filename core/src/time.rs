//! Time as an input: the core never reads a clock.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time on the caller's clock, in microseconds since an epoch the caller picks.
///
/// The core only compares and subtracts `Time`s, so any monotonic clock works: the tokio adapter
/// uses the time elapsed since it started, the simulator a virtual clock that starts at zero.
/// Arithmetic saturates, so no input can make it overflow or panic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(u64);

impl Time {
    /// The epoch.
    pub const ZERO: Time = Time(0);
    /// The latest representable time; used as "never".
    pub const MAX: Time = Time(u64::MAX);

    /// A time `micros` microseconds after the epoch.
    #[must_use]
    pub const fn from_micros(micros: u64) -> Time {
        Time(micros)
    }

    /// `micros` microseconds after this time (saturating): `self + Duration::from_micros(micros)`
    /// without the conversion.
    #[must_use]
    #[inline]
    pub(crate) const fn plus_micros(self, micros: u64) -> Time {
        Time(self.0.saturating_add(micros))
    }

    /// A time `millis` milliseconds after the epoch (saturating).
    #[must_use]
    pub const fn from_millis(millis: u64) -> Time {
        Time(millis.saturating_mul(1_000))
    }

    /// A time at `since_epoch` after the epoch (saturating).
    #[must_use]
    pub fn from_duration(since_epoch: Duration) -> Time {
        Time(u64::try_from(since_epoch.as_micros()).unwrap_or(u64::MAX))
    }

    /// Microseconds since the epoch.
    #[must_use]
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// The duration from `earlier` to `self`, zero if `earlier` is later.
    #[must_use]
    pub const fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    #[inline]
    fn add(self, rhs: Duration) -> Time {
        self.plus_micros(Time::from_duration(rhs).as_micros())
    }
}

/// The earlier of two deadlines, either of which may be absent.
#[inline]
pub(crate) fn earliest(a: Option<Time>, b: Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Sub<Time> for Time {
    type Output = Duration;
    fn sub(self, rhs: Time) -> Duration {
        self.saturating_since(rhs)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}s", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_panicking() {
        assert_eq!(Time::MAX + Duration::from_secs(1), Time::MAX);
        assert_eq!(Time::ZERO - Time::from_millis(5), Duration::ZERO);
        assert_eq!(Time::from_millis(u64::MAX), Time::MAX);
        assert_eq!(
            Time::from_millis(3) - Time::from_millis(1),
            Duration::from_millis(2)
        );
        assert_eq!(Time::from_millis(1500).to_string(), "1.500000s");
    }
}
