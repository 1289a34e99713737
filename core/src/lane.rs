//! Lanes and confirmation tokens, as types.
//!
//! A deployment may run a raw lane (the source-of-truth copy whose confirmations advance the
//! source position) and a derived lane (whose confirmations only extend a coverage range). A
//! derived-lane stall must never delay, and a derived confirmation must never be mistaken for, a
//! raw one (seed section 4, DESIGN.md invariant 6). So the lane is a type parameter of the sink
//! and of every token, and the compiler rejects bleeding across lanes.
//!
//! The misuses below do not compile. Each example states the error it must fail with; the
//! error codes are checked by rustdoc in its nightly mode, e.g.
//! `RUSTDOC=scripts/rustdoc-error-codes cargo test --workspace --doc` as CI runs it (stable
//! rustdoc only checks that they fail). Each differs from code that compiles (the crate docs'
//! run loop, `core/tests/invariants.rs::invariant_6_lanes_are_type_parameters`) in the one
//! misuse it names.
//!
//! A derived token cannot be submitted to a raw sink (mismatched types):
//!
//! ```compile_fail,E0308
//! use zerobus_sink::{CoverageRange, Raw, SinkConfig, SinkCore, TableSpec, Time, Token};
//! let mut sink = SinkCore::<Raw, Vec<u8>>::new(SinkConfig::default()).unwrap();
//! let table = sink.add_table(TableSpec::new("main.bronze.orders")).unwrap();
//! let token = Token::derived(CoverageRange::new("orders", 0, 0, 10));
//! let _ = sink.submit(Time::ZERO, table, vec![1u8, 2, 3], token);
//! ```
//!
//! A raw sink's confirmations cannot be used where derived ones are expected (mismatched types):
//!
//! ```compile_fail,E0308
//! use zerobus_sink::{Confirmed, Derived, Output, Raw, SinkConfig, SinkCore, Time};
//! fn extend_coverage(_burst: Confirmed<Derived>) {}
//! let mut sink = SinkCore::<Raw, Vec<u8>>::new(SinkConfig::default()).unwrap();
//! if let Output::Confirmed(burst) = sink.poll_output(Time::ZERO) {
//!     extend_coverage(burst);
//! }
//! ```
//!
//! A confirmation is committed at most once: committing consumes it (use of moved value):
//!
//! ```compile_fail,E0382
//! use zerobus_sink::{Output, Raw, SinkConfig, SinkCore, Time};
//! let mut sink = SinkCore::<Raw, Vec<u8>>::new(SinkConfig::default()).unwrap();
//! if let Output::Confirmed(burst) = sink.poll_output(Time::ZERO) {
//!     for confirmation in burst {
//!         let first = confirmation.commit();
//!         let second = confirmation.commit();
//!     }
//! }
//! ```
//!
//! Tokens cannot be duplicated, so one source position cannot ride on two batches (no `Clone`):
//!
//! ```compile_fail,E0599
//! use zerobus_sink::{Raw, Token};
//! let token: Token<Raw> = Token::raw("orders", 0, 42);
//! let copy = token.clone();
//! ```
//!
//! A confirmation cannot be forged outside the core: its constructor is private:
//!
//! ```compile_fail,E0624
//! use zerobus_sink::{Confirmation, Raw, SlotId, Time, Token};
//! let token = Token::raw("orders", 0, 42);
//! let offset = zerobus_sink::LogicalOffset::ZERO;
//! let forged = Confirmation::<Raw>::new(token, SlotId::from_index(0), offset, 1, Time::ZERO, Time::ZERO);
//! ```
//!
//! A raw token cannot carry a derived lane's coverage range (mismatched types):
//!
//! ```compile_fail,E0308
//! use zerobus_sink::{CoverageRange, Raw, Token};
//! let token = Token::<Raw>::new(CoverageRange::new("orders", 0, 0, 10));
//! ```
//!
//! A derived confirmation cannot advance the raw lane's source tracker (mismatched types):
//!
//! ```compile_fail,E0308
//! use zerobus_sink::{Derived, Output, SinkConfig, SinkCore, SourceTracker, Time};
//! let mut sink = SinkCore::<Derived, Vec<u8>>::new(SinkConfig::default()).unwrap();
//! let mut tracker = SourceTracker::new();
//! if let Output::Confirmed(burst) = sink.poll_output(Time::ZERO) {
//!     for confirmation in burst {
//!         let _ = tracker.confirm(confirmation);
//!     }
//! }
//! ```
//!
//! A confirmation cannot be duplicated to commit one position twice (no `Clone`):
//!
//! ```compile_fail,E0599
//! use zerobus_sink::{Output, Raw, SinkConfig, SinkCore, Time};
//! let mut sink = SinkCore::<Raw, Vec<u8>>::new(SinkConfig::default()).unwrap();
//! if let Output::Confirmed(burst) = sink.poll_output(Time::ZERO) {
//!     for confirmation in burst {
//!         let copy = confirmation.clone();
//!     }
//! }
//! ```
//!
//! A token rides on one batch: submitting it moves it into the sink (use of moved value):
//!
//! ```compile_fail,E0382
//! use zerobus_sink::{Raw, SinkConfig, SinkCore, TableSpec, Time, Token};
//! let mut sink = SinkCore::<Raw, Vec<u8>>::new(SinkConfig::default()).unwrap();
//! let table = sink.add_table(TableSpec::new("main.bronze.orders")).unwrap();
//! let token = Token::raw("orders", 0, 42);
//! let _ = sink.submit(Time::ZERO, table, vec![1u8], token);
//! let _ = sink.submit(Time::ZERO, table, vec![2u8], token);
//! ```
//!
//! A sink's lane is one of the sealed lanes, never another type (unsatisfied trait bound):
//!
//! ```compile_fail,E0277
//! use zerobus_sink::{SinkConfig, SinkCore};
//! let sink = SinkCore::<String, Vec<u8>>::new(SinkConfig::default());
//! ```
//!
//! No lane can be added outside this crate: the trait is sealed (unsatisfied trait bound):
//!
//! ```compile_fail,E0277
//! use zerobus_sink::{Lane, SourcePosition};
//! #[derive(Debug)]
//! struct Sneaky;
//! impl Lane for Sneaky {
//!     type Position = SourcePosition;
//!     const NAME: &'static str = "sneaky";
//! }
//! ```

