//! # zerobus-sink-datafusion: `INSERT INTO` a Zerobus table from DataFusion
//!
//! A DataFusion table ([`ZerobusTable`]) whose `INSERT` lands rows durably in a Delta table
//! through Zerobus, with the `zerobus-sink-tokio` sink: every input partition writes in
//! parallel through the process's one sink for the table ([`ZerobusWriteExec`]), each yields
//! its row count only once every one of its rows is durable, and one final step
//! ([`ZerobusCountExec`]) sums them into the usual one-row `count`. The table is created when
//! absent and evolved (columns added) from the query's output schema through the sink's
//! provisioning; an incompatible change fails the query, every column named. Phase 1 of issue
//! 48: one process, the local Delta backend (`zerobus-local`); no Ballista yet.
//!
//! ```no_run
//! # async fn run() -> datafusion::error::Result<()> {
//! let ctx = zerobus_sink_datafusion::session_context();
//! ctx.sql(
//!     "CREATE EXTERNAL TABLE orders (order_id BIGINT NOT NULL, amount DOUBLE) \
//!      STORED AS ZEROBUS LOCATION 'main.bronze.orders' \
//!      OPTIONS ('endpoint' 'http://127.0.0.1:50051', 'catalog_root' '/var/lib/zerobus-local/tables')",
//! )
//! .await?;
//! let count = ctx
//!     .sql("INSERT INTO orders SELECT order_id, amount FROM 'orders/*.parquet'")
//!     .await?
//!     .collect()
//!     .await?; // one row: `count`, once every row is durable
//! # Ok(()) }
//! ```
//!
//! ## Semantics
//!
//! At least once. Each row carries its position: `_twg_source_topic` is the job (the table's
//! `job_id` option, else the session's `zerobus.job_id`, else a UUID per `INSERT`),
//! `_twg_source_partition` the input partition, and `_twg_source_start + _twg_source_row` the
//! row's offset in that partition. A batch replayed after a lost ack, or a partition a retried
//! query writes again under the same job id, writes rows with the same positions: a reader
//! keeps one row per position (README.md has the query). Positions are stable across reruns
//! only if the input's partitions produce their rows in the same order (file scans do; the
//! writer never asks DataFusion for a round-robin repartition, which would not).

#![forbid(unsafe_code)]

mod catalog;
mod count;
mod error;
mod factory;
mod shared;
mod table;
mod target;
mod write;

use std::sync::Arc;

use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};

pub use catalog::{ZerobusCatalog, ZerobusSchema};
pub use count::ZerobusCountExec;
pub use error::{TableError, WriteError};
pub use factory::{FILE_TYPE, OPTIONS, ZerobusTableFactory, target_of};
pub use shared::Sinks;
pub use table::{ZerobusOptions, ZerobusTable};
pub use target::{Target, WRITER};
pub use write::{COUNT, ZerobusWriteExec, count_schema};

/// A session with DataFusion's defaults, files queried by their path (`FROM 'x/*.parquet'`),
/// `STORED AS ZEROBUS` (a [`ZerobusTableFactory`] with its own [`Sinks`]) and the `zerobus.*`
/// session options ([`ZerobusOptions`]).
#[must_use]
pub fn session_context() -> SessionContext {
    with_zerobus(
        SessionStateBuilder::new().with_default_features(),
        ZerobusTableFactory::default(),
    )
    .enable_url_table()
}

/// `builder` with `STORED AS ZEROBUS` through `factory` and the `zerobus.*` session options
/// added to its configuration, as a context.
#[must_use]
pub fn with_zerobus(builder: SessionStateBuilder, factory: ZerobusTableFactory) -> SessionContext {
    let mut builder = builder.with_table_factory(FILE_TYPE.to_owned(), Arc::new(factory));
    let config = builder
        .config()
        .get_or_insert_with(SessionConfig::new)
        .clone()
        .with_option_extension(ZerobusOptions::default());
    builder = builder.with_config(config);
    SessionContext::new_with_state(builder.build())
}
