//! Liveness (invariant 11): a sink that never loses data but stops making progress is broken.
//!
//! Two checks. At every `Output::Timeout`: `None` only when nothing is pending, and a deadline
//! always in the future (both in [`super::Oracle::output`]). And once the driver says the
//! service has stopped injecting faults ([`super::Oracle::faults_stopped`]), while work is
//! pending some batch must end (confirmed or handed back) within `bound` of the previous end,
//! of the stop, or of the moment work became pending, whichever is latest.

use std::time::Duration;

use zerobus_sink::Time;

use super::{Violation, violation};

/// The oracle's liveness books.
#[derive(Debug, Default)]
pub struct Liveness {
    /// When the faults stopped, and the bound from then on.
    stopped: Option<(Time, Duration)>,
    /// The last time a batch ended, or work became pending after none was.
    last_progress: Time,
}

impl Liveness {
    pub(super) fn faults_stopped(&mut self, now: Time, bound: Duration) {
        self.stopped = Some((now, bound));
    }

    /// A batch was admitted; `pending` now counts it.
    pub(super) fn admitted(&mut self, now: Time, pending: u64) {
        if pending == 0 {
            self.last_progress = now;
        }
    }

    pub(super) fn progress(&mut self, now: Time) {
        self.last_progress = now;
    }

    pub(super) fn check(&self, now: Time, pending: u64) -> Result<(), Violation> {
        let Some((stopped_at, bound)) = self.stopped else {
            return Ok(());
        };
        if pending == 0 {
            return Ok(());
        }
        let since = self.last_progress.max(stopped_at);
        if now > since + bound {
            return Err(violation(
                11,
                format!(
                    "{pending} batches pending and none ended for {:?} (since {since}), over the \
                     bound of {bound:?} after faults stopped",
                    now - since
                ),
            ));
        }
        Ok(())
    }
}
