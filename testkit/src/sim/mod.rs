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
//! a global stream cap, so the least recently used one is evicted and reopened.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::Duration;

use zerobus_sink::{
    Code, ConnGen, Input, Metrics, Output, PoolSizing, Raw, RejectReason, SinkConfig, SinkCore,
    SlotId, StreamError, TableId, TableSpec, Time, Token,
};

use crate::batch::SimBatch;
use crate::oracle::{Oracle, Tally, Violation};
use crate::rng::Rng;

/// A log-normal latency given by two quantiles.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    /// Median.
    pub p50: Duration,
    /// 95th percentile.
    pub p95: Duration,
}

impl Latency {
    /// The service's documented time to durability: P50 200 ms, P95 500 ms.
    pub const DOCUMENTED: Latency = Latency {
        p50: Duration::from_millis(200),
        p95: Duration::from_millis(500),
    };

    fn draw(&self, rng: &mut Rng) -> Duration {
        let mu = self.p50.as_secs_f64().max(1e-6).ln();
        let sigma = ((self.p95.as_secs_f64().max(1e-6)).ln() - mu).max(0.0) / 1.644_853_6;
        Duration::from_secs_f64((mu + sigma * rng.normal()).exp().min(3_600.0))
    }
}

/// Fault probabilities: per server ack unless said otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    /// The server acks only part of what is durable (a partial ack), the rest shortly after.
    pub partial_ack: f64,
    /// The live stream breaks with `UNAVAILABLE` instead of acking (poison).
    pub poison: f64,
    /// The server acks more rows than were sent (a protocol violation; terminal).
    pub forward_ack: f64,
    /// The server asks the stream to rotate.
    pub rotation: f64,
    /// Per open: the open fails with `UNAVAILABLE` (transient).
    pub open_failure: f64,
    /// Per open: the credentials are refused (`UNAUTHENTICATED`).
    pub auth_rejection: f64,
    /// Per open: the stream never acks anything (the ack timeout must catch it).
    pub stall: f64,
    /// Per sync: the sync takes ten times its drawn latency.
    pub slow_sync: f64,
    /// Streams the service allows per table; opens beyond it get `RESOURCE_EXHAUSTED`.
    pub streams_per_table: Option<u16>,
}

/// One table of the simulated workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimTable {
    /// Its pool size.
    pub slots: u16,
    /// Whether batches are routed by an ordering key (drawn from 8 keys).
    pub keyed: bool,
}

/// One simulation's parameters. Everything random derives from `seed`.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// The seed.
    pub seed: u64,
    /// Batches the source produces.
    pub batches: u64,
    /// Rows per batch, drawn uniformly from this inclusive range.
    pub rows: (u64, u64),
    /// Bytes per row.
    pub bytes_per_row: u64,
    /// Time between batches when the sink has room (zero: as fast as admitted).
    pub source_interval: Duration,
    /// The core's configuration.
    pub sink: SinkConfig,
    /// The tables; each batch goes to one drawn uniformly.
    pub tables: Vec<SimTable>,
    /// Time from a message's arrival to its durability.
    pub ack_latency: Latency,
    /// Time from an open to READY.
    pub open_latency: Duration,
    /// The server's write-ahead-log group-commit interval.
    pub wal_sync: Duration,
    /// Per-stream bandwidth in bytes per second.
    pub stream_bandwidth: u64,
    /// Fault probabilities.
    pub faults: Faults,
    /// The anti-pattern: the source waits for each batch's confirmation before the next.
    pub inline_wait: bool,
    /// A run that takes more steps than this fails (a livelock guard).
    pub max_steps: u64,
}

