//! The deterministic simulator: a virtual clock, a seeded PRNG, a model of the Zerobus service
//! per connection, a source that respects backpressure, and the [`Oracle`] checked after every
//! step. A failing run prints its seed, its step and a one-line command that replays it.
//!
//! The service model: each wire message crosses a link of finite bandwidth, lands in a
//! write-ahead log at a group-commit tick, and the sync becomes durable after a latency drawn
//! from a log-normal distribution (P50 200 ms, P95 500 ms by default, as the service documents;
//! now and then a slow sync ten times longer). The server acks the cumulative rows durable so
//! far (so acks coalesce), sometimes only part of them. Faults, each drawn from the seed: a
//! live stream breaks (poison), an open fails (transient), the server refuses streams beyond a
//! per-table limit (concurrency reject), asks for a rotation, stops acking a stream (ack
//! timeout), acks more than was sent (forward ack), refuses the credentials (auth rejection).
//! Acks of dropped connections still arrive (stale; they must be ignored). Several tables share
//! a global stream cap, so the least recently used one is evicted and reopened. Tables
//! provisioned through a catalog ask for each new schema to be reconciled; the source's schema
//! drifts now and then, the simulated catalog answers after a latency and sometimes refuses
//! (the source then drops what it cannot write, as a dead-letter queue, and moves on to a
//! fixed schema).
//!
//! Faults last until [`SimConfig::faults_until`] of the batches are confirmed; then
//! the service behaves and the oracle checks liveness against [`SimConfig::liveness_bound`].

mod config;

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::Duration;

use zerobus_sink::{
    Batch, Code, ConnId, Input, Metrics, Output, PoolSizing, Raw, RejectReason, SchemaId, SinkCore,
    SlotId, StreamError, TableId, TableSpec, Time, Token,
};

use crate::batch::SimBatch;
use crate::oracle::{Oracle, Tally, Violation};
use crate::rng::Rng;

pub use config::{Faults, Latency, SimConfig, SimTable};

/// How many faults of each kind the service model injected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Acks of only part of what was durable.
    pub partial_acks: u64,
    /// Live streams broken with `UNAVAILABLE`.
    pub poisons: u64,
    /// Acks above what was sent.
    pub forward_acks: u64,
    /// Rotation requests.
    pub rotations: u64,
    /// Opens refused with `UNAVAILABLE`.
    pub open_failures: u64,
    /// Opens refused with `UNAUTHENTICATED`.
    pub auth_rejections: u64,
    /// Opens refused beyond the per-table stream limit.
    pub concurrency_rejects: u64,
    /// Streams that never acked.
    pub stalls: u64,
    /// Syncs ten times slower than drawn.
    pub slow_syncs: u64,
    /// Source schema drifts on provisioned tables.
    pub drifts: u64,
    /// Reconciles the catalog refused.
    pub schema_refusals: u64,
    /// Acks the service sent again with the count it had already acked (a repeated offset).
    pub repeated_acks: u64,
    /// Batches the source dropped because their schema was refused (its dead-letter queue).
    pub dead_lettered: u64,
}

impl FaultCounts {
    /// The sum of two counts.
    #[must_use]
    pub fn plus(self, o: FaultCounts) -> FaultCounts {
        FaultCounts {
            partial_acks: self.partial_acks + o.partial_acks,
            poisons: self.poisons + o.poisons,
            forward_acks: self.forward_acks + o.forward_acks,
            rotations: self.rotations + o.rotations,
            open_failures: self.open_failures + o.open_failures,
            auth_rejections: self.auth_rejections + o.auth_rejections,
            concurrency_rejects: self.concurrency_rejects + o.concurrency_rejects,
            stalls: self.stalls + o.stalls,
            slow_syncs: self.slow_syncs + o.slow_syncs,
            drifts: self.drifts + o.drifts,
            schema_refusals: self.schema_refusals + o.schema_refusals,
            repeated_acks: self.repeated_acks + o.repeated_acks,
            dead_lettered: self.dead_lettered + o.dead_lettered,
        }
    }
}

