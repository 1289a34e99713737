//! The materializer's own thread: it appends acked rows to Delta tables every `lag`
//! ([`delta::materialize`]). Encoding Parquet is CPU work that would stall a tokio worker (and
//! with it the acks of every stream that worker serves), so it runs on a thread of its own with
//! a single-threaded runtime, as the service's materialization runs apart from its ingest.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use zerobus_sink_catalog::local::LocalDelta;

use tokio::sync::{Notify, oneshot};

use super::{Shared, delta};

/// The running materializer. Dropping it aborts the round in progress at its next await, as a
/// crash would (what was committed stays; the rest is materialized by the next start).
#[derive(Debug)]
pub(crate) struct Materializer {
    stop: Arc<Notify>,
    abort: Option<oneshot::Sender<()>>,
    done: Option<oneshot::Receiver<()>>,
}

impl Materializer {
    /// Starts materializing the tables of `catalog` from `shared`'s logs.
    pub(crate) fn start(shared: Arc<Shared>, catalog: LocalDelta) -> io::Result<Materializer> {
        let stop = Arc::new(Notify::new());
        let (abort, aborted) = oneshot::channel::<()>();
        let (finished, done) = oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let stopped = stop.clone();
        std::thread::Builder::new()
            .name("zerobus-local-materializer".into())
            .spawn(move || {
                runtime.block_on(async move {
                    tokio::select! {
                        () = run(shared, catalog, stopped) => {}
                        // Sent or dropped: either way, stop where we are.
                        _ = aborted => {}
                    }
                });
                drop(runtime);
                let _ = finished.send(());
            })?;
        Ok(Materializer {
            stop,
            abort: Some(abort),
            done: Some(done),
        })
    }

    /// Materializes what is logged once more, then returns.
    pub(crate) async fn stop(mut self) {
        self.stop.notify_one();
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
    }

    /// Stops where it is (a crash), and returns once the thread has let go of the tables.
    pub(crate) async fn abort(mut self) {
        if let Some(abort) = self.abort.take() {
            let _ = abort.send(());
        }
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
    }
}

/// Materializes every `lag` until stopped, then once more.
async fn run(shared: Arc<Shared>, catalog: LocalDelta, stop: Arc<Notify>) {
    let lag = shared.config.materialize_lag.max(Duration::from_millis(1));
    let mut progress = BTreeMap::new();
    loop {
        let stopped = tokio::select! {
            () = tokio::time::sleep(lag) => false,
            () = stop.notified() => true,
        };
        if !stopped && shared.held.load(std::sync::atomic::Ordering::SeqCst) {
            continue;
        }
        delta::materialize(&shared, &catalog, &mut progress).await;
        if stopped {
            return;
        }
    }
}