impl SimConfig {
    /// The named profiles the tests and the reproduction command use: `steady` (one table, no
    /// faults), `faults` (three tables under a cap that forces eviction, every fault kind),
    /// `inline` (the inline-wait anti-pattern on the steady workload).
    #[must_use]
    pub fn profile(name: &str, seed: u64) -> Option<SimConfig> {
        let steady = SimConfig {
            seed,
            batches: 400,
            rows: (1, 500),
            bytes_per_row: 200,
            source_interval: Duration::ZERO,
            sink: SinkConfig {
                window: zerobus_sink::WindowLimits {
                    max_batches: 64,
                    max_bytes: 16 << 20,
                    max_rows: 20_000,
                },
                retry: zerobus_sink::RetryPolicy {
                    jitter_seed: seed,
                    ..zerobus_sink::RetryPolicy::default()
                },
                ..SinkConfig::default()
            },
            tables: vec![SimTable {
                slots: 2,
                keyed: false,
            }],
            ack_latency: Latency::DOCUMENTED,
            open_latency: Duration::from_millis(50),
            wal_sync: Duration::from_millis(20),
            stream_bandwidth: 100_000_000,
            faults: Faults {
                partial_ack: 0.2,
                ..Faults::default()
            },
            inline_wait: false,
            max_steps: 2_000_000,
        };
        match name {
            "steady" => Some(steady),
            "faults" => Some(SimConfig {
                sink: SinkConfig {
                    max_open_streams: 5,
                    ..steady.sink
                },
                tables: vec![
                    SimTable {
                        slots: 2,
                        keyed: false,
                    },
                    SimTable {
                        slots: 3,
                        keyed: false,
                    },
                    SimTable {
                        slots: 2,
                        keyed: true,
                    },
                ],
                faults: Faults {
                    partial_ack: 0.3,
                    poison: 0.01,
                    forward_ack: 0.002,
                    rotation: 0.01,
                    open_failure: 0.05,
                    auth_rejection: 0.02,
                    stall: 0.02,
                    slow_sync: 0.02,
                    streams_per_table: Some(2),
                },
                ..steady
            }),
            "inline" => Some(SimConfig {
                inline_wait: true,
                ..steady
            }),
            _ => None,
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
        slot: SlotId,
        conn: ConnGen,
    },
    AckCheck {
        slot: SlotId,
        conn: ConnGen,
    },
    /// After our half-close of a rotating stream, the server ends the call.
    ServerEnd {
        slot: SlotId,
        conn: ConnGen,
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
    servers: BTreeMap<ConnGen, ServerConn>,
    next_id: u64,
    produced: u64,
    retry: VecDeque<(TableId, SimBatch)>,
    blocked: Option<(TableId, SimBatch)>,
    waiting_for: Option<u64>,
    closing: bool,
    step: u64,
}

/// Runs one simulation of profile `profile` (used only to name the reproduction command).
pub fn simulate(profile: &str, config: &SimConfig) -> Result<SimReport, SimFailure> {
    let fail = |step, violation| SimFailure {
        profile: profile.to_owned(),
        seed: config.seed,
        step,
        violation,
    };
    let mut sink = SinkCore::new(config.sink).map_err(|e| {
        fail(
            0,
            Violation {
                invariant: 10,
                message: e.to_string(),
            },
        )
    })?;
    let mut tables = Vec::new();
    for (i, t) in config.tables.iter().enumerate() {
        let spec = TableSpec::new(format!("main.sim.t{i}")).sizing(PoolSizing::fixed(t.slots));
        let spec = if t.keyed { spec.keyed() } else { spec };
        tables.push(sink.add_table(spec).map_err(|e| {
            fail(
                0,
                Violation {
                    invariant: 10,
                    message: e.to_string(),
                },
            )
        })?);
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
        oracle: Oracle::new(config.sink),
        servers: BTreeMap::new(),
        next_id: 0,
        produced: 0,
        retry: VecDeque::new(),
        blocked: None,
        waiting_for: None,
        closing: false,
        step: 0,
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
    })
}

impl Sim<'_> {
    fn schedule(&mut self, at: Time, event: Event) {
        self.seq += 1;
        self.events.insert((at, self.seq), event);
    }