use std::fmt;
use std::marker::PhantomData;

use crate::ids::{LogicalOffset, SlotId};
use crate::time::Time;

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Raw {}
    impl Sealed for super::Derived {}
}

/// A lane: the kind of confirmation a sink produces. Sealed: the only lanes are [`Raw`] and
/// [`Derived`].
pub trait Lane: sealed::Sealed + fmt::Debug + 'static {
    /// What a token of this lane carries back to the caller on confirmation.
    type Position: fmt::Debug + Clone + PartialEq + Eq + Send + Sync + SourceSpan + 'static;
    /// The lane's name, for logs and metric labels.
    const NAME: &'static str;
}

/// Where in the source a position lies, whatever its lane: its batch's rows come from
/// `topic`/`partition`, offsets `start()..=end()` (a raw position names one offset, the batch's
/// last record: start and end are both it). The adapter stamps these on every row it writes
/// (`_twg_source_*`), so that readers can drop rows a replay wrote twice.
pub trait SourceSpan {
    /// The source topic (or stream, or file set).
    fn topic(&self) -> &str;
    /// The partition within it.
    fn partition(&self) -> u32;
    /// The first offset covered.
    fn start(&self) -> i64;
    /// The last offset covered.
    fn end(&self) -> i64;
}

impl SourceSpan for SourcePosition {
    fn topic(&self) -> &str {
        &self.topic
    }
    fn partition(&self) -> u32 {
        self.partition
    }
    fn start(&self) -> i64 {
        self.offset
    }
    fn end(&self) -> i64 {
        self.offset
    }
}

impl SourceSpan for CoverageRange {
    fn topic(&self) -> &str {
        &self.topic
    }
    fn partition(&self) -> u32 {
        self.partition
    }
    fn start(&self) -> i64 {
        self.start
    }
    fn end(&self) -> i64 {
        self.end
    }
}

/// The raw lane: confirmations advance a source position (topic, partition, offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raw {}

/// The derived lane: confirmations extend a coverage range; they never move a source position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Derived {}

impl Lane for Raw {
    type Position = SourcePosition;
    const NAME: &'static str = "raw";
}

impl Lane for Derived {
    type Position = CoverageRange;
    const NAME: &'static str = "derived";
}

