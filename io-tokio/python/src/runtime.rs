//! The tokio runtime the sinks of this process run on (a Python program brings none), and the
//! one way Python waits on it: with the GIL released, waking every 100 ms to let Python's
//! signal handlers run, so that Ctrl-C interrupts a wait. An interrupted wait drops its future:
//! the sink's `send` is cancel-safe (a batch still waiting for room is dropped unadmitted; one
//! handed over is confirmed only once durable), so no position is confirmed early.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use pyo3::prelude::*;
use tokio::runtime::Runtime;

/// How often a wait looks for a pending signal.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// The process's runtime, built at the first sink: one worker per core.
pub(crate) fn runtime() -> PyResult<&'static Runtime> {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name("zerobus-sink")
        .enable_all()
        .build()
        .map_err(|e| {
            pyo3::exceptions::PyRuntimeError::new_err(format!(
                "could not start the sink's runtime: {e}"
            ))
        })?;
    Ok(RUNTIME.get_or_init(|| rt))
}

/// Runs `fut` to completion on the runtime with the GIL released, raising `KeyboardInterrupt`
/// (or whatever a signal handler raises) if a signal arrives first; `fut` is then dropped.
pub(crate) fn wait<F>(py: Python<'_>, fut: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let rt = runtime()?;
    let mut fut = std::pin::pin!(fut);
    loop {
        let step = py.detach(|| {
            rt.block_on(async { tokio::time::timeout(SIGNAL_CHECK, fut.as_mut()).await })
        });
        match step {
            Ok(out) => return Ok(out),
            Err(_elapsed) => py.check_signals()?,
        }
    }
}