/// What a successful run did.
#[derive(Clone, Debug)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// Steps (events) processed.
    pub steps: u64,
    /// How batches ended.
    pub tally: Tally,
    /// Virtual time from start to close.
    pub elapsed: Duration,
    /// Rows confirmed durable.
    pub rows_delivered: u64,
    /// The core's metrics at the end.
    pub metrics: Metrics,
    /// The faults the service model injected.
    pub faults: FaultCounts,
    /// The longest a table waited for streams with room for it under the cap
    /// ([`Oracle::longest_wait_with_room`]; invariant 13): 0 when every drain hands freed
    /// streams out at once.
    pub longest_wait_with_room: Duration,
}

impl SimReport {
    /// Durable rows per virtual second.
    #[must_use]
    pub fn rows_per_sec(&self) -> f64 {
        self.rows_delivered as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// A failed run: the invariant, where, and how to replay it.
#[derive(Clone, Debug)]
pub struct SimFailure {
    /// The profile run.
    pub profile: String,
    /// The seed.
    pub seed: u64,
    /// The step at which the oracle objected.
    pub step: u64,
    /// What broke.
    pub violation: Violation,
}

impl fmt::Display for SimFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at step {} of seed {} (profile {})\nreproduce: ZEROBUS_SIM_PROFILE={} ZEROBUS_SIM_SEED={} cargo test -p zerobus-sink-testkit --test simulator reproduce -- --nocapture",
            self.violation, self.step, self.seed, self.profile, self.profile, self.seed
        )
    }
}

impl std::error::Error for SimFailure {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Source,
    /// The open's answer: READY, or a refusal.
    Opened {
        table: TableId,
        conn: ConnId<Raw>,
    },
    AckCheck {
        conn: ConnId<Raw>,
    },
    /// The service acks `up_to` again (a count it acked before), `left` more times.
    RepeatAck {
        conn: ConnId<Raw>,
        up_to: u64,
        left: u8,
    },
    /// After our half-close, the server ends the call.
    ServerEnd {
        conn: ConnId<Raw>,
    },
    /// The catalog's answer to a reconcile.
    Reconciled {
        table: TableId,
        schema: SchemaId,
        ok: bool,
    },
    Wake,
}

#[derive(Debug, Default)]
struct ServerConn {
    table: Option<TableId>,
    /// (durable at, cumulative rows after this message).
    wal: VecDeque<(Time, u64)>,
    wal_tail: Time,
    link_free: Time,
    /// The group-commit tick (in microseconds) being filled, and when it becomes durable.
    sync: Option<u64>,
    sync_durable_at: Time,
    received: u64,
    acked: u64,
    stalled: bool,
    open: bool,
    /// The client closed or cancelled the call: it never counts as open again.
    gone: bool,
}

struct Sim<'a> {
    config: &'a SimConfig,
    rng: Rng,
    now: Time,
    seq: u64,
    events: BTreeMap<(Time, u64), Event>,
    next_wake: Option<Time>,
    sink: SinkCore<Raw, SimBatch>,
    tables: Vec<TableId>,
    oracle: Oracle,
    servers: BTreeMap<ConnId<Raw>, ServerConn>,
    next_id: u64,
    produced: u64,
    retry: VecDeque<(TableId, SimBatch)>,
    blocked: Option<(TableId, SimBatch)>,
    waiting_for: Option<u64>,
    closing: bool,
    faulty: bool,
    injected: FaultCounts,
    step: u64,
    /// Each table's current source schema (0 for tables taken as they are).
    schemas: Vec<u32>,
}