    fn run(&mut self) -> Result<(), Violation> {
        while let Some(((at, _), event)) = self.events.pop_first() {
            self.step += 1;
            if self.step > self.config.max_steps {
                return Err(Violation {
                    invariant: 1,
                    message: format!("no end after {} steps (livelock?)", self.step),
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
            invariant: 5,
            message: "the simulation ran out of events before the sink closed".into(),
        })
    }

    fn event(&mut self, event: Event) -> Result<(), Violation> {
        match event {
            Event::Source => return self.produce(),
            Event::Opened { table, slot, conn } => self.answer_open(table, slot, conn),
            Event::AckCheck { slot, conn } => self.server_ack(slot, conn),
            Event::ServerEnd { slot, conn } => {
                self.server_ack(slot, conn);
                let _ = self.sink.handle(self.now, Input::Closed { slot, conn });
            }
            Event::Wake => self.next_wake = None,
        }
        Ok(())
    }

    /// The server answers an open: refusals first, then READY.
    fn answer_open(&mut self, table: TableId, slot: SlotId, conn: ConnGen) {
        let f = self.config.faults;
        let open_for_table = self
            .servers
            .values()
            .filter(|s| s.open && s.table == Some(table))
            .count();
        let status = |code| StreamError::Status {
            code,
            message: format!("{code:?} (simulated)"),
        };
        let error = if f
            .streams_per_table
            .is_some_and(|limit| open_for_table >= usize::from(limit))
        {
            Some(status(Code::ResourceExhausted))
        } else if self.rng.chance(f.auth_rejection) {
            Some(status(Code::Unauthenticated))
        } else if self.rng.chance(f.open_failure) {
            Some(status(Code::Unavailable))
        } else {
            None
        };
        let stalled = self.rng.chance(f.stall);
        let input = match error {
            Some(error) => Input::Failed { slot, conn, error },
            None => {
                if let Some(server) = self.servers.get_mut(&conn) {
                    server.open = true;
                    server.stalled = stalled;
                }
                Input::Ready { slot, conn }
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
                (
                    table,
                    SimBatch::new(u64::MAX, rows, self.config.bytes_per_row),
                )
            }
            None => {
                self.closing = true;
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
        let fresh = SimBatch::new(id, batch.rows, batch.bytes_per_row);
        let token = Token::raw("sim", 0, i64::try_from(id).unwrap_or(i64::MAX));
        let keyed = self
            .config
            .tables
            .get(table.index())
            .is_some_and(|t| t.keyed);
        let route = if keyed {
            table.key(self.rng.range(0, 7))
        } else {
            table.into()
        };
        match self.sink.submit(self.now, route, fresh, token) {
            Ok(_) => {
                self.next_id += 1;
                self.oracle.admitted(id, fresh.rows, table)?;
                if self.config.inline_wait {
                    self.waiting_for = Some(id);
                } else {
                    self.schedule(self.now + self.config.source_interval, Event::Source);
                }
                Ok(())
            }
            Err(rejected) if matches!(rejected.reason, RejectReason::Full { .. }) => {
                self.blocked = Some((table, batch));
                Ok(())
            }
            Err(rejected) if matches!(rejected.reason, RejectReason::TableFailed { .. }) => {
                // The table failed fatally: the pipeline stops writing to it (not admitted, so
                // not lost); carry on with the others.
                self.schedule(self.now, Event::Source);
                Ok(())
            }
            Err(rejected) => Err(Violation {
                invariant: 1,
                message: format!("submit of {} rows refused: {}", batch.rows, rejected.reason),
            }),
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

    fn server_ack(&mut self, slot: SlotId, conn: ConnGen) {
        let faults = self.config.faults;
        let now = self.now;
        let Some(server) = self.servers.get_mut(&conn) else {
            return;
        };
        if server.stalled {
            return;
        }
        while server.wal.len() > 1 && server.wal[1].0 <= now {
            server.wal.pop_front();
        }
        let durable = match server.wal.front() {
            Some(&(at, rows)) if at <= now => rows,
            _ => return,
        };
        if durable <= server.acked {
            return;
        }
        let mut up_to = durable;
        let mut again = false;
        if durable - server.acked > 1 && self.rng.chance(faults.partial_ack) {
            up_to = self.rng.range(server.acked + 1, durable - 1);
            again = true;
        }
        let live = server.open;
        let input = if live && self.rng.chance(faults.poison) {
            server.open = false;
            let error = StreamError::Status {
                code: Code::Unavailable,
                message: "stream reset (simulated)".into(),
            };
            Input::Failed { slot, conn, error }
        } else if live && self.rng.chance(faults.forward_ack) {
            Input::Acked {
                slot,
                conn,
                up_to_records: server.received + 1,
            }
        } else {
            server.acked = up_to;
            Input::Acked {
                slot,
                conn,
                up_to_records: up_to,
            }
        };
        if again {
            self.schedule(
                now + Duration::from_millis(5),
                Event::AckCheck { slot, conn },
            );
        }
        if self.sink.handle(now, input.clone()).is_ok()
            && let Input::Acked { up_to_records, .. } = input
        {
            self.oracle.acked(slot, conn, up_to_records);
        }
        if live && self.rng.chance(faults.rotation) {
            let grace = Duration::from_millis(self.rng.range(200, 3_000));
            let _ = self.sink.handle(now, Input::Rotate { slot, conn, grace });
        }
    }

    /// A message crosses the link, lands in the write-ahead log at the next group-commit tick,
    /// and that sync becomes durable after a latency drawn once per sync (so a slow sync delays
    /// what it carries, and, the log being ordered, everything after it).
    fn transmit(&mut self, slot: SlotId, conn: ConnGen, rows: u64, bytes: u64) {
        let (bandwidth, sync) = (self.config.stream_bandwidth.max(1), self.config.wal_sync);
        let now = self.now;
        let latency = self.config.ack_latency.draw(&mut self.rng);
        let slow = self.rng.chance(self.config.faults.slow_sync);
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
            let latency = if slow { latency * 10 } else { latency };
            server.sync_durable_at = Time::from_micros(sync_at) + latency;
        }
        let durable_at = server.sync_durable_at.max(server.wal_tail);
        server.wal_tail = durable_at;
        server.received += rows;
        server.wal.push_back((durable_at, server.received));
        self.schedule(durable_at, Event::AckCheck { slot, conn });
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
                    return self.oracle.check(&self.sink);
                }
                Output::Open { table, slot, conn } => {
                    self.servers.insert(
                        *conn,
                        ServerConn {
                            table: Some(*table),
                            ..ServerConn::default()
                        },
                    );
                    let event = Event::Opened {
                        table: *table,
                        slot: *slot,
                        conn: *conn,
                    };
                    self.schedule(self.now + self.config.open_latency, event);
                }
                Output::Send(t) => {
                    self.transmit(t.slot, t.conn, t.rows, t.rows * t.batch.bytes_per_row)
                }
                Output::Close {
                    slot,
                    conn,
                    graceful,
                } => {
                    if let Some(server) = self.servers.get_mut(conn) {
                        server.open = false;
                    }
                    if *graceful {
                        // The server sends its last acks and ends the call.
                        let (slot, conn) = (*slot, *conn);
                        self.schedule(
                            self.now + Duration::from_millis(20),
                            Event::ServerEnd { slot, conn },
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
            let ended = self.oracle.output(out)?;
            if !ended.is_empty() {
                self.unblock(&ended)?;
            }
        }
    }
}
