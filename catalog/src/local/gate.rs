//! How many tables one [`LocalDelta`](super::LocalDelta) works on at once.
//!
//! delta-rs loads a table's whole state to change it: its last checkpoint, the log entries
//! after it and every live file, which grows with the table (the emulator never compacts). A
//! drift reconciles every table of a sink at once: in the hour's soak, with all 50 tables
//! loaded together, a drift held about 100 MiB for the moment it lasted, ten times the sink's
//! own heap, and the allocator kept part of it mapped for good. Four at a time was the fastest
//! on this machine's 2 cores (loading 50 tables of 400 commits with their files: 2.6 s one at
//! a time, 56 MiB peak RSS; 1.7 s and 76 MiB four at a time; 1.9 s and 170 MiB all at once).
//! Describing a table reads no files (`metadata_snapshot`), but takes a place too.

use std::sync::Arc;

use tokio::sync::{Semaphore, SemaphorePermit};

/// Tables worked on at once unless
/// [`LocalDelta::with_tables_at_once`](super::LocalDelta::with_tables_at_once) says otherwise.
pub const TABLES_AT_ONCE: usize = 4;

/// The permits, shared by a catalog's clones.
#[derive(Clone)]
pub(super) struct Gate(Arc<Semaphore>);

impl Gate {
    pub(super) fn new(at_once: usize) -> Gate {
        Gate(Arc::new(Semaphore::new(at_once.max(1))))
    }

    /// Waits for a permit. `None` only if the semaphore were closed, which it never is: the
    /// operation then goes on unbounded rather than fail.
    pub(super) async fn enter(&self) -> Option<SemaphorePermit<'_>> {
        self.0.acquire().await.ok()
    }

    /// Permits not taken at this moment.
    pub(super) fn free(&self) -> usize {
        self.0.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::Gate;

    fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_gate_lets_n_in_and_the_next_waits_until_one_leaves() {
        let gate = Gate::new(2);
        let Poll::Ready(Some(a)) = poll_once(pin!(gate.enter())) else {
            panic!("the first enters at once");
        };
        let Poll::Ready(Some(_b)) = poll_once(pin!(gate.enter())) else {
            panic!("the second enters at once");
        };
        assert_eq!(gate.free(), 0);
        let mut third = pin!(gate.enter());
        assert!(poll_once(third.as_mut()).is_pending(), "the third waits");
        drop(a);
        assert!(
            matches!(poll_once(third.as_mut()), Poll::Ready(Some(_))),
            "the third enters once the first has left"
        );
    }

    #[test]
    fn a_gate_of_zero_still_lets_one_in() {
        let gate = Gate::new(0);
        assert_eq!(gate.free(), 1);
    }
}
