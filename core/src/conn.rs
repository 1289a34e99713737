//! The connection id: a [`ConnGen`] of one slot of one sink, typed by the sink's lane. It sits
//! above both the plain ids and the lanes, which it combines.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::ids::{ConnGen, SlotId};
use crate::lane::Lane;

/// Hands out sink identities: one per [`SinkCore`](crate::SinkCore), never reused in a process.
static NEXT_SINK: AtomicU32 = AtomicU32::new(1);

/// A fresh sink identity.
pub(crate) fn next_sink() -> u32 {
    NEXT_SINK.fetch_add(1, Ordering::Relaxed)
}

/// One connection of one sink of lane `L`: the sink's identity, the slot and the generation.
///
/// Only the core mints these (in [`Output::Open`](crate::Output::Open)); there is no public
/// constructor. Every [`Input`](crate::Input) names the connection it is about with one, so:
/// - an input for a connection of a derived-lane sink cannot be handed to a raw-lane sink: it
///   does not compile (the lane is a type parameter, see [`crate::lane`]);
/// - an input for a connection of another sink of the same lane, or of a connection this sink
///   has closed, is ignored as stale (invariant 4).
///
/// A connection id cannot be forged: its constructor is private (private associated function):
///
/// ```compile_fail,E0624
/// use zerobus_sink::{ConnId, Output, Raw, SinkConfig, SinkCore, Time};
/// let mut sink = SinkCore::<Raw, Vec<u8>>::new(SinkConfig::default()).unwrap();
/// if let Output::Open { conn, .. } = sink.poll_output(Time::ZERO) {
///     // Another sink's identity on this sink's slot and generation.
///     let forged = ConnId::<Raw>::new(7, conn.slot(), conn.generation());
/// }
/// ```
///
/// nor built from its parts (private fields):
///
/// ```compile_fail,E0451
/// use std::marker::PhantomData;
/// use zerobus_sink::{ConnId, Output, Raw, SinkConfig, SinkCore, Time};
/// let mut sink = SinkCore::<Raw, Vec<u8>>::new(SinkConfig::default()).unwrap();
/// if let Output::Open { conn, .. } = sink.poll_output(Time::ZERO) {
///     let (slot, generation) = (conn.slot(), conn.generation());
///     let forged: ConnId<Raw> = ConnId { sink: 7, slot, generation, lane: PhantomData };
/// }
/// ```
///
/// A raw connection cannot be mistaken for a derived one, even in a comparison (mismatched
/// types):
///
/// ```compile_fail,E0308
/// use zerobus_sink::{Derived, Output, Raw, SinkConfig, SinkCore, Time};
/// let mut raw = SinkCore::<Raw, Vec<u8>>::new(SinkConfig::default()).unwrap();
/// let mut derived = SinkCore::<Derived, Vec<u8>>::new(SinkConfig::default()).unwrap();
/// if let (Output::Open { conn: a, .. }, Output::Open { conn: b, .. }) =
///     (raw.poll_output(Time::ZERO), derived.poll_output(Time::ZERO))
/// {
///     let same = a == b;
/// }
/// ```
pub struct ConnId<L: Lane> {
    pub(crate) sink: u32,
    pub(crate) slot: SlotId,
    pub(crate) generation: ConnGen,
    lane: PhantomData<fn() -> L>,
}

impl<L: Lane> ConnId<L> {
    pub(crate) fn new(sink: u32, slot: SlotId, generation: ConnGen) -> ConnId<L> {
        ConnId {
            sink,
            slot,
            generation,
            lane: PhantomData,
        }
    }

    /// The slot the connection belongs to.
    #[must_use]
    pub fn slot(self) -> SlotId {
        self.slot
    }

    /// The connection's generation (a label for logs).
    #[must_use]
    pub fn generation(self) -> ConnGen {
        self.generation
    }

    fn key(self) -> (u32, SlotId, ConnGen) {
        (self.sink, self.slot, self.generation)
    }
}

impl<L: Lane> Clone for ConnId<L> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L: Lane> Copy for ConnId<L> {}

impl<L: Lane> PartialEq for ConnId<L> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<L: Lane> Eq for ConnId<L> {}

impl<L: Lane> PartialOrd for ConnId<L> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<L: Lane> Ord for ConnId<L> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

impl<L: Lane> Hash for ConnId<L> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl<L: Lane> fmt::Debug for ConnId<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ConnId({}, sink {}, {}, {})",
            L::NAME,
            self.sink,
            self.slot,
            self.generation
        )
    }
}

impl<L: Lane> fmt::Display for ConnId<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, {}", self.slot, self.generation)
    }
}