/// A position in the source (for example a Kafka record), committed once its batch is durable.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SourcePosition {
    /// The source topic or stream.
    pub topic: String,
    /// The partition within the topic.
    pub partition: u32,
    /// The offset of the last record in the batch.
    pub offset: i64,
}

/// A range of source offsets `[start, end)` that a derived batch covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CoverageRange {
    /// The source topic or stream.
    pub topic: String,
    /// The partition within the topic.
    pub partition: u32,
    /// The first offset covered.
    pub start: i64,
    /// One past the last offset covered.
    pub end: i64,
}

impl CoverageRange {
    /// The range `[start, end)` of `topic`/`partition`.
    #[must_use]
    pub fn new(topic: impl Into<String>, partition: u32, start: i64, end: i64) -> CoverageRange {
        CoverageRange {
            topic: topic.into(),
            partition,
            start,
            end,
        }
    }
}

/// A confirmation token of lane `L`, handed to the sink with a batch and handed back, as a
/// [`Confirmation`], only once the batch is durable. Not `Clone`: one token, one batch.
pub struct Token<L: Lane> {
    position: L::Position,
    lane: PhantomData<fn() -> L>,
}

impl Token<Raw> {
    /// A raw-lane token for the record at `offset` of `topic`/`partition`.
    #[must_use]
    pub fn raw(topic: impl Into<String>, partition: u32, offset: i64) -> Token<Raw> {
        Token::new(SourcePosition {
            topic: topic.into(),
            partition,
            offset,
        })
    }
}

impl Token<Derived> {
    /// A derived-lane token covering `range`.
    #[must_use]
    pub fn derived(range: CoverageRange) -> Token<Derived> {
        Token::new(range)
    }
}

impl<L: Lane> Token<L> {
    /// A token carrying `position`.
    #[must_use]
    pub fn new(position: L::Position) -> Token<L> {
        Token {
            position,
            lane: PhantomData,
        }
    }

    /// What this token will confirm.
    #[must_use]
    pub fn position(&self) -> &L::Position {
        &self.position
    }
}

impl<L: Lane> fmt::Debug for Token<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("lane", &L::NAME)
            .field("position", &self.position)
            .finish()
    }
}

/// Proof that one batch is durable: only the core creates it, after a durable ack covered every
/// row of the batch. [`commit`](Confirmation::commit) consumes it, so each token is committed at
/// most once.
#[must_use = "a confirmation is the only signal that its batch is durable; commit it"]
pub struct Confirmation<L: Lane> {
    token: Token<L>,
    slot: SlotId,
    offset: LogicalOffset,
    rows: u64,
    submitted_at: Time,
    confirmed_at: Time,
}

impl<L: Lane> Confirmation<L> {
    pub(crate) fn new(
        token: Token<L>,
        slot: SlotId,
        offset: LogicalOffset,
        rows: u64,
        submitted_at: Time,
        confirmed_at: Time,
    ) -> Confirmation<L> {
        Confirmation {
            token,
            slot,
            offset,
            rows,
            submitted_at,
            confirmed_at,
        }
    }

    /// The position this confirmation makes durable.
    #[must_use]
    pub fn position(&self) -> &L::Position {
        &self.token.position
    }

    /// The slot whose stream carried the batch.
    #[must_use]
    pub fn slot(&self) -> SlotId {
        self.slot
    }

    /// The batch's logical offset in its slot.
    #[must_use]
    pub fn offset(&self) -> LogicalOffset {
        self.offset
    }

    /// Rows in the batch as submitted.
    #[must_use]
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// When the batch was submitted.
    #[must_use]
    pub fn submitted_at(&self) -> Time {
        self.submitted_at
    }

    /// When the durable ack covering it arrived.
    #[must_use]
    pub fn confirmed_at(&self) -> Time {
        self.confirmed_at
    }

    /// Consumes the confirmation and yields the position to commit (a source offset for
    /// [`Raw`], a coverage range for [`Derived`]).
    #[must_use = "the position is what the caller commits"]
    pub fn commit(self) -> L::Position {
        self.token.position
    }
}

impl<L: Lane> fmt::Debug for Confirmation<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Confirmation")
            .field("lane", &L::NAME)
            .field("slot", &self.slot)
            .field("offset", &self.offset)
            .field("rows", &self.rows)
            .field("position", &self.token.position)
            .finish()
    }
}