/// Runs one simulation of profile `profile` (used only to name the reproduction command).
pub fn simulate(profile: &str, config: &SimConfig) -> Result<SimReport, SimFailure> {
    let fail = |step, violation| SimFailure {
        profile: profile.to_owned(),
        seed: config.seed,
        step,
        violation,
    };
    let setup = |message: String| {
        fail(
            0,
            Violation {
                invariant: 10,
                message,
            },
        )
    };
    let mut sink = SinkCore::new(config.sink).map_err(|e| setup(e.to_string()))?;
    let mut oracle = Oracle::new(config.sink);
    let mut tables = Vec::new();
    for (i, t) in config.tables.iter().enumerate() {
        let spec = TableSpec::new(format!("main.sim.t{i}")).sizing(PoolSizing::fixed(t.slots));
        let spec = if t.keyed { spec.keyed() } else { spec };
        let spec = if t.provisioned {
            spec.reconciled()
        } else {
            spec
        };
        let id = sink.add_table(spec).map_err(|e| setup(e.to_string()))?;
        oracle.register_table(id, u64::from(t.slots));
        if t.provisioned {
            oracle.provisioned(id);
        }
        tables.push(id);
    }
    let mut sim = Sim {
        config,
        rng: Rng::new(config.seed),
        now: Time::ZERO,
        seq: 0,
        events: BTreeMap::new(),
        next_wake: None,
        sink,
        tables,
        oracle,
        servers: BTreeMap::new(),
        next_id: 0,
        produced: 0,
        retry: VecDeque::new(),
        blocked: None,
        waiting_for: None,
        closing: false,
        faulty: true,
        injected: FaultCounts::default(),
        step: 0,
        schemas: config
            .tables
            .iter()
            .map(|t| u32::from(t.provisioned))
            .collect(),
    };
    sim.schedule(Time::ZERO, Event::Source);
    let ran = sim.run().and_then(|()| sim.oracle.finish(&sim.sink));
    let tally = ran.map_err(|violation| fail(sim.step, violation))?;
    Ok(SimReport {
        seed: config.seed,
        steps: sim.step,
        tally,
        elapsed: sim.now - Time::ZERO,
        rows_delivered: sim.sink.watermarks().rows_delivered,
        metrics: sim.sink.metrics().clone(),
        faults: sim.injected,
        longest_wait_with_room: sim.oracle.longest_wait_with_room(),
    })
}

