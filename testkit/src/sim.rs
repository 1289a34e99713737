//! The deterministic simulator: a virtual clock, a seeded PRNG, a model of the Zerobus service
//! per connection, a source that respects backpressure, and the [`Oracle`] checked after every
//! step. A failing run prints its seed, its step and a one-line command that replays it.
//!
//! The service model: each wire message crosses a link of finite bandwidth, then becomes durable
//! after a latency drawn from a log-normal distribution (P50 200 ms, P95 500 ms by default, as
//! the service documents), in write-ahead-log order and at group-commit ticks. At each tick the
//! server acks the cumulative rows durable so far (so acks coalesce); sometimes only part of
//! them (a partial ack). Faults drop connections and send forward acks; acks of dropped
//! connections still arrive (they are stale and must be ignored).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::Duration;

use zerobus_sink::{
    ConnGen, Input, Metrics, Output, Raw, RejectReason, SinkConfig, SinkCore, SlotId, StreamError,
    Time, Token,
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

/// Fault probabilities, each drawn per server ack.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    /// The server acks only part of what is durable (a partial ack), the rest shortly after.
    pub partial_ack: f64,
    /// The connection drops instead of acking.
    pub drop_connection: f64,
    /// The server acks more rows than were sent (a protocol violation; terminal).
    pub forward_ack: f64,
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
    /// The named profiles the tests and the reproduction command use: `steady` (no faults),
    /// `faults` (partial acks, dropped connections, forward acks), `inline` (the inline-wait
    /// anti-pattern on the steady workload).
    #[must_use]
    pub fn profile(name: &str, seed: u64) -> Option<SimConfig> {
        let steady = SimConfig {
            seed,
            batches: 400,
            rows: (1, 500),
            bytes_per_row: 200,
            source_interval: Duration::ZERO,
            sink: SinkConfig {
                slots: 2,
                window: zerobus_sink::WindowLimits {
                    max_batches: 64,
                    max_bytes: 16 << 20,
                    max_rows: 20_000,
                },
                ..SinkConfig::default()
            },
            ack_latency: Latency::DOCUMENTED,
            open_latency: Duration::from_millis(50),
            wal_sync: Duration::from_millis(20),
            stream_bandwidth: 100_000_000,
            faults: Faults {
                partial_ack: 0.2,
                ..Faults::default()
            },
            inline_wait: false,
            max_steps: 1_000_000,
        };
        match name {
            "steady" => Some(steady),
            "faults" => Some(SimConfig {
                faults: Faults {
                    partial_ack: 0.3,
                    drop_connection: 0.02,
                    forward_ack: 0.005,
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
    Ready { slot: SlotId, conn: ConnGen },
    AckCheck { slot: SlotId, conn: ConnGen },
    Wake,
}

#[derive(Debug, Default)]
struct ServerConn {
    /// (durable at, cumulative rows after this message).
    wal: VecDeque<(Time, u64)>,
    wal_tail: Time,
    link_free: Time,
    /// The group-commit tick (in microseconds) being filled, and when it becomes durable.
    sync: Option<u64>,
    sync_durable_at: Time,
    received: u64,
    acked: u64,
}

struct Sim<'a> {
    config: &'a SimConfig,
    profile: &'a str,
    rng: Rng,
    now: Time,
    seq: u64,
    events: BTreeMap<(Time, u64), Event>,
    next_wake: Option<Time>,
    sink: SinkCore<Raw, SimBatch>,
    oracle: Oracle,
    servers: BTreeMap<ConnGen, ServerConn>,
    next_id: u64,
    produced: u64,
    retry: VecDeque<SimBatch>,
    blocked: Option<SimBatch>,
    waiting_for: Option<u64>,
    closing: bool,
    step: u64,
}

/// Runs one simulation of profile `profile` (used only to name the reproduction command).
pub fn simulate(profile: &str, config: &SimConfig) -> Result<SimReport, SimFailure> {
    let sink = SinkCore::new(config.sink).map_err(|e| SimFailure {
        profile: profile.to_owned(),
        seed: config.seed,
        step: 0,
        violation: Violation {
            invariant: 10,
            message: e.to_string(),
        },
    })?;
    let mut sim = Sim {
        config,
        profile,
        rng: Rng::new(config.seed),
        now: Time::ZERO,
        seq: 0,
        events: BTreeMap::new(),
        next_wake: None,
        sink,
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
    sim.run().map_err(|violation| SimFailure {
        profile: profile.to_owned(),
        seed: config.seed,
        step: sim.step,
        violation,
    })?;
    let marks = sim.sink.watermarks();
    Ok(SimReport {
        seed: config.seed,
        steps: sim.step,
        tally: sim
            .oracle
            .finish(&sim.sink)
            .map_err(|violation| SimFailure {
                profile: sim.profile.to_owned(),
                seed: config.seed,
                step: sim.step,
                violation,
            })?,
        elapsed: sim.now - Time::ZERO,
        rows_delivered: marks.rows_delivered,
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
            Event::Source => self.produce(),
            Event::Ready { slot, conn } => {
                let _ = self.sink.handle(self.now, Input::Ready { slot, conn });
                Ok(())
            }
            Event::AckCheck { slot, conn } => {
                self.server_ack(slot, conn);
                Ok(())
            }
            Event::Wake => {
                self.next_wake = None;
                Ok(())
            }
        }
    }

    /// The source: submit the next batch (a retry first), or close once everything is produced.
    fn produce(&mut self) -> Result<(), Violation> {
        if self.closing || self.blocked.is_some() || self.waiting_for.is_some() {
            return Ok(());
        }
        let batch = match self.retry.pop_front() {
            Some(b) => b,
            None if self.produced < self.config.batches => {
                self.produced += 1;
                let rows = self
                    .rng
                    .range(self.config.rows.0, self.config.rows.1)
                    .max(1);
                SimBatch::new(u64::MAX, rows, self.config.bytes_per_row)
            }
            None => {
                self.closing = true;
                self.sink
                    .close(self.now, self.now + Duration::from_secs(600));
                return Ok(());
            }
        };
        self.submit(batch)
    }

    fn submit(&mut self, batch: SimBatch) -> Result<(), Violation> {
        // Each admission (a retry too) is a new batch to the oracle: rows [0, rows) of a new id.
        let id = self.next_id;
        let fresh = SimBatch::new(id, batch.rows, batch.bytes_per_row);
        let token = Token::raw("sim", 0, i64::try_from(id).unwrap_or(i64::MAX));
        match self.sink.submit(self.now, fresh, token) {
            Ok(admitted) => {
                self.next_id += 1;
                self.oracle
                    .admitted(id, fresh.rows, admitted.slot, admitted.offset)?;
                if self.config.inline_wait {
                    self.waiting_for = Some(id);
                } else {
                    self.schedule(self.now + self.config.source_interval, Event::Source);
                }
                Ok(())
            }
            Err(rejected) if matches!(rejected.reason, RejectReason::Full { .. }) => {
                self.blocked = Some(batch);
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
        if let Some(batch) = self.blocked.take() {
            self.submit(batch)?;
        }
        Ok(())
    }

    fn server_ack(&mut self, slot: SlotId, conn: ConnGen) {
        let faults = self.config.faults;
        let now = self.now;
        let Some(server) = self.servers.get_mut(&conn) else {
            return;
        };
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
        let input = if self.rng.chance(faults.drop_connection) {
            Input::Failed {
                slot,
                conn,
                error: StreamError::Transport {
                    message: "connection reset (simulated)".into(),
                },
            }
        } else if self.rng.chance(faults.forward_ack) {
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
    }

    /// A message crosses the link, lands in the write-ahead log at the next group-commit tick,
    /// and that sync becomes durable after a latency drawn once per sync (so a slow sync delays
    /// what it carries, and, the log being ordered, everything after it).
    fn transmit(&mut self, slot: SlotId, conn: ConnGen, rows: u64, bytes: u64) {
        let (bandwidth, sync) = (self.config.stream_bandwidth.max(1), self.config.wal_sync);
        let now = self.now;
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
            server.sync_durable_at =
                Time::from_micros(sync_at) + self.config.ack_latency.draw(&mut self.rng);
        }
        let durable_at = server.sync_durable_at.max(server.wal_tail);
        server.wal_tail = durable_at;
        server.received += rows;
        server.wal.push_back((durable_at, server.received));
        self.schedule(durable_at, Event::AckCheck { slot, conn });
    }

    fn drain(&mut self) -> Result<(), Violation> {
        loop {
            let out = self.sink.poll_output(self.now);
            let mut ended = Vec::new();
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
                Output::Open { slot, conn } => {
                    self.servers.insert(*conn, ServerConn::default());
                    self.schedule(
                        self.now + self.config.open_latency,
                        Event::Ready {
                            slot: *slot,
                            conn: *conn,
                        },
                    );
                }
                Output::Send(t) => {
                    self.transmit(t.slot, t.conn, t.rows, t.rows * t.batch.bytes_per_row)
                }
                Output::Failed(f) => {
                    for b in &f.batches {
                        ended.push(u64::try_from(b.token.position().offset).unwrap_or(u64::MAX));
                        if !self.closing {
                            self.retry.push_back(b.batch);
                        }
                    }
                }
                _ => {}
            }
            ended.extend(self.oracle.output(out)?);
            if !ended.is_empty() {
                self.unblock(&ended)?;
            }
        }
    }
}
