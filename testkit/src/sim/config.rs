//! What a simulation runs: the workload, the service model, the faults, and the named profiles
//! (`steady`, `faults`, `inline`, `random`), each derived from a seed.

use std::time::Duration;

use zerobus_sink::{RetryPolicy, SinkConfig, WindowLimits};

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

    pub(crate) fn draw(&self, rng: &mut Rng) -> Duration {
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
    /// Per reconcile of a provisioned table: the catalog refuses the schema (a narrowing).
    pub schema_refusal: f64,
    /// The service acks the same count again, one to three times (official SDK issue #639);
    /// and a stalled stream that had acked something repeats that count until it is closed.
    pub repeated_ack: f64,
}

/// One table of the simulated workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimTable {
    /// Its pool size.
    pub slots: u16,
    /// Whether batches are routed by an ordering key (drawn from 8 keys).
    pub keyed: bool,
    /// Whether it is provisioned through a catalog (the simulated catalog answers each
    /// reconcile after [`SimConfig::reconcile_latency`]); its source's schema drifts with
    /// probability [`SimConfig::drift`] per batch.
    pub provisioned: bool,
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
    /// Time from an open to READY, drawn uniformly from this inclusive range per open.
    pub open_latency: (Duration, Duration),
    /// The server's write-ahead-log group-commit interval.
    pub wal_sync: Duration,
    /// Per-stream bandwidth in bytes per second.
    pub stream_bandwidth: u64,
    /// Fault probabilities, while faults last.
    pub faults: Faults,
    /// Faults stop once this fraction of the batches is confirmed; from then on the service
    /// behaves, and the oracle's liveness bound applies ([`SimConfig::liveness_bound`]).
    pub faults_until: f64,
    /// The anti-pattern: the source waits for each batch's confirmation before the next.
    pub inline_wait: bool,
    /// A run that takes more steps than this fails (a livelock guard).
    pub max_steps: u64,
    /// Per batch of a provisioned table: the source's schema drifts (a new column).
    pub drift: f64,
    /// Time the simulated catalog takes to answer a reconcile, drawn uniformly per request.
    pub reconcile_latency: (Duration, Duration),
    /// Per batch admitted: the source then flushes (the core deals its queues,
    /// [`SinkCore::flush`](zerobus_sink::SinkCore::flush)); it always does before it closes.
    pub flush: f64,
}