impl Sim<'_> {
    fn schedule(&mut self, at: Time, event: Event) {
        self.seq += 1;
        self.events.insert((at, self.seq), event);
    }

    /// Faults last until [`SimConfig::faults_until`] of the batches are confirmed.
    fn stop_faults_when_due(&mut self) {
        let due = self.config.batches as f64 * self.config.faults_until;
        if self.faulty && self.oracle.tally().confirmed as f64 >= due {
            self.faulty = false;
            self.oracle.faults_stopped(self.config.liveness_bound());
        }
    }

    /// A fault with probability `p`, while faults last.
    fn fault(&mut self, p: f64) -> bool {
        self.faulty && self.rng.chance(p)
    }

    fn run(&mut self) -> Result<(), Violation> {
        while let Some(((at, _), event)) = self.events.pop_first() {
            self.step += 1;
            if self.step > self.config.max_steps {
                return Err(Violation {
                    invariant: 11,
                    message: format!(
                        "no end after {} steps at {} (livelock?): {:?}, {} produced, {} waiting for resubmission",
                        self.step,
                        self.now,
                        self.oracle.tally(),
                        self.produced,
                        self.retry.len()
                    ),
                });
            }
            self.now = self.now.max(at);
            self.event(event)?;
            self.drain()?;
            if self.closing && self.sink.is_closed() {
                return Ok(());
            }
        }
        Err(Violation {
            invariant: 11,
            message: "the simulation ran out of events before the sink closed".into(),
        })
    }

    fn event(&mut self, event: Event) -> Result<(), Violation> {
        match event {
            Event::Source => return self.produce(),
            Event::Opened { table, conn } => self.answer_open(table, conn),
            Event::AckCheck { conn } => self.server_ack(conn),
            Event::RepeatAck { conn, up_to, left } => self.repeat_ack(conn, up_to, left),
            Event::ServerEnd { conn } => {
                self.server_ack(conn);
                let _ = self.sink.handle(self.now, Input::Closed { conn });
            }
            Event::Reconciled { table, schema, ok } => {
                self.oracle.reconciled(table, schema.0, ok);
                let outcome = if ok {
                    Ok(())
                } else {
                    // The source's owners fix it: its next batches have a new schema.
                    if let Some(current) = self.schemas.get_mut(table.index())
                        && *current == schema.0
                    {
                        *current += 1;
                    }
                    Err(format!(
                        "column c{} of {schema}: narrowing (simulated)",
                        schema.0
                    ))
                };
                let _ = self.sink.reconciled(self.now, table, schema, outcome);
            }
            Event::Wake => self.next_wake = None,
        }
        Ok(())
    }

    /// The server answers an open: refusals first, then READY.
    fn answer_open(&mut self, table: TableId, conn: ConnId<Raw>) {
        if self.servers.get(&conn).is_none_or(|s| s.gone) {
            return; // the client cancelled the call before the answer
        }
        let f = self.config.faults;
        let open_for_table = self
            .servers
            .values()
            .filter(|s| s.open && s.table == Some(table))
            .count();
        let status = |code| StreamError::status(code, format!("{code:?} (simulated)"));
        let error = if f
            .streams_per_table
            .is_some_and(|limit| open_for_table >= usize::from(limit))
        {
            self.injected.concurrency_rejects += 1;
            Some(status(Code::ResourceExhausted))
        } else if self.fault(f.auth_rejection) {
            self.injected.auth_rejections += 1;
            Some(status(Code::Unauthenticated))
        } else if self.fault(f.open_failure) {
            self.injected.open_failures += 1;
            Some(status(Code::Unavailable))
        } else {
            None
        };
        let stalled = self.fault(f.stall);
        let input = match error {
            Some(error) => Input::Failed { conn, error },
            None => {
                if let Some(server) = self.servers.get_mut(&conn) {
                    server.open = true;
                    server.stalled = stalled;
                    self.injected.stalls += u64::from(stalled);
                }
                Input::ready(conn)
            }
        };
        let _ = self.sink.handle(self.now, input);
    }

    /// The source: submit the next batch (a retry first), or close once everything is produced.
    fn produce(&mut self) -> Result<(), Violation> {
        if self.closing || self.blocked.is_some() || self.waiting_for.is_some() {
            return Ok(());
        }
        let (table, batch) = match self.retry.pop_front() {
            Some(next) => next,
            None if self.produced < self.config.batches => {
                self.produced += 1;
                let rows = self
                    .rng
                    .range(self.config.rows.0, self.config.rows.1)
                    .max(1);
                let table = self.tables[self.rng.range(0, self.tables.len() as u64 - 1) as usize];
                let provisioned = self
                    .config
                    .tables
                    .get(table.index())
                    .is_some_and(|t| t.provisioned);
                if provisioned && self.rng.chance(self.config.drift) {
                    self.injected.drifts += 1;
                    self.schemas[table.index()] += 1;
                }
                let schema = self.schemas[table.index()];
                (
                    table,
                    SimBatch::new(u64::MAX, rows, self.config.bytes_per_row).of_schema(schema),
                )
            }
            None => {
                self.sink.flush(self.now);
                self.closing = true;
                self.oracle.closing();
                self.sink
                    .close(self.now, self.now + Duration::from_secs(600));
                return Ok(());
            }
        };
        self.submit(table, batch)
    }

    fn submit(&mut self, table: TableId, batch: SimBatch) -> Result<(), Violation> {
        // Each admission (a retry too) is a new batch to the oracle: rows [0, rows) of a new id.
        let id = self.next_id;
        let fresh = SimBatch::new(id, batch.rows, batch.bytes_per_row).of_schema(batch.schema);
        let token = Token::raw("sim", 0, i64::try_from(id).unwrap_or(i64::MAX));
        let keyed = self
            .config
            .tables
            .get(table.index())
            .is_some_and(|t| t.keyed);
        let slots: Vec<SlotId> = self.sink.table_slots(table).collect();
        let key = keyed.then(|| self.rng.range(0, 7));
        let slot = key.map(|k| slots[usize::try_from(k).unwrap_or(0) % slots.len().max(1)]);
        let route = match key {
            Some(k) => table.key(k),
            None => table.schema(SchemaId(batch.schema)),
        };
        self.oracle.set_now(self.now);
        match self.sink.submit(self.now, route, fresh, token) {
            Ok(_) => {
                self.next_id += 1;
                self.oracle
                    .admitted(id, fresh.rows, fresh.bytes(), table, slot)?;
                if self.rng.chance(self.config.flush) {
                    self.sink.flush(self.now);
                }
                if self.config.inline_wait {
                    self.waiting_for = Some(id);
                } else {
                    self.schedule(self.now + self.config.source_interval, Event::Source);
                }
                Ok(())
            }
            Err(rejected) => {
                // Every refusal is checked against the oracle's own books first.
                let n = slots.len() as u64;
                self.oracle.refused(
                    &self.sink,
                    fresh.rows,
                    fresh.bytes(),
                    table,
                    slot,
                    n,
                    &rejected.reason,
                )?;
                match rejected.reason {
                    RejectReason::Full { .. } => self.blocked = Some((table, batch)),
                    // The table failed fatally: the pipeline stops writing to it (not admitted,
                    // so not lost); carry on with the others.
                    RejectReason::TableFailed { .. } => self.schedule(self.now, Event::Source),
                    // The schema was refused: the source sets the batch aside (its dead-letter
                    // queue; not admitted, so not lost) and carries on.
                    RejectReason::SchemaRefused { .. } => {
                        self.injected.dead_lettered += 1;
                        self.schedule(self.now, Event::Source);
                    }
                    _ => {
                        return Err(Violation {
                            invariant: 1,
                            message: format!(
                                "submit of {} rows refused: {}",
                                batch.rows, rejected.reason
                            ),
                        });
                    }
                }
                Ok(())
            }
        }
    }

    /// Something ended: a blocked or waiting source may go on.
    fn unblock(&mut self, ended: &[u64]) -> Result<(), Violation> {
        if self.waiting_for.is_some_and(|id| ended.contains(&id)) {
            self.waiting_for = None;
            self.schedule(self.now, Event::Source);
        }
        if let Some((table, batch)) = self.blocked.take() {
            self.submit(table, batch)?;
        }
        Ok(())
    }

    /// The service repeats an ack it sent before (official SDK issue #639): the core must
    /// take it as no progress; the oracle checks every `Timeout` against the connection's ack
    /// deadline (so a stream stuck on one offset is still recovered within the ack timeout).
    fn repeat_ack(&mut self, conn: ConnId<Raw>, up_to: u64, left: u8) {
        if !self.servers.get(&conn).is_some_and(|s| s.open && !s.gone) {
            return;
        }
        self.injected.repeated_acks += 1;
        let _ = self.sink.handle(self.now, Input::acked(conn, up_to));
        self.oracle.acked(conn, up_to);
        if left > 1 {
            let at = self.now + Duration::from_millis(self.rng.range(100, 1_000));
            let left = left - 1;
            self.schedule(at, Event::RepeatAck { conn, up_to, left });
        }
    }

    fn server_ack(&mut self, conn: ConnId<Raw>) {
        let faults = self.config.faults;
        let now = self.now;
        let Some(server) = self.servers.get(&conn) else {
            return;
        };
        if server.stalled {
            return;
        }
        let (acked, received, live) = (server.acked, server.received, server.open);
        let mut wal = server.wal.clone();
        while wal.len() > 1 && wal[1].0 <= now {
            wal.pop_front();
        }
        let durable = match wal.front() {
            Some(&(at, rows)) if at <= now => rows,
            _ => return,
        };
        if durable <= acked {
            return;
        }
        let mut up_to = durable;
        let mut again = false;
        if durable - acked > 1 && self.fault(faults.partial_ack) {
            self.injected.partial_acks += 1;
            up_to = self.rng.range(acked + 1, durable - 1);
            again = true;
        }
        let input = if live && self.fault(faults.poison) {
            self.injected.poisons += 1;
            let error = StreamError::status(Code::Unavailable, "stream reset (simulated)");
            Input::Failed { conn, error }
        } else if live && self.fault(faults.forward_ack) {
            self.injected.forward_acks += 1;
            Input::acked(conn, received + 1)
        } else {
            Input::acked(conn, up_to)
        };
        if let Some(server) = self.servers.get_mut(&conn) {
            server.wal = wal;
            match &input {
                Input::Failed { .. } => server.open = false,
                _ if up_to <= server.received => server.acked = server.acked.max(up_to),
                _ => {}
            }
        }
        if again {
            self.schedule(now + Duration::from_millis(5), Event::AckCheck { conn });
        }
        if live && !matches!(input, Input::Failed { .. }) && self.fault(faults.repeated_ack) {
            // Mostly a few repeats; one time in four the stream is stuck from here on and
            // repeats this count for minutes (the stuck stream of official SDK issue #639),
            // which only the ack timeout can end.
            let stuck = self.rng.chance(0.25);
            if stuck && let Some(server) = self.servers.get_mut(&conn) {
                server.stalled = true;
            }
            let left = if stuck {
                u8::MAX
            } else {
                self.rng.range(1, 3) as u8
            };
            let at = now + Duration::from_millis(self.rng.range(1, 50));
            self.schedule(at, Event::RepeatAck { conn, up_to, left });
        }
        let ack = match input {
            Input::Result { result, .. } => Some(result.ack_up_to_records),
            _ => None,
        };
        let _ = self.sink.handle(now, input);
        if let Some(up_to) = ack {
            // The oracle decides for itself whether the ack counts.
            self.oracle.acked(conn, up_to);
        }
        if live && self.fault(faults.rotation) {
            self.injected.rotations += 1;
            let grace = Duration::from_millis(self.rng.range(200, 3_000));
            self.oracle.rotation_requested(conn.slot());
            let _ = self.sink.handle(now, Input::rotate(conn, grace));
        }
    }

    /// A message crosses the link, lands in the write-ahead log at the next group-commit tick,
    /// and that sync becomes durable after a latency drawn once per sync (so a slow sync delays
    /// what it carries, and, the log being ordered, everything after it).
    fn transmit(&mut self, conn: ConnId<Raw>, rows: u64, bytes: u64) {
        let (bandwidth, sync) = (self.config.stream_bandwidth.max(1), self.config.wal_sync);
        let now = self.now;
        let latency = self.config.ack_latency.draw(&mut self.rng);
        let slow = self.fault(self.config.faults.slow_sync);
        let server = self.servers.entry(conn).or_default();
        let on_wire = Duration::from_secs_f64(bytes as f64 / bandwidth as f64);
        server.link_free = server.link_free.max(now) + on_wire;
        let tick = sync.as_micros().max(1) as u64;
        let sync_at = server
            .link_free
            .as_micros()
            .div_ceil(tick)
            .saturating_mul(tick);
        if server.sync != Some(sync_at) {
            server.sync = Some(sync_at);
            let latency = if slow {
                self.injected.slow_syncs += 1;
                latency * 10
            } else {
                latency
            };
            server.sync_durable_at = Time::from_micros(sync_at) + latency;
        }
        let durable_at = server.sync_durable_at.max(server.wal_tail);
        server.wal_tail = durable_at;
        server.received += rows;
        server.wal.push_back((durable_at, server.received));
        self.schedule(durable_at, Event::AckCheck { conn });
    }

    fn drain(&mut self) -> Result<(), Violation> {
        self.oracle.set_now(self.now);
        loop {
            let out = self.sink.poll_output(self.now);
            match &out {
                Output::Timeout(at) => {
                    if let Some(at) = *at
                        && self.next_wake.is_none_or(|w| at < w)
                    {
                        self.next_wake = Some(at);
                        self.schedule(at, Event::Wake);
                    }
                }
                Output::Reconcile { table, schema } => {
                    let (lo, hi) = self.config.reconcile_latency;
                    let micros = self.rng.range(
                        u64::try_from(lo.as_micros()).unwrap_or(0),
                        u64::try_from(hi.as_micros()).unwrap_or(0).max(1),
                    );
                    let refused = self.fault(self.config.faults.schema_refusal);
                    self.injected.schema_refusals += u64::from(refused);
                    let event = Event::Reconciled {
                        table: *table,
                        schema: *schema,
                        ok: !refused,
                    };
                    self.schedule(self.now + Duration::from_micros(micros), event);
                }
                Output::Open { table, conn, .. } => {
                    self.servers.insert(
                        *conn,
                        ServerConn {
                            table: Some(*table),
                            ..ServerConn::default()
                        },
                    );
                    let (lo, hi) = self.config.open_latency;
                    let micros = self.rng.range(
                        u64::try_from(lo.as_micros()).unwrap_or(0),
                        u64::try_from(hi.as_micros()).unwrap_or(0).max(1),
                    );
                    let event = Event::Opened {
                        table: *table,
                        conn: *conn,
                    };
                    self.schedule(self.now + Duration::from_micros(micros), event);
                }
                Output::Send(t) => self.transmit(t.conn, t.rows, t.rows * t.batch.bytes_per_row),
                Output::Close { conn, graceful } => {
                    if let Some(server) = self.servers.get_mut(conn) {
                        server.open = false;
                        server.gone = true;
                    }
                    if *graceful {
                        // The server sends its last acks and ends the call.
                        let conn = *conn;
                        self.schedule(
                            self.now + Duration::from_millis(20),
                            Event::ServerEnd { conn },
                        );
                    }
                }
                Output::Failed(f) if !self.closing => {
                    for b in &f.batches {
                        self.retry.push_back((f.table, b.batch));
                    }
                }
                _ => {}
            }
            let timeout = matches!(out, Output::Timeout(_));
            let ended = self.oracle.output(out)?;
            if timeout {
                self.stop_faults_when_due();
                return self.oracle.check(&mut self.sink);
            }
            if !ended.is_empty() {
                self.unblock(&ended)?;
            }
        }
    }
}
