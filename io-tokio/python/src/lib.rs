//! Python bindings of zerobus-sink (the `zerobus_sink` package's native module): a raw-lane
//! sink fed Arrow data through the PyCapsule interface, its confirmations turned into committed
//! source positions. The typed, documented API is the Python package around it
//! (`python/zerobus_sink`); this module is its engine.

mod arrow_in;
mod arrow_out;
mod errors;
mod logs;
mod positions;
mod runtime;
mod sink;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<sink::NativeSink>()?;
    m.add_class::<arrow_out::Rows>()?;
    m.add_function(wrap_pyfunction!(logs::flush_logs, m)?)?;
    m.add_function(wrap_pyfunction!(logs::stop_logs, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