impl SimConfig {
    /// The named profiles the tests and the reproduction command use: `steady` (one table, no
    /// faults), `faults` (three tables under a cap that forces eviction, every fault kind),
    /// `inline` (the inline-wait anti-pattern on the steady workload) and `random` (the
    /// configuration itself drawn from the seed: small caps, slow READY, `min_residency` at its
    /// validated minimum, pools of several slots, every fault kind).
    #[must_use]
    pub fn profile(name: &str, seed: u64) -> Option<SimConfig> {
        let steady = SimConfig {
            seed,
            batches: 400,
            rows: (1, 500),
            bytes_per_row: 200,
            source_interval: Duration::ZERO,
            sink: SinkConfig {
                window: WindowLimits {
                    max_batches: 64,
                    max_bytes: 16 << 20,
                    max_rows: 20_000,
                },
                retry: RetryPolicy {
                    jitter_seed: seed,
                    ..RetryPolicy::default()
                },
                ..SinkConfig::default()
            },
            tables: vec![SimTable {
                slots: 2,
                keyed: false,
                provisioned: true,
            }],
            ack_latency: Latency::DOCUMENTED,
            open_latency: (Duration::from_millis(50), Duration::from_millis(50)),
            wal_sync: Duration::from_millis(20),
            stream_bandwidth: 100_000_000,
            faults: Faults {
                partial_ack: 0.2,
                ..Faults::default()
            },
            faults_until: 0.75,
            inline_wait: false,
            max_steps: 2_000_000,
            drift: 0.005,
            reconcile_latency: (Duration::from_millis(20), Duration::from_millis(300)),
            flush: 0.01,
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
                        provisioned: false,
                    },
                    SimTable {
                        slots: 3,
                        keyed: false,
                        provisioned: true,
                    },
                    SimTable {
                        slots: 2,
                        keyed: true,
                        provisioned: false,
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
                    schema_refusal: 0.2,
                    repeated_ack: 0.05,
                },
                drift: 0.02,
                ..steady
            }),
            "inline" => Some(SimConfig {
                inline_wait: true,
                ..steady
            }),
            "random" => Some(SimConfig::random(seed, steady)),
            _ => None,
        }
    }

    /// A configuration drawn from the seed (the `random` profile).
    fn random(seed: u64, base: SimConfig) -> SimConfig {
        let mut rng = Rng::new(seed ^ 0x00C0_FFEE);
        // The service's per-table stream limit, if any. A keyed table gets no more slots than
        // it: a key routed to a slot that can never open would be handed back for ever.
        let limit = rng.chance(0.3).then(|| rng.range(1, 3) as u16);
        let tables: Vec<SimTable> = (0..rng.range(1, 4))
            .map(|_| {
                let keyed = rng.chance(0.3);
                let slots = rng.range(1, 3) as u16;
                let provisioned = !keyed && rng.chance(0.5);
                SimTable {
                    slots: if keyed {
                        slots.min(limit.unwrap_or(3))
                    } else {
                        slots
                    },
                    keyed,
                    provisioned,
                }
            })
            .collect();
        let largest = tables.iter().map(|t| t.slots).max().unwrap_or(1);
        let total: u16 = tables.iter().map(|t| t.slots).sum();
        let cap = rng.range(u64::from(largest), u64::from(total)) as u16;
        let initial = Duration::from_millis(rng.range(100, 2_000));
        let open_timeout = Duration::from_secs(rng.range(1, 30));
        // READY as slow as 90 % of the open timeout: slow, but within it.
        let slowest_ready = open_timeout.mul_f64(0.9);
        let chance = |rng: &mut Rng, max: f64| rng.unit() * max;
        SimConfig {
            batches: 200,
            rows: (1, rng.range(10, 2_000)),
            sink: SinkConfig {
                window: WindowLimits {
                    max_batches: rng.range(2, 64) as u32,
                    max_bytes: 16 << 20,
                    // At times below the largest batch: such a batch goes alone.
                    max_rows: rng.range(1_000, 20_000),
                },
                max_open_streams: cap,
                // At its validated minimum.
                min_residency: initial,
                open_timeout,
                retry: RetryPolicy {
                    initial_backoff: initial,
                    max_backoff: initial * rng.range(1, 30) as u32,
                    max_attempts: rng.range(1, 6) as u32,
                    jitter_seed: seed,
                    ..RetryPolicy::default()
                },
                ..base.sink
            },
            tables,
            open_latency: (Duration::from_millis(10), slowest_ready),
            faults: Faults {
                partial_ack: chance(&mut rng, 0.4),
                poison: chance(&mut rng, 0.03),
                forward_ack: chance(&mut rng, 0.005),
                rotation: chance(&mut rng, 0.03),
                open_failure: chance(&mut rng, 0.1),
                auth_rejection: chance(&mut rng, 0.05),
                stall: chance(&mut rng, 0.03),
                slow_sync: chance(&mut rng, 0.05),
                streams_per_table: limit,
                schema_refusal: chance(&mut rng, 0.3),
                repeated_ack: chance(&mut rng, 0.1),
            },
            drift: chance(&mut rng, 0.03),
            flush: chance(&mut rng, 0.05),
            ..base
        }
    }

    /// How long pending work may go without any batch ending once faults have stopped, as the
    /// configuration implies it (the oracle's liveness bound, invariant 11). The worst case is
    /// a table waiting its turn under the stream cap while each table ahead of it holds its
    /// streams for its residency, then drains a stream that stopped acking; and, on the slot
    /// itself, a stalled stream caught by the ack timeout and its drain, the longest backoff,
    /// an open that takes the full open timeout, and the slowest sync the service model makes
    /// (ten times a latency of about five times the P95).
    #[must_use]
    pub fn liveness_bound(&self) -> Duration {
        let s = &self.sink;
        let half_close = Duration::from_millis(500);
        let slow_sync = self.ack_latency.p95 * 50;
        let turn =
            s.min_residency + s.open_timeout + s.ack_timeout + s.retry.drain_budget + half_close;
        let own = s.ack_timeout
            + self.reconcile_latency.1
            + s.retry.drain_budget
            + s.retry.max_backoff
            + s.open_timeout
            + half_close
            + slow_sync;
        own + turn * u32::try_from(self.tables.len()).unwrap_or(u32::MAX)
    }
}
